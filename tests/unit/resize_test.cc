// Resize and Upsample: coordinate transformations, nearest rounding, linear
// and cubic weights (hand-derived), tf_crop_and_resize extrapolation, the
// older versions' forms, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I64T;
using test::Int;
using test::NodeRunner;
using test::Values;

ir::Attribute Str(const std::string& s) { return ir::Attribute::String(s); }

void ExpectFloats(const Result<std::vector<HostTensorPtr>>& r, const std::vector<float>& want) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float> got = Values<float>(r.value()[0]);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

void ExpectInferError(NodeRunner& r, const std::string& what) {
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
}

// Resize-13 of x with scales (sizes null) or sizes (scales null).
NodeRunner Resize13(HostTensorPtr x, HostTensorPtr scales, HostTensorPtr sizes, HostTensorPtr roi = nullptr) {
  return NodeRunner("Resize", 13, {x, roi ? test::In(roi) : test::In(nullptr), scales ? test::In(scales) : test::In(nullptr),
                                   sizes ? test::In(sizes) : test::In(nullptr)});
}

TEST(Resize, NearestHalfPixelRoundPreferFloor) {
  // x_orig = (o + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 -> 0, 0, 1, 1.
  NodeRunner r = Resize13(F32T({1, 1, 2, 2}, {1, 2, 3, 4}), F32T({4}, {1, 1, 2, 2}), nullptr);
  ExpectFloats(r.Run(), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  EXPECT_EQ(r.out_shape(), (Shape{1, 1, 4, 4}));
}

TEST(Resize, NearestModes) {
  // asymmetric, 2 -> 5: x_orig = o * 0.4 = 0, .4, .8, 1.2, 1.6.
  auto run = [](const char* mode) {
    NodeRunner r = Resize13(F32T({2}, {10, 20}), nullptr, I64T({1}, {5}));
    r.Attr("coordinate_transformation_mode", Str("asymmetric")).Attr("nearest_mode", Str(mode));
    auto out = r.Run();
    return out.ok() ? Values<float>(out.value()[0]) : std::vector<float>{};
  };
  EXPECT_EQ(run("floor"), (std::vector<float>{10, 10, 10, 20, 20}));
  EXPECT_EQ(run("ceil"), (std::vector<float>{10, 20, 20, 20, 20}));  // clamped at the end
  EXPECT_EQ(run("round_prefer_floor"), (std::vector<float>{10, 10, 20, 20, 20}));
  // Ties: asymmetric 2 -> 4 gives 0.5 exactly at o = 1.
  NodeRunner c = Resize13(F32T({2}, {10, 20}), F32T({1}, {2}), nullptr);
  c.Attr("coordinate_transformation_mode", Str("asymmetric")).Attr("nearest_mode", Str("round_prefer_ceil"));
  ExpectFloats(c.Run(), {10, 20, 20, 20});
  NodeRunner f = Resize13(F32T({2}, {10, 20}), F32T({1}, {2}), nullptr);
  f.Attr("coordinate_transformation_mode", Str("asymmetric"));
  ExpectFloats(f.Run(), {10, 10, 20, 20});
}

TEST(Resize, NearestMovesAnyElementType) {
  NodeRunner r = Resize13(I64T({1, 2}, {7, -8}), nullptr, I64T({2}, {2, 4}));
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values<std::int64_t>(out.value()[0]), (std::vector<std::int64_t>{7, 7, -8, -8, 7, 7, -8, -8}));
}

TEST(Resize, LinearHalfPixelAndAlignCorners) {
  // half_pixel 2 -> 4: x_orig = -0.25 (clamped: 0), 0.25, 0.75, 1.25 (clamped: 10).
  NodeRunner h = Resize13(F32T({1, 2}, {0, 10}), F32T({2}, {1, 2}), nullptr);
  h.Attr("mode", Str("linear"));
  ExpectFloats(h.Run(), {0, 2.5f, 7.5f, 10});
  // align_corners 2 -> 3: x_orig = o * 1 / 2.
  NodeRunner a = Resize13(F32T({1, 2}, {0, 10}), nullptr, I64T({2}, {1, 3}));
  a.Attr("mode", Str("linear")).Attr("coordinate_transformation_mode", Str("align_corners"));
  ExpectFloats(a.Run(), {0, 5, 10});
  // Two axes: bilinear 2x2 -> 3x3 with align_corners is the average of neighbours.
  NodeRunner b = Resize13(F32T({2, 2}, {0, 2, 4, 6}), nullptr, I64T({2}, {3, 3}));
  b.Attr("mode", Str("linear")).Attr("coordinate_transformation_mode", Str("align_corners"));
  ExpectFloats(b.Run(), {0, 1, 2, 2, 3, 4, 4, 5, 6});
  // pytorch_half_pixel with one output element: x_orig = -0.5 -> the first element.
  NodeRunner p = Resize13(F32T({4}, {3, 5, 7, 9}), nullptr, I64T({1}, {1}));
  p.Attr("mode", Str("linear")).Attr("coordinate_transformation_mode", Str("pytorch_half_pixel"));
  ExpectFloats(p.Run(), {3});
}

// Linear resizes of rank 3-4 tensors (the float32 one-pass route for up to
// two resized axes: channels-last and NCHW images, one axis, downscaling;
// three axes go the separable double route), against ONNX's definition
// written out here in double: per axis, x_orig from the coordinate
// transformation, the two neighbours clamped to the edge, weights 1 - r and
// r. By sizes, so axes of equal size must be recognised as unchanged.
TEST(Resize, LinearOnePassMatchesADoubleReference) {
  struct Case {
    Shape x, y;
  };
  const std::vector<Case> cases = {{{1, 5, 7, 11}, {1, 9, 13, 11}}, {{2, 3, 5, 7}, {2, 3, 9, 13}}, {{2, 6, 4}, {2, 11, 4}},
                                   {{1, 9, 8, 3}, {1, 4, 5, 3}}, {{2, 3, 4}, {3, 5, 7}}};
  for (const char* ct : {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(ct) + " " + ShapeToString(c.x) + " -> " + ShapeToString(c.y));
      const std::size_t r = c.x.size();
      std::vector<float> x(static_cast<std::size_t>(NumElements(c.x)));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i) * 3 + 0.1 * i);
      // One axis at a time, in double.
      std::vector<double> cur(x.begin(), x.end());
      Shape cs = c.x;
      for (std::size_t d = 0; d < r; ++d) {
        const std::int64_t in = cs[d], out = c.y[d];
        std::int64_t outer = 1, inner = 1;
        for (std::size_t k = 0; k < r; ++k) {
          if (k < d) outer *= cs[k];
          if (k > d) inner *= cs[k];
        }
        const double scale = static_cast<double>(out) / static_cast<double>(in);
        std::vector<double> next(static_cast<std::size_t>(outer * out * inner));
        for (std::int64_t o = 0; o < out; ++o) {
          const std::string m = ct;
          const double s = m == "align_corners"        ? (out == 1 ? 0.0 : o * static_cast<double>(in - 1) / static_cast<double>(out - 1))
                           : m == "asymmetric"         ? o / scale
                           : m == "pytorch_half_pixel" ? (out == 1 ? -0.5 : (o + 0.5) / scale - 0.5)
                                                       : (o + 0.5) / scale - 0.5;
          const double f = std::floor(s), rr = s - f;
          const std::int64_t i0 = std::clamp<std::int64_t>(static_cast<std::int64_t>(f), 0, in - 1);
          const std::int64_t i1 = std::clamp<std::int64_t>(static_cast<std::int64_t>(f) + 1, 0, in - 1);
          for (std::int64_t a = 0; a < outer; ++a)
            for (std::int64_t q = 0; q < inner; ++q)
              next[(a * out + o) * inner + q] = (1 - rr) * cur[(a * in + i0) * inner + q] + rr * cur[(a * in + i1) * inner + q];
        }
        cur.swap(next);
        cs[d] = out;
      }
      std::vector<std::int64_t> sizes(c.y.begin(), c.y.end());
      NodeRunner n = Resize13(F32T(c.x, x), nullptr, I64T({static_cast<std::int64_t>(r)}, sizes));
      n.Attr("mode", Str("linear")).Attr("coordinate_transformation_mode", Str(ct));
      auto res = n.Run();
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      const std::vector<float> got = Values<float>(res.value()[0]);
      ASSERT_EQ(got.size(), cur.size());
      for (std::size_t i = 0; i < cur.size(); ++i) ASSERT_NEAR(got[i], cur[i], 1e-5 * (1 + std::fabs(cur[i]))) << i;
    }
  }
}

TEST(Resize, CubicWeightsAndExcludeOutside) {
  // [0,1,2,3] halved, half_pixel: x_orig = 0.5 and 2.5, ratio 0.5; with
  // A = -0.75 the weights are [-0.09375, 0.59375, 0.59375, -0.09375].
  // x=0.5: taps -1(->0),0,1,2 = [0,0,1,2] -> 0.40625; x=2.5: [1,2,3,3] -> 2.59375.
  NodeRunner c = Resize13(F32T({4}, {0, 1, 2, 3}), F32T({1}, {0.5f}), nullptr);
  c.Attr("mode", Str("cubic"));
  ExpectFloats(c.Run(), {0.40625f, 2.59375f});
  // exclude_outside drops tap -1 and renormalises: 0.40625 / 1.09375 = 13/35;
  // x=2.5 drops tap 4: (2.59375 - 3 * -0.09375) / 1.09375 = 2.875 / 1.09375.
  NodeRunner e = Resize13(F32T({4}, {0, 1, 2, 3}), F32T({1}, {0.5f}), nullptr);
  e.Attr("mode", Str("cubic")).Attr("exclude_outside", Int(1));
  ExpectFloats(e.Run(), {13.f / 35.f, 2.875f / 1.09375f});
  // cubic_coeff_a = -0.5 at ratio 0.5: weights [-0.0625, 0.5625, 0.5625, -0.0625].
  NodeRunner a = Resize13(F32T({4}, {0, 1, 2, 3}), F32T({1}, {0.5f}), nullptr);
  a.Attr("mode", Str("cubic")).Attr("cubic_coeff_a", ir::Attribute::Float(-0.5f));
  ExpectFloats(a.Run(), {0.5625f - 0.125f, -0.0625f + 1.125f + 1.6875f - 0.1875f});
}

TEST(Resize, TfCropAndResizeExtrapolates) {
  // Axis 1: roi [0, 1.5] over 3 elements -> x_orig = 0, 1.5, 3 (outside).
  NodeRunner r = Resize13(F32T({1, 3}, {0, 10, 20}), nullptr, I64T({2}, {1, 3}), F32T({4}, {0, 0, 1, 1.5f}));
  r.Attr("mode", Str("linear")).Attr("coordinate_transformation_mode", Str("tf_crop_and_resize"));
  r.Attr("extrapolation_value", ir::Attribute::Float(-1));
  ExpectFloats(r.Run(), {0, 15, -1});
}

TEST(Resize, RuntimeScalesLeaveDimsUnknown) {
  NodeRunner r("Resize", 13, {F32T({1, 2}, {1, 2}), nullptr, {DType::kFloat32, {2}}});
  ASSERT_TRUE(r.Infer().ok());
  EXPECT_EQ(r.out_shape(), (Shape{-1, -1}));
}

TEST(Resize, Version10AndUpsampleAreAsymmetricFloor) {
  NodeRunner r10("Resize", 10, {F32T({2}, {0, 10}), F32T({1}, {2})});
  r10.Attr("mode", Str("linear"));
  ExpectFloats(r10.Run(), {0, 5, 10, 10});
  NodeRunner u9("Upsample", 9, {F32T({1, 2}, {1, 2}), F32T({2}, {1, 3})});
  ExpectFloats(u9.Run(), {1, 1, 1, 2, 2, 2});
  NodeRunner u7("Upsample", 7, {F32T({1, 2}, {1, 2})});
  u7.Attr("scales", ir::Attribute::Floats({2, 1.5f}));
  ExpectFloats(u7.Run(), {1, 1, 2, 1, 1, 2});
  EXPECT_EQ(u7.out_shape(), (Shape{2, 3}));
  NodeRunner u1("Upsample", 1, {F32T({1, 1, 1, 2}, {0, 10})});
  u1.Attr("width_scale", ir::Attribute::Float(2)).Attr("height_scale", ir::Attribute::Float(1));
  u1.Attr("mode", Str("bilinear"));
  ExpectFloats(u1.Run(), {0, 5, 10, 10});
}

TEST(Resize, Errors) {
  NodeRunner mode = Resize13(F32T({2}, {1, 2}), F32T({1}, {2}), nullptr);
  mode.Attr("mode", Str("area"));
  ExpectInferError(mode, "'mode'");
  NodeRunner ct = Resize13(F32T({2}, {1, 2}), F32T({1}, {2}), nullptr);
  ct.Attr("coordinate_transformation_mode", Str("corners"));
  ExpectInferError(ct, "'coordinate_transformation_mode'");
  NodeRunner nm = Resize13(F32T({2}, {1, 2}), F32T({1}, {2}), nullptr);
  nm.Attr("nearest_mode", Str("up"));
  ExpectInferError(nm, "'nearest_mode'");
  NodeRunner both = Resize13(F32T({2}, {1, 2}), F32T({1}, {2}), I64T({1}, {4}));
  ExpectInferError(both, "exactly one");
  NodeRunner count = Resize13(F32T({2}, {1, 2}), F32T({2}, {2, 2}), nullptr);
  ExpectInferError(count, "rank 1");
  NodeRunner neg = Resize13(F32T({2}, {1, 2}), F32T({1}, {-2}), nullptr);
  ExpectInferError(neg, "must be > 0");
  NodeRunner cubic("Upsample", 9, {F32T({2}, {1, 2}), F32T({1}, {2})});
  cubic.Attr("mode", Str("cubic"));
  ExpectInferError(cubic, "'mode'");
}

}  // namespace
}  // namespace kiln
