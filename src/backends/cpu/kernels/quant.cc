// Quantized ops on the CPU: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv, and ONNX Runtime's com.microsoft QLinearAdd, QLinearMul,
// QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat.
//
// Rounding is to nearest, ties to even (std::nearbyint in the default
// rounding mode), then saturation to the output type, as ONNX specifies.
// The integer products accumulate exactly in int32: operands minus their
// zero points (int16) times each other. Requantisation (QLinear*) scales
// the int32 sum (plus QLinearConv's int32 bias) by a_scale * b_scale /
// y_scale in float, as ONNX Runtime does.
#include <array>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <cfenv>
#include <cstring>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <numeric>
#include <type_traits>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/int16_conv.h"
#include "backends/cpu/kernels/quant_depthwise.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/util.h"
#include "common/checked.h"
#include "ops/fused_attrs.h"
#include "ops/op_registry.h"
#include "ops/window.h"

namespace kiln::cpu {

bool AmxPaysForOneByOne(std::int64_t cin, std::int64_t cout, std::int64_t out_elems) {
  constexpr std::int64_t kMinChannels = 64, kMinMacs = std::int64_t{16} << 20;
  std::int64_t macs = 0;
  if (!CheckedMul(out_elems, cin, &macs)) return true;  // huge: AMX
  return cin >= kMinChannels && cout >= kMinChannels && macs >= kMinMacs;
}

namespace {

// A small quantization parameter (scale or zero point) read at run time:
// one value per tensor, or one per channel / row / column.
struct Param {
  int index = -1;  // input slot; -1 absent
  DType dtype = DType::kUndefined;
  std::int64_t count = 0;
  float Get(const KernelArgs& a, std::int64_t i) const {
    if (index < 0 || !a.in(index)) return 0.f;
    const std::int64_t k = count == 1 ? 0 : i;
    switch (dtype) {
      case DType::kFloat32: return a.in_as<float>(index)[k];
      case DType::kUInt8: return static_cast<float>(a.in_as<std::uint8_t>(index)[k]);
      case DType::kInt8: return static_cast<float>(a.in_as<std::int8_t>(index)[k]);
      case DType::kInt32: return static_cast<float>(a.in_as<std::int32_t>(index)[k]);
      default: return 0.f;
    }
  }
  std::int32_t GetInt(const KernelArgs& a, std::int64_t i) const {  // exact for every integer type
    if (index < 0 || !a.in(index)) return 0;
    const std::int64_t k = count == 1 ? 0 : i;
    switch (dtype) {
      case DType::kUInt8: return a.in_as<std::uint8_t>(index)[k];
      case DType::kInt8: return a.in_as<std::int8_t>(index)[k];
      case DType::kInt32: return a.in_as<std::int32_t>(index)[k];
      default: return static_cast<std::int32_t>(Get(a, i));
    }
  }
};

Param ParamOf(const KernelInit& init, int i) {
  Param p;
  if (i < static_cast<int>(init.inputs.size()) && init.inputs[i].present()) {
    p.index = i;
    p.dtype = init.inputs[i].dtype;
    p.count = std::max<std::int64_t>(1, NumElements(init.inputs[i].shape));
  }
  return p;
}

template <typename T>
T Saturate(float v) {
  const float lo = static_cast<float>(std::numeric_limits<T>::min());
  const float hi = static_cast<float>(std::numeric_limits<T>::max());
  if (!(v >= lo)) return v != v ? T(0) : std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// Writes nearbyint(v) + zp saturated to the output type.
void StoreQuantized(DType t, void* out, std::int64_t i, float v, float zp) {
  const float q = std::nearbyint(v) + zp;
  if (t == DType::kUInt8) static_cast<std::uint8_t*>(out)[i] = Saturate<std::uint8_t>(q);
  else static_cast<std::int8_t*>(out)[i] = Saturate<std::int8_t>(q);
}

float LoadAny(DType t, const void* p, std::int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kInt32: return static_cast<float>(static_cast<const std::int32_t*>(p)[i]);
    case DType::kUInt8: return static_cast<const std::uint8_t*>(p)[i];
    case DType::kInt8: return static_cast<const std::int8_t*>(p)[i];
    default: return 0.f;
  }
}

// [outer, C, inner] view of input 0 around the quantization axis.
struct AxisView {
  std::int64_t n = 0, channels = 1, inner = 1;
};
AxisView ViewOf(const KernelInit& init, std::int64_t count) {
  AxisView v;
  const Shape& s = init.inputs[0].shape;
  v.n = NumElements(s);
  if (count <= 1 || s.empty()) {  // per tensor: blocks of up to 16384 elements
    v.inner = std::max<std::int64_t>(1, std::min<std::int64_t>(v.n, 16384));
    return v;
  }
  const auto rank = static_cast<std::int64_t>(s.size());
  std::int64_t axis = init.node->GetInt("axis", 1);
  if (axis < 0) axis += rank;
  v.channels = s[axis];
  for (std::int64_t d = axis + 1; d < rank; ++d) v.inner *= s[d];
  if (v.n == 0 || v.inner == 0) v.inner = 1;  // empty: no runs
  return v;
}

// y[i] = saturate(round_even(x[i] / s) + zp) for a run of one channel.
// Clamping before rounding gives the same result (the bounds are integers);
// adding and subtracting 1.5 * 2^23 rounds to nearest even for |v| < 2^22
// in the default rounding mode, and vectorizes. NaN becomes the zero point.
// RoundToQ(v, Bounds<Q>(zp), zp) = saturate(round_even(v) + zp), NaN -> zp.
struct QBounds {
  float lo, hi;  // the type's range minus the zero point
};
template <typename Q>
QBounds Bounds(float zp) {
  return {static_cast<float>(std::numeric_limits<Q>::min()) - zp, static_cast<float>(std::numeric_limits<Q>::max()) - zp};
}
template <typename Q>
inline Q RoundToQ(float v, QBounds b, float zp) {
  constexpr float kMagic = 12582912.f;
  v = v >= b.lo ? v : (v != v ? 0.f : b.lo);
  v = v <= b.hi ? v : b.hi;
  v = (v + kMagic) - kMagic;
  return static_cast<Q>(static_cast<int>(v + zp));
}
// RoundToQ on 8 lanes: NaN -> 0, clamped to the bounds, rounded to nearest
// even (vroundps: within the bounds the same as RoundToQ's magic-number
// addition), plus the zero point (exact: both integers), as int32.
__attribute__((target("avx2"))) inline __m256i RoundLanes(__m256 v, __m256 lo, __m256 hi, __m256 z) {
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
  v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
  return _mm256_cvtps_epi32(v);
}
// Four groups of 8 int32 lanes (values within Q's range) packed to 32 Q.
template <typename Q>
__attribute__((target("avx2"))) inline void Store32(Q* y, __m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i q = std::is_same_v<Q, std::uint8_t> ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_permutevar8x32_epi32(q, order));
}
// QuantizeRun in AVX2, 32 at a time: x * fl(1/s) where that cannot change
// the result, else x / s (a true division, as the definition), then
// RoundLanes, then packed. The multiply's argument is QuantizeAvx512's
// (below): a group of 32 with a lane within 2^-13 of a half-integer (or
// NaN) is computed again with the division; otherwise the rounded product
// (its top cut at 2^24, beyond every bound and within int32) plus the zero
// point, saturated by the packs, is what clamping first gives. On a CPU
// without AVX-512 (Zen 3: vdivps a vector per 3.5 cycles, 4 a group) the
// division bounded DynamicQuantizeLinear.
__attribute__((target("avx2"))) inline __m256i QuantizeLanes(const float* p, __m256 vs, __m256 lo, __m256 hi, __m256 z) {
  return RoundLanes(_mm256_div_ps(_mm256_loadu_ps(p), vs), lo, hi, z);
}
// The AVX2 quantizers' multiply and tie test over kVecs vectors of 8 from
// x: r[j] = round_even(min(x * inv, 2^24)), and true where no lane lies
// within 2^-13 of a half-integer and none is NaN (inf - inf too), so that
// each r is what x / s rounds to; false: the caller computes the group
// again by the definition (a tie is rare: one test per group).
template <int kVecs>
__attribute__((target("avx2"), always_inline)) inline bool RoundedAwayFromTies(const float* x, __m256 inv, __m256* r) {
  const __m256 top = _mm256_set1_ps(0x1p24f), near_tie = _mm256_set1_ps(0.5f - 0x1p-13f), sign = _mm256_set1_ps(-0.f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m256 near = _mm256_setzero_ps();
  for (int j = 0; j < kVecs; ++j) {
    const __m256 v = _mm256_min_ps(top, _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), inv));
    r[j] = _mm256_round_ps(v, kNearest);
    // |v - r| not less than near_tie, or unordered (NaN).
    near = _mm256_or_ps(near, _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, r[j])), near_tie, _CMP_NLT_UQ));
  }
  return _mm256_testz_ps(near, near);
}
// RoundedAwayFromTies with the quotient clamped to [lo, hi] first (integer
// bounds: clamping is 1-Lipschitz and keeps a value's distance from the
// half-integers between them, and a clamped value is an integer, so the
// test and the rounding stay valid), so r[j] is the clamped rounded value
// itself: no cut at 2^24 and no clamp after. The operand order keeps NaN
// (vmaxps / vminps return their second operand when either is NaN), which
// the tie test then flags. 8 vector ops a vector against 10.
template <int kVecs>
__attribute__((target("avx2"), always_inline)) inline bool ClampedAwayFromTies(const float* x, __m256 inv, __m256 lo,
                                                                               __m256 hi, __m256* r) {
  const __m256 near_tie = _mm256_set1_ps(0.5f - 0x1p-13f), sign = _mm256_set1_ps(-0.f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m256 near = _mm256_setzero_ps();
  for (int j = 0; j < kVecs; ++j) {
    const __m256 v = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), inv)));
    r[j] = _mm256_round_ps(v, kNearest);
    near = _mm256_or_ps(near, _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, r[j])), near_tie, _CMP_NLT_UQ));
  }
  return _mm256_testz_ps(near, near);
}
template <typename Q>
__attribute__((target("avx2"))) std::int64_t QuantizeAvx2(const float* x, Q* y, std::int64_t n, float s, float zp) {
  const QBounds b = Bounds<Q>(zp);
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(b.lo), hi = _mm256_set1_ps(b.hi), z = _mm256_set1_ps(zp);
  const float inv = 1.f / s;
  const bool multiply = std::isnormal(s) && std::isnormal(inv);
  const __m256 vinv = _mm256_set1_ps(inv);
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (multiply) {
      __m256 r[4];
      if (RoundedAwayFromTies<4>(x + i, vinv, r)) {
        // r + z: exact within 2^24; a lane beyond the bounds saturates in
        // the packs (below -2^31 the conversion gives INT_MIN, saturated too).
        Store32(y + i, _mm256_cvtps_epi32(_mm256_add_ps(r[0], z)), _mm256_cvtps_epi32(_mm256_add_ps(r[1], z)),
                _mm256_cvtps_epi32(_mm256_add_ps(r[2], z)), _mm256_cvtps_epi32(_mm256_add_ps(r[3], z)));
        continue;
      }
    }
    const __m256i a = QuantizeLanes(x + i, vs, lo, hi, z), b2 = QuantizeLanes(x + i + 8, vs, lo, hi, z),
                  c = QuantizeLanes(x + i + 16, vs, lo, hi, z), d = QuantizeLanes(x + i + 24, vs, lo, hi, z);
    Store32(y + i, a, b2, c, d);  // values within Q's range: the saturating packs only narrow
  }
  return i;
}

// QuantizeRun in AVX-512, 16 at a time, without a division where it cannot
// change the result: q = x * fl(1/s) is within 3 * 2^-24 * |x / s| of the
// definition's fl(x / s) (the inverse's, the product's and the quotient's
// roundings), so within 0.75 * 2^-13 of it wherever
// the clamp to the type's range (integers, at most 255 from 0) lets it
// matter (|x / s| <= 512); clamping is 1-Lipschitz and rounding to nearest
// is constant between half-integers, so a clamped q farther than 2^-13 from
// a half-integer rounds as the definition does. A group of 16 with a lane
// nearer than that (about 1 in 250 groups) is computed again with the true
// division. Beyond 512 both clamp to the same bound. Scales whose inverse
// is not a normal float (or that are not) take the division everywhere.
// `QuantizeLinear.DivisionFreeRoundingMatchesTheDefinitionAtTies` checks
// values at and around every tie of many scales. Returns the count done.
// NaN -> 0, then into [lo, hi] (RoundLanes' first steps, 16 lanes).
__attribute__((target("avx512f"))) inline __m512 ClampLanes16(__m512 q, __m512 lo, __m512 hi) {
  const __m512 v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);
  return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
}
template <typename Q>
__attribute__((target("avx512f,avx512bw"))) std::int64_t QuantizeAvx512By64(const float* x, Q* y, std::int64_t n,
                                                                            __m512 vinv, __m512 vs, __m512 lo,
                                                                            __m512 hi, __m512 z, __m512 near_tie) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  std::int64_t i = 0;
  // The common case clamps nothing: a lane rounded unclamped and then
  // saturated by the packs below gets what clamping first gives (the bounds
  // are integers, so rounding is monotone across them), once the top is cut
  // at 2^24 (a larger quotient would overflow the int32 conversion; 2^24 is
  // still beyond every bound; vminps returns its second operand when either
  // is NaN, so NaN stays). The tie test (not less than, true unordered)
  // flags NaN lanes too, so they, with the near ties, take the clamped
  // division (NaN -> 0 there). 8 vector ops a group of 16 instead of 11.
  const __m512 top = _mm512_set1_ps(0x1p24f);
  for (; i + 64 <= n; i += 64) {
    __m512 r[4];
    __mmask16 near = 0;
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_min_ps(top, _mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * j), vinv));
      r[j] = _mm512_roundscale_ps(v, kNearest);
      near |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r[j])), near_tie, _CMP_NLT_UQ);
    }
    if (near) {
      for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_roundscale_ps(ClampLanes16(_mm512_div_ps(_mm512_loadu_ps(x + i + 16 * j), vs), lo, hi), kNearest);
      }
    }
    __m512i q[4];
    // r + z: exact within 2^24; a lane beyond the bounds saturates in the packs.
    for (int j = 0; j < 4; ++j) q[j] = _mm512_cvtps_epi32(_mm512_add_ps(r[j], z));
    // Per 128-bit lane k: the packs leave groups 0..3's lane-k values in
    // order; the permutation gathers them back into element order.
    const __m512i ab = _mm512_packs_epi32(q[0], q[1]), cd = _mm512_packs_epi32(q[2], q[3]);
    const __m512i p = std::is_same_v<Q, std::uint8_t> ? _mm512_packus_epi16(ab, cd) : _mm512_packs_epi16(ab, cd);
    _mm512_storeu_si512(y + i, _mm512_permutexvar_epi32(order, p));
  }
  return i;
}

template <typename Q>
__attribute__((target("avx512f"))) std::int64_t QuantizeAvx512(const float* x, Q* y, std::int64_t n, float s,
                                                               float zp) {
  const float inv = 1.f / s;
  if (!std::isnormal(s) || !std::isnormal(inv)) return 0;
  const QBounds b = Bounds<Q>(zp);
  const __m512 vinv = _mm512_set1_ps(inv), vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(b.lo),
               hi = _mm512_set1_ps(b.hi), z = _mm512_set1_ps(zp), near_tie = _mm512_set1_ps(0.5f - 0x1p-13f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  std::int64_t i = 0;
  // 64 at a time: four groups, computed again with the division if any
  // lane of any is near a tie or NaN; packed to bytes with two saturating
  // packs (which also clamp) and one permutation. 1.2-1.4x the speed of one
  // group at a time (Zen 5, 75K-450K values).
  static const bool bw = __builtin_cpu_supports("avx512bw");
  if (bw) i = QuantizeAvx512By64(x, y, n, vinv, vs, lo, hi, z, near_tie);
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    __m512 v = ClampLanes16(_mm512_mul_ps(xv, vinv), lo, hi);
    __m512 r = _mm512_roundscale_ps(v, kNearest);
    if (_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r)), near_tie, _CMP_GE_OQ)) {
      v = ClampLanes16(_mm512_div_ps(xv, vs), lo, hi);
      r = _mm512_roundscale_ps(v, kNearest);
    }
    const __m512i q = _mm512_cvtps_epi32(_mm512_add_ps(r, z));  // within Q's range: exact
    if constexpr (std::is_same_v<Q, std::uint8_t>) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtusepi32_epi8(q));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtsepi32_epi8(q));
    }
  }
  return i;
}

template <typename Q>
void QuantizeRun(const float* x, Q* y, std::int64_t n, float s, float zp) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool avx512 = Avx512Allowed();
  std::int64_t i = avx512 ? QuantizeAvx512(x, y, n, s, zp) : 0;
  if (avx2) i += QuantizeAvx2(x + i, y + i, n - i, s, zp);
  const QBounds b = Bounds<Q>(zp);
  for (; i < n; ++i) y[i] = RoundToQ<Q>(x[i] / s, b, zp);
}
template <typename Q>
void DequantizeRun(const Q* x, float* y, std::int64_t n, float s, float zp) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zp) * s;
}

Result<std::unique_ptr<Kernel>> MakeQuantize(const KernelInit& init) {
  const Param scale = ParamOf(init, 1), zp = ParamOf(init, 2);
  const AxisView v = ViewOf(init, scale.count);
  const DType in_t = init.inputs[0].dtype, out_t = init.outputs[0].dtype;
  if (in_t == DType::kFloat32) {
    // Runs of `inner` elements share one channel's scale and zero point.
    const std::int64_t runs = (v.n + v.inner - 1) / v.inner;
    return MakeFn([=](const KernelArgs& a) {
      const float* x = a.in_as<float>(0);
      ParallelFor(runs, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(v.inner, 1)),
                  [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          const std::int64_t c = r % v.channels;
          const float s = scale.Get(a, c), z = zp.Get(a, c);
          const std::int64_t o = r * v.inner, len = std::min(v.inner, v.n - o);
          if (out_t == DType::kUInt8) QuantizeRun(x + o, a.out_as<std::uint8_t>(0) + o, len, s, z);
          else QuantizeRun(x + o, a.out_as<std::int8_t>(0) + o, len, s, z);
        }
      });
      return Status::Ok();
    });
  }
  return MakeFn([=](const KernelArgs& a) {
    ParallelFor(v.n, 16384, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const std::int64_t c = (i / v.inner) % v.channels;
        StoreQuantized(out_t, a.out(0), i, LoadAny(in_t, a.in(0), i) / scale.Get(a, c), zp.Get(a, c));
      }
    });
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> MakeDequantize(const KernelInit& init) {
  const Param scale = ParamOf(init, 1), zp = ParamOf(init, 2);
  const AxisView v = ViewOf(init, scale.count);
  const DType in_t = init.inputs[0].dtype;
  const std::int64_t runs = (v.n + v.inner - 1) / v.inner;
  return MakeFn([=](const KernelArgs& a) {
    float* y = a.out_as<float>(0);
    ParallelFor(runs, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(v.inner, 1)),
                [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t c = r % v.channels;
        const float s = scale.Get(a, c), z = zp.Get(a, c);
        const std::int64_t o = r * v.inner, len = std::min(v.inner, v.n - o);
        switch (in_t) {
          case DType::kUInt8: DequantizeRun(a.in_as<std::uint8_t>(0) + o, y + o, len, s, z); break;
          case DType::kInt8: DequantizeRun(a.in_as<std::int8_t>(0) + o, y + o, len, s, z); break;
          default:
            for (std::int64_t i = 0; i < len; ++i) y[o + i] = (LoadAny(in_t, a.in(0), o + i) - z) * s;
        }
      }
    });
    return Status::Ok();
  });
}

// min(0, min x) and max(0, max x), NaNs skipped (as scalar comparisons skip
// them). SSE: minps/maxps return their second operand when either is NaN,
// so the running values keep theirs; compilers do not vectorize a float
// min reduction themselves (NaN and signed-zero rules).
__attribute__((target("avx"))) std::int64_t MinMaxAvx(const float* x, std::int64_t n, float* mn, float* mx) {
  __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0, h3 = l0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // vminps/vmaxps keep the second operand (the running value) on NaN
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8), c = _mm256_loadu_ps(x + i + 16),
                 d = _mm256_loadu_ps(x + i + 24);
    l0 = _mm256_min_ps(a, l0);
    l1 = _mm256_min_ps(b, l1);
    l2 = _mm256_min_ps(c, l2);
    l3 = _mm256_min_ps(d, l3);
    h0 = _mm256_max_ps(a, h0);
    h1 = _mm256_max_ps(b, h1);
    h2 = _mm256_max_ps(c, h2);
    h3 = _mm256_max_ps(d, h3);
  }
  alignas(32) float ls[8], hs[8];
  _mm256_store_ps(ls, _mm256_min_ps(_mm256_min_ps(l0, l1), _mm256_min_ps(l2, l3)));
  _mm256_store_ps(hs, _mm256_max_ps(_mm256_max_ps(h0, h1), _mm256_max_ps(h2, h3)));
  float lo = 0.f, hi = 0.f;
  for (int j = 0; j < 8; ++j) {
    lo = ls[j] < lo ? ls[j] : lo;
    hi = hs[j] > hi ? hs[j] : hi;
  }
  *mn = lo;
  *mx = hi;
  return i;
}

}  // namespace

void MinMaxWithZero(const float* x, std::int64_t n, float* mn, float* mx) {
  std::int64_t i = 0;
  float lo = 0.f, hi = 0.f;
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx) {
    i = MinMaxAvx(x, n, &lo, &hi);
  } else {
#if defined(__SSE2__)
  __m128 l0 = _mm_setzero_ps(), l1 = l0, h0 = l0, h1 = l0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    l0 = _mm_min_ps(a, l0);
    l1 = _mm_min_ps(b, l1);
    h0 = _mm_max_ps(a, h0);
    h1 = _mm_max_ps(b, h1);
  }
  alignas(16) float ls[4], hs[4];
  _mm_store_ps(ls, _mm_min_ps(l0, l1));
  _mm_store_ps(hs, _mm_max_ps(h0, h1));
  for (int j = 0; j < 4; ++j) {
    lo = ls[j] < lo ? ls[j] : lo;
    hi = hs[j] > hi ? hs[j] : hi;
  }
#endif
  }
  for (; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  *mn = lo;
  *mx = hi;
}

void DynamicQuantizeParams(const float* x, std::int64_t n, device::ValueRange* reported, float* scale,
                           std::uint8_t* zp) {
  float mn = 0.f, mx = 0.f;
  if (reported && reported->valid) {
    mn = reported->min;
    mx = reported->max;
    reported->valid = false;
  } else {
    // The range over chunks in parallel (min and max are exact in any
    // order), 16K values a thread at least.
    std::mutex mu;
    ParallelFor(n, 16384, [&](std::int64_t b, std::int64_t e) {
      float l = 0.f, h = 0.f;
      MinMaxWithZero(x + b, e - b, &l, &h);
      std::lock_guard<std::mutex> lock(mu);
      mn = l < mn ? l : mn;
      mx = h > mx ? h : mx;
    });
  }
  const float s = (mx - mn) / 255.f;
  *scale = s;
  // All zeros: scale 0; every value (and the zero point) is 0.
  *zp = s > 0 ? Saturate<std::uint8_t>(std::nearbyint(0.f - mn / s)) : std::uint8_t{0};
}

void DynamicQuantizeU8(const float* x, std::uint8_t* y, std::int64_t n, float s, std::int32_t zp) {
  if (!(s > 0)) {
    std::memset(y, 0, static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
    return;
  }
  QuantizeRun(x, y, n, s, static_cast<float>(zp));
}

namespace {
// QuantizeCenteredInt16 in AVX2, 16 at a time: x * fl(1/s) clamped to
// [-zp, 255 - zp] and rounded with the tie test (ClampedAwayFromTies: a
// group with a lane within 2^-13 of a half-integer, or NaN, is computed
// again by the definition, a value at a time), then converted and packed
// to int16 (exact: integers within the bounds). Returns the count done.
__attribute__((target("avx2"))) std::int64_t QuantizeCenteredAvx2(const float* x, std::int16_t* y, std::int64_t n,
                                                                  float s, std::int32_t zp) {
  const float inv = 1.f / s;
  if (!std::isnormal(s) || !std::isnormal(inv)) return 0;
  const QBounds b = Bounds<std::uint8_t>(static_cast<float>(zp));
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(b.lo), hi = _mm256_set1_ps(b.hi);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 r[2];
    if (!ClampedAwayFromTies<2>(x + i, vinv, lo, hi, r)) {
      for (int j = 0; j < 16; ++j) {
        y[i + j] = static_cast<std::int16_t>(RoundToQ<std::uint8_t>(x[i + j] / s, b, static_cast<float>(zp)) - zp);
      }
      continue;
    }
    __m256i p = _mm256_packs_epi32(_mm256_cvtps_epi32(r[0]), _mm256_cvtps_epi32(r[1]));
    p = _mm256_permute4x64_epi64(p, 0xD8);  // the packs interleave 128-bit halves
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), p);
  }
  return i;
}
}  // namespace

namespace {
// QuantizeCenteredFloat in AVX2, 32 at a time: x * fl(1/s) clamped to
// [-zp, 255 - zp] and rounded, with the tie test (ClampedAwayFromTies; a
// group with a lane within 2^-13 of a half-integer, or NaN, is computed
// again by the definition, a value at a time); the clamped value rounded
// is what clamping the rounded value gives (the bounds are integers).
// Then 16 at a time.
__attribute__((target("avx2"))) std::int64_t QuantizeCenteredFloatAvx2(const float* x, float* y, std::int64_t n,
                                                                       float s, std::int32_t zp) {
  const float inv = 1.f / s;
  if (!std::isnormal(s) || !std::isnormal(inv)) return 0;
  const QBounds b = Bounds<std::uint8_t>(static_cast<float>(zp));
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(b.lo), hi = _mm256_set1_ps(b.hi);
  auto by_definition = [&](std::int64_t i, int count) {
    for (int j = 0; j < count; ++j) {
      y[i + j] = static_cast<float>(RoundToQ<std::uint8_t>(x[i + j] / s, b, static_cast<float>(zp)) - zp);
    }
  };
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 r[4];
    if (!ClampedAwayFromTies<4>(x + i, vinv, lo, hi, r)) {  // near a tie, or NaN: the definition
      by_definition(i, 32);
      continue;
    }
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(y + i + 8 * j, r[j]);
  }
  for (; i + 16 <= n; i += 16) {
    __m256 r[2];
    if (!ClampedAwayFromTies<2>(x + i, vinv, lo, hi, r)) {
      by_definition(i, 16);
      continue;
    }
    _mm256_storeu_ps(y + i, r[0]);
    _mm256_storeu_ps(y + i + 8, r[1]);
  }
  return i;
}
}  // namespace

void QuantizeCenteredFloat(const float* x, float* y, std::int64_t n, float s, std::int32_t zp) {
  if (!(s > 0)) {
    std::fill(y, y + std::max<std::int64_t>(n, 0), static_cast<float>(-zp));
    return;
  }
  static const bool avx2 = __builtin_cpu_supports("avx2");
  std::int64_t i = avx2 ? QuantizeCenteredFloatAvx2(x, y, n, s, zp) : 0;
  const QBounds b = Bounds<std::uint8_t>(static_cast<float>(zp));
  for (; i < n; ++i) y[i] = static_cast<float>(RoundToQ<std::uint8_t>(x[i] / s, b, static_cast<float>(zp)) - zp);
}

void QuantizeCenteredInt16(const float* x, std::int16_t* y, std::int64_t n, float s, std::int32_t zp) {
  if (!(s > 0)) {
    std::fill(y, y + std::max<std::int64_t>(n, 0), static_cast<std::int16_t>(-zp));
    return;
  }
  static const bool avx2 = __builtin_cpu_supports("avx2");
  std::int64_t i = avx2 ? QuantizeCenteredAvx2(x, y, n, s, zp) : 0;
  const QBounds b = Bounds<std::uint8_t>(static_cast<float>(zp));
  for (; i < n; ++i) y[i] = static_cast<std::int16_t>(RoundToQ<std::uint8_t>(x[i] / s, b, static_cast<float>(zp)) - zp);
}

namespace {

// device::ValueRange, both sides. A writer offers the range of its output
// 0 where a reader quantizes it with DynamicQuantizeLinear's range: that
// op, or a ConvInteger / MatMulInteger computing its own x_scale
// (kiln.quantize_input = 2) that reads it as input 0. OfferedRange makes
// and registers the range the writer fills (null: no such reader, or no
// plan to share it through); ReportedRange is what the reader finds for
// its input 0 (null: its writer offers none).
std::shared_ptr<device::ValueRange> OfferedRange(const KernelInit& init) {
  const ir::Value* out = init.node && init.node->num_outputs() > 0 ? init.node->output(0) : nullptr;
  if (!out || !init.value_ranges) return nullptr;
  bool quantized = false;
  for (const ir::Use& u : out->uses()) {
    quantized = quantized || (u.node->op_type() == "DynamicQuantizeLinear" && u.node->domain().empty()) ||
                (u.index == 0 && u.node->GetInt(ops::kQuantizeInputAttr, 0) == 2 &&
                 (u.node->op_type() == "ConvInteger" || u.node->op_type() == "MatMulInteger"));
  }
  if (!quantized) return nullptr;
  auto range = std::make_shared<device::ValueRange>();
  (*init.value_ranges)[out] = range;
  return range;
}
std::shared_ptr<device::ValueRange> ReportedRange(const KernelInit& init) {
  if (!init.value_ranges || !init.node || init.node->num_inputs() == 0) return nullptr;
  auto it = init.value_ranges->find(init.node->input(0));
  return it != init.value_ranges->end() ? it->second : nullptr;
}

// ONNX DynamicQuantizeLinear: uint8, range [min(0, min x), max(0, max x)].
Result<std::unique_ptr<Kernel>> MakeDynamicQuantize(const KernelInit& init) {
  const std::int64_t n = NumElements(init.inputs[0].shape);
  // The range its input's writer reports, if it does (the same min and
  // max, found as it wrote the tensor).
  const std::shared_ptr<device::ValueRange> reported = ReportedRange(init);
  // Values per thread at least: each pass splits from 32K values (2 threads,
  // dynamic MobileNetV2, Zen 4: the quantization of a 14x14x576 map 7.2 us
  // split against 13.0 on one thread, 14x14x384 5.0 against 8.4, 7x7x960
  // 3.5 against 5.3; at 64K, these ran on one thread).
  constexpr std::int64_t kGrain = 16384;
  // y that nothing reads (fuse-quantize-input gave its readers x): only
  // the scale and zero point are written.
  const ir::Value* yv = init.node && init.node->num_outputs() > 0 ? init.node->output(0) : nullptr;
  const bool write_y = !yv || !yv->uses().empty() || !yv->owner() || yv->owner()->IsGraphOutput(yv);
  return MakeFn([n, reported, write_y](const KernelArgs& a) {
    const float* x = a.in_as<float>(0);
    float scale = 0.f;
    std::uint8_t zp = 0;
    DynamicQuantizeParams(x, n, reported.get(), &scale, &zp);
    *a.out_as<float>(1) = scale;
    *a.out_as<std::uint8_t>(2) = zp;
    if (!write_y) return Status::Ok();
    auto* y = a.out_as<std::uint8_t>(0);
    ParallelFor(n, kGrain, [&](std::int64_t b, std::int64_t e) { DynamicQuantizeU8(x + b, y + b, e - b, scale, zp); });
    return Status::Ok();
  });
}

// Loads `n` int8/uint8 values minus a zero point as int16.
void Centered(DType t, const void* p, std::int64_t off, std::int64_t n, std::int32_t zp, std::int16_t* out) {
  if (t == DType::kUInt8) {
    const auto* s = static_cast<const std::uint8_t*>(p) + off;
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int16_t>(s[i] - zp);
  } else {
    const auto* s = static_cast<const std::int8_t*>(p) + off;
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int16_t>(s[i] - zp);
  }
}

// acc[M, N] = A'[M, K] x B'[K, N], int16 operands, int32 sums.
void IntGemm(const std::int16_t* a, const std::int16_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
             std::int64_t n) {
  // Sums wrap modulo 2^32 (unsigned arithmetic): defined behaviour for any
  // K; exact whenever the true sum fits int32, as ONNX's int32 output needs.
  for (std::int64_t i = 0; i < m; ++i) {
    auto* row = reinterpret_cast<std::uint32_t*>(acc + i * n);
    for (std::int64_t j = 0; j < n; ++j) row[j] = 0;
    for (std::int64_t p = 0; p < k; ++p) {
      const std::int32_t av = a[i * k + p];
      const std::int16_t* brow = b + p * n;
      for (std::int64_t j = 0; j < n; ++j) row[j] += static_cast<std::uint32_t>(av * brow[j]);
    }
  }
}

// MatMulInteger and QLinearMatMul: batched, NumPy broadcasting of batch
// dims; zero points / scales of A per row, of B per column, or per tensor.
class QMatMulKernel : public Kernel {
 public:
  Status Init(const KernelInit& init, bool qlinear) {
    qlinear_ = qlinear;
    const int ai = 0, bi = qlinear ? 3 : 1;
    at_ = init.inputs[ai].dtype;
    bt_ = init.inputs[bi].dtype;
    Shape a = init.inputs[ai].shape, b = init.inputs[bi].shape;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    const std::size_t batch_rank = std::max(a.size(), b.size()) - 2;
    // Offsets of each batch's A and B (broadcast batch dims).
    Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2), ob(batch_rank);
    while (ab.size() < batch_rank) ab.insert(ab.begin(), 1);
    while (bb.size() < batch_rank) bb.insert(bb.begin(), 1);
    for (std::size_t d = 0; d < batch_rank; ++d) ob[d] = ab[d] == 1 ? bb[d] : ab[d];  // 0 broadcasts as 0
    batch_ = NumElements(ob);
    for (std::int64_t t = 0; t < batch_; ++t) {
      std::int64_t rem = t, oa = 0, obb = 0, sa = 1, sb = 1;
      for (int d = static_cast<int>(batch_rank) - 1; d >= 0; --d) {
        const std::int64_t idx = rem % ob[d];
        rem /= ob[d];
        if (ab[d] != 1) oa += idx * sa;
        if (bb[d] != 1) obb += idx * sb;
        sa *= ab[d];
        sb *= bb[d];
      }
      a_off_.push_back(oa * m_ * k_);
      b_off_.push_back(obb * k_ * n_);
    }
    if (qlinear) {
      a_scale_ = ParamOf(init, 1);
      a_zp_ = ParamOf(init, 2);
      b_scale_ = ParamOf(init, 4);
      b_zp_ = ParamOf(init, 5);
      y_scale_ = ParamOf(init, 6);
      y_zp_ = ParamOf(init, 7);
      out_t_ = init.outputs[0].dtype;
    } else {
      a_zp_ = ParamOf(init, 2);
      b_zp_ = ParamOf(init, 3);
    }
    return Status::Ok();
  }

  Status Run(const KernelArgs& a) override {
    const int bi = qlinear_ ? 3 : 1;
    if (batch_ == 0 || m_ == 0 || n_ == 0) return Status::Ok();  // an empty output
    std::vector<std::int16_t> ab(static_cast<std::size_t>(m_ * k_)), bb(static_cast<std::size_t>(k_ * n_));
    std::vector<std::int32_t> acc(static_cast<std::size_t>(m_ * n_));
    for (std::int64_t t = 0; t < batch_; ++t) {
      for (std::int64_t i = 0; i < m_; ++i) {
        Centered(at_, a.in(0), a_off_[t] + i * k_, k_, a_zp_.GetInt(a, i), ab.data() + i * k_);
      }
      for (std::int64_t p = 0; p < k_; ++p) {
        const auto* src = static_cast<const char*>(a.in(bi));
        for (std::int64_t j = 0; j < n_; ++j) {
          const std::int64_t off = b_off_[t] + p * n_ + j;
          const std::int32_t v = bt_ == DType::kUInt8 ? reinterpret_cast<const std::uint8_t*>(src)[off]
                                                       : reinterpret_cast<const std::int8_t*>(src)[off];
          bb[p * n_ + j] = static_cast<std::int16_t>(v - b_zp_.GetInt(a, j));
        }
      }
      IntGemm(ab.data(), bb.data(), acc.data(), m_, k_, n_);
      const std::int64_t base = t * m_ * n_;
      if (!qlinear_) {
        std::copy(acc.begin(), acc.end(), a.out_as<std::int32_t>(0) + base);
        continue;
      }
      const float ys = y_scale_.Get(a, 0), yz = y_zp_.Get(a, 0);
      for (std::int64_t i = 0; i < m_; ++i) {
        const float as = a_scale_.Get(a, i);
        for (std::int64_t j = 0; j < n_; ++j) {
          const float s = as * b_scale_.Get(a, j) / ys;
          StoreQuantized(out_t_, a.out(0), base + i * n_ + j, static_cast<float>(acc[i * n_ + j]) * s, yz);
        }
      }
    }
    return Status::Ok();
  }

 private:
  bool qlinear_ = false;
  DType at_ = DType::kUndefined, bt_ = DType::kUndefined, out_t_ = DType::kUndefined;
  std::int64_t m_ = 0, k_ = 0, n_ = 0, batch_ = 1;
  std::vector<std::int64_t> a_off_, b_off_;
  Param a_scale_, a_zp_, b_scale_, b_zp_, y_scale_, y_zp_;
};

// ConvInteger and QLinearConv: im2col of (x - x_zp) (padding contributes
// 0, i.e. the zero point), times (w - w_zp[m]) per group.
class QConvKernel : public Kernel {
 public:
  Status Init(const KernelInit& init, bool qlinear) {
    qlinear_ = qlinear;
    const int wi = qlinear ? 3 : 1;
    xt_ = init.inputs[0].dtype;
    wt_ = init.inputs[wi].dtype;
    x_ = init.inputs[0].shape;
    w_ = init.inputs[wi].shape;
    y_ = init.outputs[0].shape;
    group_ = init.node->GetInt("group", 1);
    KILN_ASSIGN_OR_RETURN(win_, ops::ComputeWindow(*init.node, Shape(x_.begin() + 2, x_.end()),
                                                   std::vector<std::int64_t>(w_.begin() + 2, w_.end()), false));
    if (qlinear) {
      x_scale_ = ParamOf(init, 1);
      x_zp_ = ParamOf(init, 2);
      w_scale_ = ParamOf(init, 4);
      w_zp_ = ParamOf(init, 5);
      y_scale_ = ParamOf(init, 6);
      y_zp_ = ParamOf(init, 7);
      bias_ = ParamOf(init, 8);
      out_t_ = init.outputs[0].dtype;
    } else {
      x_zp_ = ParamOf(init, 2);
      w_zp_ = ParamOf(init, 3);
    }
    return Status::Ok();
  }

  Status Run(const KernelArgs& a) override {
    const std::size_t sp = x_.size() - 2;
    const std::int64_t cin = x_[1], cout = w_[0], cg = cin / group_, og = cout / group_;
    std::int64_t ksize = 1, in_sp = 1, out_sp = 1;
    for (std::size_t d = 0; d < sp; ++d) {
      ksize *= w_[2 + d];
      in_sp *= x_[2 + d];
      out_sp *= y_[2 + d];
    }
    const std::int64_t rows = cg * ksize;
    // Output positions in blocks, so the im2col buffer stays within 2^22
    // elements (8 MiB) whatever the shapes.
    const std::int64_t block = std::max<std::int64_t>(1, std::min<std::int64_t>(out_sp, (std::int64_t{1} << 22) / std::max<std::int64_t>(rows, 1)));
    std::vector<std::int16_t> col(static_cast<std::size_t>(rows * block)), wc(static_cast<std::size_t>(og * rows)),
        xc(static_cast<std::size_t>(in_sp));
    std::vector<std::int32_t> acc(static_cast<std::size_t>(og * block));
    const int wi = qlinear_ ? 3 : 1;
    const std::int32_t xzp = x_zp_.GetInt(a, 0);
    std::vector<std::int64_t> kidx(sp), oidx(sp);
    for (std::int64_t n = 0; n < x_[0]; ++n) {
      for (std::int64_t g = 0; g < group_; ++g) {
       for (std::int64_t m = 0; m < og; ++m) {
         const std::int64_t oc = g * og + m;
         Centered(wt_, a.in(wi), oc * rows, rows, w_zp_.GetInt(a, oc), wc.data() + m * rows);
       }
       for (std::int64_t o0 = 0; o0 < out_sp; o0 += block) {
        const std::int64_t blen = std::min(block, out_sp - o0);
        // im2col: row (c, kernel position), column = output position.
        for (std::int64_t c = 0; c < cg; ++c) {
          Centered(xt_, a.in(0), (n * cin + g * cg + c) * in_sp, in_sp, xzp, xc.data());
          for (std::int64_t kp = 0; kp < ksize; ++kp) {
            std::int64_t rem = kp;
            for (int d = static_cast<int>(sp) - 1; d >= 0; --d) {
              kidx[d] = rem % w_[2 + d];
              rem /= w_[2 + d];
            }
            std::int16_t* dst = &col[(c * ksize + kp) * blen];
            for (std::int64_t oo = 0; oo < blen; ++oo) {
              const std::int64_t o = o0 + oo;
              std::int64_t r2 = o, off = 0, stride = 1;
              bool inside = true;
              for (int d = static_cast<int>(sp) - 1; d >= 0; --d) {
                const std::int64_t od = r2 % y_[2 + d];
                r2 /= y_[2 + d];
                const std::int64_t pos = od * win_.strides[d] - win_.pads_begin[d] + kidx[d] * win_.dilations[d];
                if (pos < 0 || pos >= x_[2 + d]) inside = false;
                off += pos * stride;
                stride *= x_[2 + d];
              }
              dst[oo] = inside ? xc[off] : std::int16_t{0};
            }
          }
        }
        IntGemm(wc.data(), col.data(), acc.data(), og, rows, blen);
        for (std::int64_t m = 0; m < og; ++m) {
          const std::int64_t oc = g * og + m;
          const std::int64_t base = (n * cout + oc) * out_sp + o0;
          if (!qlinear_) {
            std::copy(acc.begin() + m * blen, acc.begin() + (m + 1) * blen, a.out_as<std::int32_t>(0) + base);
            continue;
          }
          const std::int32_t b = bias_.index >= 0 ? bias_.GetInt(a, oc) : 0;
          const float s = x_scale_.Get(a, 0) * w_scale_.Get(a, oc) / y_scale_.Get(a, 0), yz = y_zp_.Get(a, 0);
          for (std::int64_t o = 0; o < blen; ++o) {
            StoreQuantized(out_t_, a.out(0), base + o,
                           static_cast<float>(static_cast<std::int64_t>(acc[m * blen + o]) + b) * s, yz);
          }
        }
       }
      }
    }
    return Status::Ok();
  }

 private:
  bool qlinear_ = false;
  DType xt_ = DType::kUndefined, wt_ = DType::kUndefined, out_t_ = DType::kUndefined;
  Shape x_, w_, y_;
  std::int64_t group_ = 1;
  ops::Window win_;
  Param x_scale_, x_zp_, w_scale_, w_zp_, y_scale_, y_zp_, bias_;
};

// oneDNN's int8 kernels are exact for any weights only with VNNI (or AMX).
// Without it (AVX2, AVX-512 without VNNI) they multiply uint8 x int8 in
// adjacent pairs summed into saturating int16 (vpmaddubsw): exact when no
// pair can leave int16, i.e. 255 * 64 * 2 = 32640 <= 32767 for weights
// within [-64, 64] (7-bit weights, as ONNX Runtime's quantizer writes with
// reduce_range) and uint8 activations (int8 ones make oneDNN halve the
// weights there).
bool ExactInt8Isa() { return NativeInt8Dot(); }
// Whether oneDNN has jit int8 kernels here at all (AVX2 and up; dnnl's ISA
// values are bit sets: every ISA from AVX2 up holds AVX2's bits).
bool OneDnnInt8Isa() {
  static const bool ok =
      (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2;
  return ok;
}
// The int16-product kernel (int16_conv.h) runs convolutions and matrix
// products without VNNI only where each output sums at least this many
// products: below, its per-output epilogue (conversion, scale, clamp,
// pack, store) outweighs its faster multiply-adds, and the float32 route
// was faster. Per QLinearConv (Zen 4, oneDNN held to AVX2, 1 thread, best
// of 3 runs of 100, kernel against float32 route, us): 1x1 at 112x112 of
// 8 -> 8 channels 63 against 41, 8 -> 32 103 against 113; 12 -> 24 at
// 56x56 33 against 27; 16 -> 16 at 56x56 20 against 23; 16 -> 96 at
// 112x112 429 against 503; 32 -> 16 at 112x112 119 against 167; 3x3 of
// 8 -> 16 at 56x56 51 against 88. MobileNetV2's 1x1s of 16, 24 and 32
// channels: 440 against 644, 200 against 261, 79 against 108.
constexpr std::int64_t kInt16MinReduction = 16;
// Grouped convolutions run the kernel where each group has at least this
// many outputs: its panels are 16 outputs of one group (a depthwise layer's
// one output a group would use a sixteenth of each).
constexpr std::int64_t kInt16MinGroupOutputs = 8;
// A weight as int8 w - w_zp: int8 as is, uint8 (zero point 128) shifted.
inline int ShiftedWeight(const HostTensor& w, bool u8w, std::int64_t i) {
  return u8w ? static_cast<int>(w.data_as<std::uint8_t>()[i]) - 128 : w.data_as<std::int8_t>()[i];
}
// All of them, as int8: what each kernel packs.
std::vector<std::int8_t> ShiftedWeights(const HostTensor& w, bool u8w) {
  std::vector<std::int8_t> s8(static_cast<std::size_t>(NumElements(w.shape())));
  for (std::size_t i = 0; i < s8.size(); ++i) s8[i] = static_cast<std::int8_t>(ShiftedWeight(w, u8w, i));
  return s8;
}

// $KILN_INT8_INT16=off: the float32 route where the int16-product kernel
// would run (tests compare the two; A/B runs).
bool Int16Enabled() {
  const char* env = std::getenv("KILN_INT8_INT16");
  return !(env && std::string(env) == "off");
}
// $KILN_INT8_QDEPTHWISE=off: kiln.quantize_input depthwise layers keep
// the float32 or int8 route where QuantDepthwise would run them.
bool QuantDepthwiseEnabled() {
  const char* env = std::getenv("KILN_INT8_QDEPTHWISE");
  return !(env && std::string(env) == "off");
}
// $KILN_INT8_WINOGRAD=off: the int16 kernel's direct form for 3x3 stride-1
// convolutions too, where it would run Winograd F(2x2, 3x3).
bool Int16WinogradEnabled() {
  const char* env = std::getenv("KILN_INT8_WINOGRAD");
  return !(env && std::string(env) == "off");
}
bool Int8PairsExact(const HostTensor& w, bool u8w, DType x_type) {
  if (ExactInt8Isa()) return true;
  if (!OneDnnInt8Isa() || x_type != DType::kUInt8) return false;
  const std::int64_t n = NumElements(w.shape());
  for (std::int64_t i = 0; i < n; ++i) {
    const int v = u8w ? static_cast<int>(w.data_as<std::uint8_t>()[i]) - 128 : w.data_as<std::int8_t>()[i];
    if (v < -64 || v > 64) return false;
  }
  return true;
}
// kiln.quantize_input depthwise layers of at most this many input values
// take the float32 route without VNNI (DnnlQConvKernel::Init): 1 MiB as
// float32, an L2's worth.
constexpr std::int64_t kDepthwiseFloatElems = std::int64_t{1} << 18;
// A depthwise convolution (one input and one output channel per group) is
// exact on oneDNN's jit int8 kernels without VNNI too, for uint8
// activations and any int8 weights: they have no pairs to sum, each uint8
// widened to a 32-bit lane (high half zero) and each int8 weight sign
// extended, multiplied with vpmaddwd (one int16 product per lane, the other
// half 0 x sign) and added in int32 (oneDNN 2.6, jit_uni_x8s8s32x /
// jit_avx512_core_x8s8s32x compute(): "okay for depthwise since src is
// zero-extended"). Only those implementations: DepthwiseInt8Impl checks
// the one oneDNN picked. `depthwise`: the caller's shape test.
bool DepthwiseInt8Exact(DType x_type, bool depthwise) {
  return depthwise && OneDnnInt8Isa() && x_type == DType::kUInt8;
}
bool DepthwiseInt8Impl(const std::string& impl) {
  return impl.rfind("jit_int8:", 0) == 0 || impl.rfind("jit_uni_int8:", 0) == 0;
}

// ConvInteger / MatMulInteger's activation zero point (input 2): absent (0)
// or one value, a constant or computed (DynamicQuantizeLinear's), read at
// run time into the int32 that oneDNN's runtime zero point points to.
struct ZeroPointInput {
  int index = -1;  // -1: absent
  DType type = DType::kUndefined;
};
bool RuntimeSrcZeroPoint(const KernelInit& init, ZeroPointInput* z) {
  if (init.inputs.size() <= 2 || !init.inputs[2].present()) return true;
  if (NumElements(init.inputs[2].shape) != 1) return false;  // per row: the reference kernel
  z->index = 2;
  z->type = init.inputs[2].dtype;
  return true;
}
inline void ReadSrcZeroPoint(const KernelArgs& a, const ZeroPointInput& z, std::int32_t* out) {
  if (z.index < 0) return;
  *out = z.type == DType::kUInt8 ? static_cast<std::int32_t>(*a.in_as<std::uint8_t>(z.index))
                                 : static_cast<std::int32_t>(*a.in_as<std::int8_t>(z.index));
}
// Whether every value of `v` is >= 0 or NaN, by how the graph makes it: a
// Relu; a Clip whose bounds are constants >= 0 (an absent upper one is
// +inf); an op with such an activation fused (kiln.activation: Relu, or
// Clip with both bounds >= 0; the activation is the last step of every op
// that carries it); or a pool, layout op or concatenation of such values.
// Anything else is not known to be.
bool ScalarAtLeastZero(const ir::Value* c) {
  if (!c || !c->is_constant() || c->dtype() != DType::kFloat32 || NumElements(c->shape()) != 1) return false;
  return c->constant()->data_as<float>()[0] >= 0.f;  // false for NaN
}
bool NonNegative(const ir::Value* v, int depth = 0) {
  const ir::Node* p = v ? v->producer() : nullptr;
  if (!p || depth > 32) return false;
  if (p->FindAttr(ops::kActAttr)) {
    const std::string act = p->GetString(ops::kActAttr, "");
    return act == "Relu" ||
           (act == "Clip" && p->GetFloat(ops::kActAlphaAttr, -1.f) >= 0.f && p->GetFloat(ops::kActBetaAttr, -1.f) >= 0.f);
  }
  if (!p->domain().empty() || p->num_outputs() < 1 || p->output(0) != v) return false;
  const std::string& t = p->op_type();
  if (t == "Relu") return true;
  if (t == "Clip") {  // its bounds are inputs (the importer makes Clip-6's attributes inputs)
    const ir::Value* lo = p->num_inputs() > 1 ? p->input(1) : nullptr;
    const ir::Value* hi = p->num_inputs() > 2 ? p->input(2) : nullptr;
    return ScalarAtLeastZero(lo) && (!hi || ScalarAtLeastZero(hi));
  }
  static const std::set<std::string> kKeeps = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool",
                                               "Reshape", "Flatten", "Transpose", "Identity", "Squeeze",
                                               "Unsqueeze"};
  if (kKeeps.count(t)) return p->num_inputs() > 0 && NonNegative(p->input(0), depth + 1);
  if (t == "Concat") {
    for (const ir::Value* in : p->inputs()) {
      if (!NonNegative(in, depth + 1)) return false;
    }
    return p->num_inputs() > 0;
  }
  return false;
}
// Whether a ConvInteger's activation zero point (input 2) is 0 on every
// run: absent, or DynamicQuantizeLinear's (its output 2) over values
// NonNegative knows are >= 0. Its range then starts at 0 (NaNs are
// skipped), so its zero point is saturate(round(0 - 0 / scale)) = 0, and 0
// for an all-zero input. oneDNN's convolutions without a zero point are
// faster (brgconv 1x1 and brdgmm depthwise, as for a QLinearConv's 0).
bool SrcZeroPointAlwaysZero(const ir::Node* node) {
  // kiln.quantize_input = 2: the op's own DynamicQuantizeLinear of input 0.
  if (node && node->GetInt(ops::kQuantizeInputAttr, 0) == 2) return node->num_inputs() > 0 && NonNegative(node->input(0));
  if (!node || node->num_inputs() <= 2 || !node->input(2)) return true;
  const ir::Value* z = node->input(2);
  const ir::Node* p = z->producer();
  return p && p->op_type() == "DynamicQuantizeLinear" && p->domain().empty() && p->num_outputs() > 2 &&
         p->output(2) == z && NonNegative(p->input(0));
}

// Whether 255 * sum_k |w[o, k]| + |bias[o]| <= 2^24 for every output
// channel o of `rows` (the leading dim; bias empty: none): then each int32
// sum of 8-bit activations (and a zero point's compensation) is exact in
// float32, and so is float(sum) + float(bias), float(sum + bias).
bool SumsWithBiasFitFloat(const HostTensor& w, bool u8w, std::int64_t rows, const std::vector<std::int32_t>& bias) {
  const std::int64_t n = NumElements(w.shape());
  if (rows <= 0 || n % rows != 0 || (!bias.empty() && static_cast<std::int64_t>(bias.size()) != rows)) return false;
  const std::int64_t per = n / rows;
  for (std::int64_t o = 0; o < rows; ++o) {
    std::int64_t sum = 0;
    for (std::int64_t i = o * per; i < (o + 1) * per; ++i) {
      const int v = u8w ? static_cast<int>(w.data_as<std::uint8_t>()[i]) - 128 : w.data_as<std::int8_t>()[i];
      sum += v < 0 ? -v : v;
    }
    const std::int64_t b = bias.empty() ? 0 : bias[static_cast<std::size_t>(o)];
    if (255 * sum + (b < 0 ? -b : b) > (std::int64_t{1} << 24)) return false;
  }
  return true;
}

// The same without a bias.
bool SumsFitFloat(const HostTensor& w, bool u8w, std::int64_t rows) { return SumsWithBiasFitFloat(w, u8w, rows, {}); }

// Whether the weights' zero point (input `i`, constant or absent = 0) lets
// oneDNN's int8 weights hold w - zp exactly: 0 for int8, 128 for uint8
// (shifted to int8 once when packed).
bool WeightZeroPointShiftable(const KernelInit& init, int i, bool u8w) {
  const bool present = static_cast<int>(init.inputs.size()) > i && init.inputs[i].present();
  if (!present) return !u8w;
  const HostTensor* zp = init.const_input(i);
  if (!zp) return false;
  for (std::int64_t j = 0; j < NumElements(zp->shape()); ++j) {
    const int z = u8w ? zp->data_as<std::uint8_t>()[j] : zp->data_as<std::int8_t>()[j];
    if (z != (u8w ? 128 : 0)) return false;
  }
  return true;
}

// The float32 route of QLinearConv / QLinearMatMul (CPUs where oneDNN's
// int8 is not exact for these weights): x - x_zp as float32 (exact), and
// after the float32 primitive (weights w - w_zp, bias as float) each sum
// requantised with its channel's scale. Products of 8-bit values are exact
// in float32; sums past 2^24 round there, far below one output step.
// Sixteen at a time in SSE2: int8 read as uint8 x ^ 0x80 = x + 128.
// The same in AVX2, 32 at a time (bytes widened with vpmovsxbd /
// vpmovzxbd, converted exactly, the zero point subtracted). Returns the
// count done.
template <typename Q>
__attribute__((target("avx2"))) std::int64_t CenterToFloatAvx2(const Q* x, float* y, std::int64_t n, float zp) {
  const __m256 z = _mm256_set1_ps(zp);
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i + 8 * j));
      const __m256i v = std::is_same_v<Q, std::int8_t> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
      _mm256_storeu_ps(y + i + 8 * j, _mm256_sub_ps(_mm256_cvtepi32_ps(v), z));
    }
  }
  return i;
}
template <typename Q>
void CenterToFloat(const Q* x, float* y, std::int64_t n, float zp) {
  constexpr bool kSigned = std::is_same_v<Q, std::int8_t>;
  const __m128 z = _mm_set1_ps(kSigned ? zp + 128.f : zp);
  const __m128i flip = _mm_set1_epi8(kSigned ? static_cast<char>(0x80) : 0), zero = _mm_setzero_si128();
  static const bool avx2 = __builtin_cpu_supports("avx2");
  std::int64_t i = avx2 ? CenterToFloatAvx2(x, y, n, zp) : 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)), flip);
    const __m128i lo = _mm_unpacklo_epi8(b, zero), hi = _mm_unpackhi_epi8(b, zero);
    _mm_storeu_ps(y + i, _mm_sub_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)), z));
    _mm_storeu_ps(y + i + 4, _mm_sub_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)), z));
    _mm_storeu_ps(y + i + 8, _mm_sub_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)), z));
    _mm_storeu_ps(y + i + 12, _mm_sub_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)), z));
  }
  for (; i < n; ++i) y[i] = static_cast<float>(x[i]) - zp;
}
void CenterToFloat(DType t, const void* x, float* y, std::int64_t n, float zp) {
  ParallelFor(n, 16384, [&](std::int64_t b, std::int64_t e) {
    if (t == DType::kUInt8) CenterToFloat(static_cast<const std::uint8_t*>(x) + b, y + b, e - b, zp);
    else CenterToFloat(static_cast<const std::int8_t*>(x) + b, y + b, e - b, zp);
  });
}
// acc [outer, channels, inner] (inner = 1 for channels-last) -> saturate(
// round(acc * scales[c]) + zp); one scale for all when scales has one value.
// o[i] = saturate(round_even(a[i] * scale) + zp), scale sc[i] (per element)
// or s; with bt (per element; null: none) a[i] + bt[i] in place of a[i]
// (QuantDepthwise's sums plus QLinearConv's bias, where that add is exact); eight at a time in SSE2 (its float->int conversion rounds to even,
// as RoundToQ does; values are clamped first, so the packs never saturate).
// Unlike RoundToQ a NaN gives the type's minimum: the callers' sums and
// scales are finite.
// The same steps in AVX2: 32 at a time (packed as QuantizeAvx2 packs),
// then 8 at a time. Returns the count done.
template <typename Q>
__attribute__((target("avx2"))) inline __m256i RequantLanes(const float* a, const float* bt, const float* sc, __m256 sv,
                                                            __m256 lo, __m256 hi, __m256i z) {
  __m256 v = _mm256_loadu_ps(a);
  if (bt) v = _mm256_add_ps(v, _mm256_loadu_ps(bt));
  v = _mm256_mul_ps(v, sc ? _mm256_loadu_ps(sc) : sv);
  return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi)), z);
}
template <typename Q>
__attribute__((target("avx2"))) std::int64_t RequantAvx2(const float* a, const float* bt, const float* sc, float s,
                                                         Q* o, std::int64_t n, QBounds b, float zp) {
  const __m256 lo = _mm256_set1_ps(b.lo), hi = _mm256_set1_ps(b.hi), sv = _mm256_set1_ps(s);
  const __m256i z = _mm256_set1_epi32(static_cast<int>(zp));
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i r0 = RequantLanes<Q>(a + i, bt ? bt + i : nullptr, sc ? sc + i : nullptr, sv, lo, hi, z),
                  r1 = RequantLanes<Q>(a + i + 8, bt ? bt + i + 8 : nullptr, sc ? sc + i + 8 : nullptr, sv, lo, hi, z),
                  r2 = RequantLanes<Q>(a + i + 16, bt ? bt + i + 16 : nullptr, sc ? sc + i + 16 : nullptr, sv, lo, hi, z),
                  r3 = RequantLanes<Q>(a + i + 24, bt ? bt + i + 24 : nullptr, sc ? sc + i + 24 : nullptr, sv, lo, hi, z);
    Store32(o + i, r0, r1, r2, r3);  // within Q's range: the saturating packs only narrow
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i r = RequantLanes<Q>(a + i, bt ? bt + i : nullptr, sc ? sc + i : nullptr, sv, lo, hi, z);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    const __m128i q = std::is_same_v<Q, std::uint8_t> ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(o + i), q);
  }
  return i;
}
template <typename Q>
void RequantRun(const float* a, const float* sc, float s, Q* o, std::int64_t n, QBounds b, float zp,
                const float* bt = nullptr) {
  const __m128 lo = _mm_set1_ps(b.lo), hi = _mm_set1_ps(b.hi), sv = _mm_set1_ps(s);
  const __m128i z = _mm_set1_epi32(static_cast<int>(zp));
  static const bool avx2 = __builtin_cpu_supports("avx2");
  std::int64_t i = avx2 ? RequantAvx2(a, bt, sc, s, o, n, b, zp) : 0;
  for (; i + 8 <= n; i += 8) {
    __m128 a0 = _mm_loadu_ps(a + i), a1 = _mm_loadu_ps(a + i + 4);
    if (bt) a0 = _mm_add_ps(a0, _mm_loadu_ps(bt + i)), a1 = _mm_add_ps(a1, _mm_loadu_ps(bt + i + 4));
    __m128 v0 = _mm_mul_ps(a0, sc ? _mm_loadu_ps(sc + i) : sv);
    __m128 v1 = _mm_mul_ps(a1, sc ? _mm_loadu_ps(sc + i + 4) : sv);
    v0 = _mm_min_ps(_mm_max_ps(v0, lo), hi);
    v1 = _mm_min_ps(_mm_max_ps(v1, lo), hi);
    const __m128i w = _mm_packs_epi32(_mm_add_epi32(_mm_cvtps_epi32(v0), z), _mm_add_epi32(_mm_cvtps_epi32(v1), z));
    const __m128i q = std::is_same_v<Q, std::uint8_t> ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(o + i), q);
  }
  for (; i < n; ++i) o[i] = RoundToQ<Q>((bt ? a[i] + bt[i] : a[i]) * (sc ? sc[i] : s), b, zp);
}
// Per-channel factors of channels-last rows tiled over whole rows: the
// length, a multiple of lcm(channels, lanes) of at least 256 values, or 0
// where lcm passes 4096 (or there are no channels). TileRows fills one.
std::int64_t TilePeriod(std::int64_t channels, std::int64_t lanes) {
  if (channels <= 0) return 0;
  const std::int64_t lcm = channels / std::gcd(channels, lanes) * lanes;
  return lcm > 4096 ? 0 : lcm * ((256 + lcm - 1) / lcm);
}
void TileRows(const float* f, std::int64_t channels, std::int64_t period, std::vector<float>* out) {
  out->resize(static_cast<std::size_t>(period));
  for (std::int64_t i = 0; i < period; i += channels) std::copy(f, f + channels, out->begin() + i);  // period: whole rows
}
template <typename Q>
void RequantizeRows(const float* acc, Q* y, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                    const std::vector<float>& scales, float zp) {
  const QBounds b = Bounds<Q>(zp);
  if (scales.size() == 1) {
    ParallelFor(outer * channels * inner, 16384, [&](std::int64_t i0, std::int64_t i1) {
      RequantRun(acc + i0, nullptr, scales[0], y + i0, i1 - i0, b, zp);
    });
  } else if (inner == 1) {  // channels-last: each row runs over the channels
    // The scales tiled over whole rows to a multiple of 32 values of at
    // least 256 (if that takes at most 4096), so that one call covers many
    // short rows (MobileNetV2's 16 and 24 channels) in the vector loop.
    std::int64_t period = TilePeriod(channels, 32);
    if (period == 0) period = channels;  // one row a call (none: no channels)
    const std::int64_t rows_per = channels > 0 ? period / channels : 1;
    thread_local std::vector<float> tiled;  // the caller's; the workers get its pointer
    TileRows(scales.data(), channels, period, &tiled);
    const float* t = tiled.data();
    ParallelFor(outer, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(channels, 1)), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; r += rows_per) {
        RequantRun(acc + r * channels, t, 0.f, y + r * channels, std::min(rows_per, r1 - r) * channels, b, zp);
      }
    });
  } else {  // each row one channel's positions
    ParallelFor(outer * channels, std::max<std::int64_t>(1, 16384 / inner), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) RequantRun(acc + r * inner, nullptr, scales[r % channels], y + r * inner, inner, b, zp);
    });
  }
}
void Requantize(DType t, const float* acc, void* y, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                const std::vector<float>& scales, float zp) {
  if (t == DType::kUInt8) RequantizeRows(acc, static_cast<std::uint8_t*>(y), outer, channels, inner, scales, zp);
  else RequantizeRows(acc, static_cast<std::int8_t*>(y), outer, channels, inner, scales, zp);
}

// y = act(y * s + b) over the first n - n % 8 values, in AVX (no FMA: the
// multiply and the add round separately, as the graph's Mul and Add do).
// s and b: per value (`per`) or one value each at s[0] and b[0]; b null: no
// add. act: 0 none, 1 Relu, 2 LeakyRelu(al), 3 Clip(al, be), each as the
// scalar loops compute it (NaN passes through: maxps/minps return their
// second operand, here the value, when either is NaN). Returns the count done.
// With `vlo` / `vhi`, the results' running minimum and maximum per lane too
// (NaNs skipped: minps/maxps return the running value, their second operand,
// when the result is NaN), for a reader's range (device::ValueRange).
__attribute__((target("avx"))) std::int64_t RescaleAvx(float* y, const float* s, const float* b, bool per,
                                                       std::int64_t n, int act, float al, float be,
                                                       __m256* vlo = nullptr, __m256* vhi = nullptr) {
  const __m256 s1 = _mm256_set1_ps(s[0]), b1 = _mm256_set1_ps(b ? b[0] : 0.f);
  const __m256 zero = _mm256_setzero_ps(), va = _mm256_set1_ps(al), vb = _mm256_set1_ps(be);
  __m256 lo = vlo ? *vlo : zero, hi = vhi ? *vhi : zero;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(y + i), per ? _mm256_loadu_ps(s + i) : s1);
    if (b) v = _mm256_add_ps(v, per ? _mm256_loadu_ps(b + i) : b1);
    if (act == 1) {
      v = _mm256_max_ps(zero, v);  // v < 0 ? 0 : v
    } else if (act == 2) {
      v = _mm256_blendv_ps(v, _mm256_mul_ps(va, v), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    } else if (act == 3) {
      v = _mm256_min_ps(vb, _mm256_max_ps(va, v));  // min(max(v, al), be)
    }
    _mm256_storeu_ps(y + i, v);
    if (vlo) {
      lo = _mm256_min_ps(v, lo);
      hi = _mm256_max_ps(v, hi);
    }
  }
  if (vlo) {
    *vlo = lo;
    *vhi = hi;
  }
  return i;
}
// Folds per-lane minima and maxima (and 0) into lo and hi.
__attribute__((target("avx"))) void FoldRange(__m256 vlo, __m256 vhi, float* lo, float* hi) {
  alignas(32) float ls[8], hs[8];
  _mm256_store_ps(ls, vlo);
  _mm256_store_ps(hs, vhi);
  for (int j = 0; j < 8; ++j) {
    *lo = ls[j] < *lo ? ls[j] : *lo;
    *hi = hs[j] > *hi ? hs[j] : *hi;
  }
}

// RescaleAvx over `rows` channels-last rows of `channels` values (a multiple
// of 8), per-channel s and b: one call for a block of rows rather than one
// per row (a 112x112 map of 16 channels is 12544 rows of two vectors each).
// RescaleAvx with the results' min and max folded into lo and hi.
__attribute__((target("avx"))) std::int64_t RescaleAvxRange(float* y, const float* s, const float* b, bool per,
                                                            std::int64_t n, int act, float al, float be, float* lo,
                                                            float* hi) {
  __m256 vlo = _mm256_setzero_ps(), vhi = vlo;
  const std::int64_t done = RescaleAvx(y, s, b, per, n, act, al, be, &vlo, &vhi);
  FoldRange(vlo, vhi, lo, hi);
  return done;
}
// RescaleRowsAvx's loop for one activation, with or without the range: the
// rows' per-channel factors in registers' reach (each row's channels swept
// in order, no call or branch per row; a 112x112 map of 32 channels is
// 12544 rows of four vectors, whose per-row calls with the activation and
// the range tested in the loop cost as much as the arithmetic).
template <int kAct, bool kRange>
__attribute__((target("avx"))) void RescaleRowsAvxT(float* y, const float* s, const float* b, std::int64_t rows,
                                                    std::int64_t channels, float al, float be, __m256* vlo,
                                                    __m256* vhi) {
  const __m256 zero = _mm256_setzero_ps(), va = _mm256_set1_ps(al), vb = _mm256_set1_ps(be);
  __m256 lo = *vlo, hi = *vhi;
  for (std::int64_t r = 0; r < rows; ++r, y += channels) {
    for (std::int64_t c = 0; c < channels; c += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(y + c), _mm256_loadu_ps(s + c));
      if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + c));
      if constexpr (kAct == 1) {
        v = _mm256_max_ps(zero, v);  // v < 0 ? 0 : v
      } else if constexpr (kAct == 2) {
        v = _mm256_blendv_ps(v, _mm256_mul_ps(va, v), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
      } else if constexpr (kAct == 3) {
        v = _mm256_min_ps(vb, _mm256_max_ps(va, v));  // min(max(v, al), be)
      }
      _mm256_storeu_ps(y + c, v);
      if constexpr (kRange) {
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
      }
    }
  }
  *vlo = lo;
  *vhi = hi;
}
// With lo / hi: the results' min and max folded in (NaNs skipped).
__attribute__((target("avx"))) void RescaleRowsAvx(float* y, const float* s, const float* b, std::int64_t rows,
                                                   std::int64_t channels, int act, float al, float be,
                                                   float* lo = nullptr, float* hi = nullptr) {
  __m256 vlo = _mm256_setzero_ps(), vhi = vlo;
  auto run = [&](auto range) {
    constexpr bool kRange = decltype(range)::value;
    switch (act) {
      case 1: RescaleRowsAvxT<1, kRange>(y, s, b, rows, channels, al, be, &vlo, &vhi); break;
      case 2: RescaleRowsAvxT<2, kRange>(y, s, b, rows, channels, al, be, &vlo, &vhi); break;
      case 3: RescaleRowsAvxT<3, kRange>(y, s, b, rows, channels, al, be, &vlo, &vhi); break;
      default: RescaleRowsAvxT<0, kRange>(y, s, b, rows, channels, al, be, &vlo, &vhi); break;
    }
  };
  if (!lo) {
    run(std::false_type{});
    return;
  }
  run(std::true_type{});
  FoldRange(vlo, vhi, lo, hi);
}

// One vector of RescaleTiled512: all 16 lanes (kFull: plain loads and
// stores; masked stores cost several times more on AMD's Zen 4 and 5) or
// the lanes of m.
template <int kAct, bool kFull, bool kRange>
__attribute__((target("avx512f"), always_inline)) inline void RescaleStep512(float* p, const float* sp, const float* bp,
                                                                             __mmask16 m, __m512 va, __m512 vb,
                                                                             __m512* vlo, __m512* vhi) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 v = kFull ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
  v = _mm512_mul_ps(v, kFull ? _mm512_loadu_ps(sp) : _mm512_maskz_loadu_ps(m, sp));
  if (bp) {
    asm("" : "+v"(v));  // no contraction with the add
    v = _mm512_add_ps(v, kFull ? _mm512_loadu_ps(bp) : _mm512_maskz_loadu_ps(m, bp));
  }
  if constexpr (kAct == 1) {
    v = _mm512_max_ps(zero, v);  // v < 0 ? 0 : v
  } else if constexpr (kAct == 2) {
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_mul_ps(va, v));
  } else if constexpr (kAct == 3) {
    v = _mm512_min_ps(vb, _mm512_max_ps(va, v));  // min(max(v, al), be)
  }
  if constexpr (kFull) {
    _mm512_storeu_ps(p, v);
    if constexpr (kRange) {
      *vlo = _mm512_min_ps(v, *vlo);
      *vhi = _mm512_max_ps(v, *vhi);
    }
  } else {
    _mm512_mask_storeu_ps(p, m, v);
    if constexpr (kRange) {
      *vlo = _mm512_mask_min_ps(*vlo, m, v, *vlo);
      *vhi = _mm512_mask_max_ps(*vhi, m, v, *vhi);
    }
  }
}
// RescaleAvx in AVX-512 over channels-last rows viewed as one run of n
// values: per-channel s and b tiled to `period` values (a multiple of 16
// and of the channel count, so a run that starts at a row's first channel
// reads the right factors at every offset), b null: no add. Only the run's
// last vector is partial (masked). The same steps as RescaleAvx, each
// rounded (the empty asm keeps the multiply from being contracted with the
// add into a fused multiply-add). With kRange, the results' min and max
// folded in (NaNs skipped). 1.6-3.5x the speed of RescaleRowsAvx (one
// RescaleAvx call per row) at 16 to 384 channels (3x at 24), Zen 5; any
// channel count (not a multiple of 8: the scalar loops before).
template <int kAct, bool kRange>
__attribute__((target("avx512f"))) void RescaleTiled512(float* y, std::int64_t n, const float* st, const float* bt,
                                                        std::int64_t period, float al, float be, float* lo, float* hi) {
  const __m512 va = _mm512_set1_ps(al), vb = _mm512_set1_ps(be);
  __m512 vlo = _mm512_setzero_ps(), vhi = vlo;
  for (std::int64_t i = 0; i < n; i += period) {
    const std::int64_t len = std::min(period, n - i);
    std::int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
      RescaleStep512<kAct, true, kRange>(y + i + j, st + j, bt ? bt + j : nullptr, 0xffff, va, vb, &vlo, &vhi);
    }
    if (j < len) {
      RescaleStep512<kAct, false, kRange>(y + i + j, st + j, bt ? bt + j : nullptr,
                                  static_cast<__mmask16>((1u << (len - j)) - 1), va, vb, &vlo, &vhi);
    }
  }
  if constexpr (kRange) {
    alignas(64) float ls[16], hs[16];
    _mm512_store_ps(ls, vlo);
    _mm512_store_ps(hs, vhi);
    for (int j = 0; j < 16; ++j) {
      *lo = ls[j] < *lo ? ls[j] : *lo;
      *hi = hs[j] > *hi ? hs[j] : *hi;
    }
  }
}

// RescaleTiled512 for RescaleAvx's act code (kRange: lo / hi are set).
template <bool kRange>
void RescaleTiled512Act(int act, float* y, std::int64_t n, const float* st, const float* bt, std::int64_t period,
                        float al, float be, float* lo, float* hi) {
  switch (act) {
    case 1: RescaleTiled512<1, kRange>(y, n, st, bt, period, al, be, lo, hi); return;
    case 2: RescaleTiled512<2, kRange>(y, n, st, bt, period, al, be, lo, hi); return;
    case 3: RescaleTiled512<3, kRange>(y, n, st, bt, period, al, be, lo, hi); return;
    default: RescaleTiled512<0, kRange>(y, n, st, bt, period, al, be, lo, hi); return;
  }
}

// kiln.rescale's epilogue after the exact sums: act(float(sum) * S + B), the
// graph's Cast, Mul, Add and activation in their order, each step its own
// loop (rounded as the graph's op rounds it; no fused multiply-add). S
// (input 4) and B (input 5) are one value or one per channel, read at each
// run.
class RescaleEpilogue {
 public:
  Status Init(const KernelInit& init) {
    scale_per_ = NumElements(init.inputs[4].shape) != 1;
    bias_per_ = init.inputs.size() > 5 && init.inputs[5].present() ? (NumElements(init.inputs[5].shape) != 1 ? 1 : 0) : -1;
    // With a fused residual (kiln.sum) the activation follows the sum:
    // ResidualKernel applies it.
    const bool after_sum = init.node->GetInt(ops::kSumAttr, 0) == 1;
    const std::string act = after_sum ? std::string() : init.node->GetString(ops::kActAttr, "");
    alpha_ = init.node->GetFloat(ops::kActAlphaAttr, 0.f);
    beta_ = init.node->GetFloat(ops::kActBetaAttr, 0.f);
    if (act.empty()) act_ = Act::kNone;
    else if (act == "Relu") act_ = Act::kRelu;
    else if (act == "LeakyRelu") act_ = Act::kLeakyRelu;
    else if (act == "Clip") act_ = Act::kClip;
    else return Error(StatusCode::kUnimplemented, init.node->Describe(), ": fused activation '", act,
                      "' is not supported after kiln.rescale (Relu, LeakyRelu or Clip)");
    return Status::Ok();
  }
  bool has_bias() const { return bias_per_ >= 0; }
  // The activation as RescaleAvx's `act` (0 none, 1 Relu, 2 LeakyRelu, 3
  // Clip) and its attributes.
  int act() const { return static_cast<int>(act_); }
  float alpha() const { return alpha_; }
  float beta() const { return beta_; }
  // This run's rescale as the int16-product kernel stores it: output 0 as
  // act(float(sum) * S + B) (sv / bv hold this run's factors meanwhile).
  void ToInt16Out(const KernelArgs& a, std::int64_t channels, std::vector<float>& sv, std::vector<float>& bv,
                  Int16ConvOut& o) const {
    Load(a, channels, sv, bv);
    o.f = a.out_as<float>(0);
    o.rescale = sv.data();
    o.rbias = has_bias() ? bv.data() : nullptr;
    o.act = act();
    o.alpha = alpha();
    o.beta = beta();
  }
  // This run's scale and bias, one per channel (a single value broadcast),
  // so the loops below run with unit strides and vectorize.
  void Load(const KernelArgs& a, std::int64_t channels, std::vector<float>& sv, std::vector<float>& bv) const {
    const float* sc = a.in_as<float>(4);
    const float* b = has_bias() ? a.in_as<float>(5) : nullptr;
    sv.resize(static_cast<std::size_t>(channels));
    bv.resize(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) {
      sv[c] = sc[scale_per_ ? c : 0];
      bv[c] = b ? b[bias_per_ ? c : 0] : 0.f;
    }
  }
  // In place over float sums: channels-last rows (y[i, c], `rows` rows of
  // `channels`) or planes (y[o, c, i], `inner` values per channel). With
  // `range`, also the result's min(0, min) and max(0, max) (what
  // DynamicQuantizeLinear reads it for), taken from the registers as the
  // values are written: the reader then skips its own pass over the tensor
  // (device::ValueRange).
  void ApplyInPlace(float* y, const float* s, const float* b, std::int64_t outer, std::int64_t channels,
                    std::int64_t inner, bool channels_last, device::ValueRange* range = nullptr) const {
    // Values per thread at least (a fork costs a few us): 16K, so the
    // rescale of a 14x14 map of 384 or 576 channels is split over two threads
    // (dynamic MobileNetV2, Zen 4, 2 threads: those ConvIntegers 0.79-0.91 of
    // their time with 64K, where it ran on one).
    constexpr std::int64_t kGrain = 16384;
    float mn = 0.f, mx = 0.f;
    std::mutex mu;
    auto merge = [&](float lo, float hi) {
      std::lock_guard<std::mutex> lock(mu);
      mn = lo < mn ? lo : mn;
      mx = hi > mx ? hi : mx;
    };
    float* const no = nullptr;
    if (channels_last) {
      const std::int64_t rows = outer * inner;
      static const bool avx512 = Avx512Allowed();
      // AVX-512: the factors tiled to a multiple of lcm(channels, 16) of at
      // least 256 values (fewer trips of the outer loop), if lcm is at most
      // 4096 (RescaleTiled512).
      const std::int64_t period = TilePeriod(channels, 16);
      const bool tiled = avx512 && period > 0;
      // Per calling thread, reused across runs; the workers get pointers
      // (a thread_local named inside the lambda would be the worker's own).
      thread_local std::vector<float> st_buf, bt_buf;
      if (tiled) {
        TileRows(s, channels, period, &st_buf);
        if (has_bias()) TileRows(b, channels, period, &bt_buf);
      }
      const float* st = st_buf.data();
      const float* bt = has_bias() ? bt_buf.data() : nullptr;
      ParallelFor(rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, channels)),
                  [&](std::int64_t r0, std::int64_t r1) {
        float lo = 0.f, hi = 0.f;
        if (tiled) {
          float* p = y + r0 * channels;
          const std::int64_t len = (r1 - r0) * channels;
          if (range) {
            RescaleTiled512Act<true>(static_cast<int>(act_), p, len, st, bt, period, alpha_, beta_, &lo, &hi);
          } else {
            RescaleTiled512Act<false>(static_cast<int>(act_), p, len, st, bt, period, alpha_, beta_, no, no);
          }
        } else {
          ApplyRows(y + r0 * channels, s, b, r1 - r0, channels, range ? &lo : no, range ? &hi : no);
        }
        if (range) merge(lo, hi);
      });
    } else {
      ParallelFor(outer * channels, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, inner)),
                  [&](std::int64_t p0, std::int64_t p1) {
        float lo = 0.f, hi = 0.f;
        for (std::int64_t p = p0; p < p1; ++p) {
          Span(y + p * inner, s + p % channels, b + p % channels, false, inner, range ? &lo : no, &hi);
        }
        if (range) merge(lo, hi);
      });
    }
    if (range) {
      range->min = mn;
      range->max = mx;
      range->valid = true;
    }
  }
  // The same over `rows` channels-last rows on the calling thread (AVX
  // where the CPU has it), y's own factors s and b (Load's); lo / hi
  // (both or neither) fold in the results' min and max.
  void ApplyRows(float* y, const float* s, const float* b, std::int64_t rows, std::int64_t channels, float* lo,
                 float* hi) const {
    static const bool avx = __builtin_cpu_supports("avx");
    if (avx && channels % 8 == 0) {
      RescaleRowsAvx(y, s, has_bias() ? b : nullptr, rows, channels, static_cast<int>(act_), alpha_, beta_, lo, hi);
      return;
    }
    for (std::int64_t r = 0; r < rows; ++r) Span(y + r * channels, s, b, true, channels, lo, hi);
  }
  // One span: per-value s and b (`per`), or s[0] and b[0] for all of it.
  // With lo / hi: the results' min and max folded in (NaNs skipped).
  void Span(float* y, const float* s, const float* b, bool per, std::int64_t n, float* lo = nullptr,
            float* hi = nullptr) const {
    static const bool avx = __builtin_cpu_supports("avx");
    const float* bb = has_bias() ? b : nullptr;
    std::int64_t done = 0;
    if (avx && lo) {
      done = RescaleAvxRange(y, s, bb, per, n, static_cast<int>(act_), alpha_, beta_, lo, hi);
    } else if (avx) {
      done = RescaleAvx(y, s, bb, per, n, static_cast<int>(act_), alpha_, beta_);
    }
    y += done;
    n -= done;
    if (per) {
      s += done;
      b += done;
    }
    for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] * s[per ? i : 0];
    if (bb) {
      for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] + b[per ? i : 0];
    }
    Activate(y, n);
    if (lo) {
      for (std::int64_t i = 0; i < n; ++i) {
        *lo = y[i] < *lo ? y[i] : *lo;
        *hi = y[i] > *hi ? y[i] : *hi;
      }
    }
  }
  // The activation as its own kernel computes it.
  void Activate(float* v, std::int64_t n) const {
    const float al = alpha_, be = beta_;
    switch (act_) {
      case Act::kNone: return;
      case Act::kRelu:
        for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] < 0.f ? 0.f : v[i];
        return;
      case Act::kLeakyRelu:
        for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] < 0.f ? al * v[i] : v[i];
        return;
      case Act::kClip:
        for (std::int64_t i = 0; i < n; ++i) v[i] = std::min(std::max(v[i], al), be);
        return;
    }
  }

 private:
  enum class Act { kNone = 0, kRelu = 1, kLeakyRelu = 2, kClip = 3 };  // RescaleAvx's act codes
  bool scale_per_ = false;
  int bias_per_ = -1;  // -1 none, 0 one value, 1 per channel
  Act act_ = Act::kNone;
  float alpha_ = 0.f, beta_ = 0.f;
};

// QLinearConv on oneDNN's int8 convolution (VNNI where the CPU has it):
// dst = saturate(round(x_scale * w_scale[oc] / y_scale * (sum (x - x_zp) *
// w + B)) + y_zp), oneDNN's output scales, source and destination zero
// points and s32 bias. Taken when the weights, scales, zero points and bias
// are constants and the weights are int8 with zero point 0, or uint8 with
// zero point 128 (shifted to int8 once, exactly); else the reference kernel
// above. oneDNN's fast kernels want channels-last activations: the plain
// NCHW input and output are reordered around the primitive (1 byte per
// element) when its chosen layout differs.
//
// Where the CPU has AMX, oneDNN 2.6 lists its AMX int8 convolutions first.
// With a window of 3x3 or more they run at 1/4 to 1/2 of its VNNI kernels'
// time (ResNet-18's, Sapphire Rapids, 1 and 2 threads), but its AMX 1x1
// kernel (jit_1x1:avx512_core_amx_int8) costs some 40 us a call whatever
// the size, and with fewer than 64 channels a side it leaves the tiles'
// 64-byte rows part empty: MobileNetV2's 1x1 convolutions ran 1.0-4.5x
// slower on it than on brgconv_1x1:avx512_core_vnni (the model at 2
// threads 2.65 ms against 1.80). A 1x1 convolution keeps AMX only with 64
// or more input and output channels and 16M or more multiply-adds (ResNet-50's
// bottleneck 1x1s: AMX 0.44-0.72 of VNNI at 1 thread, 0.51-0.95 at 2).
// AmxPaysForOneByOne (quant.h) holds the limits.
//
// `pd` moved past oneDNN's AMX implementations to the next jit one, for a
// 1x1 convolution that AmxPaysForOneByOne says runs faster without them.
// Unchanged where the CPU has no AMX or no jit implementation follows.
template <typename Pd, typename Desc>
void SkipAmxWhereItLoses(Pd* pd, const Desc& d, const dnnl::primitive_attr& attr, const Shape& w, std::int64_t group,
                         std::int64_t out_elems) {
  auto amx = [](const Pd& p) { return std::string(p.impl_info_str()).find("amx") != std::string::npos; };
  if (!amx(*pd) || group != 1 || w.size() < 3) return;
  for (std::size_t i = 2; i < w.size(); ++i) {
    if (w[i] != 1) return;
  }
  if (AmxPaysForOneByOne(w[1], w[0], out_elems)) return;
  Pd alt(d, attr, DnnlEngine());
  while (alt.next_impl()) {
    if (amx(alt)) continue;
    const std::string impl = alt.impl_info_str();
    if (impl.rfind("jit", 0) == 0 || impl.rfind("brg", 0) == 0) *pd = alt;
    return;
  }
}

class DnnlQConvKernel : public Kernel {
 public:
  // False (and no error) when the node does not fit this kernel. `integer`:
  // ConvInteger (x, w, x_zp?, w_zp?): the int32 sums themselves, with x's
  // zero point read at run time (DynamicQuantizeLinear computes it).
  // `rescale` (with `integer`, kiln.rescale): a float32 output,
  // act(float(sum) * S + B), S (input 4) and B (input 5) read at each run:
  // oneDNN's float32 destination holds float(sum), the exact int32 sum
  // converted once, and RescaleEpilogue multiplies, adds and clamps it in
  // place in the graph's order, so the result is the unfused graph's bit
  // for bit (`ConvInteger.Rescaled*`). Not oneDNN's binary post-ops, which
  // did the same: per-channel binary post-ops cost oneDNN 2.6's int8
  // convolutions more than the convolution itself (dynamic MobileNetV2's
  // 16 -> 96 1x1 at 112x112: 178 us without them, 560 with the multiply
  // and the add; the 52 convolutions 1.7 ms against 3.3, 1 thread, Zen 5).
  Result<bool> Init(const KernelInit& init, bool integer = false, bool rescale = false) {
    using dt = dnnl::memory::data_type;
    const int wi = integer ? 1 : 3;
    const HostTensor* w = init.const_input(wi);
    if (integer) {
      if (!RuntimeSrcZeroPoint(init, &src_zp_in_)) return false;
      src_zp_zero_ = SrcZeroPointAlwaysZero(init.node);
    } else {
      for (int i : {1, 2, 4, 5, 6, 7}) {
        if (!init.const_input(i)) return false;
      }
    }
    const bool has_bias = !integer && init.inputs.size() > 8 && init.inputs[8].present();
    if (!w || (has_bias && !init.const_input(8))) return false;
    // ConvInteger is channels-last only with kiln.rescale (its inference).
    const bool nhwc = (!integer || rescale) && init.node->GetInt(ops::kNhwcAttr, 0) != 0;
    Shape x = init.inputs[0].shape;
    const Shape& ws = init.inputs[wi].shape;
    Shape y = init.outputs[0].shape;
    if (nhwc) {  // physical NHWC -> logical NCHW dims (2-D only; another rank: not this kernel)
      if (x.size() != 4 || y.size() != 4) return false;
      x = {x[0], x[3], x[1], x[2]};
      y = {y[0], y[3], y[1], y[2]};
    }
    if (x.size() < 3 || x.size() > 5 || ws.empty()) return false;
    const std::int64_t cout = ws[0], group = init.node->GetInt("group", 1);
    const bool u8w = w->dtype() == DType::kUInt8;
    if (!WeightZeroPointShiftable(init, integer ? 3 : 5, u8w)) return false;
    // oneDNN's int8 where its pairs are exact; else QLinearConv takes the
    // float32 route, and so does a rescaled ConvInteger whose sums stay
    // exact in float32 (its output is float(sum) rescaled; an int32 output
    // would need sums past 2^24 exact).
    // Without VNNI a depthwise convolution keeps oneDNN's int8 kernel where
    // it is exact (DepthwiseInt8Exact); if oneDNN picks another for it, the
    // float32 route below, where that one is allowed.
    const bool depthwise = group > 1 && x[1] == group && cout == group;  // one channel in and out per group
    const bool pairs_exact = Int8PairsExact(*w, u8w, init.inputs[0].dtype);
    bool dw_int8 = !pairs_exact && DepthwiseInt8Exact(init.inputs[0].dtype, depthwise);
    const bool f32_allowed = !integer || (rescale && SumsFitFloat(*w, u8w, cout));
    // kiln.quantize_input (the op quantizes its float32 x itself): a
    // depthwise layer whose input is at most kDepthwiseFloatElems values
    // takes the float32 route instead, x quantized straight to float32
    // (QuantizeCenteredFloat) and oneDNN's float32 depthwise kernel, exact
    // there (f32_allowed: every sum within 2^24), which on AVX2 runs
    // faster than its int8 one where the float32 copy stays in L2
    // (dynamic MobileNetV2's 28x28 and smaller depthwise layers, 1
    // thread, Zen 4 held to AVX2: 0.65-0.8 of their time; at 56x56 and
    // 112x112 the int8 one's quarter of the bytes wins).
    float_in_ = integer && rescale && init.node->GetInt(ops::kQuantizeInputAttr, 0) != 0;
    if (dw_int8 && float_in_ && f32_allowed && NumElements(x) <= kDepthwiseFloatElems) dw_int8 = false;
    f32_ = !pairs_exact && !dw_int8;
    // Without VNNI, a kiln.quantize_input depthwise layer (channels-last,
    // 2-D, sums exact in float32) runs QuantDepthwise instead of either:
    // it quantizes x's rows as its windows reach them and convolves them
    // from cache, so neither the float32 copy of x nor the uint8 one is
    // written (quant_depthwise.h). $KILN_INT8_QDEPTHWISE=off keeps them.
    // So does a channels-last 2-D depthwise QLinearConv (or rescaled
    // ConvInteger) on uint8 / int8 activations, each input row widened
    // into the ring as x - x_zp in float32: in place of the float32
    // route's copy of x (int8 activations), and of oneDNN's int8 depthwise
    // kernel (uint8 ones; exact there, one product per 32-bit lane) at
    // stride 1, where that ran 1.4-1.8x the float32 kernel's time (static
    // MobileNetV2, Zen 3: its six stride-1 layer shapes 0.85-0.89 of their
    // time on it). Strided layers keep it (QuantDepthwise's were 1.2-1.4x
    // its time there). QLinearConv requantises each row of sums as it is
    // made (RequantRun, its bias added in float32: the route needs every
    // |sum| + |bias| within 2^24, so that float(sum) + float(bias) is
    // float(sum + bias); a larger bias keeps the earlier routes).
    if (has_bias) {
      const HostTensor* b = init.const_input(8);
      bias_.assign(b->data_as<std::int32_t>(), b->data_as<std::int32_t>() + NumElements(b->shape()));
      fbias_.assign(bias_.begin(), bias_.end());
    }
    if (depthwise && !pairs_exact && nhwc && x.size() == 4 && ws.size() == 4 && y.size() == 4 &&
        QuantDepthwiseAvailable() && QuantDepthwiseEnabled()) {
      KILN_ASSIGN_OR_RETURN(const DnnlConvWindow cw, ConvWindow(*init.node, x, ws));
      const bool strided = std::any_of(cw.strides.begin(), cw.strides.end(), [](std::int64_t v) { return v != 1; });
      const DType xt = init.inputs[0].dtype;
      const bool float_route = float_in_ && f32_allowed;
      const bool byte_route = !float_in_ && !(dw_int8 && strided) && (!integer || rescale) &&
                              (xt == DType::kUInt8 || xt == DType::kInt8) && SumsWithBiasFitFloat(*w, u8w, cout, bias_);
      QuantDepthwiseShape ds;
      ds.n = x[0], ds.c = x[1], ds.h = x[2], ds.w = x[3], ds.oh = y[2], ds.ow = y[3];
      ds.kh = ws[2], ds.kw = ws[3], ds.sh = cw.strides[0], ds.sw = cw.strides[1];
      ds.dh = cw.dilations[0] + 1, ds.dw = cw.dilations[1] + 1;
      ds.pad_top = cw.pads_begin[0], ds.pad_left = cw.pads_begin[1];
      auto dw = std::make_shared<QuantDepthwise>();
      if ((float_route || byte_route) && dw->Plan(ds)) {
        dw->PackWeights(ShiftedWeights(*w, u8w).data());
        w->ReleasePages();
        qdw_ = dw;
        f32_ = true;
      }
    }
    // Without VNNI a channels-last 2-D convolution of one group that would
    // take the float32 route runs the exact int16-product kernel instead
    // (int16_conv.h): int32 sums of any 8-bit operands, no float32 copies
    // of x, about twice float32's multiply-adds a cycle where the CPU has
    // two vector multiply pipes; RGB stems as a tap per window row; groups
    // of at least kInt16MinGroupOutputs outputs each (a panel of 16 at
    // least half used). Only where each output sums at least
    // kInt16MinReduction products (taps x channels of its group): below
    // that the kernel's per-output epilogue outweighs its faster products.
    // $KILN_INT8_INT16=off keeps the float32 route (for tests and A/B runs).
    std::int64_t reduction = 0;
    if (f32_ && nhwc && group >= 1 && x.size() == 4 && ws.size() == 4 && y.size() == 4 && x[1] % group == 0 &&
        cout % group == 0 && ws[1] == x[1] / group && (group == 1 || cout / group >= kInt16MinGroupOutputs) &&
        CheckedMul(ws[1], ws[2], &reduction) && CheckedMul(reduction, ws[3], &reduction) &&
        reduction >= kInt16MinReduction && Int16ConvAvailable() && Int16Enabled()) {
      KILN_ASSIGN_OR_RETURN(const DnnlConvWindow cw, ConvWindow(*init.node, x, ws));
      Int16ConvShape cs;
      cs.n = x[0], cs.c = x[1], cs.h = x[2], cs.w = x[3];
      cs.k = cout, cs.oh = y[2], cs.ow = y[3], cs.kh = ws[2], cs.kw = ws[3];
      cs.sh = cw.strides[0], cs.sw = cw.strides[1], cs.dh = cw.dilations[0] + 1, cs.dw = cw.dilations[1] + 1;
      cs.pad_top = cw.pads_begin[0], cs.pad_left = cw.pads_begin[1];
      cs.pad_bottom = cw.pads_end[0], cs.pad_right = cw.pads_end[1];
      cs.groups = group;
      auto conv = std::make_shared<Int16Conv>();
      if (conv->Plan(cs, Int16WinogradEnabled())) {
        // The packing depends on the channels, the window and the form, not
        // on the input's extents: one per weight for every plan of a
        // model with dynamic shapes.
        const std::string key = std::string("qconv-i16:") + (u8w ? "u8:" : "s8:") + conv->WeightKey();
        auto pack = [&] {
          auto packed = std::make_shared<Int16Conv>(*conv);
          packed->PackWeights(ShiftedWeights(*w, u8w).data());
          w->ReleasePages();
          return packed;
        };
        i16_packed_ = init.prepack_cache ? init.prepack_cache->Get<Int16Conv>(w->data(), key, pack) : pack();
        if (conv->ShareWeights(*i16_packed_)) i16_ = conv;
      }
    }
    if (f32_ && !f32_allowed && !i16_) return false;
    // oneDNN's convolution stores an s32 result through float: exact only
    // while every sum it forms stays within 2^24 (|x|, |x_zp| <= 255). A
    // float32 destination is float(sum) itself, the Cast the graph had.
    if (integer && !rescale && !i16_ && !SumsFitFloat(*w, u8w, cout)) return false;
    rescale_ = rescale;
    if (rescale) {
      if (!epilogue_.Init(init).ok()) return false;  // the fallback names the activation
      y_outer_ = y[0];
      y_inner_ = NumElements(y) / std::max<std::int64_t>(1, y[0] * y[1]);
      cout_ = cout;
      nhwc_ = nhwc;
      // A quantizing reader of the output: report its range (with
      // kiln.sum, ResidualKernel reports the range of the sum instead).
      if (init.node->GetInt(ops::kSumAttr, 0) != 1) range_ = OfferedRange(init);
    }
    std::vector<float> scales;
    if (!integer) {
      const float xs = init.const_input(1)->data_as<float>()[0], ys = init.const_input(6)->data_as<float>()[0];
      const HostTensor* wsc = init.const_input(4);
      for (std::int64_t i = 0; i < NumElements(wsc->shape()); ++i) scales.push_back(xs * wsc->data_as<float>()[i] / ys);
      for (float v : scales) {
        if (!std::isfinite(v)) return false;  // the reference kernel defines what this gives
      }
      const HostTensor* xzp = init.const_input(2);
      const HostTensor* yzp = init.const_input(7);
      src_zp_ = init.inputs[0].dtype == DType::kUInt8 ? xzp->data_as<std::uint8_t>()[0] : xzp->data_as<std::int8_t>()[0];
      dst_zp_ = init.outputs[0].dtype == DType::kUInt8 ? yzp->data_as<std::uint8_t>()[0] : yzp->data_as<std::int8_t>()[0];
    }
    // What the float32 route needs (used only on it).
    x_type_ = init.inputs[0].dtype;
    out_type_ = init.outputs[0].dtype;
    scales_ = scales;
    nhwc_ = nhwc;
    cout_ = cout;
    x_count_ = NumElements(x);
    y_batch_ = y[0];
    y_inner_ = NumElements(y) / std::max<std::int64_t>(1, y[0] * y[1]);
    KILN_ASSIGN_OR_RETURN(const DnnlConvWindow win, ConvWindow(*init.node, x, ws));
    const dnnl::memory::dims &strides = win.strides, &dil = win.dilations, &pl = win.pads_begin, &pr = win.pads_end;
    const Shape wg = GroupedWeights(ws, group);
    using tag = dnnl::memory::format_tag;
    if (qdw_ && !integer) {  // the requantisation's factors, tiled over whole rows (TilePeriod; else a row)
      std::vector<float> per_channel(static_cast<std::size_t>(cout), scales.empty() ? 0.f : scales[0]);
      if (scales.size() == static_cast<std::size_t>(cout)) per_channel = scales;
      qdw_period_ = TilePeriod(cout, 32);
      if (qdw_period_ == 0) qdw_period_ = cout;
      TileRows(per_channel.data(), cout, qdw_period_, &qdw_st_);
      if (!fbias_.empty()) TileRows(fbias_.data(), cout, qdw_period_, &qdw_bt_);
    }
    if (i16_ || qdw_) return true;  // no oneDNN primitive
    bool ok = false;
    Status st = DnnlCall(integer ? "ConvInteger" : "QLinearConv", [&] {
      auto any = [](const Shape& s, dt t) {
        return dnnl::memory::desc(dnnl::memory::dims(s.begin(), s.end()), t, dnnl::memory::format_tag::any);
      };
      dt xt{}, yt{}, wt{};
      dnnl::memory::desc b_md;
      // ConvInteger's is read at each run, unless the graph proves it 0.
      const bool src_zp_attr = integer ? !src_zp_zero_ : src_zp_ != 0, dst_zp_attr = !integer && dst_zp_ != 0;
      // The descriptor and primitive for the route f32_ names.
      auto describe = [&](dnnl::primitive_attr* attr) {
        xt = f32_ ? dt::f32 : init.inputs[0].dtype == DType::kUInt8 ? dt::u8 : dt::s8;
        yt = f32_ || rescale ? dt::f32 : integer ? dt::s32 : init.outputs[0].dtype == DType::kUInt8 ? dt::u8 : dt::s8;
        wt = f32_ ? dt::f32 : dt::s8;
        src_plain_ = nhwc ? dnnl::memory::desc(dnnl::memory::dims(x.begin(), x.end()), xt, tag::nhwc) : PlainDesc(x, xt);
        dst_plain_ = nhwc ? dnnl::memory::desc(dnnl::memory::dims(y.begin(), y.end()), yt, tag::nhwc) : PlainDesc(y, yt);
        *attr = dnnl::primitive_attr();
        if (!f32_) {
          if (!integer) attr->set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
          // A zero point of 0 (QLinearConv's are constants) sets no
          // attribute: oneDNN's kernels without zero points are faster
          // (its brdgmm depthwise kernel has none; MobileNetV2's depthwise
          // layers 0.7-0.85 of the time, 1 thread, Zen 5).
          if (src_zp_attr) attr->set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
          if (dst_zp_attr) attr->set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
        }
        *attr = UserScratchpad(*attr);
        b_md = has_bias ? PlainDesc({cout}, f32_ ? dt::f32 : dt::s32) : dnnl::memory::desc();
        return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               f32_ && nhwc ? src_plain_ : any(x, xt), any(wg, wt), b_md,
                                               f32_ && nhwc ? dst_plain_ : any(y, yt), strides, dil, pl, pr);
      };
      dnnl::primitive_attr attr;
      dnnl::convolution_forward::desc d = describe(&attr);
      dnnl::convolution_forward::primitive_desc pd(d, attr, DnnlEngine());
      if (dw_int8 && !DepthwiseInt8Impl(pd.impl_info_str())) {
        if (!f32_allowed) return;  // ok stays false: the reference kernel runs it
        f32_ = true;
        d = describe(&attr);
        pd = dnnl::convolution_forward::primitive_desc(d, attr, DnnlEngine());
      }
      if (!f32_) SkipAmxWhereItLoses(&pd, d, attr, ws, group, NumElements(y));
      prim_ = dnnl::convolution_forward(pd);
      src_md_ = pd.src_desc();
      dst_md_ = pd.dst_desc();
      src_ = dnnl::memory(src_md_, DnnlEngine(), nullptr);
      dst_ = dnnl::memory(dst_md_, DnnlEngine(), nullptr);
      auto pack_for = [&](const dnnl::memory::desc& wmd) {
        // int8 weights as they are; uint8 with zero point 128 shifted to
        // int8; on the float32 route the same values as float.
        std::vector<std::int8_t> s8 = ShiftedWeights(*w, u8w);
        std::vector<float> f(f32_ ? s8.size() : 0);
        for (std::size_t i = 0; i < f.size(); ++i) f[i] = s8[i];
        auto packed = std::make_shared<dnnl::memory>(wmd, DnnlEngine());
        dnnl::memory plain(PlainDesc(wg, wt), DnnlEngine(), f32_ ? static_cast<void*>(f.data()) : s8.data());
        dnnl::reorder(plain, *packed).execute(DnnlStream(), plain, *packed);
        DnnlStream().wait();
        w->ReleasePages();  // the packed copy replaces the mapped pages (a second layout reads them again)
        return packed;
      };
      // Packed once per layout (the zero-point compensation oneDNN keeps
      // with the weights is part of the key).
      auto packed_for = [&](const dnnl::memory::desc& wmd) {
        std::string layout = PackedLayoutKey(wmd);
        if (!layout.empty()) layout = std::string(f32_ ? "qconv-f32:" : "qconv:") + (u8w ? "u8:" : "s8:") + layout;
        auto pack = [&] { return pack_for(wmd); };
        return init.prepack_cache ? init.prepack_cache->Get<dnnl::memory>(w->data(), layout, pack) : pack();
      };
      packed_ = packed_for(pd.weights_desc());
      scratch_ = ScratchpadFor(pd);
      src_zp_mem_ = dnnl::memory(PlainDesc({1}, dt::s32), DnnlEngine(), &src_zp_);
      dst_zp_mem_ = dnnl::memory(PlainDesc({1}, dt::s32), DnnlEngine(), &dst_zp_);
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, *packed_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, scratch_.mem}};
      if (!f32_ && src_zp_attr) args_[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = src_zp_mem_;
      if (!f32_ && dst_zp_attr) args_[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = dst_zp_mem_;
      if (has_bias) {
        args_[DNNL_ARG_BIAS] = dnnl::memory(b_md, DnnlEngine(), f32_ ? static_cast<void*>(fbias_.data()) : bias_.data());
      }
      // A depthwise ConvInteger also gets the primitive without the zero
      // point, run when this run's zero point is 0 (DynamicQuantizeLinear's
      // for a ReLU's output): oneDNN has faster kernels without zero points
      // (brdgmm for depthwise; MobileNetV2's depthwise layers 0.7-0.85 of
      // the time, 1 thread, Zen 5). Its own packed weights (a depthwise
      // layer's are small), and only where it reads and writes the same
      // layouts as the first.
      if (integer && !f32_ && depthwise && src_zp_attr) {
        const dnnl::primitive_attr plain_attr = UserScratchpad();
        dnnl::convolution_forward::primitive_desc zpd(d, plain_attr, DnnlEngine());
        // Without VNNI only an implementation DepthwiseInt8Impl knows is exact.
        if (zpd.src_desc() == src_md_ && zpd.dst_desc() == dst_md_ &&
            (pairs_exact || DepthwiseInt8Impl(zpd.impl_info_str()))) {
          zero_zp_prim_ = dnnl::convolution_forward(zpd);
          zero_zp_packed_ = packed_for(zpd.weights_desc());
          zero_zp_scratch_ = ScratchpadFor(zpd);
          zero_zp_args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, *zero_zp_packed_}, {DNNL_ARG_DST, dst_},
                           {DNNL_ARG_SCRATCHPAD, zero_zp_scratch_.mem}};
        }
      }
      if (src_md_ != src_plain_) to_src_ = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), src_plain_, DnnlEngine(), src_md_));
      if (dst_md_ != dst_plain_) from_dst_ = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), dst_md_, DnnlEngine(), dst_plain_));
      ok = true;
    });
    if (!st.ok()) return false;  // oneDNN has no such primitive: the reference kernel runs it
    return ok;
  }

  Status Run(const KernelArgs& a) override { return RunWith(a, nullptr); }
  // Whether RunWith takes a float32 input 0 (kiln.quantize_input): the
  // int16-product kernel's rescaled route, which quantizes it row by row.
  // Or the float32 route of such an op, which quantizes it into its
  // float32 copy.
  bool TakesFloatInput() const { return rescale_ && (i16_ || (f32_ && float_in_)); }
  // x_scale: input 0 is float32, quantized with *x_scale and input 2
  // (TakesFloatInput routes only).
  Status RunWith(const KernelArgs& a, const float* x_scale) {
    ReadSrcZeroPoint(a, src_zp_in_, &src_zp_);
    if (x_scale && !TakesFloatInput()) return Error(StatusCode::kInternal, "float32 input on an integer route");
    if (src_zp_zero_ && src_zp_ != 0) {  // SrcZeroPointAlwaysZero was wrong: refuse rather than miscompute
      // (the executor adds the node's name)
      return Error(StatusCode::kInternal, "activation zero point ", src_zp_, " where the graph gives 0");
    }
    // Channels-last copies of the activations: per thread, reused.
    thread_local std::vector<std::uint8_t> src_buf, dst_buf;
    // The float32 route's centred input and float sums.
    thread_local std::vector<float> xf, yf;
    dnnl::stream& s = DnnlStream();
    const void* x = a.in(0);
    void* y = a.out(0);
    if (i16_) {
      // ConvInteger (rescaled): float(sum) into the output, rescaled below;
      // QLinearConv: requantised as it is stored.
      Int16ConvOut o;
      thread_local std::vector<float> sv, bv;
      if (rescale_) {  // act(float(sum) * S + B) as it is stored, and the range
        epilogue_.ToInt16Out(a, cout_, sv, bv, o);
        if (range_) {
          o.range_min = &range_->min;
          o.range_max = &range_->max;
        }
      } else {
        o.q = a.out(0);
        o.q_signed = out_type_ == DType::kInt8;
        o.scales = scales_.data();
        o.scale_count = static_cast<std::int64_t>(scales_.size());
        o.zp = static_cast<float>(dst_zp_);
      }
      i16_->Run(x, x_type_ == DType::kInt8, src_zp_, bias_.empty() ? nullptr : bias_.data(), o, x_scale);
      if (range_) range_->valid = true;
      return Status::Ok();
    }
    if (qdw_) return RunDepthwise(a, x_scale);
    RunOneDnn(a, x, y, s, src_buf, dst_buf, xf, yf, x_scale);
    if (rescale_) {  // float(sum) -> act(float(sum) * S + B), in place
      thread_local std::vector<float> sv, bv;
      epilogue_.Load(a, cout_, sv, bv);
      epilogue_.ApplyInPlace(a.out_as<float>(0), sv.data(), bv.data(), y_outer_, cout_, y_inner_, nhwc_, range_.get());
    }
    if (f32_ && !rescale_) {
      if (nhwc_) Requantize(out_type_, yf.data(), a.out(0), y_batch_ * y_inner_, cout_, 1, scales_, static_cast<float>(dst_zp_));
      else Requantize(out_type_, yf.data(), a.out(0), y_batch_, cout_, y_inner_, scales_, static_cast<float>(dst_zp_));
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return std::max(scratch_.bytes, zero_zp_scratch_.bytes); }

 private:
  // QuantDepthwise's route: x's rows quantized (kiln.quantize_input) or
  // widened into the ring and convolved a few rows at a time; each output
  // row rescaled in place (kiln.rescale) or requantised into the 8-bit
  // output as it is made.
  Status RunDepthwise(const KernelArgs& a, const float* x_scale) {
    if (float_in_ != (x_scale != nullptr)) {
      return Error(StatusCode::kInternal, "a depthwise layer's input is not of the type it was planned for");
    }
    const QuantDepthwiseShape& ds = qdw_->shape();
    const std::int64_t in_row = ds.w * ds.c, h = ds.h, values = ds.ow * ds.c, channels = ds.c;
    const std::int32_t zp = src_zp_;
    QuantDepthwise::RowSource source;
    auto widened = [&](const auto* x) {
      return [x, zp, in_row, h](std::int64_t n, std::int64_t iy, float* dst) {
        CenterToFloat(x + (n * h + iy) * in_row, dst, in_row, static_cast<float>(zp));
      };
    };
    if (x_scale) source = qdw_->QuantizedRows(a.in_as<float>(0), *x_scale, zp);
    else if (x_type_ == DType::kUInt8) source = widened(a.in_as<std::uint8_t>(0));
    else source = widened(a.in_as<std::int8_t>(0));
    if (rescale_) {
      thread_local std::vector<float> sv, bv;
      epilogue_.Load(a, cout_, sv, bv);
      const float *sp = sv.data(), *bp = bv.data();
      const RescaleEpilogue& epi = epilogue_;
      qdw_->Run(source, a.out_as<float>(0),
                [sp, bp, channels, &epi](std::int64_t, float* row, std::int64_t pixels, float* lo, float* hi) {
                  epi.ApplyRows(row, sp, bp, pixels, channels, lo, hi);
                },
                range_ ? &range_->min : nullptr, range_ ? &range_->max : nullptr);
      if (range_) range_->valid = true;
      return Status::Ok();
    }
    // QLinearConv: each row of sums requantised over runs of the tiled factors.
    const float yzp = static_cast<float>(dst_zp_);
    void* out = a.out(0);
    const bool u8 = out_type_ == DType::kUInt8;
    const std::int64_t period = qdw_period_;
    const float* st = qdw_st_.data();
    const float* bt = qdw_bt_.empty() ? nullptr : qdw_bt_.data();
    qdw_->Run(source, nullptr, [=](std::int64_t r, float* sums, std::int64_t pixels, float*, float*) {
      auto store = [&](auto* o) {
        const QBounds qb = Bounds<std::remove_pointer_t<decltype(o)>>(yzp);
        const std::int64_t n = pixels * channels;
        for (std::int64_t i = 0; i < n; i += period) RequantRun(sums + i, st, 0.f, o + i, std::min(period, n - i), qb, yzp, bt);
      };
      if (u8) store(static_cast<std::uint8_t*>(out) + r * values);
      else store(static_cast<std::int8_t*>(out) + r * values);
    });
    return Status::Ok();
  }
  // The oneDNN primitive's part of Run: the float32 route's centred input,
  // layout reorders, the primitive.
  void RunOneDnn(const KernelArgs& a, const void* x, void* y, dnnl::stream& s, std::vector<std::uint8_t>& src_buf,
                 std::vector<std::uint8_t>& dst_buf, std::vector<float>& xf, std::vector<float>& yf,
                 const float* x_scale) {
    if (f32_) {
      // Grown only: a resize down and up again would zero-fill each run.
      if (xf.size() < static_cast<std::size_t>(x_count_)) xf.resize(static_cast<std::size_t>(x_count_));
      if (x_scale) {  // float32 x (kiln.quantize_input): quantized, minus the zero point
        const float* xv = static_cast<const float*>(x);
        float* o = xf.data();
        const float sc = *x_scale;
        const std::int32_t zp = src_zp_;
        ParallelFor(x_count_, 16384, [&](std::int64_t b, std::int64_t e) { QuantizeCenteredFloat(xv + b, o + b, e - b, sc, zp); });
      } else {
        CenterToFloat(x_type_, x, xf.data(), x_count_, static_cast<float>(src_zp_));
      }
      x = xf.data();
      if (!rescale_) {  // QLinearConv: float sums, requantised below
        if (yf.size() < dst_plain_.get_size() / sizeof(float)) yf.resize(dst_plain_.get_size() / sizeof(float));
        y = yf.data();
      }
    }
    if (to_src_) {
      if (src_buf.size() < src_md_.get_size()) src_buf.resize(src_md_.get_size());
      dnnl::memory plain(src_plain_, DnnlEngine(), const_cast<void*>(x));
      src_.set_data_handle(src_buf.data());
      to_src_.execute(s, plain, src_);
    } else {
      src_.set_data_handle(const_cast<void*>(x));
    }
    if (from_dst_) {
      if (dst_buf.size() < dst_md_.get_size()) dst_buf.resize(dst_md_.get_size());
      dst_.set_data_handle(dst_buf.data());
    } else {
      dst_.set_data_handle(y);
    }
    if (zero_zp_packed_ && src_zp_ == 0) {
      zero_zp_scratch_.Bind(a.ctx);
      zero_zp_prim_.execute(s, zero_zp_args_);
    } else {
      scratch_.Bind(a.ctx);
      prim_.execute(s, args_);
    }
    if (from_dst_) {
      dnnl::memory plain(dst_plain_, DnnlEngine(), y);
      from_dst_.execute(s, dst_, plain);
    }
    s.wait();
  }

  dnnl::convolution_forward prim_;
  // The exact int16-product kernel (no VNNI, channels-last, group 1), in
  // place of the primitive (f32_ stays set; the kernel requantises).
  std::shared_ptr<Int16Conv> i16_;
  // The prepack cache's entry for i16_'s packed weights, held while this
  // kernel lives (the cache keeps only what some kernel holds).
  std::shared_ptr<const Int16Conv> i16_packed_;
  // kiln.quantize_input depthwise layers without VNNI (f32_ stays set).
  std::shared_ptr<QuantDepthwise> qdw_;
  // Its QLinearConv requantisation's scales and float32 bias (none: empty),
  // tiled over qdw_period_ values (whole rows).
  std::int64_t qdw_period_ = 0;
  std::vector<float> qdw_st_, qdw_bt_;
  // Depthwise ConvInteger: the primitive without a zero point, its weights
  // and arguments, for runs whose zero point is 0 (zero_zp_packed_ set).
  dnnl::convolution_forward zero_zp_prim_;
  std::shared_ptr<dnnl::memory> zero_zp_packed_;
  Scratchpad zero_zp_scratch_;
  std::unordered_map<int, dnnl::memory> zero_zp_args_;
  dnnl::reorder to_src_, from_dst_;
  dnnl::memory::desc src_md_, dst_md_, src_plain_, dst_plain_;
  dnnl::memory src_, dst_, src_zp_mem_, dst_zp_mem_;
  // kiln.rescale: the epilogue and the output's extents (batch, positions
  // per channel; cout_, nhwc_ below).
  bool rescale_ = false;
  RescaleEpilogue epilogue_;
  std::shared_ptr<device::ValueRange> range_;  // reported for a DynamicQuantizeLinear reading the output
  std::int64_t y_outer_ = 0;
  std::shared_ptr<dnnl::memory> packed_;
  std::vector<std::int32_t> bias_;
  std::int32_t src_zp_ = 0, dst_zp_ = 0;
  ZeroPointInput src_zp_in_;
  bool src_zp_zero_ = false;  // ConvInteger: SrcZeroPointAlwaysZero (no zero-point attribute)
  // The float32 route (f32_): types, per-channel scales and the output's
  // extents (batch, channels, positions per channel). float_in_: the node
  // quantizes a float32 input (kiln.quantize_input).
  bool f32_ = false, nhwc_ = false, float_in_ = false;
  DType x_type_ = DType::kUndefined, out_type_ = DType::kUndefined;
  std::vector<float> scales_, fbias_;
  std::int64_t cout_ = 0, x_count_ = 0, y_batch_ = 0, y_inner_ = 0;
  std::unordered_map<int, dnnl::memory> args_;
  Scratchpad scratch_;
};

// QLinearMatMul on oneDNN's int8 matmul when B is a constant 2-D [K, N]
// (weights: int8 with zero point 0, or uint8 with 128, shifted once) and
// every scale and zero point is a constant, A's and Y's per tensor, B's per
// tensor or per column: y = saturate(round(a_scale * b_scale[n] / y_scale *
// sum (a - a_zp) * b) + y_zp), A's leading dims flattened into rows.
class DnnlQMatMulKernel : public Kernel {
 public:
  // `integer`: MatMulInteger (A, B, a_zp?, b_zp?): the int32 sums, with
  // A's zero point (one value) read at run time. `dequantize` (QLinearMatMul
  // with kiln.dequantize): the requantised result dequantized with the same
  // y scale and zero point, plus the bias (input 8, a constant), as float32.
  // `rescale` (with `integer`: MatMulInteger with kiln.rescale): the sums
  // minus zp * colsum converted to float32 and rescaled, act(float(sum) *
  // S + B) (RescaleEpilogue's steps), in the same pass.
  Result<bool> Init(const KernelInit& init, bool integer = false, bool dequantize = false, bool rescale = false) {
    using dt = dnnl::memory::data_type;
    if (rescale) {
      if (!integer || init.outputs[0].dtype != DType::kFloat32 || init.inputs.size() < 5 || !init.inputs[4].present()) {
        return false;
      }
      if (!epilogue_.Init(init).ok()) return false;  // the fallback names the activation
      rescale_ = true;
    }
    const int bi = integer ? 1 : 3;
    if (integer) {
      if (!RuntimeSrcZeroPoint(init, &src_zp_in_)) return false;
    } else {
      for (int i : {1, 2, 3, 4, 5, 6, 7}) {
        if (!init.const_input(i)) return false;
      }
      if (NumElements(init.const_input(1)->shape()) != 1 || NumElements(init.const_input(2)->shape()) != 1) return false;
    }
    const HostTensor* b = init.const_input(bi);
    const Shape& as = init.inputs[0].shape;
    if (!b || b->shape().size() != 2 || as.size() < 2) return false;
    const std::int64_t k = b->shape()[0], n = b->shape()[1];
    const std::int64_t rows = NumElements(as) / std::max<std::int64_t>(k, 1);
    if (as.back() != k || rows <= 0 || n <= 0 || k <= 0) return false;
    const bool u8w = b->dtype() == DType::kUInt8;
    if (!WeightZeroPointShiftable(init, integer ? 3 : 5, u8w)) return false;
    // oneDNN's int8 where its pairs are exact, else QLinearMatMul's float32
    // route (MatMulInteger's int32 sums would not stay exact there).
    f32_ = !Int8PairsExact(*b, u8w, init.inputs[0].dtype);
    // Without VNNI: Kiln's exact int16-product kernel (int16_conv.h) as a
    // 1x1 convolution of one row of `rows` pixels (A's rows, k channels)
    // into n channels, in place of both the float32 route and the int8
    // primitive; its sums are exact (A's zero point subtracted as it
    // widens), so every form below takes them as the int8 route's with no
    // zero-point correction. $KILN_INT8_INT16=off keeps the float32 route.
    if (f32_ && k >= kInt16MinReduction && Int16ConvAvailable() && Int16Enabled()) {
      Int16ConvShape cs;
      cs.n = cs.h = cs.oh = 1;
      cs.w = cs.ow = rows;
      cs.c = k;
      cs.k = n;
      auto conv = std::make_shared<Int16Conv>();
      if (conv->Plan(cs)) {
        auto pack = [&] {
          auto packed = std::make_shared<Int16Conv>(*conv);
          std::vector<std::int8_t> t(static_cast<std::size_t>(k * n));  // B^T: [n, k] (OIHW, 1x1)
          for (std::int64_t p = 0; p < k; ++p) {
            for (std::int64_t j = 0; j < n; ++j) {
              t[static_cast<std::size_t>(j * k + p)] = static_cast<std::int8_t>(ShiftedWeight(*b, u8w, p * n + j));
            }
          }
          packed->PackWeights(t.data());
          return packed;
        };
        // Keyed without A's row count (WeightKey): one packing for every plan.
        const std::string key = std::string("qmatmul-i16:") + (u8w ? "u8:" : "s8:") + conv->WeightKey();
        i16_packed_ = init.prepack_cache ? init.prepack_cache->Get<Int16Conv>(b->data(), key, pack) : pack();
        if (conv->ShareWeights(*i16_packed_)) {
          i16_ = conv;
          f32_ = false;
          a_signed_ = init.inputs[0].dtype == DType::kInt8;
          integer_ = integer;
        }
      }
    }
    if (f32_ && integer) return false;
    std::vector<float> scales;
    if (!integer) {
      const float a_s = init.const_input(1)->data_as<float>()[0], y_s = init.const_input(6)->data_as<float>()[0];
      const HostTensor* bs = init.const_input(4);
      for (std::int64_t i = 0; i < NumElements(bs->shape()); ++i) {
        scales.push_back(a_s * bs->data_as<float>()[i] / y_s);
        if (!std::isfinite(scales.back())) return false;
      }
    }
    const DType a_type = init.inputs[0].dtype, y_type = init.outputs[0].dtype;
    const dt at = f32_ ? dt::f32 : a_type == DType::kUInt8 ? dt::u8 : dt::s8;
    if (dequantize && y_type != DType::kFloat32) return false;
    const dt yt = f32_ ? dt::f32 : dt::s32;  // int8: the sums (MatMulInteger's output, else requantised below)
    const dt wt = f32_ ? dt::f32 : dt::s8;
    if (!integer) {
      src_zp_ = a_type == DType::kUInt8 ? init.const_input(2)->data_as<std::uint8_t>()[0] : init.const_input(2)->data_as<std::int8_t>()[0];
      const DType zt = init.inputs[7].dtype;
      dst_zp_ = zt == DType::kUInt8 ? init.const_input(7)->data_as<std::uint8_t>()[0] : init.const_input(7)->data_as<std::int8_t>()[0];
    }
    if (f32_) {
      a_type_ = a_type;
      out_type_ = y_type;
      scales_ = scales;
      rows_ = rows;
      k_ = k;
      n_ = n;
    }
    if (dequantize) {
      if (integer || f32_ || init.outputs[0].dtype != DType::kFloat32) return false;
      if (init.inputs.size() > 8 && init.inputs[8].present()) {
        const HostTensor* bias = init.const_input(8);
        const std::int64_t nb = bias ? NumElements(bias->shape()) : 0;
        if (!bias || bias->dtype() != DType::kFloat32 || (nb != 1 && nb != n)) return false;
        for (std::int64_t j = 0; j < n; ++j) bias_.push_back(bias->data_as<float>()[nb == 1 ? 0 : j]);
      }
    }
    // QLinearMatMul on the int8 route requantises itself (oneDNN's output
    // scales and zero points cost it a third more per call at 32 rows, and
    // the dequantizing form would take a second pass), from the same int32
    // sums MatMulInteger takes.
    own_requant_ = !integer && !f32_;
    if (own_requant_ && scales.size() != 1 && static_cast<std::int64_t>(scales.size()) != n) return false;
    if (integer || own_requant_) {
      // No zero point in the primitive (its s32 result then stays integer):
      // sum (a - zp) b = sum a b - zp * colsum[n], corrected after it, in
      // int32. Column sums of the int8 weights, exact.
      colsum_.assign(static_cast<std::size_t>(n), 0);
      for (std::int64_t p = 0; p < k; ++p) {
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int64_t i = p * n + j;
          colsum_[j] += u8w ? static_cast<int>(b->data_as<std::uint8_t>()[i]) - 128 : b->data_as<std::int8_t>()[i];
        }
      }
      rows_ = rows;
      n_ = n;
      if (i16_) std::fill(colsum_.begin(), colsum_.end(), 0);  // its sums need no correction
    }
    if (own_requant_) {
      // The int32 wrap of zp * colsum (as MatMulInteger subtracts it),
      // the per-column scales, the output's bounds and zero point.
      zp_colsum_.resize(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) {
        zp_colsum_[j] = static_cast<std::int32_t>(static_cast<std::uint32_t>(src_zp_ * colsum_[j]));
      }
      col_scales_.resize(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) col_scales_[j] = scales[scales.size() == 1 ? 0 : j];
      dequantize_ = dequantize;
      out_type_ = dequantize ? init.inputs[7].dtype : y_type;
      const HostTensor* yzp = init.const_input(7);
      out_zp_ = out_type_ == DType::kUInt8 ? yzp->data_as<std::uint8_t>()[0] : yzp->data_as<std::int8_t>()[0];
      y_scale_ = init.const_input(6)->data_as<float>()[0];
    }
    if (i16_) return true;  // no oneDNN primitive
    bool ok = false;
    Status st = DnnlCall(integer ? "MatMulInteger" : "QLinearMatMul", [&] {
      dnnl::primitive_attr attr;
      attr = UserScratchpad(attr);
      const dnnl::memory::desc a_md = PlainDesc({rows, k}, at), y_md = PlainDesc({rows, n}, yt);
      dnnl::matmul::desc d(a_md, dnnl::memory::desc({k, n}, wt, dnnl::memory::format_tag::any), y_md);
      dnnl::matmul::primitive_desc pd(d, attr, DnnlEngine());
      prim_ = dnnl::matmul(pd);
      src_ = dnnl::memory(a_md, DnnlEngine(), nullptr);
      dst_ = dnnl::memory(y_md, DnnlEngine(), nullptr);
      auto pack = [&] {
        std::vector<std::int8_t> s8 = ShiftedWeights(*b, u8w);
        std::vector<float> f(f32_ ? s8.size() : 0);
        for (std::size_t i = 0; i < f.size(); ++i) f[i] = s8[i];
        auto packed = std::make_shared<dnnl::memory>(pd.weights_desc(), DnnlEngine());
        dnnl::memory plain(PlainDesc({k, n}, wt), DnnlEngine(), f32_ ? static_cast<void*>(f.data()) : s8.data());
        dnnl::reorder(plain, *packed).execute(DnnlStream(), plain, *packed);
        DnnlStream().wait();
        return packed;
      };
      std::string layout = PackedLayoutKey(pd.weights_desc());
      if (!layout.empty()) layout = std::string(f32_ ? "qmatmul-f32:" : "qmatmul:") + (u8w ? "u8:" : "s8:") + layout;
      packed_ = init.prepack_cache ? init.prepack_cache->Get<dnnl::memory>(b->data(), layout, pack) : pack();
      scratch_ = ScratchpadFor(pd);
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, *packed_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, scratch_.mem}};
      ok = true;
    });
    if (!st.ok()) return false;
    return ok;
  }

  Status Run(const KernelArgs& a) override { return RunWith(a, nullptr); }
  // As DnnlQConvKernel's: the int16-product kernel's rescaled route takes a
  // float32 A (kiln.quantize_input), quantized with *x_scale and input 2.
  bool TakesFloatInput() const { return i16_ && rescale_; }
  Status RunWith(const KernelArgs& a, const float* x_scale) {
    ReadSrcZeroPoint(a, src_zp_in_, &src_zp_);
    if (x_scale && !TakesFloatInput()) return Error(StatusCode::kInternal, "float32 input on an integer route");
    if (f32_) {  // A - zp as float32, the float matmul, each sum requantised
      thread_local std::vector<float> af, yf;
      if (af.size() < static_cast<std::size_t>(rows_ * k_)) af.resize(static_cast<std::size_t>(rows_ * k_));
      if (yf.size() < static_cast<std::size_t>(rows_ * n_)) yf.resize(static_cast<std::size_t>(rows_ * n_));
      CenterToFloat(a_type_, a.in(0), af.data(), rows_ * k_, static_cast<float>(src_zp_));
      src_.set_data_handle(af.data());
      dst_.set_data_handle(yf.data());
      scratch_.Bind(a.ctx);
      prim_.execute(DnnlStream(), args_);
      DnnlStream().wait();
      Requantize(out_type_, yf.data(), a.out(0), rows_, n_, 1, scales_, static_cast<float>(dst_zp_));
      return Status::Ok();
    }
    if (i16_ && (rescale_ || integer_ || (own_requant_ && !dequantize_))) {
      // Rescaled MatMulInteger's act(float(sum) * S + B), MatMulInteger's
      // int32 sums, or QLinearMatMul requantised, as stored.
      Int16ConvOut o;
      thread_local std::vector<float> sv, bv;
      if (rescale_) {
        epilogue_.ToInt16Out(a, n_, sv, bv, o);
      } else if (integer_) {
        o.i = a.out_as<std::int32_t>(0);
      } else {
        o.q = a.out(0);
        o.q_signed = out_type_ == DType::kInt8;
        o.scales = col_scales_.data();
        o.scale_count = n_;
        o.zp = static_cast<float>(out_zp_);
      }
      i16_->Run(a.in(0), a_signed_, src_zp_, nullptr, o, x_scale);
      return Status::Ok();
    }
    if (!i16_) src_.set_data_handle(const_cast<void*>(a.in(0)));
    if (rescale_) {
      const std::int32_t* ap = SumsToBuffer(a);
      thread_local std::vector<std::int32_t> zc;
      thread_local std::vector<float> sv, bv;
      zc.resize(static_cast<std::size_t>(n_));
      for (std::int64_t j = 0; j < n_; ++j) {
        zc[j] = static_cast<std::int32_t>(static_cast<std::uint32_t>(std::int64_t{src_zp_} * colsum_[j]));
      }
      epilogue_.Load(a, n_, sv, bv);
      const std::int32_t* zp = zc.data();
      const float* s = sv.data();
      const float* b = bv.data();
      float* y = a.out_as<float>(0);
      const std::int64_t n = n_;
      ParallelFor(rows_, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          // sum (a - zp) b, wrapping as int32 does, converted once (the Cast)
          float* yr = y + r * n;
          const std::int32_t* ar = ap + r * n;
          for (std::int64_t j = 0; j < n; ++j) {
            yr[j] = static_cast<float>(static_cast<std::int32_t>(static_cast<std::uint32_t>(ar[j]) -
                                                                 static_cast<std::uint32_t>(zp[j])));
          }
          epilogue_.Span(yr, s, b, true, n);
        }
      });
      return Status::Ok();
    }
    if (own_requant_) {
      const std::int32_t* ap = SumsToBuffer(a);
      void* y = a.out(0);
      ParallelFor(rows_, std::max<std::int64_t>(1, 16384 / n_), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) RequantRow(ap + r * n_, y, r * n_);
      });
      return Status::Ok();
    }
    dst_.set_data_handle(a.out(0));
    scratch_.Bind(a.ctx);
    prim_.execute(DnnlStream(), args_);
    DnnlStream().wait();
    if (!colsum_.empty() && src_zp_ != 0) {  // MatMulInteger: minus zp * colsum, wrapping as int32 does
      auto* y = static_cast<std::uint32_t*>(a.out(0));
      const auto n = static_cast<std::int64_t>(colsum_.size());
      const std::int64_t zp = src_zp_;
      ParallelFor(rows_, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          for (std::int64_t j = 0; j < n; ++j) y[r * n + j] -= static_cast<std::uint32_t>(zp * colsum_[j]);
        }
      });
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_.bytes; }

 private:
  // The int8 matmul's int32 sums (no zero point) into a per-thread buffer.
  const std::int32_t* SumsToBuffer(const KernelArgs& a) {
    thread_local std::vector<std::int32_t> acc;
    if (acc.size() < static_cast<std::size_t>(rows_ * n_)) acc.resize(static_cast<std::size_t>(rows_ * n_));
    if (i16_) {  // the exact sums, A's zero point subtracted
      Int16ConvOut o;
      o.i = acc.data();
      i16_->Run(a.in(0), a_signed_, src_zp_, nullptr, o);
      return acc.data();
    }
    dst_.set_data_handle(acc.data());
    scratch_.Bind(a.ctx);
    prim_.execute(DnnlStream(), args_);
    DnnlStream().wait();
    return acc.data();
  }
  // One row of int32 sums a (minus zp * colsum) requantised as the
  // definition says, q = saturate(round_even(float(sum) * scale[j]) +
  // y_zp), into the output at element `at`; with dequantize_ the float32
  // (q - y_zp) * y_scale [+ bias[j]] instead (DequantizeLinear's and the
  // Add's steps, each rounded; q - y_zp is the rounded, clamped value).
  void RequantRow(const std::int32_t* a, void* y, std::int64_t at) const {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    const bool u8 = out_type_ == DType::kUInt8;
    const float lo = (u8 ? 0.f : -128.f) - static_cast<float>(out_zp_);
    const float hi = (u8 ? 255.f : 127.f) - static_cast<float>(out_zp_);
    std::int64_t j = avx2 ? RequantRowAvx2(a, y, at, lo, hi) : 0;
    for (; j < n_; ++j) {
      float v = static_cast<float>(static_cast<std::int32_t>(static_cast<std::uint32_t>(a[j]) -
                                                             static_cast<std::uint32_t>(zp_colsum_[j])));
      v = v * col_scales_[j];
      v = std::nearbyint(std::min(std::max(v, lo), hi));
      if (dequantize_) {
        float f = v * y_scale_;
        if (!bias_.empty()) f = f + bias_[j];
        static_cast<float*>(y)[at + j] = f;
      } else if (u8) {
        static_cast<std::uint8_t*>(y)[at + j] = static_cast<std::uint8_t>(static_cast<int>(v) + out_zp_);
      } else {
        static_cast<std::int8_t*>(y)[at + j] = static_cast<std::int8_t>(static_cast<int>(v) + out_zp_);
      }
    }
  }
  // RequantRow's steps 8 columns at a time; returns the columns done.
  __attribute__((target("avx2"))) std::int64_t RequantRowAvx2(const std::int32_t* a, void* y, std::int64_t at,
                                                              float lo, float hi) const {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), vys = _mm256_set1_ps(y_scale_);
    const __m256i vzp = _mm256_set1_epi32(out_zp_);
    const bool u8 = out_type_ == DType::kUInt8, bias = !bias_.empty();
    std::int64_t j = 0;
    for (; j + 8 <= n_; j += 8) {
      const __m256i s = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j)),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zp_colsum_.data() + j)));
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(col_scales_.data() + j));
      v = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(v, vlo), vhi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if (dequantize_) {
        __m256 f = _mm256_mul_ps(v, vys);
        if (bias) {
          asm("" : "+x"(f));  // no contraction with the add
          f = _mm256_add_ps(f, _mm256_loadu_ps(bias_.data() + j));
        }
        _mm256_storeu_ps(static_cast<float*>(y) + at + j, f);
        continue;
      }
      const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), vzp);  // within the type's range
      const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i b8 = u8 ? _mm_packus_epi16(w16, w16) : _mm_packs_epi16(w16, w16);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(static_cast<std::uint8_t*>(y) + at + j), b8);
    }
    return j;
  }

  dnnl::matmul prim_;
  // Without VNNI, the int16-product kernel in place of prim_ (colsum_ then
  // zero: its sums have A's zero point subtracted already).
  std::shared_ptr<Int16Conv> i16_;
  // The prepack cache's entry for i16_'s packed weights, held while this
  // kernel lives (the cache keeps only what some kernel holds).
  std::shared_ptr<const Int16Conv> i16_packed_;
  bool a_signed_ = false, integer_ = false;
  dnnl::memory src_, dst_;
  std::shared_ptr<dnnl::memory> packed_;
  std::int32_t src_zp_ = 0, dst_zp_ = 0;
  ZeroPointInput src_zp_in_;
  std::vector<std::int64_t> colsum_;  // MatMulInteger, and QLinearMatMul on the int8 route
  // QLinearMatMul on the int8 route (own_requant_): zp * colsum as int32,
  // per-column scales, the output's type and zero point (dequantize_: of
  // the requantised values), y scale and bias (dequantize_).
  bool own_requant_ = false, dequantize_ = false;
  bool rescale_ = false;  // MatMulInteger with kiln.rescale
  RescaleEpilogue epilogue_;
  std::vector<std::int32_t> zp_colsum_;
  std::vector<float> col_scales_, bias_;
  int out_zp_ = 0;
  float y_scale_ = 0.f;
  std::int64_t rows_ = 0, k_ = 0, n_ = 0;
  // The float32 route (f32_): types and per-column scales.
  bool f32_ = false;
  DType a_type_ = DType::kUndefined, out_type_ = DType::kUndefined;
  std::vector<float> scales_;
  std::unordered_map<int, dnnl::memory> args_;
  Scratchpad scratch_;
};

// ConvInteger / MatMulInteger where oneDNN's int8 is not exact: float32
// primitives over runs of the reduction (input channels, or rows of B)
// short enough that every partial sum is exact in float32 (255 * sum |w| <=
// 2^24 per output), each run's float sums converted to int32 and added, so
// the result is the exact int32 of the definition. A float32 primitive pads
// with 0.0 = x - x_zp, as the definition does.
// units x outs table of sum |w| per (unit, output) -> run boundaries
// {0, ..., units}; empty when one unit alone exceeds the bound.
std::vector<std::int64_t> ExactFloatRuns(const std::vector<std::int64_t>& absum, std::int64_t units, std::int64_t outs) {
  constexpr std::int64_t kLimit = (std::int64_t{1} << 24) / 255;
  std::vector<std::int64_t> cur(static_cast<std::size_t>(outs), 0), bounds = {0};
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t* row = absum.data() + u * outs;
    bool fits = true;
    for (std::int64_t o = 0; o < outs; ++o) {
      if (row[o] > kLimit) return {};  // every output checked: one unit alone must fit
      fits = fits && cur[o] + row[o] <= kLimit;
    }
    if (!fits) {
      bounds.push_back(u);
      std::fill(cur.begin(), cur.end(), 0);
    }
    for (std::int64_t o = 0; o < outs; ++o) cur[o] += row[o];
  }
  bounds.push_back(units);
  return bounds;
}

// Adds (or, for the first run, stores) float sums into the int32 output.
void AccumulateExact(const float* f, std::int32_t* y, std::int64_t n, bool first) {
  ParallelFor(n, 16384, [&](std::int64_t b, std::int64_t e) {
    if (first) {
      for (std::int64_t i = b; i < e; ++i) y[i] = static_cast<std::int32_t>(f[i]);
    } else {
      for (std::int64_t i = b; i < e; ++i) {
        y[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(y[i]) + static_cast<std::uint32_t>(static_cast<std::int32_t>(f[i])));
      }
    }
  });
}

class F32ConvIntegerKernel : public Kernel {
 public:
  Result<bool> Init(const KernelInit& init) {
    using dt = dnnl::memory::data_type;
    const HostTensor* w = init.const_input(1);
    if (!w || !RuntimeSrcZeroPoint(init, &zp_in_)) return false;
    const bool u8w = w->dtype() == DType::kUInt8;
    if (!WeightZeroPointShiftable(init, 3, u8w)) return false;
    x_ = init.inputs[0].shape;
    const Shape& ws = w->shape();
    const Shape& y = init.outputs[0].shape;
    if (x_.size() < 3 || x_.size() > 5 || ws.size() != x_.size()) return false;
    const std::int64_t cout = ws[0], group = init.node->GetInt("group", 1), cg = ws[1];
    std::int64_t taps = 1;
    for (std::size_t i = 2; i < ws.size(); ++i) taps *= ws[i];
    std::vector<std::int64_t> absum(static_cast<std::size_t>(cg * cout), 0);
    for (std::int64_t o = 0; o < cout; ++o) {
      for (std::int64_t c = 0; c < cg; ++c) {
        std::int64_t sum = 0;
        for (std::int64_t t = 0; t < taps; ++t) sum += std::abs(ShiftedWeight(*w, u8w, (o * cg + c) * taps + t));
        absum[c * cout + o] = sum;
      }
    }
    bounds_ = ExactFloatRuns(absum, cg, cout);
    // Grouped convolutions only in one run (a run is a slice of every group's channels).
    if (bounds_.empty() || (group > 1 && bounds_.size() != 2)) return false;
    x_type_ = init.inputs[0].dtype;
    y_count_ = NumElements(y);
    KILN_ASSIGN_OR_RETURN(const DnnlConvWindow win, ConvWindow(*init.node, x_, ws));
    const dnnl::memory::dims &strides = win.strides, &dil = win.dilations, &pl = win.pads_begin, &pr = win.pads_end;
    bool ok = true;
    Status st = DnnlCall("ConvInteger", [&] {
      for (std::size_t r = 0; r + 1 < bounds_.size(); ++r) {
        const std::int64_t c0 = bounds_[r], cc = bounds_[r + 1] - c0;
        Shape xr = x_, wr = ws;
        xr[1] = group > 1 ? x_[1] : cc;
        wr[1] = cc;
        const Shape wg = GroupedWeights(wr, group);
        auto any = [](const Shape& s) {
          return dnnl::memory::desc(dnnl::memory::dims(s.begin(), s.end()), dt::f32, dnnl::memory::format_tag::any);
        };
        Run1 run;
        run.src_plain = PlainDesc(xr);
        run.dst_plain = PlainDesc(y);
        dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          any(xr), any(wg), dnnl::memory::desc(), any(y), strides, dil, pl, pr);
        dnnl::convolution_forward::primitive_desc pd(d, UserScratchpad(), DnnlEngine());
        run.prim = dnnl::convolution_forward(pd);
        run.src_md = pd.src_desc();
        run.dst_md = pd.dst_desc();
        // This run's weights (w - w_zp) as float, packed once.
        std::vector<float> f(static_cast<std::size_t>(NumElements(wr)));
        for (std::int64_t o = 0; o < cout; ++o) {
          for (std::int64_t c = 0; c < cc; ++c) {
            for (std::int64_t t = 0; t < taps; ++t) f[(o * cc + c) * taps + t] = static_cast<float>(ShiftedWeight(*w, u8w, (o * cg + c0 + c) * taps + t));
          }
        }
        run.weights = dnnl::memory(pd.weights_desc(), DnnlEngine());
        dnnl::memory plain(PlainDesc(wg), DnnlEngine(), f.data());
        dnnl::reorder(plain, run.weights).execute(DnnlStream(), plain, run.weights);
        DnnlStream().wait();
        run.scratch = ScratchpadFor(pd);
        if (run.src_md != run.src_plain) run.to_src = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), run.src_plain, DnnlEngine(), run.src_md));
        if (run.dst_md != run.dst_plain) run.from_dst = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), run.dst_md, DnnlEngine(), run.dst_plain));
        scratch_bytes_ = std::max(scratch_bytes_, run.scratch.bytes);
        runs_.push_back(std::move(run));
      }
    });
    if (!st.ok()) return false;
    return ok;
  }

  Status Run(const KernelArgs& a) override {
    std::int32_t zp = 0;
    ReadSrcZeroPoint(a, zp_in_, &zp);
    thread_local std::vector<float> xf, yf, xb, yb;
    const std::int64_t n = x_[0], c = x_[1], plane = NumElements(x_) / std::max<std::int64_t>(1, n * c);
    if (yf.size() < static_cast<std::size_t>(y_count_)) yf.resize(static_cast<std::size_t>(y_count_));
    dnnl::stream& s = DnnlStream();
    for (std::size_t r = 0; r < runs_.size(); ++r) {
      Run1& run = runs_[r];
      const std::int64_t c0 = bounds_[r], cc = runs_.size() == 1 ? c : bounds_[r + 1] - c0;
      const std::int64_t count = n * cc * plane;
      if (xf.size() < static_cast<std::size_t>(count)) xf.resize(static_cast<std::size_t>(count));
      for (std::int64_t b = 0; b < n; ++b) {  // channels c0 .. c0 + cc of each image, minus the zero point
        const std::size_t off = static_cast<std::size_t>((b * c + c0) * plane);
        const void* src = static_cast<const std::uint8_t*>(a.in(0)) + off;
        CenterToFloat(x_type_, src, xf.data() + b * cc * plane, cc * plane, static_cast<float>(zp));
      }
      dnnl::memory src_plain(run.src_plain, DnnlEngine(), xf.data());
      dnnl::memory src(run.src_md, DnnlEngine(), xf.data());
      if (run.to_src) {
        if (xb.size() * sizeof(float) < run.src_md.get_size()) xb.resize(run.src_md.get_size() / sizeof(float) + 1);
        src.set_data_handle(xb.data());
        run.to_src.execute(s, src_plain, src);
      }
      dnnl::memory dst_plain(run.dst_plain, DnnlEngine(), yf.data());
      dnnl::memory dst(run.dst_md, DnnlEngine(), yf.data());
      if (run.from_dst) {
        if (yb.size() * sizeof(float) < run.dst_md.get_size()) yb.resize(run.dst_md.get_size() / sizeof(float) + 1);
        dst.set_data_handle(yb.data());
      }
      run.prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, run.weights}, {DNNL_ARG_DST, dst},
                           {DNNL_ARG_SCRATCHPAD, run.scratch.Bind(a.ctx)}});
      if (run.from_dst) run.from_dst.execute(s, dst, dst_plain);
      s.wait();
      AccumulateExact(yf.data(), a.out_as<std::int32_t>(0), y_count_, r == 0);
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_bytes_; }

 private:
  struct Run1 {
    dnnl::convolution_forward prim;
    dnnl::reorder to_src, from_dst;
    dnnl::memory::desc src_md, dst_md, src_plain, dst_plain;
    dnnl::memory weights;
    Scratchpad scratch;
  };
  ZeroPointInput zp_in_;
  Shape x_;
  DType x_type_ = DType::kUndefined;
  std::int64_t y_count_ = 0;
  std::vector<std::int64_t> bounds_;
  std::vector<Run1> runs_;
  std::size_t scratch_bytes_ = 0;
};

// MatMulInteger the same way: A [rows, K] (leading dims flattened) by a
// constant B [K, N], in runs of B's rows.
class F32MatMulIntegerKernel : public Kernel {
 public:
  Result<bool> Init(const KernelInit& init) {
    using dt = dnnl::memory::data_type;
    const HostTensor* b = init.const_input(1);
    if (!b || !RuntimeSrcZeroPoint(init, &zp_in_)) return false;
    const Shape& as = init.inputs[0].shape;
    if (b->shape().size() != 2 || as.size() < 2) return false;
    k_ = b->shape()[0];
    n_ = b->shape()[1];
    if (as.back() != k_ || k_ <= 0 || n_ <= 0) return false;
    rows_ = NumElements(as) / k_;
    if (rows_ <= 0) return false;
    const bool u8w = b->dtype() == DType::kUInt8;
    if (!WeightZeroPointShiftable(init, 3, u8w)) return false;
    std::vector<std::int64_t> absum(static_cast<std::size_t>(k_ * n_));
    for (std::int64_t i = 0; i < k_ * n_; ++i) absum[i] = std::abs(ShiftedWeight(*b, u8w, i));
    bounds_ = ExactFloatRuns(absum, k_, n_);
    if (bounds_.empty()) return false;
    a_type_ = init.inputs[0].dtype;
    Status st = DnnlCall("MatMulInteger", [&] {
      for (std::size_t r = 0; r + 1 < bounds_.size(); ++r) {
        const std::int64_t k0 = bounds_[r], kk = bounds_[r + 1] - k0;
        Run1 run;
        dnnl::matmul::desc d(PlainDesc({rows_, kk}), dnnl::memory::desc({kk, n_}, dt::f32, dnnl::memory::format_tag::any),
                             PlainDesc({rows_, n_}));
        dnnl::matmul::primitive_desc pd(d, UserScratchpad(), DnnlEngine());
        run.prim = dnnl::matmul(pd);
        std::vector<float> f(static_cast<std::size_t>(kk * n_));
        for (std::int64_t i = 0; i < kk * n_; ++i) f[i] = static_cast<float>(ShiftedWeight(*b, u8w, k0 * n_ + i));
        run.weights = dnnl::memory(pd.weights_desc(), DnnlEngine());
        dnnl::memory plain(PlainDesc({kk, n_}), DnnlEngine(), f.data());
        dnnl::reorder(plain, run.weights).execute(DnnlStream(), plain, run.weights);
        DnnlStream().wait();
        run.scratch = ScratchpadFor(pd);
        run.src = dnnl::memory(PlainDesc({rows_, kk}), DnnlEngine(), nullptr);
        run.dst = dnnl::memory(PlainDesc({rows_, n_}), DnnlEngine(), nullptr);
        scratch_bytes_ = std::max(scratch_bytes_, run.scratch.bytes);
        runs_.push_back(std::move(run));
      }
    });
    return st.ok();
  }

  Status Run(const KernelArgs& a) override {
    std::int32_t zp = 0;
    ReadSrcZeroPoint(a, zp_in_, &zp);
    thread_local std::vector<float> af, yf;
    if (yf.size() < static_cast<std::size_t>(rows_ * n_)) yf.resize(static_cast<std::size_t>(rows_ * n_));
    for (std::size_t r = 0; r < runs_.size(); ++r) {
      const std::int64_t k0 = bounds_[r], kk = bounds_[r + 1] - k0;
      if (af.size() < static_cast<std::size_t>(rows_ * kk)) af.resize(static_cast<std::size_t>(rows_ * kk));
      // Columns k0 .. k0 + kk of each row of A, minus the zero point. The
      // pointer, not the thread_local vector, goes to the workers (theirs
      // are other, empty vectors).
      float* dst = af.data();
      const auto* a8 = static_cast<const std::uint8_t*>(a.in(0));  // 8-bit A
      ParallelFor(rows_, std::max<std::int64_t>(1, 16384 / kk), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::uint8_t* src = a8 + (i * k_ + k0);
          if (a_type_ == DType::kUInt8) CenterToFloat(src, dst + i * kk, kk, static_cast<float>(zp));
          else CenterToFloat(reinterpret_cast<const std::int8_t*>(src), dst + i * kk, kk, static_cast<float>(zp));
        }
      });
      Run1& run = runs_[r];
      run.src.set_data_handle(af.data());
      run.dst.set_data_handle(yf.data());
      run.prim.execute(DnnlStream(), {{DNNL_ARG_SRC, run.src}, {DNNL_ARG_WEIGHTS, run.weights}, {DNNL_ARG_DST, run.dst},
                                      {DNNL_ARG_SCRATCHPAD, run.scratch.Bind(a.ctx)}});
      DnnlStream().wait();
      AccumulateExact(yf.data(), a.out_as<std::int32_t>(0), rows_ * n_, r == 0);
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_bytes_; }

 private:
  struct Run1 {
    dnnl::matmul prim;
    dnnl::memory weights, src, dst;
    Scratchpad scratch;
  };
  ZeroPointInput zp_in_;
  DType a_type_ = DType::kUndefined;
  std::int64_t rows_ = 0, k_ = 0, n_ = 0;
  std::vector<std::int64_t> bounds_;
  std::vector<Run1> runs_;
  std::size_t scratch_bytes_ = 0;
};

// kiln.rescale wherever the int8 primitive does not take it (MatMulInteger,
// a CPU whose int8 is not exact, weights it cannot hold): the integer kernel
// writes its exact int32 sums into a per-thread buffer, then one pass
// computes act(float(sum) * S + B), the graph's Cast, Mul, Add and
// activation in their order (no fused multiply-add: each step rounds as
// the graph's op does). Output viewed as [outer, channels, inner]: the
// channel axis is 1 (ConvInteger) or the last (MatMulInteger).
class RescaledIntegerKernel : public Kernel {
 public:
  // `nhwc`: a channels-last ConvInteger (kiln.nhwc) whose `inner` kernel
  // was made for the NCHW shapes: the input is permuted into a copy (one
  // byte per element) and the epilogue writes NHWC.
  Status Init(const KernelInit& init, std::unique_ptr<Kernel> inner, bool matmul, bool nhwc) {
    inner_ = std::move(inner);
    nhwc_ = nhwc;
    Shape y = init.outputs[0].shape;
    if (nhwc) {
      x_ = init.inputs[0].shape;
      y = {y[0], y[3], y[1], y[2]};
    }
    const std::size_t axis = matmul ? y.size() - 1 : 1;
    channels_ = y[axis];
    outer_ = 1;
    for (std::size_t i = 0; i < axis; ++i) outer_ *= y[i];
    inner_count_ = 1;
    for (std::size_t i = axis + 1; i < y.size(); ++i) inner_count_ *= y[i];
    count_ = NumElements(y);
    return epilogue_.Init(init);
  }

  Status Run(const KernelArgs& a) override {
    thread_local std::vector<std::int32_t> acc;
    if (acc.size() < static_cast<std::size_t>(count_)) acc.resize(static_cast<std::size_t>(count_));
    void* ptrs[5] = {a.ptrs[0], a.ptrs[1], a.ptrs[2], a.ptrs[3], acc.data()};
    thread_local std::vector<std::uint8_t> xin;
    if (nhwc_) {  // [N, H, W, C] -> [N, C, H, W]
      const std::int64_t n = x_[0], hw = x_[1] * x_[2], c = x_[3];
      if (xin.size() < static_cast<std::size_t>(n * hw * c)) xin.resize(static_cast<std::size_t>(n * hw * c));
      const auto* src = a.in_as<std::uint8_t>(0);
      for (std::int64_t b = 0; b < n; ++b)
        for (std::int64_t i = 0; i < hw; ++i)
          for (std::int64_t ch = 0; ch < c; ++ch) xin[static_cast<std::size_t>((b * c + ch) * hw + i)] = src[(b * hw + i) * c + ch];
      ptrs[0] = xin.data();
    }
    KernelArgs ia = a;
    ia.ptrs = ptrs;
    ia.num_inputs = 4;
    KILN_RETURN_IF_ERROR(inner_->Run(ia));
    const std::int32_t* s32 = acc.data();
    float* y = a.out_as<float>(0);
    const std::int64_t cn = channels_, inner = inner_count_;
    // The pointers, not the thread_local vectors, go to the workers.
    thread_local std::vector<float> sv, bv;
    epilogue_.Load(a, cn, sv, bv);
    const float* svp = sv.data();
    const float* bvp = bv.data();
    const bool has_b = epilogue_.has_bias();
    ParallelFor(outer_, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, cn * inner)),
                [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o) {
        if (inner == 1) {  // MatMulInteger: y[o, c]
          Row(s32 + o * cn, svp, has_b ? bvp : nullptr, y + o * cn, cn);
        } else if (!nhwc_) {  // y[o, c, i], one scale per row
          for (std::int64_t c = 0; c < cn; ++c) {
            float* yr = y + (o * cn + c) * inner;
            const std::int32_t* ar = s32 + (o * cn + c) * inner;
            const float sca = svp[c], bia = bvp[c];
            for (std::int64_t i = 0; i < inner; ++i) yr[i] = static_cast<float>(ar[i]) * sca;
            if (has_b) {
              for (std::int64_t i = 0; i < inner; ++i) yr[i] = yr[i] + bia;
            }
            epilogue_.Activate(yr, inner);
          }
        } else {  // channels-last output y[o, i, c] from the NCHW sums
          for (std::int64_t i = 0; i < inner; ++i) {
            float* yr = y + (o * inner + i) * cn;
            for (std::int64_t c = 0; c < cn; ++c) yr[c] = static_cast<float>(s32[(o * cn + c) * inner + i]) * svp[c];
            if (has_b) {
              for (std::int64_t c = 0; c < cn; ++c) yr[c] = yr[c] + bvp[c];
            }
            epilogue_.Activate(yr, cn);
          }
        }
      }
    });
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  // float(sum) * scale [+ bias] over `n` channels, then the activation:
  // each step its own loop (rounded as the graph's op; no contraction).
  void Row(const std::int32_t* a, const float* s, const float* b, float* y, std::int64_t n) const {
    for (std::int64_t c = 0; c < n; ++c) y[c] = static_cast<float>(a[c]) * s[c];
    if (b) {
      for (std::int64_t c = 0; c < n; ++c) y[c] = y[c] + b[c];
    }
    epilogue_.Activate(y, n);
  }
  std::unique_ptr<Kernel> inner_;
  bool nhwc_ = false;
  Shape x_;  // nhwc_: the NHWC input's shape
  std::int64_t outer_ = 0, channels_ = 0, inner_count_ = 0, count_ = 0;
  RescaleEpilogue epilogue_;
};

// MatMulInteger / ConvInteger: oneDNN's int8 primitive where it is exact and
// the weights are constant, else the float32 primitives in exact runs, else
// the reference kernel.
template <typename Fast>
Result<std::unique_ptr<Kernel>> MakeIntegerKernel(const KernelInit& init, bool matmul);

// kiln.rescale: the convolution's int8 primitive with a float32
// destination and post-ops where it takes the node, else the integer
// kernel below it with the epilogue pass (RescaledIntegerKernel).
template <typename Fast>
Result<std::unique_ptr<Kernel>> MakeRescaledKernel(const KernelInit& init, bool matmul) {
  if (init.inputs.size() < 5 || !init.inputs[4].present()) {
    return Error(StatusCode::kInvalidArgument, init.node->Describe(), ": kiln.rescale needs the scale input 4");
  }
  if (!matmul) {
    auto fast = std::make_unique<DnnlQConvKernel>();
    KILN_ASSIGN_OR_RETURN(bool ok, fast->Init(init, true, true));
    if (ok) return std::unique_ptr<Kernel>(std::move(fast));
  } else {
    auto fast = std::make_unique<DnnlQMatMulKernel>();
    KILN_ASSIGN_OR_RETURN(bool ok, fast->Init(init, true, false, true));
    if (ok) return std::unique_ptr<Kernel>(std::move(fast));
  }
  KernelInit base = init;  // the integer op itself: inputs 0..3, an int32 output
  base.inputs.resize(4);
  if (base.const_inputs.size() > 4) base.const_inputs.resize(4);
  base.outputs[0].dtype = DType::kInt32;
  const bool nhwc = !matmul && init.node->GetInt(ops::kNhwcAttr, 0) != 0;
  if (nhwc) {  // the integer kernels below run NCHW: on a permuted copy
    const Shape& x = init.inputs[0].shape;
    const Shape& y = init.outputs[0].shape;
    if (x.size() != 4 || y.size() != 4) {
      return Error(StatusCode::kInvalidArgument, init.node->Describe(), ": channels-last ConvInteger needs 4-D tensors");
    }
    base.inputs[0].shape = {x[0], x[3], x[1], x[2]};
    base.outputs[0].shape = {y[0], y[3], y[1], y[2]};
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, MakeIntegerKernel<Fast>(base, matmul));
  auto k = std::make_unique<RescaledIntegerKernel>();
  KILN_RETURN_IF_ERROR(k->Init(init, std::move(inner), matmul, nhwc));
  return std::unique_ptr<Kernel>(std::move(k));
}

// kiln.quantize_input: x (float32, input 0) quantized as
// DynamicQuantizeLinear does with x_scale (input 6) and x_zero_point
// (input 2), then the rescaled op on it (inputs 0..5, an inner kernel made
// for a uint8 input 0); with kiln.scale_by_x, the rescale's scale is
// x_scale * input 4. Where the inner kernel takes float32 input itself
// (the int16-product kernel's route, which quantizes each row of its
// image), x goes to it as it is; elsewhere it is quantized into a
// per-thread buffer first.
template <typename Fast>
class QuantizedInputKernel : public Kernel {
 public:
  void Init(const KernelInit& init, std::unique_ptr<Kernel> inner) {
    inner_ = std::move(inner);
    auto* f = dynamic_cast<Fast*>(inner_.get());
    direct_ = f && f->TakesFloatInput() ? f : nullptr;
    count_ = NumElements(init.inputs[0].shape);
    scale_by_x_ = init.node->GetInt(ops::kScaleByXAttr, 0) == 1;
    scale_count_ = NumElements(init.inputs[4].shape);
    num_outputs_ = static_cast<int>(init.outputs.size());
    // kiln.quantize_input = 2: x_scale and the zero point computed here,
    // from the range x's writer reports where it does.
    own_params_ = init.node->GetInt(ops::kQuantizeInputAttr, 0) == 2;
    if (own_params_) reported_ = ReportedRange(init);
  }
  Status Run(const KernelArgs& a) override {
    float s = 0.f;
    std::uint8_t zp8 = 0;
    if (own_params_) DynamicQuantizeParams(a.in_as<float>(0), count_, reported_.get(), &s, &zp8);
    else s = *a.in_as<float>(6), zp8 = *a.in_as<std::uint8_t>(2);
    const auto zp = static_cast<std::int32_t>(zp8);
    void* ptrs[8] = {};
    for (int i = 0; i < 6 && i < a.num_inputs; ++i) ptrs[i] = a.ptrs[i];
    ptrs[2] = &zp8;
    for (int o = 0; o < num_outputs_ && o < 2; ++o) ptrs[6 + o] = a.out(o);
    KernelArgs ia = a;
    ia.ptrs = ptrs;
    ia.host_ptrs = ptrs;  // host memory (the CPU's kernels)
    ia.num_inputs = 6;
    thread_local std::vector<float> sv;
    if (scale_by_x_) {  // the graph's Mul(x_scale, w_scale), a value at a time
      sv.resize(static_cast<std::size_t>(scale_count_));
      const float* w = a.in_as<float>(4);
      for (std::int64_t i = 0; i < scale_count_; ++i) sv[static_cast<std::size_t>(i)] = s * w[i];
      ptrs[4] = sv.data();
    }
    if (direct_) return direct_->RunWith(ia, &s);
    thread_local std::vector<std::uint8_t> q;
    if (q.size() < static_cast<std::size_t>(count_)) q.resize(static_cast<std::size_t>(count_));
    const float* x = a.in_as<float>(0);
    std::uint8_t* qp = q.data();
    ParallelFor(count_, 16384, [&](std::int64_t b, std::int64_t e) { DynamicQuantizeU8(x + b, qp + b, e - b, s, zp); });
    ptrs[0] = qp;
    return inner_->Run(ia);
  }
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  std::unique_ptr<Kernel> inner_;
  Fast* direct_ = nullptr;
  std::int64_t count_ = 0, scale_count_ = 1;
  bool scale_by_x_ = false, own_params_ = false;
  std::shared_ptr<device::ValueRange> reported_;
  int num_outputs_ = 1;
};

template <typename Fast>
Result<std::unique_ptr<Kernel>> MakeQuantizedInputKernel(const KernelInit& init, bool matmul) {
  // The loader's inference checked these (ConvInteger / MatMulInteger);
  // a kernel made from another graph is refused here as well.
  const bool own = init.node->GetInt(ops::kQuantizeInputAttr, 0) == 2;  // x_scale and zero point computed
  auto has = [&](std::size_t i) { return init.inputs.size() > i && init.inputs[i].present(); };
  const bool params_ok = own ? !has(2) && !has(6)
                             : has(6) && has(2) && init.inputs[2].dtype == DType::kUInt8 &&
                                   init.inputs[6].dtype == DType::kFloat32;
  if (!params_ok || !has(4) || init.node->GetInt(ops::kRescaleAttr, 0) != 1 || init.outputs.empty() ||
      init.outputs[0].dtype != DType::kFloat32) {
    return Error(StatusCode::kInvalidArgument, init.node->Describe(),
                 ": kiln.quantize_input needs kiln.rescale, a float32 x and, with 1, x_scale (input 6) and a uint8 "
                 "zero point (input 2); with 2 neither");
  }
  KernelInit base = init;  // the op on the quantized x: inputs 0..5, input 0 uint8, the zero point input 2
  base.inputs.resize(6);
  if (base.const_inputs.size() > 6) base.const_inputs.resize(6);
  if (base.const_inputs.size() > 2) base.const_inputs[2] = nullptr;
  base.inputs[0].dtype = DType::kUInt8;
  base.inputs[2] = device::TensorDesc{DType::kUInt8, {}};
  if (init.node->GetInt(ops::kScaleByXAttr, 0) == 1 && base.const_inputs.size() > 4) base.const_inputs[4] = nullptr;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, MakeRescaledKernel<Fast>(base, matmul));
  auto k = std::make_unique<QuantizedInputKernel<Fast>>();
  k->Init(init, std::move(inner));
  return std::unique_ptr<Kernel>(std::move(k));
}

// kiln.sum on a rescaled ConvInteger: the op without its residual (inputs
// 0..6; its epilogue then skips the activation and the range), then one
// pass y = act(y + R), each step rounded as the graph's Add and activation
// (RescaleEpilogue::Activate's semantics: NaN kept), with the range a
// reader of y takes (device::ValueRange) folded as it goes.
class ResidualKernel : public Kernel {
 public:
  Status Init(const KernelInit& init, std::unique_ptr<Kernel> inner) {
    inner_ = std::move(inner);
    count_ = NumElements(init.outputs[0].shape);
    const std::string act = init.node->GetString(ops::kActAttr, "");
    alpha_ = init.node->GetFloat(ops::kActAlphaAttr, 0.f);
    beta_ = init.node->GetFloat(ops::kActBetaAttr, 0.f);
    if (act.empty()) act_ = 0;
    else if (act == "Relu") act_ = 1;
    else if (act == "LeakyRelu") act_ = 2;
    else if (act == "Clip") act_ = 3;
    else return Error(StatusCode::kUnimplemented, init.node->Describe(), ": fused activation '", act,
                      "' is not supported after kiln.sum (Relu, LeakyRelu or Clip)");
    range_ = OfferedRange(init);
    return Status::Ok();
  }
  Status Run(const KernelArgs& a) override {
    void* ptrs[10] = {};
    for (int i = 0; i < 7 && i < a.num_inputs; ++i) ptrs[i] = a.ptrs[i];
    ptrs[7] = a.out(0);
    KernelArgs ia = a;
    ia.ptrs = ptrs;
    ia.host_ptrs = ptrs;  // host memory (the CPU's kernels)
    ia.num_inputs = 7;
    KILN_RETURN_IF_ERROR(inner_->Run(ia));
    float* y = a.out_as<float>(0);
    const float* r = a.in_as<float>(7);
    float mn = 0.f, mx = 0.f;
    std::mutex mu;
    ParallelFor(count_, 16384, [&](std::int64_t b, std::int64_t e) {
      SumActRange(y + b, r + b, e - b);
      if (!range_) return;
      float l = 0.f, h = 0.f;
      MinMaxWithZero(y + b, e - b, &l, &h);
      std::lock_guard<std::mutex> lock(mu);
      mn = l < mn ? l : mn;
      mx = h > mx ? h : mx;
    });
    if (range_) {
      range_->min = mn;
      range_->max = mx;
      range_->valid = true;
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  // y = act(y + r) over n values: AVX for the add and the clamps (Relu [0,
  // inf], Clip [alpha, beta], none; maxps / minps with the bound first
  // keep a NaN, as Activate does), LeakyRelu's select a value at a time.
  void SumActRange(float* y, const float* r, std::int64_t n) const {
    std::int64_t i = 0;
    static const bool avx = __builtin_cpu_supports("avx");
    if (avx && act_ != 2) i = SumClampAvx(y, r, n);
    for (; i < n; ++i) {
      float v = y[i] + r[i];
      if (act_ == 1) v = v < 0.f ? 0.f : v;
      else if (act_ == 2) v = v < 0.f ? alpha_ * v : v;
      else if (act_ == 3) v = std::min(std::max(v, alpha_), beta_);
      y[i] = v;
    }
  }
  __attribute__((target("avx"))) std::int64_t SumClampAvx(float* y, const float* r, std::int64_t n) const {
    const bool clamp = act_ == 1 || act_ == 3;
    const __m256 lo = _mm256_set1_ps(act_ == 1 ? 0.f : alpha_), hi = _mm256_set1_ps(act_ == 1 ? INFINITY : beta_);
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(r + i));
      if (clamp) v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
      _mm256_storeu_ps(y + i, v);
    }
    return i;
  }
  std::unique_ptr<Kernel> inner_;
  std::int64_t count_ = 0;
  int act_ = 0;  // 0 none, 1 Relu, 2 LeakyRelu, 3 Clip
  float alpha_ = 0.f, beta_ = 0.f;
  std::shared_ptr<device::ValueRange> range_;
};

template <typename Fast>
Result<std::unique_ptr<Kernel>> MakeIntegerKernel(const KernelInit& init, bool matmul) {
  // kiln.sum (the inner kernel's init without input 7).
  if (!matmul && init.node->GetInt(ops::kSumAttr, 0) == 1 && init.inputs.size() > 7 && init.inputs[7].present()) {
    if (init.node->GetInt(ops::kRescaleAttr, 0) != 1 || init.outputs.empty() ||
        init.outputs[0].dtype != DType::kFloat32 || init.inputs[7].dtype != DType::kFloat32 ||
        NumElements(init.inputs[7].shape) != NumElements(init.outputs[0].shape)) {
      return Error(StatusCode::kInvalidArgument, init.node->Describe(),
                   ": kiln.sum needs kiln.rescale and a float32 residual of the output's shape");
    }
    KernelInit base = init;
    base.inputs.resize(7);
    if (base.const_inputs.size() > 7) base.const_inputs.resize(7);
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, MakeIntegerKernel<Fast>(base, matmul));
    auto k = std::make_unique<ResidualKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init, std::move(inner)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  // (The inner kernel's init has a uint8 input 0.)
  if (init.node->GetInt(ops::kQuantizeInputAttr, 0) != 0 && !init.inputs.empty() &&
      init.inputs[0].dtype == DType::kFloat32) {
    return MakeQuantizedInputKernel<Fast>(init, matmul);
  }
  if (init.inputs.empty() || (init.inputs[0].dtype != DType::kUInt8 && init.inputs[0].dtype != DType::kInt8)) {
    return Error(StatusCode::kInvalidArgument, init.node->Describe(), ": input 0 must be uint8 or int8 (float32 only with ",
                 ops::kQuantizeInputAttr, ")");
  }
  if (init.node->GetInt(ops::kRescaleAttr, 0) == 1 && init.outputs[0].dtype == DType::kFloat32) {
    return MakeRescaledKernel<Fast>(init, matmul);
  }
  auto fast = std::make_unique<Fast>();
  KILN_ASSIGN_OR_RETURN(bool ok, fast->Init(init, true));
  if (ok) return std::unique_ptr<Kernel>(std::move(fast));
  if (matmul) {
    auto f32 = std::make_unique<F32MatMulIntegerKernel>();
    KILN_ASSIGN_OR_RETURN(bool f32_ok, f32->Init(init));
    if (f32_ok) return std::unique_ptr<Kernel>(std::move(f32));
  } else {
    auto f32 = std::make_unique<F32ConvIntegerKernel>();
    KILN_ASSIGN_OR_RETURN(bool f32_ok, f32->Init(init));
    if (f32_ok) return std::unique_ptr<Kernel>(std::move(f32));
  }
  if (matmul) {
    auto k = std::make_unique<QMatMulKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init, false));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  auto k = std::make_unique<QConvKernel>();
  KILN_RETURN_IF_ERROR(k->Init(init, false));
  return std::unique_ptr<Kernel>(std::move(k));
}

Result<std::unique_ptr<Kernel>> MakeQLinearMatMul(const KernelInit& init);

// kiln.dequantize: the QLinearMatMul writes its quantized result into a
// per-thread buffer, then one pass gives (float(q) - y_zp) * y_scale [+ B]
// per row, DequantizeLinear's and the Add's arithmetic in their order.
class DequantizedQMatMulKernel : public Kernel {
 public:
  Status Init(const KernelInit& init, std::unique_ptr<Kernel> inner) {
    inner_ = std::move(inner);
    const Shape& y = init.outputs[0].shape;
    count_ = NumElements(y);
    cols_ = y.empty() ? 1 : y.back();
    q_type_ = init.inputs[7].dtype;
    bias_per_ = init.inputs.size() > 8 && init.inputs[8].present() ? (NumElements(init.inputs[8].shape) != 1 ? 1 : 0) : -1;
    return Status::Ok();
  }
  Status Run(const KernelArgs& a) override {
    thread_local std::vector<std::uint8_t> qbuf;
    if (qbuf.size() < static_cast<std::size_t>(count_)) qbuf.resize(static_cast<std::size_t>(count_));
    void* ptrs[9];
    for (int i = 0; i < 8; ++i) ptrs[i] = a.ptrs[i];
    ptrs[8] = qbuf.data();
    KernelArgs ia = a;
    ia.ptrs = ptrs;
    ia.num_inputs = 8;
    KILN_RETURN_IF_ERROR(inner_->Run(ia));
    const float s = *a.in_as<float>(6);
    const float zp = q_type_ == DType::kUInt8 ? static_cast<float>(*a.in_as<std::uint8_t>(7))
                                             : static_cast<float>(*a.in_as<std::int8_t>(7));
    const float* b = bias_per_ >= 0 ? a.in_as<float>(8) : nullptr;
    thread_local std::vector<float> bv;
    bv.assign(static_cast<std::size_t>(cols_), 0.f);
    for (std::int64_t c = 0; b && c < cols_; ++c) bv[static_cast<std::size_t>(c)] = b[bias_per_ ? c : 0];
    const float* bvp = bv.data();
    const std::uint8_t* qp = qbuf.data();
    float* y = a.out_as<float>(0);
    const std::int64_t rows = cols_ > 0 ? count_ / cols_ : 0, cn = cols_;
    const bool u8 = q_type_ == DType::kUInt8;
    ParallelFor(rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, cn)), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        float* yr = y + r * cn;
        const std::uint8_t* qr = qp + r * cn;
        if (u8) {
          for (std::int64_t c = 0; c < cn; ++c) yr[c] = (static_cast<float>(qr[c]) - zp) * s;
        } else {
          const auto* qs = reinterpret_cast<const std::int8_t*>(qr);
          for (std::int64_t c = 0; c < cn; ++c) yr[c] = (static_cast<float>(qs[c]) - zp) * s;
        }
        if (b) {
          for (std::int64_t c = 0; c < cn; ++c) yr[c] = yr[c] + bvp[c];
        }
      }
    });
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  std::unique_ptr<Kernel> inner_;
  std::int64_t count_ = 0, cols_ = 0;
  DType q_type_ = DType::kUndefined;
  int bias_per_ = -1;
};

Result<std::unique_ptr<Kernel>> MakeQLinearMatMul(const KernelInit& init) {
  if (init.node->GetInt(ops::kDequantizeAttr, 0) == 1 && init.outputs[0].dtype == DType::kFloat32) {
    // The int8 matmul requantising and dequantizing in one pass, else the
    // QLinearMatMul's kernel and a dequantizing pass after it.
    auto fused = std::make_unique<DnnlQMatMulKernel>();
    KILN_ASSIGN_OR_RETURN(bool fused_ok, fused->Init(init, false, true));
    if (fused_ok) return std::unique_ptr<Kernel>(std::move(fused));
    KernelInit base = init;  // the QLinearMatMul itself: inputs 0..7, its quantized output
    base.inputs.resize(8);
    if (base.const_inputs.size() > 8) base.const_inputs.resize(8);
    base.outputs[0].dtype = init.inputs[7].dtype;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, MakeQLinearMatMul(base));
    auto k = std::make_unique<DequantizedQMatMulKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init, std::move(inner)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  auto fast = std::make_unique<DnnlQMatMulKernel>();
  KILN_ASSIGN_OR_RETURN(bool ok, fast->Init(init));
  if (ok) return std::unique_ptr<Kernel>(std::move(fast));
  auto k = std::make_unique<QMatMulKernel>();
  KILN_RETURN_IF_ERROR(k->Init(init, true));
  return std::unique_ptr<Kernel>(std::move(k));
}

// A kiln.nhwc QLinearConv run by the reference kernel: the NHWC input
// permuted to NCHW, the NCHW result permuted back (uint8/int8 copies).
class NhwcQConvKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    KernelInit nchw = init;
    const Shape& x = init.inputs[0].shape;
    const Shape& y = init.outputs[0].shape;
    if (x.size() != 4 || y.size() != 4) {
      return Error(StatusCode::kInvalidArgument, init.node->Describe(), ": channels-last QLinearConv needs 4-D tensors");
    }
    x_ = x;
    y_ = y;
    nchw.inputs[0].shape = {x[0], x[3], x[1], x[2]};
    nchw.outputs[0].shape = {y[0], y[3], y[1], y[2]};
    KILN_RETURN_IF_ERROR(inner_.Init(nchw, true));
    return Status::Ok();
  }
  Status Run(const KernelArgs& a) override {
    // [N, A, B, C] -> permuted copies, one byte per element.
    auto permute = [](const std::uint8_t* src, std::uint8_t* dst, const Shape& s, bool to_nchw) {
      const std::int64_t n = s[0], h = to_nchw ? s[1] : s[2], w = to_nchw ? s[2] : s[3], c = to_nchw ? s[3] : s[1];
      for (std::int64_t b = 0; b < n; ++b)
        for (std::int64_t ch = 0; ch < c; ++ch)
          for (std::int64_t i = 0; i < h * w; ++i) {
            const std::int64_t nhwc = (b * h * w + i) * c + ch, nchw = (b * c + ch) * h * w + i;
            if (to_nchw) dst[nchw] = src[nhwc];
            else dst[nhwc] = src[nchw];
          }
    };
    std::vector<std::uint8_t> xin(static_cast<std::size_t>(NumElements(x_))), yout(static_cast<std::size_t>(NumElements(y_)));
    permute(static_cast<const std::uint8_t*>(a.in(0)), xin.data(), x_, true);
    std::vector<void*> ptrs(a.ptrs, a.ptrs + a.num_inputs + 1);
    ptrs[0] = xin.data();
    ptrs[a.num_inputs] = yout.data();
    KernelArgs b = a;
    b.ptrs = ptrs.data();
    KILN_RETURN_IF_ERROR(inner_.Run(b));
    const Shape ynchw = {y_[0], y_[3], y_[1], y_[2]};
    permute(yout.data(), static_cast<std::uint8_t*>(a.out(0)), ynchw, false);
    return Status::Ok();
  }

 private:
  QConvKernel inner_;
  Shape x_, y_;
};

Result<std::unique_ptr<Kernel>> MakeQLinearConv(const KernelInit& init) {
  auto fast = std::make_unique<DnnlQConvKernel>();
  KILN_ASSIGN_OR_RETURN(bool ok, fast->Init(init));
  if (ok) return std::unique_ptr<Kernel>(std::move(fast));
  if (init.node->GetInt(ops::kNhwcAttr, 0) != 0) {
    // Channels-last but not for oneDNN (no VNNI, a scale oneDNN refuses):
    // the reference kernel on NCHW copies.
    auto k = std::make_unique<NhwcQConvKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  auto k = std::make_unique<QConvKernel>();
  KILN_RETURN_IF_ERROR(k->Init(init, true));
  return std::unique_ptr<Kernel>(std::move(k));
}

template <typename K>
KernelFactory Factory(bool qlinear) {
  return [qlinear](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<K>();
    KILN_RETURN_IF_ERROR(k->Init(init, qlinear));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

// ---- com.microsoft QLinear* (ONNX Runtime's contrib ops), computed as
// ONNX Runtime's MLAS does: scale ratios in float, round to nearest even,
// saturate. Scales and zero points are per tensor; absent zero points are 0.

// A value dequantized as (q - zp) * scale, then f, then quantized to the
// output's (scale, zp): a 256-entry table, made per run (the parameters are
// tensors), indexed by q - min(Q).
template <typename Q, typename F>
void BuildTable(std::uint8_t* table, float xs, float xz, float ys, float yz, F&& f) {
  const QBounds b = Bounds<Q>(yz);
  constexpr int lo = std::numeric_limits<Q>::min();
  for (int q = lo; q <= std::numeric_limits<Q>::max(); ++q) {
    const Q y = RoundToQ<Q>(f((static_cast<float>(q) - xz) * xs) / ys, b, yz);
    std::memcpy(&table[q - lo], &y, 1);
  }
}
template <typename Q>
inline std::uint8_t TableIndex(Q q) {
  return static_cast<std::uint8_t>(static_cast<int>(q) - std::numeric_limits<Q>::min());
}

// One contiguous row of QLinearAdd. Parameters by value: stores through a
// byte pointer could otherwise alias them, which stops vectorization. out
// may be x or y (in place).
// 8 Q values as float32 lanes.
template <typename Q>
__attribute__((target("avx2"))) inline __m256 LoadQ8(const Q* p) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(std::is_same_v<Q, std::uint8_t> ? _mm256_cvtepu8_epi32(v) : _mm256_cvtepi8_epi32(v));
}
template <typename Q>
__attribute__((target("avx2"))) inline __m256i QAddLanes(const Q* x, const Q* y, __m256 rx, __m256 zx, __m256 ry,
                                                         __m256 zy, __m256 lo, __m256 hi, __m256 zo) {
  // rx * (x - zx) + ry * (y - zy): separate multiplies and add, as below.
  const __m256 v = _mm256_add_ps(_mm256_mul_ps(rx, _mm256_sub_ps(LoadQ8(x), zx)),
                                 _mm256_mul_ps(ry, _mm256_sub_ps(LoadQ8(y), zy)));
  return RoundLanes(v, lo, hi, zo);
}
// AVX2, 32 at a time; returns how many it did.
template <typename Q>
__attribute__((target("avx2"))) std::int64_t QAddAvx2(const Q* x, const Q* y, Q* out, std::int64_t n, float rx,
                                                      float zx, float ry, float zy, QBounds b, float zo) {
  const __m256 vrx = _mm256_set1_ps(rx), vzx = _mm256_set1_ps(zx), vry = _mm256_set1_ps(ry), vzy = _mm256_set1_ps(zy);
  const __m256 lo = _mm256_set1_ps(b.lo), hi = _mm256_set1_ps(b.hi), z = _mm256_set1_ps(zo);
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r[4];
    for (int k = 0; k < 4; ++k) r[k] = QAddLanes(x + i + 8 * k, y + i + 8 * k, vrx, vzx, vry, vzy, lo, hi, z);
    Store32(out + i, r[0], r[1], r[2], r[3]);  // after every load: out may be x or y
  }
  return i;
}

template <typename Q>
void QAddRow(const Q* x, const Q* y, Q* out, std::int64_t n, float rx, float zx,
             float ry, float zy, QBounds b, float zo) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const std::int64_t done = avx2 ? QAddAvx2(x, y, out, n, rx, zx, ry, zy, b, zo) : 0;
  x += done;
  y += done;
  out += done;
  n -= done;
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = RoundToQ<Q>(rx * (static_cast<float>(x[i]) - zx) + ry * (static_cast<float>(y[i]) - zy), b, zo);
  }
}

// QLinearAdd / QLinearMul with NumPy broadcasting.
template <typename Q>
Result<std::unique_ptr<Kernel>> MakeQLinearBinaryT(const KernelInit& init, bool mul) {
  const BroadcastPlan plan = MakeBroadcastPlan(init.inputs[0].shape, init.inputs[3].shape, init.outputs[0].shape);
  const Param sa = ParamOf(init, 1), za = ParamOf(init, 2), sb = ParamOf(init, 4), zb = ParamOf(init, 5);
  const Param sc = ParamOf(init, 6), zc = ParamOf(init, 7);
  return MakeFn([=](const KernelArgs& a) {
    const Q* x = a.in_as<Q>(0);
    const Q* y = a.in_as<Q>(3);
    Q* out = a.out_as<Q>(0);
    const float zx = za.Get(a, 0), zy = zb.Get(a, 0), zo = zc.Get(a, 0);
    const float rx = sa.Get(a, 0) / sc.Get(a, 0), ry = sb.Get(a, 0) / sc.Get(a, 0);
    const float rm = sa.Get(a, 0) * sb.Get(a, 0) / sc.Get(a, 0);
    const QBounds b = Bounds<Q>(zo);
    ForEachRow(plan, [&](std::int64_t o, std::int64_t ox, std::int64_t oy, std::int64_t len, std::int64_t ix,
                         std::int64_t iy) {
      if (mul) {
        for (std::int64_t i = 0; i < len; ++i) {
          const float v = rm * ((static_cast<float>(x[ox + i * ix]) - zx) * (static_cast<float>(y[oy + i * iy]) - zy));
          out[o + i] = RoundToQ<Q>(v, b, zo);
        }
      } else if (ix == 1 && iy == 1) {
        QAddRow(x + ox, y + oy, out + o, len, rx, zx, ry, zy, b, zo);
      } else {
        for (std::int64_t i = 0; i < len; ++i) {
          const float v = rx * (static_cast<float>(x[ox + i * ix]) - zx) + ry * (static_cast<float>(y[oy + i * iy]) - zy);
          out[o + i] = RoundToQ<Q>(v, b, zo);
        }
      }
    });
    return Status::Ok();
  });
}
Result<std::unique_ptr<Kernel>> MakeQLinearAdd(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearBinaryT<std::uint8_t>(init, false);
  return MakeQLinearBinaryT<std::int8_t>(init, false);
}
Result<std::unique_ptr<Kernel>> MakeQLinearMul(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearBinaryT<std::uint8_t>(init, true);
  return MakeQLinearBinaryT<std::int8_t>(init, true);
}

// QLinearSigmoid / QLinearLeakyRelu: a table lookup per element.
template <typename Q>
Result<std::unique_ptr<Kernel>> MakeQLinearLookupT(const KernelInit& init, bool sigmoid) {
  const Param sx = ParamOf(init, 1), zx = ParamOf(init, 2), sy = ParamOf(init, 3), zy = ParamOf(init, 4);
  const float alpha = init.node->GetFloat("alpha", 0.01f);
  const std::int64_t n = NumElements(init.inputs[0].shape);
  return MakeFn([=](const KernelArgs& a) {
    std::uint8_t table[256];
    if (sigmoid) {
      BuildTable<Q>(table, sx.Get(a, 0), zx.Get(a, 0), sy.Get(a, 0), zy.Get(a, 0),
                    [](float v) { return 1.f / (1.f + std::exp(-v)); });
    } else {
      BuildTable<Q>(table, sx.Get(a, 0), zx.Get(a, 0), sy.Get(a, 0), zy.Get(a, 0),
                    [alpha](float v) { return v >= 0.f ? v : v * alpha; });
    }
    const Q* x = a.in_as<Q>(0);
    auto* y = static_cast<std::uint8_t*>(a.out(0));
    ParallelFor(n, 65536, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) y[i] = table[TableIndex(x[i])];
    });
    return Status::Ok();
  });
}
Result<std::unique_ptr<Kernel>> MakeQLinearSigmoid(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearLookupT<std::uint8_t>(init, true);
  return MakeQLinearLookupT<std::int8_t>(init, true);
}
Result<std::unique_ptr<Kernel>> MakeQLinearLeakyRelu(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearLookupT<std::uint8_t>(init, false);
  return MakeQLinearLookupT<std::int8_t>(init, false);
}

// QLinearGlobalAveragePool: exact integer sums over the spatial dims, then
// y = round((sum - x_zp * K) * x_scale / (y_scale * K)) + y_zp.
template <typename Q>
Result<std::unique_ptr<Kernel>> MakeQLinearGapT(const KernelInit& init) {
  const Param sx = ParamOf(init, 1), zx = ParamOf(init, 2), sy = ParamOf(init, 3), zy = ParamOf(init, 4);
  const Shape& s = init.inputs[0].shape;
  const bool last = init.node->GetInt("channels_last", 0) != 0;
  const std::int64_t n = s[0], c = last ? s.back() : s[1];
  std::int64_t k = 1;
  for (std::size_t d = last ? 1 : 2; d < s.size() - (last ? 1 : 0); ++d) k *= s[d];
  return MakeFn([=](const KernelArgs& a) {
    const Q* x = a.in_as<Q>(0);
    Q* y = a.out_as<Q>(0);
    const float zi = zx.Get(a, 0), zo = zy.Get(a, 0);
    const float scale = sx.Get(a, 0) / (sy.Get(a, 0) * static_cast<float>(k));
    const QBounds b = Bounds<Q>(zo);
    const auto bias = static_cast<std::int64_t>(zi) * k;
    if (!last) {
      ParallelFor(n * c, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(k, 1)), [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          std::int64_t sum = 0;
          for (std::int64_t i = 0; i < k; ++i) sum += x[r * k + i];
          y[r] = RoundToQ<Q>(static_cast<float>(sum - bias) * scale, b, zo);
        }
      });
      return Status::Ok();
    }
    // Tasks of (image, block of 256 channels): sums on the stack (no
    // allocation inside the parallel region).
    constexpr std::int64_t kBlock = 256;
    const std::int64_t blocks = (c + kBlock - 1) / kBlock;
    ParallelFor(n * blocks, 1, [&](std::int64_t tb, std::int64_t te) {
      std::int64_t sum[kBlock];
      for (std::int64_t t = tb; t < te; ++t) {
        const std::int64_t i = t / blocks, c0 = t % blocks * kBlock, len = std::min(kBlock, c - c0);
        std::fill(sum, sum + len, 0);
        for (std::int64_t p = 0; p < k; ++p) {
          const Q* row = x + (i * k + p) * c + c0;
          for (std::int64_t j = 0; j < len; ++j) sum[j] += row[j];
        }
        for (std::int64_t j = 0; j < len; ++j) {
          y[i * c + c0 + j] = RoundToQ<Q>(static_cast<float>(sum[j] - bias) * scale, b, zo);
        }
      }
    });
    return Status::Ok();
  });
}
Result<std::unique_ptr<Kernel>> MakeQLinearGap(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearGapT<std::uint8_t>(init);
  return MakeQLinearGapT<std::int8_t>(init);
}

// QLinearConcat: each input requantized to the output's parameters (a copy
// where they are the same, else a table), written at its place on `axis`.
template <typename Q>
Result<std::unique_ptr<Kernel>> MakeQLinearConcatT(const KernelInit& init) {
  const Shape& y = init.outputs[0].shape;
  std::int64_t axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += static_cast<std::int64_t>(y.size());
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(y.size()); ++d) {
    if (d < axis) outer *= y[d];
    if (d > axis) inner *= y[d];
  }
  struct Part {
    int x;
    Param scale, zp;
    std::int64_t chunk;  // elements per outer index
  };
  std::vector<Part> parts;
  for (int i = 2; i + 2 < static_cast<int>(init.inputs.size()); i += 3) {
    parts.push_back({i, ParamOf(init, i + 1), ParamOf(init, i + 2), init.inputs[i].shape[axis] * inner});
  }
  const Param sy = ParamOf(init, 0), zy = ParamOf(init, 1);
  const std::int64_t out_chunk = y[axis] * inner;
  return MakeFn([=](const KernelArgs& a) {
    const float ys = sy.Get(a, 0), yz = zy.Get(a, 0);
    std::vector<std::array<std::uint8_t, 256>> tables(parts.size());
    std::vector<char> copy(parts.size());
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const float xs = parts[p].scale.Get(a, 0), xz = parts[p].zp.Get(a, 0);
      copy[p] = xs == ys && xz == yz;
      if (!copy[p]) BuildTable<Q>(tables[p].data(), xs, xz, ys, yz, [](float v) { return v; });
    }
    Q* out = a.out_as<Q>(0);
    ParallelFor(outer, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(out_chunk, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) {
        Q* dst = out + o * out_chunk;
        for (std::size_t p = 0; p < parts.size(); ++p) {
          const std::int64_t len = parts[p].chunk;
          const Q* src = a.in_as<Q>(parts[p].x) + o * len;
          if (copy[p]) {
            if (len) std::memcpy(dst, src, static_cast<std::size_t>(len));
          } else {
            const auto& t = tables[p];
            for (std::int64_t i = 0; i < len; ++i) std::memcpy(dst + i, &t[TableIndex(src[i])], 1);
          }
          dst += len;
        }
      }
    });
    return Status::Ok();
  });
}
Result<std::unique_ptr<Kernel>> MakeQLinearConcat(const KernelInit& init) {
  if (init.outputs[0].dtype == DType::kUInt8) return MakeQLinearConcatT<std::uint8_t>(init);
  return MakeQLinearConcatT<std::int8_t>(init);
}

// com.microsoft QLinearSoftmax, computed as ONNX Runtime's kernel computes
// it (its result defines the op). With D the reduced length (opset < 13:
// the dims from `axis` on, flattened; else dim `axis`; `axis` -1 when
// absent, whatever the opset: the schema's default) and T[i] =
// float(exp((i - 255 + b) * x_scale)) for i in 0..255, in double, where b =
// max(0, ln(FLT_MAX / D) - 5) / x_scale keeps a row's sum of D terms below
// FLT_MAX: per row, with m its largest value, each element x reads e =
// T[255 - (m - x)] (x_zp cancels), s sums the e in order in float32, and
// y = saturate(round_even((e * floor(1 / y_scale)) / s) + y_zp), each
// operation in float32 (floor(1 / y_scale), not 1 / y_scale: ONNX Runtime's
// choice). Where ONNX Runtime's int8 path wraps a value past 127 (only when
// floor(1 / y_scale) + y_zp > 127) or its product overflows to infinity (a
// row of one element), Kiln saturates.
template <typename Q>
Result<std::unique_ptr<Kernel>> MakeQLinearSoftmaxT(const KernelInit& init) {
  const Param sx = ParamOf(init, 1), sy = ParamOf(init, 3), zy = ParamOf(init, 4);
  const Shape& s = init.inputs[0].shape;
  const auto rank = static_cast<std::int64_t>(s.size());
  const std::int64_t opset = init.node->GetInt("opset", 13);
  std::int64_t axis = init.node->GetInt("axis", -1);
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, d = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) {
    const std::int64_t v = s[static_cast<std::size_t>(i)];
    if (i < axis) outer *= v;
    else if (i == axis || opset < 13) d *= v;
    else inner *= v;
  }
  return MakeFn([=](const KernelArgs& a) {
    if (outer == 0 || d == 0 || inner == 0) return Status::Ok();
    const float xs = sx.Get(a, 0);
    const double bits = std::log(static_cast<double>(std::numeric_limits<float>::max() / static_cast<float>(d)));
    const double shift = std::max(0.0, bits - 5.0) / static_cast<double>(xs);
    float table[256];
    for (int i = 0; i < 256; ++i) {
      table[i] = static_cast<float>(std::exp((static_cast<double>(i) - 255.0 + shift) * static_cast<double>(xs)));
    }
    const float yinv = std::floor(1.0f / sy.Get(a, 0)), zo = zy.Get(a, 0);
    const Q* x = a.in_as<Q>(0);
    Q* y = a.out_as<Q>(0);
    ParallelFor(outer * inner, std::max<std::int64_t>(1, 16384 / d), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t base = r / inner * d * inner + r % inner;
        int m = x[base];
        for (std::int64_t k = 1; k < d; ++k) m = std::max<int>(m, x[base + k * inner]);
        const int off = 255 - m;  // x in [m - 255, m] reads table[off + x]
        float sum = 0.f;
        for (std::int64_t k = 0; k < d; ++k) sum += table[off + x[base + k * inner]];
        for (std::int64_t k = 0; k < d; ++k) {
          const float v = std::nearbyint((table[off + x[base + k * inner]] * yinv) / sum);
          y[base + k * inner] = Saturate<Q>(v + zo);
        }
      }
    });
    return Status::Ok();
  });
}
Result<std::unique_ptr<Kernel>> MakeQLinearSoftmax(const KernelInit& init) {
  if (init.inputs[0].dtype == DType::kUInt8) return MakeQLinearSoftmaxT<std::uint8_t>(init);
  return MakeQLinearSoftmaxT<std::int8_t>(init);
}

}  // namespace

void RegisterQuantKernels(KernelRegistry& r) {
  r.Register("QuantizeLinear", MakeQuantize);
  r.Register("DequantizeLinear", MakeDequantize);
  r.Register("DynamicQuantizeLinear", MakeDynamicQuantize);
  r.Register("MatMulInteger", [](const KernelInit& init) { return MakeIntegerKernel<DnnlQMatMulKernel>(init, true); });
  r.Register("QLinearMatMul", MakeQLinearMatMul);
  r.Register("ConvInteger", [](const KernelInit& init) { return MakeIntegerKernel<DnnlQConvKernel>(init, false); });
  r.Register("QLinearConv", MakeQLinearConv);
  const std::string ms = ops::kMicrosoftDomain;
  r.Register("QuantizeLinear", MakeQuantize, ms);
  r.Register("DequantizeLinear", MakeDequantize, ms);
  r.Register("QLinearAdd", MakeQLinearAdd, ms);
  r.Register("QLinearMul", MakeQLinearMul, ms);
  r.Register("QLinearSigmoid", MakeQLinearSigmoid, ms);
  r.Register("QLinearLeakyRelu", MakeQLinearLeakyRelu, ms);
  r.Register("QLinearGlobalAveragePool", MakeQLinearGap, ms);
  r.Register("QLinearConcat", MakeQLinearConcat, ms);
  r.Register("QLinearSoftmax", MakeQLinearSoftmax, ms);
}

}  // namespace kiln::cpu
