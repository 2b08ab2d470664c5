#include "passes/pass_manager.h"

namespace kiln::passes {

PassManager PassManager::Default() {
  PassManager pm;
  pm.Add({"reject-internal-ops", "import", true, RejectInternalOps});
  pm.Add({"fuse-qdq", "import", false, FuseQdq});
  pm.Add({"half-in-float32", "import", false, ComputeHalfInFloat32});
  pm.Add({"infer-and-fold", "infer", true, InferShapesAndFold});
  pm.Add({"lower-contrib", "infer", true, LowerContribOps});
  pm.Add({"lower-subgraphs", "infer", true, LowerSubgraphs});
  pm.Add({"simplify-casts", "simplify", false, SimplifyCasts});
  pm.Add({"remove-no-ops", "simplify", false, RemoveNoOps});
  pm.Add({"dce", "simplify", false, EliminateDeadCode});
  pm.Add({"fuse-pad", "fuse", false, FusePad});
  pm.Add({"fold-conv-bn", "fuse", false, FoldConvBatchNorm});
  pm.Add({"fuse-integer-rescale", "fuse", false, FuseIntegerRescale});
  pm.Add({"fuse-bias-activation", "fuse", false, FuseBiasActivation});
  pm.Add({"fuse-gelu", "fuse", false, FuseGelu});
  pm.Add({"fuse-layernorm", "fuse", false, FuseLayerNorm});
  pm.Add({"dce-after-fuse", "fuse", false, EliminateDeadCode});
  pm.Add({"channels-last", "layout", false, ConvertToChannelsLast});
  // Again, on what the layout pass brought together: a model that holds its
  // activations channels-last (TensorFlow's exports) has a Transpose pair
  // between each Conv and its bias/activation until that pass cancels them.
  // (Phase "fuse": disabling fusion disables these too.)
  pm.Add({"fuse-after-layout", "fuse", false, [](ir::Graph& g, const PassOptions& o) {
            // Disabling fuse-bias-activation disables its rerun too.
            return o.disabled.count("fuse-bias-activation") ? Status::Ok() : FuseBiasActivation(g, o);
          }});
  // Conv + Add(residual) after the layout pass (which would otherwise have
  // to carry the residual through its conversions) and after the rerun
  // above (a channels-last Conv's bias Add comes before the residual's);
  // it then fuses an activation that follows the Add (fuse.cc).
  pm.Add({"fuse-residual", "fuse", false, FuseConvResidual});
  // After the layout pass, which moves Transposes through
  // DynamicQuantizeLinear onto the float32 input the ops then read.
  pm.Add({"fuse-quantize-input", "fuse", false, FuseQuantizeInput});
  pm.Add({"dce-after-layout", "fuse", false, EliminateDeadCode});
  pm.Add({"custom-op-identity", "finalize", true, InsertIdentityForNonRefreshable});
  pm.Add({"boundary-identity", "finalize", true, InsertBoundaryIdentities});
  pm.Add({"placement", "finalize", true, PlaceNodes});
  pm.Add({"check-resolved", "finalize", true, CheckResolved});
  return pm;
}

std::vector<std::string> PassManager::Names() const {
  std::vector<std::string> out;
  for (auto& p : passes_) out.push_back(p.phase + "/" + p.name);
  return out;
}

Status PassManager::Run(ir::Graph& g, const PassOptions& opts, std::vector<std::string>* log) const {
  for (const std::string& d : opts.disabled) {
    bool found = false;
    for (auto& p : passes_) {
      if (p.name == d || p.phase == d) {
        found = true;
        if (p.required) {
          return Error(StatusCode::kInvalidArgument, "pass '", p.name, "' is required and cannot be disabled");
        }
      }
    }
    if (!found) return Error(StatusCode::kInvalidArgument, "unknown pass or phase '", d, "'");
  }
  for (auto& p : passes_) {
    if (opts.disabled.count(p.name) || opts.disabled.count(p.phase)) {
      if (log) log->push_back(StrCat(p.phase, "/", p.name, ": disabled"));
      continue;
    }
    std::size_t before = g.nodes().size();
    Status st = p.run(g, opts);
    if (!st.ok()) return st;
    KILN_RETURN_IF_ERROR(g.Verify().WithContext(StrCat("after pass '", p.name, "'")));
    if (log) log->push_back(StrCat(p.phase, "/", p.name, ": ", before, " -> ", g.nodes().size(), " nodes"));
  }
  return Status::Ok();
}

}  // namespace kiln::passes
