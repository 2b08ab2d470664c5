// Shape inference and constant folding, in one topological sweep so that
// shape arithmetic (Shape -> Gather -> Concat -> Reshape) folds completely.
// An If whose condition folds to a constant is replaced by its taken branch,
// whose nodes are then inferred and folded in turn.
#include <algorithm>
#include <deque>
#include <map>

#include "backends/cpu/kernel.h"
#include "common/checked.h"
#include "custom/registry.h"
#include "ops/op_registry.h"
#include "ops/shape_ops.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

// The extent every symbolic input dim takes while compiling: large enough
// for the strided convolutions and pooling of vision models (a 1/32 scale
// stays >= 2) and for sequence ops, small enough that the probe plan costs
// little. The runtime never uses the probe plan for other extents.
constexpr std::int64_t kSymbolProbe = 64;

// Shape of a statically shaped input needs no data (nor do its static dims
// of a tensor with data-dependent extents).
HostTensorPtr FoldShape(const ir::Node& n) {
  const ir::Value* in = n.input(0);
  if (!in || !IsStatic(in->shape())) return nullptr;
  const auto rank = static_cast<std::int64_t>(in->shape().size());
  // Null where a requested dim is data-dependent or symbolic: known at run time only.
  return ops::ShapeValueOf(in->shape(), n.GetInt("start", 0), n.GetInt("end", rank), in->varying_mask());
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
  // Unknown input dims of the model become symbols: named by their ONNX
  // dim_param (else "<input>_d<i>"), range 1.. unbounded unless
  // --input-shape gave one, probed at the range's max, else at
  // kSymbolProbe (at least min), while compiling. What follows from them is marked symbolic
  // (never folded or baked) and the runtime specializes the compiled graph
  // for each signature of input shapes. A symbol another input fixed (with
  // --input-shape) fixes this dim too. Inputs of unknown rank, and unknown
  // dims of subgraph inputs, stay errors.
  const bool top = g.parent() == nullptr;
  std::string symbolic;  // "x dim 0 ('batch'), ..." for messages
  // A model admitting only its gears is compiled at its largest gear (by
  // input elements), not at each symbol's max (gears [1,n] and [n,1] would
  // give [n,n], which no gear has).
  std::map<std::string, std::int64_t> gear_probe;
  if (top && g.gears_only() && !g.gears().empty()) {
    const std::vector<Shape>* largest = nullptr;
    double most = -1;
    for (const auto& sig : g.gears()) {
      double n = 0;
      for (const Shape& s : sig) n += static_cast<double>(NumElements(s));
      if (n > most) most = n, largest = &sig;
    }
    for (std::size_t i = 0; i < g.inputs().size() && i < largest->size(); ++i) {
      const ir::Value* in = g.inputs()[i];
      for (std::size_t d = 0; d < in->shape().size() && d < (*largest)[i].size(); ++d) {
        if (in->shape()[d] < 0 && d < in->dim_params().size() && !in->dim_params()[d].empty()) {
          gear_probe.emplace(in->dim_params()[d], (*largest)[i][d]);
        }
      }
    }
  }
  for (ir::Value* in : g.inputs()) {
    if (IsStatic(in->shape()) && !(in->dim_params().size() == 1 && in->dim_params()[0] == "<unknown rank>")) continue;
    const bool unknown_rank = in->dim_params().size() == 1 && in->dim_params()[0] == "<unknown rank>";
    if (top && !unknown_rank) {
      Shape s = in->shape();
      auto& names = in->dim_params();
      names.resize(s.size());
      std::uint64_t mask = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] >= 0) continue;
        if (names[i].empty() || names[i].size() > ir::kMaxSymbolNameBytes) {
          names[i] = ir::DefaultSymbolName(in->name(), i);
        }
        auto it = g.symbols().find(names[i]);
        if (it != g.symbols().end() && it->second.max >= 0 && it->second.min == it->second.max) {
          s[i] = it->second.min;  // fixed by --input-shape on another input
          continue;
        }
        if (i >= 64) {
          return Error(StatusCode::kUnimplemented, "model input '", in->name(), "': dim ", i,
                       " is symbolic; Kiln handles symbolic dims among the first 64 only");
        }
        if (it == g.symbols().end()) it = g.symbols().emplace(names[i], ir::SymbolRange{1, -1}).first;
        // A bounded symbol (a range from --input-shape) is compiled at its
        // largest extent: the memory plan in the file is then the largest
        // any admissible signature needs, and the runtime shares that arena
        // between its plans.
        const ir::SymbolRange& r = it->second;
        auto gp = gear_probe.find(names[i]);
        s[i] = gp != gear_probe.end() ? gp->second : r.max >= 0 ? r.max : std::max(kSymbolProbe, r.min);
        mask |= std::uint64_t{1} << i;
        symbolic += StrCat(symbolic.empty() ? "" : ", ", "'", in->name(), "' dim ", i, " ('", names[i], "' = ", s[i],
                           gp != gear_probe.end() ? ", the largest gear's" : r.max >= 0 ? ", its range's max" : "",
                           ")");
      }
      in->set_shape(std::move(s));
      in->set_symbolic_mask(mask);
      KILN_RETURN_IF_ERROR(CheckShapeSize(in->dtype(), in->shape(), StrCat("model input '", in->name(), "'")));
      continue;
    }
    std::string dims;
    for (std::size_t i = 0; i < in->shape().size(); ++i) {
      if (in->shape()[i] >= 0) continue;
      const std::string& p = i < in->dim_params().size() ? in->dim_params()[i] : std::string();
      dims += StrCat(dims.empty() ? "" : ", ", "dim ", i, p.empty() ? "" : " ('" + p + "')");
    }
    return Error(StatusCode::kInvalidArgument, top ? "model input '" : "subgraph input '", in->name(),
                 "' has unresolved dims ", ShapeToString(in->shape()),
                 dims.empty() ? " (unknown rank)" : " (" + dims + ")", "; fix them with --input-shape \"",
                 in->name(), ":d0,d1,...\"");
  }
  if (!top) {
    // A branch of a model with symbolic input dims: shape arithmetic on
    // them is evaluated at the probe here too (each plan folds it).
    const ir::Graph* root = &g;
    while (root->parent()) root = root->parent();
    for (const ir::Value* in : root->inputs()) {
      if (in->symbolic_mask() && symbolic.empty()) {
        symbolic = "the model's symbolic input dims (an If branch is compiled there unless its condition, known "
                   "there, rules it out)";
      }
    }
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
      // An If's branch that its condition rules out at the probe (the
      // condition follows from symbolic dims) may be valid only at other
      // extents: if it fails here it is kept as it was (lower-subgraphs
      // keeps it uncompiled too; InferIf does not infer it at the probe, and
      // a plan that takes it infers it at its own extents).
      const int not_taken = ops::IfBranchNotTaken(*n);
      for (auto& [k, a] : n->attrs()) {
        std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        const int b = k == "then_branch" ? 0 : k == "else_branch" ? 1 : -1;
        for (auto& sg : subs) {
          const std::string what = StrCat(n->Describe(), " attribute '", k, "'");
          KILN_RETURN_IF_ERROR(sg->TopologicalSort().WithContext(what));
          std::unique_ptr<ir::Graph> before;
          if (b >= 0 && b == not_taken && a.g == sg && !ir::HasSubgraphNodes(*sg)) before = ir::CloneSubgraph(*sg);
          Status st = InferShapesAndFold(*sg, opts);
          if (before) {
            if (st.ok()) {
              ir::DetachInputs(*before, false);
            } else {
              ir::DetachInputs(*sg, false);
              a.g = std::shared_ptr<ir::Graph>(std::move(before));
              continue;
            }
          }
          KILN_RETURN_IF_ERROR(st.WithContext(what));
        }
      }
    }
    if (Status st = ops::InferNode(*n); !st.ok()) {
      const ir::Value* from_values = nullptr;
      for (const ir::Value* in : n->inputs()) {
        if (in && in->value_dims() && !from_values) from_values = in;
      }
      if (from_values) {
        // Dims decided by shape inputs are probed at extent 1 here: a node
        // that needs particular extents fails at the probe.
        std::string given;
        for (const ir::Value* in : g.inputs()) {
          if (in->shape_input()) given += StrCat(given.empty() ? "" : ", ", "'", in->name(), "'");
        }
        return Error(st.code(), st.message(), " (input '", from_values->name(), "' has dims decided by the values of ",
                     "model input(s) ", given, ", which Kiln compiles at extent ", ops::kShapeInputProbe,
                     "; if the model needs particular values there, compile them in with --const-input NAME=FILE.npy)");
      }
      if (symbolic.empty()) return st;
      // A model may admit only some extents of a dim it names (a batch
      // dim multiplied with a constant of batch 2): say what was probed.
      return Error(st.code(), st.message(), " (while compiling with input dims left symbolic, probed at: ", symbolic,
                   "; if the model admits only some extents, fix or bound them with --input-shape)");
    }
    KILN_RETURN_IF_ERROR(cpu::EvalUpperBound(*n, cpu::kBoundValueLimit).status());
    if (opts.disabled.count("fold")) continue;
    std::vector<HostTensorPtr> folded;
    if (n->op_type() == "Shape" && n->domain().empty()) {
      if (auto t = FoldShape(*n)) folded.push_back(t);
    }
    if (folded.empty() && !symbolic.empty() && !custom::IsCustomNode(*n)) {
      // Shape arithmetic on symbolic dims: kept, evaluated at the probe.
      KILN_ASSIGN_OR_RETURN(bool bound, cpu::EvalBound(*n, cpu::kBoundValueLimit));
      if (bound) continue;
    }
    if (!folded.empty() || n->op_type() == "Shape") {
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
