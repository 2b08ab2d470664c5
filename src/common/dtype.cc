#include "common/dtype.h"

#include <sstream>

namespace kiln {

std::size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kUInt8: case DType::kInt8: case DType::kBool: return 1;
    case DType::kUInt16: case DType::kInt16: case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kInt64: case DType::kFloat64: case DType::kUInt64: return 8;
    default: return 0;
  }
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBFloat16: return "bfloat16";
    default: return "undefined";
  }
}

std::optional<DType> DTypeFromName(const std::string& name) {
  static const DType kAll[] = {DType::kFloat32, DType::kUInt8, DType::kInt8, DType::kUInt16,
                               DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool,
                               DType::kFloat16, DType::kFloat64, DType::kUInt32,
                               DType::kUInt64, DType::kBFloat16};
  for (DType t : kAll) {
    if (name == DTypeName(t)) return t;
  }
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  return std::nullopt;
}

bool DTypeSupported(DType t) { return DTypeSize(t) != 0; }

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool IsInteger(DType t) {
  switch (t) {
    case DType::kUInt8: case DType::kInt8: case DType::kUInt16: case DType::kInt16:
    case DType::kInt32: case DType::kInt64: case DType::kUInt32: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

std::int64_t NumElements(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) {
    if (d < 0) return -1;
    // Saturates instead of overflowing: shapes that enter the IR are checked
    // with CheckedNumElements (common/checked.h); this only guards the
    // arithmetic of shape inference on candidate shapes before that check.
    if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;
  }
  return n;
}

bool IsStatic(const Shape& s) {
  for (auto d : s) {
    if (d < 0) return false;
  }
  return true;
}

std::string ShapeToString(const Shape& s) { return ShapeToString(s, 0); }

std::string ShapeToString(const Shape& s, std::uint64_t dynamic_mask) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) os << ',';
    if (i < 64 && (dynamic_mask >> i & 1)) os << "<=";
    if (s[i] < 0) os << '?'; else os << s[i];
  }
  os << ']';
  return os.str();
}

}  // namespace kiln
