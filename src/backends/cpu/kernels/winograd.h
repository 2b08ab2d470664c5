// Winograd F(4x4, 3x3) convolution on channels-last (NHWC) float32 tensors,
// for 3x3 / stride 1 / dilation 1 / group 1 convolutions on AVX2 + FMA CPUs
// (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
// Each 4x4 output tile takes 36 multiply-adds per (input, output) channel
// pair instead of 144: the input's 6x6 tiles and the weights go to the
// Winograd domain (V = B^T d B, U = G g G^T), 36 matrix products
// M[xi] = V[xi] U[xi] over the channels run on an AVX2 micro-kernel, and
// Y = A^T M A comes back with bias, residual and activation applied.
// Tiles are processed in blocks small enough that the block's V and M
// stay in the core's cache; blocks run in parallel on the kernel threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cpu {

struct WinogradShape {
  std::int64_t n = 0, h = 0, w = 0, c = 0;  // input NHWC
  std::int64_t k = 0, oh = 0, ow = 0;       // output channels and extents
  std::int64_t pad_top = 0, pad_left = 0;   // the bottom/right pads follow from oh, ow
};

// The epilogue: y = act(conv + bias[k] + residual), act one of these.
enum class WinogradAct { kNone, kRelu, kLeakyRelu, kClip };
struct WinogradEpilogue {
  const float* bias = nullptr;      // [k] or null
  const float* residual = nullptr;  // NHWC like the output, or null; may be the output itself
  WinogradAct act = WinogradAct::kNone;
  float alpha = 0.f, beta = 0.f;    // LeakyRelu slope; Clip's min and max
};

// Whether this CPU runs the Winograd kernels (AVX2 and FMA).
bool WinogradAvailable();
// Floats of the packed (transformed) weights of a [k, c, 3, 3] filter.
std::size_t WinogradPackedFloats(std::int64_t k, std::int64_t c);
// Transforms w [k, c, 3, 3] (OIHW) into u (WinogradPackedFloats floats,
// 32-byte aligned). Needs WinogradAvailable() only to be used, not to pack.
void WinogradPackWeights(const float* w, std::int64_t k, std::int64_t c, float* u);
// Runs the convolution: x NHWC, u from WinogradPackWeights, y NHWC
// [n, oh, ow, k]. Needs c % 8 == 0 and WinogradAvailable(). Uses each
// calling OpenMP thread's scratch memory (a few hundred KiB).
void WinogradConvNhwc(const WinogradShape& s, const float* x, const float* u, float* y, const WinogradEpilogue& e);

}  // namespace kiln::cpu
