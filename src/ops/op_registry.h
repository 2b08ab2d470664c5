// Operator definitions: what an op is (inputs, attributes, ONNX versions) and
// how its output types and shapes follow from its inputs. Kernels live apart,
// in backends/<device>/kernels; one op family per file here and there.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace kiln::ops {

// Passed to an op's shape/type inference. Inputs may be absent (optional).
class InferContext {
 public:
  explicit InferContext(ir::Node& node) : node_(node) {}
  ir::Node& node() { return node_; }
  int num_inputs() const { return node_.num_inputs(); }
  int num_outputs() const { return node_.num_outputs(); }
  bool has_input(int i) const { return node_.input(i) != nullptr; }
  DType in_dtype(int i) const { return node_.input(i)->dtype(); }
  const Shape& in_shape(int i) const { return node_.input(i)->shape(); }
  // Constant data of input i when known at compile time, else its bound
  // value (shape arithmetic on symbolic dims, at the probed extents: see
  // ir::Value::bound_value), else null.
  // A slot whose shapes only grow with its values (TopK's K, ...; see
  // ir::Value::value_upper_bound) gets the upper bound of a value computed
  // from data-dependent extents: InferNode then makes the outputs' dims
  // data-dependent.
  const HostTensor* in_const(int i) const {
    ir::Value* v = node_.input(i);
    if (!v) return nullptr;
    const HostTensor* t = v->constant() ? v->constant().get() : v->bound_value().get();
    if (!t && v->value_upper_bound() && i < 64 && UpperBoundSlot(node_, i)) {
      read_upper_bounds_ |= std::uint64_t{1} << i;
      return v->value_upper_bound().get();
    }
    if (!t && i < 64) missed_values_ |= std::uint64_t{1} << i;
    return t;
  }
  std::uint64_t read_upper_bounds() const { return read_upper_bounds_; }
  // Whether input `i` of `node` is a slot whose output extents never shrink
  // when its values grow.
  static bool UpperBoundSlot(const ir::Node& node, int i);
  // Whether input `i` of `node` is a slot whose outputs are bounded by the
  // data input's extents whatever its values (Slice's starts, ends, axes and
  // steps; TopK's K; Split's sizes, each output at most the whole axis):
  // where the run computes the value from data, the op
  // infers the data input's extents as the bound, data-dependent
  // (DecidedByData).
  static bool DataBoundedSlot(const ir::Node& node, int i);
  // Whether input `i` of `node` may take a provisional upper bound
  // (ir::Value::bound_provisional): an upper-bound slot whose output
  // extents grow with each element of the value (Range's limit,
  // ConstantOfShape's shape, Expand's shape, Tile's repeats, Reshape's
  // target, whose bound is one on the output dims it resolves to; not
  // TopK's K, which the data bounds), and an If's captured value whose
  // branch input feeds one (the branch input takes the If input's bound).
  static bool ProvisionalSlot(const ir::Node& node, int i);
  // Input i has a value the run computes from data: not a constant, not
  // known per plan (a bound value, or a value that follows from shape
  // inputs, which the shape-input path settles).
  bool DecidedByData(int i) const;
  // The same for any value (not a constant, not a bound value, not
  // following from shape inputs or shapes known per plan).
  static bool ValueDecidedByData(const ir::Value* v);
  // The inputs whose values the inference asked for and did not get (bit i:
  // input i): the output dims they decide are left -1.
  std::uint64_t missed_values() const { return missed_values_; }
  void SetOutput(int i, DType t, Shape s) {
    node_.output(i)->set_dtype(t);
    node_.output(i)->set_shape(std::move(s));
  }
  // Data-dependent dims of input i (see ir::Value::dynamic_mask).
  std::uint64_t in_dynamic(int i) const {
    ir::Value* v = node_.input(i);
    return v ? v->dynamic_mask() : 0;
  }
  // For ops whose output extents depend on input values (NonZero,
  // NonMaxSuppression): output i's shape is an upper bound on the dims in
  // `mask`. Ops that never call this get their masks derived from their
  // inputs' by InferNode.
  void SetOutputDynamic(int i, std::uint64_t mask) {
    node_.output(i)->set_dynamic_mask(mask);
    sets_dynamic_ = true;
  }
  bool sets_dynamic() const { return sets_dynamic_; }
  // Ops with subgraphs (If): output i's symbolic dims as the branches say,
  // instead of probing the node (see ir::Value::symbolic_mask).
  void SetOutputSymbolic(int i, std::uint64_t mask) {
    node_.output(i)->set_symbolic_mask(mask);
    sets_symbolic_ = true;
  }
  bool sets_symbolic() const { return sets_symbolic_; }
  // Output i's rank depends on the data (If): see ir::Value::rank_alternatives.
  // The shape and dynamic mask come from MergeShapes.
  void SetOutputAlternatives(int i, std::vector<ir::ShapeAlternative> alternatives) {
    node_.output(i)->set_rank_alternatives(std::move(alternatives));
    sets_dynamic_ = true;
  }
  // An INVALID_ARGUMENT error that names the node.
  template <typename... Args>
  Status Fail(const Args&... args) const {
    return Error(StatusCode::kInvalidArgument, node_.Describe(), ": ", args...);
  }
  // Normalises a possibly negative axis against `rank`; error names attribute.
  Result<int> Axis(std::int64_t axis, std::size_t rank, const char* what) const;

 private:
  ir::Node& node_;
  bool sets_dynamic_ = false;
  bool sets_symbolic_ = false;
  mutable std::uint64_t read_upper_bounds_ = 0;
  mutable std::uint64_t missed_values_ = 0;
};

// ONNX Runtime's contrib-op domain (QOperator models name it).
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

struct OpDef {
  std::string type;
  std::string domain;          // "" = ai.onnx
  std::vector<int> versions;   // ONNX since-versions implemented, ascending
  int min_inputs = 1, max_inputs = 1;
  int min_outputs = 1, max_outputs = 1;
  std::set<std::string> attributes;  // every attribute name the op accepts
  bool any_attributes = false;        // custom ops: attributes are the op's business
  // Types accepted for input 0 (empty = any supported type).
  std::set<DType> input_types;
  // Optional: rewrites an older version's form into the canonical one (e.g.
  // attribute-borne axes into a constant input). Runs once, at import.
  std::function<Status(ir::Node&, ir::Graph&)> normalize;
  std::function<Status(InferContext&)> infer;
};

class OpRegistry {
 public:
  static OpRegistry& Get();  // every built-in op registered
  void Register(OpDef def);
  const OpDef* Find(const std::string& type, const std::string& domain = "") const;
  std::vector<std::string> Types() const;  // sorted, default domain only

 private:
  std::map<std::pair<std::string, std::string>, OpDef> defs_;
};

// Checks the node against its definition (arity, attributes, version, input
// type), then runs inference. Errors name the node, attribute or input.
//
// Data-dependent extents: an op fed a value with dynamic dims infers on the
// inputs' upper bounds; which of its output dims are dynamic is found by
// probing its inference with those input dims changed (to bound + 1, a
// small extent, 0, 1 and bound - 1): output dims that follow are dynamic; a
// failing probe at bound + 1 or the small extent makes every output dim
// dynamic (failures at 0, 1, bound - 1 are ignored: such data fails at run
// time too). Ops with subgraphs and custom ops do not
// accept dynamic inputs (error naming the node and the input).
//
// Shape inputs: an output dim left -1 because the inference needs an input's
// value that is not known at compile time (Reshape's target, Slice's starts,
// Expand's shape, Resize's scales, Range's bounds, TopK's K, ... fed as a
// model input) becomes symbolic at extent kShapeInputProbe when that value
// follows from small model inputs alone (kShapeInputLimitBytes of integers,
// kShapeInputFloatElements floats; through nodes the host evaluates, in the
// top-level graph; at the probe, for inputs with symbolic dims, and at each
// run): those model inputs get Value::shape_input, and the runtime
// specializes the graph for each signature of their values (read as
// constants then). Other unknown dims stay -1 (the compiler reports them).
Status InferNode(ir::Node& node);
// An If whose condition is known (a constant, or its value at the compiler's
// probe: ir::Value::bound_value): the branch it does not take (0:
// then_branch, 1: else_branch); -1 when the condition is known only at run
// time, or for any other node. Such a branch may be valid only at other
// extents than the probe's: the compiler keeps it uncompiled if it fails
// there, and InferIf does not infer it (docs/design.md, If).
int IfBranchNotTaken(const ir::Node& n);
// An If's captured value `from` passes its upper bound on values
// (ir::Value::value_upper_bound), proven or provisional, to the branch's
// input `to` (none where it has none, or where the two differ in type or
// shape).
void PassUpperBound(const ir::Value& from, ir::Value& to);
inline constexpr std::int64_t kShapeInputProbe = 1;
using ir::kShapeInputFloatElements;
using ir::kShapeInputLimitBytes;

// Inference alone (no probing, masks untouched): the runtime's per-run shape
// computation for nodes fed dynamic values.
Status InferNodeShapesOnly(ir::Node& node);

// InferNode for a graph whose extents are all concrete (a plan specialized
// for its input shapes): data-dependent masks are propagated, symbolic dims
// and bound values are not tracked (no probing for them).
Status InferNodeConcrete(ir::Node& node);

// Common inference helpers.
Result<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Bits 0..rank-1 (every dim of a mask such as ir::Value::dynamic_mask).
inline std::uint64_t AllDims(std::size_t rank) {
  return rank >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << rank) - 1;
}

// Appends the shapes `v` may take: its rank alternatives, else its shape.
void AppendShapes(const ir::Value& v, std::vector<ir::ShapeAlternative>& out);

// The shapes a value may take, as one value's shape: alternatives of one
// rank merge into their largest extents, with the dims where they differ
// made data-dependent (`alternatives` left empty); of several ranks they
// stay alternatives (at most ir::kMaxShapeAlternatives, duplicates
// dropped), `shape` the one of the most elements with every dim
// data-dependent. `what` names the value in errors.
struct MergedShape {
  Shape shape;
  std::uint64_t dynamic_mask = 0;
  std::vector<ir::ShapeAlternative> alternatives;
};
Result<MergedShape> MergeShapes(const std::vector<ir::ShapeAlternative>& shapes, const std::string& what);

// Registration hooks, one per op family file.
void RegisterElementwiseOps(OpRegistry& r);
void RegisterActivationOps(OpRegistry& r);
void RegisterConvOps(OpRegistry& r);
void RegisterGemmOps(OpRegistry& r);
void RegisterPoolOps(OpRegistry& r);
void RegisterNormOps(OpRegistry& r);
void RegisterShapeOps(OpRegistry& r);
void RegisterUnaryOps(OpRegistry& r);
void RegisterReduceOps(OpRegistry& r);
void RegisterTensorOpsOps(OpRegistry& r);
void RegisterConvTransposeOps(OpRegistry& r);
void RegisterResizeOps(OpRegistry& r);
void RegisterRnnOps(OpRegistry& r);
void RegisterInternalOps(OpRegistry& r);
void RegisterControlFlowOps(OpRegistry& r);
void RegisterDynamicOps(OpRegistry& r);
void RegisterQuantOps(OpRegistry& r);
void RegisterOrtFusedOps(OpRegistry& r);

}  // namespace kiln::ops
