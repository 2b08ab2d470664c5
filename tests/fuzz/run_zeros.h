// Runs a loaded model once on zero-filled buffers (fuzz targets).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/runtime.h"

namespace kiln_fuzz {

// Returns true when the run succeeded; skips (false) models whose arena and
// I/O buffers exceed `max_bytes` in all (outputs whose shapes follow the
// inputs: 2 x `max_bytes`).
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
  // Outputs whose shapes follow each run's inputs (symbolic dims, shape
  // inputs): the shapes the model gives for these inputs.
  std::vector<kiln::Shape> shapes;
  for (const auto& t : m.outputs()) shapes.push_back(t.shape);
  bool open = false;
  for (const auto& s : shapes) open = open || !kiln::IsStatic(s);
  if (open) {
    auto r = m.OutputShapesFor(ins);
    if (!r.ok() || r.value().size() != shapes.size()) return false;
    shapes = r.value();
  }
  for (std::size_t j = 0; j < shapes.size(); ++j) {
    const std::int64_t n = kiln::NumElements(shapes[j]);
    const std::uint64_t bytes = static_cast<std::uint64_t>(n < 0 ? 0 : n) * kiln::DTypeSize(m.outputs()[j].dtype);
    total += bytes;
    if (n < 0 || total > 2 * max_bytes) return false;
    bufs.emplace_back(bytes, 0);
    outs.push_back({bufs.back().data(), m.outputs()[j].dtype, shapes[j]});
  }
  return m.Execute(ins, outs).ok();
}

}  // namespace kiln_fuzz
