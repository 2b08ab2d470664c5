#include "backends/cpu/cpu_device.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernel.h"
#include "device/host_stream.h"

namespace kiln::cpu {
namespace {

// The CPU device keeps large freed blocks warm for reuse, as a GPU's
// caching allocator does: device memory that was touched once is not paid
// for again in page faults (~3 us per 4 KiB on these VMs). Blocks of 1 MiB and
// more are pooled, up to kMaxPooled bytes; a reuse may be at most twice the
// requested size. Pinned host memory is ordinary host memory here.
class CpuDeviceImpl final : public device::Device {
 public:
  static constexpr std::size_t kPoolMin = 1u << 20;
  static constexpr std::size_t kMaxPooled = std::size_t{4} << 30;

  CpuDeviceImpl() {
    caps_.kind = "cpu";
    caps_.host_addressable = true;
    caps_.maps_host_memory = true;
    caps_.pinned_host_memory = false;
    caps_.launches_run_on_host = true;
    caps_.alignment = 64;
    caps_.channels_last_conv = true;
    caps_.fused_epilogues = true;
    caps_.bf16_dot = NativeBf16Dot();
    caps_.int8_dot = NativeInt8Dot();
    caps_.kernel_library = "cpu";
  }
  const std::string& spec() const override { return spec_; }
  const device::Capabilities& caps() const override { return caps_; }

  Result<void*> Allocate(std::size_t bytes, device::MemoryKind) override {
    if (bytes > (std::size_t{1} << 62)) return Error(StatusCode::kOutOfRange, "cannot allocate ", bytes, " bytes of CPU memory");
    const std::size_t size = (bytes + 63) / 64 * 64 + 64;
    std::lock_guard<std::mutex> l(mu_);
    if (size >= kPoolMin) {
      auto it = pool_.lower_bound(size);
      if (it != pool_.end() && it->first <= 2 * size) {
        void* p = it->second;
        pooled_ -= it->first;
        sizes_[p] = it->first;
        pool_.erase(it);
        return p;
      }
    }
    void* p = std::aligned_alloc(64, size);
    if (!p) return Error(StatusCode::kOutOfRange, "cannot allocate ", bytes, " bytes of CPU memory");
    sizes_[p] = size;
    return p;
  }
  void Free(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> l(mu_);
    auto it = sizes_.find(p);
    const std::size_t size = it == sizes_.end() ? 0 : it->second;
    if (it != sizes_.end()) sizes_.erase(it);
    if (size >= kPoolMin && pooled_ + size <= kMaxPooled) {
      pool_.emplace(size, p);
      pooled_ += size;
      return;
    }
    std::free(p);
  }
  Result<std::unique_ptr<device::Stream>> CreateStream() override {
    KILN_ASSIGN_OR_RETURN(auto s, device::HostStream::Create(*this, false, nullptr, 0));
    return std::unique_ptr<device::Stream>(std::move(s));
  }
  Result<std::unique_ptr<device::Stream>> CreateSyncStream() override {
    KILN_ASSIGN_OR_RETURN(auto s, device::HostStream::Create(*this, true, nullptr, 0));
    return std::unique_ptr<device::Stream>(std::move(s));
  }
  bool SupportsOp(const std::string& op_type, const std::string& domain, const std::vector<DType>&) const override {
    return HasKernel(op_type, domain);
  }
  Result<std::unique_ptr<device::Kernel>> CreateKernel(const device::KernelInit& init) override {
    return cpu::CreateKernel(init);
  }
  Status RunPrepare(const std::function<Status()>& fn) override { return fn(); }

 private:
  std::string spec_ = "cpu";
  device::Capabilities caps_;
  std::mutex mu_;
  std::multimap<std::size_t, void*> pool_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t pooled_ = 0;
};

}  // namespace

device::Device& CpuDevice() {
  static CpuDeviceImpl* d = new CpuDeviceImpl();  // never destroyed: blocks may be freed at exit
  return *d;
}

bool HasKernel(const std::string& op_type, const std::string& domain) {
  return KernelRegistry::Get().Find(op_type, domain) != nullptr;
}

}  // namespace kiln::cpu
