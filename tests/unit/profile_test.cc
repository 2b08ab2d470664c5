// Profiling (LoadOptions::profile, `kiln bench --profile`): every built-in
// task is timed per run, with its node, op, input shapes and, for the
// compute-bound ops, hand-checkable FLOP counts.
#include <gtest/gtest.h>

#include "api/compiler.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "test_util.h"

namespace kiln {
namespace {

// x[1,2,4,4] -> Conv 3x3 (2->3, pad 1) -> c -> Relu -> y. Fusion and layout
// passes off so both nodes stay tasks.
std::unique_ptr<ir::Graph> ConvRelu() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 4, 4});
  g->inputs().push_back(x);
  std::vector<float> wv(3 * 2 * 3 * 3, 0.25f);
  ir::Value* w = g->AddConstant("w", test::F32({3, 2, 3, 3}, wv));
  ir::Value* c = g->AddValue("c");
  ir::Value* y = g->AddValue("y");
  ir::Node* conv = g->AddNode("Conv", "conv", {x, w}, {c});
  conv->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
  g->AddNode("Relu", "relu", {c}, {y});
  g->outputs().push_back(y);
  return g;
}

std::unique_ptr<Model> Load(const test::TempDir& dir, bool profile) {
  CompileOptions co;
  co.passes.disabled = {"fuse", "layout"};
  auto g = ConvRelu();
  test::SetLatestVersions(*g);
  auto m = CompileGraph(std::move(g), co);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  EXPECT_TRUE(format::WriteModelFile(m.value(), dir.file("m.kiln")).ok());
  LoadOptions o;
  o.profile = profile;
  auto model = Model::Load(dir.file("m.kiln"), o);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

TEST(Profile, EveryTaskIsTimedPerRun) {
  test::TempDir dir;
  auto m = Load(dir, true);
  ASSERT_TRUE(m);
  std::vector<float> x(32, 1.f), y(48);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(m->Execute({TensorRef::Of(x.data(), {1, 2, 4, 4})}, {TensorRef::Of(y.data(), {1, 3, 4, 4})}).ok());
  }
  // Hand-derived: the centre output sums 2 channels x 9 taps x 0.25 = 4.5.
  EXPECT_FLOAT_EQ(y[5], 4.5f);
  const std::vector<TaskProfile> p = m->profile();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].node, "conv");
  EXPECT_EQ(p[0].op, "Conv");
  EXPECT_EQ(p[0].shapes, "float32[1,2,4,4] float32[3,2,3,3]");
  // 2 x (1 x 3 x 4 x 4 outputs) x (2 x 3 x 3 multiply-adds each) = 1728.
  EXPECT_DOUBLE_EQ(p[0].flops, 1728.0);
  EXPECT_EQ(p[1].node, "relu");
  EXPECT_EQ(p[1].flops, 0.0);
  for (const TaskProfile& t : p) {
    ASSERT_EQ(t.spans_us.size(), 3u) << t.node;
    for (std::size_t r = 0; r < 3; ++r) {
      EXPECT_GE(t.spans_us[r].second, 0.0);
      if (r > 0) {
        EXPECT_GT(t.spans_us[r].first, t.spans_us[r - 1].first) << t.node;
      }
    }
  }
  // Within a run the relu starts after the conv ended.
  EXPECT_GE(p[1].spans_us[2].first, p[0].spans_us[2].first + p[0].spans_us[2].second);
}

// ConvTranspose FLOPs count per input element: x[1,2,3,3], W[2,4,3,3],
// stride 2: each of the 18 input elements feeds 4 x 3 x 3 = 36 outputs,
// 648 multiply-adds = 1296 FLOPs (the 1x4x7x7 output does not enter).
TEST(Profile, ConvTransposeFlopsCountInputElements) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 3, 3});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 4, 3, 3}, std::vector<float>(72, 0.5f)));
  ir::Value* y = g->AddValue("y");
  ir::Node* ct = g->AddNode("ConvTranspose", "ct", {x, w}, {y});
  ct->SetAttr("strides", ir::Attribute::Ints({2, 2}));
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto cm = CompileGraph(std::move(g), {});
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("ct.kiln")).ok());
  LoadOptions o;
  o.profile = true;
  auto m = Model::Load(dir.file("ct.kiln"), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> xv(18, 1.f), yv(4 * 7 * 7);
  ASSERT_TRUE((*m)->Execute({TensorRef::Of(xv.data(), {1, 2, 3, 3})}, {TensorRef::Of(yv.data(), {1, 4, 7, 7})}).ok());
  const auto p = (*m)->profile();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_DOUBLE_EQ(p[0].flops, 1296.0);
  EXPECT_EQ(p[0].spans_us.size(), 1u);
}

TEST(Profile, OffByDefault) {
  test::TempDir dir;
  auto m = Load(dir, false);
  ASSERT_TRUE(m);
  std::vector<float> x(32, 1.f), y(48);
  ASSERT_TRUE(m->Execute({TensorRef::Of(x.data(), {1, 2, 4, 4})}, {TensorRef::Of(y.data(), {1, 3, 4, 4})}).ok());
  EXPECT_TRUE(m->profile().empty());
}

}  // namespace
}  // namespace kiln
