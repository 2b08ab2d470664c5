// The CUDA elementwise kernels' parameters and per-element arithmetic,
// written once for both sides: the host compiles this header (the kernels
// fill KilnEwParams; the unit tests check every op and the broadcast
// indexing against double references), and the same text is compiled into
// the device program by NVRTC (kernels/elementwise.cu includes it; CMake
// embeds both as strings). Plain C++ that NVRTC and g++/clang both accept:
// no standard headers on the device side.
#pragma once

#ifdef __CUDACC_RTC__
#define KILN_HD __device__ __forceinline__
#else
#include <math.h>
#define KILN_HD inline
#endif

#define KILN_EW_MAX_RANK 8

// Unary ops (float32 in, float32 out).
enum KilnUnaryOp {
  kKilnRelu = 0,
  kKilnSigmoid,
  kKilnTanh,
  kKilnAbs,
  kKilnNeg,
  kKilnExp,
  kKilnLog,
  kKilnSqrt,
  kKilnReciprocal,
  kKilnErf,
  kKilnFloor,
  kKilnCeil,
  kKilnSoftplus,
  kKilnSoftsign,
  kKilnLeakyRelu,  // alpha
  kKilnElu,        // alpha
  kKilnSelu,       // alpha, gamma
  kKilnHardSigmoid,  // alpha, beta
  kKilnHardSwish,
  kKilnGeluErf,
  kKilnGeluTanh,
  kKilnSin,
  kKilnCos,
  kKilnUnaryOpCount
};

// Binary ops (float32 a, float32 b -> float32), with broadcasting.
enum KilnBinaryOp {
  kKilnAdd = 0,
  kKilnSub,
  kKilnMul,
  kKilnDiv,
  kKilnPow,
  kKilnMax,
  kKilnMin,
  kKilnPRelu,  // a = x, b = slope
  kKilnBinaryOpCount
};

struct KilnEwParams {
  long long n;                           // output elements
  long long dims[KILN_EW_MAX_RANK];      // output dims, rank of them
  long long sa[KILN_EW_MAX_RANK];        // input a's stride (elements) per output dim; 0: broadcast
  long long sb[KILN_EW_MAX_RANK];        // input b's
  int rank;
  int op;
  int contiguous;                        // 1: a and b have the output's shape (offsets = i)
  float alpha, beta, gamma;
};

// Offsets into a and b of output element i.
KILN_HD void kiln_ew_offsets(const KilnEwParams& p, long long i, long long* oa, long long* ob) {
  if (p.contiguous) {
    *oa = i;
    *ob = i;
    return;
  }
  long long a = 0, b = 0, rem = i;
  for (int d = p.rank - 1; d >= 0; --d) {
    const long long c = rem % p.dims[d];
    rem /= p.dims[d];
    a += c * p.sa[d];
    b += c * p.sb[d];
  }
  *oa = a;
  *ob = b;
}

KILN_HD float kiln_unary_op(const KilnEwParams& p, float x) {
  switch (p.op) {
    case kKilnRelu: return x < 0.f ? 0.f : x;  // NaN stays NaN
    case kKilnSigmoid: return 1.f / (1.f + expf(-x));
    case kKilnTanh: return tanhf(x);
    case kKilnAbs: return fabsf(x);
    case kKilnNeg: return -x;
    case kKilnExp: return expf(x);
    case kKilnLog: return logf(x);
    case kKilnSqrt: return sqrtf(x);
    case kKilnReciprocal: return 1.f / x;
    case kKilnErf: return erff(x);
    case kKilnFloor: return floorf(x);
    case kKilnCeil: return ceilf(x);
    case kKilnSoftplus: return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case kKilnSoftsign: return x / (1.f + fabsf(x));
    case kKilnLeakyRelu: return x >= 0.f ? x : p.alpha * x;
    case kKilnElu: return x < 0.f ? p.alpha * expm1f(x) : x;
    case kKilnSelu: return x > 0.f ? p.gamma * x : p.gamma * p.alpha * expm1f(x);
    case kKilnHardSigmoid: return fmaxf(0.f, fminf(1.f, p.alpha * x + p.beta));
    case kKilnHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
    case kKilnGeluErf: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case kKilnGeluTanh: {
      const float z = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(z));
    }
    case kKilnSin: return sinf(x);
    case kKilnCos: return cosf(x);
    default: return nanf("");  // unknown op: NaN, never silently x
  }
}

KILN_HD float kiln_binary_op(const KilnEwParams& p, float a, float b) {
  switch (p.op) {
    case kKilnAdd: return a + b;
    case kKilnSub: return a - b;
    case kKilnMul: return a * b;
    case kKilnDiv: return a / b;
    case kKilnPow: return powf(a, b);
    case kKilnMax: return (a > b || a != a) ? a : b;  // NaN propagates, as numpy's maximum
    case kKilnMin: return (a < b || a != a) ? a : b;
    case kKilnPRelu: return a < 0.f ? b * a : a;
    default: return nanf("");
  }
}
