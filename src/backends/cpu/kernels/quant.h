// Decisions of the int8 kernels (quant.cc) that tests check directly, and
// helpers they share.
#pragma once

#include <cstdint>

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

}  // namespace kiln::cpu
