// The backend-neutral kernel interface. A kernel is created once per node,
// by the device that runs it (Device::CreateKernel, from its kernel
// library), when a model is loaded: it may prepack weights or build
// library primitives then. It runs many times with an ExecContext (device,
// stream, threads, workspace) and reads every tensor address from its
// argument block, so the executor can rebind inputs/outputs by rewriting
// pointers ("address refresh") without recreating it. No kernel keeps
// process-global state.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "device/device.h"
#include "ir/graph.h"

namespace kiln::device {

struct TensorDesc {
  DType dtype = DType::kUndefined;  // kUndefined: optional input absent
  Shape shape;
  std::size_t bytes() const {
    return static_cast<std::size_t>(NumElements(shape) < 0 ? 0 : NumElements(shape)) *
           DTypeSize(dtype);
  }
  bool present() const { return dtype != DType::kUndefined; }
};

// Constant weights that kernels repacked at load (a convolution's weights in
// the layout its primitive wants), shared by the kernels of one model's
// plans: a model with symbolic dims makes a kernel per node per plan, and a
// plan at other extents usually wants the same layout, so N plans hold one
// packed copy rather than N. Keyed by the source constant's data (stable
// while the model lives: plans share the model's constants) and a
// kernel-defined description of the packed layout; an entry lives while
// some kernel holds it.
class PrepackCache {
 public:
  // The packed form of `source` in `format`, made before and still held,
  // else make() (called under the lock; kernels are made one at a time
  // anyway) and remembered. An empty `format` is never shared.
  template <typename T, typename Make>
  std::shared_ptr<T> Get(const void* source, const std::string& format, Make&& make) {
    if (format.empty()) return make();
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(source, format);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (std::shared_ptr<void> held = it->second.lock()) {
        ++shared_;
        return std::static_pointer_cast<T>(held);
      }
    }
    std::shared_ptr<T> made = make();
    entries_[key] = made;
    ++made_;
    return made;
  }
  std::uint64_t shared() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shared_;
  }
  std::uint64_t made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<const void*, std::string>, std::weak_ptr<void>> entries_;
  std::uint64_t shared_ = 0, made_ = 0;
};

// The range of a value's elements, min(0, min x) and max(0, max x) with
// NaNs skipped (DynamicQuantizeLinear's), reported by the kernel that writes
// the value as it writes it, for a kernel that reads it: the reader skips a
// pass over the value. The writer sets `valid` after each run's write, the
// reader uses the range only then and clears it, so a range never outlives
// the write it describes (a plan whose writer is another kernel, one not
// reporting, leaves it clear and the reader computes its own).
struct ValueRange {
  float min = 0.f, max = 0.f;
  bool valid = false;
};
// Ranges within one plan, by the value they describe (the executor's).
using ValueRanges = std::unordered_map<const ir::Value*, std::shared_ptr<ValueRange>>;

struct KernelInit {
  // Where repacked constant weights are shared (one per model); null: each
  // kernel packs its own.
  PrepackCache* prepack_cache = nullptr;
  // Ranges a writer reports for a reader of the same plan (see ValueRange);
  // null: none (eager evaluation, kernels made at run time).
  ValueRanges* value_ranges = nullptr;
  const ir::Node* node = nullptr;
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  // Data of inputs that are compile-time constants (weights), else null.
  std::vector<const HostTensor*> const_inputs;
  // The kernel is one of many made for the same node at other extents: a
  // plan of a model with symbolic dims made at run time, or a task whose
  // extents depend on data. Where a library generates code per shape
  // (oneDNN's brgemm), a kernel may then prefer one that serves every
  // extent of the dims that can vary with equal speed, so that a new shape
  // costs no code generation (see the MatMul kernel).
  bool varying_shapes = false;
  // What the device that runs the kernel can do (null in eager evaluation:
  // constant folding, which then takes the plainest route).
  const Capabilities* caps = nullptr;
  const HostTensor* const_input(int i) const {
    return i < static_cast<int>(const_inputs.size()) ? const_inputs[i] : nullptr;
  }
};

// Pointer block: inputs first, then outputs. Absent optional inputs are null.
struct KernelArgs {
  void* const* ptrs;
  int num_inputs;
  // Set only for nodes with data-dependent output extents: holds the inferred
  // (upper-bound) output shapes on entry; NonZero / NonMaxSuppression store
  // the actual ones. Their outputs are written densely at the buffer start.
  Shape* out_shapes = nullptr;
  // Set with out_shapes: the actual input shapes (for If, whose branches
  // take data-dependent inputs).
  const Shape* in_shapes = nullptr;
  // What the kernel runs with (device, stream, threads); null only for
  // eager evaluation on the host (constant folding).
  const device::ExecContext* ctx = nullptr;
  // The argument block's host mirror (the same addresses as `ptrs`, which
  // may be device memory): for kernels that hand tensor addresses to a
  // library on the host (reads_host_addresses). Null in eager evaluation.
  void* const* host_ptrs = nullptr;
  const void* in(int i) const { return ptrs[i]; }
  void* out(int i) const { return ptrs[num_inputs + i]; }
  template <typename T> const T* in_as(int i) const { return static_cast<const T*>(ptrs[i]); }
  template <typename T> T* out_as(int i) const { return static_cast<T*>(ptrs[num_inputs + i]); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status Run(const KernelArgs& args) = 0;
  // Scratch memory Run needs (ExecContext::workspace), in bytes; known once
  // the kernel is created. The executor allocates the largest once.
  virtual std::size_t workspace_bytes() const { return 0; }
  // True for a kernel that passes tensor addresses to a library call on the
  // host (cuDNN) instead of reading them from the argument block on the
  // device: where launches are recorded once (cuda), its recorded work
  // holds the addresses of the recording, so the executor records again
  // when one of its bindings moves.
  virtual bool reads_host_addresses() const { return false; }
};

}  // namespace kiln::device
