// fuse-layernorm: layer normalisation as exporters write it before opset 17
// (PyTorch's nn.LayerNorm: BERT, GPT-2, ViT) becomes one LayerNormalization:
//   mean = ReduceMean(x, trailing axes, keepdims 1)
//   d = x - mean;  v = ReduceMean(Pow(d, 2) or d * d, the same axes)
//   n = d / Sqrt(v + eps)
//   y = n * gamma + beta  (either Mul and Add order; each optional)
// with LayerNormalization's axis the first reduced axis. The intermediates
// must be read only inside the pattern (d twice) and none may be a graph
// output; eps, gamma and beta must be float32 constants, eps one element,
// gamma and beta exactly the normalised extent (leading 1-dims aside); x
// float32 of known rank whose normalised dims are fixed (the others may be
// symbolic). Runs only where the
// target has a LayerNormalization kernel (the device's capability query).
#include <cmath>
#include <set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

float ScalarConst(const ir::Value* v) {
  if (!v || !v->is_constant() || v->dtype() != DType::kFloat32 || NumElements(v->shape()) != 1) return NAN;
  return v->constant()->data_as<float>()[0];
}

// The only reader of `v` if it is `op` (default domain, one output) and `v`
// is not a graph output.
ir::Node* OnlyReader(const ir::Graph& g, const ir::Value* v, const char* op) {
  if (!v || g.IsGraphOutput(v) || v->uses().size() != 1) return nullptr;
  ir::Node* n = v->uses()[0].node;
  return n->op_type() == op && n->domain().empty() && n->num_outputs() == 1 ? n : nullptr;
}

ir::Value* Other(const ir::Node* n, const ir::Value* one) {
  if (n->num_inputs() != 2) return nullptr;
  return n->input(0) == one ? n->input(1) : n->input(1) == one ? n->input(0) : nullptr;
}

// The first reduced axis of a ReduceMean over the trailing axes of its
// rank-`rank` input with keepdims 1, else -1. Axes come from the attribute
// (before opset 18) or a constant input.
std::int64_t TrailingAxis(const ir::Node* r, std::size_t rank) {
  if (r->GetInt("keepdims", 1) != 1 || rank == 0) return -1;
  std::vector<std::int64_t> axes;
  if (r->num_inputs() >= 2 && r->input(1)) {
    if (!r->input(1)->is_constant()) return -1;
    axes = r->input(1)->constant()->ToInt64Vector();
  } else {
    axes = r->GetInts("axes", {});
  }
  if (axes.empty()) return -1;  // all axes: not a row normalisation we fuse
  std::set<std::int64_t> s;
  const auto rk = static_cast<std::int64_t>(rank);
  for (std::int64_t a : axes) {
    if (a < -rk || a >= rk) return -1;
    s.insert(a < 0 ? a + rk : a);
  }
  if (s.size() != axes.size()) return -1;
  const std::int64_t first = *s.begin();
  return *s.rbegin() == rk - 1 && static_cast<std::int64_t>(s.size()) == rk - first ? first : -1;
}

// A float32 constant holding exactly `inner` (leading 1-dims aside), else null.
const HostTensor* ParamConst(const ir::Value* v, const Shape& inner) {
  if (!v || !v->is_constant() || v->dtype() != DType::kFloat32) return nullptr;
  Shape s = v->shape();
  while (s.size() > inner.size() && s.front() == 1) s.erase(s.begin());
  Shape want = inner;
  while (s.size() < want.size() && want.front() == 1) want.erase(want.begin());
  return s == want ? v->constant().get() : nullptr;
}

struct Match {
  ir::Value* x = nullptr;
  ir::Value* y = nullptr;
  std::int64_t axis = 0;
  float eps = 0;
  const HostTensor* gamma = nullptr;  // null: 1
  const HostTensor* beta = nullptr;   // null: 0
  std::vector<ir::Node*> nodes;
};

bool MatchAt(const ir::Graph& g, ir::Node* mean_node, Match* m) {
  ir::Value* x = mean_node->input(0);
  if (!x || x->dtype() != DType::kFloat32 || x->is_constant() || x->shape().empty()) return false;
  const std::int64_t axis = TrailingAxis(mean_node, x->shape().size());
  if (axis < 0) return false;
  const Shape inner(x->shape().begin() + axis, x->shape().end());
  // The normalised extent must be fixed: Scale and Bias get its shape (a
  // symbolic or data-dependent dim's extent here is only a probe or bound).
  for (std::size_t d = static_cast<std::size_t>(axis); d < x->shape().size(); ++d) {
    if (x->shape()[d] <= 0 || (d < 64 && ((x->varying_mask() >> d) & 1))) return false;
  }
  ir::Node* sub = OnlyReader(g, mean_node->output(0), "Sub");
  if (!sub || sub->input(0) != x || sub->input(1) != mean_node->output(0)) return false;
  ir::Value* d = sub->output(0);
  // d's readers: the square (Pow(d, 2), or d * d: two uses) and the Div
  if (g.IsGraphOutput(d) || d->uses().size() < 2 || d->uses().size() > 3) return false;
  ir::Node *sq = nullptr, *div = nullptr;
  for (const auto& u : d->uses()) {
    ir::Node* n = u.node;
    if (!n->domain().empty()) return false;
    if (n->op_type() == "Div" && n->input(0) == d) div = n;
    else if ((n->op_type() == "Pow" && n->input(0) == d) || (n->op_type() == "Mul" && n->input(0) == d && n->input(1) == d)) sq = n;
    else return false;
  }
  if (!sq || !div || sq == div || d->uses().size() != (sq->op_type() == "Mul" ? 3u : 2u)) return false;
  if (sq->op_type() == "Pow" && ScalarConst(sq->input(1)) != 2.f) return false;
  ir::Node* var = OnlyReader(g, sq->output(0), "ReduceMean");
  if (!var || var->input(0) != sq->output(0) || TrailingAxis(var, x->shape().size()) != axis) return false;
  ir::Node* add = OnlyReader(g, var->output(0), "Add");
  if (!add) return false;
  const float eps = ScalarConst(Other(add, var->output(0)));
  if (!(eps >= 0.f) || !std::isfinite(eps)) return false;
  ir::Node* sqrt = OnlyReader(g, add->output(0), "Sqrt");
  if (!sqrt || OnlyReader(g, sqrt->output(0), "Div") != div || div->input(1) != sqrt->output(0)) return false;
  m->nodes = {mean_node, sub, sq, var, add, sqrt, div};
  ir::Value* y = div->output(0);
  // Optional gamma, then optional beta.
  if (ir::Node* mul = OnlyReader(g, y, "Mul")) {
    if (const HostTensor* gm = ParamConst(Other(mul, y), inner)) {
      m->gamma = gm;
      m->nodes.push_back(mul);
      y = mul->output(0);
    }
  }
  if (ir::Node* badd = OnlyReader(g, y, "Add")) {
    if (const HostTensor* bt = ParamConst(Other(badd, y), inner)) {
      m->beta = bt;
      m->nodes.push_back(badd);
      y = badd->output(0);
    }
  }
  if (y->shape() != x->shape() || y->dtype() != DType::kFloat32) return false;
  m->x = x;
  m->y = y;
  m->axis = axis;
  m->eps = eps;
  return true;
}

}  // namespace

Status FuseLayerNorm(ir::Graph& g, const PassOptions& opts) {
  if (opts.target_has_kernel) {  // the target must have the fused op
    ir::Graph probe;
    ir::Value* px = probe.AddValue("x", DType::kFloat32, {1, 2});
    ir::Value* ps = probe.AddValue("s", DType::kFloat32, {2});
    ir::Node* pn = probe.AddNode("LayerNormalization", "probe", {px, ps}, {probe.AddValue("y", DType::kFloat32, {1, 2})});
    pn->set_since_version(17);
    if (!opts.target_has_kernel(*pn)) return Status::Ok();
  }
  std::vector<ir::Node*> means;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "ReduceMean" && n->domain().empty() && n->num_outputs() == 1 && n->num_inputs() >= 1) {
      means.push_back(n.get());
    }
  }
  std::set<const ir::Node*> removed;
  bool changed = false;
  for (ir::Node* mn : means) {
    if (removed.count(mn)) continue;
    Match m;
    if (!MatchAt(g, mn, &m)) continue;
    bool gone = false;
    for (ir::Node* n : m.nodes) gone |= removed.count(n) != 0;
    if (gone) continue;
    const std::string name = g.UniqueName(mn->name() + "_layernorm");
    const Shape inner(m.x->shape().begin() + m.axis, m.x->shape().end());
    // Scale and bias as constants of exactly the normalised shape.
    auto param = [&](const HostTensor* src, float fill, const char* what) {
      auto t = std::make_shared<HostTensor>(DType::kFloat32, inner);
      float* p = t->mutable_data_as<float>();
      for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = src ? src->data_as<float>()[i] : fill;
      return g.AddConstant(g.UniqueName(name + what), t);
    };
    ir::Value* scale = param(m.gamma, 1.f, "_scale");
    std::vector<ir::Value*> ins = {m.x, scale};
    if (m.beta) ins.push_back(param(m.beta, 0.f, "_bias"));
    for (ir::Node* n : m.nodes) {
      removed.insert(n);
      g.RemoveNode(n);
    }
    ir::Node* ln = g.AddNode("LayerNormalization", name, ins, {m.y});
    ln->set_since_version(17);
    ln->SetAttr("axis", ir::Attribute::Int(m.axis));
    ln->SetAttr("epsilon", ir::Attribute::Float(m.eps));
    KILN_RETURN_IF_ERROR(ops::InferNode(*ln));
    changed = true;
  }
  if (changed) {
    g.RemoveUnusedValues();
    KILN_RETURN_IF_ERROR(g.TopologicalSort());
  }
  return Status::Ok();
}

}  // namespace kiln::passes
