// Exact 8-bit convolution (and matrix product) for x86 CPUs without VNNI:
// channels-last, one group or several, sums of int16 products in int32.
//
// Without VNNI, oneDNN's int8 kernels (and ONNX Runtime's MLAS) multiply
// uint8 x int8 with vpmaddubsw, which adds adjacent pairs into saturating
// int16: 255 * 127 * 2 does not fit, so with full 8-bit weights their sums
// can leave the integer definition. This kernel widens both operands to
// int16 first, x - x_zp (within [-255, 255]) and w - w_zp (within
// [-128, 127]), and multiplies adjacent pairs with vpmaddwd, whose pair
// sums (at most 2 * 255 * 128) fit int32: exact for any 8-bit operands.
// vpmaddwd does 16 multiply-adds and needs one vpaddd to accumulate; on
// CPUs that issue two vector multiplies and two more vector ops a cycle
// (AMD Zen 2-5) that is twice the float32 FMA's 8 a cycle per pipe
// (measured on a Zen 4 at 256 bits: 96 G multiply-adds/s against 55 for
// float32 FMA and 116 for the saturating vpmaddubsw chain).
//
// Layout: x is NHWC (uint8 or int8), copied each run into a zero-padded
// int16 image [n][h + pads][w + pads][c rounded up to even] of x - x_zp (a
// padded position is the zero point, so 0); under 8 channels (RGB stems)
// c is not rounded and each window row is one tap of kw x c values. Weights OIHW are packed once
// into panels of 16 output channels: [panel][tap][c / 2][16][2] int16. The
// micro-kernel computes up to 4 adjacent output pixels of one output row by
// 16 channels in 8 int32 registers over a chunk of (tap, channel pair)
// steps whose packed weights stay in L1 (16 KiB), then stores float(sum +
// bias) (or the int32 sum + bias), or keeps the partial sums for the next
// chunk.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cpu {

struct Int16ConvShape {
  std::int64_t n = 0, h = 0, w = 0, c = 0;  // input NHWC
  std::int64_t k = 0, oh = 0, ow = 0;       // output channels and extents (output NHWC)
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  // Groups: c / groups input channels to k / groups outputs each (weights
  // [k, c / groups, kh, kw]); direct form only.
  std::int64_t groups = 1;
};

// Whether this CPU runs it (AVX2).
bool Int16ConvAvailable();

// Where Run writes: exactly one of f, i and q.
struct Int16ConvOut {
  float* f = nullptr;         // float(sum + bias)
  std::int32_t* i = nullptr;  // sum + bias (wrapping)
  // saturate(round_even(float(sum + bias) * scale[c]) + zp) as int8
  // (q_signed) or uint8: QLinearConv's requantisation, as the float32
  // route's Requantize does it (scales finite).
  void* q = nullptr;
  bool q_signed = false;
  const float* scales = nullptr;  // [k], or one value when scale_count is 1
  std::int64_t scale_count = 1;
  float zp = 0.f;
  // With f and `rescale` ([k]): act(float(sum + bias) * rescale[c] +
  // rbias[c]) instead (rbias [k] or null: no add), the multiply and the
  // add rounded separately, act 0 none, 1 Relu, 2 LeakyRelu(alpha), 3
  // Clip(alpha, beta): RescaleEpilogue's steps (ConvInteger with
  // kiln.rescale). With range_min / range_max, also min(0, min) and
  // max(0, max) of what was stored, NaNs skipped (device::ValueRange).
  const float* rescale = nullptr;
  const float* rbias = nullptr;
  int act = 0;
  float alpha = 0.f, beta = 0.f;
  float* range_min = nullptr;
  float* range_max = nullptr;
};

class Int16Conv {
 public:
  // False where the padded image or the packed weights would pass
  // kMaxTensorBytes (checked arithmetic) or a dimension is not positive.
  // `winograd`: 3x3 stride-1 convolutions of 16 to 1827 input channels
  // (and 16+ output channels) run as Winograd F(2x2, 3x3) in integers
  // (see int16_conv.cc); false: always the direct kernel.
  bool Plan(const Int16ConvShape& s, bool winograd = true);
  // w: OIHW [k, c, kh, kw], each value w - w_zp within [-128, 127] (int8
  // as is, uint8 with zero point 128 shifted by the caller).
  void PackWeights(const std::int8_t* w);
  // Takes `other`'s packed weights, shared (false, and nothing taken,
  // where other was planned for other channels, window or form, or has
  // none): the plans of a node's other input extents (dynamic shapes)
  // share one packing.
  bool ShareWeights(const Int16Conv& other);
  // What the packed weights depend on ("c:k:kh:kw:form"): a prepack-cache
  // key for them, the same for every input extent.
  std::string WeightKey() const;
  // bias: [k] int32 or null; outputs NHWC [n, oh, ow, k]. Sums wrap modulo
  // 2^32 (exact wherever the true sum fits int32, as the int32 definition
  // needs). Uses a per-thread int16 image of the padded input.
  // x_scale (kiln.quantize_input): x is float32 and the operand is its
  // DynamicQuantizeLinear uint8 with *x_scale and x_zp
  // (QuantizeCenteredInt16, quant.h), made as each row of the image is.
  void Run(const void* x, bool x_signed, std::int32_t x_zp, const std::int32_t* bias, const Int16ConvOut& out,
           const float* x_scale = nullptr) const;

  const Int16ConvShape& shape() const { return s_; }
  // The direct form's pieces of each panel's (tap, channel pair) sequence
  // (set by Plan): whole taps while they fit a chunk, else one tap's pairs
  // in pieces; off: the piece's first pair in the panel.
  struct Chunk {
    std::int64_t t0, t1, q0, q1, off;
  };
  bool winograd() const { return wino_; }

 private:
  Int16ConvShape s_;
  // cp_: values per pixel of the image (c rounded up to even); taps_ /
  // kp_: the window's taps and the channel pairs per tap.
  std::int64_t cp_ = 0, hp_ = 0, wp_ = 0, panels_ = 0, taps_ = 0, kp_ = 0, image_ = 0;
  // Row taps (fewer than 8 input channels, no column dilation): a tap per
  // window row, kw x c values together (cp_ = c, not padded), kp_ =
  // ceil(kw * c / 2) pairs each.
  bool rowtap_ = false;
  // Winograd: its output tiles down and across.
  bool wino_ = false;
  std::int64_t th_ = 0, tw_ = 0;
  void PackWinograd(const std::int8_t* w);
  std::int16_t* Allocate(std::size_t count);  // packed_: count zeros, 64-byte aligned
  void RunWinograd(const std::int16_t* img, const std::int32_t* bias, const Int16ConvOut& out) const;
  std::vector<std::int64_t> tap_off_;  // per tap, its offset in the image (int16 values)
  std::vector<Chunk> chunks_;
  // 64-byte aligned: a weight vector split over two cache lines (half of
  // them from a 16-byte aligned vector) costs two loads. Shared by copies
  // and ShareWeights.
  std::shared_ptr<std::int16_t> packed_;
};

}  // namespace kiln::cpu
