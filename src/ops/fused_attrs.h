// Attributes that fusion passes set on Conv/Gemm and kernels read, and the
// shape rule of their per-channel inputs (shared by the passes that fuse
// and the inference that verifies a loaded node).
#pragma once

#include <cstddef>

#include "kiln/dtype.h"

namespace kiln::ops {
inline constexpr const char* kActAttr = "kiln.activation";      // string: Relu, Clip, ...
inline constexpr const char* kActAlphaAttr = "kiln.act_alpha";  // float
inline constexpr const char* kActBetaAttr = "kiln.act_beta";    // float
// int 1 on a Conv whose input 3 is a residual R of the output's shape:
// Y = act(conv(X, W) + B + R), the residual added before the fused
// activation (the fuse-residual pass, format version 12). On a rescaled
// ConvInteger (kiln.rescale), R is input 7: Y = act(float(sum) * S + B +
// R), each step rounded (format version 16).
inline constexpr const char* kSumAttr = "kiln.sum";
// int 1 on a MatMul whose input 2 is a constant bias [N] (N = the output's
// last dim): Y = act(A B + bias) (fuse-bias-activation, format version 12).
inline constexpr const char* kBiasAttr = "kiln.bias";
// int 1 on a ConvInteger / MatMulInteger: its output is float32,
// Y = act(float(sum) * S + B), the Cast to float32, the Mul by S (input 4,
// float32: one value, or one per output channel / column) and the Add of a
// bias B (input 5, optional, float32, one per output channel / column) that
// followed it in the graph, as ONNX Runtime's dynamic quantization writes
// them (fuse-integer-rescale, format version 13).
inline constexpr const char* kRescaleAttr = "kiln.rescale";
// int 1 on a rescaled ConvInteger / MatMulInteger (kiln.rescale = 1): its
// input 0 is the float32 x that a DynamicQuantizeLinear read, input 6 that
// DynamicQuantizeLinear's scale (float32, one value) and input 2 its zero
// point (uint8, one value); the op quantizes x itself as
// DynamicQuantizeLinear does, q = saturate(round_even(x / x_scale) + zp)
// (all 0 where x_scale is not > 0), and computes on q
// (fuse-quantize-input, format version 16). int 2: the op was that
// DynamicQuantizeLinear's only reader; it computes x_scale and the zero
// point from x itself as that op does (range min(0, min x), max(0, max x),
// NaNs skipped; scale (max - min) / 255; zero point
// saturate(round_even(-min / scale)), 0 for a scale not > 0), and inputs 2
// and 6 are absent.
inline constexpr const char* kQuantizeInputAttr = "kiln.quantize_input";
// int 1 with kiln.quantize_input (1 or 2): the scale the rescale multiplies by is
// x_scale * input 4 (one value or one per output channel / column), the
// Mul that computed it in the graph (format version 16).
inline constexpr const char* kScaleByXAttr = "kiln.scale_by_x";
// int 1 on a QLinearMatMul: its output is float32, (q - y_zero_point) *
// y_scale [+ B], q the quantized result it would return: the
// DequantizeLinear with the same scale and zero point and the Add of a
// constant bias B (input 8, optional, one value or one per column) that
// followed it, as QDQ transformers write them (fuse-integer-rescale, format
// version 13).
inline constexpr const char* kDequantizeAttr = "kiln.dequantize";
// int 1 on a Conv, MatMul or Gemm the model computes in bfloat16 (its
// operands were bfloat16 before half-in-float32 made the graph float32):
// where the device multiplies bfloat16 natively
// (device::Capabilities::bf16_dot), its kernel may round the operands to
// bfloat16, as the model does, and accumulate in float32 (format version
// 15; checked by ops::CheckBf16Attr). Elsewhere it changes nothing.
inline constexpr const char* kBf16Attr = "kiln.bf16";

// Whether a fused scale or bias of shape `s` holds one value, or one per
// `axis` of the output `out` (extent out[axis], known) with 1 in every other
// dim, aligned to the right: what broadcasting it against the output reads
// per channel / column.
inline bool PerAxisOrOne(const Shape& s, const Shape& out, std::size_t axis) {
  if (s.size() > out.size() || axis >= out.size()) return false;
  bool one = true;
  for (std::int64_t d : s) one = one && d == 1;
  if (one) return true;
  if (s.size() + axis < out.size() || out[axis] < 0) return false;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const std::size_t ax = out.size() - s.size() + j;
    if (ax == axis ? s[j] != out[axis] : s[j] != 1) return false;
  }
  return true;
}
}  // namespace kiln::ops

namespace kiln::ops {
// Set (=1) by the layout pass on Conv/pooling nodes whose data input and
// output are channels-last (NHWC) tensors; shapes are physical.
inline constexpr const char* kNhwcAttr = "kiln.nhwc";
}  // namespace kiln::ops
