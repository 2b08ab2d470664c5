// fuse-qdq: QDQ convolutions (what ONNX Runtime's quantizer writes by
// default) become one QLinearConv, which runs on the int8 kernel:
//
//   x_f = DequantizeLinear(x_q, xs, xzp)          per tensor
//   w_f = DequantizeLinear(w_q, ws, wzp)          constant int8/uint8 weights,
//                                                 per tensor or per output channel (axis 0)
//   b_f = DequantizeLinear(b_q, bs)               optional: constant int32 bias,
//                                                 bs = xs * ws, zero point 0
//   y_f = Conv(x_f, w_f, b_f)                     read only by the QuantizeLinear
//  [y_f = Relu(y_f) or Clip(y_f, lo, hi)]         only where the quantization's
//                                                 saturation does the same clamp
//   y_q = QuantizeLinear(y_f, ys, yzp)            per tensor
//
// becomes y_q = QLinearConv(x_q, xs, xzp, w_q, ws, wzp, ys, yzp, b_q): the
// same arithmetic, with the sum taken exactly in int32 instead of in float.
// Likewise DequantizeLinear(a_q) -> MatMul(., DequantizeLinear(w_q)) ->
// QuantizeLinear, with constant 2-D weights per tensor or per column (axis
// 1), becomes QLinearMatMul, and DequantizeLinear(a_q) + DequantizeLinear(b_q)
// -> [Relu/Clip] -> QuantizeLinear (per tensor, one int8 type) becomes ONNX
// Runtime's com.microsoft QLinearAdd, where the target has its kernel, and
// DequantizeLinear -> MaxPool -> QuantizeLinear with one scale and zero
// point becomes MaxPool on the int8 tensor.
// Scales and zero points must be constants. Anything else (a float bias, a
// Conv output read elsewhere, per-channel activations) stays as the graph
// says; the DequantizeLinears of constant weights are then folded to float32
// weights by infer-and-fold. Runs before inference (the patterns need only
// op types and constants), so the int8 weights are still there.
#include <cmath>
#include <cstring>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

bool Default(const ir::Node* n, const char* op) { return n && n->op_type() == op && n->domain().empty(); }

bool IsConst(const ir::Value* v) { return v && v->is_constant(); }

std::int64_t Count(const ir::Value* v) { return NumElements(v->shape()); }

// A DequantizeLinear node's (input, scale, zero point or null), when its
// scale and zero point are constants of at most `max_count` elements.
struct Dq {
  ir::Value* x = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* zp = nullptr;
  DType type = DType::kUndefined;  // of x
};
bool MatchDq(const ir::Value* v, std::int64_t max_count, Dq* d, std::int64_t channel_axis = 0) {
  ir::Node* n = v ? v->producer() : nullptr;
  if (!Default(n, "DequantizeLinear") || n->num_inputs() < 2) return false;
  d->x = n->input(0);
  d->scale = n->input(1);
  d->zp = n->input(2);
  if (!d->x || !IsConst(d->scale) || d->scale->dtype() != DType::kFloat32) return false;
  // Before inference a computed input's type is unknown: the zero point's
  // (which must equal it) stands for it.
  d->type = d->zp ? d->zp->dtype() : d->x->dtype();
  if (d->zp && (!IsConst(d->zp) || (d->x->dtype() != DType::kUndefined && d->zp->dtype() != d->x->dtype()))) {
    return false;
  }
  if (Count(d->scale) < 1 || Count(d->scale) > max_count || (d->zp && Count(d->zp) != Count(d->scale))) return false;
  if (Count(d->scale) > 1) {  // per channel: along the output-channel axis of the weights only
    const std::int64_t rank = static_cast<std::int64_t>(d->x->shape().size());
    std::int64_t axis = n->GetInt("axis", 1);
    if (axis < 0) axis += rank;
    if (axis != channel_axis) return false;
  }
  return true;
}

bool IsInt8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// Whether a subgraph (If branch, at any depth) lists `v` among its outputs:
// such a reference is not a use, and the value must stay.
bool SubgraphOutput(const ir::Graph& g, const ir::Value* v) {
  for (const auto& n : g.nodes()) {
    for (const auto& [k, a] : n->attrs()) {
      std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs) {
        for (const ir::Value* o : sg->outputs()) {
          if (o == v) return true;
        }
        if (SubgraphOutput(*sg, v)) return true;
      }
    }
  }
  return false;
}

ir::Value* ZeroPoint(ir::Graph& g, const std::string& name, DType t, const Shape& shape) {
  auto z = std::make_shared<HostTensor>(t, shape);
  std::memset(z->mutable_data(), 0, static_cast<std::size_t>(NumElements(shape)) * DTypeSize(t));
  return g.AddConstant(name, z);
}

// A matched DequantizeLinear's zero point, or a zero constant of its type
// and its scale's shape when it has none (the QLinear ops name one).
ir::Value* ZeroPointOf(ir::Graph& g, const Dq& d, const std::string& name) {
  return d.zp ? d.zp : ZeroPoint(g, name, d.type, d.scale->shape());
}

// Replaces q (and act, and the float op) with one node `op` computing q's
// output from two matched operands: a, a_scale, a_zp, b, b_scale, b_zp,
// y_scale, y_zp (QLinearMatMul's and QLinearAdd's input order).
void ReplaceWithQLinear(ir::Graph& g, ir::Node* q, ir::Node* act, ir::Node* op, const Dq& a, const Dq& b,
                        const std::string& base, const char* type, const std::string& domain, int version) {
  std::vector<ir::Value*> ins = {a.x, a.scale, ZeroPointOf(g, a, base + "_a_zero_point"),
                                 b.x, b.scale, ZeroPointOf(g, b, base + "_b_zero_point"), q->input(1), q->input(2)};
  ir::Value* out = q->output(0);
  g.RemoveNode(q);
  if (act) g.RemoveNode(act);
  g.AddNode(type, g.UniqueName(base + "_int8"), ins, {out}, domain)->set_since_version(version);
  g.RemoveNode(op);
}

// DequantizeLinear(a_q) -> MatMul(., DequantizeLinear(w_q)) -> [act] -> q:
// QLinearMatMul, for constant 2-D weights [K, N] quantized per tensor or per
// column (axis 1).
bool FuseMatMul(ir::Graph& g, ir::Node* q, ir::Node* act, ir::Node* mm) {
  Dq a, w;
  if (!MatchDq(mm->input(0), 1, &a) || !IsInt8(a.type)) return false;
  if (!MatchDq(mm->input(1), INT64_MAX, &w, 1) || !IsConst(w.x) || !IsInt8(w.type)) return false;
  const Shape& ws = w.x->shape();
  if (ws.size() != 2 || (Count(w.scale) != 1 && Count(w.scale) != ws[1])) return false;
  ReplaceWithQLinear(g, q, act, mm, a, w, mm->name().empty() ? "qmatmul" : mm->name(), "QLinearMatMul", "", 10);
  return true;
}

// DequantizeLinear(a_q) + DequantizeLinear(b_q) -> [act] -> q, all per
// tensor and of one int8 type: ONNX Runtime's com.microsoft QLinearAdd
// (a residual connection kept in int8).
bool FuseAdd(ir::Graph& g, ir::Node* q, ir::Node* act, ir::Node* add, bool has_kernel) {
  Dq a, b;
  // Before version 7 Add does not broadcast unless told (attributes): not QLinearAdd's NumPy rule.
  if (!has_kernel || add->num_inputs() != 2 || add->since_version() < 7) return false;
  if (!MatchDq(add->input(0), 1, &a) || !MatchDq(add->input(1), 1, &b)) return false;
  const DType t = q->input(2)->dtype();
  if (!IsInt8(a.type) || a.type != t || b.type != t) return false;
  ReplaceWithQLinear(g, q, act, add, a, b, add->name().empty() ? "qadd" : add->name(), "QLinearAdd",
                     ops::kMicrosoftDomain, 1);
  return true;
}

// DequantizeLinear(x_q) -> MaxPool -> QuantizeLinear with the same scale,
// zero point and type (ONNX Runtime's quantizer gives MaxPool's output its
// input's parameters): MaxPool on x_q itself. Dequantizing is increasing
// (scale > 0), so the window's largest float is the largest quantized
// value's, and requantising it with the same parameters gives that value
// back: round((q - zp) * s / s) + zp = q for |q - zp| <= 255 and a normal
// scale small enough that (q - zp) * s is finite. MaxPool-12 takes int8/uint8; no Indices output.
bool FuseMaxPool(ir::Graph& g, ir::Node* q, ir::Node* pool, bool has_kernel) {
  Dq x;
  if (!has_kernel || pool->num_outputs() != 1 || !MatchDq(pool->input(0), 1, &x) || !IsInt8(x.type)) return false;
  ir::Value* ys = q->input(1);
  ir::Value* yzp = q->input(2);
  if (x.type != yzp->dtype()) return false;
  const float s = x.scale->constant()->data_as<float>()[0];
  // (q - zp) * s must stay finite: a scale past FLT_MAX / 256 makes the
  // float MaxPool's input infinite and the QuantizeLinear saturate.
  if (!(std::isnormal(s) && s > 0 && std::isfinite(s * 256.f)) ||
      std::memcmp(&s, ys->constant()->data(), sizeof(float)) != 0) {
    return false;
  }
  const std::size_t zb = DTypeSize(x.type);
  std::uint8_t zero[1] = {0};
  const void* xz = x.zp ? x.zp->constant()->data() : zero;
  if (std::memcmp(xz, yzp->constant()->data(), zb) != 0) return false;
  ir::Value* out = q->output(0);
  std::vector<std::pair<std::string, ir::Attribute>> attrs(pool->attrs().begin(), pool->attrs().end());
  const std::string base = pool->name().empty() ? "maxpool" : pool->name();
  g.RemoveNode(q);
  ir::Node* p = g.AddNode("MaxPool", g.UniqueName(base + "_int8"), {x.x}, {out});
  for (auto& [k, a] : attrs) p->SetAttr(k, a);
  p->set_since_version(12);
  g.RemoveNode(pool);
  return true;
}

// The int32 bias of an operation on x and w with n output channels: v a
// DequantizeLinear of a constant int32 [n] with zero point 0 and scale x's
// times w's (per channel), so that it adds to the int32 sum as it is; its
// int32 values, or null.
ir::Value* Int32BiasOf(ir::Value* v, const Dq& x, const Dq& w, std::int64_t n) {
  Dq b;
  if (!MatchDq(v, INT64_MAX, &b) || !IsConst(b.x) || b.x->dtype() != DType::kInt32) return nullptr;
  if (b.x->shape() != Shape{n} || (Count(b.scale) != 1 && Count(b.scale) != n)) return nullptr;
  if (b.zp) {
    for (std::int64_t i = 0; i < Count(b.zp); ++i) {
      if (b.zp->constant()->data_as<std::int32_t>()[i] != 0) return nullptr;
    }
  }
  const float xs = x.scale->constant()->data_as<float>()[0];
  const float* wsc = w.scale->constant()->data_as<float>();
  const float* bsc = b.scale->constant()->data_as<float>();
  for (std::int64_t c = 0; c < n; ++c) {
    const double want = static_cast<double>(xs) * wsc[Count(w.scale) == 1 ? 0 : c];
    const double got = bsc[Count(b.scale) == 1 ? 0 : c];
    if (!(std::fabs(got - want) <= 1e-6 * std::fabs(want))) return nullptr;
  }
  return b.x;
}

// DequantizeLinear(a_q) -> Gemm(., DequantizeLinear(w_q)[, DequantizeLinear(c_q)])
// [-> act -> QuantizeLinear q]: ONNX Runtime's com.microsoft QGemm (its QDQ
// transformer's rewrite), lowered by lower-contrib to MatMulInteger and a
// rescale. Constant 2-D weights per tensor or per output column (axis 0
// with transB, else 1); an int32 bias [N] with scale a_scale * w_scale and
// zero point 0; alpha 1 (and beta 1 with a bias). Without q the QGemm
// writes the float32 result itself (a classifier's logits).
bool FuseGemm(ir::Graph& g, ir::Node* q, ir::Node* act, ir::Node* gemm) {
  if (gemm->num_outputs() != 1 || gemm->num_inputs() < 2 || gemm->since_version() < 7) return false;
  const bool tb = gemm->GetInt("transB", 0) != 0;
  if (gemm->GetFloat("alpha", 1.f) != 1.f || (gemm->input(2) && gemm->GetFloat("beta", 1.f) != 1.f)) return false;
  Dq a, w;
  if (!MatchDq(gemm->input(0), 1, &a) || !IsInt8(a.type)) return false;
  if (!MatchDq(gemm->input(1), INT64_MAX, &w, tb ? 0 : 1) || !IsConst(w.x) || !IsInt8(w.type)) return false;
  const Shape& ws = w.x->shape();
  if (ws.size() != 2) return false;
  const std::int64_t n = tb ? ws[0] : ws[1];
  if (Count(w.scale) != 1 && Count(w.scale) != n) return false;
  ir::Value* bias = nullptr;
  if (gemm->input(2) && !(bias = Int32BiasOf(gemm->input(2), a, w, n))) return false;
  const std::string base = gemm->name().empty() ? "qgemm" : gemm->name();
  std::vector<ir::Value*> ins = {a.x, a.scale, ZeroPointOf(g, a, base + "_a_zero_point"),
                                 w.x, w.scale, ZeroPointOf(g, w, base + "_w_zero_point"), bias};
  if (q) {
    ins.push_back(q->input(1));
    ins.push_back(q->input(2));
  } else if (!bias) {
    ins.pop_back();
  }
  ir::Value* out = q ? q->output(0) : gemm->output(0);
  const std::int64_t ta = gemm->GetInt("transA", 0);
  if (q) g.RemoveNode(q);
  if (act) g.RemoveNode(act);
  g.RemoveNode(gemm);
  ir::Node* qg = g.AddNode("QGemm", g.UniqueName(base + "_int8"), ins, {out}, ops::kMicrosoftDomain);
  qg->SetAttr("transA", ir::Attribute::Int(ta));
  qg->SetAttr("transB", ir::Attribute::Int(tb ? 1 : 0));
  qg->set_since_version(1);
  return true;
}

bool FuseAt(ir::Graph& g, ir::Node* q, bool add_kernel, bool pool_kernel) {
  if (q->num_inputs() < 3 || !q->input(0) || !IsConst(q->input(1)) || !IsConst(q->input(2))) return false;
  ir::Value* ys = q->input(1);
  ir::Value* yzp = q->input(2);
  if (ys->dtype() != DType::kFloat32 || Count(ys) != 1 || Count(yzp) != 1 || !IsInt8(yzp->dtype())) return false;
  ir::Value* yf = q->input(0);
  if (SubgraphOutput(g, yf)) return false;
  ir::Node* conv = yf->producer();
  ir::Node* act = nullptr;
  if (Default(conv, "Relu") || Default(conv, "Clip")) {
    // Conv -> Relu/Clip -> Q: the activation is the quantization's own
    // saturation when its range covers the output type's (Relu with the
    // zero point at the type's minimum; Clip(0, 6) with ys * (qmax - zp) <=
    // 6): q(act(v)) == q(v) for every v.
    act = conv;
    if (g.IsGraphOutput(yf) || yf->uses().size() != 1 || !act->input(0)) return false;
    const bool u8 = yzp->dtype() == DType::kUInt8;
    const float zp = u8 ? yzp->constant()->data_as<std::uint8_t>()[0] : yzp->constant()->data_as<std::int8_t>()[0];
    const float qmin = u8 ? 0.f : -128.f, qmax = u8 ? 255.f : 127.f;
    const float scale = ys->constant()->data_as<float>()[0];
    float lo = 0, hi = INFINITY;
    if (act->op_type() == "Clip") {
      if (act->since_version() < 11) {
        lo = act->GetFloat("min", -INFINITY);
        hi = act->GetFloat("max", INFINITY);
      } else {
        for (int i : {1, 2}) {
          const ir::Value* b = act->input(i);
          if (!b) continue;
          if (!IsConst(b) || b->dtype() != DType::kFloat32 || Count(b) != 1) return false;
          (i == 1 ? lo : hi) = b->constant()->data_as<float>()[0];
        }
      }
    }
    if (!(scale > 0) || lo > 0 || std::nearbyint(lo / scale) + zp > qmin) return false;
    if (!(hi == INFINITY || std::nearbyint(hi / scale) + zp >= qmax)) return false;
    yf = act->input(0);
    if (SubgraphOutput(g, yf)) return false;
    conv = yf->producer();
  }
  if (Default(conv, "MatMul") && !g.IsGraphOutput(yf) && yf->uses().size() == 1) return FuseMatMul(g, q, act, conv);
  if (Default(conv, "Gemm") && !g.IsGraphOutput(yf) && yf->uses().size() == 1) return FuseGemm(g, q, act, conv);
  if (Default(conv, "MaxPool") && !act && !g.IsGraphOutput(yf) && yf->uses().size() == 1) {
    return FuseMaxPool(g, q, conv, pool_kernel);
  }
  if (Default(conv, "Add") && !g.IsGraphOutput(yf) && yf->uses().size() == 1 && conv->num_outputs() == 1) {
    return FuseAdd(g, q, act, conv, add_kernel);
  }
  if (!Default(conv, "Conv") || g.IsGraphOutput(yf) || yf->uses().size() != 1 || conv->num_outputs() != 1) return false;
  Dq x, w;
  if (!MatchDq(conv->input(0), 1, &x) || !IsInt8(x.type)) return false;
  if (!MatchDq(conv->input(1), INT64_MAX, &w) || !IsConst(w.x) || !IsInt8(w.type)) return false;
  const Shape& ws = w.x->shape();
  if (ws.empty() || (Count(w.scale) != 1 && Count(w.scale) != ws[0])) return false;
  ir::Value* bias = nullptr;
  if (conv->input(2) && !(bias = Int32BiasOf(conv->input(2), x, w, ws[0]))) return false;
  const std::string base = conv->name().empty() ? "qconv" : conv->name();
  ir::Value* xzp = ZeroPointOf(g, x, base + "_x_zero_point");
  ir::Value* wzp = ZeroPointOf(g, w, base + "_w_zero_point");
  std::vector<ir::Value*> ins = {x.x, x.scale, xzp, w.x, w.scale, wzp, ys, yzp};
  if (bias) ins.push_back(bias);
  ir::Value* out = q->output(0);
  std::vector<std::pair<std::string, ir::Attribute>> attrs(conv->attrs().begin(), conv->attrs().end());
  g.RemoveNode(q);
  if (act) g.RemoveNode(act);
  ir::Node* qc = g.AddNode("QLinearConv", g.UniqueName(base + "_int8"), ins, {out});
  for (auto& [k, a] : attrs) qc->SetAttr(k, a);
  qc->set_since_version(10);
  g.RemoveNode(conv);
  return true;
}

}  // namespace

Status FuseQdq(ir::Graph& g, const PassOptions& opts) {
  bool add_kernel = true, pool_kernel = true;
  if (opts.target_has_kernel) {  // the target's capability query: is there a QLinearConv kernel?
    ir::Graph probe;
    if (!opts.target_has_kernel(*probe.AddNode("QLinearConv", "probe", {}, {})) ||
        !opts.target_has_kernel(*probe.AddNode("QLinearMatMul", "probe2", {}, {}))) {
      return Status::Ok();
    }
    add_kernel = opts.target_has_kernel(*probe.AddNode("QLinearAdd", "probe3", {}, {}, ops::kMicrosoftDomain));
    pool_kernel = opts.target_has_kernel(*probe.AddNode("MaxPool", "probe4", {}, {}));
  }
  std::vector<ir::Node*> qs;
  for (const auto& n : g.nodes()) {
    if (Default(n.get(), "QuantizeLinear")) qs.push_back(n.get());
  }
  bool any = false;
  for (ir::Node* q : qs) any |= FuseAt(g, q, add_kernel, pool_kernel);
  // Gemms of dequantized operands whose output stays float32 (no
  // QuantizeLinear took them above).
  std::vector<ir::Node*> gemms;
  for (const auto& n : g.nodes()) {
    if (Default(n.get(), "Gemm") && n->num_outputs() == 1 && n->output(0) && !SubgraphOutput(g, n->output(0))) {
      gemms.push_back(n.get());
    }
  }
  for (ir::Node* gm : gemms) any |= FuseGemm(g, nullptr, nullptr, gm);
  if (!any) return Status::Ok();
  g.RemoveUnusedValues();
  return g.TopologicalSort();
}

}  // namespace kiln::passes
