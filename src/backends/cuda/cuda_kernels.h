// The CUDA device's kernel library: elementwise ops and copies
// (kernels/elementwise.cu through NVRTC), MatMul/Gemm (cuBLAS) and Conv
// (cuDNN). Every kernel reads its tensor
// addresses from the argument block in device memory, so a recorded CUDA
// graph follows rewritten blocks.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/nvrtc.h"
#include "common/status.h"
#include "device/kernel.h"

namespace kiln::cuda {

// The device program sources CMake embeds (kernels/*.cu and the headers
// they include).
const std::string& ElementwiseProgramSource();
std::vector<NvrtcHeader> KernelProgramHeaders();

bool CudaKernelExists(const std::string& op_type, const std::string& domain, const std::vector<DType>& dtypes);
// Whether this node, with its attributes and (static) shapes, gets a CUDA
// kernel: what placement and the loader ask (Device::SupportsNode).
bool CudaNodeSupported(const ir::Node& node, const std::vector<DType>& dtypes);

// Compiles (NVRTC, disk-cached) and loads a named program on the device,
// once per device.
using ProgramLoader = std::function<Result<const CudaModule*>(const std::string& name, const std::string& source)>;
// What kernels of one device share: its programs and its cuBLAS handle
// (created with its own workspace, so capture never allocates; calls on it
// are serialised by `blas_mu`).
struct CudaLibraries {
  ProgramLoader load;
  std::function<Result<void*>()> blas;  // a cublasHandle_t
  std::mutex* blas_mu = nullptr;
  std::function<Result<void*>()> cudnn;  // a cudnnHandle_t
  std::mutex* cudnn_mu = nullptr;
};
Result<std::unique_ptr<device::Kernel>> CreateCudaKernel(const device::KernelInit& init, const CudaLibraries& libs);

}  // namespace kiln::cuda
