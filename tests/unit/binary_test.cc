// Broadcasting elementwise ops (arithmetic, Pow, Mod, PRelu, Max/Min,
// comparisons, logic, Where): inference and kernels on small tensors with
// hand-derived results, legacy (opset < 7) broadcasting, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::I64T;
using test::Int;
using test::NodeRunner;
using test::Tensor;
using test::Values;

HostTensorPtr Bools(Shape s, std::vector<std::uint8_t> v) { return Tensor<std::uint8_t>(DType::kBool, std::move(s), v); }

template <typename T>
std::vector<T> Out(const Result<std::vector<HostTensorPtr>>& r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<T>(r.value()[0]) : std::vector<T>{};
}

void ExpectError(NodeRunner& r, std::initializer_list<const char*> parts) {
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'node'"), std::string::npos) << st.message();
  for (const char* p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

TEST(Binary, AddBroadcastsRowAgainstMatrix) {
  NodeRunner r("Add", 14, {F32T({2, 3}, {1, 2, 3, 4, 5, 6}), F32T({3}, {10, 20, 30})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(Binary, SubColumnMinusRowGivesMatrix) {
  NodeRunner r("Sub", 14, {I32T({2, 1}, {10, 20}), I32T({1, 3}, {1, 2, 3})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(Out<std::int32_t>(out), (std::vector<std::int32_t>{9, 8, 7, 19, 18, 17}));
}

TEST(Binary, IncompatibleBroadcastNamesNodeAndShapes) {
  NodeRunner r("Mul", 14, {F32T({2, 3}, {1, 2, 3, 4, 5, 6}), F32T({4}, {1, 2, 3, 4})});
  ExpectError(r, {"[2,3]", "[4]"});
}

TEST(Binary, MismatchedInputTypesAreRejected) {
  NodeRunner r("Add", 14, {F32T({1}, {1}), I32T({1}, {1})});
  ExpectError(r, {"int32", "float32"});
}

TEST(Binary, LegacyBroadcastAlignsBAtAxis) {
  // A [2,3,2] + B [3] with broadcast=1, axis=1: B[j] added to A[i,j,k].
  NodeRunner r("Add", 6, {F32T({2, 3, 2}, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}), F32T({3}, {10, 20, 30})});
  r.Attr("broadcast", Int(1)).Attr("axis", Int(1));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{10, 10, 20, 20, 30, 30, 11, 11, 21, 21, 31, 31}));
}

TEST(Binary, LegacySuffixBroadcastBecomesVersion7) {
  NodeRunner r("Mul", 6, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2}, {10, 100})});
  r.Attr("broadcast", Int(1));
  auto out = r.Run();
  EXPECT_EQ(r.node().since_version(), 7);
  EXPECT_FALSE(r.node().HasAttr("broadcast"));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{10, 200, 30, 400}));
}

TEST(Binary, LegacyWithoutBroadcastNeedsEqualShapes) {
  NodeRunner r("Add", 6, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2}, {1, 2})});
  ExpectError(r, {"'broadcast'"});
}

TEST(Binary, LegacyAxisThatDoesNotFitIsRejected) {
  NodeRunner r("Pow", 1, {F32T({2, 3}, {1, 2, 3, 4, 5, 6}), F32T({3}, {1, 2, 3})});
  r.Attr("broadcast", Int(1)).Attr("axis", Int(0));
  ExpectError(r, {"'axis'"});
}

TEST(Binary, BroadcastAttributeAfterVersion7IsRejected) {
  NodeRunner r("Equal", 13, {I32T({1}, {1}), I32T({1}, {1})});
  r.Attr("broadcast", Int(1));
  ExpectError(r, {"'broadcast'"});
}

TEST(Binary, DivOfIntegersTruncatesAndSurvivesZero) {
  NodeRunner r("Div", 14, {I32T({4}, {7, -7, 5, std::numeric_limits<std::int32_t>::min()}),
                           I32T({4}, {2, 2, 0, -1})});
  EXPECT_EQ(Out<std::int32_t>(r.Run()),
            (std::vector<std::int32_t>{3, -3, 0, std::numeric_limits<std::int32_t>::min()}));
}

TEST(Pow, FloatBaseIntegerExponent) {
  NodeRunner r("Pow", 15, {F32T({3}, {2, 3, 0.5f}), I64T({3}, {3, -1, 2})});
  auto out = Out<float>(r.Run());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FLOAT_EQ(out[0], 8);
  EXPECT_FLOAT_EQ(out[1], 1.f / 3);
  EXPECT_FLOAT_EQ(out[2], 0.25f);
  EXPECT_EQ(r.out_dtype(), DType::kFloat32);
}

TEST(Pow, IntegerBaseAndExponent) {
  NodeRunner r("Pow", 15, {I32T({5}, {2, -3, 7, 1, -1}), I32T({5}, {10, 3, -1, -5, -3})});
  EXPECT_EQ(Out<std::int32_t>(r.Run()), (std::vector<std::int32_t>{1024, -27, 0, 1, -1}));
}

TEST(Pow, IntegerBaseFloatExponentTruncates) {
  NodeRunner r("Pow", 15, {I64T({2}, {4, 2}), F32T({2}, {0.5f, 1.5f})});
  EXPECT_EQ(Out<std::int64_t>(r.Run()), (std::vector<std::int64_t>{2, 2}));  // 2, 2.83 -> 2
}

TEST(Pow, BeforeVersion12TypesMustMatch) {
  NodeRunner r("Pow", 7, {F32T({1}, {2}), I64T({1}, {2})});
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Pow, BoolExponentIsRejected) {
  NodeRunner r("Pow", 15, {F32T({1}, {2}), Bools({1}, {1})});
  ExpectError(r, {"exponent", "bool"});
}

TEST(Mod, IntegerModTakesDivisorSign) {
  NodeRunner r("Mod", 13, {I32T({4}, {-4, 7, 5, -7}), I32T({4}, {3, -3, -2, 2})});
  EXPECT_EQ(Out<std::int32_t>(r.Run()), (std::vector<std::int32_t>{2, -2, -1, 1}));
}

TEST(Mod, FmodTakesDividendSign) {
  NodeRunner r("Mod", 13, {I32T({4}, {-4, 7, 5, -7}), I32T({4}, {3, -3, -2, 2})});
  r.Attr("fmod", Int(1));
  EXPECT_EQ(Out<std::int32_t>(r.Run()), (std::vector<std::int32_t>{-1, 1, 1, -1}));
  NodeRunner f("Mod", 13, {F32T({2}, {-4.5f, 7.5f}), F32T({2}, {2, -2})});
  f.Attr("fmod", Int(1));
  EXPECT_EQ(Out<float>(f.Run()), (std::vector<float>{-0.5f, 1.5f}));
}

TEST(Mod, FloatWithoutFmodIsRejected) {
  NodeRunner r("Mod", 13, {F32T({1}, {1}), F32T({1}, {1})});
  ExpectError(r, {"'fmod'"});
}

TEST(PRelu, SlopeBroadcastsToX) {
  NodeRunner r("PRelu", 16, {F32T({2, 3}, {-1, 2, -3, 4, -5, 6}), F32T({3}, {0.5f, 2, 0.25f})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{-0.5f, 2, -0.75f, 4, -10, 6}));
}

TEST(PRelu, SlopeThatWouldGrowXIsRejected) {
  NodeRunner r("PRelu", 16, {F32T({3}, {1, 2, 3}), F32T({2, 3}, {1, 1, 1, 1, 1, 1})});
  ExpectError(r, {"slope", "[2,3]"});
}

TEST(MaxMin, VariadicBroadcastOfThreeInputs) {
  NodeRunner r("Max", 13, {F32T({2, 1}, {1, 5}), F32T({1, 3}, {0, 3, 6}), F32T({}, {2})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(Out<float>(out), (std::vector<float>{2, 3, 6, 5, 5, 6}));
  NodeRunner m("Min", 13, {F32T({2, 1}, {1, 5}), F32T({1, 3}, {0, 3, 6}), F32T({}, {2})});
  EXPECT_EQ(Out<float>(m.Run()), (std::vector<float>{0, 1, 1, 0, 2, 2}));
}

TEST(MaxMin, OneInputIsCopiedAndNanPropagates) {
  NodeRunner one("Min", 13, {I64T({2}, {4, -4})});
  EXPECT_EQ(Out<std::int64_t>(one.Run()), (std::vector<std::int64_t>{4, -4}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  NodeRunner r("Max", 13, {F32T({2}, {nan, 1}), F32T({2}, {1, nan})});
  auto out = Out<float>(r.Run());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
}

TEST(MaxMin, BeforeVersion8ShapesMustMatch) {
  NodeRunner r("Max", 6, {F32T({2}, {1, 2}), F32T({1}, {1})});
  ExpectError(r, {"input 1", "version 8"});
  NodeRunner ok("Min", 6, {F32T({2}, {1, 4}), F32T({2}, {3, 2})});
  EXPECT_EQ(Out<float>(ok.Run()), (std::vector<float>{1, 2}));
}

TEST(MaxMin, IncompatibleThirdInputNamesIt) {
  NodeRunner r("Max", 13, {F32T({2}, {1, 2}), F32T({2}, {1, 2}), F32T({3}, {1, 2, 3})});
  ExpectError(r, {"input 2"});
}

TEST(Compare, OutputsBoolWithBroadcast) {
  NodeRunner g("Greater", 13, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2}, {2, 2})});
  auto out = g.Run();
  EXPECT_EQ(g.out_dtype(), DType::kBool);
  EXPECT_EQ(Out<std::uint8_t>(out), (std::vector<std::uint8_t>{0, 0, 1, 1}));
  NodeRunner le("LessOrEqual", 16, {I32T({3}, {1, 2, 3}), I32T({}, {2})});
  EXPECT_EQ(Out<std::uint8_t>(le.Run()), (std::vector<std::uint8_t>{1, 1, 0}));
  NodeRunner ge("GreaterOrEqual", 16, {I32T({3}, {1, 2, 3}), I32T({}, {2})});
  EXPECT_EQ(Out<std::uint8_t>(ge.Run()), (std::vector<std::uint8_t>{0, 1, 1}));
  NodeRunner lt("Less", 13, {F32T({3}, {1, 2, 3}), F32T({}, {2})});
  EXPECT_EQ(Out<std::uint8_t>(lt.Run()), (std::vector<std::uint8_t>{1, 0, 0}));
  NodeRunner eq("Equal", 13, {Bools({3}, {1, 0, 1}), Bools({1}, {1})});
  EXPECT_EQ(Out<std::uint8_t>(eq.Run()), (std::vector<std::uint8_t>{1, 0, 1}));
}

TEST(Logic, AndOrXor) {
  auto a = Bools({4}, {0, 0, 1, 1});
  auto b = Bools({4}, {0, 1, 0, 1});
  NodeRunner x("And", 7, {a, b}), o("Or", 7, {a, b}), e("Xor", 7, {a, b});
  EXPECT_EQ(Out<std::uint8_t>(x.Run()), (std::vector<std::uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Out<std::uint8_t>(o.Run()), (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(Out<std::uint8_t>(e.Run()), (std::vector<std::uint8_t>{0, 1, 1, 0}));
}

TEST(Logic, NonBoolInputIsRejected) {
  NodeRunner r("And", 7, {F32T({1}, {1}), F32T({1}, {1})});
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Where, ThreeWayBroadcast) {
  NodeRunner r("Where", 16, {Bools({2, 1}, {1, 0}), I64T({1, 3}, {1, 2, 3}), I64T({}, {-1})});
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(r.out_dtype(), DType::kInt64);
  EXPECT_EQ(Out<std::int64_t>(out), (std::vector<std::int64_t>{1, 2, 3, -1, -1, -1}));
}

// The row shapes the kernel handles apart: a condition row with a scalar x
// (an attention mask), a condition row with an x row, and a broadcast
// condition column.
TEST(Where, ConditionRowsWithScalarAndRowValues) {
  {
    NodeRunner r("Where", 16, {Bools({1, 4}, {1, 0, 0, 1}), F32T({}, {-9}), F32T({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
    EXPECT_EQ(Out<float>(r.Run()), (std::vector<float>{-9, 2, 3, -9, -9, 6, 7, -9}));
  }
  {
    NodeRunner r("Where", 16, {Bools({2, 3}, {0, 1, 1, 1, 0, 0}), F32T({2, 3}, {10, 20, 30, 40, 50, 60}),
                               F32T({1}, {0})});
    EXPECT_EQ(Out<float>(r.Run()), (std::vector<float>{0, 20, 30, 40, 0, 0}));
  }
  {
    NodeRunner r("Where", 16, {Bools({3, 1}, {0, 1, 0}), F32T({1, 2}, {7, 8}), F32T({3, 2}, {1, 2, 3, 4, 5, 6})});
    EXPECT_EQ(Out<float>(r.Run()), (std::vector<float>{1, 2, 7, 8, 5, 6}));
  }
}

TEST(Where, ConditionMustBeBool) {
  NodeRunner r("Where", 16, {F32T({1}, {1}), F32T({1}, {1}), F32T({1}, {2})});
  EXPECT_FALSE(r.Infer().ok());
}

TEST(Binary, LargeBroadcastRunsInParallel) {
  cpu::UseThreads(2);
  const std::int64_t rows = 300, cols = 1000;
  std::vector<float> a(rows * cols), b(cols);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5);
  NodeRunner r("Pow", 15, {F32T({rows, cols}, a), F32T({cols}, b)});
  auto out = Out<float>(r.Run());
  cpu::UseThreads(1);
  ASSERT_EQ(out.size(), a.size());
  for (std::size_t i = 0; i < a.size(); i += 997) EXPECT_FLOAT_EQ(out[i], std::pow(a[i], b[i % cols])) << i;
}

}  // namespace
}  // namespace kiln
