// Shape and data-movement ops: inference and kernels on small tensors with
// hand-derived results, and their error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::I64T;
using test::Int;
using test::Ints;
using test::Iota;
using test::NodeRunner;
using test::Values;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();


std::vector<float> Floats(const Result<std::vector<HostTensorPtr>>& r, int j = 0) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<float>(r.value()[j]) : std::vector<float>{};
}

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  NodeRunner r("Reshape", 14, {Iota({2, 3, 4}), I64T({3}, {4, 0, -1})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(Floats(out), Values<float>(Iota({24})));
}

TEST(Reshape, AllowZeroKeepsZeroDims) {
  NodeRunner r("Reshape", 14, {F32T({0, 3}, {}), I64T({3}, {3, 0, 7})});
  r.Attr("allowzero", Int(1));
  ASSERT_TRUE(r.Infer().ok());
  EXPECT_EQ(r.out_shape(), (Shape{3, 0, 7}));
}

TEST(Reshape, ElementCountMismatchNamesNodeAndShapes) {
  NodeRunner r("Reshape", 14, {Iota({2, 3, 4}), I64T({2}, {5, 5})});
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Reshape node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2,3,4]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[5,5]"), std::string::npos) << st.message();
}

TEST(Reshape, TwoMinusOnesAreRejected) {
  NodeRunner r("Reshape", 13, {Iota({2, 3}), I64T({2}, {-1, -1})});
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Reshape, RuntimeShapeLeavesDimsUnknown) {
  NodeRunner r("Reshape", 14, {Iota({2, 3}), {DType::kInt64, {3}}});
  ASSERT_TRUE(r.Infer().ok());
  EXPECT_EQ(r.out_shape(), (Shape{-1, -1, -1}));
}

TEST(Flatten, AxisSplitsDims) {
  NodeRunner a("Flatten", 13, {Iota({2, 3, 4})});
  a.Attr("axis", Int(-1));
  ASSERT_TRUE(a.Infer().ok());
  EXPECT_EQ(a.out_shape(), (Shape{6, 4}));
  NodeRunner b("Flatten", 13, {Iota({2, 3, 4})});
  b.Attr("axis", Int(0));
  EXPECT_EQ(Floats(b.Run()), Values<float>(Iota({24})));
  EXPECT_EQ(b.out_shape(), (Shape{1, 24}));
  NodeRunner c("Flatten", 13, {Iota({2, 3, 4})});
  c.Attr("axis", Int(4));
  Status st = c.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'axis'"), std::string::npos) << st.message();
}

TEST(Transpose, DefaultReversesDims) {
  NodeRunner r("Transpose", 13, {Iota({2, 3})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(r.out_shape(), (Shape{3, 2}));
  EXPECT_EQ(r.node().GetInts("perm"), (std::vector<std::int64_t>{1, 0}));  // made explicit
}

TEST(Transpose, Permutes3D) {
  // x[a][b][c] = 6a + 3b + c (shape [2,2,3]); y = x.transpose(2, 0, 1): y[c][a][b]
  NodeRunner r("Transpose", 13, {Iota({2, 2, 3})});
  r.Attr("perm", Ints({2, 0, 1}));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  EXPECT_EQ(r.out_shape(), (Shape{3, 2, 2}));
}

TEST(Transpose, LargeInt8MatrixUsesTiles) {
  std::vector<std::int8_t> x(70 * 45);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int8_t>(i * 7);
  NodeRunner r("Transpose", 13, {test::Tensor<std::int8_t>(DType::kInt8, {70, 45}, x)});
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  auto y = Values<std::int8_t>(out.value()[0]);
  for (int i = 0; i < 45; ++i) {
    for (int j = 0; j < 70; ++j) ASSERT_EQ(y[i * 70 + j], x[j * 45 + i]);
  }
}

// NCHW <-> NHWC of 1-, 2-, 4- and 8-byte elements: the tiled copy's square
// blocks (16x16 bytes, 8x8 of 2 and 4 bytes) with remainders on both sides
// (37 channels, 9x11 pixels) and whole blocks (32 channels, 16x16), at 1
// and 2 threads; against y[n][h][w][c] = x[n][c][h][w] and back.
template <typename T>
void CheckLayoutTransposes(DType dt) {
  for (const Shape& shape : {Shape{2, 37, 9, 11}, Shape{1, 32, 16, 16}}) {
    const std::int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
    std::vector<T> x(static_cast<std::size_t>(N * C * H * W));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i * 2654435761u >> 7);
    for (int threads : {1, 2}) {
      cpu::UseThreads(threads);
      NodeRunner to_nhwc("Transpose", 13, {test::Tensor<T>(dt, shape, x)});
      to_nhwc.Attr("perm", Ints({0, 2, 3, 1}));
      auto a = to_nhwc.Run();
      NodeRunner to_nchw("Transpose", 13, {test::Tensor<T>(dt, {N, H, W, C}, a.ok() ? Values<T>(a.value()[0]) : x)});
      to_nchw.Attr("perm", Ints({0, 3, 1, 2}));
      auto b = to_nchw.Run();
      cpu::UseThreads(1);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      const std::vector<T> y = Values<T>(a.value()[0]), z = Values<T>(b.value()[0]);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t i = 0; i < H * W; ++i) {
            ASSERT_EQ(y[(n * H * W + i) * C + c], x[(n * C + c) * H * W + i]) << "NHWC, " << threads << " threads";
          }
      ASSERT_EQ(z, x) << "back to NCHW, " << threads << " threads";
    }
  }
}
TEST(Transpose, LayoutOfBytes) { CheckLayoutTransposes<std::uint8_t>(DType::kUInt8); }
TEST(Transpose, LayoutOfHalves) { CheckLayoutTransposes<std::uint16_t>(DType::kFloat16); }
TEST(Transpose, LayoutOfInt32) { CheckLayoutTransposes<std::int32_t>(DType::kInt32); }
TEST(Transpose, LayoutOfInt64) { CheckLayoutTransposes<std::int64_t>(DType::kInt64); }

// A channels-last map back to NCHW ([1, 40, 50, 21] -> [1, 21, 40, 50]):
// 21 rows of 2000 columns, one row tile, so the copy splits its columns
// into blocks (768, 768, 464) shared among threads; at 1 and 2 threads,
// against y[c][h][w] = x[h][w][c].
TEST(Transpose, FewRowsOfManyColumnsSplitIntoBlocks) {
  const std::int64_t H = 40, W = 50, C = 21;
  std::vector<float> x(static_cast<std::size_t>(H * W * C));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (int threads : {1, 2}) {
    cpu::UseThreads(threads);
    NodeRunner r("Transpose", 13, {F32T({1, H, W, C}, x)});
    r.Attr("perm", Ints({0, 3, 1, 2}));
    auto out = r.Run();
    cpu::UseThreads(1);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::vector<float> y = Values<float>(out.value()[0]);
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t i = 0; i < H * W; ++i) ASSERT_EQ(y[c * H * W + i], x[i * C + c]) << threads << " threads";
  }
}

// Swapping the last two dims where the new last one is short (2-8): the
// interleaving copy (ShuffleNet's channel shuffle on channels-last data).
// float32 with 2 and 3 columns (the AVX2 interleaves, their 8-wide bodies
// and tails; 9001 rows: blocks of 4096 rows, a short last one, two outer
// indices), int8 with 2 and 3 columns (3: the SSSE3 byte interleave, its
// 16-wide body and tail) and a float64 case; against
// y[a][b][d][c] = x[a][b][c][d].
TEST(Transpose, LastTwoDimsWithAShortNewLastDim) {
  struct Case {
    Shape shape;
    DType dtype;
  };
  for (const Case& c : {Case{{2, 3, 2, 19}, DType::kFloat32}, Case{{1, 4, 3, 10}, DType::kFloat32},
                        Case{{3, 1, 2, 9}, DType::kInt8}, Case{{2, 2, 4, 8}, DType::kFloat64},
                        Case{{1, 2, 3, 9001}, DType::kFloat32}, Case{{1, 1, 2, 9001}, DType::kFloat32},
                        Case{{1, 2, 3, 9001}, DType::kInt8}, Case{{2, 1, 3, 37}, DType::kInt8}}) {
    SCOPED_TRACE(ShapeToString(c.shape) + " " + DTypeName(c.dtype));
    const std::int64_t n = NumElements(c.shape), rows = c.shape[2], cols = c.shape[3];
    auto x = std::make_shared<HostTensor>(c.dtype, c.shape);
    for (std::int64_t i = 0; i < n; ++i) {
      if (c.dtype == DType::kFloat32) x->mutable_data_as<float>()[i] = static_cast<float>(i);
      if (c.dtype == DType::kFloat64) x->mutable_data_as<double>()[i] = static_cast<double>(i) + 0.5;
      if (c.dtype == DType::kInt8) x->mutable_data_as<std::int8_t>()[i] = static_cast<std::int8_t>(i % 127);
    }
    NodeRunner r("Transpose", 13, {HostTensorPtr(x)});
    r.Attr("perm", Ints({0, 1, 3, 2}));
    auto out = r.Run();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const HostTensor& y = *out.value()[0];
    ASSERT_EQ(y.shape(), (Shape{c.shape[0], c.shape[1], cols, rows}));
    for (std::int64_t o = 0; o < c.shape[0] * c.shape[1]; ++o) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const std::int64_t src = (o * rows + i) * cols + j, dst = (o * cols + j) * rows + i;
          if (c.dtype == DType::kFloat32) ASSERT_EQ(y.data_as<float>()[dst], x->data_as<float>()[src]);
          if (c.dtype == DType::kFloat64) ASSERT_EQ(y.data_as<double>()[dst], x->data_as<double>()[src]);
          if (c.dtype == DType::kInt8) ASSERT_EQ(y.data_as<std::int8_t>()[dst], x->data_as<std::int8_t>()[src]);
        }
      }
    }
  }
}

TEST(Transpose, NonPermutationIsRejected) {
  NodeRunner r("Transpose", 13, {Iota({2, 3})});
  r.Attr("perm", Ints({0, 0}));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'perm'"), std::string::npos) << st.message();
}

TEST(Concat, NegativeAxis) {
  NodeRunner r("Concat", 13, {F32T({2, 1}, {0, 1}), F32T({2, 2}, {10, 11, 12, 13})});
  r.Attr("axis", Int(-1));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 10, 11, 1, 12, 13}));
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
}

// Pieces along the last axis of many rows (channels-last Concat): 3, 37, 64
// and 1100 floats per row (the 32-byte vector copy with and without a tail,
// and rows over 4 KiB, copied by memcpy), against out[r] = a[r] ++ b[r] ++ c[r].
TEST(Concat, ManyRowsOfPiecesMatchALoop) {
  for (const std::vector<std::int64_t>& widths : {std::vector<std::int64_t>{3, 37, 64}, {64, 64, 1}, {1100, 5, 8}}) {
    const std::int64_t rows = 301;
    std::vector<test::In> ins;
    std::vector<std::vector<float>> vals;
    float next = 0;
    for (std::int64_t w : widths) {
      std::vector<float> v(static_cast<std::size_t>(rows * w));
      for (float& f : v) f = next++;
      vals.push_back(v);
      ins.push_back(F32T({1, rows, w}, v));
    }
    NodeRunner r("Concat", 13, ins);
    r.Attr("axis", Int(2));
    const std::vector<float> got = Floats(r.Run());
    std::vector<float> want;
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::size_t k = 0; k < widths.size(); ++k) {
        want.insert(want.end(), vals[k].begin() + i * widths[k], vals[k].begin() + (i + 1) * widths[k]);
      }
    }
    EXPECT_EQ(got, want) << widths[0] << "," << widths[1] << "," << widths[2];
  }
}

TEST(Concat, BadAxisAndMismatchedDims) {
  NodeRunner a("Concat", 13, {Iota({2, 2}), Iota({2, 2})});
  a.Attr("axis", Int(2));
  Status st = a.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'axis'"), std::string::npos) << st.message();
  NodeRunner b("Concat", 13, {Iota({2, 2}), Iota({3, 2})});
  b.Attr("axis", Int(1));
  EXPECT_FALSE(b.Infer().ok());
}

// Dropout as at inference: the input unchanged, the mask all true (bool
// from version 10; the input's type, ones, in 7). A training-mode Dropout
// with a nonzero ratio is refused: when inferred if both are constants,
// else when a run gives those values; ratio 0 in training mode is the
// identity; a ratio outside [0, 1) is refused.
TEST(Dropout, InferenceIsTheIdentityWithAMaskOfOnes) {
  const auto x = F32T({2, 3}, {1, -2, 3.5f, 0, 5, -6});
  NodeRunner a("Dropout", 13, {x, F32T({}, {0.4f})}, 2);
  auto out = a.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values<float>(out.value()[0]), (std::vector<float>{1, -2, 3.5f, 0, 5, -6}));
  EXPECT_EQ(a.out_dtype(1), DType::kBool);
  EXPECT_EQ(Values<std::uint8_t>(out.value()[1]), (std::vector<std::uint8_t>(6, 1)));
  NodeRunner b("Dropout", 7, {x}, 2);
  b.Attr("ratio", ir::Attribute::Float(0.3f));
  auto ob = b.Run();
  ASSERT_TRUE(ob.ok()) << ob.status().ToString();
  EXPECT_EQ(b.out_dtype(1), DType::kFloat32);
  EXPECT_EQ(Values<float>(ob.value()[1]), (std::vector<float>(6, 1.f)));
  auto yes = test::Tensor<std::uint8_t>(DType::kBool, {}, {1});
  NodeRunner c("Dropout", 13, {x, F32T({}, {0.5f}), yes});
  Status st = c.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Dropout node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("training_mode is true with ratio 0.5"), std::string::npos) << st.message();
  NodeRunner d("Dropout", 13, {x, F32T({}, {0.f}), yes});
  EXPECT_EQ(Floats(d.Run()), (std::vector<float>{1, -2, 3.5f, 0, 5, -6}));
  NodeRunner e("Dropout", 13, {x, F32T({}, {1.f})});
  st = e.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside [0, 1)"), std::string::npos) << st.message();
  // Given at run time: ratio and training_mode as inputs.
  NodeRunner f("Dropout", 13, {x, test::In(DType::kFloat32, {}), test::In(DType::kBool, {})});
  auto bad = f.Run({F32T({}, {0.2f}), yes});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training_mode is true with ratio 0.2"), std::string::npos) << bad.status().message();
  NodeRunner g("Dropout", 13, {x, test::In(DType::kFloat32, {}), test::In(DType::kBool, {})});
  EXPECT_EQ(Floats(g.Run({F32T({}, {0.2f}), test::Tensor<std::uint8_t>(DType::kBool, {}, {0})})),
            (std::vector<float>{1, -2, 3.5f, 0, 5, -6}));
}

TEST(Gather, NegativeIndicesAndInt32) {
  NodeRunner a("Gather", 13, {Iota({3, 2}), I32T({2}, {-1, 0})});
  EXPECT_EQ(Floats(a.Run()), (std::vector<float>{4, 5, 0, 1}));
  NodeRunner b("Gather", 13, {Iota({3, 2}), I64T({1, 2}, {1, 1})});
  b.Attr("axis", Int(1));
  EXPECT_EQ(Floats(b.Run()), (std::vector<float>{1, 1, 3, 3, 5, 5}));
  EXPECT_EQ(b.out_shape(), (Shape{3, 1, 2}));
}

TEST(Gather, IndexOutOfRange) {
  // Constant indices: caught by inference, naming the node.
  NodeRunner a("Gather", 13, {Iota({3, 2}), I64T({1}, {3})});
  Status st = a.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Gather node 'node'"), std::string::npos) << st.message();
  // Runtime indices: caught by the kernel.
  NodeRunner b("Gather", 13, {Iota({3, 2}), {DType::kInt64, {2}}});
  auto out = b.Run({I64T({2}, {0, -4})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("-4"), std::string::npos) << out.status().message();
}

TEST(Unsqueeze, AttributeFormIsNormalisedToInput) {
  NodeRunner r("Unsqueeze", 11, {Iota({3})});
  r.Attr("axes", Ints({0, -1}));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(r.out_shape(), (Shape{1, 3, 1}));
  EXPECT_FALSE(r.node().HasAttr("axes"));
  EXPECT_EQ(r.node().num_inputs(), 2);
}

TEST(Unsqueeze, DuplicateAxesAreRejected) {
  NodeRunner r("Unsqueeze", 13, {Iota({3}), I64T({2}, {1, -2})});  // both mean axis 1 of rank 3
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Squeeze, AllOnesOrGivenAxes) {
  NodeRunner a("Squeeze", 13, {Iota({1, 3, 1})});
  ASSERT_TRUE(a.Infer().ok());
  EXPECT_EQ(a.out_shape(), (Shape{3}));
  NodeRunner b("Squeeze", 1, {Iota({1, 3, 1})});
  b.Attr("axes", Ints({-1}));
  EXPECT_EQ(Floats(b.Run()), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(b.out_shape(), (Shape{1, 3}));
  NodeRunner c("Squeeze", 13, {Iota({1, 3, 1}), I64T({1}, {1})});
  Status st = c.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("axis 1 of size 3"), std::string::npos) << st.message();
}

TEST(Slice, ClampsAndHandlesExtremeEnds) {
  NodeRunner a("Slice", 13, {Iota({10}), I64T({1}, {-3}), I64T({1}, {kMax})});
  EXPECT_EQ(Floats(a.Run()), (std::vector<float>{7, 8, 9}));
  NodeRunner b("Slice", 13, {Iota({10}), I64T({1}, {-1}), I64T({1}, {kMin}), nullptr, I64T({1}, {-3})});
  EXPECT_EQ(Floats(b.Run()), (std::vector<float>{9, 6, 3, 0}));
  NodeRunner c("Slice", 13, {Iota({10}), I64T({1}, {20}), I64T({1}, {30})});
  ASSERT_TRUE(c.Infer().ok());
  EXPECT_EQ(c.out_shape(), (Shape{0}));
}

TEST(Slice, AxesAndStepsOn2D) {
  // x = [[0..4], [5..9], [10..14]]; rows 2 then 0 (step -2), columns 1, 3.
  NodeRunner r("Slice", 13, {Iota({3, 5}), I32T({2}, {1, 2}), I32T({2}, {4, -4}), I32T({2}, {1, 0}),
                             I32T({2}, {2, -2})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{11, 13, 1, 3}));
  EXPECT_EQ(r.out_shape(), (Shape{2, 2}));
}

TEST(Slice, Version1AttributesAreNormalised) {
  NodeRunner r("Slice", 1, {Iota({3, 5})});
  r.Attr("starts", Ints({1})).Attr("ends", Ints({3})).Attr("axes", Ints({1}));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1, 2, 6, 7, 11, 12}));
}

TEST(Slice, ZeroStepIsRejected) {
  NodeRunner r("Slice", 13, {Iota({4}), I64T({1}, {0}), I64T({1}, {4}), I64T({1}, {0}), I64T({1}, {0})});
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Slice node 'node'"), std::string::npos) << st.message();
}

// A kernel for `n` as if none of its inputs were compile-time constants
// (output shapes as planned, e.g. from declared model shapes).
Result<std::unique_ptr<cpu::Kernel>> RuntimeKernel(const ir::Node* n) {
  cpu::KernelInit init;
  init.node = n;
  for (const ir::Value* v : n->inputs()) {
    init.inputs.push_back({v->dtype(), v->shape()});
    init.const_inputs.push_back(nullptr);
  }
  for (const ir::Value* v : n->outputs()) init.outputs.push_back({v->dtype(), v->shape()});
  return cpu::CreateKernel(init);
}

TEST(Slice, RuntimeBoundsAreReadByTheKernel) {
  ir::Graph g;
  ir::Value* x = g.AddValue("x", DType::kFloat32, {10});
  ir::Value* s = g.AddValue("s", DType::kInt64, {1});
  ir::Value* e = g.AddValue("e", DType::kInt32, {1});
  ir::Node* n = g.AddNode("Slice", "slice", {x, s, e}, {g.AddValue("y", DType::kFloat32, {3})});
  n->set_since_version(13);
  auto k = RuntimeKernel(n);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  std::vector<float> xv(10), yv(3);
  std::iota(xv.begin(), xv.end(), 0.f);
  std::int64_t start = -3;
  std::int32_t end = 100;
  void* ptrs[] = {xv.data(), &start, &end, yv.data()};
  ASSERT_TRUE(k.value()->Run({ptrs, 3}).ok());
  EXPECT_EQ(yv, (std::vector<float>{7, 8, 9}));
  start = 0;  // 10 elements: not what the output was planned for
  EXPECT_FALSE(k.value()->Run({ptrs, 3}).ok());
}

TEST(Squeeze, RuntimeAxesAreCheckedAgainstThePlan) {
  ir::Graph g;
  ir::Value* x = g.AddValue("x", DType::kFloat32, {1, 2, 1});
  ir::Value* axes = g.AddValue("axes", DType::kInt64, {1});
  ir::Node* n = g.AddNode("Squeeze", "sq", {x, axes}, {g.AddValue("y", DType::kFloat32, {2, 1})});
  n->set_since_version(13);
  auto k = RuntimeKernel(n);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  std::vector<float> xv = {3, 4}, yv(2);
  std::int64_t axis = 0;
  void* ptrs[] = {xv.data(), &axis, yv.data()};
  ASSERT_TRUE(k.value()->Run({ptrs, 2}).ok());
  EXPECT_EQ(yv, xv);
  axis = -1;  // gives [1,2]
  EXPECT_FALSE(k.value()->Run({ptrs, 2}).ok());
}

TEST(Cast, FloatToIntTruncatesAndHalfTypesRoundTrip) {
  NodeRunner a("Cast", 13, {F32T({3}, {1.7f, -1.7f, 0.f})});
  a.Attr("to", Int(static_cast<int>(DType::kInt32)));
  auto ia = a.Run();
  ASSERT_TRUE(ia.ok()) << ia.status().ToString();
  EXPECT_EQ(Values<std::int32_t>(ia.value()[0]), (std::vector<std::int32_t>{1, -1, 0}));
  NodeRunner b("Cast", 13, {F32T({3}, {1.7f, -1.7f, 0.f})});
  b.Attr("to", Int(static_cast<int>(DType::kBool)));
  auto bb = b.Run();
  ASSERT_TRUE(bb.ok());
  EXPECT_EQ(Values<std::uint8_t>(bb.value()[0]), (std::vector<std::uint8_t>{1, 1, 0}));
  NodeRunner h("Cast", 13, {F32T({2}, {0.5f, 65504.f})});
  h.Attr("to", Int(static_cast<int>(DType::kFloat16)));
  auto hh = h.Run();
  ASSERT_TRUE(hh.ok());
  EXPECT_EQ(Values<std::uint16_t>(hh.value()[0]), (std::vector<std::uint16_t>{0x3800, 0x7bff}));
  // bfloat16 keeps the top 16 bits (truncation, as ONNX's reference does).
  NodeRunner bf("Cast", 13, {F32T({1}, {1.00781238f})});  // 0x3f80ffff
  bf.Attr("to", Int(static_cast<int>(DType::kBFloat16)));
  auto bfo = bf.Run();
  ASSERT_TRUE(bfo.ok());
  EXPECT_EQ(Values<std::uint16_t>(bfo.value()[0]), (std::vector<std::uint16_t>{0x3f80}));
}

// Out-of-range and NaN floats have a defined result (a plain C++ cast is
// undefined behaviour; found by the ONNX fuzz target): NaN -> 0, saturation.
TEST(Cast, OutOfRangeFloatToIntSaturates) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  NodeRunner a("Cast", 13, {F32T({6}, {nan, 1e30f, -1e30f, inf, 3.7f, -3.7f})});
  a.Attr("to", Int(static_cast<int>(DType::kInt32)));
  auto ia = a.Run();
  ASSERT_TRUE(ia.ok()) << ia.status().ToString();
  EXPECT_EQ(Values<std::int32_t>(ia.value()[0]),
            (std::vector<std::int32_t>{0, 2147483647, -2147483647 - 1, 2147483647, 3, -3}));
  NodeRunner b("Cast", 13, {F32T({4}, {nan, 1e30f, -1e30f, 2.5f})});
  b.Attr("to", Int(static_cast<int>(DType::kInt64)));
  auto ib = b.Run();
  ASSERT_TRUE(ib.ok()) << ib.status().ToString();
  EXPECT_EQ(Values<std::int64_t>(ib.value()[0]),
            (std::vector<std::int64_t>{0, std::numeric_limits<std::int64_t>::max(),
                                       std::numeric_limits<std::int64_t>::min(), 2}));
  NodeRunner c("Cast", 13, {F32T({3}, {300.f, -1e30f, 100.f})});
  c.Attr("to", Int(static_cast<int>(DType::kInt8)));
  auto ic = c.Run();
  ASSERT_TRUE(ic.ok()) << ic.status().ToString();
  EXPECT_EQ(Values<std::int8_t>(ic.value()[0]), (std::vector<std::int8_t>{127, -128, 100}));
}

TEST(Cast, Float16VectorPathMatchesScalarConversion) {
  std::vector<float> x;
  for (int e = -30; e <= 17; ++e) {
    for (float m : {1.f, 1.0004883f, 1.3337f, 1.9995117f, -1.5f}) x.push_back(std::ldexp(m, e));
  }
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(0.f);
  NodeRunner r("Cast", 13, {F32T({static_cast<std::int64_t>(x.size())}, x)});
  r.Attr("to", Int(static_cast<int>(DType::kFloat16)));
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto h = Values<std::uint16_t>(out.value()[0]);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], FloatToHalf(x[i])) << x[i];
  NodeRunner back("Cast", 13, {out.value()[0]});
  back.Attr("to", Int(static_cast<int>(DType::kFloat32)));
  auto f = back.Run();
  ASSERT_TRUE(f.ok());
  const auto y = Values<float>(f.value()[0]);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], HalfToFloat(h[i])) << h[i];
}

TEST(Cast, Version1StringTypeNameAndStringTarget) {
  NodeRunner a("Cast", 1, {I64T({2}, {3, -2})});
  a.Attr("to", ir::Attribute::String("DOUBLE"));
  auto out = a.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values<double>(out.value()[0]), (std::vector<double>{3, -2}));
  NodeRunner s("Cast", 13, {Iota({2})});
  s.Attr("to", Int(static_cast<int>(DType::kString)));
  Status st = s.Infer();
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("'to'"), std::string::npos) << st.message();
}

TEST(Shape, StartAndEnd) {
  NodeRunner r("Shape", 15, {Iota({2, 3, 4, 5})});
  r.Attr("start", Int(1)).Attr("end", Int(-1));
  auto out = r.Run();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values<std::int64_t>(out.value()[0]), (std::vector<std::int64_t>{3, 4}));
}

// Start / end out of range are clamped and an end before the start gives
// an empty shape (ONNX's shape_clip_* and start-after-end cases), through
// inference and the kernel; rank 4.
TEST(Shape, ClampedAndEmptySpans) {
  struct Case {
    std::int64_t start, end;
    std::vector<std::int64_t> want;
  };
  for (const Case& c : {Case{-10, 2, {2, 3}}, Case{1, 10, {3, 4, 5}}, Case{3, 1, {}}, Case{-1, -3, {}},
                        Case{10, 20, {}}, Case{-2, 4, {4, 5}}}) {
    NodeRunner r("Shape", 15, {Iota({2, 3, 4, 5})});
    r.Attr("start", Int(c.start)).Attr("end", Int(c.end));
    auto out = r.Run();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(r.out_shape(), (Shape{static_cast<std::int64_t>(c.want.size())})) << c.start << ".." << c.end;
    EXPECT_EQ(Values<std::int64_t>(out.value()[0]), c.want) << c.start << ".." << c.end;
  }
}

TEST(IdentityAndConstant, CopyValues) {
  NodeRunner id("Identity", 16, {I64T({2}, {7, -7})});
  auto a = id.Run();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Values<std::int64_t>(a.value()[0]), (std::vector<std::int64_t>{7, -7}));
  NodeRunner c("Constant", 13, {});
  c.Attr("value_ints", Ints({4, 5, 6}));
  auto b = c.Run();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(c.out_shape(), (Shape{3}));
  EXPECT_EQ(Values<std::int64_t>(b.value()[0]), (std::vector<std::int64_t>{4, 5, 6}));
}

}  // namespace
}  // namespace kiln
