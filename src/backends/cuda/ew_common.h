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

// Comparisons (float32 or int64 inputs, bool output).
enum KilnCompareOp { kKilnLess = 0, kKilnLessOrEqual, kKilnGreater, kKilnGreaterOrEqual, kKilnEqual };

// The element types compares read.
enum KilnCompareType { kKilnCmpF32 = 0, kKilnCmpI64 };

template <typename T>
KILN_HD bool kiln_compare(int op, T a, T b) {
  switch (op) {
    case kKilnLess: return a < b;
    case kKilnLessOrEqual: return a <= b;
    case kKilnGreater: return a > b;
    case kKilnGreaterOrEqual: return a >= b;
    default: return a == b;
  }
}

// Cast between float32, int32, int64, bool, uint8 and int8, with the
// conversions Kiln's CPU kernel defines: float -> integer truncates toward
// zero, NaN gives 0 and values beyond the type's range saturate (to uint8:
// saturated to int64, then wrapped as C and numpy do); integer -> integer
// wraps; -> bool is != 0 (NaN too); integer -> float rounds to nearest even.
enum KilnCastType { kKilnCastF32 = 0, kKilnCastI32, kKilnCastI64, kKilnCastBool, kKilnCastU8, kKilnCastI8 };

template <typename I>
KILN_HD I kiln_saturate_float(float w, I lo, I hi) {
  if (w != w) return I(0);
  // (float)hi rounds up to a power of two for 32/64-bit types: >= is exact.
  if (w >= static_cast<float>(hi)) return hi;
  if (w <= static_cast<float>(lo)) return lo;
  return static_cast<I>(w);
}

KILN_HD void kiln_cast_at(const void* x, int from, void* y, int to, long long i) {
  const long long kMin64 = -9223372036854775807LL - 1, kMax64 = 9223372036854775807LL;
  if (from == kKilnCastF32) {
    const float w = static_cast<const float*>(x)[i];
    switch (to) {
      case kKilnCastF32: static_cast<float*>(y)[i] = w; return;
      case kKilnCastI32: static_cast<int*>(y)[i] = kiln_saturate_float<int>(w, -2147483647 - 1, 2147483647); return;
      case kKilnCastI64: static_cast<long long*>(y)[i] = kiln_saturate_float<long long>(w, kMin64, kMax64); return;
      case kKilnCastBool: static_cast<unsigned char*>(y)[i] = w != 0.f ? 1 : 0; return;
      case kKilnCastU8:
        static_cast<unsigned char*>(y)[i] =
            static_cast<unsigned char>(static_cast<unsigned long long>(kiln_saturate_float<long long>(w, kMin64, kMax64)));
        return;
      default: static_cast<signed char*>(y)[i] = kiln_saturate_float<signed char>(w, -128, 127); return;
    }
  }
  long long v;
  switch (from) {
    case kKilnCastI32: v = static_cast<const int*>(x)[i]; break;
    case kKilnCastI64: v = static_cast<const long long*>(x)[i]; break;
    case kKilnCastBool: v = static_cast<const unsigned char*>(x)[i] != 0 ? 1 : 0; break;
    case kKilnCastU8: v = static_cast<const unsigned char*>(x)[i]; break;
    default: v = static_cast<const signed char*>(x)[i]; break;
  }
  // Wrapping through the unsigned type: defined, two's complement.
  const unsigned long long u = static_cast<unsigned long long>(v);
  switch (to) {
    case kKilnCastF32: static_cast<float*>(y)[i] = static_cast<float>(v); return;
    case kKilnCastI32: static_cast<int*>(y)[i] = static_cast<int>(static_cast<unsigned int>(u)); return;
    case kKilnCastI64: static_cast<long long*>(y)[i] = v; return;
    case kKilnCastBool: static_cast<unsigned char*>(y)[i] = v != 0 ? 1 : 0; return;
    case kKilnCastU8: static_cast<unsigned char*>(y)[i] = static_cast<unsigned char>(u); return;
    default: static_cast<signed char*>(y)[i] = static_cast<signed char>(static_cast<unsigned char>(u)); return;
  }
}

// MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool over 1 to 3
// spatial dims, as [N * C, D, H, W] with leading spatial dims of 1. Per dim
// a window's taps are o * stride - pad_begin + i * dilation (i < kernel);
// taps inside the input are read; for AveragePool with count_include_pad
// the divisor counts the taps inside the padded input (as the CPU kernel).
enum KilnPoolMode { kKilnPoolMax = 0, kKilnPoolAvgExclude, kKilnPoolAvgInclude };

struct KilnPoolParams {
  long long n;  // output elements
  long long in[3], out[3], kern[3], stride[3], dil[3], pad_begin[3], pad_end[3];
  int mode;
};

// Output element i of x (one plane of in[0] * in[1] * in[2] per n * c).
KILN_HD float kiln_pool_at(const KilnPoolParams& p, const float* x, long long i) {
  const long long plane_out = p.out[0] * p.out[1] * p.out[2];
  const long long nc = i / plane_out;
  long long r = i % plane_out;
  long long o[3];
  o[2] = r % p.out[2];
  r /= p.out[2];
  o[1] = r % p.out[1];
  o[0] = r / p.out[1];
  const float* plane = x + nc * p.in[0] * p.in[1] * p.in[2];
  long long span[3];
  for (int d = 0; d < 3; ++d) {
    span[d] = 0;
    for (long long k = 0; k < p.kern[d]; ++k) {
      const long long pos = o[d] * p.stride[d] - p.pad_begin[d] + k * p.dil[d];
      span[d] += pos >= -p.pad_begin[d] && pos < p.in[d] + p.pad_end[d];
    }
  }
  float best = 0.f;
  bool any = false;
  double sum = 0;
  long long count = 0;
  for (long long a = 0; a < p.kern[0]; ++a) {
    const long long z = o[0] * p.stride[0] - p.pad_begin[0] + a * p.dil[0];
    if (z < 0 || z >= p.in[0]) continue;
    for (long long b = 0; b < p.kern[1]; ++b) {
      const long long y = o[1] * p.stride[1] - p.pad_begin[1] + b * p.dil[1];
      if (y < 0 || y >= p.in[1]) continue;
      for (long long c = 0; c < p.kern[2]; ++c) {
        const long long w = o[2] * p.stride[2] - p.pad_begin[2] + c * p.dil[2];
        if (w < 0 || w >= p.in[2]) continue;
        const float v = plane[(z * p.in[1] + y) * p.in[2] + w];
        if (p.mode == kKilnPoolMax) {
          if (!any || v > best) best = v;
          any = true;
        } else {
          sum += v;
          ++count;
        }
      }
    }
  }
  if (p.mode == kKilnPoolMax) return best;
  const long long div = p.mode == kKilnPoolAvgInclude ? span[0] * span[1] * span[2] : count;
  return div ? static_cast<float>(sum / static_cast<double>(div)) : 0.f;
}

// Gather: data as [outer, axis_len, inner] elements, indices flattened
// (n_idx of them); output [outer, n_idx, inner]. Output element i reads
// data element kiln_gather_source(i, idx) where idx is indices[(i / inner) %
// n_idx], or -1 when idx is out of [-axis_len, axis_len) (the output
// element is then zero: never a read outside the data).
struct KilnGatherParams {
  long long n, outer, axis_len, inner, n_idx;
  int elem_bytes;
  int idx64;  // indices are int64 (else int32)
};

KILN_HD long long kiln_gather_index_slot(const KilnGatherParams& p, long long i) { return (i / p.inner) % p.n_idx; }

KILN_HD long long kiln_gather_source(const KilnGatherParams& p, long long i, long long idx) {
  if (idx < 0) idx += p.axis_len;
  if (idx < 0 || idx >= p.axis_len) return -1;
  const long long o = i / (p.inner * p.n_idx), k = i % p.inner;
  return (o * p.axis_len + idx) * p.inner + k;
}

struct KilnEwParams {
  long long n;                           // output elements
  long long dims[KILN_EW_MAX_RANK];      // output dims, rank of them
  long long sa[KILN_EW_MAX_RANK];        // input a's stride (elements) per output dim; 0: broadcast
  long long sb[KILN_EW_MAX_RANK];        // input b's
  long long sc[KILN_EW_MAX_RANK];        // input c's (Where)
  int rank;
  int op;
  int contiguous;                        // 1: a and b have the output's shape (offsets = i)
  float alpha, beta, gamma;
};

// Softmax / LogSoftmax (the tensor as [outer, len, inner], normalised
// along len) and LayerNormalization ([outer, len]: rows normalised, scale
// and bias of len elements, or one each: stride 0).
struct KilnRowParams {
  long long outer, len, inner;
  int log;           // LogSoftmax
  int has_bias;      // LayerNormalization's B
  int y_index;       // slot of Y in the argument block
  int scale_stride, bias_stride;  // 1, or 0 for a single value
  float epsilon;
};

// Softmax row r (of outer * inner): its first element; the others follow
// inner apart.
KILN_HD long long kiln_row_base(const KilnRowParams& p, long long r) {
  return (r / p.inner) * p.len * p.inner + r % p.inner;
}

// Transpose: output element i reads input element kiln_transpose_offset(i).
struct KilnTransposeParams {
  long long n;
  long long out_dims[KILN_EW_MAX_RANK];
  long long in_strides[KILN_EW_MAX_RANK];  // the input stride of each output dim (the permuted strides)
  int rank;
  int elem_bytes;                          // 1, 2, 4 or 8
};

KILN_HD long long kiln_transpose_offset(const KilnTransposeParams& p, long long i) {
  long long off = 0, rem = i;
  for (int d = p.rank - 1; d >= 0; --d) {
    off += (rem % p.out_dims[d]) * p.in_strides[d];
    rem /= p.out_dims[d];
  }
  return off;
}

// Offsets into a, b and c of output element i (Where's three inputs).
KILN_HD void kiln_ew_offsets3(const KilnEwParams& p, long long i, long long* oa, long long* ob, long long* oc) {
  long long a = 0, b = 0, c = 0, rem = i;
  for (int d = p.rank - 1; d >= 0; --d) {
    const long long k = rem % p.dims[d];
    rem /= p.dims[d];
    a += k * p.sa[d];
    b += k * p.sb[d];
    c += k * p.sc[d];
  }
  *oa = a;
  *ob = b;
  *oc = c;
}

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
