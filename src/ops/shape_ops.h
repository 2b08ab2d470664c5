// Shape arithmetic shared by the shape-op definitions (compile-time inference)
// and their CPU kernels (when the shape-giving input is only known at run
// time). Errors carry no node name; callers add it.
#pragma once

#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace kiln::ops {

// Reshape's output shape for input shape `in` (dims may be -1 = unknown) and
// the `shape` input's values: 0 copies the input dim (unless allowzero), one
// -1 is inferred. Unknown dims stay -1.
Result<Shape> ReshapeTarget(const Shape& in, const std::vector<std::int64_t>& spec, bool allowzero);

// Squeeze's output shape; `axes` null = drop every size-1 dim.
Result<Shape> SqueezeShape(const Shape& in, const std::vector<std::int64_t>* axes);
// Unsqueeze's output shape: a 1 at each of `axes` (of the output rank).
Result<Shape> UnsqueezeShape(const Shape& in, const std::vector<std::int64_t>& axes);

// The dims [start, end) that ONNX Shape (version 15's start / end attributes)
// reads of a rank-`rank` input: negative values count from the end, both
// are clamped to [0, rank], and an end before the start gives an empty span
// (end == start). Shape's inference, folding, bound values, symbolic
// elements and kernel all take it from here.
struct DimSpan {
  std::int64_t start = 0, end = 0;
  std::int64_t size() const { return end - start; }
};
DimSpan ShapeSpan(std::int64_t rank, std::int64_t start, std::int64_t end);
// Shape's int64 value for an input of static extents `dims` and its start /
// end attributes, or null where a dim of the span is marked in `unknown`
// (bit d: dim d is data-dependent or symbolic; dims from 64 on count as
// known): what folding and bound evaluation compute without data.
HostTensorPtr ShapeValueOf(const Shape& dims, std::int64_t start, std::int64_t end, std::uint64_t unknown);

// Slice: per input dim, the first element, the step and the output length.
struct SliceDim {
  std::int64_t start = 0, step = 1, len = 0;
};
// `axes` empty = 0..n-1, `steps` empty = all 1. Dims of `in` that are unknown
// and sliced get len -1.
Result<std::vector<SliceDim>> SlicePlan(const Shape& in, const std::vector<std::int64_t>& starts,
                                        const std::vector<std::int64_t>& ends,
                                        std::vector<std::int64_t> axes,
                                        std::vector<std::int64_t> steps);

}  // namespace kiln::ops
