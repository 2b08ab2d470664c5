#include "runtime/devices.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cpu/cpu_device.h"

namespace kiln::runtime {

device::Device& CpuDevice() { return cpu::CpuDevice(); }

std::vector<std::string> DeviceKinds() {
#ifdef KILN_HAVE_CUDA
  return {"cpu", "sim", "cuda"};
#else
  return {"cpu", "sim"};
#endif
}

namespace {

using CreateCudaFn = device::Device* (*)(const char*, const char*, Status**);
struct CudaModuleFns {
  CreateCudaFn device = nullptr, target = nullptr;
};

// The CUDA backend is a module (libkiln_cuda.so, backends/cuda), loaded on
// first use: $KILN_CUDA_MODULE if set, else next to this library.
Result<CudaModuleFns> LoadCudaModule(const std::string& spec) {
  static std::mutex mu;
  static CudaModuleFns fns;
  std::lock_guard<std::mutex> l(mu);
  if (fns.device) return fns;
  std::string path;
  if (const char* env = std::getenv("KILN_CUDA_MODULE"); env && *env) {
    path = env;
  } else {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&LoadCudaModule), &info) && info.dli_fname) {
      path = info.dli_fname;
      const auto slash = path.rfind('/');
      path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libkiln_cuda.so";
    } else {
      path = "libkiln_cuda.so";
    }
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return Error(StatusCode::kUnimplemented, "device '", spec, "': the CUDA backend '", path,
                 "' could not be loaded: ", why ? why : "unknown reason",
#ifdef KILN_HAVE_CUDA
                 " (set KILN_CUDA_MODULE to its path)"
#else
                 " (this build of Kiln has no CUDA backend: it was built without the CUDA toolkit)"
#endif
    );
  }
  auto version = reinterpret_cast<const char* (*)()>(dlsym(h, "kiln_cuda_module_version"));
  auto fn = reinterpret_cast<CreateCudaFn>(dlsym(h, "kiln_cuda_create_device"));
  auto target = reinterpret_cast<CreateCudaFn>(dlsym(h, "kiln_cuda_create_target"));
  if (!version || !fn || !target) {
    dlclose(h);
    return Error(StatusCode::kInvalidArgument, "device '", spec, "': '", path, "' is not a Kiln CUDA backend");
  }
  if (std::string(version()) != KILN_BUILD_ID) {
    const std::string v = version();
    dlclose(h);
    return Error(StatusCode::kInvalidArgument, "device '", spec, "': the CUDA backend '", path, "' is from Kiln ", v,
                 ", this library is ", KILN_BUILD_ID);
  }
  fns.device = fn;  // the module stays loaded for the process
  fns.target = target;
  return fns;
}

}  // namespace

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
  if (kind != "sim" && kind != "cuda") {
    std::string known;
    for (const std::string& k : DeviceKinds()) known += (known.empty() ? "" : ", ") + k;
    return Error(StatusCode::kInvalidArgument, "unknown device '", spec, "' (this build has: ", known, ")");
  }
  // sim and cuda devices: opened once per distinct spec, kept for the process.
  static std::mutex mu;
  static auto* opened = new std::map<std::string, std::unique_ptr<device::Device>>();  // never destroyed
  std::lock_guard<std::mutex> l(mu);
  auto it = opened->find(spec);
  if (it != opened->end()) return it->second.get();
  std::unique_ptr<device::Device> made;
  if (kind == "sim") {
    KILN_ASSIGN_OR_RETURN(made, sim::CreateSimDevice(spec, options));
  } else {
    KILN_ASSIGN_OR_RETURN(CudaModuleFns fns, LoadCudaModule(spec));
    Status* error = nullptr;
    made.reset(fns.device(spec.c_str(), options.c_str(), &error));
    if (!made) {
      Status st = error ? *error : Error(StatusCode::kInternal, "device '", spec, "' could not be opened");
      delete error;
      return st;
    }
  }
  return opened->emplace(spec, std::move(made)).first->second.get();
}

Result<device::Device*> OpenCompileTarget(const std::string& requested) {
  const std::string spec = requested.empty() ? "cpu" : requested;
  const auto colon = spec.find(':');
  if (spec.substr(0, colon) != "cuda") return OpenDevice(spec);
  auto d = OpenDevice(spec);
  if (d.ok()) return d;
  // No usable GPU: a target description from the module, kept per spec.
  static std::mutex mu;
  static auto* targets = new std::map<std::string, std::unique_ptr<device::Device>>();  // never destroyed
  std::lock_guard<std::mutex> l(mu);
  auto it = targets->find(spec);
  if (it != targets->end()) return it->second.get();
  KILN_ASSIGN_OR_RETURN(CudaModuleFns fns, LoadCudaModule(spec));
  Status* error = nullptr;
  std::unique_ptr<device::Device> t(fns.target(spec.c_str(), colon == std::string::npos ? "" : spec.c_str() + colon + 1,
                                               &error));
  if (!t) {
    Status st = error ? *error : Error(StatusCode::kInternal, "compile target '", spec, "' could not be opened");
    delete error;
    return st;
  }
  return targets->emplace(spec, std::move(t)).first->second.get();
}

}  // namespace kiln::runtime
