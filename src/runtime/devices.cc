#include "runtime/devices.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cpu/cpu_device.h"

namespace kiln::runtime {

device::Device& CpuDevice() { return cpu::CpuDevice(); }

std::vector<std::string> DeviceKinds() { return {"cpu", "sim"}; }

Result<device::Device*> OpenDevice(const std::string& requested) {
  std::string spec = requested;
  if (spec.empty()) {
    const char* env = std::getenv("KILN_DEVICE");
    spec = env && *env ? env : "cpu";
  }
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string options = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "cpu") {
    if (!options.empty()) {
      return Error(StatusCode::kInvalidArgument, "device '", spec, "': the cpu device takes no options");
    }
    return &cpu::CpuDevice();
  }
  if (kind == "sim") {
    static std::mutex mu;
    static auto* opened = new std::map<std::string, std::unique_ptr<device::Device>>();  // never destroyed
    std::lock_guard<std::mutex> l(mu);
    auto it = opened->find(spec);
    if (it != opened->end()) return it->second.get();
    KILN_ASSIGN_OR_RETURN(auto d, sim::CreateSimDevice(spec, options));
    return opened->emplace(spec, std::move(d)).first->second.get();
  }
  std::string known;
  for (const std::string& k : DeviceKinds()) known += (known.empty() ? "" : ", ") + k;
  return Error(StatusCode::kInvalidArgument, "unknown device '", spec, "' (this build has: ", known, ")");
}

}  // namespace kiln::runtime
