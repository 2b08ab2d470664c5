#include "backends/cuda/nvrtc.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "kiln/rtc.h"  // CacheDirectory
#include "rtc/cache_store.h"
#include "weights/sha256.h"

namespace kiln::cuda {
namespace {

struct Counters {
  std::atomic<std::uint64_t> compiles{0}, hits{0}, failed{0}, corrupt{0}, store_failures{0};
};
Counters& Stats() {
  static Counters c;
  return c;
}

bool StartsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

Status CheckFlag(const std::string& f) {
  static const char* const kExact[] = {"-std=c++17", "-std=c++20", "--use_fast_math", "-lineinfo", "--fmad=true",
                                       "--fmad=false", "-default-device", "--extra-device-vectorization"};
  for (const char* e : kExact) {
    if (f == e) return Status::Ok();
  }
  if ((StartsWith(f, "-D") || StartsWith(f, "-U")) && f.size() > 2 &&
      f.find_first_of(" \t\n\r") == std::string::npos) {
    return Status::Ok();
  }
  return Error(StatusCode::kInvalidArgument, "NVRTC flag '", f,
               "' is not accepted (accepted: -D<macro>[=<value>], -U<macro>, -std=c++17|c++20, --use_fast_math, "
               "-lineinfo, --fmad=true|false, -default-device, --extra-device-vectorization; the architecture is "
               "its own argument and headers are passed as headers)");
}

Status CheckHeaderName(const std::string& n) {
  const bool ok = !n.empty() && n.size() <= 255 && n.front() != '/' && n.find("..") == std::string::npos &&
                  std::all_of(n.begin(), n.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_.+-/", c) != nullptr;
                  });
  if (ok) return Status::Ok();
  return Error(StatusCode::kInvalidArgument, "NVRTC header name '", n,
               "' is not a relative path of letters, digits and _.+-/ without '..'");
}

// Length-prefixed fields, so no two different inputs hash alike.
void AddField(std::string& buf, const std::string& s) {
  buf += std::to_string(s.size());
  buf += ':';
  buf += s;
}

std::string NvrtcLog(nvrtcProgram prog) {
  std::size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) return "";
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "(NVRTC's log could not be read)";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

Status NvrtcError(nvrtcResult r, const char* what, const std::string& name) {
  return Error(StatusCode::kInternal, "NVRTC ", what, " for program '", name, "' failed: ", nvrtcGetErrorString(r));
}

std::string ArchList() {
  std::string s;
  for (int a : NvrtcArchitectures()) s += (s.empty() ? "" : ", ") + std::to_string(a);
  return s;
}

}  // namespace

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return StrCat(major, ".", minor);
}

std::vector<int> NvrtcArchitectures() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 1024) return {};
  std::vector<int> archs(static_cast<std::size_t>(n));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  return archs;
}

Result<NvrtcProgram> CompileCuda(const std::string& name, const std::string& source, int arch,
                                 const NvrtcOptions& options) {
  const std::string label = name.empty() ? "program" : name;
  for (const std::string& f : options.flags) KILN_RETURN_IF_ERROR(CheckFlag(f).WithContext(label));
  for (const NvrtcHeader& h : options.headers) KILN_RETURN_IF_ERROR(CheckHeaderName(h.name).WithContext(label));
  const std::vector<int> archs = NvrtcArchitectures();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    return Error(StatusCode::kInvalidArgument, "program '", label, "': NVRTC ", NvrtcVersion(),
                 " cannot compile for sm_", arch, " (it supports: ", ArchList(), ")");
  }

  NvrtcProgram out;
  std::string key_input = "kiln-nvrtc-cubin-1\n";
  AddField(key_input, label);
  AddField(key_input, source);
  for (const NvrtcHeader& h : options.headers) {
    AddField(key_input, h.name);
    AddField(key_input, h.source);
  }
  for (const std::string& f : options.flags) AddField(key_input, f);
  AddField(key_input, std::to_string(arch));
  AddField(key_input, NvrtcVersion());
  out.key = weights::Sha256Hex(key_input.data(), key_input.size());

  const std::string dir = options.use_cache ? rtc::CacheDirectory() : "";
  const std::string entry = dir.empty() ? "" : dir + "/" + out.key + ".rtc";
  if (!entry.empty()) {
    const rtc::store::ReadResult r = rtc::store::ReadEntry(entry, &out.log, &out.cubin);
    if (r == rtc::store::ReadResult::kHit) {
      ++Stats().hits;
      out.from_cache = true;
      return out;
    }
    if (r == rtc::store::ReadResult::kUntrusted) ++Stats().corrupt;
  }

  ++Stats().compiles;
  std::vector<const char*> hdr_src, hdr_names;
  for (const NvrtcHeader& h : options.headers) {
    hdr_src.push_back(h.source.c_str());
    hdr_names.push_back(h.name.c_str());
  }
  nvrtcProgram prog = nullptr;
  const std::string file = label + ".cu";
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), file.c_str(), static_cast<int>(hdr_src.size()),
                                     hdr_src.data(), hdr_names.data());
  if (r != NVRTC_SUCCESS) {
    ++Stats().failed;
    return NvrtcError(r, "nvrtcCreateProgram", label);
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  std::vector<std::string> args = {"-arch=sm_" + std::to_string(arch)};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  out.log = NvrtcLog(prog);
  if (r == NVRTC_ERROR_COMPILATION) {
    ++Stats().failed;
    return Error(StatusCode::kInvalidArgument, "program '", label, "' failed to compile for sm_", arch,
                 " (NVRTC ", NvrtcVersion(), "):\n", out.log);
  }
  if (r != NVRTC_SUCCESS) {
    ++Stats().failed;
    return NvrtcError(r, "nvrtcCompileProgram", label);
  }
  std::size_t n = 0;
  r = nvrtcGetCUBINSize(prog, &n);
  if (r != NVRTC_SUCCESS || n == 0) {
    ++Stats().failed;
    return r != NVRTC_SUCCESS ? NvrtcError(r, "nvrtcGetCUBINSize", label)
                              : Error(StatusCode::kInternal, "NVRTC gave program '", label, "' an empty CUBIN");
  }
  out.cubin.resize(n);
  r = nvrtcGetCUBIN(prog, reinterpret_cast<char*>(out.cubin.data()));
  if (r != NVRTC_SUCCESS) {
    ++Stats().failed;
    return NvrtcError(r, "nvrtcGetCUBIN", label);
  }
  if (!dir.empty() && !rtc::store::WriteEntry(dir, entry, out.log, out.cubin)) ++Stats().store_failures;
  return out;
}

NvrtcStats GetNvrtcStats() {
  Counters& c = Stats();
  return {c.compiles.load(), c.hits.load(), c.failed.load(), c.corrupt.load(), c.store_failures.load()};
}

// ---- CudaModule ----

Result<std::unique_ptr<CudaModule>> CudaModule::Load(const std::vector<std::uint8_t>& cubin, const std::string& name) {
  cudaLibrary_t lib = nullptr;
  const cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Error(StatusCode::kInvalidArgument, "loading CUDA module '", name, "' failed: ", cudaGetErrorName(e), " (",
                 cudaGetErrorString(e), ")");
  }
  return std::unique_ptr<CudaModule>(new CudaModule(lib, name));
}

CudaModule::~CudaModule() {
  if (lib_) cudaLibraryUnload(static_cast<cudaLibrary_t>(lib_));
}

Result<const void*> CudaModule::Kernel(const std::string& symbol) const {
  cudaKernel_t k = nullptr;
  const cudaError_t e = cudaLibraryGetKernel(&k, static_cast<cudaLibrary_t>(lib_), symbol.c_str());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Error(StatusCode::kNotFound, "CUDA module '", name_, "' has no kernel '", symbol, "': ",
                 cudaGetErrorName(e));
  }
  return static_cast<const void*>(k);
}

}  // namespace kiln::cuda
