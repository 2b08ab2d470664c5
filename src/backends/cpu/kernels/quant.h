// Decisions of the int8 kernels (quant.cc) that tests check directly, and
// helpers they share.
#pragma once

#include <cstdint>

namespace kiln::device {
struct ValueRange;
}

namespace kiln::cpu {

// Whether a 1x1 int8 convolution (group 1) keeps oneDNN's AMX kernel where
// the CPU has AMX: 64 or more input and output channels and 16M (2^24) or
// more multiply-adds (`out_elems` output values times `cin` input
// channels). Smaller ones run faster on its VNNI kernel (quant.cc,
// SkipAmxWhereItLoses). A product that overflows counts as large.
bool AmxPaysForOneByOne(std::int64_t cin, std::int64_t cout, std::int64_t out_elems);

// min(0, min x) and max(0, max x) over n floats, NaNs skipped (AVX where
// the CPU has it): DynamicQuantizeLinear's range, and the int16-product
// kernel's scan of what its rescaled store wrote.
void MinMaxWithZero(const float* x, std::int64_t n, float* mn, float* mx);

// DynamicQuantizeLinear's quantization of n floats with scale s and zero
// point zp (0..255): y = saturate(round_even(x / s) + zp) as uint8, NaN ->
// zp, and 0 everywhere where s is not > 0 (its kernel's result for an
// all-zero input).
void DynamicQuantizeU8(const float* x, std::uint8_t* y, std::int64_t n, float s, std::int32_t zp);
// DynamicQuantizeLinear's scale and zero point for n floats: the range a
// writer reported (used and cleared, device::ValueRange) where valid, else
// found in parallel (MinMaxWithZero), then scale = (max - min) / 255 and
// zero point saturate(round_even(-min / scale)), 0 for a scale not > 0.
void DynamicQuantizeParams(const float* x, std::int64_t n, device::ValueRange* reported, float* scale,
                           std::uint8_t* zp);
// The same values minus zp, as int16 (within [-zp, 255 - zp]): the
// int16-product kernel's image of a kiln.quantize_input operand.
void QuantizeCenteredInt16(const float* x, std::int16_t* y, std::int64_t n, float s, std::int32_t zp);
// The same as float32 (exact integers): the float32 route's operand.
void QuantizeCenteredFloat(const float* x, float* y, std::int64_t n, float s, std::int32_t zp);

}  // namespace kiln::cpu
