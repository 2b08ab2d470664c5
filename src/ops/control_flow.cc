// Control flow: If (ONNX versions 1, 11, 13, 16; tensor outputs only).
//
// Inputs: cond (one bool), then - after the lower-subgraphs pass - the values
// its branches capture, in the order of the branches' graph inputs. Each
// branch (attributes then_branch / else_branch) yields one value per output.
// With a constant cond only the taken branch is inferred (the infer-and-fold
// pass inlines it); otherwise both are: they must agree on element type; an
// extent they disagree on (or that is data-dependent in
// either) becomes a data-dependent extent of the If's output, bounded by the
// larger, and a rank they disagree on a data-dependent rank (the output's
// ir::Value::rank_alternatives, memory for the branch of more bytes).
#include <algorithm>

#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

constexpr const char* kBranches[2] = {"then_branch", "else_branch"};

// Infers a subgraph's nodes in order. Values read from enclosing graphs are
// visible through their pointers; a value defined nowhere is an error.
Status InferGraph(ir::Graph& g) {
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  for (auto& n : g.nodes()) {
    for (int i = 0; i < n->num_inputs(); ++i) {
      const ir::Value* v = n->input(i);
      if (!v) continue;
      const ir::Graph* o = v->owner();
      const ir::Graph* a = &g;
      while (a && a != o) a = a->parent();
      if (!a || (!v->producer() && !v->is_constant() && !o->IsGraphInput(v))) {
        return Error(StatusCode::kInvalidArgument, n->Describe(), ": input ", i, " '", v->name(),
                     "' is not defined in this graph or an enclosing one");
      }
    }
    KILN_RETURN_IF_ERROR(InferNode(*n));
  }
  return Status::Ok();
}

Status InferIf(InferContext& c) {
  ir::Node& n = c.node();
  if (NumElements(c.in_shape(0)) != 1) {
    return c.Fail("input 0 'cond' must hold exactly one element, has shape ", ShapeToString(c.in_shape(0)));
  }
  const HostTensor* cond = c.in_const(0);
  const int taken = cond ? (*static_cast<const std::uint8_t*>(cond->data()) ? 0 : 1) : -1;
  ir::Graph* br[2] = {nullptr, nullptr};
  for (int b = 0; b < 2; ++b) {
    const ir::Attribute* a = n.FindAttr(kBranches[b]);
    if (!a || a->kind != ir::Attribute::Kind::kGraph || !a->g) {
      return c.Fail("attribute '", kBranches[b], "' is missing or not a graph");
    }
    ir::Graph& g = *a->g;
    if (static_cast<int>(g.outputs().size()) != n.num_outputs()) {
      return c.Fail("attribute '", kBranches[b], "' has ", g.outputs().size(), " outputs, the node has ",
                    n.num_outputs());
    }
    if (static_cast<int>(g.inputs().size()) != n.num_inputs() - 1) {
      return c.Fail("attribute '", kBranches[b], "' has ", g.inputs().size(), " inputs, the node passes ",
                    n.num_inputs() - 1, " captured values");
    }
    // A branch not taken (constant condition) is not inferred: its inputs
    // need only agree in type (in a plan for other input shapes than the
    // compiler's, its shapes are the compiler's; it never runs).
    const bool skipped = taken >= 0 && taken != b;
    for (int i = 1; i < n.num_inputs(); ++i) {
      const ir::Value* in = n.input(i);
      const ir::Value* gi = g.inputs()[i - 1];
      if (!in || in->dtype() != gi->dtype() ||
          (!skipped && (in->shape() != gi->shape() || in->dynamic_mask() != gi->dynamic_mask()))) {
        return c.Fail("attribute '", kBranches[b], "' input ", i - 1, " '", gi->name(), "' is ",
                      DTypeName(gi->dtype()), ShapeToString(gi->shape(), gi->dynamic_mask()),
                      " but the node's input ", i, " is ",
                      in ? DTypeName(in->dtype()) + ShapeToString(in->shape(), in->dynamic_mask())
                         : std::string("absent"));
      }
    }
    if (skipped) continue;
    // Captured values' upper bounds, proven or provisional, hold in the
    // branch too (its Range or Expand of a count the parent computed).
    for (int i = 1; i < n.num_inputs(); ++i) PassUpperBound(*n.input(i), *g.inputs()[i - 1]);
    br[b] = &g;
    KILN_RETURN_IF_ERROR(InferGraph(g).WithContext(StrCat(n.Describe(), " attribute '", kBranches[b], "'")));
  }
  for (int j = 0; j < n.num_outputs(); ++j) {
    if (taken >= 0) {
      const ir::Value* o = br[taken]->outputs()[j];
      c.SetOutput(j, o->dtype(), o->shape());
      c.SetOutputDynamic(j, o->dynamic_mask());
      c.SetOutputSymbolic(j, o->symbolic_mask());
      if (o->rank_varies()) c.SetOutputAlternatives(j, o->rank_alternatives());
      continue;
    }
    const ir::Value* t = br[0]->outputs()[j];
    const ir::Value* e = br[1]->outputs()[j];
    if (t->dtype() != e->dtype()) {
      return c.Fail("output ", j, ": then_branch yields ", DTypeName(t->dtype()), ", else_branch yields ",
                    DTypeName(e->dtype()), " (the branches must agree)");
    }
    // Branches that disagree on an extent (or yield a data-dependent one)
    // make it data-dependent: memory for the larger, the run reports which.
    // Branches of different ranks make the rank data-dependent (see
    // ir::Value::rank_alternatives): memory for the branch of more bytes.
    std::vector<ir::ShapeAlternative> shapes;
    AppendShapes(*t, shapes);
    AppendShapes(*e, shapes);
    KILN_ASSIGN_OR_RETURN(MergedShape m, MergeShapes(shapes, StrCat(n.Describe(), " output ", j)));
    // Dims that follow the model's symbols in either branch follow them
    // here (branches read values with symbolic dims).
    std::uint64_t symbolic = t->symbolic_mask() | e->symbolic_mask();
    if (!m.alternatives.empty() && symbolic) {  // of data-dependent rank: every dim
      symbolic = AllDims(m.shape.size());
    }
    c.SetOutput(j, t->dtype(), std::move(m.shape));
    c.SetOutputDynamic(j, m.dynamic_mask);
    c.SetOutputSymbolic(j, symbolic);
    if (!m.alternatives.empty()) c.SetOutputAlternatives(j, std::move(m.alternatives));
  }
  return Status::Ok();
}

}  // namespace

void PassUpperBound(const ir::Value& from, ir::Value& to) {
  // (Only between values of one type and shape: a file may pair others,
  // which InferIf then refuses by name.)
  if (from.dtype() != to.dtype() || from.shape() != to.shape()) to.set_value_upper_bound(nullptr);
  else if (from.bound_provisional()) to.set_provisional_bound(from.value_upper_bound());
  else to.set_value_upper_bound(from.value_upper_bound(), from.value_nonnegative());
}

int IfBranchNotTaken(const ir::Node& n) {
  if (n.op_type() != "If" || !n.domain().empty() || n.num_inputs() < 1 || !n.input(0)) return -1;
  const ir::Value* c = n.input(0);
  const HostTensor* cv = c->is_constant() ? c->constant().get() : c->bound_value().get();
  if (!cv || cv->dtype() != DType::kBool || NumElements(cv->shape()) != 1) return -1;
  return *static_cast<const std::uint8_t*>(cv->data()) ? 1 : 0;
}

void RegisterControlFlowOps(OpRegistry& r) {
  OpDef d;
  d.type = "If";
  d.versions = {1, 11, 13, 16};
  d.min_inputs = 1;
  d.max_inputs = 1 << 20;  // cond + captured values (lower-subgraphs)
  d.min_outputs = 1;
  d.max_outputs = 1 << 20;
  d.attributes = {"then_branch", "else_branch"};
  d.input_types = {DType::kBool};
  d.infer = InferIf;
  r.Register(d);
}

}  // namespace kiln::ops
