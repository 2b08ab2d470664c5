// Kiln's intermediate representation: a small, verifiable dataflow graph.
//
// A Graph owns its Values and Nodes. A Value is produced by at most one Node
// (or is a graph input, or a constant with data); Nodes refer to Values by
// pointer, and each Value keeps its list of uses so passes can rewrite the
// graph locally. Subgraphs (attribute kind kGraph) may refer to Values of an
// enclosing graph ("captured" values).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"

namespace kiln::ir {

class Graph;
class Node;

struct Attribute {
  enum class Kind { kUndefined, kFloat, kInt, kString, kTensor, kGraph,
                    kFloats, kInts, kStrings, kTensors, kGraphs };
  Kind kind = Kind::kUndefined;
  float f = 0;
  std::int64_t i = 0;
  std::string s;
  HostTensorPtr t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<std::int64_t> ints;
  std::vector<std::string> strings;
  std::vector<HostTensorPtr> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;

  static Attribute Int(std::int64_t v) { Attribute a; a.kind = Kind::kInt; a.i = v; return a; }
  static Attribute Float(float v) { Attribute a; a.kind = Kind::kFloat; a.f = v; return a; }
  static Attribute String(std::string v) { Attribute a; a.kind = Kind::kString; a.s = std::move(v); return a; }
  static Attribute Ints(std::vector<std::int64_t> v) { Attribute a; a.kind = Kind::kInts; a.ints = std::move(v); return a; }
  static Attribute Floats(std::vector<float> v) { Attribute a; a.kind = Kind::kFloats; a.floats = std::move(v); return a; }
  static Attribute Tensor(HostTensorPtr v) { Attribute a; a.kind = Kind::kTensor; a.t = std::move(v); return a; }
};
const char* AttributeKindName(Attribute::Kind k);

struct Use {
  Node* node;
  int index;  // input slot of `node`
};

inline constexpr std::size_t kMaxShapeAlternatives = 16;  // Value::rank_alternatives
inline constexpr std::uint64_t kShapeInputLimitBytes = 64 * 1024;  // = cpu::kBoundValueLimit
inline constexpr std::int64_t kShapeInputFloatElements = 64;       // = cpu::kBoundFloatElements

// One shape a rank-varying value may take (see Value::rank_alternatives).
struct ShapeAlternative {
  Shape shape;
  std::uint64_t dynamic_mask = 0;  // its data-dependent dims, as Value::dynamic_mask
  bool operator==(const ShapeAlternative&) const = default;
};

class Value {
 public:
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  void set_dtype(DType t) { dtype_ = t; }
  void set_shape(Shape s) { shape_ = std::move(s); }
  // Data-dependent extents (NonZero, NonMaxSuppression and what follows
  // them): bit d set means dim d is only known at run time and shape()[d]
  // is its upper bound (memory is planned for the bound). 0: fully static.
  std::uint64_t dynamic_mask() const { return dynamic_mask_; }
  void set_dynamic_mask(std::uint64_t m) { dynamic_mask_ = m; }
  bool is_dynamic() const { return dynamic_mask_ != 0; }
  // Bit d set means dim d follows a symbol of the model's inputs (a batch
  // or sequence dim given no fixed extent), so shape()[d] is only the
  // extent the compiler probed with and nothing may be folded or baked from
  // it. Written to .kiln ("symbolic", format version 6) and recomputed by
  // the loader's re-inference, which refuses a mismatch. The runtime
  // re-infers every shape for each signature of input shapes (Model's plan
  // cache).
  std::uint64_t symbolic_mask() const { return symbolic_mask_; }
  void set_symbolic_mask(std::uint64_t m) { symbolic_mask_ = m; }
  // Data-dependent or symbolic: the extents a pass must not bake.
  std::uint64_t varying_mask() const { return dynamic_mask_ | symbolic_mask_; }
  // Shape arithmetic on symbolic dims (Shape -> Gather -> Concat -> a
  // Reshape's target): the value this tensor takes at the extents the
  // compiler probed with, so inference sees concrete shapes (see
  // ops::InferContext::in_const). Not written to .kiln: the compiler and the
  // loader compute it (cpu::EvalBound); each plan folds such nodes to
  // constants for its own input shapes. Null for other values.
  const HostTensorPtr& bound_value() const { return bound_value_; }
  void set_bound_value(HostTensorPtr t) { bound_value_ = std::move(t); }
  // Shape arithmetic on data-dependent extents (Shape of NonZero's output
  // -> Gather -> ReduceMin -> TopK's K): a small integer tensor whose
  // values are only known at run time, with an upper bound for each
  // element, computed by the compiler and the loader (cpu::EvalUpperBound)
  // through ops that never decrease when an input grows. The few shape
  // slots that admit it (TopK's K, ConstantOfShape's shape, Expand's shape,
  // Tile's repeats, Reshape's target, Range's limit; see
  // ops::InferContext::in_const) infer at the bound and
  // make their outputs' dims data-dependent; the run reads the actual
  // values. Not written to .kiln; null for other values.
  // `nonnegative`: every element the run can compute is >= 0 too (extents,
  // counts, indices; not n - 1), which Mul and the sums need for their
  // bound to hold.
  const HostTensorPtr& value_upper_bound() const { return value_upper_bound_; }
  bool value_nonnegative() const { return value_upper_bound_ && value_nonnegative_; }
  void set_value_upper_bound(HostTensorPtr t, bool nonnegative = true) {
    value_upper_bound_ = std::move(t);
    value_nonnegative_ = nonnegative;
    bound_provisional_ = false;
  }
  // A provisional upper bound: a value computed from data with no bound the
  // arithmetic proves (Range(0, ReduceMax(x)), c - n) that feeds a slot
  // whose extents grow with it (Range's limit, ConstantOfShape's shape,
  // Expand's shape, Tile's repeats). Plans are made for it as for a proven
  // bound; a run that computes a larger value stops, the model raises the
  // bound (runtime::Executor::TakeBoundRaise) and runs again from the
  // start with a plan for the raised one. The bound is 1 per element unless
  // the model raised it (`raised_bound`, set on a plan's copy of the graph);
  // provisional bounds do not pass on to values computed from them (those
  // get provisional bounds of their own where they feed such a slot).
  bool bound_provisional() const { return value_upper_bound_ && bound_provisional_; }
  void set_provisional_bound(HostTensorPtr t) {
    value_upper_bound_ = std::move(t);
    value_nonnegative_ = false;
    bound_provisional_ = value_upper_bound_ != nullptr;
  }
  const HostTensorPtr& raised_bound() const { return raised_bound_; }
  void set_raised_bound(HostTensorPtr t) { raised_bound_ = std::move(t); }
  // Per-dim symbol names (empty string = none), parallel to shape, or empty
  // (no dim named). A name means "this dim equals symbol S" of the top-level
  // graph's symbol table (Graph::symbols). Set on model inputs from ONNX
  // dim_params; the importer also uses the entry "<unknown rank>" alone for
  // an input declared without a shape (until --input-shape fixes it).
  std::vector<std::string>& dim_params() { return dim_params_; }
  const std::vector<std::string>& dim_params() const { return dim_params_; }
  // A model input whose values decide shapes (Reshape's target, Slice's
  // starts, Expand's shape, ... fed as a graph input; see
  // ops::InferNode): the runtime keys its plans by this input's values as
  // well as by the input shapes, and each plan reads them as constants.
  // Not written to .kiln: the compiler's and the loader's inference set it.
  // Shape inputs are small: int32/int64 of at most kShapeInputLimitBytes,
  // float32/float64 of at most kShapeInputFloatElements (the limits of
  // cpu::EvalBound's shape arithmetic).
  bool shape_input() const { return shape_input_; }
  void set_shape_input(bool b) { shape_input_ = b; }
  // Dims decided by the values of shape inputs, or computed from such a
  // value: the compiler knows only the rank (the extents are a probe), so
  // every dim is marked symbolic and nothing is folded from them. Set by
  // ops::InferNode (compile and load); not written to .kiln.
  bool value_dims() const { return value_dims_; }
  void set_value_dims(bool b) { value_dims_ = b; }
  // Shape arithmetic (a value of at most 64 elements that gets a bound
  // value): which elements may follow from symbolic dims (bit i: element
  // i), where ops::InferNode could tell from the op (Shape, Gather,
  // Concat, Unsqueeze, ...), so that probing perturbs those elements
  // together with the symbolic dims and leaves fixed ones (BERT's hidden
  // size in a Reshape target) fixed. Unknown (false): every element may.
  // Compile-time only, not written to .kiln.
  bool symbolic_elems_known() const { return symbolic_elems_known_; }
  std::uint64_t symbolic_elems() const { return symbolic_elems_; }
  void set_symbolic_elems(bool known, std::uint64_t elems) {
    symbolic_elems_known_ = known;
    symbolic_elems_ = known ? elems : 0;
  }

  // A value whose rank depends on the data: the output of an If whose
  // branches yield different ranks, and what elementwise-like consumers
  // compute from it. Each entry is one shape it may take (one per way the
  // producers can go, at most kMaxShapeAlternatives); shape() is the entry
  // of the most bytes (memory is planned for it) and every dim is in
  // dynamic_mask(). Empty for every other value (then the rank is fixed).
  // Not written to .kiln: the compiler's and the loader's inference derive
  // it from the If's branches (ops::InferNode).
  const std::vector<ShapeAlternative>& rank_alternatives() const { return rank_alternatives_; }
  void set_rank_alternatives(std::vector<ShapeAlternative> a) { rank_alternatives_ = std::move(a); }
  bool rank_varies() const { return !rank_alternatives_.empty(); }

  Node* producer() const { return producer_; }
  const std::vector<Use>& uses() const { return uses_; }
  // Constant data (weights, folded values); null for computed values.
  const HostTensorPtr& constant() const { return constant_; }
  bool is_constant() const { return constant_ != nullptr; }
  void set_constant(HostTensorPtr t);
  Graph* owner() const { return owner_; }

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::uint64_t dynamic_mask_ = 0;
  std::uint64_t symbolic_mask_ = 0;
  std::vector<std::string> dim_params_;
  bool shape_input_ = false;
  bool value_dims_ = false;
  bool symbolic_elems_known_ = false;
  std::uint64_t symbolic_elems_ = 0;
  std::vector<ShapeAlternative> rank_alternatives_;
  Node* producer_ = nullptr;
  std::vector<Use> uses_;
  HostTensorPtr constant_;
  HostTensorPtr bound_value_;
  HostTensorPtr value_upper_bound_;
  HostTensorPtr raised_bound_;
  bool value_nonnegative_ = true;
  bool bound_provisional_ = false;
  Graph* owner_ = nullptr;
};

class Node {
 public:
  const std::string& name() const { return name_; }
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }
  // The ONNX operator-set version whose definition this node follows.
  int since_version() const { return since_version_; }
  void set_since_version(int v) { since_version_ = v; }
  void set_op_type(std::string t) { op_type_ = std::move(t); }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  // Optional inputs that are absent are null.
  Value* input(int i) const { return i < num_inputs() ? inputs_[i] : nullptr; }
  Value* output(int i) const { return outputs_[i]; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  void SetInput(int i, Value* v);   // grows the input list if needed
  void AddInput(Value* v) { SetInput(num_inputs(), v); }
  void TrimAbsentTrailingInputs();

  std::map<std::string, Attribute>& attrs() { return attrs_; }
  const std::map<std::string, Attribute>& attrs() const { return attrs_; }
  bool HasAttr(const std::string& n) const { return attrs_.count(n) != 0; }
  const Attribute* FindAttr(const std::string& n) const;
  std::int64_t GetInt(const std::string& n, std::int64_t def) const;
  float GetFloat(const std::string& n, float def) const;
  std::string GetString(const std::string& n, const std::string& def) const;
  std::vector<std::int64_t> GetInts(const std::string& n, std::vector<std::int64_t> def = {}) const;
  std::vector<float> GetFloats(const std::string& n, std::vector<float> def = {}) const;
  void SetAttr(const std::string& n, Attribute a) { attrs_[n] = std::move(a); }
  // Whether an attribute holds a subgraph (If's branches).
  bool HasSubgraphs() const;

  Graph* graph() const { return graph_; }
  // "Conv 'conv1'" — for error messages.
  std::string Describe() const;

 private:
  friend class Graph;
  std::string name_, op_type_, domain_;
  int since_version_ = 0;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, Attribute> attrs_;
  Graph* graph_ = nullptr;
};

// Placement (the compiler's placement pass): a node the compile target has
// no kernel for runs on the CPU and carries kPlaceAttr = "cpu"; every other
// node runs on the target. Values written by a CPU-placed node live in host
// memory; kiln.MemcpyToHost / kiln.MemcpyFromHost nodes (which run on the
// target) move values across.
inline constexpr const char* kPlaceAttr = "kiln.device";
inline constexpr const char* kPlaceHost = "cpu";
inline constexpr const char* kMemcpyToHost = "MemcpyToHost";
inline constexpr const char* kMemcpyFromHost = "MemcpyFromHost";
bool IsHostPlaced(const Node& n);            // kPlaceAttr == "cpu"

// A Cast to bfloat16 that the compiler inserted where a half graph computed
// in float32 returns its results (passes/half_compute.cc) carries
// kRoundAttr = kRoundNearestEven: it rounds to nearest even, as bfloat16
// arithmetic would, where a model's own Cast truncates as ONNX's reference does.
inline constexpr const char* kRoundAttr = "kiln.round";
inline constexpr const char* kRoundNearestEven = "nearest_even";
bool IsCopyToHost(const Node& n);            // kiln.MemcpyToHost
bool IsCopyFromHost(const Node& n);          // kiln.MemcpyFromHost

// The admissible extents of a symbol: min..max, max -1 = unbounded.
struct SymbolRange {
  std::int64_t min = 0;
  std::int64_t max = -1;
  bool operator==(const SymbolRange& o) const { return min == o.min && max == o.max; }
};
// Longest symbol name a .kiln file may hold (bytes of UTF-8).
inline constexpr std::size_t kMaxSymbolNameBytes = 256;
// Most gears a model may declare.
inline constexpr std::size_t kMaxGears = 64;

// The name a model input's unnamed dim gets as a symbol: "<input>_d<dim>",
// the input's name cut (at a UTF-8 character boundary) so that the whole
// stays within kMaxSymbolNameBytes.
std::string DefaultSymbolName(const std::string& input, std::size_t dim);
// "1..512", or "1.." when unbounded (messages).
std::string RangeText(const SymbolRange& r);

// What the user says about one model input's shape (--input-shape): per dim
// the admissible extents (min == max: fixed; max -1: unbounded), and gears:
// exact shapes planned ahead (the k-th gears of all inputs form signature k).
struct InputSpec {
  std::vector<SymbolRange> dims;
  std::vector<Shape> gears;
  bool ranged = false;  // dims came from a range alternative, not from the gears or one exact shape
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  // Default-domain opset version of the model this graph came from.
  int opset() const { return opset_; }
  void set_opset(int v) { opset_ = v; }
  Graph* parent() const { return parent_; }
  void set_parent(Graph* p) { parent_ = p; }
  // Symbol table (top-level graphs only; empty in subgraphs): the names that
  // values' dim_params() use, each with its range. A model compiled with
  // fixed input shapes has min == max == the extent it was compiled for.
  std::map<std::string, SymbolRange>& symbols() { return symbols_; }
  const std::map<std::string, SymbolRange>& symbols() const { return symbols_; }
  // Gears (top-level graphs only): signatures of input shapes (one Shape per
  // graph input, in order) that the runtime plans eagerly at load and keeps.
  // gears_only: no other signature is admitted.
  std::vector<std::vector<Shape>>& gears() { return gears_; }
  const std::vector<std::vector<Shape>>& gears() const { return gears_; }
  bool gears_only() const { return gears_only_; }
  void set_gears_only(bool v) { gears_only_ = v; }

  // Creates a value with a name unique in this graph (a suffix is added if
  // `name` is taken or empty).
  Value* AddValue(const std::string& name, DType dtype = DType::kUndefined, Shape shape = {});
  Value* AddConstant(const std::string& name, HostTensorPtr data);
  Node* AddNode(const std::string& op_type, const std::string& name,
                const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                const std::string& domain = "");
  // A detached copy of `n` (from any graph): its inputs and outputs become new
  // values of this graph with the same names, types and shapes (constant
  // inputs share their data; absent inputs stay absent); same attributes and
  // version. Shape inference can then run on the copy with other input shapes.
  Node* AddCopyOf(const Node& n);
  // Removes a node; its outputs stay (without producer) until RemoveUnusedValues.
  void RemoveNode(Node* n);
  // Redirects every use of `from` (and graph outputs) to `to`.
  void ReplaceAllUses(Value* from, Value* to);
  // Makes `v` the i-th output of `n` (v must have no producer); the old
  // output loses its producer.
  void RebindOutput(Node* n, int i, Value* v);
  // Renames a value (the new name must be free).
  Status RenameValue(Value* v, const std::string& new_name);
  // Drops values with no producer, no uses, not inputs/outputs (incl. constants).
  void RemoveUnusedValues();

  Value* FindValue(const std::string& name) const;          // this graph only
  Value* LookupValue(const std::string& name) const;        // this graph, then parents
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*>& inputs() { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  bool IsGraphInput(const Value* v) const;
  bool IsGraphOutput(const Value* v) const;

  // Orders nodes so every producer precedes its users; error on a cycle.
  Status TopologicalSort();
  // Structural checks: unique names, defined-before-use, single producer,
  // inputs/outputs present. Messages name the node and value at fault.
  Status Verify() const;
  std::string UniqueName(const std::string& base);

 private:
  std::string name_;
  int opset_ = 0;
  Graph* parent_ = nullptr;
  std::map<std::string, SymbolRange> symbols_;
  std::vector<std::vector<Shape>> gears_;
  bool gears_only_ = false;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, outputs_;
  std::unordered_map<std::string, Value*> by_name_;  // lookup only, never iterated
  std::map<std::string, int> name_counter_;
};

// A deep copy of `g`: values (names, types, shapes, masks, dim_params;
// constants share their data), nodes (attributes, versions), subgraphs
// (copied too, with reads of outer values redirected to the copies) and the
// symbol table. The runtime specializes such a copy for one signature of
// input shapes.
std::unique_ptr<Graph> CloneGraph(const Graph& g);
// A copy of a subgraph that may read values of enclosing graphs (an If
// branch before lower-subgraphs): those stay shared (the copy's nodes use
// them too); the values the subgraph owns are copied. Its parent is g's.
// A copy dropped unused must first let go of its inputs (DetachInputs).
std::unique_ptr<Graph> CloneSubgraph(const Graph& g);
// Drops every input of g's nodes (and, with `deep`, of the nodes of graphs
// nested in them), so that no value outside keeps a use by a node about to
// be destroyed.
void DetachInputs(Graph& g, bool deep);
// Whether some node of g has a subgraph (an If nested in a branch).
bool HasSubgraphNodes(const Graph& g);

// Calls fn on `g`, then on every subgraph of its nodes' attributes (If
// branches, Loop bodies), depth first, recursively.
void ForEachGraph(Graph& g, const std::function<void(Graph&)>& fn);
void ForEachGraph(const Graph& g, const std::function<void(const Graph&)>& fn);

}  // namespace kiln::ir
