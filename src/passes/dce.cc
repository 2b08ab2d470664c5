// Dead-code elimination: drops nodes none of whose outputs reach a graph
// output, then values nothing refers to (including unused constants).
#include <unordered_set>

#include "passes/pass_manager.h"

namespace kiln::passes {

Status EliminateDeadCode(ir::Graph& g, const PassOptions&) {
  std::unordered_set<const ir::Node*> live;
  std::vector<const ir::Value*> work(g.outputs().begin(), g.outputs().end());
  auto visit_sub = [&](const ir::Graph& sg, auto& self) -> void {
    for (auto& sn : sg.nodes()) {
      for (ir::Value* in : sn->inputs()) {
        if (in && in->owner() != &sg) work.push_back(in);
      }
      for (auto& [k, a] : sn->attrs()) {
        if (a.g) self(*a.g, self);
        for (auto& gg : a.graphs) self(*gg, self);
      }
    }
    for (ir::Value* o : sg.outputs()) {
      if (o->owner() != &sg) work.push_back(o);
    }
  };
  while (!work.empty()) {
    const ir::Value* v = work.back();
    work.pop_back();
    ir::Node* p = v->producer();
    if (!p || p->graph() != &g || !live.insert(p).second) continue;
    for (ir::Value* in : p->inputs()) {
      if (in) work.push_back(in);
    }
    for (auto& [k, a] : p->attrs()) {
      if (a.g) visit_sub(*a.g, visit_sub);
      for (auto& sg : a.graphs) visit_sub(*sg, visit_sub);
    }
  }
  std::vector<ir::Node*> dead;
  for (auto& n : g.nodes()) {
    if (!live.count(n.get())) dead.push_back(n.get());
  }
  for (ir::Node* n : dead) g.RemoveNode(n);
  g.RemoveUnusedValues();
  return Status::Ok();
}

}  // namespace kiln::passes
