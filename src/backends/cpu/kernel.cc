#include "backends/cpu/kernel.h"

#include "common/checked.h"

#include "ir/shape_values.h"
#include "ops/op_registry.h"
#include "ops/shape_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>

#include <omp.h>

namespace kiln::cpu {

KernelRegistry& KernelRegistry::Get() {
  static KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    RegisterElementwiseKernels(*reg);
    RegisterActivationKernels(*reg);
    RegisterConvKernels(*reg);
    RegisterQuantKernels(*reg);
    RegisterGemmKernels(*reg);
    RegisterPoolKernels(*reg);
    RegisterNormKernels(*reg);
    RegisterShapeKernels(*reg);
    RegisterUnaryKernels(*reg);
    RegisterReduceKernels(*reg);
    RegisterTensorOpsKernels(*reg);
    RegisterConvTransposeKernels(*reg);
    RegisterResizeKernels(*reg);
    RegisterRnnKernels(*reg);
    RegisterDynamicKernels(*reg);
    return reg;
  }();
  return *r;
}

void KernelRegistry::Register(const std::string& op_type, KernelFactory f,
                              const std::string& domain) {
  factories_[{op_type, domain}] = std::move(f);
}

const KernelFactory* KernelRegistry::Find(const std::string& op_type,
                                          const std::string& domain) const {
  auto it = factories_.find({op_type, domain == "ai.onnx" ? "" : domain});
  return it == factories_.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<Kernel>> CreateKernel(const KernelInit& init) {
  const KernelFactory* f = KernelRegistry::Get().Find(init.node->op_type(), init.node->domain());
  if (!f) {
    return Error(StatusCode::kUnimplemented, init.node->Describe(),
                 ": no CPU kernel for op '", init.node->op_type(), "'");
  }
  // Kernel factories may throw (oneDNN's C++ API reports an unsupported or
  // too large problem with dnnl::error; allocations with std::bad_alloc):
  // the error names the node instead of escaping.
  Result<std::unique_ptr<Kernel>> k = Error(StatusCode::kInternal, "no kernel");
  try {
    k = (*f)(init);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, init.node->Describe(), ": out of memory creating its kernel");
  } catch (const std::exception& e) {
    return Error(StatusCode::kUnimplemented, init.node->Describe(), ": cannot create its kernel: ", e.what());
  }
  if (!k.ok()) return k.status().WithContext(init.node->Describe());
  return k;
}

// The bound the arithmetic proves (EvalUpperBound).
static Result<bool> EvalProvenUpperBound(ir::Node& node, std::uint64_t limit_bytes) {
  const bool copy = ir::IsCopyToHost(node) || ir::IsCopyFromHost(node);
  if (node.HasSubgraphs() || (!node.domain().empty() && !copy) || node.num_outputs() != 1 || !node.output(0)) {
    return false;
  }
  ir::Value* out = node.output(0);
  const DType ot = out->dtype();
  if ((ot != DType::kInt64 && ot != DType::kInt32) || !IsStatic(out->shape()) ||
      static_cast<std::uint64_t>(NumElements(out->shape())) * DTypeSize(ot) > limit_bytes) {
    return false;
  }
  if (copy) {
    // A value copied between memories (placement) keeps its proven bound.
    // (A provisional one is not passed on: the copy, which feeds the slot,
    // gets its own, raised under its own name.)
    const ir::Value* in = node.num_inputs() == 1 ? node.input(0) : nullptr;
    if (!in || !in->value_upper_bound() || in->bound_provisional() || in->dtype() != ot ||
        in->value_upper_bound()->shape() != out->shape()) {
      return false;
    }
    out->set_value_upper_bound(in->value_upper_bound(), in->value_nonnegative());
    return true;
  }
  const std::string& t = node.op_type();
  if (t == "Shape" || t == "Size") {
    const ir::Value* in = node.input(0);
    if (!in || !in->is_dynamic() || !IsStatic(in->shape())) return false;
    HostTensorPtr v;
    if (t == "Size") {
      auto size = std::make_shared<HostTensor>(DType::kInt64, Shape{});
      *size->mutable_data_as<std::int64_t>() = NumElements(in->shape());
      v = std::move(size);
    } else {
      const auto rank = static_cast<std::int64_t>(in->shape().size());
      v = ops::ShapeValueOf(in->shape(), node.GetInt("start", 0), node.GetInt("end", rank), 0);
    }
    if (!v || v->shape() != out->shape()) return false;
    out->set_value_upper_bound(std::move(v));
    return true;
  }
  // Sources bounded by their type or by an extent: a Cast of a bool (0 or
  // 1: a count of elements passing a test once summed), ArgMax / ArgMin
  // (an index along the axis: at most its extent - 1).
  auto filled = [&](std::int64_t e) {
    auto v = std::make_shared<HostTensor>(ot, out->shape());
    for (std::int64_t k = 0; k < v->numel(); ++k) {
      if (ot == DType::kInt64) v->mutable_data_as<std::int64_t>()[k] = e;
      else v->mutable_data_as<std::int32_t>()[k] = static_cast<std::int32_t>(e);
    }
    out->set_value_upper_bound(std::move(v), true);
    return true;
  };
  if (t == "Cast" && node.input(0) && !node.input(0)->is_constant() && node.input(0)->dtype() == DType::kBool) {
    return filled(1);
  }
  if (t == "ArgMax" || t == "ArgMin") {
    const ir::Value* in = node.input(0);
    if (!in || !IsStatic(in->shape())) return false;
    const auto rank = static_cast<std::int64_t>(in->shape().size());
    std::int64_t axis = node.GetInt("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || in->shape()[static_cast<std::size_t>(axis)] < 1) return false;
    const std::int64_t most = in->shape()[static_cast<std::size_t>(axis)] - 1;
    if (ot == DType::kInt32 && most > std::numeric_limits<std::int32_t>::max()) return false;
    return filled(most);
  }
  // Inputs after the first that must be constants (indices, axes, shapes;
  // Sub's subtrahend, Div's positive divisor: x - c and x / c never
  // decrease when x grows).
  static const std::map<std::string, int> kFixedAfterFirst = {
      {"Gather", 1}, {"Unsqueeze", 1}, {"Squeeze", 1}, {"Reshape", 1}, {"Identity", 1}, {"Cast", 1},
      {"ReduceMin", 1}, {"ReduceMax", 1}, {"ReduceSum", 1}, {"ReduceProd", 1}, {"Sub", 1}, {"Div", 1}};
  static const std::set<std::string> kAllBounded = {"Concat", "Min", "Max", "Add", "Mul"};
  const bool fixed_tail = kFixedAfterFirst.count(t) != 0;
  if (!fixed_tail && !kAllBounded.count(t)) return false;
  // Mul and the sums hold only for values that cannot be negative (-3 * -3
  // is above the bounds' 0 * 0); Add is monotone in each input whatever
  // their signs.
  const bool nonnegative = t == "Mul" || t == "ReduceSum" || t == "ReduceProd";
  std::vector<HostTensorPtr> ins;
  std::vector<bool> in_nonneg;
  bool any = false;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    if (!v) {
      ins.push_back(nullptr);
      in_nonneg.push_back(true);
      continue;
    }
    HostTensorPtr x;
    bool nn = false;
    if (v->is_constant()) {
      if (v->constant()->device()) return false;
      x = v->constant();
      if (x->dtype() != DType::kInt64 && x->dtype() != DType::kInt32) return false;
      const std::vector<std::int64_t> e = x->ToInt64Vector();
      nn = std::all_of(e.begin(), e.end(), [](std::int64_t q) { return q >= 0; });
      if (t == "Div" && i == 1 && !std::all_of(e.begin(), e.end(), [](std::int64_t q) { return q > 0; })) return false;
      if (t == "Sub" && i == 1) nn = std::all_of(e.begin(), e.end(), [](std::int64_t q) { return q <= 0; });
    } else if (v->value_upper_bound() && !v->bound_provisional() && (!fixed_tail || i == 0)) {
      x = v->value_upper_bound();
      nn = v->value_nonnegative();
      any = true;
    } else {
      return false;
    }
    // (Bounds are integers: set only on int64 / int32 values.)
    if (nonnegative && !nn) return false;
    ins.push_back(std::move(x));
    in_nonneg.push_back(nn);
  }
  if (!any) return false;
  // Whether the result cannot be negative either.
  bool out_nonneg;
  if (t == "Max") {
    out_nonneg = std::any_of(in_nonneg.begin(), in_nonneg.end(), [](bool b) { return b; });
  } else if (t == "Add" || t == "Min" || t == "Concat" || t == "Sub") {
    out_nonneg = std::all_of(in_nonneg.begin(), in_nonneg.end(), [](bool b) { return b; });
  } else {
    out_nonneg = nonnegative || in_nonneg[0];
  }
  if (t == "Cast" && ot == DType::kInt32) {  // a narrowing cast wraps what int32 cannot hold
    for (std::int64_t e : ins[0]->ToInt64Vector()) {
      if (e > std::numeric_limits<std::int32_t>::max() || e < std::numeric_limits<std::int32_t>::min()) return false;
    }
  }
  if (nonnegative || t == "Add" || t == "Sub") {
    // What the result's elements can reach (checked: a bound the kernels'
    // wrapping arithmetic would have wrapped is no bound), at most a tensor
    // extent: Add the sum of each input's largest, Sub the largest minus
    // the least subtrahend, Mul their product, ReduceSum the largest times
    // the count, ReduceProd its power.
    const bool reduce = t == "ReduceSum" || t == "ReduceProd";
    std::int64_t reach = t == "Add" || t == "ReduceSum" || t == "Sub" ? 0 : 1;
    std::int64_t low = 0;
    bool fits = true;
    for (std::size_t i = 0; i < ins.size() && fits && (!reduce || i == 0); ++i) {
      if (!ins[i]) continue;
      const std::vector<std::int64_t> v = ins[i]->ToInt64Vector();
      const std::int64_t most = v.empty() ? 0 : *std::max_element(v.begin(), v.end());
      if (t == "Sub") {
        // Every element difference lies between least(x) - most(c) and
        // most(x) - least(c): both must fit.
        if (i == 0) {
          reach = most;
          low = v.empty() ? 0 : *std::min_element(v.begin(), v.end());
        } else {
          std::int64_t ignored;
          fits = CheckedSub(reach, v.empty() ? 0 : *std::min_element(v.begin(), v.end()), &reach) &&
                 CheckedSub(low, most, &ignored);
        }
      } else if (t == "Add") {  // the least elements' sum too (n - 5 + c may be negative)
        fits = CheckedAdd(reach, most, &reach) &&
               CheckedAdd(low, v.empty() ? 0 : *std::min_element(v.begin(), v.end()), &low);
      } else if (t == "Mul") {
        fits = CheckedMul(reach, most, &reach);
      } else if (t == "ReduceSum") {
        fits = CheckedMul(most, static_cast<std::int64_t>(v.size()), &reach);
      } else {
        for (std::size_t k = 0; k < v.size() && fits; ++k) fits = CheckedMul(reach, most, &reach) && reach <= kMaxTensorBytes;
      }
    }
    if (!fits || reach > kMaxTensorBytes) return false;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<HostTensorPtr> outs, EvalNode(node, ins));
  if (outs.size() != 1 || !outs[0] || outs[0]->shape() != out->shape()) return false;
  out->set_value_upper_bound(std::move(outs[0]), out_nonneg);
  return true;
}

// A provisional bound for output `o`, computed from data with no bound the
// arithmetic proves, where it feeds a slot that admits one
// (ir::Value::bound_provisional): the bound its model raised it to, else 1
// per element. In If branches too (their raises go up to the model; an If's
// captured value feeds such a slot where its branch input does).
static void SetProvisionalBound(ir::Value* o, std::uint64_t limit_bytes) {
  if (!o || o->value_upper_bound() || o->is_constant() || o->bound_value()) return;
  const DType ot = o->dtype();
  if ((ot != DType::kInt64 && ot != DType::kInt32) || !IsStatic(o->shape()) ||
      static_cast<std::uint64_t>(NumElements(o->shape())) * DTypeSize(ot) > limit_bytes) {
    return;
  }
  bool feeds = false;
  for (const ir::Use& u : o->uses()) feeds = feeds || (u.node && ops::InferContext::ProvisionalSlot(*u.node, u.index));
  if (!feeds || !ops::InferContext::ValueDecidedByData(o)) return;
  HostTensorPtr b = o->raised_bound();
  if (!b || b->dtype() != ot || b->shape() != o->shape()) {
    auto ones = std::make_shared<HostTensor>(ot, o->shape());
    for (std::int64_t k = 0; k < ones->numel(); ++k) {
      if (ot == DType::kInt64) ones->mutable_data_as<std::int64_t>()[k] = 1;
      else ones->mutable_data_as<std::int32_t>()[k] = 1;
    }
    b = std::move(ones);
  }
  o->set_provisional_bound(std::move(b));
}

Result<bool> EvalUpperBound(ir::Node& node, std::uint64_t limit_bytes) {
  for (ir::Value* o : node.outputs()) {
    if (o) o->set_value_upper_bound(nullptr);
  }
  KILN_ASSIGN_OR_RETURN(bool proven, EvalProvenUpperBound(node, limit_bytes));
  if (proven) return true;
  bool any = false;
  for (ir::Value* o : node.outputs()) {
    SetProvisionalBound(o, limit_bytes);
    any = any || (o && o->bound_provisional());
  }
  return any;
}

static Result<std::vector<HostTensorPtr>> EvalWith(Kernel& kernel, const ir::Node& node,
                                                   const std::vector<HostTensorPtr>& inputs, const KernelInit& init);

Result<std::vector<HostTensorPtr>> EvalNode(const ir::Node& node,
                                            const std::vector<HostTensorPtr>& inputs) {
  KernelInit init;
  init.node = &node;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TensorDesc d;
    if (inputs[i]) d = {inputs[i]->dtype(), inputs[i]->shape()};
    init.inputs.push_back(d);
    init.const_inputs.push_back(inputs[i].get());
  }
  for (ir::Value* o : node.outputs()) init.outputs.push_back({o->dtype(), o->shape()});
  KILN_ASSIGN_OR_RETURN(auto kernel, CreateKernel(init));
  // Output sizes were checked by inference (CheckShapeSize); an allocation
  // that still fails is an error, not an exception.
  try {
    return EvalWith(*kernel, node, inputs, init);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, node.Describe(), ": out of memory evaluating it");
  }
}

Result<bool> EvalBound(ir::Node& node, std::uint64_t limit_bytes) {
  if ((ir::IsCopyToHost(node) || ir::IsCopyFromHost(node)) && node.num_inputs() == 1 && node.num_outputs() == 1 &&
      node.input(0) && node.output(0)) {
    // Shape arithmetic copied between memories (placement): the same value.
    const ir::Value* in = node.input(0);
    HostTensorPtr b = in->is_constant() ? (in->constant()->device() ? nullptr : in->constant()) : in->bound_value();
    if (!b || b->dtype() != node.output(0)->dtype() || b->shape() != node.output(0)->shape()) return false;
    node.output(0)->set_bound_value(std::move(b));
    return true;
  }
  if (node.HasSubgraphs() || !node.domain().empty()) return false;
  if (!ir::ShapeValueOutputs(node, limit_bytes)) return false;
  std::vector<HostTensorPtr> ins;
  if (node.op_type() == "Shape") {
    // The extents the input has now (its data is not needed), unless a
    // requested dim is data-dependent.
    const ir::Value* in = node.input(0);
    if (!in || !IsStatic(in->shape())) return false;
    const auto rank = static_cast<std::int64_t>(in->shape().size());
    HostTensorPtr t = ops::ShapeValueOf(in->shape(), node.GetInt("start", 0), node.GetInt("end", rank),
                                        in->dynamic_mask());
    if (!t) return false;
    node.output(0)->set_bound_value(std::move(t));
    return true;
  }
  bool any_bound = false;
  for (const ir::Value* v : node.inputs()) {
    if (!v) {
      ins.push_back(nullptr);
      continue;
    }
    if (v->is_constant()) {
      // Host code reads it: not a weight that lives in device memory.
      if (v->constant()->device()) return false;
      ins.push_back(v->constant());
    } else if (v->bound_value()) {
      ins.push_back(v->bound_value());
      any_bound = true;
    } else {
      return false;
    }
  }
  if (!any_bound) return false;
  KILN_ASSIGN_OR_RETURN(std::vector<HostTensorPtr> outs, EvalNode(node, ins));
  for (std::size_t j = 0; j < outs.size() && j < static_cast<std::size_t>(node.num_outputs()); ++j) {
    node.output(static_cast<int>(j))->set_bound_value(outs[j]);
  }
  return true;
}

static Result<std::vector<HostTensorPtr>> EvalWith(Kernel& kernel_ref, const ir::Node& node,
                                                   const std::vector<HostTensorPtr>& inputs, const KernelInit& init) {
  Kernel* kernel = &kernel_ref;
  std::vector<std::shared_ptr<HostTensor>> outs;
  std::vector<void*> ptrs;
  for (auto& in : inputs) ptrs.push_back(in ? const_cast<void*>(in->data()) : nullptr);
  for (auto& d : init.outputs) {
    auto t = std::make_shared<HostTensor>(d.dtype, d.shape);
    ptrs.push_back(t->mutable_data());
    outs.push_back(t);
  }
  std::vector<Shape> out_shapes;
  for (auto& d : init.outputs) out_shapes.push_back(d.shape);
  KernelArgs args{ptrs.data(), static_cast<int>(inputs.size()), out_shapes.data()};
  if (Status st = RunKernel(*kernel, args, node); !st.ok()) return st.WithContext(node.Describe());
  for (std::size_t j = 0; j < outs.size(); ++j) {
    if (out_shapes[j] == outs[j]->shape()) continue;
    // A data-dependent extent: keep the dense prefix the kernel wrote.
    if (NumElements(out_shapes[j]) > NumElements(outs[j]->shape())) {
      return Error(StatusCode::kInternal, node.Describe(), ": output ", j, " shape ", ShapeToString(out_shapes[j]),
                   " exceeds its bound ", ShapeToString(outs[j]->shape()));
    }
    auto t = std::make_shared<HostTensor>(outs[j]->dtype(), out_shapes[j]);
    std::memcpy(t->mutable_data(), outs[j]->data(), t->nbytes());
    outs[j] = t;
  }
  return std::vector<HostTensorPtr>(outs.begin(), outs.end());
}

namespace {
thread_local int t_threads = 1;
thread_local bool t_omp_set = false;
}  // namespace

void UseThreads(int n) {
  n = n < 1 ? 1 : n;
  if (n == t_threads && t_omp_set) return;
  t_threads = n;
  t_omp_set = true;
  omp_set_num_threads(n);
}
int NumThreads() { return t_threads; }

}  // namespace kiln::cpu
