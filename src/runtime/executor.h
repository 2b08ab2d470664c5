// The executor: records a compiled graph's task list once, then replays it.
//
// Each task is (kernel, argument block). An argument block is an array of
// pointers whose slots are declared: either fixed (constants, which never
// move) or (region, offset) for the arena and the model's input/output
// buffers. When a run binds a region at a new base address, only the slots
// that refer to that region are rewritten ("address refresh"); no data moves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "common/status.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "plan/memory_plan.h"

namespace kiln::runtime {

struct SlotRef {
  std::uint32_t task;
  std::uint32_t slot;
  std::uint64_t offset;
};

// A separately allocated tensor framed by guard bytes (check_bounds mode).
struct GuardedBuffer {
  std::vector<std::uint8_t> bytes;  // kGuard + size + kGuard
  std::uint64_t size = 0;
  std::string name;
  std::uint8_t* data() { return bytes.data() + kGuard; }
  static constexpr std::uint64_t kGuard = 64;
  static constexpr std::uint8_t kPattern = 0xA5;
};

struct Task {
  std::unique_ptr<cpu::Kernel> kernel;
  std::vector<GuardedBuffer*> guarded_outputs;  // check_bounds mode only
  std::vector<void*> ptrs;  // the argument block: inputs then outputs
  int num_inputs = 0;
  const ir::Node* node = nullptr;
};

class Executor {
 public:
  // `graph` must outlive the executor. Creates every kernel and allocates the
  // arena (pre-touched so the first run pays no page faults).
  static Result<std::unique_ptr<Executor>> Create(const ir::Graph& graph,
                                                  const plan::MemoryPlan& plan,
                                                  bool check_bounds = false);
  ~Executor();

  // io[i]: base address of region kRegionIoBase + i (inputs, then outputs).
  Status Run(const std::vector<void*>& io, ExecutionStats* stats);
  std::size_t num_tasks() const { return tasks_.size(); }

 private:
  Executor() = default;
  std::vector<Task> tasks_;
  std::vector<std::vector<SlotRef>> region_refs_;  // by region id
  std::vector<std::uint8_t*> bases_;                // current base per region
  std::uint8_t* arena_ = nullptr;
  std::vector<std::unique_ptr<GuardedBuffer>> guarded_;
  std::uint64_t arena_size_ = 0;
};

}  // namespace kiln::runtime
