// The devices this build has, opened by spec string: "cpu", or "sim" with
// options ("sim:lack=Relu+Conv,seed=7,delay_us=100"; see
// backends/sim/sim_device.cc). A device is opened once per distinct spec and
// lives for the process.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "device/device.h"

namespace kiln::runtime {

// An empty spec means $KILN_DEVICE if set, else "cpu".
Result<device::Device*> OpenDevice(const std::string& spec);
// What the compiler compiles for: the device itself, except that a cuda
// target opens without a GPU (its capabilities and kernel choices only;
// running on it fails with the driver's reason).
Result<device::Device*> OpenCompileTarget(const std::string& spec);
device::Device& CpuDevice();
// Device kinds this build has ("cpu", "sim").
std::vector<std::string> DeviceKinds();

}  // namespace kiln::runtime
