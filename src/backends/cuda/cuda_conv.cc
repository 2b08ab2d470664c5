#include "backends/cuda/cuda_conv.h"

#include <cuda_runtime.h>
// The legacy convolution API: deprecated in cuDNN 9 (warnings only with
// CUDNN_WARN_DEPRECATED) but complete, and captured into CUDA graphs.
#include <cudnn.h>

#include <algorithm>

#include "backends/cuda/cuda_device.h"

namespace kiln::cuda {
namespace {

constexpr std::size_t kMaxConvWorkspace = std::size_t{256} << 20;

class ConvKernel final : public device::Kernel {
 public:
  ConvKernel(const ConvPlan& p, cudnnHandle_t h, std::mutex* mu, const void* bias, std::string what)
      : p_(p), h_(h), mu_(mu), bias_(bias), what_(std::move(what)) {}
  ~ConvKernel() override {
    if (x_) cudnnDestroyTensorDescriptor(x_);
    if (y_) cudnnDestroyTensorDescriptor(y_);
    if (w_) cudnnDestroyFilterDescriptor(w_);
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  }

  Status Init() {
    KILN_RETURN_IF_ERROR(Check(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnCreateConvolutionDescriptor(&conv_), "cudnnCreateConvolutionDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p_.n, p_.c, p_.h, p_.w),
                               "cudnnSetTensor4dDescriptor(X)"));
    KILN_RETURN_IF_ERROR(Check(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p_.k, p_.c / p_.group,
                                                          p_.kh, p_.kw),
                               "cudnnSetFilter4dDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnSetConvolution2dDescriptor(conv_, p_.pad_h, p_.pad_w, p_.stride_h, p_.stride_w,
                                                               p_.dil_h, p_.dil_w, CUDNN_CROSS_CORRELATION,
                                                               CUDNN_DATA_FLOAT),
                               "cudnnSetConvolution2dDescriptor"));
    KILN_RETURN_IF_ERROR(Check(cudnnSetConvolutionGroupCount(conv_, p_.group), "cudnnSetConvolutionGroupCount"));
    // Plain float32 FMA: no TF32 (the accuracy float32 models expect).
    KILN_RETURN_IF_ERROR(Check(cudnnSetConvolutionMathType(conv_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType"));
    int n = 0, c = 0, h = 0, w = 0;
    KILN_RETURN_IF_ERROR(Check(cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &n, &c, &h, &w),
                               "cudnnGetConvolution2dForwardOutputDim"));
    if (n != p_.n || c != p_.k || h != p_.out_h || w != p_.out_w) {
      return Error(StatusCode::kInternal, what_, ": cuDNN's output [", n, ",", c, ",", h, ",", w, "] is not [", p_.n,
                   ",", p_.k, ",", p_.out_h, ",", p_.out_w, "]");
    }
    KILN_RETURN_IF_ERROR(Check(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w),
                               "cudnnSetTensor4dDescriptor(Y)"));
    // The heuristics' order, first whose workspace fits.
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    {
      std::lock_guard<std::mutex> l(*mu_);
      KILN_RETURN_IF_ERROR(Check(cudnnGetConvolutionForwardAlgorithm_v7(h_, x_, w_, conv_, y_,
                                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
                                 "cudnnGetConvolutionForwardAlgorithm_v7"));
    }
    // Else implicit GEMM, which takes every float32 geometry.
    algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    for (int i = 0; i < found; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxConvWorkspace &&
          perf[i].mathType == CUDNN_FMA_MATH) {
        algo_ = perf[i].algo;
        break;
      }
    }
    KILN_RETURN_IF_ERROR(Check(cudnnGetConvolutionForwardWorkspaceSize(h_, x_, w_, conv_, y_, algo_, &ws_),
                               "cudnnGetConvolutionForwardWorkspaceSize"));
    return Status::Ok();
  }

  std::size_t workspace_bytes() const override { return ws_; }
  bool reads_host_addresses() const override { return true; }

  Status Run(const device::KernelArgs& a) override {
    if (!a.host_ptrs || !a.ctx || !a.ctx->stream) {
      return Error(StatusCode::kInternal, what_, ": launched without the argument block's host mirror");
    }
    if (ws_ > 0 && (!a.ctx->workspace || a.ctx->workspace_bytes < ws_)) {
      return Error(StatusCode::kInternal, what_, ": launched without its ", ws_, "-byte workspace");
    }
    const int y_index = a.num_inputs;
    auto* s = static_cast<cudaStream_t>(CudaStreamHandle(*a.ctx->stream));
    const float one = 1.f, zero = 0.f;
    {
      std::lock_guard<std::mutex> l(*mu_);
      KILN_RETURN_IF_ERROR(Check(cudnnSetStream(h_, s), "cudnnSetStream"));
      KILN_RETURN_IF_ERROR(Check(cudnnConvolutionForward(h_, &one, x_, a.host_ptrs[0], w_, a.host_ptrs[1], conv_, algo_,
                                                         a.ctx->workspace, ws_, &zero, y_, a.host_ptrs[y_index]),
                                 "cudnnConvolutionForward"));
    }
    if (!p_.has_bias) return Status::Ok();
    void* ptrs = const_cast<void**>(a.ptrs);
    long long n = static_cast<long long>(p_.n) * p_.k * p_.out_h * p_.out_w;
    long long channels = p_.k, hw = static_cast<long long>(p_.out_h) * p_.out_w;
    int b_index = 2, yi = y_index;
    void* params[] = {&ptrs, &n, &channels, &hw, &b_index, &yi};
    const long long blocks = std::clamp<long long>((n + 255) / 256, 1, 65536);
    const cudaError_t e = cudaLaunchKernel(bias_, dim3(static_cast<unsigned>(blocks)), dim3(256), params, 0, s);
    if (e != cudaSuccess) {
      return Error(StatusCode::kInternal, what_, ": bias kernel: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    }
    return Status::Ok();
  }

 private:
  Status Check(cudnnStatus_t st, const char* call) const {
    if (st == CUDNN_STATUS_SUCCESS) return Status::Ok();
    return Error(StatusCode::kInternal, what_, ": ", call, " failed: ", cudnnGetErrorString(st));
  }

  ConvPlan p_;
  cudnnHandle_t h_;
  std::mutex* mu_;
  const void* bias_;
  std::string what_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  std::size_t ws_ = 0;
};

}  // namespace

Result<std::unique_ptr<device::Kernel>> CreateConvKernel(const ConvPlan& plan, void* cudnn, std::mutex* mu,
                                                         const void* bias, std::string what) {
  auto k = std::make_unique<ConvKernel>(plan, static_cast<cudnnHandle_t>(cudnn), mu, bias, std::move(what));
  KILN_RETURN_IF_ERROR(k->Init());
  return std::unique_ptr<device::Kernel>(std::move(k));
}

}  // namespace kiln::cuda
