// One core's multiply-add peak for the instruction sequences Kiln's 8-bit
// kernels choose between on x86 without VNNI: float32 FMA (the float32
// kernels), vpmaddwd + vpaddd (int16_conv.h's exact int16 products) and
// vpmaddubsw + vpmaddwd(1) + vpaddd (oneDNN's and ONNX Runtime's uint8 x
// int8 pairs, saturating in int16). Each loop runs a register-blocked
// microkernel's shape: 4 weight vectors against 2 broadcast activation
// vectors, 8 independent accumulators, the operands kept opaque to the
// compiler each iteration. Prints G multiply-adds per second (one output
// lane times one product = one), best of --rounds.
// Usage: int_peak_bench [--rounds N] (pin it: taskset -c 1)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
constexpr long kIters = 20000000;

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

__attribute__((target("avx2,fma"), noinline)) double Fma() {
  __m256 acc[8], w[4];
  __m256 x0 = _mm256_set1_ps(1.0001f), x1 = _mm256_set1_ps(0.9999f);
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int i = 0; i < 4; ++i) w[i] = _mm256_set1_ps(1.f + 1e-5f * static_cast<float>(i));
  const auto t = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n) {
    asm volatile("" : "+x"(x0), "+x"(x1));
    for (int i = 0; i < 4; ++i) {
      acc[i] = _mm256_fmadd_ps(w[i], x0, acc[i]);
      acc[i + 4] = _mm256_fmadd_ps(w[i], x1, acc[i + 4]);
    }
  }
  const double s = Seconds(t);
  float sink = 0.f;
  for (auto& a : acc) sink += a[0];
  asm volatile("" : : "x"(sink));
  return static_cast<double>(kIters) * 8 * 8 / s / 1e9;
}

__attribute__((target("avx2"), noinline)) double MaddInt16() {
  __m256i acc[8], w[4];
  __m256i x0 = _mm256_set1_epi16(5), x1 = _mm256_set1_epi16(7);
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  for (int i = 0; i < 4; ++i) w[i] = _mm256_set1_epi16(static_cast<short>(i + 1));
  const auto t = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n) {
    asm volatile("" : "+x"(x0), "+x"(x1));
    for (int i = 0; i < 4; ++i) {
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(w[i], x0));
      acc[i + 4] = _mm256_add_epi32(acc[i + 4], _mm256_madd_epi16(w[i], x1));
    }
  }
  const double s = Seconds(t);
  int sink = 0;
  for (auto& a : acc) sink += _mm256_extract_epi32(a, 0);
  asm volatile("" : : "r"(sink));
  return static_cast<double>(kIters) * 8 * 16 / s / 1e9;
}

__attribute__((target("avx2"), noinline)) double MaddUbs() {
  __m256i acc[8], w[4];
  __m256i x0 = _mm256_set1_epi8(5), x1 = _mm256_set1_epi8(7);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  for (int i = 0; i < 4; ++i) w[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  const auto t = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n) {
    asm volatile("" : "+x"(x0), "+x"(x1));
    for (int i = 0; i < 4; ++i) {
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(x0, w[i]), ones));
      acc[i + 4] = _mm256_add_epi32(acc[i + 4], _mm256_madd_epi16(_mm256_maddubs_epi16(x1, w[i]), ones));
    }
  }
  const double s = Seconds(t);
  int sink = 0;
  for (auto& a : acc) sink += _mm256_extract_epi32(a, 0);
  asm volatile("" : : "r"(sink));
  return static_cast<double>(kIters) * 8 * 32 / s / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "int_peak_bench: this CPU has no AVX2 + FMA\n");
    return 1;
  }
  double fma = 0, i16 = 0, ubs = 0;
  for (int r = 0; r < rounds; ++r) {
    fma = std::max(fma, Fma());
    i16 = std::max(i16, MaddInt16());
    ubs = std::max(ubs, MaddUbs());
  }
  std::printf("float32 FMA                      %7.1f G multiply-adds/s\n", fma);
  std::printf("int16 vpmaddwd + vpaddd (exact)  %7.1f  (%.2f x FMA)\n", i16, i16 / fma);
  std::printf("uint8 x int8 vpmaddubsw chain    %7.1f  (%.2f x FMA; saturating)\n", ubs, ubs / fma);
  return 0;
}
