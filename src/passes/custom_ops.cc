// Custom ops that do not implement ArgsUpdater cannot have their argument
// blocks refreshed, so their addresses must never change: Identity copies are
// inserted between them and the model's inputs/outputs (every run pays for
// the copies). The inserted nodes carry kiln.inserted_for = the op's node
// name; the op gets kiln.not_refreshable = 1.
#include "custom/registry.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {

Status InsertIdentityForNonRefreshable(ir::Graph& g, const PassOptions&) {
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) {
    if (custom::IsCustomNode(*n)) nodes.push_back(n.get());
  }
  for (ir::Node* n : nodes) {
    const custom::Registered* r = custom::Find(n->op_type());
    if (!r || r->updater) continue;
    n->SetAttr("kiln.not_refreshable", ir::Attribute::Int(1));
    for (int i = 0; i < n->num_inputs(); ++i) {
      ir::Value* in = n->input(i);
      if (!in || !g.IsGraphInput(in)) continue;
      ir::Value* copy = g.AddValue(g.UniqueName(in->name() + "_copy_for_" + n->name()), in->dtype(), in->shape());
      ir::Node* id = g.AddNode("Identity", StrCat("identity_in", i, "_", n->name()), {in}, {copy});
      id->set_since_version(16);
      id->SetAttr("kiln.inserted_for", ir::Attribute::String(n->name()));
      n->SetInput(i, copy);
    }
    for (int j = 0; j < n->num_outputs(); ++j) {
      ir::Value* out = n->output(j);
      if (!g.IsGraphOutput(out)) continue;
      ir::Value* inner = g.AddValue(g.UniqueName(out->name() + "_from_" + n->name()), out->dtype(), out->shape());
      g.RebindOutput(n, j, inner);
      ir::Node* id = g.AddNode("Identity", StrCat("identity_out", j, "_", n->name()), {inner}, {out});
      id->set_since_version(16);
      id->SetAttr("kiln.inserted_for", ir::Attribute::String(n->name()));
    }
  }
  return g.TopologicalSort();
}

}  // namespace kiln::passes
