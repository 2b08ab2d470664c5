// The device layer: everything the executor, the weight loader and kernels
// need from a device, behind one interface a backend implements.
//
// A Device owns memory (device memory, and pinned host memory where it has
// it), creates streams and events, and answers what it supports
// (Capabilities, SupportsOp). A Stream is an in-order queue of device work:
// asynchronous copies in each direction, kernel launches, host functions,
// event records and waits, and capture of launches into a Recording that is
// replayed later as one unit (the "sunk" task list; a CUDA graph on a GPU).
// Errors raised by queued work surface at the stream's next Synchronize;
// work queued after a failure is skipped (as on a GPU stream).
//
// Devices today: "cpu" (memory is host memory; work runs on the calling
// thread for inline streams or on a worker thread) and "sim" (a discrete
// test device: see sim_device.cc). Devices are opened by spec string
// ("cpu", "sim", "sim:lack=Relu+Conv,seed=7") and live for the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/dtype.h"

namespace kiln {
class Event;
namespace ir {
class Node;
}
}

namespace kiln::device {

class Device;
class Stream;
class Kernel;        // device/kernel.h
struct KernelInit;   // device/kernel.h

enum class MemoryKind {
  kDevice,      // device memory: host code may touch it only if host_addressable
  kPinnedHost,  // host memory the device copies from/to fastest; device launches
                // may read and write it too (CUDA: mapped pinned memory)
};

// kHostToHost: between host buffers (pinned or not) in stream order, e.g.
// the argument blocks of CPU-placed tasks.
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

struct Capabilities {
  std::string kind;                // "cpu", "sim"
  bool host_addressable = false;   // host code may read/write device memory directly
  bool maps_host_memory = false;   // host memory (a read-only file mapping) usable as device memory
  bool pinned_host_memory = false; // MemoryKind::kPinnedHost is distinct, faster-to-copy memory
  bool launches_run_on_host = false;  // a launch is a host function doing the work (cpu, sim)
  std::size_t alignment = 64;      // of every allocation
  // Layout and fusion choices the compiler may make for this target.
  bool channels_last_conv = false;  // NHWC (blocked) convolution layouts
  bool fused_epilogues = false;     // conv/gemm with fused activation / add post-ops
  bool half_arithmetic = false;     // float16/bfloat16 kernels (else half graphs compute in float32)
  // Native bfloat16 dot products (x86: AVX512_BF16 or AMX-BF16), found on
  // the machine that runs the model: kernels of nodes a model computes in
  // bfloat16 (ops::kBf16Attr) may then take bfloat16 operands.
  bool bf16_dot = false;
  // Native 8-bit dot products (x86: AVX512-VNNI, AVX-VNNI or AMX-INT8), found
  // on the machine that runs the model: without them the CPU's exact int8
  // kernels run at about a quarter of the rate (the executor's cost model,
  // runtime::TaskCostNs, counts 8-bit multiply-adds accordingly).
  bool int8_dot = false;
  // Kernel library whose registry this device runs ("cpu" for cpu and sim).
  std::string kernel_library;
};

// What a kernel runs with: passed to every launch. No process-global state.
struct ExecContext {
  Device* device = nullptr;
  Stream* stream = nullptr;
  int threads = 1;  // host threads a CPU kernel may use
  // Scratch memory for the running kernel, in the memory it runs on: at
  // least the largest Kernel::workspace_bytes() of the list being replayed
  // (one per executor: its tasks run one after another). Null: none given
  // (eager evaluation); a kernel then finds its own.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// One unit of device work. On devices whose launches run on the host, fn is
// called (on the stream's thread) with obj and args; it returns an error
// naming what failed.
using LaunchFn = Status (*)(void* obj, const void* args, const ExecContext& ctx);

// A captured list of launches, replayed as a unit (cpu/sim: the launch
// records; a GPU: a graph). Owned by whoever ended the capture; must outlive
// every replay queued from it.
class Recording {
 public:
  virtual ~Recording() = default;
  virtual std::size_t size() const = 0;  // launches recorded
};

class Stream {
 public:
  virtual ~Stream() = default;  // waits for queued work
  virtual Device& device() = 0;
  // Queues a copy. Host->device: `src` may be reused as soon as Copy returns
  // (the bytes are taken now, as CUDA does for pageable memory).
  // Device->host: `dst` holds the bytes once the stream has reached the copy
  // (Synchronize or an event). Device->device: ordered like any other work.
  virtual Status Copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) = 0;
  // A host->device copy whose source the caller keeps unchanged until the
  // stream has reached it (an event recorded after it has fired, or
  // Synchronize): the device reads `src` then, without taking the bytes
  // first, so a pinned source (MemoryKind::kPinnedHost) is copied by DMA
  // alone (the chunked weight upload). The default takes the bytes (Copy).
  virtual Status CopyHeld(void* dst, const void* src, std::size_t bytes) {
    return Copy(dst, src, bytes, CopyKind::kHostToDevice);
  }
  // Queues (or, while capturing, records) fn(obj, args, ctx).
  virtual Status Launch(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) = 0;
  // Like Launch, but fn is host work in stream order (a node placed on the
  // CPU; a host node in a CUDA graph): it is not a device operation, so it
  // may touch only host memory (pinned host memory included), and `args`
  // must be host memory. Recorded while capturing, like Launch.
  virtual Status LaunchHost(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) = 0;
  // Queues host work in stream order. It is not a device operation: it must
  // not touch device memory (on sim that is caught).
  virtual Status HostFunc(std::function<Status()> fn) = 0;
  // While capturing, Launch and Replay record instead of queueing; copies,
  // host functions and events are refused.
  virtual Status BeginCapture() = 0;
  virtual Result<std::unique_ptr<Recording>> EndCapture() = 0;
  virtual bool capturing() const = 0;
  // Queues the recorded launches in order with `ctx` (while capturing:
  // records a nested replay).
  virtual Status Replay(const Recording& rec, const ExecContext& ctx) = 0;
  virtual Status RecordEvent(Event& e) = 0;
  virtual Status WaitEvent(const Event& e) = 0;
  // Waits for all queued work; returns the first error any of it reported
  // since the previous Synchronize.
  virtual Status Synchronize() = 0;
  virtual std::uint64_t tasks_completed() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string& spec() const = 0;  // as opened: "cpu", "sim:lack=Relu"
  virtual const Capabilities& caps() const = 0;
  const std::string& kind() const { return caps().kind; }
  // Aligned to caps().alignment; not initialised. Errors name the size.
  virtual Result<void*> Allocate(std::size_t bytes, MemoryKind kind = MemoryKind::kDevice) = 0;
  virtual void Free(void* p) = 0;
  // A stream whose work runs on its own thread, asynchronously.
  virtual Result<std::unique_ptr<Stream>> CreateStream() = 0;
  // The stream a synchronous call uses: on cpu it runs work on the calling
  // thread as it is queued; elsewhere an asynchronous stream (the caller
  // synchronises).
  virtual Result<std::unique_ptr<Stream>> CreateSyncStream() = 0;
  // Whether a kernel for this op (type, domain, input dtypes) exists here.
  virtual bool SupportsOp(const std::string& op_type, const std::string& domain,
                          const std::vector<DType>& input_dtypes) const = 0;
  // Whether this device runs this node: placement (compile) and the loader
  // ask this. A device whose kernels take only some attribute values or
  // shapes (cuda: a Cast's target type, a convolution's padding) looks at
  // the node; by default the op, domain and input types decide.
  virtual bool SupportsNode(const ir::Node& node, const std::vector<DType>& input_dtypes) const;
  // Creates the kernel for init.node from this device's kernel library (the
  // executor calls it once per node at load, and per new shape for nodes
  // with data-dependent extents). Errors name the node; never throws.
  virtual Result<std::unique_ptr<Kernel>> CreateKernel(const KernelInit& init) = 0;
  // Runs `fn` synchronously as a device operation (sim: its memory is
  // accessible meanwhile). Used for kernel preparation at load time (weight
  // prepacking reads device-resident weights), never on the replay path.
  virtual Status RunPrepare(const std::function<Status()>& fn) = 0;
};

// Devices are opened through runtime/devices.h (OpenDevice), which knows
// the backends this build has; this layer only defines the interface.

}  // namespace kiln::device
