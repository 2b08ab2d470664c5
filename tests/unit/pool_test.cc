// Pooling ops: hand-derived results, Indices, ceil_mode and padding rules,
// and the oneDNN path (float32) checked against the direct loop (float64).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <random>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::Int;
using test::Ints;
using test::NodeRunner;
using test::Values;

// 1..16 as a 1x1x4x4 image.
HostTensorPtr Image4x4() {
  std::vector<float> v(16);
  std::iota(v.begin(), v.end(), 1.f);
  return F32T({1, 1, 4, 4}, v);
}

std::vector<float> Floats(const Result<std::vector<HostTensorPtr>>& r, int j = 0) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<float>(r.value()[j]) : std::vector<float>{};
}

TEST(MaxPool, StridedWithIndices) {
  NodeRunner r("MaxPool", 12, {Image4x4()}, 2);
  r.Attr("kernel_shape", Ints({2, 2})).Attr("strides", Ints({2, 2}));
  auto out = r.Run();
  EXPECT_EQ(Floats(out), (std::vector<float>{6, 8, 14, 16}));
  EXPECT_EQ(r.out_shape(1), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(r.out_dtype(1), DType::kInt64);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values<std::int64_t>(out.value()[1]), (std::vector<std::int64_t>{5, 7, 13, 15}));
}

TEST(MaxPool, ColumnMajorIndices) {
  NodeRunner r("MaxPool", 12, {Image4x4()}, 2);
  r.Attr("kernel_shape", Ints({2, 2})).Attr("strides", Ints({2, 2})).Attr("storage_order", Int(1));
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // (h, w) -> h + w * 4: 6 at (1,1), 8 at (1,3), 14 at (3,1), 16 at (3,3).
  EXPECT_EQ(Values<std::int64_t>(out.value()[1]), (std::vector<std::int64_t>{5, 13, 7, 15}));
}

TEST(MaxPool, IndicesCountEarlierPlanes) {
  // Two channels; the second plane's indices start at 16.
  std::vector<float> v(32);
  std::iota(v.begin(), v.end(), 0.f);
  NodeRunner r("MaxPool", 12, {F32T({1, 2, 4, 4}, v)}, 2);
  r.Attr("kernel_shape", Ints({4, 4}));
  auto out = r.Run();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values<std::int64_t>(out.value()[1]), (std::vector<std::int64_t>{15, 31}));
}

TEST(MaxPool, Dilation1D) {
  NodeRunner r("MaxPool", 12, {F32T({1, 1, 5}, {1, 5, 2, 4, 3})});
  r.Attr("kernel_shape", Ints({2})).Attr("dilations", Ints({2}));
  // Windows read (0,2), (1,3), (2,4).
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{2, 5, 3}));
}

TEST(MaxPool, Uint8WithPadding) {
  NodeRunner r("MaxPool", 12, {test::Tensor<std::uint8_t>(DType::kUInt8, {1, 1, 1, 3}, {7, 200, 9})});
  r.Attr("kernel_shape", Ints({1, 2})).Attr("pads", Ints({0, 1, 0, 1}));
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values<std::uint8_t>(out.value()[0]), (std::vector<std::uint8_t>{7, 200, 200, 9}));
}

TEST(MaxPool, CeilModeAddsAWindow) {
  NodeRunner r("MaxPool", 12, {Image4x4()});
  r.Attr("kernel_shape", Ints({3, 3})).Attr("strides", Ints({2, 2})).Attr("ceil_mode", Int(1));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{11, 12, 15, 16}));
}

TEST(AveragePool, CeilModeAveragesCoveredElements) {
  NodeRunner r("AveragePool", 11, {Image4x4()});
  r.Attr("kernel_shape", Ints({3, 3})).Attr("strides", Ints({2, 2})).Attr("ceil_mode", Int(1));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{6, 7.5f, 12, 13.5f}));
}

TEST(AveragePool, PaddingCountedOnlyWithCountIncludePad) {
  // x = [[1,2],[3,4]], 2x2 windows, pads 1 all round: 3x3 output.
  for (int include : {0, 1}) {
    NodeRunner r("AveragePool", 11, {F32T({1, 1, 2, 2}, {1, 2, 3, 4})});
    r.Attr("kernel_shape", Ints({2, 2})).Attr("pads", Ints({1, 1, 1, 1})).Attr("count_include_pad", Int(include));
    const std::vector<float> want = include ? std::vector<float>{0.25f, 0.75f, 0.5f, 1, 2.5f, 1.5f, 0.75f, 1.75f, 1}
                                            : std::vector<float>{1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4};
    EXPECT_EQ(Floats(r.Run()), want) << "count_include_pad=" << include;
  }
}

TEST(AveragePool, CeilModeWithIncludePadDividesByPaddedExtent) {
  // 1x1x1x5, kernel 2, stride 2, pad_end 0, ceil: last window [4, 6) holds
  // one element and extends past the padded input: divisor 1, not 2.
  NodeRunner r("AveragePool", 11, {F32T({1, 1, 1, 5}, {1, 2, 3, 4, 5})});
  r.Attr("kernel_shape", Ints({1, 2})).Attr("strides", Ints({1, 2})).Attr("ceil_mode", Int(1)).Attr("count_include_pad", Int(1));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1.5f, 3.5f, 5}));
}

TEST(AveragePool, SameUpperPadsAtTheEnd) {
  NodeRunner r("AveragePool", 11, {F32T({1, 1, 3}, {1, 2, 3})});
  r.Attr("kernel_shape", Ints({2})).Attr("auto_pad", ir::Attribute::String("SAME_UPPER"));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1.5f, 2.5f, 3}));
}

TEST(GlobalPools, ReducePerChannel) {
  const auto x = F32T({1, 2, 2, 2}, {1, 2, 3, 6, -1, -2, -3, -4});
  NodeRunner avg("GlobalAveragePool", 1, {x});
  EXPECT_EQ(Floats(avg.Run()), (std::vector<float>{3, -2.5f}));
  EXPECT_EQ(avg.out_shape(), (Shape{1, 2, 1, 1}));
  NodeRunner mx("GlobalMaxPool", 1, {x});
  EXPECT_EQ(Floats(mx.Run()), (std::vector<float>{6, -1}));
}

// Channels-last nodes (kiln.nhwc, set by the layout pass) hold NHWC tensors.
TEST(Pool, ChannelsLast) {
  // Logical channel 0 = [[1,2],[3,4]], channel 1 = [[5,6],[7,8]], stored NHWC.
  const auto x = F32T({1, 2, 2, 2}, {1, 5, 2, 6, 3, 7, 4, 8});
  NodeRunner mx("MaxPool", 12, {x}, 2);
  mx.Attr("kernel_shape", Ints({2, 2})).Attr("kiln.nhwc", Int(1));
  auto out = mx.Run();
  EXPECT_EQ(Floats(out), (std::vector<float>{4, 8}));
  EXPECT_EQ(mx.out_shape(), (Shape{1, 1, 1, 2}));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values<std::int64_t>(out.value()[1]), (std::vector<std::int64_t>{3, 7}));  // logical NCHW indices
  NodeRunner avg("AveragePool", 11, {x});
  avg.Attr("kernel_shape", Ints({2, 2})).Attr("pads", Ints({0, 0, 1, 1})).Attr("kiln.nhwc", Int(1));
  EXPECT_EQ(Floats(avg.Run()), (std::vector<float>{2.5f, 6.5f, 3, 7, 3.5f, 7.5f, 4, 8}));
  NodeRunner gap("GlobalAveragePool", 1, {x});
  gap.Attr("kiln.nhwc", Int(1));
  EXPECT_EQ(Floats(gap.Run()), (std::vector<float>{2.5f, 6.5f}));
  EXPECT_EQ(gap.out_shape(), (Shape{1, 1, 1, 2}));
}

// Channels-last global pools over many rows: the kernel reduces spans of
// rows (in parallel where large) and combines them; sums and maxima per
// (image, channel) against a float64 loop over the NHWC values, at 1 and 2
// threads (the spans do not depend on the thread count: equal results).
TEST(GlobalPools, ChannelsLastManyRowsMatchALoop) {
  const std::int64_t n = 2, h = 60, w = 50, c = 40;
  std::vector<float> x(static_cast<std::size_t>(n * h * w * c));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (float& v : x) v = u(rng);
  std::vector<float> want_avg(static_cast<std::size_t>(n * c)), want_max(want_avg.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t k = 0; k < c; ++k) {
      double sum = 0, mx = -1e30;
      for (std::int64_t j = 0; j < h * w; ++j) {
        const double v = x[static_cast<std::size_t>((i * h * w + j) * c + k)];
        sum += v;
        mx = v > mx ? v : mx;
      }
      want_avg[static_cast<std::size_t>(i * c + k)] = static_cast<float>(sum / double(h * w));
      want_max[static_cast<std::size_t>(i * c + k)] = static_cast<float>(mx);
    }
  }
  std::vector<float> got[2][2];
  for (int threads : {1, 2}) {
    cpu::UseThreads(threads);
    NodeRunner avg("GlobalAveragePool", 1, {F32T({n, h, w, c}, x)});
    avg.Attr("kiln.nhwc", Int(1));
    got[threads - 1][0] = Floats(avg.Run());
    EXPECT_EQ(avg.out_shape(), (Shape{n, 1, 1, c}));
    NodeRunner mx("GlobalMaxPool", 1, {F32T({n, h, w, c}, x)});
    mx.Attr("kiln.nhwc", Int(1));
    got[threads - 1][1] = Floats(mx.Run());
    cpu::UseThreads(1);
    ASSERT_EQ(got[threads - 1][0].size(), want_avg.size());
    ASSERT_EQ(got[threads - 1][1].size(), want_max.size());
    for (std::size_t i = 0; i < want_avg.size(); ++i) {
      EXPECT_NEAR(got[threads - 1][0][i], want_avg[i], 1e-6) << i;
      EXPECT_EQ(got[threads - 1][1][i], want_max[i]) << i;
    }
  }
  EXPECT_EQ(got[0][0], got[1][0]);
  EXPECT_EQ(got[0][1], got[1][1]);
  // A NaN in a late row (another span than the first) makes its channel's
  // maximum NaN, and only that channel's (NaN propagates, as in NumPy's max,
  // the ONNX reference's), in both layouts.
  x[static_cast<std::size_t>((h * w - 3) * c + 5)] = std::nanf("");
  NodeRunner mx("GlobalMaxPool", 1, {F32T({n, h, w, c}, x)});
  mx.Attr("kiln.nhwc", Int(1));
  const std::vector<float> m = Floats(mx.Run());
  ASSERT_EQ(m.size(), want_max.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (i == 5) EXPECT_TRUE(std::isnan(m[i]));
    else EXPECT_EQ(m[i], want_max[i]) << i;
  }
  const auto plain = F32T({1, 2, 1, 3}, {1, std::nanf(""), 2, 4, 5, 6});
  NodeRunner mp("GlobalMaxPool", 1, {plain});
  const std::vector<float> pm = Floats(mp.Run());
  ASSERT_EQ(pm.size(), 2u);
  EXPECT_TRUE(std::isnan(pm[0]));
  EXPECT_EQ(pm[1], 6.f);
}

// Channels-last MaxPool (the vectorised kernel: chunks of 32 floats / 128
// bytes, then 8 / 32, then a scalar tail) against a direct loop written
// here, for channel counts that exercise each part, with padding and a
// ceil-mode window hanging over the end; a NaN input makes exactly the
// outputs whose windows read it NaN.
template <typename T>
void CheckNhwcMaxPool(DType dt, std::int64_t c) {
  const std::int64_t h = 9, w = 8, oh = 5, ow = 4;  // kernel 3, stride 2, pads 1/0, ceil
  std::mt19937 rng(static_cast<unsigned>(c));
  std::vector<T> x(static_cast<std::size_t>(h * w * c));
  for (T& v : x) v = static_cast<T>(std::uniform_int_distribution<int>(-100, 100)(rng) + (std::is_unsigned_v<T> ? 100 : 0));
  auto want = [&](const std::vector<T>& in, std::int64_t i, std::int64_t j, std::int64_t q, bool* nan) {
    T m = std::numeric_limits<T>::lowest();
    *nan = false;
    for (std::int64_t a = i * 2 - 1; a < i * 2 + 2; ++a) {
      for (std::int64_t b = j * 2 - 1; b < j * 2 + 2; ++b) {
        if (a < 0 || a >= h || b < 0 || b >= w) continue;
        const T v = in[static_cast<std::size_t>((a * w + b) * c + q)];
        if (v != v) *nan = true;
        if (v > m) m = v;
      }
    }
    return m;
  };
  if constexpr (std::is_same_v<T, float>) x[static_cast<std::size_t>((4 * w + 5) * c + c - 1)] = std::nanf("");
  NodeRunner r("MaxPool", 12, {test::Tensor<T>(dt, {1, h, w, c}, x)});
  r.Attr("kernel_shape", Ints({3, 3})).Attr("strides", Ints({2, 2})).Attr("pads", Ints({1, 1, 0, 0}));
  r.Attr("ceil_mode", Int(1)).Attr("kiln.nhwc", Int(1));
  auto out = r.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(r.out_shape(), (Shape{1, oh, ow, c}));
  const std::vector<T> got = Values<T>(out.value()[0]);
  int nans = 0;
  for (std::int64_t i = 0; i < oh; ++i) {
    for (std::int64_t j = 0; j < ow; ++j) {
      for (std::int64_t q = 0; q < c; ++q) {
        bool nan = false;
        const T m = want(x, i, j, q, &nan);
        const T g = got[static_cast<std::size_t>((i * ow + j) * c + q)];
        if (nan) {
          EXPECT_TRUE(g != g) << "c=" << c << " at " << i << "," << j << "," << q;
          ++nans;
        } else {
          EXPECT_EQ(g, m) << "c=" << c << " at " << i << "," << j << "," << q;
        }
      }
    }
  }
  // (4, 5) is read by output row 2 (input rows 3-5; row 1 reads 1-3, row 3
  // 5-7) and columns 2 (input columns 3-5) and 3 (5-7): two output pixels.
  if constexpr (std::is_same_v<T, float>) EXPECT_EQ(nans, 2);
}

TEST(MaxPool, ChannelsLastMatchesALoop) {
  for (std::int64_t c : {1, 3, 8, 13, 32, 45, 64, 100, 130, 257}) {
    CheckNhwcMaxPool<float>(DType::kFloat32, c);
    CheckNhwcMaxPool<std::int8_t>(DType::kInt8, c);
    CheckNhwcMaxPool<std::uint8_t>(DType::kUInt8, c);
  }
}

TEST(Pool, AttributeErrorsNameTheAttribute) {
  NodeRunner a("MaxPool", 12, {Image4x4()});
  Status st = a.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'kernel_shape'"), std::string::npos) << st.message();
  NodeRunner b("MaxPool", 12, {Image4x4()});
  b.Attr("kernel_shape", Ints({2, 2})).Attr("storage_order", Int(2));
  st = b.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'storage_order'"), std::string::npos) << st.message();
  NodeRunner c("AveragePool", 11, {Image4x4()});
  c.Attr("kernel_shape", Ints({2, 2})).Attr("auto_pad", ir::Attribute::String("SAME"));
  st = c.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'auto_pad'"), std::string::npos) << st.message();
  NodeRunner d("MaxPool", 12, {Image4x4()});
  d.Attr("kernel_shape", Ints({5, 5}));
  EXPECT_FALSE(d.Infer().ok());
}

// float32 runs on oneDNN where it can; float64 always on the loop. Both must
// agree over a sweep of window configurations.
TEST(Pool, OneDnnAgreesWithLoop) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int compared = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const int sp = pick(1, 3);
    const bool is_max = pick(0, 1);
    Shape shape = {pick(1, 2), pick(1, 3)};
    std::vector<std::int64_t> kernel, strides, dil, pads(2 * sp);
    for (int i = 0; i < sp; ++i) {
      shape.push_back(pick(sp == 3 ? 3 : 4, sp == 3 ? 6 : 9));
      kernel.push_back(pick(1, 3));
      strides.push_back(pick(1, 3));
      dil.push_back(is_max ? pick(1, 2) : 1);
      pads[i] = pick(0, kernel.back() - 1);
      pads[i + sp] = pick(0, kernel.back() - 1);
    }
    std::vector<float> xf(static_cast<std::size_t>(NumElements(shape)));
    for (float& v : xf) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<double> xd(xf.begin(), xf.end());
    const int auto_pad = pick(0, 3);
    std::vector<std::vector<double>> results;
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      HostTensorPtr x = t == DType::kFloat32 ? F32T(shape, xf) : test::Tensor<double>(DType::kFloat64, shape, xd);
      NodeRunner r(is_max ? "MaxPool" : "AveragePool", is_max ? 12 : 11, {x});
      r.Attr("kernel_shape", Ints(kernel)).Attr("strides", Ints(strides));
      if (is_max) r.Attr("dilations", Ints(dil));
      else r.Attr("count_include_pad", Int(iter % 2));
      if (auto_pad == 0) r.Attr("pads", Ints(pads)).Attr("ceil_mode", Int(iter / 2 % 2));
      else r.Attr("auto_pad", ir::Attribute::String(auto_pad == 1 ? "SAME_UPPER" : auto_pad == 2 ? "SAME_LOWER" : "VALID"));
      if (!r.Infer().ok()) break;  // window does not fit: skip the configuration
      auto out = r.Run();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const HostTensor& y = *out.value()[0];
      std::vector<double> v(static_cast<std::size_t>(y.numel()));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = y.GetAsDouble(static_cast<std::int64_t>(i));
      results.push_back(v);
    }
    if (results.size() != 2) continue;
    ++compared;
    ASSERT_EQ(results[0].size(), results[1].size());
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[0][i], results[1][i], 1e-5) << "iteration " << iter << " element " << i;
    }
  }
  EXPECT_GT(compared, 150);
}

// Channels-last MaxPool (its own vectorised loop, float32 / uint8 / int8)
// against the float64 NCHW loop on the same values, over random 2-D windows
// (kernel, stride, dilation, pads, ceil_mode), 1 to 40 channels.
TEST(Pool, ChannelsLastMaxPoolAgreesWithLoop) {
  std::mt19937 rng(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int compared = 0;
  for (int iter = 0; iter < 200; ++iter) {
    const std::int64_t n = pick(1, 2), c = pick(1, 40), h = pick(3, 12), w = pick(3, 12);
    std::vector<std::int64_t> kernel = {pick(1, 3), pick(1, 3)}, strides = {pick(1, 3), pick(1, 3)},
                              dil = {pick(1, 2), pick(1, 2)}, pads(4);
    for (int i = 0; i < 4; ++i) pads[i] = pick(0, kernel[i % 2] - 1);
    const int ceil = pick(0, 1);
    const DType t = iter % 3 == 0 ? DType::kFloat32 : iter % 3 == 1 ? DType::kUInt8 : DType::kInt8;
    std::vector<double> logical(static_cast<std::size_t>(n * c * h * w));  // NCHW
    for (double& v : logical) v = t == DType::kFloat32 ? std::uniform_real_distribution<float>(-1, 1)(rng) : pick(-128, 127);
    if (t == DType::kUInt8) {
      for (double& v : logical) v += 128;
    }
    auto configure = [&](NodeRunner& r) {
      r.Attr("kernel_shape", Ints(kernel)).Attr("strides", Ints(strides)).Attr("dilations", Ints(dil));
      r.Attr("pads", Ints(pads)).Attr("ceil_mode", Int(ceil));
    };
    NodeRunner ref("MaxPool", 12, {test::Tensor<double>(DType::kFloat64, {n, c, h, w}, logical)});
    configure(ref);
    if (!ref.Infer().ok()) continue;  // window does not fit
    auto want = ref.Run();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    // The same values stored NHWC in type t.
    auto xm = std::make_shared<HostTensor>(t, Shape{n, h, w, c});
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t i = 0; i < h * w; ++i) {
          const double v = logical[(b * c + ch) * h * w + i];
          const std::int64_t at = (b * h * w + i) * c + ch;
          if (t == DType::kFloat32) xm->mutable_data_as<float>()[at] = static_cast<float>(v);
          else if (t == DType::kUInt8) xm->mutable_data_as<std::uint8_t>()[at] = static_cast<std::uint8_t>(v);
          else xm->mutable_data_as<std::int8_t>()[at] = static_cast<std::int8_t>(v);
        }
    NodeRunner r("MaxPool", 12, {HostTensorPtr(xm)});
    configure(r);
    r.Attr("kiln.nhwc", Int(1));
    auto got = r.Run();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const Shape& ws = want.value()[0]->shape();  // NCHW
    ASSERT_EQ(r.out_shape(), (Shape{ws[0], ws[2], ws[3], ws[1]})) << iter;
    const std::int64_t oh = ws[2], ow = ws[3];
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t i = 0; i < oh * ow; ++i) {
          ASSERT_EQ(got.value()[0]->GetAsDouble((b * oh * ow + i) * c + ch),
                    want.value()[0]->GetAsDouble((b * c + ch) * oh * ow + i))
              << "iteration " << iter;
        }
    ++compared;
  }
  EXPECT_GT(compared, 120);
}

}  // namespace
}  // namespace kiln
