// Tensor ops (ConstantOfShape, Expand, GatherElements, GatherND, Pad, Range,
// ScatterND, Size, Split, Tile, TopK, Trilu, DepthToSpace, SpaceToDepth,
// Einsum): inference and kernels on small tensors with hand-derived results,
// older versions' attribute forms, and error messages.
#include <gtest/gtest.h>

#include <numeric>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::I64T;
using test::Int;
using test::Ints;
using test::Iota;
using test::NodeRunner;
using test::Values;


HostTensorPtr F64T(Shape s, std::vector<double> v) { return test::Tensor<double>(DType::kFloat64, std::move(s), std::move(v)); }

std::vector<float> Floats(const Result<std::vector<HostTensorPtr>>& r, int j = 0) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<float>(r.value()[j]) : std::vector<float>{};
}
template <typename T>
std::vector<T> Vals(const Result<std::vector<HostTensorPtr>>& r, int j = 0) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<T>(r.value()[j]) : std::vector<T>{};
}

// Inference fails with a message naming the node and containing `what`.
void ExpectInferError(NodeRunner& r, const std::string& what) {
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
}

ir::Attribute Str(const std::string& s) { return ir::Attribute::String(s); }

TEST(ConstantOfShape, FillsWithValueAttribute) {
  NodeRunner r("ConstantOfShape", 9, {I64T({2}, {2, 3})});
  r.Attr("value", ir::Attribute::Tensor(I32T({1}, {7})));
  EXPECT_EQ(Vals<std::int32_t>(r.Run()), std::vector<std::int32_t>(6, 7));
  EXPECT_EQ(r.out_shape(), (Shape{2, 3}));
  EXPECT_EQ(r.out_dtype(), DType::kInt32);
  NodeRunner d("ConstantOfShape", 9, {I64T({1}, {3})});  // default: float zeros
  EXPECT_EQ(Floats(d.Run()), (std::vector<float>{0, 0, 0}));
  NodeRunner bad("ConstantOfShape", 9, {I64T({2}, {2, -1})});
  ExpectInferError(bad, "negative");
}

TEST(Expand, BroadcastsBothWays) {
  // [3,1] to [2,1,2]: the result is [2,3,2].
  NodeRunner r("Expand", 13, {F32T({3, 1}, {1, 2, 3}), I64T({3}, {2, 1, 2})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(r.out_shape(), (Shape{2, 3, 2}));
  NodeRunner bad("Expand", 13, {F32T({3}, {1, 2, 3}), I64T({1}, {2})});
  ExpectInferError(bad, "cannot expand");
}

TEST(GatherElements, PicksAlongAxis) {
  NodeRunner r("GatherElements", 13, {F32T({2, 2}, {1, 2, 3, 4}), I64T({2, 2}, {0, 0, 1, 0})});
  r.Attr("axis", Int(1));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1, 1, 4, 3}));
  // axis 0, negative and int32 indices, fewer rows than the data.
  NodeRunner a("GatherElements", 11, {Iota({3, 3}), I32T({1, 3}, {-1, 0, 1})});
  EXPECT_EQ(Floats(a.Run()), (std::vector<float>{6, 1, 5}));
  NodeRunner bad("GatherElements", 13, {Iota({2, 2}), I64T({1, 1}, {2})});
  ExpectInferError(bad, "index 2");
}

TEST(GatherND, TuplesSlicesAndBatchDims) {
  NodeRunner a("GatherND", 13, {Iota({2, 2}), I64T({2, 2}, {0, 0, 1, 1})});
  EXPECT_EQ(Floats(a.Run()), (std::vector<float>{0, 3}));
  NodeRunner b("GatherND", 11, {Iota({2, 2}), I64T({2, 1}, {1, 0})});
  EXPECT_EQ(Floats(b.Run()), (std::vector<float>{2, 3, 0, 1}));
  EXPECT_EQ(b.out_shape(), (Shape{2, 2}));
  NodeRunner c("GatherND", 12, {Iota({2, 2, 2}), I64T({2, 1}, {1, 0})});
  c.Attr("batch_dims", Int(1));
  EXPECT_EQ(Floats(c.Run()), (std::vector<float>{2, 3, 4, 5}));
  NodeRunner bad("GatherND", 13, {Iota({2, 2}), I64T({2, 1}, {1, 0})});
  bad.Attr("batch_dims", Int(2));
  ExpectInferError(bad, "'batch_dims'");
  NodeRunner oob("GatherND", 13, {Iota({2, 2}), {DType::kInt64, {1, 1}}});
  EXPECT_FALSE(oob.Run({I64T({1, 1}, {5})}).ok());
}

TEST(Pad, ConstantReflectEdgeAndNegative) {
  auto pad = [](const std::string& mode, std::vector<std::int64_t> pads, test::In value = nullptr) {
    NodeRunner r("Pad", 13, {F32T({3}, {1, 2, 3}), I64T({2}, pads), value});
    r.Attr("mode", Str(mode));
    return Floats(r.Run());
  };
  EXPECT_EQ(pad("reflect", {2, 2}), (std::vector<float>{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(pad("edge", {2, 1}), (std::vector<float>{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(pad("constant", {1, 0}, F32T({}, {9})), (std::vector<float>{9, 1, 2, 3}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<float>{2, 3, 0}));
  EXPECT_EQ(pad("reflect", {5, 0}), (std::vector<float>{2, 1, 2, 3, 2, 1, 2, 3}));  // reflects again
  NodeRunner r("Pad", 11, {F32T({2, 2}, {1, 2, 3, 4}), I64T({4}, {1, 0, 0, 1})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 0, 0, 1, 2, 0, 3, 4, 0}));
  EXPECT_EQ(r.out_shape(), (Shape{3, 3}));
}

TEST(Pad, AttributeFormsOfVersions1And2) {
  NodeRunner v2("Pad", 2, {F32T({2}, {1, 2})});
  v2.Attr("pads", Ints({1, 1})).Attr("value", ir::Attribute::Float(5));
  EXPECT_EQ(Floats(v2.Run()), (std::vector<float>{5, 1, 2, 5}));
  NodeRunner v1("Pad", 1, {F32T({2}, {1, 2})});
  v1.Attr("paddings", Ints({0, 2})).Attr("mode", Str("edge"));
  EXPECT_EQ(Floats(v1.Run()), (std::vector<float>{1, 2, 2, 2}));
  // Integer data with a float constant (normalized Pad-2 value) converts.
  NodeRunner i("Pad", 13, {I32T({1}, {4}), I64T({2}, {1, 0}), F32T({}, {-3})});
  EXPECT_EQ(Vals<std::int32_t>(i.Run()), (std::vector<std::int32_t>{-3, 4}));
}

TEST(Pad, Errors) {
  NodeRunner mode("Pad", 13, {F32T({2}, {1, 2}), I64T({2}, {1, 1})});
  mode.Attr("mode", Str("wrap"));
  ExpectInferError(mode, "'mode'");
  NodeRunner count("Pad", 13, {F32T({2}, {1, 2}), I64T({3}, {1, 1, 1})});
  ExpectInferError(count, "'pads'");
  NodeRunner crop("Pad", 13, {F32T({2}, {1, 2}), I64T({2}, {-2, -1})});
  ExpectInferError(crop, "removes more");
}

TEST(Range, IntegerAndFloat) {
  NodeRunner a("Range", 11, {I32T({}, {1}), I32T({}, {10}), I32T({}, {3})});
  EXPECT_EQ(Vals<std::int32_t>(a.Run()), (std::vector<std::int32_t>{1, 4, 7}));
  NodeRunner b("Range", 11, {I64T({}, {10}), I64T({}, {4}), I64T({}, {-3})});
  EXPECT_EQ(Vals<std::int64_t>(b.Run()), (std::vector<std::int64_t>{10, 7}));
  NodeRunner c("Range", 11, {F32T({}, {0}), F32T({}, {1}), F32T({}, {0.25f})});
  EXPECT_EQ(Floats(c.Run()), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  NodeRunner e("Range", 11, {I64T({}, {5}), I64T({}, {1}), I64T({}, {1})});  // empty
  EXPECT_EQ(Vals<std::int64_t>(e.Run()).size(), 0u);
  NodeRunner z("Range", 11, {I64T({}, {0}), I64T({}, {4}), I64T({}, {0})});
  ExpectInferError(z, "delta");
  NodeRunner rt("Range", 11, {{DType::kFloat32, {}}, F32T({}, {1}), F32T({}, {1})});
  ASSERT_TRUE(rt.Infer().ok());
  EXPECT_EQ(rt.out_shape(), (Shape{-1}));
}

TEST(ScatterND, ReplaceAddMul) {
  NodeRunner r("ScatterND", 16, {F32T({8}, {1, 2, 3, 4, 5, 6, 7, 8}), I64T({4, 1}, {4, 3, 1, 7}), F32T({4}, {9, 10, 11, 12})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12}));
  NodeRunner add("ScatterND", 16, {F32T({2, 2}, {1, 2, 3, 4}), I64T({2, 1}, {0, 0}), F32T({2, 2}, {10, 20, 30, 40})});
  add.Attr("reduction", Str("add"));
  EXPECT_EQ(Floats(add.Run()), (std::vector<float>{41, 62, 3, 4}));
  NodeRunner mul("ScatterND", 16, {I64T({3}, {1, 2, 3}), I64T({2, 1}, {2, 2}), I64T({2}, {2, 5})});
  mul.Attr("reduction", Str("mul"));
  EXPECT_EQ(Vals<std::int64_t>(mul.Run()), (std::vector<std::int64_t>{1, 2, 30}));
  NodeRunner bad("ScatterND", 16, {Iota({3}), I64T({1, 1}, {0}), F32T({1}, {1})});
  bad.Attr("reduction", Str("avg"));
  ExpectInferError(bad, "'reduction'");
  NodeRunner shape("ScatterND", 13, {Iota({3}), I64T({2, 1}, {0, 1}), F32T({3}, {1, 2, 3})});
  ExpectInferError(shape, "updates");
}

TEST(Size, CountsElements) {
  NodeRunner r("Size", 13, {Iota({2, 3, 4})});
  EXPECT_EQ(Vals<std::int64_t>(r.Run()), (std::vector<std::int64_t>{24}));
  EXPECT_EQ(r.out_shape(), Shape{});
}

TEST(Split, EqualVariableAndAttributeForms) {
  NodeRunner eq("Split", 13, {Iota({6})}, 3);
  auto out = eq.Run();
  EXPECT_EQ(Floats(out, 0), (std::vector<float>{0, 1}));
  EXPECT_EQ(Floats(out, 2), (std::vector<float>{4, 5}));
  NodeRunner var("Split", 13, {Iota({2, 3}), I64T({2}, {1, 2})}, 2);
  var.Attr("axis", Int(-1));
  out = var.Run();
  EXPECT_EQ(Floats(out, 0), (std::vector<float>{0, 3}));
  EXPECT_EQ(Floats(out, 1), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(var.out_shape(1), (Shape{2, 2}));
  NodeRunner v11("Split", 11, {Iota({5})}, 2);
  v11.Attr("split", Ints({4, 1}));
  EXPECT_EQ(Floats(v11.Run(), 1), (std::vector<float>{4}));
  NodeRunner v2("Split", 2, {Iota({4})}, 2);
  v2.Attr("split", Ints({1, 3}));
  EXPECT_EQ(Floats(v2.Run(), 1), (std::vector<float>{1, 2, 3}));
}

TEST(Split, Errors) {
  NodeRunner sum("Split", 13, {Iota({6}), I64T({2}, {2, 3})}, 2);
  ExpectInferError(sum, "sums to 5");
  NodeRunner uneven("Split", 13, {Iota({5})}, 2);
  ExpectInferError(uneven, "equal parts");
  NodeRunner axis("Split", 13, {Iota({5})}, 1);
  axis.Attr("axis", Int(1));
  ExpectInferError(axis, "'axis'");
}

TEST(Tile, RepeatsAndVersion1) {
  NodeRunner r("Tile", 13, {F32T({1, 2}, {1, 2}), I64T({2}, {2, 2})});
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{1, 2, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(r.out_shape(), (Shape{2, 4}));
  NodeRunner v1("Tile", 1, {F32T({2, 1}, {1, 2}), I64T({}, {3}), I64T({}, {1})});
  EXPECT_EQ(Floats(v1.Run()), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  NodeRunner bad("Tile", 13, {F32T({1, 2}, {1, 2}), I64T({1}, {2})});
  ExpectInferError(bad, "repeats");
}

TEST(TopK, LargestSmallestAndTies) {
  auto x = F32T({2, 4}, {3, 1, 4, 1, 5, 9, 2, 6});
  NodeRunner r("TopK", 11, {x, I64T({1}, {2})}, 2);
  auto out = r.Run();
  EXPECT_EQ(Floats(out, 0), (std::vector<float>{4, 3, 9, 6}));
  EXPECT_EQ(Vals<std::int64_t>(out, 1), (std::vector<std::int64_t>{2, 0, 1, 3}));
  NodeRunner s("TopK", 11, {x, I64T({1}, {2})}, 2);
  s.Attr("largest", Int(0));
  out = s.Run();
  EXPECT_EQ(Floats(out, 0), (std::vector<float>{1, 1, 2, 5}));
  EXPECT_EQ(Vals<std::int64_t>(out, 1), (std::vector<std::int64_t>{1, 3, 2, 0}));  // tie: lower index first
  NodeRunner a0("TopK", 10, {x, I64T({1}, {1})}, 2);
  a0.Attr("axis", Int(0));
  EXPECT_EQ(Floats(a0.Run(), 0), (std::vector<float>{5, 9, 4, 6}));
  NodeRunner v1("TopK", 1, {x}, 2);
  v1.Attr("k", Int(1));
  EXPECT_EQ(Floats(v1.Run(), 0), (std::vector<float>{4, 9}));
}

TEST(TopK, Errors) {
  NodeRunner big("TopK", 11, {Iota({2, 3}), I64T({1}, {4})}, 2);
  ExpectInferError(big, "'k' = 4 exceeds");
  NodeRunner neg("TopK", 11, {Iota({2, 3}), I64T({1}, {-1})}, 2);
  ExpectInferError(neg, "negative");
  // k known at run time only (computed, not a shape input): at most the
  // axis' 3, data-dependent there.
  NodeRunner rt("TopK", 11, {Iota({2, 3}), {DType::kInt64, {1}}}, 2);
  ASSERT_TRUE(rt.Infer().ok());
  EXPECT_EQ(rt.out_shape(1), (Shape{2, 3}));
}

TEST(Trilu, UpperLowerWithK) {
  NodeRunner u("Trilu", 14, {Iota({3, 3})});
  EXPECT_EQ(Floats(u.Run()), (std::vector<float>{0, 1, 2, 0, 4, 5, 0, 0, 8}));
  NodeRunner l("Trilu", 14, {Iota({3, 3}), I64T({}, {-1})});
  l.Attr("upper", Int(0));
  EXPECT_EQ(Floats(l.Run()), (std::vector<float>{0, 0, 0, 3, 0, 0, 6, 7, 0}));
  NodeRunner b("Trilu", 14, {Iota({2, 2, 3}), {DType::kInt64, {}}});  // batched, runtime k
  EXPECT_EQ(Floats(b.Run({I64T({}, {1})})), (std::vector<float>{0, 1, 2, 0, 0, 5, 0, 7, 8, 0, 0, 11}));
  NodeRunner bad("Trilu", 14, {Iota({3})});
  ExpectInferError(bad, "rank >= 2");
}

TEST(DepthToSpace, DcrAndCrd) {
  // 8 channels of 1x1, blocksize 2: two output channels of 2x2.
  NodeRunner dcr("DepthToSpace", 13, {Iota({1, 8, 1, 1})});
  dcr.Attr("blocksize", Int(2));
  EXPECT_EQ(Floats(dcr.Run()), (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(dcr.out_shape(), (Shape{1, 2, 2, 2}));
  NodeRunner crd("DepthToSpace", 11, {Iota({1, 8, 1, 1})});
  crd.Attr("blocksize", Int(2)).Attr("mode", Str("CRD"));
  EXPECT_EQ(Floats(crd.Run()), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  NodeRunner bad("DepthToSpace", 13, {Iota({1, 8, 1, 1})});
  bad.Attr("blocksize", Int(3));
  ExpectInferError(bad, "'blocksize' = 3");
  NodeRunner mode("DepthToSpace", 13, {Iota({1, 4, 1, 1})});
  mode.Attr("blocksize", Int(2)).Attr("mode", Str("XYZ"));
  ExpectInferError(mode, "'mode'");
}

TEST(SpaceToDepth, InverseOfDcr) {
  // x[0][c][h][w], 1 channel 2x4, blocksize 2 -> 4 channels of 1x2.
  NodeRunner r("SpaceToDepth", 13, {Iota({1, 1, 2, 4})});
  r.Attr("blocksize", Int(2));
  EXPECT_EQ(Floats(r.Run()), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(r.out_shape(), (Shape{1, 4, 1, 2}));
  NodeRunner bad("SpaceToDepth", 1, {Iota({1, 1, 3, 4})});
  bad.Attr("blocksize", Int(2));
  ExpectInferError(bad, "'blocksize' = 2 does not divide");
}

TEST(Einsum, MatMulTransposeAndImplicitOutput) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]] (float32: oneDNN).
  NodeRunner mm("Einsum", 12, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2, 2}, {5, 6, 7, 8})});
  mm.Attr("equation", Str("ij,jk->ik"));
  EXPECT_EQ(Floats(mm.Run()), (std::vector<float>{19, 22, 43, 50}));
  NodeRunner imp("Einsum", 12, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2, 2}, {5, 6, 7, 8})});
  imp.Attr("equation", Str("ij,jk"));  // implicit: "ik"
  EXPECT_EQ(Floats(imp.Run()), (std::vector<float>{19, 22, 43, 50}));
  NodeRunner mt("Einsum", 12, {F32T({2, 2}, {1, 2, 3, 4}), F32T({2, 2}, {5, 6, 7, 8})});
  mt.Attr("equation", Str("ij,jk->ki"));
  EXPECT_EQ(Floats(mt.Run()), (std::vector<float>{19, 43, 22, 50}));
  NodeRunner t("Einsum", 12, {Iota({2, 3})});
  t.Attr("equation", Str(" ij -> ji "));
  EXPECT_EQ(Floats(t.Run()), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.out_shape(), (Shape{3, 2}));
}

TEST(Einsum, DiagonalTraceSumsAndOuter) {
  NodeRunner diag("Einsum", 12, {Iota({3, 3})});
  diag.Attr("equation", Str("ii->i"));
  EXPECT_EQ(Floats(diag.Run()), (std::vector<float>{0, 4, 8}));
  NodeRunner trace("Einsum", 12, {Iota({3, 3})});
  trace.Attr("equation", Str("ii"));
  EXPECT_EQ(Floats(trace.Run()), (std::vector<float>{12}));
  NodeRunner rows("Einsum", 12, {Iota({2, 3})});
  rows.Attr("equation", Str("ij->i"));
  EXPECT_EQ(Floats(rows.Run()), (std::vector<float>{3, 12}));
  NodeRunner outer("Einsum", 12, {F32T({2}, {1, 2}), F32T({3}, {1, 10, 100})});
  outer.Attr("equation", Str("i,j->ij"));
  EXPECT_EQ(Floats(outer.Run()), (std::vector<float>{1, 10, 100, 2, 20, 200}));
  NodeRunner three("Einsum", 12, {F32T({2}, {1, 2}), F32T({2, 2}, {1, 2, 3, 4}), F32T({2}, {1, 1})});
  three.Attr("equation", Str("i,ij,j->"));  // x^T A y = 1*(1+2) + 2*(3+4)
  EXPECT_EQ(Floats(three.Run()), (std::vector<float>{17}));
}

TEST(Einsum, BatchedDoubleIntAndEllipsisBroadcast) {
  // Batch 0: [1,2]x[[1],[1]] = 3; batch 1: [3,4]x[[2],[0]] = 6 (float64: loops).
  NodeRunner b("Einsum", 12, {F64T({2, 1, 2}, {1, 2, 3, 4}), F64T({2, 2, 1}, {1, 1, 2, 0})});
  b.Attr("equation", Str("bij,bjk->bik"));
  auto out = b.Run();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values<double>(out.value()[0]), (std::vector<double>{3, 6}));
  NodeRunner mv("Einsum", 12, {I32T({2, 2}, {1, 2, 3, 4}), I32T({2}, {1, -1})});
  mv.Attr("equation", Str("ij,j->i"));
  EXPECT_EQ(Vals<std::int32_t>(mv.Run()), (std::vector<std::int32_t>{-1, -1}));
  // A [2,1,2] (ellipsis [2,1]) with B [3,2]: ellipsis broadcasts to [2,3].
  NodeRunner e("Einsum", 12, {F32T({2, 1, 2}, {1, 2, 3, 4}), F32T({3, 2}, {1, 0, 0, 1, 1, 1})});
  e.Attr("equation", Str("...j,...j->..."));
  EXPECT_EQ(Floats(e.Run()), (std::vector<float>{1, 2, 3, 3, 4, 7}));
  EXPECT_EQ(e.out_shape(), (Shape{2, 3}));
  NodeRunner bd("Einsum", 12, {Iota({2, 2, 2})});
  bd.Attr("equation", Str("...ii->...i"));
  EXPECT_EQ(Floats(bd.Run()), (std::vector<float>{0, 3, 4, 7}));
}

TEST(Einsum, Errors) {
  NodeRunner terms("Einsum", 12, {Iota({2, 2})});
  terms.Attr("equation", Str("ij,jk->ik"));
  ExpectInferError(terms, "'equation'");
  NodeRunner rank("Einsum", 12, {Iota({2, 2})});
  rank.Attr("equation", Str("ijk->i"));
  ExpectInferError(rank, "rank 2");
  NodeRunner size("Einsum", 12, {Iota({2, 3}), Iota({2, 3})});
  size.Attr("equation", Str("ij,jk->ik"));
  ExpectInferError(size, "size");
  NodeRunner out("Einsum", 12, {Iota({2, 3})});
  out.Attr("equation", Str("ij->k"));
  ExpectInferError(out, "no input has");
  NodeRunner diag("Einsum", 12, {Iota({3, 1})});
  diag.Attr("equation", Str("ii->i"));
  ExpectInferError(diag, "different sizes");
  NodeRunner none("Einsum", 12, {Iota({2, 3})});
  ExpectInferError(none, "'equation' is required");
}

}  // namespace
}  // namespace kiln
