// Runs a loaded model once on zero-filled buffers (fuzz targets).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/runtime.h"

namespace kiln_fuzz {

// Returns true when the run succeeded; skips (false) models whose arena and
// I/O buffers exceed `max_bytes` in all.
inline bool RunOnZeros(kiln::Model& m, std::uint64_t max_bytes = std::uint64_t{256} << 20) {
  std::uint64_t total = m.arena_bytes();
  for (const auto& t : m.inputs()) total += t.bytes;
  for (const auto& t : m.outputs()) total += t.bytes;
  if (total > max_bytes) return false;
  std::vector<std::vector<std::uint8_t>> bufs;
  bufs.reserve(m.inputs().size() + m.outputs().size());
  std::vector<kiln::TensorRef> ins, outs;
  for (const auto& t : m.inputs()) {
    bufs.emplace_back(t.bytes, 0);
    ins.push_back({bufs.back().data(), t.dtype, t.shape});
  }
  for (const auto& t : m.outputs()) {
    bufs.emplace_back(t.bytes, 0);
    outs.push_back({bufs.back().data(), t.dtype, t.shape});
  }
  return m.Execute(ins, outs).ok();
}

}  // namespace kiln_fuzz
