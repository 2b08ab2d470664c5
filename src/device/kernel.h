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
#include <memory>
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

struct KernelInit {
  const ir::Node* node = nullptr;
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  // Data of inputs that are compile-time constants (weights), else null.
  std::vector<const HostTensor*> const_inputs;
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
};

}  // namespace kiln::device
