// Pass "lower-contrib" (after infer-and-fold; required): ONNX Runtime
// contrib ops that Kiln runs as standard ops, rewritten into them.
//
// com.microsoft QLinearAveragePool becomes DequantizeLinear -> AveragePool ->
// QuantizeLinear (Transposes around the pool where channels_last = 1): ONNX
// Runtime's kernel dequantizes, averages in float32 and quantizes as
// round(y / y_scale + zp); QuantizeLinear rounds y / y_scale and adds zp,
// which differs only where y / y_scale lies on a tie (odd zero points), and
// the float sums may differ in order: within one step of it.
//
// com.microsoft QGemm (ops/quant.cc states its definition) becomes
//   [Transpose] -> MatMulInteger(A', B', a_zp, b_zp) [-> Add(C)] -> Cast(float)
//   -> Mul(s) [-> QuantizeLinear(scale 1, y_zp)]
// with s = (alpha * a_scale) * b_scale [/ y_scale] as Mul / Div nodes. Every
// step is the kernel's own arithmetic: the int32 sums are exact, Cast rounds
// to nearest as the kernel's conversion does, the Mul is its one float
// multiply, and QuantizeLinear with scale 1 (x / 1 = x) rounds half to even
// and saturates as its requantisation does (clamping before or after
// rounding agrees: the bounds are integers). Inference then runs again over
// the graph, which folds the scale chain and a constant B's Transpose into
// constants (float32 IEEE products and quotient, as the kernel computes
// them) and lets the later passes see MatMulInteger with constant weights.
// com.microsoft QLinearWhere becomes DequantizeLinear(X), DequantizeLinear(Y)
// -> Where -> QuantizeLinear(z_scale, z_zp): ONNX Runtime maps X and Y
// through tables made the same way, (q - zp) * scale in float32 then
// round_even(v / z_scale) + z_zp saturated, and selects; elementwise the
// two agree bit for bit (where its parameters match the output's, ONNX
// Runtime copies, and the rewrite's (q - zp) * s / s is exactly q - zp).
// com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?,
// bias?) and DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?), which ONNX
// Runtime's graph optimizer writes for quantize_dynamic's chains, become
//   [DynamicQuantizeLinear(A) ->] MatMulInteger(A', B, a_zp, b_zp) -> Cast
//   -> Mul(Mul(a_scale, b_scale)) [-> Add(bias)]
// the form quantize_dynamic writes (fuse-integer-rescale then makes it one
// kernel): float(acc) times ONNX Runtime's multiplier a_scale * b_scale
// (float32), plus the bias. ONNX Runtime's DynamicQuantizeMatMul quantizes
// A as DynamicQuantizeLinear defines (range widened to 0, scale (max -
// min) / 255, zero point rounded half to even, x / scale rounded), so the
// int32 sums are its sums.
//
// ONNX Runtime's fused float ops (FusedConv, FusedGemm, FusedMatMul, the
// Gelu forms, BiasAdd, SkipLayerNormalization) and its BERT attention
// (Attention, QAttention) become the standard ops they fuse; each rewrite
// says its arithmetic where it is written.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

// A scalar constant: float32, or a zero point (uint8 / int8) holding v.
ir::Value* Scalar(ir::Graph& g, const std::string& name, DType t, float v) {
  auto c = std::make_shared<HostTensor>(t, Shape{});
  if (t == DType::kFloat32) *c->mutable_data_as<float>() = v;
  else if (t == DType::kInt8) *c->mutable_data_as<std::int8_t>() = static_cast<std::int8_t>(v);
  else *c->mutable_data_as<std::uint8_t>() = static_cast<std::uint8_t>(v);
  return g.AddConstant(g.UniqueName(name), c);
}

// Adds node `op` named <base>/<suffix> (made unique) of opset `version`,
// writing `out` or a new value.
ir::Node* AddNamed(ir::Graph& g, const std::string& base, const char* op, const std::string& suffix,
                   std::vector<ir::Value*> ins, ir::Value* out, int version) {
  const std::string name = g.UniqueName(base + "/" + suffix);
  if (!out) out = g.AddValue(g.UniqueName(name + "_out"));
  ir::Node* m = g.AddNode(op, name, std::move(ins), {out});
  m->set_since_version(version);
  return m;
}

// The exact integer product as float32, what QGemm and MatMulIntegerToFloat
// share: MatMulInteger(a, b, a_zp, b_zp) (absent zero points: 0 of the
// operand's type) [-> Add(c), int32] -> Cast(float32).
ir::Value* IntegerSumsAsFloat(ir::Graph& g, const std::string& base, ir::Value* a, ir::Value* b, ir::Value* az,
                              ir::Value* bz, DType a_type, DType b_type, ir::Value* c) {
  if (!az) az = Scalar(g, base + "/a_zero_point", a_type, 0.f);
  if (!bz) bz = Scalar(g, base + "/b_zero_point", b_type, 0.f);
  ir::Value* acc = AddNamed(g, base, "MatMulInteger", "matmul", {a, b, az, bz}, nullptr, 10)->output(0);
  if (c) acc = AddNamed(g, base, "Add", "add_c", {acc, c}, nullptr, 13)->output(0);
  ir::Node* cast = AddNamed(g, base, "Cast", "to_float", {acc}, nullptr, 13);
  cast->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kFloat32)));
  return cast->output(0);
}

void LowerQGemm(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "qgemm" : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *a = in(0), *as = in(1), *az = in(2), *b = in(3), *bs = in(4), *bz = in(5), *c = in(6), *ys = in(7),
            *yz = in(8);
  ir::Value* y = n->output(0);
  const float alpha = n->GetFloat("alpha", 1.f);
  const bool ta = n->GetInt("transA", 0) != 0, tb = n->GetInt("transB", 0) != 0;
  const DType a_type = a->dtype(), b_type = b->dtype();
  g.RemoveNode(n);
  auto node = [&](const char* op, const std::string& suffix, std::vector<ir::Value*> ins, ir::Value* out = nullptr,
                  int version = 13) { return AddNamed(g, base, op, suffix, std::move(ins), out, version); };
  auto transposed = [&](ir::Value* v, const char* what) {
    ir::Node* t = node("Transpose", what, {v});
    t->SetAttr("perm", ir::Attribute::Ints({1, 0}));
    return t->output(0);
  };
  if (ta) a = transposed(a, "transpose_a");
  if (tb) b = transposed(b, "transpose_b");
  ir::Value* sums = IntegerSumsAsFloat(g, base, a, b, az, bz, a_type, b_type, c);
  ir::Value* s = node("Mul", "alpha_a_scale", {Scalar(g, base + "/alpha", DType::kFloat32, alpha), as})->output(0);
  s = node("Mul", "scale", {s, bs})->output(0);
  if (ys) s = node("Div", "requant_scale", {s, ys})->output(0);
  ir::Value* f = node("Mul", "scaled", {sums, s}, ys ? nullptr : y)->output(0);
  if (!ys) return;
  auto one = std::make_shared<HostTensor>(DType::kFloat32, yz->shape());
  *one->mutable_data_as<float>() = 1.f;
  node("QuantizeLinear", "quantize", {f, g.AddConstant(g.UniqueName(base + "/one"), one), yz}, y);
}

// QLinearAveragePool(X, x_scale, x_zp?, y_scale, y_zp?) ->
// DequantizeLinear -> [Transpose to NCHW] -> AveragePool -> [Transpose back]
// -> QuantizeLinear (a zero point of X's type where y_zp is absent, so that
// the output keeps X's type).
void LowerQLinearAveragePool(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "qaveragepool" : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *x = in(0), *xs = in(1), *xz = in(2), *ys = in(3), *yz = in(4);
  ir::Value* y = n->output(0);
  const bool last = n->GetInt("channels_last", 0) == 1;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  for (const auto& [k, a] : n->attrs()) {
    if (k != "channels_last") attrs.emplace_back(k, a);
  }
  const DType t = x->dtype();
  g.RemoveNode(n);
  auto node = [&](const char* op, const std::string& suffix, std::vector<ir::Value*> ins, ir::Value* out, int version) {
    return AddNamed(g, base, op, suffix, std::move(ins), out, version);
  };
  std::vector<ir::Value*> dq_ins = {x, xs};
  if (xz) dq_ins.push_back(xz);
  ir::Value* f = node("DequantizeLinear", "dequantize", dq_ins, nullptr, 13)->output(0);
  if (last) {
    ir::Node* t0 = node("Transpose", "to_nchw", {f}, nullptr, 13);
    t0->SetAttr("perm", ir::Attribute::Ints({0, 3, 1, 2}));
    f = t0->output(0);
  }
  ir::Node* pool = node("AveragePool", "average", {f}, nullptr, 11);
  for (auto& [k, a] : attrs) pool->SetAttr(k, a);
  f = pool->output(0);
  if (last) {
    ir::Node* t1 = node("Transpose", "to_nhwc", {f}, nullptr, 13);
    t1->SetAttr("perm", ir::Attribute::Ints({0, 2, 3, 1}));
    f = t1->output(0);
  }
  if (!yz) yz = Scalar(g, base + "/y_zero_point", t, 0.f);
  node("QuantizeLinear", "quantize", {f, ys, yz}, y, 13);
}

// QLinearWhere(condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale,
// z_zp) -> Where(condition, DequantizeLinear(X), DequantizeLinear(Y)) ->
// QuantizeLinear(z_scale, z_zp).
void LowerQLinearWhere(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "qwhere" : n->name();
  std::vector<ir::Value*> in;
  for (int i = 0; i < n->num_inputs(); ++i) in.push_back(n->input(i));
  ir::Value* z = n->output(0);
  g.RemoveNode(n);
  ir::Value* x = AddNamed(g, base, "DequantizeLinear", "dequantize_x", {in[1], in[2], in[3]}, nullptr, 13)->output(0);
  ir::Value* y = AddNamed(g, base, "DequantizeLinear", "dequantize_y", {in[4], in[5], in[6]}, nullptr, 13)->output(0);
  ir::Value* w = AddNamed(g, base, "Where", "where", {in[0], x, y}, nullptr, 16)->output(0);
  AddNamed(g, base, "QuantizeLinear", "quantize", {w, in[7], in[8]}, z, 13);
}

// MatMulIntegerToFloat (dynamic = false) or DynamicQuantizeMatMul.
void LowerIntegerToFloat(ir::Graph& g, ir::Node* n, bool dynamic) {
  const std::string base = n->name().empty() ? (dynamic ? "dqmatmul" : "matmul_to_float") : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *a = in(0), *b = in(1), *as = nullptr, *az = nullptr, *bs, *bz, *bias;
  if (dynamic) {
    bs = in(2), bz = in(3), bias = in(4);
  } else {
    as = in(2), bs = in(3), az = in(4), bz = in(5), bias = in(6);
  }
  ir::Value* y = n->output(0);
  const DType a_type = dynamic ? DType::kUInt8 : a->dtype(), b_type = b->dtype();
  g.RemoveNode(n);
  auto node = [&](const char* op, const std::string& suffix, std::vector<ir::Value*> ins, ir::Value* out = nullptr,
                  int version = 13) { return AddNamed(g, base, op, suffix, std::move(ins), out, version); };
  if (dynamic) {
    const std::string name = g.UniqueName(base + "/quantize_a");
    ir::Value *q = g.AddValue(g.UniqueName(name + "_out")), *qs = g.AddValue(g.UniqueName(name + "_scale")),
              *qz = g.AddValue(g.UniqueName(name + "_zero_point"));
    g.AddNode("DynamicQuantizeLinear", name, {a}, {q, qs, qz})->set_since_version(11);
    a = q, as = qs, az = qz;
  }
  ir::Value* sums = IntegerSumsAsFloat(g, base, a, b, az, bz, a_type, b_type, nullptr);
  ir::Value* s = node("Mul", "scale", {as, bs})->output(0);
  ir::Value* f = node("Mul", "scaled", {sums, s}, bias ? nullptr : y)->output(0);
  if (bias) node("Add", "bias", {f, bias}, y);
}

// ---------------------------------------------------------------------------
// ONNX Runtime's fused ops (src/ops/ort_fused.cc) back into the standard ops
// they fuse; Kiln's fusions (fuse-gelu, fuse-layernorm's LayerNormalization
// kernel, Conv / Gemm activations and residuals) take them from there.

// The latest version Kiln implements of standard op `op`.
int Latest(const char* op) { return ops::OpRegistry::Get().Find(op)->versions.back(); }

// Standard op `op` of its latest version, named <base>/<suffix>.
ir::Node* Std(ir::Graph& g, const std::string& base, const char* op, const std::string& suffix,
              std::vector<ir::Value*> ins, ir::Value* out = nullptr) {
  return AddNamed(g, base, op, suffix, std::move(ins), out, Latest(op));
}

// act(in) -> out, an ONNX activation with its parameters (absent: the op's
// defaults). Clip takes them as inputs (min, max).
void AddActivation(ir::Graph& g, const std::string& base, const std::string& act, ir::Value* in, ir::Value* out,
                   const std::vector<std::pair<const char*, float>>& params) {
  if (act == "Clip") {
    std::vector<ir::Value*> ins = {in};
    for (const auto& [k, v] : params) ins.push_back(Scalar(g, base + "/clip_" + k, DType::kFloat32, v));
    Std(g, base, "Clip", "clip", ins, out);
    return;
  }
  ir::Node* a = Std(g, base, act.c_str(), "activation", {in}, out);
  for (const auto& [k, v] : params) a->SetAttr(k, ir::Attribute::Float(v));
}

// FusedConv(X, W, B?, Z?) -> Conv [-> Add(Z)] -> activation; its
// activation_params are LeakyRelu's alpha, Clip's min and max,
// HardSigmoid's alpha and beta.
void LowerFusedConv(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "fused_conv" : n->name();
  std::vector<ir::Value*> ins;
  for (int i = 0; i < std::min(n->num_inputs(), 3); ++i) ins.push_back(n->input(i));
  ir::Value* z = n->num_inputs() > 3 ? n->input(3) : nullptr;
  ir::Value* y = n->output(0);
  const std::string act = n->GetString("activation", "");
  const std::vector<float> p = n->GetFloats("activation_params");
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  for (const auto& [k, a] : n->attrs()) {
    if (k != "activation" && k != "activation_params") attrs.emplace_back(k, a);
  }
  g.RemoveNode(n);
  ir::Node* conv = Std(g, base, "Conv", "conv", ins);
  for (auto& [k, a] : attrs) conv->SetAttr(k, a);
  ir::Value* t = conv->output(0);
  if (z) t = Std(g, base, "Add", "add_z", {t, z})->output(0);
  std::vector<std::pair<const char*, float>> params;
  if (act == "LeakyRelu") params = {{"alpha", p[0]}};
  else if (act == "Clip") params = {{"min", p[0]}, {"max", p[1]}};
  else if (act == "HardSigmoid") params = {{"alpha", p[0]}, {"beta", p[1]}};
  AddActivation(g, base, act, t, y, params);
}

// FusedGemm(A, B, C?) -> Gemm -> activation (activation_alpha / _beta /
// _gamma as that activation's alpha / beta / gamma where it has them).
void LowerFusedGemm(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "fused_gemm" : n->name();
  std::vector<ir::Value*> ins(n->inputs().begin(), n->inputs().end());
  ir::Value* y = n->output(0);
  const std::string act = n->GetString("activation", "");
  std::vector<std::pair<const char*, float>> params;
  auto take = [&](const char* from, const char* to) {
    if (n->HasAttr(from)) params.emplace_back(to, n->GetFloat(from, 0.f));
  };
  if (act == "LeakyRelu" || act == "Elu" || act == "ThresholdedRelu") take("activation_alpha", "alpha");
  if (act == "HardSigmoid") {
    take("activation_alpha", "alpha");
    take("activation_beta", "beta");
  }
  if (act == "Selu") {
    take("activation_alpha", "alpha");
    take("activation_gamma", "gamma");
  }
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  for (const char* k : {"alpha", "beta", "transA", "transB"}) {
    if (const ir::Attribute* a = n->FindAttr(k)) attrs.emplace_back(k, *a);
  }
  g.RemoveNode(n);
  ir::Node* gemm = Std(g, base, "Gemm", "gemm", ins);
  for (auto& [k, a] : attrs) gemm->SetAttr(k, a);
  AddActivation(g, base, act, gemm->output(0), y, params);
}

// FusedMatMul(A, B) -> [Transpose(A)] [Transpose(B)] -> MatMul [-> Mul(alpha)].
void LowerFusedMatMul(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "fused_matmul" : n->name();
  ir::Value *a = n->input(0), *b = n->input(1), *y = n->output(0);
  const float alpha = n->GetFloat("alpha", 1.f);
  const bool ta = n->GetInt("transA", 0) != 0, tb = n->GetInt("transB", 0) != 0;
  g.RemoveNode(n);
  auto transposed = [&](ir::Value* v, const char* what) {
    const std::int64_t r = static_cast<std::int64_t>(v->shape().size());
    if (r < 2) return v;  // a vector: nothing to transpose
    std::vector<std::int64_t> perm(static_cast<std::size_t>(r));
    for (std::int64_t i = 0; i < r; ++i) perm[i] = i;
    std::swap(perm[r - 1], perm[r - 2]);
    ir::Node* t = Std(g, base, "Transpose", what, {v});
    t->SetAttr("perm", ir::Attribute::Ints(perm));
    return t->output(0);
  };
  if (ta) a = transposed(a, "transpose_a");
  if (tb) b = transposed(b, "transpose_b");
  if (alpha == 1.f) {
    Std(g, base, "MatMul", "matmul", {a, b}, y);
    return;
  }
  ir::Value* p = Std(g, base, "MatMul", "matmul", {a, b})->output(0);
  Std(g, base, "Mul", "alpha", {p, Scalar(g, base + "/alpha", DType::kFloat32, alpha)}, y);
}

// y = (x * (Erf(x / sqrt 2) + 1)) * 0.5, as fuse-gelu matches it.
void ErfGelu(ir::Graph& g, const std::string& base, ir::Value* x, ir::Value* y) {
  ir::Value* d = Std(g, base, "Div", "div_sqrt2", {x, Scalar(g, base + "/sqrt2", DType::kFloat32, 1.41421356f)})->output(0);
  ir::Value* e = Std(g, base, "Erf", "erf", {d})->output(0);
  ir::Value* a = Std(g, base, "Add", "add_one", {e, Scalar(g, base + "/one", DType::kFloat32, 1.f)})->output(0);
  ir::Value* m = Std(g, base, "Mul", "mul_x", {x, a})->output(0);
  Std(g, base, "Mul", "mul_half", {m, Scalar(g, base + "/half", DType::kFloat32, 0.5f)}, y);
}

// Gelu(X), BiasGelu(A, B) = Gelu(A + B), FastGelu(X, bias?) (tanh form of
// X + bias), QuickGelu(X) = X sigmoid(alpha X).
void LowerGelu(ir::Graph& g, ir::Node* n) {
  const std::string op = n->op_type();
  const std::string base = n->name().empty() ? op : n->name();
  ir::Value *x = n->input(0), *bias = n->num_inputs() > 1 ? n->input(1) : nullptr, *y = n->output(0);
  const float alpha = n->GetFloat("alpha", 1.702f);
  g.RemoveNode(n);
  if (bias) x = Std(g, base, "Add", "add_bias", {x, bias})->output(0);
  if (op == "QuickGelu") {
    ir::Value* s = Std(g, base, "Mul", "scale", {x, Scalar(g, base + "/alpha", DType::kFloat32, alpha)})->output(0);
    s = Std(g, base, "Sigmoid", "sigmoid", {s})->output(0);
    Std(g, base, "Mul", "mul_x", {x, s}, y);
    return;
  }
  if (op != "FastGelu") {
    ErfGelu(g, base, x, y);
    return;
  }
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  ir::Value* x2 = Std(g, base, "Mul", "x2", {x, x})->output(0);
  ir::Value* x3 = Std(g, base, "Mul", "x3", {x, x2})->output(0);
  ir::Value* c = Std(g, base, "Mul", "cubic", {Scalar(g, base + "/k", DType::kFloat32, 0.044715f), x3})->output(0);
  ir::Value* s = Std(g, base, "Add", "inner", {x, c})->output(0);
  ir::Value* z =
      Std(g, base, "Mul", "scale", {Scalar(g, base + "/sqrt_2_pi", DType::kFloat32, 0.7978845608f), s})->output(0);
  ir::Value* t = Std(g, base, "Tanh", "tanh", {z})->output(0);
  ir::Value* a = Std(g, base, "Add", "add_one", {t, Scalar(g, base + "/one", DType::kFloat32, 1.f)})->output(0);
  ir::Value* m = Std(g, base, "Mul", "mul_x", {x, a})->output(0);
  Std(g, base, "Mul", "mul_half", {m, Scalar(g, base + "/half", DType::kFloat32, 0.5f)}, y);
}

// BiasAdd(X, bias, skip) -> (X + bias) + skip.
void LowerBiasAdd(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "bias_add" : n->name();
  ir::Value *x = n->input(0), *bias = n->input(1), *skip = n->input(2), *y = n->output(0);
  g.RemoveNode(n);
  ir::Value* t = Std(g, base, "Add", "add_bias", {x, bias})->output(0);
  Std(g, base, "Add", "add_skip", {t, skip}, y);
}

// SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> s = (input +
// skip) [+ bias] -> LayerNormalization(s, gamma, beta; axis -1, epsilon)
// writing output, mean and inv_std_var; s is input_skip_bias_sum.
void LowerSkipLayerNorm(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "skip_layernorm" : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *x = in(0), *skip = in(1), *gamma = in(2), *beta = in(3), *bias = in(4);
  std::vector<ir::Value*> outs(n->outputs().begin(), n->outputs().end());
  const float eps = n->GetFloat("epsilon", 1e-12f);
  g.RemoveNode(n);
  ir::Value* sum_out = outs.size() > 3 ? outs[3] : nullptr;
  ir::Value* s = Std(g, base, "Add", "add_skip", {x, skip}, bias ? nullptr : sum_out)->output(0);
  if (bias) s = Std(g, base, "Add", "add_bias", {s, bias}, sum_out)->output(0);
  std::vector<ir::Value*> ln_ins = {s, gamma};
  if (beta) ln_ins.push_back(beta);
  std::vector<ir::Value*> ln_outs = {outs[0]};
  for (std::size_t j = 1; j < 3 && j < outs.size(); ++j) ln_outs.push_back(outs[j]);
  const std::string name = g.UniqueName(base + "/layernorm");
  ir::Node* ln = g.AddNode("LayerNormalization", name, ln_ins, ln_outs);
  ln->set_since_version(17);
  ln->SetAttr("axis", ir::Attribute::Int(-1));
  ln->SetAttr("epsilon", ir::Attribute::Float(eps));
}

// ---- Attention and QAttention ---------------------------------------------

// A 1-D int64 constant.
ir::Value* Int64s(ir::Graph& g, const std::string& name, const std::vector<std::int64_t>& v) {
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t->mutable_data_as<std::int64_t>());
  return g.AddConstant(g.UniqueName(name), t);
}
// A scalar int64 / int32 constant.
ir::Value* IntScalar(ir::Graph& g, const std::string& name, DType t, std::int64_t v) {
  auto c = std::make_shared<HostTensor>(t, Shape{});
  if (t == DType::kInt64) *c->mutable_data_as<std::int64_t>() = v;
  else *c->mutable_data_as<std::int32_t>() = static_cast<std::int32_t>(v);
  return g.AddConstant(g.UniqueName(name), c);
}

struct AttentionSpec {
  // qkv: the packed projection [B, S, q + k + v] (Attention), else q, k
  // and v apart (MultiHeadAttention): q [B, S, q], k and v [B, L, k] and
  // [B, L, v], or with kv_split [B, N, L, H] already.
  ir::Value *qkv = nullptr, *q = nullptr, *k = nullptr, *v = nullptr;
  bool kv_split = false;
  // past: [2, B, N, P, H] stacked (Attention), or past_k / past_v apart;
  // present: stacked, or present_k / present_v apart.
  ir::Value *mask = nullptr, *past = nullptr, *past_k = nullptr, *past_v = nullptr, *attn_bias = nullptr;
  ir::Value *out = nullptr, *present = nullptr, *present_k = nullptr, *present_v = nullptr;
  std::int64_t heads = 1, q_hidden = 0, v_hidden = 0, mask_len = -1, batch = -1;
  float filter = -10000.f, scale = 0.f;
  bool causal = false;
  bool mask_starts = true;  // a 1-D mask of 2B values holds end and start positions
  // unidirectional where the keys need not be the queries (MultiHeadAttention):
  // the new keys' count L, a scalar int64 that must equal S at run time
  // (ONNX Runtime's causal mask is self-attention's).
  ir::Value* causal_keys = nullptr;
};

// The attention of ONNX Runtime's kernel on the packed projection qkv
// [B, S, q + k + v], as standard ops:
//   Q, K, V = Split(qkv) -> Reshape [B, S, N, H] -> Transpose [B, N, S, H]
//   K, V = Concat(past[0], K), Concat(past[1], V) (present = both, stacked)
//   scores = (Q K^T) * scale + mask [+ attention_bias]
//   output = Softmax(scores) V -> Transpose [B, S, N, Hv] -> Reshape [B, S, v]
// mask is additive: mask_filter_value where a position is masked, else 0,
// as ONNX Runtime's PrepareMask builds it: [B] masks positions at or past
// each end, [2B] also those before min(start, T), [B, T] and [B, S, T]
// where the value is <= 0; unidirectional sets (not adds) the filter value
// for key j > P + i (P the past length).
void LowerAttentionTail(ir::Graph& g, const std::string& base, const AttentionSpec& a) {
  const std::int64_t head = a.q_hidden / a.heads, v_head = a.v_hidden / a.heads;
  auto ints = [&](const char* what, std::vector<std::int64_t> v) { return Int64s(g, base + "/" + what, v); };
  auto perm = [&](ir::Value* v, const char* what, std::vector<std::int64_t> p) {
    ir::Node* t = Std(g, base, "Transpose", what, {v});
    t->SetAttr("perm", ir::Attribute::Ints(p));
    return t->output(0);
  };
  ir::Value *q = a.q, *k = a.k, *v = a.v;
  if (a.qkv) {
    const std::string split_name = g.UniqueName(base + "/split_qkv");
    q = g.AddValue(g.UniqueName(split_name + "_q")), k = g.AddValue(g.UniqueName(split_name + "_k")),
    v = g.AddValue(g.UniqueName(split_name + "_v"));
    ir::Node* split =
        g.AddNode("Split", split_name, {a.qkv, ints("qkv_sizes", {a.q_hidden, a.q_hidden, a.v_hidden})}, {q, k, v});
    split->set_since_version(13);
    split->SetAttr("axis", ir::Attribute::Int(-1));
  }
  auto heads_first = [&](ir::Value* t, std::int64_t h, const char* what) {
    ir::Value* r = Std(g, base, "Reshape", std::string(what) + "_heads", {t, ints("heads_shape", {0, 0, a.heads, h})})
                       ->output(0);
    return perm(r, what, {0, 2, 1, 3});
  };
  q = heads_first(q, head, "q");
  if (!a.kv_split) {
    k = heads_first(k, head, "k");
    v = heads_first(v, v_head, "v");
  }
  ir::Value *past_k = a.past_k, *past_v = a.past_v;
  if (a.past) {
    auto half = [&](std::int64_t i, const char* what) {
      return Std(g, base, "Gather", what, {a.past, IntScalar(g, base + "/index", DType::kInt64, i)})->output(0);
    };
    past_k = half(0, "past_k"), past_v = half(1, "past_v");
  }
  if (past_k) {
    ir::Node* ck = Std(g, base, "Concat", "concat_past_k", {past_k, k});
    ck->SetAttr("axis", ir::Attribute::Int(2));
    ir::Node* cv = Std(g, base, "Concat", "concat_past_v", {past_v, v});
    cv->SetAttr("axis", ir::Attribute::Int(2));
    k = ck->output(0), v = cv->output(0);
  }
  if (a.present) {
    ir::Value* zero = ints("axis0", {0});
    ir::Value* pk = Std(g, base, "Unsqueeze", "present_k", {k, zero})->output(0);
    ir::Value* pv = Std(g, base, "Unsqueeze", "present_v", {v, zero})->output(0);
    Std(g, base, "Concat", "present", {pk, pv}, a.present)->SetAttr("axis", ir::Attribute::Int(0));
  }
  if (a.present_k) Std(g, base, "Identity", "present_key", {k}, a.present_k);
  if (a.present_v) Std(g, base, "Identity", "present_value", {v}, a.present_v);
  ir::Value* scores = Std(g, base, "MatMul", "scores", {q, perm(k, "k_transposed", {0, 1, 3, 2})})->output(0);
  const float scale = a.scale != 0.f ? a.scale : 1.0f / std::sqrt(static_cast<float>(head));
  scores = Std(g, base, "Mul", "scale", {scores, Scalar(g, base + "/scale", DType::kFloat32, scale)})->output(0);

  // The additive mask.
  ir::Value* filter = Scalar(g, base + "/mask_filter_value", DType::kFloat32, a.filter);
  ir::Value* zero_f = Scalar(g, base + "/zero", DType::kFloat32, 0.f);
  // The scores' shape, made once when the mask or causality needs it.
  ir::Value* score_shape = nullptr;
  auto shape_of_scores = [&] {
    if (!score_shape) score_shape = Std(g, base, "Shape", "score_shape", {scores})->output(0);
    return score_shape;
  };
  auto dim = [&](std::int64_t i, const char* what) {  // dim i of scores, a scalar int64
    return Std(g, base, "Gather", what, {shape_of_scores(), IntScalar(g, base + "/dim", DType::kInt64, i)})->output(0);
  };
  auto positions = [&](ir::Value* n, const char* what) {  // [0, n) as int64
    return Std(g, base, "Range", what,
                {IntScalar(g, base + "/start", DType::kInt64, 0), n, IntScalar(g, base + "/step", DType::kInt64, 1)})
        ->output(0);
  };
  auto where = [&](ir::Value* cond, ir::Value* yes, ir::Value* no, const char* what) {
    return Std(g, base, "Where", what, {cond, yes, no})->output(0);
  };
  ir::Value* mask = nullptr;
  ir::Value* total = nullptr;
  if (a.mask) {
    const std::size_t rank = a.mask->shape().size();
    // The mask's own shape is checked where it is used, at run time too:
    // a Reshape to the extents the scores have (the element count must
    // match), so a mask of another batch or length fails the run rather
    // than broadcasting.
    auto score_dims = [&](std::vector<std::int64_t> idx, const char* what) {
      return Std(g, base, "Gather", what, {shape_of_scores(), ints("dims", idx)})->output(0);
    };
    auto reshaped = [&](ir::Value* v, std::vector<ir::Value*> parts, const char* what) {
      ir::Node* target = Std(g, base, "Concat", std::string(what) + "_shape", parts);
      target->SetAttr("axis", ir::Attribute::Int(0));
      return Std(g, base, "Reshape", what, {v, target->output(0)})->output(0);
    };
    if (rank == 1) {
      // [B] end positions, or [2B] ends then starts (the form decided from
      // the compile-time lengths; another length fails the Reshape).
      total = dim(3, "total_length");
      ir::Value* pos = positions(total, "key_positions");
      ir::Value* m = Std(g, base, "Cast", "mask_int64", {a.mask})->output(0);
      m->producer()->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kInt64)));
      const bool starts = a.mask_starts && a.mask_len == 2 * a.batch && a.batch != a.mask_len;
      ir::Value* batch = score_dims({0}, "batch");
      ir::Value *end = m, *start = nullptr;
      if (starts) {
        m = reshaped(m, {ints("two", {2}), batch, ints("one", {1})}, "ends_and_starts");
        end = Std(g, base, "Gather", "ends", {m, IntScalar(g, base + "/row0", DType::kInt64, 0)})->output(0);
        start = Std(g, base, "Gather", "starts", {m, IntScalar(g, base + "/row1", DType::kInt64, 1)})->output(0);
      } else {
        end = reshaped(m, {batch, ints("one", {1})}, "ends");
      }
      ir::Value* out = Std(g, base, "GreaterOrEqual", "past_end", {pos, end})->output(0);
      if (start) {
        ir::Value* before = Std(g, base, "Less", "before_start", {pos, start})->output(0);
        out = Std(g, base, "Or", "masked", {out, before})->output(0);
      }
      mask = reshaped(where(out, filter, zero_f, "mask_values"),
                      {batch, ints("one_one", {1, 1}), score_dims({3}, "key_length")}, "mask_4d");
    } else {
      ir::Value* keep =
          Std(g, base, "Greater", "kept", {a.mask, IntScalar(g, base + "/zero_i32", DType::kInt32, 0)})->output(0);
      ir::Value* values = where(keep, zero_f, filter, "mask_values");
      mask = rank == 2 ? reshaped(values, {score_dims({0}, "batch"), ints("one_one", {1, 1}),
                                           score_dims({3}, "key_length")}, "mask_4d")
                       : reshaped(values, {score_dims({0}, "batch"), ints("one", {1}),
                                           score_dims({2, 3}, "query_key_lengths")}, "mask_4d");
    }
  }
  if (a.causal) {
    if (!total) total = dim(3, "total_length");
    ir::Value* seq = dim(2, "sequence_length");
    ir::Value* past_len = Std(g, base, "Sub", "past_length", {total, seq})->output(0);
    ir::Value* rows = positions(seq, "query_positions");
    if (a.causal_keys) {  // [S] reshaped to [L]: a run with L != S fails here rather than mask wrongly
      ir::Value* len = Std(g, base, "Unsqueeze", "key_length_1d", {a.causal_keys, ints("axis0", {0})})->output(0);
      rows = Std(g, base, "Reshape", "query_positions_as_keys", {rows, len})->output(0);
    }
    rows = Std(g, base, "Add", "query_end", {rows, past_len})->output(0);
    rows = Std(g, base, "Unsqueeze", "query_column", {rows, ints("column", {1})})->output(0);
    ir::Value* later = Std(g, base, "Greater", "later", {positions(total, "key_positions"), rows})->output(0);
    mask = where(later, filter, mask ? mask : zero_f, "causal_mask");
  }
  if (mask) scores = Std(g, base, "Add", "add_mask", {scores, mask})->output(0);
  if (a.attn_bias) scores = Std(g, base, "Add", "add_attention_bias", {scores, a.attn_bias})->output(0);
  ir::Value* probs = Std(g, base, "Softmax", "softmax", {scores})->output(0);
  probs->producer()->SetAttr("axis", ir::Attribute::Int(-1));
  ir::Value* ctx = Std(g, base, "MatMul", "context", {probs, v})->output(0);
  ctx = perm(ctx, "context_transposed", {0, 2, 1, 3});
  Std(g, base, "Reshape", "output", {ctx, ints("output_shape", {0, 0, a.v_hidden})}, a.out);
}

// Attention(input, weights, bias?, mask_index?, past?, attention_bias?):
// qkv = input weights [+ bias], then the attention above.
// QAttention(input, weight, bias, input_scale, weight_scale, mask_index?,
// input_zero_point?, weight_zero_point?, past?): qkv = float(integer sums)
// * (input_scale * weight_scale) + bias, as its kernel's GEMM output
// processor computes it (the chain fuse-integer-rescale makes one kernel).
void LowerAttention(ir::Graph& g, ir::Node* n, bool quantized) {
  const std::string base = n->name().empty() ? (quantized ? "qattention" : "attention") : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  AttentionSpec a{};
  const Shape& x = in(0)->shape();
  a.heads = n->GetInt("num_heads", 1);
  const std::int64_t cols = in(1)->shape()[1];
  const std::vector<std::int64_t> sizes = n->GetInts("qkv_hidden_sizes");
  a.q_hidden = sizes.empty() ? cols / 3 : sizes[0];
  a.v_hidden = sizes.empty() ? cols / 3 : sizes[2];
  a.batch = x[0];
  a.filter = n->GetFloat("mask_filter_value", -10000.f);
  a.scale = n->GetFloat("scale", 0.f);
  a.causal = n->GetInt("unidirectional", 0) != 0;
  a.mask = in(quantized ? 5 : 3);
  a.mask_len = a.mask && a.mask->shape().size() == 1 ? a.mask->shape()[0] : -1;
  a.past = in(quantized ? 8 : 4);
  a.attn_bias = quantized ? nullptr : in(5);
  a.out = n->output(0);
  a.present = n->num_outputs() > 1 ? n->output(1) : nullptr;
  ir::Value *input = in(0), *w = in(1), *bias = in(2);
  ir::Value *xs = in(3), *ws = in(4), *xz = in(6), *wz = in(7);
  const DType xt = input->dtype(), wt = w->dtype();
  g.RemoveNode(n);
  if (quantized) {
    ir::Value* sums = IntegerSumsAsFloat(g, base, input, w, xz, wz, xt, wt, nullptr);
    ir::Value* s = Std(g, base, "Mul", "dequant_scale", {xs, ws})->output(0);
    ir::Value* f = Std(g, base, "Mul", "scaled", {sums, s})->output(0);
    a.qkv = Std(g, base, "Add", "add_bias", {f, bias})->output(0);
  } else {
    a.qkv = Std(g, base, "MatMul", "qkv", {input, w})->output(0);
    if (bias) a.qkv = Std(g, base, "Add", "add_bias", {a.qkv, bias})->output(0);
  }
  LowerAttentionTail(g, base, a);
}

// MultiHeadAttention(query, key, value, bias?, key_padding_mask?,
// attention_bias?, past_key?, past_value?) -> output, present_key?,
// present_value?: bias [q + k + v] split and added to query, key and value
// (3-D), then the attention above on them apart.
void LowerMultiHeadAttention(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "multi_head_attention" : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  auto out = [&](int i) { return i < n->num_outputs() ? n->output(i) : nullptr; };
  AttentionSpec a;
  a.heads = n->GetInt("num_heads", 1);
  a.q = in(0), a.k = in(1), a.v = in(2);
  const Shape &qs = a.q->shape(), &vs = a.v->shape();
  a.kv_split = a.k->shape().size() == 4;
  a.q_hidden = qs[2];
  a.v_hidden = a.kv_split ? vs[3] * a.heads : vs[2];
  a.batch = qs[0];
  a.filter = n->GetFloat("mask_filter_value", -10000.f);
  a.scale = n->GetFloat("scale", 0.f);
  a.causal = n->GetInt("unidirectional", 0) != 0;
  a.mask = in(4);
  a.mask_len = a.mask && a.mask->shape().size() == 1 ? a.mask->shape()[0] : -1;
  a.mask_starts = false;
  a.attn_bias = in(5);
  a.past_k = in(6), a.past_v = in(7);
  a.out = out(0), a.present_k = out(1), a.present_v = out(2);
  ir::Value* bias = in(3);
  g.RemoveNode(n);
  if (a.causal) {
    ir::Value* ks = Std(g, base, "Shape", "key_shape", {a.k})->output(0);
    a.causal_keys = Std(g, base, "Gather", "key_length",
                        {ks, IntScalar(g, base + "/length_axis", DType::kInt64, a.kv_split ? 2 : 1)})->output(0);
  }
  if (bias) {
    const std::string split_name = g.UniqueName(base + "/split_bias");
    ir::Value *bq = g.AddValue(g.UniqueName(split_name + "_q")), *bk = g.AddValue(g.UniqueName(split_name + "_k")),
              *bv = g.AddValue(g.UniqueName(split_name + "_v"));
    ir::Node* split = g.AddNode(
        "Split", split_name, {bias, Int64s(g, base + "/bias_sizes", {a.q_hidden, a.q_hidden, a.v_hidden})}, {bq, bk, bv});
    split->set_since_version(13);
    split->SetAttr("axis", ir::Attribute::Int(0));
    a.q = Std(g, base, "Add", "q_bias", {a.q, bq})->output(0);
    a.k = Std(g, base, "Add", "k_bias", {a.k, bk})->output(0);
    a.v = Std(g, base, "Add", "v_bias", {a.v, bv})->output(0);
  }
  LowerAttentionTail(g, base, a);
}

// EmbedLayerNormalization(input_ids, segment_ids?, word, position,
// segment?, gamma, beta?, mask?, position_ids?) ->
//   s = (Gather(word, ids) + Gather(position, position_ids or 0..S-1))
//       [+ Gather(segment, segment_ids)]  (embedding_sum)
//   output = LayerNormalization(s, gamma, beta; axis -1, epsilon)
//   mask_index = ReduceSum(Cast(mask == 1), axis 1), zeros without a mask
// as ONNX Runtime's kernel sums the rows (word + position + segment) and
// counts the mask. QEmbedLayerNormalization (8-bit tables and vectors, then
// their scales and zero points): the rows gathered 8-bit, then
// DequantizeLinear ((q - zp) * scale, the kernel's dequantization), so the
// tables stay 8-bit.
void LowerEmbedLayerNorm(ir::Graph& g, ir::Node* n, bool quantized) {
  const std::string base = n->name().empty() ? (quantized ? "qembed_layernorm" : "embed_layernorm") : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *ids = in(0), *seg_ids = in(1), *word = in(2), *pos = in(3), *seg = in(4), *gamma = in(5),
            *beta = in(6), *mask = in(7), *pos_ids = quantized ? nullptr : in(8);
  auto out = [&](int j) { return j < n->num_outputs() ? n->output(j) : nullptr; };
  ir::Value *y = out(0), *mask_index = out(1), *sum_out = quantized ? nullptr : out(2);
  const float eps = n->GetFloat("epsilon", 1e-12f);
  // Dequantization parameters (scale, zero point) of word, position,
  // segment, gamma, beta.
  std::array<std::pair<ir::Value*, ir::Value*>, 5> qp{};
  if (quantized) {
    for (int k = 0; k < 5; ++k) qp[k] = {in(8 + k), in(13 + k)};
  }
  g.RemoveNode(n);
  auto dequantized = [&](ir::Value* v, int k, const char* what) {
    if (!quantized) return v;
    return Std(g, base, "DequantizeLinear", what, {v, qp[k].first, qp[k].second})->output(0);
  };
  auto rows = [&](ir::Value* table, ir::Value* index, int k, const char* what) {
    ir::Value* r = Std(g, base, "Gather", what, {table, index})->output(0);
    return dequantized(r, k, what);
  };
  ir::Value* shape = Std(g, base, "Shape", "ids_shape", {ids})->output(0);
  // segment_ids and mask have input_ids' shape, at run time too: a Reshape
  // to it fails the run for another batch or length (rather than a batch of
  // 1 broadcasting), as ONNX Runtime's kernel checks.
  auto as_ids = [&](ir::Value* v, const char* what) {
    return v ? Std(g, base, "Reshape", what, {v, shape})->output(0) : nullptr;
  };
  seg_ids = as_ids(seg_ids, "segment_ids_checked");
  mask = as_ids(mask, "mask_checked");
  auto dim = [&](std::int64_t i, const char* what) {
    return Std(g, base, "Gather", what, {shape, IntScalar(g, base + "/dim", DType::kInt64, i)})->output(0);
  };
  if (!pos_ids) {
    pos_ids = Std(g, base, "Range", "positions",
                  {IntScalar(g, base + "/start", DType::kInt64, 0), dim(1, "sequence_length"),
                   IntScalar(g, base + "/step", DType::kInt64, 1)})
                  ->output(0);
  }
  ir::Value* s = Std(g, base, "Add", "word_plus_position",
                     {rows(word, ids, 0, "word_rows"), rows(pos, pos_ids, 1, "position_rows")},
                     seg ? nullptr : sum_out)
                     ->output(0);
  if (seg) s = Std(g, base, "Add", "plus_segment", {s, rows(seg, seg_ids, 2, "segment_rows")}, sum_out)->output(0);
  std::vector<ir::Value*> ln_ins = {s, dequantized(gamma, 3, "gamma")};
  if (beta) ln_ins.push_back(dequantized(beta, 4, "beta"));
  const std::string ln_name = g.UniqueName(base + "/layernorm");
  ir::Node* ln = g.AddNode("LayerNormalization", ln_name, ln_ins, {y});
  ln->set_since_version(17);
  ln->SetAttr("axis", ir::Attribute::Int(-1));
  ln->SetAttr("epsilon", ir::Attribute::Float(eps));
  if (!mask_index) return;
  if (mask) {
    ir::Value* one = Std(g, base, "Equal", "mask_is_one", {mask, IntScalar(g, base + "/one", DType::kInt32, 1)})->output(0);
    ir::Node* c = Std(g, base, "Cast", "mask_count_terms", {one});
    c->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kInt32)));
    ir::Node* r = Std(g, base, "ReduceSum", "mask_index", {c->output(0), Int64s(g, base + "/axis1", {1})}, mask_index);
    r->SetAttr("keepdims", ir::Attribute::Int(0));
    return;
  }
  ir::Value* batch = Std(g, base, "Unsqueeze", "batch", {dim(0, "batch_size"), Int64s(g, base + "/axis0", {0})})->output(0);
  auto zero = std::make_shared<HostTensor>(DType::kInt32, Shape{1});
  *zero->mutable_data_as<std::int32_t>() = 0;
  Std(g, base, "ConstantOfShape", "mask_index", {batch}, mask_index)->SetAttr("value", ir::Attribute::Tensor(zero));
}

}  // namespace

Status LowerContribOps(ir::Graph& g, const PassOptions& opts) {
  std::vector<ir::Node*> found;
  for (auto& n : g.nodes()) {
    static const std::set<std::string> kLowered = {
        "QGemm",     "QLinearAveragePool", "QLinearWhere", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
        "FusedConv", "FusedGemm",          "FusedMatMul",  "Gelu",                 "BiasGelu",
        "FastGelu",  "QuickGelu",          "BiasAdd",      "SkipLayerNormalization", "Attention",
        "QAttention", "EmbedLayerNormalization", "QEmbedLayerNormalization", "MultiHeadAttention"};
    if (n->domain() == ops::kMicrosoftDomain && kLowered.count(n->op_type())) found.push_back(n.get());
  }
  if (found.empty()) return Status::Ok();
  // The attention and embedding rewrites read their inputs' ranks and
  // lengths as inference checked them: an input whose rank depends on the
  // data (an If's branches) is not supported there.
  for (ir::Node* n : found) {
    const std::string& op = n->op_type();
    if (op != "Attention" && op != "QAttention" && op != "EmbedLayerNormalization" &&
        op != "QEmbedLayerNormalization" && op != "MultiHeadAttention") {
      continue;
    }
    for (int i = 0; i < n->num_inputs(); ++i) {
      if (n->input(i) && n->input(i)->rank_varies()) {
        return Error(StatusCode::kUnimplemented, n->Describe(), ": input ", i, " '", n->input(i)->name(),
                     "' has a rank that depends on the data, which this op does not support");
      }
    }
  }
  for (ir::Node* n : found) {
    const std::string op = n->op_type();
    if (op == "QGemm") LowerQGemm(g, n);
    else if (op == "QLinearAveragePool") LowerQLinearAveragePool(g, n);
    else if (op == "QLinearWhere") LowerQLinearWhere(g, n);
    else if (op == "FusedConv") LowerFusedConv(g, n);
    else if (op == "FusedGemm") LowerFusedGemm(g, n);
    else if (op == "FusedMatMul") LowerFusedMatMul(g, n);
    else if (op == "BiasAdd") LowerBiasAdd(g, n);
    else if (op == "SkipLayerNormalization") LowerSkipLayerNorm(g, n);
    else if (op == "Attention" || op == "QAttention") LowerAttention(g, n, op == "QAttention");
    else if (op == "MultiHeadAttention") LowerMultiHeadAttention(g, n);
    else if (op == "EmbedLayerNormalization" || op == "QEmbedLayerNormalization") {
      LowerEmbedLayerNorm(g, n, op == "QEmbedLayerNormalization");
    }
    else if (op == "Gelu" || op == "BiasGelu" || op == "FastGelu" || op == "QuickGelu") LowerGelu(g, n);
    else LowerIntegerToFloat(g, n, op == "DynamicQuantizeMatMul");
  }
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  return InferShapesAndFold(g, opts);
}

}  // namespace kiln::passes
