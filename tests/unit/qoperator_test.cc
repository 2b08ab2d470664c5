// ONNX Runtime's com.microsoft QLinear* ops (QOperator models): QLinearAdd,
// QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
// QLinearConcat, QLinearAveragePool, QGemm, QLinearSoftmax, QLinearWhere, MatMulIntegerToFloat and
// DynamicQuantizeMatMul, each against a double-precision reference written here
// from the op's definition (dequantize, compute, quantize with rounding to
// nearest even and saturation), plus hand-derived values and the errors
// hostile parameters get.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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

// com.microsoft QLinearAveragePool against ONNX Runtime's kernel written out
// in double: dequantize, average over the window (count_include_pad: over
// the kernel's size, else over the positions inside the image), then
// saturate(round_even(y / y_scale + zp)). Kiln lowers it to
// DequantizeLinear -> AveragePool -> QuantizeLinear, which rounds y /
// y_scale before adding the zero point: within one step, 99% exact.
struct QPoolCase {
  DType dt = DType::kUInt8;
  bool last = false;  // channels_last: X [N, H, W, C]
  std::int64_t n = 2, c = 5, h = 9, w = 11, k = 3, s = 2, pad = 1;
  bool ceil = false, include_pad = false;
  QP x{0.0413f, 120}, y{0.0291f, 130};  // not round: exact ties would be common
};

void CheckQAveragePool(const QPoolCase& q) {
  std::mt19937 rng(13);
  OneNode t;
  t.dt = q.dt;
  const Shape xs = q.last ? Shape{q.n, q.h, q.w, q.c} : Shape{q.n, q.c, q.h, q.w};
  const auto x = RandomBytes(static_cast<std::size_t>(NumElements(xs)), rng);
  t.Data("x", x, xs);
  AddParams(*t.g, t.ins, "x", q.x, q.dt);
  AddParams(*t.g, t.ins, "y", q.y, q.dt);
  t.Make("QLinearAveragePool");
  t.node->SetAttr("kernel_shape", ir::Attribute::Ints({q.k, q.k}));
  t.node->SetAttr("strides", ir::Attribute::Ints({q.s, q.s}));
  t.node->SetAttr("pads", ir::Attribute::Ints({q.pad, q.pad, q.pad, q.pad}));
  if (q.ceil) t.node->SetAttr("ceil_mode", ir::Attribute::Int(1));
  if (q.include_pad) t.node->SetAttr("count_include_pad", ir::Attribute::Int(1));
  if (q.last) t.node->SetAttr("channels_last", ir::Attribute::Int(1));
  auto extent = [&](std::int64_t in) {
    const std::int64_t span = in + 2 * q.pad - q.k;
    std::int64_t o = (q.ceil ? (span + q.s - 1) / q.s : span / q.s) + 1;
    if (q.ceil && (o - 1) * q.s >= in + q.pad) --o;  // a last window starting in the end padding
    return o;
  };
  const std::int64_t oh = extent(q.h), ow = extent(q.w);
  const Shape ys = q.last ? Shape{q.n, oh, ow, q.c} : Shape{q.n, q.c, oh, ow};
  auto got = t.Run(ys);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want(got->size());
  const double lo = q.dt == DType::kUInt8 ? 0 : -128, hi = q.dt == DType::kUInt8 ? 255 : 127;
  for (std::int64_t b = 0; b < q.n; ++b) {
    for (std::int64_t ch = 0; ch < q.c; ++ch) {
      for (std::int64_t i = 0; i < oh; ++i) {
        for (std::int64_t j = 0; j < ow; ++j) {
          const std::int64_t h0 = i * q.s - q.pad, w0 = j * q.s - q.pad;
          double sum = 0;
          std::int64_t inside = 0;
          for (std::int64_t u = std::max<std::int64_t>(h0, 0); u < std::min(h0 + q.k, q.h); ++u) {
            for (std::int64_t v = std::max<std::int64_t>(w0, 0); v < std::min(w0 + q.k, q.w); ++v) {
              const std::int64_t at = q.last ? ((b * q.h + u) * q.w + v) * q.c + ch : ((b * q.c + ch) * q.h + u) * q.w + v;
              sum += (Value(x, static_cast<std::size_t>(at), q.dt) - Zp(q.x)) * q.x.scale;
              ++inside;
            }
          }
          const double avg = sum / static_cast<double>(q.include_pad ? q.k * q.k : inside);
          const std::int64_t o = q.last ? ((b * oh + i) * ow + j) * q.c + ch : ((b * q.c + ch) * oh + i) * ow + j;
          want[static_cast<std::size_t>(o)] = std::clamp(std::nearbyint(avg / q.y.scale + Zp(q.y)), lo, hi);
        }
      }
    }
  }
  ExpectClose(*got, want, q.dt);
}

TEST(QLinearAveragePool, Uint8Nchw3x3Stride2Padded) { CheckQAveragePool({}); }
TEST(QLinearAveragePool, Int8ChannelsLastCeilMode) {
  QPoolCase q;
  q.dt = DType::kInt8;
  q.last = true;
  q.k = 2;
  q.pad = 0;
  q.ceil = true;
  q.x = {0.0517f, -3};
  q.y = {0.0439f, 2};
  CheckQAveragePool(q);
}
TEST(QLinearAveragePool, CountIncludePad) {
  QPoolCase q;
  q.include_pad = true;
  q.c = 16;
  CheckQAveragePool(q);
}
TEST(QLinearAveragePool, ChannelsLastNeedsFourDims) {
  OneNode t;
  const std::vector<std::uint8_t> x(24);
  t.Data("x", x, {1, 4, 6});
  AddParams(*t.g, t.ins, "x", {1.f, 0}, t.dt);
  AddParams(*t.g, t.ins, "y", {1.f, 0}, t.dt);
  t.Make("QLinearAveragePool");
  t.node->SetAttr("kernel_shape", ir::Attribute::Ints({2}));
  t.node->SetAttr("channels_last", ir::Attribute::Int(1));
  auto r = t.Run({1, 3, 6});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("channels-last pooling needs a 4-D input"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("qop"), std::string::npos) << r.status().ToString();
}

// com.microsoft QGemm, against ONNX Runtime's CPU kernel written out here:
// acc = C + (A' - a_zp)(B' - b_zp[n]) exactly (int64), s[n] = alpha *
// a_scale, times b_scale[n], divided by y_scale when quantized (float32,
// in that order), then float(acc) * s[n], rounded half to even, plus the
// zero point and saturated. Kiln lowers the node to standard ops
// (lower-contrib); each output must be bit for bit the kernel's.
struct QGemmCase {
  DType a_type = DType::kUInt8, b_type = DType::kInt8;
  std::int64_t m = 3, k = 37, n = 20;
  bool trans_a = false, trans_b = false, b_input = false;
  bool per_column = true;  // b_scale / b_zero_point [N]
  int b_zp = 0;            // per column: b_zp + (n % 3)
  Shape c_shape = {-1};    // {-1}: no C
  float alpha = 1.f;
  DType y_type = DType::kUndefined;  // kUndefined: float32 output
  QP a{0.02f, 131}, y{0.2f, 128};
};

HostTensorPtr Bytes(DType t, Shape s, const std::vector<std::uint8_t>& v) {
  auto h = std::make_shared<HostTensor>(t, std::move(s));
  std::memcpy(h->mutable_data(), v.data(), v.size());
  return h;
}

void CheckQGemm(const QGemmCase& q) {
  std::mt19937 rng(11);
  const Shape sa = q.trans_a ? Shape{q.k, q.m} : Shape{q.m, q.k};
  const Shape sb = q.trans_b ? Shape{q.n, q.k} : Shape{q.k, q.n};
  const auto a = RandomBytes(static_cast<std::size_t>(q.m * q.k), rng);
  const auto b = RandomBytes(static_cast<std::size_t>(q.k * q.n), rng);
  const std::int64_t per = q.per_column ? q.n : 1;
  std::vector<float> bs(static_cast<std::size_t>(per));
  std::vector<std::uint8_t> bz(static_cast<std::size_t>(per));
  for (std::int64_t j = 0; j < per; ++j) {
    bs[static_cast<std::size_t>(j)] = 0.003f + 0.0007f * static_cast<float>(j);
    bz[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>(q.b_zp + (q.per_column ? j % 3 : 0));
  }
  const bool has_c = !(q.c_shape.size() == 1 && q.c_shape[0] == -1);
  std::vector<std::int32_t> cv(has_c ? static_cast<std::size_t>(NumElements(q.c_shape)) : 0);
  for (auto& v : cv) v = static_cast<std::int32_t>(rng() % 20001) - 10000;

  auto g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> ins;
  std::vector<std::pair<const void*, std::pair<DType, Shape>>> feeds;
  auto data = [&](const std::string& name, DType t, const Shape& s, const std::vector<std::uint8_t>& v) {
    ir::Value* x = g->AddValue(name, t, s);
    g->inputs().push_back(x);
    feeds.push_back({v.data(), {t, s}});
    return x;
  };
  auto scalar = [&](const std::string& name, DType t, int v) {
    return g->AddConstant(name, Bytes(t, {}, {static_cast<std::uint8_t>(v)}));
  };
  ins.push_back(data("a", q.a_type, sa, a));
  ins.push_back(g->AddConstant("a_s", Tensor(DType::kFloat32, {}, std::vector<float>{q.a.scale})));
  ins.push_back(scalar("a_z", q.a_type, q.a.zp));
  ins.push_back(q.b_input ? data("b", q.b_type, sb, b) : g->AddConstant("b", Bytes(q.b_type, sb, b)));
  const Shape sp = q.per_column ? Shape{q.n} : Shape{};
  ins.push_back(g->AddConstant("b_s", Tensor(DType::kFloat32, sp, bs)));
  ins.push_back(g->AddConstant("b_z", Bytes(q.b_type, sp, bz)));
  if (has_c || q.y_type != DType::kUndefined) {
    ins.push_back(has_c ? g->AddConstant("c", Tensor(DType::kInt32, q.c_shape, cv)) : nullptr);
  }
  if (q.y_type != DType::kUndefined) {
    ins.push_back(g->AddConstant("y_s", Tensor(DType::kFloat32, {}, std::vector<float>{q.y.scale})));
    ins.push_back(scalar("y_z", q.y_type, q.y.zp));
  }
  ir::Value* out = g->AddValue("y");
  ir::Node* node = g->AddNode("QGemm", "qgemm_node", ins, {out}, ops::kMicrosoftDomain);
  node->SetAttr("transA", ir::Attribute::Int(q.trans_a));
  node->SetAttr("transB", ir::Attribute::Int(q.trans_b));
  if (q.alpha != 1.f) node->SetAttr("alpha", ir::Attribute::Float(q.alpha));
  g->outputs().push_back(out);

  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const bool quantized = q.y_type != DType::kUndefined;
  const DType ot = quantized ? q.y_type : DType::kFloat32;
  ASSERT_EQ((*model)->outputs()[0].shape, (Shape{q.m, q.n}));
  std::vector<std::uint8_t> got(static_cast<std::size_t>(q.m * q.n) * DTypeSize(ot));
  std::vector<TensorRef> refs;
  for (auto& [p, ts] : feeds) refs.push_back({const_cast<void*>(p), ts.first, ts.second});
  ASSERT_TRUE((*model)->Execute(refs, {{got.data(), ot, {q.m, q.n}}}).ok());

  auto av = [&](std::int64_t i, std::int64_t kk) {
    const std::size_t at = static_cast<std::size_t>(q.trans_a ? kk * q.m + i : i * q.k + kk);
    return static_cast<std::int64_t>(Value(a, at, q.a_type)) - q.a.zp;
  };
  auto bv = [&](std::int64_t kk, std::int64_t j) {
    const std::size_t at = static_cast<std::size_t>(q.trans_b ? j * q.k + kk : kk * q.n + j);
    return static_cast<std::int64_t>(Value(b, at, q.b_type)) -
           static_cast<std::int64_t>(Value(bz, static_cast<std::size_t>(q.per_column ? j : 0), q.b_type));
  };
  auto cval = [&](std::int64_t i, std::int64_t j) -> std::int64_t {
    if (!has_c) return 0;
    const Shape& cs = q.c_shape;
    const std::int64_t rows = cs.size() == 2 ? cs[0] : 1, cols = cs.empty() ? 1 : cs.back();
    return cv[static_cast<std::size_t>((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j))];
  };
  const double lo = quantized && q.y_type == DType::kInt8 ? -128 : 0, hi = quantized && q.y_type == DType::kInt8 ? 127 : 255;
  std::size_t saturated = 0;
  for (std::int64_t i = 0; i < q.m; ++i) {
    for (std::int64_t j = 0; j < q.n; ++j) {
      std::int64_t acc = cval(i, j);
      for (std::int64_t kk = 0; kk < q.k; ++kk) acc += av(i, kk) * bv(kk, j);
      float s = q.alpha * q.a.scale;
      s = s * bs[static_cast<std::size_t>(q.per_column ? j : 0)];
      if (quantized) s = s / q.y.scale;
      const float v = static_cast<float>(static_cast<std::int32_t>(acc)) * s;
      const std::size_t at = static_cast<std::size_t>(i * q.n + j);
      if (!quantized) {
        float f;
        std::memcpy(&f, got.data() + at * 4, 4);
        ASSERT_EQ(f, v) << "element " << i << "," << j << " acc " << acc;
        continue;
      }
      const double want = std::clamp(static_cast<double>(std::nearbyint(v)) + q.y.zp, lo, hi);
      saturated += want == lo || want == hi;
      ASSERT_EQ(Value(got, at, q.y_type), want) << "element " << i << "," << j << " acc " << acc << " v " << v;
    }
  }
  if (quantized) {
    EXPECT_LT(saturated * 2, static_cast<std::size_t>(q.m * q.n)) << "scales put most outputs at a bound";
  }
}

TEST(QGemm, Uint8PerColumnQuantizedOutputMatchesTheKernel) {
  QGemmCase q;
  q.trans_b = true;  // ONNX Runtime's quantizer keeps a Linear's [N, K]
  q.c_shape = {20};
  q.y_type = DType::kUInt8;
  CheckQGemm(q);
}
TEST(QGemm, FloatOutputWithBiasOfEveryShape) {
  for (Shape c : {Shape{20}, Shape{}, Shape{1, 20}, Shape{3, 1}, Shape{3, 20}, Shape{1}}) {
    QGemmCase q;
    q.c_shape = c;
    CheckQGemm(q);
  }
}
TEST(QGemm, Int8OperandsAlphaTransposedAInt8Output) {
  QGemmCase q;
  q.a_type = DType::kInt8;
  q.a = {0.03f, -5};
  q.trans_a = true;
  q.alpha = 0.75f;
  q.per_column = false;
  q.b_zp = 3;
  q.c_shape = {};
  q.y_type = DType::kInt8;
  q.y = {0.2f, -3};
  CheckQGemm(q);
}
// (alpha * a_scale) * b_scale[n] and (alpha * b_scale[n]) * a_scale differ
// in float32 for 6 of these 20 columns: the float output shows the order.
TEST(QGemm, AlphaScalesInTheKernelsOrder) {
  QGemmCase q;
  q.alpha = 0.7f;
  q.a = {0.03f, 131};
  q.c_shape = {20};
  CheckQGemm(q);
}
TEST(QGemm, Uint8WeightsAsAnInputTransposedAtRunTime) {
  QGemmCase q;
  q.b_type = DType::kUInt8;
  q.b_zp = 128;
  q.b_input = true;
  q.trans_b = true;
  q.m = 5;
  q.y_type = DType::kUInt8;
  CheckQGemm(q);
}

// Hand-derived: A [[3, 5]] (zero point 1: 2, 4), B [[3, 2], [1, 1]] (int8,
// zero point 0), C [5, 5]: acc 2*3 + 4*1 + 5 = 15 and 2*2 + 4*1 + 5 = 13.
// alpha 2, a_scale 0.5, b_scale 0.25: s = 0.25, float out 3.75 and 3.25;
// with y_scale 0.5, zero point 10: s = 0.5, 7.5 -> 8 and 6.5 -> 6 (ties to
// even), plus 10: 18 and 16.
TEST(QGemm, HandDerived) {
  for (bool quantized : {false, true}) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* a = g->AddValue("a", DType::kUInt8, {1, 2});
    g->inputs().push_back(a);
    std::vector<ir::Value*> ins = {
        a,
        g->AddConstant("a_s", Tensor(DType::kFloat32, {}, std::vector<float>{0.5f})),
        g->AddConstant("a_z", Bytes(DType::kUInt8, {}, {1})),
        g->AddConstant("b", Bytes(DType::kInt8, {2, 2}, {3, 2, 1, 1})),
        g->AddConstant("b_s", Tensor(DType::kFloat32, {}, std::vector<float>{0.25f})),
        g->AddConstant("b_z", Bytes(DType::kInt8, {}, {0})),
        g->AddConstant("c", Tensor(DType::kInt32, {2}, std::vector<std::int32_t>{5, 5}))};
    if (quantized) {
      ins.push_back(g->AddConstant("y_s", Tensor(DType::kFloat32, {}, std::vector<float>{0.5f})));
      ins.push_back(g->AddConstant("y_z", Bytes(DType::kUInt8, {}, {10})));
    }
    ir::Value* y = g->AddValue("y");
    g->AddNode("QGemm", "qgemm_node", ins, {y}, ops::kMicrosoftDomain)->SetAttr("alpha", ir::Attribute::Float(2.f));
    g->outputs().push_back(y);
    test::TempDir dir;
    auto model = CompileAndLoad(std::move(g), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::uint8_t x[2] = {3, 5};
    if (quantized) {
      std::uint8_t out[2] = {};
      ASSERT_TRUE((*model)->Execute({{x, DType::kUInt8, {1, 2}}}, {{out, DType::kUInt8, {1, 2}}}).ok());
      EXPECT_EQ(out[0], 18);
      EXPECT_EQ(out[1], 16);
    } else {
      float out[2] = {};
      ASSERT_TRUE((*model)->Execute({{x, DType::kUInt8, {1, 2}}}, {{out, DType::kFloat32, {1, 2}}}).ok());
      EXPECT_EQ(out[0], 3.75f);
      EXPECT_EQ(out[1], 3.25f);
    }
  }
}

// What ONNX Runtime's kernel refuses is refused, naming the node.
TEST(QGemm, HostileParametersAreRefused) {
  struct Bad {
    const char* what;
    std::function<void(ir::Graph&, std::vector<ir::Value*>&, ir::Node*&)> edit;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {"C of rank 3", [](ir::Graph& g, std::vector<ir::Value*>& ins, ir::Node*&) {
         ins.push_back(g.AddConstant("c", Tensor(DType::kInt32, {1, 1, 4}, std::vector<std::int32_t>(4))));
       }, "does not broadcast to [2,4]"},
      {"y_scale without y_zero_point", [](ir::Graph& g, std::vector<ir::Value*>& ins, ir::Node*&) {
         ins.push_back(nullptr);
         ins.push_back(g.AddConstant("y_s", Tensor(DType::kFloat32, {}, std::vector<float>{1.f})));
       }, "must be given together"},
      {"b_scale of 3 for 4 columns", [](ir::Graph& g, std::vector<ir::Value*>& ins, ir::Node*&) {
         ins[4] = g.AddConstant("b_s3", Tensor(DType::kFloat32, {3}, std::vector<float>{1.f, 1.f, 1.f}));
       }, "input 4 (b_scale) must be a scalar or have shape [4]"},
      {"a_scale per row", [](ir::Graph& g, std::vector<ir::Value*>& ins, ir::Node*&) {
         ins[1] = g.AddConstant("a_s2", Tensor(DType::kFloat32, {2}, std::vector<float>{1.f, 1.f}));
       }, "input 1 (a_scale) must be a scalar"},
      {"inner dims differ", [](ir::Graph& g, std::vector<ir::Value*>& ins, ir::Node*&) {
         ins[3] = g.AddConstant("b5", Bytes(DType::kInt8, {5, 4}, std::vector<std::uint8_t>(20)));
       }, "inner dims differ"},
      {"transA 2", [](ir::Graph&, std::vector<ir::Value*>&, ir::Node*& n) { n->SetAttr("transA", ir::Attribute::Int(2)); },
       "attribute 'transA' must be 0 or 1"},
      {"alpha infinite", [](ir::Graph&, std::vector<ir::Value*>&, ir::Node*& n) {
         n->SetAttr("alpha", ir::Attribute::Float(std::numeric_limits<float>::infinity()));
       }, "attribute 'alpha' must be finite"},
  };
  for (const Bad& t : bad) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* a = g->AddValue("a", DType::kUInt8, {2, 3});
    g->inputs().push_back(a);
    std::vector<ir::Value*> ins = {a,
                                   g->AddConstant("a_s", Tensor(DType::kFloat32, {}, std::vector<float>{1.f})),
                                   g->AddConstant("a_z", Bytes(DType::kUInt8, {}, {0})),
                                   g->AddConstant("b", Bytes(DType::kInt8, {3, 4}, std::vector<std::uint8_t>(12))),
                                   g->AddConstant("b_s", Tensor(DType::kFloat32, {}, std::vector<float>{1.f})),
                                   g->AddConstant("b_z", Bytes(DType::kInt8, {}, {0}))};
    ir::Node* n = nullptr;
    const bool node_edit = std::string(t.what) == "transA 2" || std::string(t.what) == "alpha infinite";
    if (!node_edit) t.edit(*g, ins, n);
    ir::Value* y = g->AddValue("y");
    n = g->AddNode("QGemm", "qgemm_node", ins, {y}, ops::kMicrosoftDomain);
    if (node_edit) t.edit(*g, ins, n);
    g->outputs().push_back(y);
    test::TempDir dir;
    auto r = CompileAndLoad(std::move(g), dir);
    ASSERT_FALSE(r.ok()) << t.what;
    EXPECT_NE(r.status().message().find(t.message), std::string::npos) << t.what << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find("qgemm_node"), std::string::npos) << t.what << ": " << r.status().ToString();
  }
}

// com.microsoft QLinearSoftmax against ONNX Runtime's kernel written out
// here (its lookup table, float32 sum in order, floor(1 / y_scale)) bit for
// bit, and against softmax in double within one step.
struct QSoftmaxCase {
  DType dt = DType::kUInt8;
  Shape shape = {2, 3, 40};
  std::int64_t opset = 13;
  std::int64_t axis = -1;
  bool axis_given = true;
  QP x{0.07f, 120}, y{1.f / 256, 0};
};

void CheckQSoftmax(const QSoftmaxCase& q) {
  std::mt19937 rng(17);
  OneNode t;
  t.dt = q.dt;
  const auto x = RandomBytes(static_cast<std::size_t>(NumElements(q.shape)), rng);
  t.Data("x", x, q.shape);
  AddParams(*t.g, t.ins, "x", q.x, q.dt);
  AddParams(*t.g, t.ins, "y", q.y, q.dt);
  t.Make("QLinearSoftmax");
  t.node->SetAttr("opset", ir::Attribute::Int(q.opset));
  if (q.axis_given) t.node->SetAttr("axis", ir::Attribute::Int(q.axis));
  auto got = t.Run(q.shape);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto rank = static_cast<std::int64_t>(q.shape.size());
  std::int64_t axis = q.axis_given ? q.axis : -1;  // ONNX Runtime's schema default, for every opset
  if (axis < 0) axis += rank;
  // Rows: (outer, inner) pairs; a row's elements lie `inner` apart.
  std::int64_t outer = 1, d = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) {
    const std::int64_t v = q.shape[static_cast<std::size_t>(i)];
    (i < axis ? outer : (i == axis || q.opset < 13) ? d : inner) *= v;
  }
  const double lo = q.dt == DType::kUInt8 ? 0 : -128, hi = q.dt == DType::kUInt8 ? 255 : 127;
  // ONNX Runtime's table: exp((i - 255 + shift) * x_scale), shift keeping D terms below FLT_MAX.
  const float fmax_d = std::numeric_limits<float>::max() / static_cast<float>(d);
  const double shift = std::max(0.0, std::log(static_cast<double>(fmax_d)) - 5) / q.x.scale;
  std::vector<float> table(256);
  for (int i = 0; i < 256; ++i) table[static_cast<std::size_t>(i)] = static_cast<float>(std::exp((i - 255 + shift) * q.x.scale));
  const float yinv = std::floor(1.0f / q.y.scale);
  std::vector<double> kernel(got->size()), math(got->size());
  for (std::int64_t r = 0; r < outer * inner; ++r) {
    const std::int64_t base = r / inner * d * inner + r % inner;
    auto at = [&](std::int64_t k) { return static_cast<std::size_t>(base + k * inner); };
    double m = Value(x, at(0), q.dt);
    for (std::int64_t k = 1; k < d; ++k) m = std::max(m, Value(x, at(k), q.dt));
    float sum = 0;
    double esum = 0;
    for (std::int64_t k = 0; k < d; ++k) {
      sum += table[static_cast<std::size_t>(255 - (m - Value(x, at(k), q.dt)))];
      esum += std::exp((Value(x, at(k), q.dt) - m) * q.x.scale);
    }
    for (std::int64_t k = 0; k < d; ++k) {
      const float e = table[static_cast<std::size_t>(255 - (m - Value(x, at(k), q.dt)))];
      kernel[at(k)] = std::clamp(static_cast<double>(std::nearbyint(e * yinv / sum)) + Zp(q.y), lo, hi);
      math[at(k)] = Quantize(std::exp((Value(x, at(k), q.dt) - m) * q.x.scale) / esum / q.y.scale, q.y, q.dt);
    }
  }
  // Within one step of softmax: floor(1 / y_scale) is below 1 / y_scale by
  // less than 1, so y is below by less than a step before rounding. (With
  // y_scale = float(1 / 255), 1 / y_scale is 254.99998 in float32: ONNX
  // Runtime scales by 254, and many results sit a step below softmax's.)
  for (std::size_t i = 0; i < got->size(); ++i) {
    ASSERT_EQ(Value(*got, i, q.dt), kernel[i]) << "element " << i;
    ASSERT_LE(std::fabs(kernel[i] - math[i]), 1.0) << "element " << i;
  }
}

TEST(QLinearSoftmax, Uint8LastAxisMatchesTheKernel) { CheckQSoftmax({}); }
TEST(QLinearSoftmax, Int8MiddleAxisOpset13) {
  QSoftmaxCase q;
  q.dt = DType::kInt8;
  q.shape = {2, 7, 5};
  q.axis = 1;
  q.x = {0.11f, -3};
  q.y = {1.f / 255, -128};
  CheckQSoftmax(q);
}
TEST(QLinearSoftmax, Opset11FlattensFromTheAxis) {
  QSoftmaxCase q;
  q.shape = {2, 3, 4, 5};
  q.opset = 11;
  q.axis = 1;  // below opset 13: rows of 3 * 4 * 5
  q.x = {0.05f, 0};
  CheckQSoftmax(q);
}
TEST(QLinearSoftmax, Opset11WithoutAxisUsesTheLastDim) {
  QSoftmaxCase q;
  q.shape = {2, 3, 4, 5};
  q.opset = 11;
  q.axis_given = false;
  CheckQSoftmax(q);
}
TEST(QLinearSoftmax, LongRowsAndSmallScale) {
  QSoftmaxCase q;
  q.shape = {3, 1000};
  q.x = {0.013f, 7};
  q.y = {0.0023f, 3};  // floor(1 / 0.0023) = 434, not 434.78
  CheckQSoftmax(q);
}

TEST(QLinearSoftmax, HandDerived) {
  auto run = [](std::vector<std::uint8_t> x, Shape s, float xs, float ys) {
    OneNode t;
    t.Data("x", x, s);
    AddParams(*t.g, t.ins, "x", {xs, 0}, t.dt);
    AddParams(*t.g, t.ins, "y", {ys, 0}, t.dt);
    t.Make("QLinearSoftmax");
    t.node->SetAttr("opset", ir::Attribute::Int(13));
    return t.Run(s);
  };
  {  // probabilities 1/4 and 3/4 (x_scale ln 3); 1/2 and 1/2; out of 256 steps
    auto r = run({10, 11, 200, 200}, {2, 2}, static_cast<float>(std::log(3.0)), 1.f / 256);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, (std::vector<std::uint8_t>{64, 192, 128, 128}));
  }
  {  // one element per row: probability 1, 256 steps saturate to 255 (ONNX Runtime's product overflows there)
    auto r = run({3, 250}, {2, 1}, 0.1f, 1.f / 256);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, (std::vector<std::uint8_t>{255, 255}));
  }
}

// Scales that no quantizer writes (they may arrive as tensors at run time):
// the kernel runs without undefined behaviour (the sanitizer builds check
// the conversions) and saturates; ONNX Runtime's output is unspecified there.
TEST(QLinearSoftmax, DegenerateScalesSaturate) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float xs : {0.f, -1.f, nan, inf, 1e-45f, 1e30f}) {
    for (float ys : {0.f, -0.5f, nan, 1e-30f, 1.f / 256}) {
      OneNode t;
      const std::vector<std::uint8_t> x = {0, 1, 128, 255, 7, 7, 7, 7};
      t.Data("x", x, {2, 4});
      AddParams(*t.g, t.ins, "x", {xs, 0}, t.dt);
      AddParams(*t.g, t.ins, "y", {ys, 3}, t.dt);
      t.Make("QLinearSoftmax");
      t.node->SetAttr("opset", ir::Attribute::Int(13));
      auto r = t.Run({2, 4});
      ASSERT_TRUE(r.ok()) << xs << " " << ys << ": " << r.status().ToString();
      if (std::isfinite(xs) && xs > 0 && ys == 1.f / 256) {  // equal inputs: equal shares of 256 steps
        EXPECT_EQ((std::vector<std::uint8_t>(r->begin() + 4, r->end())), (std::vector<std::uint8_t>(4, 64 + 3)))
            << "x_scale " << xs;
      }
    }
  }
}

TEST(QLinearSoftmax, BadAttributesAreErrorsNamingTheNode) {
  struct Bad {
    Shape shape;
    bool opset;
    std::int64_t axis;
    const char* message;
  };
  for (const Bad& b : {Bad{{2, 4}, false, -1, "attribute 'opset' is required"}, Bad{{2, 4}, true, 2, "axis"},
                       Bad{{}, true, -1, "rank >= 1"}}) {
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    t.Data("x", x, b.shape);
    AddParams(*t.g, t.ins, "x", {1.f, 0}, t.dt);
    AddParams(*t.g, t.ins, "y", {1.f / 256, 0}, t.dt);
    t.Make("QLinearSoftmax");
    if (b.opset) t.node->SetAttr("opset", ir::Attribute::Int(13));
    t.node->SetAttr("axis", ir::Attribute::Int(b.axis));
    auto r = t.Run(b.shape);
    ASSERT_FALSE(r.ok()) << b.message;
    EXPECT_NE(r.status().message().find(b.message), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("qop"), std::string::npos) << r.status().ToString();
  }
}

// com.microsoft QLinearWhere against ONNX Runtime's tables written out here:
// (q - zp) * scale in float32, / z_scale, rounded half to even, + z_zp,
// saturated (a copy where X's or Y's parameters are the output's).
void CheckQWhere(DType dt, Shape sc, Shape sx, Shape sy, Shape sz, QP px, QP py, QP pz) {
  std::mt19937 rng(19);
  OneNode t;
  t.dt = dt;
  const auto cond = RandomBytes(static_cast<std::size_t>(NumElements(sc)), rng);
  std::vector<std::uint8_t> c(cond.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = cond[i] & 1;
  const auto x = RandomBytes(static_cast<std::size_t>(NumElements(sx)), rng);
  const auto y = RandomBytes(static_cast<std::size_t>(NumElements(sy)), rng);
  t.ins.push_back(t.g->AddConstant("cond", Bytes(DType::kBool, sc, c)));
  t.Data("x", x, sx);
  AddParams(*t.g, t.ins, "x", px, dt);
  t.Data("y", y, sy);
  AddParams(*t.g, t.ins, "y", py, dt);
  AddParams(*t.g, t.ins, "z", pz, dt);
  t.Make("QLinearWhere");
  auto got = t.Run(sz);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const double lo = dt == DType::kUInt8 ? 0 : -128, hi = dt == DType::kUInt8 ? 255 : 127;
  auto requant = [&](double q, QP p) {
    const float v = static_cast<float>(q - p.zp) * p.scale;
    return std::clamp(static_cast<double>(std::nearbyint(v / pz.scale)) + pz.zp, lo, hi);
  };
  // Index of output element o in a tensor of shape s broadcast to sz.
  auto index = [&](const Shape& s, std::int64_t o) {
    std::int64_t idx = 0, stride = 1;
    for (std::size_t k = sz.size(); k-- > 0;) {
      const std::int64_t coord = o % sz[k];
      o /= sz[k];
      const std::size_t j = k + s.size() - sz.size();
      if (k + s.size() >= sz.size()) {
        if (s[j] != 1) idx += coord * stride;
        stride *= s[j];
      }
    }
    return static_cast<std::size_t>(idx);
  };
  for (std::int64_t o = 0; o < NumElements(sz); ++o) {
    const double want = c[index(sc, o)] ? requant(Value(x, index(sx, o), dt), px) : requant(Value(y, index(sy, o), dt), py);
    ASSERT_EQ(Value(*got, static_cast<std::size_t>(o), dt), want) << "element " << o;
  }
}

TEST(QLinearWhere, Uint8ThreeWayBroadcast) {
  CheckQWhere(DType::kUInt8, {2, 1, 5}, {3, 5}, {2, 3, 1}, {2, 3, 5}, {0.05f, 120}, {0.07f, 100}, {0.06f, 110});
}
TEST(QLinearWhere, Int8OneSideCopied) {
  CheckQWhere(DType::kInt8, {4, 16}, {4, 16}, {16}, {4, 16}, {0.03f, -5}, {0.09f, 12}, {0.03f, -5});
}

TEST(QLinearWhere, BadInputsAreErrorsNamingTheNode) {
  for (int bad = 0; bad < 3; ++bad) {
    OneNode t;
    const std::vector<std::uint8_t> x(8);
    t.ins.push_back(t.g->AddConstant("cond", Bytes(bad == 1 ? DType::kUInt8 : DType::kBool, {8}, x)));
    t.Data("x", x, {8});
    AddParams(*t.g, t.ins, "x", {1.f, 0}, t.dt);
    t.Data("y", x, {8});
    AddParams(*t.g, t.ins, "y", {1.f, 0}, bad == 2 ? DType::kInt8 : t.dt);
    AddParams(*t.g, t.ins, "z", {1.f, 0}, t.dt);
    if (bad == 0) t.ins.back() = nullptr;
    t.Make("QLinearWhere");
    auto r = t.Run({8});
    const char* message[] = {"input 8 is missing", "input 0 (condition) must be bool", "input 6 (zero point) has type int8"};
    ASSERT_FALSE(r.ok()) << message[bad];
    EXPECT_NE(r.status().message().find(message[bad]), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("qop"), std::string::npos) << r.status().ToString();
  }
}

// com.microsoft MatMulIntegerToFloat / DynamicQuantizeMatMul against ONNX
// Runtime's kernels written out here: exact integer sums, float32(acc) *
// float32(a_scale * b_scale[n]) + bias[n]; DynamicQuantizeMatMul quantizes A
// first as DynamicQuantizeLinear defines (range widened to 0, scale (max -
// min) / 255, zero point round_even(-min / scale), q = round_even(a /
// scale) + zp, saturated).
struct ToFloatCase {
  bool dynamic = false;
  DType a_type = DType::kUInt8, b_type = DType::kInt8;
  Shape a_shape = {2, 3, 37};
  std::int64_t n = 20;
  bool per_column = true, zero_points = true, bias = true;
};

void CheckToFloat(const ToFloatCase& q) {
  std::mt19937 rng(23);
  const std::int64_t k = q.a_shape.back(), rows = NumElements(q.a_shape) / k, n = q.n, cols = q.per_column ? n : 1;
  std::vector<float> af(static_cast<std::size_t>(rows * k));
  std::vector<std::uint8_t> aq(af.size());
  if (q.dynamic) {
    std::normal_distribution<float> nd(0.4f, 1.6f);
    for (auto& v : af) v = nd(rng);
  } else {
    aq = RandomBytes(aq.size(), rng);
  }
  const auto b = RandomBytes(static_cast<std::size_t>(k * n), rng);
  std::vector<float> bs(static_cast<std::size_t>(cols)), bias(static_cast<std::size_t>(n));
  std::vector<std::uint8_t> bz(static_cast<std::size_t>(cols));
  for (std::int64_t j = 0; j < cols; ++j) {
    bs[static_cast<std::size_t>(j)] = 0.004f + 0.0003f * static_cast<float>(j);
    bz[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>(q.zero_points ? (q.b_type == DType::kUInt8 ? 126 : -2) + j % 5 : 0);
  }
  for (std::int64_t j = 0; j < n; ++j) bias[static_cast<std::size_t>(j)] = q.bias ? 0.37f * static_cast<float>(j % 7) - 1.1f : 0.f;
  const float as = 0.021f;
  const int az = q.zero_points ? (q.a_type == DType::kUInt8 ? 117 : -7) : 0;
  const Shape ps = q.per_column ? Shape{n} : Shape{};
  auto g = std::make_unique<ir::Graph>();
  ir::Value* a = g->AddValue("a", q.dynamic ? DType::kFloat32 : q.a_type, q.a_shape);
  g->inputs().push_back(a);
  std::vector<ir::Value*> ins = {a, g->AddConstant("b", Bytes(q.b_type, {k, n}, b))};
  if (!q.dynamic) ins.push_back(g->AddConstant("a_s", Tensor(DType::kFloat32, {}, std::vector<float>{as})));
  ins.push_back(g->AddConstant("b_s", Tensor(DType::kFloat32, ps, bs)));
  if (!q.dynamic) {
    ins.push_back(q.zero_points ? g->AddConstant("a_z", Bytes(q.a_type, {}, {static_cast<std::uint8_t>(az)})) : nullptr);
  }
  ins.push_back(q.zero_points ? g->AddConstant("b_z", Bytes(q.b_type, ps, bz)) : nullptr);
  if (q.bias) ins.push_back(g->AddConstant("bias", Tensor(DType::kFloat32, {n}, bias)));
  while (!ins.back()) ins.pop_back();
  ir::Value* y = g->AddValue("y");
  g->AddNode(q.dynamic ? "DynamicQuantizeMatMul" : "MatMulIntegerToFloat", "tofloat", ins, {y}, ops::kMicrosoftDomain);
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Shape ys = q.a_shape;
  ys.back() = n;
  std::vector<float> got(static_cast<std::size_t>(rows * n));
  const void* feed = q.dynamic ? static_cast<const void*>(af.data()) : aq.data();
  ASSERT_TRUE((*model)->Execute({{const_cast<void*>(feed), q.dynamic ? DType::kFloat32 : q.a_type, q.a_shape}},
                                {{got.data(), DType::kFloat32, ys}}).ok());
  // A's integers (minus its zero point) and scale.
  std::vector<std::int64_t> ai(af.size());
  float a_scale = as;
  if (q.dynamic) {
    float lo = 0.f, hi = 0.f;
    for (float v : af) lo = std::min(lo, v), hi = std::max(hi, v);
    a_scale = (hi - lo) / 255.f;
    const double zp = std::nearbyint(std::clamp(0.0 - lo / a_scale, 0.0, 255.0));
    for (std::size_t i = 0; i < af.size(); ++i) {
      ai[i] = static_cast<std::int64_t>(std::clamp(std::nearbyint(af[i] / a_scale) + zp, 0.0, 255.0) - zp);
    }
  } else {
    for (std::size_t i = 0; i < aq.size(); ++i) ai[i] = static_cast<std::int64_t>(Value(aq, i, q.a_type)) - az;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      const std::size_t c = static_cast<std::size_t>(q.per_column ? j : 0);
      std::int64_t acc = 0;
      for (std::int64_t t = 0; t < k; ++t) {
        acc += ai[static_cast<std::size_t>(r * k + t)] *
               (static_cast<std::int64_t>(Value(b, static_cast<std::size_t>(t * n + j), q.b_type)) -
                static_cast<std::int64_t>(Value(bz, c, q.b_type)));
      }
      const float want = static_cast<float>(acc) * (a_scale * bs[c]) + bias[static_cast<std::size_t>(j)];
      ASSERT_EQ(got[static_cast<std::size_t>(r * n + j)], want) << "row " << r << " column " << j;
    }
  }
}

TEST(MatMulIntegerToFloat, Uint8Int8BatchedPerColumnWithBias) { CheckToFloat({}); }
TEST(MatMulIntegerToFloat, Int8PerTensorNoZeroPointsNoBias) {
  ToFloatCase q;
  q.a_type = DType::kInt8;
  q.a_shape = {5, 64};
  q.per_column = q.zero_points = q.bias = false;
  CheckToFloat(q);
}
TEST(DynamicQuantizeMatMul, Int8WeightsWithBias) {
  ToFloatCase q;
  q.dynamic = true;
  q.a_shape = {2, 8, 64};
  q.n = 32;
  q.per_column = q.zero_points = false;
  CheckToFloat(q);
}
TEST(DynamicQuantizeMatMul, Uint8PerColumnWithZeroPoints) {
  ToFloatCase q;
  q.dynamic = true;
  q.b_type = DType::kUInt8;
  q.a_shape = {4, 128};
  q.n = 48;
  q.bias = false;
  CheckToFloat(q);
}

TEST(MatMulIntegerToFloat, BadParametersAreErrorsNamingTheNode) {
  struct Bad {
    const char* what;
    std::function<void(ir::Graph&, std::vector<ir::Value*>&)> edit;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {"bias of 3 for 4 columns", [](ir::Graph& g, std::vector<ir::Value*>& ins) {
         ins.resize(7, nullptr);
         ins[6] = g.AddConstant("bias3", Tensor(DType::kFloat32, {3}, std::vector<float>(3)));
       }, "input 6 (bias) must have shape [4]"},
      {"a_scale per row", [](ir::Graph& g, std::vector<ir::Value*>& ins) {
         ins[2] = g.AddConstant("a_s2", Tensor(DType::kFloat32, {2}, std::vector<float>{1.f, 1.f}));
       }, "input 2 (a_scale) must be a scalar"},
      {"b_zero_point per column, b_scale per tensor", [](ir::Graph& g, std::vector<ir::Value*>& ins) {
         ins.resize(6, nullptr);
         ins[5] = g.AddConstant("b_z4", Bytes(DType::kInt8, {4}, std::vector<std::uint8_t>(4)));
       }, "per column, they must match"},
      {"a_zero_point of B's type", [](ir::Graph& g, std::vector<ir::Value*>& ins) {
         ins.resize(5, nullptr);
         ins[4] = g.AddConstant("a_z8", Bytes(DType::kInt8, {}, {0}));
       }, "input 4 (a_zero_point) has type int8"},
      {"int32 B", [](ir::Graph& g, std::vector<ir::Value*>& ins) {
         ins[1] = g.AddConstant("b32", Tensor(DType::kInt32, {3, 4}, std::vector<std::int32_t>(12)));
       }, "input 1 (B) has type int32"},
  };
  for (const Bad& t : bad) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* a = g->AddValue("a", DType::kUInt8, {2, 3});
    g->inputs().push_back(a);
    std::vector<ir::Value*> ins = {a, g->AddConstant("b", Bytes(DType::kInt8, {3, 4}, std::vector<std::uint8_t>(12))),
                                   g->AddConstant("a_s", Tensor(DType::kFloat32, {}, std::vector<float>{1.f})),
                                   g->AddConstant("b_s", Tensor(DType::kFloat32, {}, std::vector<float>{1.f}))};
    t.edit(*g, ins);
    ir::Value* y = g->AddValue("y");
    g->AddNode("MatMulIntegerToFloat", "tofloat_node", ins, {y}, ops::kMicrosoftDomain);
    g->outputs().push_back(y);
    test::TempDir dir;
    auto r = CompileAndLoad(std::move(g), dir);
    ASSERT_FALSE(r.ok()) << t.what;
    EXPECT_NE(r.status().message().find(t.message), std::string::npos) << t.what << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find("tofloat_node"), std::string::npos) << t.what << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace kiln
