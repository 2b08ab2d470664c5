// Half-precision graphs computed in float32 (passes/half_compute.cc) and
// Cast simplification: the compiled graph's shape and hand-derived outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/fused_attrs.h"
#include "runtime/devices.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

int Count(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

HostTensorPtr HalfT(DType dt, Shape s, const std::vector<float>& v) {
  auto t = std::make_shared<HostTensor>(dt, std::move(s));
  auto* p = t->mutable_data_as<std::uint16_t>();
  for (std::size_t i = 0; i < v.size(); ++i) p[i] = dt == DType::kFloat16 ? FloatToHalf(v[i]) : FloatToBFloat16(v[i]);
  return t;
}

class HalfGraph : public ::testing::TestWithParam<DType> {};

// x (half) -> Mul by w (half weight) -> Add b -> Relu -> y (half): every op
// computes in float32; a Cast where x enters and one where y leaves.
TEST_P(HalfGraph, ComputesInFloat32WithCastsOnlyAtTheEdges) {
  const DType dt = GetParam();
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", dt, {4});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", HalfT(dt, {4}, {0.5f, 2, -1, 3}));
  ir::Value* b = g->AddConstant("b", HalfT(dt, {4}, {1, 1, 1, -20}));
  ir::Value* m = g->AddValue("m");
  ir::Value* a = g->AddValue("a");
  ir::Value* y = g->AddValue("y", dt);
  g->AddNode("Mul", "mul", {x, w}, {m});
  g->AddNode("Add", "add", {m, b}, {a});
  g->AddNode("Relu", "relu", {a}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(Count(*cm.graph, "Cast"), 2);
  for (const auto& n : cm.graph->nodes()) {
    if (n->op_type() == "Cast") continue;
    for (const ir::Value* v : n->inputs()) EXPECT_EQ(v->dtype(), DType::kFloat32) << n->Describe();
    for (const ir::Value* v : n->outputs()) EXPECT_EQ(v->dtype(), DType::kFloat32) << n->Describe();
  }
  ASSERT_EQ((*model)->inputs()[0].dtype, dt);
  ASSERT_EQ((*model)->outputs()[0].dtype, dt);
  // x = [2, 0.25, 4, 8]: 2*0.5+1 = 2, 0.25*2+1 = 1.5, 4*-1+1 = -3 -> 0, 8*3-20 = 4.
  const auto xs = HalfT(dt, {4}, {2, 0.25f, 4, 8});
  std::vector<std::uint16_t> out(4);
  ASSERT_TRUE((*model)->Execute({{const_cast<void*>(xs->data()), dt, {4}}}, {{out.data(), dt, {4}}}).ok());
  const auto want = HalfT(dt, {4}, {2, 1.5f, 0, 4});
  EXPECT_EQ(std::memcmp(out.data(), want->data(), 8), 0);
}

// The Cast where a bfloat16 output leaves rounds to nearest even, as
// bfloat16 arithmetic would (a model's own Cast truncates, as ONNX's
// reference does). Values hand-derived below.
TEST(HalfGraph, BFloat16OutputRoundsToNearestEven) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kBFloat16, {3});
  g->inputs().push_back(x);
  // A float32 factor the bfloat16 weight holds exactly: 1 + 2^-7.
  ir::Value* w = g->AddConstant("w", HalfT(DType::kBFloat16, {3}, {1.0078125f, 1.0078125f, 1.0078125f}));
  ir::Value* y = g->AddValue("y", DType::kBFloat16);
  g->AddNode("Mul", "mul", {x, w}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // x = 1 + 2^-7 (0x3f81): x*w = 1 + 2^-6 + 2^-14, float32 exact; nearest
  // bfloat16 is 1 + 2^-6 (0x3f82), which truncation also gives. x = 1.5
  // (0x3fc0): 1.5*(1 + 2^-7) = 1.51171875 = 0x3fc1 + 0.5 ulp -> tie, even
  // 0x3fc2 (truncation would give 0x3fc1). x = -1.25 (0xbfa0):
  // -1.259765625 = 0xbfa1 + 0.25 ulp -> 0xbfa1.
  const std::uint16_t in[3] = {0x3f81, 0x3fc0, 0xbfa0};
  std::uint16_t out[3] = {};
  ASSERT_TRUE((*model)->Execute({{const_cast<std::uint16_t*>(in), DType::kBFloat16, {3}}},
                                {{out, DType::kBFloat16, {3}}}).ok());
  EXPECT_EQ(out[0], 0x3f82);
  EXPECT_EQ(out[1], 0x3fc2);
  EXPECT_EQ(out[2], 0xbfa1);
}

// Compiles `g` (its input x, its output y: bfloat16, shape `shape`), checks
// that `marked` nodes carry kiln.bf16 = 1, runs it on x = 1 and expects 0
// where the CPU has native bfloat16 (the operands rounded as the model's
// semantics say), 2^-10 (0x3a80) where it computes in float32.
void ExpectBf16RoundingOf(std::unique_ptr<ir::Graph> g, const Shape& shape, int marked) {
  const DType bf = DType::kBFloat16;
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int found = 0;
  for (const auto& n : cm.graph->nodes()) found += n->GetInt(ops::kBf16Attr, 0) == 1;
  ASSERT_EQ(found, marked);
  const std::uint16_t one = 0x3f80;
  std::uint16_t out = 0xffff;
  ASSERT_TRUE((*model)->Execute({{const_cast<std::uint16_t*>(&one), bf, shape}}, {{&out, bf, shape}}).ok());
  const bool native = runtime::CpuDevice().caps().bf16_dot;
  EXPECT_EQ(out, native ? 0x0000 : 0x3a80) << "native bfloat16: " << native;
}

// A bfloat16 Conv is marked (ops::kBf16Attr). Where the CPU multiplies
// bfloat16 natively (device::Capabilities::bf16_dot), its kernel rounds X to
// bfloat16 as the model does; elsewhere the graph computes in float32. Two
// 1x1 convolutions: conv1 makes channel 0 = 1 + 2^-10 (x = 1, w = 1, bias
// 2^-10, exact in float32) and channel 1 = 1; conv2 = channel 0 - channel 1.
// ONNX's bfloat16 semantics round conv1's output to bfloat16: 1 + 2^-10 is
// below half an ulp above 1 (2^-9), so 1, and conv2 gives 0. Computed in
// float32 throughout, conv2 gives 2^-10 (bfloat16 0x3a80).
TEST(HalfGraph, BFloat16ConvRoundsItsOperandsWhereTheCpuHasBFloat16) {
  const DType bf = DType::kBFloat16;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", bf, {1, 1, 1, 1});
  g->inputs().push_back(x);
  ir::Value* w1 = g->AddConstant("w1", HalfT(bf, {2, 1, 1, 1}, {1, 1}));
  ir::Value* b1 = g->AddConstant("b1", HalfT(bf, {2}, {std::ldexp(1.f, -10), 0}));
  ir::Value* w2 = g->AddConstant("w2", HalfT(bf, {1, 2, 1, 1}, {1, -1}));
  ir::Value* h = g->AddValue("h");
  ir::Value* y = g->AddValue("y", bf);
  g->AddNode("Conv", "conv1", {x, w1, b1}, {h});
  g->AddNode("Conv", "conv2", {h, w2}, {y});
  g->outputs().push_back(y);
  ExpectBf16RoundingOf(std::move(g), {1, 1, 1, 1}, 2);
}

// The same for matrix products (run on one thread, the default, where
// every marked product takes bfloat16): Gemm h = x W1 + C gives [1 + 2^-10,
// 1] for x = [1], W1 = [1, 1], C = [2^-10, 0]; MatMul y = h W2 with W2 =
// [1, -1]^T gives 0 under ONNX's bfloat16 semantics (h rounded), 2^-10 in
// float32.
TEST(HalfGraph, BFloat16MatMulRoundsItsOperandsWhereTheCpuHasBFloat16) {
  const DType bf = DType::kBFloat16;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", bf, {1, 1});
  g->inputs().push_back(x);
  ir::Value* w1 = g->AddConstant("w1", HalfT(bf, {1, 2}, {1, 1}));
  ir::Value* c = g->AddConstant("c", HalfT(bf, {2}, {std::ldexp(1.f, -10), 0}));
  ir::Value* w2 = g->AddConstant("w2", HalfT(bf, {2, 1}, {1, -1}));
  ir::Value* h = g->AddValue("h");
  ir::Value* y = g->AddValue("y", bf);
  g->AddNode("Gemm", "gemm", {x, w1, c}, {h});
  g->AddNode("MatMul", "matmul", {h, w2}, {y});
  g->outputs().push_back(y);
  ExpectBf16RoundingOf(std::move(g), {1, 1}, 2);
}

// The bfloat16 convolution's kernel with what fusion gives it: 3x3, 16 ->
// 16 channels at 9x7, bias, its input added back (a residual: kiln.sum) and
// Relu; its input a = 2x from a 1x1 convolution before it (exact in
// bfloat16, so both routes compute the same), against a
// float64 reference of the same bfloat16 values, within the output's
// rounding (2^-8 relative) and float32 summation. Runs the native route
// where the CPU has it (the previous test says which); elsewhere float32.
TEST(HalfGraph, BFloat16ConvWithBiasResidualAndReluMatchesAFloat64Reference) {
  const DType bf = DType::kBFloat16;
  const int C = 16, H = 9, W = 7;
  std::vector<float> xv(C * H * W), wv(C * C * 9), bv(C);
  std::uint32_t seed = 12345;
  auto rnd = [&] {  // values bfloat16 holds exactly: k / 64, |k| < 128
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>((seed >> 9) % 255) - 127) / 64.f;
  };
  for (float& v : xv) v = rnd();
  for (float& v : wv) v = rnd() / 8;
  for (float& v : bv) v = rnd();
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", bf, {1, C, H, W});
  g->inputs() = {x};
  ir::Value* w = g->AddConstant("w", HalfT(bf, {C, C, 3, 3}, wv));
  ir::Value* b = g->AddConstant("b", HalfT(bf, {C}, bv));
  std::vector<float> two(C * C, 0.f);
  for (int k = 0; k < C; ++k) two[k * C + k] = 2;
  ir::Value* w0 = g->AddConstant("w0", HalfT(bf, {C, C, 1, 1}, two));
  ir::Value* a = g->AddValue("a");
  g->AddNode("Conv", "conv0", {x, w0}, {a});
  ir::Value* c = g->AddValue("c");
  ir::Value* s = g->AddValue("s");
  ir::Value* y = g->AddValue("y", bf);
  ir::Node* conv = g->AddNode("Conv", "conv", {a, w, b}, {c});
  conv->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
  g->AddNode("Add", "add", {c, a}, {s});
  g->AddNode("Relu", "relu", {s}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(Count(*cm.graph, "Conv"), 2);
  ASSERT_EQ(Count(*cm.graph, "Add"), 0) << "the residual Add is fused";
  for (const auto& n : cm.graph->nodes()) {
    if (n->op_type() == "Conv") EXPECT_EQ(n->GetInt(ops::kBf16Attr, 0), 1) << n->Describe();
  }
  const auto xs = HalfT(bf, {1, C, H, W}, xv);
  std::vector<std::uint16_t> out(C * H * W);
  ASSERT_TRUE((*model)->Execute({{const_cast<void*>(xs->data()), bf, {1, C, H, W}}},
                                {{out.data(), bf, {1, C, H, W}}}).ok());
  int bad = 0;
  for (int k = 0; k < C; ++k) {
    for (int i = 0; i < H; ++i) {
      for (int j = 0; j < W; ++j) {
        double acc = bv[k];
        for (int ci = 0; ci < C; ++ci) {
          for (int di = -1; di <= 1; ++di) {
            for (int dj = -1; dj <= 1; ++dj) {
              if (i + di < 0 || i + di >= H || j + dj < 0 || j + dj >= W) continue;
              acc += 2.0 * xv[(ci * H + i + di) * W + j + dj] *
                     wv[((k * C + ci) * 3 + di + 1) * 3 + dj + 1];
            }
          }
        }
        const std::size_t at = (k * H + i) * W + j;
        const double ref = std::max(0.0, acc + 2.0 * xv[at]);
        const double got = BFloat16ToFloat(out[at]);
        bad += std::abs(got - ref) > std::ldexp(std::abs(ref), -8) + 1e-5;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << out.size() << " outputs (native bfloat16: " << runtime::CpuDevice().caps().bf16_dot
                    << ")";
}

INSTANTIATE_TEST_SUITE_P(Types, HalfGraph, ::testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A model's own Cast to float16 still rounds: x (float32) -> Cast(float16)
// -> Cast(float32) -> y. 1.0001 -> 1 (float16 ulp at 1 is 2^-10), 1.0006 ->
// 1 + 2^-10, 70000 -> inf (float16's largest finite value is 65504).
TEST(Casts, ExplicitCastToHalfKeepsItsRounding) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {3});
  g->inputs().push_back(x);
  ir::Value* h = g->AddValue("h");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Cast", "to_half", {x}, {h})->SetAttr("to", ir::Attribute::Int(10));
  g->AddNode("Cast", "to_float", {h}, {y})->SetAttr("to", ir::Attribute::Int(1));
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(Count(*cm.graph, "Cast"), 2);  // the float32 -> float16 -> float32 pair is not exact: kept
  std::vector<float> xs = {1.0001f, 1.0006f, 70000.f}, ys(3);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xs.data(), {3})}, {TensorRef::Of(ys.data(), {3})}).ok());
  EXPECT_EQ(ys[0], 1.f);
  EXPECT_EQ(ys[1], 1.0009765625f);
  EXPECT_TRUE(std::isinf(ys[2]));
}

// int32 -> Cast(int64) -> Cast(int32) round-trips exactly and goes; a Cast
// to the type its input has goes; x + 1 checks the values.
TEST(Casts, NoOpAndExactRoundTripCastsAreRemoved) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kInt32, {3});
  g->inputs().push_back(x);
  ir::Value* a = g->AddValue("a");
  ir::Value* b = g->AddValue("b");
  ir::Value* c = g->AddValue("c");
  ir::Value* y = g->AddValue("y");
  auto one = std::make_shared<HostTensor>(DType::kInt32, Shape{1});
  one->mutable_data_as<std::int32_t>()[0] = 1;
  g->AddNode("Cast", "widen", {x}, {a})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Cast", "narrow", {a}, {b})->SetAttr("to", ir::Attribute::Int(6));
  g->AddNode("Cast", "same", {b}, {c})->SetAttr("to", ir::Attribute::Int(6));
  g->AddNode("Add", "add", {c, g->AddConstant("one", one)}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(Count(*cm.graph, "Cast"), 0);
  std::vector<std::int32_t> xs = {-7, 0, 2147483646}, ys(3);
  ASSERT_TRUE((*model)->Execute({{xs.data(), DType::kInt32, {3}}}, {{ys.data(), DType::kInt32, {3}}}).ok());
  EXPECT_EQ(ys, (std::vector<std::int32_t>{-6, 1, 2147483647}));
}

// Near miss: int64 -> Cast(int32) -> Cast(int64) does not round-trip (values
// beyond int32 wrap or saturate), so both Casts stay.
TEST(Casts, NarrowingRoundTripIsKept) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kInt64, {2});
  g->inputs().push_back(x);
  ir::Value* a = g->AddValue("a");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Cast", "narrow", {x}, {a})->SetAttr("to", ir::Attribute::Int(6));
  g->AddNode("Cast", "widen", {a}, {y})->SetAttr("to", ir::Attribute::Int(7));
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(Count(*cm.graph, "Cast"), 2);
}

// An output without a declared type (as the graph API builds them) of a
// half computation stays half: x (float16) -> Transpose -> y.
TEST(HalfGraph, UntypedHalfOutputStaysHalf) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat16, {2, 3});
  g->inputs().push_back(x);
  ir::Value* y = g->AddValue("y");
  g->AddNode("Transpose", "t", {x}, {y})->SetAttr("perm", ir::Attribute::Ints({1, 0}));
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ((*model)->outputs()[0].dtype, DType::kFloat16);
  const auto xs = HalfT(DType::kFloat16, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<std::uint16_t> out(6);
  ASSERT_TRUE((*model)->Execute({{const_cast<void*>(xs->data()), DType::kFloat16, {2, 3}}},
                                {{out.data(), DType::kFloat16, {3, 2}}}).ok());
  const auto want = HalfT(DType::kFloat16, {3, 2}, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(std::memcmp(out.data(), want->data(), 12), 0);
}

// Near miss for the round-trip rule: uint8 -> Cast(float16) is exact, but
// Cast(float16 -> int8) saturates where Cast(uint8 -> int8) would wrap, so
// the second Cast must keep reading the float16 value: 200 -> 127.
TEST(Casts, ExactFirstCastBeforeASaturatingOneIsKept) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kUInt8, {2});
  g->inputs().push_back(x);
  ir::Value* h = g->AddValue("h");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Cast", "to_half", {x}, {h})->SetAttr("to", ir::Attribute::Int(10));
  g->AddNode("Cast", "to_int8", {h}, {y})->SetAttr("to", ir::Attribute::Int(3));
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::uint8_t> xs = {200, 7};
  std::vector<std::int8_t> ys(2);
  ASSERT_TRUE((*model)->Execute({{xs.data(), DType::kUInt8, {2}}}, {{ys.data(), DType::kInt8, {2}}}).ok());
  EXPECT_EQ(ys, (std::vector<std::int8_t>{127, 7}));
}

}  // namespace
}  // namespace kiln
