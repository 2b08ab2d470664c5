// Streams for devices whose work runs on the host (cpu, sim): an in-order
// queue drained by a worker thread, or (inline) work run on the calling
// thread as it is queued. A device customises them through OpWindow: every
// device operation (copy, launch, replay) runs between Enter and Exit, after
// an optional delay (sim: its memory is accessible only inside the window,
// and work completes late, so a missing Synchronize shows).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "device/device.h"
#include "kiln/stream.h"

namespace kiln {
// An event is a generation counter that streams of any device mark when they
// reach its record.
struct Event::State {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;   // generation last recorded
  std::uint64_t completed = 0;  // generation last reached
};
}  // namespace kiln

namespace kiln::device {

class OpWindow {
 public:
  virtual ~OpWindow() = default;
  virtual void Enter() = 0;
  virtual void Exit() = 0;
  virtual std::uint32_t max_delay_us() const { return 0; }
};

struct HostLaunch {
  LaunchFn fn;
  void* obj;
  const void* args;
};

// A LaunchHost recorded into a list: replayed through a trampoline that
// steps out of the device's op window around it (the list itself runs
// inside the window), so plain launches pay nothing for it.
struct HostCall {
  LaunchFn fn;
  void* obj;
  const void* args;
  OpWindow* window;  // of the recording stream (null: cpu)
};

class HostRecording final : public Recording {
 public:
  std::size_t size() const override { return launches.size(); }
  std::vector<HostLaunch> launches;
  std::vector<std::unique_ptr<HostCall>> host_calls;  // what host launches' trampolines point at
};

// Runs a recording's launches in order; the first error stops it. Runs
// inside the recording stream's op window (host launches step out of it).
Status ReplayHostRecording(const HostRecording& rec, const ExecContext& ctx);

class HostStream final : public Stream {
 public:
  // `window` may be null (cpu). `seed` seeds the per-operation delay.
  static Result<std::unique_ptr<HostStream>> Create(Device& device, bool inline_mode, OpWindow* window,
                                                    std::uint64_t seed);
  ~HostStream() override;

  Device& device() override { return device_; }
  Status Copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override;
  // Reads `src` when the stream reaches the copy (on sim's worker thread,
  // after its delays): a caller that reuses the source too early is caught.
  Status CopyHeld(void* dst, const void* src, std::size_t bytes) override;
  Status Launch(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) override;
  Status LaunchHost(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx) override;
  Status HostFunc(std::function<Status()> fn) override;
  Status BeginCapture() override;
  Result<std::unique_ptr<Recording>> EndCapture() override;
  bool capturing() const override { return capture_ != nullptr; }
  Status Replay(const Recording& rec, const ExecContext& ctx) override;
  Status RecordEvent(Event& e) override;
  Status WaitEvent(const Event& e) override;
  Status Synchronize() override;
  std::uint64_t tasks_completed() const override;

 private:
  HostStream(Device& device, bool inline_mode, OpWindow* window, std::uint64_t seed);
  // Queues (or, inline, runs) fn; `device_op`: inside the op window.
  Status Enqueue(std::function<Status()> fn, bool device_op, bool always = false);
  Status RunOne(const std::function<Status()>& fn, bool device_op);
  void Loop();
  Status DoLaunch(LaunchFn fn, void* obj, const void* args, const ExecContext& ctx, bool host);

  Device& device_;
  const bool inline_;
  OpWindow* window_;
  std::mt19937_64 rng_;
  std::unique_ptr<HostRecording> capture_;

  struct Item {
    std::function<Status()> fn;
    bool device_op;
    // Runs even after an earlier item failed (an event record: whoever
    // waits for the event must not wait forever on a failed stream).
    bool always = false;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Item> queue_;
  std::atomic<bool> pending_{false};
  std::uint64_t enqueued_ = 0, completed_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace kiln::device
