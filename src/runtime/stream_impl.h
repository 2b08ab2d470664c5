// The public Stream over a device stream (see device/device.h).
#pragma once

#include <memory>

#include "device/device.h"
#include "kiln/stream.h"

namespace kiln {

struct Stream::Impl {
  device::Device* device = nullptr;
  std::unique_ptr<device::Stream> stream;
};

struct Recording::Impl {
  std::unique_ptr<device::Recording> rec;
  device::Device* device = nullptr;
};

inline device::Stream& DeviceStreamOf(Stream& s) { return *s.impl()->stream; }

}  // namespace kiln
