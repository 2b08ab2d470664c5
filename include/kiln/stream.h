// Streams and events of a device ("cpu", or "sim", the simulated discrete
// device; see docs/design.md, "The device layer").
//
// A Stream is an in-order queue of device work drained asynchronously (on
// cpu and sim by its own worker thread): work on one stream never runs ahead
// of work queued before it. An Event is a fence recorded on a stream; other
// streams (or the host) can wait for it. Capture: between BeginCapture and
// EndCapture, kernel launches are recorded instead of run; the Recording is
// replayed later as a unit (how Kiln records a model's task list once).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kiln/status.h"

namespace kiln {

class Event {
 public:
  Event();
  ~Event();
  // Blocks until the work queued before the last RecordEvent has run
  // (returns at once if the event was never recorded).
  Status Synchronize() const;
  // Whether that work has run.
  bool Query() const;

  struct State;
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

// A kernel entry point for Stream::LaunchKernel: reads everything it needs
// (tensor addresses included) from its argument block.
using KernelFn = void (*)(const void* args);

// Launches captured on a stream; replay it with Stream::Replay on a stream
// of the same device. Must outlive every replay queued from it.
class Recording {
 public:
  ~Recording();
  std::size_t size() const;  // launches recorded
  struct Impl;
  Impl* impl() const { return impl_.get(); }
  explicit Recording(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

class Stream {
 public:
  // Starts a stream on the default device ($KILN_DEVICE if set, else the CPU).
  static Result<std::unique_ptr<Stream>> Create();
  // Starts a stream on `device` ("cpu", "sim", "sim:seed=3", ...).
  static Result<std::unique_ptr<Stream>> Create(const std::string& device);
  ~Stream();  // waits for queued work, then stops the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Waits for all work queued so far; returns the first error reported by
  // any of it since the previous Synchronize (work after a failure is
  // skipped, as on a GPU stream).
  Status Synchronize();
  // `e` completes when the work queued before it has run, or been skipped
  // after a failure (a waiter never waits forever on a failed stream; the
  // error surfaces at this stream's Synchronize).
  Status RecordEvent(Event& e);
  // Work queued after this waits until `e` has completed.
  Status WaitEvent(const Event& e);
  // Queues host work.
  Status LaunchHostFunc(std::function<Status()> fn);
  // Queues fn(args) as a device operation. While capturing (a graph being
  // loaded records its task list so), the launch is recorded instead of run.
  Status LaunchKernel(KernelFn fn, const void* args);
  // Capture: launches (and replays) between these are recorded, not run;
  // copies, host functions and events are refused meanwhile.
  Status BeginCapture();
  Result<std::unique_ptr<Recording>> EndCapture();
  // Queues the recorded launches, in order.
  Status Replay(const Recording& recording);
  // The device spec this stream belongs to.
  const std::string& device() const;
  // Tasks run so far (for tests and overhead benchmarks).
  std::uint64_t tasks_completed() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  Stream();
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
