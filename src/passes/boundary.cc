// Graph-boundary fix-ups and the final resolvedness check.
//
// A model output that is a graph input, a constant, or listed twice gets its
// own Identity node, so every output has a buffer written by a kernel.
#include <algorithm>
#include <set>

#include "backends/cpu/kernel.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {

Status InsertBoundaryIdentities(ir::Graph& g, const PassOptions&) {
  std::set<const ir::Value*> seen;
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    ir::Value* v = g.outputs()[j];
    bool needs = v->is_constant() || g.IsGraphInput(v) || seen.count(v);
    seen.insert(v);
    if (!needs) continue;
    std::string name = v->name();
    ir::Value* out = nullptr;
    if (v->is_constant() && std::count(g.outputs().begin(), g.outputs().end(), v) == 1) {
      // Keep the model's output name on the output; the constant is renamed.
      KILN_RETURN_IF_ERROR(g.RenameValue(v, g.UniqueName(name + "_const")));
      out = g.AddValue(name, v->dtype(), v->shape());
    } else {
      out = g.AddValue(g.UniqueName(name + "_out"), v->dtype(), v->shape());
    }
    ir::Node* n = g.AddNode("Identity", g.UniqueName("boundary_identity_" + name), {v}, {out});
    n->set_since_version(16);
    g.outputs()[j] = out;
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
  }
  return Status::Ok();
}

namespace {

// A value with data-dependent extents that `v` is computed from, or null.
const ir::Value* DynamicAncestor(const ir::Value* v) {
  std::vector<const ir::Value*> work = {v};
  std::set<const ir::Value*> seen;
  while (!work.empty()) {
    const ir::Value* x = work.back();
    work.pop_back();
    if (!x || !seen.insert(x).second) continue;
    if (x != v && x->is_dynamic()) return x;
    if (const ir::Node* p = x->producer()) work.insert(work.end(), p->inputs().begin(), p->inputs().end());
  }
  return nullptr;
}

// What the compiled graph records of dim symbols (plan::VerifyPlan's rules):
// only the top-level graph has symbols, and a value keeps a dim's symbol
// only when the symbol exists and its range holds the dim's extent. Names
// the importer left on subgraph inputs (Loop bodies) and names without a
// symbol are dropped; a value with no named dim keeps no list.
void SettleSymbols(ir::Graph& top) {
  ir::ForEachGraph(top, [&](ir::Graph& g) {
    const bool is_top = &g == &top;
    if (!is_top) g.symbols().clear();
    for (auto& v : g.values()) {
      auto& names = v->dim_params();
      if (names.empty()) continue;
      bool any = false;
      if (is_top && names.size() == v->shape().size()) {
        for (std::size_t d = 0; d < names.size(); ++d) {
          if (names[d].empty()) continue;
          auto it = g.symbols().find(names[d]);
          const bool dynamic = d < 64 && (v->dynamic_mask() >> d & 1);
          const std::int64_t e = v->shape()[d];
          if (it == g.symbols().end() ||
              (!dynamic && (e < it->second.min || (it->second.max >= 0 && e > it->second.max)))) {
            names[d].clear();
          } else {
            any = true;
          }
        }
      }
      if (!any) names.clear();
    }
  });
}

}  // namespace

Status CheckResolved(ir::Graph& g, const PassOptions&) {
  // Data-dependent extents: passes rewrite nodes locally, so settle every
  // value's dynamic dims with one more sweep in order — exactly what a
  // loader recomputes from the file.
  bool dynamic = false;
  for (auto& v : g.values()) dynamic |= v->varying_mask() != 0;
  // Shape inputs: exactly those the final graph's inference reads (what
  // the loader recomputes); a pass may have removed a node that read one.
  if (g.parent() == nullptr) {
    for (ir::Value* in : g.inputs()) in->set_shape_input(false);
  }
  if (dynamic) {
    // As the loader does: bounds on values (proven or provisional) and,
    // where the model has symbolic dims, shape arithmetic at the probe, so
    // that values the placement pass copied between memories still decide
    // the shapes they decided before.
    const ir::Graph* root = &g;
    while (root->parent()) root = root->parent();
    bool symbolic = false;
    for (const ir::Value* in : root->inputs()) symbolic = symbolic || in->symbolic_mask() != 0;
    KILN_RETURN_IF_ERROR(g.TopologicalSort());
    for (auto& n : g.nodes()) {
      KILN_RETURN_IF_ERROR(ops::InferNode(*n));
      KILN_RETURN_IF_ERROR(cpu::EvalUpperBound(*n, cpu::kBoundValueLimit).status());
      if (symbolic) KILN_RETURN_IF_ERROR(cpu::EvalBound(*n, cpu::kBoundValueLimit).status());
    }
  }
  for (auto& v : g.values()) {
    if (v->dtype() == DType::kUndefined) {
      return Error(StatusCode::kInvalidArgument, "value '", v->name(), "' has no element type",
                   v->producer() ? " (produced by " + v->producer()->Describe() + ")" : "");
    }
    if (!IsStatic(v->shape())) {
      if (const ir::Value* dyn = DynamicAncestor(v.get())) {
        return Error(StatusCode::kUnimplemented, "cannot resolve the shape of '", v->name(), "' ",
                     ShapeToString(v->shape()),
                     v->producer() ? " (produced by " + v->producer()->Describe() + ")" : std::string(),
                     ": it depends on the data-dependent extent of '", dyn->name(), "' ",
                     ShapeToString(dyn->shape(), dyn->dynamic_mask()),
                     dyn->producer() ? " (produced by " + dyn->producer()->Describe() + ")" : std::string(),
                     ", and Kiln cannot use a data-dependent extent as a shape (Reshape/Expand/ConstantOfShape "
                     "targets computed from it)");
      }
      // A shape slot fed a value the run computes from data, for which no
      // bound (proven or provisional) exists.
      if (const ir::Node* p = v->producer()) {
        for (int i = 1; i < p->num_inputs(); ++i) {
          const ir::Value* in = p->input(i);
          if (!in || (in->dtype() != DType::kInt64 && in->dtype() != DType::kInt32) ||
              !ops::InferContext::ValueDecidedByData(in)) {
            continue;
          }
          return Error(StatusCode::kUnimplemented, "cannot resolve the shape of '", v->name(), "' ",
                       ShapeToString(v->shape()), " (produced by ", p->Describe(), "): it depends on the values of ",
                       "its input ", i, " '", in->name(), "'",
                       in->producer() ? " (produced by " + in->producer()->Describe() + ")" : std::string(),
                       ", which the run computes from data, and Kiln cannot plan this op for such values (it can "
                       "for Range's limit, ConstantOfShape's, Expand's and Tile's shapes, Reshape's target, Slice's "
                       "starts and ends, TopK's K and Split's sizes)");
        }
      }
      std::string dims;
      for (std::size_t i = 0; i < v->dim_params().size(); ++i) {
        if (!v->dim_params()[i].empty()) dims += (dims.empty() ? "" : ", ") + v->dim_params()[i];
      }
      return Error(StatusCode::kInvalidArgument, "cannot resolve the shape of '", v->name(), "' ",
                   ShapeToString(v->shape()),
                   v->producer() ? " (produced by " + v->producer()->Describe() + ")" : " (a model input)",
                   dims.empty() ? "" : "; symbolic dims: " + dims,
                   "; give fixed input shapes with --input-shape \"name:d0,d1,...\"");
    }
  }
  SettleSymbols(g);
  return Status::Ok();
}

}  // namespace kiln::passes
