// Dead-code elimination: drops nodes none of whose outputs reach a graph
// output, then values nothing refers to (including unused constants). Also
// RemoveNoOps ("remove-no-ops"): a Dropout whose mask nothing reads
// (inference makes it the identity: ops/shape_ops.cc InferDropout) and a Pad
// whose pads are all 0 (PyTorch exports one before each AvgPool2d of
// DenseNet's transitions) go: their readers read the input (an Identity
// of it where the output is a graph output or the graph has subgraphs, a
// view in the memory plan). In a graph with subgraphs (which may read a
// mask from outside) Dropouts stay, run by their kernel.
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

namespace {
// A Dropout that is surely the identity: no training_mode, or a constant
// false one, or a constant ratio of 0 (the kernel checks the others per run).
bool InferenceDropout(const ir::Node& n) {
  if (n.op_type() != "Dropout" || !n.domain().empty()) return false;
  if (n.since_version() < 12 || !n.input(2)) return true;
  auto zero = [](const ir::Value* v) { return v && v->is_constant() && v->constant()->GetAsDouble(0) == 0; };
  return zero(n.input(2)) || zero(n.input(1));
}

bool ZeroPad(const ir::Node& n) {
  if (n.op_type() != "Pad" || !n.domain().empty() || n.num_outputs() != 1 || !n.input(0) || !n.input(1) ||
      !n.input(1)->is_constant() || n.input(0)->dtype() != n.output(0)->dtype()) {
    return false;
  }
  for (std::int64_t p : n.input(1)->constant()->ToInt64Vector()) {
    if (p != 0) return false;
  }
  return true;
}
}  // namespace

Status RemoveNoOps(ir::Graph& g, const PassOptions&) {
  bool subgraphs = false;
  std::vector<ir::Node*> found;
  for (const auto& n : g.nodes()) {
    subgraphs |= n->HasSubgraphs();
    if (InferenceDropout(*n) || ZeroPad(*n)) found.push_back(n.get());
  }
  for (ir::Node* n : found) {
    if (n->op_type() == "Dropout" &&
        (subgraphs || (n->num_outputs() > 1 && (!n->output(1)->uses().empty() || g.IsGraphOutput(n->output(1)))))) {
      continue;
    }
    ir::Value* x = n->input(0);
    ir::Value* y = n->output(0);
    const std::string name = n->name();
    g.RemoveNode(n);
    if (!subgraphs && !g.IsGraphOutput(y)) {
      g.ReplaceAllUses(y, x);  // readers take the input itself
    } else {
      g.AddNode("Identity", name, {x}, {y})->set_since_version(13);
    }
  }
  if (found.empty()) return Status::Ok();
  g.RemoveUnusedValues();
  return g.TopologicalSort();
}

}  // namespace kiln::passes
