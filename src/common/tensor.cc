#include "common/tensor.h"

#include <cassert>
#include <cmath>
#include <cstdint>

#include <sys/mman.h>
#include <unistd.h>

namespace kiln {

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  std::int64_t n = NumElements(shape_);
  owned_ = std::make_shared<std::vector<std::uint8_t>>(
      static_cast<std::size_t>(n < 0 ? 0 : n) * DTypeSize(dtype_) + 1);
  data_ = owned_->data();
}

HostTensor::HostTensor(DType dtype, Shape shape, const void* data,
                       std::shared_ptr<const void> owner)
    : dtype_(dtype), shape_(std::move(shape)), owner_(std::move(owner)), data_(data) {}

void HostTensor::ReleasePages() const {
  if (!file_pages_ || owned_ || device_ || !data_) return;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  const auto p = static_cast<std::uintptr_t>(reinterpret_cast<std::uintptr_t>(data_));
  const auto up = static_cast<std::uintptr_t>(page);
  const std::uintptr_t begin = (p + up - 1) / up * up, end = (p + nbytes()) / up * up;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void* HostTensor::mutable_data() {
  assert(owned_ != nullptr);
  return owned_->data();
}

double ElementAsDouble(DType dtype, const void* data, std::int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(data)[i];
    case DType::kFloat64: return static_cast<const double*>(data)[i];
    case DType::kFloat16: return HalfToFloat(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kBFloat16: return BFloat16ToFloat(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kInt8: return static_cast<const std::int8_t*>(data)[i];
    case DType::kUInt8: return static_cast<const std::uint8_t*>(data)[i];
    case DType::kBool: return static_cast<const std::uint8_t*>(data)[i] != 0;
    case DType::kInt16: return static_cast<const std::int16_t*>(data)[i];
    case DType::kUInt16: return static_cast<const std::uint16_t*>(data)[i];
    case DType::kInt32: return static_cast<const std::int32_t*>(data)[i];
    case DType::kUInt32: return static_cast<const std::uint32_t*>(data)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DType::kUInt64: return static_cast<double>(static_cast<const std::uint64_t*>(data)[i]);
    default: return 0;
  }
}

double HostTensor::GetAsDouble(std::int64_t i) const { return ElementAsDouble(dtype_, data_, i); }

std::int64_t HostTensor::GetAsInt64(std::int64_t i) const {
  switch (dtype_) {
    case DType::kInt64: return data_as<std::int64_t>()[i];
    case DType::kInt32: return data_as<std::int32_t>()[i];
    case DType::kUInt64: return static_cast<std::int64_t>(data_as<std::uint64_t>()[i]);
    default: {
      // Defined for every value (a C++ cast of NaN or an out-of-range double
      // is undefined): NaN -> 0, saturation to int64's range.
      const double d = GetAsDouble(i);
      if (d != d) return 0;
      if (d >= 9223372036854775808.0) return INT64_MAX;
      if (d <= -9223372036854775808.0) return INT64_MIN;
      return static_cast<std::int64_t>(d);
    }
  }
}

std::vector<std::int64_t> HostTensor::ToInt64Vector() const {
  std::vector<std::int64_t> v(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = GetAsInt64(static_cast<std::int64_t>(i));
  return v;
}

float HalfToFloat(std::uint16_t h) {
  std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

std::uint16_t FloatToHalf(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000;
  std::uint32_t mant = x & 0x7fffff;
  int exp = static_cast<int>((x >> 23) & 0xff);
  if (exp == 255) return static_cast<std::uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = exp - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000;
    int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: correct
  return static_cast<std::uint16_t>(sign | half);
}

float BFloat16ToFloat(std::uint16_t h) {
  std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::uint16_t FloatToBFloat16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  std::uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

}  // namespace kiln
