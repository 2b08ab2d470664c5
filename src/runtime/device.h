// The device layer: memory and host->device copies. The CPU device is always
// there; a CUDA device implements the same interface where the toolkit and a
// GPU exist. Code asks a device what it supports rather than assuming.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace kiln::runtime {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Whether host memory (e.g. a read-only file mapping) can be used directly
  // as device memory: true on the CPU.
  virtual bool can_map_host_memory() const = 0;
  virtual Result<void*> Allocate(std::size_t bytes) = 0;  // 64-byte aligned
  virtual void Free(void* p) = 0;
  // Copies host -> device; may return before the copy is done only if
  // Synchronize() is called before `src` is reused.
  virtual Status CopyFromHost(void* dst, const void* src, std::size_t bytes) = 0;
  virtual Status Synchronize() = 0;
};

// The process-wide CPU device.
Device& CpuDevice();

}  // namespace kiln::runtime
