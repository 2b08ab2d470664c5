// The CPU kernel library: its registry, factory and helpers. Kernels
// implement the backend-neutral interface of device/kernel.h.
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
#include "device/kernel.h"
#include "ir/graph.h"

namespace kiln::cpu {

// The interface is the device layer's (device/kernel.h); the CPU kernel
// library implements it.
using device::TensorDesc;
using device::KernelInit;
using device::KernelArgs;
using device::Kernel;

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

// Shape arithmetic on symbolic dims (see ir::Value::bound_value): when
// `node` (already inferred) reads only constants and bound-valued values,
// at least one of the latter, or is a Shape of a value whose requested dims
// are not data-dependent, its outputs of at most `limit_bytes` in all get
// their bound value: the node evaluated at the bound values. The node stays
// in the graph. Returns whether it did; errors only from the evaluation.
// Custom ops, ops with subgraphs, nodes reading a constant in device memory
// and nodes with non-integer outputs of more than kBoundFloatElements
// elements are never evaluated.
Result<bool> EvalBound(ir::Node& node, std::uint64_t limit_bytes);
// Upper bounds of shape arithmetic on data-dependent extents (see
// ir::Value::value_upper_bound): a Shape or Size of a value with
// data-dependent dims gets its bound extents; Gather, Concat, Unsqueeze,
// Squeeze, Reshape, Identity, Cast (to an integer type), Min, Max,
// ReduceMin, ReduceMax and, on non-negative values, Add, Mul, ReduceSum and
// ReduceProd of upper-bounded values (the other inputs constant; indices,
// axes and shapes constant) get the node evaluated at those bounds: each
// never decreases when an input element grows. Integer outputs of at most
// `limit_bytes`. Where no bound is proven, an integer value the run
// computes from data that feeds a slot admitting one gets a provisional
// bound (ir::Value::bound_provisional; the model raises it when a run
// exceeds it). Returns whether it set a bound.
Result<bool> EvalUpperBound(ir::Node& node, std::uint64_t limit_bytes);
// The limit the compiler, the loader and each plan use (the same, so that
// all three compute the same bound values): shape tensors are tiny.
inline constexpr std::uint64_t kBoundValueLimit = ir::kShapeInputLimitBytes;  // 64 KiB
// Outputs that are not integers (int64, int32, bool) are evaluated only up
// to this many elements.
inline constexpr std::int64_t kBoundFloatElements = ir::kShapeInputFloatElements;  // 64

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
void RegisterQuantKernels(KernelRegistry& r);
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
