// Symbolic input dims (issue 13, step 2): a model compiled with input dims
// left open runs at any shape its symbols admit, one plan per signature of
// input shapes, cached (least recently used dropped). Expected values are
// computed here by plain loops from the weights the test chose.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::CompileAndLoad;

constexpr int kIn = 4, kOut = 3;

float W(int k, int j) { return 0.25f * static_cast<float>((k * kOut + j) % 7) - 0.75f; }
float B(int j) { return 0.5f * static_cast<float>(j) - 0.5f; }

// x[batch, 4] -> MatMul W[4,3] -> Add b[3] -> Relu -> y[batch, 3]
std::unique_ptr<ir::Graph> Mlp() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, kIn});
  x->dim_params() = {"batch", ""};
  g->inputs().push_back(x);
  std::vector<float> w, b;
  for (int k = 0; k < kIn; ++k)
    for (int j = 0; j < kOut; ++j) w.push_back(W(k, j));
  for (int j = 0; j < kOut; ++j) b.push_back(B(j));
  ir::Value* mm = g->AddValue("mm");
  ir::Value* add = g->AddValue("add");
  ir::Value* y = g->AddValue("y");
  g->AddNode("MatMul", "matmul", {x, g->AddConstant("w", test::F32({kIn, kOut}, w))}, {mm});
  g->AddNode("Add", "bias", {mm, g->AddConstant("b", test::F32({kOut}, b))}, {add});
  g->AddNode("Relu", "relu", {add}, {y});
  g->outputs() = {y};
  return g;
}

std::vector<float> Input(std::int64_t batch) {
  std::vector<float> x(static_cast<std::size_t>(batch) * kIn);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * 2;
  return x;
}

std::vector<float> Expected(const std::vector<float>& x, std::int64_t batch) {
  std::vector<float> y;
  for (std::int64_t r = 0; r < batch; ++r) {
    for (int j = 0; j < kOut; ++j) {
      float s = B(j);
      for (int k = 0; k < kIn; ++k) s += x[static_cast<std::size_t>(r * kIn + k)] * W(k, j);
      y.push_back(std::max(s, 0.f));
    }
  }
  return y;
}

Status RunAt(Model& m, std::int64_t batch) {
  std::vector<float> x = Input(batch);
  std::vector<float> y(static_cast<std::size_t>(batch) * kOut, -7);
  KILN_RETURN_IF_ERROR(m.Execute({TensorRef::Of(x.data(), {batch, kIn})}, {TensorRef::Of(y.data(), {batch, kOut})}));
  const std::vector<float> want = Expected(x, batch);
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::fabs(y[i] - want[i]) > 1e-5f) {
      return Error(StatusCode::kInternal, "batch ", batch, ": y[", i, "] = ", y[i], ", expected ", want[i]);
    }
  }
  return Status::Ok();
}

TEST(DynamicShapes, SymbolicBatchRunsAtEveryExtent) {
  test::TempDir dir;
  auto model = CompileAndLoad(Mlp(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  // The input reports its symbol; the output's batch dim follows from it.
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].shape, (Shape{-1, kIn}));
  EXPECT_EQ(m.inputs()[0].bytes, 0u);
  ASSERT_EQ(m.inputs()[0].dims.size(), 2u);
  EXPECT_EQ(m.inputs()[0].dims[0].value, -1);
  EXPECT_EQ(m.inputs()[0].dims[0].min, 1);
  EXPECT_EQ(m.inputs()[0].dims[0].max, -1);
  EXPECT_EQ(m.inputs()[0].dims[0].symbol, "batch");
  EXPECT_EQ(m.inputs()[0].dims[1].value, kIn);
  EXPECT_EQ(m.outputs()[0].shape, (Shape{-1, kOut}));
  auto shapes = m.OutputShapes({{5, kIn}});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ(shapes.value(), (std::vector<Shape>{{5, kOut}}));
  for (std::int64_t batch : {1, 3, 8, 64, 2}) {
    Status st = RunAt(m, batch);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(m.output_shape(0), (Shape{batch, kOut}));
  }
}

TEST(DynamicShapes, AlternatingShapesPlanOncePerSignature) {
  test::TempDir dir;
  auto model = CompileAndLoad(Mlp(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.plan_stats().created, 0u);  // plans come with runs
  const std::int64_t batches[] = {2, 7, 5};
  for (int r = 0; r < 100; ++r) {
    Status st = RunAt(m, batches[r % 3]);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const PlanStats s = m.plan_stats();
  EXPECT_EQ(s.created, 3u);
  EXPECT_EQ(s.hits, 97u);
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.cached, 3u);
  EXPECT_GT(s.last_plan_us, 0);
  // Its parts, each timed, within the whole.
  EXPECT_GT(s.last_specialize_us, 0);
  EXPECT_GT(s.last_memory_plan_us, 0);
  EXPECT_GT(s.last_executor_us, 0);
  EXPECT_LE(s.last_specialize_us + s.last_memory_plan_us + s.last_executor_us, s.last_plan_us);
}

TEST(DynamicShapes, LeastRecentlyUsedPlansAreDropped) {
  test::TempDir dir;
  LoadOptions lo;
  lo.max_plans = 2;
  auto model = CompileAndLoad(Mlp(), dir, nullptr, {}, lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  // 2, 3 (2 plans), 2 (hit: 2 becomes most recent), 4 (evicts 3), 3 (new again, evicts 2).
  for (std::int64_t b : {2, 3, 2, 4, 3}) ASSERT_TRUE(RunAt(m, b).ok());
  const PlanStats s = m.plan_stats();
  EXPECT_EQ(s.created, 4u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(s.cached, 2u);
  // What is still cached runs without planning.
  ASSERT_TRUE(RunAt(m, 4).ok());
  EXPECT_EQ(m.plan_stats().created, 4u);
}

// The cache is bounded in arena bytes too (LoadOptions::max_plan_bytes):
// least recently used plans go until the held ones fit, the newest stays.
TEST(DynamicShapes, PlansAreBoundedInArenaBytes) {
  // y = exp(relu(x)) + (-relu(x)) on x[batch, 4]: relu's output lives in the
  // arena while both branches read it.
  auto graph = [] {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, kIn});
    x->dim_params() = {"batch", ""};
    g->inputs().push_back(x);
    ir::Value *r = g->AddValue("r"), *e = g->AddValue("e"), *n = g->AddValue("n"), *y = g->AddValue("y");
    g->AddNode("Relu", "relu", {x}, {r});
    g->AddNode("Exp", "exp", {r}, {e});
    g->AddNode("Neg", "neg", {r}, {n});
    g->AddNode("Add", "add", {e, n}, {y});
    g->outputs() = {y};
    return g;
  };
  auto run = [](Model& m, std::int64_t batch) {
    std::vector<float> x = Input(batch), y(x.size(), -7);
    KILN_RETURN_IF_ERROR(m.Execute({TensorRef::Of(x.data(), {batch, kIn})}, {TensorRef::Of(y.data(), {batch, kIn})}));
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float r = std::max(x[i], 0.f);
      if (std::fabs(y[i] - (std::exp(r) - r)) > 1e-5f * std::exp(r)) {
        return Error(StatusCode::kInternal, "batch ", batch, ": y[", i, "] = ", y[i]);
      }
    }
    return Status::Ok();
  };
  // What plans for batches 40 and 50 hold together, with no bound.
  std::uint64_t two = 0;
  {
    test::TempDir dir;
    auto model = CompileAndLoad(graph(), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    for (std::int64_t b : {40, 50}) ASSERT_TRUE(run(**model, b).ok());
    two = (*model)->plan_stats().arena_bytes;
    ASSERT_GT(two, 0u);
  }
  test::TempDir dir;
  LoadOptions lo;
  lo.max_plan_bytes = two;
  auto model = CompileAndLoad(graph(), dir, nullptr, {}, lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  for (std::int64_t b : {40, 50}) ASSERT_TRUE(run(m, b).ok());
  EXPECT_EQ(m.plan_stats().cached, 2u);  // they fit
  EXPECT_EQ(m.plan_stats().evicted, 0u);
  // Batch 60 needs more than either: the least recently used (40) goes, and
  // 50 too if the two still do not fit.
  ASSERT_TRUE(run(m, 60).ok());
  PlanStats s = m.plan_stats();
  EXPECT_GE(s.evicted, 1u);
  EXPECT_EQ(s.cached + s.evicted, 3u);
  EXPECT_TRUE(s.arena_bytes <= two || s.cached == 1) << s.arena_bytes << " " << two;
  // A plan larger than the whole bound is kept alone.
  ASSERT_TRUE(run(m, 500).ok());
  s = m.plan_stats();
  EXPECT_EQ(s.cached, 1u);
  EXPECT_GT(s.arena_bytes, two);
  ASSERT_TRUE(run(m, 500).ok());
  EXPECT_EQ(m.plan_stats().hits, 1u);
}

// Two inputs sharing the symbol "batch": z = x + u.
std::unique_ptr<ir::Graph> SharedSymbol() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, 2});
  ir::Value* u = g->AddValue("u", DType::kFloat32, {-1, 2});
  x->dim_params() = {"batch", ""};
  u->dim_params() = {"batch", ""};
  g->inputs() = {x, u};
  ir::Value* z = g->AddValue("z");
  g->AddNode("Add", "add", {x, u}, {z});
  g->outputs() = {z};
  return g;
}

TEST(DynamicShapes, InputsAreCheckedAgainstSymbolsByName) {
  test::TempDir dir;
  auto model = CompileAndLoad(SharedSymbol(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  std::vector<float> a(8, 1), b(8, 2), z(8, 0);
  // One extent per symbol.
  Status st = m.Execute({TensorRef::Of(a.data(), {2, 2}), TensorRef::Of(b.data(), {3, 2})},
                        {TensorRef::Of(z.data(), {2, 2})});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input 1 'u' dim 0 (symbol 'batch') is 3, but input 0 'x' dim 0 gives 'batch' = 2"),
            std::string::npos)
      << st.message();
  // Outside the symbol's range (1.. unbounded).
  st = m.Execute({TensorRef::Of(a.data(), {0, 2}), TensorRef::Of(b.data(), {0, 2})}, {TensorRef::Of(z.data(), {0, 2})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 0 'x' dim 0 (symbol 'batch') is 0, outside its range 1.."), std::string::npos)
      << st.message();
  // Static dims stay exact.
  st = m.Execute({TensorRef::Of(a.data(), {2, 4}), TensorRef::Of(b.data(), {2, 4})}, {TensorRef::Of(z.data(), {2, 4})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dim 1 is 4, expected 2"), std::string::npos) << st.message();
  // Outputs are bound with the plan's shapes.
  st = m.Execute({TensorRef::Of(a.data(), {4, 2}), TensorRef::Of(b.data(), {4, 2})}, {TensorRef::Of(z.data(), {3, 2})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output 0 'z': expected shape [4,2]"), std::string::npos) << st.message();
  ASSERT_TRUE(m.Execute({TensorRef::Of(a.data(), {4, 2}), TensorRef::Of(b.data(), {4, 2})},
                        {TensorRef::Of(z.data(), {4, 2})})
                  .ok());
  for (float v : z) EXPECT_EQ(v, 3.f);
}

// Unnamed open dims get a symbol of their own, named after the input.
TEST(DynamicShapes, UnnamedDimsGetSymbols) {
  test::TempDir dir;
  auto g = Mlp();
  g->inputs()[0]->dim_params().clear();
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->inputs()[0].dims[0].symbol, "x_d0");
  EXPECT_TRUE(RunAt(**model, 6).ok());
}

// Shape arithmetic on a symbolic dim (Shape -> Concat -> Reshape, as exported
// transformers split heads): compiled at the probe without baking it, and
// folded per plan, so y = reshape(x, [batch, 8]) at every batch.
TEST(DynamicShapes, ShapeArithmeticFollowsEachSignature) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, 4, 2});
  x->dim_params() = {"batch", "", ""};
  g->inputs().push_back(x);
  ir::Value* s = g->AddValue("s");
  ir::Value* target = g->AddValue("target");
  ir::Value* r = g->AddValue("r");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Shape", "shape", {x}, {s})->SetAttr("end", ir::Attribute::Int(1));
  auto eight = std::make_shared<HostTensor>(DType::kInt64, Shape{1});
  eight->mutable_data_as<std::int64_t>()[0] = 8;
  g->AddNode("Concat", "concat", {s, g->AddConstant("eight", eight)}, {target})
      ->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Reshape", "reshape", {x, target}, {r});
  g->AddNode("Relu", "relu", {r}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  for (std::int64_t batch : {3, 1, 5}) {
    std::vector<float> xs(static_cast<std::size_t>(batch) * 8), ys(xs.size(), -7);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 5) - 2;
    auto shapes = m.OutputShapes({{batch, 4, 2}});
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    EXPECT_EQ(shapes.value(), (std::vector<Shape>{{batch, 8}}));
    Status st = m.Execute({TensorRef::Of(xs.data(), {batch, 4, 2})}, {TensorRef::Of(ys.data(), {batch, 8})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], std::max(xs[i], 0.f)) << batch << " " << i;
  }
}

// Exported attention merges heads with Reshape(x, [batch, seq, 8]) where
// batch and seq come from Shape(x) and 8 is a constant: the compiler probes
// the target's symbolic elements together with x's symbolic dims, so the
// last dim stays static (LayerNorm and other fusions need it fixed), while a
// target with -1 ([batch, -1]: seq * 8) keeps its inferred dim symbolic.
// Both run at several signatures against the plain loop.
TEST(DynamicShapes, ReshapeTargetsFromShapeKeepTheirFixedElements) {
  for (bool inferred : {false, true}) {
    SCOPED_TRACE(inferred ? "[batch, -1]" : "[batch, seq, 8]");
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, -1, 4, 2});
    x->dim_params() = {"batch", "seq", "", ""};
    g->inputs().push_back(x);
    auto i64 = [&](const std::string& name, std::vector<std::int64_t> v, Shape shape) {
      auto t = std::make_shared<HostTensor>(DType::kInt64, shape);
      for (std::size_t i = 0; i < v.size(); ++i) t->mutable_data_as<std::int64_t>()[i] = v[i];
      return g->AddConstant(name, t);
    };
    ir::Value* s = g->AddValue("s");
    g->AddNode("Shape", "shape", {x}, {s});
    std::vector<ir::Value*> parts;
    for (int d = 0; d < (inferred ? 1 : 2); ++d) {
      ir::Value* e = g->AddValue("e" + std::to_string(d));
      ir::Value* u = g->AddValue("u" + std::to_string(d));
      g->AddNode("Gather", "gather" + std::to_string(d), {s, i64("i" + std::to_string(d), {d}, {})}, {e});
      g->AddNode("Unsqueeze", "unsqueeze" + std::to_string(d), {e, i64("axes" + std::to_string(d), {0}, {1})}, {u});
      parts.push_back(u);
    }
    parts.push_back(i64("last", {inferred ? -1 : 8}, {1}));
    ir::Value* target = g->AddValue("target");
    g->AddNode("Concat", "concat", parts, {target})->SetAttr("axis", ir::Attribute::Int(0));
    ir::Value* r = g->AddValue("r");
    ir::Value* y = g->AddValue("y");
    g->AddNode("Reshape", "merge", {x, target}, {r});
    g->AddNode("Relu", "relu", {r}, {y});
    g->outputs() = {y};
    test::TempDir dir;
    auto model = CompileAndLoad(std::move(g), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    Model& m = **model;
    const std::vector<DimInfo>& dims = m.outputs()[0].dims;
    if (inferred) {
      ASSERT_EQ(dims.size(), 2u);
      EXPECT_EQ(dims[1].value, -1);  // seq * 8: follows from seq
    } else {
      ASSERT_EQ(dims.size(), 3u);
      EXPECT_EQ(dims[0].value, -1);
      EXPECT_EQ(dims[1].value, -1);
      EXPECT_EQ(dims[2].value, 8);  // the constant element: fixed
    }
    for (auto [batch, seq] : {std::pair<std::int64_t, std::int64_t>{2, 3}, {1, 7}, {3, 1}}) {
      std::vector<float> xs(static_cast<std::size_t>(batch * seq * 8)), ys(xs.size(), -7);
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 5) - 2;
      const Shape ys_shape = inferred ? Shape{batch, seq * 8} : Shape{batch, seq, 8};
      auto shapes = m.OutputShapes({{batch, seq, 4, 2}});
      ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
      EXPECT_EQ(shapes.value(), (std::vector<Shape>{ys_shape}));
      Status st = m.Execute({TensorRef::Of(xs.data(), {batch, seq, 4, 2})}, {TensorRef::Of(ys.data(), ys_shape)});
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], std::max(xs[i], 0.f)) << batch << "x" << seq << " " << i;
    }
  }
}

// A shape computed from a symbolic dim that a Reshape of a constant-shaped
// tensor cannot take fails at that signature, naming the node.
TEST(DynamicShapes, ShapeArithmeticErrorsNameTheNode) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, 4});
  x->dim_params() = {"batch", ""};
  g->inputs().push_back(x);
  ir::Value* s = g->AddValue("s");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Shape", "shape", {x}, {s});
  // y = reshape(w[2,32], shape(x)): only batch 16 has 64 elements.
  std::vector<float> w(64, 1.f);
  g->AddNode("Reshape", "reshape_w", {g->AddConstant("w", test::F32({2, 32}, w)), s}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_FALSE(model.ok());  // at the probe (64) the element counts differ
  EXPECT_NE(model.status().message().find("reshape_w"), std::string::npos) << model.status().message();
  EXPECT_NE(model.status().message().find("left symbolic"), std::string::npos) << model.status().message();
}

// Shape(x) is a model output and also feeds an Expand: the plan computes it
// at its own shapes (not the compiler's probe) for both.
TEST(DynamicShapes, ShapeWrittenAsAnOutputFeedsTheNodesAfterIt) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, 4});
  x->dim_params() = {"batch", ""};
  g->inputs().push_back(x);
  ir::Value* s = g->AddValue("s");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Shape", "shape", {x}, {s});
  g->AddNode("Expand", "expand", {g->AddConstant("row", test::F32({1, 4}, {1, 2, 3, 4})), s}, {y});
  g->outputs() = {s, y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::int64_t batch : {3, 1}) {
    std::vector<float> xs(static_cast<std::size_t>(batch) * 4, 0), ys(xs.size(), -7);
    std::vector<std::int64_t> ss(2, -7);
    Status st = (*model)->Execute({TensorRef::Of(xs.data(), {batch, 4})},
                                  {TensorRef::Of(ss.data(), {2}), TensorRef::Of(ys.data(), {batch, 4})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(ss, (std::vector<std::int64_t>{batch, 4}));
    for (std::size_t i = 0; i < ys.size(); ++i) EXPECT_EQ(ys[i], static_cast<float>(i % 4 + 1)) << batch;
  }
}

// y = x[:, s/2 : s] (start and end both from Shape): y's dim 1 follows the
// symbol, so Shape(y) is not folded at the probe; z = reshape(relu(y), shape(y)).
// The ends' INT64_MAX ("to the end", on the last axis) is left alone when the
// compiler perturbs bound values (no overflow).
TEST(DynamicShapes, SliceBetweenTwoComputedBoundsFollowsTheSymbol) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, -1, 3});
  x->dim_params() = {"", "seq", ""};
  g->inputs().push_back(x);
  auto v = [&](const char* n) { return g->AddValue(n); };
  ir::Value *s = v("s"), *h = v("h"), *starts = v("starts"), *ends = v("ends"), *y = v("y"), *r = v("r"),
            *ys = v("ys"), *z = v("z");
  ir::Node* shape = g->AddNode("Shape", "shape", {x}, {s});
  shape->SetAttr("start", ir::Attribute::Int(1));
  shape->SetAttr("end", ir::Attribute::Int(2));
  g->AddNode("Div", "half", {s, g->AddConstant("two", test::I64({1}, {2}))}, {h});
  g->AddNode("Concat", "starts", {h, g->AddConstant("one", test::I64({1}, {1}))}, {starts})->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Concat", "ends", {s, g->AddConstant("max", test::I64({1}, {INT64_MAX}))}, {ends})
      ->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Slice", "slice", {x, starts, ends, g->AddConstant("axes", test::I64({2}, {1, 2}))}, {y});
  g->AddNode("Relu", "relu", {y}, {r});
  g->AddNode("Shape", "shape_y", {y}, {ys});
  g->AddNode("Reshape", "reshape", {r, ys}, {z});
  g->outputs() = {z};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::int64_t seq : {10, 7, 64}) {
    const std::int64_t half = seq / 2, kept = seq - half;
    std::vector<float> xs(static_cast<std::size_t>(2 * seq * 3));
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) - 3;
    std::vector<float> zs(static_cast<std::size_t>(2 * kept * 2), -7);
    auto shapes = (*model)->OutputShapes({{2, seq, 3}});
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    ASSERT_EQ(shapes.value(), (std::vector<Shape>{{2, kept, 2}})) << seq;
    Status st = (*model)->Execute({TensorRef::Of(xs.data(), {2, seq, 3})}, {TensorRef::Of(zs.data(), {2, kept, 2})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t t = 0; t < kept; ++t)
        for (std::int64_t c = 0; c < 2; ++c) {
          const float want = std::max(xs[static_cast<std::size_t>((b * seq + half + t) * 3 + 1 + c)], 0.f);
          EXPECT_EQ(zs[static_cast<std::size_t>((b * kept + t) * 2 + c)], want) << seq << " " << b << " " << t;
        }
  }
}

// Queued runs keep their plan: with one plan cached, a second shape evicts
// the first while its run may still be queued.
TEST(DynamicShapes, AsyncRunsKeepTheirPlan) {
  test::TempDir dir;
  LoadOptions lo;
  lo.max_plans = 1;
  auto model = CompileAndLoad(Mlp(), dir, nullptr, {}, lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto stream = Stream::Create(lo.device);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  std::vector<std::vector<float>> xs, ys;
  const std::int64_t batches[] = {3, 9, 3, 9, 5};
  for (std::int64_t b : batches) {
    xs.push_back(Input(b));
    ys.emplace_back(static_cast<std::size_t>(b) * kOut, -7);
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::int64_t b = batches[i];
    Status st = (*model)->ExecuteAsync(**stream, {TensorRef::Of(xs[i].data(), {b, kIn})},
                                       {TensorRef::Of(ys[i].data(), {b, kOut})});
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_TRUE((*stream)->Synchronize().ok());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::vector<float> want = Expected(xs[i], batches[i]);
    for (std::size_t k = 0; k < want.size(); ++k) ASSERT_NEAR(ys[i][k], want[k], 1e-5f) << i << " " << k;
  }
  EXPECT_EQ((*model)->plan_stats().created, 5u);
  EXPECT_EQ((*model)->plan_stats().evicted, 4u);
}

// A range on the symbol ("x:1..16,4"): compiled at its largest extent, so
// the file's memory plan is the largest any batch needs, and every plan
// runs in one shared arena of that size. Extents outside are refused.
TEST(DynamicShapes, RangeBoundsTheArenaAllPlansShare) {
  test::TempDir dir;
  auto g = Mlp();
  g->symbols()["batch"] = ir::SymbolRange{1, 16};
  format::CompiledModel keep;
  CompileOptions unfused;  // matmul, add and relu stay apart: their outputs live in the arena
  unfused.passes.disabled.insert("fuse");
  auto model = CompileAndLoad(std::move(g), dir, &keep, unfused);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  // Compiled at batch 16: the matmul and add outputs (16x3 floats each,
  // live together) fit the arena.
  EXPECT_EQ(keep.graph->inputs()[0]->shape(), (Shape{16, kIn}));
  EXPECT_GE(keep.plan.arena_size, 2u * 16 * kOut * sizeof(float));
  EXPECT_EQ(m.inputs()[0].dims[0].min, 1);
  EXPECT_EQ(m.inputs()[0].dims[0].max, 16);
  for (std::int64_t batch : {1, 5, 16, 9}) {
    Status st = RunAt(m, batch);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const PlanStats s = m.plan_stats();
  EXPECT_EQ(s.created, 4u);
  EXPECT_EQ(s.arena_bytes, keep.plan.arena_size);  // one arena for all four plans
  Status st = RunAt(m, 17);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 0 'x' dim 0 (symbol 'batch') is 17, outside its range 1..16"), std::string::npos)
      << st.message();
  // Unbounded: each plan has its own arena.
  test::TempDir dir2;
  auto free_model = CompileAndLoad(Mlp(), dir2, nullptr, unfused);
  ASSERT_TRUE(free_model.ok()) << free_model.status().ToString();
  for (std::int64_t batch : {1, 5}) ASSERT_TRUE(RunAt(**free_model, batch).ok());
  const PlanStats fs = (*free_model)->plan_stats();
  // (at batch b the matmul and add outputs, b x 3 floats each, are live together)
  EXPECT_GE(fs.arena_bytes, 2u * (5 + 1) * kOut * sizeof(float));
}

// Gears: signatures planned at load and never evicted; with gears only, no
// other signature runs.
TEST(DynamicShapes, GearsArePlannedAtLoadAndKept) {
  {
    test::TempDir dir;
    auto g = Mlp();
    g->symbols()["batch"] = ir::SymbolRange{2, 8};
    g->gears() = {{{2, kIn}}, {{8, kIn}}};
    g->set_gears_only(true);
    auto model = CompileAndLoad(std::move(g), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    Model& m = **model;
    EXPECT_EQ(m.plan_stats().created, 2u);
    EXPECT_EQ(m.plan_stats().gears, 2u);
    for (int r = 0; r < 6; ++r) ASSERT_TRUE(RunAt(m, r % 2 ? 8 : 2).ok());
    EXPECT_EQ(m.plan_stats().created, 2u);  // no planning after load
    EXPECT_EQ(m.plan_stats().hits, 6u);
    Status st = RunAt(m, 5);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("input shapes [5,4] are not one of the gears the model was compiled with ([2,4] | [8,4])"),
              std::string::npos)
        << st.message();
  }
  {
    // Gears and a range: other extents plan as they come; the LRU bound
    // (1 here) never drops a gear.
    test::TempDir dir;
    auto g = Mlp();
    g->symbols()["batch"] = ir::SymbolRange{1, 8};
    g->gears() = {{{4, kIn}}};
    LoadOptions lo;
    lo.max_plans = 1;
    auto model = CompileAndLoad(std::move(g), dir, nullptr, {}, lo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    Model& m = **model;
    for (std::int64_t b : {1, 4, 3, 4, 5, 4}) ASSERT_TRUE(RunAt(m, b).ok()) << b;
    const PlanStats s = m.plan_stats();
    EXPECT_EQ(s.created, 4u);  // the gear, then 1, 3 and 5
    EXPECT_EQ(s.evicted, 2u);
    EXPECT_EQ(s.cached, 2u);
    EXPECT_EQ(s.hits, 3u);
  }
}

// MatMuls of plans made per signature, checked by loops at several extents
// (one of 1): a constant B, and two inputs (batched, as attention's Q K^T,
// with M and N both symbolic).
TEST(DynamicShapes, MatMulsMatchLoopsAtEveryExtent) {
  constexpr int kK = 4, kN = 3;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* q = g->AddValue("q", DType::kFloat32, {-1, -1, kK});
  q->dim_params() = {"batch", "m", ""};
  ir::Value* k = g->AddValue("k", DType::kFloat32, {-1, kK, -1});
  k->dim_params() = {"batch", "", "n"};
  g->inputs() = {q, k};
  std::vector<float> w;
  for (int i = 0; i < kK * kN; ++i) w.push_back(0.25f * static_cast<float>(i % 5) - 0.5f);
  ir::Value* qk = g->AddValue("qk");
  ir::Value* qw = g->AddValue("qw");
  g->AddNode("MatMul", "qk", {q, k}, {qk});
  g->AddNode("MatMul", "qw", {q, g->AddConstant("w", test::F32({kK, kN}, w))}, {qw});
  g->outputs() = {qk, qw};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (auto [b, m, n] : {std::tuple{1, 1, 1}, std::tuple{2, 5, 3}, std::tuple{3, 17, 9}, std::tuple{1, 64, 33}}) {
    std::vector<float> qs(static_cast<std::size_t>(b * m * kK)), ks(static_cast<std::size_t>(b * kK * n));
    for (std::size_t i = 0; i < qs.size(); ++i) qs[i] = std::sin(0.3f * static_cast<float>(i));
    for (std::size_t i = 0; i < ks.size(); ++i) ks[i] = std::cos(0.7f * static_cast<float>(i));
    std::vector<float> y1(static_cast<std::size_t>(b * m * n), -7), y2(static_cast<std::size_t>(b * m * kN), -7);
    Status st = (*model)->Execute({TensorRef::Of(qs.data(), {b, m, kK}), TensorRef::Of(ks.data(), {b, kK, n})},
                                  {TensorRef::Of(y1.data(), {b, m, n}), TensorRef::Of(y2.data(), {b, m, kN})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int bi = 0; bi < b; ++bi) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int t = 0; t < kK; ++t) s += double(qs[(bi * m + i) * kK + t]) * ks[(bi * kK + t) * n + j];
          ASSERT_NEAR(y1[(bi * m + i) * n + j], s, 1e-5) << b << "x" << m << "x" << n << " qk " << bi << "," << i << "," << j;
        }
        for (int j = 0; j < kN; ++j) {
          double s = 0;
          for (int t = 0; t < kK; ++t) s += double(qs[(bi * m + i) * kK + t]) * w[t * kN + j];
          ASSERT_NEAR(y2[(bi * m + i) * kN + j], s, 1e-5) << b << "x" << m << "x" << n << " qw " << bi << "," << i << "," << j;
        }
      }
    }
  }
}

// Runs of one model share memory (a bounded model's plans share one
// arena): a synchronous run after an ExecuteAsync still queued, or a run
// queued on another stream, waits for it. 12 MatMul+Tanh layers make the
// queued run long enough to overlap; results are checked by loops.
TEST(DynamicShapes, OverlappingRunsOfABoundedModelWaitForEachOther) {
  constexpr int kW = 32, kLayers = 12;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, kW});
  x->dim_params() = {"batch", ""};
  g->inputs().push_back(x);
  g->symbols()["batch"] = ir::SymbolRange{1, 256};
  std::vector<float> w(kW * kW);
  for (int i = 0; i < kW * kW; ++i) w[static_cast<std::size_t>(i)] = 0.05f * static_cast<float>((i * 7) % 11 - 5);
  ir::Value* cur = x;
  for (int l = 0; l < kLayers; ++l) {
    ir::Value* mm = g->AddValue("mm" + std::to_string(l));
    ir::Value* t = g->AddValue("t" + std::to_string(l));
    g->AddNode("MatMul", "matmul" + std::to_string(l), {cur, g->AddConstant("w" + std::to_string(l), test::F32({kW, kW}, w))}, {mm});
    g->AddNode("Tanh", "tanh" + std::to_string(l), {mm}, {t});
    cur = t;
  }
  g->outputs() = {cur};
  test::TempDir dir;
  CompileOptions unfused;
  unfused.passes.disabled.insert("fuse");
  auto model = CompileAndLoad(std::move(g), dir, nullptr, unfused);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto input = [](int batch, float phase) {
    std::vector<float> v(static_cast<std::size_t>(batch) * kW);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase);
    return v;
  };
  auto expected = [&](const std::vector<float>& in, int batch) {
    std::vector<float> a = in, b(a.size());
    for (int l = 0; l < kLayers; ++l) {
      for (int r = 0; r < batch; ++r) {
        for (int j = 0; j < kW; ++j) {
          float s = 0;
          for (int k = 0; k < kW; ++k) s += a[static_cast<std::size_t>(r * kW + k)] * w[static_cast<std::size_t>(k * kW + j)];
          b[static_cast<std::size_t>(r * kW + j)] = std::tanh(s);
        }
      }
      std::swap(a, b);
    }
    return a;
  };
  auto s1 = Stream::Create();
  auto s2 = Stream::Create();
  ASSERT_TRUE(s1.ok() && s2.ok());
  for (int round = 0; round < 5; ++round) {
    std::vector<float> xa = input(256, 0.1f * round), xb = input(255, 1.f + round), xc = input(200, 2.f + round);
    std::vector<float> ya(xa.size()), yb(xb.size()), yc(xc.size());
    ASSERT_TRUE((*model)->ExecuteAsync(**s1, {TensorRef::Of(xa.data(), {256, kW})}, {TensorRef::Of(ya.data(), {256, kW})}).ok());
    ASSERT_TRUE((*model)->ExecuteAsync(**s2, {TensorRef::Of(xc.data(), {200, kW})}, {TensorRef::Of(yc.data(), {200, kW})}).ok());
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(xb.data(), {255, kW})}, {TensorRef::Of(yb.data(), {255, kW})}).ok());
    ASSERT_TRUE((*s1)->Synchronize().ok());
    ASSERT_TRUE((*s2)->Synchronize().ok());
    for (auto [y, xin, batch] : {std::tuple{&ya, &xa, 256}, std::tuple{&yb, &xb, 255}, std::tuple{&yc, &xc, 200}}) {
      const std::vector<float> want = expected(*xin, batch);
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR((*y)[i], want[i], 1e-4) << "round " << round << " batch " << batch << " element " << i;
      }
    }
  }
}

// A gear the model cannot run fails the compile (naming the gear), not the
// load: x[batch, 4] reshaped to [8, -1] admits only batches that make 8 rows.
TEST(DynamicShapes, GearsAreCheckedWhenCompiling) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {-1, 4});
  x->dim_params() = {"batch", ""};
  g->inputs().push_back(x);
  g->symbols()["batch"] = ir::SymbolRange{1, 8};
  g->gears() = {{{2, 4}}, {{3, 4}}};
  ir::Value* y = g->AddValue("y");
  g->AddNode("Reshape", "reshape", {x, g->AddConstant("shape", test::I64({2}, {8, -1}))}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("gear 1 (input shapes [3,4])"), std::string::npos) << model.status().message();
  EXPECT_NE(model.status().message().find("reshape"), std::string::npos) << model.status().message();
}

// The fence between runs never hangs: a queued run that fails (an index
// out of range) still releases the next run, which succeeds; the failure
// surfaces at its stream's Synchronize.
TEST(DynamicShapes, AFailedQueuedRunDoesNotBlockTheNext) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* idx = g->AddValue("idx", DType::kInt64, {2});
  g->inputs().push_back(idx);
  ir::Value* y = g->AddValue("y");
  g->AddNode("Gather", "gather", {g->AddConstant("data", test::F32({3}, {10, 20, 30})), idx}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto s1 = Stream::Create();
  ASSERT_TRUE(s1.ok());
  std::vector<std::int64_t> bad = {0, 7}, good = {2, -3};
  std::vector<float> y1(2), y2(2);
  ASSERT_TRUE((*model)->ExecuteAsync(**s1, {TensorRef::Of(bad.data(), {2})}, {TensorRef::Of(y1.data(), {2})}).ok());
  Status st = (*model)->Execute({TensorRef::Of(good.data(), {2})}, {TensorRef::Of(y2.data(), {2})});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(y2, (std::vector<float>{30, 10}));
  Status failed = (*s1)->Synchronize();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("index 7"), std::string::npos) << failed.message();
  // Queued on a second stream after the failed one: released too.
  auto s2 = Stream::Create();
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE((*model)->ExecuteAsync(**s1, {TensorRef::Of(bad.data(), {2})}, {TensorRef::Of(y1.data(), {2})}).ok());
  ASSERT_TRUE((*model)->ExecuteAsync(**s2, {TensorRef::Of(good.data(), {2})}, {TensorRef::Of(y2.data(), {2})}).ok());
  EXPECT_TRUE((*s2)->Synchronize().ok());
  EXPECT_FALSE((*s1)->Synchronize().ok());
}

// Shape inputs (issue 13, value-dependent shapes): a Reshape whose target is
// a model input compiles without that value; each run's target values key
// its plan (a new value plans once, a repeated one finds its plan), the
// kernel reads them as constants, and the output shape follows them.
TEST(DynamicShapes, ShapeInputsKeyPlansByValue) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3, 4});
  ir::Value* target = g->AddValue("target", DType::kInt64, {2});
  g->inputs() = {x, target};
  ir::Value* r = g->AddValue("r");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Reshape", "reshape", {x, target}, {r});
  g->AddNode("Relu", "relu", {r}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  ASSERT_EQ(m.inputs().size(), 2u);
  EXPECT_FALSE(m.inputs()[0].shape_input);
  EXPECT_TRUE(m.inputs()[1].shape_input);
  EXPECT_EQ(m.outputs()[0].shape, (Shape{-1, -1}));  // known per run
  std::vector<float> xs(24);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) - 3;
  // Shapes alone cannot tell the outputs' shapes: refused, naming the input.
  auto by_shape = m.OutputShapes({{2, 3, 4}, {2}});
  ASSERT_FALSE(by_shape.ok());
  EXPECT_NE(by_shape.status().message().find("input 1 'target'"), std::string::npos) << by_shape.status().message();
  struct Case {
    std::vector<std::int64_t> target;
    Shape want;
  };
  const Case cases[] = {{{6, 4}, {6, 4}}, {{4, -1}, {4, 6}}, {{6, 4}, {6, 4}}, {{0, 12}, {2, 12}}, {{4, -1}, {4, 6}}};
  for (const Case& c : cases) {
    std::vector<std::int64_t> t = c.target;
    const std::vector<TensorRef> ins = {TensorRef::Of(xs.data(), {2, 3, 4}), TensorRef::Of(t.data(), {2})};
    auto shapes = m.OutputShapesFor(ins);
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    EXPECT_EQ(shapes.value(), std::vector<Shape>{c.want});
    std::vector<float> ys(24, -7);
    Status st = m.Execute(ins, {TensorRef::Of(ys.data(), c.want)});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(m.output_shape(0), c.want);
    for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], std::max(xs[i], 0.f)) << i;
  }
  // Three distinct targets: three plans, the repeats found theirs.
  EXPECT_EQ(m.plan_stats().created, 3u);
  // A target the input cannot take fails at its plan, naming the node and
  // the values.
  std::vector<std::int64_t> bad = {5, 5};
  std::vector<float> ys(25);
  Status st = m.Execute({TensorRef::Of(xs.data(), {2, 3, 4}), TensorRef::Of(bad.data(), {2})},
                        {TensorRef::Of(ys.data(), {5, 5})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reshape"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'target' = [5, 5]"), std::string::npos) << st.message();
}

// Shape inputs through shape arithmetic (Concat, Cast) into Expand, and a
// scalar input as Range's limit: the arithmetic is evaluated per plan, and
// runs with the same values reuse it. Expected values by hand.
TEST(DynamicShapes, ShapeInputsThroughArithmetic) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* rows = g->AddValue("rows", DType::kInt32, {1});
  ir::Value* limit = g->AddValue("limit", DType::kInt64, {});
  g->inputs() = {rows, limit};
  ir::Value* rows64 = g->AddValue("rows64");
  ir::Value* target = g->AddValue("target");
  ir::Value* e = g->AddValue("e");
  ir::Value* rg = g->AddValue("rg");
  g->AddNode("Cast", "cast", {rows}, {rows64})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Concat", "concat", {rows64, g->AddConstant("two", test::I64({1}, {2}))}, {target})
      ->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Expand", "expand", {g->AddConstant("row", test::F32({1, 2}, {1.5f, -2.f})), target}, {e});
  g->AddNode("Range", "range", {g->AddConstant("zero", test::I64({}, {0})), limit,
                                g->AddConstant("three", test::I64({}, {3}))}, {rg});
  g->outputs() = {e, rg};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_TRUE(m.inputs()[0].shape_input);
  EXPECT_TRUE(m.inputs()[1].shape_input);
  for (auto [n, lim] : {std::pair<std::int32_t, std::int64_t>{3, 10}, {1, 2}, {3, 10}, {4, 0}}) {
    std::vector<std::int32_t> rv = {n};
    std::vector<std::int64_t> lv = {lim};
    const std::vector<TensorRef> ins = {TensorRef::Of(rv.data(), {1}), TensorRef::Of(lv.data(), {})};
    auto shapes = m.OutputShapesFor(ins);
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    const std::int64_t count = (lim + 2) / 3;
    ASSERT_EQ(shapes.value(), (std::vector<Shape>{{n, 2}, {count}}));
    std::vector<float> es(static_cast<std::size_t>(n) * 2, -7);
    std::vector<std::int64_t> rs(static_cast<std::size_t>(count), -7);
    Status st = m.Execute(ins, {TensorRef::Of(es.data(), {n, 2}), TensorRef::Of(rs.data(), {count})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (std::int32_t r = 0; r < n; ++r) {
      EXPECT_EQ(es[static_cast<std::size_t>(r) * 2], 1.5f);
      EXPECT_EQ(es[static_cast<std::size_t>(r) * 2 + 1], -2.f);
    }
    for (std::int64_t i = 0; i < count; ++i) EXPECT_EQ(rs[static_cast<std::size_t>(i)], 3 * i);
  }
  EXPECT_EQ(m.plan_stats().created, 3u);
}

// Everything computed from dims a shape input decides is re-inferred per
// plan, never folded at the compile-time probe (extent 1): z = reshape(x, t)
// sliced to rows 2..4, then Shape(z)[:1] feeds ConstantOfShape. At the probe
// z has 0 rows for every start >= 1, so folding would freeze sh = [0].
TEST(DynamicShapes, ValuesAfterShapeInputsAreNotFoldedAtTheProbe) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3, 4});
  ir::Value* t = g->AddValue("t", DType::kInt64, {2});
  g->inputs() = {x, t};
  ir::Value *r = g->AddValue("r"), *z = g->AddValue("z"), *sh = g->AddValue("sh"), *o = g->AddValue("o");
  g->AddNode("Reshape", "reshape", {x, t}, {r});
  g->AddNode("Slice", "slice", {r, g->AddConstant("st", test::I64({1}, {2})), g->AddConstant("en", test::I64({1}, {4})),
                                g->AddConstant("ax", test::I64({1}, {0}))}, {z});
  g->AddNode("Shape", "shape", {z}, {sh})->SetAttr("end", ir::Attribute::Int(1));
  g->AddNode("ConstantOfShape", "fill", {sh}, {o})->SetAttr("value", ir::Attribute::Tensor(test::F32({1}, {5.f})));
  g->outputs() = {z, sh, o};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  std::vector<float> xs(24);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{6, 4}, {3, 8}, {12, 2}}) {
    std::vector<std::int64_t> tv = {rows, cols};
    const std::int64_t kept = std::min<std::int64_t>(rows, 4) - 2;
    std::vector<float> zs(static_cast<std::size_t>(kept * cols), -7), os(static_cast<std::size_t>(kept), -7);
    std::vector<std::int64_t> shv(1, -7);
    Status st = m.Execute({TensorRef::Of(xs.data(), {2, 3, 4}), TensorRef::Of(tv.data(), {2})},
                          {TensorRef::Of(zs.data(), {kept, cols}), TensorRef::Of(shv.data(), {1}),
                           TensorRef::Of(os.data(), {kept})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(shv[0], kept) << rows;
    for (float v : os) EXPECT_EQ(v, 5.f);
    for (std::size_t i = 0; i < zs.size(); ++i) EXPECT_EQ(zs[i], static_cast<float>(2 * cols + i)) << rows;
  }
}

// What cannot be compiled with dims open to values is refused, naming the
// node and the shape input: Squeeze without axes (its output rank would
// depend on the values), a MatMul needing particular extents.
TEST(DynamicShapes, ShapeInputLimitsAreNamed) {
  auto make = [](const char* op) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 12});
    ir::Value* t = g->AddValue("t", DType::kInt64, {2});
    g->inputs() = {x, t};
    ir::Value *r = g->AddValue("r"), *y = g->AddValue("y");
    g->AddNode("Reshape", "reshape", {x, t}, {r});
    if (std::string(op) == "Squeeze") {
      g->AddNode("Squeeze", "squeeze", {r}, {y});
    } else {
      g->AddNode("MatMul", "matmul", {r, g->AddConstant("w", test::F32({6, 2}, std::vector<float>(12, 1.f)))}, {y});
    }
    g->outputs() = {y};
    return g;
  };
  test::TempDir dir;
  auto squeeze = CompileAndLoad(make("Squeeze"), dir);
  ASSERT_FALSE(squeeze.ok());
  EXPECT_NE(squeeze.status().message().find("Squeeze node 'squeeze'"), std::string::npos) << squeeze.status().message();
  EXPECT_NE(squeeze.status().message().find("give Squeeze its axes"), std::string::npos) << squeeze.status().message();
  auto matmul = CompileAndLoad(make("MatMul"), dir);
  ASSERT_FALSE(matmul.ok());
  EXPECT_NE(matmul.status().message().find("MatMul node 'matmul'"), std::string::npos) << matmul.status().message();
  EXPECT_NE(matmul.status().message().find("values of model input(s) 't'"), std::string::npos)
      << matmul.status().message();
}

// A value computed from a large input is data, not a shape input: a Reshape
// target made from it has no bound, so it runs on a provisional one (the
// dims it resolves to), raised by the runs that exceed it. y = x[2, 3]
// reshaped to [max(big), -1]: [2, 3], [3, 2], [6, 1], [1, 6] by hand; 4
// cannot divide 6 (an error naming the Reshape).
TEST(DynamicShapes, ShapeFromLargeInputDataRunsOnAProvisionalBound) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3});
  ir::Value* big = g->AddValue("big", DType::kInt64, {20000});
  g->inputs() = {x, big};
  ir::Value* top = g->AddValue("top");
  ir::Value* target = g->AddValue("target");
  ir::Value* y = g->AddValue("y");
  g->AddNode("ReduceMax", "reduce", {big}, {top});  // keepdims: [1]
  g->AddNode("Concat", "concat", {top, g->AddConstant("minus1", test::I64({1}, {-1}))}, {target})
      ->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Reshape", "reshape", {x, target}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  std::vector<float> xv = {1, 2, 3, 4, 5, 6};
  for (std::int64_t rows : {2, 3, 6, 1, 4}) {
    std::vector<std::int64_t> bv(20000, 0);
    bv[123] = rows;
    const std::vector<TensorRef> ins = {TensorRef::Of(xv.data(), {2, 3}), TensorRef::Of(bv.data(), {20000})};
    Status st;
    std::vector<float> yv;
    for (int attempt = 0; attempt < 4; ++attempt) {  // the bound may grow: allocate again
      auto shapes = m.OutputShapesFor(ins);
      ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
      yv.assign(static_cast<std::size_t>(NumElements(shapes.value()[0])), -1.f);
      st = m.Execute(ins, {TensorRef::Of(yv.data(), shapes.value()[0])});
      if (st.ok()) break;
    }
    if (rows == 4) {
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("Reshape node 'reshape'"), std::string::npos) << st.message();
      continue;
    }
    ASSERT_TRUE(st.ok()) << rows << ": " << st.ToString();
    ASSERT_EQ(m.output_shape(0), (Shape{rows, 6 / rows}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(yv[static_cast<std::size_t>(i)], xv[static_cast<std::size_t>(i)]) << rows;
  }
}

// Plans of one model share what their kernels prepare. y = conv(x, w) and
// zz = -z: with x [1,4,8,8] static and z [batch] symbolic, the convolution
// is the model's static part: its kernel is made by the first plan and
// reused by the others (runtime::StaticKernelCache; on the CPU device),
// also after the plan that made it is evicted (max_plans 1). With x symbolic, plans at other
// image sizes make their own convolution kernels and share the weights it
// repacks (device::PrepackCache) where oneDNN wants the same layout.
// Results against direct loops.
TEST(DynamicShapes, PlansShareTheStaticPartsKernelsAndRepackedWeights) {
  constexpr int kC = 4;
  // Kernels are shared on the CPU device only (a device kernel may hold
  // its plan's device copies of constants).
  const bool cpu = test::DefaultDeviceMapsHostMemory();
  std::vector<float> w(kC * kC * 9);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * static_cast<float>(static_cast<int>(i % 11) - 5);
  auto graph = [&](bool symbolic_image) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {1, kC, symbolic_image ? -1 : 8, symbolic_image ? -1 : 8});
    if (symbolic_image) x->dim_params() = {"", "", "h", "w"};
    ir::Value* z = g->AddValue("z", DType::kFloat32, {-1});
    z->dim_params() = {"batch"};
    g->inputs() = {x, z};
    ir::Value *y = g->AddValue("y"), *zz = g->AddValue("zz");
    ir::Node* conv = g->AddNode("Conv", "conv", {x, g->AddConstant("w", test::F32({kC, kC, 3, 3}, w))}, {y});
    conv->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
    conv->SetAttr("kernel_shape", ir::Attribute::Ints({3, 3}));
    g->AddNode("Neg", "neg", {z}, {zz});
    g->outputs() = {y, zz};
    return g;
  };
  auto run = [&](Model& m, std::int64_t h, std::int64_t batch) -> Status {
    std::vector<float> x(static_cast<std::size_t>(kC * h * h)), y(x.size(), -7), z(static_cast<std::size_t>(batch), 1),
        zz(z.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    KILN_RETURN_IF_ERROR(m.Execute({TensorRef::Of(x.data(), {1, kC, h, h}), TensorRef::Of(z.data(), {batch})},
                                   {TensorRef::Of(y.data(), {1, kC, h, h}), TensorRef::Of(zz.data(), {batch})}));
    for (int o = 0; o < kC; ++o) {
      for (std::int64_t r = 0; r < h; ++r) {
        for (std::int64_t c = 0; c < h; ++c) {
          float want = 0;
          for (int i = 0; i < kC; ++i) {
            for (int kr = 0; kr < 3; ++kr) {
              for (int kc = 0; kc < 3; ++kc) {
                const std::int64_t rr = r + kr - 1, cc = c + kc - 1;
                if (rr < 0 || rr >= h || cc < 0 || cc >= h) continue;
                want += x[static_cast<std::size_t>((i * h + rr) * h + cc)] * w[static_cast<std::size_t>(((o * kC + i) * 3 + kr) * 3 + kc)];
              }
            }
          }
          const float got = y[static_cast<std::size_t>((o * h + r) * h + c)];
          if (std::fabs(got - want) > 1e-4f) return Error(StatusCode::kInternal, "h ", h, " y[", o, ",", r, ",", c, "] = ", got, ", expected ", want);
        }
      }
    }
    return Status::Ok();
  };
  {
    test::TempDir dir;
    auto model = CompileAndLoad(graph(false), dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    for (std::int64_t batch : {2, 3, 5}) ASSERT_TRUE(run(**model, 8, batch).ok());
    const PlanStats s = (*model)->plan_stats();
    EXPECT_EQ(s.created, 3u);
    if (cpu) {
      EXPECT_EQ(s.static_kernels_made, 1u);  // the convolution's, for three plans
      EXPECT_EQ(s.static_kernels_shared, 2u);
      EXPECT_EQ(s.packed_weights_made, 1u);  // packed once, by the one kernel
      EXPECT_EQ(s.packed_weights_shared, 0u);
    } else {  // each plan makes its kernels; they share the packed weights
      EXPECT_EQ(s.static_kernels_made + s.static_kernels_shared, 0u);
      EXPECT_EQ(s.packed_weights_made, 1u);
      EXPECT_EQ(s.packed_weights_shared, 2u);
    }
  }
  {
    // One plan held at a time: each new batch evicts the last plan, whose
    // graph the shared kernel was made from.
    test::TempDir dir;
    LoadOptions lo;
    lo.max_plans = 1;
    auto model = CompileAndLoad(graph(false), dir, nullptr, {}, lo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    for (std::int64_t batch : {2, 3, 5, 2}) {
      Status st = run(**model, 8, batch);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    const PlanStats s = (*model)->plan_stats();
    EXPECT_EQ(s.created, 4u);
    EXPECT_EQ(s.evicted, 3u);
    EXPECT_EQ(s.static_kernels_made, cpu ? 1u : 0u);
    EXPECT_EQ(s.static_kernels_shared, cpu ? 3u : 0u);
  }
  test::TempDir dir;
  auto model = CompileAndLoad(graph(true), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (std::int64_t h : {8, 13, 30}) {
    Status st = run(**model, h, 2);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const PlanStats s = (*model)->plan_stats();
  EXPECT_EQ(s.packed_weights_made + s.packed_weights_shared, 3u);
}

}  // namespace
}  // namespace kiln
