// Dynamic quantization as ONNX Runtime's quantize_dynamic writes it:
// ConvInteger / MatMulInteger -> Cast(float) -> Mul(x_scale * w_scale) ->
// Add(bias) -> activation, fused into one node by fuse-integer-rescale
// (kiln.rescale). Results are compared bit for bit with the graph's
// arithmetic done here: the exact integer sum, converted to float32 once,
// times the float32 scale, plus the bias, then the activation, each step
// rounded in float32. Sums pass 2^24, so a route that rounded the sum
// before the Cast (or fused the multiply and add) would show. The same
// tests run with ONEDNN_MAX_CPU_ISA lowered (unit_int8_isa_*), where the
// int8 primitive is not exact and the fallback (integer kernel + epilogue)
// runs instead. DynamicQuantizeLinear's vectorized quantization is checked
// against the definition too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "api/compiler.h"
#include "backends/cpu/kernels/quant.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/fused_attrs.h"
#include "node_runner.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;
using test::Tensor;

int CountOp(const format::CompiledModel& cm, const std::string& op) {
  int n = 0;
  for (const auto& node : cm.graph->nodes()) n += node->op_type() == op;
  return n;
}

const ir::Node* FindOp(const format::CompiledModel& cm, const std::string& op) {
  for (const auto& node : cm.graph->nodes()) {
    if (node->op_type() == op) return node.get();
  }
  return nullptr;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

enum class Act { kNone, kRelu, kClip, kLeakyRelu };

struct RescaleCase {
  std::int64_t c = 192, m = 12, group = 1;
  bool per_channel_scale = true, bias = true;
  Act act = Act::kRelu;
  bool channels_last = true;  // the layout pass on (else disabled)
  bool scale_after = false;   // Mul(S, cast) instead of Mul(cast, S)
  // The result also feeds a DynamicQuantizeLinear (whose range the fused
  // convolution reports as it writes: device::ValueRange), checked against
  // the definition applied to the expected float results.
  bool quantize_after = false;
};

// x [2, c, 7, 6] uint8, a 3x3 ConvInteger (pad 1, stride 1) with int8
// weights, then the rescale chain of quantize_dynamic.
void CheckRescaledConvInteger(const RescaleCase& rc) {
  std::mt19937 rng(21);
  const std::int64_t n = 2, c = rc.c, m = rc.m, h = 7, w = 6, k = 3, pad = 1, cg = c / rc.group;
  std::vector<std::uint8_t> x(n * c * h * w);
  for (auto& v : x) v = static_cast<std::uint8_t>(rng() % 256);
  // Half the output channels with weights of one sign (sums far past 2^24
  // when the zero point is 0), half mixed.
  std::vector<std::int8_t> wt(m * cg * k * k);
  for (std::int64_t o = 0; o < m; ++o)
    for (std::int64_t i = 0; i < cg * k * k; ++i) {
      wt[o * cg * k * k + i] = static_cast<std::int8_t>(o % 2 ? 100 + static_cast<int>(rng() % 28)
                                                              : static_cast<int>(rng() % 255) - 127);
    }
  std::vector<float> ws(rc.per_channel_scale ? m : 1), bias(m);
  for (auto& v : ws) v = 1e-3f * (1.f + static_cast<float>(rng() % 1000) / 77.f);
  for (auto& v : bias) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 37.f;

  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kUInt8, {n, c, h, w});
  ir::Value* xs = g->AddValue("xs", DType::kFloat32, {});
  ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
  g->inputs() = {xv, xs, zv};
  ir::Value* acc = g->AddValue("acc");
  ir::Node* ci = g->AddNode("ConvInteger", "ci",
                            {xv, g->AddConstant("w", Tensor(DType::kInt8, {m, cg, k, k}, wt)), zv,
                             g->AddConstant("wzp", Tensor(DType::kInt8, {}, std::vector<std::int8_t>{0}))},
                            {acc});
  ci->SetAttr("pads", ir::Attribute::Ints({pad, pad, pad, pad}));
  ci->SetAttr("group", ir::Attribute::Int(rc.group));
  ir::Value* f = g->AddValue("f");
  g->AddNode("Cast", "cast", {acc}, {f})->SetAttr("to", ir::Attribute::Int(1));
  ir::Value* s = g->AddValue("s");
  const Shape ws_shape = rc.per_channel_scale ? Shape{m, 1, 1} : Shape{};
  g->AddNode("Mul", "scale_mul", {xs, g->AddConstant("ws", Tensor(DType::kFloat32, ws_shape, ws))}, {s});
  ir::Value* scaled = g->AddValue("scaled");
  g->AddNode("Mul", "rescale", rc.scale_after ? std::vector<ir::Value*>{s, f} : std::vector<ir::Value*>{f, s}, {scaled});
  ir::Value* cur = scaled;
  if (rc.bias) {
    ir::Value* b = g->AddValue("biased");
    g->AddNode("Add", "bias_add", {cur, g->AddConstant("b", Tensor(DType::kFloat32, {m, 1, 1}, bias))}, {b});
    cur = b;
  }
  const float lo = -3.5f, hi = 40.25f;
  if (rc.act != Act::kNone) {
    ir::Value* a = g->AddValue("act");
    if (rc.act == Act::kRelu) {
      g->AddNode("Relu", "relu", {cur}, {a});
    } else if (rc.act == Act::kLeakyRelu) {
      g->AddNode("LeakyRelu", "leaky", {cur}, {a})->SetAttr("alpha", ir::Attribute::Float(0.1f));
    } else {
      g->AddNode("Clip", "clip",
                 {cur, g->AddConstant("lo", Tensor(DType::kFloat32, {}, std::vector<float>{lo})),
                  g->AddConstant("hi", Tensor(DType::kFloat32, {}, std::vector<float>{hi}))},
                 {a});
    }
    cur = a;
  }
  g->outputs().push_back(cur);
  if (rc.quantize_after) {
    ir::Value *q = g->AddValue("q"), *qs = g->AddValue("qs"), *qz = g->AddValue("qz");
    g->AddNode("DynamicQuantizeLinear", "dql", {cur}, {q, qs, qz});
    g->outputs().push_back(q);
    g->outputs().push_back(qs);
    g->outputs().push_back(qz);
  }

  test::TempDir dir;
  format::CompiledModel cm;
  CompileOptions opts;
  if (!rc.channels_last) opts.passes.disabled.insert("channels-last");
  auto model = CompileAndLoad(std::move(g), dir, &cm, opts);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // One node does it all: no Cast, no rescaling Mul, no Add or activation.
  const ir::Node* fused = FindOp(cm, "ConvInteger");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->GetInt(ops::kRescaleAttr, 0), 1);
  EXPECT_EQ(fused->GetInt(ops::kNhwcAttr, 0), rc.channels_last ? 1 : 0);
  EXPECT_EQ(CountOp(cm, "Cast"), 0);
  EXPECT_EQ(CountOp(cm, "Mul"), 1);  // x_scale * w_scale, computed per run
  EXPECT_EQ(CountOp(cm, "Add") + CountOp(cm, "Relu") + CountOp(cm, "Clip") + CountOp(cm, "LeakyRelu"), 0);

  const std::int64_t oh = h, ow = w;
  for (auto [zp, xscale] : {std::pair<std::uint8_t, float>{0, 0.0123f}, {131, 0.5f}, {255, 3.25e-2f}}) {
    std::vector<float> out(n * m * oh * ow, -1.f), wants(out.size());
    std::vector<std::uint8_t> q(out.size());
    float qs = -1.f;
    std::uint8_t qz = 0;
    std::vector<TensorRef> outs = {TensorRef::Of(out.data(), {n, m, oh, ow})};
    if (rc.quantize_after) {
      outs.push_back({q.data(), DType::kUInt8, {n, m, oh, ow}});
      outs.push_back(TensorRef::Of(&qs, {}));
      outs.push_back({&qz, DType::kUInt8, {}});
    }
    ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {n, c, h, w}}, TensorRef::Of(&xscale, {}),
                                   {&zp, DType::kUInt8, {}}},
                                  outs).ok());
    bool big = false;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t oc = 0; oc < m; ++oc)
        for (std::int64_t i = 0; i < oh; ++i)
          for (std::int64_t j = 0; j < ow; ++j) {
            std::int64_t sum = 0;
            const std::int64_t gi = oc / (m / rc.group);
            for (std::int64_t q = 0; q < cg; ++q)
              for (std::int64_t ki = 0; ki < k; ++ki)
                for (std::int64_t kj = 0; kj < k; ++kj) {
                  const std::int64_t r = i - pad + ki, t = j - pad + kj;
                  if (r < 0 || r >= h || t < 0 || t >= w) continue;  // padding: x - zp = 0
                  sum += (x[((b * c + gi * cg + q) * h + r) * w + t] - zp) * wt[((oc * cg + q) * k + ki) * k + kj];
                }
            big = big || std::llabs(sum) > (1 << 24);
            // The graph's float32 steps, one rounding each.
            const volatile float sc = xscale * ws[rc.per_channel_scale ? oc : 0];
            volatile float v = static_cast<float>(static_cast<std::int32_t>(sum));
            v = v * sc;
            if (rc.bias) v = v + bias[oc];
            float want = v;
            if (rc.act == Act::kRelu) want = want < 0.f ? 0.f : want;
            if (rc.act == Act::kClip) want = std::min(std::max(want, lo), hi);
            if (rc.act == Act::kLeakyRelu && want < 0.f) {
              const volatile float leak = 0.1f * want;
              want = leak;
            }
            const float got = out[((b * m + oc) * oh + i) * ow + j];
            wants[((b * m + oc) * oh + i) * ow + j] = want;
            ASSERT_TRUE(SameBits(got, want) || (want == 0.f && got == 0.f))
                << "zp " << int(zp) << " at " << b << "," << oc << "," << i << "," << j << ": " << got << " vs "
                << want << " (sum " << sum << ")";
          }
    if (zp == 0 && rc.c >= 192) EXPECT_TRUE(big) << "the case should hold sums past 2^24";
    if (rc.quantize_after) {
      // ONNX DynamicQuantizeLinear on the expected results.
      float lo_v = 0.f, hi_v = 0.f;
      for (float v : wants) {
        lo_v = v < lo_v ? v : lo_v;
        hi_v = v > hi_v ? v : hi_v;
      }
      const float want_s = (hi_v - lo_v) / 255.f;
      const float want_z = want_s > 0 ? std::min(255.f, std::max(0.f, std::nearbyint(0.f - lo_v / want_s))) : 0.f;
      ASSERT_TRUE(SameBits(qs, want_s)) << "zp " << int(zp) << ": scale " << qs << " vs " << want_s;
      ASSERT_EQ(qz, static_cast<std::uint8_t>(want_z)) << "zp " << int(zp);
      for (std::size_t e = 0; e < wants.size(); ++e) {
        const float r = want_s > 0 ? std::nearbyint(wants[e] / want_s) + want_z : 0.f;
        ASSERT_EQ(q[e], static_cast<std::uint8_t>(std::min(255.f, std::max(0.f, r)))) << "zp " << int(zp) << " at " << e;
      }
    }
  }
}

TEST(ConvInteger, RescaledChannelsLastIsTheGraphsBitForBit) { CheckRescaledConvInteger({}); }
// The convolution reports its output's range to the DynamicQuantizeLinear
// after it: channels-last rows in blocks of 8 (16 channels) and not (12),
// and NCHW planes.
TEST(ConvInteger, RescaledThenDynamicallyQuantizedMatchesTheDefinition) {
  for (std::int64_t m : {16, 12}) {
    RescaleCase rc;
    rc.m = m;
    rc.quantize_after = true;
    CheckRescaledConvInteger(rc);
    rc.channels_last = false;
    CheckRescaledConvInteger(rc);
    rc.act = Act::kNone;  // negative values too
    CheckRescaledConvInteger(rc);
  }
}
// Channel counts whose rows do not fill whole vectors: with AVX-512 the
// rows are rescaled as one run with the factors tiled to lcm(channels, 16)
// values (24: 48, 40: 80, 129: 2064), or row by row where that passes 4096
// values (257); each then quantized as DynamicQuantizeLinear defines.
TEST(ConvInteger, RescaledChannelsLastAtChannelCountsOffTheVectorWidth) {
  for (std::int64_t m : {24, 40, 129, 257}) {
    RescaleCase rc;
    rc.c = 16;
    rc.m = m;
    rc.act = m == 40 ? Act::kLeakyRelu : Act::kClip;
    rc.quantize_after = true;
    CheckRescaledConvInteger(rc);
  }
}
// Sums that stay within 2^24 (16 input channels): where oneDNN's int8 is
// not exact (unit_int8_isa_AVX2 / _AVX) the convolution runs in float32 on
// x - x_zp, channels-last and NCHW, grouped too, with the range reported
// to a DynamicQuantizeLinear.
TEST(ConvInteger, RescaledWithSumsExactInFloat) {
  for (bool channels_last : {true, false}) {
    for (std::int64_t group : {1, 2}) {
      RescaleCase rc;
      rc.c = 16;
      rc.m = 24;
      rc.group = group;
      rc.channels_last = channels_last;
      rc.quantize_after = true;
      rc.act = group == 1 ? Act::kRelu : Act::kLeakyRelu;
      CheckRescaledConvInteger(rc);
    }
  }
}
TEST(ConvInteger, RescaledNchwIsTheGraphsBitForBit) {
  RescaleCase rc;
  rc.channels_last = false;
  CheckRescaledConvInteger(rc);
}
TEST(ConvInteger, RescaledOneScaleNoBiasClipGroupedScaleFirst) {
  RescaleCase rc;
  rc.c = 8;
  rc.m = 6;
  rc.group = 2;
  rc.per_channel_scale = false;
  rc.bias = false;
  rc.act = Act::kClip;
  rc.scale_after = true;
  CheckRescaledConvInteger(rc);
}
TEST(ConvInteger, RescaledLeakyReluNchw) {
  RescaleCase rc;
  rc.act = Act::kLeakyRelu;
  rc.channels_last = false;
  CheckRescaledConvInteger(rc);
  rc.channels_last = true;
  CheckRescaledConvInteger(rc);
}
TEST(ConvInteger, RescaledDepthwise) {
  RescaleCase rc;
  rc.c = 16;
  rc.m = 16;
  rc.group = 16;
  rc.act = Act::kNone;
  CheckRescaledConvInteger(rc);
}

// Near misses stay as the graph says: a Cast to int64 (not float), and a
// Mul whose other operand broadcasts along the width (not per channel).
TEST(ConvInteger, RescaleNearMissesAreNotFused) {
  for (int variant : {0, 1}) {
    const std::int64_t c = 4, m = 3, h = 5, w = 3;
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kUInt8, {1, c, h, w});
    ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
    g->inputs() = {xv, zv};
    ir::Value* acc = g->AddValue("acc");
    std::vector<std::int8_t> wt(m * c);
    for (std::size_t i = 0; i < wt.size(); ++i) wt[i] = static_cast<std::int8_t>(static_cast<int>(i % 7) - 3);
    g->AddNode("ConvInteger", "ci", {xv, g->AddConstant("w", Tensor(DType::kInt8, {m, c, 1, 1}, wt)), zv}, {acc});
    ir::Value* f = g->AddValue("f");
    g->AddNode("Cast", "cast", {acc}, {f})->SetAttr("to", ir::Attribute::Int(variant == 0 ? 7 : 1));
    ir::Value* y = g->AddValue("y");
    if (variant == 0) {
      g->AddNode("Mul", "mul", {f, g->AddConstant("s", Tensor(DType::kInt64, {}, std::vector<std::int64_t>{3}))}, {y});
    } else {
      g->AddNode("Mul", "mul", {f, g->AddConstant("s", Tensor(DType::kFloat32, {w}, std::vector<float>{1.f, 2.f, 3.f}))},
                 {y});
    }
    g->outputs().push_back(y);
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(std::move(g), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOp(cm, "Cast"), 1) << variant;
    EXPECT_EQ(FindOp(cm, "ConvInteger")->GetInt(ops::kRescaleAttr, 0), 0) << variant;
  }
}

// MatMulInteger [2, 5, 300] x [300, 24] -> Cast -> Mul(a_scale * b_scale[n])
// -> Add(bias[n]): per column.
// 24 columns with no activation, 21 (a vector's tail) with Relu.
TEST(MatMulInteger, RescaledIsTheGraphsBitForBit) {
 for (const auto& [nn, relu] : {std::pair<std::int64_t, bool>{24, false}, {21, true}}) {
  SCOPED_TRACE(nn);
  std::mt19937 rng(22);
  const std::int64_t b0 = 2, rows = 5, k = 300;
  std::vector<std::uint8_t> a(b0 * rows * k);
  for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 256);
  std::vector<std::int8_t> bw(k * nn);
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < nn; ++j) {
      bw[i * nn + j] = static_cast<std::int8_t>(j % 2 ? 120 : static_cast<int>(rng() % 255) - 127);
    }
  std::vector<float> bs(nn), bias(nn);
  for (auto& v : bs) v = 1e-3f * (1.f + static_cast<float>(rng() % 1000) / 91.f);
  for (auto& v : bias) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 41.f;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* av = g->AddValue("a", DType::kUInt8, {b0, rows, k});
  ir::Value* as = g->AddValue("as", DType::kFloat32, {});
  ir::Value* zv = g->AddValue("azp", DType::kUInt8, {});
  g->inputs() = {av, as, zv};
  ir::Value* acc = g->AddValue("acc");
  g->AddNode("MatMulInteger", "mi", {av, g->AddConstant("b", Tensor(DType::kInt8, {k, nn}, bw)), zv}, {acc});
  ir::Value* f = g->AddValue("f");
  g->AddNode("Cast", "cast", {acc}, {f})->SetAttr("to", ir::Attribute::Int(1));
  ir::Value* s = g->AddValue("s");
  g->AddNode("Mul", "scale_mul", {as, g->AddConstant("bs", Tensor(DType::kFloat32, {nn}, bs))}, {s});
  ir::Value* scaled = g->AddValue("scaled");
  g->AddNode("Mul", "rescale", {f, s}, {scaled});
  ir::Value* y = g->AddValue("y");
  g->AddNode("Add", "bias_add", {scaled, g->AddConstant("bias", Tensor(DType::kFloat32, {1, nn}, bias))}, {y});
  if (relu) {
    ir::Value* r = g->AddValue("r");
    g->AddNode("Relu", "relu", {y}, {r});
    y = r;
  }
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(FindOp(cm, "MatMulInteger")->GetInt(ops::kRescaleAttr, 0), 1);
  EXPECT_EQ(CountOp(cm, "Cast") + CountOp(cm, "Add") + CountOp(cm, "Relu"), 0);
  for (auto [zp, ascale] : {std::pair<std::uint8_t, float>{0, 0.02f}, {200, 1.5f}}) {
    std::vector<float> out(b0 * rows * nn, -1.f);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {b0, rows, k}}, TensorRef::Of(&ascale, {}),
                                   {&zp, DType::kUInt8, {}}},
                                  {TensorRef::Of(out.data(), {b0, rows, nn})}).ok());
    for (std::int64_t r = 0; r < b0 * rows; ++r)
      for (std::int64_t j = 0; j < nn; ++j) {
        std::int64_t sum = 0;
        for (std::int64_t i = 0; i < k; ++i) sum += (a[r * k + i] - zp) * bw[i * nn + j];
        const volatile float sc = ascale * bs[j];
        volatile float v = static_cast<float>(static_cast<std::int32_t>(sum));
        v = v * sc;
        v = v + bias[j];
        const float want = relu && v < 0.f ? 0.f : static_cast<float>(v);
        ASSERT_TRUE(SameBits(out[r * nn + j], want)) << "zp " << int(zp) << " at " << r << "," << j << ": "
                                                     << out[r * nn + j] << " vs " << want;
      }
  }
 }
}

// A QDQ transformer's projection after fuse-qdq: QLinearMatMul ->
// DequantizeLinear (its own y_scale / y_zero_point) -> Add(bias [N]) becomes
// one QLinearMatMul (kiln.dequantize) with the same results as the three
// kernels, each tested against its definition elsewhere (QLinearMatMul.*,
// the DequantizeLinear and Add node tests); a DequantizeLinear with another
// scale is a near miss.
void CheckDequantizedQLinearMatMul(bool same_scale) {
  std::mt19937 rng(24);
  const std::int64_t rows = 6, k = 40, nn = 24;
  std::vector<std::uint8_t> a(rows * k);
  for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 256);
  std::vector<std::int8_t> bw(k * nn);
  for (auto& v : bw) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> bs(nn), bias(nn);
  for (auto& v : bs) v = 1e-3f * (1.f + static_cast<float>(rng() % 100) / 9.f);
  for (auto& v : bias) v = static_cast<float>(static_cast<int>(rng() % 201) - 100) / 13.f;
  auto build = [&] {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* av = g->AddValue("a", DType::kUInt8, {2, 3, k});
    g->inputs() = {av};
    auto f32 = [&](const char* n, float v) { return g->AddConstant(n, Tensor(DType::kFloat32, {}, std::vector<float>{v})); };
    ir::Value* ys = f32("ys", 0.37f);
    ir::Value* yz = g->AddConstant("yz", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{131}));
    ir::Value* q = g->AddValue("q");
    g->AddNode("QLinearMatMul", "qmm",
               {av, f32("as", 0.02f), g->AddConstant("az", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{120})),
                g->AddConstant("b", Tensor(DType::kInt8, {k, nn}, bw)), g->AddConstant("bs", Tensor(DType::kFloat32, {nn}, bs)),
                g->AddConstant("bz", Tensor(DType::kInt8, {nn}, std::vector<std::int8_t>(nn, 0))), ys, yz},
               {q});
    ir::Value* f = g->AddValue("f");
    g->AddNode("DequantizeLinear", "dq", {q, same_scale ? ys : f32("ys2", 0.38f), yz}, {f});
    ir::Value* y = g->AddValue("y");
    g->AddNode("Add", "bias_add", {f, g->AddConstant("bias", Tensor(DType::kFloat32, {nn}, bias))}, {y});
    g->outputs().push_back(y);
    return g;
  };
  test::TempDir dir_fused, dir_plain;
  format::CompiledModel fused_cm, plain_cm;
  CompileOptions plain_opts;
  plain_opts.passes.disabled.insert("fuse-integer-rescale");
  auto fused = CompileAndLoad(build(), dir_fused, &fused_cm);
  auto plain = CompileAndLoad(build(), dir_plain, &plain_cm, plain_opts);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(FindOp(fused_cm, "QLinearMatMul")->GetInt(ops::kDequantizeAttr, 0), same_scale ? 1 : 0);
  EXPECT_EQ(CountOp(fused_cm, "DequantizeLinear") + CountOp(fused_cm, "Add"), same_scale ? 0 : 2);
  EXPECT_EQ(CountOp(plain_cm, "DequantizeLinear") + CountOp(plain_cm, "Add"), 2);
  std::vector<float> y1(rows * nn, -1.f), y2(rows * nn, -2.f);
  ASSERT_TRUE((*fused)->Execute({{a.data(), DType::kUInt8, {2, 3, k}}}, {TensorRef::Of(y1.data(), {2, 3, nn})}).ok());
  ASSERT_TRUE((*plain)->Execute({{a.data(), DType::kUInt8, {2, 3, k}}}, {TensorRef::Of(y2.data(), {2, 3, nn})}).ok());
  for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_TRUE(SameBits(y1[i], y2[i])) << i << ": " << y1[i] << " vs " << y2[i];
  // And the dequantized values lie on the output grid: (q - 131) * 0.37 + bias.
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < nn && same_scale; ++j) {
      const float steps = (y1[r * nn + j] - bias[j]) / 0.37f + 131.f;
      EXPECT_NEAR(steps, std::nearbyint(steps), 1e-3) << r << "," << j;
    }
}
TEST(QLinearMatMul, DequantizedOutputFusesWithItsBias) { CheckDequantizedQLinearMatMul(true); }
TEST(QLinearMatMul, DequantizeWithAnotherScaleIsNotFused) { CheckDequantizedQLinearMatMul(false); }

// DynamicQuantizeLinear on 1000 values (the vectorized path and its tail):
// scale = (max(0, max x) - min(0, min x)) / 255, zero point =
// saturate(round(-min / scale)), y = saturate(round(x / scale) + zp), ties
// to even, as ONNX defines it; with values exactly on ties, and NaN (which
// becomes the zero point, as ONNX Runtime's quantization gives it).
TEST(DynamicQuantize, VectorizedQuantizationMatchesTheDefinition) {
  const std::int64_t count = 1000;
  std::vector<float> x(count);
  std::mt19937 rng(23);
  for (std::int64_t i = 0; i < count; ++i) x[i] = static_cast<float>(static_cast<int>(rng() % 20001) - 7000) / 997.f;
  x[3] = -7000.f / 997.f * 1.01f;  // the minimum
  x[500] = 13000.f / 997.f * 1.02f;  // the maximum
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {count});
  g->inputs() = {xv};
  ir::Value* y = g->AddValue("y");
  ir::Value* ys = g->AddValue("ys");
  ir::Value* yz = g->AddValue("yz");
  g->AddNode("DynamicQuantizeLinear", "dq", {xv}, {y, ys, yz});
  g->outputs() = {y, ys, yz};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const float mn = std::min(0.f, *std::min_element(x.begin(), x.end()));
  const float mx = std::max(0.f, *std::max_element(x.begin(), x.end()));
  const float scale = (mx - mn) / 255.f;
  const float zp = std::min(255.f, std::max(0.f, std::nearbyint((0.f - mn) / scale)));
  // Exact ties: k + 0.5 steps from zero.
  for (int t = 0; t < 40; ++t) x[100 + t] = (static_cast<float>(t - 20) + 0.5f) * scale;
  x[700] = std::numeric_limits<float>::quiet_NaN();  // skipped by the range, quantized to the zero point
  std::vector<std::uint8_t> out(count);
  float got_scale = 0;
  std::uint8_t got_zp = 0;
  const std::vector<float>& xr = x;
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xr.data(), {count})},
                                {{out.data(), DType::kUInt8, {count}}, TensorRef::Of(&got_scale, {}),
                                 {&got_zp, DType::kUInt8, {}}}).ok());
  EXPECT_TRUE(SameBits(got_scale, scale)) << got_scale << " vs " << scale;
  EXPECT_EQ(got_zp, static_cast<std::uint8_t>(zp));
  for (std::int64_t i = 0; i < count; ++i) {
    float q = xr[i] / scale;
    q = q != q ? 0.f : std::nearbyint(q);
    const float want = std::min(255.f, std::max(0.f, q + zp));
    ASSERT_EQ(out[i], static_cast<std::uint8_t>(want)) << "at " << i << " x " << xr[i];
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// count values for scale s: each tie (k + 0.5) * s for k in [-300, 299]
// with the 4 floats either side; special values (NaN, infinities, zeros,
// quotients past the bounds, 2^24 and int32) each alone in an aligned
// group of 64 among values a quarter from an integer quotient; then random
// values within 400 s of 0.
std::vector<float> ValuesAtTies(float s, std::int64_t count, std::mt19937& rng) {
  std::vector<float> x;
  for (int k = -300; k <= 299 && static_cast<std::int64_t>(x.size()) + 9 <= count - 64; ++k) {
    const float t = (static_cast<float>(k) + 0.5f) * s;  // at (or next to) a tie
    float up = t, down = t;
    x.push_back(t);
    for (int u = 0; u < 4; ++u) {
      up = std::nextafter(up, INFINITY);
      down = std::nextafter(down, -INFINITY);
      x.push_back(up);
      x.push_back(down);
    }
  }
  // Each special value alone among values a quarter from an integer
  // quotient (no tie near), in its own aligned group of 64 (the vector
  // loop takes 64 at a time and handles a group with any tie apart).
  auto safe = [&] { return (static_cast<float>(static_cast<int>(rng() % 601) - 300) + 0.25f) * s; };
  while (x.size() % 64 != 0) x.push_back(safe());
  std::vector<float> special = {NAN, INFINITY, -INFINITY, 0.f, -0.f, 3e38f, -3e38f, 1e-40f};
  // Quotients past the bounds, past 2^24 and past int32's range.
  for (float m : {600.f, -600.f, 1e6f, -1e6f, 2e7f, -2e7f, 5e9f, -5e9f}) special.push_back(m * s);
  for (float v : special) {
    x.push_back(v);
    for (int u = 0; u < 63; ++u) x.push_back(safe());
  }
  while (static_cast<std::int64_t>(x.size()) < count) {
    x.push_back((static_cast<float>(rng() % 2000001) / 1000000.f - 1.f) * 400.f * s);
  }
  return x;
}

// QuantizeLinear (and DynamicQuantizeLinear, the same loop) against the
// definition: fl(x / s), NaN to 0, clamped to the type's range minus the
// zero point, rounded to nearest even, plus the zero point. Where AVX-512
// is present the loop multiplies by fl(1/s) and divides only near a tie
// (docs/design.md): the values here sit at, and a few ulps around, every
// tie k + 0.5 within the range and past it, for scales of many magnitudes
// and mantissas, both types and extreme zero points; plus random values,
// quotients beyond 2^24 and int32, NaN, infinities and signed zeros.
template <typename Q>
void CheckQuantizeAtTies(DType qt) {
  std::vector<float> xs;
  auto g = std::make_unique<ir::Graph>();
  const std::int64_t count = 16 * 640;  // filled per scale below
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {count});
  ir::Value* sv = g->AddValue("s", DType::kFloat32, {});
  ir::Value* zv = g->AddValue("z", qt, {});
  g->inputs() = {xv, sv, zv};
  ir::Value* y = g->AddValue("y");
  g->AddNode("QuantizeLinear", "q", {xv, sv, zv}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::mt19937 rng(5);
  const std::vector<float> scales = {0.0123f, 1.f / 3.f, 0.1f, 3.25e-2f, 7.f, 1e-3f, 0x1p-10f, 0.7071068f,
                                     1.2345678e-5f, 250.f, 0.017f, 0x1.fffffep-3f};
  const std::vector<int> zps = std::is_same_v<Q, std::uint8_t> ? std::vector<int>{0, 128, 255, 37}
                                                                 : std::vector<int>{-128, 0, 127, -5};
  for (float s : scales) {
    const std::vector<float> x = ValuesAtTies(s, count, rng);
    for (int zp : zps) {
      std::vector<Q> out(count);
      Q z = static_cast<Q>(zp);
      ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {count}), TensorRef::Of(&s, {}), {&z, qt, {}}},
                                    {{out.data(), qt, {count}}}).ok());
      const float lo = static_cast<float>(std::numeric_limits<Q>::min()) - static_cast<float>(zp);
      const float hi = static_cast<float>(std::numeric_limits<Q>::max()) - static_cast<float>(zp);
      for (std::int64_t i = 0; i < count; ++i) {
        float q = x[i] / s;
        q = q != q ? 0.f : std::min(std::max(q, lo), hi);
        const Q want = static_cast<Q>(static_cast<int>(std::nearbyint(q)) + zp);
        ASSERT_EQ(static_cast<int>(out[i]), static_cast<int>(want))
            << "scale " << s << " zero point " << zp << " x " << x[i] << " (x / s = " << x[i] / s << ")";
      }
    }
  }
}

TEST(QuantizeLinear, DivisionFreeRoundingMatchesTheDefinitionAtTies) {
  CheckQuantizeAtTies<std::uint8_t>(DType::kUInt8);
  CheckQuantizeAtTies<std::int8_t>(DType::kInt8);
}

// kiln.quantize_input's quantizers (kernels/quant.h) on the same values:
// DynamicQuantizeU8 (the uint8 q), QuantizeCenteredInt16 and
// QuantizeCenteredFloat (q - zp) against the definition, at every offset
// of a vector (tails), and a scale not > 0 (every q 0).
TEST(DynamicQuantize, CenteredQuantizationMatchesTheDefinitionAtTies) {
  std::mt19937 rng(6);
  const std::int64_t count = 16 * 640;
  for (float s : {0.0123f, 1.f / 3.f, 0.1f, 7.f, 1e-3f, 0.7071068f, 1.2345678e-5f, 0.017f, 0.f, -1.f}) {
    const std::vector<float> x = ValuesAtTies(s > 0 ? s : 0.5f, count, rng);
    for (int zp : {0, 128, 255, 37}) {
      for (std::int64_t off : {0, 3}) {
        const std::int64_t n = count - off;
        std::vector<std::uint8_t> q(n);
        std::vector<std::int16_t> c16(n);
        std::vector<float> cf(n);
        cpu::DynamicQuantizeU8(x.data() + off, q.data(), n, s, zp);
        cpu::QuantizeCenteredInt16(x.data() + off, c16.data(), n, s, zp);
        cpu::QuantizeCenteredFloat(x.data() + off, cf.data(), n, s, zp);
        for (std::int64_t i = 0; i < n; ++i) {
          const float v = x[off + i];
          int want = 0;
          if (s > 0) {
            float d = v / s;
            d = d != d ? 0.f : std::min(std::max(d, -static_cast<float>(zp)), 255.f - static_cast<float>(zp));
            want = static_cast<int>(std::nearbyint(d)) + zp;
          }
          ASSERT_EQ(static_cast<int>(q[i]), want) << "scale " << s << " zp " << zp << " x " << v;
          ASSERT_EQ(static_cast<int>(c16[i]), want - zp) << "scale " << s << " zp " << zp << " x " << v;
          ASSERT_EQ(cf[i], static_cast<float>(want - zp)) << "scale " << s << " zp " << zp << " x " << v;
        }
      }
    }
  }
}

// fuse-quantize-input: DynamicQuantizeLinear -> rescaled ConvInteger /
// MatMulInteger becomes one node that reads the float32 x (kiln.quantize_input,
// x_scale as input 6) and multiplies by x_scale * w_scale itself
// (kiln.scale_by_x). Compared bit for bit with the definition computed
// here (DynamicQuantizeLinear's range, scale and zero point, its rounding
// with ties to even and NaN to the zero point, the exact integer sums and
// the graph's float32 steps) and with the same graph compiled without the
// pass. x holds exact ties (a scale of 0.25 and values on odd multiples of
// 0.125) and NaNs. Routes: the int16-product kernel (quantizing each image
// row; under the unit_int8_isa_* runs), oneDNN's float32 depthwise route
// (a small depthwise layer, quantized straight to float32) and int8
// routes (VNNI, or a large depthwise layer), the per-thread quantized copy.
struct QuantizedInputCase {
  std::int64_t c = 32, m = 48, group = 1, k = 1, h = 6, w = 5;
  // Batch, stride and dilation (pads dilation * (k / 2) each side).
  std::int64_t n = 1, stride = 1, dilation = 1;
  bool negative = false;  // a range below 0 (zero point 128), else from 0 (zero point 0)
  bool zeros = false;     // x all 0: scale 0, every q 0
  // Then + R (a second input) and a Relu: fuse-residual's kiln.sum on
  // the ConvInteger, the activation after the sum.
  bool residual = false;
};

// DynamicQuantizeLinear of x by the definition: q, scale, zero point.
void QuantizeByDefinition(const std::vector<float>& x, std::vector<std::uint8_t>* q, float* scale, std::uint8_t* zp) {
  float lo = 0.f, hi = 0.f;
  for (float v : x) {
    lo = v < lo ? v : lo;  // NaN compares false: skipped
    hi = v > hi ? v : hi;
  }
  const volatile float s = (hi - lo) / 255.f;
  *scale = s;
  *zp = s > 0 ? static_cast<std::uint8_t>(std::min(255.f, std::max(0.f, std::nearbyint(0.f - lo / s)))) : 0;
  q->resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(s > 0)) {
      (*q)[i] = 0;
      continue;
    }
    const volatile float d = x[i] / s;
    const float r = (d != d ? 0.f : std::nearbyint(d)) + *zp;  // NaN: the zero point
    (*q)[i] = static_cast<std::uint8_t>(std::min(255.f, std::max(0.f, r)));
  }
}

std::vector<float> TiesAndNaNs(std::size_t n, bool negative, bool zeros, std::mt19937& rng) {
  std::vector<float> x(n, 0.f);
  if (zeros) return x;
  // Range [0, 63.75] or [-32, 31.75]: scale 0.25 exactly; values on
  // multiples of 0.125 (every other one a tie), a few NaNs.
  const float lo = negative ? -32.f : 0.f;
  for (auto& v : x) v = lo + 0.125f * static_cast<float>(rng() % 511);
  x[0] = lo;
  x[1] = lo + 63.75f;
  for (std::size_t i = 7; i < n; i += 97) x[i] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// The graph build() makes, compiled with fuse-quantize-input (fused = 1)
// and without (0), run on `in` into got[fused] (`out_shape`, the first
// output); when fused, the op carries kiln.quantize_input = `form` (2: it
// alone read the DynamicQuantizeLinear, which went; 1: it stays) and
// kiln.scale_by_x, its scale Mul folded in.
template <typename Build>
void RunFusedAndNot(Build build, const std::string& op, const std::vector<TensorRef>& in, const Shape& out_shape,
                    std::vector<float> got[2], int form = 2, bool residual = false) {
  for (int fused = 1; fused >= 0; --fused) {
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions opts;
    if (!fused) opts.passes.disabled.insert("fuse-quantize-input");
    auto model = CompileAndLoad(build(), dir, &cm, opts);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_NE(FindOp(cm, op), nullptr);
    const int users = form == 2 ? 1 : 2;  // ops that read the DynamicQuantizeLinear
    for (const auto& nd : cm.graph->nodes()) {
      if (nd->op_type() != op) continue;
      EXPECT_EQ(nd->GetInt(ops::kQuantizeInputAttr, 0), fused ? form : 0);
      EXPECT_EQ(nd->GetInt(ops::kScaleByXAttr, 0), fused);
      EXPECT_EQ(nd->GetInt(ops::kSumAttr, 0), residual ? 1 : 0);  // + R and the Relu in the node
    }
    if (residual) EXPECT_EQ(CountOp(cm, "Add") + CountOp(cm, "Relu"), 0);
    EXPECT_EQ(CountOp(cm, "Mul"), fused ? 0 : users);  // x_scale * w_scale: in the node
    EXPECT_EQ(CountOp(cm, "DynamicQuantizeLinear"), fused && form == 2 ? 0 : 1);
    got[fused].assign(static_cast<std::size_t>(NumElements(out_shape)) * users, -1.f);
    std::vector<TensorRef> outs = {TensorRef::Of(got[fused].data(), out_shape)};
    if (users == 2) outs.push_back(TensorRef::Of(got[fused].data() + NumElements(out_shape), out_shape));
    ASSERT_TRUE((*model)->Execute(in, outs).ok());
  }
}

void CheckQuantizedInputConv(const QuantizedInputCase& qc) {
  SCOPED_TRACE(testing::Message() << "n " << qc.n << " c " << qc.c << " m " << qc.m << " group " << qc.group << " k "
                                  << qc.k << " stride " << qc.stride << " dilation " << qc.dilation << " " << qc.h << "x"
                                  << qc.w << (qc.negative ? " negative" : "") << (qc.zeros ? " zeros" : ""));
  std::mt19937 rng(31);
  const std::int64_t n = qc.n, c = qc.c, m = qc.m, h = qc.h, w = qc.w, k = qc.k, cg = c / qc.group;
  const std::int64_t st = qc.stride, dil = qc.dilation, pad = dil * (k / 2);
  const std::int64_t oh = (h + 2 * pad - dil * (k - 1) - 1) / st + 1, ow = (w + 2 * pad - dil * (k - 1) - 1) / st + 1;
  const std::vector<float> x = TiesAndNaNs(static_cast<std::size_t>(n * c * h * w), qc.negative, qc.zeros, rng);
  std::vector<std::int8_t> wt(m * cg * k * k);
  for (auto& v : wt) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  std::vector<float> ws(m), bias(m);
  for (auto& v : ws) v = 1e-3f * (1.f + static_cast<float>(rng() % 1000) / 77.f);
  for (auto& v : bias) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 37.f;
  std::vector<float> res(qc.residual ? n * m * oh * ow : 0);
  for (auto& v : res) v = static_cast<float>(static_cast<int>(rng() % 4001) - 2000) / 53.f;
  // x given channels-last, as a TensorFlow export holds it: the layout
  // pass cancels its Transpose against its own, so the quantization reads
  // NHWC x directly (as between a dynamically quantized CNN's layers).
  std::vector<float> x_nhwc(x.size());
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < h * w; ++i) {
        x_nhwc[static_cast<std::size_t>((b * h * w + i) * c + ch)] = x[static_cast<std::size_t>((b * c + ch) * h * w + i)];
      }
  auto build = [&] {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xin = g->AddValue("x", DType::kFloat32, {n, h, w, c});
    g->inputs() = {xin};
    ir::Value* xv = g->AddValue("x_nchw");
    g->AddNode("Transpose", "to_nchw", {xin}, {xv})->SetAttr("perm", ir::Attribute::Ints({0, 3, 1, 2}));
    ir::Value *q = g->AddValue("q"), *xs = g->AddValue("xs"), *zv = g->AddValue("xz");
    g->AddNode("DynamicQuantizeLinear", "dql", {xv}, {q, xs, zv});
    ir::Value* acc = g->AddValue("acc");
    ir::Node* ci = g->AddNode("ConvInteger", "ci",
                              {q, g->AddConstant("w", Tensor(DType::kInt8, {m, cg, k, k}, wt)), zv,
                               g->AddConstant("wzp", Tensor(DType::kInt8, {}, std::vector<std::int8_t>{0}))},
                              {acc});
    ci->SetAttr("pads", ir::Attribute::Ints({pad, pad, pad, pad}));
    ci->SetAttr("group", ir::Attribute::Int(qc.group));
    ci->SetAttr("strides", ir::Attribute::Ints({st, st}));
    ci->SetAttr("dilations", ir::Attribute::Ints({dil, dil}));
    ir::Value* f = g->AddValue("f");
    g->AddNode("Cast", "cast", {acc}, {f})->SetAttr("to", ir::Attribute::Int(1));
    ir::Value* s = g->AddValue("s");
    g->AddNode("Mul", "scale_mul", {xs, g->AddConstant("ws", Tensor(DType::kFloat32, {m, 1, 1}, ws))}, {s});
    ir::Value* scaled = g->AddValue("scaled");
    g->AddNode("Mul", "rescale", {f, s}, {scaled});
    ir::Value* y = g->AddValue("y");
    g->AddNode("Add", "bias_add", {scaled, g->AddConstant("b", Tensor(DType::kFloat32, {m, 1, 1}, bias))}, {y});
    if (qc.residual) {
      ir::Value* rin = g->AddValue("r", DType::kFloat32, {n, oh, ow, m});  // channels-last too
      g->inputs().push_back(rin);
      ir::Value* rv = g->AddValue("r_nchw");
      g->AddNode("Transpose", "r_to_nchw", {rin}, {rv})->SetAttr("perm", ir::Attribute::Ints({0, 3, 1, 2}));
      ir::Value *sum = g->AddValue("sum"), *out = g->AddValue("out");
      g->AddNode("Add", "residual_add", {y, rv}, {sum});
      g->AddNode("Relu", "relu", {sum}, {out});
      y = out;
    }
    g->outputs().push_back(y);
    return g;
  };
  std::vector<float> got[2];
  std::vector<TensorRef> ins = {TensorRef::Of(x_nhwc.data(), {n, h, w, c})};
  std::vector<float> res_nhwc(res.size());
  for (std::int64_t b = 0; b < n && qc.residual; ++b)
    for (std::int64_t ch = 0; ch < m; ++ch)
      for (std::int64_t i = 0; i < oh * ow; ++i) {
        res_nhwc[static_cast<std::size_t>((b * oh * ow + i) * m + ch)] = res[static_cast<std::size_t>((b * m + ch) * oh * ow + i)];
      }
  if (qc.residual) ins.push_back(TensorRef::Of(res_nhwc.data(), {n, oh, ow, m}));
  RunFusedAndNot(build, "ConvInteger", ins, {n, m, oh, ow}, got, 2, qc.residual);
  if (testing::Test::HasFatalFailure()) return;
  std::vector<std::uint8_t> q;
  float xs = 0.f;
  std::uint8_t zp = 0;
  QuantizeByDefinition(x, &q, &xs, &zp);
  if (!qc.zeros) {
    ASSERT_EQ(xs, 0.25f);
    ASSERT_EQ(zp, qc.negative ? 128 : 0);
  }
  for (std::int64_t b = 0; b < n; ++b)
  for (std::int64_t oc = 0; oc < m; ++oc)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        std::int64_t sum = 0;
        const std::int64_t gi = oc / (m / qc.group);
        for (std::int64_t ch = 0; ch < cg; ++ch)
          for (std::int64_t ki = 0; ki < k; ++ki)
            for (std::int64_t kj = 0; kj < k; ++kj) {
              const std::int64_t r = i * st - pad + ki * dil, t = j * st - pad + kj * dil;
              if (r < 0 || r >= h || t < 0 || t >= w) continue;
              sum += (q[(((b * c) + gi * cg + ch) * h + r) * w + t] - zp) * wt[((oc * cg + ch) * k + ki) * k + kj];
            }
        const volatile float sc = xs * ws[oc];
        volatile float v = static_cast<float>(static_cast<std::int32_t>(sum));
        v = v * sc;
        v = v + bias[oc];
        const std::size_t at = static_cast<std::size_t>(((b * m + oc) * oh + i) * ow + j);
        if (qc.residual) {
          v = v + res[at];
          v = v < 0.f ? 0.f : v;
        }
        const float want = v;
        ASSERT_TRUE(SameBits(got[1][at], want)) << "fused, at " << b << "," << oc << "," << i << "," << j << ": "
                                                 << got[1][at] << " vs " << want;
        ASSERT_TRUE(SameBits(got[0][at], want)) << "unfused, at " << b << "," << oc << "," << i << "," << j;
      }
}

TEST(ConvInteger, QuantizedInputOneByOneIsTheDefinitionBitForBit) {
  for (bool negative : {false, true}) {
    QuantizedInputCase qc;
    qc.negative = negative;
    CheckQuantizedInputConv(qc);
    qc.c = 35;  // an odd channel count: the image's pixels padded to pairs
    CheckQuantizedInputConv(qc);
    qc.h = 18;  // rows enough for a unit each (the unit quantizes its own row)
    CheckQuantizedInputConv(qc);
    qc.c = 32;
    CheckQuantizedInputConv(qc);
  }
  QuantizedInputCase zeros;
  zeros.zeros = true;
  CheckQuantizedInputConv(zeros);
}
// fuse-residual on a rescaled ConvInteger (kiln.sum, input 7): the
// residual added after the bias, the Relu after the sum; the int16 route
// (1x1, 3x3 Winograd) and, with VNNI, the int8 one.
TEST(ConvInteger, QuantizedInputWithResidualIsTheDefinitionBitForBit) {
  QuantizedInputCase qc;
  qc.residual = true;
  qc.negative = true;
  qc.h = 18;
  CheckQuantizedInputConv(qc);
  qc.k = 3;
  qc.c = 24;
  qc.m = 20;
  CheckQuantizedInputConv(qc);
}
TEST(ConvInteger, QuantizedInputThreeByThreeIsTheDefinitionBitForBit) {
  QuantizedInputCase qc;
  qc.k = 3;
  qc.c = 24;
  qc.m = 20;
  qc.h = 9;
  qc.w = 11;
  for (bool negative : {false, true}) {
    qc.negative = negative;
    CheckQuantizedInputConv(qc);
  }
}
// Depthwise: without VNNI QuantDepthwise (each worker quantizing the
// rows its windows reach into a ring); $KILN_INT8_QDEPTHWISE=off or with
// VNNI a small layer takes the float32 route and one past
// kDepthwiseFloatElems input values int8. Cases: 3x3 (weights held in
// registers) and 5x5 (the general loop), strides 1 and 2, dilation 2,
// channels not a multiple of 8 (the scalar tail), batch 2, and enough rows
// that two threads each take a part (a worker's first window starts mid
// image).
TEST(ConvInteger, QuantizedInputDepthwiseIsTheDefinitionBitForBit) {
  struct Dw {
    std::int64_t ch, hw, k, stride, dilation, n;
  };
  for (const Dw& d : {Dw{24, 9, 3, 1, 1, 1}, Dw{64, 66, 3, 1, 1, 1}, Dw{20, 17, 3, 2, 1, 2}, Dw{36, 23, 5, 1, 1, 1},
                      Dw{16, 14, 3, 1, 2, 1}, Dw{40, 30, 3, 2, 1, 1}, Dw{8, 9, 5, 2, 2, 2}}) {
    QuantizedInputCase qc;
    qc.c = qc.m = qc.group = d.ch;
    qc.k = d.k;
    qc.h = qc.w = d.hw;
    qc.stride = d.stride;
    qc.dilation = d.dilation;
    qc.n = d.n;
    for (bool negative : {false, true}) {
      qc.negative = negative;
      CheckQuantizedInputConv(qc);
    }
  }
}

// One reader (the DynamicQuantizeLinear goes: kiln.quantize_input = 2) and
// two sharing it (as a transformer's Q, K and V projections: it stays,
// 1), the second reading it through its own weights (the same here).
TEST(MatMulInteger, QuantizedInputIsTheDefinitionBitForBit) {
  for (const auto& form : {std::pair{false, 1}, {true, 1}, {true, 2}}) {
    const bool negative = form.first;
    const int readers = form.second;  // (a variable, not a binding: the lambda below captures it)
    SCOPED_TRACE(testing::Message() << negative << " " << readers);
    std::mt19937 rng(32);
    const std::int64_t rows = 7, k = 40, nn = 24;
    const std::vector<float> a = TiesAndNaNs(static_cast<std::size_t>(rows * k), negative, false, rng);
    std::vector<std::int8_t> bw(k * nn);
    for (auto& v : bw) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
    std::vector<float> bs(nn);
    for (auto& v : bs) v = 1e-3f * (1.f + static_cast<float>(rng() % 1000) / 91.f);
    auto build = [&] {
      auto g = std::make_unique<ir::Graph>();
      ir::Value* av = g->AddValue("a", DType::kFloat32, {rows, k});
      g->inputs() = {av};
      ir::Value *q = g->AddValue("q"), *as = g->AddValue("as"), *zv = g->AddValue("az");
      g->AddNode("DynamicQuantizeLinear", "dql", {av}, {q, as, zv});
      for (int r = 0; r < readers; ++r) {
        const std::string i = std::to_string(r);
        ir::Value* acc = g->AddValue("acc" + i);
        g->AddNode("MatMulInteger", "mi" + i, {q, g->AddConstant("b" + i, Tensor(DType::kInt8, {k, nn}, bw)), zv},
                   {acc});
        ir::Value* f = g->AddValue("f" + i);
        g->AddNode("Cast", "cast" + i, {acc}, {f})->SetAttr("to", ir::Attribute::Int(1));
        ir::Value* s = g->AddValue("s" + i);
        g->AddNode("Mul", "scale_mul" + i, {g->AddConstant("bs" + i, Tensor(DType::kFloat32, {nn}, bs)), as}, {s});
        ir::Value* y = g->AddValue("y" + i);
        g->AddNode("Mul", "rescale" + i, {f, s}, {y});
        g->outputs().push_back(y);
      }
      return g;
    };
    std::vector<float> got[2];
    RunFusedAndNot(build, "MatMulInteger", {TensorRef::Of(a.data(), {rows, k})}, {rows, nn}, got, readers == 1 ? 2 : 1);
    if (testing::Test::HasFatalFailure()) return;
    std::vector<std::uint8_t> q;
    float as = 0.f;
    std::uint8_t zp = 0;
    QuantizeByDefinition(a, &q, &as, &zp);
    ASSERT_EQ(as, 0.25f);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < nn; ++j) {
        std::int64_t sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += (q[r * k + p] - zp) * bw[p * nn + j];
        const volatile float sc = bs[j] * as;
        volatile float v = static_cast<float>(static_cast<std::int32_t>(sum));
        v = v * sc;
        const float want = v;
        for (int o = 0; o < readers; ++o) {
          const std::size_t at = static_cast<std::size_t>((o * rows + r) * nn + j);
          ASSERT_TRUE(SameBits(got[1][at], want)) << "fused, output " << o << " at " << r << "," << j << ": "
                                                  << got[1][at] << " vs " << want;
          ASSERT_TRUE(SameBits(got[0][at], want)) << "unfused, output " << o << " at " << r << "," << j;
        }
      }
  }
}

}  // namespace
}  // namespace kiln
