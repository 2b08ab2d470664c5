// The executor: records a compiled graph's task list once ("sinking"), then
// replays it per execution.
//
// Each task is a built-in kernel or a custom op's recorded launch, with an
// argument block. Every block has a host copy (rewritten by address refresh)
// and a device copy (read by the kernels). Built-in blocks are arrays of
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
#include <unordered_map>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "common/status.h"
#include "custom/registry.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "plan/memory_plan.h"

namespace kiln::runtime {

// A separately allocated tensor framed by guard bytes (check_bounds mode).
struct GuardedBuffer {
  std::vector<std::uint8_t> bytes;  // kGuard + size + kGuard
  std::uint64_t size = 0;
  std::string name;
  std::uint8_t* data() { return bytes.data() + kGuard; }
  static constexpr std::uint64_t kGuard = 64;
  static constexpr std::uint8_t kPattern = 0xA5;
};

struct ArgBlock {
  std::vector<std::uint8_t> host;  // rewritten by refresh / UpdateHostArgs
  std::vector<std::uint8_t> dev;   // what kernels read
  bool dirty = false;
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
  bool alias = false;                  // a view: shapes only, no kernel
  bool self_shaped = false;            // If: one kernel for all shapes; it reports its outputs' extents
  std::map<std::vector<Shape>, std::unique_ptr<cpu::Kernel>> kernels;  // by input shapes
  // The last run's input shapes and inferred output shapes: the same inputs
  // skip inference (the common case: extents that repeat).
  std::vector<Shape> last_in, last_inferred;
  bool have_last = false;
};

struct Task {
  std::unique_ptr<DynamicTask> dyn;     // data-dependent shapes (else null)
  std::unique_ptr<cpu::Kernel> kernel;  // built-in
  KernelFn fn = nullptr;                // custom op launch
  const void* fn_args = nullptr;
  int block = -1;                       // built-in argument block
  int num_inputs = 0;
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

struct ExecutorOptions {
  bool check_bounds = false;
  Stream* load_stream = nullptr;  // custom ops launch on it while recording
};

class Executor {
 public:
  // `graph` must outlive the executor. Creates every kernel, calls each custom
  // op's Execute once (recording its launches) and allocates the arena.
  static Result<std::unique_ptr<Executor>> Create(const ir::Graph& graph, const plan::MemoryPlan& plan,
                                                  const ExecutorOptions& opts = {});
  ~Executor();

  // io[i]: base address of region kRegionIoBase + i (inputs, then outputs).
  // Runs on the calling thread.
  Status Run(const std::vector<void*>& io, ExecutionStats* stats);
  // Refreshes now; queues the block copies and the replay on `stream`. The
  // queued work keeps `keepalive` (whatever owns this executor and the graph)
  // alive until it has run or been skipped.
  Status Enqueue(Stream& stream, const std::vector<void*>& io, ExecutionStats* stats,
                 std::shared_ptr<const void> keepalive);
  std::size_t num_tasks() const { return tasks_.size(); }
  // The shape `v` had in the last completed run: its actual extents if they
  // are data-dependent (its upper bound before any run), else its static shape.
  Shape ValueShape(const ir::Value* v) const;
  // Actual shapes of the graph's inputs for the next run; only inputs with
  // data-dependent extents (an If branch's captured values) may differ from
  // their declared shape, within its bound.
  Status SetInputShapes(const std::vector<Shape>& shapes);
  std::size_t num_blocks() const { return blocks_.size(); }

 private:
  friend class ExecutorBuilder;
  Executor() = default;
  Status Refresh(const std::vector<void*>& io, std::uint64_t* refreshed);
  Status Replay();
  Status ReplayFrom(std::size_t* at);  // *at: the task being run
  Status RunDynamic(Task& t);
  void* Address(const Binding& b) const;

  std::vector<Task> tasks_;
  std::vector<ArgBlock> blocks_;
  std::vector<CustomNode> custom_;
  std::vector<std::vector<SlotRef>> region_refs_;  // by region id
  std::vector<std::uint8_t*> bases_;                // current base per region
  std::uint8_t* arena_ = nullptr;
  std::vector<std::unique_ptr<GuardedBuffer>> guarded_;
  std::vector<std::vector<std::uint8_t>> workspaces_;  // custom ops' workspace
  std::vector<void*> placeholders_;                    // I/O stand-ins until the first run
  std::unique_ptr<Stream> own_load_stream_;
  std::uint64_t arena_size_ = 0;
  const ir::Graph* graph_ = nullptr;
  std::vector<Shape> shapes_;  // actual shapes of dynamic values
  std::unordered_map<const ir::Value*, int> shape_ids_;
};

}  // namespace kiln::runtime
