// Exact 8-bit convolution on int16 products (vpmaddwd): see int16_conv.h.
#include "backends/cpu/kernels/int16_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/util.h"
#include "common/checked.h"

#define KILN_AVX2 __attribute__((target("avx2")))

namespace kiln::cpu {
namespace {

using I64 = std::int64_t;
constexpr I64 kPanel = 16;  // output channels per panel (two vectors of 8 int32)
// Output pixels per micro-tile: 8 int32 accumulators, two weight vectors,
// the broadcast activation pair and vpmaddwd's product (which, without
// VNNI, cannot accumulate in place) leave the 16 vector registers room; 6
// rows would need all 16 and GCC spills them (55 against 84 G
// multiply-adds/s in L1, Zen 4).
constexpr int kRows = 4;
// Channel pairs per pass over a panel's weights (taps times pairs cut into
// chunks): 256 pairs are 16 KiB of packed weights, which stay in L1 while
// the row's tiles run over them; the partial sums wait in a per-thread
// int32 row between chunks.
constexpr I64 kChunkPairs = 256;
// Winograd F(2x2, 3x3): 16 transformed positions; at least 16 channels in
// and out (the transforms' cost against the 2.25x fewer products), and at
// most 1827 in: the exact result's bound below.
constexpr I64 kXi = 16;
constexpr I64 kWinoMinChannels = 16;
constexpr I64 kWinoMaxChannels = 1827;

// Inputs of fewer channels (RGB stems) take each window row as one tap:
// its kw x c values lie together in the image when the channels are not
// padded to even, so a tap sums ceil(kw * c / 2) channel pairs (the last
// one's odd half meets a zero weight) rather than kw taps of c / 2 pairs
// each, half of them padding for 3 channels, with a loop's cost per tap.
constexpr I64 kRowTapChannels = 8;

enum class Mode { kFloat, kInt32, kUInt8, kInt8, kRescale };

// What a tile's last chunk stores, per panel: bias, scales (quantized
// modes), the upper clamp bound (the type's maximum minus the zero point)
// and the zero point.
struct Epilogue {
  // The panel's 16 values of each (padded with 0 past the channels).
  const std::int32_t* bias = nullptr;
  const float* scale = nullptr;
  float hi = 0.f;
  std::int32_t zp = 0;
  // kRescale: the float bias (add), the activation, and the running
  // minimum and maximum per lane of what was stored (range).
  const float* fbias = nullptr;
  bool add = false, range = false;
  int act = 0;
  float alpha = 0.f, beta = 0.f;
  alignas(32) float rlo[8] = {}, rhi[8] = {};
};

// What a tile's stores use, set once a tile rather than read through ep
// each pixel (every such read followed a store that could alias it):
// quantized modes, the upper bound ep.hi and the zero point ep.zp in each
// int16 lane; kRescale, whether a bias is added, and the activation as a
// clamp [alo, ahi] (Relu [0, inf], Clip [alpha, beta], none and LeakyRelu
// [-inf, inf]: the identity on every value, NaN kept) without a branch.
// The panel's factors stay in memory, loaded by each store: held in
// registers too they ran 2-5% slower (spills).
struct StoreConsts {
  __m256 qhi;
  __m256i qzp;
  __m256 alo, ahi, alpha;
  const float* scale;
  const float* bias;
  bool add, leaky;
};
template <Mode M>
KILN_AVX2 inline StoreConsts ConstsOf(const Epilogue& ep) {
  StoreConsts k{};
  k.scale = ep.scale;
  if constexpr (M == Mode::kUInt8 || M == Mode::kInt8) {
    k.qhi = _mm256_set1_ps(ep.hi);
    k.qzp = _mm256_set1_epi16(static_cast<std::int16_t>(ep.zp));
  } else if constexpr (M == Mode::kRescale) {
    k.bias = ep.fbias;
    k.add = ep.add;
    k.leaky = ep.act == 2;
    k.alpha = _mm256_set1_ps(ep.alpha);
    const float inf = std::numeric_limits<float>::infinity();
    k.alo = _mm256_set1_ps(ep.act == 1 ? 0.f : ep.act == 3 ? ep.alpha : -inf);
    k.ahi = _mm256_set1_ps(ep.act == 3 ? ep.beta : inf);
  }
  return k;
}

// act(float(s) * scale [+ bias]) of 8 channels from `off` in the panel,
// RescaleEpilogue's steps (no FMA: the multiply and the add round
// separately; maxps/minps with the bound first keep a NaN, as
// RescaleEpilogue's comparisons do).
KILN_AVX2 inline __m256 Rescale8(__m256i s, int off, const StoreConsts& k) {
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(k.scale + off));
  if (k.add) v = _mm256_add_ps(v, _mm256_loadu_ps(k.bias + off));
  if (k.leaky) {
    v = _mm256_blendv_ps(v, _mm256_mul_ps(k.alpha, v), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
  }
  return _mm256_min_ps(k.ahi, _mm256_max_ps(k.alo, v));
}

// 16 floats at o, cols of them.
KILN_AVX2 inline void StoreFloats16(float* o, __m256 f0, __m256 f1, I64 cols) {
  if (cols == kPanel) {
    _mm256_storeu_ps(o, f0);
    _mm256_storeu_ps(o + 8, f1);
  } else {
    alignas(32) float tmp[kPanel];
    _mm256_store_ps(tmp, f0);
    _mm256_store_ps(tmp + 8, f1);
    std::memcpy(o, tmp, static_cast<std::size_t>(cols) * sizeof(float));
  }
}

// A tile's range lanes into the run's (minps / maxps keep ep's value where
// the tile's is NaN, as they did a stored value at a time).
KILN_AVX2 inline void FoldRange(Epilogue& ep, __m256 lo, __m256 hi) {
  _mm256_store_ps(ep.rlo, _mm256_min_ps(lo, _mm256_load_ps(ep.rlo)));
  _mm256_store_ps(ep.rhi, _mm256_max_ps(hi, _mm256_load_ps(ep.rhi)));
}

// Calls f(std::integral_constant<Mode, m>) for the run's mode.
template <typename F>
void WithMode(Mode m, F&& f) {
  switch (m) {
    case Mode::kFloat: f(std::integral_constant<Mode, Mode::kFloat>{}); break;
    case Mode::kInt32: f(std::integral_constant<Mode, Mode::kInt32>{}); break;
    case Mode::kUInt8: f(std::integral_constant<Mode, Mode::kUInt8>{}); break;
    case Mode::kInt8: f(std::integral_constant<Mode, Mode::kInt8>{}); break;
    case Mode::kRescale: f(std::integral_constant<Mode, Mode::kRescale>{}); break;
  }
}

// Stores one pixel's 16 channels of sums s0, s1 (bias added) as the mode
// says, cols of them valid, at y.
// (k: ConstsOf<M>(ep), set once a tile by the caller.)
// kRescale with kRange: rlo / rhi, the minimum and maximum per lane of the
// caller's stores so far, updated (the direct form scans each unit's
// output instead: MinMaxWithZero over each unit's outputs).
template <Mode M, bool kRange = false>
KILN_AVX2 inline void Store16(__m256i s0, __m256i s1, const StoreConsts& k, void* y, I64 cols, __m256& rlo,
                              __m256& rhi) {
  if constexpr (M == Mode::kFloat) {
    StoreFloats16(static_cast<float*>(y), _mm256_cvtepi32_ps(s0), _mm256_cvtepi32_ps(s1), cols);
  } else if constexpr (M == Mode::kRescale) {
    const __m256 f0 = Rescale8(s0, 0, k), f1 = Rescale8(s1, 8, k);
    StoreFloats16(static_cast<float*>(y), f0, f1, cols);
    // Only the cols stored lanes: a padded channel holds act(0 * 0 + 0),
    // which Clip can put outside the stored values' span (all of them NaN,
    // or a clip range away from 0). The others become NaN, which minps /
    // maxps skip (they keep the running value, their second operand).
    if constexpr (kRange) {
      __m256 g0 = f0, g1 = f1;
      if (cols < kPanel) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), n = _mm256_set1_epi32(static_cast<int>(cols));
        const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
        g0 = _mm256_blendv_ps(nan, f0, _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lane)));
        g1 = _mm256_blendv_ps(nan, f1, _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_add_epi32(lane, _mm256_set1_epi32(8)))));
      }
      rlo = _mm256_min_ps(g0, rlo);
      rhi = _mm256_max_ps(g0, rhi);
      rlo = _mm256_min_ps(g1, rlo);
      rhi = _mm256_max_ps(g1, rhi);
    }
  } else if constexpr (M == Mode::kInt32) {
    std::int32_t* o = static_cast<std::int32_t*>(y);
    if (cols == kPanel) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), s0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 8), s1);
    } else {
      alignas(32) std::int32_t tmp[kPanel];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), s0);
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 8), s1);
      std::memcpy(o, tmp, static_cast<std::size_t>(cols) * sizeof(std::int32_t));
    }
  } else {
    // float(sum) * scale, clamped to the bounds, rounded to nearest even
    // (vcvtps2dq under the default rounding mode), plus the zero point:
    // the float32 route's RequantLanes step for step, in fewer steps. The
    // upper clamp comes before the conversion (past 2^31 it would give
    // INT_MIN); the lower one is the saturation of the packs and the
    // add: below lo, round(v) + zp lies below the type's minimum
    // whether or not int16 saturated it first (zp within [-128, 255]),
    // and the bounds are integers, so clamping before or after rounding
    // agree. packs_epi32 interleaves the two vectors' 128-bit halves;
    // the permute puts channels 0-15 back in order.
    const __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_loadu_ps(k.scale));
    const __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_loadu_ps(k.scale + 8));
    const __m256i r0 = _mm256_cvtps_epi32(_mm256_min_ps(v0, k.qhi)), r1 = _mm256_cvtps_epi32(_mm256_min_ps(v1, k.qhi));
    const __m256i w = _mm256_adds_epi16(_mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8), k.qzp);
    const __m128i wl = _mm256_castsi256_si128(w), wh = _mm256_extracti128_si256(w, 1);
    const __m128i qb = M == Mode::kUInt8 ? _mm_packus_epi16(wl, wh) : _mm_packs_epi16(wl, wh);
    std::uint8_t* o = static_cast<std::uint8_t*>(y);
    if (cols == kPanel) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), qb);
    } else {
      alignas(16) std::uint8_t tmp[kPanel];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), qb);
      std::memcpy(o, tmp, static_cast<std::size_t>(cols));
    }
  }
}

// One chunk of the sums of up to R (<= 4) output pixels, a0 + r * rs being
// pixel r's first value at tap 0, by one panel of 16 channels: taps
// [t0, t1), channel pairs [q0, q1) of each, b the chunk's packed weights.
// `first`: start from 0, else from part (R rows of 16 int32); `last`:
// store the results (Mode) to y (ldy values apart, cols valid), else the
// partial sums to part. kHalf: only the panel's first 8 channels (cols <=
// 8, a panel of a channel count's remainder: 24 outputs are a panel and a
// half) are computed, the other 8 neither multiplied nor stored.
template <int R, Mode M, bool kHalf = false>
KILN_AVX2 inline __attribute__((always_inline)) void Tile(const std::int16_t* a0, I64 rs, const I64* toff, I64 t0, I64 t1, I64 q0, I64 q1,
                    const std::int16_t* b, bool first, bool last, std::int32_t* part, Epilogue& ep, void* y,
                    I64 ldy, I64 cols) {
  // The first chunk starts from the bias (the sums wrap alike either way).
  __m256i c0[R], c1[R];
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    c0[r] = first ? bias0 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(part + r * kPanel));
    c1[r] = kHalf ? bias1 : first ? bias1 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(part + r * kPanel + 8));
  }
  for (I64 t = t0; t < t1; ++t) {
    const std::int16_t* a = a0 + toff[t];
    for (I64 q = q0; q < q1; ++q, b += 32) {
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      const __m256i b1 = kHalf ? b0 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        std::int32_t pair;
        std::memcpy(&pair, a + r * rs + 2 * q, sizeof(pair));
        const __m256i av = _mm256_set1_epi32(pair);
        c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(av, b0));
        if constexpr (!kHalf) c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(av, b1));
      }
    }
  }
  if (!last) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(part + r * kPanel), c0[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(part + r * kPanel + 8), c1[r]);
    }
    return;
  }
  char* yb = static_cast<char*>(y);
  const StoreConsts k = ConstsOf<M>(ep);
  __m256 unused;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    Store16<M>(c0[r], c1[r], k, yb + r * ldy * static_cast<I64>(M == Mode::kUInt8 || M == Mode::kInt8 ? 1 : 4), cols,
               unused, unused);
  }
}

// Where panel p's outputs go: group g's output channels c0 + [0, cols)
// (c0 within y's channels), reading the group's input channels from cin
// (in the image). Computed once a run, not per tile (two divisions).
struct PanelAt {
  I64 c0, cols, cin;
};

// What the direct form's work units share.
struct RowJob {
  const Int16ConvShape& s;
  const std::int16_t* img;
  const std::int16_t* packed;
  const I64* toff;
  const Int16Conv::Chunk* ks;
  I64 nks;
  I64 hp, wp, cp, rs, chunks, per_chunk, panels, panel_vals;
  bool tile_major;
  const std::int32_t* pb;
  const float *ps, *pf;
  char* ybase;
  I64 elem;
  const PanelAt* at;  // per panel
};

struct TileArgs {
  const std::int16_t* a0;
  I64 rs;
  const I64* toff;
  I64 t0, t1, q0, q1;
  const std::int16_t* b;
  bool first, last;
  std::int32_t* part;
  Epilogue* ep;
  void* y;
  I64 ldy, cols;
};

template <Mode M>
KILN_AVX2 void TileAny(int rows, const TileArgs& g) {
#define KILN_I16_TILE(R) \
  Tile<R, M>(g.a0, g.rs, g.toff, g.t0, g.t1, g.q0, g.q1, g.b, g.first, g.last, g.part, *g.ep, g.y, g.ldy, g.cols)
  switch (rows) {
    case 4: KILN_I16_TILE(4); break;
    case 3: KILN_I16_TILE(3); break;
    case 2: KILN_I16_TILE(2); break;
    default: KILN_I16_TILE(1); break;
  }
#undef KILN_I16_TILE
}

// Work units [u0, u1) (output rows times chunks of panels) in mode M: full
// tiles of kRows pixels call Tile<kRows, M> directly, so that a small
// reduction (MobileNetV2's 16 -> 96 1x1: 8 channel pairs a tile) does not
// pay a dispatch per tile and panel.
template <Mode M>
KILN_AVX2 void RunUnits(const RowJob& j, I64 u0, I64 u1, Epilogue& ep, std::int32_t* partial) {
  const Int16ConvShape& s = j.s;
  const I64 tiles = (s.ow + kRows - 1) / kRows, full = s.ow / kRows;
  const I64 ldy = s.k;
  for (I64 u = u0; u < u1; ++u) {
    const I64 row = u / j.chunks, chunk = u % j.chunks;
    const I64 b = row / s.oh, oh = row % s.oh;
    const I64 p0 = chunk * j.per_chunk, p1 = std::min(j.panels, p0 + j.per_chunk);
    const std::int16_t* arow = j.img + ((b * j.hp + oh * s.sh) * j.wp) * j.cp;
    char* yrow = j.ybase + row * s.ow * s.k * j.elem;
    // One tile by one panel over chunk ci.
    auto run = [&](I64 p, I64 ci, I64 tile) __attribute__((always_inline, target("avx2"))) {
      const I64 c0 = j.at[p].c0, cols = j.at[p].cols, cin = j.at[p].cin;
      ep.bias = j.pb + p * kPanel;
      ep.scale = j.ps + p * kPanel;
      ep.fbias = j.pf + p * kPanel;
      const Int16Conv::Chunk& k = j.ks[ci];
      const I64 ow = tile * kRows;
      const std::int16_t* bw = j.packed + p * j.panel_vals + k.off * 32;
      std::int32_t* part = j.nks > 1 ? partial + tile * kRows * kPanel : nullptr;
      void* y = yrow + (ow * s.k + c0) * j.elem;
      if (tile < full && cols <= kPanel / 2) {
        Tile<kRows, M, true>(arow + cin + ow * j.rs, j.rs, j.toff, k.t0, k.t1, k.q0, k.q1, bw, ci == 0, ci + 1 == j.nks,
                             part, ep, y, ldy, cols);
      } else if (tile < full) {
        Tile<kRows, M>(arow + cin + ow * j.rs, j.rs, j.toff, k.t0, k.t1, k.q0, k.q1, bw, ci == 0, ci + 1 == j.nks, part, ep,
                       y, ldy, cols);
      } else {
        const TileArgs args{arow + cin + ow * j.rs, j.rs, j.toff, k.t0, k.t1, k.q0, k.q1, bw, ci == 0, ci + 1 == j.nks,
                            part, &ep, y, ldy, cols};
        TileAny<M>(static_cast<int>(s.ow - ow), args);
      }
    };
    if (j.tile_major) {
      for (I64 tile = 0; tile < tiles; ++tile) {
        for (I64 p = p0; p < p1; ++p) run(p, 0, tile);
      }
    } else {
      for (I64 p = p0; p < p1; ++p) {
        for (I64 ci = 0; ci < j.nks; ++ci) {
          for (I64 tile = 0; tile < tiles; ++tile) run(p, ci, tile);
        }
      }
    }
    if constexpr (M == Mode::kRescale) {
      if (ep.range && p1 > p0) {  // (the last chunks can be empty: 4 panels in 3 chunks of 2)
        // The unit's outputs: channels [first of p0, last of p1 - 1] of
        // each pixel of the row (one run where the unit has every panel).
        const I64 c_begin = j.at[p0].c0, c_end = j.at[p1 - 1].c0 + j.at[p1 - 1].cols;
        // Scanned while they are in L1 or L2 (MinMaxWithZero, as
        // DynamicQuantizeLinear finds a range): gathered in the stores
        // instead, the running values (spilled: the tile's sums and
        // factors fill the registers) chained every store through memory,
        // 0.12 ms of MobileNetV2's 16 -> 96 layer at 112x112 (0.6 ms).
        const float* yf = reinterpret_cast<const float*>(yrow);
        float lo = 0.f, hi = 0.f;
        if (c_begin == 0 && c_end == s.k) {
          MinMaxWithZero(yf, s.ow * s.k, &lo, &hi);
        } else {
          for (I64 x = 0; x < s.ow; ++x) {
            float l = 0.f, h = 0.f;
            MinMaxWithZero(yf + x * s.k + c_begin, c_end - c_begin, &l, &h);
            lo = l < lo ? l : lo;
            hi = h > hi ? h : hi;
          }
        }
        ep.rlo[0] = lo < ep.rlo[0] ? lo : ep.rlo[0];  // MergeRange folds every lane
        ep.rhi[0] = hi > ep.rhi[0] ? hi : ep.rhi[0];
      }
    }
  }
}

// One row of the padded image: w values of c channels (x - zp) between
// `left` and `right` zero pixels, each pixel cp >= c wide (the extra
// channel 0).
template <typename T>
KILN_AVX2 void WidenRow(const T* x, I64 w, I64 c, I64 cp, I64 left, I64 right, std::int32_t zp, std::int16_t* o) {
  std::fill(o, o + left * cp, std::int16_t{0});
  o += left * cp;
  if (cp == c) {
    const I64 n = w * c;
    const __m256i z = _mm256_set1_epi16(static_cast<std::int16_t>(zp));
    I64 i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
      const __m256i wv = std::is_same_v<T, std::int8_t> ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_sub_epi16(wv, z));
    }
    for (; i < n; ++i) o[i] = static_cast<std::int16_t>(x[i] - zp);
  } else {
    for (I64 p = 0; p < w; ++p) {
      for (I64 ch = 0; ch < c; ++ch) o[p * cp + ch] = static_cast<std::int16_t>(x[p * c + ch] - zp);
      for (I64 ch = c; ch < cp; ++ch) o[p * cp + ch] = 0;
    }
  }
  o += w * cp;
  std::fill(o, o + right * cp, std::int16_t{0});
}

Mode ModeOf(const Int16ConvOut& out) {
  return out.f ? (out.rescale ? Mode::kRescale : Mode::kFloat)
               : out.i ? Mode::kInt32 : out.q_signed ? Mode::kInt8 : Mode::kUInt8;
}

// A worker's epilogue state for `out` (its factors' pointers set per panel).
Epilogue EpilogueOf(const Int16ConvOut& out) {
  const Mode mode = ModeOf(out);
  Epilogue ep;
  ep.add = out.rbias != nullptr;
  ep.range = mode == Mode::kRescale && out.range_min;
  ep.act = out.act;
  ep.alpha = out.alpha;
  ep.beta = out.beta;
  if (mode == Mode::kUInt8 || mode == Mode::kInt8) {
    const float qmax = mode == Mode::kUInt8 ? 255.f : 127.f;
    ep.hi = qmax - out.zp;
    ep.zp = static_cast<std::int32_t>(out.zp);
  }
  return ep;
}

// Folds a worker's range lanes into the run's.
void MergeRange(const Epilogue& ep, std::mutex* mu, float* lo_all, float* hi_all) {
  if (!ep.range) return;
  float lo = 0.f, hi = 0.f;
  for (int j = 0; j < 8; ++j) {
    lo = ep.rlo[j] < lo ? ep.rlo[j] : lo;
    hi = ep.rhi[j] > hi ? ep.rhi[j] : hi;
  }
  std::lock_guard<std::mutex> lock(*mu);
  *lo_all = lo < *lo_all ? lo : *lo_all;
  *hi_all = hi > *hi_all ? hi : *hi_all;
}

// Per channel, padded to whole panels with 0: bias, the scale (of the
// requantisation or the rescale) and the rescale's bias. The calling
// thread's (reused across runs); the workers get pointers.
struct PanelFactors {
  std::vector<std::int32_t> bias;
  std::vector<float> scale, fbias;
};
// Panel P holds output channels g * kg + (P % gp) * 16 + [0, 16) of group
// g = P / gp (gp panels a group, kg channels; one group: P * 16 + [0, 16)).
const PanelFactors& Factors(I64 k, I64 panels, I64 groups, const std::int32_t* bias, const Int16ConvOut& out) {
  thread_local PanelFactors f;
  const std::size_t padded = static_cast<std::size_t>(panels * kPanel);
  f.bias.assign(padded, 0);
  f.scale.assign(padded, 0.f);
  f.fbias.assign(padded, 0.f);
  const I64 kg = k / groups, gp = panels / groups;
  for (I64 c = 0; c < k; ++c) {
    const I64 at = (c / kg * gp) * kPanel + c % kg;  // its panel's first slot, plus its place in the group
    if (bias) f.bias[at] = bias[c];
    if (out.rescale) f.scale[at] = out.rescale[c];
    else if (out.scales) f.scale[at] = out.scales[out.scale_count == 1 ? 0 : c];
    if (out.rbias) f.fbias[at] = out.rbias[c];
  }
  return f;
}

// What both forms of a run share: the mode, the padded factors, where the
// output goes, and the range gathered from the workers.
struct OutState {
  OutState(const Int16ConvOut& out, I64 k, I64 panels, I64 groups, const std::int32_t* bias)
      : mode(ModeOf(out)),
        fac(Factors(k, panels, groups, bias, out)),
        pb(fac.bias.data()),
        ps(fac.scale.data()),
        pf(fac.fbias.data()),
        ybase(reinterpret_cast<char*>(out.f ? static_cast<void*>(out.f) : out.i ? static_cast<void*>(out.i) : out.q)) {}
  void Merge(const Epilogue& ep) { MergeRange(ep, &mu, &lo, &hi); }
  void Finish(const Int16ConvOut& out) const {
    if (out.range_min) {
      *out.range_min = lo;
      *out.range_max = hi;
    }
  }
  const Mode mode;
  const PanelFactors& fac;
  const std::int32_t* pb;
  const float *ps, *pf;
  char* ybase;
  float lo = 0.f, hi = 0.f;
  std::mutex mu;
};

}  // namespace

bool Int16ConvAvailable() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

bool Int16Conv::Plan(const Int16ConvShape& s, bool winograd) {
  s_ = s;
  for (I64 v : {s.n, s.h, s.w, s.c, s.k, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.groups}) {
    if (v <= 0) return false;
  }
  if (s.c % s.groups != 0 || s.k % s.groups != 0) return false;
  const I64 cg = s.c / s.groups, kg = s.k / s.groups;
  for (I64 v : {s.pad_top, s.pad_left, s.pad_bottom, s.pad_right}) {
    if (v < 0) return false;
  }
  I64 taps = 0, bytes = 0;
  if (!CheckedAdd(s.h, s.pad_top, &hp_) || !CheckedAdd(hp_, s.pad_bottom, &hp_) || !CheckedAdd(s.w, s.pad_left, &wp_) ||
      !CheckedAdd(wp_, s.pad_right, &wp_) || !CheckedMul(s.kh, s.kw, &taps)) {
    return false;
  }
  // Every window lies in the padded image (the output extents follow from
  // the input's and the pads; a shape that says otherwise is refused).
  I64 reach_h = 0, reach_w = 0, span_h = 0, span_w = 0;
  if (!CheckedMul(s.oh - 1, s.sh, &reach_h) || !CheckedMul(s.kh - 1, s.dh, &span_h) ||
      !CheckedAdd(reach_h, span_h, &reach_h) || !CheckedMul(s.ow - 1, s.sw, &reach_w) ||
      !CheckedMul(s.kw - 1, s.dw, &span_w) || !CheckedAdd(reach_w, span_w, &reach_w) || reach_h >= hp_ ||
      reach_w >= wp_) {
    return false;
  }
  rowtap_ = s.groups == 1 && s.c < kRowTapChannels && s.dw == 1;
  cp_ = rowtap_ ? s.c : s.c + (s.c & 1);
  taps_ = taps;
  // Groups: each reads its cg channels of the pixel in pairs from its
  // first (an odd cg's last pair meets a zero weight on the next group's
  // first channel, or on the pixel's padding or the image's room).
  kp_ = s.groups == 1 ? cp_ / 2 : (cg + 1) / 2;
  if (rowtap_) {  // one tap per window row, its kw x c values in pairs
    I64 span = 0;
    if (!CheckedMul(s.kw, s.c, &span)) return false;
    taps_ = s.kh;
    kp_ = (span + 1) / 2;
  }
  // Winograd F(2x2, 3x3): 3x3, stride 1, no dilation, enough channels for
  // the transforms to pay, and few enough for the exact bound. Its 4x4
  // input tiles start at even rows and columns: the image grows to whole
  // tiles (zero rows and columns past the pads).
  wino_ = winograd && s.groups == 1 && !rowtap_ && s.kh == 3 && s.kw == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 &&
          s.c >= kWinoMinChannels && s.k >= kWinoMinChannels && s.c <= kWinoMaxChannels;
  if (wino_) {
    th_ = (s.oh + 1) / 2;
    tw_ = (s.ow + 1) / 2;
    hp_ = std::max(hp_, 2 * th_ + 2);
    wp_ = std::max(wp_, 2 * tw_ + 2);
  }
  // Row taps: the last pair of the image's last window row reads one value
  // past it (its weight 0): one value of room.
  if (!CheckedMul(s.n, hp_, &image_) || !CheckedMul(image_, wp_, &image_) || !CheckedMul(image_, cp_, &image_) ||
      !CheckedAdd(image_, rowtap_ || s.groups > 1 ? 1 : 0, &image_)) {
    return false;
  }
  if (!CheckedMul(image_, 2, &bytes) || bytes > kMaxTensorBytes) return false;
  panels_ = s.groups * ((kg + kPanel - 1) / kPanel);
  I64 packed = 0;
  if (!CheckedMul(panels_, kPanel, &packed) || !CheckedMul(packed, wino_ ? kXi : taps_, &packed) || !CheckedMul(packed, 2 * kp_, &packed) ||
      !CheckedMul(packed, 2, &bytes) || bytes > kMaxTensorBytes) {
    return false;
  }
  tap_off_.clear();
  for (I64 i = 0; i < s.kh; ++i) {
    if (rowtap_) tap_off_.push_back(i * s.dh * wp_ * cp_);
    for (I64 j = 0; j < s.kw && !rowtap_; ++j) tap_off_.push_back((i * s.dh * wp_ + j * s.dw) * cp_);
  }
  chunks_.clear();
  if (kp_ <= kChunkPairs) {
    const I64 per = std::max<I64>(1, kChunkPairs / kp_);
    for (I64 t = 0; t < taps_; t += per) chunks_.push_back({t, std::min(taps_, t + per), 0, kp_, t * kp_});
  } else {
    for (I64 t = 0; t < taps_; ++t) {
      for (I64 q = 0; q < kp_; q += kChunkPairs) {
        chunks_.push_back({t, t + 1, q, std::min(kp_, q + kChunkPairs), t * kp_ + q});
      }
    }
  }
  packed_.reset();  // packed for another plan's channels or form, perhaps
  return true;
}

std::string Int16Conv::WeightKey() const {
  return std::to_string(s_.c) + ":" + std::to_string(s_.k) + ":" + std::to_string(s_.kh) + ":" +
         std::to_string(s_.kw) + ":g" + std::to_string(s_.groups) + (wino_ ? ":wino" : rowtap_ ? ":rowtap" : ":direct");
}

bool Int16Conv::ShareWeights(const Int16Conv& other) {
  if (!other.packed_ || other.s_.c != s_.c || other.s_.k != s_.k || other.s_.kh != s_.kh || other.s_.kw != s_.kw || other.s_.groups != s_.groups ||
      other.wino_ != wino_ || other.rowtap_ != rowtap_) {
    return false;
  }
  packed_ = other.packed_;
  return true;
}

std::int16_t* Int16Conv::Allocate(std::size_t count) {
  auto* p = static_cast<std::int16_t*>(std::aligned_alloc(64, (count * sizeof(std::int16_t) + 63) / 64 * 64));
  if (!p) throw std::bad_alloc();
  packed_.reset(p, [](std::int16_t* q) { std::free(q); });
  std::fill(packed_.get(), packed_.get() + count, std::int16_t{0});
  return packed_.get();
}

void Int16Conv::PackWeights(const std::int8_t* w) {
  if (wino_) {
    PackWinograd(w);
    return;
  }
  const I64 pairs = taps_ * kp_;  // pairs per panel
  std::int16_t* packed = Allocate(static_cast<std::size_t>(panels_ * pairs * 2 * kPanel));  // Plan bounded the bytes
  const I64 taps = s_.kh * s_.kw, cg = s_.c / s_.groups, kg = s_.k / s_.groups, gp = panels_ / s_.groups;
  for (I64 o = 0; o < s_.k; ++o) {
    const I64 p = o / kg * gp + o % kg / kPanel, col = o % kg % kPanel;
    for (I64 ch = 0; ch < cg; ++ch) {
      for (I64 t = 0; t < taps; ++t) {
        // Its place in the panel's run of values: tap-major, channels
        // padded to cp_ (row taps: window row i's kw x c values, padded to
        // its pairs).
        const I64 k = rowtap_ ? t / s_.kw * 2 * kp_ + t % s_.kw * s_.c + ch : t * 2 * kp_ + ch;
        const I64 dst = ((p * pairs + k / 2) * kPanel + col) * 2 + (k & 1);
        packed[dst] = w[(o * cg + ch) * taps + t];  // OIHW (I = cg): t = i * kw + j
      }
    }
  }
}

// WidenRow of float32 values quantized as DynamicQuantizeLinear does with
// scale s and zero point zp (QuantizeCenteredInt16): straight into the
// image where pixels are not padded, else through a per-thread row.
static void QuantizeRow(const float* x, I64 w, I64 c, I64 cp, I64 left, I64 right, float s, std::int32_t zp, std::int16_t* o) {
  std::fill(o, o + left * cp, std::int16_t{0});
  o += left * cp;
  if (cp == c) {
    QuantizeCenteredInt16(x, o, w * c, s, zp);
  } else {
    thread_local std::vector<std::int16_t> row;
    if (row.size() < static_cast<std::size_t>(w * c)) row.resize(static_cast<std::size_t>(w * c));
    QuantizeCenteredInt16(x, row.data(), w * c, s, zp);
    for (I64 p = 0; p < w; ++p) {
      std::copy(row.data() + p * c, row.data() + (p + 1) * c, o + p * cp);
      std::fill(o + p * cp + c, o + (p + 1) * cp, std::int16_t{0});
    }
  }
  o += w * cp;
  std::fill(o, o + right * cp, std::int16_t{0});
}

void Int16Conv::Run(const void* x, bool x_signed, std::int32_t x_zp, const std::int32_t* bias,
                    const Int16ConvOut& out, const float* x_scale) const {
  thread_local std::vector<std::int16_t> image;  // the caller's; the workers get its pointer
  if (image.size() < static_cast<std::size_t>(image_)) image.resize(static_cast<std::size_t>(image_));
  std::int16_t* img = image.data();
  if (rowtap_ || s_.groups > 1) img[image_ - 1] = 0;  // the room past the last window row or group
  const Int16ConvShape& s = s_;
  const I64 cp = cp_, hp = hp_, wp = wp_;
  // Row r of the padded image.
  auto image_row = [&](I64 r) {
    const I64 b = r / hp, ih = r % hp - s.pad_top;
    std::int16_t* o = img + r * wp * cp;
    if (ih < 0 || ih >= s.h) {
      std::fill(o, o + wp * cp, std::int16_t{0});
      return;
    }
    const I64 off = ((b * s.h + ih) * s.w) * s.c;
    const I64 right = wp - s.w - s.pad_left;  // the pad, and Winograd's whole tiles
    if (x_scale) QuantizeRow(static_cast<const float*>(x) + off, s.w, s.c, cp, s.pad_left, right, *x_scale, x_zp, o);
    else if (x_signed) WidenRow(static_cast<const std::int8_t*>(x) + off, s.w, s.c, cp, s.pad_left, right, x_zp, o);
    else WidenRow(static_cast<const std::uint8_t*>(x) + off, s.w, s.c, cp, s.pad_left, right, x_zp, o);
  };
  // Work units: output rows times chunks of panels, enough units for the
  // threads where there are few rows (7x7 maps, a matrix product's one row).
  const I64 rows = s.n * s.oh;
  const I64 want = 8 * NumThreads();
  const I64 chunks = wino_ ? 1 : rows >= want ? 1 : std::min(panels_, (want + rows - 1) / rows);
  // A 1x1 convolution without padding whose units are whole output rows
  // reads one image row per unit, which no other unit reads: the unit makes
  // it, just before it multiplies it (still in L1), so the image takes no
  // pass and no fork of its own (MobileNetV2's 1x1 layers, matrix products;
  // with stride 2 the rows between are never made).
  const bool unit_rows = !wino_ && !rowtap_ && chunks == 1 && s.kh == 1 && s.kw == 1 && s.pad_top == 0 &&
                         s.pad_left == 0 && s.pad_bottom == 0 && s.pad_right == 0;
  if (!unit_rows) {  // the padded image, a row of it at a time
    ParallelFor(s.n * hp, std::max<I64>(1, 16384 / std::max<I64>(1, wp * cp)), [&](I64 r0, I64 r1) {
      for (I64 r = r0; r < r1; ++r) image_row(r);
    });
  }
  if (wino_) {
    RunWinograd(img, bias, out);
    return;
  }
  const I64 per_chunk = (panels_ + chunks - 1) / chunks;
  const I64 panel_vals = taps_ * 2 * kp_ * kPanel;
  // Multiply-adds per unit: a share pays for the fork past ~50K of them.
  const I64 unit_macs = std::max<I64>(1, s.ow * per_chunk * kPanel * taps_ * 2 * kp_);
  const std::vector<Chunk>& ks = chunks_;
  OutState st(out, s.k, panels_, s.groups, bias);
  const Mode mode = st.mode;
  const std::int32_t* pb = st.pb;
  const float *ps = st.ps, *pf = st.pf;
  // Where one chunk holds every panel's weights and they fit L1 (a small
  // reduction: MobileNetV2's 16 -> 96 1x1 has 3 KiB), each tile of pixels
  // runs every panel before the next tile, so that a pixel's channels are
  // stored together; else each panel runs over the row's tiles (its
  // weights stay in L1 while they do).
  const bool tile_major = ks.size() == 1 && panels_ * panel_vals * 2 <= 16384;
  const I64 elem = mode == Mode::kUInt8 || mode == Mode::kInt8 ? 1 : 4;
  char* ybase = st.ybase;
  const I64 rs = s.sw * cp;  // an output row's pixels in the image
  const I64 gp = panels_ / s.groups, kg = s.k / s.groups, cg = s.c / s.groups;  // per group
  std::vector<PanelAt> at(static_cast<std::size_t>(panels_));
  for (I64 p = 0; p < panels_; ++p) {
    const I64 g = p / gp, c0 = g * kg + p % gp * kPanel;
    at[static_cast<std::size_t>(p)] = {c0, std::min(kPanel, (g + 1) * kg - c0), g * cg};
  }
  const RowJob job{s,        img,          packed_.get(), tap_off_.data(), ks.data(), static_cast<I64>(ks.size()),
                   hp,       wp,           cp,            rs,              chunks,    per_chunk,
                   panels_,  panel_vals,   tile_major,    pb,              ps,        pf,
                   ybase,    elem,         at.data()};
  ParallelFor(rows * chunks, std::max<I64>(1, 50000 / unit_macs), [&](I64 u0, I64 u1) {
    Epilogue ep = EpilogueOf(out);
    thread_local std::vector<std::int32_t> partial;  // a row's partial sums between chunks
    const I64 tiles = (s.ow + kRows - 1) / kRows;
    if (ks.size() > 1 && partial.size() < static_cast<std::size_t>(tiles * kRows * kPanel)) {
      partial.resize(static_cast<std::size_t>(tiles * kRows * kPanel));
    }
    if (unit_rows) {  // unit u is output row u: image row (batch, u's row * stride)
      for (I64 u = u0; u < u1; ++u) image_row(u / s.oh * hp + u % s.oh * s.sh);
    }
    WithMode(mode, [&](auto m) { RunUnits<decltype(m)::value>(job, u0, u1, ep, partial.data()); });
    st.Merge(ep);
  });
  st.Finish(out);
}

// Winograd F(2x2, 3x3) in integers (Lavin & Gray, 2016), exact:
//   B^T = [1  0 -1  0]   2G = [2  0 0]   A^T = [1 1  1  0]
//         [0  1  1  0]        [1  1 1]         [0 1 -1 -1]
//         [0 -1  1  0]        [1 -1 1]
//         [0  1  0 -1]        [0  0 2]
// V = B^T d B of each 4x4 input tile (x - x_zp: |V| <= 4 * 255, int16),
// U' = (2G) g (2G)^T = 4 G g G^T of each 3x3 filter (|U'| <= 9 * 128,
// int16), M[xi] = sum over channels of V[xi] U'[xi] (vpmaddwd pairs of at
// most 2 * 1020 * 1152, int32 sums), and A^T M A = 4 y for the 2x2 output
// tile. Every step but the last is a ring operation, so modulo 2^32 (where
// the sums wrap) the result is 4 y exactly; while |4 y| < 2^31, i.e. |y| <
// 2^29, it is 4 y itself and an arithmetic shift by 2 gives y. |y| <= 9 *
// c * 255 * 128 = 293760 c, under 2^29 for c <= 1827 (kWinoMaxChannels).
// The products per output drop from 9 to 4 per channel (16 per 2x2 tile).
void Int16Conv::PackWinograd(const std::int8_t* w) {
  const I64 kp = kp_;
  std::int16_t* packed = Allocate(static_cast<std::size_t>(kXi * panels_ * kp * 2 * kPanel));
  for (I64 o = 0; o < s_.k; ++o) {
    const I64 p = o / kPanel, col = o % kPanel;
    for (I64 ch = 0; ch < s_.c; ++ch) {
      const std::int8_t* g = w + (o * s_.c + ch) * 9;
      int t[4][3];  // (2G) g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = 2 * g[j];
        t[1][j] = g[j] + g[3 + j] + g[6 + j];
        t[2][j] = g[j] - g[3 + j] + g[6 + j];
        t[3][j] = 2 * g[6 + j];
      }
      for (int i = 0; i < 4; ++i) {
        const int u[4] = {2 * t[i][0], t[i][0] + t[i][1] + t[i][2], t[i][0] - t[i][1] + t[i][2], 2 * t[i][2]};
        for (int j = 0; j < 4; ++j) {
          const I64 xi = i * 4 + j;
          const I64 dst = (((xi * panels_ + p) * kp + ch / 2) * kPanel + col) * 2 + (ch & 1);
          packed[dst] = static_cast<std::int16_t>(u[j]);  // |u| <= 1152
        }
      }
    }
  }
}

namespace {

// V = B^T d B for one tile, 16 channels at a time (cp a multiple of 16; a
// tail of pairs done one lane at a time). d: the tile's top-left value in
// the image (rows wp * cp apart, pixels cp apart); v: V[0] of this tile,
// the 16 positions `vstride` values apart.
KILN_AVX2 void InputTile(const std::int16_t* d, I64 row, I64 cp, std::int16_t* v, I64 vstride) {
  I64 ch = 0;
  for (; ch + 16 <= cp; ch += 16) {
    __m256i t[4][4];
    for (int r = 0; r < 4; ++r) {
      const std::int16_t* p = d + r * row + ch;
      const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + cp));
      const __m256i d2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * cp));
      const __m256i d3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 3 * cp));
      t[r][0] = _mm256_sub_epi16(d0, d2);
      t[r][1] = _mm256_add_epi16(d1, d2);
      t[r][2] = _mm256_sub_epi16(d2, d1);
      t[r][3] = _mm256_sub_epi16(d1, d3);
    }
    for (int j = 0; j < 4; ++j) {
      const __m256i v0 = _mm256_sub_epi16(t[0][j], t[2][j]), v1 = _mm256_add_epi16(t[1][j], t[2][j]);
      const __m256i v2 = _mm256_sub_epi16(t[2][j], t[1][j]), v3 = _mm256_sub_epi16(t[1][j], t[3][j]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + (0 * 4 + j) * vstride + ch), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + (1 * 4 + j) * vstride + ch), v1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + (2 * 4 + j) * vstride + ch), v2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + (3 * 4 + j) * vstride + ch), v3);
    }
  }
  for (; ch < cp; ++ch) {
    int t[4][4];
    for (int r = 0; r < 4; ++r) {
      const std::int16_t* p = d + r * row + ch;
      t[r][0] = p[0] - p[2 * cp];
      t[r][1] = p[cp] + p[2 * cp];
      t[r][2] = p[2 * cp] - p[cp];
      t[r][3] = p[cp] - p[3 * cp];
    }
    for (int j = 0; j < 4; ++j) {
      v[(0 * 4 + j) * vstride + ch] = static_cast<std::int16_t>(t[0][j] - t[2][j]);
      v[(1 * 4 + j) * vstride + ch] = static_cast<std::int16_t>(t[1][j] + t[2][j]);
      v[(2 * 4 + j) * vstride + ch] = static_cast<std::int16_t>(t[2][j] - t[1][j]);
      v[(3 * 4 + j) * vstride + ch] = static_cast<std::int16_t>(t[1][j] - t[3][j]);
    }
  }
}

// A^T M A >> 2 for 8 channels: m[xi] (16 vectors) -> y[dy * 2 + dx].
KILN_AVX2 inline void OutputTile8(const std::int32_t* m, I64 mstride, __m256i y[4]) {
  __m256i s[4][2];
  for (int r = 0; r < 4; ++r) {
    const __m256i m0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + (r * 4 + 0) * mstride));
    const __m256i m1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + (r * 4 + 1) * mstride));
    const __m256i m2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + (r * 4 + 2) * mstride));
    const __m256i m3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + (r * 4 + 3) * mstride));
    s[r][0] = _mm256_add_epi32(_mm256_add_epi32(m0, m1), m2);
    s[r][1] = _mm256_sub_epi32(_mm256_sub_epi32(m1, m2), m3);
  }
  for (int j = 0; j < 2; ++j) {
    y[j] = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(s[0][j], s[1][j]), s[2][j]), 2);
    y[2 + j] = _mm256_srai_epi32(_mm256_sub_epi32(_mm256_sub_epi32(s[1][j], s[2][j]), s[3][j]), 2);
  }
}

// The output transform of `nt` tiles (first tile index t0) for panel p
// (M: [16 positions][tb tiles][16 channels]), bias added, stored as the
// mode says.
template <Mode M>
KILN_AVX2 void OutputTiles(const std::int32_t* mbuf, I64 tb, I64 nt, I64 t0, I64 p, const Int16ConvShape& s, I64 th,
                           I64 tw, const std::int32_t* pb, const float* ps, const float* pf, Epilogue& ep,
                           char* ybase) {
  constexpr I64 elem = M == Mode::kUInt8 || M == Mode::kInt8 ? 1 : 4;
  const I64 c0 = p * kPanel, cols = std::min(kPanel, s.k - c0);
  ep.bias = pb + c0;
  ep.scale = ps + c0;
  ep.fbias = pf + c0;
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
  const StoreConsts k = ConstsOf<M>(ep);
  __m256 rlo = _mm256_set1_ps(INFINITY), rhi = _mm256_set1_ps(-INFINITY);
  for (I64 i = 0; i < nt; ++i) {
    const I64 t = t0 + i, b = t / (th * tw), ti = t / tw % th, tj = t % tw;
    const std::int32_t* m = mbuf + i * kPanel;
    __m256i lo[4], hi[4];
    OutputTile8(m, tb * kPanel, lo);
    OutputTile8(m + 8, tb * kPanel, hi);
    for (int q = 0; q < 4; ++q) {
      const I64 oy = 2 * ti + q / 2, ox = 2 * tj + q % 2;
      if (oy >= s.oh || ox >= s.ow) continue;
      const I64 off = ((b * s.oh + oy) * s.ow + ox) * s.k + c0;
      Store16<M, true>(_mm256_add_epi32(lo[q], bias0), _mm256_add_epi32(hi[q], bias1), k, ybase + off * elem, cols,
                       rlo, rhi);
    }
  }
  if constexpr (M == Mode::kRescale) FoldRange(ep, rlo, rhi);
}

}  // namespace

void Int16Conv::RunWinograd(const std::int16_t* img, const std::int32_t* bias, const Int16ConvOut& out) const {
  const Int16ConvShape& s = s_;
  const I64 cp = cp_, kp = kp_, tiles = s.n * th_ * tw_;
  // Work units: blocks of tiles times chunks of panels. A block's V
  // (16 x tiles x cp int16) stays within about 384 KiB (L2), 4 to 128
  // tiles: each (position, panel) of weights is read once per block; M is
  // one panel's (16 x tiles x 16 int32), transformed back before the next.
  // With several threads, enough units for them: chunks of panels before
  // smaller blocks (a chunk computes its block's V again, which costs less
  // than reading the weights again).
  // Blocks of equal size (within a tile), and a unit count that is a
  // multiple of the threads where the panels allow: ParallelFor gives each
  // thread a run of whole units (ResNet-18's 14x14 layer in blocks of 48 and
  // 1 tile ran no faster on two threads than on one).
  const int threads = NumThreads();
  const I64 want = threads > 1 ? 4 * threads : 1;
  const I64 tb_max = std::clamp<I64>(393216 / (kXi * 2 * cp) / kRows * kRows, kRows, 128);
  const I64 blocks = (tiles + tb_max - 1) / tb_max;
  const I64 tb = (tiles + blocks - 1) / blocks;
  I64 chunks = blocks >= want ? 1 : std::min(panels_, (want + blocks - 1) / blocks);
  while (threads > 1 && (blocks * chunks) % threads != 0 && chunks < panels_) ++chunks;
  // Panels per chunk as even as they go (the first panels_ % chunks get one more).
  const I64 base_panels = panels_ / chunks, extra_panels = panels_ % chunks;
  OutState st(out, s.k, panels_, s.groups, bias);
  const Mode mode = st.mode;
  const std::int32_t* pb = st.pb;
  const float *ps = st.ps, *pf = st.pf;
  char* ybase = st.ybase;
  // Chunks of the channel pairs (partial sums kept between them).
  std::vector<std::pair<I64, I64>> qs;
  for (I64 q = 0; q < kp; q += kChunkPairs) qs.emplace_back(q, std::min(kp, q + kChunkPairs));
  static const I64 kZeroTap = 0;
  alignas(32) static const std::int32_t kZeros[kPanel] = {};
  ParallelFor(blocks * chunks, 1, [&](I64 u0, I64 u1) {
    thread_local std::vector<std::int16_t> vbuf;
    thread_local std::vector<std::int32_t> mbuf, partial;
    if (vbuf.size() < static_cast<std::size_t>(kXi * tb * cp)) vbuf.resize(static_cast<std::size_t>(kXi * tb * cp));
    if (mbuf.size() < static_cast<std::size_t>(kXi * tb * kPanel)) mbuf.resize(static_cast<std::size_t>(kXi * tb * kPanel));
    if (qs.size() > 1 && partial.size() < static_cast<std::size_t>(tb * kPanel)) {
      partial.resize(static_cast<std::size_t>(tb * kPanel));
    }
    Epilogue sums;  // the products' stores: int32, no bias
    sums.bias = kZeros;
    Epilogue ep = EpilogueOf(out);
    for (I64 u = u0; u < u1; ++u) {
      const I64 block = u / chunks, chunk = u % chunks;
      const I64 t0 = block * tb, nt = std::min(tb, tiles - t0);
      const I64 p0 = chunk * base_panels + std::min(chunk, extra_panels);
      const I64 p1 = p0 + base_panels + (chunk < extra_panels ? 1 : 0);
      if (p0 >= p1) continue;
      for (I64 i = 0; i < nt; ++i) {
        const I64 t = t0 + i, b = t / (th_ * tw_), ti = t / tw_ % th_, tj = t % tw_;
        InputTile(img + ((b * hp_ + 2 * ti) * wp_ + 2 * tj) * cp, wp_ * cp, cp, vbuf.data() + i * cp, tb * cp);
      }
      for (I64 p = p0; p < p1; ++p) {
        for (I64 xi = 0; xi < kXi; ++xi) {
          const std::int16_t* bp = packed_.get() + (xi * panels_ + p) * kp * 2 * kPanel;
          for (std::size_t ci = 0; ci < qs.size(); ++ci) {
            for (I64 g = 0; g < nt; g += kRows) {
              const int n = static_cast<int>(std::min<I64>(kRows, nt - g));
              const TileArgs a{vbuf.data() + (xi * tb + g) * cp, cp, &kZeroTap, 0, 1, qs[ci].first, qs[ci].second,
                               bp + qs[ci].first * 2 * kPanel, ci == 0, ci + 1 == qs.size(),
                               qs.size() > 1 ? partial.data() + g * kPanel : nullptr, &sums,
                               mbuf.data() + (xi * tb + g) * kPanel, kPanel, kPanel};
              TileAny<Mode::kInt32>(n, a);
            }
          }
        }
        WithMode(mode, [&](auto m) {
          OutputTiles<decltype(m)::value>(mbuf.data(), tb, nt, t0, p, s, th_, tw_, pb, ps, pf, ep, ybase);
        });
      }
    }
    st.Merge(ep);
  });
  st.Finish(out);
}

}  // namespace kiln::cpu
