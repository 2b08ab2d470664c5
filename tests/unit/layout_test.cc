// The channels-last layout pass on what CNN decoders hold (ConvTranspose,
// Resize, Concat, BatchNormalization after a ConvTranspose) and the blocked
// convolution route: compiled graphs checked for where Transposes remain,
// results against convolutions written out here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

// Deterministic values that are not all alike.
std::vector<float> Wave(std::int64_t n, double phase, double scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(0.37 * i + phase));
  return v;
}

struct T4 {  // an NCHW tensor in double
  std::int64_t n, c, h, w;
  std::vector<double> v;
  double& at(std::int64_t a, std::int64_t b, std::int64_t y, std::int64_t x) { return v[((a * c + b) * h + y) * w + x]; }
  double at(std::int64_t a, std::int64_t b, std::int64_t y, std::int64_t x) const {
    return v[((a * c + b) * h + y) * w + x];
  }
};

T4 Make(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return T4{n, c, h, w, std::vector<double>(static_cast<std::size_t>(n * c * h * w), 0.0)};
}

// Conv, square kernel k, stride 1, pad k/2, weights [oc, ic, k, k].
T4 Conv(const T4& x, const std::vector<float>& wt, const std::vector<float>& b, std::int64_t oc, std::int64_t k) {
  T4 y = Make(x.n, oc, x.h, x.w);
  const std::int64_t p = k / 2;
  for (std::int64_t o = 0; o < oc; ++o)
    for (std::int64_t i = 0; i < y.h; ++i)
      for (std::int64_t j = 0; j < y.w; ++j) {
        double s = b.empty() ? 0.0 : b[o];
        for (std::int64_t c = 0; c < x.c; ++c)
          for (std::int64_t u = 0; u < k; ++u)
            for (std::int64_t t = 0; t < k; ++t) {
              const std::int64_t yy = i + u - p, xx = j + t - p;
              if (yy < 0 || xx < 0 || yy >= x.h || xx >= x.w) continue;
              s += x.at(0, c, yy, xx) * wt[((o * x.c + c) * k + u) * k + t];
            }
        y.at(0, o, i, j) = s;
      }
  return y;
}

// ConvTranspose, kernel 2, stride 2, weights [ic, oc, 2, 2]:
// y[o, 2i+u, 2j+t] = sum_c x[c, i, j] * w[c, o, u, t].
T4 Deconv2x2(const T4& x, const std::vector<float>& wt, std::int64_t oc) {
  T4 y = Make(x.n, oc, 2 * x.h, 2 * x.w);
  for (std::int64_t o = 0; o < oc; ++o)
    for (std::int64_t i = 0; i < x.h; ++i)
      for (std::int64_t j = 0; j < x.w; ++j)
        for (std::int64_t u = 0; u < 2; ++u)
          for (std::int64_t t = 0; t < 2; ++t) {
            double s = 0;
            for (std::int64_t c = 0; c < x.c; ++c) s += x.at(0, c, i, j) * wt[((c * oc + o) * 2 + u) * 2 + t];
            y.at(0, o, 2 * i + u, 2 * j + t) = s;
          }
  return y;
}

void CheckLargeConvolution();

int Count(const format::CompiledModel& m, const std::string& op) {
  int c = 0;
  for (auto& n : m.graph->nodes()) c += n->op_type() == op;
  return c;
}

// x[1,4,5,5] -> Conv 1x1 (4->4) -> a; a -> Conv 3x3 (4->8) -> Relu -> b;
// b -> ConvTranspose 2x2 s2 (8->4) -> BatchNorm -> u [1,4,10,10];
// a -> Resize x2 nearest (by scales, or by sizes) -> r [1,4,10,10];
// Concat(u, r) -> Conv 3x3 (8->3) -> y. Channels-last with scales, with
// sizes, and with the layout pass off.
TEST(ChannelsLast, DecoderOpsStayChannelsLastAndMatchADoubleReference) {
  const std::vector<float> x = Wave(4 * 25, 0.1, 1.0);
  const std::vector<float> w0 = Wave(16, 0.7, 0.5), w1 = Wave(8 * 4 * 9, 1.3, 0.3), wt = Wave(8 * 4 * 4, 2.1, 0.4),
                           w2 = Wave(3 * 8 * 9, 0.5, 0.2), b2 = {0.1f, -0.2f, 0.3f};
  const std::vector<float> bn_s = {1.5f, 0.5f, 2.f, 1.f}, bn_b = {0.1f, 0.f, -0.3f, 0.2f}, bn_m = {0.2f, -0.1f, 0.f, 0.3f},
                           bn_v = {1.f, 0.25f, 4.f, 2.f};
  auto build = [&](bool by_sizes) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, 4, 5, 5});
    g->inputs().push_back(xv);
    ir::Value *a = g->AddValue("a"), *b0 = g->AddValue("b0"), *b = g->AddValue("b"), *u0 = g->AddValue("u0"),
              *u = g->AddValue("u"), *r = g->AddValue("r"), *cat = g->AddValue("cat"), *y = g->AddValue("y");
    g->AddNode("Conv", "c0", {xv, g->AddConstant("w0", test::F32({4, 4, 1, 1}, w0))}, {a});
    g->AddNode("Conv", "c1", {a, g->AddConstant("w1", test::F32({8, 4, 3, 3}, w1))}, {b0})
        ->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    g->AddNode("Relu", "relu", {b0}, {b});
    g->AddNode("ConvTranspose", "up", {b, g->AddConstant("wt", test::F32({8, 4, 2, 2}, wt))}, {u0})
        ->SetAttr("strides", ir::Attribute::Ints({2, 2}));
    g->AddNode("BatchNormalization", "bn",
               {u0, g->AddConstant("s", test::F32({4}, bn_s)), g->AddConstant("sh", test::F32({4}, bn_b)),
                g->AddConstant("m", test::F32({4}, bn_m)), g->AddConstant("v", test::F32({4}, bn_v))},
               {u})
        ->SetAttr("epsilon", ir::Attribute::Float(0.f));
    if (by_sizes) {  // Resize-13 with sizes (int64) instead of scales
      auto sizes = std::make_shared<HostTensor>(DType::kInt64, Shape{4});
      const std::int64_t sz[4] = {1, 4, 10, 10};
      std::copy(sz, sz + 4, sizes->mutable_data_as<std::int64_t>());
      g->AddNode("Resize", "resize",
                 {a, g->AddConstant("roi", test::F32({0}, {})), g->AddConstant("scales", test::F32({0}, {})),
                  g->AddConstant("sizes", sizes)},
                 {r});
    } else {
      g->AddNode("Resize", "resize",
                 {a, g->AddConstant("roi", test::F32({0}, {})), g->AddConstant("scales", test::F32({4}, {1, 1, 2, 2}))}, {r});
    }
    g->AddNode("Concat", "cat", {u, r}, {cat})->SetAttr("axis", ir::Attribute::Int(1));
    g->AddNode("Conv", "c2", {cat, g->AddConstant("w2", test::F32({3, 8, 3, 3}, w2)), g->AddConstant("b2", test::F32({3}, b2))},
               {y})
        ->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    return g;
  };
  // Reference in double.
  T4 xd = Make(1, 4, 5, 5);
  for (std::size_t i = 0; i < x.size(); ++i) xd.v[i] = x[i];
  const T4 a = Conv(xd, w0, {}, 4, 1);
  T4 b = Conv(a, w1, {}, 8, 3);
  for (double& v : b.v) v = std::max(v, 0.0);
  T4 u = Deconv2x2(b, wt, 4);
  for (std::int64_t c = 0; c < 4; ++c)
    for (std::int64_t i = 0; i < 100; ++i) {
      double& v = u.v[c * 100 + i];
      v = (v - bn_m[c]) / std::sqrt(double(bn_v[c])) * bn_s[c] + bn_b[c];
    }
  T4 cat = Make(1, 8, 10, 10);
  for (std::int64_t c = 0; c < 8; ++c)
    for (std::int64_t i = 0; i < 10; ++i)
      for (std::int64_t j = 0; j < 10; ++j) {
        // half_pixel + round_prefer_floor at scale 2: source index floor(i / 2).
        cat.at(0, c, i, j) = c < 4 ? u.at(0, c, i, j) : a.at(0, c - 4, i / 2, j / 2);
      }
  const T4 want = Conv(cat, w2, b2, 3, 3);

  for (int variant = 0; variant < 3; ++variant) {
    const bool layout = variant != 2, by_sizes = variant == 1;
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions opts;
    if (!layout) opts.passes.disabled = {"channels-last"};
    auto model = CompileAndLoad(build(by_sizes), dir, &cm, opts);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(Count(cm, "BatchNormalization"), 0) << "folded into the ConvTranspose";
    if (layout) {
      // One Transpose (or Reshape view) at each edge, none inside.
      EXPECT_LE(Count(cm, "Transpose"), 2);
      for (auto& n : cm.graph->nodes()) {
        if (n->op_type() == "Conv" || n->op_type() == "ConvTranspose") EXPECT_EQ(n->GetInt("kiln.nhwc", 0), 1) << n->name();
      }
    }
    std::vector<float> y(3 * 100);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 4, 5, 5})}, {TensorRef::Of(y.data(), {1, 3, 10, 10})}).ok());
    for (std::size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], want.v[i], 2e-5 * (1 + std::fabs(want.v[i]))) << "variant " << variant << " at " << i;
    }
  }
}

// ShuffleNet's unit: Conv 1x1 (8 -> 8), the channel shuffle (Reshape to
// [1, 2, 4, H, W], Transpose [0, 2, 1, 3, 4], Reshape back), a split by two
// Slices on the channel axis (one with axes given, one without: starts over
// axes 0 and 1), Conv 1x1 on the second half, Concat. Channels-last all the
// way: the shuffle rewritten for NHWC and the Slices' axes remapped, so only
// the edges' Transposes and the shuffle's own remain.
TEST(ChannelsLast, ChannelShuffleAndSplitStayChannelsLast) {
  const std::int64_t C = 8, H = 3, W = 5;
  const std::vector<float> x = Wave(C * H * W, 0.2, 1.0), w0 = Wave(C * C, 0.9, 0.5), w1 = Wave(16, 1.7, 0.6);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
  g->inputs().push_back(xv);
  ir::Value *a = g->AddValue("a"), *m = g->AddValue("m"), *t = g->AddValue("t"), *sh = g->AddValue("sh"),
            *s1 = g->AddValue("s1"), *s2 = g->AddValue("s2"), *c2 = g->AddValue("c2"), *y = g->AddValue("y");
  g->AddNode("Conv", "c0", {xv, g->AddConstant("w0", test::F32({C, C, 1, 1}, w0))}, {a});
  g->AddNode("Reshape", "r1", {a, g->AddConstant("s5", test::I64({5}, {1, 2, C / 2, H, W}))}, {m});
  g->AddNode("Transpose", "shuffle", {m}, {t})->SetAttr("perm", ir::Attribute::Ints({0, 2, 1, 3, 4}));
  g->AddNode("Reshape", "r2", {t, g->AddConstant("s4", test::I64({4}, {1, C, H, W}))}, {sh});
  g->AddNode("Slice", "first", {sh, g->AddConstant("b0", test::I64({2}, {0, 0})), g->AddConstant("e0", test::I64({2}, {1, C / 2}))},
             {s1});
  g->AddNode("Slice", "second",
             {sh, g->AddConstant("b1", test::I64({1}, {C / 2})), g->AddConstant("e1", test::I64({1}, {C})),
              g->AddConstant("ax", test::I64({1}, {1}))},
             {s2});
  g->AddNode("Conv", "c1", {s2, g->AddConstant("w1", test::F32({C / 2, C / 2, 1, 1}, w1))}, {c2});
  g->AddNode("Concat", "cat", {s1, c2}, {y})->SetAttr("axis", ir::Attribute::Int(1));
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  // Reference in double: shuffled channel j is a's channel (j % 2) * 4 + j / 2.
  T4 xd = Make(1, C, H, W);
  for (std::size_t i = 0; i < x.size(); ++i) xd.v[i] = x[i];
  const T4 ad = Conv(xd, w0, {}, C, 1);
  T4 shd = Make(1, C, H, W), s2d = Make(1, C / 2, H, W);
  for (std::int64_t j = 0; j < C; ++j)
    for (std::int64_t i = 0; i < H * W; ++i) shd.v[j * H * W + i] = ad.v[((j % 2) * (C / 2) + j / 2) * H * W + i];
  std::copy(shd.v.begin() + (C / 2) * H * W, shd.v.end(), s2d.v.begin());
  const T4 c2d = Conv(s2d, w1, {}, C / 2, 1);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // The input's, the output's and the shuffle's own (now [0, 1, 2, 4, 3]).
  EXPECT_EQ(Count(cm, "Transpose"), 3);
  for (auto& n : cm.graph->nodes()) {
    if (n->op_type() == "Slice") EXPECT_EQ(n->input(0)->shape(), (Shape{1, H, W, C})) << n->name();
  }
  std::vector<float> out(C * H * W);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, C, H, W})}, {TensorRef::Of(out.data(), {1, C, H, W})}).ok());
  for (std::int64_t j = 0; j < C; ++j)
    for (std::int64_t i = 0; i < H * W; ++i) {
      const double want = j < C / 2 ? shd.v[j * H * W + i] : c2d.v[(j - C / 2) * H * W + i];
      ASSERT_NEAR(out[j * H * W + i], want, 1e-5 * (1 + std::fabs(want))) << "channel " << j << " at " << i;
    }
}

// DenseNet's pre-activation block: Concat(Conv(x), Conv(x)) -> Pad (all
// zeros, as PyTorch writes before an AvgPool2d) -> BatchNormalization (not
// after a convolution: not folded) -> Relu -> Dropout (inference, no mask)
// -> Conv 1x1. The zero Pad and the Dropout go (remove-no-ops), the
// BatchNormalization runs channels-last (kiln.nhwc), so only the edges keep
// a Transpose. Near miss: a Pad of 1 row at each end of H stays (and the
// BatchNormalization after it on NCHW data); both against a double
// reference.
TEST(ChannelsLast, BatchNormAfterConcatRunsChannelsLast) {
  const std::int64_t C = 4, H = 3, W = 5;
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "zero pad" : "pad 1 on H");
    const std::int64_t ph = variant;
    const std::vector<float> x = Wave(C * H * W, 0.3, 1.0), w0 = Wave(C * C, 0.8, 0.6), w1 = Wave(C * C, 1.9, 0.6),
                             w2 = Wave(3 * 2 * C, 2.4, 0.5);
    const std::vector<float> scale = Wave(2 * C, 0.5, 1.0), bias = Wave(2 * C, 1.5, 0.3), mean = Wave(2 * C, 2.5, 0.2);
    std::vector<float> var = Wave(2 * C, 3.5, 0.5);
    for (float& v : var) v = v * v + 0.1f;
    const float eps = 1e-3f;
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
    g->inputs().push_back(xv);
    ir::Value *a = g->AddValue("a"), *b = g->AddValue("b"), *cat = g->AddValue("cat"), *pd = g->AddValue("pd"),
              *bn = g->AddValue("bn"), *r = g->AddValue("r"), *dr = g->AddValue("dr"), *y = g->AddValue("y");
    g->AddNode("Conv", "c0", {xv, g->AddConstant("w0", test::F32({C, C, 1, 1}, w0))}, {a});
    g->AddNode("Conv", "c1", {xv, g->AddConstant("w1", test::F32({C, C, 1, 1}, w1))}, {b});
    g->AddNode("Concat", "cat", {a, b}, {cat})->SetAttr("axis", ir::Attribute::Int(1));
    g->AddNode("Pad", "pad", {cat, g->AddConstant("pads", test::I64({8}, {0, 0, ph, 0, 0, 0, ph, 0}))}, {pd});
    g->AddNode("BatchNormalization", "bn",
               {pd, g->AddConstant("s", test::F32({2 * C}, scale)), g->AddConstant("bb", test::F32({2 * C}, bias)),
                g->AddConstant("m", test::F32({2 * C}, mean)), g->AddConstant("v", test::F32({2 * C}, var))},
               {bn})
        ->SetAttr("epsilon", ir::Attribute::Float(eps));
    g->AddNode("Relu", "relu", {bn}, {r});
    g->AddNode("Dropout", "drop", {r, g->AddConstant("ratio", test::F32({}, {0.25f}))}, {dr});
    g->AddNode("Conv", "c2", {dr, g->AddConstant("w2", test::F32({3, 2 * C, 1, 1}, w2))}, {y});
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    const std::int64_t Hp = H + 2 * ph;
    T4 xd = Make(1, C, H, W);
    for (std::size_t i = 0; i < x.size(); ++i) xd.v[i] = x[i];
    const T4 ad = Conv(xd, w0, {}, C, 1), bd = Conv(xd, w1, {}, C, 1);
    T4 rd = Make(1, 2 * C, Hp, W);
    for (std::int64_t c = 0; c < 2 * C; ++c)
      for (std::int64_t i = 0; i < Hp; ++i)
        for (std::int64_t j = 0; j < W; ++j) {
          const bool inside = i >= ph && i < ph + H;
          const double v = !inside ? 0.0 : c < C ? ad.at(0, c, i - ph, j) : bd.at(0, c - C, i - ph, j);
          const double n = (v - mean[c]) / std::sqrt(static_cast<double>(var[c]) + eps) * scale[c] + bias[c];
          rd.at(0, c, i, j) = n > 0 ? n : 0;
        }
    const T4 yd = Conv(rd, w2, {}, 3, 1);
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(std::move(g), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(Count(cm, "Dropout"), 0);
    EXPECT_EQ(Count(cm, "Pad"), variant == 0 ? 0 : 1);
    for (auto& n : cm.graph->nodes()) {
      if (n->op_type() == "BatchNormalization") EXPECT_EQ(n->GetInt("kiln.nhwc", 0), variant == 0 ? 1 : 0);
    }
    if (variant == 0) EXPECT_EQ(Count(cm, "Transpose"), 2);  // the input's and the output's
    std::vector<float> out(3 * Hp * W);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, C, H, W})}, {TensorRef::Of(out.data(), {1, 3, Hp, W})}).ok());
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], yd.v[i], 1e-5 * (1 + std::fabs(yd.v[i]))) << i;
  }
}

// A shuffle whose middle value is read elsewhere too (a near miss): left on
// NCHW, still correct.
TEST(ChannelsLast, ChannelShuffleReadElsewhereStaysNchw) {
  const std::int64_t C = 4, H = 2, W = 2;
  const std::vector<float> x = Wave(C * H * W, 0.4, 1.0), w0 = Wave(C * C, 0.3, 0.5);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
  g->inputs().push_back(xv);
  ir::Value *a = g->AddValue("a"), *m = g->AddValue("m"), *t = g->AddValue("t"), *y = g->AddValue("y");
  g->AddNode("Conv", "c0", {xv, g->AddConstant("w0", test::F32({C, C, 1, 1}, w0))}, {a});
  g->AddNode("Reshape", "r1", {a, g->AddConstant("s5", test::I64({5}, {1, 2, C / 2, H, W}))}, {m});
  g->AddNode("Transpose", "shuffle", {m}, {t})->SetAttr("perm", ir::Attribute::Ints({0, 2, 1, 3, 4}));
  g->AddNode("Reshape", "r2", {t, g->AddConstant("s4", test::I64({4}, {1, C, H, W}))}, {y});
  g->outputs().push_back(y);
  g->outputs().push_back(m);
  test::SetLatestVersions(*g);
  T4 xd = Make(1, C, H, W);
  for (std::size_t i = 0; i < x.size(); ++i) xd.v[i] = x[i];
  const T4 ad = Conv(xd, w0, {}, C, 1);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (auto& n : cm.graph->nodes()) {
    if (n->op_type() == "Transpose" && n->input(0)->shape().size() == 5) {
      EXPECT_EQ(n->GetInts("perm"), (std::vector<std::int64_t>{0, 2, 1, 3, 4}));
    }
  }
  std::vector<float> out(C * H * W), mid(C * H * W);
  ASSERT_TRUE((*model)
                  ->Execute({TensorRef::Of(x.data(), {1, C, H, W})},
                            {TensorRef::Of(out.data(), {1, C, H, W}), TensorRef::Of(mid.data(), {1, 2, C / 2, H, W})})
                  .ok());
  for (std::int64_t j = 0; j < C; ++j)
    for (std::int64_t i = 0; i < H * W; ++i) {
      const double want = ad.v[((j % 2) * (C / 2) + j / 2) * H * W + i];
      ASSERT_NEAR(out[j * H * W + i], want, 1e-5 * (1 + std::fabs(want)));
      ASSERT_NEAR(mid[j * H * W + i], ad.v[j * H * W + i], 1e-5 * (1 + std::fabs(ad.v[j * H * W + i])));
    }
}

// Reductions after a channels-last Conv run on the NHWC data with their
// axes remapped: ReduceMean over H, W without keepdims (global pooling as
// ShuffleNet writes it: no Transpose after it at all), ReduceMax over C with
// keepdims. ReduceMean over H alone without keepdims would come out in
// another order: it stays on NCHW (a near miss). Against double.
TEST(ChannelsLast, ReductionsRunOnChannelsLastData) {
  const std::int64_t C = 4, H = 3, W = 5;
  const std::vector<float> x = Wave(C * H * W, 0.6, 1.0), w0 = Wave(C * C * 9, 0.2, 0.3);
  struct Case {
    const char* op;
    std::vector<std::int64_t> axes;
    std::int64_t keepdims;
    Shape out;
    int transposes;  // in the compiled graph
  };
  for (const Case& k : {Case{"ReduceMean", {2, 3}, 0, {1, C}, 1}, Case{"ReduceMax", {1}, 1, {1, 1, H, W}, 1},
                        Case{"ReduceMean", {2}, 0, {1, C, W}, 2}}) {
    SCOPED_TRACE(std::string(k.op) + " keepdims=" + std::to_string(k.keepdims) + " axes " + std::to_string(k.axes.size()));
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
    g->inputs().push_back(xv);
    ir::Value *a = g->AddValue("a"), *y = g->AddValue("y");
    g->AddNode("Conv", "c0", {xv, g->AddConstant("w0", test::F32({C, C, 3, 3}, w0))}, {a})
        ->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    ir::Node* r = g->AddNode(k.op, "reduce", {a}, {y});
    r->SetAttr("axes", ir::Attribute::Ints(k.axes));
    r->SetAttr("keepdims", ir::Attribute::Int(k.keepdims));
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    T4 xd = Make(1, C, H, W);
    for (std::size_t i = 0; i < x.size(); ++i) xd.v[i] = x[i];
    const T4 ad = Conv(xd, w0, {}, C, 3);
    std::vector<double> want;
    if (k.axes == std::vector<std::int64_t>{2, 3}) {
      for (std::int64_t c = 0; c < C; ++c) {
        double sum = 0;
        for (std::int64_t i = 0; i < H * W; ++i) sum += ad.v[c * H * W + i];
        want.push_back(sum / (H * W));
      }
    } else if (k.axes == std::vector<std::int64_t>{1}) {
      for (std::int64_t i = 0; i < H * W; ++i) {
        double m = ad.v[i];
        for (std::int64_t c = 1; c < C; ++c) m = std::max(m, ad.v[c * H * W + i]);
        want.push_back(m);
      }
    } else {
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t j = 0; j < W; ++j) {
          double sum = 0;
          for (std::int64_t i = 0; i < H; ++i) sum += ad.at(0, c, i, j);
          want.push_back(sum / H);
        }
    }
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(std::move(g), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(Count(cm, "Transpose"), k.transposes);
    std::vector<float> out(want.size());
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, C, H, W})}, {TensorRef::Of(out.data(), k.out)}).ok());
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
  }
}

// A channels-last 3x3 convolution large enough (32 -> 32 channels, 128x128:
// a 2 MiB input) that on an AVX2-only machine (or with
// ONEDNN_MAX_CPU_ISA=AVX2: tests/CMakeLists.txt reruns this) it runs on
// Winograd F(4x4, 3x3), and with $KILN_CONV_WINOGRAD=off on blocked
// activations between reorders; elsewhere on NHWC directly. Each way against
// double at a sample of outputs, with a fused Relu.
TEST(ChannelsLast, LargeConvolutionMatchesADoubleReference) {
  for (const char* winograd : {"off", "on"}) {
    SCOPED_TRACE(std::string("KILN_CONV_WINOGRAD=") + winograd);
    setenv("KILN_CONV_WINOGRAD", winograd, 1);
    CheckLargeConvolution();
  }
  unsetenv("KILN_CONV_WINOGRAD");
}

void CheckLargeConvolution() {
  const std::int64_t c = 32, h = 128;
  const std::vector<float> x = Wave(c * h * h, 0.3, 1.0), w = Wave(c * c * 9, 1.1, 0.1), b = Wave(c, 2.0, 0.5);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, c, h, h});
  g->inputs().push_back(xv);
  ir::Value *y0 = g->AddValue("y0"), *y = g->AddValue("y");
  g->AddNode("Conv", "conv", {xv, g->AddConstant("w", test::F32({c, c, 3, 3}, w)), g->AddConstant("b", test::F32({c}, b))},
             {y0})
      ->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
  g->AddNode("Relu", "relu", {y0}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> out(static_cast<std::size_t>(c * h * h));
  for (int rep = 0; rep < 2; ++rep) {  // the second run reuses the workspace
    std::fill(out.begin(), out.end(), -1.f);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, c, h, h})}, {TensorRef::Of(out.data(), {1, c, h, h})}).ok());
    for (std::int64_t idx = 0; idx < c * h * h; idx += 97) {  // a sample of every channel, row and column
      const std::int64_t o = idx / (h * h), i = idx / h % h, j = idx % h;
      double s = b[o];
      for (std::int64_t ci = 0; ci < c; ++ci)
        for (std::int64_t u = 0; u < 3; ++u)
          for (std::int64_t t = 0; t < 3; ++t) {
            const std::int64_t yy = i + u - 1, xx = j + t - 1;
            if (yy >= 0 && xx >= 0 && yy < h && xx < h) s += double(x[(ci * h + yy) * h + xx]) * w[((o * c + ci) * 3 + u) * 3 + t];
          }
      ASSERT_NEAR(out[idx], std::max(s, 0.0), 2e-5 * (1 + std::fabs(s))) << idx;
    }
  }
}

}  // namespace
}  // namespace kiln
