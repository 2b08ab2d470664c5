// The CUDA convolution: cuDNN's convolution forward (pure float32 FMA math,
// the fastest algorithm cuDNN's heuristics offer within a workspace
// limit), then the bias in a kernel of the device program. cuDNN takes
// tensor addresses on the host, so the recorded work holds them
// (Kernel::reads_host_addresses): the executor records again when a
// binding moves.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/conv_params.h"
#include "common/status.h"
#include "device/kernel.h"

namespace kiln::cuda {

// `cudnn` is the device's cudnnHandle_t (calls serialised by `mu`); `bias`
// the kiln_conv_bias kernel.
Result<std::unique_ptr<device::Kernel>> CreateConvKernel(const ConvPlan& plan, void* cudnn, std::mutex* mu,
                                                         const void* bias, std::string what);

}  // namespace kiln::cuda
