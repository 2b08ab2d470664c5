// Data-movement kernels (Identity/Reshape/Flatten/Squeeze/Unsqueeze copies,
// Transpose, Slice, Concat, Gather, Shape, Constant) and Cast. Data movement
// works on elements as raw bytes, so every element type is covered.
#include <immintrin.h>

#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/util.h"
#include "ops/shape_ops.h"

namespace kiln::cpu {
namespace {


void ParallelCopy(void* dst, const void* src, std::size_t bytes) {
  if (dst == src || bytes == 0) return;
  constexpr std::int64_t kChunk = 1 << 18;
  const auto chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  ParallelFor(chunks, 4, [&](std::int64_t b, std::int64_t e) {
    const std::size_t lo = b * kChunk, hi = std::min<std::size_t>(bytes, e * kChunk);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}


// Identity, Flatten, Reshape, Squeeze, Unsqueeze: a byte copy (when the
// planner has not made the output a view of the input).
Result<std::unique_ptr<Kernel>> MakeCopy(const KernelInit& init) {
  const std::size_t bytes = init.outputs[0].bytes();
  const std::string op = init.node->op_type();
  if (op == "Identity" || op == "Flatten" || init.inputs.size() < 2 || !init.inputs[1].present() || init.const_input(1)) {
    return MakeFn([bytes](const KernelArgs& a) {
      ParallelCopy(a.out(0), a.in(0), bytes);
      return Status::Ok();
    });
  }
  // Shape or axes known only at run time: check them against the plan.
  const bool allowzero = init.node->GetInt("allowzero", 0) != 0;
  return MakeFn([bytes, op, allowzero, init](const KernelArgs& a) -> Status {
    const std::vector<std::int64_t> v = IntsOf(init, a, 1);
    const Shape& in = init.inputs[0].shape;
    KILN_ASSIGN_OR_RETURN(Shape s, op == "Reshape"   ? ops::ReshapeTarget(in, v, allowzero)
                                   : op == "Squeeze" ? ops::SqueezeShape(in, &v)
                                                     : ops::UnsqueezeShape(in, v));
    if (s != init.outputs[0].shape) {
      return Error(StatusCode::kInvalidArgument, "input 1 gives output shape ", ShapeToString(s),
                   ", but the model was compiled for ", ShapeToString(init.outputs[0].shape));
    }
    ParallelCopy(a.out(0), a.in(0), bytes);
    return Status::Ok();
  });
}

// Dropout as at inference (ops/shape_ops.cc InferDropout): output 0 is the
// input, the optional mask all true (bool) or all ones (Dropout-7: the
// input's type). The remove-no-ops pass makes those without a mask that are
// surely inference ones views first; this runs the rest. A ratio or
// training_mode given at run time is checked here: training mode with a
// nonzero ratio is refused (it would drop values at random).
Result<std::unique_ptr<Kernel>> MakeDropout(const KernelInit& init) {
  const std::size_t bytes = init.outputs[0].bytes();
  const bool mask = init.outputs.size() > 1 && init.outputs[1].present();
  const DType mt = mask ? init.outputs[1].dtype : DType::kBool;
  const std::int64_t n = mask ? NumElements(init.outputs[1].shape) : 0;
  const bool v12 = init.node->since_version() >= 12;
  const bool has_ratio = v12 && init.inputs.size() > 1 && init.inputs[1].present();
  const bool has_mode = v12 && init.inputs.size() > 2 && init.inputs[2].present();
  const DType rt = has_ratio ? init.inputs[1].dtype : DType::kFloat32;
  return MakeFn([bytes, mask, mt, n, has_ratio, has_mode, rt](const KernelArgs& a) -> Status {
    if (has_mode && ElementAsDouble(DType::kBool, a.in(2), 0) != 0) {
      const double ratio = has_ratio ? ElementAsDouble(rt, a.in(1), 0) : 0.5;
      if (ratio != 0) {
        return Error(StatusCode::kInvalidArgument, "training_mode is true with ratio ", ratio,
                     ": a training-time Dropout drops values at random, and Kiln runs inference only");
      }
    }
    if (has_ratio) {
      const double ratio = ElementAsDouble(rt, a.in(1), 0);
      if (!(ratio >= 0 && ratio < 1)) return Error(StatusCode::kInvalidArgument, "ratio = ", ratio, " is outside [0, 1)");
    }
    if (a.out(0) != a.in(0)) ParallelCopy(a.out(0), a.in(0), bytes);
    if (!mask || n == 0) return Status::Ok();
    if (mt == DType::kBool) {
      std::memset(a.out(1), 1, static_cast<std::size_t>(n));
      return Status::Ok();
    }
    if (mt == DType::kFloat16 || mt == DType::kBFloat16) {
      std::fill_n(static_cast<std::uint16_t*>(a.out(1)), n, mt == DType::kFloat16 ? FloatToHalf(1.f) : std::uint16_t{0x3F80});
      return Status::Ok();
    }
    return DispatchNumeric(mt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill_n(static_cast<T*>(a.out(1)), n, T(1));
      return Status::Ok();
    });
  });
}

StridedView Collapse(const StridedView& v) { return CollapseStridedView(v, 2); }

// dst[i][0..1] = (a[i], b[i]) for i < n: two rows interleaved.
__attribute__((target("avx2"))) void Interleave2Avx2(const std::uint32_t* a, const std::uint32_t* b,
                                                     std::uint32_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256i lo = _mm256_unpacklo_epi32(x, y), hi = _mm256_unpackhi_epi32(x, y);  // per 128-bit lane
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
  for (; i < n; ++i) dst[2 * i] = a[i], dst[2 * i + 1] = b[i];
}

// dst[i][0..2] = (a[i], b[i], c[i]) for i < n: three rows interleaved
// (an RGB image's planes to channels-last, the layout pass's first
// Transpose in every NCHW vision model). Per 8 pixels: each plane permuted
// so its values sit where the three output vectors want them, then blended.
__attribute__((target("avx2"))) void Interleave3Avx2(const std::uint32_t* a, const std::uint32_t* b,
                                                     const std::uint32_t* c, std::uint32_t* dst, std::int64_t n) {
  // Output vector k holds interleaved elements 8k..8k+7; element e comes
  // from plane e % 3, pixel e / 3. Index vectors give each plane's pixel
  // (mod 8) per lane; blend masks pick the plane per lane.
  const __m256i ia0 = _mm256_setr_epi32(0, 0, 0, 1, 0, 0, 2, 0), ib0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 2);
  const __m256i ic0 = _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 0, 0);
  const __m256i ia1 = _mm256_setr_epi32(0, 3, 0, 0, 4, 0, 0, 5), ib1 = _mm256_setr_epi32(0, 0, 3, 0, 0, 4, 0, 0);
  const __m256i ic1 = _mm256_setr_epi32(2, 0, 0, 3, 0, 0, 4, 0);
  const __m256i ia2 = _mm256_setr_epi32(0, 0, 6, 0, 0, 7, 0, 0), ib2 = _mm256_setr_epi32(5, 0, 0, 6, 0, 0, 7, 0);
  const __m256i ic2 = _mm256_setr_epi32(0, 5, 0, 0, 6, 0, 0, 7);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m256 y = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    const __m256 z = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i)));
    // Lane plane patterns: vector 0 a b c a b c a b, 1 c a b c a b c a, 2 b c a b c a b c.
    const __m256 o0 = _mm256_blend_ps(_mm256_blend_ps(_mm256_permutevar8x32_ps(x, ia0), _mm256_permutevar8x32_ps(y, ib0), 0x92),
                                      _mm256_permutevar8x32_ps(z, ic0), 0x24);
    const __m256 o1 = _mm256_blend_ps(_mm256_blend_ps(_mm256_permutevar8x32_ps(x, ia1), _mm256_permutevar8x32_ps(y, ib1), 0x24),
                                      _mm256_permutevar8x32_ps(z, ic1), 0x49);
    const __m256 o2 = _mm256_blend_ps(_mm256_blend_ps(_mm256_permutevar8x32_ps(x, ia2), _mm256_permutevar8x32_ps(y, ib2), 0x49),
                                      _mm256_permutevar8x32_ps(z, ic2), 0x92);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 3 * i), _mm256_castps_si256(o0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 3 * i + 8), _mm256_castps_si256(o1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 3 * i + 16), _mm256_castps_si256(o2));
  }
  for (; i < n; ++i) dst[3 * i] = a[i], dst[3 * i + 1] = b[i], dst[3 * i + 2] = c[i];
}

// Three byte planes interleaved, dst[3 p + k] = plane_k[p] (a uint8 RGB
// image to channels-last, the first Transpose of a quantized vision model):
// per 16 pixels, each output vector is three byte shuffles of the planes
// or-ed together (SSSE3; a -1 index gives 0). Returns the pixels done.
__attribute__((target("ssse3"))) std::int64_t Interleave3x8(const std::uint8_t* a, const std::uint8_t* b,
                                                            const std::uint8_t* c, std::uint8_t* dst, std::int64_t n) {
  // Output byte e (of 48) comes from plane e % 3, pixel e / 3.
  struct Index {
    alignas(16) std::int8_t at[3][3][16];  // [output vector][plane][lane]
  };
  static constexpr Index idx_table = [] {
    Index t{};
    for (int v = 0; v < 3; ++v) {
      for (int k = 0; k < 3; ++k) {
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * v + l;
          t.at[v][k][l] = static_cast<std::int8_t>(e % 3 == k ? e / 3 : -1);
        }
      }
    }
    return t;
  }();
  const auto& idx = idx_table.at;
  __m128i m[3][3];
  for (int v = 0; v < 3; ++v) {
    for (int k = 0; k < 3; ++k) m[v][k] = _mm_load_si128(reinterpret_cast<const __m128i*>(idx[v][k]));
  }
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m128i z = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i));
    for (int v = 0; v < 3; ++v) {
      const __m128i o = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(x, m[v][0]), _mm_shuffle_epi8(y, m[v][1])),
                                     _mm_shuffle_epi8(z, m[v][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * i + 16 * v), o);
    }
  }
  return i;
}

// Transposes of the last two dims where the new last dim is short (2-8:
// ShuffleNet's channel shuffle on channels-last data, [.., g, C/g] ->
// [.., C/g, g]): per outer index, `cols` contiguous source rows interleaved
// (the tiled loop below would run an inner loop of `cols` elements).
template <typename E>
bool InterleaveCopy(const E* in, E* out, std::int64_t outer, std::int64_t rows, std::int64_t cols,
                    std::int64_t so) {
  // Work items: (outer index, block of up to 4096 rows), so that one large
  // image (outer 1) still splits among threads.
  const std::int64_t block = std::min<std::int64_t>(rows, 4096), blocks = (rows + block - 1) / block;
  ParallelFor(outer * blocks, std::max<std::int64_t>(1, 16384 / (block * cols)), [&](std::int64_t b, std::int64_t e) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    for (std::int64_t w = b; w < e; ++w) {
      const std::int64_t o = w / blocks, i0 = w % blocks * block, n = std::min(rows, i0 + block) - i0;
      const E* src = in + o * so + i0;
      E* dst = out + (o * rows + i0) * cols;
      if constexpr (sizeof(E) == 4) {
        if (cols == 2 && avx2) {
          Interleave2Avx2(reinterpret_cast<const std::uint32_t*>(src), reinterpret_cast<const std::uint32_t*>(src + rows),
                          reinterpret_cast<std::uint32_t*>(dst), n);
          continue;
        }
        if (cols == 3 && avx2) {
          Interleave3Avx2(reinterpret_cast<const std::uint32_t*>(src), reinterpret_cast<const std::uint32_t*>(src + rows),
                          reinterpret_cast<const std::uint32_t*>(src + 2 * rows), reinterpret_cast<std::uint32_t*>(dst), n);
          continue;
        }
      }
      std::int64_t done = 0;
      if constexpr (sizeof(E) == 1) {
        static const bool ssse3 = __builtin_cpu_supports("ssse3");
        if (cols == 3 && ssse3) {
          done = Interleave3x8(reinterpret_cast<const std::uint8_t*>(src), reinterpret_cast<const std::uint8_t*>(src + rows),
                               reinterpret_cast<const std::uint8_t*>(src + 2 * rows), reinterpret_cast<std::uint8_t*>(dst), n);
        }
      }
      for (std::int64_t j = 0; j < cols; ++j) {
        for (std::int64_t i = done; i < n; ++i) dst[i * cols + j] = src[j * rows + i];
      }
    }
  });
  return true;
}

// Square block transposes for the tiled copy below: out[m * ldo + k] =
// in[k * ldi + m] for m, k < the block's side. Registers only move bits
// (unpacks and shuffles), so any 1-, 2- or 4-byte values pass unchanged.
// 32-bit elements, 8x8 (AVX).
__attribute__((target("avx"))) void Block8x8x32(const std::uint32_t* in, std::int64_t ldi, std::uint32_t* out,
                                                std::int64_t ldo) {
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(in + k * ldi));
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    _mm256_storeu_ps(reinterpret_cast<float*>(out + m * ldo), _mm256_permute2f128_ps(u[m], u[m + 4], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + (m + 4) * ldo), _mm256_permute2f128_ps(u[m], u[m + 4], 0x31));
  }
}
// 16-bit elements, 8x8 (SSE2).
void Block8x8x16(const std::uint16_t* in, std::int64_t ldi, std::uint16_t* out, std::int64_t ldo) {
  __m128i a[8], b[8], c[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k * ldi));
  for (int k = 0; k < 8; k += 2) {
    b[k] = _mm_unpacklo_epi16(a[k], a[k + 1]);  // columns 0-3 of rows k, k+1
    b[k + 1] = _mm_unpackhi_epi16(a[k], a[k + 1]);  // columns 4-7
  }
  for (int k = 0; k < 8; k += 4) {
    c[k] = _mm_unpacklo_epi32(b[k], b[k + 2]);  // columns 0, 1 of rows k..k+3
    c[k + 1] = _mm_unpackhi_epi32(b[k], b[k + 2]);  // 2, 3
    c[k + 2] = _mm_unpacklo_epi32(b[k + 1], b[k + 3]);  // 4, 5
    c[k + 3] = _mm_unpackhi_epi32(b[k + 1], b[k + 3]);  // 6, 7
  }
  for (int m = 0; m < 4; ++m) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * m) * ldo), _mm_unpacklo_epi64(c[m], c[m + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * m + 1) * ldo), _mm_unpackhi_epi64(c[m], c[m + 4]));
  }
}
// 8-bit elements, 16x16 (SSE2).
void Block16x16x8(const std::uint8_t* in, std::int64_t ldi, std::uint8_t* out, std::int64_t ldo) {
  __m128i a[16], b[16], c[16], d[16];
  for (int k = 0; k < 16; ++k) a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k * ldi));
  for (int k = 0; k < 16; k += 2) {
    b[k] = _mm_unpacklo_epi8(a[k], a[k + 1]);  // columns 0-7 of rows k, k+1
    b[k + 1] = _mm_unpackhi_epi8(a[k], a[k + 1]);  // columns 8-15
  }
  for (int k = 0; k < 16; k += 4) {
    c[k] = _mm_unpacklo_epi16(b[k], b[k + 2]);  // columns 0-3 of rows k..k+3
    c[k + 1] = _mm_unpackhi_epi16(b[k], b[k + 2]);  // 4-7
    c[k + 2] = _mm_unpacklo_epi16(b[k + 1], b[k + 3]);  // 8-11
    c[k + 3] = _mm_unpackhi_epi16(b[k + 1], b[k + 3]);  // 12-15
  }
  for (int k = 0; k < 16; k += 8) {
    for (int q = 0; q < 4; ++q) {
      d[k + 2 * q] = _mm_unpacklo_epi32(c[k + q], c[k + q + 4]);  // columns 4q, 4q+1 of rows k..k+7
      d[k + 2 * q + 1] = _mm_unpackhi_epi32(c[k + q], c[k + q + 4]);  // 4q+2, 4q+3
    }
  }
  for (int m = 0; m < 8; ++m) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * m) * ldo), _mm_unpacklo_epi64(d[m], d[m + 8]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * m + 1) * ldo), _mm_unpackhi_epi64(d[m], d[m + 8]));
  }
}
// One tile of the transposing copy, dst[i * ldo + j] = src[j * ldi + i] for
// i in [i0, i1), j in [j0, j1), in square blocks where the element size has
// one, the rest element by element.
template <typename E>
void TransposeTile(const E* src, std::int64_t ldi, E* dst, std::int64_t ldo, std::int64_t i0, std::int64_t i1,
                   std::int64_t j0, std::int64_t j1) {
  static const bool avx = __builtin_cpu_supports("avx");
  constexpr std::int64_t kB = sizeof(E) == 1 ? 16 : sizeof(E) <= 4 ? 8 : 0;
  std::int64_t i = i0;
  if constexpr (kB > 0) {
    if (sizeof(E) != 4 || avx) {
      for (; i + kB <= i1; i += kB) {
        std::int64_t j = j0;
        for (; j + kB <= j1; j += kB) {
          if constexpr (sizeof(E) == 1) Block16x16x8(src + j * ldi + i, ldi, dst + i * ldo + j, ldo);
          else if constexpr (sizeof(E) == 2) Block8x8x16(src + j * ldi + i, ldi, dst + i * ldo + j, ldo);
          else Block8x8x32(src + j * ldi + i, ldi, dst + i * ldo + j, ldo);
        }
        for (std::int64_t ii = i; ii < i + kB; ++ii) {
          for (std::int64_t jj = j; jj < j1; ++jj) dst[ii * ldo + jj] = src[jj * ldi + ii];
        }
      }
    }
  }
  for (; i < i1; ++i) {
    for (std::int64_t j = j0; j < j1; ++j) dst[i * ldo + j] = src[j * ldi + i];
  }
}

template <typename E>
void StridedCopy(const StridedView& v, const E* in, E* out) {
  const std::size_t r = v.dims.size();
  const std::int64_t rows = v.dims[r - 2], cols = v.dims[r - 1];
  const std::int64_t sr = v.strides[r - 2], sc = v.strides[r - 1];
  std::int64_t outer = 1;
  for (std::size_t d = 0; d + 2 < r; ++d) outer *= v.dims[d];
  if (outer * rows * cols == 0) return;
  in += v.offset;
  if (sc == 1 && outer * rows == 1) return ParallelCopy(out, in, cols * sizeof(E));
  // Each outer index reads one dense [cols, rows] block (at stride so).
  if (sr == 1 && sc == rows && cols >= 2 && cols <= 8 && rows >= 8 && (r == 2 || v.strides[r - 3] >= rows * cols)) {
    const std::int64_t so = r == 2 ? 0 : v.strides[r - 3];
    bool outer_dense = true;  // the outer dims collapse to one stride so
    for (std::int64_t d = static_cast<std::int64_t>(r) - 3, want = so; d >= 0; --d) {
      outer_dense &= v.strides[d] == want;
      want *= v.dims[d];
    }
    if (outer_dense) {
      InterleaveCopy(in, out, outer, rows, cols, so);
      return;
    }
  }
  constexpr std::int64_t kTile = 32;  // 2-D tiles keep transposes cache friendly
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  // Work items: (outer index, row tile, block of columns); a transposing
  // copy splits its columns into blocks of about 16K values per item, so
  // few rows of many columns (a 21-channel NHWC map back to NCHW: one row
  // tile) still spread over the threads.
  const std::int64_t tile_rows = std::min(rows, kTile);
  const std::int64_t block = sc == 1 ? cols : std::max(kTile, 16384 / std::max<std::int64_t>(tile_rows, 1) / kTile * kTile);
  const std::int64_t col_blocks = (cols + block - 1) / block;
  ParallelFor(outer * row_tiles * col_blocks, std::max<std::int64_t>(1, 16384 / (tile_rows * std::min(cols, block))),
              [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t w = b; w < e; ++w) {
      const std::int64_t cb = w % col_blocks, t = w / col_blocks;
      const std::int64_t o = t / row_tiles, i0 = (t % row_tiles) * kTile, i1 = std::min(rows, i0 + kTile);
      const std::int64_t c0 = cb * block, c1 = std::min(cols, c0 + block);
      std::int64_t base = 0;
      for (std::int64_t d = static_cast<std::int64_t>(r) - 3, rem = o; d >= 0; --d) {
        base += rem % v.dims[d] * v.strides[d];
        rem /= v.dims[d];
      }
      const E* src = in + base;
      E* dst = out + o * rows * cols;
      if (sc == 1) {
        for (std::int64_t i = i0; i < i1; ++i) std::memcpy(dst + i * cols, src + i * sr, cols * sizeof(E));
        continue;
      }
      for (std::int64_t j0 = c0; j0 < c1; j0 += kTile) {
        const std::int64_t j1 = std::min(c1, j0 + kTile);
        if (sr == 1) {  // a plain 2-D transpose (NCHW <-> NHWC): square blocks
          TransposeTile(src, sc, dst, cols, i0, i1, j0, j1);
          continue;
        }
        for (std::int64_t i = i0; i < i1; ++i) {
          for (std::int64_t j = j0; j < j1; ++j) dst[i * cols + j] = src[i * sr + j * sc];
        }
      }
    }
  });
}

Status RunStrided(const StridedView& v, std::size_t esize, const void* in, void* out) {
  return DispatchBySize(esize, [&](auto tag) {
    using E = typename decltype(tag)::type;
    StridedCopy(v, static_cast<const E*>(in), static_cast<E*>(out));
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> MakeTranspose(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const std::size_t r = x.size();
  std::vector<std::int64_t> perm = init.node->GetInts("perm");
  if (perm.empty()) {
    for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(r - 1 - i));
  }
  const std::vector<std::int64_t> st = Strides(x);
  StridedView v;
  for (std::int64_t p : perm) {
    v.dims.push_back(x[p]);
    v.strides.push_back(st[p]);
  }
  v = Collapse(v);
  const std::size_t esize = DTypeSize(init.inputs[0].dtype);
  return MakeFn([v, esize](const KernelArgs& a) { return RunStrided(v, esize, a.in(0), a.out(0)); });
}

class SliceKernel : public Kernel {
 public:
  explicit SliceKernel(const KernelInit& init) : init_(init), esize_(DTypeSize(init.inputs[0].dtype)) {
    for (int i = 1; i < static_cast<int>(init.inputs.size()); ++i) {
      runtime_ |= init.inputs[i].present() && !init.const_input(i);
    }
  }
  Status Init() { return runtime_ ? Status::Ok() : Plan(nullptr, &view_); }
  Status Run(const KernelArgs& a) override {
    if (!runtime_) return RunStrided(view_, esize_, a.in(0), a.out(0));
    StridedView v;
    KILN_RETURN_IF_ERROR(Plan(&a, &v));
    return RunStrided(v, esize_, a.in(0), a.out(0));
  }

 private:
  Status Plan(const KernelArgs* a, StridedView* v) const {
    std::vector<std::vector<std::int64_t>> vals(5);
    for (int i = 1; i < 5 && i < static_cast<int>(init_.inputs.size()); ++i) {
      if (!init_.inputs[i].present()) continue;
      // Without an argument block (planned at creation) every input is constant.
      vals[i] = a ? IntsOf(init_, *a, i) : init_.const_input(i)->ToInt64Vector();
    }
    const Shape& x = init_.inputs[0].shape;
    KILN_ASSIGN_OR_RETURN(auto plan, ops::SlicePlan(x, vals[1], vals[2], vals[3], vals[4]));
    const std::vector<std::int64_t> st = Strides(x);
    Shape out;
    for (std::size_t d = 0; d < x.size(); ++d) {
      v->offset += plan[d].start * st[d];
      v->dims.push_back(plan[d].len);
      v->strides.push_back(plan[d].step * st[d]);
      out.push_back(plan[d].len);
    }
    if (out != init_.outputs[0].shape) {
      return Error(StatusCode::kInvalidArgument, "slice bounds give shape ", ShapeToString(out),
                   ", but the model was compiled for ", ShapeToString(init_.outputs[0].shape));
    }
    *v = Collapse(*v);
    return Status::Ok();
  }

  KernelInit init_;
  std::size_t esize_;
  bool runtime_ = false;
  StridedView view_;
};

Result<std::unique_ptr<Kernel>> MakeSlice(const KernelInit& init) {
  auto k = std::make_unique<SliceKernel>(init);
  KILN_RETURN_IF_ERROR(k->Init());
  return std::unique_ptr<Kernel>(std::move(k));
}

// n bytes, inline in 32-byte vectors (the rest by memcpy): Concat's
// per-pixel pieces on channels-last tensors are a few hundred bytes each,
// and a memcpy call per piece cost about a tenth of the copy (SqueezeNet's
// eight Concats of two pieces per pixel: 0.124 -> 0.110 ms at 1 thread,
// 0.30 -> 0.27 at 2, Zen 5).
__attribute__((target("avx2"))) void CopyPiecesAvx2(char* out, const char* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
  }
  if (i < n) std::memcpy(out + i, in + i, n - i);
}

Result<std::unique_ptr<Kernel>> MakeConcat(const KernelInit& init) {
  const Shape& y = init.outputs[0].shape;
  std::int64_t axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += static_cast<std::int64_t>(y.size());
  const std::size_t esize = DTypeSize(init.outputs[0].dtype);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(y.size()); ++d) {
    if (d < axis) outer *= y[d];
    if (d > axis) inner *= y[d];
  }
  std::vector<std::size_t> chunk;  // bytes per outer index, per input
  for (const TensorDesc& in : init.inputs) chunk.push_back(in.shape[axis] * inner * esize);
  const std::size_t out_chunk = y[axis] * inner * esize;
  return MakeFn([outer, chunk, out_chunk](const KernelArgs& a) {
    auto* out = static_cast<char*>(a.out(0));
    if (outer == 1) {
      for (std::size_t i = 0, off = 0; i < chunk.size(); off += chunk[i++]) ParallelCopy(out + off, a.in(i), chunk[i]);
      return Status::Ok();
    }
    static const bool avx2 = __builtin_cpu_supports("avx2");
    const bool small = avx2 && out_chunk <= 4096;
    ParallelFor(outer, std::max<std::int64_t>(1, 65536 / std::max<std::size_t>(out_chunk, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) {
        std::size_t off = o * out_chunk;
        for (std::size_t i = 0; i < chunk.size(); off += chunk[i++]) {
          if (!chunk[i]) continue;
          const char* src = static_cast<const char*>(a.in(i)) + o * chunk[i];
          if (small) CopyPiecesAvx2(out + off, src, chunk[i]);
          else std::memcpy(out + off, src, chunk[i]);
        }
      }
    });
    return Status::Ok();
  });
}

template <typename I>
Status GatherRows(const I* idx, std::int64_t count, std::int64_t outer, std::int64_t n, std::size_t row,
                  const char* data, char* out) {
  for (std::int64_t j = 0; j < count; ++j) {
    if (idx[j] < -n || idx[j] >= n) {
      return Error(StatusCode::kOutOfRange, "index ", static_cast<std::int64_t>(idx[j]), " (element ", j,
                   " of 'indices') is out of range for an axis of size ", n, " (expected ", -n, "..", n - 1, ")");
    }
  }
  ParallelFor(outer * count, std::max<std::int64_t>(1, 65536 / std::max<std::size_t>(row, 1)), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t w = b; w < e; ++w) {
      const std::int64_t o = w / count, k = idx[w % count] < 0 ? idx[w % count] + n : idx[w % count];
      std::memcpy(out + w * row, data + (o * n + k) * row, row);
    }
  });
  return Status::Ok();
}

Result<std::unique_ptr<Kernel>> MakeGather(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  std::int64_t axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += static_cast<std::int64_t>(x.size());
  std::int64_t outer = 1;
  std::size_t row = DTypeSize(init.inputs[0].dtype);
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(x.size()); ++d) {
    if (d < axis) outer *= x[d];
    if (d > axis) row *= x[d];
  }
  const std::int64_t n = x[axis], count = NumElements(init.inputs[1].shape);
  const bool i32 = init.inputs[1].dtype == DType::kInt32;
  return MakeFn([=](const KernelArgs& a) {
    const auto* data = static_cast<const char*>(a.in(0));
    auto* out = static_cast<char*>(a.out(0));
    return i32 ? GatherRows(a.in_as<std::int32_t>(1), count, outer, n, row, data, out)
               : GatherRows(a.in_as<std::int64_t>(1), count, outer, n, row, data, out);
  });
}

Result<std::unique_ptr<Kernel>> MakeShape(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const auto r = static_cast<std::int64_t>(x.size());
  const ops::DimSpan span = ops::ShapeSpan(r, init.node->GetInt("start", 0), init.node->GetInt("end", r));
  std::vector<std::int64_t> dims(x.begin() + span.start, x.begin() + span.end);
  return MakeFn([dims](const KernelArgs& a) {
    if (!dims.empty()) std::memcpy(a.out(0), dims.data(), dims.size() * sizeof(std::int64_t));
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> MakeConstant(const KernelInit& init) {
  if (init.node->attrs().empty()) return Error(StatusCode::kInvalidArgument, "Constant has no value attribute");
  const auto& [name, attr] = *init.node->attrs().begin();
  std::vector<std::uint8_t> bytes;
  auto put = [&bytes](const void* p, std::size_t n) {
    bytes.assign(static_cast<const std::uint8_t*>(p), static_cast<const std::uint8_t*>(p) + n);
  };
  if (name == "value" && attr.t) put(attr.t->data(), attr.t->nbytes());
  else if (name == "value_float") put(&attr.f, sizeof(float));
  else if (name == "value_int") put(&attr.i, sizeof(std::int64_t));
  else if (name == "value_floats") put(attr.floats.data(), attr.floats.size() * sizeof(float));
  else if (name == "value_ints") put(attr.ints.data(), attr.ints.size() * sizeof(std::int64_t));
  else return Error(StatusCode::kUnimplemented, "Constant attribute '", name, "' is not supported");
  return MakeFn([bytes](const KernelArgs& a) {
    if (!bytes.empty()) std::memcpy(a.out(0), bytes.data(), bytes.size());
    return Status::Ok();
  });
}

// ---- Cast ------------------------------------------------------------------

// Storage types for the element types without a C++ arithmetic equivalent.
struct Half { std::uint16_t bits; };
struct BF16 { std::uint16_t bits; };
struct Bool { std::uint8_t v; };

template <typename F>
Status DispatchAll(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16: return f(Tag<Half>{});
    case DType::kBFloat16: return f(Tag<BF16>{});
    case DType::kBool: return f(Tag<Bool>{});
    default: return DispatchNumeric(t, f);
  }
}

// To an arithmetic type: half types become float, bool 0/1.
template <typename T>
auto Widen(T x) {
  if constexpr (std::is_same_v<T, Half>) return HalfToFloat(x.bits);
  else if constexpr (std::is_same_v<T, BF16>) return BFloat16ToFloat(x.bits);
  else if constexpr (std::is_same_v<T, Bool>) return static_cast<std::uint8_t>(x.v != 0);
  else return x;
}

// Float -> integer with a defined result for every input (a C++ cast of an
// out-of-range value is undefined behaviour; ONNX leaves the value
// unspecified): NaN -> 0, out-of-range values saturate to the type's range.
template <typename I, typename F>
I SaturatingToInt(F w) {
  if (w != w) return I(0);
  // F(max) rounds up to a power of two for 32/64-bit types, so >= is exact.
  if (w >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  if (w <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  return static_cast<I>(w);
}

template <typename U, typename W>
U Narrow(W w) {
  if constexpr (std::is_same_v<U, Bool>) {
    return Bool{static_cast<std::uint8_t>(w != W(0))};
  } else if constexpr (std::is_same_v<U, Half>) {
    return Half{FloatToHalf(static_cast<float>(w))};
  } else if constexpr (std::is_same_v<U, BF16>) {
    // Truncation, as ONNX's reference (and its Cast tests) convert to bfloat16.
    const float f = static_cast<float>(w);
    if (f != f) return BF16{0x7fc0};
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    return BF16{static_cast<std::uint16_t>(x >> 16)};
  } else if constexpr (std::is_floating_point_v<W> && std::is_unsigned_v<U>) {
    return static_cast<U>(SaturatingToInt<std::int64_t>(w));  // negative values wrap as in C/numpy
  } else if constexpr (std::is_floating_point_v<W> && std::is_integral_v<U>) {
    return SaturatingToInt<U>(w);
  } else {
    return static_cast<U>(w);
  }
}

// float32 <-> float16 with the F16C instructions, 8 at a time (both round to
// nearest even, like FloatToHalf).
__attribute__((target("avx,f16c"))) void F32ToF16(const float* x, std::uint16_t* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = FloatToHalf(x[i]);
}
__attribute__((target("avx,f16c"))) void F16ToF32(const std::uint16_t* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

Result<std::unique_ptr<Kernel>> MakeCast(const KernelInit& init) {
  const DType from = init.inputs[0].dtype, to = init.outputs[0].dtype;
  const std::int64_t n = NumElements(init.inputs[0].shape);
  if (from == to) {
    const std::size_t bytes = init.outputs[0].bytes();
    return MakeFn([bytes](const KernelArgs& a) {
      ParallelCopy(a.out(0), a.in(0), bytes);
      return Status::Ok();
    });
  }
  const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (f16c && from == DType::kFloat32 && to == DType::kFloat16) {
    return MakeFn([n](const KernelArgs& a) {
      ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) { F32ToF16(a.in_as<float>(0) + b, a.out_as<std::uint16_t>(0) + b, e - b); });
      return Status::Ok();
    });
  }
  if (f16c && from == DType::kFloat16 && to == DType::kFloat32) {
    return MakeFn([n](const KernelArgs& a) {
      ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) { F16ToF32(a.in_as<std::uint16_t>(0) + b, a.out_as<float>(0) + b, e - b); });
      return Status::Ok();
    });
  }
  // A Cast the compiler inserted at a half graph's edge (passes/half_compute.cc)
  // rounds to nearest even, as computing in bfloat16 would; a model's own
  // Cast to bfloat16 truncates (Narrow).
  if (to == DType::kBFloat16 && from == DType::kFloat32 && init.node &&
      init.node->GetString(ir::kRoundAttr, "") == ir::kRoundNearestEven) {
    return MakeFn([n](const KernelArgs& a) {
      const float* x = a.in_as<float>(0);
      auto* y = a.out_as<std::uint16_t>(0);
      ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = FloatToBFloat16(x[i]);
      });
      return Status::Ok();
    });
  }
  std::unique_ptr<Kernel> k;
  Status st = DispatchAll(from, [&](auto ft) {
    return DispatchAll(to, [&](auto tt) {
      using T = typename decltype(ft)::type;
      using U = typename decltype(tt)::type;
      k = std::make_unique<FnKernel>([n](const KernelArgs& a) {
        const T* x = a.in_as<T>(0);
        U* y = a.out_as<U>(0);
        ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) y[i] = Narrow<U>(Widen(x[i]));
        });
        return Status::Ok();
      });
      return Status::Ok();
    });
  });
  if (!st.ok()) return Error(StatusCode::kUnimplemented, "Cast from ", DTypeName(from), " to ", DTypeName(to), " is not supported");
  return k;
}

}  // namespace

void RegisterShapeKernels(KernelRegistry& r) {
  for (const char* op : {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}) r.Register(op, MakeCopy);
  // Placement copies: on the CPU kernel library's devices (cpu, sim) device
  // and host memory are both reachable from a launch.
  for (const char* op : {ir::kMemcpyToHost, ir::kMemcpyFromHost}) r.Register(op, MakeCopy, "kiln");
  r.Register("Transpose", MakeTranspose);
  r.Register("Slice", MakeSlice);
  r.Register("Concat", MakeConcat);
  r.Register("Dropout", MakeDropout);
  r.Register("Gather", MakeGather);
  r.Register("Shape", MakeShape);
  r.Register("Constant", MakeConstant);
  r.Register("Cast", MakeCast);
}

}  // namespace kiln::cpu
