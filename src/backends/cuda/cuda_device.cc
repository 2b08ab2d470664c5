#include "backends/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/block_cache.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/nvrtc.h"
#include "backends/cuda/cuda_util.h"
#include "device/host_stream.h"  // kiln::Event::State
#include "device/kernel.h"

#ifndef KILN_BUILD_ID
#error "KILN_BUILD_ID must be defined by the build"
#endif

namespace kiln::cuda {
namespace {

class CudaDevice;

// What the compiler may assume of a CUDA target (the same with or without a
// GPU present: see CudaTarget).
device::Capabilities CudaCaps() {
  device::Capabilities caps;
  caps.kind = "cuda";
  caps.host_addressable = false;
  caps.maps_host_memory = false;
  caps.pinned_host_memory = true;
  caps.launches_run_on_host = false;
  caps.alignment = 256;  // cudaMalloc gives 256; the block cache keeps it (sizes are multiples of 512)
  caps.channels_last_conv = false;
  caps.fused_epilogues = false;
  caps.half_arithmetic = false;  // no float16 kernels yet: half graphs compute in float32
  caps.kernel_library = "cuda";
  return caps;
}

// A CUDA target without a usable GPU: what `compile --target cuda` needs
// (capabilities, which nodes get kernels) on a build machine. Everything
// that needs the device fails with the driver's reason.
class CudaTarget final : public device::Device {
 public:
  CudaTarget(std::string spec, Status why) : spec_(std::move(spec)), why_(std::move(why)), caps_(CudaCaps()) {}
  const std::string& spec() const override { return spec_; }
  const device::Capabilities& caps() const override { return caps_; }
  Result<void*> Allocate(std::size_t, device::MemoryKind) override { return why_; }
  void Free(void*) override {}
  Result<std::unique_ptr<device::Stream>> CreateStream() override { return why_; }
  Result<std::unique_ptr<device::Stream>> CreateSyncStream() override { return why_; }
  bool SupportsOp(const std::string& op, const std::string& domain, const std::vector<DType>& dtypes) const override {
    return CudaKernelExists(op, domain, dtypes);
  }
  bool SupportsNode(const ir::Node& node, const std::vector<DType>& dtypes) const override {
    return CudaNodeSupported(node, dtypes);
  }
  Result<std::unique_ptr<device::Kernel>> CreateKernel(const device::KernelInit&) override { return why_; }
  Status RunPrepare(const std::function<Status()>&) override { return why_; }

 private:
  std::string spec_;
  Status why_;
  device::Capabilities caps_;
};

// A host call queued with cudaLaunchHostFunc: one-shot (owned by the
// callback, which retires it) or recorded (owned by the recording, run at
// every replay with the context the last Replay gave).
struct HostCall {
  class CudaStream* stream = nullptr;
  device::LaunchFn fn = nullptr;
  void* obj = nullptr;
  const void* args = nullptr;
  device::ExecContext ctx;
  const device::ExecContext* replay_ctx = nullptr;  // recorded: the recording's slot
  std::function<Status()> func;                     // HostFunc's function (one-shot)
  bool always = false;                              // runs even after a failure (bookkeeping)
};

class CudaRecording final : public device::Recording {
 public:
  ~CudaRecording() override {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  std::size_t size() const override { return launches; }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::size_t launches = 0;
  std::vector<std::unique_ptr<HostCall>> host_calls;
  // The context host nodes run with: set by each Replay before the launch.
  mutable device::ExecContext ctx;
};

class CudaStream final : public device::Stream {
 public:
  CudaStream(CudaDevice& dev, cudaStream_t s) : dev_(dev), s_(s) {}
  ~CudaStream() override;

  device::Device& device() override;
  Status Copy(void* dst, const void* src, std::size_t bytes, device::CopyKind kind) override;
  Status CopyHeld(void* dst, const void* src, std::size_t bytes) override;
  Status Launch(device::LaunchFn fn, void* obj, const void* args, const device::ExecContext& ctx) override;
  Status LaunchHost(device::LaunchFn fn, void* obj, const void* args, const device::ExecContext& ctx) override;
  Status HostFunc(std::function<Status()> fn) override;
  Status BeginCapture() override;
  Result<std::unique_ptr<device::Recording>> EndCapture() override;
  bool capturing() const override { return capture_ != nullptr; }
  Status Replay(const device::Recording& rec, const device::ExecContext& ctx) override;
  Status RecordEvent(Event& e) override;
  Status WaitEvent(const Event& e) override;
  Status Synchronize() override;
  std::uint64_t tasks_completed() const override { return completed_.load(); }

  cudaStream_t handle() const { return s_; }

 private:
  static void CUDART_CB RunHostCall(void* p);
  void Fail(Status st) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = std::move(st);
  }
  bool failed() {
    std::lock_guard<std::mutex> l(mu_);
    return !error_.ok();
  }
  Status QueueHostCall(std::unique_ptr<HostCall> call);
  void ClearRetired();

  CudaDevice& dev_;
  cudaStream_t s_;
  std::unique_ptr<CudaRecording> capture_;
  std::mutex mu_;
  Status error_;                                  // the first host call's error since the last Synchronize
  std::vector<std::unique_ptr<HostCall>> retired_;  // one-shot calls done: destroyed on a user thread
  std::atomic<std::uint64_t> queued_{0}, completed_{0};
};

class CudaDevice final : public device::Device {
 public:
  CudaDevice(std::string spec, int ordinal, const cudaDeviceProp& prop)
      : spec_(std::move(spec)), ordinal_(ordinal), name_(prop.name),
        device_mem_({[this](std::size_t n) -> void* {
                       void* p = nullptr;
                       cudaSetDevice(ordinal_);
                       if (cudaMalloc(&p, n) != cudaSuccess) {
                         (void)cudaGetLastError();  // not sticky: clear it
                         return nullptr;
                       }
                       return p;
                     },
                     [](void* p) { cudaFree(p); }, [this] { return Sync(); }}),
        pinned_({[this](std::size_t n) -> void* {
                   void* p = nullptr;
                   cudaSetDevice(ordinal_);
                   if (cudaHostAlloc(&p, n, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
                     (void)cudaGetLastError();
                     return nullptr;
                   }
                   return p;
                 },
                 [](void* p) { cudaFreeHost(p); }, [this] { return Sync(); }}) {
    caps_ = CudaCaps();
    cc_major_ = prop.major;
    cc_minor_ = prop.minor;
  }

  const std::string& spec() const override { return spec_; }
  const device::Capabilities& caps() const override { return caps_; }
  int ordinal() const { return ordinal_; }
  int arch() const { return cc_major_ * 10 + cc_minor_; }

  Result<void*> Allocate(std::size_t bytes, device::MemoryKind kind) override {
    const bool dev = kind == device::MemoryKind::kDevice;
    void* p = bytes > (std::size_t{1} << 62) ? nullptr : (dev ? device_mem_ : pinned_).Allocate(bytes);
    if (!p) {
      std::size_t free_b = 0, total_b = 0;
      std::string avail;
      if (dev && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        avail = StrCat(" (", free_b, " of ", total_b, " bytes free)");
      }
      return Error(StatusCode::kOutOfRange, "cannot allocate ", bytes, " bytes of ",
                   dev ? "device" : "pinned host", " memory on '", spec_, "' (", name_, ")", avail);
    }
    return p;
  }
  void Free(void* p) override {
    if (!p) return;
    if (!device_mem_.Free(p)) (void)pinned_.Free(p);
  }
  Result<std::unique_ptr<device::Stream>> CreateStream() override {
    KILN_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    cudaStream_t s = nullptr;
    KILN_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    return std::unique_ptr<device::Stream>(new CudaStream(*this, s));
  }
  Result<std::unique_ptr<device::Stream>> CreateSyncStream() override { return CreateStream(); }
  // The CUDA kernel library (cuda_kernels.h); placement runs the rest on
  // the CPU (host nodes of the CUDA graph, on pinned memory).
  bool SupportsOp(const std::string& op, const std::string& domain, const std::vector<DType>& dtypes) const override {
    return CudaKernelExists(op, domain, dtypes);
  }
  bool SupportsNode(const ir::Node& node, const std::vector<DType>& dtypes) const override {
    return CudaNodeSupported(node, dtypes);
  }
  Result<std::unique_ptr<device::Kernel>> CreateKernel(const device::KernelInit& init) override {
    CudaLibraries libs;
    libs.load = [this](const std::string& name, const std::string& source) { return Program(name, source); };
    libs.blas = [this]() { return Blas(); };
    libs.blas_mu = &blas_mu_;
    libs.cudnn = [this]() { return Cudnn(); };
    libs.cudnn_mu = &cudnn_mu_;
    auto k = CreateCudaKernel(init, libs);
    if (!k.ok()) return k.status().WithContext(StrCat("device '", spec_, "'"));
    return k;
  }
  // The device's cuBLAS handle, made on first use. Its workspace is the
  // executor's (GemmKernel sets it with every call: cublasSetStream resets
  // it), so capture never allocates and two executors never share one.
  Result<void*> Blas() {
    std::lock_guard<std::mutex> l(blas_mu_);
    if (blas_) return static_cast<void*>(blas_);
    KILN_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
      return Error(StatusCode::kInternal, "cublasCreate on '", spec_, "' failed");
    }
    blas_ = h;
    return static_cast<void*>(blas_);
  }
  // The device's cuDNN handle, made on first use.
  Result<void*> Cudnn() {
    std::lock_guard<std::mutex> l(cudnn_mu_);
    if (cudnn_) return static_cast<void*>(cudnn_);
    KILN_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      return Error(StatusCode::kInternal, "cudnnCreate on '", spec_, "' failed: ", cudnnGetErrorString(st),
                   " (cuDNN ", cudnnGetVersion(), ")");
    }
    cudnn_ = h;
    return static_cast<void*>(cudnn_);
  }
  // A device program, compiled by NVRTC for this GPU (disk-cached) and
  // loaded once.
  Result<const CudaModule*> Program(const std::string& name, const std::string& source) {
    std::lock_guard<std::mutex> l(programs_mu_);
    auto it = programs_.find(name);
    if (it != programs_.end()) return it->second.get();
    NvrtcOptions o;
    o.headers = KernelProgramHeaders();
    KILN_ASSIGN_OR_RETURN(NvrtcProgram prog, CompileCuda(name, source, arch(), o));
    KILN_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    KILN_ASSIGN_OR_RETURN(auto mod, CudaModule::Load(prog.cubin, name));
    return programs_.emplace(name, std::move(mod)).first->second.get();
  }
  Status RunPrepare(const std::function<Status()>& fn) override { return fn(); }

  // All work on this device done (false: CUDA refused, e.g. during a
  // capture; the allocator then keeps freed blocks pending).
  bool Sync() {
    if (cudaSetDevice(ordinal_) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }
  // A pinned staging block whose copy has run: reusable at once. Called from
  // a stream callback (no CUDA call in it).
  void FreeStagingReady(void* p) { (void)pinned_.FreeReady(p); }
  Status Check(cudaError_t e, const char* what) const { return CudaStatus(e, what, spec_); }

 private:
  std::string spec_;
  int ordinal_;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0;
  device::Capabilities caps_;
  BlockCache device_mem_, pinned_;
  std::mutex blas_mu_;
  std::mutex cudnn_mu_;
  cudnnHandle_t cudnn_ = nullptr;  // lives with the device (the process)
  cublasHandle_t blas_ = nullptr;  // lives with the device (the process)
  std::mutex programs_mu_;
  std::map<std::string, std::unique_ptr<CudaModule>> programs_;
};

// ---- CudaStream ----

CudaStream::~CudaStream() {
  (void)Synchronize();
  if (capture_) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(s_, &g);
    if (g) cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s_);
}

device::Device& CudaStream::device() { return dev_; }

void CUDART_CB CudaStream::RunHostCall(void* p) {
  auto* call = static_cast<HostCall*>(p);
  // A recorded call reports to the stream that replays it.
  CudaStream& s = call->replay_ctx ? *static_cast<CudaStream*>(call->replay_ctx->stream) : *call->stream;
  if (call->always || !s.failed()) {
    Status st;
    try {
      if (call->func) {
        st = call->func();
      } else {
        st = call->fn(call->obj, call->args, call->replay_ctx ? *call->replay_ctx : call->ctx);
      }
    } catch (const std::exception& e) {
      st = Error(StatusCode::kInternal, "host work on '", s.dev_.spec(), "' threw: ", e.what());
    } catch (...) {
      st = Error(StatusCode::kInternal, "host work on '", s.dev_.spec(), "' threw");
    }
    if (!st.ok()) s.Fail(std::move(st));
  }
  ++s.completed_;
  if (!call->replay_ctx) {
    // One-shot: destroyed later on a user thread (its function may hold
    // what frees device memory, and CUDA may not be called from here).
    std::lock_guard<std::mutex> l(s.mu_);
    s.retired_.emplace_back(call);
  }
}

void CudaStream::ClearRetired() {
  std::vector<std::unique_ptr<HostCall>> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    done.swap(retired_);
  }
}

Status CudaStream::QueueHostCall(std::unique_ptr<HostCall> call) {
  call->stream = this;
  ++queued_;
  HostCall* raw = call.get();
  cudaError_t e = cudaLaunchHostFunc(s_, &CudaStream::RunHostCall, raw);
  if (e != cudaSuccess) {
    ++completed_;
    return dev_.Check(e, "cudaLaunchHostFunc");
  }
  if (capture_) {
    capture_->host_calls.push_back(std::move(call));
  } else {
    (void)call.release();  // the callback retires it
  }
  return Status::Ok();
}

Status CudaStream::Copy(void* dst, const void* src, std::size_t bytes, device::CopyKind kind) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "Copy: the stream on '", dev_.spec(), "' is capturing");
  ClearRetired();
  if (bytes == 0) return Status::Ok();
  if (kind == device::CopyKind::kHostToHost) {
    // CUDA runs a host->host cudaMemcpyAsync at once, outside stream order:
    // take the bytes now (the contract) and copy them in a host callback.
    auto call = std::make_unique<HostCall>();
    auto bytes_now = std::make_shared<std::vector<std::uint8_t>>(static_cast<const std::uint8_t*>(src),
                                                                 static_cast<const std::uint8_t*>(src) + bytes);
    call->func = [dst, bytes_now]() {
      std::memcpy(dst, bytes_now->data(), bytes_now->size());
      return Status::Ok();
    };
    return QueueHostCall(std::move(call));
  }
  if (kind == device::CopyKind::kHostToDevice) {
    // CUDA takes the bytes of a pageable source before returning, but reads
    // a pinned one later: stage that through a pinned block, released by a
    // callback behind the copy (no device-wide synchronisation).
    cudaPointerAttributes attr{};
    const bool pinned_src = cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    if (!pinned_src) {
      return dev_.Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync host->device");
    }
    KILN_ASSIGN_OR_RETURN(void* staging, dev_.Allocate(bytes, device::MemoryKind::kPinnedHost));
    std::memcpy(staging, src, bytes);
    Status st = dev_.Check(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync host->device");
    if (!st.ok()) {
      dev_.Free(staging);
      return st;
    }
    auto call = std::make_unique<HostCall>();
    CudaDevice* dev = &dev_;
    call->func = [dev, staging]() {
      dev->FreeStagingReady(staging);
      return Status::Ok();
    };
    call->always = true;  // released even after a failure
    return QueueHostCall(std::move(call));
  }
  const cudaMemcpyKind k = kind == device::CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  return dev_.Check(cudaMemcpyAsync(dst, src, bytes, k, s_), "cudaMemcpyAsync");
}

Status CudaStream::CopyHeld(void* dst, const void* src, std::size_t bytes) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "Copy: the stream on '", dev_.spec(), "' is capturing");
  ClearRetired();
  if (bytes == 0) return Status::Ok();
  // The caller keeps `src` until the stream reaches the copy: a pinned
  // source goes by DMA straight from where it is.
  return dev_.Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync host->device");
}

Status CudaStream::Launch(device::LaunchFn fn, void* obj, const void* args, const device::ExecContext& ctx) {
  // The launch function queues device work on this stream now (recorded
  // into the graph while capturing).
  if (!capture_) {
    ClearRetired();
    if (failed()) return Status::Ok();  // work after a failure is skipped (reported at Synchronize)
  }
  device::ExecContext c = ctx;
  c.stream = this;
  Status st = fn(obj, args, c);
  if (capture_) ++capture_->launches;
  return st;
}

Status CudaStream::LaunchHost(device::LaunchFn fn, void* obj, const void* args, const device::ExecContext& ctx) {
  auto call = std::make_unique<HostCall>();
  call->fn = fn;
  call->obj = obj;
  call->args = args;
  call->ctx = ctx;
  call->ctx.stream = this;
  if (capture_) {
    call->replay_ctx = &capture_->ctx;
    capture_->ctx = call->ctx;
    ++capture_->launches;
  }
  return QueueHostCall(std::move(call));
}

Status CudaStream::HostFunc(std::function<Status()> fn) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "HostFunc: the stream on '", dev_.spec(), "' is capturing");
  ClearRetired();
  auto call = std::make_unique<HostCall>();
  call->func = std::move(fn);
  return QueueHostCall(std::move(call));
}

Status CudaStream::BeginCapture() {
  if (capture_) return Error(StatusCode::kInvalidArgument, "BeginCapture: the stream on '", dev_.spec(), "' is already capturing");
  KILN_RETURN_IF_ERROR(dev_.Check(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
  capture_ = std::make_unique<CudaRecording>();
  return Status::Ok();
}

Result<std::unique_ptr<device::Recording>> CudaStream::EndCapture() {
  if (!capture_) return Error(StatusCode::kInvalidArgument, "EndCapture: the stream on '", dev_.spec(), "' is not capturing");
  std::unique_ptr<CudaRecording> rec = std::move(capture_);
  KILN_RETURN_IF_ERROR(dev_.Check(cudaStreamEndCapture(s_, &rec->graph), "cudaStreamEndCapture"));
  if (!rec->graph) return Error(StatusCode::kInternal, "cudaStreamEndCapture on '", dev_.spec(), "' gave no graph");
  KILN_RETURN_IF_ERROR(dev_.Check(cudaGraphInstantiate(&rec->exec, rec->graph, 0), "cudaGraphInstantiate"));
  return std::unique_ptr<device::Recording>(std::move(rec));
}

Status CudaStream::Replay(const device::Recording& r, const device::ExecContext& ctx) {
  const auto* rec = dynamic_cast<const CudaRecording*>(&r);
  if (!rec) return Error(StatusCode::kInvalidArgument, "Replay: the recording is not from a CUDA stream");
  rec->ctx = ctx;
  rec->ctx.stream = this;
  if (!capture_) {
    ClearRetired();
    return dev_.Check(cudaGraphLaunch(rec->exec, s_), "cudaGraphLaunch");
  }
  // Nested replay while capturing: the recording's graph becomes a child
  // node after what has been captured so far.
  cudaStreamCaptureStatus status;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  std::size_t n_deps = 0;
  KILN_RETURN_IF_ERROR(dev_.Check(cudaStreamGetCaptureInfo(s_, &status, nullptr, &graph, &deps, nullptr, &n_deps),
                                  "cudaStreamGetCaptureInfo"));
  cudaGraphNode_t node = nullptr;
  KILN_RETURN_IF_ERROR(dev_.Check(cudaGraphAddChildGraphNode(&node, graph, deps, n_deps, rec->graph),
                                  "cudaGraphAddChildGraphNode"));
  KILN_RETURN_IF_ERROR(dev_.Check(cudaStreamUpdateCaptureDependencies(s_, &node, nullptr, 1, cudaStreamSetCaptureDependencies),
                                  "cudaStreamUpdateCaptureDependencies"));
  capture_->launches += rec->launches;
  return Status::Ok();
}

Status CudaStream::RecordEvent(Event& e) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "RecordEvent: the stream on '", dev_.spec(), "' is capturing");
  auto st = e.state();
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> l(st->mu);
    gen = ++st->recorded;
  }
  // Marks the event even after a failure (a waiter must not wait forever).
  auto call = std::make_unique<HostCall>();
  call->func = [st, gen]() {
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->completed = std::max(st->completed, gen);
    }
    st->cv.notify_all();
    return Status::Ok();
  };
  call->stream = this;
  ++queued_;
  // cudaStreamAddCallback, unlike cudaLaunchHostFunc, still calls back
  // after a CUDA error, so a waiter is released on a failed stream too.
  struct Marker {
    static void CUDART_CB Run(cudaStream_t, cudaError_t, void* p) {
      auto* c = static_cast<HostCall*>(p);
      (void)c->func();
      ++c->stream->completed_;
      std::lock_guard<std::mutex> l(c->stream->mu_);
      c->stream->retired_.emplace_back(c);
    }
  };
  HostCall* raw = call.release();
  cudaError_t err = cudaStreamAddCallback(s_, &Marker::Run, raw, 0);
  if (err != cudaSuccess) {
    (void)raw->func();  // mark it, so no one waits on a record that never happens
    delete raw;
    ++completed_;
    return dev_.Check(err, "cudaStreamAddCallback");
  }
  return Status::Ok();
}

Status CudaStream::WaitEvent(const Event& e) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "WaitEvent: the stream on '", dev_.spec(), "' is capturing");
  // The event may be recorded by any device's stream; waiting on the host
  // here (rather than in a CUDA host node, which would hold CUDA's callback
  // thread) orders everything queued after this call behind it.
  auto st = e.state();
  std::unique_lock<std::mutex> l(st->mu);
  const std::uint64_t want = st->recorded;
  st->cv.wait(l, [&] { return st->completed >= want; });
  return Status::Ok();
}

Status CudaStream::Synchronize() {
  Status cuda = dev_.Check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
  ClearRetired();
  std::lock_guard<std::mutex> l(mu_);
  Status st = error_.ok() ? cuda : error_;
  error_ = Status::Ok();
  return st;
}

}  // namespace

void* CudaStreamHandle(device::Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  return s ? static_cast<void*>(s->handle()) : nullptr;
}

int CudaArch(const device::Device& device) {
  const auto* d = dynamic_cast<const CudaDevice*>(&device);
  return d ? d->arch() : 0;
}

std::unique_ptr<device::Device> CreateCudaTarget(const std::string& spec, Status why) {
  return std::make_unique<CudaTarget>(spec, std::move(why));
}

Result<std::unique_ptr<device::Device>> CreateCudaDevice(const std::string& spec, const std::string& options) {
  int ordinal = 0;
  if (!options.empty()) {
    if (options.size() > 3 || options.find_first_not_of("0123456789") != std::string::npos) {
      return Error(StatusCode::kInvalidArgument, "device '", spec, "': '", options,
                   "' is not a device ordinal (cuda takes cuda or cuda:N)");
    }
    ordinal = std::stoi(options);
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaGetLastError();
    return Error(StatusCode::kUnimplemented, "device '", spec, "' is unavailable: ", cudaGetErrorName(e), ": ",
                 cudaGetErrorString(e), " (",
                 driver == 0 ? std::string("no CUDA driver is installed") : "CUDA driver " + DescribeCudaVersion(driver),
                 "; this build's CUDA runtime is ", DescribeCudaVersion(CUDART_VERSION), ")");
  }
  if (ordinal >= count) {
    return Error(StatusCode::kInvalidArgument, "device '", spec, "': there is no CUDA device ", ordinal, " (", count,
                 " present)");
  }
  cudaDeviceProp prop{};
  KILN_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties", spec));
  KILN_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice", spec));
  return std::unique_ptr<device::Device>(new CudaDevice(spec, ordinal, prop));
}

}  // namespace kiln::cuda

extern "C" __attribute__((visibility("default"))) const char* kiln_cuda_module_version() { return KILN_BUILD_ID; }

extern "C" __attribute__((visibility("default"))) kiln::device::Device* kiln_cuda_create_target(
    const char* spec, const char* options, kiln::Status** error) {
  try {
    auto d = kiln::cuda::CreateCudaDevice(spec ? spec : "cuda", options ? options : "");
    if (d.ok()) return std::move(d).value().release();
    if (d.status().code() == kiln::StatusCode::kInvalidArgument) {  // a bad spec, not a missing GPU
      *error = new kiln::Status(d.status());
      return nullptr;
    }
    return kiln::cuda::CreateCudaTarget(spec ? spec : "cuda", d.status()).release();
  } catch (const std::exception& ex) {
    *error = new kiln::Status(kiln::StatusCode::kInternal, std::string("opening the CUDA target threw: ") + ex.what());
    return nullptr;
  }
}

extern "C" __attribute__((visibility("default"))) kiln::device::Device* kiln_cuda_create_device(
    const char* spec, const char* options, kiln::Status** error) {
  try {
    auto d = kiln::cuda::CreateCudaDevice(spec ? spec : "cuda", options ? options : "");
    if (!d.ok()) {
      *error = new kiln::Status(d.status());
      return nullptr;
    }
    return std::move(d).value().release();
  } catch (const std::exception& ex) {
    *error = new kiln::Status(kiln::StatusCode::kInternal, std::string("opening the CUDA device threw: ") + ex.what());
    return nullptr;
  }
}
