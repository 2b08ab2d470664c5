// Reductions, ArgMax/ArgMin and CumSum: inference and kernels on small
// tensors with hand-derived results, parallel paths on larger ones, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::I64T;
using test::In;
using test::Int;
using test::Ints;
using test::NodeRunner;
using test::Values;

// x[2,3,2] = 1..12
HostTensorPtr X() {
  std::vector<float> v(12);
  std::iota(v.begin(), v.end(), 1.f);
  return F32T({2, 3, 2}, v);
}

template <typename T>
std::vector<T> Out(const Result<std::vector<HostTensorPtr>>& r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<T>(r.value()[0]) : std::vector<T>{};
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
}

TEST(Reduce, SumOverMiddleAxisKeepsDims) {
  NodeRunner r("ReduceSum", 11, {X()});
  r.Attr("axes", Ints({1}));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{9, 12, 27, 30}));
}

TEST(Reduce, MeanOverNegativeAxesWithoutKeepdims) {
  NodeRunner r("ReduceMean", 13, {X()});
  r.Attr("axes", Ints({-1, 0})).Attr("keepdims", Int(0));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{3}));
  // (1+2+7+8)/4, (3+4+9+10)/4, (5+6+11+12)/4
  EXPECT_EQ(Out<float>(out), (std::vector<float>{4.5f, 6.5f, 8.5f}));
}

TEST(Reduce, EmptyAxesReduceEverything) {
  NodeRunner mx("ReduceMax", 13, {X()});
  auto out = mx.Run();
  EXPECT_EQ(mx.out_shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{12}));
  NodeRunner mn("ReduceMin", 13, {X()});
  mn.Attr("keepdims", Int(0));
  auto out2 = mn.Run();
  EXPECT_EQ(mn.out_shape(), (Shape{}));
  EXPECT_EQ(Out<float>(out2), (std::vector<float>{1}));
}

TEST(Reduce, NormsAndLogs) {
  auto x = F32T({2, 2}, {3, -4, 1, 2});
  auto run = [&](const char* op) {
    NodeRunner r(op, 13, {x});
    r.Attr("axes", Ints({1}));
    return Out<float>(r.Run());
  };
  ExpectNear(run("ReduceL1"), {7, 3});
  ExpectNear(run("ReduceL2"), {5, std::sqrt(5.f)});
  ExpectNear(run("ReduceSumSquare"), {25, 5});
  ExpectNear(run("ReduceProd"), {-12, 2});
  NodeRunner ls("ReduceLogSum", 13, {F32T({2, 2}, {1, 2, 3, 4})});
  ls.Attr("axes", Ints({0}));
  ExpectNear(Out<float>(ls.Run()), {std::log(4.f), std::log(6.f)});
  // log(e^1 + e^2) = 2.3132617; large values must not overflow.
  NodeRunner lse("ReduceLogSumExp", 13, {F32T({2, 2}, {1, 2, 1000, 1000})});
  lse.Attr("axes", Ints({1}));
  ExpectNear(Out<float>(lse.Run()), {2.3132617f, 1000.6931472f});
}

TEST(Reduce, IntegerSumAndMean) {
  NodeRunner s("ReduceSum", 11, {I64T({2, 2}, {1, 2, 3, 5})});
  s.Attr("axes", Ints({1})).Attr("keepdims", Int(0));
  EXPECT_EQ(Out<std::int64_t>(s.Run()), (std::vector<std::int64_t>{3, 8}));
  NodeRunner m("ReduceMean", 13, {I32T({2, 2}, {1, 2, 3, 5})});
  m.Attr("axes", Ints({1})).Attr("keepdims", Int(0));
  EXPECT_EQ(Out<std::int32_t>(m.Run()), (std::vector<std::int32_t>{1, 4}));  // 1.5, 4 truncated
}

TEST(Reduce, Float16MeanIsAccumulatedWide) {
  std::vector<std::uint16_t> h = {FloatToHalf(1), FloatToHalf(2), FloatToHalf(2048), FloatToHalf(1)};
  NodeRunner r("ReduceMean", 13, {test::Tensor<std::uint16_t>(DType::kFloat16, {4}, h)});
  auto out = Out<std::uint16_t>(r.Run());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(HalfToFloat(out[0]), 513);  // 2052 / 4; float16 sums would lose the 1s
  EXPECT_EQ(r.out_dtype(), DType::kFloat16);
}

TEST(Reduce, SumVersion13TakesAxesInput) {
  NodeRunner r("ReduceSum", 13, {X(), I64T({1}, {2})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{3, 7, 11, 15, 19, 23}));
}

TEST(Reduce, NoopWithEmptyAxesIsIdentity) {
  NodeRunner r("ReduceSum", 13, {X(), I64T({0}, {})});
  r.Attr("noop_with_empty_axes", Int(1));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(Out<float>(out), Values<float>(X()));
  NodeRunner all("ReduceSum", 13, {X(), I64T({0}, {})});
  auto sum = all.Run();
  EXPECT_EQ(all.out_shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(Out<float>(sum), (std::vector<float>{78}));
}

TEST(Reduce, RuntimeAxesInput) {
  // Axes known only at run time; reducing every dim without keepdims still
  // gives a static (scalar) output.
  NodeRunner r("ReduceSum", 13, {X(), In(DType::kInt64, {3})});
  r.Attr("keepdims", Int(0));
  auto out = r.Run({I64T({3}, {2, 0, -2})});
  EXPECT_EQ(r.out_shape(), (Shape{}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{78}));
  NodeRunner rk("ReduceSum", 13, {X(), In(DType::kInt64, {1})});
  ASSERT_TRUE(rk.Infer().ok());
  EXPECT_EQ(rk.out_shape(), (Shape{-1, -1, -1}));
}

TEST(Reduce, AxisOutOfRangeNamesAttribute) {
  NodeRunner r("ReduceMean", 13, {X()});
  r.Attr("axes", Ints({3}));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ReduceMean node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'axes'"), std::string::npos) << st.message();
  NodeRunner in("ReduceSum", 13, {X(), I64T({1}, {-4})});
  st = in.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("axes"), std::string::npos) << st.message();
}

TEST(Reduce, RepeatedAxisIsRejected) {
  NodeRunner r("ReduceMax", 13, {X()});
  r.Attr("axes", Ints({1, -2}));
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Reduce, AttributeOfTheWrongVersionIsRejected) {
  NodeRunner r("ReduceSum", 13, {X()});
  r.Attr("axes", Ints({1}));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'axes'"), std::string::npos) << st.message();
  NodeRunner old("ReduceSum", 11, {X()});
  old.Attr("noop_with_empty_axes", Int(1));
  EXPECT_FALSE(old.Infer().ok());
}

// Naive double reference for large-tensor checks.
std::vector<double> NaiveSum(const std::vector<float>& x, std::int64_t outer, std::int64_t len, std::int64_t inner) {
  std::vector<double> y(outer * inner, 0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < len; ++k)
      for (std::int64_t i = 0; i < inner; ++i) y[o * inner + i] += x[(o * len + k) * inner + i];
  return y;
}

TEST(Reduce, LargeTensorsMatchNaiveSumOnEveryPath) {
  cpu::UseThreads(2);
  const std::int64_t a = 7, b = 5000, c = 30;
  std::vector<float> x(a * b * c);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.f - 5;
  struct Case { std::vector<std::int64_t> axes; std::int64_t outer, len, inner; };
  // axis 1 (kept inner block), axis 2 (contiguous), all (split across threads)
  for (const Case& cs : {Case{{1}, a, b, c}, Case{{2}, a * b, c, 1}, Case{{0, 1, 2}, 1, a * b * c, 1},
                         Case{{0}, 1, a, b * c}}) {
    NodeRunner r("ReduceSum", 11, {F32T({a, b, c}, x)});
    r.Attr("axes", Ints(cs.axes));
    auto out = Out<float>(r.Run());
    auto want = NaiveSum(x, cs.outer, cs.len, cs.inner);
    ASSERT_EQ(out.size(), want.size());
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-3 * (1 + std::fabs(want[i]))) << i;
  }
  cpu::UseThreads(1);
}

TEST(ArgMax, KeepdimsAndLastIndex) {
  // x[2,3] = {{1, 5, 5}, {7, 7, 0}}
  auto x = F32T({2, 3}, {1, 5, 5, 7, 7, 0});
  NodeRunner r("ArgMax", 13, {x});
  r.Attr("axis", Int(1));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 1}));
  EXPECT_EQ(r.out_dtype(), DType::kInt64);
  EXPECT_EQ(Out<std::int64_t>(out), (std::vector<std::int64_t>{1, 0}));
  NodeRunner last("ArgMax", 13, {x});
  last.Attr("axis", Int(-1)).Attr("select_last_index", Int(1)).Attr("keepdims", Int(0));
  auto out2 = last.Run();
  EXPECT_EQ(last.out_shape(), (Shape{2}));
  EXPECT_EQ(Out<std::int64_t>(out2), (std::vector<std::int64_t>{2, 1}));
  NodeRunner mn("ArgMin", 13, {x});  // axis 0
  EXPECT_EQ(Out<std::int64_t>(mn.Run()), (std::vector<std::int64_t>{0, 0, 1}));
}

TEST(ArgMax, AxisOutOfRangeNamesAttribute) {
  NodeRunner r("ArgMin", 13, {F32T({2}, {1, 2})});
  r.Attr("axis", Int(1));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'axis'"), std::string::npos) << st.message();
}

TEST(CumSum, ExclusiveAndReverse) {
  auto x = F32T({2, 3}, {1, 2, 3, 4, 5, 6});
  NodeRunner plain("CumSum", 14, {x, I32T({}, {1})});
  EXPECT_EQ(Out<float>(plain.Run()), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  NodeRunner ex("CumSum", 14, {x, I64T({}, {0})});
  ex.Attr("exclusive", Int(1));
  EXPECT_EQ(Out<float>(ex.Run()), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  NodeRunner rev("CumSum", 14, {x, I64T({1}, {-1})});
  rev.Attr("reverse", Int(1));
  EXPECT_EQ(Out<float>(rev.Run()), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  NodeRunner both("CumSum", 14, {I32T({3}, {1, 2, 3}), I32T({}, {0})});
  both.Attr("reverse", Int(1)).Attr("exclusive", Int(1));
  EXPECT_EQ(Out<std::int32_t>(both.Run()), (std::vector<std::int32_t>{5, 3, 0}));
}

TEST(CumSum, RuntimeAxisIsReadWhenRunning) {
  NodeRunner r("CumSum", 14, {F32T({2, 2}, {1, 2, 3, 4}), In(DType::kInt32, {})});
  EXPECT_EQ(Out<float>(r.Run({I32T({}, {0})})), (std::vector<float>{1, 2, 4, 6}));
}

TEST(CumSum, BadAxisIsRejected) {
  NodeRunner r("CumSum", 14, {F32T({2}, {1, 2}), I64T({}, {2})});
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("axis"), std::string::npos) << st.message();
  NodeRunner t("CumSum", 14, {F32T({2}, {1, 2}), F32T({}, {0})});
  EXPECT_FALSE(t.Infer().ok());
}

}  // namespace
}  // namespace kiln
