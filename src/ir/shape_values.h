// Which nodes compute shape values: small tensors the host evaluates while
// planning (cpu::EvalBound at the compiler's probe and per plan; the shape
// inputs check in ops::InferNode). One rule for both, so that a value the
// compiler counts on being known per plan is one each plan computes.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace kiln::ir {

// Whether `node`'s outputs are shape values: all present, static and not
// data-dependent; integers (int64, int32, bool) or at most
// kShapeInputFloatElements floats each (scales computed from shapes, not
// activations: an embedding row gathered by a computed index is data); at
// most `limit_bytes` in all.
inline bool ShapeValueOutputs(const Node& node, std::uint64_t limit_bytes) {
  std::uint64_t bytes = 0;
  for (const Value* o : node.outputs()) {
    if (!o) return false;
    const std::int64_t e = NumElements(o->shape());
    if (e < 0 || o->is_dynamic()) return false;
    const bool integer = o->dtype() == DType::kInt64 || o->dtype() == DType::kInt32 || o->dtype() == DType::kBool;
    if (!integer && e > kShapeInputFloatElements) return false;
    bytes += static_cast<std::uint64_t>(e) * DTypeSize(o->dtype());
  }
  return bytes <= limit_bytes;
}

}  // namespace kiln::ir
