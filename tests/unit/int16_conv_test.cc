// The exact int16-product convolution (backends/cpu/kernels/int16_conv.h)
// against a direct convolution in int64 written here: uint8 and int8
// activations with zero points at the ends of their ranges, weights at
// -128 and 127 (where vpmaddubsw's int16 pairs would saturate), odd channel
// counts (the padded channel), output channels that are not a multiple of
// the 16-wide panel, rows that are not a multiple of the 4-pixel tile, sums
// carried between chunks of whole taps and of one tap's channels,
// strides, dilations, asymmetric pads, batches, float, int32 and requantised
// uint8 / int8 outputs (per-channel scales, saturating ends), rescaled
// float outputs with each activation and the range they report, Winograd
// F(2x2, 3x3) and the direct kernel on every 3x3 case (part tiles, several
// blocks, sums that wrap int32 inside the transform, the exact bound),
// 1 and 2 threads, and sums past 2^24 (exact in int32, not in float32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/int16_conv.h"

namespace kiln::cpu {
namespace {

struct Case {
  Int16ConvShape s;
  bool x_signed = false;
  std::int32_t zp = 0;
  bool extremes = false;  // weights only -128 / 127, activations only their range's ends
  bool uniform = false;   // every activation 255 and weight -128: the largest sums
  // Requantisation (out 2 and 3): its scales times this, and its zero
  // point where not NaN (else 100 for uint8, -20 for int8).
  float scale_mul = 1.f;
  float qzp = std::numeric_limits<float>::quiet_NaN();
};

// out: 0 float, 1 int32, 2 uint8, 3 int8 (requantised), 4 rescaled with a
// bias and Relu, its range too, 5 rescaled without a bias and LeakyRelu,
// 6 rescaled with Clip(-3, 40).
// The case's shape with its output extents.
Int16ConvShape Planned(Int16ConvShape s) {
  s.oh = (s.h + s.pad_top + s.pad_bottom - s.dh * (s.kh - 1) - 1) / s.sh + 1;
  s.ow = (s.w + s.pad_left + s.pad_right - s.dw * (s.kw - 1) - 1) / s.sw + 1;
  return s;
}

// The case's weights (OIHW): a sequence of their own, so that cases of the
// same channels and window have the same weights.
std::vector<std::int8_t> Weights(const Case& cs) {
  std::uint32_t seed = 11;
  std::vector<std::int8_t> w(static_cast<std::size_t>(cs.s.k * (cs.s.c / cs.s.groups) * cs.s.kh * cs.s.kw));
  for (auto& v : w) {
    seed = seed * 1664525u + 1013904223u;
    const int r = static_cast<int>(seed >> 8);
    v = static_cast<std::int8_t>(cs.uniform ? -128 : cs.extremes ? (r % 2 ? 127 : -128) : r % 256 - 128);
  }
  return w;
}

// `shared`: take its packed weights (planned for the same channels,
// window and form, packed with Weights(cs)) instead of packing them.
void Check(Case cs, int threads, int out, bool winograd = true, const Int16Conv* shared = nullptr) {
  Int16ConvShape& s = cs.s;
  s = Planned(s);
  SCOPED_TRACE("groups " + std::to_string(s.groups) + " n" + std::to_string(s.n) + " " + std::to_string(s.h) + "x" + std::to_string(s.w) + "x" +
               std::to_string(s.c) + " -> " + std::to_string(s.k) + " k" + std::to_string(s.kh) + "x" +
               std::to_string(s.kw) + " s" + std::to_string(s.sh) + " d" + std::to_string(s.dh) +
               (cs.x_signed ? " int8" : " uint8") + " zp " + std::to_string(cs.zp) + " threads " +
               std::to_string(threads) + " out " + std::to_string(out) + (winograd ? "" : " direct"));
  std::uint32_t seed = 7;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int>(seed >> 8);
  };
  const std::int64_t nx = s.n * s.h * s.w * s.c;
  std::vector<std::uint8_t> xu(static_cast<std::size_t>(nx));
  const std::vector<std::int8_t> w = Weights(cs);
  std::vector<std::int32_t> bias(static_cast<std::size_t>(s.k));
  for (auto& v : xu) v = static_cast<std::uint8_t>(cs.uniform ? 255 : cs.extremes ? (rnd() % 2 ? 255 : 0) : rnd() % 256);
  for (auto& v : bias) v = rnd() % 20001 - 10000;
  auto xval = [&](std::int64_t i) -> std::int64_t {
    return cs.x_signed ? static_cast<std::int64_t>(static_cast<std::int8_t>(xu[i])) : xu[i];
  };
  Int16Conv conv;
  ASSERT_TRUE(conv.Plan(s, winograd));
  EXPECT_EQ(conv.winograd(), winograd && s.kh == 3 && s.kw == 3 && s.sh == 1 && s.dh == 1 && s.c >= 16 &&
                                 s.k >= 16 && s.c <= 1827 && s.groups == 1);
  if (shared) {
    ASSERT_TRUE(conv.ShareWeights(*shared));
  } else {
    conv.PackWeights(w.data());
  }
  const std::int64_t ny = s.n * s.oh * s.ow * s.k;
  std::vector<float> yf(ny, -1.f), scales(static_cast<std::size_t>(s.k)), rb(static_cast<std::size_t>(s.k));
  std::vector<std::int32_t> yi(ny, -1);
  std::vector<std::uint8_t> yq(ny, 0x5a);
  // Requantisation: scales around 1/2000 (some outputs saturate), per
  // channel, and a zero point inside the type's range.
  for (auto& v : scales) v = static_cast<float>(rnd() % 1000 + 1) * 1e-6f * (out == 2 || out == 3 ? cs.scale_mul : 1.f);
  const float qzp = !std::isnan(cs.qzp) ? cs.qzp : out == 2 ? 100.f : -20.f;
  for (auto& v : rb) v = static_cast<float>(rnd() % 2001 - 1000) * 0.01f;
  float range_min = 7.f, range_max = -7.f;
  Int16ConvOut o;
  if (out == 0 || out >= 4) o.f = yf.data();
  if (out >= 4) {
    o.rescale = scales.data();
    o.rbias = out == 5 ? nullptr : rb.data();
    o.act = out == 4 ? 1 : out == 5 ? 2 : 3;
    o.alpha = out == 5 ? 0.125f : -3.f;
    o.beta = 40.f;
    o.range_min = &range_min;
    o.range_max = &range_max;
  }
  if (out == 1) o.i = yi.data();
  if (out == 2 || out == 3) {
    o.q = yq.data();
    o.q_signed = out == 3;
    o.scales = scales.data();
    o.scale_count = s.k;
    o.zp = qzp;
  }
  UseThreads(threads);
  conv.Run(xu.data(), cs.x_signed, cs.zp, bias.data(), o);
  UseThreads(1);
  std::int64_t bad = 0;
  double want_min = 0, want_max = 0;
  for (std::int64_t b = 0; b < s.n; ++b)
    for (std::int64_t i = 0; i < s.oh; ++i)
      for (std::int64_t j = 0; j < s.ow; ++j)
        for (std::int64_t oc = 0; oc < s.k; ++oc) {
          std::int64_t sum = bias[oc];
          for (std::int64_t p = 0; p < s.kh; ++p)
            for (std::int64_t q = 0; q < s.kw; ++q) {
              const std::int64_t ih = i * s.sh + p * s.dh - s.pad_top, iw = j * s.sw + q * s.dw - s.pad_left;
              if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;  // padding: the zero point, 0 after centring
              const std::int64_t cg = s.c / s.groups, g = oc / (s.k / s.groups);
              for (std::int64_t ch = 0; ch < cg; ++ch) {
                sum += (xval(((b * s.h + ih) * s.w + iw) * s.c + g * cg + ch) - cs.zp) *
                       w[((oc * cg + ch) * s.kh + p) * s.kw + q];
              }
            }
          const std::int64_t at = ((b * s.oh + i) * s.ow + j) * s.k + oc;
          // int32 wraps (the definition's int32 accumulation); these sums fit.
          double want = static_cast<double>(sum), got = 0;
          if (out == 0) {
            want = static_cast<float>(sum);
            got = yf[at];
          } else if (out == 1) {
            got = yi[at];
          } else if (out >= 4) {
            // float(sum) * scale, + bias, each rounded in float32, then the activation.
            volatile float v = static_cast<float>(sum) * scales[static_cast<std::size_t>(oc)];
            if (out != 5) v = v + rb[static_cast<std::size_t>(oc)];
            float r = v;
            if (out == 4) r = r < 0.f ? 0.f : r;
            if (out == 5) r = r < 0.f ? 0.125f * r : r;
            if (out == 6) r = std::min(std::max(r, -3.f), 40.f);
            want = r;
            got = yf[at];
            want_min = std::min(want_min, want);
            want_max = std::max(want_max, want);
          } else {
            // saturate(round_half_even(float(sum) * scale) + zp), in float32 as the float32 route.
            const float v = static_cast<float>(sum) * scales[static_cast<std::size_t>(oc)];
            const double lo = out == 2 ? 0 : -128, hi = out == 2 ? 255 : 127;
            want = std::min(hi, std::max(lo, static_cast<double>(std::nearbyint(v)) + qzp));
            got = out == 2 ? static_cast<double>(yq[at]) : static_cast<double>(static_cast<std::int8_t>(yq[at]));
          }
          if (want != got && ++bad <= 5) {
            ADD_FAILURE() << "at n" << b << " (" << i << ", " << j << ") channel " << oc << ": want " << want
                          << ", got " << got;
          }
        }
  EXPECT_EQ(bad, 0);
  if (out >= 4) {
    EXPECT_EQ(range_min, static_cast<float>(want_min));
    EXPECT_EQ(range_max, static_cast<float>(want_max));
  }
}

Int16ConvShape Shape(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t kh,
                     std::int64_t kw, std::int64_t stride, std::int64_t dil, std::int64_t pt, std::int64_t pl,
                     std::int64_t pb, std::int64_t pr) {
  Int16ConvShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.k = k, s.kh = kh, s.kw = kw, s.sh = s.sw = stride, s.dh = s.dw = dil;
  s.pad_top = pt, s.pad_left = pl, s.pad_bottom = pb, s.pad_right = pr;
  return s;
}

TEST(Int16Conv, MatchesInt64Reference) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  const std::vector<Case> cases = {
      {Shape(1, 9, 13, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1), false, 128},   // 3x3 pad 1, rows of 13 (6 + 6 + 1)
      {Shape(2, 8, 7, 3, 20, 7, 7, 2, 1, 3, 3, 3, 3), false, 0},      // 3 channels 7x7 stride 2, batch 2, 20 = 16 + 4
      {Shape(1, 10, 11, 24, 40, 1, 1, 1, 1, 0, 0, 0, 0), true, -128},  // 1x1, int8 activations
      {Shape(1, 12, 12, 10, 17, 3, 3, 2, 2, 2, 1, 0, 3), true, 127},   // dilation 2, asymmetric pads
      {Shape(1, 5, 6, 33, 5, 3, 1, 1, 1, 1, 0, 1, 0), false, 255},     // 3x1 window, odd channels, 5 outputs
      {Shape(1, 1, 50, 64, 48, 1, 1, 1, 1, 0, 0, 0, 0), false, 3},     // a matrix product's shape: one row
      {Shape(1, 6, 9, 100, 18, 3, 3, 1, 1, 1, 1, 1, 1), false, 77},    // 50 pairs a tap: chunks of 5 taps and 4
      {Shape(1, 3, 6, 1030, 33, 1, 2, 1, 1, 0, 0, 0, 1), true, 5},     // 515 pairs a tap: each cut in 3 chunks
      {Shape(1, 15, 14, 3, 32, 3, 3, 2, 1, 1, 1, 1, 1), false, 114},  // 3 channels (padded to 4) 3x3 stride 2
      {Shape(2, 11, 9, 4, 20, 7, 5, 2, 1, 3, 2, 3, 2), true, -3},     // 7x5 window on 4 channels, batch 2
      {Shape(1, 9, 9, 7, 16, 3, 3, 1, 2, 2, 2, 2, 2), false, 0},      // 7 channels, dilation 2
      // Small reductions (every panel of a pixel tile in turn): 1x1 of 16
      // channels to 96 over rows of 4 + 4 + 2 pixels, 8 channels to 24
      // (half a panel), 3x3 of 8 channels stride 2.
      {Shape(1, 3, 10, 16, 96, 1, 1, 1, 1, 0, 0, 0, 0), false, 37},
      // 1x1 without pads over enough rows that each unit is a whole row
      // and makes its own image row: stride 2 (odd rows: the last one
      // alone), batch 2, and stride 1.
      {Shape(2, 21, 8, 24, 20, 1, 1, 2, 1, 0, 0, 0, 0), true, 11},
      {Shape(1, 17, 6, 40, 36, 1, 1, 1, 1, 0, 0, 0, 0), false, 200},
      {Shape(2, 5, 7, 8, 24, 1, 1, 1, 1, 0, 0, 0, 0), true, 0},
      {Shape(1, 9, 11, 8, 16, 3, 3, 2, 1, 1, 1, 1, 1), false, 255},
      // Fewer than 8 channels: a tap per window row (kw x c values, the
      // last pair's odd half on a zero weight), no pads (the last window
      // ends the image), 1 channel 5x5 stride 2, 5 channels 3x1.
      {Shape(1, 9, 10, 3, 24, 3, 3, 1, 1, 0, 0, 0, 0), false, 31},
      {Shape(2, 8, 9, 1, 16, 5, 5, 2, 1, 2, 2, 1, 1), true, 0},
      {Shape(1, 7, 8, 5, 20, 3, 1, 1, 1, 1, 0, 1, 0), false, 250},
      // Winograd F(2x2, 3x3): odd output extents (part tiles), no pads,
      // asymmetric pads, batch 2, channels off 16 (the transform's tail),
      // output channels off the panel.
      {Shape(1, 7, 9, 16, 16, 3, 3, 1, 1, 0, 0, 0, 0), false, 200},
      {Shape(2, 10, 5, 34, 40, 3, 3, 1, 1, 2, 0, 1, 1), true, -100},
      {Shape(1, 23, 21, 48, 33, 3, 3, 1, 1, 1, 1, 1, 1), false, 0},   // 132 tiles: several blocks
      {Shape(1, 3, 4, 1900, 16, 3, 3, 1, 1, 1, 1, 1, 1), false, 9},   // past Winograd's exact bound: direct
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      for (int out : {0, 1, 2, 3, 4, 5, 6}) {
        Check(c, threads, out);
        Check(c, threads, out, false);
      }
    }
  }
}

// Groups: each reads its own input channels (an odd count's last pair on
// the next group's first channel or the pixel's padding, with a zero
// weight) into its own panels of outputs (a group's last panel part empty).
TEST(Int16Conv, GroupsMatchInt64Reference) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  auto grouped = [](Int16ConvShape s, std::int64_t g) {
    s.groups = g;
    return s;
  };
  const std::vector<Case> cases = {
      {grouped(Shape(1, 7, 9, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1), 4), false, 37},    // ResNeXt-like: 16 -> 16 each
      {grouped(Shape(2, 6, 5, 30, 40, 3, 3, 2, 1, 1, 1, 1, 1), 2), true, -9},     // 15 channels each (odd), 20 outputs
      {grouped(Shape(1, 5, 8, 21, 24, 1, 1, 1, 1, 0, 0, 0, 0), 3), false, 200},   // 7 -> 8 each, odd total: padding
      {grouped(Shape(1, 4, 6, 96, 48, 3, 1, 1, 1, 1, 0, 1, 0), 8), false, 0},     // 12 -> 6 each
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      for (int out : {0, 1, 2, 3, 4}) Check(c, threads, out);
    }
  }
  // One packing for other extents of the same groups; none for other groups.
  Int16Conv packed;
  ASSERT_TRUE(packed.Plan(Planned(cases[0].s)));
  packed.PackWeights(Weights(cases[0]).data());
  Case other{grouped(Shape(1, 11, 4, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1), 4), true, 5};
  Check(other, 2, 2, true, &packed);
  Int16Conv two;
  ASSERT_TRUE(two.Plan(Planned(grouped(cases[0].s, 2))));
  EXPECT_NE(two.WeightKey(), packed.WeightKey());
  EXPECT_FALSE(two.ShareWeights(packed));
  Int16ConvShape bad = grouped(cases[0].s, 3);  // 64 channels in 3 groups
  EXPECT_FALSE(two.Plan(Planned(bad)));
}

TEST(Int16Conv, SaturatingPairsAndSumsPastFloatAreExact) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  // Activations 0 / 255 with zero point 0 and weights -128 / 127: the pairs
  // vpmaddubsw would saturate (255 * 127 * 2 > 32767), and with 9 * 512
  // products of up to 32640 the sums pass 2^24, where float32 would round.
  Case c{Shape(1, 4, 8, 512, 24, 3, 3, 1, 1, 1, 1, 1, 1), false, 0, true};
  Check(c, 2, 1);         // Winograd: sums of transformed values wrap int32, the result does not
  Check(c, 2, 1, false);  // direct
  // Winograd at its bound: 1827 channels of 255 x -128, the centre
  // output's sum 9 * 1827 * -32640 (just above -2^29: 4 y just above -2^31).
  Case b{Shape(1, 3, 3, 1827, 16, 3, 3, 1, 1, 1, 1, 1, 1), false, 0, false, true};
  Check(b, 1, 1);
  Case s{Shape(1, 3, 7, 256, 16, 1, 1, 1, 1, 0, 0, 0, 0), true, -128, true};  // int8 0/255 bytes: -1 and 0, zp -128
  Check(s, 1, 1);
}

TEST(Int16Conv, RequantisationSaturatesFarPastTheTypesRange) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  // Scales up to 1e6 put float(sum) * scale far past +-2^31 (where the
  // conversion to int32 fails) on both sides; zero points at each end of
  // the types' ranges. uint8 (out 2) and int8 (out 3), direct and Winograd.
  for (float zp : {0.f, 255.f, -128.f, 127.f}) {
    for (float mul : {1.f, 1e3f, 1e9f}) {
      const int out = zp == 0.f || zp == 255.f ? 2 : 3;
      Case c{Shape(1, 6, 7, 16, 20, 3, 3, 1, 1, 1, 1, 1, 1), false, 90};
      c.scale_mul = mul;
      c.qzp = zp;
      Check(c, 1, out);
      Check(c, 1, out, false);
      Case d{Shape(1, 4, 9, 16, 32, 1, 1, 1, 1, 0, 0, 0, 0), true, 0};
      d.scale_mul = mul;
      d.qzp = zp;
      Check(d, 2, out);
    }
  }
}

TEST(Int16Conv, RangeSkipsPaddedChannelsAndNaN) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  // 24 outputs: the second panel stores 8 of its 16 lanes. With every
  // rescale factor NaN, every stored value is NaN, and the range of what
  // was stored (NaNs skipped, with 0) is [0, 0]; a padded lane would hold
  // Clip(0) = 1.5. Direct and Winograd forms.
  for (bool winograd : {false, true}) {
    SCOPED_TRACE(winograd ? "winograd" : "direct");
    Int16ConvShape s = Planned(Shape(1, 6, 7, 16, 24, 3, 3, 1, 1, 1, 1, 1, 1));
    Int16Conv conv;
    ASSERT_TRUE(conv.Plan(s, winograd));
    ASSERT_EQ(conv.winograd(), winograd);
    const std::vector<std::int8_t> w(static_cast<std::size_t>(s.k * s.c * 9), 3);
    conv.PackWeights(w.data());
    const std::vector<std::uint8_t> x(static_cast<std::size_t>(s.h * s.w * s.c), 200);
    std::vector<float> y(static_cast<std::size_t>(s.oh * s.ow * s.k), 0.f);
    const std::vector<float> scale(static_cast<std::size_t>(s.k), std::numeric_limits<float>::quiet_NaN());
    float lo = 7.f, hi = -7.f;
    Int16ConvOut o;
    o.f = y.data();
    o.rescale = scale.data();
    o.act = 3;
    o.alpha = 1.5f;
    o.beta = 3.f;
    o.range_min = &lo;
    o.range_max = &hi;
    conv.Run(x.data(), false, 0, nullptr, o);
    for (float v : y) ASSERT_TRUE(std::isnan(v));
    EXPECT_EQ(lo, 0.f);
    EXPECT_EQ(hi, 0.f);
  }
}

TEST(Int16Conv, PlansOfOtherExtentsShareOnePacking) {
  if (!Int16ConvAvailable()) GTEST_SKIP() << "no AVX2";
  // Weights packed once for a 6x9 input (pads 1) serve inputs of other
  // extents, batches and pads (a model with dynamic shapes plans each),
  // Winograd and direct alike.
  const Case first{Shape(1, 6, 9, 24, 40, 3, 3, 1, 1, 1, 1, 1, 1), false, 7};
  const std::vector<Case> others = {
      {Shape(1, 11, 4, 24, 40, 3, 3, 1, 1, 0, 1, 2, 0), true, -5},
      {Shape(2, 3, 17, 24, 40, 3, 3, 1, 1, 1, 1, 1, 1), false, 200},
  };
  for (bool winograd : {true, false}) {
    Int16Conv packed;
    ASSERT_TRUE(packed.Plan(Planned(first.s), winograd));
    packed.PackWeights(Weights(first).data());
    for (const Case& c : others) {
      Int16Conv other;
      ASSERT_TRUE(other.Plan(Planned(c.s), winograd));
      EXPECT_EQ(other.WeightKey(), packed.WeightKey());
      for (int out : {1, 2, 4}) Check(c, 2, out, winograd, &packed);
    }
  }
  // Other channels, window or form: another packing, and no sharing.
  Int16Conv packed;
  ASSERT_TRUE(packed.Plan(Planned(first.s)));
  packed.PackWeights(Weights(first).data());
  for (Int16ConvShape s : {Shape(1, 6, 9, 16, 40, 3, 3, 1, 1, 1, 1, 1, 1), Shape(1, 6, 9, 24, 32, 3, 3, 1, 1, 1, 1, 1, 1),
                           Shape(1, 6, 9, 24, 40, 1, 3, 1, 1, 0, 1, 0, 1)}) {
    Int16Conv other;
    ASSERT_TRUE(other.Plan(Planned(s)));
    EXPECT_NE(other.WeightKey(), packed.WeightKey());
    EXPECT_FALSE(other.ShareWeights(packed));
  }
  Int16Conv direct;
  ASSERT_TRUE(direct.Plan(Planned(first.s), false));
  EXPECT_NE(direct.WeightKey(), packed.WeightKey());
  EXPECT_FALSE(direct.ShareWeights(packed));
  Int16Conv unpacked;
  ASSERT_TRUE(unpacked.Plan(Planned(first.s)));
  Int16Conv same;
  ASSERT_TRUE(same.Plan(Planned(first.s)));
  EXPECT_FALSE(same.ShareWeights(unpacked));  // nothing packed to share
}

TEST(Int16Conv, PlanRefusesWindowsOutsideTheImageAndEmptyShapes) {
  Int16Conv conv;
  Int16ConvShape s = Shape(1, 4, 4, 8, 8, 3, 3, 1, 1, 0, 0, 0, 0);
  s.oh = s.ow = 3;  // one past what a 4x4 input without pads gives
  EXPECT_FALSE(conv.Plan(s));
  s.oh = s.ow = 2;
  EXPECT_TRUE(conv.Plan(s));
  s.c = 0;
  EXPECT_FALSE(conv.Plan(s));
  Int16ConvShape big = Shape(1 << 20, 1 << 20, 1 << 20, 8, 8, 1, 1, 1, 1, 0, 0, 0, 0);
  big.oh = big.ow = 1 << 20;
  EXPECT_FALSE(conv.Plan(big));  // the padded image passes kMaxTensorBytes
}

}  // namespace
}  // namespace kiln::cpu
