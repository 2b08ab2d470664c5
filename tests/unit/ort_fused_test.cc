// ONNX Runtime's fused contrib ops (com.microsoft FusedConv, FusedGemm,
// FusedMatMul, Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd,
// SkipLayerNormalization, Attention, QAttention, EmbedLayerNormalization,
// QEmbedLayerNormalization) and LayerNormalization
// below opset 17: each one-node model compiled (lower-contrib rewrites it
// into standard ops) and run, against a double-precision reference written here from the op's
// definition; and the errors bad attributes and shapes get.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "node_runner.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;
using test::Tensor;

// float32 values as double, and back (exact both ways for values that
// came from float32).
std::vector<double> D64(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> F32(const std::vector<double>& v) {
  std::vector<float> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

std::vector<float> Seq(std::size_t n, float a, float b) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = a * std::sin(b * static_cast<float>(i) + 0.3f);
  return v;
}

// One com.microsoft node: `data` are model inputs, `consts` constants (a
// null entry: an absent input), in input order as given by `order` ('d' /
// 'c' / '-').
struct Fused {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> ins;
  struct Feed {
    const void* p;
    DType t;
    Shape s;
  };
  std::vector<Feed> feeds;
  ir::Node* node = nullptr;

  std::deque<std::vector<unsigned char>> kept;  // the feeds' bytes

  template <typename T = float>
  void Data(const std::vector<T>& v, Shape s, DType t = DType::kFloat32) {
    ir::Value* x = g->AddValue("x" + std::to_string(ins.size()), t, s);
    g->inputs().push_back(x);
    ins.push_back(x);
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    kept.emplace_back(b, b + v.size() * sizeof(T));
    feeds.push_back({kept.back().data(), t, s});
  }
  template <typename T = float>
  void Const(const std::vector<T>& v, Shape s, DType t = DType::kFloat32) {
    ins.push_back(g->AddConstant("c" + std::to_string(ins.size()), Tensor(t, s, v)));
  }
  void Absent() { ins.push_back(nullptr); }
  ir::Node& Make(const std::string& op, int outputs = 1, const std::string& domain = ops::kMicrosoftDomain) {
    std::vector<ir::Value*> outs;
    for (int j = 0; j < outputs; ++j) {
      outs.push_back(g->AddValue("y" + std::to_string(j)));
      g->outputs().push_back(outs.back());
    }
    node = g->AddNode(op, "fused", ins, outs, domain);
    node->set_since_version(1);
    return *node;
  }
  // Runs it; out_shapes: each output's expected shape.
  Result<std::vector<std::vector<float>>> Run(const std::vector<Shape>& out_shapes) {
    test::TempDir dir;
    auto model = CompileAndLoad(std::move(g), dir);
    if (!model.ok()) return model.status();
    std::vector<std::vector<float>> outs;
    std::vector<TensorRef> orefs, irefs;
    for (std::size_t j = 0; j < out_shapes.size(); ++j) {
      if ((*model)->outputs()[j].shape != out_shapes[j]) {
        return Error(StatusCode::kInternal, "output ", j, " shape ", ShapeToString((*model)->outputs()[j].shape));
      }
      outs.emplace_back(static_cast<std::size_t>(NumElements(out_shapes[j])));
    }
    for (std::size_t j = 0; j < outs.size(); ++j) orefs.push_back({outs[j].data(), DType::kFloat32, out_shapes[j]});
    for (auto& fd : feeds) irefs.push_back({const_cast<void*>(fd.p), fd.t, fd.s});
    KILN_RETURN_IF_ERROR((*model)->Execute(irefs, orefs));
    return outs;
  }
};

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "at " << i;
  }
}

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// FusedConv with a residual Z and each activation ONNX Runtime fuses:
// y = act(conv(x, w) + b + z), a 3x3 convolution with padding 1 written out.
TEST(OrtFused, FusedConvWithEachActivationAndZ) {
  const int C = 2, M = 3, H = 4, W = 5;
  const std::vector<float> x = Seq(C * H * W, 1.5f, 0.7f), w = Seq(M * C * 9, 0.6f, 1.3f), b = Seq(M, 0.3f, 2.1f),
                           z = Seq(M * H * W, 0.8f, 0.37f);
  struct Case {
    const char* act;
    std::vector<float> params;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases = {
      {"Relu", {}, [](double v) { return std::max(v, 0.0); }},
      {"Tanh", {}, [](double v) { return std::tanh(v); }},
      {"Sigmoid", {}, Sigmoid},
      {"LeakyRelu", {0.2f}, [](double v) { return v >= 0 ? v : 0.2 * v; }},
      {"Clip", {-0.5f, 0.75f}, [](double v) { return std::clamp(v, -0.5, 0.75); }},
      {"HardSigmoid", {0.3f, 0.4f}, [](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); }},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.act);
    for (bool with_z : {false, true}) {
      Fused f;
      f.Data(x, {1, C, H, W});
      f.Const(w, {M, C, 3, 3});
      f.Const(b, {M});
      if (with_z) f.Data(z, {1, M, H, W});
      ir::Node& n = f.Make("FusedConv");
      n.SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
      n.SetAttr("kernel_shape", ir::Attribute::Ints({3, 3}));
      n.SetAttr("activation", ir::Attribute::String(cs.act));
      if (!cs.params.empty()) n.SetAttr("activation_params", ir::Attribute::Floats(cs.params));
      auto got = f.Run({{1, M, H, W}});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      std::vector<double> want;
      for (int m = 0; m < M; ++m) {
        for (int i = 0; i < H; ++i) {
          for (int j = 0; j < W; ++j) {
            double s = b[m];
            for (int c = 0; c < C; ++c) {
              for (int ki = 0; ki < 3; ++ki) {
                for (int kj = 0; kj < 3; ++kj) {
                  const int ii = i + ki - 1, jj = j + kj - 1;
                  if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
                  s += static_cast<double>(x[(c * H + ii) * W + jj]) * w[((m * C + c) * 3 + ki) * 3 + kj];
                }
              }
            }
            if (with_z) s += z[(m * H + i) * W + j];
            want.push_back(cs.f(s));
          }
        }
      }
      ExpectNear(got.value()[0], want, 2e-5);
    }
  }
}

// FusedGemm: act(alpha A' B' + beta C) with activation_alpha / _beta /
// _gamma as the activation's parameters.
TEST(OrtFused, FusedGemmActivationsAndTheirParameters) {
  const int Mr = 3, K = 4, N = 5;
  const std::vector<float> a = Seq(K * Mr, 1.2f, 0.9f), bm = Seq(N * K, 0.8f, 1.7f), c = Seq(N, 0.5f, 0.4f);
  struct Case {
    const char* act;
    std::vector<std::pair<const char*, float>> attrs;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases = {
      {"LeakyRelu", {{"activation_alpha", 0.1f}}, [](double v) { return v >= 0 ? v : 0.1 * v; }},
      {"HardSigmoid", {{"activation_alpha", 0.25f}, {"activation_beta", 0.45f}},
       [](double v) { return std::clamp(0.25 * v + 0.45, 0.0, 1.0); }},
      {"Selu", {{"activation_alpha", 1.5f}, {"activation_gamma", 1.1f}},
       [](double v) { return v > 0 ? 1.1 * v : 1.1 * 1.5 * (std::exp(v) - 1); }},
      {"Elu", {}, [](double v) { return v >= 0 ? v : std::exp(v) - 1; }},
      {"Softplus", {}, [](double v) { return std::log1p(std::exp(v)); }},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.act);
    Fused f;
    f.Data(a, {K, Mr});  // transA
    f.Const(bm, {N, K});  // transB
    f.Const(c, {N});
    ir::Node& n = f.Make("FusedGemm");
    n.SetAttr("transA", ir::Attribute::Int(1));
    n.SetAttr("transB", ir::Attribute::Int(1));
    n.SetAttr("alpha", ir::Attribute::Float(0.7f));
    n.SetAttr("beta", ir::Attribute::Float(1.3f));
    n.SetAttr("activation", ir::Attribute::String(cs.act));
    for (auto& [k, v] : cs.attrs) n.SetAttr(k, ir::Attribute::Float(v));
    auto got = f.Run({{Mr, N}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    std::vector<double> want;
    for (int i = 0; i < Mr; ++i) {
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += static_cast<double>(a[k * Mr + i]) * bm[j * K + k];
        want.push_back(cs.f(0.7 * s + 1.3 * c[j]));
      }
    }
    ExpectNear(got.value()[0], want, 2e-5);
  }
}

// FusedMatMul: alpha * A^T B^T on batched operands (B broadcast).
TEST(OrtFused, FusedMatMulTransposesAndScales) {
  const int Bt = 2, Mr = 3, K = 4, N = 2;
  const std::vector<float> a = Seq(Bt * K * Mr, 1.1f, 0.6f), bm = Seq(N * K, 0.9f, 1.1f);
  Fused f;
  f.Data(a, {Bt, K, Mr});
  f.Const(bm, {N, K});
  ir::Node& n = f.Make("FusedMatMul");
  n.SetAttr("transA", ir::Attribute::Int(1));
  n.SetAttr("transB", ir::Attribute::Int(1));
  n.SetAttr("alpha", ir::Attribute::Float(0.125f));
  auto got = f.Run({{Bt, Mr, N}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want;
  for (int t = 0; t < Bt; ++t) {
    for (int i = 0; i < Mr; ++i) {
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += static_cast<double>(a[(t * K + k) * Mr + i]) * bm[j * K + k];
        want.push_back(0.125 * s);
      }
    }
  }
  ExpectNear(got.value()[0], want, 1e-5);
}

// Gelu (erf), BiasGelu (erf of x + bias), FastGelu (tanh form of x +
// bias), QuickGelu (x sigmoid(alpha x)).
TEST(OrtFused, GeluFamily) {
  const int S = 3, H = 8;
  const std::vector<float> x = Seq(S * H, 3.f, 0.53f), bias = Seq(H, 0.4f, 1.9f);
  auto erf_gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  auto tanh_gelu = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  struct Case {
    const char* op;
    bool bias;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases = {{"Gelu", false, erf_gelu},
                                   {"BiasGelu", true, erf_gelu},
                                   {"FastGelu", true, tanh_gelu},
                                   {"FastGelu", false, tanh_gelu},
                                   {"QuickGelu", false, [](double v) { return v * Sigmoid(1.5 * v); }}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(std::string(cs.op) + (cs.bias ? " with bias" : ""));
    Fused f;
    f.Data(x, {S, H});
    if (cs.bias) f.Const(bias, {H});
    ir::Node& n = f.Make(cs.op);
    if (std::string(cs.op) == "QuickGelu") n.SetAttr("alpha", ir::Attribute::Float(1.5f));
    auto got = f.Run({{S, H}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    std::vector<double> want;
    for (int i = 0; i < S * H; ++i) want.push_back(cs.f(static_cast<double>(x[i]) + (cs.bias ? bias[i % H] : 0.0)));
    ExpectNear(got.value()[0], want, 2e-6);
  }
}

// SkipLayerNormalization: all four outputs; BiasAdd.
TEST(OrtFused, SkipLayerNormalizationOutputsAndBiasAdd) {
  const int B = 2, S = 3, H = 6;
  const std::vector<float> x = Seq(B * S * H, 2.f, 0.41f), skip = Seq(B * S * H, 1.f, 0.77f), gamma = Seq(H, 1.f, 0.9f),
                           beta = Seq(H, 0.3f, 1.4f), bias = Seq(H, 0.5f, 2.3f);
  Fused f;
  f.Data(x, {B, S, H});
  f.Data(skip, {B, S, H});
  f.Const(gamma, {H});
  f.Const(beta, {H});
  f.Const(bias, {H});
  f.Make("SkipLayerNormalization", 4).SetAttr("epsilon", ir::Attribute::Float(1e-5f));
  auto got = f.Run({{B, S, H}, {B, S, 1}, {B, S, 1}, {B, S, H}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> y, mean, inv, sum;
  for (int r = 0; r < B * S; ++r) {
    double m = 0, v = 0;
    std::vector<double> s(H);
    for (int h = 0; h < H; ++h) {
      s[h] = static_cast<double>(x[r * H + h]) + skip[r * H + h] + bias[h];
      m += s[h] / H;
    }
    for (int h = 0; h < H; ++h) v += (s[h] - m) * (s[h] - m) / H;
    const double iv = 1 / std::sqrt(v + 1e-5);
    for (int h = 0; h < H; ++h) {
      y.push_back((s[h] - m) * iv * gamma[h] + beta[h]);
      sum.push_back(s[h]);
    }
    mean.push_back(m);
    inv.push_back(iv);
  }
  ExpectNear(got.value()[0], y, 2e-5);
  ExpectNear(got.value()[1], mean, 2e-6);
  ExpectNear(got.value()[2], inv, 2e-5);
  ExpectNear(got.value()[3], sum, 2e-6);

  Fused ba;
  ba.Data(x, {B, S, H});
  ba.Const(bias, {H});
  ba.Data(skip, {B, S, H});
  ba.Make("BiasAdd");
  auto got2 = ba.Run({{B, S, H}});
  ASSERT_TRUE(got2.ok()) << got2.status().ToString();
  std::vector<double> want;
  for (int i = 0; i < B * S * H; ++i) want.push_back(static_cast<double>(x[i]) + bias[i % H] + skip[i]);
  ExpectNear(got2.value()[0], want, 1e-6);
}

// ONNX Runtime's LayerNormalization in the ONNX domain below opset 17
// (version 1): the same op.
TEST(OrtFused, LayerNormalizationVersion1) {
  const int R = 2, H = 5;
  const std::vector<float> x = Seq(R * H, 2.f, 0.9f), gamma = Seq(H, 1.f, 0.5f);
  Fused f;
  f.Data(x, {R, H});
  f.Const(gamma, {H});
  ir::Node& n = f.Make("LayerNormalization", 1, "");
  n.SetAttr("epsilon", ir::Attribute::Float(1e-5f));
  const ops::OpDef* def = ops::OpRegistry::Get().Find("LayerNormalization");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->versions.front(), 1);
  test::TempDir dir;
  auto model = test::CompileAndLoadAsIs(std::move(f.g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> out(R * H);
  ASSERT_TRUE((*model)
                  ->Execute({{const_cast<float*>(x.data()), DType::kFloat32, {R, H}}},
                            {{out.data(), DType::kFloat32, {R, H}}})
                  .ok());
  std::vector<double> want;
  for (int r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int h = 0; h < H; ++h) m += x[r * H + h] / static_cast<double>(H);
    for (int h = 0; h < H; ++h) v += (x[r * H + h] - m) * (x[r * H + h] - m) / H;
    for (int h = 0; h < H; ++h) want.push_back((x[r * H + h] - m) / std::sqrt(v + 1e-5) * gamma[h]);
  }
  ExpectNear(out, want, 2e-5);
}

// Bad attributes and shapes: a clear error naming the node and the culprit.
TEST(OrtFused, ErrorsNameTheCulprit) {
  auto fails = [](Fused& f, const std::vector<Shape>& shapes, const std::string& part) {
    auto r = f.Run(shapes);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  {
    Fused f;
    f.Data(Seq(8, 1, 1), {1, 2, 2, 2});
    f.Const(Seq(2, 1, 1), {1, 2, 1, 1});
    f.Make("FusedConv").SetAttr("activation", ir::Attribute::String("Gelu"));
    fails(f, {{1, 1, 2, 2}}, "attribute 'activation' is 'Gelu'");
  }
  {
    Fused f;
    f.Data(Seq(8, 1, 1), {1, 2, 2, 2});
    f.Const(Seq(2, 1, 1), {1, 2, 1, 1});
    ir::Node& n = f.Make("FusedConv");
    n.SetAttr("activation", ir::Attribute::String("Clip"));
    n.SetAttr("activation_params", ir::Attribute::Floats({0.f}));
    fails(f, {{1, 1, 2, 2}}, "'activation_params' has 1 values, Clip takes 2");
  }
  {
    Fused f;
    f.Data(Seq(8, 1, 1), {1, 2, 2, 2});
    f.Const(Seq(2, 1, 1), {1, 2, 1, 1});
    f.Absent();
    f.Data(Seq(3, 1, 1), {1, 1, 3});
    f.Make("FusedConv").SetAttr("activation", ir::Attribute::String("Relu"));
    fails(f, {{1, 1, 2, 2}}, "input 3 (Z) has shape [1,1,3]");
  }
  {
    Fused f;
    f.Data(Seq(6, 1, 1), {2, 3});
    f.Const(Seq(6, 1, 1), {3, 2});
    f.Make("FusedMatMul").SetAttr("transBatchA", ir::Attribute::Int(1));
    fails(f, {{2, 2}}, "'transBatchA' = 1 is not supported");
  }
  {
    Fused f;
    f.Data(Seq(6, 1, 1), {1, 1, 6});
    f.Data(Seq(6, 1, 1), {1, 1, 6});
    f.Const(Seq(5, 1, 1), {5});
    f.Make("SkipLayerNormalization");
    fails(f, {{1, 1, 6}}, "input 2 (gamma) has shape [5], expected [6]");
  }
}

// ---- Attention / QAttention ------------------------------------------------

// ONNX Runtime's attention in double, written out: q [B, S, D], k [B, L, D]
// and v [B, L, Dv] (each plus its slice of bias [D + D + Dv]), or k and v
// split into heads [B, N, L, H] / [B, N, L, Hv]; past_k / past_v [B, N, P,
// *] in front; an additive mask built as its PrepareMask does
// (mask_filter_value where masked: [B] keys at or past each end, [2B] also
// those before min(start, T), [B, T] and [B, S, T] where <= 0;
// unidirectional sets it (not adds it) for key j > T - S + i); attention_bias [1 or B, 1
// or N, S, T]. Returns output [B, S, Dv], present_key [B, N, T, H],
// present_value [B, N, T, Hv].
struct MhaRef {
  int B, S, L, N, D, Dv, P = 0;
  bool split = false, causal = false;
  std::vector<double> q, k, v, bias, past_k, past_v, ab;
  std::vector<std::int32_t> mask;
  Shape mask_shape, ab_shape;
  double filter = -10000.0, scale = 0.0;
  mutable std::set<std::size_t> loose;  // output rows (b * S + i) whose every key is masked

  std::array<std::vector<double>, 3> Run() const {
    const int H = D / N, Hv = Dv / N, T = P + L;
    auto b_at = [&](int i) { return bias.empty() ? 0.0 : bias[i]; };
    auto query = [&](int b, int n, int i, int h) {
      return q[(static_cast<std::size_t>(b) * S + i) * D + n * H + h] + b_at(n * H + h);
    };
    auto key = [&](int b, int n, int t, int h) -> double {
      if (t < P) return past_k[((static_cast<std::size_t>(b) * N + n) * P + t) * H + h];
      const int j = t - P;
      if (split) return k[((static_cast<std::size_t>(b) * N + n) * L + j) * H + h];
      return k[(static_cast<std::size_t>(b) * L + j) * D + n * H + h] + b_at(D + n * H + h);
    };
    auto val = [&](int b, int n, int t, int h) -> double {
      if (t < P) return past_v[((static_cast<std::size_t>(b) * N + n) * P + t) * Hv + h];
      const int j = t - P;
      if (split) return v[((static_cast<std::size_t>(b) * N + n) * L + j) * Hv + h];
      return v[(static_cast<std::size_t>(b) * L + j) * Dv + n * Hv + h] + b_at(2 * D + n * Hv + h);
    };
    const double alpha = scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(H));
    std::array<std::vector<double>, 3> r;
    r[0].resize(static_cast<std::size_t>(B) * S * Dv);
    for (int b = 0; b < B; ++b) {
      for (int n = 0; n < N; ++n) {
        for (int i = 0; i < S; ++i) {
          std::vector<double> sc(T);
          for (int j = 0; j < T; ++j) {
            double d = 0;
            for (int h = 0; h < H; ++h) d += query(b, n, i, h) * key(b, n, j, h);
            bool masked = false;
            if (mask_shape.size() == 1) {
              masked = j >= mask[b];
              if (mask_shape[0] == 2 * B) masked = masked || j < std::min<int>(mask[B + b], T);
            } else if (mask_shape.size() == 2) {
              masked = mask[b * T + j] <= 0;
            } else if (mask_shape.size() == 3) {
              masked = mask[(b * S + i) * T + j] <= 0;
            }
            // unidirectional sets the mask's value (not adds to it)
            if (causal && j > T - S + i) masked = true;
            sc[j] = d * alpha + (masked ? filter : 0.0);
            if (!ab_shape.empty()) {
              const int bb = ab_shape[0] == 1 ? 0 : b, bn = ab_shape[1] == 1 ? 0 : n;
              sc[j] += ab[((static_cast<std::size_t>(bb) * ab_shape[1] + bn) * S + i) * T + j];
            }
          }
          // Every key masked: the scores are d * alpha + filter in float32,
          // whose resolution near 1e4 is 1e-3, and softmax weighs them by
          // those rounded differences (in the kernels too): looser there.
          bool all = T > 0;
          for (double x : sc) all = all && x < filter / 2;
          if (all) loose.insert(static_cast<std::size_t>(b) * S + i);
          const double mx = *std::max_element(sc.begin(), sc.end());
          double sum = 0;
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int h = 0; h < Hv; ++h) {
            double acc = 0;
            for (int j = 0; j < T; ++j) acc += sc[j] / sum * val(b, n, j, h);
            r[0][(static_cast<std::size_t>(b) * S + i) * Dv + n * Hv + h] = acc;
          }
        }
      }
    }
    for (int b = 0; b < B; ++b) {
      for (int n = 0; n < N; ++n) {
        for (int t = 0; t < T; ++t) {
          for (int h = 0; h < H; ++h) r[1].push_back(key(b, n, t, h));
          for (int h = 0; h < Hv; ++h) r[2].push_back(val(b, n, t, h));
        }
      }
    }
    return r;
  }
};

// Attention on the packed projection qkv [B, S, q + q + v] and past [2, B,
// N, P, H]: MhaRef on its Q, K and V. Returns output [B, S, v] followed by
// present [2, B, N, T, H].
struct AttentionRef {
  int B, S, N, qh, vh, P = 0;
  std::vector<double> qkv, past, bias4;
  std::vector<std::int32_t> mask;
  Shape mask_shape, bias_shape;
  bool causal = false;
  double filter = -10000.0, scale = 0.0;
  mutable std::set<std::size_t> loose;  // output rows (b * S + i) whose every key is masked

  // got (output 0) against `want` within tol, 5e-3 on the loose rows.
  void Expect(const std::vector<float>& got, const std::vector<double>& want, double tol) const {
    ASSERT_EQ(got.size(), want.size());
    const std::size_t row = want.size() / (static_cast<std::size_t>(B) * S);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double t = loose.count(i / row) ? 5e-3 : tol;
      EXPECT_NEAR(got[i], want[i], t * std::max(1.0, std::fabs(want[i]))) << "at " << i;
    }
  }

  std::pair<std::vector<double>, std::vector<double>> Run() const {
    const int C = 2 * qh + vh;
    MhaRef m{B, S, S, N, qh, vh, P};
    for (std::size_t r = 0; r < static_cast<std::size_t>(B) * S; ++r) {
      const double* row = qkv.data() + r * C;
      m.q.insert(m.q.end(), row, row + qh);
      m.k.insert(m.k.end(), row + qh, row + 2 * qh);
      m.v.insert(m.v.end(), row + 2 * qh, row + C);
    }
    if (!past.empty()) {
      const std::size_t half = past.size() / 2;
      m.past_k.assign(past.begin(), past.begin() + static_cast<std::ptrdiff_t>(half));
      m.past_v.assign(past.begin() + static_cast<std::ptrdiff_t>(half), past.end());
    }
    m.mask = mask;
    m.mask_shape = mask_shape;
    m.ab = bias4;
    m.ab_shape = bias_shape;
    m.causal = causal;
    m.filter = filter;
    m.scale = scale;
    auto r = m.Run();
    loose = m.loose;
    std::vector<double> present;
    if (qh == vh) {
      present = r[1];
      present.insert(present.end(), r[2].begin(), r[2].end());
    }
    return {r[0], present};
  }
};

// qkv = x w + bias in double.
std::vector<double> Project(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                            int rows, int D, int C) {
  std::vector<double> r(static_cast<std::size_t>(rows) * C);
  for (int i = 0; i < rows; ++i) {
    for (int c = 0; c < C; ++c) {
      double s = bias.empty() ? 0.0 : bias[c];
      for (int d = 0; d < D; ++d) s += static_cast<double>(x[i * D + d]) * w[d * C + c];
      r[static_cast<std::size_t>(i) * C + c] = s;
    }
  }
  return r;
}

// Attention with each mask form ONNX Runtime's CPU kernel takes, with and
// without unidirectional, against the reference above.
TEST(OrtAttention, MaskFormsAndUnidirectional) {
  const int B = 2, S = 5, D = 12, N = 3, qh = 12, vh = 12, C = 36;
  const std::vector<float> x = Seq(B * S * D, 1.3f, 0.61f), w = Seq(D * C, 0.4f, 1.37f), bias = Seq(C, 0.2f, 0.83f);
  struct Case {
    const char* name;
    Shape shape;
    std::vector<std::int32_t> mask;
  };
  const std::vector<Case> cases = {
      {"none", {}, {}},
      {"[B] ends", {B}, {3, 5}},
      {"[2B] ends and starts", {2 * B}, {4, 5, 1, 7}},  // batch 1: start past T masks every key
      {"[B, T] raw", {B, S}, {1, 1, 0, 1, 0, 0, 0, 0, 0, 0}},  // batch 1 wholly masked
      {"[B, S, T] raw", {B, S, S}, std::vector<std::int32_t>(B * S * S, 1)},
  };
  for (const Case& cs : cases) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(cs.name) + (causal ? " unidirectional" : ""));
      std::vector<std::int32_t> mask = cs.mask;
      if (cs.shape.size() == 3) {
        for (std::size_t i = 0; i < mask.size(); i += 7) mask[i] = 0;
      }
      Fused f;
      f.Data(x, {B, S, D});
      f.Const(w, {D, C});
      f.Const(bias, {C});
      if (!cs.shape.empty()) f.Data(mask, cs.shape, DType::kInt32);
      ir::Node& n = f.Make("Attention");
      n.SetAttr("num_heads", ir::Attribute::Int(N));
      if (causal) n.SetAttr("unidirectional", ir::Attribute::Int(1));
      auto got = f.Run({{B, S, vh}});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      AttentionRef ref{B, S, N, qh, vh};
      ref.qkv = Project(x, w, bias, B * S, D, C);
      ref.mask = mask;
      ref.mask_shape = cs.shape;
      ref.causal = causal;
      const auto want = ref.Run().first;
      ref.Expect(got.value()[0], want, 2e-5);
    }
  }
}

// Past and present, qkv_hidden_sizes with a smaller V, scale,
// mask_filter_value and attention_bias.
TEST(OrtAttention, PastPresentSizesScaleAndBias) {
  {
    const int B = 2, S = 3, P = 4, D = 8, N = 2, qh = 8, C = 24, H = 4, T = P + S;
    const std::vector<float> x = Seq(B * S * D, 1.1f, 0.53f), w = Seq(D * C, 0.5f, 1.21f), bias = Seq(C, 0.3f, 0.7f),
                             past = Seq(2 * B * N * P * H, 0.9f, 0.29f);
    Fused f;
    f.Data(x, {B, S, D});
    f.Const(w, {D, C});
    f.Const(bias, {C});
    f.Data(std::vector<std::int32_t>{6, 7}, {B}, DType::kInt32);
    f.Data(past, {2, B, N, P, H});
    ir::Node& n = f.Make("Attention", 2);
    n.SetAttr("num_heads", ir::Attribute::Int(N));
    n.SetAttr("unidirectional", ir::Attribute::Int(1));
    auto got = f.Run({{B, S, qh}, {2, B, N, T, H}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    AttentionRef ref{B, S, N, qh, qh, P};
    ref.qkv = Project(x, w, bias, B * S, D, C);
    ref.past.assign(past.begin(), past.end());
    ref.mask = {6, 7};
    ref.mask_shape = {B};
    ref.causal = true;
    auto [out, present] = ref.Run();
    ExpectNear(got.value()[0], out, 2e-5);
    ExpectNear(got.value()[1], present, 1e-6);
  }
  {
    const int B = 1, S = 4, D = 6, N = 2, qh = 8, vh = 4, C = 20;
    const std::vector<float> x = Seq(B * S * D, 1.4f, 0.47f), w = Seq(D * C, 0.6f, 0.93f),
                             ab = Seq(N * S * S, 2.0f, 0.71f);
    Fused f;
    f.Data(x, {B, S, D});
    f.Const(w, {D, C});
    f.Absent();
    f.Data(std::vector<std::int32_t>{1, 1, 1, 0}, {B, S}, DType::kInt32);
    f.Absent();
    f.Data(ab, {1, N, S, S});
    ir::Node& n = f.Make("Attention");
    n.SetAttr("num_heads", ir::Attribute::Int(N));
    n.SetAttr("qkv_hidden_sizes", ir::Attribute::Ints({qh, qh, vh}));
    n.SetAttr("scale", ir::Attribute::Float(0.3f));
    n.SetAttr("mask_filter_value", ir::Attribute::Float(-50.f));
    auto got = f.Run({{B, S, vh}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    AttentionRef ref{B, S, N, qh, vh};
    ref.qkv = Project(x, w, {}, B * S, D, C);
    ref.mask = {1, 1, 1, 0};
    ref.mask_shape = {B, S};
    ref.filter = -50.0;
    ref.scale = static_cast<double>(0.3f);
    ref.bias4.assign(ab.begin(), ab.end());
    ref.bias_shape = {1, N, S, S};
    ExpectNear(got.value()[0], ref.Run().first, 2e-5);
  }
}

// QAttention: qkv = float(sum (x - xz)(w - wz)) * (x_scale * w_scale) +
// bias, uint8 x int8 per tensor and uint8 x uint8 per column.
TEST(OrtAttention, QAttentionPerTensorAndPerColumn) {
  const int B = 2, S = 4, D = 8, N = 2, qh = 8, C = 24;
  std::vector<std::uint8_t> xq(B * S * D);
  for (std::size_t i = 0; i < xq.size(); ++i) xq[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  const std::vector<float> bias = Seq(C, 0.2f, 0.9f);
  for (bool per_column : {false, true}) {
    SCOPED_TRACE(per_column ? "uint8 weights per column" : "int8 weights per tensor");
    const std::uint8_t xz = 121;
    const float xs = 0.02f;
    std::vector<float> ws(per_column ? C : 1), wzf(per_column ? C : 1);
    for (std::size_t c = 0; c < ws.size(); ++c) ws[c] = 0.004f + 0.0005f * static_cast<float>(c);
    for (std::size_t c = 0; c < wzf.size(); ++c) wzf[c] = per_column ? static_cast<float>(100 + c * 3) : 0.f;
    std::vector<std::int8_t> w8(D * C);
    std::vector<std::uint8_t> wu(D * C);
    for (int i = 0; i < D * C; ++i) {
      w8[i] = static_cast<std::int8_t>((i * 53 + 7) % 255 - 127);
      wu[i] = static_cast<std::uint8_t>((i * 71 + 5) % 256);
    }
    Fused f;
    f.Data(xq, {B, S, D}, DType::kUInt8);
    if (per_column) f.Const(wu, {D, C}, DType::kUInt8);
    else f.Const(w8, {D, C}, DType::kInt8);
    f.Const(bias, {C});
    f.Const(std::vector<float>{xs}, {});
    f.Const(ws, per_column ? Shape{C} : Shape{});
    f.Data(std::vector<std::int32_t>{3, 4}, {B}, DType::kInt32);
    f.Const(std::vector<std::uint8_t>{xz}, {}, DType::kUInt8);
    if (per_column) {
      std::vector<std::uint8_t> wz(C);
      for (int c = 0; c < C; ++c) wz[c] = static_cast<std::uint8_t>(wzf[c]);
      f.Const(wz, {C}, DType::kUInt8);
    }
    ir::Node& n = f.Make("QAttention");
    n.SetAttr("num_heads", ir::Attribute::Int(N));
    auto got = f.Run({{B, S, qh}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    AttentionRef ref{B, S, N, qh, qh};
    ref.qkv.resize(B * S * C);
    for (int r = 0; r < B * S; ++r) {
      for (int c = 0; c < C; ++c) {
        std::int64_t acc = 0;
        for (int d = 0; d < D; ++d) {
          const int wv = per_column ? static_cast<int>(wu[d * C + c]) - static_cast<int>(wzf[c]) : w8[d * C + c];
          acc += (static_cast<int>(xq[r * D + d]) - xz) * wv;
        }
        const float s = xs * ws[per_column ? c : 0];
        ref.qkv[r * C + c] = static_cast<double>(acc) * s + bias[c];
      }
    }
    ref.mask = {3, 4};
    ref.mask_shape = {B};
    ExpectNear(got.value()[0], ref.Run().first, 2e-5);
  }
}

TEST(OrtAttention, ErrorsNameTheCulprit) {
  auto fails = [](Fused& f, const std::vector<Shape>& shapes, const std::string& part) {
    auto r = f.Run(shapes);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  auto attention = [](Fused& f, int D, int C) {
    f.Data(Seq(2 * D, 1, 1), {1, 2, D});
    f.Const(Seq(D * C, 1, 1), {D, C});
  };
  {
    Fused f;
    attention(f, 4, 12);
    f.Make("Attention").SetAttr("num_heads", ir::Attribute::Int(3));
    fails(f, {{1, 2, 4}}, "hidden size 4 of Q is not a multiple of num_heads (3)");
  }
  {
    Fused f;
    attention(f, 4, 12);
    f.Make("Attention");
    fails(f, {{1, 2, 4}}, "attribute 'num_heads' = 0 is out of range");
  }
  {
    Fused f;
    attention(f, 4, 12);
    f.Absent();
    f.Data(std::vector<std::int32_t>{1, 2, 3}, {3}, DType::kInt32);
    f.Make("Attention").SetAttr("num_heads", ir::Attribute::Int(2));
    fails(f, {{1, 2, 4}}, "input 3 (mask_index) has shape [3]");
  }
  {
    Fused f;
    attention(f, 4, 12);
    ir::Node& n = f.Make("Attention");
    n.SetAttr("num_heads", ir::Attribute::Int(2));
    n.SetAttr("qkv_hidden_sizes", ir::Attribute::Ints({4, 2, 6}));
    fails(f, {{1, 2, 6}}, "Q's size 4 differs from K's 2");
  }
  {
    Fused f;
    attention(f, 4, 12);
    ir::Node& n = f.Make("Attention");
    n.SetAttr("num_heads", ir::Attribute::Int(2));
    n.SetAttr("do_rotary", ir::Attribute::Int(1));
    fails(f, {{1, 2, 4}}, "attribute 'do_rotary' = 1 is not supported");
  }
  {
    Fused f;
    attention(f, 4, 12);
    for (int i = 0; i < 3; ++i) f.Absent();
    f.Data(Seq(2 * 2 * 2, 1, 1), {2, 1, 2, 2});
    f.Make("Attention").SetAttr("num_heads", ir::Attribute::Int(2));
    fails(f, {{1, 2, 4}}, "input 5 (attention_bias) has shape [2,1,2,2]");
  }
  {
    Fused f;
    attention(f, 4, 0);
    f.Make("Attention").SetAttr("num_heads", ir::Attribute::Int(1));
    fails(f, {{1, 2, 0}}, "hidden size of Q is 0");
  }
  {
    Fused f;
    attention(f, 4, 10);
    ir::Node& n = f.Make("Attention", 2);
    n.SetAttr("num_heads", ir::Attribute::Int(2));
    n.SetAttr("qkv_hidden_sizes", ir::Attribute::Ints({4, 4, 2}));
    fails(f, {{1, 2, 2}, {2, 1, 2, 2, 2}}, "output 1 (present) needs V's hidden size equal to K's");
  }
}

// Cross-attention (L keys for S queries) with bias, a smaller V, each mask
// form and attention_bias, and with key and value split into heads.
TEST(OrtMultiHeadAttention, CrossAttentionBiasMasksAndSplitKeys) {
  const int B = 2, S = 3, L = 5, D = 8, Dv = 4, N = 2;
  struct Case {
    const char* name;
    Shape mask_shape;
    std::vector<std::int32_t> mask;
    bool ab, split, bias;
  };
  const std::vector<Case> cases = {
      {"bias, no mask", {}, {}, false, false, true},
      {"[B] key ends", {B}, {2, 5}, false, false, true},
      {"[B, T]", {B, L}, {1, 0, 1, 1, 0, 0, 1, 1, 1, 1}, true, false, false},
      {"[B, S, T]", {B, S, L}, std::vector<std::int32_t>(B * S * L, 1), false, false, true},
      {"split into heads, [B, T]", {B, L}, {1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, true, true, false},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    MhaRef ref{B, S, L, N, D, Dv};
    ref.split = cs.split;
    ref.q = D64(Seq(B * S * D, 1.2f, 0.37f));
    ref.k = D64(Seq(B * L * D, 0.9f, 0.71f));
    ref.v = D64(Seq(B * L * Dv, 1.5f, 0.29f));
    if (cs.bias) ref.bias = D64(Seq(2 * D + Dv, 0.4f, 1.1f));
    ref.mask = cs.mask;
    if (cs.mask_shape.size() == 3) {
      for (std::size_t i = 0; i < ref.mask.size(); i += 4) ref.mask[i] = 0;
    }
    ref.mask_shape = cs.mask_shape;
    Fused f;
    f.Data(F32(ref.q), {B, S, D});
    f.Data(F32(ref.k), cs.split ? Shape{B, N, L, D / N} : Shape{B, L, D});
    f.Data(F32(ref.v), cs.split ? Shape{B, N, L, Dv / N} : Shape{B, L, Dv});
    if (cs.bias) f.Const(F32(ref.bias), {2 * D + Dv});
    else f.Absent();
    if (!cs.mask_shape.empty()) f.Data(ref.mask, cs.mask_shape, DType::kInt32);
    else f.Absent();
    if (cs.ab) {
      ref.ab = D64(Seq(B * S * L, 2.0f, 0.53f));
      ref.ab_shape = {B, 1, S, L};
      f.Data(F32(ref.ab), ref.ab_shape);
    }
    f.Make("MultiHeadAttention").SetAttr("num_heads", ir::Attribute::Int(N));
    auto got = f.Run({{B, S, Dv}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectNear(got.value()[0], ref.Run()[0], 2e-5);
  }
}

// Self-attention with past_key / past_value, unidirectional, the presents,
// scale and mask_filter_value.
TEST(OrtMultiHeadAttention, PastPresentUnidirectional) {
  const int B = 2, S = 3, P = 4, D = 8, N = 2, H = 4, T = P + S;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "unidirectional" : "bidirectional");
    MhaRef ref{B, S, S, N, D, D, P};
    ref.causal = causal;
    ref.q = D64(Seq(B * S * D, 1.1f, 0.43f));
    ref.k = D64(Seq(B * S * D, 0.8f, 0.67f));
    ref.v = D64(Seq(B * S * D, 1.3f, 0.31f));
    ref.bias = D64(Seq(3 * D, 0.3f, 0.9f));
    ref.past_k = D64(Seq(B * N * P * H, 0.7f, 0.23f));
    ref.past_v = D64(Seq(B * N * P * H, 0.6f, 0.19f));
    ref.mask = {1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    ref.mask_shape = {B, T};
    ref.filter = -60.0;
    ref.scale = static_cast<double>(0.25f);
    Fused f;
    f.Data(F32(ref.q), {B, S, D});
    f.Data(F32(ref.k), {B, S, D});
    f.Data(F32(ref.v), {B, S, D});
    f.Const(F32(ref.bias), {3 * D});
    f.Data(ref.mask, ref.mask_shape, DType::kInt32);
    f.Absent();
    f.Data(F32(ref.past_k), {B, N, P, H});
    f.Data(F32(ref.past_v), {B, N, P, H});
    ir::Node& n = f.Make("MultiHeadAttention", 3);
    n.SetAttr("num_heads", ir::Attribute::Int(N));
    n.SetAttr("scale", ir::Attribute::Float(0.25f));
    n.SetAttr("mask_filter_value", ir::Attribute::Float(-60.f));
    if (causal) n.SetAttr("unidirectional", ir::Attribute::Int(1));
    auto got = f.Run({{B, S, D}, {B, N, T, H}, {B, N, T, H}});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const auto want = ref.Run();
    ExpectNear(got.value()[0], want[0], 2e-5);
    ExpectNear(got.value()[1], want[1], 1e-6);
    ExpectNear(got.value()[2], want[2], 1e-6);
  }
}

TEST(OrtMultiHeadAttention, ErrorsNameTheCulprit) {
  auto fails = [](Fused& f, const std::vector<Shape>& shapes, const std::string& part) {
    auto r = f.Run(shapes);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  auto qkv = [](Fused& f, Shape q, Shape k, Shape v) {
    f.Data(Seq(static_cast<std::size_t>(NumElements(q)), 1, 1), q);
    f.Data(Seq(static_cast<std::size_t>(NumElements(k)), 1, 1), k);
    f.Data(Seq(static_cast<std::size_t>(NumElements(v)), 1, 1), v);
  };
  auto mha = [](Fused& f, int outputs = 1) -> ir::Node& {
    ir::Node& n = f.Make("MultiHeadAttention", outputs);
    n.SetAttr("num_heads", ir::Attribute::Int(2));
    return n;
  };
  {
    Fused f;
    f.Data(Seq(2 * 3 * 2 * 3 * 2, 1, 1), {2, 3, 2, 3, 2});
    mha(f);
    fails(f, {{2, 3, 4}}, "input 0 (query) is packed Q, K and V [2,3,2,3,2], which is not supported");
  }
  {
    Fused f;
    f.Data(Seq(2 * 3 * 4, 1, 1), {2, 3, 4});
    f.Data(Seq(2 * 5 * 2 * 2 * 2, 1, 1), {2, 5, 2, 2, 2});
    mha(f);
    fails(f, {{2, 3, 4}}, "input 1 (key) is packed K and V");
  }
  // query, key and value of these shapes (and a bias of `bias` values,
  // 0: none; a 1-D mask of `mask` values, 0: none; unidirectional) fail.
  struct Case {
    Shape q, k, v;
    int bias, mask;
    bool causal;
    const char* part;
  };
  for (const Case& cs : {Case{{2, 3, 4}, {2, 5, 6}, {2, 5, 4}, 0, 0, false,
                              "input 1 (key) has shape [2,5,6], expected [2, kv length, 4]"},
                         Case{{2, 3, 4}, {2, 5, 4}, {2, 5, 4}, 0, 0, true,
                              "attribute 'unidirectional' with 5 keys for 3 queries (cross-attention) is not supported"},
                         Case{{2, 3, 4}, {2, 2, 5, 2}, {2, 2, 5, 2}, 12, 0, false,
                              "input 3 (bias) with key and value split into heads is not supported"},
                         Case{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, 0, 4, false,
                              "input 4 (key_padding_mask) has shape [4], expected [2], [2, 3] or [2, 3, 3]"},
                         Case{{2, 3, 5}, {2, 3, 5}, {2, 3, 5}, 0, 0, false,
                              "input 0 (query) has hidden size 5, expected a positive multiple of num_heads (2)"}}) {
    Fused f;
    qkv(f, cs.q, cs.k, cs.v);
    if (cs.bias > 0) f.Const(Seq(static_cast<std::size_t>(cs.bias), 1, 1), {cs.bias});
    else if (cs.mask > 0) f.Absent();
    if (cs.mask > 0) f.Data(std::vector<std::int32_t>(static_cast<std::size_t>(cs.mask), 3), {cs.mask}, DType::kInt32);
    ir::Node& n = mha(f);
    if (cs.causal) n.SetAttr("unidirectional", ir::Attribute::Int(1));
    fails(f, {{cs.q[0], cs.q[1], cs.v.size() == 3 ? cs.v[2] : cs.v[1] * cs.v[3]}}, cs.part);
  }
  {
    Fused f;
    qkv(f, {2, 3, 4}, {2, 3, 4}, {2, 3, 4});
    for (int i = 0; i < 3; ++i) f.Absent();
    f.Data(Seq(2 * 2 * 1 * 2, 1, 1), {2, 2, 1, 2});
    mha(f);
    fails(f, {{2, 3, 4}}, "inputs 6 (past_key) and 7 (past_value) go together");
  }
  {
    Fused f;
    qkv(f, {2, 3, 4}, {2, 3, 4}, {2, 3, 4});
    mha(f, 4);
    fails(f, {{2, 3, 4}, {2, 2, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 3}}, "output 3 (qk) is not supported");
  }
}

// EmbedLayerNormalization: LayerNormalization(word[ids] + position[pos] +
// segment[seg]) in double; mask_index counts mask == 1 (zeros without a
// mask); embedding_sum is the sum.
TEST(OrtEmbedLayerNorm, SumsNormalisesAndCountsTheMask) {
  const int B = 2, S = 4, V = 7, P = 6, G = 2, H = 5;
  const std::vector<float> word = Seq(V * H, 1.2f, 0.77f), pos = Seq(P * H, 0.7f, 1.31f), seg = Seq(G * H, 0.4f, 0.5f),
                           gamma = Seq(H, 0.5f, 0.9f), beta = Seq(H, 0.3f, 1.7f);
  const std::vector<std::int32_t> ids = {0, 6, 3, 2, 5, 1, 1, 4}, segs = {0, 0, 1, 1, 0, 1, 0, 1},
                                  mask = {1, 1, 2, 0, 1, 1, 1, 0}, pids = {5, 0, 2, 3};
  for (bool with_segments : {true, false}) {
    SCOPED_TRACE(with_segments ? "segments, mask" : "position_ids [1, S], no mask");
    Fused f;
    f.Data(ids, {B, S}, DType::kInt32);
    if (with_segments) f.Data(segs, {B, S}, DType::kInt32);
    else f.Absent();
    f.Const(word, {V, H});
    f.Const(pos, {P, H});
    if (with_segments) f.Const(seg, {G, H});
    else f.Absent();
    f.Const(gamma, {H});
    f.Const(beta, {H});
    if (with_segments) {
      f.Data(mask, {B, S}, DType::kInt32);
    } else {
      f.Absent();
      f.Data(pids, {1, S}, DType::kInt32);
    }
    std::vector<ir::Value*> outs;
    ir::Node& n = f.Make("EmbedLayerNormalization", 3);
    n.SetAttr("epsilon", ir::Attribute::Float(1e-5f));
    // mask_index is int32: run it as its own output type.
    f.g->outputs()[1]->set_dtype(DType::kInt32);
    test::TempDir dir;
    auto model = CompileAndLoad(std::move(f.g), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> y(B * S * H), sum(B * S * H);
    std::vector<std::int32_t> mi(B, -1);
    std::vector<TensorRef> irefs, orefs = {{y.data(), DType::kFloat32, {B, S, H}},
                                           {mi.data(), DType::kInt32, {B}},
                                           {sum.data(), DType::kFloat32, {B, S, H}}};
    for (auto& fd : f.feeds) irefs.push_back({const_cast<void*>(fd.p), fd.t, fd.s});
    ASSERT_TRUE((*model)->Execute(irefs, orefs).ok());
    std::vector<double> want_y, want_sum;
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < S; ++i) {
        const int r = b * S + i, pr = with_segments ? i : pids[i];
        std::vector<double> e(H);
        double mean = 0, var = 0;
        for (int h = 0; h < H; ++h) {
          e[h] = static_cast<double>(word[ids[r] * H + h]) + pos[pr * H + h] + (with_segments ? seg[segs[r] * H + h] : 0.0);
          mean += e[h] / H;
        }
        for (int h = 0; h < H; ++h) var += (e[h] - mean) * (e[h] - mean) / H;
        for (int h = 0; h < H; ++h) {
          want_sum.push_back(e[h]);
          want_y.push_back((e[h] - mean) / std::sqrt(var + 1e-5) * gamma[h] + beta[h]);
        }
      }
    }
    ExpectNear(y, want_y, 2e-5);
    ExpectNear(sum, want_sum, 1e-6);
    const std::vector<std::int32_t> want_mi = with_segments ? std::vector<std::int32_t>{2, 3}
                                                            : std::vector<std::int32_t>{0, 0};
    EXPECT_EQ(mi, want_mi);
  }
}

// QEmbedLayerNormalization: the tables 8-bit, dequantized ((q - zp) *
// scale) before the sum; against the same double reference.
TEST(OrtEmbedLayerNorm, QuantizedTablesDequantizeFirst) {
  const int B = 1, S = 3, V = 4, P = 3, H = 4;
  std::vector<std::uint8_t> word(V * H), pos(P * H), gamma(H), beta(H);
  for (int i = 0; i < V * H; ++i) word[i] = static_cast<std::uint8_t>((i * 29 + 3) % 256);
  for (int i = 0; i < P * H; ++i) pos[i] = static_cast<std::uint8_t>((i * 61 + 17) % 256);
  for (int i = 0; i < H; ++i) gamma[i] = static_cast<std::uint8_t>(200 + i * 9), beta[i] = static_cast<std::uint8_t>(i * 50);
  const float sw = 0.01f, sp = 0.02f, sg = 0.005f, sb = 0.004f;
  const std::uint8_t zw = 128, zpos = 100, zg = 10, zb = 90;
  const std::vector<std::int32_t> ids = {3, 0, 2}, mask = {1, 0, 1};
  Fused f;
  f.Data(ids, {B, S}, DType::kInt32);
  f.Absent();
  f.Const(word, {V, H}, DType::kUInt8);
  f.Const(pos, {P, H}, DType::kUInt8);
  f.Absent();
  f.Const(gamma, {H}, DType::kUInt8);
  f.Const(beta, {H}, DType::kUInt8);
  f.Data(mask, {B, S}, DType::kInt32);
  for (float v : {sw, sp}) f.Const(std::vector<float>{v}, {});
  f.Absent();
  for (float v : {sg, sb}) f.Const(std::vector<float>{v}, {});
  for (std::uint8_t z : {zw, zpos}) f.Const(std::vector<std::uint8_t>{z}, {}, DType::kUInt8);
  f.Absent();
  for (std::uint8_t z : {zg, zb}) f.Const(std::vector<std::uint8_t>{z}, {}, DType::kUInt8);
  f.Make("QEmbedLayerNormalization");
  auto got = f.Run({{B, S, H}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<double> want;
  for (int i = 0; i < S; ++i) {
    std::vector<double> e(H);
    double mean = 0, var = 0;
    for (int h = 0; h < H; ++h) {
      e[h] = (word[ids[i] * H + h] - zw) * static_cast<double>(sw) + (pos[i * H + h] - zpos) * static_cast<double>(sp);
      mean += e[h] / H;
    }
    for (int h = 0; h < H; ++h) var += (e[h] - mean) * (e[h] - mean) / H;
    for (int h = 0; h < H; ++h) {
      want.push_back((e[h] - mean) / std::sqrt(var + 1e-12) * ((gamma[h] - zg) * static_cast<double>(sg)) +
                     (beta[h] - zb) * static_cast<double>(sb));
    }
  }
  ExpectNear(got.value()[0], want, 2e-5);
}

TEST(OrtEmbedLayerNorm, ErrorsNameTheCulprit) {
  auto fails = [](Fused& f, const std::string& part) {
    auto r = f.Run({{1, 2, 3}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  // input_ids (int32 [1, S] 0..S-1, or float32 where `float_ids`), an
  // optional segment_ids, word [3, 3], position `pos`, no segment table,
  // gamma [3].
  auto embed = [](Fused& f, int seq, Shape pos, bool segment_ids = false, bool float_ids = false) {
    std::vector<std::int32_t> ids(seq);
    for (int i = 0; i < seq; ++i) ids[i] = i;
    if (float_ids) f.Data(std::vector<float>(ids.begin(), ids.end()), {1, seq});
    else f.Data(ids, {1, seq}, DType::kInt32);
    if (segment_ids) f.Data(std::vector<std::int32_t>(seq, 0), {1, seq}, DType::kInt32);
    else f.Absent();
    f.Const(Seq(9, 1, 1), {3, 3});
    f.Const(Seq(static_cast<std::size_t>(pos[0] * pos[1]), 1, 1), pos);
    f.Absent();
    f.Const(Seq(3, 1, 1), {3});
    f.Make("EmbedLayerNormalization");
  };
  {
    Fused f;
    embed(f, 2, {2, 3}, /*segment_ids=*/true);
    fails(f, "inputs 1 (segment_ids) and 4 (segment_embedding) must be both present or both absent");
  }
  {
    Fused f;
    embed(f, 2, {2, 4});
    fails(f, "input 3 (position_embedding) has shape [2,4], expected [rows >= 1, 3]");
  }
  {
    Fused f;
    embed(f, 2, {2, 3}, false, /*float_ids=*/true);
    fails(f, "input type float32 is not supported (supported: int32)");
  }
  {
    Fused f;
    embed(f, 3, {2, 3});
    fails(f, "sequence length 3 exceeds input 3 (position_embedding)'s 2 rows");
  }
}

}  // namespace
}  // namespace kiln
