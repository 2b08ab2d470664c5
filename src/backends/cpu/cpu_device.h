// The CPU device and the simulated discrete device that runs the CPU kernels.
#pragma once

#include <memory>
#include <string>

#include "device/device.h"

namespace kiln::cpu {

// The process-wide CPU device.
device::Device& CpuDevice();
// Whether the CPU kernel library has a kernel for this op.
bool HasKernel(const std::string& op_type, const std::string& domain);

}  // namespace kiln::cpu

namespace kiln::sim {

// A new simulated device for `options` (the part of the spec after "sim:").
Result<std::unique_ptr<device::Device>> CreateSimDevice(const std::string& spec, const std::string& options);

}  // namespace kiln::sim
