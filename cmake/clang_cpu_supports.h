// Clang before 16 rejects __builtin_cpu_supports("f16c") ("invalid cpu
// feature string"), which GCC accepts. Force-included (CMakeLists.txt) into
// the one file that uses it when Kiln is built with such a Clang (the
// sanitizer, TSan and fuzz builds); answers from CPUID instead. Remove once
// src/backends/cpu/kernels/shape_ops.cc checks F16C without the builtin.
#pragma once
#include <cpuid.h>
#include <string.h>

static inline int kiln_cpu_supports(const char* feature) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const int osxsave = (c & bit_OSXSAVE) != 0;
  int ymm = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    ymm = (lo & 6u) == 6u;  // the OS saves XMM and YMM state
  }
  const int avx = (c & bit_AVX) != 0 && ymm;
  if (strcmp(feature, "avx") == 0) return avx;
  if (strcmp(feature, "f16c") == 0) return avx && (c & bit_F16C) != 0;
  return 0;
}
#define __builtin_cpu_supports(feature) kiln_cpu_supports(feature)
