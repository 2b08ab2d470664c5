// The executor: records a compiled graph's task list once ("sinking"), then
// replays it per execution.
//
// Each task is a built-in kernel or a custom op's recorded launch, with an
// argument block. Every block has a host copy (rewritten by address refresh)
// and a device copy (read by the kernels). Everything the kernels touch (the
// arena, I/O stand-ins, argument blocks, workspaces, constants where the
// device cannot use host memory) is allocated through the device, and the
// task list is recorded once through a device stream (Launch per task,
// BeginCapture/EndCapture) and replayed as a unit; the executor never reads
// device memory itself except inside a launch on a device whose launches run
// on the host. Nodes the compiler placed on the CPU (the target lacks
// their kernel) run as host launches in stream order, on values in a host
// arena (pinned host memory); the placement copies around them are ordinary
// device tasks. `If` is an executor construct: a task that selects one of two
// child executors (recorded lists) by its condition. Built-in blocks are arrays of
// pointers whose slots are declared: fixed (constants) or (region, offset)
// for the arena and the caller's input/output buffers. Per run, the bound
// addresses are compared with the last run's; only the slots of regions that
// moved are rewritten, custom ops touching moved buffers update their own
// blocks through ArgsUpdater, and changed blocks are copied host -> device
// (on the stream, as a task, for asynchronous runs), then the list replays.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/cpu/kernel.h"
#include "common/status.h"
#include "device/device.h"
#include "device/kernel.h"
#include "custom/registry.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "device/host_stream.h"
#include "plan/memory_plan.h"

namespace kiln::runtime {

// A separately allocated tensor framed by guard bytes (check_bounds mode).
struct GuardedBuffer {
  std::uint8_t* bytes = nullptr;  // device memory: kGuard + size + kGuard
  std::uint64_t size = 0;
  std::string name;
  std::uint8_t* data() { return bytes + kGuard; }
  static constexpr std::uint64_t kGuard = 64;
  static constexpr std::uint8_t kPattern = 0xA5;
};

struct ArgBlock {
  std::vector<std::uint8_t> host;  // rewritten by refresh / UpdateHostArgs
  std::uint8_t* dev = nullptr;     // device copy: what kernels read
  bool dirty = false;
  bool host_task = false;          // a CPU-placed task's: `dev` is pinned host memory
};

class Executor;

// An If node: both branches recorded as child executors on the same device.
struct IfTask {
  std::shared_ptr<ir::Graph> graphs[2];  // kept alive for the children
  plan::MemoryPlan plans[2];
  std::unique_ptr<Executor> children[2];
  std::vector<void*> io;  // scratch: the branch's I/O addresses
};

// Where a tensor lives: fixed address, or (region, offset).
struct Binding {
  int region = -1;  // -1: fixed
  std::uint64_t offset = 0;
  void* fixed = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::uint64_t bytes = 0;
};

// A node fed or producing data-dependent extents: its shapes are inferred
// per run from the actual input shapes (on a private copy of the node), its
// kernel is created for those shapes on first sight and cached.
struct DynamicTask {
  std::unique_ptr<ir::Graph> scratch;  // owns `clone`
  ir::Node* clone = nullptr;
  std::vector<int> in_ids, out_ids;    // Executor::shapes_ index; -1: static or absent
  std::vector<std::uint64_t> out_bound_bytes;  // planned (upper-bound) bytes
  std::vector<Shape> out_static;       // compiled shapes of outputs with static extents
  std::vector<std::uint64_t> out_masks;
  std::vector<const HostTensor*> const_inputs;  // as the kernel reads them (host copies for CPU-placed nodes)
  // Inputs whose values, computed by this run, decide the output shapes
  // (ir::Value::value_upper_bound): read from memory before inference, and
  // part of the kernel key. `values` holds each run's copies.
  std::vector<int> value_inputs;
  std::vector<Binding> value_bindings;  // where each lives (a view task has no argument block)
  std::vector<HostTensorPtr> values;
  // By value input: its provisional bound (ir::Value::bound_provisional),
  // else null; and the value's name (the model raises it by name).
  std::vector<HostTensorPtr> provisional;
  std::vector<std::string> value_names;
  std::map<std::vector<Shape>, std::vector<HostTensorPtr>> kernel_values;  // what each kernel was made with
  bool alias = false;                  // a view: shapes only, no kernel
  bool self_shaped = false;            // If: one kernel for all shapes; it reports its outputs' extents
  std::map<std::vector<Shape>, std::unique_ptr<device::Kernel>> kernels;  // by input shapes
  IfTask* if_task = nullptr;           // self-shaped If: the task's branches
  // The last run's input shapes and inferred output shapes: the same inputs
  // skip inference (the common case: extents that repeat).
  std::vector<Shape> last_in, last_inferred;
  bool have_last = false;
};

// A task's estimated time on one thread, in ns, from its static shapes
// (bytes moved, per-element work, multiply-adds; executor.cc has the model).
// `int8_dot`: the device's device::Capabilities::int8_dot (8-bit
// multiply-adds cost about four times more without it).
double TaskCostNs(const ir::Node& node, bool int8_dot = true);
// A small tensor's values for messages: "[4, 2, 3]" (the first 16).
std::string ValuesText(const HostTensor& t);
// The values of an inferred graph (nodes in topological order) computed
// from a value with a provisional bound (ir::Value::bound_provisional):
// their data-dependent extents have no bound known before a run (an If's
// outputs too where a branch plans for such a bound).
std::set<const ir::Value*> ProvisionallyBounded(const ir::Graph& g);
// Whether `node` is small enough to run on one kernel thread when the model
// runs on several: all its operands of static shape and its estimated time
// under $KILN_SMALL_TASK_US (default 12 us; 0 or "off": never), read once per
// Executor::Create (SmallTaskNs). Split over two threads, such a task runs no
// faster: the fork and join cost what the second thread saves. Only tasks
// whose launches run on the host (the CPU's kernels) use it.
double SmallTaskNs();
bool SmallTask(const ir::Node& node, double limit_ns = SmallTaskNs(), bool int8_dot = true);

struct Task {
  Executor* exec = nullptr;
  std::unique_ptr<DynamicTask> dyn;     // data-dependent shapes (else null)
  std::shared_ptr<device::Kernel> kernel;  // built-in (shared with other plans: StaticKernelCache)
  std::unique_ptr<IfTask> if_task;      // If (executor construct)
  std::unique_ptr<device::Recording> custom;  // a custom op's recorded launches
  int block = -1;                       // built-in argument block
  int num_inputs = 0;
  // The block's host mirror, for a kernel that reads host addresses
  // (Kernel::reads_host_addresses); else null, as KernelArgs::host_ptrs.
  void* const* host_args = nullptr;
  bool on_host = false;                 // placed on the CPU (ir::kPlaceAttr): a host launch
  bool one_thread = false;              // small operands: runs on one kernel thread (SmallTask)
  device::LaunchFn timed = nullptr;     // profiling: the launch function the timer wraps
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // profiling: (start, duration) ns per run
  const ir::Node* node = nullptr;
  std::vector<GuardedBuffer*> guarded_outputs;  // check_bounds mode only
};

struct CustomNode {
  const ir::Node* node = nullptr;
  const custom::Registered* op = nullptr;
  std::vector<int> blocks;  // registered by Execute, in order
  std::vector<Binding> inputs, outputs;
  std::set<int> regions;    // input/output regions it touches
};

struct SlotRef {
  std::uint32_t block;
  std::uint32_t index;  // pointer index in the block
  std::uint64_t offset;
};

// Copies around a run between the caller's host buffers and the I/O
// stand-ins, for a device that cannot use host memory.
struct IoCopy {
  void* dst;
  const void* src;
  std::size_t bytes;
};
struct IoCopies {
  std::vector<IoCopy> in;   // host -> device, before the run
  std::vector<IoCopy> out;  // device -> host, after it
};

// Kernels of the static part of a model with symbolic dims: nodes whose
// inputs and outputs have the same shapes in every plan (no symbolic or
// data-dependent dim) and whose inputs are constants or values no shape
// arithmetic decides. The first plan that needs such a kernel makes it;
// later plans (other signatures) use the same kernel, as a static model
// would. Plans of one model never run at the same time (a Model runs one
// Execute at a time; queued runs run in order on its stream), so sharing a
// kernel is sharing it in turn. An entry keeps what the kernel may point
// into (the graph of the plan that made it: nodes, constants) alive.
class StaticKernelCache {
 public:
  // The model's top-level nodes that qualify, by name: per input, the
  // constant it reads in the model's graph (null: not a constant).
  using Nodes = std::unordered_map<std::string, std::vector<const HostTensor*>>;
  explicit StaticKernelCache(Nodes nodes) : nodes_(std::move(nodes)) {}
  // Whether a plan's node may take (or give) the shared kernel: it
  // qualifies, and in this plan it reads the same constants and no value
  // the plan made a constant or reads as one.
  bool Eligible(const ir::Node& node) const;
  std::shared_ptr<device::Kernel> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    ++shared_;
    return it->second.kernel;
  }
  void Put(const std::string& key, std::shared_ptr<device::Kernel> k, std::shared_ptr<const void> keepalive) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[key] = {std::move(keepalive), std::move(k)};
    ++made_;
  }
  std::uint64_t made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }
  std::uint64_t shared() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shared_;
  }

 private:
  struct Entry {
    std::shared_ptr<const void> keepalive;  // declared first: outlives the kernel
    std::shared_ptr<device::Kernel> kernel;
  };
  const Nodes nodes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::uint64_t made_ = 0, shared_ = 0;
};

// `g`'s top-level nodes whose kernels a StaticKernelCache may share between
// plans (see there); `g` is the model's graph as loaded, its symbolic dims
// and probe values still marked.
StaticKernelCache::Nodes StaticNodes(const ir::Graph& g);

struct ExecutorOptions {
  device::Device* device = nullptr;  // null: cpu
  // Kernel threads the model runs with: kernels are created with it (oneDNN
  // fixes a primitive's thread count when it is created).
  int threads = 1;
  bool check_bounds = false;
  bool profile = false;  // time every built-in task (Executor::Profile)
  std::string target = "cpu";  // what the file was compiled for (for messages)
  Stream* load_stream = nullptr;  // custom ops launch on it while recording (same device)
  // If branches: the parent's stream (prepared and recorded on it; a branch
  // never runs on its own, so it needs no stream of its own).
  device::Stream* parent_stream = nullptr;
  // An arena several plans of one model share (device memory of
  // shared_arena_size bytes; the plans never run at the same time): used
  // instead of an own arena when the plan's fits in it (not with
  // check_bounds). The executor holds a reference.
  std::shared_ptr<void> shared_arena;
  std::uint64_t shared_arena_size = 0;
  // Repacked weights shared between the kernels of one model's plans (see
  // device::PrepackCache); null: each kernel packs its own.
  std::shared_ptr<device::PrepackCache> prepack_cache;
  // The plan is one of a model's plans for signatures of input shapes met
  // at run time (device::KernelInit::varying_shapes for its kernels).
  bool varying_shapes = false;
  // A model with symbolic dims: its static part's kernels, shared between
  // its plans (CPU device only; never passed to If branches' executors);
  // `graph_keepalive` owns the graph being planned (kept by a cache entry).
  std::shared_ptr<StaticKernelCache> static_kernels;
  std::shared_ptr<const void> graph_keepalive;
};

// Specializes a graph whose inputs have been given one signature's shapes
// (a clone of a model with symbolic dims): every node inferred again and
// shape arithmetic evaluated at these shapes (cpu::EvalBound, as the
// compiler does at its probe), then folded into constants: a Reshape's
// target computed from Shape becomes a constant, and no such node runs. A
// node writing a model output stays and runs (its value still serves the
// nodes after it). The runtime does this per plan, the compiler per gear.
// Model inputs whose values decide shapes (ir::Value::shape_input) keep the
// bound value the caller gave them (this signature's values): they are read
// as constants, by inference and by the kernels. An extent still unknown
// afterwards (such a value not given) is an error naming the value.
Status SpecializeGraph(ir::Graph& g);

class Executor {
 public:
  // `graph` must outlive the executor. Creates every kernel, calls each custom
  // op's Execute once (recording its launches) and allocates the arena.
  static Result<std::unique_ptr<Executor>> Create(const ir::Graph& graph, const plan::MemoryPlan& plan,
                                                  const ExecutorOptions& opts = {});
  ~Executor();

  // io[i]: base address of region kRegionIoBase + i (inputs, then outputs),
  // in device memory. Runs to completion (on cpu: on the calling thread).
  Status Run(const std::vector<void*>& io, ExecutionStats* stats, int threads, const IoCopies* copies = nullptr);
  // Refreshes now; queues the block copies and the replay on `stream` (of
  // this executor's device). The queued work keeps `keepalive` (whatever
  // owns this executor and the graph) alive until it has run or been skipped.
  Status Enqueue(device::Stream& stream, const std::vector<void*>& io, ExecutionStats* stats,
                 std::shared_ptr<const void> keepalive, int threads, const IoCopies* copies = nullptr);
  // Device memory standing in for I/O i (inputs, then outputs) until the
  // caller binds its own; used as the staging buffer for host I/O.
  void* standin(std::size_t i) const { return standins_[i]; }
  device::Device& device() const { return *device_; }
  std::size_t num_tasks() const { return num_launches_; }
  // The shape `v` had in the last completed run: its actual extents if they
  // are data-dependent (its upper bound before any run), else its static shape.
  Shape ValueShape(const ir::Value* v) const;
  // Actual shapes of the graph's inputs for the next run; only inputs with
  // data-dependent extents (an If branch's captured values) may differ from
  // their declared shape, within its bound.
  Status SetInputShapes(const std::vector<Shape>& shapes);
  std::size_t num_blocks() const { return blocks_.size(); }
  // Profiling (ExecutorOptions::profile): every built-in task's spans, in
  // task order, with its node. Call when no run is in flight.
  std::vector<TaskProfile> Profile() const;
  // The provisional bounds (ir::Value::bound_provisional) the last run
  // found too small, by value name, each with the bound a new plan should
  // take: at least the run's value, doubled for a single element. Empty
  // when the last run failed for another reason (or did not fail).
  // Clears them.
  std::map<std::string, HostTensorPtr> TakeBoundRaises();

 private:
  friend class ExecutorBuilder;
  Executor() = default;
  Status Refresh(const std::vector<void*>& io, std::uint64_t* refreshed);
  // Records the task list on `stream` into recording_.
  Status Record(device::Stream& stream);
  // After a refresh moved an address a recorded library call holds
  // (Kernel::reads_host_addresses): records again; the old recording is
  // kept until the executor goes (a run in flight may still use it).
  Status RecordAgainIfNeeded(device::Stream& stream);
  Status QueueBlockCopies(device::Stream& stream);
  // Inside a launch (host-run devices): refresh, copy changed blocks and
  // replay this (child) executor's list directly.
  Status RunNested(const std::vector<void*>& io, const device::ExecContext& ctx);
  Status RunDynamic(Task& t, const device::ExecContext& ctx);
  Status RunIf(Task& t, void* const* slots, const device::ExecContext& ctx, const Shape* in_shapes,
               Shape* out_shapes);
  void* Address(const Binding& b) const;
  static Status LaunchKernelTask(void* obj, const void* args, const device::ExecContext& ctx);
  static Status LaunchHostKernelTask(void* obj, const void* args, const device::ExecContext& ctx);
  static Status LaunchTimedTask(void* obj, const void* args, const device::ExecContext& ctx);
  static Status LaunchGuardedTask(void* obj, const void* args, const device::ExecContext& ctx);
  static Status LaunchDynamicTask(void* obj, const void* args, const device::ExecContext& ctx);
  static Status LaunchIfTask(void* obj, const void* args, const device::ExecContext& ctx);
  Result<void*> Alloc(std::size_t bytes);

  device::Device* device_ = nullptr;
  std::vector<void*> allocations_;  // device memory, freed with the executor
  std::vector<void*> standins_;
  device::Stream* stream_ = nullptr;  // for Run and preparation: own_stream_, or the parent's (If branches)
  std::unique_ptr<device::Stream> own_stream_;
  std::unique_ptr<device::Recording> recording_;
  std::vector<std::unique_ptr<device::Recording>> retired_recordings_;
  // By block: its task's recorded work holds its addresses (empty when no
  // task's does, as on cpu and sim).
  std::vector<bool> block_holds_addresses_;
  bool record_again_ = false;
  bool profile_ = false;
  std::vector<Task> tasks_;
  std::vector<ArgBlock> blocks_;
  std::vector<CustomNode> custom_;
  std::vector<std::vector<SlotRef>> region_refs_;  // by region id
  std::vector<std::uint8_t*> bases_;                // current base per region
  std::uint8_t* arena_ = nullptr;
  std::shared_ptr<void> shared_arena_;  // when arena_ is a model's shared arena
  std::uint8_t* host_arena_ = nullptr;  // pinned host memory: values of CPU-placed nodes
  // Kernel workspaces (the largest workspace_bytes() of the tasks): device
  // memory for the device's tasks, pinned host memory for CPU-placed ones.
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  void* host_workspace_ = nullptr;
  std::size_t host_workspace_bytes_ = 0;
  // The replay's context (which carries the device workspace) for a
  // CPU-placed task: the host workspace.
  device::ExecContext HostContext(const device::ExecContext& ctx) const {
    device::ExecContext c = ctx;
    c.workspace = host_workspace_;
    c.workspace_bytes = host_workspace_bytes_;
    return c;
  }
  std::vector<HostTensorPtr> host_constants_;  // device-resident weights read back for CPU-placed nodes
  std::uint64_t epoch_ns_ = 0;  // profiling: spans start from here (load time)
  // Element ranges a task reports for a later task of this plan
  // (device::ValueRange; the kernels hold them too).
  device::ValueRanges value_ranges_;
  std::vector<std::unique_ptr<GuardedBuffer>> guarded_;
  std::unique_ptr<Stream> own_load_stream_;
  std::uint64_t arena_size_ = 0;
  std::size_t num_launches_ = 0;
  const ir::Graph* graph_ = nullptr;
  std::vector<Shape> shapes_;  // actual shapes of dynamic values
  std::unordered_map<const ir::Value*, int> shape_ids_;
  std::mutex raises_mu_;
  std::map<std::string, HostTensorPtr> raises_;  // TakeBoundRaises
};

}  // namespace kiln::runtime
