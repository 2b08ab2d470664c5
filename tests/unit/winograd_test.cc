// Winograd F(4x4, 3x3) (backends/cpu/kernels/winograd.h) against a direct
// convolution in double: extents that are and are not multiples of the
// 4x4 tile, every padding shape, output channels that are not a multiple of
// the 16-wide block, batches, both of its schedules (one block of every
// tile; blocks of tiles per thread), 1 and 2 threads, and each epilogue
// (bias, residual, residual in place, Relu / LeakyRelu / Clip).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/winograd.h"

namespace kiln::cpu {
namespace {

struct Case {
  std::int64_t n, h, w, c, k, pt, pl, pb, pr;
};

struct Epi {
  bool bias = false, residual = false, in_place = false;
  WinogradAct act = WinogradAct::kNone;
  float alpha = 0.f, beta = 0.f;
};

double ActRef(double v, const Epi& e) {
  switch (e.act) {
    case WinogradAct::kRelu: return std::max(v, 0.0);
    case WinogradAct::kLeakyRelu: return v < 0 ? e.alpha * v : v;
    case WinogradAct::kClip: return std::min(std::max(v, double(e.alpha)), double(e.beta));
    default: return v;
  }
}

void Check(const Case& cs, const Epi& ep, int threads, const std::string& what) {
  SCOPED_TRACE(what + " threads=" + std::to_string(threads));
  const std::int64_t oh = cs.h + cs.pt + cs.pb - 2, ow = cs.w + cs.pl + cs.pr - 2;
  std::uint32_t seed = 99;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>((seed >> 8) % 2001) / 1000.f - 1.f;
  };
  std::vector<float> x(cs.n * cs.h * cs.w * cs.c), wt(cs.k * cs.c * 9), bias(cs.k), res(cs.n * oh * ow * cs.k);
  for (float& v : x) v = rnd();
  for (float& v : wt) v = rnd() * 0.3f;
  for (float& v : bias) v = rnd();
  for (float& v : res) v = rnd() * 4.f;
  // Reference: direct convolution in double (x NHWC, w OIHW, y NHWC).
  std::vector<double> want(res.size());
  double scale = 0;  // the largest |value| before the activation: the error's scale
  for (std::int64_t b = 0; b < cs.n; ++b) {
    for (std::int64_t i = 0; i < oh; ++i) {
      for (std::int64_t j = 0; j < ow; ++j) {
        for (std::int64_t o = 0; o < cs.k; ++o) {
          double v = ep.bias ? bias[o] : 0.0;
          for (int ki = 0; ki < 3; ++ki) {
            for (int kj = 0; kj < 3; ++kj) {
              const std::int64_t iy = i + ki - cs.pt, ix = j + kj - cs.pl;
              if (iy < 0 || ix < 0 || iy >= cs.h || ix >= cs.w) continue;
              const float* px = &x[((b * cs.h + iy) * cs.w + ix) * cs.c];
              for (std::int64_t c = 0; c < cs.c; ++c) v += double(px[c]) * wt[((o * cs.c + c) * 3 + ki) * 3 + kj];
            }
          }
          const std::size_t at = static_cast<std::size_t>(((b * oh + i) * ow + j) * cs.k + o);
          if (ep.residual) v += res[at];
          scale = std::max(scale, std::fabs(v));
          want[at] = ActRef(v, ep);
        }
      }
    }
  }
  std::vector<float> u(WinogradPackedFloats(cs.k, cs.c) + 16);
  float* ua = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(u.data()) + 63) & ~std::uintptr_t{63});
  WinogradPackWeights(wt.data(), cs.k, cs.c, ua);
  std::vector<float> y(res.size(), 12345.f);
  if (ep.in_place) y = res;
  WinogradEpilogue e;
  e.bias = ep.bias ? bias.data() : nullptr;
  e.residual = !ep.residual ? nullptr : ep.in_place ? y.data() : res.data();
  e.act = ep.act, e.alpha = ep.alpha, e.beta = ep.beta;
  UseThreads(threads);
  for (int run = 0; run < (ep.in_place ? 1 : 2); ++run) {  // a second run over the first's output
    WinogradConvNhwc(WinogradShape{cs.n, cs.h, cs.w, cs.c, cs.k, oh, ow, cs.pt, cs.pl}, x.data(), ua, y.data(), e);
  }
  UseThreads(1);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    // float32 Winograd F(4, 3): errors of a few 1e-6 of the values' range.
    worst = std::max(worst, std::fabs(y[i] - want[i]) / (2e-5 * scale + 1e-5 * std::fabs(want[i])));
  }
  EXPECT_LE(worst, 1.0) << "largest |value| before the activation " << scale;
}

class Winograd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!WinogradAvailable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  }
};

TEST_F(Winograd, ExtentsPaddingsAndChannels) {
  const Case cases[] = {
      {1, 8, 8, 8, 16, 1, 1, 1, 1},     // extents multiples of 4
      {2, 13, 11, 16, 24, 1, 1, 1, 1},  // partial tiles, a batch, 24 = one and a half blocks of 16
      {1, 10, 9, 32, 40, 0, 0, 0, 0},   // no padding (8 x 7 out)
      {1, 9, 12, 8, 8, 2, 0, 1, 2},     // asymmetric padding
      {1, 3, 3, 8, 8, 1, 1, 1, 1},      // one partial tile
  };
  for (const Case& cs : cases) {
    Epi plain;
    Check(cs, plain, 1, "plain " + std::to_string(cs.h) + "x" + std::to_string(cs.w));
    Epi relu;
    relu.bias = true, relu.act = WinogradAct::kRelu;
    Check(cs, relu, 2, "bias + Relu " + std::to_string(cs.h) + "x" + std::to_string(cs.w));
  }
}

// Blocks of tiles per thread: more tiles than one block (40 x 40 output:
// 100 tiles of 4 x 4, 32 channels); a residual, in place and not.
TEST_F(Winograd, TileBlocksAndEpilogues) {
  const Case big{1, 40, 40, 32, 32, 1, 1, 1, 1};
  for (int threads : {1, 2}) {
    Epi e;
    e.bias = true, e.residual = true, e.act = WinogradAct::kRelu;
    Check(big, e, threads, "bias + residual + Relu");
    e.in_place = true;
    Check(big, e, threads, "bias + residual in place + Relu");
    Epi leaky;
    leaky.act = WinogradAct::kLeakyRelu, leaky.alpha = 0.1f;
    Check(big, leaky, threads, "LeakyRelu");
    Epi clip;
    clip.bias = true, clip.act = WinogradAct::kClip, clip.alpha = -0.5f, clip.beta = 0.75f;
    Check(big, clip, threads, "Clip");
  }
  Epi e;
  e.residual = true, e.in_place = true;
  Check({3, 17, 14, 16, 8, 1, 1, 1, 1}, e, 2, "a batch of 3, residual in place");
}

}  // namespace
}  // namespace kiln::cpu
