// CPU kernel interface. A kernel is created once per node when a model is
// loaded (it may prepack weights or build oneDNN primitives then) and run many
// times. It reads every tensor address from its argument block, so the
// executor can rebind inputs/outputs by rewriting pointers ("address
// refresh") without recreating the kernel.
#pragma once

#include <functional>
#include <map>
#include <new>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "device/device.h"
#include "ir/graph.h"

namespace kiln::cpu {

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
};

// kernel.Run(args), with any exception turned into an error naming `node`
// (inline: the replay loop calls it for every task).
inline Status RunKernel(Kernel& kernel, const KernelArgs& args, const ir::Node& node) {
  try {
    return kernel.Run(args);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, node.Describe(), ": out of memory while running");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, node.Describe(), ": kernel failed: ", e.what());
  }
}

using KernelFactory = std::function<Result<std::unique_ptr<Kernel>>(const KernelInit&)>;

class KernelRegistry {
 public:
  static KernelRegistry& Get();  // every built-in CPU kernel registered
  void Register(const std::string& op_type, KernelFactory f, const std::string& domain = "");
  const KernelFactory* Find(const std::string& op_type, const std::string& domain = "") const;

 private:
  std::map<std::pair<std::string, std::string>, KernelFactory> factories_;
};

// Creates the kernel for init.node; errors name the node. Never throws (an
// exception from a factory, e.g. oneDNN's dnnl::error, becomes the error).
Result<std::unique_ptr<Kernel>> CreateKernel(const KernelInit& init);



// Runs one node eagerly on host tensors (constant folding, tests).
Result<std::vector<HostTensorPtr>> EvalNode(const ir::Node& node,
                                            const std::vector<HostTensorPtr>& inputs);

// Kernel thread count of the calling thread: set from the ExecContext of the
// work the thread runs (UseThreads), also as this thread's OpenMP thread
// count (an OpenMP setting per thread, not per process). 1 on a new thread.
// Two models with different thread counts run side by side on two threads.
void UseThreads(int n);
int NumThreads();

// A kernel built from a lambda, for simple ops.
class FnKernel : public Kernel {
 public:
  using Fn = std::function<Status(const KernelArgs&)>;
  explicit FnKernel(Fn fn) : fn_(std::move(fn)) {}
  Status Run(const KernelArgs& args) override { return fn_(args); }
 private:
  Fn fn_;
};
inline Result<std::unique_ptr<Kernel>> MakeFn(FnKernel::Fn fn) {
  return std::unique_ptr<Kernel>(new FnKernel(std::move(fn)));
}

// Registration hooks, one per kernel family file.
void RegisterElementwiseKernels(KernelRegistry& r);
void RegisterActivationKernels(KernelRegistry& r);
void RegisterConvKernels(KernelRegistry& r);
void RegisterGemmKernels(KernelRegistry& r);
void RegisterPoolKernels(KernelRegistry& r);
void RegisterNormKernels(KernelRegistry& r);
void RegisterShapeKernels(KernelRegistry& r);
void RegisterUnaryKernels(KernelRegistry& r);
void RegisterReduceKernels(KernelRegistry& r);
void RegisterTensorOpsKernels(KernelRegistry& r);
void RegisterConvTransposeKernels(KernelRegistry& r);
void RegisterResizeKernels(KernelRegistry& r);
void RegisterRnnKernels(KernelRegistry& r);
void RegisterDynamicKernels(KernelRegistry& r);

}  // namespace kiln::cpu
