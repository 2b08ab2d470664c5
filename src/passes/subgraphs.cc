// Subgraphs (If branches).
//
// InlineConstantIf (called by infer-and-fold when an If's condition is a
// compile-time constant): the taken branch's nodes and constants move into
// the enclosing graph and the If disappears.
// LowerSubgraphs (pass "lower-subgraphs", after infer-and-fold): every value
// a subgraph (or a graph nested in it) reads from an enclosing graph becomes
// an explicit input of the node and a graph input of each of its subgraphs,
// constants excepted (they are copied into the subgraph, so folding and
// weight packing still see them). Each subgraph is then compiled by the
// default pipeline on its own, nested subgraphs included, so the CPU kernel
// can plan and run it as a self-contained graph.
#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

std::vector<std::pair<std::string, ir::Graph*>> Subgraphs(const ir::Node& n) {
  std::vector<std::pair<std::string, ir::Graph*>> out;
  for (auto& [k, a] : n.attrs()) {
    if (a.g) out.emplace_back(k, a.g.get());
    for (auto& g : a.graphs) out.emplace_back(k, g.get());
  }
  return out;
}

// Replaces references to values in `map` throughout `g` and graphs nested in it.
void Remap(ir::Graph& g, const std::unordered_map<ir::Value*, ir::Value*>& map) {
  auto m = [&](ir::Value* v) {
    auto it = map.find(v);
    return it == map.end() ? v : it->second;
  };
  for (auto& n : g.nodes()) {
    for (int i = 0; i < n->num_inputs(); ++i) {
      if (n->input(i) && m(n->input(i)) != n->input(i)) n->SetInput(i, m(n->input(i)));
    }
    for (auto& [k, sg] : Subgraphs(*n)) Remap(*sg, map);
  }
  for (ir::Value*& o : g.outputs()) o = m(o);
}

bool Inside(const ir::Graph* owner, const ir::Graph& root) {
  for (const ir::Graph* g = owner; g; g = g->parent()) {
    if (g == &root) return true;
  }
  return false;
}

// Values read by `g` or graphs nested in it that belong to graphs enclosing `root`.
void CollectCaptures(const ir::Graph& g, const ir::Graph& root, std::vector<ir::Value*>& out) {
  auto add = [&](ir::Value* v) {
    if (v && !Inside(v->owner(), root) && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (auto& n : g.nodes()) {
    for (ir::Value* in : n->inputs()) add(in);
    for (auto& [k, sg] : Subgraphs(*n)) CollectCaptures(*sg, root, out);
  }
  for (ir::Value* o : g.outputs()) add(o);
}

// A branch kept uncompiled (valid only at other extents than the probe's):
// its values get the types inference gives at the probe where it can, and
// where a node fails there, its outputs take its first input's type as a
// placeholder (a file records a type for every value). A plan that takes
// the branch infers it again at its own extents, types included.
void PlaceholderTypes(ir::Graph& g) {
  for (auto& n : g.nodes()) {
    if (ops::InferNode(*n).ok()) continue;
    DType t = DType::kFloat32;
    for (const ir::Value* in : n->inputs()) {
      if (in && in->dtype() != DType::kUndefined) {
        t = in->dtype();
        break;
      }
    }
    for (ir::Value* o : n->outputs()) {
      if (o && o->dtype() == DType::kUndefined) o->set_dtype(t);
    }
  }
}

}  // namespace

Result<std::vector<ir::Node*>> InlineConstantIf(ir::Graph& g, ir::Node* n) {
  const bool cond = *static_cast<const std::uint8_t*>(n->input(0)->constant()->data()) != 0;
  const char* name = cond ? "then_branch" : "else_branch";
  std::shared_ptr<ir::Graph> b = n->FindAttr(name)->g;  // outlives the If
  KILN_RETURN_IF_ERROR(RejectInternalOps(*b, {}).WithContext(StrCat(n->Describe(), " attribute '", name, "'")));
  std::unordered_map<ir::Value*, ir::Value*> map;
  for (std::size_t i = 0; i < b->inputs().size(); ++i) map[b->inputs()[i]] = n->input(static_cast<int>(i) + 1);
  std::unordered_set<ir::Value*> moved;
  for (auto& v : b->values()) {
    if (map.count(v.get())) continue;
    ir::Value* nv = v->is_constant() ? g.AddConstant(v->name(), v->constant())
                                     : g.AddValue(v->name(), v->dtype(), v->shape());
    map[v.get()] = nv;
    moved.insert(nv);
  }
  auto m = [&](ir::Value* v) { return v && map.count(v) ? map[v] : v; };
  std::vector<ir::Node*> added;
  for (auto& bn : b->nodes()) {
    std::vector<ir::Value*> ins, outs;
    for (ir::Value* v : bn->inputs()) ins.push_back(m(v));
    for (ir::Value* v : bn->outputs()) outs.push_back(m(v));
    ir::Node* c = g.AddNode(bn->op_type(), bn->name(), ins, outs, bn->domain());
    c->set_since_version(bn->since_version());
    c->attrs() = bn->attrs();
    for (auto& [k, sg] : Subgraphs(*c)) {  // shared with bn, now enclosed by g
      sg->set_parent(&g);
      Remap(*sg, map);
    }
    added.push_back(c);
  }
  std::vector<ir::Value*> results;
  for (ir::Value* o : b->outputs()) results.push_back(m(o));
  for (int k = 0; k < 2; ++k) {
    const char* bname = k == 0 ? "then_branch" : "else_branch";
    if (const ir::Attribute* a = n->FindAttr(bname); a && a->g) ir::DetachInputs(*a->g, a->g != b);
  }
  std::vector<ir::Value*> outs = n->outputs();
  g.RemoveNode(n);
  // The If's outputs keep their names: the producing node is rebound to
  // them, or (for a captured value, a constant, or a repeat) an Identity.
  for (std::size_t j = 0; j < outs.size(); ++j) {
    ir::Value* r = results[j];
    ir::Node* p = r->producer();
    if (moved.count(r) && p && !r->is_constant() && std::count(results.begin(), results.end(), r) == 1) {
      g.ReplaceAllUses(r, outs[j]);
      for (int i = 0; i < p->num_outputs(); ++i) {
        if (p->output(i) == r) g.RebindOutput(p, i, outs[j]);
      }
      continue;
    }
    ir::Node* id = g.AddNode("Identity", g.UniqueName(outs[j]->name() + "_identity"), {r}, {outs[j]});
    id->set_since_version(16);
    added.push_back(id);
  }
  return added;
}

Status LowerSubgraphs(ir::Graph& g, const PassOptions& opts) {
  for (auto& n : g.nodes()) {
    auto subs = Subgraphs(*n);
    if (subs.empty()) continue;
    std::vector<ir::Value*> caps;
    for (auto& [k, sg] : subs) CollectCaptures(*sg, *sg, caps);
    for (auto& [k, sg] : subs) {
      std::unordered_map<ir::Value*, ir::Value*> map;
      for (ir::Value* v : caps) {
        if (v->is_constant()) {
          map[v] = sg->AddConstant(v->name(), v->constant());
        } else {
          ir::Value* in = sg->AddValue(v->name(), v->dtype(), v->shape());
          in->set_dynamic_mask(v->dynamic_mask());  // a data-dependent value stays one inside
          // So does a value with symbolic dims, or computed from them (its
          // value at the probe: shape arithmetic inside the branch).
          in->set_symbolic_mask(v->symbolic_mask());
          in->set_bound_value(v->bound_value());
          in->set_symbolic_elems(v->symbolic_elems_known(), v->symbolic_elems());
          in->set_value_dims(v->value_dims());
          sg->inputs().push_back(in);
          map[v] = in;
        }
      }
      Remap(*sg, map);
    }
    for (ir::Value* v : caps) {
      if (!v->is_constant()) n->AddInput(v);
    }
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
    // An If whose condition is known at the compiler's probe (it follows
    // from symbolic dims: `N == 1`) takes one branch there; the other may be
    // valid only at other extents (a Squeeze of the dim that is 1 when it is
    // taken). Such a branch that fails to compile at the probe is kept as
    // lowered, uncompiled: InferIf never infers it at the probe (in the
    // compiler or the loader), and a plan whose extents take it infers it at
    // its own (SpecializeGraph), where an op that still rejects its shapes
    // fails that plan, naming the node.
    const int not_taken = ops::IfBranchNotTaken(*n);
    for (auto& [k, sg] : subs) {
      const std::string what = StrCat(n->Describe(), " attribute '", k, "'");
      const int b = k == "then_branch" ? 0 : k == "else_branch" ? 1 : -1;
      std::unique_ptr<ir::Graph> lowered;
      if (b >= 0 && b == not_taken && !ir::HasSubgraphNodes(*sg)) lowered = ir::CloneSubgraph(*sg);
      Status st = PassManager::Default().Run(*sg, opts);
      if (st.ok()) st = sg->TopologicalSort();
      if (st.ok()) continue;
      if (!lowered) return st.WithContext(what);
      auto it = n->attrs().find(k);
      if (it == n->attrs().end() || it->second.g.get() != sg) return st.WithContext(what);
      KILN_RETURN_IF_ERROR(lowered->TopologicalSort().WithContext(what));
      // What the pipeline would have done that the file and the plans
      // rely on: Kiln's internal ops refused in a model's graphs, and a
      // branch output that is an input, a constant or a repeat given its
      // own Identity.
      KILN_RETURN_IF_ERROR(RejectInternalOps(*lowered, opts).WithContext(what));
      KILN_RETURN_IF_ERROR(InsertBoundaryIdentities(*lowered, opts).WithContext(what));
      PlaceholderTypes(*lowered);
      ir::DetachInputs(*sg, true);  // the failed copy's nodes let go of their inputs
      it->second.g = std::shared_ptr<ir::Graph>(std::move(lowered));
    }
  }
  return Status::Ok();
}

}  // namespace kiln::passes
