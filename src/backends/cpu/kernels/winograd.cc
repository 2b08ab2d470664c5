// Winograd F(4x4, 3x3), channels-last float32, AVX2 + FMA: see winograd.h.
//
// Transforms (Lavin & Gray, points 0, +-1, +-2, infinity):
//   B^T = [4  0 -5  0 1 0]   G = [ 1/4     0     0 ]   A^T = [1 1  1 1  1 0]
//         [0 -4 -4  1 1 0]       [-1/6  -1/6  -1/6 ]         [0 1 -1 2 -2 0]
//         [0  4 -4 -1 1 0]       [-1/6   1/6  -1/6 ]         [0 1  1 4  4 0]
//         [0 -2 -1  2 1 0]       [1/24  1/12   1/6 ]         [0 1 -1 8 -8 1]
//         [0  2 -1 -2 1 0]       [1/24 -1/12   1/6 ]
//         [0  4  0 -5 0 1]       [  0     0     1  ]
// Layouts: packed weights u[xi][kb][c][16] (36 positions xi, output channels
// in blocks of 16, zero-padded); per block of tiles, v[xi][t][c] and
// m[xi][t][kp] (kp = k rounded up to 16) in the thread's scratch memory.
#include "backends/cpu/kernels/winograd.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"

#define KILN_AVX2 __attribute__((target("avx2,fma")))

namespace kiln::cpu {
namespace {

using I64 = std::int64_t;
constexpr I64 kTile = 4, kIn = 6, kXi = 36, kNb = 16;

I64 PaddedK(I64 k) { return (k + kNb - 1) / kNb * kNb; }

// Tiles per block, a multiple of the micro-kernel's 6 rows: enough that the
// block's v and m fill about 256 KiB (few channels), and at least
// c kp / (2 (c + kp)) so that reading the transformed weights again for
// each block (36 c kp floats) costs no more than the block's own v and m
// traffic (36 tiles (c + kp) floats, written and read); at most 8 MiB of
// v and m per thread (the threads' scratch memory stays allocated).
I64 TilesPerBlock(I64 c, I64 kp) {
  const I64 fit = (256 * 1024 / 4) / (kXi * (c + kp));
  const I64 reuse = (c * kp + 2 * (c + kp) - 1) / (2 * (c + kp));
  const I64 cap = (8 * 1024 * 1024 / 4) / (kXi * (c + kp));
  const I64 tb = std::min(std::max(fit, reuse), cap);
  return std::max<I64>(6, (tb + 5) / 6 * 6);
}

// c[R x 16] = a[R x kc] (row stride lda) * b[kc x 16] (packed, 16 per row).
// Named accumulators, not an array: GCC 12 kept an array's elements on the
// stack, storing 12 of them every iteration.
template <int R>
KILN_AVX2 void MicroKernel(const float* a, I64 lda, const float* b, I64 kc, float* c, I64 ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  for (I64 p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b + p * kNb), b1 = _mm256_load_ps(b + p * kNb + 8);
    __m256 av = _mm256_broadcast_ss(a0 + p);
    c00 = _mm256_fmadd_ps(av, b0, c00), c01 = _mm256_fmadd_ps(av, b1, c01);
    if constexpr (R > 1) {
      av = _mm256_broadcast_ss(a1 + p);
      c10 = _mm256_fmadd_ps(av, b0, c10), c11 = _mm256_fmadd_ps(av, b1, c11);
    }
    if constexpr (R > 2) {
      av = _mm256_broadcast_ss(a2 + p);
      c20 = _mm256_fmadd_ps(av, b0, c20), c21 = _mm256_fmadd_ps(av, b1, c21);
    }
    if constexpr (R > 3) {
      av = _mm256_broadcast_ss(a3 + p);
      c30 = _mm256_fmadd_ps(av, b0, c30), c31 = _mm256_fmadd_ps(av, b1, c31);
    }
    if constexpr (R > 4) {
      av = _mm256_broadcast_ss(a4 + p);
      c40 = _mm256_fmadd_ps(av, b0, c40), c41 = _mm256_fmadd_ps(av, b1, c41);
    }
    if constexpr (R > 5) {
      av = _mm256_broadcast_ss(a5 + p);
      c50 = _mm256_fmadd_ps(av, b0, c50), c51 = _mm256_fmadd_ps(av, b1, c51);
    }
  }
  _mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
  if constexpr (R > 1) _mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
  if constexpr (R > 2) _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  if constexpr (R > 3) _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  if constexpr (R > 4) _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  if constexpr (R > 5) _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

// m[rows x cols] (row stride ldm) = v[rows x c] u, u packed in blocks of
// 16 columns (cols a multiple of 16).
KILN_AVX2 void Gemm(const float* v, I64 rows, I64 c, const float* u, I64 cols, float* m, I64 ldm) {
  const I64 kp = ldm;
  for (I64 kb = 0; kb < cols / kNb; ++kb) {
    const float* b = u + kb * c * kNb;
    I64 r = 0;
    for (; r + 6 <= rows; r += 6) MicroKernel<6>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp);
    switch (rows - r) {
      case 5: MicroKernel<5>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp); break;
      case 4: MicroKernel<4>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp); break;
      case 3: MicroKernel<3>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp); break;
      case 2: MicroKernel<2>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp); break;
      case 1: MicroKernel<1>(v + r * c, c, b, c, m + r * kp + kb * kNb, kp); break;
      default: break;
    }
  }
}

// B^T d for six vectors (one column of a 6x6 tile).
KILN_AVX2 inline void InputRows(const __m256 d[6], __m256 r[6]) {
  const __m256 four = _mm256_set1_ps(4.f), five = _mm256_set1_ps(5.f), two = _mm256_set1_ps(2.f);
  r[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
  r[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
  const __m256 s34 = _mm256_add_ps(d[3], d[4]), s12 = _mm256_add_ps(d[1], d[2]);
  r[1] = _mm256_fnmadd_ps(four, s12, s34);
  const __m256 d43 = _mm256_sub_ps(d[4], d[3]), d12 = _mm256_sub_ps(d[1], d[2]);
  r[2] = _mm256_fmadd_ps(four, d12, d43);
  const __m256 d42 = _mm256_sub_ps(d[4], d[2]), d31 = _mm256_sub_ps(d[3], d[1]);
  r[3] = _mm256_fmadd_ps(two, d31, d42);
  r[4] = _mm256_fnmadd_ps(two, d31, d42);
}

// A^T m for six vectors: four outputs.
KILN_AVX2 inline void OutputRows(const __m256 m[6], __m256 o[4]) {
  const __m256 two = _mm256_set1_ps(2.f), four = _mm256_set1_ps(4.f), eight = _mm256_set1_ps(8.f);
  const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
  const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  o[1] = _mm256_fmadd_ps(two, d34, d12);
  o[2] = _mm256_fmadd_ps(four, s34, s12);
  o[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5]);
}

struct Geometry {
  WinogradShape s;
  I64 tiles_h, tiles_w, tiles, kp, tb;
};

// v[xi][t][c] for tiles [t0, t0 + count).
// v[xi][t - t0][c] for tiles [t0, t0 + count), the buffer holding `rows`
// tiles per xi.
KILN_AVX2 void InputTransform(const Geometry& g, const float* x, I64 t0, I64 count, I64 rows, float* v) {
  const WinogradShape& s = g.s;
  const __m256 zero = _mm256_setzero_ps();
  const I64 xi_stride = rows * s.c;
  for (I64 t = 0; t < count; ++t) {
    const I64 tile = t0 + t;
    const I64 n = tile / (g.tiles_h * g.tiles_w), rem = tile % (g.tiles_h * g.tiles_w);
    const I64 iy0 = rem / g.tiles_w * kTile - s.pad_top, ix0 = rem % g.tiles_w * kTile - s.pad_left;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + kIn <= s.h && ix0 + kIn <= s.w;
    const I64 base = ((n * s.h + iy0) * s.w + ix0) * s.c;  // may be negative: only in-bounds loads use it
    float* vt = v + t * s.c;
    for (I64 cb = 0; cb < s.c; cb += 8) {
      __m256 tmp[6][6];  // tmp[i][j] = (B^T d)[i][j]
      for (int j = 0; j < 6; ++j) {
        __m256 d[6], r[6];
        for (int i = 0; i < 6; ++i) {
          const I64 iy = iy0 + i, ix = ix0 + j;
          if (inside || (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)) {
            d[i] = _mm256_loadu_ps(x + base + (i * s.w + j) * s.c + cb);
          } else {
            d[i] = zero;
          }
        }
        InputRows(d, r);
        for (int i = 0; i < 6; ++i) tmp[i][j] = r[i];
      }
      for (int i = 0; i < 6; ++i) {
        __m256 r[6];
        InputRows(tmp[i], r);
        for (int j = 0; j < 6; ++j) _mm256_storeu_ps(vt + (i * 6 + j) * xi_stride + cb, r[j]);
      }
    }
  }
}

KILN_AVX2 inline __m256 Activate(__m256 y, const WinogradEpilogue& e) {
  switch (e.act) {
    case WinogradAct::kRelu: return _mm256_max_ps(y, _mm256_setzero_ps());
    case WinogradAct::kLeakyRelu: {
      const __m256 neg = _mm256_mul_ps(y, _mm256_set1_ps(e.alpha));
      return _mm256_blendv_ps(y, neg, _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LT_OQ));
    }
    case WinogradAct::kClip: return _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(e.alpha)), _mm256_set1_ps(e.beta));
    default: return y;
  }
}

// y tiles [t0, t0 + count) from m[xi][t][kp], with the epilogue.
KILN_AVX2 void OutputTransform(const Geometry& g, const float* m, I64 t0, I64 count, I64 rows, float* y,
                               const WinogradEpilogue& e) {
  const WinogradShape& s = g.s;
  const I64 xi_stride = rows * g.kp;
  for (I64 t = 0; t < count; ++t) {
    const I64 tile = t0 + t;
    const I64 n = tile / (g.tiles_h * g.tiles_w), rem = tile % (g.tiles_h * g.tiles_w);
    const I64 oy0 = rem / g.tiles_w * kTile, ox0 = rem % g.tiles_w * kTile;
    const I64 rows = std::min<I64>(kTile, s.oh - oy0), cols = std::min<I64>(kTile, s.ow - ox0);
    const float* mt = m + t * g.kp;
    for (I64 kb = 0; kb < s.k; kb += 8) {
      __m256 tmp[4][6];  // (A^T M)[r][j]
      for (int j = 0; j < 6; ++j) {
        __m256 col[6], o[4];
        for (int i = 0; i < 6; ++i) col[i] = _mm256_loadu_ps(mt + (i * 6 + j) * xi_stride + kb);
        OutputRows(col, o);
        for (int r = 0; r < 4; ++r) tmp[r][j] = o[r];
      }
      const __m256 bias = e.bias ? _mm256_loadu_ps(e.bias + kb) : _mm256_setzero_ps();
      for (I64 r = 0; r < rows; ++r) {
        __m256 o[4];
        OutputRows(tmp[r], o);
        const I64 off = ((n * s.oh + oy0 + r) * s.ow + ox0) * s.k + kb;
        for (I64 q = 0; q < cols; ++q) {
          __m256 val = _mm256_add_ps(o[q], bias);
          if (e.residual) val = _mm256_add_ps(val, _mm256_loadu_ps(e.residual + off + q * s.k));
          _mm256_storeu_ps(y + off + q * s.k, Activate(val, e));
        }
      }
    }
  }
}

// Whole-image mode: the buffers hold every tile; tiles [b, e) of them.
void InputTransformRange(const Geometry& g, const float* x, I64 b, I64 e, float* v) {
  InputTransform(g, x, b, e - b, g.tiles, v + b * g.s.c);
}
void OutputTransformRange(const Geometry& g, const float* m, I64 b, I64 e, float* y, const WinogradEpilogue& ep) {
  OutputTransform(g, m + b * g.kp, b, e - b, g.tiles, y, ep);
}

}  // namespace

bool WinogradAvailable() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}

std::size_t WinogradPackedFloats(std::int64_t k, std::int64_t c) {
  return static_cast<std::size_t>(kXi * PaddedK(k) * c);
}

void WinogradPackWeights(const float* w, std::int64_t k, std::int64_t c, float* u) {
  // u = G g G^T per (output, input) channel pair, scattered to
  // u[xi][kb][c][16]: per (16-output block, input channel), the 16 pairs'
  // 36 values go out as 36 rows of 16 floats (zeros past k). In parallel
  // over those pairs.
  static const float G[6][3] = {{1.f / 4, 0, 0},           {-1.f / 6, -1.f / 6, -1.f / 6},
                                {-1.f / 6, 1.f / 6, -1.f / 6}, {1.f / 24, 1.f / 12, 1.f / 6},
                                {1.f / 24, -1.f / 12, 1.f / 6}, {0, 0, 1}};
  const I64 kp = PaddedK(k), nkb = kp / kNb;
  ParallelFor(nkb * c, std::max<I64>(1, 4096 / kNb), [&](I64 b, I64 e) {
    for (I64 job = b; job < e; ++job) {
      const I64 kb = job / c, i = job % c;
      // The 16 filters side by side (zeros past k), so each step below is
      // one loop over the 16 lanes (vectorized; the same expressions per
      // filter as one at a time).
      float g[9][kNb] = {};
      for (I64 q = 0; q < kNb && kb * kNb + q < k; ++q) {
        const float* f = w + ((kb * kNb + q) * c + i) * 9;
        for (int e = 0; e < 9; ++e) g[e][q] = f[e];
      }
      float t[6][3][kNb];  // G g
      for (int a = 0; a < 6; ++a) {
        for (int j = 0; j < 3; ++j) {
          for (int q = 0; q < kNb; ++q) t[a][j][q] = G[a][0] * g[j][q] + G[a][1] * g[3 + j][q] + G[a][2] * g[6 + j][q];
        }
      }
      float rows[kXi][kNb];
      for (int a = 0; a < 6; ++a) {
        for (int j = 0; j < 6; ++j) {
          for (int q = 0; q < kNb; ++q) {
            rows[a * 6 + j][q] = t[a][0][q] * G[j][0] + t[a][1][q] * G[j][1] + t[a][2][q] * G[j][2];
          }
        }
      }
      for (I64 xi = 0; xi < kXi; ++xi) std::memcpy(u + ((xi * nkb + kb) * c + i) * kNb, rows[xi], sizeof rows[xi]);
    }
  });
}

void WinogradConvNhwc(const WinogradShape& s, const float* x, const float* u, float* y, const WinogradEpilogue& e) {
  Geometry g{s, (s.oh + kTile - 1) / kTile, (s.ow + kTile - 1) / kTile, 0, PaddedK(s.k), 0};
  g.tiles = s.n * g.tiles_h * g.tiles_w;
  const int threads = NumThreads();
  // Few tiles for the weights' size (deep layers): one block of all tiles,
  // so the transformed weights (36 c kp floats) are read once; the threads
  // split the tiles for the transforms and the (xi, output block) pairs for
  // the products. Else blocks of tiles that stay in cache, each thread
  // running whole blocks.
  const I64 fit = TilesPerBlock(s.c, g.kp);
  if (g.tiles <= std::max<I64>(fit, 64)) {
    const std::size_t floats = static_cast<std::size_t>(kXi * g.tiles * (s.c + g.kp));
    float* v = static_cast<float*>(ThreadScratch(floats * sizeof(float)));
    float* m = v + kXi * g.tiles * s.c;
    const I64 nkb = g.kp / kNb, jobs = kXi * nkb;
    auto run = [&](I64 t, I64 nt) {
      auto part = [&](I64 total, I64& b, I64& en) {
        const I64 chunk = (total + nt - 1) / nt;
        b = std::min(total, t * chunk), en = std::min(total, b + chunk);
      };
      I64 b, en;
      part(g.tiles, b, en);
      if (b < en) InputTransformRange(g, x, b, en, v);
#pragma omp barrier
      part(jobs, b, en);
      for (I64 j = b; j < en; ++j) {
        const I64 xi = j / nkb, kb = j % nkb;
        Gemm(v + xi * g.tiles * s.c, g.tiles, s.c, u + (xi * nkb + kb) * s.c * kNb, kNb, m + xi * g.tiles * g.kp + kb * kNb, g.kp);
      }
#pragma omp barrier
      part(g.tiles, b, en);
      if (b < en) OutputTransformRange(g, m, b, en, y, e);
    };
    if (threads <= 1) {
      run(0, 1);
    } else {
#pragma omp parallel num_threads(threads)
      run(omp_get_thread_num(), omp_get_num_threads());
    }
    return;
  }
  g.tb = fit;
  const I64 blocks = (g.tiles + g.tb - 1) / g.tb;
  const std::size_t scratch = static_cast<std::size_t>(kXi * g.tb * (s.c + g.kp)) * sizeof(float);
  ParallelFor(blocks, 1, [&](I64 b0, I64 b1) {
    float* v = static_cast<float*>(ThreadScratch(scratch));
    float* m = v + kXi * g.tb * s.c;
    for (I64 b = b0; b < b1; ++b) {
      const I64 t0 = b * g.tb, count = std::min(g.tb, g.tiles - t0);
      InputTransform(g, x, t0, count, count, v);
      for (I64 xi = 0; xi < kXi; ++xi) {
        Gemm(v + xi * count * s.c, count, s.c, u + xi * g.kp * s.c, g.kp, m + xi * count * g.kp, g.kp);
      }
      OutputTransform(g, m, t0, count, count, y, e);
    }
  });
}

}  // namespace kiln::cpu
