// The pass manager: named passes grouped in phases, each switchable by name.
//
// Phases run in order: "import" (internal ops refused; QDQ convolutions
// fused into QLinearConv; float16/bfloat16
// graphs computed in float32 where the target has no half arithmetic),
// "infer" (shape inference and constant folding, If
// with a constant condition inlined; ONNX Runtime contrib ops such as QGemm
// rewritten into standard ops; then subgraphs made self-contained and
// compiled), "simplify" (no-op and round-trip Casts removed, Dropouts without a mask and zero Pads made Identity, dead-code elimination), "fuse" (Conv+BatchNorm
// folding, bias and activation fusion), "finalize" (boundary Identity insertion, placement
// of nodes the target lacks on the CPU with copies, checks that every dim is resolved). Memory planning follows as a separate step.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "ops/fused_attrs.h"
#include "weights/weight_dir.h"

namespace kiln::passes {

struct PassOptions {
  std::set<std::string> disabled;       // pass names to skip
  // What the compile target supports (its device's capabilities): the
  // channels-last layout pass and the epilogue fusions run only where the
  // target has them.
  bool target_channels_last = true;
  bool target_fused_epilogues = true;
  // Whether the target computes float16/bfloat16 natively; if not, half
  // graphs are computed in float32 (the half-in-float32 pass).
  bool target_half_arithmetic = false;
  // Whether the target has a kernel for a node (the placement pass puts the
  // others on the CPU). Null: every node runs on the target.
  std::function<bool(const ir::Node&)> target_has_kernel;
  std::uint64_t fold_limit_bytes = 64u << 20;  // largest constant folding may create
};

struct Pass {
  std::string name;
  std::string phase;
  bool required = false;  // cannot be disabled (correctness depends on it)
  std::function<Status(ir::Graph&, const PassOptions&)> run;
};

class PassManager {
 public:
  // The default pipeline.
  static PassManager Default();
  void Add(Pass p) { passes_.push_back(std::move(p)); }
  // Runs every enabled pass; errors name the pass. `log` (optional) receives
  // one line per pass with node counts.
  Status Run(ir::Graph& g, const PassOptions& opts, std::vector<std::string>* log = nullptr) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<Pass> passes_;
};

// The passes (one file each).
Status InferShapesAndFold(ir::Graph& g, const PassOptions& opts);
Status EliminateDeadCode(ir::Graph& g, const PassOptions& opts);
Status FoldConvBatchNorm(ir::Graph& g, const PassOptions& opts);
Status FusePad(ir::Graph& g, const PassOptions& opts);
Status FuseBiasActivation(ir::Graph& g, const PassOptions& opts);
Status FuseConvResidual(ir::Graph& g, const PassOptions& opts);
Status FuseIntegerRescale(ir::Graph& g, const PassOptions& opts);
Status FuseQuantizeInput(ir::Graph& g, const PassOptions& opts);
Status FuseGelu(ir::Graph& g, const PassOptions& opts);
Status FuseLayerNorm(ir::Graph& g, const PassOptions& opts);
Status ComputeHalfInFloat32(ir::Graph& g, const PassOptions& opts);
Status FuseQdq(ir::Graph& g, const PassOptions& opts);
Status SimplifyCasts(ir::Graph& g, const PassOptions& opts);
Status RemoveNoOps(ir::Graph& g, const PassOptions& opts);
Status InsertBoundaryIdentities(ir::Graph& g, const PassOptions& opts);
Status CheckResolved(ir::Graph& g, const PassOptions& opts);
Status ConvertToChannelsLast(ir::Graph& g, const PassOptions& opts);
Status RejectInternalOps(ir::Graph& g, const PassOptions& opts);
Status LowerContribOps(ir::Graph& g, const PassOptions& opts);
Status InsertIdentityForNonRefreshable(ir::Graph& g, const PassOptions& opts);
Status LowerSubgraphs(ir::Graph& g, const PassOptions& opts);
Status PlaceNodes(ir::Graph& g, const PassOptions& opts);
// Replaces If node `n` (constant condition) by its taken branch's nodes;
// returns the nodes added to `g`.
Result<std::vector<ir::Node*>> InlineConstantIf(ir::Graph& g, ir::Node* n);

// Not pipeline passes (they do I/O and return records): external weights.
Result<std::vector<weights::WeightRef>> ExternalizeConstants(ir::Graph& g, const std::string& dir,
                                                                const weights::StoreOptions& opts,
                                                                weights::StoreStats* stats);
// Points FileConstants (by kiln.sha256) at `records` (after a migration).
Status RelocateFileConstants(ir::Graph& g, const std::vector<weights::WeightRef>& records);

using ops::kActAttr;
using ops::kActAlphaAttr;
using ops::kActBetaAttr;

}  // namespace kiln::passes
