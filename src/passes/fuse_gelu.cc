// fuse-gelu: GELU as exporters write it becomes one kiln.Gelu(x) (BERT,
// GPT-2, ViT). The exact (erf) form, five elementwise nodes:
//   d = x / sqrt(2)   (or x * (1 / sqrt(2)))
//   e = Erf(d);  a = e + 1  (either order)
//   y = (x * a) * 0.5,  or (x * 0.5) * a,  or x * (a * 0.5)  (Muls in either order)
// The tanh approximation (GPT-2's gelu_new, PyTorch's gelu(approximate=
// "tanh") as torch.onnx writes it), with approximate="tanh":
//   c = Pow(x, 3)  or  x * (x * x)  or  (x * x) * x
//   s = x + 0.044715 * c;  z = sqrt(2 / pi) * s;  t = Tanh(z);  a = t + 1
//   y as above.
// Every intermediate must be read only inside the pattern and none may be a
// graph output; the constants must be scalars (or one element) within 1e-6
// of the exact values, or exactly those values rounded to float16 or
// bfloat16 (a half model computed in float32: its sqrt(2) is 1.4140625,
// and GELU with the exact constant differs from it by less than the half
// type's rounding); x must be float32. Runs only where the target has a
// kiln.Gelu kernel of that form (the device's capability query).
#include <cmath>
#include <set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

// The single float value of a one-element float32 constant, else NaN.
float ScalarConst(const ir::Value* v) {
  if (!v || !v->is_constant() || v->dtype() != DType::kFloat32 || NumElements(v->shape()) != 1) return NAN;
  return v->constant()->data_as<float>()[0];
}

bool Near(float v, double want) {
  if (std::fabs(static_cast<double>(v) - want) <= 1e-6 * std::fabs(want)) return true;
  const float f = static_cast<float>(want);
  return v == HalfToFloat(FloatToHalf(f)) || v == BFloat16ToFloat(FloatToBFloat16(f));
}

// The node reading `v` if it is its only reader (and `v` is not a graph
// output) and has type `op` in the default domain.
ir::Node* OnlyReader(const ir::Graph& g, const ir::Value* v, const char* op) {
  if (g.IsGraphOutput(v) || v->uses().size() != 1) return nullptr;
  ir::Node* n = v->uses()[0].node;
  return n->op_type() == op && n->domain().empty() && n->num_outputs() == 1 ? n : nullptr;
}

// The other input of a two-input node, given one of them.
ir::Value* Other(const ir::Node* n, const ir::Value* one) {
  if (n->num_inputs() != 2) return nullptr;
  return n->input(0) == one ? n->input(1) : n->input(1) == one ? n->input(0) : nullptr;
}

struct Match {
  ir::Value* x = nullptr;
  ir::Value* y = nullptr;
  std::vector<ir::Node*> nodes;  // the pattern's nodes, to remove
};

// The producer of `v` if it is `op` in the default domain with two inputs,
// `v` is its only output, read once and not a graph output.
ir::Node* SingleUseProducer(const ir::Graph& g, const ir::Value* v, const char* op) {
  if (!v || g.IsGraphOutput(v) || v->uses().size() != 1) return nullptr;
  ir::Node* n = v->producer();
  return n && n->op_type() == op && n->domain().empty() && n->num_inputs() == 2 && n->num_outputs() == 1 ? n
                                                                                                         : nullptr;
}

// The part both forms share, from f (Erf or Tanh) on: a = f(..) + 1, then
// y = x * a * 0.5 in one of three orders; `nodes` holds the pattern's nodes
// before f's output and f.
bool MatchTail(const ir::Graph& g, ir::Value* x, ir::Node* f, std::vector<ir::Node*> nodes, Match* m) {
  if (!x || x->dtype() != DType::kFloat32 || x->is_constant()) return false;
  ir::Node* add = OnlyReader(g, f->output(0), "Add");
  if (!add || !Near(ScalarConst(Other(add, f->output(0))), 1.0)) return false;
  ir::Value* a = add->output(0);
  ir::Node* m1 = OnlyReader(g, a, "Mul");
  if (!m1) return false;
  ir::Value* partner = Other(m1, a);
  nodes.push_back(add);
  nodes.push_back(m1);
  if (partner == x) {  // (x * a) * 0.5
    ir::Node* m2 = OnlyReader(g, m1->output(0), "Mul");
    if (!m2 || !Near(ScalarConst(Other(m2, m1->output(0))), 0.5)) return false;
    nodes.push_back(m2);
    m->y = m2->output(0);
  } else if (partner && Near(ScalarConst(partner), 0.5)) {  // x * (a * 0.5)
    ir::Node* m2 = OnlyReader(g, m1->output(0), "Mul");
    if (!m2 || Other(m2, m1->output(0)) != x) return false;
    nodes.push_back(m2);
    m->y = m2->output(0);
  } else if (partner && partner->producer()) {  // (x * 0.5) * a
    ir::Node* h = partner->producer();
    if (h->op_type() != "Mul" || !h->domain().empty() || g.IsGraphOutput(partner) || partner->uses().size() != 1 ||
        Other(h, x) == nullptr || !Near(ScalarConst(Other(h, x)), 0.5)) {
      return false;
    }
    nodes.push_back(h);
    m->y = m1->output(0);
  } else {
    return false;
  }
  if (m->y->shape() != x->shape() || m->y->dtype() != DType::kFloat32) return false;
  m->x = x;
  m->nodes = std::move(nodes);
  return true;
}

bool MatchErfAt(const ir::Graph& g, ir::Node* erf, Match* m) {
  if (erf->num_inputs() != 1 || !erf->input(0)) return false;
  ir::Node* d = erf->input(0)->producer();
  if (!d || !d->domain().empty() || d->num_inputs() != 2 || g.IsGraphOutput(d->output(0)) ||
      d->output(0)->uses().size() != 1) {
    return false;
  }
  ir::Value* x = d->input(0);
  const float c = ScalarConst(d->input(1));
  const bool scaled = (d->op_type() == "Div" && Near(c, std::sqrt(2.0))) ||
                      (d->op_type() == "Mul" && Near(c, 1.0 / std::sqrt(2.0)));
  return scaled && MatchTail(g, x, erf, {d, erf}, m);
}

bool MatchTanhAt(const ir::Graph& g, ir::Node* tanh, Match* m) {
  if (tanh->num_inputs() != 1) return false;
  // z = sqrt(2/pi) * s
  ir::Node* zn = SingleUseProducer(g, tanh->input(0), "Mul");
  if (!zn) return false;
  const double k0 = std::sqrt(2.0 / 3.14159265358979323846);
  ir::Value* s = Near(ScalarConst(zn->input(0)), k0) ? zn->input(1) : zn->input(0);
  if (!Near(ScalarConst(Other(zn, s)), k0)) return false;
  // s = x + q, q = 0.044715 * c: try both addends as q
  ir::Node* sn = SingleUseProducer(g, s, "Add");
  if (!sn) return false;
  for (int qi = 0; qi < 2; ++qi) {
    ir::Value* q = sn->input(qi);
    ir::Value* x = sn->input(1 - qi);
    ir::Node* qn = SingleUseProducer(g, q, "Mul");
    if (!qn || !x) continue;
    ir::Value* c = Near(ScalarConst(qn->input(0)), 0.044715) ? qn->input(1) : qn->input(0);
    if (!Near(ScalarConst(Other(qn, c)), 0.044715)) continue;
    std::vector<ir::Node*> nodes = {zn, sn, qn};
    if (ir::Node* pow = SingleUseProducer(g, c, "Pow")) {  // Pow(x, 3)
      // exactly 3: Pow(x, 3.0000002) is NaN for negative x
      if (pow->input(0) != x || ScalarConst(pow->input(1)) != 3.f) continue;
      nodes.push_back(pow);
    } else if (ir::Node* cube = SingleUseProducer(g, c, "Mul")) {  // x * (x * x), either order
      ir::Value* sq = Other(cube, x);
      ir::Node* sqn = SingleUseProducer(g, sq, "Mul");
      if (!sqn || sqn->input(0) != x || sqn->input(1) != x) continue;
      nodes.push_back(cube);
      nodes.push_back(sqn);
    } else {
      continue;
    }
    nodes.push_back(tanh);
    if (MatchTail(g, x, tanh, std::move(nodes), m)) return true;
  }
  return false;
}

// Whether the target runs kiln.Gelu with `approximate`.
bool TargetHasGelu(const PassOptions& opts, const char* approximate) {
  if (!opts.target_has_kernel) return true;
  ir::Graph probe;
  ir::Value* px = probe.AddValue("x", DType::kFloat32, {1});
  ir::Node* pn = probe.AddNode("Gelu", "probe", {px}, {probe.AddValue("y", DType::kFloat32, {1})}, "kiln");
  pn->SetAttr("approximate", ir::Attribute::String(approximate));
  return opts.target_has_kernel(*pn);
}

}  // namespace

Status FuseGelu(ir::Graph& g, const PassOptions& opts) {
  const bool erf_ok = TargetHasGelu(opts, "none"), tanh_ok = TargetHasGelu(opts, "tanh");
  std::vector<ir::Node*> starts;  // Erf and Tanh nodes
  for (auto& n : g.nodes()) {
    if (!n->domain().empty() || n->num_outputs() != 1) continue;
    if ((n->op_type() == "Erf" && erf_ok) || (n->op_type() == "Tanh" && tanh_ok)) starts.push_back(n.get());
  }
  std::set<const ir::Node*> removed;
  for (ir::Node* f : starts) {
    if (removed.count(f)) continue;
    const bool tanh = f->op_type() == "Tanh";
    Match m;
    if (!(tanh ? MatchTanhAt(g, f, &m) : MatchErfAt(g, f, &m))) continue;
    bool gone = false;
    for (ir::Node* n : m.nodes) gone |= removed.count(n) != 0;
    if (gone) continue;
    const std::string name = g.UniqueName(f->name() + "_gelu");
    for (ir::Node* n : m.nodes) {
      removed.insert(n);
      g.RemoveNode(n);
    }
    ir::Node* gelu = g.AddNode("Gelu", name, {m.x}, {m.y}, "kiln");
    gelu->set_since_version(1);
    if (tanh) gelu->SetAttr("approximate", ir::Attribute::String("tanh"));
    KILN_RETURN_IF_ERROR(ops::InferNode(*gelu));
  }
  if (!removed.empty()) {
    g.RemoveUnusedValues();
    KILN_RETURN_IF_ERROR(g.TopologicalSort());
  }
  return Status::Ok();
}

}  // namespace kiln::passes
