// The CUDA device's kernel library: elementwise ops and copies so far
// (kernels/elementwise.cu through NVRTC). Every kernel reads its tensor
// addresses from the argument block in device memory, so a recorded CUDA
// graph follows rewritten blocks.
#pragma once

#include <functional>
#include <memory>
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

// Compiles (NVRTC, disk-cached) and loads a named program on the device,
// once per device.
using ProgramLoader = std::function<Result<const CudaModule*>(const std::string& name, const std::string& source)>;
Result<std::unique_ptr<device::Kernel>> CreateCudaKernel(const device::KernelInit& init, const ProgramLoader& load);

}  // namespace kiln::cuda
