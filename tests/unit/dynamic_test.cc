// Data-dependent extents (NonZero, NonMaxSuppression and the ops after them):
// compiled, written to a .kiln, loaded and run several times with inputs that
// change the extents. Expected values are derived by hand.
#include <gtest/gtest.h>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "test_util.h"
#include "node_runner.h"

#include <array>
#include <cmath>
#include <random>

namespace kiln {
namespace {

using test::CompileAndLoad;

// x[2,3] -> NonZero -> idx[2,<=6] -> Transpose -> GatherND(x) -> Mul 2 -> y[<=6]
//                                                        \-> ReduceSum -> s[1] (static)
std::unique_ptr<ir::Graph> NonZeroChain() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3});
  g->inputs().push_back(x);
  ir::Value* idx = g->AddValue("idx");
  ir::Value* idx_t = g->AddValue("idx_t");
  ir::Value* vals = g->AddValue("vals");
  ir::Value* y = g->AddValue("y");
  ir::Value* s = g->AddValue("s");
  g->AddNode("NonZero", "nz", {x}, {idx});
  g->AddNode("Transpose", "tr", {idx}, {idx_t})->SetAttr("perm", ir::Attribute::Ints({1, 0}));
  g->AddNode("GatherND", "gnd", {x, idx_t}, {vals});
  g->AddNode("Mul", "mul", {vals, g->AddConstant("two", test::F32({}, {2}))}, {y});
  g->AddNode("ReduceSum", "sum", {y}, {s})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->outputs() = {idx, y, s};
  return g;
}

TEST(Dynamic, ExtentsFollowTheDataOnEveryRun) {
  test::TempDir dir;
  auto model = CompileAndLoad(NonZeroChain(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  ASSERT_EQ(m.outputs().size(), 3u);
  EXPECT_EQ(m.outputs()[0].shape, (Shape{2, 6}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 0b10u);
  EXPECT_EQ(m.outputs()[1].shape, (Shape{6}));
  EXPECT_EQ(m.outputs()[1].dynamic_dims, 0b1u);
  EXPECT_EQ(m.outputs()[2].shape, (Shape{1}));
  EXPECT_EQ(m.outputs()[2].dynamic_dims, 0u);

  std::vector<std::int64_t> idx(12, -7);
  std::vector<float> y(6, -7), s(1, -7);
  auto run = [&](std::vector<float> x) {
    return m.Execute({TensorRef::Of(x.data(), {2, 3})},
                     {TensorRef::Of(idx.data(), {2, 6}), TensorRef::Of(y.data(), {6}), TensorRef::Of(s.data(), {1})});
  };
  // Non-zeros at (0,1), (1,0), (1,2): idx rows are the row and column lists.
  ASSERT_TRUE(run({0, 1, 0, 2, 0, 3}).ok());
  EXPECT_EQ(m.output_shape(0), (Shape{2, 3}));
  EXPECT_EQ(m.output_shape(1), (Shape{3}));
  EXPECT_EQ(m.output_shape(2), (Shape{1}));
  EXPECT_EQ(std::vector<std::int64_t>(idx.begin(), idx.begin() + 6), (std::vector<std::int64_t>{0, 1, 1, 1, 0, 2}));
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 3), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(s[0], 12.f);
  // Nothing non-zero (-0 counts as zero): empty extents, sum 0.
  ASSERT_TRUE(run({0, -0.f, 0, 0, 0, 0}).ok());
  EXPECT_EQ(m.output_shape(0), (Shape{2, 0}));
  EXPECT_EQ(m.output_shape(1), (Shape{0}));
  EXPECT_EQ(s[0], 0.f);
  // Everything non-zero: the bound itself.
  ASSERT_TRUE(run({1, 2, 3, 4, 5, 6}).ok());
  EXPECT_EQ(m.output_shape(1), (Shape{6}));
  EXPECT_EQ(idx, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 1, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(y, (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(s[0], 42.f);
  // Back to a shape seen before (its kernels are cached): same answers.
  ASSERT_TRUE(run({0, 1, 0, 2, 0, 3}).ok());
  EXPECT_EQ(m.output_shape(1), (Shape{3}));
  EXPECT_EQ(s[0], 12.f);
}

TEST(Dynamic, AsyncRunsReportShapesAfterSynchronize) {
  test::TempDir dir;
  auto model = CompileAndLoad(NonZeroChain(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  std::vector<float> x = {5, 0, 0, 0, 0, 7};
  std::vector<std::int64_t> idx(12);
  std::vector<float> y(6), s(1);
  ASSERT_TRUE((*model)
                  ->ExecuteAsync(**stream, {TensorRef::Of(x.data(), {2, 3})},
                                 {TensorRef::Of(idx.data(), {2, 6}), TensorRef::Of(y.data(), {6}),
                                  TensorRef::Of(s.data(), {1})})
                  .ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ((*model)->output_shape(1), (Shape{2}));
  EXPECT_EQ(y[0], 10.f);
  EXPECT_EQ(y[1], 14.f);
  EXPECT_EQ(s[0], 24.f);
}

TEST(Dynamic, ZeroBoundsScalarsAndEmptyInputs) {
  // NMS without max_output_boxes_per_class selects nothing: a static [0,3];
  // NonZero of a scalar is [1, n] (ONNX Runtime, ONNX reference); of an empty
  // [0,3] input a static [2,0].
  auto g = std::make_unique<ir::Graph>();
  ir::Value* boxes = g->AddValue("boxes", DType::kFloat32, {1, 2, 4});
  ir::Value* scores = g->AddValue("scores", DType::kFloat32, {1, 1, 2});
  ir::Value* s = g->AddValue("s", DType::kFloat32, {});
  ir::Value* e = g->AddValue("e", DType::kFloat32, {0, 3});
  g->inputs() = {boxes, scores, s, e};
  ir::Value* sel = g->AddValue("sel");
  ir::Value* nzs = g->AddValue("nzs");
  ir::Value* nze = g->AddValue("nze");
  g->AddNode("NonMaxSuppression", "nms", {boxes, scores}, {sel});
  g->AddNode("NonZero", "nz_scalar", {s}, {nzs});
  g->AddNode("NonZero", "nz_empty", {e}, {nze});
  g->outputs() = {sel, nzs, nze};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{0, 3}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 0u);
  EXPECT_EQ(m.outputs()[1].shape, (Shape{1, 1}));
  EXPECT_EQ(m.outputs()[1].dynamic_dims, 0b10u);
  EXPECT_EQ(m.outputs()[2].shape, (Shape{2, 0}));
  std::vector<float> b = {0, 0, 1, 1, 0, 0, 1, 1}, sc = {0.9f, 0.8f};
  std::int64_t dummy = -1, nzs_out = -1;
  float fdummy = 0;
  for (float sv : {3.f, 0.f}) {
    Status st = m.Execute({TensorRef::Of(b.data(), {1, 2, 4}), TensorRef::Of(sc.data(), {1, 1, 2}),
                           TensorRef::Of(&sv, {}), TensorRef::Of(&fdummy, {0, 3})},
                          {TensorRef::Of(&dummy, {0, 3}), TensorRef::Of(&nzs_out, {1, 1}),
                           TensorRef::Of(&dummy, {2, 0})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(m.output_shape(1), (Shape{1, sv != 0 ? 1 : 0}));
    if (sv != 0) EXPECT_EQ(nzs_out, 0);
  }
}

TEST(Dynamic, EmptyExtentsReachGemmAndSliceWithoutError) {
  // x[2,3] -> NonZero -> [2,<=6] -> Transpose -> Cast float -> Gemm with
  // W[2,1] = [[1],[10]] -> [<=6,1] (row*1 + col*10 per non-zero); and
  // NonZero -> Slice [:, 0:1] -> [2,<=1] (the first non-zero's coordinates).
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3});
  g->inputs().push_back(x);
  ir::Value* idx = g->AddValue("idx");
  ir::Value* tr = g->AddValue("tr");
  ir::Value* f = g->AddValue("f");
  ir::Value* y = g->AddValue("y");
  ir::Value* first = g->AddValue("first");
  g->AddNode("NonZero", "nz", {x}, {idx});
  g->AddNode("Transpose", "tr", {idx}, {tr})->SetAttr("perm", ir::Attribute::Ints({1, 0}));
  g->AddNode("Cast", "cast", {tr}, {f})->SetAttr("to", ir::Attribute::Int(static_cast<int>(DType::kFloat32)));
  g->AddNode("Gemm", "gemm", {f, g->AddConstant("w", test::F32({2, 1}, {1, 10}))}, {y});
  g->AddNode("Slice", "first_nz",
             {idx, g->AddConstant("st", test::I64({1}, {0})), g->AddConstant("en", test::I64({1}, {1})),
              g->AddConstant("ax", test::I64({1}, {1}))},
             {first});
  g->outputs() = {y, first};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 0b1u);
  EXPECT_EQ(m.outputs()[1].shape, (Shape{2, 1}));
  EXPECT_EQ(m.outputs()[1].dynamic_dims, 0b10u);  // 0 or 1 columns
  std::vector<float> yv(6, -1);
  std::vector<std::int64_t> fv(2, -1);
  auto run = [&](std::vector<float> xv) {
    return m.Execute({TensorRef::Of(xv.data(), {2, 3})},
                     {TensorRef::Of(yv.data(), {6, 1}), TensorRef::Of(fv.data(), {2, 1})});
  };
  Status st = run({0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(m.output_shape(0), (Shape{0, 1}));
  EXPECT_EQ(m.output_shape(1), (Shape{2, 0}));
  st = run({0, 0, 0, 0, 0, 7});  // (1, 2)
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(m.output_shape(0), (Shape{1, 1}));
  EXPECT_EQ(yv[0], 21.f);
  EXPECT_EQ(m.output_shape(1), (Shape{2, 1}));
  EXPECT_EQ(fv, (std::vector<std::int64_t>{1, 2}));
}

// x[4] -> NonZero -> idx[1,<=4] -> Shape -> shp (upper bound [1,4]) -> [op
// with a constant ->] ConstantOfShape -> y.
// `const_first`: op(k, shp) instead of op(shp, k).
std::unique_ptr<ir::Graph> FillOfNonZeroShape(const std::string& op = "", std::vector<std::int64_t> k = {},
                                              bool const_first = false) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {4});
  g->inputs().push_back(x);
  ir::Value* idx = g->AddValue("idx");
  ir::Value* shp = g->AddValue("shp");
  ir::Value* y = g->AddValue("y");
  g->AddNode("NonZero", "nz", {x}, {idx});
  g->AddNode("Shape", "shape", {idx}, {shp});
  if (!op.empty()) {
    ir::Value* d = g->AddValue("d");
    ir::Value* kv = g->AddConstant("k", test::I64({2}, std::move(k)));
    g->AddNode(op, "arith", {const_first ? kv : shp, const_first ? shp : kv}, {d});
    shp = d;
  }
  g->AddNode("ConstantOfShape", "fill", {shp}, {y});
  g->outputs() = {y};
  test::SetLatestVersions(*g);
  return g;
}

TEST(Dynamic, ConstantOfShapeOfADataDependentExtentRunsAtEachRunsShape) {
  // The shape of NonZero's output is data with upper bounds [1,4]: the fill
  // is planned for them and each run reads the actual shape.
  test::TempDir dir;
  auto model = CompileAndLoad(FillOfNonZeroShape(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{1, 4}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 0b11u);
  std::vector<float> y(4, -1);
  for (const auto& [x, n] : std::vector<std::pair<std::vector<float>, std::int64_t>>{
           {{0, 3, 0, 5}, 2}, {{1, 1, 1, 1}, 4}, {{0, 0, 0, 0}, 0}, {{0, 0, 7, 0}, 1}}) {
    ASSERT_TRUE(m.Execute({TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {1, 4})}).ok());
    EXPECT_EQ(m.output_shape(0), (Shape{1, n}));
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], 0.0f);
  }
}

// Runs `m` as a caller of a model whose output bounds may grow should:
// outputs allocated with OutputShapesFor, and when the run raised a
// provisional bound past them, allocated again and run again. Returns the
// output and the number of runs it took.
struct ProvisionalRun {
  Status status;
  std::vector<float> y;
  int runs = 0;
  std::string first_error;
};
ProvisionalRun RunGrowingOutputs(Model& m, std::vector<float>& x) {
  ProvisionalRun r;
  std::vector<TensorRef> ins = {TensorRef::Of(x.data(), {static_cast<std::int64_t>(x.size())})};
  for (;;) {
    auto shapes = m.OutputShapesFor(ins);
    if (!shapes.ok()) {
      r.status = shapes.status();
      return r;
    }
    r.y.assign(static_cast<std::size_t>(NumElements(shapes.value()[0])), -1.f);
    r.status = m.Execute(ins, {TensorRef::Of(r.y.data(), shapes.value()[0])});
    ++r.runs;
    if (r.status.ok() || r.runs > 8) return r;
    if (r.first_error.empty()) r.first_error = r.status.message();
    auto again = m.OutputShapesFor(ins);
    if (!again.ok() || again.value() == shapes.value()) return r;
  }
}

TEST(Dynamic, ShapeArithmeticWithoutAnUpperBoundRunsOnAProvisionalBound) {
  // [8, 8] - shp shrinks as the extent grows: no bound is proven, so the
  // fill gets a provisional one ([1, 1]); a run above it raises it to the
  // run's values (two elements: exactly those) and runs again. y is
  // ConstantOfShape([8 - 1, 8 - n]) for n non-zeros of x: zeros.
  test::TempDir dir;
  auto model = CompileAndLoad(FillOfNonZeroShape("Sub", {8, 8}, true), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  // No bound is known before a run: unbounded, data-dependent.
  ASSERT_EQ(m.outputs()[0].dims.size(), 2u);
  for (const DimInfo& d : m.outputs()[0].dims) EXPECT_EQ(d.max, -1);
  EXPECT_EQ(m.outputs()[0].shape, (Shape{-1, -1}));
  std::uint64_t raises = 0;
  for (const auto& [x0, n, raise] : std::vector<std::tuple<std::vector<float>, std::int64_t, bool>>{
           {{0, 3, 0, 5}, 2, true}, {{1, 1, 1, 1}, 4, false}, {{0, 0, 0, 0}, 0, true}, {{0, 0, 7, 0}, 1, false}}) {
    std::vector<float> x = x0;
    ProvisionalRun r = RunGrowingOutputs(m, x);
    ASSERT_TRUE(r.status.ok()) << n << ": " << r.status.ToString();
    EXPECT_EQ(r.runs, raise ? 2 : 1) << n;
    raises += raise;
    EXPECT_EQ(m.plan_stats().bound_raises, raises) << n;
    if (raise) {  // the first run's outputs were allocated for the old bound
      EXPECT_NE(r.first_error.find("provisional bound"), std::string::npos) << r.first_error;
      EXPECT_NE(r.first_error.find("OutputShapesFor"), std::string::npos) << r.first_error;
    }
    ASSERT_EQ(m.output_shape(0), (Shape{7, 8 - n}));
    for (std::int64_t i = 0; i < 7 * (8 - n); ++i) EXPECT_EQ(r.y[static_cast<std::size_t>(i)], 0.f) << n;
  }
  // Execute alone: the run raises the bound past the outputs it was given
  // and fails, naming what to do; OutputShapesFor then gives the raised one.
  test::TempDir dir2;
  auto again = CompileAndLoad(FillOfNonZeroShape("Sub", {8, 8}, true), dir2);
  ASSERT_TRUE(again.ok());
  std::vector<float> x = {0, 0, 0, 0}, y(56, -1.f);
  Status st = again.value()->Execute({TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {1, 1})});
  ASSERT_FALSE(st.ok());
  auto shapes = again.value()->OutputShapesFor({TensorRef::Of(x.data(), {4})});
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(shapes.value()[0], (Shape{7, 8}));
}

TEST(Dynamic, RangeUpToTheMaximumOfAFloatTensor) {
  // Range(0, int(max(x))) of x[100] (too large to be a shape input): the
  // limit has no bound, so it gets a provisional one (1); a larger limit
  // raises it to max(limit, twice the old bound) and runs again. Limits 3,
  // 10, 11, 2, 15, 40 raise the bound to 3, 10, 20, -, -, 40.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {100});
  g->inputs().push_back(x);
  ir::Value* mx = g->AddValue("mx");
  ir::Value* lim = g->AddValue("lim");
  ir::Value* r = g->AddValue("r");
  ir::Value* y = g->AddValue("y");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(0));
  g->AddNode("Cast", "as_int", {mx}, {lim})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Range", "range", {g->AddConstant("zero", test::I64({}, {0})), lim, g->AddConstant("one", test::I64({}, {1}))},
             {r});
  g->AddNode("Cast", "as_float", {r}, {y})->SetAttr("to", ir::Attribute::Int(1));
  g->outputs() = {y};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].dims.at(0).max, -1);
  std::uint64_t raises = 0;
  for (const auto& [limit, raise] : std::vector<std::pair<float, bool>>{
           {3.5f, true}, {10.f, true}, {11.f, true}, {2.f, false}, {15.f, false}, {40.f, true}, {0.f, false}}) {
    std::vector<float> x(100, -3.f);
    x[37] = limit;
    ProvisionalRun run = RunGrowingOutputs(m, x);
    ASSERT_TRUE(run.status.ok()) << limit << ": " << run.status.ToString();
    raises += raise;
    EXPECT_EQ(m.plan_stats().bound_raises, raises) << limit;
    const auto n = static_cast<std::int64_t>(limit);
    ASSERT_EQ(m.output_shape(0), (Shape{n})) << limit;
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(run.y[static_cast<std::size_t>(i)], static_cast<float>(i));
  }
  // The bound is 40 now: one plan made for it serves these runs.
  std::vector<float> zeros(100, 0.f);
  auto shapes = m.OutputShapesFor({TensorRef::Of(zeros.data(), {100})});
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(shapes.value()[0], (Shape{40}));
  // A queued run above the bound fails on its stream (a run cannot be
  // repeated there); the next run's plan has the raised bound (100: twice
  // 40 is less than the run's 100).
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  std::vector<float> xa(100, -3.f), ya(40, -1.f);
  xa[5] = 100.f;
  Status queued = m.ExecuteAsync(**stream, {TensorRef::Of(xa.data(), {100})}, {TensorRef::Of(ya.data(), {40})});
  Status done = (*stream)->Synchronize();
  EXPECT_FALSE(queued.ok() && done.ok());
  EXPECT_NE((queued.ok() ? done : queued).message().find("provisional bound"), std::string::npos)
      << queued.ToString() << " / " << done.ToString();
  shapes = m.OutputShapesFor({TensorRef::Of(xa.data(), {100})});
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(shapes.value()[0], (Shape{100}));
  ya.assign(100, -1.f);
  ASSERT_TRUE(m.Execute({TensorRef::Of(xa.data(), {100})}, {TensorRef::Of(ya.data(), {100})}).ok());
  ASSERT_EQ(m.output_shape(0), (Shape{100}));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ya[i], static_cast<float>(i));
}

TEST(Dynamic, ReshapeToATargetComputedFromData) {
  // y = ReduceSum(Reshape(x, [int(max(x)), -1]), axis 1) of x[120] (too
  // large to be a shape input): the target has no bound, so it gets a
  // provisional one ([1, 1]) on the output dims it resolves to (-1
  // inferred); a run whose dims exceed it raises it element by element to
  // them. Rows k = 2, 3, 4, 6, 12, 1, 24, 8 resolve to [2,60], [3,40],
  // [4,30], [6,20], [12,10], [1,120], [24,5], [8,15]: the bound becomes
  // [2,60], [3,60], [4,60], [6,60], [12,60], [12,120], [24,120], then holds
  // (7 raises). k = 7 cannot divide 120: a clean error.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {120});
  g->inputs().push_back(x);
  ir::Value* mx = g->AddValue("mx");
  ir::Value* k = g->AddValue("k");
  ir::Value* s = g->AddValue("s");
  ir::Value* r = g->AddValue("r");
  ir::Value* y = g->AddValue("y");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->AddNode("Cast", "as_int", {mx}, {k})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Concat", "target", {k, g->AddConstant("rest", test::I64({1}, {-1}))}, {s})
      ->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Reshape", "reshape", {x, s}, {r});
  g->AddNode("ReduceSum", "rows", {r, g->AddConstant("axis1", test::I64({1}, {1}))}, {y})
      ->SetAttr("keepdims", ir::Attribute::Int(0));
  g->outputs() = {y};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].dims.at(0).max, -1);  // no bound before a run
  std::uint64_t raises = 0;
  for (const auto& [rows, raise] : std::vector<std::pair<int, bool>>{
           {2, true}, {3, true}, {4, true}, {6, true}, {12, true}, {1, true}, {24, true}, {8, false}}) {
    std::vector<float> xv(120);
    for (int i = 0; i < 120; ++i) xv[i] = static_cast<float>(i % 5) * 0.125f;
    xv[7] = static_cast<float>(rows);
    ProvisionalRun run = RunGrowingOutputs(m, xv);
    ASSERT_TRUE(run.status.ok()) << rows << ": " << run.status.ToString();
    raises += raise;
    EXPECT_EQ(m.plan_stats().bound_raises, raises) << rows;
    ASSERT_EQ(m.output_shape(0), (Shape{rows})) << rows;
    const int cols = 120 / rows;
    for (int i = 0; i < rows; ++i) {
      float want = 0.f;  // exact in any order: small multiples of 1/8
      for (int j = 0; j < cols; ++j) want += xv[static_cast<std::size_t>(i * cols + j)];
      EXPECT_EQ(run.y[static_cast<std::size_t>(i)], want) << rows << " rows, row " << i;
    }
  }
  std::vector<float> bad(120, 0.f);
  bad[3] = 7.f;
  ProvisionalRun run = RunGrowingOutputs(m, bad);
  ASSERT_FALSE(run.status.ok());
  EXPECT_NE(run.status.message().find("Reshape node 'reshape'"), std::string::npos) << run.status.ToString();
  EXPECT_NE(run.status.message().find("cannot reshape [120]"), std::string::npos) << run.status.ToString();
}

TEST(Dynamic, RunAllocatesOutputsOfTheirActualShapes) {
  // Model::Run: outputs in memory Kiln allocates, grown when a run raises
  // the provisional bound; y = Range(0, int(max(x))) by hand. The plain
  // static model's outputs come the same way.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {100});
  g->inputs().push_back(x);
  ir::Value* mx = g->AddValue("mx");
  ir::Value* lim = g->AddValue("lim");
  ir::Value* r = g->AddValue("r");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(0));
  g->AddNode("Cast", "as_int", {mx}, {lim})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Range", "range", {g->AddConstant("zero", test::I64({}, {0})), lim, g->AddConstant("one", test::I64({}, {1}))},
             {r});
  g->outputs() = {r};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (float limit : {5.f, 60.f, 2.f, 99.f}) {
    std::vector<float> xv(100, -2.f);
    xv[9] = limit;
    auto outs = (*model)->Run({TensorRef::Of(xv.data(), {100})});
    ASSERT_TRUE(outs.ok()) << limit << ": " << outs.status().ToString();
    ASSERT_EQ(outs.value().size(), 1u);
    const TensorRef& y = outs.value()[0];
    const auto n = static_cast<std::int64_t>(limit);
    ASSERT_EQ(y.shape, (Shape{n}));
    EXPECT_EQ(y.dtype, DType::kInt64);
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(static_cast<const std::int64_t*>(y.data)[i], i);
  }
  // The bound went 1 -> 5 -> 60 (the runs' values; more than twice the
  // old) -> 120 (twice 60, above the run's 99).
  EXPECT_EQ((*model)->plan_stats().bound_raises, 3u);
  std::vector<float> bad(99);  // errors as Execute's
  auto wrong = (*model)->Run({TensorRef::Of(bad.data(), {99})});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("input 0"), std::string::npos) << wrong.status().ToString();
}

TEST(Dynamic, ProvisionalBoundsFailCleanlyWhereTheValuesAreInvalid) {
  // A product past any tensor's extent, and (shp - [0, 1]) * [1, 1], which
  // is [1, -1] when x has no non-zeros (Mul proves no bound for values
  // that may be negative): each compiles on a provisional bound and a run
  // with such values is an error naming the fill.
  auto g = FillOfNonZeroShape("Sub", {0, 1});
  ir::Node* fill = g->nodes().back().get();
  ir::Value* d = fill->input(0);
  ir::Value* prod = g->AddValue("prod");
  g->AddNode("Mul", "times_one", {d, g->AddConstant("ones", test::I64({2}, {1, 1}))}, {prod});
  fill->SetInput(0, prod);
  ASSERT_TRUE(g->TopologicalSort().ok());
  for (int k = 0; k < 2; ++k) {
    test::TempDir dir;
    auto model = CompileAndLoad(k == 0 ? FillOfNonZeroShape("Mul", {std::int64_t{1} << 40, 1}) : std::move(g), dir);
    ASSERT_TRUE(model.ok()) << k << ": " << model.status().ToString();
    std::vector<float> x = {0, 0, k == 0 ? 1.f : 0.f, 0};
    ProvisionalRun r = RunGrowingOutputs(**model, x);
    ASSERT_FALSE(r.status.ok()) << k;
    EXPECT_NE(r.status.message().find("'fill'"), std::string::npos) << r.status.ToString();
  }
}

TEST(Dynamic, SubAndDivByConstantsKeepUpperBounds) {
  // shp - [0, 1]: the fill is [1, n - 1], bounded by [1, 3]; shp / [1, 2]:
  // [1, n / 2], bounded by [1, 2]. A run where n - 1 is negative is an
  // error naming the fill, not a crash.
  for (const auto& [op, k] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
           {"Sub", {0, 1}}, {"Div", {1, 2}}}) {
    test::TempDir dir;
    auto model = CompileAndLoad(FillOfNonZeroShape(op, k), dir);
    ASSERT_TRUE(model.ok()) << op << ": " << model.status().ToString();
    Model& m = **model;
    const bool sub = op == "Sub";
    EXPECT_EQ(m.outputs()[0].shape, (Shape{1, sub ? 3 : 2})) << op;
    EXPECT_EQ(m.outputs()[0].dynamic_dims, 0b11u) << op;
    std::vector<float> y(4, -1);
    for (const auto& [x, n] : std::vector<std::pair<std::vector<float>, std::int64_t>>{
             {{0, 3, 0, 5}, 2}, {{1, 1, 1, 1}, 4}, {{0, 0, 7, 0}, 1}, {{0, 2, 7, 1}, 3}}) {
      Status st = m.Execute({TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {1, sub ? 3 : 2})});
      ASSERT_TRUE(st.ok()) << op << ": " << st.ToString();
      EXPECT_EQ(m.output_shape(0), (Shape{1, sub ? n - 1 : n / 2})) << op;
    }
    if (sub) {
      std::vector<float> none = {0, 0, 0, 0};
      Status st = m.Execute({TensorRef::Of(none.data(), {4})}, {TensorRef::Of(y.data(), {1, 3})});
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("fill"), std::string::npos) << st.ToString();
    }
  }
}

TEST(Dynamic, RangeUpToACountComputedFromData) {
  // Range(0, count - 1) where count = the number of non-zeros of x[6]
  // (NonZero -> Shape -> Gather -> Sub), and Range(0, argmax(x) + 1): both
  // limits are computed inside the run; lengths by hand.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {6});
  g->inputs().push_back(x);
  auto* zero = g->AddConstant("zero", test::I64({}, {0}));
  auto* one = g->AddConstant("one", test::I64({}, {1}));
  ir::Value* idx = g->AddValue("idx");
  ir::Value* shp = g->AddValue("shp");
  ir::Value* cnt = g->AddValue("cnt");
  ir::Value* lim = g->AddValue("lim");
  ir::Value* r = g->AddValue("r");
  ir::Value* am = g->AddValue("am");
  ir::Value* lim2 = g->AddValue("lim2");
  ir::Value* r2 = g->AddValue("r2");
  g->AddNode("NonZero", "nz", {x}, {idx});
  g->AddNode("Shape", "shape", {idx}, {shp});
  g->AddNode("Gather", "count", {shp, one}, {cnt})->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Sub", "minus_one", {cnt, one}, {lim});
  g->AddNode("Range", "range", {zero, lim, one}, {r});
  g->AddNode("ArgMax", "argmax", {x}, {am})->SetAttr("keepdims", ir::Attribute::Int(0));
  g->AddNode("Add", "plus_one", {am, one}, {lim2});
  g->AddNode("Range", "range2", {zero, lim2, one}, {r2});
  g->outputs() = {r, r2};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{5}));
  EXPECT_EQ(m.outputs()[1].shape, (Shape{6}));
  std::vector<std::int64_t> a(6, -7), b(6, -7);
  for (const auto& [xv, n, k] : std::vector<std::tuple<std::vector<float>, std::int64_t, std::int64_t>>{
           {{0, 3, 0, 5, 0, 0}, 1, 4}, {{1, 2, 3, 4, 5, 9}, 5, 6}, {{9, 0, 0, 0, 0, 0}, 0, 1}, {{0, 0, 0, 0, 0, 0}, 0, 1}}) {
    Status st = m.Execute({TensorRef::Of(xv.data(), {6})}, {TensorRef::Of(a.data(), {5}), TensorRef::Of(b.data(), {6})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(m.output_shape(0), (Shape{n}));
    ASSERT_EQ(m.output_shape(1), (Shape{k}));
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], i);
    for (std::int64_t i = 0; i < k; ++i) EXPECT_EQ(b[i], i);
  }
}

TEST(Dynamic, TopKOfACountOfPassingElements) {
  // K = ReduceSum(Cast(x > 0)): a Cast of a bool is at most 1, so K is at
  // most 5 and TopK's outputs are [<=5]; the run keeps the positives.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {5});
  g->inputs().push_back(x);
  ir::Value* gt = g->AddValue("gt");
  ir::Value* gi = g->AddValue("gi");
  ir::Value* k = g->AddValue("k");
  ir::Value* v = g->AddValue("v");
  ir::Value* i = g->AddValue("i");
  g->AddNode("Greater", "positive", {x, g->AddConstant("z", test::F32({}, {0}))}, {gt});
  g->AddNode("Cast", "as_int", {gt}, {gi})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("ReduceSum", "count", {gi}, {k})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->AddNode("TopK", "topk", {x, k}, {v, i});
  g->outputs() = {v, i};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{5}));
  std::vector<float> vals(5);
  std::vector<std::int64_t> ids(5);
  for (const auto& [xv, want, want_i] :
       std::vector<std::tuple<std::vector<float>, std::vector<float>, std::vector<std::int64_t>>>{
           {{3, -1, 5, 0, 2}, {5, 3, 2}, {2, 0, 4}}, {{-1, -2, -3, -4, -5}, {}, {}}, {{1, 2, 3, 4, 5}, {5, 4, 3, 2, 1}, {4, 3, 2, 1, 0}}}) {
    Status st = m.Execute({TensorRef::Of(xv.data(), {5})}, {TensorRef::Of(vals.data(), {5}), TensorRef::Of(ids.data(), {5})});
    ASSERT_TRUE(st.ok()) << st.ToString();
    const auto n = static_cast<std::int64_t>(want.size());
    ASSERT_EQ(m.output_shape(0), (Shape{n}));
    EXPECT_EQ(std::vector<float>(vals.begin(), vals.begin() + n), want);
    EXPECT_EQ(std::vector<std::int64_t>(ids.begin(), ids.begin() + n), want_i);
  }
}

TEST(Dynamic, AddOnADataDependentExtentKeepsItsUpperBound) {
  // shp + [0, 1]: the fill is [1, n + 1], bounded by [1, 5].
  test::TempDir dir;
  auto model = CompileAndLoad(FillOfNonZeroShape("Add", {0, 1}), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{1, 5}));
  std::vector<float> y(5, -1);
  for (const auto& [x, n] : std::vector<std::pair<std::vector<float>, std::int64_t>>{
           {{0, 3, 0, 5}, 2}, {{1, 1, 1, 1}, 4}, {{0, 0, 0, 0}, 0}}) {
    ASSERT_TRUE(m.Execute({TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {1, 5})}).ok());
    EXPECT_EQ(m.output_shape(0), (Shape{1, n + 1}));
  }
}

TEST(Dynamic, SplitBySizesComputedFromData) {
  // Split(x[80], [k, 80 - k]) with k = int(max(x)): each output is at most
  // the whole axis, and each run splits where the data says; sizes that do
  // not sum to the axis fail the run naming the Split.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {80});
  g->inputs().push_back(x);
  ir::Value* mx = g->AddValue("mx");
  ir::Value* k = g->AddValue("k");
  ir::Value* rest = g->AddValue("rest");
  ir::Value* sizes = g->AddValue("sizes");
  ir::Value* a = g->AddValue("a");
  ir::Value* b = g->AddValue("b");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->AddNode("Cast", "as_int", {mx}, {k})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Sub", "rest", {g->AddConstant("total", test::I64({1}, {80})), k}, {rest});
  g->AddNode("Concat", "sizes", {k, rest}, {sizes})->SetAttr("axis", ir::Attribute::Int(0));
  g->AddNode("Split", "split", {x, sizes}, {a, b});
  g->outputs() = {a, b};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{80}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 1u);
  EXPECT_EQ(m.outputs()[1].dynamic_dims, 1u);
  std::vector<float> ya(80), yb(80);
  for (std::int64_t kv : {3, 40, 0, 80, 79}) {
    std::vector<float> xv(80);
    for (int i = 0; i < 80; ++i) xv[i] = -static_cast<float>(i);  // <= 0: max(x) is k
    xv[1] = static_cast<float>(kv);
    Status st = m.Execute({TensorRef::Of(xv.data(), {80})}, {TensorRef::Of(ya.data(), {80}), TensorRef::Of(yb.data(), {80})});
    ASSERT_TRUE(st.ok()) << kv << ": " << st.ToString();
    ASSERT_EQ(m.output_shape(0), (Shape{kv}));
    ASSERT_EQ(m.output_shape(1), (Shape{80 - kv}));
    for (std::int64_t i = 0; i < kv; ++i) EXPECT_EQ(ya[i], xv[i]) << kv;
    for (std::int64_t i = 0; i < 80 - kv; ++i) EXPECT_EQ(yb[i], xv[kv + i]) << kv;
  }
  std::vector<float> xv(80, -1.f);
  xv[0] = 81.f;  // sizes [81, -1]
  Status st = m.Execute({TensorRef::Of(xv.data(), {80})}, {TensorRef::Of(ya.data(), {80}), TensorRef::Of(yb.data(), {80})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Split node 'split'"), std::string::npos) << st.ToString();
}

TEST(Dynamic, SliceAndTopKByValuesComputedFromData) {
  // ends = int(max(x)) and K = int(min(x)) of a float x[80] (above the 64
  // elements of a shape input): values without any bound, but Slice's
  // output is at most x's and TopK's at most its axis: both are planned for
  // [<=80] and each run reads the values.
  constexpr std::int64_t kN = 80;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {kN});
  g->inputs().push_back(x);
  ir::Value* mx = g->AddValue("mx");
  ir::Value* ends = g->AddValue("ends");
  ir::Value* mn = g->AddValue("mn");
  ir::Value* k = g->AddValue("k");
  ir::Value* head = g->AddValue("head");
  ir::Value* top = g->AddValue("top");
  ir::Value* top_i = g->AddValue("top_i");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->AddNode("Cast", "ends_of", {mx}, {ends})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("Slice", "head", {x, g->AddConstant("starts", test::I64({1}, {0})), ends}, {head});
  g->AddNode("ReduceMin", "min", {x}, {mn})->SetAttr("keepdims", ir::Attribute::Int(1));
  g->AddNode("Cast", "k_of", {mn}, {k})->SetAttr("to", ir::Attribute::Int(7));
  g->AddNode("TopK", "topk", {x, k}, {top, top_i});
  g->outputs() = {head, top, top_i};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  for (int o = 0; o < 3; ++o) EXPECT_EQ(m.outputs()[o].shape, (Shape{kN})) << o;
  std::vector<float> h(kN), t(kN);
  std::vector<std::int64_t> ti(kN);
  // x: the six values given, then `pad` (which changes neither max nor min).
  auto run = [&](std::vector<float> xv, float pad) {
    xv.resize(kN, pad);
    return m.Execute({TensorRef::Of(xv.data(), {kN})},
                     {TensorRef::Of(h.data(), {kN}), TensorRef::Of(t.data(), {kN}), TensorRef::Of(ti.data(), {kN})});
  };
  struct Case {
    std::vector<float> x;
    float pad;
    std::vector<float> head, top;
    std::vector<std::int64_t> top_i;
  };
  for (const Case& c : std::vector<Case>{{{2, 5, 1, 3, 4, 0.5f}, 1, {2, 5, 1, 3, 4}, {}, {}},
                                         {{3, 1, 2, 2, 9, 1}, 2, {3, 1, 2, 2, 9, 1, 2, 2, 2}, {9}, {4}},
                                         {{2, 2, 2, 2, 2, 2.5f}, 2, {2, 2}, {2.5f, 2}, {5, 0}}}) {
    Status st = run(c.x, c.pad);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(m.output_shape(0), (Shape{static_cast<std::int64_t>(c.head.size())}));
    ASSERT_EQ(m.output_shape(1), (Shape{static_cast<std::int64_t>(c.top.size())}));
    EXPECT_EQ(std::vector<float>(h.begin(), h.begin() + c.head.size()), c.head);
    EXPECT_EQ(std::vector<float>(t.begin(), t.begin() + c.top.size()), c.top);
    EXPECT_EQ(std::vector<std::int64_t>(ti.begin(), ti.begin() + c.top_i.size()), c.top_i);
  }
  // K = 81 > 80 elements: the run fails naming TopK, never past its memory.
  Status st = run({}, 81);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("topk"), std::string::npos) << st.ToString();
}

TEST(Dynamic, ReshapeToAFixedShapeFailsAtRunTimeNamingTheNode) {
  // NonZero(x)[2,<=4] -> Reshape to [8]: fine when all 4 are non-zero, an
  // error naming the Reshape otherwise.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {4});
  g->inputs().push_back(x);
  ir::Value* idx = g->AddValue("idx");
  ir::Value* flat = g->AddValue("flat");
  ir::Value* y = g->AddValue("y");
  g->AddNode("NonZero", "nz", {x}, {idx});
  g->AddNode("Reshape", "fixed_reshape", {idx, g->AddConstant("shape", test::I64({1}, {4}))}, {flat});
  g->AddNode("Neg", "neg", {flat}, {y});
  g->outputs() = {y};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> all = {1, 2, 3, 4}, some = {1, 0, 3, 4};
  std::vector<std::int64_t> out(4);
  // NonZero of a rank-1 input is [1, n]: reshaping to [4] needs n == 4.
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(all.data(), {4})}, {TensorRef::Of(out.data(), {4})}).ok());
  EXPECT_EQ(out, (std::vector<std::int64_t>{0, -1, -2, -3}));
  Status st = (*model)->Execute({TensorRef::Of(some.data(), {4})}, {TensorRef::Of(out.data(), {4})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fixed_reshape"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("run time"), std::string::npos) << st.ToString();
}

TEST(Dynamic, NonMaxSuppressionSelectsByHand) {
  // One batch, two classes, three boxes [y1,x1,y2,x2]:
  //   b0 = [0,0,1,1], b1 = [0,0.1,1,1.1] (IoU with b0 = 0.9/1.1 = 0.82), b2 = [0,2,1,3] (disjoint)
  //   class 0 scores .9 .8 .7: b0 kept, b1 suppressed (0.82 > 0.5), b2 kept
  //   class 1 scores .1 .95 .3: b1 kept, b0 suppressed, b2 kept; score threshold .2 drops b0 anyway
  auto g = std::make_unique<ir::Graph>();
  ir::Value* boxes = g->AddValue("boxes", DType::kFloat32, {1, 3, 4});
  ir::Value* scores = g->AddValue("scores", DType::kFloat32, {1, 2, 3});
  g->inputs() = {boxes, scores};
  ir::Value* sel = g->AddValue("sel");
  auto f1 = [&](const char* n, float v) { return g->AddConstant(n, test::F32({1}, {v})); };
  g->AddNode("NonMaxSuppression", "nms",
             {boxes, scores, g->AddConstant("max", test::I64({1}, {10})), f1("iou", 0.5f), f1("thr", 0.2f)},
             {sel});
  g->outputs() = {sel};
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->outputs()[0].shape, (Shape{6, 3}));  // 1 batch x 2 classes x min(10, 3)
  EXPECT_EQ((*model)->outputs()[0].dynamic_dims, 1u);
  std::vector<float> b = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3};
  std::vector<float> sc = {0.9f, 0.8f, 0.7f, 0.1f, 0.95f, 0.3f};
  std::vector<std::int64_t> out(18, -1);
  ASSERT_TRUE((*model)
                  ->Execute({TensorRef::Of(b.data(), {1, 3, 4}), TensorRef::Of(sc.data(), {1, 2, 3})},
                            {TensorRef::Of(out.data(), {6, 3})})
                  .ok());
  ASSERT_EQ((*model)->output_shape(0), (Shape{4, 3}));
  EXPECT_EQ(std::vector<std::int64_t>(out.begin(), out.begin() + 12),
            (std::vector<std::int64_t>{0, 0, 0, 0, 0, 2, 0, 1, 1, 0, 1, 2}));
}

// ONNX's NonMaxSuppression, one pair at a time, as ONNX Runtime reads it:
// per batch and class, candidates above the score threshold by descending
// score (ties: lower index first); a candidate is dropped if its IoU with a
// kept box exceeds the threshold; boxes that do not overlap, or have no
// area, never suppress each other.
std::vector<std::array<std::int64_t, 3>> NmsOneByOne(const std::vector<float>& boxes, const std::vector<float>& scores,
                                                     int batches, int classes, int n, int max_out, float iou,
                                                     float thr, bool center) {
  auto corners = [&](int b, int i) {
    const float* p = &boxes[(static_cast<std::size_t>(b) * n + i) * 4];
    if (center) return std::array<float, 4>{p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
    return std::array<float, 4>{std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
                                std::max(p[1], p[3])};
  };
  std::vector<std::array<std::int64_t, 3>> out;
  for (int b = 0; b < batches; ++b) {
    for (int c = 0; c < classes; ++c) {
      const float* s = &scores[(static_cast<std::size_t>(b) * classes + c) * n];
      std::vector<int> order;
      for (int i = 0; i < n; ++i) {
        if (s[i] > thr) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [s](int l, int r) { return s[l] > s[r]; });
      std::vector<int> kept;
      for (int i : order) {
        if (static_cast<int>(kept.size()) >= max_out) break;
        const auto a = corners(b, i);
        bool keep = true;
        for (int j : kept) {
          const auto k = corners(b, j);
          const float ih = std::min(k[2], a[2]) - std::max(k[0], a[0]);
          const float iw = std::min(k[3], a[3]) - std::max(k[1], a[1]);
          if (ih <= 0 || iw <= 0) continue;
          const float inter = iw * ih;
          const float area_k = (k[3] - k[1]) * (k[2] - k[0]), area_a = (a[3] - a[1]) * (a[2] - a[0]);
          const float uni = area_k + area_a - inter;
          if (inter <= 0 || area_k <= 0 || area_a <= 0 || uni <= 0) continue;
          if (inter / uni > iou) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        kept.push_back(i);
        out.push_back({b, c, i});
      }
    }
  }
  return out;
}

TEST(Dynamic, NonMaxSuppressionOfManyBoxesFollowsTheRuleOneBoxAtATime) {
  // 1200 small boxes over a 40x40 field (hundreds kept per class: the
  // kernel tests a candidate against the kept boxes in blocks of 256), a
  // tenth of them with no area, some with flipped corners; scores with
  // ties; both box formats.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pos(0.f, 40.f), size(0.2f, 2.f), unit(0.f, 1.f);
  const int n = 1200, classes = 2;
  for (int center = 0; center < 2; ++center) {
    std::vector<float> boxes(static_cast<std::size_t>(n) * 4), scores(static_cast<std::size_t>(classes) * n);
    for (int i = 0; i < n; ++i) {
      float* p = &boxes[static_cast<std::size_t>(i) * 4];
      const float y = pos(rng), x = pos(rng), h = i % 10 == 3 ? 0.f : size(rng), w = size(rng);
      if (center) {
        p[0] = x, p[1] = y, p[2] = w, p[3] = h;
      } else if (i % 7 == 2) {
        p[0] = y + h, p[1] = x + w, p[2] = y, p[3] = x;  // the other diagonal
      } else {
        p[0] = y, p[1] = x, p[2] = y + h, p[3] = x + w;
      }
    }
    for (float& v : scores) v = std::floor(unit(rng) * 64) / 64;  // ties
    test::NodeRunner r("NonMaxSuppression", 11,
                       {test::F32T({1, n, 4}, boxes), test::F32T({1, classes, n}, scores), test::I64T({1}, {1000}),
                        test::F32T({1}, {0.3f}), test::F32T({1}, {0.05f})});
    r.Attr("center_point_box", test::Int(center));
    auto out = r.Run();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const auto want = NmsOneByOne(boxes, scores, 1, classes, n, 1000, 0.3f, 0.05f, center == 1);
    ASSERT_GT(want.size(), 600u);  // several blocks of kept boxes per class
    const HostTensor& got = *out.value()[0];
    ASSERT_EQ(got.shape(), (Shape{static_cast<std::int64_t>(want.size()), 3})) << "center " << center;
    for (std::size_t k = 0; k < want.size(); ++k) {
      for (int f = 0; f < 3; ++f) ASSERT_EQ(got.data_as<std::int64_t>()[k * 3 + f], want[k][f]) << k << " " << f;
    }
  }
}

void SetBranches(ir::Node* iff, std::shared_ptr<ir::Graph> then_b, std::shared_ptr<ir::Graph> else_b) {
  ir::Attribute t, e;
  t.kind = e.kind = ir::Attribute::Kind::kGraph;
  t.g = std::move(then_b);
  e.g = std::move(else_b);
  iff->SetAttr("then_branch", t);
  iff->SetAttr("else_branch", e);
}

// x[4] -> NonZero -> idx[1,<=4]; If(c): then Identity(idx), else an empty
// int64[1,0] constant. The If's output is [1,<=4]: the taken branch decides.
std::unique_ptr<ir::Graph> IfOverNonZero() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {4});
  ir::Value* c = g->AddValue("c", DType::kBool, {});
  g->inputs() = {x, c};
  ir::Value* idx = g->AddValue("idx");
  ir::Value* y = g->AddValue("y");
  g->AddNode("NonZero", "nz", {x}, {idx});
  auto then_b = std::make_shared<ir::Graph>();
  then_b->set_name("then");
  then_b->set_parent(g.get());
  ir::Value* to = then_b->AddValue("then_out");
  then_b->AddNode("Identity", "then_id", {idx}, {to});  // captures idx
  then_b->outputs().push_back(to);
  auto else_b = std::make_shared<ir::Graph>();
  else_b->set_name("else");
  else_b->set_parent(g.get());
  else_b->outputs().push_back(else_b->AddConstant("empty", test::I64({1, 0}, {})));
  ir::Node* iff = g->AddNode("If", "if_nz", {c}, {y});
  SetBranches(iff, then_b, else_b);
  g->outputs() = {y};
  return g;
}

TEST(Dynamic, IfPassesDataDependentValuesAndReportsTheTakenBranchsExtent) {
  test::TempDir dir;
  auto model = CompileAndLoad(IfOverNonZero(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].shape, (Shape{1, 4}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 0b10u);
  std::vector<float> x = {0, 3, 0, 5};
  std::vector<std::int64_t> y(4, -1);
  auto run = [&](bool cond) {
    std::uint8_t c = cond;
    return m.Execute({TensorRef::Of(x.data(), {4}), TensorRef{&c, DType::kBool, {}}},
                     {TensorRef::Of(y.data(), {1, 4})});
  };
  ASSERT_TRUE(run(true).ok());
  EXPECT_EQ(m.output_shape(0), (Shape{1, 2}));
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], 3);
  ASSERT_TRUE(run(false).ok());
  EXPECT_EQ(m.output_shape(0), (Shape{1, 0}));
  x = {1, 1, 1, 0};
  ASSERT_TRUE(run(true).ok());
  EXPECT_EQ(m.output_shape(0), (Shape{1, 3}));
  EXPECT_EQ(std::vector<std::int64_t>(y.begin(), y.begin() + 3), (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(Dynamic, ProvisionalBoundsInsideIfBranches) {
  // x[100], c -> n = int(max(x)) -> If(c): then Range(0, n) (n captured
  // from the parent), else ConstantOfShape(int(-min(x)), 2) (k computed in
  // the branch). Neither value has a bound, so each gets a provisional one
  // (1): the captured n in the parent, k in the branch. A run above one
  // raises it (max(value, twice the old bound)) and runs again. By hand:
  // then n = 3 raises n to 3; else k = 5 raises k to 5; then 10 raises n to
  // 10; then 2, else 4: none; else 11 raises k to 11; then 0: none (4).
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {100});
  ir::Value* c = g->AddValue("c", DType::kBool, {});
  g->inputs() = {x, c};
  ir::Value* mx = g->AddValue("mx");
  ir::Value* n = g->AddValue("n");
  ir::Value* y = g->AddValue("y");
  g->AddNode("ReduceMax", "max", {x}, {mx})->SetAttr("keepdims", ir::Attribute::Int(0));
  g->AddNode("Cast", "as_int", {mx}, {n})->SetAttr("to", ir::Attribute::Int(7));
  auto then_b = std::make_shared<ir::Graph>();
  then_b->set_name("then");
  then_b->set_parent(g.get());
  ir::Value* r = then_b->AddValue("r");
  ir::Value* to = then_b->AddValue("then_out");
  then_b->AddNode("Range", "range",
                  {then_b->AddConstant("zero", test::I64({}, {0})), n, then_b->AddConstant("one", test::I64({}, {1}))},
                  {r});
  then_b->AddNode("Cast", "range_f", {r}, {to})->SetAttr("to", ir::Attribute::Int(1));
  then_b->outputs().push_back(to);
  auto else_b = std::make_shared<ir::Graph>();
  else_b->set_name("else");
  else_b->set_parent(g.get());
  ir::Value* mn = else_b->AddValue("mn");
  ir::Value* neg = else_b->AddValue("neg");
  ir::Value* k = else_b->AddValue("k");
  ir::Value* eo = else_b->AddValue("else_out");
  else_b->AddNode("ReduceMin", "min", {x}, {mn})->SetAttr("keepdims", ir::Attribute::Int(1));
  else_b->AddNode("Neg", "negate", {mn}, {neg});
  else_b->AddNode("Cast", "k_int", {neg}, {k})->SetAttr("to", ir::Attribute::Int(7));
  else_b->AddNode("ConstantOfShape", "fill", {k}, {eo})
      ->SetAttr("value", ir::Attribute::Tensor(test::F32({1}, {2.f})));
  else_b->outputs().push_back(eo);
  ir::Node* iff = g->AddNode("If", "if_prov", {c}, {y});
  SetBranches(iff, then_b, else_b);
  g->outputs() = {y};
  test::SetLatestVersions(*g);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[0].dims.at(0).max, -1);  // no bound known before a run
  std::uint64_t raises = 0;
  struct Case {
    bool then;
    float value;  // the maximum (then) or minus the minimum (else)
    bool raise;
  };
  for (const Case& cs : std::vector<Case>{{true, 3.5f, true},
                                          {false, 5.f, true},
                                          {true, 10.f, true},
                                          {true, 2.f, false},
                                          {false, 4.f, false},
                                          {false, 11.5f, true},
                                          {true, 0.f, false}}) {
    std::vector<float> xs(100, 0.f);
    if (cs.then) xs[37] = cs.value;
    else xs[61] = -cs.value;
    std::uint8_t cv = cs.then;
    std::vector<TensorRef> ins = {TensorRef::Of(xs.data(), {100}), TensorRef{&cv, DType::kBool, {}}};
    std::vector<float> out;
    Status st;
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto shapes = m.OutputShapesFor(ins);
      ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
      out.assign(static_cast<std::size_t>(NumElements(shapes.value()[0])), -1.f);
      st = m.Execute(ins, {TensorRef::Of(out.data(), shapes.value()[0])});
      if (st.ok()) break;
    }
    ASSERT_TRUE(st.ok()) << cs.value << ": " << st.ToString();
    raises += cs.raise;
    EXPECT_EQ(m.plan_stats().bound_raises, raises) << cs.value;
    const auto e = static_cast<std::int64_t>(cs.value);
    ASSERT_EQ(m.output_shape(0), (Shape{e})) << cs.value;
    for (std::int64_t i = 0; i < e; ++i) {
      EXPECT_EQ(out[static_cast<std::size_t>(i)], cs.then ? static_cast<float>(i) : 2.f) << cs.value << " " << i;
    }
  }
}

// x[3,4], c -> If(c: x * 2 [3,4]; else: Concat(x, x) flattened [24]) -> y,
// whose rank depends on c -> Relu -> Add 1 -> w, Shape(w) -> s. `consumer`
// adds one more node on w (type, extra constant input or none).
std::unique_ptr<ir::Graph> IfOfTwoRanks(const std::string& consumer = "", HostTensorPtr operand = nullptr) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {3, 4});
  ir::Value* c = g->AddValue("c", DType::kBool, {});
  g->inputs() = {x, c};
  auto then_b = std::make_shared<ir::Graph>();
  then_b->set_name("then");
  then_b->set_parent(g.get());
  ir::Value* to = then_b->AddValue("then_out");
  then_b->AddNode("Mul", "then_mul", {x, then_b->AddConstant("two", test::F32({}, {2}))}, {to});
  then_b->outputs().push_back(to);
  auto else_b = std::make_shared<ir::Graph>();
  else_b->set_name("else");
  else_b->set_parent(g.get());
  ir::Value* xx = else_b->AddValue("xx");
  ir::Value* eo = else_b->AddValue("else_out");
  else_b->AddNode("Concat", "else_cat", {x, x}, {xx})->SetAttr("axis", ir::Attribute::Int(0));
  else_b->AddNode("Reshape", "else_flat", {xx, else_b->AddConstant("flat", test::I64({1}, {-1}))}, {eo});
  else_b->outputs().push_back(eo);
  ir::Value* y = g->AddValue("y");
  ir::Value* z = g->AddValue("z");
  ir::Value* w = g->AddValue("w");
  ir::Value* sh = g->AddValue("s");
  ir::Node* iff = g->AddNode("If", "if_rank", {c}, {y});
  SetBranches(iff, then_b, else_b);
  g->AddNode("Relu", "relu", {y}, {z});
  g->AddNode("Add", "add1", {z, g->AddConstant("one", test::F32({}, {1}))}, {w});
  g->AddNode("Shape", "shape", {w}, {sh});
  g->outputs() = {w, sh};
  if (!consumer.empty()) {
    ir::Value* r = g->AddValue("r");
    std::vector<ir::Value*> ins = {w};
    if (operand) ins.push_back(g->AddConstant("operand", operand));
    g->AddNode(consumer, "consumer", ins, {r});
    g->outputs().push_back(r);
  }
  test::SetLatestVersions(*g);
  return g;
}

std::vector<float> Iota12() {
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = static_cast<float>(i - 5);
  return x;
}

TEST(Dynamic, IfBranchesOfDifferentRankGiveTheTakenBranchsShape) {
  test::TempDir dir;
  auto model = CompileAndLoad(IfOfTwoRanks(), dir);  // written to a .kiln and loaded (re-inferred)
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  // Described by the larger branch (24 elements), every dim data-dependent.
  EXPECT_EQ(m.outputs()[0].shape, (Shape{24}));
  EXPECT_EQ(m.outputs()[0].dynamic_dims, 1u);
  EXPECT_EQ(m.outputs()[0].rank_alternatives, (std::vector<Shape>{{3, 4}, {24}}));
  EXPECT_EQ(m.outputs()[1].shape, (Shape{2}));  // Shape(w): 2 or 1 elements
  EXPECT_EQ(m.outputs()[1].dynamic_dims, 1u);
  EXPECT_TRUE(m.outputs()[1].rank_alternatives.empty());
  const std::vector<float> x = Iota12();
  std::vector<float> w(24, -1);
  std::vector<std::int64_t> s(2, -1);
  auto run = [&](bool cond) {
    std::uint8_t c = cond;
    return m.Execute({TensorRef::Of(x.data(), {3, 4}), TensorRef{&c, DType::kBool, {}}},
                     {TensorRef::Of(w.data(), {24}), TensorRef::Of(s.data(), {2})});
  };
  for (int rep = 0; rep < 2; ++rep) {  // alternate: each run reports its own branch
    ASSERT_TRUE(run(true).ok());
    EXPECT_EQ(m.output_shape(0), (Shape{3, 4}));
    EXPECT_EQ(m.output_shape(1), (Shape{2}));
    EXPECT_EQ(s[0], 3);
    EXPECT_EQ(s[1], 4);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(w[i], std::max(2.0f * x[i], 0.0f) + 1) << i;
    ASSERT_TRUE(run(false).ok());
    EXPECT_EQ(m.output_shape(0), (Shape{24}));
    EXPECT_EQ(m.output_shape(1), (Shape{1}));
    EXPECT_EQ(s[0], 24);
    for (int i = 0; i < 24; ++i) EXPECT_EQ(w[i], std::max(x[i % 12], 0.0f) + 1) << i;
  }
}

TEST(Dynamic, ARankVaryingValueReachesOnlyTheRanksItsConsumerAdmits) {
  // MatMul with a [4,2] matrix admits the [3,4] branch only: it compiles
  // (static [3,2]), runs on that branch, and the other branch's run fails
  // naming the node, as ONNX Runtime's would.
  test::TempDir dir;
  auto model = CompileAndLoad(IfOfTwoRanks("MatMul", test::F32({4, 2}, {1, 0, 0, 1, 1, 0, 0, 1})), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  EXPECT_EQ(m.outputs()[2].shape, (Shape{3, 2}));
  EXPECT_TRUE(m.outputs()[2].rank_alternatives.empty());
  const std::vector<float> x = Iota12();
  std::vector<float> w(24), r(6, -1);
  std::vector<std::int64_t> s(2);
  auto run = [&](bool cond) {
    std::uint8_t c = cond;
    return m.Execute({TensorRef::Of(x.data(), {3, 4}), TensorRef{&c, DType::kBool, {}}},
                     {TensorRef::Of(w.data(), {24}), TensorRef::Of(s.data(), {2}), TensorRef::Of(r.data(), {3, 2})});
  };
  ASSERT_TRUE(run(true).ok());
  for (int i = 0; i < 3; ++i) {
    auto v = [&](int j) { return std::max(2.0f * x[i * 4 + j], 0.0f) + 1; };
    EXPECT_EQ(r[i * 2], v(0) + v(2));
    EXPECT_EQ(r[i * 2 + 1], v(1) + v(3));
  }
  Status st = run(false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("consumer"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[24]"), std::string::npos) << st.ToString();
  ASSERT_TRUE(run(true).ok());  // and the model still runs
  // A consumer that admits neither shape is a compile error naming it.
  auto bad = CompileGraph(IfOfTwoRanks("MatMul", test::F32({5, 2}, std::vector<float>(10, 1))), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("consumer"), std::string::npos) << bad.status().ToString();
}

TEST(Dynamic, ARankVaryingValueIntoASubgraphOpIsRefusedByName) {
  auto g = IfOfTwoRanks();
  // A second If capturing w (lowered to an input of the node).
  ir::Value* w = g->outputs()[0];
  ir::Value* c = g->inputs()[1];
  auto br = [&](const char* name) {
    auto b = std::make_shared<ir::Graph>();
    b->set_name(name);
    b->set_parent(g.get());
    ir::Value* o = b->AddValue(std::string(name) + "_out");
    b->AddNode("Identity", std::string(name) + "_id", {w}, {o});
    b->outputs().push_back(o);
    return b;
  };
  ir::Value* v = g->AddValue("v");
  ir::Node* iff = g->AddNode("If", "if_again", {c}, {v});
  SetBranches(iff, br("then2"), br("else2"));
  g->outputs().push_back(v);
  test::SetLatestVersions(*g);
  auto m = CompileGraph(std::move(g), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("if_again"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("rank that depends on the data"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace kiln
