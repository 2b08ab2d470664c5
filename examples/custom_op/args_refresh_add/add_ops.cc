// The sample's custom-op package (libcust_opapi.so): two ops with identical
// kernels, z = x + y over float32 tensors. AddRefreshOp implements
// ArgsUpdater (its argument block is rewritten when buffers move);
// AddNoRefreshOp does not (Kiln inserts Identity copies around it instead).
// The kernel is compiled at load time with Kiln's RTC. Kiln loads the
// package from $KILN_CUSTOM_OP_PATH/<dir>/op_graph/lib/linux/<arch>/ and
// calls its KILN_CUSTOM_OP_PACKAGE function, which registers both ops.
#include <memory>
#include <mutex>

#include "add_ops.h"
#include "kiln/custom_op.h"
#include "kiln/rtc.h"

namespace add_sample {
namespace {

const char* kKernelSource = R"(
struct AddArgs { const float* x; const float* y; float* z; long n; };
extern "C" void add_kernel(const void* p) {
  const AddArgs* a = static_cast<const AddArgs*>(p);
  const float* __restrict x = a->x;
  const float* __restrict y = a->y;
  float* __restrict z = a->z;
  for (long i = 0; i < a->n; ++i) z[i] = x[i] + y[i];
}
)";

class AddBase : public kiln::CustomOp, public kiln::ShapeInferOp, public kiln::EagerExecuteOp {
 public:
  kiln::Status InferShape(kiln::InferShapeContext& ctx) override {
    if (ctx.num_inputs() != 2 || ctx.input_shape(0) != ctx.input_shape(1)) {
      return kiln::Error(kiln::StatusCode::kInvalidArgument, "node '", ctx.node_name(),
                         "': Add needs two inputs of the same shape");
    }
    return ctx.SetOutputShape(0, ctx.input_shape(0));
  }
  kiln::Status InferDataType(kiln::InferShapeContext& ctx) override {
    if (ctx.input_dtype(0) != kiln::DType::kFloat32 || ctx.input_dtype(1) != kiln::DType::kFloat32) {
      return kiln::Error(kiln::StatusCode::kInvalidArgument, "node '", ctx.node_name(), "': float32 only");
    }
    return ctx.SetOutputDataType(0, kiln::DType::kFloat32);
  }

  // Called once, when the graph is loaded: compile (or fetch from the RTC
  // cache), register the argument block, launch (recorded by Kiln).
  kiln::Status Execute(kiln::EagerExecuteContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(kiln::KernelFn fn, Kernel());
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor x, ctx.GetInputTensor(0));
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor y, ctx.GetInputTensor(1));
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor z, ctx.MallocOutputTensor(0));
    AddArgs host{static_cast<const float*>(x.data), static_cast<const float*>(y.data), static_cast<float*>(z.data),
                 static_cast<long>(z.bytes / sizeof(float))};
    KILN_ASSIGN_OR_RETURN(const void* dev_args, ctx.MallocReadOnlyDevArgs(&host, sizeof host));
    return ctx.GetStream().LaunchKernel(fn, dev_args);
  }

 private:
  kiln::Result<kiln::KernelFn> Kernel() {
    std::lock_guard<std::mutex> l(mu_);
    if (!module_) {
      kiln::rtc::ProgramOptions o;
      o.flags = {"-O3", "-march=native"};
      KILN_ASSIGN_OR_RETURN(auto prog, kiln::rtc::Program::Create("add_kernel", kKernelSource, o));
      KILN_RETURN_IF_ERROR(prog->Compile());
      KILN_ASSIGN_OR_RETURN(module_, kiln::rtc::Module::Load(*prog));
    }
    KILN_ASSIGN_OR_RETURN(void* f, module_->Function("add_kernel"));
    return reinterpret_cast<kiln::KernelFn>(f);
  }
  std::mutex mu_;
  std::shared_ptr<kiln::rtc::Module> module_;
};

class AddNoRefreshOp final : public AddBase {};

class AddRefreshOp final : public AddBase, public kiln::ArgsUpdater {
 public:
  // Rewrites the three pointers of the host copy; Kiln copies it to the
  // device copy as a stream task before the replay.
  kiln::Status UpdateHostArgs(kiln::ArgsUpdaterContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(void* p, ctx.GetKernelArgs(kiln::Placement::kHost, 0));
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor x, ctx.GetInputTensor(0));
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor y, ctx.GetInputTensor(1));
    KILN_ASSIGN_OR_RETURN(kiln::DeviceTensor z, ctx.GetOutputTensor(0));
    auto* a = static_cast<AddArgs*>(p);
    a->x = static_cast<const float*>(x.data);
    a->y = static_cast<const float*>(y.data);
    a->z = static_cast<float*>(z.data);
    return kiln::Status::Ok();
  }
};

}  // namespace
}  // namespace add_sample

KILN_CUSTOM_OP_PACKAGE(registrar) {
  kiln::Status st = registrar.Register(add_sample::kAddRefresh, std::make_unique<add_sample::AddRefreshOp>());
  if (!st.ok()) return st;
  return registrar.Register(add_sample::kAddNoRefresh, std::make_unique<add_sample::AddNoRefreshOp>());
}
