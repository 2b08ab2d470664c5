// Exact depthwise convolution of 8-bit operands for x86 CPUs without VNNI,
// in float32 FMA: a rescaled ConvInteger with kiln.quantize_input whose
// groups have one input and one output channel each (dynamic MobileNetV2's
// 3x3 layers), and a channels-last depthwise QLinearConv or rescaled
// ConvInteger on uint8 / int8 activations (static MobileNetV2's).
//
// The operand is x minus its zero point as float32, exact integers within
// [-255, 255]: DynamicQuantizeLinear's uint8 of a float32 x minus its zero
// point (QuantizeCenteredFloat, quant.h), or the 8-bit input widened. The
// weights are w - w_zp within [-128, 127], as float32. Each output sums
// kh * kw products with FMA; while every sum stays within 2^24 (the caller
// checks: SumsFitFloat) each step is exact, so the result is the integer
// sum whatever the order, the definition bit for bit.
//
// Each worker fills the input rows its output rows read into a ring of
// kh-window rows (zero columns either side: a padded position is the zero
// point, so 0) as it reaches them, and the convolution reads them from
// cache: no float32 copy of x is written to memory (a quantized-input
// layer's float32 route wrote one; oneDNN's int8 depthwise kernel without
// VNNI ran 1.4-1.8x the float32 one's time on MobileNetV2's stride-1
// layers, Zen 3). Each output row of sums is then handed to the caller's
// epilogue (RescaleEpilogue's steps and range, or QLinearConv's
// requantisation into an 8-bit output) while it is still in cache.
//
// Layout: x NHWC [n, h, w, c], y NHWC [n, oh, ow, c];
// weights [c, 1, kh, kw] packed once as [kh * kw][c] float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::cpu {

struct QuantDepthwiseShape {
  std::int64_t n = 0, h = 0, w = 0, c = 0;  // input NHWC; one filter per channel
  std::int64_t oh = 0, ow = 0;              // output extents (output NHWC [n, oh, ow, c])
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pad_top = 0, pad_left = 0;  // the far pads follow from oh and ow
};

// Whether this CPU runs it (AVX2 and FMA).
bool QuantDepthwiseAvailable();

class QuantDepthwise {
 public:
  // False where a dimension or a pad is not positive or zero, or the ring
  // (wide enough for every column a window reads, past the far pad too)
  // or the weights would pass kMaxTensorBytes (checked arithmetic).
  bool Plan(const QuantDepthwiseShape& s);
  // w: [c, 1, kh, kw], each value w - w_zp within [-128, 127].
  void PackWeights(const std::int8_t* w);
  // Fills `dst` with input row iy of image n (w * c values), x minus its
  // zero point as float32 integers within [-255, 255].
  using RowSource = std::function<void(std::int64_t n, std::int64_t iy, float* dst)>;
  // Called once per output row `row` (n * oh + oy) with its ow * c float
  // sums, in y's row where Run was given y (the caller's rescale, in
  // place), else in a buffer of the worker's (the caller stores them its
  // own way). lo / hi (null: no range wanted) fold in the results' min
  // and max.
  using RowEpilogue = std::function<void(std::int64_t row, float* sums, std::int64_t pixels, float* lo, float* hi)>;
  // With range_min / range_max: min(0, min) and max(0, max) over all rows,
  // as the epilogue folded them.
  void Run(const RowSource& source, float* y, const RowEpilogue& epilogue, float* range_min = nullptr,
           float* range_max = nullptr) const;
  // The source of x float32 (NHWC, this plan's extents) quantized with
  // x_scale and x_zp (QuantizeCenteredFloat, as DynamicQuantizeLinear).
  RowSource QuantizedRows(const float* x, float x_scale, std::int32_t x_zp) const;
  // Run on QuantizedRows(x, x_scale, x_zp); y the epilogue's results.
  void Run(const float* x, float x_scale, std::int32_t x_zp, float* y, const RowEpilogue& epilogue,
           float* range_min = nullptr, float* range_max = nullptr) const;

  const QuantDepthwiseShape& shape() const { return s_; }

 private:
  QuantDepthwiseShape s_;
  // span_: input rows one output row's window covers ((kh - 1) * dh + 1),
  // the ring's slots; wb_: columns of a ring row (pads included).
  std::int64_t span_ = 0, wb_ = 0, row_len_ = 0;
  std::vector<float> w_;     // [kh * kw][c]
  std::vector<float> zero_;  // one ring row of zeros (from zero_offset_, 64-byte aligned): an input row in the pad
  std::ptrdiff_t zero_offset_ = 0;
};

}  // namespace kiln::cpu
