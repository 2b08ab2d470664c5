// Attributes that fusion passes set on Conv/Gemm and kernels read.
#pragma once

namespace kiln::ops {
inline constexpr const char* kActAttr = "kiln.activation";      // string: Relu, Clip, ...
inline constexpr const char* kActAlphaAttr = "kiln.act_alpha";  // float
inline constexpr const char* kActBetaAttr = "kiln.act_beta";    // float
}  // namespace kiln::ops
