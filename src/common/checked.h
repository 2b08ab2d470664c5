// Overflow-checked shape and size arithmetic: the one helper every parser,
// loader and shape inference uses for element counts and byte sizes.
//
// Every tensor Kiln accepts (an initializer, an input shape, an inferred
// output, a .kiln placement, a .npy array, a weight) must have a byte size
// that fits in int64 and is at most kMaxTensorBytes; anything else is refused
// with an error naming the value ("what").
#pragma once

#include <cstdint>
#include <string_view>

#include "common/dtype.h"
#include "common/status.h"

namespace kiln {

// The largest single tensor Kiln accepts: 64 GiB. Larger than any tensor of
// a real model (a 128k x 16k float32 embedding is 8 GiB) and small enough that
// sums of a few such sizes cannot overflow int64.
inline constexpr std::int64_t kMaxTensorBytes = std::int64_t{1} << 36;

// a*b / a+b / a-b into *out; false on overflow. Sizes are non-negative; the
// upper bounds of shape arithmetic (cpu::EvalUpperBound) may not be.
inline bool CheckedMul(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool CheckedAdd(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool CheckedSub(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return !__builtin_sub_overflow(a, b, out);
}
inline bool CheckedMulU(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool CheckedAddU(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// Element count of a fully known shape. Errors (naming `what` and the shape)
// on a negative dim, on int64 overflow, and when the count exceeds
// kMaxTensorBytes (no element is smaller than a byte).
Result<std::int64_t> CheckedNumElements(const Shape& shape, std::string_view what);

// Byte size of `dtype` x `shape`, checked as above and against
// kMaxTensorBytes. For kString/kUndefined (size 0) only the count is checked.
Result<std::int64_t> CheckedTensorBytes(DType dtype, const Shape& shape, std::string_view what);

// Checks a shape that may hold unknown dims (-1): known dims must be
// non-negative and their product must pass the limit. Used by shape
// inference on every value it produces.
Status CheckShapeSize(DType dtype, const Shape& shape, std::string_view what);

}  // namespace kiln
