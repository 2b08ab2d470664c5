// Streams and events on the CPU device.
//
// A Stream is an in-order queue of work drained by its own worker thread:
// work on one stream never runs ahead of work queued before it. An Event is a
// fence recorded on a stream; other streams (or the host) can wait for it.
// The worker spins briefly before sleeping, so back-to-back work does not pay
// a thread wake-up each time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

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

class Stream {
 public:
  // Starts a stream with its worker thread.
  static Result<std::unique_ptr<Stream>> Create();
  ~Stream();  // waits for queued work, then stops the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Waits for all work queued so far; returns the first error reported by
  // any of it since the previous Synchronize (work after a failure is
  // skipped, as on a GPU stream).
  Status Synchronize();
  Status RecordEvent(Event& e);
  // Work queued after this waits until `e` has completed.
  Status WaitEvent(const Event& e);
  // Queues host work.
  Status LaunchHostFunc(std::function<Status()> fn);
  // Queues fn(args). While a graph is being loaded (recorded), the launch is
  // captured into the graph's task list instead of run.
  Status LaunchKernel(KernelFn fn, const void* args);
  // Tasks run so far (for tests and overhead benchmarks).
  std::uint64_t tasks_completed() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  Stream();
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
