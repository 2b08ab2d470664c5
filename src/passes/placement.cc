// Placement: every node runs on the compile target, except nodes the target
// has no kernel for, which run on the CPU (kiln.device = "cpu"). Values
// cross between the two through inserted kiln.MemcpyToHost /
// kiln.MemcpyFromHost nodes, one per value and direction (a value read by
// several CPU nodes is copied once). Model inputs and outputs live in the
// target's memory, so a CPU node reading an input gets a copy of it and a
// CPU node writing an output writes a host value copied into the output.
// Constants and external weights need no copy: the runtime gives each node
// the constant in the memory it runs on. If nodes stay on the target (an
// executor construct every device has); their branches are placed the same
// way. Custom ops stay on the target (they record their own launches).
#include "custom/registry.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

bool IsExternalWeight(const ir::Value* v) {
  return v->producer() && v->producer()->op_type() == "FileConstant" && v->producer()->domain() == "kiln";
}

// Where a value's bytes live once placement is done.
bool LivesOnHost(const ir::Value* v) {
  const ir::Node* p = v->producer();
  return p && (ir::IsHostPlaced(*p) || ir::IsCopyToHost(*p));
}

Status PlaceGraph(ir::Graph& g, const PassOptions& opts) {
  std::vector<ir::Node*> order;
  for (auto& n : g.nodes()) {
    // Placed already (a branch compiled by lower-subgraphs, then reached
    // again through its If): placement is done once per graph.
    if (ir::IsHostPlaced(*n) || ir::IsCopyToHost(*n) || ir::IsCopyFromHost(*n)) return Status::Ok();
    order.push_back(n.get());
  }
  bool any_host = false;
  for (ir::Node* n : order) {
    for (auto& [name, a] : n->attrs()) {
      if (a.g) KILN_RETURN_IF_ERROR(PlaceGraph(*a.g, opts));
      for (auto& sg : a.graphs) {
        if (sg) KILN_RETURN_IF_ERROR(PlaceGraph(*sg, opts));
      }
    }
    const bool construct = (n->op_type() == "If" && n->domain().empty()) ||
                           (n->op_type() == "FileConstant" && n->domain() == "kiln") ||
                           ir::IsCopyToHost(*n) || ir::IsCopyFromHost(*n) || custom::IsCustomNode(*n);
    if (construct || opts.target_has_kernel(*n)) continue;
    n->SetAttr(ir::kPlaceAttr, ir::Attribute::String(ir::kPlaceHost));
    any_host = true;
  }
  if (!any_host) return Status::Ok();

  // value -> its copy in the other memory
  std::map<ir::Value*, ir::Value*> to_host, to_device;
  auto copy_of = [&](ir::Value* v, bool host) -> Result<ir::Value*> {
    ir::Value*& c = (host ? to_host : to_device)[v];
    if (c) return c;
    c = g.AddValue(g.UniqueName(v->name() + (host ? "_on_host" : "_on_device")), v->dtype(), v->shape());
    c->set_dynamic_mask(v->dynamic_mask());
    c->dim_params() = v->dim_params();
    ir::Node* copy = g.AddNode(host ? ir::kMemcpyToHost : ir::kMemcpyFromHost,
                               g.UniqueName((host ? "copy_to_host_" : "copy_to_device_") + v->name()), {v}, {c},
                               "kiln");
    copy->set_since_version(1);
    return c;
  };

  // Outputs written on the host: the node writes a host value, copied into
  // the output (whose name the model's users know).
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    ir::Value* out = g.outputs()[j];
    ir::Node* p = out->producer();
    if (!p || !ir::IsHostPlaced(*p)) continue;
    int k = 0;
    while (p->output(k) != out) ++k;
    ir::Value* h = g.AddValue(g.UniqueName(out->name() + "_on_host"), out->dtype(), out->shape());
    h->set_dynamic_mask(out->dynamic_mask());
    h->dim_params() = out->dim_params();
    g.ReplaceAllUses(out, h);  // every reader, and the output list (restored below)
    g.RebindOutput(p, k, h);
    for (ir::Value*& o : g.outputs()) {
      if (o == h) o = out;
    }
    ir::Node* copy = g.AddNode(ir::kMemcpyFromHost, g.UniqueName("copy_to_device_" + out->name()), {h}, {out}, "kiln");
    copy->set_since_version(1);
    to_device[h] = out;  // target readers of the value use the output itself
  }

  for (ir::Node* n : order) {
    if (n->op_type() == "FileConstant" && n->domain() == "kiln") continue;
    const bool host = ir::IsHostPlaced(*n);
    for (int i = 0; i < n->num_inputs(); ++i) {
      ir::Value* v = n->input(i);
      if (!v || v->is_constant() || IsExternalWeight(v) || LivesOnHost(v) == host) continue;
      KILN_ASSIGN_OR_RETURN(ir::Value* c, copy_of(v, host));
      n->SetInput(i, c);
    }
  }
  return g.TopologicalSort();
}

}  // namespace

Status PlaceNodes(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_has_kernel) return Status::Ok();  // every node on the target
  return PlaceGraph(g, opts);
}

}  // namespace kiln::passes
