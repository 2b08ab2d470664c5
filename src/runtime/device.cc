#include "runtime/device.h"

#include <cstdlib>
#include <cstring>

namespace kiln::runtime {
namespace {

class CpuDeviceImpl final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  bool can_map_host_memory() const override { return true; }
  Result<void*> Allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) return Error(StatusCode::kInternal, "cannot allocate ", bytes, " bytes of CPU memory");
    return p;
  }
  void Free(void* p) override { std::free(p); }
  Status CopyFromHost(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
};

}  // namespace

Device& CpuDevice() {
  static CpuDeviceImpl d;
  return d;
}

}  // namespace kiln::runtime
