// The CUDA device (issue 11): device memory through a caching allocator,
// pinned host memory (mapped, so device code may touch it), streams, events,
// copies in every direction, and capture of a task list into a CUDA graph.
//
// It lives in libkiln_cuda.so, a module the runtime loads when a "cuda"
// device is opened (runtime/devices.cc), so that Kiln's other libraries and
// programs need no CUDA library to run. The module links libkiln.so (the
// one copy of Kiln in the process), the CUDA runtime statically and NVRTC.
//
// What a launch is here: the executor's launch function runs on the host
// when Launch is called and queues device work on the stream (its kernels
// read tensor addresses from the argument block in device memory). While
// the stream captures, that device work is recorded into a CUDA graph, so
// it is queued once, at load, and every run replays the graph; a run binds
// new buffers by rewriting the argument blocks (an ordinary host->device
// copy before the replay), never by recording again. LaunchHost (a node
// placed on the CPU) becomes a host node of the graph: CUDA runs it on its
// own thread in stream order, and it must not call CUDA (nor may HostFunc's
// function).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "device/device.h"

namespace kiln::cuda {

// `options`: the text after "cuda:" in the spec, empty or a device ordinal
// ("cuda:1"). Fails with the CUDA driver's reason where there is no usable
// GPU (no driver, no device, a driver too old for this runtime).
Result<std::unique_ptr<device::Device>> CreateCudaDevice(const std::string& spec, const std::string& options);

// A compile target without a GPU: the device's capabilities and kernel
// choices; everything that needs the GPU fails with `why`.
std::unique_ptr<device::Device> CreateCudaTarget(const std::string& spec, Status why);

// The CUDA stream behind a Kiln stream of a CUDA device (a cudaStream_t), for
// kernels to launch on; null for a stream of another device.
void* CudaStreamHandle(device::Stream& stream);
// The compute capability of a CUDA device as NVRTC's architecture number
// (major * 10 + minor: 90 for sm_90); 0 for another device.
int CudaArch(const device::Device& device);

}  // namespace kiln::cuda

// The module's entry points, found with dlsym by runtime/devices.cc.
extern "C" {
// The Kiln version the module was built with (it must equal the loading
// libkiln.so's: the two share C++ types).
const char* kiln_cuda_module_version();
// Opens a device. On success returns a heap Device (owned by the caller) and
// leaves *error alone; on failure returns null and sets *error to a heap
// Status (owned by the caller).
kiln::device::Device* kiln_cuda_create_device(const char* spec, const char* options, kiln::Status** error);
// Like kiln_cuda_create_device, but where no GPU can be used returns a
// target for the compiler (CreateCudaTarget) instead of failing.
kiln::device::Device* kiln_cuda_create_target(const char* spec, const char* options, kiln::Status** error);
}
