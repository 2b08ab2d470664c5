// ONNX Runtime's com.microsoft QLinear* ops (QOperator models): QLinearAdd,
// QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
// QLinearConcat, each against a double-precision reference written here
// from the op's definition (dequantize, compute, quantize with rounding to
// nearest even and saturation), plus hand-derived values and the errors
// hostile parameters get.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "node_runner.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

using test::Tensor;

// Quantization parameters of one tensor; zp < -1000: the zero point input is absent.
struct QP {
  float scale;
  int zp;
};

// A constant scale and zero point (of `dt`), appended to `ins` (absent zero point: a null input).
void AddParams(ir::Graph& g, std::vector<ir::Value*>& ins, const std::string& name, QP p, DType dt) {
  ins.push_back(g.AddConstant(name + "_s", Tensor(DType::kFloat32, {}, std::vector<float>{p.scale})));
  if (p.zp < -1000) {
    ins.push_back(nullptr);
  } else if (dt == DType::kUInt8) {
    ins.push_back(g.AddConstant(name + "_z", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{static_cast<std::uint8_t>(p.zp)})));
  } else {
    ins.push_back(g.AddConstant(name + "_z", Tensor(DType::kInt8, {}, std::vector<std::int8_t>{static_cast<std::int8_t>(p.zp)})));
  }
}

double Zp(QP p) { return p.zp < -1000 ? 0.0 : p.zp; }

// saturate(round_half_even(v) + zp) in the type's range.
double Quantize(double v, QP out, DType dt) {
  const double lo = dt == DType::kUInt8 ? 0 : -128, hi = dt == DType::kUInt8 ? 255 : 127;
  return std::clamp(std::nearbyint(v) + Zp(out), lo, hi);
}

// Random bytes of type dt.
std::vector<std::uint8_t> RandomBytes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng() % 256);
  return v;
}
double Value(const std::vector<std::uint8_t>& v, std::size_t i, DType dt) {
  return dt == DType::kUInt8 ? static_cast<double>(v[i]) : static_cast<double>(static_cast<std::int8_t>(v[i]));
}

// Builds a one-node com.microsoft graph: data inputs are model inputs (in
// order of `data`), the rest constants; runs it once.
struct OneNode {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> ins;
  std::vector<std::pair<const void*, Shape>> feeds;
  ir::Node* node = nullptr;
  DType dt = DType::kUInt8;

  void Data(const std::string& name, const std::vector<std::uint8_t>& v, Shape s) {
    ir::Value* x = g->AddValue(name, dt, s);
    g->inputs().push_back(x);
    ins.push_back(x);
    feeds.push_back({v.data(), s});
  }
  void Make(const std::string& op) {
    ir::Value* y = g->AddValue("y");
    node = g->AddNode(op, "qop", ins, {y}, ops::kMicrosoftDomain);
    g->outputs().push_back(y);
  }
  Result<std::vector<std::uint8_t>> Run(Shape out_shape) {
    test::TempDir dir;
    auto model = CompileAndLoad(std::move(g), dir);
    if (!model.ok()) return model.status();
    if ((*model)->outputs()[0].shape != out_shape) {
      return Error(StatusCode::kInternal, "output shape ", ShapeToString((*model)->outputs()[0].shape));
    }
    std::vector<std::uint8_t> out(static_cast<std::size_t>(NumElements(out_shape)));
    std::vector<TensorRef> refs;
    for (auto& [p, s] : feeds) refs.push_back({const_cast<void*>(p), dt, s});
    KILN_RETURN_IF_ERROR((*model)->Execute(refs, {{out.data(), dt, out_shape}}));
    return out;
  }
};

// Every element within one step of the reference, and at least 99% exact
// (float32 arithmetic can land on the other side of a rounding tie).
void ExpectClose(const std::vector<std::uint8_t>& got, const std::vector<double>& want, DType dt) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t exact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = Value(got, i, dt);
    ASSERT_LE(std::fabs(g - want[i]), 1.0) << "element " << i << ": got " << g << ", want " << want[i];
    exact += g == want[i];
  }
  EXPECT_GE(exact * 100, got.size() * 99) << exact << " of " << got.size() << " exact";
}

void CheckBinary(const std::string& op, DType dt, Shape sa, Shape sb, Shape sy, QP pa, QP pb, QP py) {
  std::mt19937 rng(7);
  OneNode t;
  t.dt = dt;
  const auto a = RandomBytes(static_cast<std::size_t>(NumElements(sa)), rng);
  const auto b = RandomBytes(static_cast<std::size_t>(NumElements(sb)), rng);
  t.Data("a", a, sa);
  AddParams(*t.g, t.ins, "a", pa, dt);
  t.Data("b", b, sb);
  AddParams(*t.g, t.ins, "b", pb, dt);
  AddParams(*t.g, t.ins, "y", py, dt);
  if (t.ins.back() == nullptr) t.ins.pop_back();  // the optional last input left off
  t.Make(op);
  auto got = t.Run(sy);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Broadcast by hand: output index -> input index, dims aligned right.
  std::vector<double> want(got->size());
  const std::size_t r = sy.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::size_t rem = i, ia = 0, ib = 0, stride_a = 1, stride_b = 1;
    std::vector<std::size_t> idx(r);
    for (std::size_t d = r; d-- > 0;) {
      idx[d] = rem % static_cast<std::size_t>(sy[d]);
      rem /= static_cast<std::size_t>(sy[d]);
    }
    for (std::size_t d = r; d-- > 0;) {
      const std::size_t k = r - 1 - d;
      if (k < sa.size()) {
        const auto ext = static_cast<std::size_t>(sa[sa.size() - 1 - k]);
        ia += (ext == 1 ? 0 : idx[d]) * stride_a;
        stride_a *= ext;
      }
      if (k < sb.size()) {
        const auto ext = static_cast<std::size_t>(sb[sb.size() - 1 - k]);
        ib += (ext == 1 ? 0 : idx[d]) * stride_b;
        stride_b *= ext;
      }
    }
    const double va = (Value(a, ia, dt) - Zp(pa)) * pa.scale, vb = (Value(b, ib, dt) - Zp(pb)) * pb.scale;
    want[i] = Quantize((op == "QLinearAdd" ? va + vb : va * vb) / py.scale, py, dt);
  }
  ExpectClose(*got, want, dt);
}

TEST(QLinearAdd, Uint8BroadcastMatchesTheDefinition) {
  CheckBinary("QLinearAdd", DType::kUInt8, {2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}, {0.05f, 120}, {0.02f, 3}, {0.07f, 128});
}
TEST(QLinearAdd, Int8SameShapeNoZeroPoints) {
  CheckBinary("QLinearAdd", DType::kInt8, {4, 33}, {4, 33}, {4, 33}, {0.1f, -2000}, {0.03f, -2000}, {0.09f, -2000});
}
// Long contiguous rows: the AVX2 loop (32 at a time) and its tail.
TEST(QLinearAdd, Uint8SameShapeLongRows) {
  CheckBinary("QLinearAdd", DType::kUInt8, {3, 203}, {3, 203}, {3, 203}, {0.05f, 120}, {0.02f, 3}, {0.07f, 128});
}
TEST(QLinearMul, Int8ScalarBroadcast) {
  CheckBinary("QLinearMul", DType::kInt8, {3, 17}, {1}, {3, 17}, {0.04f, -5}, {0.02f, 10}, {0.01f, 3});
}
TEST(QLinearMul, Uint8Broadcast) {
  CheckBinary("QLinearMul", DType::kUInt8, {1, 6}, {5, 1}, {5, 6}, {0.03f, 100}, {0.05f, 128}, {0.2f, 0});
}

// Hand-derived: a_scale 0.5, b_scale 0.25 (zero point 2), output scale 1,
// zero point 100: 10 and 4 -> 5 + 0.5 = 5.5 -> 6 (tie to even) -> 106; 9
// and 2 -> 4.5 -> 4 -> 104; 255 and 255 -> 190.75 -> 191 -> 291 -> 255.
TEST(QLinearAdd, HandDerivedTiesAndSaturation) {
  OneNode t;
  const std::vector<std::uint8_t> a = {10, 9, 255}, b = {4, 2, 255};
  t.Data("a", a, {3});
  AddParams(*t.g, t.ins, "a", {0.5f, 0}, t.dt);
  t.Data("b", b, {3});
  AddParams(*t.g, t.ins, "b", {0.25f, 2}, t.dt);
  AddParams(*t.g, t.ins, "y", {1.f, 100}, t.dt);
  t.Make("QLinearAdd");
  auto got = t.Run({3});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (std::vector<std::uint8_t>{106, 104, 255}));
}

void CheckLookup(const std::string& op, DType dt, QP px, QP py, float alpha) {
  std::vector<std::uint8_t> x(256);
  for (int i = 0; i < 256; ++i) x[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);  // every value
  OneNode t;
  t.dt = dt;
  t.Data("x", x, {4, 64});
  AddParams(*t.g, t.ins, "x", px, dt);
  AddParams(*t.g, t.ins, "y", py, dt);
  t.Make(op);
  if (op == "QLinearLeakyRelu") t.node->SetAttr("alpha", ir::Attribute::Float(alpha));
  auto got = t.Run({4, 64});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want(256);
  for (std::size_t i = 0; i < 256; ++i) {
    const double v = (Value(x, i, dt) - Zp(px)) * px.scale;
    const double f = op == "QLinearSigmoid" ? 1.0 / (1.0 + std::exp(-v)) : (v >= 0 ? v : v * alpha);
    want[i] = Quantize(f / py.scale, py, dt);
  }
  ExpectClose(*got, want, dt);
}

TEST(QLinearSigmoid, Uint8EveryValue) { CheckLookup("QLinearSigmoid", DType::kUInt8, {0.05f, 128}, {1.f / 256, 0}, 0); }
TEST(QLinearSigmoid, Int8EveryValue) { CheckLookup("QLinearSigmoid", DType::kInt8, {0.08f, 10}, {1.f / 255, -128}, 0); }
TEST(QLinearLeakyRelu, Int8EveryValue) { CheckLookup("QLinearLeakyRelu", DType::kInt8, {0.1f, 0}, {0.07f, -20}, 0.2f); }
TEST(QLinearLeakyRelu, Uint8EveryValue) { CheckLookup("QLinearLeakyRelu", DType::kUInt8, {0.1f, 100}, {0.1f, 50}, 0.01f); }

void CheckGap(DType dt, bool channels_last, std::int64_t ch = 3) {
  std::mt19937 rng(3);
  const Shape in = channels_last ? Shape{2, 5, 7, ch} : Shape{2, ch, 5, 7};
  const Shape out = channels_last ? Shape{2, 1, 1, ch} : Shape{2, ch, 1, 1};
  const auto x = RandomBytes(static_cast<std::size_t>(2 * ch * 5 * 7), rng);
  const auto nc = static_cast<std::size_t>(ch);
  const QP px{0.03f, dt == DType::kUInt8 ? 110 : -7}, py{0.01f, dt == DType::kUInt8 ? 90 : 4};
  OneNode t;
  t.dt = dt;
  t.Data("x", x, in);
  AddParams(*t.g, t.ins, "x", px, dt);
  AddParams(*t.g, t.ins, "y", py, dt);
  t.Make("QLinearGlobalAveragePool");
  t.node->SetAttr("channels_last", ir::Attribute::Int(channels_last ? 1 : 0));
  auto got = t.Run(out);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want(2 * nc);
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t c = 0; c < nc; ++c) {
      double sum = 0;
      for (std::size_t p = 0; p < 35; ++p) {
        sum += Value(x, channels_last ? (n * 35 + p) * nc + c : (n * nc + c) * 35 + p, dt) - Zp(px);
      }
      want[n * nc + c] = Quantize(sum / 35 * px.scale / py.scale, py, dt);
    }
  ExpectClose(*got, want, dt);
}
TEST(QLinearGlobalAveragePool, Uint8Nchw) { CheckGap(DType::kUInt8, false); }
TEST(QLinearGlobalAveragePool, Int8ChannelsLast) { CheckGap(DType::kInt8, true); }
TEST(QLinearGlobalAveragePool, Uint8ChannelsLastManyChannels) { CheckGap(DType::kUInt8, true, 600); }

// Three int8 inputs on axis 1; the second has the output's parameters (copied).
TEST(QLinearConcat, Int8RequantizesEachInput) {
  std::mt19937 rng(5);
  const DType dt = DType::kInt8;
  const std::vector<std::int64_t> widths = {2, 3, 1};
  const std::vector<QP> ps = {{0.02f, 5}, {0.05f, -3}, {0.2f, 0}};
  const QP py{0.05f, -3};
  OneNode t;
  t.dt = dt;
  AddParams(*t.g, t.ins, "y", py, dt);
  std::vector<std::vector<std::uint8_t>> xs;
  xs.reserve(3);
  for (std::size_t i = 0; i < 3; ++i) {
    xs.push_back(RandomBytes(static_cast<std::size_t>(2 * widths[i] * 4), rng));
    t.Data("x" + std::to_string(i), xs.back(), {2, widths[i], 4});
    AddParams(*t.g, t.ins, "x" + std::to_string(i), ps[i], dt);
  }
  t.Make("QLinearConcat");
  t.node->SetAttr("axis", ir::Attribute::Int(-2));
  auto got = t.Run({2, 6, 4});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want;
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < widths[i] * 4; ++j) {
        const double v = Value(xs[i], n * static_cast<std::size_t>(widths[i] * 4) + static_cast<std::size_t>(j), dt);
        want.push_back(i == 1 ? v : Quantize((v - Zp(ps[i])) * ps[i].scale / py.scale, py, dt));
      }
  ExpectClose(*got, want, dt);
  for (std::size_t n = 0; n < 2; ++n)  // the copied input is bit-exact
    for (std::size_t j = 0; j < 12; ++j) EXPECT_EQ((*got)[n * 24 + 8 + j], xs[1][n * 12 + j]);
}

// Hostile parameters: errors naming the node and the input, never a crash.
TEST(QOperator, BadParametersAreErrorsNamingTheInput) {
  {  // a per-channel scale where the op takes one per tensor
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    t.Data("x", x, {2, 4});
    t.ins.push_back(t.g->AddConstant("xs", Tensor(DType::kFloat32, {2}, std::vector<float>{1.f, 2.f})));
    t.ins.push_back(nullptr);
    AddParams(*t.g, t.ins, "y", {1.f, 0}, t.dt);
    t.Make("QLinearSigmoid");
    auto r = t.Run({2, 4});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("input 1 (scale) must be a scalar"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("qop"), std::string::npos) << r.status().ToString();
  }
  {  // an int8 zero point for uint8 data
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    t.Data("a", x, {8});
    AddParams(*t.g, t.ins, "a", {1.f, 0}, DType::kInt8);
    t.Data("b", x, {8});
    AddParams(*t.g, t.ins, "b", {1.f, 0}, DType::kUInt8);
    AddParams(*t.g, t.ins, "y", {1.f, 0}, DType::kUInt8);
    t.Make("QLinearAdd");
    auto r = t.Run({8});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("input 2 (zero point) has type int8"), std::string::npos) << r.status().ToString();
  }
  {  // an axis of the wrong attribute kind (it would read as a default)
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    AddParams(*t.g, t.ins, "y", {1.f, 0}, t.dt);
    t.Data("x", x, {2, 4});
    AddParams(*t.g, t.ins, "x", {1.f, 0}, t.dt);
    t.Make("QLinearConcat");
    t.node->SetAttr("axis", ir::Attribute::Float(1.f));
    auto r = t.Run({2, 4});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("attribute 'axis' must be an int"), std::string::npos) << r.status().ToString();
  }
  {  // QLinearConcat with an incomplete triple
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    AddParams(*t.g, t.ins, "y", {1.f, 0}, t.dt);
    t.Data("x", x, {8});
    AddParams(*t.g, t.ins, "x", {1.f, 0}, t.dt);
    t.Data("x2", x, {8});
    t.Make("QLinearConcat");
    t.node->SetAttr("axis", ir::Attribute::Int(0));
    auto r = t.Run({16});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("triple"), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace kiln
