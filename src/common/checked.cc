#include "common/checked.h"

namespace kiln {
namespace {

Result<std::int64_t> Count(const Shape& shape, std::string_view what, bool allow_unknown) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::int64_t d = shape[i];
    if (d < 0) {
      if (allow_unknown && d == -1) continue;
      return Error(StatusCode::kInvalidArgument, what, ": dim ", i, " of shape ", ShapeToString(shape),
                   " is negative (", d, ")");
    }
    // Each dim on its own too: [0, 2^62] has 0 elements, but its dims
    // cannot be used in any further arithmetic safely.
    if (d > kMaxTensorBytes) {
      return Error(StatusCode::kOutOfRange, what, ": dim ", i, " of shape ", ShapeToString(shape), " (", d,
                   ") exceeds Kiln's limit of ", kMaxTensorBytes, " bytes (64 GiB) per tensor");
    }
    if (!CheckedMul(n, d, &n) || n > kMaxTensorBytes) {
      return Error(StatusCode::kOutOfRange, what, ": shape ", ShapeToString(shape),
                   " has more elements than fit in Kiln's limit of ", kMaxTensorBytes, " bytes (64 GiB) per tensor");
    }
  }
  return n;
}

}  // namespace

Result<std::int64_t> CheckedNumElements(const Shape& shape, std::string_view what) {
  return Count(shape, what, false);
}

Result<std::int64_t> CheckedTensorBytes(DType dtype, const Shape& shape, std::string_view what) {
  KILN_ASSIGN_OR_RETURN(std::int64_t n, Count(shape, what, false));
  std::int64_t size = static_cast<std::int64_t>(DTypeSize(dtype));
  if (size == 0) return std::int64_t{0};
  std::int64_t bytes = 0;
  if (!CheckedMul(n, size, &bytes) || bytes > kMaxTensorBytes) {
    return Error(StatusCode::kOutOfRange, what, ": ", DTypeName(dtype), " tensor of shape ", ShapeToString(shape),
                 " would need more than Kiln's limit of ", kMaxTensorBytes, " bytes (64 GiB) per tensor");
  }
  return bytes;
}

Status CheckShapeSize(DType dtype, const Shape& shape, std::string_view what) {
  KILN_ASSIGN_OR_RETURN(std::int64_t n, Count(shape, what, true));
  std::int64_t size = static_cast<std::int64_t>(DTypeSize(dtype));
  std::int64_t bytes = 0;
  if (size != 0 && (!CheckedMul(n, size, &bytes) || bytes > kMaxTensorBytes)) {
    return Error(StatusCode::kOutOfRange, what, ": ", DTypeName(dtype), " tensor of shape ", ShapeToString(shape),
                 " would need more than Kiln's limit of ", kMaxTensorBytes, " bytes (64 GiB) per tensor");
  }
  return Status::Ok();
}

}  // namespace kiln
