// kiln::Model: the runtime entry point over a mapped .kiln file.
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <list>
#include <map>
#include <memory>

#include "backends/cpu/kernel.h"
#include "custom/registry.h"
#include "format/kiln_file.h"
#include "kiln/custom_op.h"
#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "common/checked.h"
#include "plan/memory_plan.h"
#include "runtime/devices.h"
#include "ops/file_constant.h"
#include "runtime/executor.h"
#include "runtime/stream_impl.h"
#include "runtime/session_impl.h"
#include "weights/weight_dir.h"
#include "weights/weight_manager.h"

namespace kiln {
namespace {

// Catches anything thrown below a public entry point and turns it into a
// Status naming `what`: no exception crosses the API.
// The message ("<action> '<name>'") is only built when something was thrown:
// Execute is a hot path.
template <typename F>
auto Guarded(const char* action, const std::string& name, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, action, " '", name, "': out of memory");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, action, " '", name, "': unexpected exception: ", e.what());
  } catch (...) {
    return Error(StatusCode::kInternal, action, " '", name, "': unexpected exception");
  }
}

// Every node of a file's graph goes through its op definition (type,
// version, arity, attributes) and inference exactly as at compile time, and
// the inferred types and shapes must equal the recorded ones. Subgraphs are
// checked first, recursively, so no branch node reaches a kernel unchecked.
bool HasSymbolicInputs(const ir::Graph& g) {
  for (const ir::Value* v : g.inputs()) {
    if (v->symbolic_mask()) return true;
  }
  return false;
}

// A node's op version against those Kiln implements.
Status CheckOpVersion(const ir::Node& n, const std::string& path) {
  const ops::OpDef* def = ops::OpRegistry::Get().Find(n.op_type(), n.domain());
  if (def && !def->versions.empty() &&
      std::find(def->versions.begin(), def->versions.end(), n.since_version()) == def->versions.end()) {
    std::string known;
    for (int v : def->versions) known += StrCat(known.empty() ? "" : ", ", v);
    return Error(StatusCode::kCorrupt, "model '", path, "': ", n.Describe(), " has op version ", n.since_version(),
                 "; Kiln implements versions ", known);
  }
  return Status::Ok();
}

// Every node's of a graph and the graphs nested in it.
Status CheckOpVersions(const ir::Graph& g, const std::string& path) {
  for (const auto& n : g.nodes()) {
    KILN_RETURN_IF_ERROR(CheckOpVersion(*n, path));
    for (const auto& [k, a] : n->attrs()) {
      if (a.g) KILN_RETURN_IF_ERROR(CheckOpVersions(*a.g, path).WithContext(StrCat(n->Describe(), " attribute '", k, "'")));
      for (const auto& sg : a.graphs) {
        if (sg) KILN_RETURN_IF_ERROR(CheckOpVersions(*sg, path).WithContext(StrCat(n->Describe(), " attribute '", k, "'")));
      }
    }
  }
  return Status::Ok();
}

Status ReinferGraph(ir::Graph& g, const std::string& path, bool symbolic_model = false) {
  // Shape arithmetic on symbolic dims is evaluated at the recorded (probed)
  // extents as the compiler did (cpu::EvalBound), for the nodes after it,
  // in If branches too (their inputs get the values the If passes).
  const bool bound = g.parent() == nullptr ? HasSymbolicInputs(g) : symbolic_model;
  // Shape inputs are found again by the inference below (ops::InferNode),
  // and must be the ones the file records.
  std::vector<bool> recorded_shape_inputs;
  for (ir::Value* in : g.inputs()) {
    recorded_shape_inputs.push_back(in->shape_input());
    in->set_shape_input(false);
  }
  for (auto& n : g.nodes()) {
    for (auto& [k, a] : n->attrs()) {
      std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (auto& sg : subs) {
        if (!sg) continue;
        if (n->op_type() == "If" && sg->inputs().size() + 1 == static_cast<std::size_t>(n->num_inputs())) {
          for (std::size_t i = 0; i < sg->inputs().size(); ++i) {  // captured values' bounds (ops::InferIf)
            if (const ir::Value* in = n->input(static_cast<int>(i) + 1)) ops::PassUpperBound(*in, *sg->inputs()[i]);
          }
        }
        if (bound && n->op_type() == "If" && sg->inputs().size() + 1 == static_cast<std::size_t>(n->num_inputs())) {
          for (std::size_t i = 0; i < sg->inputs().size(); ++i) {
            const ir::Value* in = n->input(static_cast<int>(i) + 1);
            if (!in || in->is_constant()) continue;
            ir::Value* gi = sg->inputs()[i];  // as lower-subgraphs passed them
            gi->set_bound_value(in->bound_value());
            gi->set_symbolic_elems(in->symbolic_elems_known(), in->symbolic_elems());
            gi->set_value_dims(in->value_dims());
          }
        }
        Status st = ReinferGraph(*sg, path, bound);
        if (!st.ok()) {
          // A branch its If's condition rules out at the probe (the
          // condition follows from symbolic dims) may be valid only at other
          // extents, as the compiler kept it (lower-subgraphs): it is
          // inferred, and so checked, by each plan that takes it
          // (SpecializeGraph); its op versions are checked here.
          const int b = k == "then_branch" ? 0 : k == "else_branch" ? 1 : -1;
          if (bound && a.g == sg && b >= 0 && b == ops::IfBranchNotTaken(*n)) {
            KILN_RETURN_IF_ERROR(CheckOpVersions(*sg, path).WithContext(StrCat(n->Describe(), " attribute '", k, "'")));
            continue;
          }
          return st.WithContext(StrCat(n->Describe(), " attribute '", k, "'"));
        }
      }
    }
    KILN_RETURN_IF_ERROR(CheckOpVersion(*n, path));
    std::vector<std::pair<DType, Shape>> declared;
    std::vector<std::uint64_t> declared_masks, declared_symbolic;
    for (ir::Value* o : n->outputs()) declared_masks.push_back(o->dynamic_mask());
    for (ir::Value* o : n->outputs()) declared_symbolic.push_back(o->symbolic_mask());
    for (ir::Value* o : n->outputs()) declared.emplace_back(o->dtype(), o->shape());
    Status st = ops::InferNode(*n);
    if (!st.ok()) return st.WithContext(StrCat("model '", path, "'"));
    if (auto ub = cpu::EvalUpperBound(*n, cpu::kBoundValueLimit); !ub.ok()) {
      return ub.status().WithContext(StrCat("model '", path, "'"));
    }
    if (bound) {
      auto r = cpu::EvalBound(*n, cpu::kBoundValueLimit);
      if (!r.ok()) return r.status().WithContext(StrCat("model '", path, "'"));
    }
    for (int j = 0; j < n->num_outputs(); ++j) {
      ir::Value* o = n->output(j);
      if (o->dtype() != declared[j].first || o->shape() != declared[j].second ||
          o->dynamic_mask() != declared_masks[j]) {
        return Error(StatusCode::kCorrupt, "model '", path, "': ", n->Describe(), " output '", o->name(),
                     "' is recorded as ", DTypeName(declared[j].first),
                     ShapeToString(declared[j].second, declared_masks[j]), " but infers to ", DTypeName(o->dtype()),
                     ShapeToString(o->shape(), o->dynamic_mask()),
                     IsStatic(o->shape()) ? ""
                                          : " (its shape depends on values the host cannot read here, such as a "
                                            "weight in the memory of this device: load the model on cpu, or "
                                            "compile it with embedded weights)");
      }
      if (o->symbolic_mask() != declared_symbolic[j]) {
        return Error(StatusCode::kCorrupt, "model '", path, "': ", n->Describe(), " output '", o->name(),
                     "' is recorded with symbolic dims mask ", declared_symbolic[j], " but infers to ",
                     o->symbolic_mask());
      }
    }
  }
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* in = g.inputs()[i];
    if (in->shape_input() != recorded_shape_inputs[i]) {
      return Error(StatusCode::kCorrupt, "model '", path, "': input '", in->name(), "' is recorded as ",
                   recorded_shape_inputs[i] ? "a shape input" : "not a shape input", " but the model's inference ",
                   in->shape_input() ? "reads its values for shapes" : "does not read its values for shapes");
    }
  }
  return Status::Ok();
}

// A plan: the recorded task list (executor) for one signature of input
// shapes. A file compiled for static shapes has exactly one; symbolic input
// dims add one per new signature (each with its own graph specialized for
// those shapes, memory plan, kernels and recording: a CUDA graph per plan on
// a GPU; custom ops' Execute runs once per plan, when it is made). Runs pick
// their plan by the shapes of the inputs they are given.
struct Plan {
  std::vector<Shape> input_shapes;
  // The values of the model's shape inputs (ir::Value::shape_input) this
  // plan was made for, by input index (empty for other inputs).
  std::vector<std::vector<std::uint8_t>> input_values;
  std::vector<Shape> output_shapes;
  // Null: the model's own graph (the plan made at load). Shared: a kernel
  // the static part's cache holds may point into it (StaticKernelCache).
  std::shared_ptr<ir::Graph> graph;
  std::uint64_t arena_size = 0;
  bool shared_arena = false;  // runs in the model's shared arena
  std::uint64_t bound_generation = 0;  // ModelState::bound_generation when made
  // Declared after the graph: destroyed before it.
  std::unique_ptr<runtime::Executor> executor;
};

// What work queued on a stream refers to: shared with that work, so a Model
// destroyed while an ExecuteAsync is still queued lives on until the stream
// has run (or skipped) it. Members are destroyed plans (executors) first.
// Queued work also holds its own plan, so evicting a plan never disturbs a
// run in flight.
struct ModelState {
  format::CompiledModel model;
  std::shared_ptr<const void> keepalive;  // the file mapping (null: compiled in process)
  std::list<std::shared_ptr<Plan>> plans;  // most recently used first
  std::shared_ptr<Plan> last;  // the plan of the last run (output_shape reports its extents)
  runtime::ExecutorOptions exec_options;  // for plans made after load
  std::size_t max_plans = 8;
  std::uint64_t max_plan_bytes = 0;  // LoadOptions::max_plan_bytes (0: no bound)
  bool symbolic = false;  // some input dim is symbolic: plans are made per signature
  // Gears: plans made at load for the file's gear signatures, never evicted.
  // gears_only: no other signature is admitted.
  std::vector<std::shared_ptr<Plan>> gear_plans;
  bool gears_only = false;
  // A bounded model (every symbolic input dim has a range) was compiled at
  // the largest extents: its file's arena size is what the largest
  // signature needs, and all its plans share one arena of that size
  // (allocated with the first plan; a plan needing more gets its own).
  std::uint64_t shared_arena_size = 0;
  std::shared_ptr<void> shared_arena;
  // Runs of one model share memory (a plan's arena between runs of its
  // signature, the shared arena between plans): the last ExecuteAsync is
  // fenced by `last_async`, recorded on `last_async_stream` (compared, never
  // used: a destroyed stream has finished its work). A run on another
  // stream waits for it on the device; a synchronous Execute waits on the
  // host.
  Event last_async;
  const void* last_async_stream = nullptr;
  PlanStats stats;
  // Provisional bounds (ir::Value::bound_provisional) raised by runs that
  // exceeded them, by value name: every plan is made with them. Each raise
  // starts a new generation (plans of older ones are dropped).
  std::map<std::string, HostTensorPtr> raised_bounds;
  std::uint64_t bound_generation = 0;
  // Plans first: their executors may hold kernels that the static part's
  // cache (exec_options.static_kernels) keeps the graphs of.
  ~ModelState() {
    last.reset();
    plans.clear();
    gear_plans.clear();
  }
};

// What a queued run keeps alive: the model's state and the run's plan
// (destroyed first).
struct RunKeepalive {
  std::shared_ptr<ModelState> state;
  std::shared_ptr<Plan> plan;
};

class ModelImpl final : public Model {
 public:
  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  std::uint64_t arena_bytes() const override {
    return state_->last ? state_->last->arena_size : state_->plans.empty() ? 0 : state_->plans.front()->arena_size;
  }
  std::uint64_t weight_bytes() const override { return state_->model.plan.const_size; }
  void set_threads(int threads) override { threads_ = threads < 1 ? 1 : threads; }
  const ExecutionStats& last_stats() const override { return stats_; }
  std::vector<TaskProfile> profile() const override {
    const Plan* p = state_->last ? state_->last.get() : state_->plans.empty() ? nullptr : state_->plans.front().get();
    return p ? p->executor->Profile() : std::vector<TaskProfile>{};
  }
  Shape output_shape(std::size_t i) const override {
    try {
      const Plan* p = state_->last ? state_->last.get() : state_->plans.empty() ? nullptr : state_->plans.front().get();
      if (!p) return i < outputs_.size() ? outputs_[i].shape : Shape{};
      const auto& outs = (p->graph ? *p->graph : *state_->model.graph).outputs();
      return i < outs.size() ? p->executor->ValueShape(outs[i]) : Shape{};
    } catch (...) {
      return Shape{};
    }
  }
  Result<std::vector<Shape>> OutputShapes(const std::vector<Shape>& input_shapes) override {
    return Guarded("planning", name_, [&]() -> Result<std::vector<Shape>> {
      std::vector<TensorRef> refs(input_shapes.size());
      for (std::size_t i = 0; i < refs.size(); ++i) {
        refs[i].shape = input_shapes[i];
        refs[i].dtype = i < inputs_.size() ? inputs_[i].dtype : DType::kUndefined;
        refs[i].data = this;  // only shapes are checked
      }
      for (std::size_t i = 0; i < inputs_.size(); ++i) {
        if (inputs_[i].shape_input) {
          return Error(StatusCode::kInvalidArgument, "the output shapes of '", name_, "' depend on the values of input ",
                       i, " '", inputs_[i].name, "', not only on input shapes: use OutputShapesFor with the "
                       "inputs");
        }
      }
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, Select(refs, false));
      return plan->output_shapes;
    });
  }
  Result<std::vector<Shape>> OutputShapesFor(const std::vector<TensorRef>& ins) override {
    return Guarded("planning", name_, [&]() -> Result<std::vector<Shape>> {
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, Select(ins, false));
      return plan->output_shapes;
    });
  }
  PlanStats plan_stats() const override {
    PlanStats s = state_->stats;
    s.cached = state_->plans.size() + state_->gear_plans.size();
    s.gears = state_->gear_plans.size();
    s.arena_bytes = CachedArenaBytes(*state_);
    if (const auto& pc = state_->exec_options.prepack_cache) {
      s.packed_weights_made = pc->made();
      s.packed_weights_shared = pc->shared();
    }
    if (const auto& sk = state_->exec_options.static_kernels) {
      s.static_kernels_made = sk->made();
      s.static_kernels_shared = sk->shared();
    }
    return s;
  }
  // The arena bytes the held plans use: each plan's own, the shared arena
  // once.
  static std::uint64_t CachedArenaBytes(const ModelState& st) {
    std::uint64_t bytes = 0;
    bool shared = false;
    auto add = [&](const Plan& p) {
      if (p.shared_arena) shared = true;
      else bytes += p.arena_size;
    };
    for (const auto& p : st.plans) add(*p);
    for (const auto& p : st.gear_plans) add(*p);
    return bytes + (shared ? st.shared_arena_size : 0);
  }
  const void* ConstantData(const std::string& name) const override {
    const ir::Value* v = state_->model.graph->FindValue(name);
    return v && v->is_constant() ? v->constant()->data() : nullptr;
  }

  Status Execute(const std::vector<TensorRef>& ins, const std::vector<TensorRef>& outs) override {
    return Guarded("running", name_, [&]() -> Status {
      // A run that finds a provisional bound too small raises it and runs
      // again from the start with a plan for the raised bound (each raise
      // at least doubles a single value or reaches a run's values).
      std::string raised;
      for (int attempt = 0;; ++attempt) {
        auto selected = Select(ins, true);
        if (!selected.ok() && !raised.empty()) {
          return selected.status().WithContext(StrCat("after this run computed ", raised));
        }
        KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, std::move(selected));
        Status bound = Bind(*plan, ins, outs);
        if (!bound.ok() && !raised.empty()) {
          std::string shapes;
          for (std::size_t j = 0; j < plan->output_shapes.size(); ++j) {
            shapes += StrCat(j ? ", " : "", ShapeToString(plan->output_shapes[j]));
          }
          return Error(bound.code(), bound.message(), " (this run computed ", raised,
                       ", so the outputs' bounds for these inputs are now ", shapes,
                       ": allocate the outputs with the shapes OutputShapesFor gives now and run again)");
        }
        KILN_RETURN_IF_ERROR(bound);
        if (state_->last_async_stream) {  // the last queued run may still use this memory
          KILN_RETURN_IF_ERROR(state_->last_async.Synchronize());
          state_->last_async_stream = nullptr;
        }
        Status st = plan->executor->Run(io_, &stats_, threads_, staged_ ? &copies_ : nullptr);
        if (st.ok()) return st;
        std::string what = ApplyBoundRaises(*plan);
        if (what.empty() || attempt >= kMaxBoundRaises) return st;
        raised += (raised.empty() ? "" : "; ") + what;
      }
    });
  }

  Result<std::vector<TensorRef>> Run(const std::vector<TensorRef>& ins) override {
    return Guarded("running", name_, [&]() -> Result<std::vector<TensorRef>> {
      std::vector<TensorRef> outs;
      for (int attempt = 0;; ++attempt) {
        KILN_ASSIGN_OR_RETURN(std::vector<Shape> shapes, OutputShapesFor(ins));
        outs.clear();
        run_outputs_.resize(shapes.size());
        for (std::size_t j = 0; j < shapes.size(); ++j) {
          KILN_ASSIGN_OR_RETURN(std::size_t bytes, CheckedTensorBytes(outputs_[j].dtype, shapes[j], "output"));
          OwnedBuffer& b = run_outputs_[j];
          if (b.bytes < bytes || !b.data) {  // 64-byte aligned, as the arena
            const std::size_t padded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
            b.data.reset(std::aligned_alloc(64, padded));
            if (!b.data) return Error(StatusCode::kOutOfRange, "output ", j, ": out of memory allocating ", bytes, " bytes");
            b.bytes = padded;
          }
          outs.push_back({b.data.get(), outputs_[j].dtype, shapes[j]});
        }
        Status st = Execute(ins, outs);
        if (st.ok()) break;
        // Bounds a run raised (provisional): allocated again, run again.
        auto again = OutputShapesFor(ins);
        if (attempt >= 8 || !again.ok() || again.value() == shapes) return st;
      }
      for (std::size_t j = 0; j < outs.size(); ++j) outs[j].shape = output_shape(j);  // the dense prefix
      return outs;
    });
  }

  // Raises the provisional bounds the plan's last run found too small
  // (Executor::TakeBoundRaises): the model's plans are dropped and later
  // ones made with the raised bounds. Returns what was raised, for
  // messages ("'n' above its bound: now [8]"), or "" if nothing was.
  std::string ApplyBoundRaises(Plan& plan) {
    std::map<std::string, HostTensorPtr> r = plan.executor->TakeBoundRaises();
    if (r.empty()) return "";
    ModelState& st = *state_;
    std::string what;
    for (auto& [name, t] : r) {
      HostTensorPtr& cur = st.raised_bounds[name];
      if (cur && cur->dtype() == t->dtype() && cur->shape() == t->shape()) {
        const std::vector<std::int64_t> a = cur->ToInt64Vector(), b = t->ToInt64Vector();
        auto m = std::make_shared<HostTensor>(t->dtype(), t->shape());
        for (std::size_t e = 0; e < a.size(); ++e) {
          const std::int64_t x = std::max(a[e], b[e]);
          if (t->dtype() == DType::kInt32) m->mutable_data_as<std::int32_t>()[e] = static_cast<std::int32_t>(x);
          else m->mutable_data_as<std::int64_t>()[e] = x;
        }
        cur = std::move(m);
      } else {
        cur = t;
      }
      what += StrCat(what.empty() ? "" : ", ", "'", name, "' above its provisional bound (now ",
                     runtime::ValuesText(*cur), ")");
    }
    ++st.bound_generation;
    ++st.stats.bound_raises;
    st.plans.clear();  // (a queued run holds its own plan)
    st.last.reset();
    return what;
  }
  static constexpr int kMaxBoundRaises = 64;
  // The raised bound of value `name`, in `g` and the graphs nested in it (an
  // If branch's own values; ONNX names are unique across a model's graphs).
  static void SetRaisedBound(ir::Graph& g, const std::string& name, const HostTensorPtr& bound) {
    ir::ForEachGraph(g, [&](ir::Graph& x) {
      if (ir::Value* v = x.FindValue(name)) v->set_raised_bound(bound);
    });
  }

  Status ExecuteAsync(Stream& stream, const std::vector<TensorRef>& ins, const std::vector<TensorRef>& outs) override {
    return Guarded("queueing a run of", name_, [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, Select(ins, true));
      KILN_RETURN_IF_ERROR(Bind(*plan, ins, outs));
      auto keep = std::make_shared<RunKeepalive>(RunKeepalive{state_, plan});
      device::Stream& ds = DeviceStreamOf(stream);
      if (state_->last_async_stream && state_->last_async_stream != &ds) {
        KILN_RETURN_IF_ERROR(ds.WaitEvent(state_->last_async));
      }
      KILN_RETURN_IF_ERROR(plan->executor->Enqueue(ds, io_, &stats_, std::move(keep), threads_,
                                                   staged_ ? &copies_ : nullptr));
      KILN_RETURN_IF_ERROR(ds.RecordEvent(state_->last_async));
      state_->last_async_stream = &ds;
      return Status::Ok();
    });
  }

  // The plan for these input shapes (checked against the model's inputs):
  // the last run's, one made before (moved to the front of the LRU list), or
  // a new one. `run`: the plan becomes the last run's.
  Result<std::shared_ptr<Plan>> Select(const std::vector<TensorRef>& ins, bool run) {
    KILN_RETURN_IF_ERROR(CheckInputs(ins));
    // A queued run (ExecuteAsync) that found a provisional bound too small
    // failed on its stream: later runs get plans for the raised bound.
    if (state_->last && state_->last->executor) ApplyBoundRaises(*state_->last);
    // The values of shape inputs, read on the host: part of the signature.
    std::vector<std::vector<std::uint8_t>>& values = select_values_;
    values.assign(shape_inputs_ ? ins.size() : 0, {});
    for (std::size_t i = 0; shape_inputs_ && i < ins.size(); ++i) {
      if (!inputs_[i].shape_input) continue;
      const TensorRef& t = ins[i];
      if (t.on_device && !state_->exec_options.device->caps().host_addressable) {
        return Error(StatusCode::kInvalidArgument, "input ", i, " '", inputs_[i].name,
                     "' decides shapes (its values are read before the run): pass it in host memory, not in "
                     "memory of device '", state_->exec_options.device->spec(), "'");
      }
      // An input with symbolic dims: its size is this run's (the compiler
      // checked the probe's).
      const std::int64_t n = NumElements(t.shape);
      const bool integer = t.dtype == DType::kInt64 || t.dtype == DType::kInt32;
      if (n < 0 || (integer ? static_cast<std::uint64_t>(n) * DTypeSize(t.dtype) > ir::kShapeInputLimitBytes
                            : n > ir::kShapeInputFloatElements)) {
        return Error(StatusCode::kInvalidArgument, "input ", i, " '", inputs_[i].name, "' decides shapes (its values ",
                     "are read before the run), which limits it to ",
                     integer ? StrCat(ir::kShapeInputLimitBytes, " bytes") : StrCat(ir::kShapeInputFloatElements, " elements"),
                     "; it has shape ", ShapeToString(t.shape));
      }
      const auto* p = static_cast<const std::uint8_t*>(t.data);
      values[i].assign(p, p + static_cast<std::size_t>(n) * DTypeSize(t.dtype));
    }
    auto matches = [&ins, &values, this](const Plan& p) {
      if (p.input_shapes.size() != ins.size() || p.bound_generation != state_->bound_generation) return false;
      for (std::size_t i = 0; i < ins.size(); ++i) {
        if (ins[i].shape != p.input_shapes[i]) return false;
      }
      return p.input_values == values;
    };
    ModelState& st = *state_;
    std::shared_ptr<Plan> found;
    if (st.last && matches(*st.last)) {
      found = st.last;
      if (st.plans.empty() || st.plans.front() != found) {  // keep it most recently used
        auto it = std::find(st.plans.begin(), st.plans.end(), found);
        if (it != st.plans.end()) st.plans.splice(st.plans.begin(), st.plans, it);
      }
    } else {
      for (auto it = st.plans.begin(); it != st.plans.end(); ++it) {
        if (!matches(**it)) continue;
        found = *it;
        st.plans.splice(st.plans.begin(), st.plans, it);
        break;
      }
    }
    if (!found) {
      for (const auto& p : st.gear_plans) {
        if (matches(*p)) {
          found = p;
          break;
        }
      }
    }
    if (found) {
      ++st.stats.hits;
    } else {
      if (!st.symbolic) return Error(StatusCode::kInvalidArgument, "no plan of the model matches the input shapes");
      if (st.gears_only && st.bound_generation == 0) {
        std::string got, gears;
        for (std::size_t i = 0; i < ins.size(); ++i) got += StrCat(i ? ", " : "", ShapeToString(ins[i].shape));
        for (const auto& p : st.gear_plans) {
          std::string one;
          for (std::size_t i = 0; i < p->input_shapes.size(); ++i) {
            one += StrCat(i ? ", " : "", ShapeToString(p->input_shapes[i]));
          }
          gears += StrCat(gears.empty() ? "" : " | ", one);
        }
        return Error(StatusCode::kInvalidArgument, "input shapes ", got,
                     " are not one of the gears the model was compiled with (", gears,
                     "); recompile with a range in --input-shape to admit others");
      }
      std::vector<Shape> shapes;
      for (const TensorRef& t : ins) shapes.push_back(t.shape);
      KILN_ASSIGN_OR_RETURN(found, MakePlan(std::move(shapes), values));
      st.plans.push_front(found);
      // Evict least recently used plans beyond the bounds, in count and in
      // arena bytes (never the new one; a queued run holds its plan
      // itself; gears are never evicted).
      // `last` keeps the last run's plan (evicted or not) for output_shape()
      // and profile() until the next run.
      while (st.plans.size() > st.max_plans ||
             (st.max_plan_bytes > 0 && st.plans.size() > 1 && CachedArenaBytes(st) > st.max_plan_bytes)) {
        st.plans.pop_back();
        ++st.stats.evicted;
      }
    }
    if (run) st.last = found;
    return found;
  }

  // Specializes a copy of the model's graph for `shapes`: every node's
  // shapes inferred again from the inputs', memory planned, kernels created
  // and the task list recorded.
  // `gear`: a plan made at load for one of the model's gears (its kernels
  // exactly for its shapes, made once); else one made when a run met a new
  // signature, whose kernels avoid per-shape code generation
  // (runtime::ExecutorOptions::varying_shapes).
  Result<std::shared_ptr<Plan>> MakePlan(std::vector<Shape> shapes,
                                         const std::vector<std::vector<std::uint8_t>>& values = {},
                                         bool gear = false) {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = std::make_shared<Plan>();
    plan->graph = ir::CloneGraph(*state_->model.graph);
    ir::Graph& g = *plan->graph;
    plan->bound_generation = state_->bound_generation;
    for (const auto& [name, bound] : state_->raised_bounds) SetRaisedBound(g, name, bound);
    for (std::size_t i = 0; i < shapes.size(); ++i) g.inputs()[i]->set_shape(shapes[i]);
    std::string sig;
    for (std::size_t i = 0; i < shapes.size(); ++i) sig += StrCat(i ? ", " : "", ShapeToString(shapes[i]));
    for (std::size_t i = 0; i < values.size() && i < shapes.size(); ++i) {
      ir::Value* in = g.inputs()[i];
      if (!in->shape_input()) continue;
      auto t = std::make_shared<HostTensor>(in->dtype(), shapes[i]);
      if (t->nbytes() != values[i].size()) {
        return Error(StatusCode::kInternal, "input '", in->name(), "': ", values[i].size(), " bytes of values for ",
                     t->nbytes());
      }
      if (!values[i].empty()) std::memcpy(t->mutable_data(), values[i].data(), values[i].size());
      sig += StrCat(" with '", in->name(), "' = ", runtime::ValuesText(*t));
      in->set_bound_value(std::move(t));
    }
    plan->input_values = values;
    const std::string what = StrCat("planning '", name_, "' for input shapes ", sig);
    KILN_RETURN_IF_ERROR(runtime::SpecializeGraph(g).WithContext(what));
    const auto t1 = std::chrono::steady_clock::now();
    auto mp = plan::PlanMemory(g);
    if (!mp.ok()) return mp.status().WithContext(what);
    const auto t2 = std::chrono::steady_clock::now();
    plan->arena_size = mp.value().arena_size;
    runtime::ExecutorOptions eo = state_->exec_options;
    eo.threads = threads_;
    eo.load_stream = nullptr;
    eo.varying_shapes = !gear;
    eo.graph_keepalive = plan->graph;
    if (state_->shared_arena_size > 0 && plan->arena_size <= state_->shared_arena_size) {
      if (!state_->shared_arena) {
        // If the largest signature's arena cannot be had, this plan gets
        // its own (sized for its shapes); a later plan tries again.
        device::Device* dev = eo.device;
        auto p = dev->Allocate(state_->shared_arena_size);
        if (p.ok()) state_->shared_arena = std::shared_ptr<void>(p.value(), [dev](void* q) { dev->Free(q); });
      }
      if (state_->shared_arena) {
        eo.shared_arena = state_->shared_arena;
        eo.shared_arena_size = state_->shared_arena_size;
        plan->shared_arena = true;
      }
    }
    auto ex = runtime::Executor::Create(g, mp.value(), eo);
    if (!ex.ok()) return ex.status().WithContext(what);
    const auto t3 = std::chrono::steady_clock::now();
    plan->executor = std::move(ex).value();
    plan->input_shapes = std::move(shapes);
    for (const ir::Value* v : g.outputs()) plan->output_shapes.push_back(v->shape());
    ++state_->stats.created;
    using Us = std::chrono::duration<double, std::micro>;
    state_->stats.last_plan_us = Us(std::chrono::steady_clock::now() - t0).count();
    state_->stats.last_specialize_us = Us(t1 - t0).count();
    state_->stats.last_memory_plan_us = Us(t2 - t1).count();
    state_->stats.last_executor_us = Us(t3 - t2).count();
    return plan;
  }


  // The caller's inputs against the model's: count, dtypes, ranks, static
  // dims exactly; symbolic dims within their symbol's range and one extent
  // per symbol across inputs.
  Status CheckInputs(const std::vector<TensorRef>& got) const {
    if (!state_->symbolic) return Check("input", inputs_, got);
    if (inputs_.size() != got.size()) {
      return Error(StatusCode::kInvalidArgument, "expected ", inputs_.size(), " inputs, got ", got.size());
    }
    struct Seen {
      std::size_t input;
      std::size_t dim;
      std::int64_t extent;
    };
    std::map<std::string, Seen> seen;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      const TensorInfo& w = inputs_[i];
      const TensorRef& g = got[i];
      const std::string who = StrCat("input ", i, " '", w.name, "'");
      if (g.dtype != w.dtype) {
        return Error(StatusCode::kInvalidArgument, who, ": expected dtype ", DTypeName(w.dtype), ", got ",
                     DTypeName(g.dtype));
      }
      if (g.shape.size() != w.shape.size()) {
        return Error(StatusCode::kInvalidArgument, who, ": expected shape ", ShapeToString(w.shape), " (rank ",
                     w.shape.size(), "), got ", ShapeToString(g.shape));
      }
      for (std::size_t d = 0; d < w.shape.size(); ++d) {
        const DimInfo& di = w.dims[d];
        const std::int64_t e = g.shape[d];
        if (w.shape[d] >= 0) {
          if (e != w.shape[d]) {
            return Error(StatusCode::kInvalidArgument, who, ": expected shape ", ShapeToString(w.shape), ", got ",
                         ShapeToString(g.shape), " (dim ", d, " is ", e, ", expected ", w.shape[d], ")");
          }
          continue;
        }
        if (e < di.min || (di.max >= 0 && e > di.max)) {
          return Error(StatusCode::kInvalidArgument, who, " dim ", d, " (symbol '", di.symbol, "') is ", e,
                       ", outside its range ", ir::RangeText(ir::SymbolRange{di.min, di.max}));
        }
        auto [it, added] = seen.emplace(di.symbol, Seen{i, d, e});
        if (!added && it->second.extent != e) {
          return Error(StatusCode::kInvalidArgument, who, " dim ", d, " (symbol '", di.symbol, "') is ", e,
                       ", but input ", it->second.input, " '", inputs_[it->second.input].name, "' dim ",
                       it->second.dim, " gives '", di.symbol, "' = ", it->second.extent);
        }
      }
      auto bytes = CheckedTensorBytes(g.dtype, g.shape, who);
      if (!bytes.ok()) return bytes.status();
      if (!g.data && bytes.value()) return Error(StatusCode::kInvalidArgument, who, ": null buffer");
    }
    return Status::Ok();
  }

  // Checks the caller's buffers and lists their addresses in io_ (inputs,
  // then outputs) for the plan's executor.
  Status Bind(Plan& plan, const std::vector<TensorRef>& ins, const std::vector<TensorRef>& outs) {
    if (!state_->symbolic) {
      KILN_RETURN_IF_ERROR(Check("output", outputs_, outs));
    } else {
      std::vector<TensorInfo> want = outputs_;
      for (std::size_t j = 0; j < want.size() && j < plan.output_shapes.size(); ++j) {
        want[j].shape = plan.output_shapes[j];
        want[j].bytes = static_cast<std::size_t>(NumElements(want[j].shape)) * DTypeSize(want[j].dtype);
      }
      KILN_RETURN_IF_ERROR(Check("output", want, outs));
    }
    io_.clear();
    copies_.in.clear();
    copies_.out.clear();
    // Host buffers on a device that cannot use host memory go through the
    // I/O stand-ins (copied in before and out after the run); device
    // buffers are bound in place.
    const bool host_ok = plan.executor->device().caps().host_addressable;
    for (std::size_t i = 0; i < ins.size() + outs.size(); ++i) {
      const bool is_in = i < ins.size();
      const TensorRef& t = is_in ? ins[i] : outs[i - ins.size()];
      if (host_ok || t.on_device) {
        io_.push_back(t.data);
        continue;
      }
      void* standin = plan.executor->standin(i);
      io_.push_back(standin);
      // Bytes of the bound shape (checked above: it is the plan's).
      const std::size_t bytes = static_cast<std::size_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
      if (is_in) copies_.in.push_back({standin, t.data, bytes});
      else copies_.out.push_back({t.data, standin, bytes});
    }
    staged_ = !copies_.in.empty() || !copies_.out.empty();
    return Status::Ok();
  }

  static Result<std::unique_ptr<Model>> Create(format::CompiledModel model, std::shared_ptr<const void> keepalive,
                                               const LoadOptions& opts, weights::WeightManager& manager,
                                               const std::string& default_weight_dir, Stream* load_stream,
                                               const std::string& path) {
    std::unique_ptr<ModelImpl> m(new ModelImpl());
    m->state_ = std::make_shared<ModelState>();
    m->name_ = path;
    m->state_->model = std::move(model);
    m->state_->keepalive = std::move(keepalive);
    m->threads_ = opts.threads < 1 ? 1 : opts.threads;
    ir::Graph& g = *m->state_->model.graph;
    const bool from_file = m->state_->keepalive != nullptr;
    if (!m->state_->model.custom_op_types.empty()) {
      KILN_RETURN_IF_ERROR(LoadCustomOpPackages().WithContext(StrCat("loading '", path, "'")));
      std::string missing;
      for (const std::string& t : m->state_->model.custom_op_types) {
        if (!FindCustomOp(t)) missing += (missing.empty() ? "" : ", ") + t;
      }
      if (!missing.empty()) {
        std::string where;
        for (const std::string& d : custom::PackageSearchDirs()) where += (where.empty() ? "" : ", ") + d;
        return Error(StatusCode::kNotFound, "model '", path, "' uses custom op type(s) ", missing,
                     " that are not registered; Kiln looked for packages in ",
                     where.empty() ? std::string("no directory (KILN_CUSTOM_OP_PATH is not set)") : where);
      }
    }
    // External weights first: nodes whose output shape depends on a constant
    // input's values (Reshape's shape, Slice's starts, ...) only infer once
    // their FileConstant inputs have become constants.
    KILN_RETURN_IF_ERROR(ResolveExternalWeights(g, path, opts, manager, default_weight_dir));
    // Re-check every node of a file against its definition: a file that
    // passed its checksums and plan verification may still come from another
    // Kiln version, or an attacker. (A graph compiled in this process is
    // trusted.) Graph roles were checked by plan::VerifyPlan when it was read.
    if (from_file) KILN_RETURN_IF_ERROR(ReinferGraph(g, path));
    // Values whose data-dependent extents follow from a provisional bound
    // (ir::Value::bound_provisional): no bound is known before the run, so
    // the model plans per run as a symbolic one does (its plans are made
    // with the bounds its runs raised).
    const std::set<const ir::Value*> provisional = runtime::ProvisionallyBounded(g);
    if (!provisional.empty()) m->state_->symbolic = true;
    auto info = [&g, &m, &provisional](const ir::Value* v) {
      TensorInfo t{v->name(), v->dtype(), v->shape(),
                   static_cast<std::size_t>(NumElements(v->shape())) * DTypeSize(v->dtype()),
                   v->dynamic_mask(), {}, false, {}};
      const auto& names = v->dim_params();
      for (std::size_t d = 0; d < v->shape().size(); ++d) {
        const std::int64_t e = v->shape()[d];
        DimInfo di{e, e, e, d < names.size() ? names[d] : std::string()};
        auto it = di.symbol.empty() ? g.symbols().end() : g.symbols().find(di.symbol);
        if (it != g.symbols().end()) {
          di.min = it->second.min;
          di.max = it->second.max;
        }
        const bool data = d < 64 && (v->dynamic_mask() >> d & 1);
        if (data && provisional.count(v)) {  // data-dependent, with no bound known before the run
          di = {-1, 0, -1, di.symbol};
          t.shape[d] = -1;
          t.bytes = 0;
        } else if (data && !(v->symbolic_mask() >> d & 1)) {
          di = {-1, 0, e, di.symbol};  // data-dependent: 0..bound
        } else if ((it != g.symbols().end() && it->second.min != it->second.max) ||
                   (d < 64 && (v->symbolic_mask() >> d & 1))) {
          // Symbolic: given by each run's inputs (an input's range is its
          // symbol's; a dim that follows from symbols is 0.. unbounded
          // unless it is named). Data-dependent and symbolic (a NonZero of
          // a batch of inputs): its bound follows the symbols, so no bound
          // is known before the run's input shapes
          // (Model::OutputShapes gives it).
          if (it == g.symbols().end() || data) di.min = 0, di.max = -1;
          di.value = -1;
          t.shape[d] = -1;
          t.bytes = 0;
          m->state_->symbolic = true;
        }
        t.dims.push_back(std::move(di));
      }
      for (const ir::ShapeAlternative& a : v->rank_alternatives()) t.rank_alternatives.push_back(a.shape);
      return t;
    };
    for (ir::Value* v : g.inputs()) {
      m->inputs_.push_back(info(v));
      // Its values decide shapes: plans are per signature of values too.
      m->inputs_.back().shape_input = v->shape_input();
      if (v->shape_input()) m->shape_inputs_ = m->state_->symbolic = true;
    }
    for (ir::Value* v : g.outputs()) m->outputs_.push_back(info(v));
    runtime::ExecutorOptions eo;
    eo.device = &manager.device();
    eo.threads = m->threads_;
    eo.target = m->state_->model.target;
    eo.check_bounds = opts.check_bounds;
    eo.profile = opts.profile;
    eo.load_stream = load_stream;
    // Plans of one model share the weights their kernels repack (a
    // convolution's at every input size it runs at).
    eo.prepack_cache = std::make_shared<device::PrepackCache>();
    m->state_->exec_options = eo;
    m->state_->max_plans = std::max<std::size_t>(opts.max_plans, 1);
    m->state_->max_plan_bytes = opts.max_plan_bytes;
    // A model with symbolic dims makes its plans as runs come (the file's
    // plan is only for the extents the compiler probed with), and its
    // gears' plans now.
    if (m->state_->symbolic) {
      // Its static part's kernels are made once and shared by its plans.
      if (!opts.check_bounds) {
        m->state_->exec_options.static_kernels =
            std::make_shared<runtime::StaticKernelCache>(runtime::StaticNodes(g));
      }
      bool bounded = true;
      for (const TensorInfo& t : m->inputs_) {
        for (const DimInfo& d : t.dims) bounded = bounded && !(d.value < 0 && d.max < 0);
      }
      // (Shape inputs' values bound nothing: the file's plan is for probe
      // values, not the largest.)
      if (bounded && !m->shape_inputs_ && !opts.check_bounds) m->state_->shared_arena_size = m->state_->model.plan.arena_size;
      m->state_->gears_only = g.gears_only();
      for (std::size_t k = 0; k < g.gears().size(); ++k) {
        auto plan = m->MakePlan(g.gears()[k], {}, /*gear=*/true);
        if (!plan.ok()) return plan.status().WithContext(StrCat("loading '", path, "' (gear ", k, ")"));
        m->state_->gear_plans.push_back(std::move(plan).value());
      }
      return std::unique_ptr<Model>(std::move(m));
    }
    auto ex = runtime::Executor::Create(g, m->state_->model.plan, eo);
    if (!ex.ok()) return ex.status().WithContext(StrCat("loading '", path, "'"));
    auto plan = std::make_shared<Plan>();
    for (const ir::Value* v : g.inputs()) plan->input_shapes.push_back(v->shape());
    for (const ir::Value* v : g.outputs()) plan->output_shapes.push_back(v->shape());
    plan->arena_size = m->state_->model.plan.arena_size;
    plan->executor = std::move(ex).value();
    m->state_->plans.push_back(std::move(plan));
    m->state_->stats.created = 1;  // (a static model's only plan)
    return std::unique_ptr<Model>(std::move(m));
  }

  static Result<std::unique_ptr<Model>> CreateFromFile(const std::string& path, const LoadOptions& opts,
                                                       weights::WeightManager& manager) {
    // The manager is the device's (the caller picked it for opts.device).
    format::ReadOptions ro;
    ro.verify_weights_checksum = opts.verify_weights_checksum;
    KILN_ASSIGN_OR_RETURN(format::LoadedFile file, format::ReadModelFile(path, ro));
    KILN_ASSIGN_OR_RETURN(std::string dir, WeightDirOf(path, file.model.weight_dir, opts));
    return Create(std::move(file.model), file.mapping, opts, manager, dir, nullptr, path);
  }

  // The weight directory of a model file: the one it records (relative to
  // the file's directory), else <model dir>/weight. A recorded directory
  // outside the model's own directory (a ".." component) is used only when
  // the caller trusts recorded paths; LoadOptions::weight_dir wins anyway.
  static Result<std::string> WeightDirOf(const std::string& path, const std::string& recorded,
                                         const LoadOptions& opts) {
    const std::filesystem::path model_dir = std::filesystem::absolute(path).parent_path();
    if (recorded.empty()) return (model_dir / "weight").string();
    const std::filesystem::path rel = std::filesystem::path(recorded).lexically_normal();
    const std::filesystem::path dir = (model_dir / rel).lexically_normal();
    bool outside = rel.is_absolute();
    for (const auto& part : rel) outside = outside || part == "..";
    if (outside && opts.weight_dir.empty() && !opts.trust_recorded_weight_dir) {
      return Error(StatusCode::kInvalidArgument, "model file '", path, "' records its weight directory as '",
                   recorded.substr(0, 256), "' (", dir.string().substr(0, 512),
                   "), outside the model's own directory: Kiln uses it only when told to (kiln --trust-weight-dir, "
                   "LoadOptions::trust_recorded_weight_dir), or give the directory (--weight-dir, "
                   "LoadOptions::weight_dir)");
    }
    return dir.string();
  }

  static Result<std::unique_ptr<Model>> CreateFromMemory(const void* data, std::size_t size, const LoadOptions& opts,
                                                         weights::WeightManager& manager) {
    const std::string what = StrCat("model in memory (", size, " bytes)");
    if (!data && size) return Error(StatusCode::kInvalidArgument, what, ": null data");
    // The image is copied to 64-byte-aligned memory that the model keeps
    // (its constants point into it): the caller may free its copy.
    const std::size_t padded = (size + 63) / 64 * 64;
    std::shared_ptr<void> owner(std::aligned_alloc(64, padded == 0 ? 64 : padded), std::free);
    if (!owner) return Error(StatusCode::kOutOfRange, what, ": out of memory copying it");
    if (size) std::memcpy(owner.get(), data, size);
    format::ReadOptions ro;
    ro.verify_weights_checksum = opts.verify_weights_checksum;
    KILN_ASSIGN_OR_RETURN(format::CompiledModel model,
                          format::ParseModelImage(static_cast<const std::uint8_t*>(owner.get()), size, owner, what, ro));
    // No directory of its own: external weights come from opts.weight_dir or
    // registered memory only.
    return Create(std::move(model), owner, opts, manager, std::string(), nullptr, what);
  }

  // Replaces every FileConstant by a constant in device memory.
  static Status ResolveExternalWeights(ir::Graph& g, const std::string& path, const LoadOptions& opts,
                                       weights::WeightManager& manager, const std::string& default_dir) {
    // Every graph's FileConstants, If branches' included, in one Acquire.
    std::vector<std::pair<ir::Graph*, ir::Node*>> fcs;
    std::vector<weights::WeightRef> refs;
    ir::ForEachGraph(g, [&](ir::Graph& sub) {
      for (auto& n : sub.nodes()) {
        if (n->op_type() == "FileConstant" && n->domain() == "kiln") fcs.push_back({&sub, n.get()});
      }
    });
    for (auto& fc : fcs) {
      if (fc.second->num_outputs() != 1 || !fc.second->output(0) || fc.second->num_inputs() != 0) {
        return Error(StatusCode::kCorrupt, "model file '", path, "': ", fc.second->Describe(), " has ",
                     fc.second->num_inputs(), " inputs and ", fc.second->num_outputs(),
                     " outputs; a FileConstant has none and one");
      }
      // The one decoder checks every attribute (length == dtype size x
      // shape, location a weight_<sha256> or <name>_weight_combined name)
      // before any file is touched.
      auto r = ops::DecodeFileConstant(*fc.second);
      if (!r.ok()) return Error(StatusCode::kCorrupt, "model file '", path, "': ", r.status().message());
      refs.push_back(std::move(r).value());
    }
    if (refs.empty()) return Status::Ok();
    if (opts.weight_dir.empty() && default_dir.empty()) {
      for (const weights::WeightRef& r : refs) {
        if (r.file_id.empty() && !opts.user_weight_memory.count(r.location)) {
          return Error(StatusCode::kInvalidArgument, path, ": node '", r.node, "' reads external weight file '",
                       r.location, "' and there is no weight directory (a model loaded from memory has none): set "
                       "LoadOptions::weight_dir or SetExternalWeightAddress for it");
        }
      }
    }
    weights::WeightLoadConfig cfg;
    cfg.weight_dir = opts.weight_dir.empty() ? default_dir : opts.weight_dir;
    cfg.mode = opts.weight_load_mode == WeightLoadMode::kMap            ? weights::LoadMode::kMap
               : opts.weight_load_mode == WeightLoadMode::kCopy       ? weights::LoadMode::kCopy
               : opts.weight_load_mode == WeightLoadMode::kStagedCopy ? weights::LoadMode::kStagedCopy
                                                                      : weights::LoadMode::kAuto;
    cfg.chunk_bytes = opts.weight_chunk_bytes;
    cfg.reader_threads = opts.weight_reader_threads;
    cfg.verify = opts.verify_weights;
    for (auto& [f, m] : opts.user_weight_memory) cfg.user_memory[f] = {m.data, m.size};
    for (auto& [id, f] : opts.weight_files) cfg.files[id] = {f.path, f.data, f.size};
    auto tensors = manager.Acquire(refs, cfg, default_dir);
    if (!tensors.ok()) return tensors.status().WithContext(StrCat("loading external weights of '", path, "'"));
    for (std::size_t i = 0; i < fcs.size(); ++i) {
      ir::Value* out = fcs[i].second->output(0);
      fcs[i].first->RemoveNode(fcs[i].second);
      out->set_constant(tensors.value()[i]);
    }
    return Status::Ok();
  }

  static Status Check(const char* what, const std::vector<TensorInfo>& want,
                      const std::vector<TensorRef>& got) {
    if (want.size() != got.size()) {
      return Error(StatusCode::kInvalidArgument, "expected ", want.size(), " ", what, "s, got ",
                   got.size());
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
      const TensorInfo& w = want[i];
      const TensorRef& g = got[i];
      if (g.dtype != w.dtype) {
        return Error(StatusCode::kInvalidArgument, what, " ", i, " '", w.name, "': expected dtype ",
                     DTypeName(w.dtype), ", got ", DTypeName(g.dtype));
      }
      if (g.shape != w.shape) {
        return Error(StatusCode::kInvalidArgument, what, " ", i, " '", w.name, "': expected shape ",
                     ShapeToString(w.shape), ", got ", ShapeToString(g.shape));
      }
      if (!g.data && w.bytes) {
        return Error(StatusCode::kInvalidArgument, what, " ", i, " '", w.name, "': null buffer");
      }
    }
    return Status::Ok();
  }

  std::shared_ptr<ModelState> state_;
  std::string name_;
  std::vector<TensorInfo> inputs_, outputs_;
  bool shape_inputs_ = false;  // some input is a shape input (TensorInfo::shape_input)
  std::vector<std::vector<std::uint8_t>> select_values_;  // Select's scratch: this run's shape-input values
  // Run's outputs: host memory Kiln owns, reused and grown run to run.
  struct OwnedBuffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    std::size_t bytes = 0;
  };
  std::vector<OwnedBuffer> run_outputs_;
  std::vector<void*> io_;
  runtime::IoCopies copies_;
  bool staged_ = false;
  int threads_ = 1;
  ExecutionStats stats_;
};

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const LoadOptions& opts) {
  return Guarded("loading model", path, [&]() -> Result<std::unique_ptr<Model>> {
    KILN_ASSIGN_OR_RETURN(device::Device* dev, runtime::OpenDevice(opts.device));
    weights::WeightManager manager(dev);  // weights stay alive through the model's tensors
    return ModelImpl::CreateFromFile(path, opts, manager);
  });
}

Result<std::unique_ptr<Model>> Model::LoadFromMemory(const void* data, std::size_t size, const LoadOptions& opts) {
  return Guarded("loading model", "in memory", [&]() -> Result<std::unique_ptr<Model>> {
    KILN_ASSIGN_OR_RETURN(device::Device* dev, runtime::OpenDevice(opts.device));
    weights::WeightManager manager(dev);
    return ModelImpl::CreateFromMemory(data, size, opts, manager);
  });
}

Result<std::unique_ptr<Model>> CreateModel(format::CompiledModel model, std::shared_ptr<const void> keepalive,
                                           const LoadOptions& opts, weights::WeightManager& manager,
                                           const std::string& default_weight_dir, Stream* load_stream,
                                           const std::string& what) {
  return Guarded("loading", what, [&]() -> Result<std::unique_ptr<Model>> {
    return ModelImpl::Create(std::move(model), std::move(keepalive), opts, manager, default_weight_dir, load_stream,
                             what);
  });
}

struct DeviceBuffer::Impl {
  device::Device* device = nullptr;
};

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(const std::string& device, std::size_t bytes) {
  KILN_ASSIGN_OR_RETURN(device::Device* d, runtime::OpenDevice(device));
  std::unique_ptr<DeviceBuffer> b(new DeviceBuffer());
  KILN_ASSIGN_OR_RETURN(b->data_, d->Allocate(bytes == 0 ? 1 : bytes));
  b->size_ = bytes;
  b->impl_ = new Impl{d};
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (impl_) impl_->device->Free(data_);
  delete impl_;
}

Status DeviceBuffer::CopyFromHost(const void* src, std::size_t bytes, std::size_t offset) {
  if (offset > size_ || bytes > size_ - offset) {
    return Error(StatusCode::kOutOfRange, "DeviceBuffer::CopyFromHost: bytes [", offset, ", +", bytes,
                 ") exceed the buffer's ", size_, " bytes");
  }
  KILN_ASSIGN_OR_RETURN(auto s, impl_->device->CreateSyncStream());
  KILN_RETURN_IF_ERROR(s->Copy(static_cast<std::uint8_t*>(data_) + offset, src, bytes, device::CopyKind::kHostToDevice));
  return s->Synchronize();
}

Status DeviceBuffer::CopyToHost(void* dst, std::size_t bytes, std::size_t offset) const {
  if (offset > size_ || bytes > size_ - offset) {
    return Error(StatusCode::kOutOfRange, "DeviceBuffer::CopyToHost: bytes [", offset, ", +", bytes,
                 ") exceed the buffer's ", size_, " bytes");
  }
  KILN_ASSIGN_OR_RETURN(auto s, impl_->device->CreateSyncStream());
  KILN_RETURN_IF_ERROR(s->Copy(dst, static_cast<const std::uint8_t*>(data_) + offset, bytes, device::CopyKind::kDeviceToHost));
  return s->Synchronize();
}

Session::Impl::~Impl() {
  graphs.clear();  // models (and their weights) first
  for (const std::string& d : temp_dirs) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}

Session::Session(SessionOptions opts) : impl_(std::make_shared<Impl>()) { impl_->opts = std::move(opts); }
Session::~Session() = default;

Result<std::unique_ptr<Model>> Session::LoadModel(const std::string& path, const LoadOptions& opts) {
  return Guarded("loading model", path, [&]() -> Result<std::unique_ptr<Model>> {
    KILN_ASSIGN_OR_RETURN(weights::WeightManager* manager, impl_->WeightsFor(opts.device));
    return ModelImpl::CreateFromFile(path, opts, *manager);
  });
}

WeightStats Session::weight_stats() const {
  WeightStats w;
  for (auto& [d, m] : impl_->weights) {
    weights::WeightManagerStats s = m->stats();
    w.bytes_read += s.bytes_read;
    w.bytes_mapped += s.bytes_mapped;
    w.files_opened += s.files_opened;
    w.weights_shared += s.weights_shared;
    w.resident_bytes += s.resident_bytes;
  }
  return w;
}

Result<weights::WeightManager*> Session::Impl::WeightsFor(const std::string& spec) {
  KILN_ASSIGN_OR_RETURN(device::Device* dev, runtime::OpenDevice(spec));
  auto& m = weights[dev];
  if (!m) m = std::make_shared<weights::WeightManager>(dev);
  return m.get();
}

Model* Session::GetLoadedGraph(std::uint32_t id) const {
  auto it = impl_->graphs.find(id);
  return it == impl_->graphs.end() ? nullptr : it->second.model.get();
}

}  // namespace kiln
