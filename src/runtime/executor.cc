#include "runtime/executor.h"

#include <algorithm>
#include <limits>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "backends/cpu/kernel.h"
#include "common/checked.h"
#include "ops/op_registry.h"
#include "ops/shape_ops.h"
#include "runtime/devices.h"
#include "runtime/stream_impl.h"

namespace kiln::runtime {
namespace {

class EagerCtx final : public EagerExecuteContext {
 public:
  using AllocFn = std::function<Result<void*>(std::size_t)>;
  EagerCtx(std::vector<ArgBlock>& blocks, AllocFn alloc, device::Stream& copies, CustomNode& cn,
           std::vector<void*> in, std::vector<void*> out, Stream& stream)
      : blocks_(blocks), alloc_(std::move(alloc)), copies_(copies), cn_(cn), in_(std::move(in)), out_(std::move(out)),
        stream_(stream), attrs_(*cn.node) {}
  const std::string& node_name() const override { return cn_.node->name(); }
  int num_inputs() const override { return static_cast<int>(cn_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(cn_.outputs.size()); }
  const OpAttributes& attributes() const override { return attrs_; }
  Result<DeviceTensor> GetInputTensor(int i) override {
    if (i < 0 || i >= num_inputs()) return Range("GetInputTensor", i, num_inputs());
    const Binding& b = cn_.inputs[i];
    return DeviceTensor{in_[i], b.dtype, b.shape, b.bytes};
  }
  Result<DeviceTensor> MallocOutputTensor(int i) override {
    if (i < 0 || i >= num_outputs()) return Range("MallocOutputTensor", i, num_outputs());
    const Binding& b = cn_.outputs[i];
    return DeviceTensor{out_[i], b.dtype, b.shape, b.bytes};
  }
  Result<void*> MallocWorkspace(std::size_t bytes) override { return alloc_(bytes == 0 ? 1 : bytes); }
  Result<const void*> MallocReadOnlyDevArgs(const void* host_args, std::size_t size) override {
    if (!host_args || size == 0) {
      return Error(StatusCode::kInvalidArgument, "node '", node_name(), "': MallocReadOnlyDevArgs needs a non-empty block");
    }
    ArgBlock b;
    b.host.assign(static_cast<const std::uint8_t*>(host_args), static_cast<const std::uint8_t*>(host_args) + size);
    KILN_ASSIGN_OR_RETURN(void* dev, alloc_(size));
    b.dev = static_cast<std::uint8_t*>(dev);
    KILN_RETURN_IF_ERROR(copies_.Copy(b.dev, b.host.data(), size, device::CopyKind::kHostToDevice));
    cn_.blocks.push_back(static_cast<int>(blocks_.size()));
    blocks_.push_back(std::move(b));
    return static_cast<const void*>(blocks_.back().dev);
  }
  Stream& GetStream() override { return stream_; }

 private:
  Status Range(const char* fn, int i, int n) const {
    return Error(StatusCode::kOutOfRange, "node '", node_name(), "': ", fn, "(", i, "): index out of range 0..", n - 1);
  }
  std::vector<ArgBlock>& blocks_;
  AllocFn alloc_;
  device::Stream& copies_;
  CustomNode& cn_;
  std::vector<void*> in_, out_;
  Stream& stream_;
  custom::NodeAttributes attrs_;
};

class UpdaterCtx final : public ArgsUpdaterContext {
 public:
  UpdaterCtx(std::vector<ArgBlock>& blocks, const CustomNode& cn, std::vector<void*> in, std::vector<void*> out)
      : blocks_(blocks), cn_(cn), in_(std::move(in)), out_(std::move(out)) {}
  const std::string& node_name() const override { return cn_.node->name(); }
  int num_inputs() const override { return static_cast<int>(cn_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(cn_.outputs.size()); }
  Result<DeviceTensor> GetInputTensor(int i) override {
    if (i < 0 || i >= num_inputs()) return Range("GetInputTensor", i, num_inputs());
    const Binding& b = cn_.inputs[i];
    return DeviceTensor{in_[i], b.dtype, b.shape, b.bytes};
  }
  Result<DeviceTensor> GetOutputTensor(int i) override {
    if (i < 0 || i >= num_outputs()) return Range("GetOutputTensor", i, num_outputs());
    const Binding& b = cn_.outputs[i];
    return DeviceTensor{out_[i], b.dtype, b.shape, b.bytes};
  }
  Result<void*> GetKernelArgs(Placement placement, int index) override {
    if (index < 0 || index >= static_cast<int>(cn_.blocks.size())) {
      return Range("GetKernelArgs", index, static_cast<int>(cn_.blocks.size()));
    }
    ArgBlock& b = blocks_[cn_.blocks[index]];
    return static_cast<void*>(placement == Placement::kHost ? b.host.data() : b.dev);
  }
  std::size_t num_kernel_args() const override { return cn_.blocks.size(); }

 private:
  Status Range(const char* fn, int i, int n) const {
    return Error(StatusCode::kOutOfRange, "node '", node_name(), "': ", fn, "(", i, "): index out of range 0..", n - 1);
  }
  std::vector<ArgBlock>& blocks_;
  const CustomNode& cn_;
  std::vector<void*> in_, out_;
};

}  // namespace


Executor::~Executor() {
  // Work still queued (a load that failed after queueing its uploads) must
  // finish before the memory it writes goes; then children, then every
  // device allocation.
  // A branch executor queues on its parent's stream: wait for that too (a
  // branch that failed to load after queueing argument-block copies).
  if (stream_) (void)stream_->Synchronize();
  if (own_load_stream_) (void)own_load_stream_->Synchronize();
  tasks_.clear();
  for (void* p : allocations_) device_->Free(p);
}

Result<void*> Executor::Alloc(std::size_t bytes) {
  KILN_ASSIGN_OR_RETURN(void* p, device_->Allocate(bytes));
  allocations_.push_back(p);
  return p;
}

void* Executor::Address(const Binding& b) const {
  if (b.region < 0) return b.fixed;
  return bases_[b.region] ? bases_[b.region] + b.offset : nullptr;
}

namespace {

// Runs `f` for task `t`, turning an exception into an error naming its node
// (a try block costs nothing until something throws).
template <typename F>
Status Guard(const Task& t, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, t.node->Describe(), ": out of memory while running");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, t.node->Describe(), ": kernel failed: ", e.what());
  }
}

}  // namespace

// (executor.h) A task's estimated time on one thread, from its static shapes:
// bytes moved (a constant's bytes cost more: weights are read from beyond the
// caches, activations mostly from L2), per-element work of the ops that do
// more than move values, and multiply-adds of the contractions. Calibrated on
// per-task profiles (2-vCPU Xeon and Zen 5, `kiln bench --profile` with every
// task split against none): a task that takes under about 12 us on one thread
// runs no faster split over two (a fork and join, and half the caches, cost
// what the second thread saves), whatever kind of op it is.
namespace {
constexpr double kNsPerActivationByte = 0.015;  // ~65 GB/s: L2-resident operands
constexpr double kNsPerConstantByte = 0.055;    // ~18 GB/s: weights streamed from L3 / DRAM
constexpr double kNsPerMac = 0.015;             // float32 (half types are computed in it): ~130 GFLOP/s
constexpr double kNsPerIntMac = 0.003;          // 8-bit integer (VNNI or AMX dot products)
// 8-bit without them: the exact int16-product kernel (int16_conv.h), 85-90 G
// multiply-adds/s on a Zen 4 core at 256 bits (its float32 route and
// oneDNN's int8 depthwise kernel are slower still).
constexpr double kNsPerIntMacNoDot = 0.011;
constexpr double kNsPerDepthwiseMac = 0.03;     // one input channel per group, any type: little reuse

// Per-element cost (ns per element of input 0 or the outputs, the larger) of ops that compute more than a
// load, an arithmetic op and a store per value.
double ElementNs(const std::string& op) {
  static const std::map<std::string, double> kCost = {
      {"Gelu", 0.4}, {"Erf", 0.4}, {"Exp", 0.3}, {"Log", 0.3}, {"Tanh", 0.3}, {"Sigmoid", 0.3},
      {"Softmax", 0.4}, {"LogSoftmax", 0.4}, {"Softplus", 0.4}, {"Elu", 0.3}, {"Selu", 0.3}, {"Pow", 0.4},
      {"LayerNormalization", 0.3}, {"InstanceNormalization", 0.3}, {"QLinearSigmoid", 0.3},
      {"ReduceLogSumExp", 0.4}, {"DynamicQuantizeLinear", 0.25}, {"QuantizeLinear", 0.2}, {"Div", 0.1},
      {"Resize", 0.2}, {"Upsample", 0.2}, {"GatherElements", 0.2}, {"GatherND", 0.2}, {"ScatterND", 0.2},
      {"CumSum", 0.1}, {"TopK", 0.5}, {"Transpose", 0.1},
      // Reductions and pools: per element read (ElementCount below).
      {"GlobalAveragePool", 0.1}, {"GlobalMaxPool", 0.1}, {"ReduceMean", 0.1}, {"ReduceSum", 0.1},
      {"ReduceMax", 0.1}, {"ReduceMin", 0.1}, {"ReduceSumSquare", 0.1}, {"ReduceProd", 0.1},
      {"QLinearGlobalAveragePool", 0.1}};
  auto it = kCost.find(op);
  return it == kCost.end() ? 0.0 : it->second;
}

// Through the checked helpers: a shape whose size overflows costs "infinity"
// (never small; the loader has refused such shapes before this runs).
constexpr double kHuge = 1e30;
double Elements(const ir::Value* v) {
  if (!v) return 0.0;
  auto n = CheckedNumElements(v->shape(), "operand");
  return n.ok() ? static_cast<double>(n.value()) : kHuge;
}
double Bytes(const ir::Value* v) {
  if (!v) return 0.0;
  auto n = CheckedTensorBytes(v->dtype(), v->shape(), "operand");
  return n.ok() ? static_cast<double>(n.value()) : kHuge;
}
bool Int8(const ir::Value* v) { return v && (v->dtype() == DType::kUInt8 || v->dtype() == DType::kInt8); }

// Multiply-adds of the contractions, and the ns each costs.
double MacNs(const ir::Node& n, bool int8_dot) {
  const double int_mac = int8_dot ? kNsPerIntMac : kNsPerIntMacNoDot;
  const std::string& op = n.op_type();
  auto in = [&](int i) { return i < n.num_inputs() ? n.input(i) : nullptr; };
  const ir::Value* y = n.num_outputs() > 0 ? n.output(0) : nullptr;
  if (!y) return 0;
  const bool conv = op == "Conv" || op == "ConvInteger" || op == "QLinearConv" || op == "ConvTranspose";
  if (conv) {
    const ir::Value* x = in(0);
    const ir::Value* w = in(op == "QLinearConv" ? 3 : 1);
    if (!x || !w || w->shape().empty() || w->shape()[0] <= 0 || x->shape().size() < 2) return 0;
    const double per = Elements(w) / static_cast<double>(w->shape()[0]);  // contraction depth
    const double macs = per * Elements(op == "ConvTranspose" ? x : y);
    // Depthwise: one input channel per group (W [OC, 1, k...]; the test
    // holds in either layout).
    const bool depthwise = n.GetInt("group", 1) > 1 && w->shape().size() > 1 && w->shape()[1] == 1;
    return macs * (depthwise ? kNsPerDepthwiseMac : Int8(x) ? int_mac : kNsPerMac);
  }
  if (op == "MatMul" || op == "MatMulInteger" || op == "QLinearMatMul" || op == "Gemm") {
    const ir::Value* a = in(0);
    if (!a || a->shape().empty()) return 0;
    const bool ta = op == "Gemm" && n.GetInt("transA", 0) != 0 && a->shape().size() >= 2;
    const double k = static_cast<double>(ta ? a->shape()[a->shape().size() - 2] : a->shape().back());
    return Elements(y) * k * (Int8(a) ? int_mac : kNsPerMac);
  }
  if (op == "LSTM" || op == "GRU" || op == "RNN" || op == "DynamicQuantizeLSTM") {  // X [seq, batch, I]; W, R: G*H*I, G*H*H a direction
    const ir::Value* x = in(0);
    const ir::Value* w = in(1);
    const ir::Value* r = in(2);
    if (!x || !w || !r || x->shape().size() < 2) return 0;
    const double steps = static_cast<double>(x->shape()[0]) * static_cast<double>(x->shape()[1]);
    return steps * (Elements(w) + Elements(r)) * kNsPerMac;
  }
  return 0;
}
}  // namespace

double TaskCostNs(const ir::Node& node, bool int8_dot) {
  double act = 0, constant = 0;
  for (const ir::Value* v : node.inputs()) {
    if (!v) continue;
    (v->is_constant() ? constant : act) += Bytes(v);
  }
  double out_elems = 0;
  for (const ir::Value* v : node.outputs()) {
    if (!v) continue;
    act += Bytes(v);
    out_elems += Elements(v);
  }
  // Per-element work counts the larger of the first input and the outputs
  // (a reduction's work is in what it reads).
  const double elems = std::max(out_elems, node.num_inputs() > 0 ? Elements(node.input(0)) : 0.0);
  return act * kNsPerActivationByte + constant * kNsPerConstantByte + elems * ElementNs(node.op_type()) +
         MacNs(node, int8_dot);
}

// Whether a node runs on one kernel thread when the model runs on several:
// all its operands of static shape and its estimated time under
// $KILN_SMALL_TASK_US (default 12; 0 or "off": never).
double SmallTaskNs() {
  const char* env = std::getenv("KILN_SMALL_TASK_US");
  return env ? std::max(0.0, std::atof(env)) * 1e3 : 12e3;
}

bool SmallTask(const ir::Node& node, double limit_ns, bool int8_dot) {
  if (limit_ns <= 0) return false;
  for (const ir::Value* v : node.inputs()) {
    if (v && v->varying_mask() != 0) return false;
  }
  for (const ir::Value* v : node.outputs()) {
    if (v && v->varying_mask() != 0) return false;
  }
  return TaskCostNs(node, int8_dot) < limit_ns;
}

// (executor.h) Nodes of the model's graph whose kernel is the same in every
// plan: every input and output of fixed shape (no symbolic or data-dependent
// dim, no rank alternatives), and every input a constant or a value whose
// contents no symbol decides (no probe value: shape arithmetic is folded
// into each plan's constants, which a kernel may read when it is made; no
// shape input). Ops with subgraphs are excluded (their branches have their
// own executors), and so are names that repeat.
StaticKernelCache::Nodes StaticNodes(const ir::Graph& g) {
  StaticKernelCache::Nodes out;
  std::unordered_set<std::string> seen, repeated;
  for (const auto& n : g.nodes()) {
    if (!seen.insert(n->name()).second) repeated.insert(n->name());
    if (n->HasSubgraphs()) continue;
    bool ok = true;
    std::vector<const HostTensor*> constants;
    for (const ir::Value* v : n->inputs()) {
      constants.push_back(v && v->is_constant() ? v->constant().get() : nullptr);
      if (!v) continue;
      ok = ok && v->varying_mask() == 0 && v->rank_alternatives().empty() &&
           (v->is_constant() || (!v->bound_value() && !v->shape_input()));
    }
    for (const ir::Value* v : n->outputs()) {
      ok = ok && v && v->varying_mask() == 0 && v->rank_alternatives().empty();
    }
    if (ok) out.emplace(n->name(), std::move(constants));
  }
  for (const std::string& r : repeated) out.erase(r);
  return out;
}

bool StaticKernelCache::Eligible(const ir::Node& node) const {
  auto it = nodes_.find(node.name());
  if (it == nodes_.end() || static_cast<int>(it->second.size()) != node.num_inputs()) return false;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    // The same constants (shared with the model's graph by the plan's
    // copy), and no value a plan folded into a constant or reads as one (a
    // shape input's, or computed from it: SpecializeGraph), which a kernel
    // may read when it is made.
    const HostTensor* c = v && v->is_constant() ? v->constant().get() : nullptr;
    if (c != it->second[static_cast<std::size_t>(i)] || (v && v->bound_value())) return false;
  }
  return true;
}

// The replay's first launch: the kernel thread count of the thread that runs
// the list, from the context (so the per-task launches need not set it).
static Status LaunchSetThreads(void*, const void*, const device::ExecContext& ctx) {
  cpu::UseThreads(ctx.threads);
  return Status::Ok();
}

Status Executor::LaunchKernelTask(void* obj, const void* args, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  device::KernelArgs a{static_cast<void* const*>(args), t.num_inputs};
  a.ctx = &ctx;  // the replay's context carries this executor's device workspace
  a.host_ptrs = t.host_args;
  if (t.one_thread) cpu::UseThreads(1);
  Status st = Guard(t, [&] { return t.kernel->Run(a); });  // one named result: no copy on the hot path
  if (t.one_thread) cpu::UseThreads(ctx.threads);
  if (!st.ok()) st = st.WithContext(t.node->Describe());
  return st;
}

// A CPU-placed task: the same, with the host workspace.
Status Executor::LaunchHostKernelTask(void* obj, const void* args, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  return LaunchKernelTask(obj, args, t.exec->HostContext(ctx));
}

Status Executor::LaunchGuardedTask(void* obj, const void* args, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  KILN_RETURN_IF_ERROR(t.on_host ? LaunchHostKernelTask(obj, args, ctx) : LaunchKernelTask(obj, args, ctx));
  for (GuardedBuffer* b : t.guarded_outputs) {
    for (std::uint64_t i = 0; i < GuardedBuffer::kGuard; ++i) {
      const bool before = b->bytes[i] != GuardedBuffer::kPattern;
      const bool after = b->bytes[GuardedBuffer::kGuard + b->size + i] != GuardedBuffer::kPattern;
      if (before || after) {
        return Error(StatusCode::kInternal, t.node->Describe(), " wrote out of bounds of tensor '", b->name, "' (",
                     b->size, " bytes): guard byte ", before ? "before" : "after", " the buffer was overwritten");
      }
    }
  }
  return Status::Ok();
}

namespace {
std::uint64_t NowNs() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
constexpr std::size_t kMaxProfiledRuns = 10000;
}  // namespace

// Profiling: the task's own launch function between two clock reads.
Status Executor::LaunchTimedTask(void* obj, const void* args, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  const std::uint64_t t0 = NowNs();
  Status st = t.timed(obj, args, ctx);
  const std::uint64_t t1 = NowNs();
  if (t.spans.size() < kMaxProfiledRuns) t.spans.emplace_back(t0 - t.exec->epoch_ns_, t1 - t0);
  return st;
}

std::vector<TaskProfile> Executor::Profile() const {
  std::vector<TaskProfile> out;
  for (const Task& t : tasks_) {
    if (!t.timed) continue;
    TaskProfile p;
    p.node = t.node->name();
    p.op = t.node->op_type();
    for (const ir::Value* v : t.node->inputs()) {
      if (!v) continue;
      p.shapes += (p.shapes.empty() ? "" : " ") + std::string(DTypeName(v->dtype())) + ShapeToString(v->shape());
    }
    // Multiply-adds x 2 of the compute-bound ops, from the recorded shapes.
    const ir::Node& n = *t.node;
    auto numel = [](const Shape& s) { return static_cast<double>(NumElements(s)); };
    if ((p.op == "Conv" || p.op == "ConvTranspose") && n.num_inputs() > 1 && n.input(1)) {
      // Conv: W [OC, IC/g, k...], each output element IC/g x k... multiply-adds.
      // ConvTranspose: W [IC, OC/g, k...], each input element OC/g x k... of them.
      const Shape& w = n.input(1)->shape();
      const double per = w.empty() || w[0] == 0 ? 0 : numel(w) / static_cast<double>(w[0]);
      p.flops = 2 * per * numel(p.op == "Conv" ? n.output(0)->shape() : n.input(0)->shape());
    } else if ((p.op == "MatMul" || p.op == "Gemm") && n.num_inputs() > 1 && n.input(0)) {
      const Shape& a = n.input(0)->shape();
      const bool ta = p.op == "Gemm" && n.GetInt("transA", 0) != 0;
      const double k = a.empty() ? 0 : static_cast<double>(ta ? a[a.size() - 2] : a.back());
      p.flops = 2 * numel(n.output(0)->shape()) * k;
    }
    for (const auto& [start, dur] : t.spans) p.spans_us.emplace_back(start / 1e3, dur / 1e3);
    if (!t.dyn) p.cost_us = TaskCostNs(n, device_->caps().int8_dot) / 1e3;
    p.one_thread = t.one_thread;
    out.push_back(std::move(p));
  }
  return out;
}

Status Executor::LaunchDynamicTask(void* obj, const void*, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  const device::ExecContext c = t.on_host ? t.exec->HostContext(ctx) : ctx;
  return Guard(t, [&] { return t.exec->RunDynamic(t, c); });
}

Status Executor::LaunchIfTask(void* obj, const void* args, const device::ExecContext& ctx) {
  Task& t = *static_cast<Task*>(obj);
  return Guard(t, [&] { return t.exec->RunIf(t, static_cast<void* const*>(args), ctx, nullptr, nullptr); });
}

Result<std::unique_ptr<Executor>> Executor::Create(const ir::Graph& graph, const plan::MemoryPlan& plan,
                                                   const ExecutorOptions& opts) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->graph_ = &graph;
  ex->epoch_ns_ = NowNs();
  ex->device_ = opts.device ? opts.device : &CpuDevice();
  device::Device& dev = *ex->device_;
  const device::Capabilities& caps = dev.caps();
  // (SmallTask's limit, read once here rather than per node.)
  const double small_task_ns = opts.threads > 1 ? SmallTaskNs() : 0;
  if (opts.parent_stream) {
    ex->stream_ = opts.parent_stream;
  } else {
    KILN_ASSIGN_OR_RETURN(ex->own_stream_, dev.CreateSyncStream());
    ex->stream_ = ex->own_stream_.get();
  }
  // Kernels are created on this thread with the model's thread count (oneDNN
  // sizes a primitive's parallelism when it is created).
  cpu::UseThreads(opts.threads);
  device::Stream& stream = *ex->stream_;
  const std::size_t n_in = graph.inputs().size();
  const int host_region = plan::HostArenaRegion(n_in, graph.outputs().size());
  const std::size_t num_regions = static_cast<std::size_t>(host_region) + 1;
  ex->region_refs_.resize(num_regions);
  ex->bases_.assign(num_regions, nullptr);
  ex->arena_size_ = plan.arena_size;
  // Not zero-filled and not touched here: no kernel reads arena bytes it did
  // not write in the same run, and a model too large for the machine fails
  // here with an error instead of being killed while pages are touched.
  if (opts.shared_arena && !opts.check_bounds && plan.arena_size <= opts.shared_arena_size) {
    ex->shared_arena_ = opts.shared_arena;
    ex->arena_ = static_cast<std::uint8_t*>(ex->shared_arena_.get());
  } else {
    auto arena = ex->Alloc(plan.arena_size == 0 ? 1 : plan.arena_size);
    if (!arena.ok()) {
      return Error(StatusCode::kOutOfRange, "cannot allocate the arena of ", plan.arena_size, " bytes on device '",
                   dev.spec(), "': ", arena.status().message());
    }
    ex->arena_ = static_cast<std::uint8_t*>(arena.value());
  }
  ex->bases_[plan::kRegionArena] = ex->arena_;
  if (plan.host_arena_size > 0) {  // values of CPU-placed nodes
    KILN_ASSIGN_OR_RETURN(void* h, dev.Allocate(plan.host_arena_size, device::MemoryKind::kPinnedHost));
    ex->allocations_.push_back(h);
    ex->host_arena_ = static_cast<std::uint8_t*>(h);
    ex->bases_[host_region] = ex->host_arena_;
  }
  // Stand-ins for the caller's buffers until the first run binds real ones
  // (custom ops record their launches against them). Never touched here.
  for (std::size_t i = 0; i + plan::kRegionIoBase < static_cast<std::size_t>(host_region); ++i) {
    const ir::Value* v = i < n_in ? graph.inputs()[i] : graph.outputs()[i - n_in];
    auto bytes = CheckedTensorBytes(v->dtype(), v->shape(), StrCat("'", v->name(), "'"));
    if (!bytes.ok()) return bytes.status();
    auto p = ex->Alloc(static_cast<std::size_t>(bytes.value()) + 64);
    if (!p.ok()) {
      return Error(StatusCode::kOutOfRange, "cannot allocate a stand-in of ", bytes.value(), " bytes for '",
                   v->name(), "': ", p.status().message());
    }
    ex->bases_[plan::kRegionIoBase + i] = static_cast<std::uint8_t*>(p.value());
    ex->standins_.push_back(p.value());
  }

  // Constants: used in place where the device can read host memory (or the
  // weight already lives in this device's memory), else uploaded once.
  std::unordered_map<const HostTensor*, void*> uploaded;
  // For CPU-placed nodes: host memory (a device-resident weight is read back
  // once).
  std::unordered_map<const HostTensor*, HostTensorPtr> downloaded;
  auto host_constant = [&](const ir::Value* v) -> Result<const HostTensor*> {
    const HostTensor* t = v->constant().get();
    if (!t->device() || t->device()->caps().host_addressable || t->nbytes() == 0) return t;
    HostTensorPtr& h = downloaded[t];
    if (!h) {
      auto copy = std::make_shared<HostTensor>(t->dtype(), t->shape());
      KILN_RETURN_IF_ERROR(stream.Copy(copy->mutable_data(), t->data(), t->nbytes(), device::CopyKind::kDeviceToHost));
      KILN_RETURN_IF_ERROR(stream.Synchronize().WithContext(StrCat("reading weight '", v->name(), "' back from device '",
                                                                   dev.spec(), "' for a CPU-placed node")));
      h = copy;
      ex->host_constants_.push_back(h);
    }
    return h.get();
  };
  auto constant_address = [&](const ir::Value* v, bool on_host) -> Result<void*> {
    const HostTensor* t = v->constant().get();
    if (on_host) {
      KILN_ASSIGN_OR_RETURN(const HostTensor* h, host_constant(v));
      return const_cast<void*>(h->data());
    }
    void* host = const_cast<void*>(t->data());
    if (caps.maps_host_memory || t->device() == &dev || t->nbytes() == 0) return host;
    auto it = uploaded.find(t);
    if (it != uploaded.end()) return it->second;
    KILN_ASSIGN_OR_RETURN(void* d, ex->Alloc(t->nbytes()));
    KILN_RETURN_IF_ERROR(stream.Copy(d, host, t->nbytes(), device::CopyKind::kHostToDevice));
    uploaded.emplace(t, d);
    return d;
  };

  // check_bounds: one guarded allocation per arena tensor (views share their
  // source's) instead of the shared arena.
  std::unordered_map<const ir::Value*, GuardedBuffer*> guarded_of;
  auto binding = [&](const ir::Value* v, const ir::Node& node) -> Result<Binding> {
    Binding b;
    b.dtype = v->dtype();
    b.shape = v->shape();
    b.bytes = static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype());
    if (v->is_constant()) {
      KILN_ASSIGN_OR_RETURN(b.fixed, constant_address(v, ir::IsHostPlaced(node)));
      return b;
    }
    auto it = plan.placements.find(v->name());
    if (it == plan.placements.end()) {
      return Error(StatusCode::kCorrupt, node.Describe(), ": value '", v->name(), "' has no placement");
    }
    const plan::Placement& p = it->second;
    if (p.region <= plan::kRegionConst || static_cast<std::size_t>(p.region) >= num_regions) {
      return Error(StatusCode::kCorrupt, "value '", v->name(), "' placed in invalid region ", p.region);
    }
    const bool arena = p.region == plan::kRegionArena || p.region == host_region;
    const std::uint64_t arena_bytes = p.region == host_region ? plan.host_arena_size : plan.arena_size;
    if (p.size != b.bytes || (arena && (p.offset > arena_bytes || p.size > arena_bytes - p.offset))) {
      return Error(StatusCode::kCorrupt, "value '", v->name(), "' placement [", p.offset, ", +", p.size,
                   ") does not fit region ", p.region);
    }
    if (opts.check_bounds && arena) {
      GuardedBuffer*& g = guarded_of[v];
      if (!g) {
        auto gb = std::make_unique<GuardedBuffer>();
        const std::uint64_t total = p.size + 2 * GuardedBuffer::kGuard;
        KILN_ASSIGN_OR_RETURN(void* mem, dev.Allocate(total, p.region == host_region ? device::MemoryKind::kPinnedHost
                                                                                      : device::MemoryKind::kDevice));
        ex->allocations_.push_back(mem);
        gb->bytes = static_cast<std::uint8_t*>(mem);
        KILN_RETURN_IF_ERROR(dev.RunPrepare([&]() {
          std::memset(gb->bytes, GuardedBuffer::kPattern, total);
          return Status::Ok();
        }));
        gb->size = p.size;
        gb->name = v->name();
        g = gb.get();
        ex->guarded_.push_back(std::move(gb));
      }
      b.fixed = g->data();
      return b;
    }
    b.region = p.region;
    b.offset = p.offset;
    return b;
  };

  auto shape_id = [&](const ir::Value* v) -> int {
    if (!v || !v->is_dynamic()) return -1;
    auto [it, added] = ex->shape_ids_.emplace(v, static_cast<int>(ex->shapes_.size()));
    if (added) ex->shapes_.push_back(v->shape());
    return it->second;
  };
  // Nodes touching data-dependent extents get a private copy whose input
  // shapes are set per run.
  auto make_dynamic = [&](const ir::Node& node) -> std::unique_ptr<DynamicTask> {
    bool dynamic = false;
    for (const ir::Value* v : node.inputs()) dynamic |= v && v->is_dynamic();
    for (const ir::Value* v : node.outputs()) dynamic |= v->is_dynamic();
    if (!dynamic) return nullptr;
    auto d = std::make_unique<DynamicTask>();
    d->scratch = std::make_unique<ir::Graph>();
    d->clone = d->scratch->AddCopyOf(node);
    for (const ir::Value* v : node.inputs()) d->in_ids.push_back(shape_id(v));
    for (const ir::Value* v : node.outputs()) {
      d->out_ids.push_back(shape_id(v));
      d->out_bound_bytes.push_back(static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype()));
      d->out_static.push_back(v->shape());
      d->out_masks.push_back(v->dynamic_mask());
    }
    d->self_shaped = node.op_type() == "If" && node.domain().empty();
    for (int i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      if (v && !v->is_constant() && !v->bound_value() &&
          ((v->value_upper_bound() && ops::InferContext::UpperBoundSlot(node, i)) ||
           ops::InferContext::DataBoundedSlot(node, i))) {
        d->value_inputs.push_back(i);
        d->provisional.push_back(v->bound_provisional() ? v->value_upper_bound() : nullptr);
        d->value_names.push_back(v->name());
      }
    }
    d->values.resize(d->value_inputs.size());
    return d;
  };
  // Where a dynamic task's value inputs live (read by address at run time:
  // a view task has no argument block).
  auto bind_values = [&](DynamicTask& d, const ir::Node& node) -> Status {
    for (int i : d.value_inputs) {
      KILN_ASSIGN_OR_RETURN(Binding b, binding(node.input(i), node));
      d.value_bindings.push_back(std::move(b));
    }
    return Status::Ok();
  };
  // If: each branch is a self-contained graph (the lower-subgraphs pass made
  // every captured value an input), planned and recorded as a child executor.
  auto make_if = [&](const ir::Node& n) -> Result<std::unique_ptr<IfTask>> {
    if (!caps.launches_run_on_host) {
      return Error(StatusCode::kUnimplemented, n.Describe(), ": If is not supported yet on device '", dev.spec(), "'");
    }
    auto it = std::make_unique<IfTask>();
    // A condition known in this plan (one that follows from shapes: a
    // constant, or a bound value where it also writes a model output) takes
    // one branch: the other is not made (SpecializeBranches did not
    // specialize it; it may be a branch kept uncompiled, valid only at other
    // extents).
    const int not_taken = ops::IfBranchNotTaken(n);
    const int taken = not_taken < 0 ? -1 : 1 - not_taken;
    for (int b = 0; b < 2; ++b) {
      const char* name = b == 0 ? "then_branch" : "else_branch";
      const ir::Attribute* a = n.FindAttr(name);
      if (!a || !a->g) return Error(StatusCode::kInvalidArgument, n.Describe(), ": attribute '", name, "' is missing");
      if (taken >= 0 && taken != b) continue;
      it->graphs[b] = a->g;
      for (auto& sn : a->g->nodes()) {
        for (const ir::Value* v : sn->inputs()) {
          if (v && v->owner() != a->g.get()) {
            return Error(StatusCode::kInvalidArgument, n.Describe(), " attribute '", name, "': ", sn->Describe(),
                         " reads outer value '", v->name(), "' (branches must be lowered by lower-subgraphs)");
          }
        }
      }
      auto bp = plan::PlanMemory(*a->g);
      if (!bp.ok()) return bp.status().WithContext(StrCat(n.Describe(), " attribute '", name, "'"));
      it->plans[b] = std::move(bp).value();
      ExecutorOptions co = opts;
      co.device = &dev;
      co.parent_stream = &stream;
      co.shared_arena = nullptr;  // a branch runs while its parent's arena holds live values
      co.shared_arena_size = 0;
      co.static_kernels = nullptr;  // keyed by top-level node names
      co.graph_keepalive = nullptr;
      auto child = Executor::Create(*a->g, it->plans[b], co);
      if (!child.ok()) return child.status().WithContext(StrCat(n.Describe(), " attribute '", name, "'"));
      it->children[b] = std::move(child).value();
    }
    it->io.resize(static_cast<std::size_t>(n.num_inputs() - 1 + n.num_outputs()));
    return it;
  };

  // A dynamic task decides its extents on the host at every run. Where a
  // launch only queues device work once, at capture (cuda), that cannot
  // happen yet except for tasks placed on the CPU (host nodes run per run).
  auto refuse_recorded_dynamic = [&](const ir::Node& n, bool on_host) -> Status {
    if (caps.launches_run_on_host || on_host) return Status::Ok();
    return Error(StatusCode::kUnimplemented, n.Describe(), ": data-dependent extents are not supported on device '",
                 dev.spec(), "' yet (its work is recorded once; compile with fixed shapes)");
  };
  for (auto& node_ptr : graph.nodes()) {
    const ir::Node& node = *node_ptr;
    if (node.GetInt(plan::kAliasAttr, 0) == 1) {  // view: shares its input's bytes
      if (auto d = make_dynamic(node)) {  // its extents still follow its input's
        KILN_RETURN_IF_ERROR(bind_values(*d, node));
        // Where launches only queue device work (cuda), a CPU-placed view
        // publishes its extents as a host task in stream order.
        const bool host_view = !caps.launches_run_on_host && ir::IsHostPlaced(node);
        KILN_RETURN_IF_ERROR(refuse_recorded_dynamic(node, host_view));
        d->alias = true;
        Task t;
        t.exec = ex.get();
        t.node = &node;
        t.on_host = host_view;
        t.dyn = std::move(d);
        ex->tasks_.push_back(std::move(t));
      }
      if (opts.check_bounds) {
        auto it = guarded_of.find(node.input(0));
        if (it != guarded_of.end()) guarded_of[node.output(0)] = it->second;
      }
      continue;
    }
    if (custom::IsCustomNode(node)) {
      if (ir::IsHostPlaced(node)) {
        return Error(StatusCode::kCorrupt, "custom op ", node.Describe(), " is placed on the CPU (attribute '",
                     ir::kPlaceAttr, "'); custom ops run on the target device");
      }
      CustomNode cn;
      cn.node = &node;
      cn.op = custom::Find(node.op_type());
      std::vector<void*> in, out;
      for (const ir::Value* v : node.inputs()) {
        if (!v) return Error(StatusCode::kUnimplemented, node.Describe(), ": absent optional inputs are not supported for custom ops");
        KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
        in.push_back(ex->Address(b));
        cn.inputs.push_back(b);
      }
      for (const ir::Value* v : node.outputs()) {
        KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
        out.push_back(ex->Address(b));
        cn.outputs.push_back(b);
      }
      for (auto* list : {&cn.inputs, &cn.outputs}) {
        for (const Binding& b : *list) {
          if (b.region >= plan::kRegionIoBase) cn.regions.insert(b.region);
        }
      }
      Stream* pub = opts.load_stream;
      if (!pub) {
        if (!ex->own_load_stream_) {
          KILN_ASSIGN_OR_RETURN(ex->own_load_stream_, Stream::Create(dev.spec()));
        }
        pub = ex->own_load_stream_.get();
      }
      device::Stream& load = DeviceStreamOf(*pub);
      if (&load.device() != &dev) {
        return Error(StatusCode::kInvalidArgument, "custom op ", node.Describe(), ": the load stream is on device '",
                     load.device().spec(), "' but the model loads on '", dev.spec(), "'");
      }
      EagerCtx ctx(ex->blocks_, [e = ex.get()](std::size_t n) { return e->Alloc(n); }, stream, cn, in, out, *pub);
      KILN_RETURN_IF_ERROR(load.BeginCapture());
      Status st = cn.op->eager->Execute(ctx);
      auto rec = load.EndCapture();
      if (!st.ok()) return st.WithContext(StrCat("custom op ", node.Describe(), ": Execute"));
      if (!rec.ok()) return rec.status().WithContext(StrCat("custom op ", node.Describe()));
      if (rec.value()->size() == 0) {
        return Error(StatusCode::kInvalidArgument, "custom op ", node.Describe(),
                     ": Execute launched no kernel on the context's stream");
      }
      Task t;
      t.exec = ex.get();
      t.node = &node;
      t.custom = std::move(rec).value();
      ex->tasks_.push_back(std::move(t));
      ex->custom_.push_back(std::move(cn));
      continue;
    }
    Task task;
    task.exec = ex.get();
    task.node = &node;
    task.num_inputs = node.num_inputs();
    task.on_host = ir::IsHostPlaced(node);
    task.block = static_cast<int>(ex->blocks_.size());
    const std::size_t n_slots = node.num_inputs() + node.num_outputs();
    ArgBlock block;
    block.host.assign(n_slots * sizeof(void*), 0);
    auto* slots = reinterpret_cast<void**>(block.host.data());
    device::KernelInit init;
    init.node = &node;
    init.prepack_cache = opts.prepack_cache.get();
    init.varying_shapes = opts.varying_shapes;
    init.value_ranges = &ex->value_ranges_;
    init.caps = &(task.on_host ? CpuDevice() : dev).caps();
    auto bind = [&](const ir::Value* v, std::uint32_t slot, bool output) -> Status {
      KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
      slots[slot] = ex->Address(b);
      if (b.region >= 0) {
        ex->region_refs_[b.region].push_back({static_cast<std::uint32_t>(task.block), slot, b.offset});
      } else if (output && opts.check_bounds && !v->is_constant()) {
        for (auto& g : ex->guarded_) {
          if (g->data() == b.fixed) task.guarded_outputs.push_back(g.get());
        }
      }
      return Status::Ok();
    };
    for (int i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      device::TensorDesc d;
      if (v) {
        d = {v->dtype(), v->shape()};
        KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(i), false));
      }
      init.inputs.push_back(d);
      // A model input whose values decide shapes is read as the constant
      // this plan was specialized for (SpecializeGraph): the kernel takes
      // the path it takes for a constant target.
      // (After SpecializeGraph a value keeps a bound value only where it
      // is exact for this plan: shape inputs, copies of them, and shape
      // arithmetic kept because it writes a model output. Graphs that are
      // not specialized have none: see ir::Value::bound_value.)
      init.const_inputs.push_back(v && v->is_constant() ? v->constant().get()
                                  : v && v->bound_value() ? v->bound_value().get()
                                                          : nullptr);
    }
    for (int j = 0; j < node.num_outputs(); ++j) {
      const ir::Value* v = node.output(j);
      init.outputs.push_back({v->dtype(), v->shape()});
      KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(node.num_inputs() + j), true));
    }
    const bool is_if = node.op_type() == "If" && node.domain().empty();
    if (!is_if) {  // If is an executor construct: every device has it
      std::vector<DType> dtypes;
      for (const ir::Value* v : node.inputs()) dtypes.push_back(v ? v->dtype() : DType::kUndefined);
      device::Device& runs_on = task.on_host ? CpuDevice() : dev;
      if (!runs_on.SupportsNode(node, dtypes)) {
        return Error(StatusCode::kUnimplemented, node.Describe(), ": device '", runs_on.spec(), "' has no kernel for ",
                     node.domain().empty() ? "" : node.domain() + ".", node.op_type(),
                     task.on_host ? " (the node is placed on the CPU)" : "", " (the model was compiled for '",
                     opts.target, "'; load it on a device that has every kernel its target needs)");
      }
    }
    if (task.on_host) {  // the CPU kernel library reads weights in host memory
      for (int i = 0; i < node.num_inputs(); ++i) {
        const ir::Value* v = node.input(i);
        if (v && v->is_constant()) {
          KILN_ASSIGN_OR_RETURN(init.const_inputs[i], host_constant(v));
        }
      }
    }
    task.dyn = make_dynamic(node);
    if (task.dyn) KILN_RETURN_IF_ERROR(bind_values(*task.dyn, node));
    if (task.dyn) KILN_RETURN_IF_ERROR(refuse_recorded_dynamic(node, task.on_host));
    if (task.dyn) task.dyn->const_inputs = init.const_inputs;
    if (is_if) {
      KILN_ASSIGN_OR_RETURN(task.if_task, make_if(node));
      if (task.dyn) task.dyn->if_task = task.if_task.get();
    } else {
      // A small task's kernel is created, and later run, on one thread
      // (oneDNN fixes a primitive's parallelism when it is created).
      task.one_thread = !task.dyn && small_task_ns > 0 &&
                        (task.on_host || caps.launches_run_on_host) && SmallTask(node, small_task_ns, caps.int8_dot);
      if (task.one_thread) cpu::UseThreads(1);
      Status made = Status::Ok();
      // The static part of a model with symbolic dims: the kernel an earlier
      // plan made for this node, if any (StaticKernelCache).
      std::string static_key;
      // (Not a kernel that reads a range another task of this plan reports,
      // device::ValueRange: it holds that task's report.)
      bool reads_range = false;
      for (const ir::Value* v : node.inputs()) reads_range = reads_range || (v && ex->value_ranges_.count(v));
      if (!task.dyn && !reads_range && opts.static_kernels && &dev == &CpuDevice() &&
          opts.static_kernels->Eligible(node)) {
        static_key = StrCat(node.name(), "|", opts.threads, "|", opts.varying_shapes ? 1 : 0, "|",
                            task.one_thread ? 1 : 0);
        task.kernel = opts.static_kernels->Find(static_key);
      }
      const bool found = task.kernel != nullptr;
      if (found) {
        // made by an earlier plan
      } else if (task.on_host) {  // the CPU's kernel library, outside the device's op window
        auto k = CpuDevice().CreateKernel(init);
        if (k.ok()) task.kernel = std::move(k).value();
        else made = k.status();
      } else if (!task.dyn) {
        // Kernel preparation (weight prepacking) is a device operation: it may
        // read weights resident in device memory.
        made = dev.RunPrepare([&]() -> Status {
          KILN_ASSIGN_OR_RETURN(task.kernel, dev.CreateKernel(init));
          return Status::Ok();
        });
      }
      if (!found && made.ok() && task.kernel && !static_key.empty()) {
        opts.static_kernels->Put(static_key, task.kernel, opts.graph_keepalive);
      }
      if (task.one_thread) cpu::UseThreads(opts.threads);
      KILN_RETURN_IF_ERROR(made);
    }
    const std::size_t block_bytes = block.host.size() == 0 ? 1 : block.host.size();
    block.host_task = task.on_host;
    if (task.on_host) {  // read by a host launch: pinned host memory
      KILN_ASSIGN_OR_RETURN(void* bhost, dev.Allocate(block_bytes, device::MemoryKind::kPinnedHost));
      ex->allocations_.push_back(bhost);
      block.dev = static_cast<std::uint8_t*>(bhost);
    } else {
      KILN_ASSIGN_OR_RETURN(void* bdev, ex->Alloc(block_bytes));
      block.dev = static_cast<std::uint8_t*>(bdev);
    }
    KILN_RETURN_IF_ERROR(stream.Copy(block.dev, block.host.data(), block.host.size(),
                                     task.on_host ? device::CopyKind::kHostToHost : device::CopyKind::kHostToDevice));
    ex->blocks_.push_back(std::move(block));
    ex->tasks_.push_back(std::move(task));
  }

  // One workspace per memory kind, as large as the largest task's need.
  for (const Task& t : ex->tasks_) {
    if (!t.kernel) continue;
    std::size_t& need = t.on_host ? ex->host_workspace_bytes_ : ex->workspace_bytes_;
    need = std::max(need, t.kernel->workspace_bytes());
  }
  if (ex->workspace_bytes_ > 0) {
    auto w = ex->Alloc(ex->workspace_bytes_);
    if (!w.ok()) return w.status().WithContext("kernel workspace");
    ex->workspace_ = w.value();
  }
  if (ex->host_workspace_bytes_ > 0) {
    KILN_ASSIGN_OR_RETURN(ex->host_workspace_, dev.Allocate(ex->host_workspace_bytes_, device::MemoryKind::kPinnedHost));
    ex->allocations_.push_back(ex->host_workspace_);
  }

  // Record the task list once; runs replay it.
  ex->profile_ = opts.profile;
  for (Task& t : ex->tasks_) {
    if (t.block < 0 || t.on_host || !t.kernel || !t.kernel->reads_host_addresses()) continue;
    t.host_args = reinterpret_cast<void* const*>(ex->blocks_[t.block].host.data());  // the blocks are final now
    if (!caps.launches_run_on_host) {
      ex->block_holds_addresses_.resize(ex->blocks_.size(), false);
      ex->block_holds_addresses_[t.block] = true;
    }
  }
  KILN_RETURN_IF_ERROR(ex->Record(stream));
  // The uploads and initial block copies are done before the first run.
  KILN_RETURN_IF_ERROR(stream.Synchronize().WithContext(StrCat("preparing on device '", dev.spec(), "'")));
  return ex;
}

Status Executor::Record(device::Stream& stream) {
  device::Device& dev = *device_;
  const device::Capabilities& caps = dev.caps();
  std::size_t launches = 0;
  KILN_RETURN_IF_ERROR(stream.BeginCapture());
  device::ExecContext ctx0{&dev, &stream, 1};
  if (!caps.launches_run_on_host) {
    // Device work is recorded with the addresses it is given now (cuda):
    // the executor's workspace, the one every replay passes.
    ctx0.workspace = workspace_;
    ctx0.workspace_bytes = workspace_bytes_;
  }
  // Where launches only queue device work (cuda), the thread count must be
  // set where the CPU-placed tasks run: a host task in stream order.
  Status rec_st = caps.launches_run_on_host ? stream.Launch(LaunchSetThreads, nullptr, nullptr, ctx0)
                                            : stream.LaunchHost(LaunchSetThreads, nullptr, nullptr, ctx0);
  for (Task& t : tasks_) {
    if (!rec_st.ok()) break;
    if (t.custom) {
      rec_st = stream.Replay(*t.custom, ctx0);
      launches += t.custom->size();
    } else {
      void* args = t.block >= 0 ? blocks_[t.block].dev : nullptr;
      device::LaunchFn fn = t.dyn                        ? LaunchDynamicTask
                            : t.if_task                  ? LaunchIfTask
                            : !t.guarded_outputs.empty() ? LaunchGuardedTask
                            : t.on_host                  ? LaunchHostKernelTask
                                                         : LaunchKernelTask;
      if (profile_ && t.node && !(t.dyn && t.dyn->alias)) {
        t.timed = fn;
        fn = LaunchTimedTask;
      }
      rec_st = t.on_host ? stream.LaunchHost(fn, &t, args, ctx0) : stream.Launch(fn, &t, args, ctx0);
      ++launches;
    }
    if (!rec_st.ok()) break;
  }
  auto rec = stream.EndCapture();
  KILN_RETURN_IF_ERROR(rec_st);
  if (!rec.ok()) return rec.status();
  recording_ = std::move(rec).value();
  num_launches_ = launches;
  return Status::Ok();
}

Status Executor::RecordAgainIfNeeded(device::Stream& stream) {
  if (!record_again_) return Status::Ok();
  std::unique_ptr<device::Recording> old = std::move(recording_);
  Status st = Record(stream);
  if (!st.ok()) {
    recording_ = std::move(old);  // record again next run
    return st.WithContext("recording the task list again for moved buffers");
  }
  retired_recordings_.push_back(std::move(old));
  record_again_ = false;
  return Status::Ok();
}

Status Executor::Refresh(const std::vector<void*>& io, std::uint64_t* refreshed) {
  std::vector<int> changed;
  for (std::size_t i = 0; i < io.size(); ++i) {
    const int r = plan::kRegionIoBase + static_cast<int>(i);
    auto* base = static_cast<std::uint8_t*>(io[i]);
    if (bases_[r] == base) continue;
    bases_[r] = base;
    changed.push_back(r);
    for (const SlotRef& s : region_refs_[r]) {
      ArgBlock& b = blocks_[s.block];
      reinterpret_cast<void**>(b.host.data())[s.index] = base + s.offset;
      b.dirty = true;
      ++*refreshed;
      if (!block_holds_addresses_.empty() && block_holds_addresses_[s.block]) record_again_ = true;
    }
  }
  if (changed.empty() || custom_.empty()) return Status::Ok();
  for (CustomNode& cn : custom_) {
    bool touched = false;
    for (int r : changed) touched |= cn.regions.count(r) != 0;
    if (!touched) continue;
    Status st;
    if (!cn.op->updater) {
      st = Error(StatusCode::kInternal, "custom op ", cn.node->Describe(),
                 " is not refreshable (no ArgsUpdater) but reads or writes a model input/output directly");
    } else {
      std::vector<void*> in, out;
      for (const Binding& b : cn.inputs) in.push_back(Address(b));
      for (const Binding& b : cn.outputs) out.push_back(Address(b));
      UpdaterCtx ctx(blocks_, cn, std::move(in), std::move(out));
      st = cn.op->updater->UpdateHostArgs(ctx);
      if (!st.ok()) st = st.WithContext(StrCat("custom op ", cn.node->Describe(), ": UpdateHostArgs failed"));
    }
    if (!st.ok()) {
      for (int r : changed) bases_[r] = nullptr;  // the next run refreshes again
      return st;
    }
    for (int b : cn.blocks) blocks_[b].dirty = true;
    *refreshed += cn.blocks.size();
  }
  return Status::Ok();
}

Status Executor::QueueBlockCopies(device::Stream& stream) {
  for (ArgBlock& b : blocks_) {
    if (!b.dirty) continue;
    // Host -> device copies take the bytes now: a later refresh cannot leak
    // into this run, and a run in flight keeps its device copy until the
    // stream reaches this copy.
    Status st = stream.Copy(b.dev, b.host.data(), b.host.size(),
                            b.host_task ? device::CopyKind::kHostToHost : device::CopyKind::kHostToDevice);
    if (!st.ok()) return st;
    b.dirty = false;
  }
  return Status::Ok();
}

Shape Executor::ValueShape(const ir::Value* v) const {
  auto it = shape_ids_.find(v);
  return it == shape_ids_.end() ? v->shape() : shapes_[it->second];
}

Status Executor::SetInputShapes(const std::vector<Shape>& shapes) {
  for (std::size_t i = 0; i < shapes.size() && i < graph_->inputs().size(); ++i) {
    const ir::Value* v = graph_->inputs()[i];
    if (shapes[i] == v->shape()) {
      auto it = shape_ids_.find(v);
      if (it != shape_ids_.end()) shapes_[it->second] = shapes[i];
      continue;
    }
    const std::int64_t n = NumElements(shapes[i]);
    if (!v->is_dynamic() || shapes[i].size() != v->shape().size() || n < 0 || n > NumElements(v->shape())) {
      return Error(StatusCode::kInvalidArgument, "input '", v->name(), "' has shape ", ShapeToString(shapes[i]),
                   ", expected ", ShapeToString(v->shape(), v->dynamic_mask()));
    }
    auto it = shape_ids_.find(v);
    if (it != shape_ids_.end()) shapes_[it->second] = shapes[i];
  }
  return Status::Ok();
}

Status Executor::RunNested(const std::vector<void*>& io, const device::ExecContext& ctx) {
  std::uint64_t refreshed = 0;
  KILN_RETURN_IF_ERROR(Refresh(io, &refreshed));
  // Inside a launch on a device whose launches run on the host: its memory
  // is accessible, so changed blocks are copied directly.
  for (ArgBlock& b : blocks_) {
    if (!b.dirty) continue;
    std::memcpy(b.dev, b.host.data(), b.host.size());
    b.dirty = false;
  }
  const auto* rec = dynamic_cast<const device::HostRecording*>(recording_.get());
  if (!rec) return Error(StatusCode::kInternal, "a nested list was not recorded on a host-run device");
  device::ExecContext c = ctx;  // this (child) executor's workspace
  c.workspace = workspace_;
  c.workspace_bytes = workspace_bytes_;
  return device::ReplayHostRecording(*rec, c);
}

Status Executor::RunIf(Task& t, void* const* slots, const device::ExecContext& ctx, const Shape* in_shapes,
                       Shape* out_shapes) {
  IfTask& it = *t.if_task;
  const bool cond = *static_cast<const std::uint8_t*>(slots[0]) != 0;
  const std::size_t n_cap = static_cast<std::size_t>(t.num_inputs) - 1;
  for (std::size_t i = 0; i < n_cap; ++i) it.io[i] = slots[i + 1];
  for (std::size_t j = n_cap; j < it.io.size(); ++j) it.io[j] = slots[t.num_inputs + (j - n_cap)];
  const int b = cond ? 0 : 1;
  const char* name = cond ? "then_branch" : "else_branch";
  if (!it.children[b]) {  // a constant condition: never
    return Error(StatusCode::kInternal, t.node->Describe(), ": ", name, " was not planned");
  }
  Executor& child = *it.children[b];
  if (in_shapes) {  // data-dependent captured values: tell the branch their extents
    std::vector<Shape> shapes(in_shapes + 1, in_shapes + t.num_inputs);
    Status st = child.SetInputShapes(shapes);
    if (!st.ok()) return st.WithContext(StrCat(t.node->Describe(), " ", name));
  }
  Status st = child.RunNested(it.io, ctx);
  if (!st.ok()) {
    // Provisional bounds the branch found too small (its own values, or
    // captured ones by the name they have here) go up to the model.
    std::map<std::string, HostTensorPtr> raised = child.TakeBoundRaises();
    if (!raised.empty()) {
      const std::vector<ir::Value*>& gin = it.graphs[b]->inputs();
      std::lock_guard<std::mutex> lock(raises_mu_);
      for (auto& [vname, bound] : raised) {
        std::string key = vname;
        for (std::size_t i = 0; i < gin.size(); ++i) {
          if (gin[i]->name() == vname && t.node->input(static_cast<int>(i) + 1)) {
            key = t.node->input(static_cast<int>(i) + 1)->name();
          }
        }
        raises_[key] = bound;
      }
    }
    return st.WithContext(StrCat(t.node->Describe(), " ", name));
  }
  if (out_shapes) {
    for (std::size_t j = 0; j < it.graphs[b]->outputs().size(); ++j) {
      out_shapes[j] = child.ValueShape(it.graphs[b]->outputs()[j]);
    }
  }
  return Status::Ok();
}

Status Executor::RunDynamic(Task& t, const device::ExecContext& ctx) {
  DynamicTask& d = *t.dyn;
  ir::Node& c = *d.clone;
  std::vector<Shape> key;
  for (int i = 0; i < c.num_inputs(); ++i) {
    ir::Value* v = c.input(i);
    if (!v) {
      key.emplace_back();
      continue;
    }
    if (d.in_ids[i] >= 0) v->set_shape(shapes_[d.in_ids[i]]);
    key.push_back(v->shape());
  }
  // Values this run computed that decide shapes (small integer tensors, in
  // memory the host reads during a launch on a host-run device): constants
  // of the clone for its inference, and part of the key (as extra "shapes").
  for (std::size_t k = 0; k < d.value_inputs.size(); ++k) {
    const int i = d.value_inputs[k];
    ir::Value* v = c.input(i);
    const void* src = Address(d.value_bindings[k]);
    auto val = std::make_shared<HostTensor>(v->dtype(), v->shape());
    if (val->nbytes() > 0) {
      if (!src) return Error(StatusCode::kInternal, t.node->Describe(), ": input ", i, " has no address");
      std::memcpy(val->mutable_data(), src, val->nbytes());
    }
    key.push_back(val->ToInt64Vector());
    if (const HostTensorPtr& pb = d.provisional[k]) {
      // Above its provisional bound: the plan is too small. The model raises
      // the bound and runs again (TakeBoundRaises). Reshape's target is
      // bounded by the output dims it resolves to.
      std::vector<std::int64_t> got = key.back();
      if (c.op_type() == "Reshape" && c.domain().empty() && i == 1 && c.input(0)) {
        auto dims = ops::ReshapeTarget(c.input(0)->shape(), got, c.GetInt("allowzero", 0) != 0);
        if (!dims.ok()) return Error(StatusCode::kInvalidArgument, t.node->Describe(), ": ", dims.status().message());
        got = dims.value();
      }
      const std::vector<std::int64_t> had = pb->ToInt64Vector();
      bool above = false;
      for (std::size_t e = 0; e < got.size() && e < had.size(); ++e) above = above || got[e] > had[e];
      if (above) {
        const std::int64_t most = pb->dtype() == DType::kInt32 ? std::numeric_limits<std::int32_t>::max()
                                                               : std::numeric_limits<std::int64_t>::max();
        auto raised = std::make_shared<HostTensor>(pb->dtype(), pb->shape());
        for (std::size_t e = 0; e < had.size(); ++e) {
          std::int64_t b = had[e];
          if (e < got.size() && got[e] > b) {
            b = got[e];
            if (had.size() == 1) b = std::max(b, had[e] > most / 2 ? most : 2 * had[e]);
          }
          if (pb->dtype() == DType::kInt32) raised->mutable_data_as<std::int32_t>()[e] = static_cast<std::int32_t>(b);
          else raised->mutable_data_as<std::int64_t>()[e] = b;
        }
        {
          std::lock_guard<std::mutex> lock(raises_mu_);
          raises_[d.value_names[k]] = raised;
        }
        return Error(StatusCode::kOutOfRange, t.node->Describe(), ": input ", i, " '", d.value_names[k], "' is ",
                     ValuesText(*val), " in this run",
                     got != key.back() ? StrCat(" (output dims ", ShapeToString(got), ")") : std::string(),
                     ", above the provisional bound ", ValuesText(*pb), " its plan was made for");
      }
    }
    v->set_constant(val);
    d.values[k] = std::move(val);
  }
  std::vector<Shape> outs = d.out_static;  // If: its branch reports the extents
  if (!d.self_shaped) {
    if (d.have_last && d.last_in == key) {
      outs = d.last_inferred;
    } else {
      d.have_last = false;
      Status st = ops::InferNodeShapesOnly(c);
      if (!st.ok()) return st.WithContext(StrCat("at run time, with input shapes from data-dependent extents"));
      for (std::size_t j = 0; j < outs.size(); ++j) outs[j] = c.output(static_cast<int>(j))->shape();
      d.last_in = key;
      d.last_inferred = outs;
      d.have_last = true;
    }
  }
  // Outputs that are all empty need no kernel (oneDNN rejects some empty
  // problems, e.g. a Gemm with M = 0): zero detections is a normal run.
  bool all_empty = !outs.empty();
  for (const Shape& s : outs) all_empty &= NumElements(s) == 0;
  auto check = [&](const std::vector<Shape>& shapes) -> Status {
    for (std::size_t j = 0; j < shapes.size(); ++j) {
      const ir::Value* o = c.output(static_cast<int>(j));
      const std::int64_t n = NumElements(shapes[j]);
      if (n < 0 || static_cast<std::uint64_t>(n) * DTypeSize(o->dtype()) > d.out_bound_bytes[j]) {
        return Error(StatusCode::kOutOfRange, t.node->Describe(), ": output '", o->name(), "' has run-time shape ",
                     ShapeToString(shapes[j]), ", larger than its planned bound ",
                     ShapeToString(d.out_static[j], d.out_masks[j]));
      }
      if (d.out_masks[j] == 0 && shapes[j] != d.out_static[j]) {
        std::string ins;
        for (const Shape& s : key) ins += (ins.empty() ? "" : ", ") + ShapeToString(s);
        return Error(StatusCode::kInternal, t.node->Describe(), ": output '", o->name(), "' has run-time shape ",
                     ShapeToString(shapes[j]), " for input shapes ", ins, ", but Kiln's compile-time analysis of ",
                     "data-dependent extents judged it static ", ShapeToString(d.out_static[j]),
                     " (a limitation of that analysis; please report it with the model)");
      }
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(check(outs));
  if (!d.alias && !all_empty) {
    void* const* slots = reinterpret_cast<void* const*>(blocks_[t.block].dev);
    if (d.if_task) {
      KILN_RETURN_IF_ERROR(RunIf(t, slots, ctx, key.data(), outs.data()));
    } else {
      auto it = d.kernels.find(key);
      if (it == d.kernels.end()) {
        device::KernelInit init;
        init.node = &c;
        for (int i = 0; i < c.num_inputs(); ++i) {
          const ir::Value* v = c.input(i);
          init.inputs.push_back(v ? device::TensorDesc{v->dtype(), v->shape()} : device::TensorDesc{});
        }
        init.const_inputs = d.const_inputs;
        for (std::size_t k = 0; k < d.value_inputs.size(); ++k) {  // this run's (the kernel reads them at run)
          init.const_inputs[d.value_inputs[k]] = d.values[k].get();
        }
        init.varying_shapes = true;  // one kernel per extents the data gives
        init.caps = &(t.on_host ? CpuDevice() : *device_).caps();
        for (std::size_t j = 0; j < outs.size(); ++j) init.outputs.push_back({c.output(static_cast<int>(j))->dtype(), outs[j]});
        // Inside this task's launch: a device operation for the device's
        // tasks, host work for CPU-placed ones.
        auto k = (t.on_host ? CpuDevice() : *device_).CreateKernel(init);
        if (!k.ok()) return k.status().WithContext(StrCat(t.node->Describe(), " at run time"));
        if (d.kernels.size() >= 16) {  // shapes keep changing: bound the cache
          d.kernels.clear();
          d.kernel_values.clear();
        }
        it = d.kernels.emplace(key, std::move(k).value()).first;
        if (!d.values.empty()) d.kernel_values[key] = d.values;  // a kernel may keep pointers to them
      }
      device::KernelArgs args{slots, t.num_inputs, outs.data(), key.data()};
      args.ctx = &ctx;
      if (Status st = it->second->Run(args); !st.ok()) return st.WithContext(t.node->Describe());
    }
    KILN_RETURN_IF_ERROR(check(outs));
  }
  for (std::size_t j = 0; j < outs.size(); ++j) {
    if (d.out_ids[j] >= 0) shapes_[d.out_ids[j]] = outs[j];
  }
  return Status::Ok();
}

namespace {
Status QueueIo(device::Stream& s, const std::vector<IoCopy>& copies, device::CopyKind kind) {
  for (const IoCopy& c : copies) KILN_RETURN_IF_ERROR(s.Copy(c.dst, c.src, c.bytes, kind));
  return Status::Ok();
}
}  // namespace

Status Executor::Run(const std::vector<void*>& io, ExecutionStats* stats, int threads, const IoCopies* copies) {
  std::uint64_t refreshed = 0;
  KILN_RETURN_IF_ERROR(Refresh(io, &refreshed));
  device::Stream& stream = *stream_;
  KILN_RETURN_IF_ERROR(QueueBlockCopies(stream));
  KILN_RETURN_IF_ERROR(RecordAgainIfNeeded(stream));
  const device::ExecContext ctx{device_, &stream, threads, workspace_, workspace_bytes_};
  Status st = copies ? QueueIo(stream, copies->in, device::CopyKind::kHostToDevice) : Status::Ok();
  if (st.ok()) st = stream.Replay(*recording_, ctx);
  if (st.ok() && copies) st = QueueIo(stream, copies->out, device::CopyKind::kDeviceToHost);
  Status sync = stream.Synchronize();
  retired_recordings_.clear();  // nothing queued can use them now
  KILN_RETURN_IF_ERROR(st);
  KILN_RETURN_IF_ERROR(sync);
  if (stats) {
    stats->tasks_run = num_launches_;
    stats->slots_refreshed = refreshed;
  }
  return Status::Ok();
}

Status Executor::Enqueue(device::Stream& stream, const std::vector<void*>& io, ExecutionStats* stats,
                         std::shared_ptr<const void> keepalive, int threads, const IoCopies* copies) {
  if (&stream.device() != device_) {
    return Error(StatusCode::kInvalidArgument, "the stream is on device '", stream.device().spec(),
                 "' but the model was loaded on '", device_->spec(), "'");
  }
  std::uint64_t refreshed = 0;
  KILN_RETURN_IF_ERROR(Refresh(io, &refreshed));
  KILN_RETURN_IF_ERROR(QueueBlockCopies(stream));
  KILN_RETURN_IF_ERROR(RecordAgainIfNeeded(stream));
  const device::ExecContext ctx{device_, &stream, threads, workspace_, workspace_bytes_};
  if (copies) KILN_RETURN_IF_ERROR(QueueIo(stream, copies->in, device::CopyKind::kHostToDevice));
  KILN_RETURN_IF_ERROR(stream.Replay(*recording_, ctx));
  if (copies) KILN_RETURN_IF_ERROR(QueueIo(stream, copies->out, device::CopyKind::kDeviceToHost));
  // The queued work holds `keepalive` (the model owning this executor): a
  // model destroyed while this is queued lives on until the work is done.
  // Recordings replaced by a new one (RecordAgainIfNeeded) go with it: work
  // queued before on this stream may still replay them.
  std::shared_ptr<std::vector<std::unique_ptr<device::Recording>>> retired;
  if (!retired_recordings_.empty()) {
    retired = std::make_shared<std::vector<std::unique_ptr<device::Recording>>>(std::move(retired_recordings_));
    retired_recordings_.clear();
  }
  KILN_RETURN_IF_ERROR(
      stream.HostFunc([keep = std::move(keepalive), retired = std::move(retired)]() { return Status::Ok(); }));
  if (stats) {
    stats->tasks_run = num_launches_;
    stats->slots_refreshed = refreshed;
  }
  return Status::Ok();
}

namespace {
// An If in a graph being specialized: each branch it may take gets the
// shapes (and, for shape arithmetic, the values) of the If's captured
// inputs and is specialized in turn. A condition the specialization knows
// (computed from shapes) leaves the other branch as compiled: it never runs
// in this plan, and its nodes may not even admit these shapes.
Status SpecializeBranches(ir::Node& n) {
  const ir::Value* c = n.input(0);
  const HostTensor* cond = !c ? nullptr : c->is_constant() ? c->constant().get() : c->bound_value().get();
  const int taken = cond && cond->numel() == 1 && cond->dtype() == DType::kBool
                        ? (*static_cast<const std::uint8_t*>(cond->data()) ? 0 : 1)
                        : -1;
  for (int b = 0; b < 2; ++b) {
    const char* name = b == 0 ? "then_branch" : "else_branch";
    ir::Attribute* a = n.FindAttr(name) ? &n.attrs()[name] : nullptr;
    if (!a || !a->g || (taken >= 0 && taken != b)) continue;
    ir::Graph& g = *a->g;
    if (g.inputs().size() + 1 != static_cast<std::size_t>(n.num_inputs())) continue;  // InferIf names it
    for (std::size_t i = 0; i < g.inputs().size(); ++i) {
      const ir::Value* in = n.input(static_cast<int>(i) + 1);
      ir::Value* gi = g.inputs()[i];
      if (!in || in->dtype() != gi->dtype()) continue;  // InferIf names it
      gi->set_shape(in->shape());
      gi->set_dynamic_mask(in->dynamic_mask());
      gi->set_bound_value(in->is_constant() ? in->constant() : in->bound_value());
      ops::PassUpperBound(*in, *gi);
    }
    KILN_RETURN_IF_ERROR(SpecializeGraph(g).WithContext(StrCat(n.Describe(), " attribute '", name, "'")));
  }
  return Status::Ok();
}
}  // namespace

// (executor.h)
std::string ValuesText(const HostTensor& t) {
  std::string s = "[";
  const std::int64_t n = std::min<std::int64_t>(t.numel(), 16);
  const std::vector<std::int64_t> ints =
      t.dtype() == DType::kInt64 || t.dtype() == DType::kInt32 ? t.ToInt64Vector() : std::vector<std::int64_t>{};
  for (std::int64_t i = 0; i < n; ++i) {
    s += i ? ", " : "";
    if (t.dtype() == DType::kFloat32) s += StrCat(t.data_as<float>()[i]);
    else if (t.dtype() == DType::kFloat64) s += StrCat(t.data_as<double>()[i]);
    else if (static_cast<std::size_t>(i) < ints.size()) s += StrCat(ints[i]);
  }
  return s + (t.numel() > n ? ", ...]" : "]");
}

namespace {
// Whether `g`, or a graph nested in it, holds a value with a provisional bound.
bool HoldsProvisional(const ir::Graph& g) {
  bool any = false;
  ir::ForEachGraph(g, [&any](const ir::Graph& x) {
    for (const auto& v : x.values()) any = any || v->bound_provisional();
  });
  return any;
}
}  // namespace

std::set<const ir::Value*> ProvisionallyBounded(const ir::Graph& g) {
  std::set<const ir::Value*> out;
  for (const auto& n : g.nodes()) {
    bool from = false;
    for (const ir::Value* in : n->inputs()) from = from || (in && (in->bound_provisional() || out.count(in)));
    // An If whose branches plan for a provisional bound: its outputs too.
    for (const auto& [k, a] : n->attrs()) from = from || (a.g && HoldsProvisional(*a.g));
    for (const ir::Value* o : n->outputs()) {
      if (from && o) out.insert(o);
    }
  }
  return out;
}

std::map<std::string, HostTensorPtr> Executor::TakeBoundRaises() {
  std::lock_guard<std::mutex> lock(raises_mu_);
  std::map<std::string, HostTensorPtr> r;
  r.swap(raises_);
  return r;
}

// (executor.h)
Status SpecializeGraph(ir::Graph& g) {
  // Every extent is concrete here: no symbolic dims to track, and the
  // values the compiler (or loader) computed at the probe are stale.
  // A branch's inputs keep the values its If passed (shape arithmetic).
  const bool branch = g.parent() != nullptr;
  for (auto& v : g.values()) {
    v->set_symbolic_mask(0);
    if (!v->is_constant() && !((v->shape_input() || branch) && g.IsGraphInput(v.get()))) v->set_bound_value(nullptr);
  }
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  std::vector<ir::Node*> folded;
  for (ir::Node* n : nodes) {
    if (n->op_type() == "If" && n->domain().empty()) KILN_RETURN_IF_ERROR(SpecializeBranches(*n));
    KILN_RETURN_IF_ERROR(ops::InferNodeConcrete(*n));
    KILN_RETURN_IF_ERROR(cpu::EvalUpperBound(*n, cpu::kBoundValueLimit).status());
    for (const ir::Value* o : n->outputs()) {
      if (o && !IsStatic(o->shape())) {
        std::string given;
        for (const ir::Value* in : g.inputs()) {
          if (in->shape_input()) given += StrCat(given.empty() ? "" : ", ", "'", in->name(), "'");
        }
        return Error(StatusCode::kInvalidArgument, n->Describe(), ": the shape of output '", o->name(), "' ",
                     ShapeToString(o->shape()), " is still unknown",
                     given.empty() ? std::string() : " (it depends on the values of model input(s) " + given + ")");
      }
    }
    if ((ir::IsCopyToHost(*n) || ir::IsCopyFromHost(*n)) && n->input(0) && !n->input(0)->is_constant() &&
        n->input(0)->bound_value()) {
      n->output(0)->set_bound_value(n->input(0)->bound_value());  // a shape input moved across devices
      continue;
    }
    KILN_ASSIGN_OR_RETURN(bool bound, cpu::EvalBound(*n, cpu::kBoundValueLimit));
    if (!bound) continue;
    bool output = false;
    for (const ir::Value* o : n->outputs()) output = output || g.IsGraphOutput(o);
    if (!output) folded.push_back(n);
  }
  for (ir::Node* n : folded) {
    std::vector<ir::Value*> outs = n->outputs();
    g.RemoveNode(n);
    for (ir::Value* o : outs) o->set_constant(o->bound_value());
  }
  return Status::Ok();
}

}  // namespace kiln::runtime
