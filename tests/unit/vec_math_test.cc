// vec_math.h's float32 loops, both the one this CPU dispatches to (AVX2+FMA
// where present) and the portable scalar one other CPUs take, against double
// references: every length 0..40 (vector bodies and every tail), in place,
// dense sweeps and the extremes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/vec_math.h"

namespace kiln::cpu {
namespace {

using Fn = void (*)(const float*, float*, std::int64_t);

std::vector<float> Sweep() {
  std::vector<float> x;
  for (int i = -12 * 128; i <= 12 * 128; ++i) x.push_back(static_cast<float>(i) / 128.f);
  for (int i = -1024; i <= 1024; ++i) x.push_back(static_cast<float>(i) / 8192.f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {1e-30f, -1e-30f, 1e-40f, 30.f, -30.f, 1e4f, -1e4f, 3e38f, -3e38f, inf, -inf}) x.push_back(v);
  return x;
}

double TanhRef(double x) { return std::tanh(x); }
double SigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double GeluRef(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Worst error relative to max(|want|, floor).
double Worst(Fn f, double (*ref)(double), const std::vector<float>& x, double floor) {
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = ref(x[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i])) << x[i];
      continue;
    }
    worst = std::max(worst, std::fabs(y[i] - want) / std::max(std::fabs(want), floor));
  }
  return worst;
}

TEST(VecMath, TanhSigmoidAndGeluTanhBothPathsMatchDouble) {
  const std::vector<float> x = Sweep();
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable" : (VecMathUsesAvx2() ? "avx2" : "dispatched (portable here)"));
    EXPECT_LE(Worst(portable ? TanhF32Portable : TanhF32, TanhRef, x, 1e-30), 4.8e-7);
    EXPECT_LE(Worst(portable ? SigmoidF32Portable : SigmoidF32, SigmoidRef, x, 1e-30), 4.8e-7);
    // GELU: relative to max(|want|, 1e-6) (its values pass through zero).
    EXPECT_LE(Worst(portable ? GeluTanhF32Portable : GeluTanhF32, GeluRef, x, 1e-6), 1e-6);
    // NaN stays NaN.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float y = 0;
    (portable ? TanhF32Portable : TanhF32)(&nan, &y, 1);
    EXPECT_TRUE(std::isnan(y));
    (portable ? GeluTanhF32Portable : GeluTanhF32)(&nan, &y, 1);
    EXPECT_TRUE(std::isnan(y));
    (portable ? SigmoidF32Portable : SigmoidF32)(&nan, &y, 1);
    EXPECT_TRUE(std::isnan(y));
  }
}

TEST(VecMath, EveryLengthAndInPlace) {
  for (std::int64_t n = 0; n <= 40; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n) + 1, 7.f), y(static_cast<std::size_t>(n) + 1, 7.f);
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) / 4.f - 5.f;
    for (Fn f : {TanhF32, GeluTanhF32, SigmoidF32}) {
      f(x.data(), y.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        const double want = f == TanhF32 ? TanhRef(x[i]) : f == SigmoidF32 ? SigmoidRef(x[i]) : GeluRef(x[i]);
        EXPECT_NEAR(y[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "n " << n << " i " << i;
      }
      EXPECT_EQ(y[n], 7.f) << "n " << n << ": written past the end";
      std::vector<float> z(x);  // in place
      f(z.data(), z.data(), n);
      for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], y[i]) << "in place, n " << n;
    }
  }
}

TEST(VecMath, LayerNormRowBothPathsMatchDouble) {
  for (std::int64_t n : {1, 7, 8, 9, 771, 4096}) {
    std::vector<float> x(n), scale(n), bias(n), y(n + 1, 7.f);
    for (std::int64_t i = 0; i < n; ++i) {
      x[i] = 10000.f + static_cast<float>((i * 37) % 17 - 8) / 8.f;
      scale[i] = 0.5f + static_cast<float>(i % 5) / 4.f;
      bias[i] = static_cast<float>(i % 3) - 1.f;
    }
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= n;
    for (float v : x) var += (v - mean) * (v - mean);
    const double rstd = 1.0 / std::sqrt(var / n + 1e-5);
    for (bool portable : {false, true}) {
      for (bool with_bias : {true, false}) {
        double m = 0, r = 0;
        (portable ? LayerNormRowF32Portable : LayerNormRowF32)(x.data(), y.data(), n, scale.data(),
                                                                with_bias ? bias.data() : nullptr, 1e-5, &m, &r);
        EXPECT_NEAR(m, mean, 1e-9 * mean) << n;
        EXPECT_NEAR(r, rstd, 1e-6 * rstd) << n;
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = (x[i] - mean) * rstd * scale[i] + (with_bias ? bias[i] : 0.0);
          EXPECT_NEAR(y[i], want, 2e-5) << "n " << n << " i " << i << (portable ? " portable" : "");
        }
        EXPECT_EQ(y[n], 7.f) << "n " << n << ": written past the end";
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
