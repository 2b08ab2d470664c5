// The compile pipeline on in-memory graphs: folding, fusion, outputs
// checked against hand-derived values.
#include <gtest/gtest.h>

#include <cmath>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

// x[1,2,2,2] -> Conv 1x1 (2->2, W=[[1,2],[3,4]], B=[0.5,-100]) -> BN -> Relu
std::unique_ptr<ir::Graph> ConvBnRelu() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 2, 2});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 2, 1, 1}, {1, 2, 3, 4}));
  ir::Value* b = g->AddConstant("b", test::F32({2}, {0.5f, -100}));
  ir::Value* s = g->AddConstant("s", test::F32({2}, {2, 1}));
  ir::Value* sh = g->AddConstant("sh", test::F32({2}, {1, 0}));
  ir::Value* mean = g->AddConstant("mean", test::F32({2}, {0.5f, 0}));
  ir::Value* var = g->AddConstant("var", test::F32({2}, {1, 1}));
  ir::Value* c = g->AddValue("c");
  ir::Value* n = g->AddValue("n");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Conv", "conv", {x, w, b}, {c});
  ir::Node* bn = g->AddNode("BatchNormalization", "bn", {c, s, sh, mean, var}, {n});
  bn->SetAttr("epsilon", ir::Attribute::Float(0.f));
  g->AddNode("Relu", "relu", {n}, {y});
  g->outputs().push_back(y);
  return g;
}

TEST(Pipeline, ConvBatchNormReluFuseIntoOneKernel) {
  test::TempDir dir;
  format::CompiledModel cm;
  CompileOptions opts;
  opts.passes.disabled = {"layout"};
  auto model = CompileAndLoad(ConvBnRelu(), dir, &cm, opts);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(cm.graph->nodes().size(), 1u);
  EXPECT_EQ(cm.graph->nodes()[0]->op_type(), "Conv");
  EXPECT_EQ(cm.graph->nodes()[0]->GetString("kiln.activation", ""), "Relu");
  // x channel 0 = [1,2,3,4], channel 1 = [-1,0,1,2]
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2}, y(8);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})}, {TensorRef::Of(y.data(), {1, 2, 2, 2})}).ok());
  // conv ch0 = 1*x0 + 2*x1 + 0.5 -> [-0.5, 2.5, 5.5, 8.5]; bn: 2*(v-0.5)+1 -> [-1, 5, 11, 17]; relu
  // conv ch1 = 3*x0 + 4*x1 - 100 -> [-103, -94, -85, -76]; bn: v; relu -> 0
  EXPECT_EQ(y, (std::vector<float>{0, 5, 11, 17, 0, 0, 0, 0}));
}

TEST(Pipeline, FusionCanBeSwitchedOff) {
  test::TempDir dir;
  format::CompiledModel cm;
  CompileOptions opts;
  opts.passes.disabled = {"fuse", "layout"};
  auto model = CompileAndLoad(ConvBnRelu(), dir, &cm, opts);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(cm.graph->nodes().size(), 3u);
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2}, y(8);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})}, {TensorRef::Of(y.data(), {1, 2, 2, 2})}).ok());
  EXPECT_EQ(y, (std::vector<float>{0, 5, 11, 17, 0, 0, 0, 0}));
}

TEST(Pipeline, ChannelsLastConvKeepsResults) {
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(ConvBnRelu(), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int nhwc_convs = 0;
  for (auto& n : cm.graph->nodes()) nhwc_convs += n->op_type() == "Conv" && n->GetInt("kiln.nhwc", 0) == 1;
  EXPECT_EQ(nhwc_convs, 1);
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2}, y(8);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})}, {TensorRef::Of(y.data(), {1, 2, 2, 2})}).ok());
  EXPECT_EQ(y, (std::vector<float>{0, 5, 11, 17, 0, 0, 0, 0}));
}

TEST(Pipeline, UnknownPassNameIsRejected) {
  auto g = ConvBnRelu();
  test::SetLatestVersions(*g);
  CompileOptions opts;
  opts.passes.disabled = {"no-such-pass"};
  auto m = CompileGraph(std::move(g), opts);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no-such-pass"), std::string::npos);
}

TEST(Pipeline, ShapeArithmeticFoldsAway) {
  // y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): x[2,3,4] -> y[2,12]
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3, 4});
  g->inputs().push_back(x);
  ir::Value* shp = g->AddValue("shp");
  ir::Value* d0 = g->AddValue("d0");
  ir::Value* d0v = g->AddValue("d0v");
  ir::Value* tgt = g->AddValue("tgt");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Shape", "shape", {x}, {shp});
  g->AddNode("Gather", "gather", {shp, g->AddConstant("zero", test::I64({}, {0}))}, {d0});
  g->AddNode("Unsqueeze", "unsq", {d0, g->AddConstant("ax", test::I64({1}, {0}))}, {d0v});
  ir::Node* cat = g->AddNode("Concat", "concat", {d0v, g->AddConstant("m1", test::I64({1}, {-1}))}, {tgt});
  cat->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Reshape", "reshape", {x, tgt}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(cm.graph->nodes().size(), 1u);
  EXPECT_EQ(cm.graph->nodes()[0]->op_type(), "Reshape");
  EXPECT_EQ((*model)->outputs()[0].shape, (Shape{2, 12}));
}

TEST(Pipeline, MatMulAddBecomesGemmWithBias) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 2});
  g->inputs().push_back(x);
  ir::Value* mm = g->AddValue("mm");
  ir::Value* y = g->AddValue("y");
  g->AddNode("MatMul", "mm", {x, g->AddConstant("w", test::F32({2, 3}, {1, 0, 1, 0, 1, 1}))}, {mm});
  g->AddNode("Add", "add", {mm, g->AddConstant("b", test::F32({3}, {10, 20, 30}))}, {y});
  g->outputs().push_back(y);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(cm.graph->nodes().size(), 1u);
  EXPECT_EQ(cm.graph->nodes()[0]->op_type(), "Gemm");
  std::vector<float> xv = {1, 2, 3, 4}, yv(6);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xv.data(), {2, 2})}, {TensorRef::Of(yv.data(), {2, 3})}).ok());
  // [1,2]·W = [1, 2, 3]; [3,4]·W = [3, 4, 7]
  EXPECT_EQ(yv, (std::vector<float>{11, 22, 33, 13, 24, 37}));
}

TEST(Pipeline, InputAndConstantOutputsGetTheirOwnBuffers) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2});
  g->inputs().push_back(x);
  ir::Value* c = g->AddConstant("c", test::F32({2}, {7, 8}));
  g->outputs().push_back(x);
  g->outputs().push_back(c);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ((*model)->outputs().size(), 2u);
  EXPECT_EQ((*model)->outputs()[1].name, "c");
  std::vector<float> xv = {1, 2}, y0(2), y1(2);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xv.data(), {2})},
                                {TensorRef::Of(y0.data(), {2}), TensorRef::Of(y1.data(), {2})}).ok());
  EXPECT_EQ(y0, xv);
  EXPECT_EQ(y1, (std::vector<float>{7, 8}));
}

}  // namespace
}  // namespace kiln
