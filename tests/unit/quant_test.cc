// Quantized convolution: QLinearConv through oneDNN's int8 primitive
// (constant weights) and through the reference kernel (weights as a model
// input), both against a double-precision reference written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "backends/cpu/kernels/quant.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "node_runner.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

using test::In;
using test::Tensor;

struct QConvCase {
  std::int64_t n = 1, cin = 8, h = 7, w = 7, cout = 16, k = 3, group = 1, pad = 1, stride = 1;
  bool u8_weights = false;     // uint8 weights (zero point 128) instead of int8 (zero point 0)
  bool per_channel = true;
  bool weights_as_input = false;  // the reference kernel instead of oneDNN's
  int wmax = 127;                 // weights in [-wmax, wmax]; 64: exact on oneDNN without VNNI too
  bool int8_act = false;          // int8 activations and output (zero points -7 / 5) instead of uint8
  // Activations 0 or 255 and weights -wmax or wmax only: any pair of
  // products summed in int16 (oneDNN's vpmaddubsw without VNNI) saturates.
  bool extreme = false;
  int zero_zps = 0;  // 1: the activation's zero point 0, 2: the output's, 3: both (oneDNN without those attributes)
  // Added to every bias, + on even output channels, - on odd ones; and a
  // factor on the weight scales (biases past 2^24 with outputs in range).
  std::int64_t bias_base = 0;
  float wscale_mul = 1.f;
};

// y = saturate(round(x_scale * w_scale[oc] / y_scale * (sum (x - xzp)(w - wzp) + B)) + yzp), uint8.
void CheckQLinearConv(const QConvCase& q) {
  std::mt19937 rng(1234);
  const std::int64_t cg = q.cin / q.group;
  const std::int64_t oh = (q.h + 2 * q.pad - q.k) / q.stride + 1, ow = (q.w + 2 * q.pad - q.k) / q.stride + 1;
  std::vector<std::uint8_t> x(q.n * q.cin * q.h * q.w);
  for (auto& v : x) v = static_cast<std::uint8_t>(q.extreme ? (rng() % 4 ? 255 : 0) : rng() % 256);
  const std::size_t wn = q.cout * cg * q.k * q.k;
  std::vector<std::int8_t> w8(wn);
  std::vector<std::uint8_t> wu(wn);
  for (std::size_t i = 0; i < wn; ++i) {
    const int v = q.extreme ? (rng() % 2 ? q.wmax : -q.wmax) : static_cast<int>(rng() % (2 * q.wmax + 1)) - q.wmax;
    w8[i] = static_cast<std::int8_t>(v);
    wu[i] = static_cast<std::uint8_t>(v + 128);
  }
  std::vector<float> wscale(q.per_channel ? q.cout : 1);
  for (auto& s : wscale) s = (0.002f + 0.001f * static_cast<float>(rng() % 10)) * q.wscale_mul;
  std::vector<std::int32_t> bias(q.cout);
  for (auto& b : bias) b = static_cast<std::int32_t>(rng() % 2001) - 1000;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] += static_cast<std::int32_t>(i % 2 ? -q.bias_base : q.bias_base);
  const float xs = 0.02f, ys = 0.05f;
  const int xzp = q.zero_zps & 1 ? 0 : q.int8_act ? -7 : 120, yzp = q.zero_zps & 2 ? 0 : q.int8_act ? 5 : 100;
  const int wzp = q.u8_weights ? 128 : 0;
  const DType at = q.int8_act ? DType::kInt8 : DType::kUInt8;
  // x's bytes as the activation type's values.
  auto xval = [&](std::size_t i) { return q.int8_act ? static_cast<int>(static_cast<std::int8_t>(x[i])) : static_cast<int>(x[i]); };
  auto zp_tensor = [&](int v) {
    return q.int8_act ? Tensor(DType::kInt8, {}, std::vector<std::int8_t>{static_cast<std::int8_t>(v)})
                      : Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{static_cast<std::uint8_t>(v)});
  };

  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", at, {q.n, q.cin, q.h, q.w});
  g->inputs().push_back(xv);
  ir::Value* wv;
  const Shape wshape = {q.cout, cg, q.k, q.k};
  if (q.weights_as_input) {
    wv = g->AddValue("w", q.u8_weights ? DType::kUInt8 : DType::kInt8, wshape);
    g->inputs().push_back(wv);
  } else {
    wv = q.u8_weights ? g->AddConstant("w", Tensor(DType::kUInt8, wshape, wu))
                      : g->AddConstant("w", Tensor(DType::kInt8, wshape, w8));
  }
  ir::Value* wzpv = q.u8_weights ? g->AddConstant("wzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{128}))
                                 : g->AddConstant("wzp", Tensor(DType::kInt8, {}, std::vector<std::int8_t>{0}));
  ir::Value* y = g->AddValue("y");
  ir::Node* n = g->AddNode(
      "QLinearConv", "qconv",
      {xv, g->AddConstant("xs", Tensor(DType::kFloat32, {}, std::vector<float>{xs})),
       g->AddConstant("xzp", zp_tensor(xzp)), wv,
       g->AddConstant("ws", Tensor(DType::kFloat32, q.per_channel ? Shape{q.cout} : Shape{}, wscale)), wzpv,
       g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{ys})),
       g->AddConstant("yzp", zp_tensor(yzp)),
       g->AddConstant("b", Tensor(DType::kInt32, {q.cout}, bias))},
      {y});
  n->SetAttr("pads", ir::Attribute::Ints({q.pad, q.pad, q.pad, q.pad}));
  n->SetAttr("strides", ir::Attribute::Ints({q.stride, q.stride}));
  n->SetAttr("group", ir::Attribute::Int(q.group));
  n->set_since_version(10);
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::uint8_t> out(q.n * q.cout * oh * ow);
  std::vector<TensorRef> ins = {{x.data(), at, {q.n, q.cin, q.h, q.w}}};
  if (q.weights_as_input) {
    ins.push_back(q.u8_weights ? TensorRef{wu.data(), DType::kUInt8, wshape} : TensorRef{w8.data(), DType::kInt8, wshape});
  }
  ASSERT_TRUE((*model)->Execute(ins, {{out.data(), at, {q.n, q.cout, oh, ow}}}).ok());
  int exact = 0, total = 0;
  for (std::int64_t b = 0; b < q.n; ++b)
    for (std::int64_t oc = 0; oc < q.cout; ++oc)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          const std::int64_t gi = oc / (q.cout / q.group);
          double acc = bias[oc];
          for (std::int64_t c = 0; c < cg; ++c)
            for (std::int64_t ki = 0; ki < q.k; ++ki)
              for (std::int64_t kj = 0; kj < q.k; ++kj) {
                const std::int64_t r = i * q.stride - q.pad + ki, s = j * q.stride - q.pad + kj;
                if (r < 0 || r >= q.h || s < 0 || s >= q.w) continue;
                const int xv8 = xval(((b * q.cin + gi * cg + c) * q.h + r) * q.w + s);
                const std::size_t wi = ((oc * cg + c) * q.k + ki) * q.k + kj;
                const int wv8 = q.u8_weights ? wu[wi] : w8[wi];
                acc += static_cast<double>(xv8 - xzp) * (wv8 - wzp);
              }
          const double scale = static_cast<double>(xs) * wscale[q.per_channel ? oc : 0] / ys;
          const double want = std::clamp(std::nearbyint(acc * scale) + yzp, q.int8_act ? -128.0 : 0.0, q.int8_act ? 127.0 : 255.0);
          const std::uint8_t byte = out[((b * q.cout + oc) * oh + i) * ow + j];
          const int got = q.int8_act ? static_cast<std::int8_t>(byte) : byte;
          ASSERT_LE(std::fabs(got - want), 1.0) << "at oc " << oc << " (" << i << "," << j << "): got " << got
                                                << ", want " << want << " (acc " << acc << ")";
          exact += got == want;
          ++total;
        }
  // Off by one only where float32 scaling meets a rounding tie.
  EXPECT_GE(exact, total * 99 / 100) << exact << " of " << total << " exact";
}

TEST(QLinearConv, Int8WeightsPerChannelOnOneDnn) { CheckQLinearConv({}); }
// 1x1 convolutions on both sides of AmxPaysForOneByOne (quant.cc): with
// AMX the first runs on oneDNN's AMX 1x1 kernel (64 channels a side, 16M
// multiply-adds), the second on its VNNI one; either way the same exact sums.
TEST(QLinearConv, OneByOneLargeEnoughForAmx) {
  QConvCase q;
  q.cin = 64, q.cout = 64, q.h = 64, q.w = 64, q.k = 1, q.pad = 0;
  CheckQLinearConv(q);
}
// The limits themselves, hand-set: 64 channels a side and 2^24
// multiply-adds (output values x input channels), at and just past each.
TEST(QLinearConv, AmxOneByOneLimits) {
  EXPECT_TRUE(cpu::AmxPaysForOneByOne(64, 64, 64 * 64 * 64));        // 2^24 exactly
  EXPECT_FALSE(cpu::AmxPaysForOneByOne(64, 64, 64 * 64 * 64 - 1));   // one short
  EXPECT_FALSE(cpu::AmxPaysForOneByOne(63, 1024, 1024 * 56 * 56));   // few input channels
  EXPECT_FALSE(cpu::AmxPaysForOneByOne(1024, 63, 63 * 56 * 56 * 8));  // few output channels
  EXPECT_TRUE(cpu::AmxPaysForOneByOne(2048, 512, 512 * 7 * 7));      // ResNet-50's last 1x1: 51M
  EXPECT_FALSE(cpu::AmxPaysForOneByOne(32, 16, 16 * 112 * 112));     // MobileNetV2's first 1x1
  EXPECT_FALSE(cpu::AmxPaysForOneByOne(192, 64, 64 * 14 * 14));      // MobileNetV2's 14x14 1x1: 2.4M
  EXPECT_TRUE(cpu::AmxPaysForOneByOne(std::int64_t{1} << 40, 64, std::int64_t{1} << 40));  // overflows: large
}
TEST(QLinearConv, OneByOneFewChannelsSkipsAmx) {
  QConvCase q;
  q.cin = 32, q.cout = 16, q.h = 28, q.w = 28, q.k = 1, q.pad = 0;
  CheckQLinearConv(q);
}
// Scalar quantization parameters as constants.
HostTensorPtr U8Scalar(int v) { return Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{static_cast<std::uint8_t>(v)}); }
HostTensorPtr F32Scalar(float v) { return Tensor(DType::kFloat32, {}, std::vector<float>{v}); }

// One plan of a model with dynamic shapes: node r's kernel for a uint8
// input 0 of `in` (as the kernel sees it) and the constants consts[1...],
// made with the plans' shared prepack cache, run on x into y (a uint8
// output of `out`); the kernel joins `held`, as the cached plans hold theirs.
void RunPlan(test::NodeRunner& r, const Shape& in, const Shape& out, const std::vector<HostTensorPtr>& consts,
             device::PrepackCache& cache, std::vector<std::unique_ptr<cpu::Kernel>>& held,
             const std::vector<std::uint8_t>& x, std::vector<std::uint8_t>& y) {
  cpu::KernelInit init;
  init.node = &r.node();
  init.inputs = {{DType::kUInt8, in}};
  for (std::size_t i = 1; i < consts.size(); ++i) init.inputs.push_back({consts[i]->dtype(), consts[i]->shape()});
  init.outputs = {{DType::kUInt8, out}};
  for (const HostTensorPtr& t : consts) init.const_inputs.push_back(t.get());
  init.prepack_cache = &cache;
  init.varying_shapes = true;
  auto kernel = cpu::CreateKernel(init);
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  y.assign(static_cast<std::size_t>(NumElements(out)), 0);
  std::vector<void*> ptrs = {const_cast<std::uint8_t*>(x.data())};
  for (std::size_t i = 1; i < consts.size(); ++i) ptrs.push_back(const_cast<void*>(consts[i]->data()));
  ptrs.push_back(y.data());
  ASSERT_TRUE(kernel.value()->Run({ptrs.data(), static_cast<int>(consts.size())}).ok());
  held.push_back(std::move(kernel).value());
}

// A model with dynamic shapes makes a kernel per node per plan; the
// plans of one channels-last QLinearConv at other input extents share one
// packing of its weights (oneDNN's, or without VNNI the int16-product
// kernel's), and each computes its own extents right.
TEST(QLinearConv, PlansOfOtherExtentsShareOnePacking) {
  std::mt19937 rng(77);
  const std::int64_t c = 24, k = 40;
  std::vector<std::int8_t> w(static_cast<std::size_t>(k * c * 9));
  for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> ws(static_cast<std::size_t>(k));
  for (auto& v : ws) v = 0.002f + 0.0005f * static_cast<float>(rng() % 10);
  std::vector<std::int32_t> bias(static_cast<std::size_t>(k));
  for (auto& v : bias) v = static_cast<std::int32_t>(rng() % 2001) - 1000;
  const float xs = 0.02f, ys = 0.05f;
  const int xzp = 120, yzp = 100;
  const std::vector<HostTensorPtr> consts = {nullptr,
                                             F32Scalar(xs),
                                             U8Scalar(xzp),
                                             Tensor(DType::kInt8, {k, c, 3, 3}, w),
                                             Tensor(DType::kFloat32, {k}, ws),
                                             Tensor(DType::kInt8, {}, std::vector<std::int8_t>{0}),
                                             F32Scalar(ys),
                                             U8Scalar(yzp),
                                             Tensor(DType::kInt32, {k}, bias)};
  device::PrepackCache cache;
  std::vector<std::unique_ptr<cpu::Kernel>> held;  // as the cached plans hold theirs
  for (auto [n, h, wd] : {std::array<std::int64_t, 3>{1, 6, 9}, {1, 11, 4}, {2, 3, 17}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(h) + "x" + std::to_string(wd));
    test::NodeRunner r("QLinearConv", 10, {In(DType::kUInt8, {n, c, h, wd}), consts[1], consts[2], consts[3], consts[4],
                                           consts[5], consts[6], consts[7], consts[8]});
    r.Attr("pads", test::Ints({1, 1, 1, 1})).Attr(ops::kNhwcAttr, test::Int(1));
    std::vector<std::uint8_t> x(static_cast<std::size_t>(n * h * wd * c)), y;
    for (auto& v : x) v = static_cast<std::uint8_t>(rng() % 256);
    RunPlan(r, {n, h, wd, c}, {n, h, wd, k}, consts, cache, held, x, y);  // physical NHWC
    if (HasFatalFailure()) return;
    int exact = 0, total = 0;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t j = 0; j < wd; ++j)
          for (std::int64_t o = 0; o < k; ++o) {
            double acc = bias[o];
            for (std::int64_t p = 0; p < 3; ++p)
              for (std::int64_t q = 0; q < 3; ++q) {
                const std::int64_t ih = i + p - 1, iw = j + q - 1;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                for (std::int64_t ch = 0; ch < c; ++ch) {
                  acc += static_cast<double>(x[((b * h + ih) * wd + iw) * c + ch] - xzp) * w[((o * c + ch) * 3 + p) * 3 + q];
                }
              }
            const double want = std::clamp(std::nearbyint(acc * xs * ws[o] / ys) + yzp, 0.0, 255.0);
            const int got = y[((b * h + i) * wd + j) * k + o];
            ASSERT_LE(std::fabs(got - want), 1.0) << "at n" << b << " (" << i << ", " << j << ") channel " << o;
            exact += got == want;
            ++total;
          }
    EXPECT_GE(exact, total * 99 / 100) << exact << " of " << total << " exact";
  }
  EXPECT_EQ(cache.made(), 1u);
  EXPECT_EQ(cache.shared(), 2u);
}

TEST(QLinearConv, Uint8WeightsZeroPoint128PerTensorOnOneDnn) {
  QConvCase q;
  q.u8_weights = true;
  q.per_channel = false;
  CheckQLinearConv(q);
}
// 7-bit weights (ONNX Runtime's reduce_range): oneDNN on every AVX2 CPU.
TEST(QLinearConv, SevenBitWeightsOnOneDnnWithoutVnni) {
  QConvCase q;
  q.wmax = 64;
  q.cin = 64;
  CheckQLinearConv(q);
  q.u8_weights = true;
  q.per_channel = false;
  CheckQLinearConv(q);
}
TEST(QLinearConv, Int8ActivationsAndOutput) {
  QConvCase q;
  q.int8_act = true;
  CheckQLinearConv(q);
  q.u8_weights = true;
  q.per_channel = false;
  q.wmax = 64;
  CheckQLinearConv(q);
}
TEST(QLinearConv, Batch2Groups2) {
  QConvCase q;
  q.n = 2;
  q.group = 2;
  CheckQLinearConv(q);
  q.int8_act = true;
  CheckQLinearConv(q);
}
TEST(QLinearConv, DepthwiseStride2OnOneDnn) {
  QConvCase q;
  q.cin = q.cout = q.group = 16;
  q.stride = 2;
  q.h = q.w = 9;
  CheckQLinearConv(q);
}
// Full-range weights against uint8 activations at their extremes: a pair
// of products summed in int16 would saturate (255 * 127 * 2 > 32767).
// Without VNNI a depthwise convolution keeps oneDNN's int8 kernel, which
// multiplies one product per 32-bit lane (DepthwiseInt8Exact, quant.cc);
// a grouped one with four channels a group takes the float32 route (a
// mistaken int8 route there fails: 183 against 255). Under
// `unit_int8_isa_AVX2` / `_AVX` both must stay exact.
TEST(QLinearConv, DepthwiseFullRangeWeightsAtTheExtremesAreExact) {
  QConvCase q;
  q.extreme = true;
  q.cin = q.cout = q.group = 24;  // a tail past 16 and 8 channels
  q.h = q.w = 10;
  CheckQLinearConv(q);
  q.stride = 2;
  q.u8_weights = true;  // uint8 with zero point 128: -127 and 127 shifted
  CheckQLinearConv(q);
  q.stride = 1;
  q.u8_weights = false;
  q.group = 6;  // four channels a group: not depthwise
  CheckQLinearConv(q);
}
// Depthwise layers on oneDNN's int8 kernel (exact without VNNI too:
// DepthwiseInt8Exact): 3x3 at strides 1 and 2, a 5x5 window, channels past
// a multiple of 8, batch 2, int8 activations, one weight scale.
TEST(QLinearConv, DepthwiseShapesAreExact) {
  struct Dw {
    std::int64_t c, hw, k, stride, n;
    bool int8_act, per_channel;
  };
  for (const Dw& d : {Dw{20, 11, 3, 1, 1, false, true}, Dw{40, 30, 3, 2, 2, false, true}, Dw{16, 13, 5, 1, 1, true, true},
                      Dw{72, 21, 3, 1, 1, true, false}, Dw{12, 9, 3, 2, 2, true, true}}) {
    SCOPED_TRACE(testing::Message() << "c " << d.c << " hw " << d.hw << " k " << d.k << " stride " << d.stride);
    QConvCase q;
    q.cin = q.cout = q.group = d.c;
    q.h = q.w = d.hw;
    q.k = d.k;
    q.pad = d.k / 2;
    q.stride = d.stride;
    q.n = d.n;
    q.int8_act = d.int8_act;
    q.per_channel = d.per_channel;
    CheckQLinearConv(q);
  }
}
// Biases past 2^24, where float(sum) + float(bias) is not float(sum +
// bias): without VNNI such a depthwise layer keeps the earlier routes
// (oneDNN's int8 kernel or the float32 route) rather than QuantDepthwise,
// whose requantization adds the bias in float32 (SumsWithBiasFitFloat,
// quant.cc). Outputs within 1 of the double reference either way; a bias
// dropped or added twice is off by 60 or more.
TEST(QLinearConv, DepthwiseBiasPastFloatPrecision) {
  QConvCase q;
  q.cin = q.cout = q.group = 24;
  q.h = q.w = 9;
  q.bias_base = (std::int64_t{1} << 24) + 12345;
  q.wscale_mul = 1e-3f;  // (sum + bias) * scale within about +-75
  CheckQLinearConv(q);
  q.int8_act = true;
  q.stride = 2;
  CheckQLinearConv(q);
}
// Zero points of 0 (what a quantizer gives a ReLU's output): oneDNN's
// primitive without zero-point attributes, a depthwise one on its brdgmm
// kernel where the CPU has VNNI. Also with only one of the two at 0.
TEST(QLinearConv, ZeroPointsOfZero) {
  for (int zeros : {3, 1, 2}) {
    QConvCase q;
    q.zero_zps = zeros;
    CheckQLinearConv(q);
    q.cin = q.cout = q.group = 32;
    q.h = q.w = 12;
    CheckQLinearConv(q);
    q.stride = 2;
    q.int8_act = true;
    CheckQLinearConv(q);
  }
}
TEST(QLinearConv, ReferenceKernelWhenWeightsAreAnInput) {
  QConvCase q;
  q.weights_as_input = true;
  CheckQLinearConv(q);
  q.u8_weights = true;
  q.group = 2;
  CheckQLinearConv(q);
  // Large enough that the im2col runs in several blocks of output positions.
  QConvCase big;
  big.weights_as_input = true;
  big.cin = 64;
  big.cout = 4;
  big.h = big.w = 90;
  CheckQLinearConv(big);
}

// QDQ: x_q -> DQ -> Conv(DQ(w_q), DQ(b_q)) -> Q, as ONNX Runtime's quantizer
// writes it. `variant`: 0 the fusable pattern, 1 the Conv output also read
// by a Relu output (near miss), 2 a float32 bias (near miss).
std::unique_ptr<ir::Graph> QdqConv(int variant) {
  std::mt19937 rng(7);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kUInt8, {1, 4, 6, 6});
  g->inputs().push_back(x);
  std::vector<std::int8_t> w(8 * 4 * 9);
  for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> ws(8);
  for (auto& v : ws) v = 0.003f + 0.001f * static_cast<float>(rng() % 5);
  const float xs = 0.02f;
  std::vector<float> bs(8);
  for (int i = 0; i < 8; ++i) bs[i] = xs * ws[i];
  std::vector<std::int32_t> b(8);
  for (auto& v : b) v = static_cast<std::int32_t>(rng() % 401) - 200;
  auto f32 = [&](const char* n, Shape s, std::vector<float> v) { return g->AddConstant(n, Tensor(DType::kFloat32, s, v)); };
  ir::Value* xf = g->AddValue("xf");
  g->AddNode("DequantizeLinear", "dq_x", {x, f32("xs", {}, {xs}),
             g->AddConstant("xzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{128}))}, {xf})->set_since_version(13);
  ir::Value* wf = g->AddValue("wf");
  ir::Node* dqw = g->AddNode("DequantizeLinear", "dq_w", {g->AddConstant("wq", Tensor(DType::kInt8, {8, 4, 3, 3}, w)),
                             f32("ws", {8}, ws), g->AddConstant("wzp", Tensor(DType::kInt8, {8}, std::vector<std::int8_t>(8, 0)))},
                             {wf});
  dqw->set_since_version(13);
  dqw->SetAttr("axis", ir::Attribute::Int(0));
  ir::Value* bf;
  if (variant == 2) {
    std::vector<float> bfl(8);
    for (int i = 0; i < 8; ++i) bfl[i] = static_cast<float>(b[i]) * bs[i];
    bf = f32("bf", {8}, bfl);
  } else {
    bf = g->AddValue("bf");
    ir::Node* dqb = g->AddNode("DequantizeLinear", "dq_b", {g->AddConstant("bq", Tensor(DType::kInt32, {8}, b)),
                               f32("bs", {8}, bs)}, {bf});
    dqb->set_since_version(13);
    dqb->SetAttr("axis", ir::Attribute::Int(0));
  }
  ir::Value* yf = g->AddValue("yf");
  ir::Node* conv = g->AddNode("Conv", "conv", {xf, wf, bf}, {yf});
  conv->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
  conv->set_since_version(11);
  ir::Value* y = g->AddValue("y");
  g->AddNode("QuantizeLinear", "q_y", {yf, f32("ys", {}, {0.05f}),
             g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{90}))}, {y})->set_since_version(13);
  g->outputs().push_back(y);
  if (variant == 1) {
    ir::Value* r = g->AddValue("r");
    g->AddNode("Relu", "relu", {yf}, {r})->set_since_version(14);
    g->outputs().push_back(r);
  }
  return g;
}

int CountOp(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

std::vector<std::uint8_t> RunQdq(Model& m, int outputs) {
  std::vector<std::uint8_t> x(4 * 36);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>(i * 37 % 256);
  std::vector<std::uint8_t> y(8 * 36);
  std::vector<float> r(8 * 36);
  std::vector<TensorRef> outs = {{y.data(), DType::kUInt8, {1, 8, 6, 6}}};
  if (outputs == 2) outs.push_back(TensorRef::Of(r.data(), {1, 8, 6, 6}));
  EXPECT_TRUE(m.Execute({{x.data(), DType::kUInt8, {1, 4, 6, 6}}}, outs).ok());
  return y;
}

TEST(FuseQdq, ConvBecomesQLinearConvWithTheSameResults) {
  test::TempDir dir;
  format::CompiledModel fused_cm, plain_cm;
  auto fused = CompileAndLoad(QdqConv(0), dir, &fused_cm);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(CountOp(*fused_cm.graph, "QLinearConv"), 1);
  EXPECT_EQ(CountOp(*fused_cm.graph, "Conv"), 0);
  EXPECT_EQ(CountOp(*fused_cm.graph, "DequantizeLinear"), 0);
  test::TempDir dir2;
  CompileOptions off;
  off.passes.disabled = {"fuse-qdq"};
  auto plain = CompileAndLoad(QdqConv(0), dir2, &plain_cm, off);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(CountOp(*plain_cm.graph, "Conv"), 1);
  // The float32 path (dequantize, Conv, quantize) and the int32 one agree to
  // one step where float rounding meets a tie.
  const auto a = RunQdq(**fused, 1), b = RunQdq(**plain, 1);
  int same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::abs(a[i] - b[i]), 1) << i;
    same += a[i] == b[i];
  }
  EXPECT_GE(same, static_cast<int>(a.size()) * 98 / 100);
}

TEST(FuseQdq, NearMissesStayAsTheGraphSays) {
  for (int variant : {1, 2}) {
    test::TempDir dir;
    format::CompiledModel cm;
    auto m = CompileAndLoad(QdqConv(variant), dir, &cm);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(CountOp(*cm.graph, "QLinearConv"), 0) << variant;
    EXPECT_EQ(CountOp(*cm.graph, "QuantizeLinear"), 1) << variant;
  }
}

// A channels-last (kiln.nhwc) QLinearConv that oneDNN's path does not take
// (uint8 weights with zero point 3) runs the reference kernel on permuted
// copies: the same values as the NCHW node, permuted.
TEST(QLinearConv, ChannelsLastReferenceFallbackMatchesNchw) {
  std::mt19937 rng(3);
  const std::int64_t c = 3, h = 5, w = 4, m = 2;
  std::vector<std::uint8_t> x(c * h * w), wt(m * c * 9);
  for (auto& v : x) v = static_cast<std::uint8_t>(rng() % 256);
  for (auto& v : wt) v = static_cast<std::uint8_t>(rng() % 256);
  auto build = [&](bool nhwc) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kUInt8, nhwc ? Shape{1, h, w, c} : Shape{1, c, h, w});
    g->inputs().push_back(xv);
    ir::Value* y = g->AddValue("y");
    ir::Node* n = g->AddNode("QLinearConv", "qc",
        {xv, g->AddConstant("xs", Tensor(DType::kFloat32, {}, std::vector<float>{0.02f})),
         g->AddConstant("xzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{7})),
         g->AddConstant("w", Tensor(DType::kUInt8, {m, c, 3, 3}, wt)),
         g->AddConstant("ws", Tensor(DType::kFloat32, {}, std::vector<float>{0.01f})),
         g->AddConstant("wzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{3})),
         g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{0.9f})),
         g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{9}))},
        {y});
    n->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    n->set_since_version(10);
    if (nhwc) n->SetAttr("kiln.nhwc", ir::Attribute::Int(1));
    g->outputs().push_back(y);
    return g;
  };
  std::vector<std::uint8_t> xnhwc(x.size());
  for (std::int64_t ch = 0; ch < c; ++ch)
    for (std::int64_t i = 0; i < h * w; ++i) xnhwc[i * c + ch] = x[ch * h * w + i];
  std::vector<std::uint8_t> ynchw(m * h * w), ynhwc(m * h * w);
  test::TempDir d1, d2;
  CompileOptions o;
  o.passes.disabled = {"channels-last"};
  auto a = CompileAndLoad(build(false), d1, nullptr, o);
  auto b = CompileAndLoad(build(true), d2, nullptr, o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*a)->Execute({{x.data(), DType::kUInt8, {1, c, h, w}}}, {{ynchw.data(), DType::kUInt8, {1, m, h, w}}}).ok());
  ASSERT_TRUE((*b)->Execute({{xnhwc.data(), DType::kUInt8, {1, h, w, c}}}, {{ynhwc.data(), DType::kUInt8, {1, h, w, m}}}).ok());
  for (std::int64_t ch = 0; ch < m; ++ch)
    for (std::int64_t i = 0; i < h * w; ++i) EXPECT_EQ(ynhwc[i * m + ch], ynchw[ch * h * w + i]) << ch << "," << i;
}

// An empty batch broadcasts as 0: MatMulInteger [0, 2, 3] x [1, 3, 4] -> [0, 2, 4], nothing written.
TEST(MatMulInteger, EmptyBatchBroadcastWritesNothing) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* a = g->AddValue("a", DType::kUInt8, {0, 2, 3});
  g->inputs().push_back(a);
  ir::Value* y = g->AddValue("y");
  g->AddNode("MatMulInteger", "mi", {a, g->AddConstant("b", Tensor(DType::kUInt8, {1, 3, 4}, std::vector<std::uint8_t>(12, 1)))},
             {y})->set_since_version(10);
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->outputs()[0].shape, (Shape{0, 2, 4}));
  std::int32_t guard = 12345;
  ASSERT_TRUE((*model)->Execute({{&guard, DType::kUInt8, {0, 2, 3}}}, {{&guard, DType::kInt32, {0, 2, 4}}}).ok());
  EXPECT_EQ(guard, 12345);
}

// QLinearMatMul, A [2, 5, K] uint8 x B [K, N] constant int8 per-column
// scales (oneDNN's int8 matmul) or B a model input (reference kernel), vs a
// double reference: y = saturate(round(as * bs[n] / ys * sum (a - azp) b) + yzp).
void CheckQLinearMatMul(bool b_as_input, bool u8_weights, int wmax = 127) {
  std::mt19937 rng(99);
  const std::int64_t k = 37, n = 19;
  std::vector<std::uint8_t> a(2 * 5 * k);
  for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 256);
  std::vector<std::int8_t> b8(k * n);
  std::vector<std::uint8_t> bu(k * n);
  for (std::size_t i = 0; i < b8.size(); ++i) {
    const int v = static_cast<int>(rng() % (2 * wmax + 1)) - wmax;
    b8[i] = static_cast<std::int8_t>(v);
    bu[i] = static_cast<std::uint8_t>(v + 128);
  }
  std::vector<float> bs(n);
  for (auto& v : bs) v = 0.001f + 0.001f * static_cast<float>(rng() % 7);
  const float as = 0.03f, ys = 0.2f;
  const std::uint8_t azp = 110, yzp = 120;
  const DType bt = u8_weights ? DType::kUInt8 : DType::kInt8;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* av = g->AddValue("a", DType::kUInt8, {2, 5, k});
  g->inputs().push_back(av);
  ir::Value* bv;
  if (b_as_input) {
    bv = g->AddValue("b", bt, {k, n});
    g->inputs().push_back(bv);
  } else {
    bv = u8_weights ? g->AddConstant("b", Tensor(bt, {k, n}, bu)) : g->AddConstant("b", Tensor(bt, {k, n}, b8));
  }
  ir::Value* bzp = u8_weights ? g->AddConstant("bzp", Tensor(bt, {n}, std::vector<std::uint8_t>(n, 128)))
                              : g->AddConstant("bzp", Tensor(bt, {n}, std::vector<std::int8_t>(n, 0)));
  ir::Value* y = g->AddValue("y");
  g->AddNode("QLinearMatMul", "qmm",
             {av, g->AddConstant("as", Tensor(DType::kFloat32, {}, std::vector<float>{as})),
              g->AddConstant("azp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{azp})), bv,
              g->AddConstant("bs", Tensor(DType::kFloat32, {n}, bs)), bzp,
              g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{ys})),
              g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{yzp}))},
             {y})->set_since_version(10);
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::uint8_t> out(2 * 5 * n);
  std::vector<TensorRef> ins = {{a.data(), DType::kUInt8, {2, 5, k}}};
  if (b_as_input) ins.push_back(u8_weights ? TensorRef{bu.data(), bt, {k, n}} : TensorRef{b8.data(), bt, {k, n}});
  ASSERT_TRUE((*model)->Execute(ins, {{out.data(), DType::kUInt8, {2, 5, n}}}).ok());
  int exact = 0;
  for (std::int64_t r = 0; r < 10; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) acc += static_cast<double>(a[r * k + p] - azp) * b8[p * n + j];
      const double want = std::clamp(std::nearbyint(acc * as * bs[j] / ys) + yzp, 0.0, 255.0);
      ASSERT_LE(std::fabs(out[r * n + j] - want), 1.0) << r << "," << j;
      exact += out[r * n + j] == want;
      // And exactly as the kernels define it (ONNX Runtime's MLAS too): the
      // int32 sum as float32 times the float32 ratio as * bs / ys, rounded
      // to nearest even, plus the zero point, saturated.
      const volatile float ratio = as * bs[j] / ys;
      const volatile float v = static_cast<float>(static_cast<std::int32_t>(acc)) * ratio;
      const float want_f = std::clamp(std::nearbyint(v) + yzp, 0.f, 255.f);
      ASSERT_EQ(out[r * n + j], static_cast<std::uint8_t>(want_f)) << r << "," << j;
    }
  EXPECT_GE(exact, 2 * 5 * n * 98 / 100);
}

// The plans of a QLinearMatMul at other row counts (dynamic shapes) share
// one packing of its constant B (oneDNN's, or without VNNI the
// int16-product kernel's) and each computes its own rows right.
TEST(QLinearMatMul, PlansOfOtherRowCountsShareOnePacking) {
  std::mt19937 rng(5);
  const std::int64_t k = 72, n = 40;
  std::vector<std::int8_t> b(static_cast<std::size_t>(k * n));
  for (auto& v : b) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> bs(static_cast<std::size_t>(n));
  for (auto& v : bs) v = 0.001f + 0.001f * static_cast<float>(rng() % 7);
  const float as = 0.03f, ys = 0.2f;
  const int azp = 110, yzp = 120;
  const std::vector<HostTensorPtr> consts = {nullptr,
                                             F32Scalar(as),
                                             U8Scalar(azp),
                                             Tensor(DType::kInt8, {k, n}, b),
                                             Tensor(DType::kFloat32, {n}, bs),
                                             Tensor(DType::kInt8, {n}, std::vector<std::int8_t>(n, 0)),
                                             F32Scalar(ys),
                                             U8Scalar(yzp)};
  device::PrepackCache cache;
  std::vector<std::unique_ptr<cpu::Kernel>> held;  // as the cached plans hold theirs
  for (std::int64_t rows : {3, 17, 64}) {
    SCOPED_TRACE(rows);
    test::NodeRunner r("QLinearMatMul", 10, {In(DType::kUInt8, {rows, k}), consts[1], consts[2], consts[3], consts[4],
                                             consts[5], consts[6], consts[7]});
    std::vector<std::uint8_t> a(static_cast<std::size_t>(rows * k)), y;
    for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 256);
    RunPlan(r, {rows, k}, {rows, n}, consts, cache, held, a, y);
    if (HasFatalFailure()) return;
    int exact = 0, total = 0;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc += static_cast<double>(a[i * k + p] - azp) * b[p * n + j];
        const double want = std::clamp(std::nearbyint(acc * as * bs[j] / ys) + yzp, 0.0, 255.0);
        const int got = y[i * n + j];
        ASSERT_LE(std::fabs(got - want), 1.0) << "at (" << i << ", " << j << ")";
        exact += got == want;
        ++total;
      }
    EXPECT_GE(exact, total * 99 / 100) << exact << " of " << total << " exact";
  }
  EXPECT_EQ(cache.made(), 1u);
  EXPECT_EQ(cache.shared(), 2u);
}

TEST(QLinearMatMul, ConstantInt8WeightsOnOneDnn) { CheckQLinearMatMul(false, false); }
TEST(QLinearMatMul, ConstantUint8WeightsZeroPoint128OnOneDnn) { CheckQLinearMatMul(false, true); }
TEST(QLinearMatMul, SevenBitWeightsOnOneDnnWithoutVnni) {
  CheckQLinearMatMul(false, false, 64);
  CheckQLinearMatMul(false, true, 64);
}
TEST(QLinearMatMul, ReferenceKernelWhenWeightsAreAnInput) { CheckQLinearMatMul(true, false); }

// DequantizeLinear(a) -> MatMul(., DequantizeLinear(w, per column)) -> QuantizeLinear
// becomes one QLinearMatMul with the op-by-op results (within one step).
TEST(FuseQdq, MatMulBecomesQLinearMatMul) {
  auto build = [] {
    std::mt19937 rng(5);
    auto g = std::make_unique<ir::Graph>();
    ir::Value* a = g->AddValue("a", DType::kUInt8, {4, 16});
    g->inputs().push_back(a);
    std::vector<std::int8_t> w(16 * 8);
    for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
    ir::Value* af = g->AddValue("af");
    g->AddNode("DequantizeLinear", "dq_a", {a, g->AddConstant("as", Tensor(DType::kFloat32, {}, std::vector<float>{0.05f})),
               g->AddConstant("azp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{100}))}, {af})->set_since_version(13);
    ir::Value* wf = g->AddValue("wf");
    ir::Node* dqw = g->AddNode("DequantizeLinear", "dq_w", {g->AddConstant("wq", Tensor(DType::kInt8, {16, 8}, w)),
                               g->AddConstant("ws", Tensor(DType::kFloat32, {8}, std::vector<float>(8, 0.004f))),
                               g->AddConstant("wzp", Tensor(DType::kInt8, {8}, std::vector<std::int8_t>(8, 0)))}, {wf});
    dqw->set_since_version(13);
    dqw->SetAttr("axis", ir::Attribute::Int(1));
    ir::Value* m = g->AddValue("m");
    g->AddNode("MatMul", "mm", {af, wf}, {m})->set_since_version(13);
    ir::Value* y = g->AddValue("y");
    g->AddNode("QuantizeLinear", "q", {m, g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{0.1f})),
               g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{128}))}, {y})->set_since_version(13);
    g->outputs().push_back(y);
    return g;
  };
  std::vector<std::uint8_t> a(64);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 53 % 256);
  std::vector<std::vector<std::uint8_t>> outs;
  for (bool fuse : {true, false}) {
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions o;
    if (!fuse) o.passes.disabled = {"fuse-qdq"};
    auto model = CompileAndLoad(build(), dir, &cm, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOp(*cm.graph, "QLinearMatMul"), fuse ? 1 : 0);
    std::vector<std::uint8_t> y(32);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {4, 16}}}, {{y.data(), DType::kUInt8, {4, 8}}}).ok());
    outs.push_back(y);
  }
  for (std::size_t i = 0; i < outs[0].size(); ++i) EXPECT_LE(std::abs(outs[0][i] - outs[1][i]), 1) << i;
}

// DequantizeLinear(a) -> Gemm(., DequantizeLinear(w [N, K], per row, transB),
// DequantizeLinear(c int32, scale a_s * w_s)) [-> QuantizeLinear] becomes
// com.microsoft QGemm (lowered to MatMulInteger and a rescale) with the
// op-by-op results: within one step quantized, within float32 rounding of
// the sums (1e-5 of the largest) as float32 logits. alpha 0.5: stays a Gemm.
void CheckFuseGemm(bool quantized, float alpha) {
  auto build = [quantized, alpha] {
    std::mt19937 rng(9);
    auto g = std::make_unique<ir::Graph>();
    ir::Value* a = g->AddValue("a", DType::kUInt8, {3, 40});
    g->inputs().push_back(a);
    std::vector<std::int8_t> w(12 * 40);
    for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> ws(12), bs(12);
    std::vector<std::int32_t> c(12);
    for (int j = 0; j < 12; ++j) {
      ws[static_cast<std::size_t>(j)] = 0.002f + 0.0003f * static_cast<float>(j);
      bs[static_cast<std::size_t>(j)] = 0.05f * ws[static_cast<std::size_t>(j)];
      c[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(rng() % 4001) - 2000;
    }
    auto dq = [&](const std::string& name, ir::Value* x, ir::Value* s, ir::Value* z, int axis) {
      ir::Value* f = g->AddValue(name + "_f");
      ir::Node* n = g->AddNode("DequantizeLinear", name, {x, s, z}, {f});
      n->set_since_version(13);
      if (axis >= 0) n->SetAttr("axis", ir::Attribute::Int(axis));
      return f;
    };
    ir::Value* af = dq("dq_a", a, g->AddConstant("as", Tensor(DType::kFloat32, {}, std::vector<float>{0.05f})),
                       g->AddConstant("azp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{100})), -1);
    ir::Value* wf = dq("dq_w", g->AddConstant("wq", Tensor(DType::kInt8, {12, 40}, w)),
                       g->AddConstant("ws", Tensor(DType::kFloat32, {12}, ws)),
                       g->AddConstant("wzp", Tensor(DType::kInt8, {12}, std::vector<std::int8_t>(12, 0))), 0);
    ir::Value* cf = dq("dq_c", g->AddConstant("cq", Tensor(DType::kInt32, {12}, c)),
                       g->AddConstant("cs", Tensor(DType::kFloat32, {12}, bs)),
                       g->AddConstant("czp", Tensor(DType::kInt32, {12}, std::vector<std::int32_t>(12, 0))), 0);
    ir::Value* m = g->AddValue("m");
    ir::Node* gemm = g->AddNode("Gemm", "gemm", {af, wf, cf}, {m});
    gemm->set_since_version(13);
    gemm->SetAttr("transB", ir::Attribute::Int(1));
    if (alpha != 1.f) gemm->SetAttr("alpha", ir::Attribute::Float(alpha));
    if (!quantized) {
      g->outputs().push_back(m);
      return g;
    }
    ir::Value* y = g->AddValue("y");
    g->AddNode("QuantizeLinear", "q", {m, g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{0.08f})),
               g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{128}))}, {y})->set_since_version(13);
    g->outputs().push_back(y);
    return g;
  };
  std::vector<std::uint8_t> a(120);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 53 % 256);
  std::vector<std::vector<float>> outs;
  for (bool fuse : {true, false}) {
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions o;
    if (!fuse) o.passes.disabled = {"fuse-qdq"};
    auto model = CompileAndLoad(build(), dir, &cm, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const bool fused = fuse && alpha == 1.f;
    EXPECT_EQ(CountOp(*cm.graph, "MatMulInteger"), fused ? 1 : 0);
    EXPECT_EQ(CountOp(*cm.graph, "Gemm"), fused ? 0 : 1);
    std::vector<float> got(36);
    if (quantized) {
      std::vector<std::uint8_t> y(36);
      ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {3, 40}}}, {{y.data(), DType::kUInt8, {3, 12}}}).ok());
      std::copy(y.begin(), y.end(), got.begin());
    } else {
      ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {3, 40}}}, {{got.data(), DType::kFloat32, {3, 12}}}).ok());
    }
    outs.push_back(got);
  }
  float top = 0.f;
  for (float v : outs[1]) top = std::max(top, std::fabs(v));
  std::size_t inside = 0;
  for (std::size_t i = 0; i < outs[0].size(); ++i) {
    EXPECT_LE(std::fabs(outs[0][i] - outs[1][i]), quantized ? 1.f : 1e-5f * top) << i;
    inside += quantized && outs[1][i] > 0 && outs[1][i] < 255;
  }
  if (quantized) EXPECT_GT(inside, outs[0].size() / 2) << "most outputs at a saturation bound";
}
TEST(FuseQdq, GemmWithQuantizedOutputBecomesQGemm) { CheckFuseGemm(true, 1.f); }
TEST(FuseQdq, GemmWithFloatLogitsBecomesQGemm) { CheckFuseGemm(false, 1.f); }
TEST(FuseQdq, GemmWithAlphaStays) { CheckFuseGemm(true, 0.5f); }

// DQ(a) + DQ(b) -> Relu -> Q becomes com.microsoft QLinearAdd when the
// quantization saturates at the Relu (zero point at uint8's minimum), with
// the results of the graph as written; a zero point of 10 (the Relu clamps
// above the saturation) stays as written.
void CheckFuseAdd(std::uint8_t yzp, int want_fused, int add_version = 14) {
  auto build = [yzp, add_version] {
    auto g = std::make_unique<ir::Graph>();
    auto dq = [&](const std::string& name, float s, std::uint8_t z) {
      ir::Value* x = g->AddValue(name, DType::kUInt8, {2, 8});
      g->inputs().push_back(x);
      ir::Value* f = g->AddValue(name + "_f");
      g->AddNode("DequantizeLinear", name + "_dq",
                 {x, g->AddConstant(name + "_s", Tensor(DType::kFloat32, {}, std::vector<float>{s})),
                  g->AddConstant(name + "_z", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{z}))},
                 {f})->set_since_version(13);
      return f;
    };
    ir::Value* a = dq("a", 0.05f, 128);
    ir::Value* b = dq("b", 0.03f, 100);
    ir::Value* sum = g->AddValue("sum");
    g->AddNode("Add", "add", {a, b}, {sum})->set_since_version(add_version);
    ir::Value* r = g->AddValue("r");
    g->AddNode("Relu", "relu", {sum}, {r})->set_since_version(14);
    ir::Value* y = g->AddValue("y");
    g->AddNode("QuantizeLinear", "q", {r, g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{0.04f})),
               g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{yzp}))}, {y})->set_since_version(13);
    g->outputs().push_back(y);
    return g;
  };
  std::vector<std::uint8_t> a(16), b(16);
  for (std::size_t i = 0; i < 16; ++i) {
    a[i] = static_cast<std::uint8_t>(i * 37 % 256);
    b[i] = static_cast<std::uint8_t>(i * 91 % 256);
  }
  std::vector<std::vector<std::uint8_t>> outs;
  for (bool fuse : {true, false}) {
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions o;
    if (!fuse) o.passes.disabled = {"fuse-qdq"};
    auto g = build();
    auto model = add_version < 7 ? test::CompileAndLoadAsIs(std::move(g), dir, &cm, o) : CompileAndLoad(std::move(g), dir, &cm, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOp(*cm.graph, "QLinearAdd"), fuse ? want_fused : 0);
    std::vector<std::uint8_t> y(16);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {2, 8}}, {b.data(), DType::kUInt8, {2, 8}}},
                                  {{y.data(), DType::kUInt8, {2, 8}}}).ok());
    outs.push_back(y);
  }
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_LE(std::abs(outs[0][i] - outs[1][i]), 1) << i;
    // Hand check: round((0.05 (a - 128) + 0.03 (b - 100)) / 0.04), Relu, + zero point.
    const double v = std::max(0.0, 0.05 * (a[i] - 128) + 0.03 * (b[i] - 100)) / 0.04;
    EXPECT_LE(std::fabs(outs[1][i] - std::clamp(std::nearbyint(v) + yzp, 0.0, 255.0)), 1.0) << i;
  }
}
// DQ -> MaxPool (3x3, stride 2, pads 1, as in ResNet's stem) -> Q with the
// same scale and zero point runs MaxPool on the uint8 tensor (no
// DequantizeLinear/QuantizeLinear left); each result must equal the
// definition computed here in double (dequantize, window max, quantize).
// A different output scale or zero point stays as written (and gives the
// same definition's results). Channels-last and NCHW (no layout pass).
void CheckFuseMaxPool(float ys, std::uint8_t yzp, bool want_fused, bool layout = true) {
  const std::int64_t c = 5, h = 9, w = 7, oh = 5, ow = 4;
  const float xs = 0.07f;
  const std::uint8_t xzp = 30;
  auto build = [&] {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kUInt8, {1, c, h, w});
    g->inputs().push_back(x);
    ir::Value* f = g->AddValue("f");
    g->AddNode("DequantizeLinear", "dq", {x, g->AddConstant("xs", Tensor(DType::kFloat32, {}, std::vector<float>{xs})),
               g->AddConstant("xzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{xzp}))}, {f})->set_since_version(13);
    ir::Value* p = g->AddValue("p");
    ir::Node* pool = g->AddNode("MaxPool", "pool", {f}, {p});
    pool->SetAttr("kernel_shape", ir::Attribute::Ints({3, 3}));
    pool->SetAttr("strides", ir::Attribute::Ints({2, 2}));
    pool->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    pool->set_since_version(12);
    ir::Value* y = g->AddValue("y");
    g->AddNode("QuantizeLinear", "q", {p, g->AddConstant("ys", Tensor(DType::kFloat32, {}, std::vector<float>{ys})),
               g->AddConstant("yzp", Tensor(DType::kUInt8, {}, std::vector<std::uint8_t>{yzp}))}, {y})->set_since_version(13);
    g->outputs().push_back(y);
    return g;
  };
  std::vector<std::uint8_t> x(c * h * w);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>(i * 73 % 256);
  test::TempDir dir;
  format::CompiledModel cm;
  CompileOptions o;
  if (!layout) o.passes.disabled = {"layout"};
  auto model = CompileAndLoad(build(), dir, &cm, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(CountOp(*cm.graph, "QuantizeLinear") + CountOp(*cm.graph, "DequantizeLinear"), want_fused ? 0 : 2);
  EXPECT_EQ(CountOp(*cm.graph, "MaxPool"), 1);
  std::vector<std::uint8_t> y(c * oh * ow);
  ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {1, c, h, w}}}, {{y.data(), DType::kUInt8, {1, c, oh, ow}}}).ok());
  for (std::int64_t ch = 0; ch < c; ++ch)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        double m = -INFINITY;
        for (std::int64_t ki = 0; ki < 3; ++ki)
          for (std::int64_t kj = 0; kj < 3; ++kj) {
            const std::int64_t r = i * 2 - 1 + ki, q = j * 2 - 1 + kj;
            if (r < 0 || r >= h || q < 0 || q >= w) continue;
            m = std::max(m, (static_cast<double>(x[(ch * h + r) * w + q]) - xzp) * xs);
          }
        const double want = std::clamp(std::nearbyint(m / ys) + yzp, 0.0, 255.0);
        ASSERT_EQ(y[(ch * oh + i) * ow + j], want) << ch << "," << i << "," << j;
      }
}
TEST(FuseQdq, MaxPoolWithOneScaleRunsOnUint8) {
  CheckFuseMaxPool(0.07f, 30, true);
  CheckFuseMaxPool(0.07f, 30, true, false);
}
TEST(FuseQdq, MaxPoolRequantisingStays) {
  CheckFuseMaxPool(0.05f, 30, false);
  CheckFuseMaxPool(0.07f, 31, false);
}

TEST(FuseQdq, AddReluBecomesQLinearAdd) { CheckFuseAdd(0, 1); }
TEST(FuseQdq, AddReluAboveTheSaturationStays) { CheckFuseAdd(10, 0); }
TEST(FuseQdq, AddBeforeVersion7Stays) { CheckFuseAdd(0, 0, 6); }


// ConvInteger and MatMulInteger as dynamic quantization writes them: uint8
// activations whose zero point is a model input (DynamicQuantizeLinear
// computes it), constant int8 weights (oneDNN's int8 primitive on VNNI
// CPUs, the reference kernel elsewhere): int32 sums, exactly the integer
// arithmetic done here (sums below 2^24; larger ones further down).
void CheckConvInteger(std::int64_t c, std::int64_t m, std::int64_t group, bool extreme_weights) {
  std::mt19937 rng(11);
  const std::int64_t n = 2, h = 9, w = 8, k = 3, pad = 1, stride = 2;
  const std::int64_t cg = c / group, oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  std::vector<std::uint8_t> x(n * c * h * w);
  for (auto& v : x) v = static_cast<std::uint8_t>(rng() % 256);
  std::vector<std::int8_t> wt(m * cg * k * k);
  for (auto& v : wt) v = static_cast<std::int8_t>(extreme_weights ? (rng() % 2 ? 127 : -128) : static_cast<int>(rng() % 255) - 127);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kUInt8, {n, c, h, w});
  ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
  g->inputs() = {xv, zv};
  ir::Value* y = g->AddValue("y");
  ir::Node* node = g->AddNode("ConvInteger", "ci",
                              {xv, g->AddConstant("w", Tensor(DType::kInt8, {m, cg, k, k}, wt)), zv,
                               g->AddConstant("wzp", Tensor(DType::kInt8, {m}, std::vector<std::int8_t>(m, 0)))},
                              {y});
  node->SetAttr("pads", ir::Attribute::Ints({pad, pad, pad, pad}));
  node->SetAttr("strides", ir::Attribute::Ints({stride, stride}));
  node->SetAttr("group", ir::Attribute::Int(group));
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // Each run its own zero point; 0 again after others (a depthwise one has a
  // second primitive for runs at 0).
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{131}, std::uint8_t{0}, std::uint8_t{255}}) {
    std::vector<std::int32_t> out(n * m * oh * ow, -1);
    ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {n, c, h, w}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {n, m, oh, ow}}}).ok());
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t oc = 0; oc < m; ++oc)
        for (std::int64_t i = 0; i < oh; ++i)
          for (std::int64_t j = 0; j < ow; ++j) {
            std::int64_t acc = 0;
            const std::int64_t gi = oc / (m / group);
            for (std::int64_t ci = 0; ci < cg; ++ci)
              for (std::int64_t ki = 0; ki < k; ++ki)
                for (std::int64_t kj = 0; kj < k; ++kj) {
                  const std::int64_t r = i * stride - pad + ki, q = j * stride - pad + kj;
                  if (r < 0 || r >= h || q < 0 || q >= w) continue;  // padding: x - zp = 0
                  acc += (x[((b * c + gi * cg + ci) * h + r) * w + q] - zp) * wt[((oc * cg + ci) * k + ki) * k + kj];
                }
            ASSERT_EQ(out[((b * m + oc) * oh + i) * ow + j], acc) << "zp " << int(zp) << " at " << oc << "," << i << "," << j;
          }
  }
}
TEST(ConvInteger, RuntimeZeroPointExactSums) { CheckConvInteger(6, 10, 2, false); }
// Depthwise, 24 channels (a vector tail), extreme weights: runs at zero point
// 0 take oneDNN's primitive without the zero point, the others the one with.
TEST(ConvInteger, DepthwiseRuntimeZeroPointZeroAndNot) { CheckConvInteger(24, 24, 24, true); }
// DynamicQuantizeLinear -> ConvInteger, the quantizer's input made by
// `pre`: "relu", "relu_pool" (Relu, then a 1x1 MaxPool), "clip06" (Clip to
// [0, 6]), all >= 0, where the kernel drops its zero point (the graph gives
// 0 on every run); "clip_neg" (Clip to [-1, 6]) and "clip_bad" (bounds 0
// and -2: every value -2), where it must read it (not 0). Each against the
// definitions: the range with 0, scale, zero point, round half to even,
// then the sums of (q - zp) * w; 1x1 (16 -> 24) and depthwise 3x3 (24).
void CheckProvedZeroPoint(const std::string& pre, bool depthwise) {
  const std::int64_t c = depthwise ? 24 : 16, m = 24, h = 9, w = 7, k = depthwise ? 3 : 1, pad = depthwise ? 1 : 0;
  const std::int64_t cg = depthwise ? 1 : c;
  std::mt19937 rng(depthwise ? 3 : 4);
  std::normal_distribution<float> nd(0.5f, 2.f);
  std::vector<float> x(static_cast<std::size_t>(c * h * w));
  for (float& v : x) v = nd(rng);
  std::vector<std::int8_t> wt(static_cast<std::size_t>(m * cg * k * k));
  for (auto& v : wt) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, c, h, w});
  g->inputs() = {xv};
  ir::Value* a = g->AddValue("a");
  float lo = 0.f, hi = INFINITY;
  if (pre == "relu" || pre == "relu_pool") {
    g->AddNode("Relu", "relu", {xv}, {a});
    if (pre == "relu_pool") {
      ir::Value* p = g->AddValue("p");
      ir::Node* mp = g->AddNode("MaxPool", "pool", {a}, {p});
      mp->SetAttr("kernel_shape", ir::Attribute::Ints({1, 1}));
      a = p;
    }
  } else {
    lo = pre == "clip06" ? 0.f : pre == "clip_neg" ? -1.f : 0.f;
    hi = pre == "clip_bad" ? -2.f : 6.f;
    g->AddNode("Clip", "clip",
               {xv, g->AddConstant("lo", Tensor(DType::kFloat32, {}, std::vector<float>{lo})),
                g->AddConstant("hi", Tensor(DType::kFloat32, {}, std::vector<float>{hi}))},
               {a});
  }
  ir::Value *q = g->AddValue("q"), *qs = g->AddValue("qs"), *qz = g->AddValue("qz"), *y = g->AddValue("y");
  g->AddNode("DynamicQuantizeLinear", "dql", {a}, {q, qs, qz});
  ir::Node* conv =
      g->AddNode("ConvInteger", "ci", {q, g->AddConstant("w", Tensor(DType::kInt8, {m, cg, k, k}, wt)), qz}, {y});
  conv->SetAttr("pads", ir::Attribute::Ints({pad, pad, pad, pad}));
  if (depthwise) conv->SetAttr("group", ir::Attribute::Int(c));
  g->outputs() = {y, qz};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // The definitions.
  std::vector<float> act(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) act[i] = std::min(std::max(x[i], lo), hi);
  float mn = 0.f, mx = 0.f;
  for (float v : act) mn = std::min(mn, v), mx = std::max(mx, v);
  const float scale = (mx - mn) / 255.f;
  const int zp = static_cast<int>(std::min(255.f, std::max(0.f, std::nearbyint((0.f - mn) / scale))));
  std::vector<int> qv(act.size());
  for (std::size_t i = 0; i < act.size(); ++i) {
    qv[i] = static_cast<int>(std::min(255.f, std::max(0.f, std::nearbyint(act[i] / scale) + static_cast<float>(zp))));
  }
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * h * w), -1);
  std::uint8_t got_zp = 77;
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, c, h, w})},
                                {{out.data(), DType::kInt32, {1, m, h, w}}, {&got_zp, DType::kUInt8, {}}}).ok());
  EXPECT_EQ(static_cast<int>(got_zp), zp);
  EXPECT_EQ(zp == 0, pre != "clip_neg" && pre != "clip_bad") << "the case is not what it claims";
  for (std::int64_t oc = 0; oc < m; ++oc)
    for (std::int64_t i = 0; i < h; ++i)
      for (std::int64_t j = 0; j < w; ++j) {
        std::int64_t acc = 0;
        for (std::int64_t ci = 0; ci < cg; ++ci) {
          const std::int64_t ch = depthwise ? oc : ci;
          for (std::int64_t ki = 0; ki < k; ++ki)
            for (std::int64_t kj = 0; kj < k; ++kj) {
              const std::int64_t r = i - pad + ki, t = j - pad + kj;
              if (r < 0 || r >= h || t < 0 || t >= w) continue;
              acc += (qv[static_cast<std::size_t>((ch * h + r) * w + t)] - zp) * wt[static_cast<std::size_t>(((oc * cg + ci) * k + ki) * k + kj)];
            }
        }
        ASSERT_EQ(out[static_cast<std::size_t>((oc * h + i) * w + j)], acc) << pre << " at " << oc << "," << i << "," << j;
      }
}
TEST(ConvInteger, ZeroPointTheGraphProvesZero) {
  for (bool dw : {false, true}) {
    for (const char* pre : {"relu", "relu_pool", "clip06", "clip_neg", "clip_bad"}) {
      SCOPED_TRACE(std::string(pre) + (dw ? " depthwise" : " 1x1"));
      CheckProvedZeroPoint(pre, dw);
    }
  }
}

// 96 channels of +127/-128 weights: 255 * 864 * 128 > 2^24, so where oneDNN's
// int8 is not exact the float32 primitives run in several runs of channels.
TEST(ConvInteger, RuntimeZeroPointExactSumsInRuns) { CheckConvInteger(96, 7, 1, true); }

// A 1-D kernel of 600 taps (one channel's sum can pass 2^24 / 255 alone):
// channel 0 gives output 0 a sum of 60,000 |w| and output 1 none, channel 1
// gives 60,000 and 70,199 (past the bound alone: no float32 run may hold it).
// x = 255: outputs 255 * 120,000 and 255 * 70,199 = 17,900,745 (odd, above
// 2^24), exactly.
TEST(ConvInteger, ChannelPastTheFloatBoundAloneStaysExact) {
  const std::int64_t taps = 600;
  std::vector<std::int8_t> w(2 * 2 * taps, 0);
  for (std::int64_t t = 0; t < taps; ++t) {
    w[(0 * 2 + 0) * taps + t] = 100;                     // o0, c0
    w[(0 * 2 + 1) * taps + t] = 100;                     // o0, c1
    w[(1 * 2 + 1) * taps + t] = t == 0 ? 116 : 117;      // o1, c1
  }
  std::vector<std::uint8_t> x(2 * taps, 255);
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kUInt8, {1, 2, taps});
  ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
  g->inputs() = {xv, zv};
  ir::Value* y = g->AddValue("y");
  g->AddNode("ConvInteger", "ci", {xv, g->AddConstant("w", Tensor(DType::kInt8, {2, 2, taps}, w)), zv}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::uint8_t zp = 0;
  std::vector<std::int32_t> out(2, -1);
  ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {1, 2, taps}}, {&zp, DType::kUInt8, {}}},
                                {{out.data(), DType::kInt32, {1, 2, 1}}}).ok());
  EXPECT_EQ(out[0], 255 * 120000);
  EXPECT_EQ(out[1], 255 * 70199);
}

// One MatMulInteger: uint8 A of shape `a` (its zero point a scalar input)
// by constant int8 B [a.back(), n].
Result<std::unique_ptr<Model>> LoadMatMulInteger(const Shape& a, const std::vector<std::int8_t>& b, std::int64_t n,
                                                 const test::TempDir& dir) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* av = g->AddValue("a", DType::kUInt8, a);
  ir::Value* zv = g->AddValue("azp", DType::kUInt8, {});
  g->inputs() = {av, zv};
  ir::Value* y = g->AddValue("y");
  g->AddNode("MatMulInteger", "mi", {av, g->AddConstant("b", Tensor(DType::kInt8, {a.back(), n}, b)), zv}, {y});
  g->outputs().push_back(y);
  return CompileAndLoad(std::move(g), dir);
}

TEST(MatMulInteger, RuntimeZeroPointExactSums) {
  std::mt19937 rng(12);
  const std::int64_t rows = 2 * 7, k = 45, nn = 33;
  std::vector<std::uint8_t> a(rows * k);
  for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 256);
  std::vector<std::int8_t> b(k * nn);
  for (auto& v : b) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  test::TempDir dir;
  auto model = LoadMatMulInteger({2, 7, k}, b, nn, dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{77}, std::uint8_t{255}}) {
    std::vector<std::int32_t> out(rows * nn, -1);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {2, 7, k}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {2, 7, nn}}}).ok());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < nn; ++j) {
        std::int64_t acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc += (a[i * k + p] - zp) * b[p * nn + j];
        ASSERT_EQ(out[i * nn + j], acc) << "zp " << int(zp) << " at " << i << "," << j;
      }
  }
}


// Sums beyond 2^24 (where float32 no longer holds every integer) stay exact:
// MatMulInteger A = 255, B = 127, K = 1023 (255 * 127 * 1023 = 33,129,855),
// zero points 0 and 3; ConvInteger x = 255, w = 127, 59 channels, 3x3 (sum
// 17,196,435), which oneDNN's float-stored s32 would round.
TEST(MatMulInteger, SumsBeyondFloatPrecisionAreExact) {
  const std::int64_t k = 1023, n = 5;
  std::vector<std::uint8_t> a(64 * k, 255);  // 64 rows: the float32 runs split them across threads
  std::vector<std::int8_t> b(k * n, 127);
  test::TempDir dir;
  auto model = LoadMatMulInteger({64, k}, b, n, dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  (*model)->set_threads(2);
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{3}}) {
    std::vector<std::int32_t> out(64 * n);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {64, k}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {64, n}}}).ok());
    for (std::int32_t v : out) EXPECT_EQ(v, (255 - zp) * 127 * 1023) << "zp " << int(zp);
  }
}

// 256 channels, 3x3, x = 255, w = 127 but one 126: 255 * (127 * 2304 - 1)
// = 74,614,785 with zero point 0 and 254 * (...) = 74,322,178 with 1, both
// odd above 2^24. oneDNN's convolution with a zero point stores s32 through
// float (it gave 74,614,784 and 74,322,176 for this model when the zero
// point was the primitive's).
TEST(ConvInteger, SumsBeyondFloatPrecisionAreExact) {
  const std::int64_t c = 256;
  std::vector<std::uint8_t> x(c * 3 * 3, 255);
  std::vector<std::int8_t> w(4 * c * 9, 127);
  for (std::int64_t o = 0; o < 4; ++o) w[o * c * 9] = 126;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kUInt8, {1, c, 3, 3});
  ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
  g->inputs() = {xv, zv};
  ir::Value* y = g->AddValue("y");
  g->AddNode("ConvInteger", "ci", {xv, g->AddConstant("w", Tensor(DType::kInt8, {4, c, 3, 3}, w)), zv}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{1}}) {
    std::vector<std::int32_t> out(4);
    ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {1, c, 3, 3}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {1, 4, 1, 1}}}).ok());
    for (std::int32_t v : out) EXPECT_EQ(v, (255 - zp) * (127 * 2304 - 1)) << "zp " << int(zp);
  }
}

// 7-bit weights at the edge of int16 pairs (255 * 64 * 2 = 32640), where
// oneDNN runs on CPUs without VNNI too: channel 0 all 64 but one 63, channel
// 1 the negation (with 256 channels sums of 255 * 147,455 = 37,601,025: odd,
// above 2^24),
// channels 2 and 3 +-64/+-63 at random; x mostly 255; padding 1 (the
// zero point frames the input) and runtime zero points 0, 1 and 200, each
// against the integer sums computed here.
void CheckSevenBitConvInteger(std::int64_t c) {
  const std::int64_t h = 4, w = 5, m = 4, pad = 1, oh = h, ow = w;
  std::mt19937 rng(5);
  std::vector<std::uint8_t> x(c * h * w);
  for (auto& v : x) v = rng() % 8 == 0 ? static_cast<std::uint8_t>(rng() % 256) : 255;
  std::vector<std::int8_t> wt(m * c * 9);
  for (std::int64_t o = 0; o < m; ++o)
    for (std::int64_t i = 0; i < c * 9; ++i) {
      const int mag = rng() % 4 == 0 ? 63 : 64;
      const int v = o == 0 ? (i == 0 ? 63 : 64) : o == 1 ? (i == 0 ? -63 : -64) : (rng() % 2 ? mag : -mag);
      wt[o * c * 9 + i] = static_cast<std::int8_t>(v);
    }
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kUInt8, {1, c, h, w});
  ir::Value* zv = g->AddValue("xzp", DType::kUInt8, {});
  g->inputs() = {xv, zv};
  ir::Value* y = g->AddValue("y");
  ir::Node* node = g->AddNode("ConvInteger", "ci", {xv, g->AddConstant("w", Tensor(DType::kInt8, {m, c, 3, 3}, wt)), zv}, {y});
  node->SetAttr("pads", ir::Attribute::Ints({pad, pad, pad, pad}));
  g->outputs().push_back(y);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{1}, std::uint8_t{200}}) {
    std::vector<std::int32_t> out(m * oh * ow, -1);
    ASSERT_TRUE((*model)->Execute({{x.data(), DType::kUInt8, {1, c, h, w}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {1, m, oh, ow}}}).ok());
    for (std::int64_t oc = 0; oc < m; ++oc)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          std::int64_t acc = 0;
          for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t ki = 0; ki < 3; ++ki)
              for (std::int64_t kj = 0; kj < 3; ++kj) {
                const std::int64_t r = i - pad + ki, q = j - pad + kj;
                if (r < 0 || r >= h || q < 0 || q >= w) continue;
                acc += (x[(ci * h + r) * w + q] - zp) * wt[((oc * c + ci) * 3 + ki) * 3 + kj];
              }
          ASSERT_EQ(out[(oc * oh + i) * ow + j], acc) << "zp " << int(zp) << " at " << oc << "," << i << "," << j;
        }
  }
}
// 16 channels: sums within 2^24, oneDNN's int8 convolution on AVX2 too; 256:
// beyond, the float32 primitives in runs.
TEST(ConvInteger, SevenBitWeightsEdgeOfPairsAndPaddingAreExact) {
  CheckSevenBitConvInteger(16);
  CheckSevenBitConvInteger(256);
}

// MatMulInteger the same way: K = 2049, B columns all 64 (one 63), all -64,
// and +-64 at random; A mostly 255; zero points 0 and 3.
TEST(MatMulInteger, SevenBitWeightsEdgeOfPairsAreExact) {
  const std::int64_t rows = 3, k = 2049, n = 4;
  std::mt19937 rng(6);
  std::vector<std::uint8_t> a(rows * k);
  for (auto& v : a) v = rng() % 8 == 0 ? static_cast<std::uint8_t>(rng() % 256) : 255;
  std::vector<std::int8_t> b(k * n);
  for (std::int64_t p = 0; p < k; ++p)
    for (std::int64_t j = 0; j < n; ++j)
      b[p * n + j] = static_cast<std::int8_t>(j == 0 ? (p == 0 ? 63 : 64) : j == 1 ? -64 : (rng() % 2 ? 64 : -64));
  test::TempDir dir;
  auto model = LoadMatMulInteger({rows, k}, b, n, dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{3}}) {
    std::vector<std::int32_t> out(rows * n, -1);
    ASSERT_TRUE((*model)->Execute({{a.data(), DType::kUInt8, {rows, k}}, {&zp, DType::kUInt8, {}}},
                                  {{out.data(), DType::kInt32, {rows, n}}}).ok());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        std::int64_t acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc += (a[i * k + p] - zp) * b[p * n + j];
        ASSERT_EQ(out[i * n + j], acc) << "zp " << int(zp) << " at " << i << "," << j;
      }
  }
}

}  // namespace
}  // namespace kiln
