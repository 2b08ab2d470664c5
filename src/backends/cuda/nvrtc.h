// Runtime compilation of CUDA C++ with NVRTC, for the CUDA device's own
// kernels and for custom operators. A program is compiled for one GPU
// architecture (sm_XX) straight to a CUBIN, so loading it needs no JIT.
// NVRTC needs no GPU: programs compile (and are cached) on any machine with
// the toolkit; only CudaModule::Load needs the device.
//
// Cache: the RTC cache directory (kiln/rtc.h: $KILN_RTC_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln/rtc, else ~/.cache/kiln/rtc), one entry per program,
// shared with the CPU programs' store (rtc/cache_store.h: checksummed,
// trusted owner, atomic rename). Key: SHA-256 over the program's name,
// source and headers, its flags, the architecture and NVRTC's version.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln::cuda {

struct NvrtcHeader {
  std::string name;  // as the source includes it: letters, digits, "_.+-/", no ".."
  std::string source;
};

struct NvrtcOptions {
  // Accepted: -D<macro>[=<value>], -U<macro>, -std=c++17|c++20,
  // --use_fast_math, -lineinfo, --fmad=true|false, -default-device,
  // --extra-device-vectorization. The architecture is its own argument;
  // include paths are not accepted (headers go in `headers`, so the key
  // covers them).
  std::vector<std::string> flags;
  std::vector<NvrtcHeader> headers;
  bool use_cache = true;
};

struct NvrtcProgram {
  std::vector<std::uint8_t> cubin;  // an ELF for sm_<arch>
  std::string log;                  // NVRTC's log (warnings), also on a cache hit
  std::string key;                  // the cache key (64 hex digits)
  bool from_cache = false;
};

// Compiles `source` for sm_<arch> (arch = major * 10 + minor, e.g. 90).
// Errors: kInvalidArgument for a rejected flag or header name, an
// architecture NVRTC does not support (its list is in the message), or
// source that fails to compile (the message names the program and ends with
// NVRTC's log); kInternal for an NVRTC failure of its own.
Result<NvrtcProgram> CompileCuda(const std::string& name, const std::string& source, int arch,
                                 const NvrtcOptions& options = {});

// NVRTC's version ("13.0") and the architectures it compiles for.
std::string NvrtcVersion();
std::vector<int> NvrtcArchitectures();

struct NvrtcStats {
  std::uint64_t compiles = 0, hits = 0, failed_compiles = 0, corrupt_entries = 0, store_failures = 0;
};
NvrtcStats GetNvrtcStats();

// A CUBIN loaded on the current CUDA device (cudaLibraryLoadData): its
// kernels, by extern "C" name, launch with cudaLaunchKernel.
class CudaModule {
 public:
  static Result<std::unique_ptr<CudaModule>> Load(const std::vector<std::uint8_t>& cubin, const std::string& name);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;
  // The kernel handle (a cudaKernel_t, usable as cudaLaunchKernel's func).
  Result<const void*> Kernel(const std::string& symbol) const;

 private:
  CudaModule(void* lib, std::string name) : lib_(lib), name_(std::move(name)) {}
  void* lib_;
  std::string name_;
};

}  // namespace kiln::cuda
