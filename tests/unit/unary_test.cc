// Elementwise unary math ops: kernels on small tensors with hand-derived
// results, integer and half types, attribute defaults, and type errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::NodeRunner;
using test::Tensor;
using test::Values;

template <typename T>
std::vector<T> Out(const Result<std::vector<HostTensorPtr>>& r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<T>(r.value()[0]) : std::vector<T>{};
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
}

std::vector<float> RunF(const char* op, int version, std::vector<float> x,
                        std::initializer_list<std::pair<const char*, float>> attrs = {}) {
  NodeRunner r(op, version, {F32T({static_cast<std::int64_t>(x.size())}, x)});
  for (auto& [name, v] : attrs) r.Attr(name, ir::Attribute::Float(v));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{static_cast<std::int64_t>(x.size())}));
  return Out<float>(out);
}

TEST(Unary, RoundingFamily) {
  EXPECT_EQ(RunF("Ceil", 13, {-1.5f, 0.2f, 2}), (std::vector<float>{-1, 1, 2}));
  EXPECT_EQ(RunF("Floor", 13, {-1.5f, 0.2f, 2}), (std::vector<float>{-2, 0, 2}));
  // Halves go to the even neighbour.
  EXPECT_EQ(RunF("Round", 11, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f}),
            (std::vector<float>{0, 2, 2, -0.f, -2, 2, -3}));
}

TEST(Unary, MathFunctions) {
  ExpectNear(RunF("Sqrt", 13, {0, 4, 2.25f}), {0, 2, 1.5f});
  ExpectNear(RunF("Reciprocal", 13, {2, -0.25f}), {0.5f, -4});
  ExpectNear(RunF("Exp", 13, {0, 1, -1}), {1, 2.7182818f, 0.36787944f});
  ExpectNear(RunF("Log", 13, {1, 2.7182818f, 0.5f}), {0, 1, -0.69314718f});
  ExpectNear(RunF("Erf", 13, {0, 1, -0.5f}), {0, 0.84270079f, -0.52049988f});
  // log(1 + e^x); stays finite for large |x|.
  ExpectNear(RunF("Softplus", 1, {0, 1, -100, 100}), {0.69314718f, 1.3132617f, 0, 100});
}

TEST(Unary, SignAbsNegOnFloats) {
  EXPECT_EQ(RunF("Sign", 13, {-3, 0, 0.5f}), (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(RunF("Abs", 13, {-3, 0, 0.5f}), (std::vector<float>{3, 0, 0.5f}));
  EXPECT_EQ(RunF("Neg", 13, {-3, 0, 0.5f}), (std::vector<float>{3, -0.f, -0.5f}));
}

TEST(Unary, IntegerTypes) {
  NodeRunner abs("Abs", 13, {I32T({3}, {-7, 0, 5})});
  EXPECT_EQ(Out<std::int32_t>(abs.Run()), (std::vector<std::int32_t>{7, 0, 5}));
  NodeRunner neg("Neg", 13, {Tensor<std::int8_t>(DType::kInt8, {3}, {-7, 0, 5})});
  EXPECT_EQ(Out<std::int8_t>(neg.Run()), (std::vector<std::int8_t>{7, 0, -5}));
  NodeRunner sign("Sign", 13, {Tensor<std::uint16_t>(DType::kUInt16, {3}, {0, 1, 900})});
  EXPECT_EQ(Out<std::uint16_t>(sign.Run()), (std::vector<std::uint16_t>{0, 1, 1}));
  NodeRunner isign("Sign", 13, {Tensor<std::int64_t>(DType::kInt64, {3}, {-9, 0, 9})});
  EXPECT_EQ(Out<std::int64_t>(isign.Run()), (std::vector<std::int64_t>{-1, 0, 1}));
}

TEST(Unary, Float16IsComputedInFloat) {
  NodeRunner r("Sqrt", 13, {Tensor<std::uint16_t>(DType::kFloat16, {2}, {FloatToHalf(9), FloatToHalf(0.25f)})});
  auto out = Out<std::uint16_t>(r.Run());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(HalfToFloat(out[0]), 3);
  EXPECT_EQ(HalfToFloat(out[1]), 0.5f);
  EXPECT_EQ(r.out_dtype(), DType::kFloat16);
}

TEST(Unary, EluAndSeluAttributes) {
  // alpha * (e^x - 1) below 0.
  ExpectNear(RunF("Elu", 6, {-1, 3}), {-0.63212056f, 3});
  ExpectNear(RunF("Elu", 6, {-1, 3}, {{"alpha", 2}}), {-1.2642411f, 3});
  // Defaults alpha = 1.67326, gamma = 1.0507: gamma * alpha * (e^-1 - 1) = -1.1113307.
  ExpectNear(RunF("Selu", 6, {-1, 2}), {-1.1113307f, 2.101402f});
  ExpectNear(RunF("Selu", 6, {-1, 2}, {{"alpha", 2}, {"gamma", 3}}), {-3.7927234f, 6});
}

TEST(Unary, NotOnBool) {
  NodeRunner r("Not", 1, {Tensor<std::uint8_t>(DType::kBool, {3}, {1, 0, 1})});
  auto out = r.Run();
  EXPECT_EQ(r.out_dtype(), DType::kBool);
  EXPECT_EQ(Out<std::uint8_t>(out), (std::vector<std::uint8_t>{0, 1, 0}));
}

TEST(Unary, UnsupportedTypesAreRejected) {
  NodeRunner sqrt("Sqrt", 13, {I32T({1}, {4})});
  Status st = sqrt.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Sqrt node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("int32"), std::string::npos) << st.message();
  NodeRunner neg("Neg", 13, {Tensor<std::uint8_t>(DType::kUInt8, {1}, {1})});
  EXPECT_FALSE(neg.Infer().ok());
  NodeRunner nt("Not", 1, {F32T({1}, {1})});
  EXPECT_FALSE(nt.Infer().ok());
}

TEST(Unary, UnknownAttributeIsNamed) {
  NodeRunner r("Exp", 13, {F32T({1}, {1})});
  r.Attr("alpha", ir::Attribute::Float(1));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'alpha'"), std::string::npos) << st.message();
}

TEST(Unary, LargeInputRunsInParallel) {
  cpu::UseThreads(2);
  std::vector<float> x(100000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) - 6;
  auto out = RunF("Abs", 13, x);
  cpu::UseThreads(1);
  ASSERT_EQ(out.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], std::fabs(x[i])) << i;
}

// Softmax (oneDNN for float32) against a double reference: rows over the
// last axis and over a middle axis (strided), opset 13 and opset 11 (the
// input coerced to 2-D at the axis), values from -3e38 (masked attention
// scores) to +80 and rows of equal values.
TEST(Unary, SoftmaxMatchesADoubleReference) {
  struct Case {
    int version;
    Shape shape;
    std::int64_t axis;
  };
  for (const Case& c : {Case{13, {3, 5, 37}, -1}, Case{13, {2, 41, 3}, 1}, Case{11, {2, 3, 7}, 1}, Case{13, {1, 300}, 1}}) {
    const std::int64_t n = NumElements(c.shape);
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = 12.f * std::sin(0.91f * static_cast<float>(i)) + 0.01f * static_cast<float>(i % 13);
      x[static_cast<std::size_t>(i)] = i % 17 == 3 ? -3e38f : i % 23 == 5 ? 80.f : i < 7 ? 1.25f : v;
    }
    NodeRunner r("Softmax", c.version, {F32T(c.shape, x)});
    r.Attr("axis", ir::Attribute::Int(c.axis));
    const std::vector<float> y = Out<float>(r.Run());
    ASSERT_EQ(y.size(), x.size());
    // Reference: [outer, len, inner] with len the axis (opset 11: every dim from the axis on).
    const std::int64_t rank = static_cast<std::int64_t>(c.shape.size()), axis = c.axis < 0 ? c.axis + rank : c.axis;
    std::int64_t outer = 1, len = 1, inner = 1;
    for (std::int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= c.shape[d];
      else if (d == axis || c.version < 13) len *= c.shape[d];
      else inner *= c.shape[d];
    }
    double worst = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t in = 0; in < inner; ++in) {
        auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * len + k) * inner + in); };
        double mx = -1e300, sum = 0;
        for (std::int64_t k = 0; k < len; ++k) mx = std::max(mx, static_cast<double>(x[at(k)]));
        for (std::int64_t k = 0; k < len; ++k) sum += std::exp(static_cast<double>(x[at(k)]) - mx);
        for (std::int64_t k = 0; k < len; ++k) {
          const double want = std::exp(static_cast<double>(x[at(k)]) - mx) / sum;
          worst = std::max(worst, std::fabs(y[at(k)] - want) / (want + 1e-30));
          if (want < 1e-30) EXPECT_LT(y[at(k)], 1e-30f) << k;
        }
      }
    }
    // oneDNN's vectorised exp: measured worst 3.1e-6 relative here (about
    // 50 float32 ulps, for outputs down to 1e-30); a scalar loop gets ~1e-6.
    EXPECT_LT(worst, 1e-5) << ShapeToString(c.shape) << " axis " << c.axis;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Tanh (vec_math.cc's loop: an odd polynomial below |x| 0.625, exp above)
// and Sigmoid (oneDNN's eltwise) in float32: against double over [-30, 30]
// in steps of 1/64 and [-1, 1] in steps of 1/8192 (3841 + 16385 values,
// every vector lane and the tail), then the extremes. Bound: 4 float32 ulps
// of the reference's magnitude (relative 4.8e-7), absolute 1e-30 below that.
TEST(Unary, TanhAndSigmoidMatchADoubleReference) {
  std::vector<float> x;
  for (int i = -30 * 64; i <= 30 * 64; ++i) x.push_back(static_cast<float>(i) / 64.f);
  for (int i = -8192; i <= 8192; ++i) x.push_back(static_cast<float>(i) / 8192.f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-40f, 3e38f, -3e38f, inf, -inf, 88.f, -88.f, -104.f}) x.push_back(v);
  for (const char* op : {"Tanh", "Sigmoid"}) {
    const bool tanh = std::string(op) == "Tanh";
    const std::vector<float> y = RunF(op, 13, x);
    ASSERT_EQ(y.size(), x.size());
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i];
      const double want = tanh ? std::tanh(xd) : 1.0 / (1.0 + std::exp(-xd));
      const double err = std::fabs(y[i] - want) / std::max(std::fabs(want), 1e-30 / 4.8e-7);
      worst = std::max(worst, err);
      EXPECT_LE(err, 4.8e-7) << op << "(" << x[i] << ") = " << y[i] << ", want " << want;
    }
    RecordProperty(std::string(op) + "_worst_relative_error_x1e9", static_cast<int>(worst * 1e9));
  }
  // NaN propagates.
  for (const char* op : {"Tanh", "Sigmoid"}) {
    EXPECT_TRUE(std::isnan(RunF(op, 13, {std::numeric_limits<float>::quiet_NaN()})[0])) << op;
  }
}

}  // namespace
}  // namespace kiln
