// Typed dispatch over chosen element-type sets (half types and bool included)
// for the unary, elementwise and reduce kernel families. Elements are loaded
// into a compute type (float for float16/bfloat16, the type itself otherwise)
// and stored back, so one op body serves every type.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cpu/kernels/util.h"
#include "common/tensor.h"

namespace kiln::cpu::num {

struct F16 { std::uint16_t bits; };
struct BF16 { std::uint16_t bits; };

template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<F16> { using type = float; };
template <> struct ComputeOf<BF16> { using type = float; };
template <typename T> using Compute = typename ComputeOf<T>::type;

template <typename T>
inline Compute<T> Load(T x) {
  if constexpr (std::is_same_v<T, F16>) return HalfToFloat(x.bits);
  else if constexpr (std::is_same_v<T, BF16>) return BFloat16ToFloat(x.bits);
  else return x;
}
template <typename T, typename W>
inline T Store(W w) {
  if constexpr (std::is_same_v<T, F16>) return F16{FloatToHalf(static_cast<float>(w))};
  else if constexpr (std::is_same_v<T, BF16>) return BF16{FloatToBFloat16(static_cast<float>(w))};
  else return static_cast<T>(w);
}

// +, -, * that wrap for integers (two's complement, as numpy) instead of
// overflowing: computed in an unsigned type at least as wide as `unsigned`.
template <typename C>
using UArith = std::conditional_t<(sizeof(C) <= sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
template <typename C> inline C WAdd(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) return static_cast<C>(static_cast<UArith<C>>(a) + static_cast<UArith<C>>(b));
  else return a + b;
}
template <typename C> inline C WSub(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) return static_cast<C>(static_cast<UArith<C>>(a) - static_cast<UArith<C>>(b));
  else return a - b;
}
template <typename C> inline C WMul(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) return static_cast<C>(static_cast<UArith<C>>(a) * static_cast<UArith<C>>(b));
  else return a * b;
}

// Element-type sets (bit flags).
enum : unsigned {
  kF32F64 = 1u << 0,
  kHalf = 1u << 1,    // float16, bfloat16
  kI8I16 = 1u << 2,
  kI32I64 = 1u << 3,
  kU8U16 = 1u << 4,
  kU32U64 = 1u << 5,
  kBoolT = 1u << 6,
  kFloats = kF32F64 | kHalf,
  kSigned = kI8I16 | kI32I64,
  kUnsigned = kU8U16 | kU32U64,
  kInts = kSigned | kUnsigned,
  kNumeric = kFloats | kInts,
  kAll = kNumeric | kBoolT,
};

// Calls f(Tag<T>{}) with T the storage type of `t` when `t` is in set S.
template <unsigned S, typename F>
Status Dispatch(DType t, F&& f) {
  switch (t) {
#define KILN_NUM_CASE(dt, set, T) \
  case DType::dt:                 \
    if constexpr ((S & (set)) != 0) return f(Tag<T>{}); \
    break;
    KILN_NUM_CASE(kFloat32, kF32F64, float)
    KILN_NUM_CASE(kFloat64, kF32F64, double)
    KILN_NUM_CASE(kFloat16, kHalf, F16)
    KILN_NUM_CASE(kBFloat16, kHalf, BF16)
    KILN_NUM_CASE(kInt8, kI8I16, std::int8_t)
    KILN_NUM_CASE(kInt16, kI8I16, std::int16_t)
    KILN_NUM_CASE(kInt32, kI32I64, std::int32_t)
    KILN_NUM_CASE(kInt64, kI32I64, std::int64_t)
    KILN_NUM_CASE(kUInt8, kU8U16, std::uint8_t)
    KILN_NUM_CASE(kUInt16, kU8U16, std::uint16_t)
    KILN_NUM_CASE(kUInt32, kU32U64, std::uint32_t)
    KILN_NUM_CASE(kUInt64, kU32U64, std::uint64_t)
    KILN_NUM_CASE(kBool, kBoolT, bool)
#undef KILN_NUM_CASE
    default: break;
  }
  return Error(StatusCode::kUnimplemented, "element type ", DTypeName(t), " is not supported here");
}

// The kernel made by `make(Tag<T>{})` for input `t`'s type in set S.
template <unsigned S, typename Make>
Result<std::unique_ptr<Kernel>> MakeTyped(DType t, Make&& make) {
  std::unique_ptr<Kernel> k;
  KILN_RETURN_IF_ERROR(Dispatch<S>(t, [&](auto tag) -> Status {
    k = std::make_unique<FnKernel>(make(tag));
    return Status::Ok();
  }));
  return k;
}

}  // namespace kiln::cpu::num
