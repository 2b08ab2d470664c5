#include "backends/cpu/kernels/quant_depthwise.h"

#include <immintrin.h>

#include <cstdint>

#include <algorithm>
#include <mutex>

#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/util.h"
#include "common/checked.h"

namespace kiln::cpu {

namespace {

// Output values per thread at least: a fork costs a few us, and each value
// is a window's products plus its share of the quantization.
constexpr std::int64_t kGrainValues = 8192;
// Output pixels per block: their input columns (block * stride + window) of
// the kh rows stay in L1 while each 8-channel slice of them is swept.
constexpr std::int64_t kPixelBlock = 16;

// p rounded up to a 64-byte boundary (the buffers below hold 16 floats
// more than they use): with c a multiple of 8 every vector load is then
// 32-byte aligned, none split over two cache lines (malloc's 16-byte
// alignment split every other one: 1.3x the time at 32 channels, Zen 3).
float* Align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
}

// The channels from c / 8 * 8 on (past the last multiple of 8) of output
// pixels [o0, o1), a value at a time; the rest as DepthwiseRow below.
void TailChannels(const float* const* rows, const float* w, float* out, std::int64_t o0, std::int64_t o1,
                  std::int64_t c, std::int64_t kh, std::int64_t kw, std::int64_t sw, std::int64_t dw) {
  const std::int64_t step = sw * c, tap = dw * c;
  for (std::int64_t ch = c / 8 * 8; ch < c; ++ch) {
    for (std::int64_t ox = o0; ox < o1; ++ox) {
      float acc = 0.f;
      for (std::int64_t ky = 0; ky < kh; ++ky) {
        for (std::int64_t kx = 0; kx < kw; ++kx) acc += rows[ky][ox * step + kx * tap + ch] * w[(ky * kw + kx) * c + ch];
      }
      out[ox * c + ch] = acc;
    }
  }
}

// One output row of sums: out[ox][ch] = sum over (ky, kx) of
// rows[ky][(ox * sw + kx * dw) * c + ch] * w[(ky * kw + kx) * c + ch]. Every
// product and partial sum is an integer within 2^24 (the caller's check),
// so FMA and any order give the exact sum. This general form loads a
// weight and an input vector per FMA; Row3x3 below is the common case.
__attribute__((target("avx2,fma"))) void DepthwiseRow(const float* const* rows, const float* w, float* out,
                                                      std::int64_t ow, std::int64_t c, std::int64_t kh,
                                                      std::int64_t kw, std::int64_t sw, std::int64_t dw) {
  const std::int64_t cv = c / 8 * 8, step = sw * c, tap = dw * c;
  for (std::int64_t o0 = 0; o0 < ow; o0 += kPixelBlock) {
    const std::int64_t o1 = std::min(ow, o0 + kPixelBlock);
    for (std::int64_t ch = 0; ch < cv; ch += 8) {
      for (std::int64_t ox = o0; ox < o1; ++ox) {
        __m256 acc = _mm256_setzero_ps();
        for (std::int64_t ky = 0; ky < kh; ++ky) {
          const float* r = rows[ky] + ox * step + ch;
          const float* wr = w + ky * kw * c + ch;
          for (std::int64_t kx = 0; kx < kw; ++kx) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(wr + kx * c), _mm256_loadu_ps(r + kx * tap), acc);
          }
        }
        _mm256_storeu_ps(out + ox * c + ch, acc);
      }
    }
    TailChannels(rows, w, out, o0, o1, c, kh, kw, sw, dw);
  }
}

// DepthwiseRow for a 3x3 window without dilation, stride kSw across, over
// output pixels [p0, p1) in blocks of kPix: a channel slice's nine weight
// vectors and the block's kPix sums stay in registers, and each input
// vector is loaded once for every sum it feeds (3 x (kSw (kPix - 1) + 3)
// loads for 9 kPix FMAs, against 18 kPix loads in DepthwiseRow). Returns
// the first pixel not done (p1 - (p1 - p0) % kPix). Channels past the last
// multiple of 8 are left to the caller.
template <int kSw, int kPix>
__attribute__((target("avx2,fma"))) std::int64_t Blocks3x3(const float* const* rows, const float* w, float* out,
                                                           std::int64_t p0, std::int64_t p1, std::int64_t c) {
  constexpr int kCols = kSw * (kPix - 1) + 3;  // input columns a block reads
  const std::int64_t cv = c / 8 * 8, end = p1 - (p1 - p0) % kPix;
  constexpr std::int64_t kSpan = kPixelBlock / kPix * kPix;
  for (std::int64_t b0 = p0; b0 < end; b0 += kSpan) {
    const std::int64_t b1 = std::min(end, b0 + kSpan);
    for (std::int64_t ch = 0; ch < cv; ch += 8) {
      __m256 wv[9];
      for (int t = 0; t < 9; ++t) wv[t] = _mm256_loadu_ps(w + t * c + ch);
      for (std::int64_t ox = b0; ox < b1; ox += kPix) {
        __m256 acc[kPix];
        for (int p = 0; p < kPix; ++p) acc[p] = _mm256_setzero_ps();
        const std::int64_t base = ox * kSw * c + ch;
#pragma GCC unroll 3
        for (int ky = 0; ky < 3; ++ky) {
          const float* r = rows[ky] + base;
#pragma GCC unroll 16
          for (int j = 0; j < kCols; ++j) {
            const __m256 v = _mm256_loadu_ps(r + j * c);
#pragma GCC unroll 4
            for (int p = 0; p < kPix; ++p) {
              const int kx = j - p * kSw;  // this column's tap for pixel p
              if (kx >= 0 && kx < 3) acc[p] = _mm256_fmadd_ps(wv[ky * 3 + kx], v, acc[p]);
            }
          }
        }
        for (int p = 0; p < kPix; ++p) _mm256_storeu_ps(out + (ox + p) * c + ch, acc[p]);
      }
    }
  }
  return end;
}

// A 3x3 row: blocks of 4 pixels, then of 1 (every pixel with its weights in
// registers); the channels past the last multiple of 8 one at a time.
template <int kSw>
__attribute__((target("avx2,fma"))) void Row3x3(const float* const* rows, const float* w, float* out, std::int64_t ow,
                                                std::int64_t c) {
  const std::int64_t done = Blocks3x3<kSw, 4>(rows, w, out, 0, ow, c);
  Blocks3x3<kSw, 1>(rows, w, out, done, ow, c);
  TailChannels(rows, w, out, 0, ow, c, 3, 3, kSw, 1);
}

}  // namespace

bool QuantDepthwiseAvailable() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool QuantDepthwise::Plan(const QuantDepthwiseShape& s) {
  for (std::int64_t v : {s.n, s.h, s.w, s.c, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw}) {
    if (v <= 0) return false;
  }
  if (s.pad_top < 0 || s.pad_left < 0) return false;
  // The ring: span_ rows of wb_ columns, each column c values. A ring row's
  // column j is input column j - pad_left; the window of output column ox
  // reads columns ox * sw + kx * dw.
  std::int64_t span = 0, reach = 0, last = 0, wb = 0, row_len = 0, ring = 0, taps = 0, weights = 0, rows = 0;
  if (!CheckedMul(s.kh - 1, s.dh, &span) || !CheckedAdd(span, 1, &span)) return false;
  if (!CheckedMul(s.ow - 1, s.sw, &last) || !CheckedMul(s.kw - 1, s.dw, &reach) || !CheckedAdd(last, reach, &last) ||
      !CheckedAdd(last, 1, &last)) {
    return false;
  }
  if (!CheckedAdd(s.pad_left, s.w, &wb)) return false;
  wb = std::max(wb, last);
  if (!CheckedMul(wb, s.c, &row_len) || !CheckedMul(row_len, span, &ring) || !CheckedMul(ring, 4, &ring) ||
      ring > kMaxTensorBytes) {
    return false;
  }
  if (!CheckedMul(s.kh, s.kw, &taps) || !CheckedMul(taps, s.c, &weights) || !CheckedMul(weights, 4, &weights) ||
      weights > kMaxTensorBytes) {
    return false;
  }
  // Overflow checks only: Run's row index (oy * sh + ky * dh) and the
  // output's size stay within int64.
  if (!CheckedMul(s.oh - 1, s.sh, &last) || !CheckedAdd(last, span, &last) || !CheckedMul(s.n, s.oh, &rows) ||
      !CheckedMul(rows, s.ow, &rows) || !CheckedMul(rows, s.c, &rows)) {
    return false;
  }
  s_ = s;
  span_ = span;
  wb_ = wb;
  row_len_ = row_len;
  zero_.assign(static_cast<std::size_t>(row_len + 16), 0.f);
  zero_offset_ = Align64(zero_.data()) - zero_.data();
  w_.assign(static_cast<std::size_t>(taps * s.c), 0.f);
  return true;
}

void QuantDepthwise::PackWeights(const std::int8_t* w) {
  const std::int64_t taps = s_.kh * s_.kw;
  for (std::int64_t ch = 0; ch < s_.c; ++ch) {
    for (std::int64_t t = 0; t < taps; ++t) w_[static_cast<std::size_t>(t * s_.c + ch)] = w[ch * taps + t];
  }
}

QuantDepthwise::RowSource QuantDepthwise::QuantizedRows(const float* x, float x_scale, std::int32_t x_zp) const {
  const std::int64_t in_row = s_.w * s_.c, h = s_.h;
  return [x, x_scale, x_zp, in_row, h](std::int64_t n, std::int64_t iy, float* dst) {
    QuantizeCenteredFloat(x + (n * h + iy) * in_row, dst, in_row, x_scale, x_zp);
  };
}

void QuantDepthwise::Run(const float* x, float x_scale, std::int32_t x_zp, float* y, const RowEpilogue& epilogue,
                         float* range_min, float* range_max) const {
  Run(QuantizedRows(x, x_scale, x_zp), y, epilogue, range_min, range_max);
}

void QuantDepthwise::Run(const RowSource& source, float* y, const RowEpilogue& epilogue, float* range_min,
                         float* range_max) const {
  const QuantDepthwiseShape& s = s_;
  const std::int64_t rows = s.n * s.oh, values = s.ow * s.c, in_row = s.w * s.c;
  const bool range = range_min && range_max;
  // 3x3 windows without dilation at stride 1 or 2 (every depthwise layer
  // of MobileNet's kind): Row3x3.
  const int fast = s.kh == 3 && s.kw == 3 && s.dw == 1 && (s.sw == 1 || s.sw == 2) ? static_cast<int>(s.sw) : 0;
  float mn = 0.f, mx = 0.f;
  std::mutex mu;
  ParallelFor(rows, std::max<std::int64_t>(1, kGrainValues / values), [&](std::int64_t r0, std::int64_t r1) {
    // Per worker, reused across runs: the ring's rows, which input row
    // each slot holds (-1: none), the window's row pointers.
    thread_local std::vector<float> ring;
    thread_local std::vector<std::int64_t> held;
    thread_local std::vector<const float*> win;
    thread_local std::vector<float> sums;  // an output row's sums where y is not given
    const std::size_t ring_len = static_cast<std::size_t>(span_ * row_len_ + 16);
    if (ring.size() < ring_len) ring.resize(ring_len);
    float* const ring0 = Align64(ring.data());
    const float* const zero = zero_.data() + zero_offset_;
    held.assign(static_cast<std::size_t>(span_), -1);
    win.resize(static_cast<std::size_t>(s.kh));
    if (!y && sums.size() < static_cast<std::size_t>(values + 16)) sums.resize(static_cast<std::size_t>(values + 16));
    for (std::int64_t slot = 0; slot < span_; ++slot) {  // the pad columns: 0 (the zero point, centred)
      float* r = ring0 + slot * row_len_;
      std::fill(r, r + s.pad_left * s.c, 0.f);
      std::fill(r + s.pad_left * s.c + in_row, r + row_len_, 0.f);
    }
    float lo = 0.f, hi = 0.f;
    std::int64_t image = -1;
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t n = r / s.oh, oy = r % s.oh;
      if (n != image) {
        std::fill(held.begin(), held.end(), -1);
        image = n;
      }
      for (std::int64_t ky = 0; ky < s.kh; ++ky) {
        const std::int64_t iy = oy * s.sh - s.pad_top + ky * s.dh;
        if (iy < 0 || iy >= s.h) {
          win[static_cast<std::size_t>(ky)] = zero;
          continue;
        }
        // A window's rows lie within span_ consecutive rows: distinct slots.
        const std::int64_t slot = iy % span_;
        float* dst = ring0 + slot * row_len_;
        if (held[static_cast<std::size_t>(slot)] != iy) {
          source(n, iy, dst + s.pad_left * s.c);
          held[static_cast<std::size_t>(slot)] = iy;
        }
        win[static_cast<std::size_t>(ky)] = dst;
      }
      float* out = y ? y + r * values : Align64(sums.data());
      if (fast == 1) Row3x3<1>(win.data(), w_.data(), out, s.ow, s.c);
      else if (fast == 2) Row3x3<2>(win.data(), w_.data(), out, s.ow, s.c);
      else DepthwiseRow(win.data(), w_.data(), out, s.ow, s.c, s.kh, s.kw, s.sw, s.dw);
      epilogue(r, out, s.ow, range ? &lo : nullptr, range ? &hi : nullptr);
    }
    if (range) {
      std::lock_guard<std::mutex> lock(mu);
      mn = std::min(mn, lo);
      mx = std::max(mx, hi);
    }
  });
  if (range) {
    *range_min = mn;
    *range_max = mx;
  }
}

}  // namespace kiln::cpu
