// Vectorised float32 transcendental functions for the CPU kernels, where
// oneDNN's eltwise is slow (tanh, tanh-GELU on AVX2). In place is allowed
// (x == y).
#pragma once

#include <cstdint>

namespace kiln::cpu {

// y[i] = tanh(x[i]).
void TanhF32(const float* x, float* y, std::int64_t n);
// y[i] = 1 / (1 + e^-x[i]) (the recurrent ops' gates).
void SigmoidF32(const float* x, float* y, std::int64_t n);
// y[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GELU's tanh
// approximation (GPT-2's "gelu_new", ONNX Gelu approximate="tanh"),
// computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
void GeluTanhF32(const float* x, float* y, std::int64_t n);
// One row of LayerNormalization: mean and rstd = 1 / sqrt(var + eps) of
// x[0, n) (two passes, sums in double lanes), then
// y[i] = (x[i] - mean) * rstd * scale[i] + bias[i] (bias may be null).
void LayerNormRowF32(const float* x, float* y, std::int64_t n, const float* scale, const float* bias, double eps,
                     double* mean, double* rstd);
// Whether the functions above take the AVX2+FMA path on this CPU.
bool VecMathUsesAvx2();
// The scalar loops the functions above use on CPUs without AVX2+FMA (so
// tests can check them on any machine).
void TanhF32Portable(const float* x, float* y, std::int64_t n);
void SigmoidF32Portable(const float* x, float* y, std::int64_t n);
void GeluTanhF32Portable(const float* x, float* y, std::int64_t n);
void LayerNormRowF32Portable(const float* x, float* y, std::int64_t n, const float* scale, const float* bias,
                             double eps, double* mean, double* rstd);

}  // namespace kiln::cpu
