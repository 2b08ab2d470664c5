// "sim": a discrete test device on a machine without one. It runs the CPU
// kernels, but behaves like a GPU by contract:
//   - its memory is not the host's: in the AddressSanitizer build every
//     device allocation is poisoned except while a device operation (copy,
//     launch, replay, kernel preparation) runs, so a host read or write of
//     it anywhere else aborts with a report;
//   - its streams are asynchronous (a worker thread each) and every device
//     operation completes after a seeded random delay (0..delay_us), so a
//     missing Synchronize shows up as wrong or stale data;
//   - it cannot use host memory in place (no mapped weight files);
//   - it can be told to lack ops (lack=Relu+Conv): a file needing them is
//     refused at load; and to lack channels-last kernels (no_nhwc) or fused
//     epilogues (no_fusion), so the compiler's target-driven choices show.
// Outputs are bit-identical to the CPU's: the same kernels run.
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <set>
#include <unordered_map>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernel.h"
#include "device/host_stream.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_SIM_ASAN 1
#endif
#ifdef KILN_SIM_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace kiln::sim {
namespace {

class SimDevice final : public device::Device, public device::OpWindow {
 public:
  SimDevice(std::string spec, std::set<std::string> lack, std::uint64_t seed, std::uint32_t delay_us, bool nhwc,
            bool fusion)
      : spec_(std::move(spec)), lack_(std::move(lack)), seed_(seed), delay_us_(delay_us) {
    caps_.kind = "sim";
    caps_.host_addressable = false;
    caps_.maps_host_memory = false;
    caps_.pinned_host_memory = true;
    caps_.launches_run_on_host = true;
    caps_.alignment = 256;  // as CUDA's allocator
    caps_.channels_last_conv = nhwc;
    caps_.fused_epilogues = fusion;
    caps_.bf16_dot = cpu::NativeBf16Dot();  // it runs the CPU's kernels on this CPU
    caps_.int8_dot = cpu::NativeInt8Dot();
    caps_.kernel_library = "cpu";
  }
  ~SimDevice() override = default;

  const std::string& spec() const override { return spec_; }
  const device::Capabilities& caps() const override { return caps_; }

  Result<void*> Allocate(std::size_t bytes, device::MemoryKind kind) override {
    if (bytes > (std::size_t{1} << 62)) return Error(StatusCode::kOutOfRange, "cannot allocate ", bytes, " bytes of sim memory");
    const std::size_t size = (bytes + 255) / 256 * 256 + 256;
    void* p = std::aligned_alloc(256, size);
    if (!p) return Error(StatusCode::kOutOfRange, "cannot allocate ", bytes, " bytes of sim ",
                         kind == device::MemoryKind::kDevice ? "device" : "pinned host", " memory");
    std::lock_guard<std::mutex> l(mu_);
    if (kind == device::MemoryKind::kDevice) {
      device_[p] = size;
      if (active_ == 0) Poison(p, size);
    } else {
      pinned_.insert(p);
    }
    return p;
  }
  void Free(void* p) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = device_.find(p);
      if (it != device_.end()) {
        Unpoison(p, it->second);
        device_.erase(it);
      } else {
        pinned_.erase(p);
      }
    }
    std::free(p);
  }
  Result<std::unique_ptr<device::Stream>> CreateStream() override {
    std::uint64_t seed;
    {
      std::lock_guard<std::mutex> l(mu_);
      seed = seed_ + 0x9E3779B97F4A7C15ull * ++streams_;
    }
    KILN_ASSIGN_OR_RETURN(auto s, device::HostStream::Create(*this, false, this, seed));
    return std::unique_ptr<device::Stream>(std::move(s));
  }
  Result<std::unique_ptr<device::Stream>> CreateSyncStream() override { return CreateStream(); }
  bool SupportsOp(const std::string& op_type, const std::string& domain, const std::vector<DType>&) const override {
    return lack_.count(op_type) == 0 && cpu::HasKernel(op_type, domain);
  }
  // The CPU kernel library runs here (a kernel's preparation is a device
  // operation: the executor calls this inside RunPrepare).
  Result<std::unique_ptr<device::Kernel>> CreateKernel(const device::KernelInit& init) override {
    return cpu::CreateKernel(init);
  }
  Status RunPrepare(const std::function<Status()>& fn) override {
    Enter();
    Status st;
    try {
      st = fn();
    } catch (...) {
      Exit();
      throw;
    }
    Exit();
    return st;
  }

  // OpWindow: device memory is accessible while any device operation runs.
  void Enter() override {
    std::lock_guard<std::mutex> l(mu_);
    if (active_++ == 0) {
      for (auto& [p, size] : device_) Unpoison(p, size);
    }
  }
  void Exit() override {
    std::lock_guard<std::mutex> l(mu_);
    if (--active_ == 0) {
      for (auto& [p, size] : device_) Poison(p, size);
    }
  }
  std::uint32_t max_delay_us() const override { return delay_us_; }

 private:
  static void Poison(void* p, std::size_t size) {
#ifdef KILN_SIM_ASAN
    ASAN_POISON_MEMORY_REGION(p, size);
#else
    (void)p, (void)size;
#endif
  }
  static void Unpoison(void* p, std::size_t size) {
#ifdef KILN_SIM_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, size);
#else
    (void)p, (void)size;
#endif
  }

  std::string spec_;
  std::set<std::string> lack_;
  std::uint64_t seed_;
  std::uint32_t delay_us_;
  device::Capabilities caps_;
  std::mutex mu_;
  std::unordered_map<void*, std::size_t> device_;
  std::set<void*> pinned_;
  int active_ = 0;
  std::uint64_t streams_ = 0;
};

bool ParseU64(const std::string& s, std::uint64_t max, std::uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

}  // namespace

Result<std::unique_ptr<device::Device>> CreateSimDevice(const std::string& spec, const std::string& options) {
  std::set<std::string> lack;
  std::uint64_t seed = 1, delay = 50;
  bool nhwc = true, fusion = true;
  std::stringstream ss(options);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "lack") {
      std::stringstream ops(value);
      std::string op;
      while (std::getline(ops, op, '+')) {
        if (!op.empty()) lack.insert(op);
      }
    } else if (key == "seed") {
      if (!ParseU64(value, ~std::uint64_t{0} >> 1, &seed)) {
        return Error(StatusCode::kInvalidArgument, "device '", spec, "': seed '", value, "' is not a number");
      }
    } else if (key == "delay_us") {
      if (!ParseU64(value, 1000000, &delay)) {
        return Error(StatusCode::kInvalidArgument, "device '", spec, "': delay_us '", value,
                     "' is not a number of microseconds up to 1000000");
      }
    } else if (key == "no_nhwc" && eq == std::string::npos) {
      nhwc = false;
    } else if (key == "no_fusion" && eq == std::string::npos) {
      fusion = false;
    } else {
      return Error(StatusCode::kInvalidArgument, "device '", spec, "': unknown option '", key,
                   "' (sim takes lack=Op1+Op2, seed=N, delay_us=N, no_nhwc, no_fusion)");
    }
  }
  return std::unique_ptr<device::Device>(
      new SimDevice(spec, std::move(lack), seed, static_cast<std::uint32_t>(delay), nhwc, fusion));
}

}  // namespace kiln::sim
