// Element types and shapes. Numbering follows ONNX's TensorProto.DataType so
// that files and the frontend need no translation table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class DType : std::int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Size in bytes of one element; 0 for kUndefined and kString.
std::size_t DTypeSize(DType t);
// Lower-case name as in ONNX ("float32", "int64", ...).
const char* DTypeName(DType t);
// Inverse of DTypeName, also accepting numpy names ("float32", "<f4").
std::optional<DType> DTypeFromName(const std::string& name);
// Whether Kiln can hold tensors of this type (everything but string/undefined).
bool DTypeSupported(DType t);
bool IsFloating(DType t);
bool IsInteger(DType t);

using Shape = std::vector<std::int64_t>;  // -1 = unknown dim

// Product of dims; -1 if any dim is unknown, 1 for a scalar, INT64_MAX on
// overflow (use CheckedNumElements in common/checked.h where a shape is untrusted).
std::int64_t NumElements(const Shape& s);
bool IsStatic(const Shape& s);
std::string ShapeToString(const Shape& s);  // "[1,3,224,224]"
// Data-dependent dims (bit d of dynamic_mask) print as upper bounds: "[<=50,4]".
std::string ShapeToString(const Shape& s, std::uint64_t dynamic_mask);

}  // namespace kiln
