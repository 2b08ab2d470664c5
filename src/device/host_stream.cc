#include "device/host_stream.h"

#include <immintrin.h>

#include <chrono>
#include <cstring>

namespace kiln::device {
namespace {

Status ReplayTrampoline(void* obj, const void*, const ExecContext& ctx) {
  return ReplayHostRecording(*static_cast<const HostRecording*>(obj), ctx);
}

// Work that throws becomes an error (nothing crosses a stream).
Status Call(const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, "work queued on a stream ran out of memory");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "work queued on a stream threw: ", e.what());
  } catch (...) {
    return Error(StatusCode::kInternal, "work queued on a stream threw an exception");
  }
}

}  // namespace

Status ReplayHostRecording(const HostRecording& rec, const ExecContext& ctx) {
  for (const HostLaunch& l : rec.launches) {
    Status st = l.fn(l.obj, l.args, ctx);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

namespace {
// A recorded host launch: not a device operation, so the device's memory is
// off limits while it runs (sim poisons it again).
Status HostCallTrampoline(void* obj, const void*, const ExecContext& ctx) {
  const HostCall& h = *static_cast<const HostCall*>(obj);
  if (!h.window) return h.fn(h.obj, h.args, ctx);
  h.window->Exit();
  Status st = Call([&] { return h.fn(h.obj, h.args, ctx); });
  h.window->Enter();
  return st;
}
}  // namespace

HostStream::HostStream(Device& device, bool inline_mode, OpWindow* window, std::uint64_t seed)
    : device_(device), inline_(inline_mode), window_(window), rng_(seed) {}

Result<std::unique_ptr<HostStream>> HostStream::Create(Device& device, bool inline_mode, OpWindow* window,
                                                       std::uint64_t seed) {
  try {
    std::unique_ptr<HostStream> s(new HostStream(device, inline_mode, window, seed));
    if (!inline_mode) {
      HostStream* p = s.get();
      s->worker_ = std::thread([p] { p->Loop(); });
    }
    return s;
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot start a ", device.kind(), " stream's worker thread: ", e.what());
  }
}

HostStream::~HostStream() {
  if (!worker_.joinable()) return;
  (void)Synchronize();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

Status HostStream::RunOne(const std::function<Status()>& fn, bool device_op) {
  if (!device_op || !window_) return Call(fn);
  if (const std::uint32_t d = window_->max_delay_us()) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng_() % (d + 1)));
  }
  window_->Enter();
  Status st = Call(fn);
  window_->Exit();
  return st;
}

Status HostStream::Enqueue(std::function<Status()> fn, bool device_op, bool always) {
  if (inline_) {
    Status st = RunOne(fn, device_op);
    std::lock_guard<std::mutex> l(mu_);
    ++enqueued_;
    ++completed_;
    return st;  // inline streams report an error at once
  }
  try {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back({std::move(fn), device_op, always});
    ++enqueued_;
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, "out of memory queueing work on a ", device_.kind(), " stream");
  }
  pending_.store(true, std::memory_order_release);
  cv_.notify_one();
  return Status::Ok();
}

void HostStream::Loop() {
  for (;;) {
    Item item;
    bool failed = false;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (queue_.empty()) {
        // Spin ~50 us before sleeping: a wake-up costs ~15 us on these VMs.
        l.unlock();
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
        while (!pending_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) _mm_pause();
        l.lock();
        cv_.wait(l, [&] { return !queue_.empty() || stop_; });
        if (queue_.empty() && stop_) return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      if (queue_.empty()) pending_.store(false, std::memory_order_relaxed);
      failed = !error_.ok();
    }
    if (!failed || item.always) {
      Status st = RunOne(item.fn, item.device_op);
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(mu_);
        if (error_.ok()) error_ = st;
      }
    }
    item.fn = nullptr;  // what the work held (e.g. a destroyed model) goes before it counts as done
    {
      std::lock_guard<std::mutex> l(mu_);
      ++completed_;
    }
    done_cv_.notify_all();
  }
}

Status HostStream::Copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "Copy: the stream is capturing (only launches are recorded)");
  if (bytes == 0) return Status::Ok();
  if (!dst || !src) return Error(StatusCode::kInvalidArgument, "Copy: null address for ", bytes, " bytes");
  const bool device_op = kind != CopyKind::kHostToHost;
  if ((kind == CopyKind::kHostToDevice || kind == CopyKind::kHostToHost) && !inline_) {
    // The source may be reused once Copy returns: take the bytes now.
    std::shared_ptr<std::vector<std::uint8_t>> snap;
    try {
      snap = std::make_shared<std::vector<std::uint8_t>>(static_cast<const std::uint8_t*>(src),
                                                         static_cast<const std::uint8_t*>(src) + bytes);
    } catch (const std::bad_alloc&) {
      return Error(StatusCode::kOutOfRange, "out of memory staging a ", bytes, "-byte copy to the ", device_.kind());
    }
    return Enqueue([dst, snap]() {
      std::memcpy(dst, snap->data(), snap->size());
      return Status::Ok();
    }, device_op);
  }
  return Enqueue([dst, src, bytes]() {
    std::memmove(dst, src, bytes);
    return Status::Ok();
  }, device_op);
}

Status HostStream::CopyHeld(void* dst, const void* src, std::size_t bytes) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "Copy: the stream is capturing (only launches are recorded)");
  if (bytes == 0) return Status::Ok();
  if (!dst || !src) return Error(StatusCode::kInvalidArgument, "Copy: null address for ", bytes, " bytes");
  return Enqueue([dst, src, bytes]() {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }, true);
}

Status HostStream::DoLaunch(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx, bool host) {
  if (!fn) return Error(StatusCode::kInvalidArgument, "Launch: null kernel function");
  if (capture_) {
    try {
      if (host) {
        capture_->host_calls.push_back(std::make_unique<HostCall>(HostCall{fn, obj, args, window_}));
        capture_->launches.push_back({HostCallTrampoline, capture_->host_calls.back().get(), nullptr});
      } else {
        capture_->launches.push_back({fn, obj, args});
      }
    } catch (const std::bad_alloc&) {
      return Error(StatusCode::kOutOfRange, "Launch: out of memory recording a launch");
    }
    return Status::Ok();
  }
  ExecContext c = ctx;
  c.stream = this;
  return Enqueue([fn, obj, args, c]() { return fn(obj, args, c); }, !host);
}

Status HostStream::Launch(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) {
  return DoLaunch(fn, obj, args, ctx, false);
}

Status HostStream::LaunchHost(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) {
  return DoLaunch(fn, obj, args, ctx, true);
}

Status HostStream::HostFunc(std::function<Status()> fn) {
  if (!fn) return Error(StatusCode::kInvalidArgument, "HostFunc: empty function");
  if (capture_) return Error(StatusCode::kInvalidArgument, "HostFunc: the stream is capturing (only launches are recorded)");
  return Enqueue(std::move(fn), false);
}

Status HostStream::BeginCapture() {
  if (capture_) return Error(StatusCode::kInvalidArgument, "BeginCapture: the stream is already capturing");
  capture_ = std::make_unique<HostRecording>();
  return Status::Ok();
}

Result<std::unique_ptr<Recording>> HostStream::EndCapture() {
  if (!capture_) return Error(StatusCode::kInvalidArgument, "EndCapture: the stream is not capturing");
  return std::unique_ptr<Recording>(std::move(capture_));
}

Status HostStream::Replay(const Recording& rec, const ExecContext& ctx) {
  const auto* hr = dynamic_cast<const HostRecording*>(&rec);
  if (!hr) return Error(StatusCode::kInvalidArgument, "Replay: the recording was not made on a ", device_.kind(), " stream");
  if (capture_) return Launch(ReplayTrampoline, const_cast<HostRecording*>(hr), nullptr, ctx);
  ExecContext c = ctx;
  c.stream = this;
  if (inline_ && !window_) {  // cpu, synchronous: straight through (the common path)
    Status st;
    try {
      st = ReplayHostRecording(*hr, c);
    } catch (const std::bad_alloc&) {
      st = Error(StatusCode::kOutOfRange, "work queued on a stream ran out of memory");
    } catch (const std::exception& e) {
      st = Error(StatusCode::kInternal, "work queued on a stream threw: ", e.what());
    }
    std::lock_guard<std::mutex> l(mu_);
    ++enqueued_;
    ++completed_;
    return st;
  }
  return Enqueue([hr, c]() { return ReplayHostRecording(*hr, c); }, true);
}

Status HostStream::RecordEvent(Event& e) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "RecordEvent: the stream is capturing");
  auto st = e.state();
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> l(st->mu);
    gen = ++st->recorded;
  }
  return Enqueue([st, gen]() {
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->completed = std::max(st->completed, gen);
    }
    st->cv.notify_all();
    return Status::Ok();
  }, false, /*always=*/true);
}

Status HostStream::WaitEvent(const Event& e) {
  if (capture_) return Error(StatusCode::kInvalidArgument, "WaitEvent: the stream is capturing");
  auto st = e.state();
  std::uint64_t want;
  {
    std::lock_guard<std::mutex> l(st->mu);
    want = st->recorded;
  }
  return Enqueue([st, want]() {
    std::unique_lock<std::mutex> l(st->mu);
    st->cv.wait(l, [&] { return st->completed >= want; });
    return Status::Ok();
  }, false);
}

Status HostStream::Synchronize() {
  std::unique_lock<std::mutex> l(mu_);
  const std::uint64_t want = enqueued_;
  done_cv_.wait(l, [&] { return completed_ >= want; });
  Status st = error_;
  error_ = Status::Ok();
  return st;
}

std::uint64_t HostStream::tasks_completed() const {
  std::lock_guard<std::mutex> l(mu_);
  return completed_;
}

}  // namespace kiln::device
