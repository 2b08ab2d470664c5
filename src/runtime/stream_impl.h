// Stream internals shared with the executor (capture of kernel launches
// while a graph is being recorded).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/stream.h"

namespace kiln {

struct CapturedLaunch {
  KernelFn fn;
  const void* args;
};

struct Stream::Impl {
  std::mutex mu;
  std::condition_variable cv, done_cv;
  std::deque<std::function<Status()>> queue;
  std::atomic<bool> pending{false};
  std::uint64_t enqueued = 0, completed = 0;
  Status error;
  bool stop = false;
  std::thread worker;
  // Non-null while recording: LaunchKernel appends here instead of queueing.
  std::vector<CapturedLaunch>* capture = nullptr;

  Status Enqueue(std::function<Status()> fn);  // never throws
  void Loop();
};

}  // namespace kiln
