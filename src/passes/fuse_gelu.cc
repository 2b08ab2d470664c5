// fuse-gelu: the exact GELU as exporters write it, five elementwise nodes
//   d = x / sqrt(2)   (or x * (1 / sqrt(2)))
//   e = Erf(d);  a = e + 1  (either order)
//   y = (x * a) * 0.5,  or (x * 0.5) * a,  or x * (a * 0.5)  (Muls in either order)
// becomes one kiln.Gelu(x) (BERT, GPT-2, ViT). Every intermediate must be
// read only inside the pattern and none may be a graph output; the
// constants must be scalars (or one element) within 1e-6 of the exact
// values; x must be float32. Runs only where the target has a kiln.Gelu
// kernel (the device's capability query).
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

bool Near(float v, double want) { return std::fabs(static_cast<double>(v) - want) <= 1e-6 * std::fabs(want); }

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
  std::vector<ir::Node*> nodes;  // the five, to remove
};

bool MatchAt(const ir::Graph& g, ir::Node* erf, Match* m) {
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
  if (!scaled || !x || x->dtype() != DType::kFloat32 || x->is_constant()) return false;
  ir::Node* add = OnlyReader(g, erf->output(0), "Add");
  if (!add || !Near(ScalarConst(Other(add, erf->output(0))), 1.0)) return false;
  ir::Value* a = add->output(0);
  ir::Node* m1 = OnlyReader(g, a, "Mul");
  if (!m1) return false;
  ir::Value* partner = Other(m1, a);
  std::vector<ir::Node*> nodes = {d, erf, add, m1};
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

}  // namespace

Status FuseGelu(ir::Graph& g, const PassOptions& opts) {
  if (opts.target_has_kernel) {  // the target must have the fused op
    ir::Graph probe;
    ir::Value* px = probe.AddValue("x", DType::kFloat32, {1});
    ir::Node* pn = probe.AddNode("Gelu", "probe", {px}, {probe.AddValue("y", DType::kFloat32, {1})}, "kiln");
    if (!opts.target_has_kernel(*pn)) return Status::Ok();
  }
  std::vector<ir::Node*> erfs;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "Erf" && n->domain().empty()) erfs.push_back(n.get());
  }
  std::set<const ir::Node*> removed;
  for (ir::Node* erf : erfs) {
    if (removed.count(erf)) continue;
    Match m;
    if (!MatchAt(g, erf, &m)) continue;
    bool gone = false;
    for (ir::Node* n : m.nodes) gone |= removed.count(n) != 0;
    if (gone) continue;
    const std::string name = g.UniqueName(erf->name() + "_gelu");
    for (ir::Node* n : m.nodes) {
      removed.insert(n);
      g.RemoveNode(n);
    }
    ir::Node* gelu = g.AddNode("Gelu", name, {m.x}, {m.y}, "kiln");
    gelu->set_since_version(1);
    KILN_RETURN_IF_ERROR(ops::InferNode(*gelu));
  }
  if (!removed.empty()) {
    g.RemoveUnusedValues();
    KILN_RETURN_IF_ERROR(g.TopologicalSort());
  }
  return Status::Ok();
}

}  // namespace kiln::passes
