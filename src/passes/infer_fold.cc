// Shape inference and constant folding, in one topological sweep so that
// shape arithmetic (Shape -> Gather -> Concat -> Reshape) folds completely.
// An If whose condition folds to a constant is replaced by its taken branch,
// whose nodes are then inferred and folded in turn.
#include <algorithm>
#include <deque>

#include "backends/cpu/kernel.h"
#include "common/checked.h"
#include "custom/registry.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

// Shape of a statically shaped input needs no data (nor do its static dims
// of a tensor with data-dependent extents).
HostTensorPtr FoldShape(const ir::Node& n) {
  const ir::Value* in = n.input(0);
  if (!in || !IsStatic(in->shape())) return nullptr;
  const auto& s = in->shape();
  auto rank = static_cast<std::int64_t>(s.size());
  std::int64_t start = n.GetInt("start", 0), end = n.GetInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<std::int64_t>(start, 0, rank);
  end = std::clamp<std::int64_t>(end, 0, rank);
  std::int64_t len = std::max<std::int64_t>(end - start, 0);
  for (std::int64_t d = start; d < end && d < 64; ++d) {
    if (in->dynamic_mask() >> d & 1) return nullptr;  // a data-dependent extent: computed at run time
  }
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{len});
  for (std::int64_t i = 0; i < len; ++i) t->mutable_data_as<std::int64_t>()[i] = s[start + i];
  return t;
}

}  // namespace

Status InferShapesAndFold(ir::Graph& g, const PassOptions& opts) {
  // Input sizes first (the importer checks them too; graphs built with the
  // graph API arrive here unchecked): an overflowing or huge dim is named as
  // such, never reported as "unresolved".
  for (ir::Value* in : g.inputs()) {
    const std::string what = StrCat("model input '", in->name(), "'");
    for (std::size_t d = 0; d < in->shape().size(); ++d) {
      if (in->shape()[d] > kMaxTensorBytes) {
        return Error(StatusCode::kOutOfRange, what, ": dim ", d, " of shape ", ShapeToString(in->shape()),
                     " is larger than Kiln's limit of ", kMaxTensorBytes, " bytes per tensor allows");
      }
    }
    KILN_RETURN_IF_ERROR(CheckShapeSize(in->dtype(), in->shape(), what));
  }
  // Unknown input dims cannot be resolved later: say so now, by name.
  for (ir::Value* in : g.inputs()) {
    if (IsStatic(in->shape()) && !(in->dim_params().size() == 1 && in->dim_params()[0] == "<unknown rank>")) continue;
    std::string dims;
    for (std::size_t i = 0; i < in->shape().size(); ++i) {
      if (in->shape()[i] >= 0) continue;
      const std::string& p = i < in->dim_params().size() ? in->dim_params()[i] : std::string();
      dims += StrCat(dims.empty() ? "" : ", ", "dim ", i, p.empty() ? "" : " ('" + p + "')");
    }
    return Error(StatusCode::kInvalidArgument, "model input '", in->name(), "' has unresolved dims ",
                 ShapeToString(in->shape()), dims.empty() ? " (unknown rank)" : " (" + dims + ")",
                 "; fix them with --input-shape \"", in->name(), ":d0,d1,...\"");
  }
  std::deque<ir::Node*> work;
  for (auto& n : g.nodes()) work.push_back(n.get());
  bool inlined = false;
  while (!work.empty()) {
    ir::Node* n = work.front();
    work.pop_front();
    if (n->HasSubgraphs()) {
      const bool fold = !opts.disabled.count("fold");
      if (fold && n->op_type() == "If" && n->domain().empty() && n->input(0) && n->input(0)->is_constant()) {
        KILN_RETURN_IF_ERROR(ops::InferNode(*n));
        KILN_ASSIGN_OR_RETURN(std::vector<ir::Node*> added, InlineConstantIf(g, n));
        work.insert(work.begin(), added.begin(), added.end());
        inlined = true;
        continue;
      }
      // Fold inside subgraphs first, so the node infers from folded shapes.
      for (auto& [k, a] : n->attrs()) {
        std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (auto& sg : subs) {
          const std::string what = StrCat(n->Describe(), " attribute '", k, "'");
          KILN_RETURN_IF_ERROR(sg->TopologicalSort().WithContext(what));
          KILN_RETURN_IF_ERROR(InferShapesAndFold(*sg, opts).WithContext(what));
        }
      }
    }
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
    if (opts.disabled.count("fold")) continue;
    std::vector<HostTensorPtr> folded;
    if (n->op_type() == "Shape" && n->domain().empty()) {
      if (auto t = FoldShape(*n)) folded.push_back(t);
    } else if (!n->HasSubgraphs() && n->domain().empty() && !custom::IsCustomNode(*n)) {
      bool all_const = true;
      std::uint64_t out_bytes = 0;
      std::vector<HostTensorPtr> ins;
      for (ir::Value* in : n->inputs()) {
        if (in && !in->is_constant()) all_const = false;
        ins.push_back(in ? in->constant() : nullptr);
      }
      for (ir::Value* o : n->outputs()) {
        std::int64_t e = NumElements(o->shape());
        if (e < 0) all_const = false;
        else out_bytes += static_cast<std::uint64_t>(e) * DTypeSize(o->dtype());
      }
      if (all_const && out_bytes <= opts.fold_limit_bytes) {
        KILN_ASSIGN_OR_RETURN(folded, cpu::EvalNode(*n, ins));
      }
    }
    if (folded.empty()) continue;
    std::vector<ir::Value*> outs = n->outputs();
    g.RemoveNode(n);
    for (std::size_t i = 0; i < outs.size(); ++i) outs[i]->set_constant(folded[i]);
  }
  return inlined ? g.TopologicalSort() : Status::Ok();
}

}  // namespace kiln::passes
