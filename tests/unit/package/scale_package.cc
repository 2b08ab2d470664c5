// A custom-op package, built as a shared library and loaded by the tests
// through KILN_CUSTOM_OP_PATH: registers "PkgDouble" (y = 2x, refreshable).
#include <cstring>

#include "kiln/custom_op.h"

namespace {

struct Args {
  const float* x;
  float* y;
  long n;
};

void DoubleKernel(const void* p) {
  const auto* a = static_cast<const Args*>(p);
  for (long i = 0; i < a->n; ++i) a->y[i] = 2 * a->x[i];
}

class PkgDouble final : public kiln::CustomOp, public kiln::ShapeInferOp, public kiln::EagerExecuteOp,
                        public kiln::ArgsUpdater {
 public:
  kiln::Status InferShape(kiln::InferShapeContext& ctx) override { return ctx.SetOutputShape(0, ctx.input_shape(0)); }
  kiln::Status InferDataType(kiln::InferShapeContext& ctx) override { return ctx.SetOutputDataType(0, ctx.input_dtype(0)); }
  kiln::Status Execute(kiln::EagerExecuteContext& ctx) override {
    auto x = ctx.GetInputTensor(0);
    auto y = ctx.MallocOutputTensor(0);
    if (!x.ok()) return x.status();
    if (!y.ok()) return y.status();
    Args a{static_cast<const float*>(x->data), static_cast<float*>(y->data), static_cast<long>(x->bytes / 4)};
    auto dev = ctx.MallocReadOnlyDevArgs(&a, sizeof a);
    if (!dev.ok()) return dev.status();
    return ctx.GetStream().LaunchKernel(DoubleKernel, dev.value());
  }
  kiln::Status UpdateHostArgs(kiln::ArgsUpdaterContext& ctx) override {
    auto host = ctx.GetKernelArgs(kiln::Placement::kHost, 0);
    auto x = ctx.GetInputTensor(0);
    auto y = ctx.GetOutputTensor(0);
    if (!host.ok() || !x.ok() || !y.ok()) return kiln::Error(kiln::StatusCode::kInternal, "PkgDouble: bad context");
    auto* a = static_cast<Args*>(host.value());
    a->x = static_cast<const float*>(x->data);
    a->y = static_cast<float*>(y->data);
    return kiln::Status::Ok();
  }
};

}  // namespace

KILN_CUSTOM_OP_PACKAGE(registrar) { return registrar.Register("PkgDouble", std::make_unique<PkgDouble>()); }
