// Vectorised float32 tanh, sigmoid, tanh-GELU and LayerNormalization rows (see
// vec_math.h). oneDNN 2.6's
// AVX2 eltwise computes tanh and gelu_tanh at about 3.3 ns per element here
// (table lookups with gathers), its logistic at 0.6: these use one exp
// (range reduction to [-ln2/2, ln2/2], a degree-6 polynomial, the exponent
// added in as integer bits; the coefficients of Cephes' expf) and, for tanh
// near zero, Cephes' odd polynomial, so no cancellation. AVX2+FMA where the
// CPU has both (checked once), else the scalar loops below; tested against
// double references over dense sweeps (unary_test.cc, pipeline_test.cc).
#include "backends/cpu/kernels/vec_math.h"

#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_VEC_X86 1
#endif

namespace kiln::cpu {
namespace {

constexpr float kGeluK0 = 1.5957691216057308f;           // 2 * sqrt(2 / pi)
constexpr float kGeluK1 = 1.5957691216057308f * 0.044715f;  // ... * 0.044715
constexpr float kTanhSmall = 0.625f;                      // below: the odd polynomial

float TanhScalar(float x) { return std::tanh(x); }
float SigmoidScalar(float x) { return 1.f / (1.f + std::exp(-x)); }
float GeluTanhScalar(float x) {  // in double: the fallback's accuracy is the vector loop's
  const double xd = x, u = xd * (1.5957691216057308 + 1.5957691216057308 * 0.044715 * xd * xd);  // 2z
  return static_cast<float>(xd / (1.0 + std::exp(-u)));  // 0.5 (1 + tanh z) = sigmoid(2z)
}

#ifdef KILN_VEC_X86
#define KILN_AVX2 __attribute__((target("avx2,fma")))

// e^x for x clamped to [-87.3, 88.3] (so 2^n stays a normal number).
KILN_AVX2 inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2, split in two
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

KILN_AVX2 inline __m256 Tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  // |x| < 0.625: x + x^3 P(x^2)
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  // else: 1 - 2 / (e^{2|x|} + 1), with x's sign
  const __m256 e = Exp8(_mm256_add_ps(ax, ax));
  const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.f),
                                   _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
  const __m256 large = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  const __m256 y = _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, _mm256_set1_ps(kTanhSmall), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// 1 / (1 + e^-x); below -87.3 (Exp8's clamp) about 1e-38, where the
// true value is smaller still.
KILN_AVX2 inline __m256 Sigmoid8(__m256 x) {
  const __m256 e = Exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)));
  const __m256 y = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

KILN_AVX2 inline __m256 GeluTanh8(__m256 x) {
  const __m256 u = _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_set1_ps(kGeluK1), _mm256_mul_ps(x, x),
                                                    _mm256_set1_ps(kGeluK0)));
  const __m256 nu = _mm256_xor_ps(u, _mm256_set1_ps(-0.f));
  const __m256 e = Exp8(nu);
  __m256 y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
  // -u above Exp8's clamp: x sigmoid(u) is below float's normal range (x <
  // -9.9), and x / (1 + e^88.3) would not be (x = -3e38 gave -1.3)
  y = _mm256_blendv_ps(y, _mm256_mul_ps(x, _mm256_setzero_ps()), _mm256_cmp_ps(nu, _mm256_set1_ps(88.f), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

template <__m256 (*F)(__m256)>
KILN_AVX2 void Apply8(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through a padded block
    alignas(32) float in[8] = {}, out[8];
    for (std::int64_t j = i; j < n; ++j) in[j - i] = x[j];
    _mm256_store_ps(out, F(_mm256_load_ps(in)));
    for (std::int64_t j = i; j < n; ++j) y[j] = out[j - i];
  }
}

KILN_AVX2 inline double Sum4d(__m256d v) {
  alignas(32) double l[4];
  _mm256_store_pd(l, v);
  return (l[0] + l[1]) + (l[2] + l[3]);
}

// Sums in double lanes (a float lane's running sum would round at every add
// once it is large: rows of thousands of values around 1e4); the mean is
// subtracted as a float pair hi + lo, so x - mean is exact to float's
// precision of the difference.
KILN_AVX2 void LayerNormRowAvx2(const float* x, float* y, std::int64_t n, const float* scale, const float* bias,
                                double eps, double* mean_out, double* rstd_out) {
  const std::int64_t n8 = n / 8 * 8;
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (std::int64_t i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  double sum = Sum4d(_mm256_add_pd(a0, a1));
  for (std::int64_t i = n8; i < n; ++i) sum += x[i];
  const double mean = n ? sum / static_cast<double>(n) : 0.0;
  const float mhi = static_cast<float>(mean), mlo = static_cast<float>(mean - static_cast<double>(mhi));
  const __m256 hi = _mm256_set1_ps(mhi), lo = _mm256_set1_ps(mlo);
  a0 = _mm256_setzero_pd();
  a1 = _mm256_setzero_pd();
  for (std::int64_t i = 0; i < n8; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), hi), lo);
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(d)), d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
    a0 = _mm256_fmadd_pd(d0, d0, a0);
    a1 = _mm256_fmadd_pd(d1, d1, a1);
  }
  double sq = Sum4d(_mm256_add_pd(a0, a1));
  for (std::int64_t i = n8; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt((n ? sq / static_cast<double>(n) : 0.0) + eps);
  const __m256 r = _mm256_set1_ps(static_cast<float>(rstd));
  for (std::int64_t i = 0; i < n8; i += 8) {
    const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), hi), lo), r);
    const __m256 b = bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps();
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(scale + i), b));
  }
  for (std::int64_t i = n8; i < n; ++i) {
    y[i] = static_cast<float>((x[i] - mean) * rstd * scale[i] + (bias ? bias[i] : 0.f));
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

bool HaveAvx2Fma() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}
#endif

}  // namespace

bool VecMathUsesAvx2() {
#ifdef KILN_VEC_X86
  return HaveAvx2Fma();
#else
  return false;
#endif
}

void TanhF32Portable(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = TanhScalar(x[i]);
}

void TanhF32(const float* x, float* y, std::int64_t n) {
#ifdef KILN_VEC_X86
  if (HaveAvx2Fma()) return Apply8<Tanh8>(x, y, n);
#endif
  TanhF32Portable(x, y, n);
}

void SigmoidF32Portable(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = SigmoidScalar(x[i]);
}

void SigmoidF32(const float* x, float* y, std::int64_t n) {
#ifdef KILN_VEC_X86
  if (HaveAvx2Fma()) return Apply8<Sigmoid8>(x, y, n);
#endif
  SigmoidF32Portable(x, y, n);
}

void LayerNormRowF32(const float* x, float* y, std::int64_t n, const float* scale, const float* bias, double eps,
                     double* mean, double* rstd) {
#ifdef KILN_VEC_X86
  if (HaveAvx2Fma()) return LayerNormRowAvx2(x, y, n, scale, bias, eps, mean, rstd);
#endif
  LayerNormRowF32Portable(x, y, n, scale, bias, eps, mean, rstd);
}

void LayerNormRowF32Portable(const float* x, float* y, std::int64_t n, const float* scale, const float* bias,
                             double eps, double* mean, double* rstd) {
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += x[i];
  const double m = n ? sum / static_cast<double>(n) : 0.0;
  for (std::int64_t i = 0; i < n; ++i) sq += (x[i] - m) * (x[i] - m);
  const double r = 1.0 / std::sqrt((n ? sq / static_cast<double>(n) : 0.0) + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - m) * r * scale[i] + (bias ? bias[i] : 0.f));
  *mean = m;
  *rstd = r;
}

void GeluTanhF32Portable(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = GeluTanhScalar(x[i]);
}

void GeluTanhF32(const float* x, float* y, std::int64_t n) {
#ifdef KILN_VEC_X86
  if (HaveAvx2Fma()) return Apply8<GeluTanh8>(x, y, n);
#endif
  GeluTanhF32Portable(x, y, n);
}

}  // namespace kiln::cpu
