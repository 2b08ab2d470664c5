#include "ops/op_registry.h"

#include "common/checked.h"
#include "ir/shape_values.h"
#include "ops/shape_ops.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace kiln::ops {

Result<int> InferContext::Axis(std::int64_t axis, std::size_t rank, const char* what) const {
  auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    return Fail("attribute '", what, "' = ", axis, " is out of range for rank ", rank,
                " (expected ", -r, "..", r - 1, ")");
  }
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

bool InferContext::UpperBoundSlot(const ir::Node& node, int i) {
  if (!node.domain().empty()) return false;
  const std::string& t = node.op_type();
  if (t == "Range" && i == 1) {
    // Range's length max(ceil((limit - start) / delta), 0) grows with its
    // limit where start and delta are constants and delta > 0.
    const ir::Value* start = node.num_inputs() == 3 ? node.input(0) : nullptr;
    const ir::Value* delta = node.num_inputs() == 3 ? node.input(2) : nullptr;
    if (!start || !delta || !start->is_constant() || !delta->is_constant() || start->constant()->device() ||
        delta->constant()->device() || delta->constant()->numel() != 1) {
      return false;
    }
    const DType dt = delta->dtype();
    if (dt != DType::kInt64 && dt != DType::kInt32) return false;
    return delta->constant()->ToInt64Vector()[0] > 0;
  }
  return ((t == "TopK" || t == "Expand" || t == "Tile" || t == "Reshape") && i == 1) || (t == "ConstantOfShape" && i == 0);
}

bool InferContext::ProvisionalSlot(const ir::Node& node, int i) {
  const std::string& t = node.op_type();
  if (t == "If" && node.domain().empty()) {
    // A captured value (input i >= 1, after lower-subgraphs) whose branch
    // input feeds such a slot, in either branch or an If nested in one.
    if (i < 1) return false;
    for (const char* name : {"then_branch", "else_branch"}) {
      const ir::Attribute* a = node.FindAttr(name);
      if (!a || !a->g || a->g->inputs().size() + 1 != static_cast<std::size_t>(node.num_inputs())) continue;
      for (const ir::Use& u : a->g->inputs()[static_cast<std::size_t>(i) - 1]->uses()) {
        if (u.node && ProvisionalSlot(*u.node, u.index)) return true;
      }
    }
    return false;
  }
  return t != "TopK" && UpperBoundSlot(node, i);
}

bool InferContext::DataBoundedSlot(const ir::Node& node, int i) {
  if (!node.domain().empty()) return false;
  const std::string& t = node.op_type();
  return (t == "Slice" && i >= 1 && i <= 4 && node.num_inputs() >= 3) || ((t == "TopK" || t == "Split") && i == 1);
}

OpRegistry& OpRegistry::Get() {
  static OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    RegisterElementwiseOps(*reg);
    RegisterActivationOps(*reg);
    RegisterConvOps(*reg);
    RegisterGemmOps(*reg);
    RegisterQuantOps(*reg);
    RegisterPoolOps(*reg);
    RegisterNormOps(*reg);
    RegisterShapeOps(*reg);
    RegisterUnaryOps(*reg);
    RegisterReduceOps(*reg);
    RegisterTensorOpsOps(*reg);
    RegisterConvTransposeOps(*reg);
    RegisterResizeOps(*reg);
    RegisterRnnOps(*reg);
    RegisterInternalOps(*reg);
    RegisterControlFlowOps(*reg);
    RegisterDynamicOps(*reg);
    RegisterOrtFusedOps(*reg);
    return reg;
  }();
  return *r;
}

void OpRegistry::Register(OpDef def) {
  auto key = std::make_pair(def.type, def.domain);
  defs_[key] = std::move(def);
}

const OpDef* OpRegistry::Find(const std::string& type, const std::string& domain) const {
  std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = defs_.find({type, d});
  if (it == defs_.end() && d != "kiln") it = defs_.find({type, "kiln.custom"});  // custom ops: by type
  return it == defs_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> out;
  for (auto& [k, d] : defs_) {
    if (k.second.empty()) out.push_back(k.first);
  }
  return out;
}

namespace {

enum class Mode { kShapesOnly, kFull, kConcrete };
Status CheckAndInfer(ir::Node& node, Mode mode);

// A copy of integer tensor `t` with the elements `elems` marks (bit i:
// element i) set to extent(element); null for other types. Values near the
// type's limits (INT64_MAX as "to the end") are left as they are.
HostTensorPtr PerturbedElems(const HostTensor& t, std::uint64_t elems, std::int64_t (*extent)(std::int64_t)) {
  if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.numel() > 64) return nullptr;
  auto c = std::make_shared<HostTensor>(t.dtype(), t.shape());
  std::memcpy(c->mutable_data(), t.data(), t.nbytes());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (!(elems >> i & 1)) continue;
    if (t.dtype() == DType::kInt64) {
      std::int64_t& v = c->mutable_data_as<std::int64_t>()[i];
      if (v > -(std::int64_t{1} << 62) && v < (std::int64_t{1} << 62)) v = extent(v);
    } else {
      std::int32_t& v = c->mutable_data_as<std::int32_t>()[i];
      if (v > -(1 << 29) && v < (1 << 29)) v = static_cast<std::int32_t>(extent(v));
    }
  }
  return c;
}

// Runs the op's inference on a copy of `node` whose dynamic input dims are
// set by `extent(bound)`; returns the copy's output shapes, or an error.
// `symbolic`: the symbolic dims instead (Value::symbolic_mask); `joint`
// too: the elements of bound-valued inputs that follow from symbolic dims
// (Value::symbolic_elems) get the same extent function, so that a Reshape
// whose target is [batch, seq, 128] computed from Shape sees [b+1, s+1,
// 128] with an input of [b+1, s+1, 4, 32], as a run at other extents would.
Result<std::vector<Shape>> Probe(const ir::Node& node, const OpDef& def,
                                 std::int64_t (*extent)(std::int64_t), bool symbolic, bool joint = false) {
  ir::Graph scratch;
  ir::Node* c = scratch.AddCopyOf(node);
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    if (joint && v && !v->is_constant() && v->bound_value() && v->symbolic_elems()) {
      HostTensorPtr p = PerturbedElems(*v->bound_value(), v->symbolic_elems(), extent);
      if (!p) return Error(StatusCode::kInternal, "no joint probe for '", v->name(), "'");
      c->input(i)->set_bound_value(std::move(p));
    }
    const std::uint64_t mask = v ? (symbolic ? v->symbolic_mask() : v->dynamic_mask()) : 0;
    if (!mask) continue;
    Shape s = v->shape();
    for (std::size_t d = 0; d < s.size() && d < 64; ++d) {
      if (mask >> d & 1) s[d] = extent(s[d]);
    }
    c->input(i)->set_shape(std::move(s));
  }
  InferContext ctx(*c);
  KILN_RETURN_IF_ERROR(def.infer(ctx));
  std::vector<Shape> shapes;
  for (const ir::Value* o : c->outputs()) shapes.push_back(o->shape());
  return shapes;
}

// Marks the output dims that change when the dynamic (or, `symbolic`, the
// symbolic) input dims change (`joint`: see Probe).
Status PropagateDynamic(ir::Node& node, const OpDef& def, bool symbolic, bool joint = false) {
  // Extents to try for every dynamic input dim. Larger than the bound and a
  // small one must infer (else every output dim is dynamic); 0, 1 and
  // bound - 1 catch functions that are flat elsewhere (Slice [:1], starts
  // -1); an op that rejects them fails at run time on such data anyway, so
  // their failures say nothing.
  struct Try {
    std::int64_t (*extent)(std::int64_t);
    bool failure_marks_all;
  };
  const Try tries[] = {
      {+[](std::int64_t b) { return b + 1; }, true},
      {+[](std::int64_t b) { return b == 2 ? std::int64_t{3} : std::int64_t{2}; }, true},
      {+[](std::int64_t) { return std::int64_t{0}; }, false},
      {+[](std::int64_t) { return std::int64_t{1}; }, false},
      {+[](std::int64_t b) { return b > 0 ? b - 1 : std::int64_t{0}; }, false},
  };
  std::vector<std::uint64_t> masks(node.num_outputs(), 0);
  for (const Try& t : tries) {
    auto probed = Probe(node, def, t.extent, symbolic, joint);
    if (!probed.ok() && !t.failure_marks_all) continue;
    for (int j = 0; j < node.num_outputs(); ++j) {
      const Shape& s = node.output(j)->shape();
      if (!probed.ok() || probed.value()[j].size() != s.size()) {
        masks[j] = AllDims(s.size());
        continue;
      }
      for (std::size_t d = 0; d < s.size() && d < 64; ++d) {
        if (probed.value()[j][d] != s[d]) masks[j] |= std::uint64_t{1} << d;
      }
    }
  }
  for (int j = 0; j < node.num_outputs(); ++j) {
    if (symbolic) node.output(j)->set_symbolic_mask(masks[j]);
    else node.output(j)->set_dynamic_mask(masks[j]);
  }
  return Status::Ok();
}

// A copy of integer or float tensor `t` with `k` added to every element
// (null for other types).
HostTensorPtr Perturbed(const HostTensor& t, std::int64_t k) {
  auto c = std::make_shared<HostTensor>(t.dtype(), t.shape());
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    // Values near the type's limits (INT64_MAX as "to the end" in Slice)
    // are sentinels: left as they are (and no overflow).
    case DType::kInt64:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t v = t.data_as<std::int64_t>()[i];
        c->mutable_data_as<std::int64_t>()[i] = v > -(std::int64_t{1} << 62) && v < (std::int64_t{1} << 62) ? v + k : v;
      }
      return c;
    case DType::kInt32:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int32_t v = t.data_as<std::int32_t>()[i];
        c->mutable_data_as<std::int32_t>()[i] = v > -(1 << 30) && v < (1 << 30) ? v + static_cast<std::int32_t>(k) : v;
      }
      return c;
    case DType::kFloat32:
      for (std::int64_t i = 0; i < n; ++i) c->mutable_data_as<float>()[i] = t.data_as<float>()[i] + static_cast<float>(k);
      return c;
    default:
      return nullptr;
  }
}

// Output dims that follow from the values of bound-valued inputs (shape
// arithmetic on symbolic dims) become symbolic too: the op's inference is
// run again with those values changed (+1, +2), one input at a time (a dim
// may follow from the difference of two, as Slice's end - start); dims
// that change, or every dim when such an inference fails (a Reshape whose
// element count no longer matches), are marked. Over-marking only keeps a
// dim from being folded.
Status PropagateBound(ir::Node& node, const OpDef& def) {
  std::vector<std::uint64_t> masks(node.num_outputs(), 0);
  for (int which = 0; which < node.num_inputs(); ++which) {
    const ir::Value* bv = node.input(which);
    if (!bv || bv->is_constant() || !bv->bound_value()) continue;
    // Elements known not to follow from symbols stay (none: nothing to mark).
    const bool known = bv->symbolic_elems_known();
    if (known && bv->symbolic_elems() == 0) continue;
    for (std::int64_t k : {1, 2}) {
      ir::Graph scratch;
      ir::Node* c = scratch.AddCopyOf(node);
      HostTensorPtr changed =
          known ? PerturbedElems(*bv->bound_value(), bv->symbolic_elems(),
                                 k == 1 ? +[](std::int64_t v) { return v + 1; } : +[](std::int64_t v) { return v + 2; })
                : Perturbed(*bv->bound_value(), k);
      bool ok = changed != nullptr;
      c->input(which)->set_bound_value(std::move(changed));
      InferContext ctx(*c);
      ok = ok && def.infer(ctx).ok();
      for (int j = 0; j < node.num_outputs(); ++j) {
        const Shape& s = node.output(j)->shape();
        const Shape& probed = c->output(j)->shape();
        if (!ok || probed.size() != s.size()) {
          masks[j] = AllDims(s.size());
          continue;
        }
        for (std::size_t d = 0; d < s.size() && d < 64; ++d) {
          if (probed[d] != s[d]) masks[j] |= std::uint64_t{1} << d;
        }
      }
    }
  }
  for (int j = 0; j < node.num_outputs(); ++j) {
    node.output(j)->set_symbolic_mask(node.output(j)->symbolic_mask() | masks[j]);
  }
  return Status::Ok();
}

// Value::symbolic_elems of `v` as an input of shape arithmetic: constants
// have none; false where unknown.
bool ElemsOf(const ir::Value* v, std::uint64_t* elems) {
  if (!v) return false;
  if (v->is_constant()) {
    *elems = 0;
    return true;
  }
  if (!v->symbolic_elems_known()) return false;
  *elems = v->symbolic_elems();
  return true;
}

// Small static 0-D / 1-D values (at most 64 elements): element counts.
std::int64_t SmallCount(const ir::Value* v) {
  if (!v || v->shape().size() > 1 || v->varying_mask()) return -1;
  for (std::int64_t d : v->shape()) {
    if (d < 0) return -1;
  }
  const std::int64_t n = NumElements(v->shape());
  return n <= 64 ? n : -1;
}

// Values read from a constant, or from a bound value none of whose
// elements follow from symbols: fixed indices (Gather's).
bool FixedInts(const ir::Value* v, std::vector<std::int64_t>* out) {
  std::uint64_t e = 0;
  if (!v || !ElemsOf(v, &e) || e != 0) return false;
  const HostTensorPtr& t = v->is_constant() ? v->constant() : v->bound_value();
  if (!t || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32) || t->numel() > 64) return false;
  *out = t->ToInt64Vector();
  return true;
}

// Sets Value::symbolic_elems of the node's output (shape arithmetic: Shape,
// element-preserving ops, Gather of a 1-D value, Concat, elementwise
// arithmetic); unknown for every other op and value.
void SetSymbolicElems(ir::Node& node) {
  for (ir::Value* o : node.outputs()) {
    if (o) o->set_symbolic_elems(false, 0);
  }
  ir::Value* out = node.num_outputs() == 1 ? node.output(0) : nullptr;
  const std::int64_t n = SmallCount(out);
  if (n < 0 || !node.domain().empty() || node.num_inputs() < 1) return;
  const std::string& op = node.op_type();
  const ir::Value* in0 = node.input(0);
  std::uint64_t elems = 0, e0 = 0;
  if (op == "Shape") {
    if (!in0) return;
    const auto rank = static_cast<std::int64_t>(in0->shape().size());
    const DimSpan span = ShapeSpan(rank, node.GetInt("start", 0), node.GetInt("end", rank));
    if (span.size() != n) return;
    for (std::int64_t d = span.start; d < span.end; ++d) {
      if (d >= 64 || (in0->varying_mask() >> d & 1)) elems |= std::uint64_t{1} << (d - span.start);
    }
  } else if (op == "Identity" || op == "Cast" || op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
             op == "Flatten") {
    if (SmallCount(in0) != n || !ElemsOf(in0, &e0)) return;
    elems = e0;
  } else if (op == "Gather") {
    std::vector<std::int64_t> idx;
    const std::int64_t m = SmallCount(in0);
    if (m < 0 || in0->shape().size() != 1 || (node.GetInt("axis", 0) != 0 && node.GetInt("axis", 0) != -1) ||
        !ElemsOf(in0, &e0) ||
        node.num_inputs() < 2 || !FixedInts(node.input(1), &idx) || static_cast<std::int64_t>(idx.size()) != n) {
      return;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t k = idx[j] < 0 ? idx[j] + m : idx[j];
      if (k < 0 || k >= m) return;
      if (e0 >> k & 1) elems |= std::uint64_t{1} << j;
    }
  } else if (op == "Concat") {
    std::int64_t at = 0;
    for (const ir::Value* v : node.inputs()) {
      const std::int64_t m = SmallCount(v);
      std::uint64_t e = 0;
      if (m < 0 || v->shape().size() != 1 || !ElemsOf(v, &e)) return;
      if (at + m > 64) return;
      elems |= (m == 64 ? e : (e & ((std::uint64_t{1} << m) - 1))) << at;
      at += m;
    }
    if (at != n) return;
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Max" || op == "Min" ||
             op == "Mod") {
    for (const ir::Value* v : node.inputs()) {
      const std::int64_t m = SmallCount(v);
      std::uint64_t e = 0;
      if (m < 0 || (m != 1 && m != n) || !ElemsOf(v, &e)) return;
      if (m == 1 && n > 0) e = (e & 1) ? (n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1) : 0;
      elems |= e;
    }
  } else {
    return;
  }
  out->set_symbolic_elems(true, elems);
}

// Whether a model input may be a shape input: small, static, int32/int64 or
// float32/float64.
bool SmallShapeInput(const ir::Value* v) {
  // Symbolic dims are at their probe here (a batch of lengths, [batch]):
  // each run's values are checked against the same limits (Model).
  const std::int64_t e = NumElements(v->shape());
  if (e < 0 || v->dynamic_mask()) return false;
  switch (v->dtype()) {
    case DType::kInt64:
    case DType::kInt32:
      return static_cast<std::uint64_t>(e) * DTypeSize(v->dtype()) <= kShapeInputLimitBytes;
    case DType::kFloat32:
    case DType::kFloat64:
      return e <= kShapeInputFloatElements;
    default:
      return false;
  }
}

// Whether `v`'s value is known to each plan before it runs: it follows from
// constants in host memory, bound values, small model inputs of the
// top-level graph (collected in `inputs`) and shapes known per plan
// (`Shape` of a value whose dims are symbolic), through nodes each plan's
// specialization evaluates.
bool ValueFromShapeInputs(const ir::Value* v, std::set<const ir::Value*>& seen, std::set<ir::Value*>& inputs) {
  if (!v || v->bound_value() || !seen.insert(v).second) return true;
  // A constant in device memory is not read by host code (cpu::EvalBound).
  if (v->is_constant()) return v->constant()->device() == nullptr;
  if (seen.size() > 4096) return false;
  const ir::Node* p = v->producer();
  if (!p) {
    ir::Graph* g = v->owner();
    if (!g || g->parent() || !g->IsGraphInput(v) || !SmallShapeInput(v)) return false;
    inputs.insert(const_cast<ir::Value*>(v));
    return true;
  }
  if (ir::IsCopyToHost(*p) || ir::IsCopyFromHost(*p)) {  // placement's copies: the same value
    return ValueFromShapeInputs(p->input(0), seen, inputs);
  }
  if (!p->domain().empty() || p->HasSubgraphs()) return false;
  if (p->op_type() == "Shape" || p->op_type() == "Size") {
    // Reads its input's shape, not its data: known per plan unless a dim is
    // data-dependent.
    return p->input(0) && !p->input(0)->is_dynamic() && ir::ShapeValueOutputs(*p, kShapeInputLimitBytes);
  }
  const OpDef* def = OpRegistry::Get().Find(p->op_type(), p->domain());
  if (!def || def->any_attributes || !ir::ShapeValueOutputs(*p, kShapeInputLimitBytes)) return false;
  for (const ir::Value* in : p->inputs()) {
    if (!ValueFromShapeInputs(in, seen, inputs)) return false;
  }
  return true;
}

// (op_registry.h, "Shape inputs"). Returns whether it settled the node.
bool SettleShapeInputDims(ir::Node& node, std::uint64_t missed) {
  const ir::Graph* g = node.graph();
  if (!missed || !g || g->parent()) return false;
  bool unknown = false;
  for (const ir::Value* o : node.outputs()) {
    for (std::size_t d = 0; o && d < o->shape().size() && d < 64; ++d) unknown = unknown || o->shape()[d] < 0;
  }
  if (!unknown) return false;
  std::set<const ir::Value*> seen;
  std::set<ir::Value*> inputs;
  for (int i = 0; i < node.num_inputs() && i < 64; ++i) {
    if ((missed >> i & 1) && !ValueFromShapeInputs(node.input(i), seen, inputs)) return false;
  }
  for (ir::Value* o : node.outputs()) {
    if (!o) continue;
    Shape s = o->shape();
    for (std::size_t d = 0; d < s.size() && d < 64; ++d) {
      if (s[d] < 0) s[d] = kShapeInputProbe;
    }
    o->set_shape(std::move(s));
  }
  for (ir::Value* in : inputs) in->set_shape_input(true);
  return true;
}

}  // namespace

bool InferContext::DecidedByData(int i) const {
  return ValueDecidedByData(i < node_.num_inputs() ? node_.input(i) : nullptr);
}

bool InferContext::ValueDecidedByData(const ir::Value* v) {
  if (!v || v->is_constant() || v->bound_value()) return false;
  std::set<const ir::Value*> seen;
  std::set<ir::Value*> inputs;
  return !ValueFromShapeInputs(v, seen, inputs);
}

Status InferNode(ir::Node& node) { return CheckAndInfer(node, Mode::kFull); }
Status InferNodeShapesOnly(ir::Node& node) { return CheckAndInfer(node, Mode::kShapesOnly); }
Status InferNodeConcrete(ir::Node& node) { return CheckAndInfer(node, Mode::kConcrete); }

namespace {

// Every value an inference produces must have a size Kiln can hold: known
// dims non-negative and at most kMaxTensorBytes each (so that arithmetic on
// two dims cannot overflow), and dtype x shape within kMaxTensorBytes. This
// is where a Reshape to an overflowing target, a huge Expand / Tile /
// ConstantOfShape / Range, or huge attribute values end: an error naming the
// node and the output.
Status CheckOutputShapes(const ir::Node& node) {
  for (int j = 0; j < node.num_outputs(); ++j) {
    const ir::Value* o = node.output(j);
    if (!o) continue;
    bool fine = CheckShapeSize(o->dtype(), o->shape(), std::string_view()).ok();
    for (std::int64_t d : o->shape()) fine = fine && d <= kMaxTensorBytes;
    if (fine) continue;  // (the message is built only for a failure: this runs for every node of every plan)
    const std::string what = StrCat(node.Describe(), ": output ", j, " '", o->name(), "'");
    for (std::size_t d = 0; d < o->shape().size(); ++d) {
      if (o->shape()[d] > kMaxTensorBytes) {
        return Error(StatusCode::kOutOfRange, what, ": dim ", d, " of shape ", ShapeToString(o->shape()),
                     " is larger than Kiln's limit of ", kMaxTensorBytes, " bytes per tensor allows");
      }
    }
    KILN_RETURN_IF_ERROR(CheckShapeSize(o->dtype(), o->shape(), what));
  }
  return Status::Ok();
}

// A node fed a value of data-dependent rank (ir::Value::rank_alternatives):
// inferred once per combination of the shapes its inputs may take, on
// copies; the outputs get the merged result (MergeShapes). A combination
// the op rejects is one the run would reject too (its inference at run
// time names the node), so it only drops out of the bound; when every
// combination is rejected, the first error stands.
Status InferOverAlternatives(ir::Node& node, Mode mode) {
  std::vector<std::vector<ir::ShapeAlternative>> choices;
  std::size_t combinations = 1;
  const ir::Value* varying = nullptr;
  for (const ir::Value* v : node.inputs()) {
    if (v && v->rank_varies()) {
      choices.push_back(v->rank_alternatives());
      if (!varying) varying = v;
    } else {
      choices.push_back({ir::ShapeAlternative{v ? v->shape() : Shape{}, v ? v->dynamic_mask() : 0}});
    }
    combinations *= choices.back().size();
    if (combinations > 4 * ir::kMaxShapeAlternatives) {
      return Error(StatusCode::kUnimplemented, node.Describe(), ": its inputs of data-dependent rank can take more ",
                   "than ", 4 * ir::kMaxShapeAlternatives, " combinations of shapes");
    }
  }
  std::vector<std::vector<ir::ShapeAlternative>> outs(node.num_outputs());
  std::vector<std::uint64_t> symbolic(node.num_outputs(), 0);
  std::vector<DType> types(node.num_outputs(), DType::kUndefined);
  Status first = Status::Ok();
  bool any = false;
  std::vector<std::size_t> pick(choices.size(), 0);
  for (std::size_t k = 0; k < combinations; ++k) {
    ir::Graph scratch;
    ir::Node* c = scratch.AddCopyOf(node);
    for (int i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      if (!v) continue;
      const ir::ShapeAlternative& a = choices[i][pick[i]];
      c->input(i)->set_shape(a.shape);
      c->input(i)->set_dynamic_mask(a.dynamic_mask);
      // A value of data-dependent rank in a model with symbolic dims: every
      // dim of each of its shapes may follow the symbols.
      c->input(i)->set_symbolic_mask(v->rank_varies() ? (v->symbolic_mask() ? AllDims(a.shape.size()) : 0)
                                                      : v->symbolic_mask());
    }
    for (std::size_t i = 0; i < pick.size(); ++i) {  // next combination
      if (++pick[i] < choices[i].size()) break;
      pick[i] = 0;
    }
    Status st = CheckAndInfer(*c, mode);
    if (!st.ok()) {
      if (first.ok()) first = st;
      continue;
    }
    any = true;
    for (int j = 0; j < node.num_outputs(); ++j) {
      const ir::Value* o = c->output(j);
      types[j] = o->dtype();
      symbolic[j] |= o->symbolic_mask();
      AppendShapes(*o, outs[j]);
    }
  }
  if (!any) {
    return first.WithContext(StrCat("(input '", varying->name(), "' has a rank that depends on the data; this is ",
                                    "the first of its shapes the node rejects)"));
  }
  for (int j = 0; j < node.num_outputs(); ++j) {
    ir::Value* o = node.output(j);
    KILN_ASSIGN_OR_RETURN(MergedShape m, MergeShapes(outs[j], StrCat(node.Describe(), " output '", o->name(), "'")));
    o->set_dtype(types[j]);
    o->set_shape(std::move(m.shape));
    o->set_dynamic_mask(m.dynamic_mask);
    o->set_symbolic_mask(m.alternatives.empty() ? symbolic[j] & AllDims(o->shape().size())
                         : symbolic[j]          ? AllDims(o->shape().size())
                                                : 0);
    o->set_rank_alternatives(std::move(m.alternatives));
    o->set_bound_value(nullptr);
  }
  return CheckOutputShapes(node);
}

Status CheckAndInfer(ir::Node& node, Mode mode) {
  const OpDef* def = OpRegistry::Get().Find(node.op_type(), node.domain());
  if (!def) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": op '", node.op_type(),
                 "' (domain '", node.domain(), "') is not supported");
  }
  int present = node.num_inputs();
  if (present < def->min_inputs || present > def->max_inputs) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": expected ", def->min_inputs,
                 "..", def->max_inputs, " inputs, found ", present);
  }
  for (int i = 0; i < def->min_inputs; ++i) {
    if (!node.input(i)) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": required input ", i,
                   " is missing");
    }
  }
  if (node.num_outputs() < def->min_outputs || node.num_outputs() > def->max_outputs) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": expected ", def->min_outputs,
                 "..", def->max_outputs, " outputs, found ", node.num_outputs());
  }
  for (auto& [name, a] : node.attrs()) {
    if (!def->any_attributes && !def->attributes.count(name) && name.rfind("kiln.", 0) != 0) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": unknown attribute '", name,
                   "'");
    }
  }
  for (int i = 0; i < node.num_inputs(); ++i) {
    ir::Value* v = node.input(i);
    if (v && v->dtype() == DType::kUndefined) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": input ", i, " '",
                   v->name(), "' has no known element type");
    }
    if (v && !DTypeSupported(v->dtype())) {
      return Error(StatusCode::kUnimplemented, node.Describe(), ": input ", i, " '", v->name(),
                   "' has element type ", DTypeName(v->dtype()), ", which Kiln does not support");
    }
  }
  if (!def->input_types.empty() && node.input(0) &&
      !def->input_types.count(node.input(0)->dtype())) {
    std::ostringstream os;
    for (DType t : def->input_types) os << ' ' << DTypeName(t);
    return Error(StatusCode::kUnimplemented, node.Describe(), ": input type ",
                 DTypeName(node.input(0)->dtype()), " is not supported (supported:", os.str(), ")");
  }
  if (mode == Mode::kShapesOnly) {
    InferContext ctx(node);
    KILN_RETURN_IF_ERROR(def->infer(ctx));
    return CheckOutputShapes(node);
  }
  const ir::Value* dyn_in = nullptr;
  int dyn_index = -1;
  for (int i = 0; i < node.num_inputs() && !dyn_in; ++i) {
    if (node.input(i) && node.input(i)->is_dynamic()) {
      dyn_in = node.input(i);
      dyn_index = i;
    }
  }
  // If passes data-dependent values to its branches (see the If kernel);
  // other subgraph ops and custom ops take static shapes only.
  const bool subgraph = node.HasSubgraphs() && !(node.op_type() == "If" && node.domain().empty());
  if (dyn_in && (subgraph || def->any_attributes)) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": input ", dyn_index, " '", dyn_in->name(),
                 "' has a data-dependent shape ", ShapeToString(dyn_in->shape(), dyn_in->dynamic_mask()),
                 ", which ", node.HasSubgraphs() ? "ops with subgraphs" : "custom ops", " do not accept");
  }
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    if (!v || !v->rank_varies()) continue;
    if (node.HasSubgraphs()) {
      std::string shapes;
      for (const ir::ShapeAlternative& a : v->rank_alternatives()) {
        shapes += StrCat(shapes.empty() ? "" : " or ", ShapeToString(a.shape, a.dynamic_mask));
      }
      return Error(StatusCode::kUnimplemented, node.Describe(), ": input ", i, " '", v->name(),
                   "' has a rank that depends on the data (", shapes, "), which ops with subgraphs do not accept");
    }
    return InferOverAlternatives(node, mode);
  }
  const ir::Value* sym_in = nullptr;
  for (int i = 0; i < node.num_inputs() && !sym_in; ++i) {
    if (node.input(i) && node.input(i)->symbolic_mask()) sym_in = node.input(i);
  }
  if (sym_in && subgraph) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": input '", sym_in->name(), "' has symbolic dims ",
                 ShapeToString(sym_in->shape()), ", which ops with subgraphs do not accept yet; fix the model's "
                 "input shapes with --input-shape");
  }
  for (ir::Value* o : node.outputs()) {
    o->set_dynamic_mask(0);
    o->set_symbolic_mask(0);
    o->set_rank_alternatives({});
  }
  InferContext ctx(node);
  KILN_RETURN_IF_ERROR(def->infer(ctx));
  KILN_RETURN_IF_ERROR(CheckOutputShapes(node));
  if (dyn_in && !ctx.sets_dynamic()) KILN_RETURN_IF_ERROR(PropagateDynamic(node, *def, false));
  if (ctx.read_upper_bounds()) {
    // Inferred at the upper bounds of values the run computes: every dim
    // is data-dependent, bounded by what the inference gave.
    for (ir::Value* o : node.outputs()) {
      if (o) o->set_dynamic_mask(o->dynamic_mask() | AllDims(o->shape().size()));
    }
  }
  if (mode == Mode::kConcrete) return Status::Ok();
  // Joint probing (see Probe) where every bound-valued input says which of
  // its elements follow from symbols.
  bool joint = false;
  if (sym_in) {
    bool any_bound = false, all_known = true;
    for (const ir::Value* v : node.inputs()) {
      if (!v || v->is_constant() || !v->bound_value()) continue;
      any_bound = true;
      const DType t = v->bound_value()->dtype();
      all_known = all_known && v->symbolic_elems_known() && (t == DType::kInt64 || t == DType::kInt32) &&
                  v->bound_value()->numel() <= 64;
    }
    joint = any_bound && all_known;
  }
  if (sym_in && !ctx.sets_symbolic()) KILN_RETURN_IF_ERROR(PropagateDynamic(node, *def, true, joint));
  SetSymbolicElems(node);
  // Dims decided by shape-input values, and everything computed from them:
  // only the rank is known here, so every dim is symbolic (probing extents
  // around the probe would miss dims that vary only at other values).
  bool value_dims = SettleShapeInputDims(node, ctx.missed_values());
  for (int i = 0; i < node.num_inputs() && !value_dims; ++i) {
    value_dims = node.input(i) && node.input(i)->value_dims();
  }
  if (value_dims && node.op_type() == "Squeeze" && node.domain().empty() &&
      (node.num_inputs() < 2 || !node.input(1))) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": input '", node.input(0)->name(),
                 "' has dims decided by the values of shape inputs, and Squeeze without axes would give an output "
                 "rank that depends on those values; give Squeeze its axes");
  }
  for (ir::Value* o : node.outputs()) {
    if (!o) continue;
    o->set_value_dims(value_dims);
    if (value_dims) o->set_symbolic_mask(AllDims(o->shape().size()));
  }
  if (joint) return Status::Ok();  // the bound inputs' symbolic elements were probed with the dims
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    if (v && !v->is_constant() && v->bound_value()) return PropagateBound(node, *def);
  }
  return Status::Ok();
}

}  // namespace

Result<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (da < 0 || db < 0) {
      out[i] = -1;
    } else {
      return Error(StatusCode::kInvalidArgument, "shapes ", ShapeToString(a), " and ",
                   ShapeToString(b), " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    }
  }
  return out;
}

void AppendShapes(const ir::Value& v, std::vector<ir::ShapeAlternative>& out) {
  if (v.rank_varies()) {
    out.insert(out.end(), v.rank_alternatives().begin(), v.rank_alternatives().end());
  } else {
    out.push_back({v.shape(), v.dynamic_mask()});
  }
}

Result<MergedShape> MergeShapes(const std::vector<ir::ShapeAlternative>& shapes, const std::string& what) {
  std::vector<ir::ShapeAlternative> distinct;
  for (const ir::ShapeAlternative& a : shapes) {
    if (std::find(distinct.begin(), distinct.end(), a) == distinct.end()) distinct.push_back(a);
  }
  MergedShape m;
  if (distinct.empty()) return Error(StatusCode::kInternal, what, ": no shape to merge");
  bool one_rank = true;
  for (const ir::ShapeAlternative& a : distinct) one_rank = one_rank && a.shape.size() == distinct[0].shape.size();
  if (one_rank) {
    m.shape = distinct[0].shape;
    for (const ir::ShapeAlternative& a : distinct) {
      m.dynamic_mask |= a.dynamic_mask;
      for (std::size_t d = 0; d < m.shape.size(); ++d) {
        if (m.shape[d] < 0 || a.shape[d] < 0) {
          m.shape[d] = -1;
        } else if (m.shape[d] != a.shape[d]) {
          m.shape[d] = std::max(m.shape[d], a.shape[d]);
          if (d < 64) m.dynamic_mask |= std::uint64_t{1} << d;
        }
      }
    }
    return m;
  }
  if (distinct.size() > ir::kMaxShapeAlternatives) {
    return Error(StatusCode::kUnimplemented, what, ": its rank depends on the data, and it can take ",
                 distinct.size(), " shapes (Kiln follows at most ", ir::kMaxShapeAlternatives, ")");
  }
  // The bound: the shape of the most elements (an unknown extent wins, so
  // that the unresolved-dims check names it).
  std::size_t best = 0;
  for (std::size_t i = 1; i < distinct.size(); ++i) {
    const std::int64_t n = NumElements(distinct[i].shape), b = NumElements(distinct[best].shape);
    if (b >= 0 && (n < 0 || n > b)) best = i;
  }
  m.shape = distinct[best].shape;
  m.dynamic_mask = AllDims(m.shape.size());
  m.alternatives = std::move(distinct);
  return m;
}

}  // namespace kiln::ops
