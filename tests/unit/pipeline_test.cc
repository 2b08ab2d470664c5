// The compile pipeline on in-memory graphs: folding, fusion, outputs
// checked against hand-derived values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/checked.h"
#include "format/kiln_file.h"
#include "kiln/graph.h"
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

// SiLU as PyTorch exports it: c = Conv(x); y = c * Sigmoid(c) (either Mul
// input order) fuses into the Conv's Swish epilogue. Reference: the same
// 1x1 conv and x / (1 + e^-x) in double, written here.
std::unique_ptr<ir::Graph> ConvSilu(bool sigmoid_first, bool sigmoid_is_output) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 2, 2});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 2, 1, 1}, {1, 2, -3, 0.5f}));
  ir::Value* c = g->AddValue("c");
  ir::Value* sg = g->AddValue("sg");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Conv", "conv", {x, w}, {c});
  g->AddNode("Sigmoid", "sig", {c}, {sg});
  g->AddNode("Mul", "mul", sigmoid_first ? std::vector<ir::Value*>{sg, c} : std::vector<ir::Value*>{c, sg}, {y});
  g->outputs().push_back(y);
  if (sigmoid_is_output) g->outputs().push_back(sg);
  test::SetLatestVersions(*g);
  return g;
}

TEST(Pipeline, SiluFusesIntoTheConvAsSwish) {
  const std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2};
  std::vector<float> want(8);
  for (int p = 0; p < 4; ++p) {
    const double c0 = 1.0 * x[p] + 2.0 * x[4 + p], c1 = -3.0 * x[p] + 0.5 * x[4 + p];
    want[p] = static_cast<float>(c0 / (1 + std::exp(-c0)));
    want[4 + p] = static_cast<float>(c1 / (1 + std::exp(-c1)));
  }
  for (bool sigmoid_first : {false, true}) {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(ConvSilu(sigmoid_first, false), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    int convs = 0, others = 0;
    for (auto& n : cm.graph->nodes()) {
      if (n->op_type() == "Conv") {
        ++convs;
        EXPECT_EQ(n->GetString("kiln.activation", ""), "Swish");
      } else if (n->op_type() != "Transpose") {
        ++others;  // NHWC conversions aside, nothing else is left
      }
    }
    EXPECT_EQ(convs, 1);
    EXPECT_EQ(others, 0);
    std::vector<float> y(8);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})}, {TensorRef::Of(y.data(), {1, 2, 2, 2})}).ok());
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << i;
  }
  // The Sigmoid is also a model output: no fusion, same results.
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(ConvSilu(false, true), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int sigmoids = 0;
  for (auto& n : cm.graph->nodes()) sigmoids += n->op_type() == "Sigmoid";
  EXPECT_EQ(sigmoids, 1);
  std::vector<float> y(8), sg(8);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})},
                                {TensorRef::Of(y.data(), {1, 2, 2, 2}), TensorRef::Of(sg.data(), {1, 2, 2, 2})}).ok());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << i;
}

int CountOpsIn(const format::CompiledModel& m, const std::string& op) {
  int c = 0;
  for (auto& n : m.graph->nodes()) c += n->op_type() == op;
  return c;
}

// HardSwish as TensorFlow converters write it: c = Conv(x);
// y = c * HardSigmoid(c) with alpha 1/6, beta 1/2 (either Mul input order)
// fuses into the Conv's HardSwish epilogue. With ONNX's default alpha 0.2 it
// is another function (a near miss): nothing fuses. Reference in double:
// c * max(0, min(1, alpha c + beta)).
TEST(Pipeline, HardSigmoidGateFusesIntoTheConvAsHardSwish) {
  const std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2, 0.5f, -2, 6, -0.25f};
  for (float alpha : {1.f / 6, 0.2f}) {
    for (bool gate_first : {false, true}) {
      auto g = std::make_unique<ir::Graph>();
      ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, 2, 2, 3});
      g->inputs().push_back(xv);
      ir::Value *c = g->AddValue("c"), *hs = g->AddValue("hs"), *y = g->AddValue("y");
      g->AddNode("Conv", "conv", {xv, g->AddConstant("w", test::F32({2, 2, 1, 1}, {1, 2, -3, 0.5f}))}, {c});
      g->AddNode("HardSigmoid", "gate", {c}, {hs})->SetAttr("alpha", ir::Attribute::Float(alpha));
      g->AddNode("Mul", "mul", gate_first ? std::vector<ir::Value*>{hs, c} : std::vector<ir::Value*>{c, hs}, {y});
      g->outputs().push_back(y);
      test::SetLatestVersions(*g);
      std::vector<double> want(12);
      for (int p = 0; p < 6; ++p) {
        const double cs[2] = {1.0 * x[p] + 2.0 * x[6 + p], -3.0 * x[p] + 0.5 * x[6 + p]};
        for (int o = 0; o < 2; ++o) want[o * 6 + p] = cs[o] * std::max(0.0, std::min(1.0, double(alpha) * cs[o] + 0.5));
      }
      test::TempDir dir;
      format::CompiledModel cm;
      auto model = CompileAndLoad(std::move(g), dir, &cm);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      const bool fused = alpha != 0.2f;
      EXPECT_EQ(CountOpsIn(cm, "HardSigmoid"), fused ? 0 : 1) << "alpha " << alpha;
      EXPECT_EQ(CountOpsIn(cm, "Mul"), fused ? 0 : 1);
      for (auto& n : cm.graph->nodes()) {
        if (n->op_type() == "Conv") EXPECT_EQ(n->GetString("kiln.activation", ""), fused ? "HardSwish" : "");
      }
      std::vector<float> out(12);
      ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 3})}, {TensorRef::Of(out.data(), {1, 2, 2, 3})}).ok());
      for (int i = 0; i < 12; ++i) EXPECT_NEAR(out[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << i;
    }
  }
}

// A Conv as TensorFlow converters write it: NHWC activations, the Conv
// between Transposes, then a constant bias Add and SiLU on the NHWC result.
// The layout pass cancels the Transposes; the fusions that ran before it
// could not see the Conv next to its bias and activation, so they run again
// after it. `bias_shape` {2} is per channel (fuses); {2, 1} varies along W
// (a near miss: the Add stays, and as it sits between the Conv and the SiLU,
// neither fuses).
std::unique_ptr<ir::Graph> NhwcConvBiasSilu(const Shape& bias_shape) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 2, 2});  // N, H, W, C
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 2, 1, 1}, {1, 2, -3, 0.5f}));
  ir::Value* b = g->AddConstant("b", test::F32(bias_shape, {0.25f, -1.5f}));
  ir::Value *t = g->AddValue("t"), *c = g->AddValue("c"), *u = g->AddValue("u"), *a = g->AddValue("a"),
            *sg = g->AddValue("sg"), *y = g->AddValue("y");
  g->AddNode("Transpose", "to_nchw", {x}, {t})->SetAttr("perm", ir::Attribute::Ints({0, 3, 1, 2}));
  g->AddNode("Conv", "conv", {t, w}, {c});
  g->AddNode("Transpose", "to_nhwc", {c}, {u})->SetAttr("perm", ir::Attribute::Ints({0, 2, 3, 1}));
  g->AddNode("Add", "bias", {u, b}, {a});
  g->AddNode("Sigmoid", "sig", {a}, {sg});
  g->AddNode("Mul", "mul", {a, sg}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  return g;
}

TEST(Pipeline, NhwcModelsConvBiasAndSiluFuseAfterTheLayoutPass) {
  // x[n,h,w,c] = {1,2, 3,4, -1,0, 1,2} (pixel-major, 2 channels).
  const std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2};
  const float wt[2][2] = {{1, 2}, {-3, 0.5f}};
  for (const Shape& bias_shape : {Shape{2}, Shape{2, 1}}) {
    const bool per_channel = bias_shape.size() == 1;
    std::vector<float> want(8);
    for (int p = 0; p < 4; ++p) {
      for (int o = 0; o < 2; ++o) {
        // bias {2}: by channel o; {2, 1}: by W (p % 2), broadcast over C.
        const double bias = per_channel ? (o == 0 ? 0.25 : -1.5) : (p % 2 == 0 ? 0.25 : -1.5);
        const double v = wt[o][0] * x[2 * p] + wt[o][1] * x[2 * p + 1] + bias;
        want[2 * p + o] = static_cast<float>(v / (1 + std::exp(-v)));
      }
    }
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(NhwcConvBiasSilu(bias_shape), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOpsIn(cm, "Transpose"), 0);
    EXPECT_EQ(CountOpsIn(cm, "Conv"), 1);
    EXPECT_EQ(CountOpsIn(cm, "Add"), per_channel ? 0 : 1);
    EXPECT_EQ(CountOpsIn(cm, "Sigmoid"), per_channel ? 0 : 1);
    for (auto& n : cm.graph->nodes()) {
      if (n->op_type() == "Conv") EXPECT_EQ(n->GetString("kiln.activation", ""), per_channel ? "Swish" : "");
    }
    std::vector<float> y(8);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 2, 2})}, {TensorRef::Of(y.data(), {1, 2, 2, 2})}).ok());
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << i;
  }
}

// A residual block: a = Relu(Conv0(x)) (1x1), b = Relu(ConvM(a)) (1x1),
// c = Conv1(b) (3x3, pad 1, bias), y = Relu(c + a) -- or variants that must
// not fuse, or fuse without the in-place output; the model returns Abs(y)
// (= y). Channels C, spatial S x S.
// Reference: the same arithmetic in double, written here.
struct ResidualCase {
  bool add_swapped = false;     // Add(a, c) instead of Add(c, a)
  bool conv_out_too = false;    // c is also a model output: no fusion
  bool relu_before_add = false; // y = Relu(c) + a: the Relu fuses, the Add stays
  bool residual_is_input = false;  // Add(c, x): x is a model input (fused, not in place)
  bool self_residual = false;   // no ConvM: c = Conv1(a), y = Relu(c + a) (Conv1 reads a twice: not in place)
  bool broadcast = false;       // residual of shape [1, C, 1, 1] (a model input): no fusion
};

std::unique_ptr<ir::Graph> ResidualGraph(const ResidualCase& rc, std::int64_t C, std::int64_t S,
                                         const std::vector<float>& w0, const std::vector<float>& w1,
                                         const std::vector<float>& b1) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, C, S, S});
  g->inputs().push_back(x);
  ir::Value* c0 = g->AddValue("c0");
  ir::Value* a = g->AddValue("a");
  g->AddNode("Conv", "conv0", {x, g->AddConstant("w0", test::F32({C, C, 1, 1}, w0))}, {c0});
  g->AddNode("Relu", "relu0", {c0}, {a});
  ir::Value* b = a;
  if (!rc.self_residual) {
    ir::Value* cm = g->AddValue("cm");
    b = g->AddValue("b");
    g->AddNode("Conv", "convm", {a, g->AddConstant("wm", test::F32({C, C, 1, 1}, w0))}, {cm});
    g->AddNode("Relu", "relum", {cm}, {b});
  }
  ir::Value* c = g->AddValue("c");
  ir::Node* conv1 = g->AddNode("Conv", "conv1", {b, g->AddConstant("w1", test::F32({C, C, 3, 3}, w1)),
                                                  g->AddConstant("b1", test::F32({C}, b1))}, {c});
  conv1->SetAttr("pads", ir::Attribute::Ints({1, 1, 1, 1}));
  ir::Value* r = a;
  if (rc.residual_is_input) r = x;
  if (rc.broadcast) {
    r = g->AddValue("r", DType::kFloat32, {1, C, 1, 1});
    g->inputs().push_back(r);
  }
  ir::Value* y = g->AddValue("y");  // >= 0; the model output is Abs(y) (so y is an arena tensor)
  if (rc.relu_before_add) {
    ir::Value* rl = g->AddValue("rl");
    g->AddNode("Relu", "relu1", {c}, {rl});
    g->AddNode("Add", "add", {rl, r}, {y});
  } else {
    ir::Value* s = g->AddValue("s");
    g->AddNode("Add", "add", rc.add_swapped ? std::vector<ir::Value*>{r, c} : std::vector<ir::Value*>{c, r}, {s});
    g->AddNode("Relu", "relu1", {s}, {y});
  }
  ir::Value* out = g->AddValue("out");
  g->AddNode("Abs", "abs", {y}, {out});
  g->outputs().push_back(out);
  if (rc.conv_out_too) g->outputs().push_back(c);
  test::SetLatestVersions(*g);
  return g;
}

// Compiles and runs the residual block (twice) and compares with the double
// reference; checks whether it fused and whether in place.
void CheckResidual(const ResidualCase& rc, bool nhwc, std::int64_t C, std::int64_t S, bool expect_fused,
                   bool expect_in_place, const std::string& what) {
  SCOPED_TRACE(what + (nhwc ? " (channels-last)" : " (NCHW)"));
  std::uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>((seed >> 8) % 2001) / 1000.f - 1.f;
  };
  const std::size_t n = static_cast<std::size_t>(C * S * S);
  std::vector<float> w0(C * C), w1(C * C * 9), b1(C), x(n), r(C);
  for (auto* v : {&w0, &w1, &b1, &x, &r}) {
    for (float& f : *v) f = rnd();
  }
  for (float& f : w1) f *= 0.2f;
  // Reference, in double.
  auto at = [&](const std::vector<double>& t, std::int64_t ch, std::int64_t i, std::int64_t j) {
    return (i < 0 || j < 0 || i >= S || j >= S) ? 0.0 : t[(ch * S + i) * S + j];
  };
  std::vector<double> xd(x.begin(), x.end()), a(n), b(n), c(n), y(n);
  auto relu_1x1 = [&](const std::vector<double>& in, std::vector<double>& out) {  // Relu(Conv 1x1 by w0)
    for (std::int64_t o = 0; o < C; ++o) {
      for (std::int64_t p = 0; p < S * S; ++p) {
        double v = 0;
        for (std::int64_t i = 0; i < C; ++i) v += static_cast<double>(w0[o * C + i]) * in[i * S * S + p];
        out[o * S * S + p] = std::max(v, 0.0);
      }
    }
  };
  relu_1x1(xd, a);
  if (rc.self_residual) {
    b = a;
  } else {
    relu_1x1(a, b);
  }
  for (std::int64_t o = 0; o < C; ++o) {
    for (std::int64_t i = 0; i < S; ++i) {
      for (std::int64_t j = 0; j < S; ++j) {
        double v = b1[o];
        for (std::int64_t ic = 0; ic < C; ++ic) {
          for (int ki = 0; ki < 3; ++ki) {
            for (int kj = 0; kj < 3; ++kj) {
              v += static_cast<double>(w1[((o * C + ic) * 3 + ki) * 3 + kj]) * at(b, ic, i + ki - 1, j + kj - 1);
            }
          }
        }
        c[(o * S + i) * S + j] = v;
      }
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t ch = static_cast<std::int64_t>(k) / (S * S);
    const double res = rc.broadcast ? r[ch] : rc.residual_is_input ? xd[k] : a[k];
    y[k] = rc.relu_before_add ? std::max(c[k], 0.0) + res : std::max(c[k] + res, 0.0);
  }

  test::TempDir dir;
  format::CompiledModel cm;
  CompileOptions opts;
  if (!nhwc) opts.passes.disabled = {"layout"};
  auto model = CompileAndLoad(ResidualGraph(rc, C, S, w0, w1, b1), dir, &cm, opts);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ir::Node* fused = nullptr;
  for (auto& node : cm.graph->nodes()) {
    if (node->op_type() == "Conv" && node->GetInt("kiln.sum", 0) == 1) fused = node.get();
  }
  EXPECT_EQ(fused != nullptr, expect_fused);
  EXPECT_EQ(CountOpsIn(cm, "Add"), expect_fused ? 0 : 1);
  if (fused) {
    EXPECT_EQ(fused->GetString("kiln.activation", ""), "Relu");  // after the sum
    EXPECT_EQ(fused->GetInt("kiln.inplace", -1), expect_in_place ? 3 : -1);
  }
  std::vector<float> out(n), cout(n);
  std::vector<TensorRef> ins = {TensorRef::Of(x.data(), {1, C, S, S})};
  if (rc.broadcast) ins.push_back(TensorRef::Of(r.data(), {1, C, 1, 1}));
  std::vector<TensorRef> outs = {TensorRef::Of(out.data(), {1, C, S, S})};
  if (rc.conv_out_too) outs.push_back(TensorRef::Of(cout.data(), {1, C, S, S}));
  for (int run = 0; run < 2; ++run) {  // the in-place output must not disturb a second run
    ASSERT_TRUE((*model)->Execute(ins, outs).ok());
    double worst = 0;
    for (std::size_t k = 0; k < n; ++k) {
      worst = std::max(worst, std::fabs(out[k] - y[k]) / (1e-5 + 1e-5 * std::fabs(y[k])));
    }
    EXPECT_LE(worst, 10.0) << "run " << run;
  }
}

TEST(Pipeline, ResidualAddAndReluFuseIntoTheConvInPlace) {
  for (bool nhwc : {false, true}) {
    CheckResidual({}, nhwc, 8, 6, true, true, "Conv + residual, Relu");
    ResidualCase swapped;
    swapped.add_swapped = true;
    CheckResidual(swapped, nhwc, 8, 6, true, true, "residual as the Add's first input");
    // A model input is no arena tensor: fused, not in place. (Channels-last
    // keeps that Add on the NCHW input: no fusion.)
    ResidualCase input;
    input.residual_is_input = true;
    CheckResidual(input, nhwc, 8, 6, !nhwc, false, "residual a model input");
    ResidualCase self;
    self.self_residual = true;
    CheckResidual(self, nhwc, 8, 6, true, false, "Conv(a) + a");
  }
}

// A channels-last Conv with an input of 2 MiB and 32 channels runs on
// oneDNN's blocked layout where its AVX2 kernel is what the CPU gets
// (conv.cc's BlockedIsFaster); the residual is reordered into the blocked
// output and summed onto there, in place. (Winograd off: it would take this
// convolution.)
TEST(Pipeline, ResidualOnTheBlockedRoute) {
  setenv("KILN_CONV_WINOGRAD", "off", 1);
  CheckResidual({}, true, 32, 128, true, true, "32 channels, 128 x 128");
  unsetenv("KILN_CONV_WINOGRAD");
}

// Where oneDNN would run its AVX2 kernel, a channels-last 3x3 Conv with 32
// channels runs on Winograd F(4x4, 3x3) (conv.cc's UseWinograd): bias,
// residual in place and Relu in its epilogue; 40 x 40 (100 tiles: blocks of
// tiles) and 16 x 16 (16 tiles: one block). Elsewhere oneDNN runs it; the
// result is the same.
TEST(Pipeline, ResidualOnTheWinogradRoute) {
  CheckResidual({}, true, 32, 40, true, true, "32 channels, 40 x 40");
  CheckResidual({}, true, 32, 16, true, true, "32 channels, 16 x 16");
  ResidualCase self;
  self.self_residual = true;
  CheckResidual(self, true, 32, 16, true, false, "Conv(a) + a, 32 channels, 16 x 16");
}

// Near misses: the Conv's output read elsewhere too, an activation between
// Conv and Add, a broadcasting residual.
TEST(Pipeline, ResidualNearMissesDoNotFuse) {
  for (bool nhwc : {false, true}) {
    ResidualCase out_too;
    out_too.conv_out_too = true;
    CheckResidual(out_too, nhwc, 8, 6, false, false, "conv output also a model output");
    ResidualCase relu_first;
    relu_first.relu_before_add = true;
    CheckResidual(relu_first, nhwc, 8, 6, false, false, "Relu between Conv and Add");
    ResidualCase bc;
    bc.broadcast = true;
    CheckResidual(bc, nhwc, 8, 6, false, false, "broadcasting residual");
  }
}

// Every route the kernel may take to add the residual (oneDNN's sum post-op,
// its binary post-op, a binary primitive after the convolution; forced with
// $KILN_CONV_RESIDUAL), in place and not.
TEST(Pipeline, ResidualRoutesAgree) {
  for (const char* route : {"binary", "separate"}) {
    setenv("KILN_CONV_RESIDUAL", route, 1);
    for (bool nhwc : {false, true}) {
      CheckResidual({}, nhwc, 8, 6, true, true, std::string("route ") + route + ", in place");
      ResidualCase self;
      self.self_residual = true;
      CheckResidual(self, nhwc, 8, 6, true, false, std::string("route ") + route + ", not in place");
    }
    unsetenv("KILN_CONV_RESIDUAL");
  }
}

// As TensorFlow converters write a residual block: NHWC activations, the
// Conv between Transposes, then its bias Add, the residual Add (of the NHWC
// model input) and Relu. After the layout pass cancels the Transposes, the
// bias fuses first, then the residual, then the Relu: one Conv.
TEST(Pipeline, NhwcConvBiasResidualReluFuseIntoOneConv) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 2, 2});  // N, H, W, C
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 2, 1, 1}, {1, 2, -3, 0.5f}));
  ir::Value* b = g->AddConstant("b", test::F32({2}, {0.25f, -1.5f}));
  ir::Value *t = g->AddValue("t"), *c = g->AddValue("c"), *u = g->AddValue("u"), *a = g->AddValue("a"),
            *s = g->AddValue("s"), *y = g->AddValue("y");
  g->AddNode("Transpose", "to_nchw", {x}, {t})->SetAttr("perm", ir::Attribute::Ints({0, 3, 1, 2}));
  g->AddNode("Conv", "conv", {t, w}, {c});
  g->AddNode("Transpose", "to_nhwc", {c}, {u})->SetAttr("perm", ir::Attribute::Ints({0, 2, 3, 1}));
  g->AddNode("Add", "bias", {u, b}, {a});
  g->AddNode("Add", "residual", {a, x}, {s});
  g->AddNode("Relu", "relu", {s}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(cm.graph->nodes().size(), 1u);
  const ir::Node& conv = *cm.graph->nodes()[0];
  EXPECT_EQ(conv.op_type(), "Conv");
  EXPECT_EQ(conv.GetInt("kiln.sum", 0), 1);
  EXPECT_EQ(conv.GetString("kiln.activation", ""), "Relu");
  // x[n,h,w,c] = {1,2, 3,4, -1,0, 1,2}: per pixel p, channel o:
  // relu(w[o][0] x[p,0] + w[o][1] x[p,1] + b[o] + x[p,o]).
  const std::vector<float> xv = {1, 2, 3, 4, -1, 0, 1, 2};
  const float wt[2][2] = {{1, 2}, {-3, 0.5f}}, bias[2] = {0.25f, -1.5f};
  std::vector<float> want(8), yv(8);
  for (int p = 0; p < 4; ++p) {
    for (int o = 0; o < 2; ++o) {
      want[2 * p + o] = std::max(0.f, wt[o][0] * xv[2 * p] + wt[o][1] * xv[2 * p + 1] + bias[o] + xv[2 * p + o]);
    }
  }
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xv.data(), {1, 2, 2, 2})}, {TensorRef::Of(yv.data(), {1, 2, 2, 2})}).ok());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(yv[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << i;
}

// A transformer projection: y = act(x[2,3,4] W[4,5] + bias), bias of
// shape `bias_shape`; act: 0 none, 1 Relu, 2 the erf GELU as exporters write
// it. A bias varying only along N fuses into the MatMul (kiln.bias), then the
// activation; a bias varying along M (a near miss) stays an Add. Reference:
// double, written here.
void CheckMatMulBias(const Shape& bias_shape, int act, bool expect_fused) {
  SCOPED_TRACE(ShapeToString(bias_shape) + " act " + std::to_string(act));
  std::vector<float> xv(24), wv(20), bv(NumElements(bias_shape));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * i) * 2;
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(1.3f * i);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = 0.25f * i - 1;
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3, 4});
  g->inputs().push_back(x);
  ir::Value *m = g->AddValue("m"), *a = g->AddValue("a"), *y = g->AddValue("y");
  g->AddNode("MatMul", "mm", {x, g->AddConstant("w", test::F32({4, 5}, wv))}, {m});
  g->AddNode("Add", "bias", {m, g->AddConstant("b", test::F32(bias_shape, bv))}, {act == 0 ? y : a});
  if (act == 1) g->AddNode("Relu", "relu", {a}, {y});
  if (act == 2) {
    ir::Value *d = g->AddValue("d"), *e = g->AddValue("e"), *p = g->AddValue("p"), *q = g->AddValue("q");
    g->AddNode("Div", "div", {a, g->AddConstant("k", test::F32({}, {std::sqrt(2.f)}))}, {d});
    g->AddNode("Erf", "erf", {d}, {e});
    g->AddNode("Add", "one", {e, g->AddConstant("c1", test::F32({}, {1.f}))}, {p});
    g->AddNode("Mul", "m1", {a, p}, {q});
    g->AddNode("Mul", "m2", {q, g->AddConstant("half", test::F32({}, {0.5f}))}, {y});
  }
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  std::vector<double> want(30);
  for (int bm = 0; bm < 6; ++bm) {
    for (int n = 0; n < 5; ++n) {
      double v = 0;
      for (int k = 0; k < 4; ++k) v += static_cast<double>(xv[bm * 4 + k]) * wv[k * 5 + n];
      // bias [5] / [1,1,5]: by n; [3,5]: by (row within the batch, n).
      v += bias_shape.size() == 2 && bias_shape[0] == 3 ? bv[(bm % 3) * 5 + n] : bv[n];
      if (act == 1) v = std::max(v, 0.0);
      if (act == 2) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      want[bm * 5 + n] = v;
    }
  }
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  if (expect_fused) {
    EXPECT_EQ(cm.graph->nodes().size(), 1u);
  }
  EXPECT_EQ(CountOpsIn(cm, "Add"), expect_fused ? 0 : 1);
  const ir::Node& mm = *cm.graph->nodes()[0];
  EXPECT_EQ(mm.op_type(), "MatMul");
  EXPECT_EQ(mm.GetInt("kiln.bias", 0), expect_fused ? 1 : 0);
  if (expect_fused) {
    EXPECT_EQ(mm.GetString("kiln.activation", ""), act == 0 ? "" : act == 1 ? "Relu" : "Gelu");
  }
  std::vector<float> yv(30);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xv.data(), {2, 3, 4})}, {TensorRef::Of(yv.data(), {2, 3, 5})}).ok());
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(yv[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << i;
}

TEST(Pipeline, MatMulBiasAndActivationFuseIntoTheMatMul) {
  CheckMatMulBias({5}, 0, true);
  CheckMatMulBias({1, 1, 5}, 1, true);
  CheckMatMulBias({5}, 2, true);
}

TEST(Pipeline, MatMulBiasNearMissDoesNotFuse) {
  CheckMatMulBias({3, 5}, 0, false);  // varies along M: stays an Add
}

// GELU as exporters write it: d = x / sqrt(2) (or x * 1/sqrt(2)), e = Erf(d),
// a = e + 1, then x * a * 0.5 with the Muls in one of three orders.
// `form` 0: (x*a)*0.5, 1: (x*0.5)*a, 2: x*(a*0.5); `div_by` is the divisor
// (a near miss uses another); `erf_also_output` makes Erf's output a model
// output (a near miss: it must then survive).
std::unique_ptr<ir::Graph> GeluGraph(int form, float div_by, bool erf_also_output, std::int64_t n) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {n});
  g->inputs().push_back(x);
  ir::Value* k = g->AddConstant("k", test::F32({}, {div_by}));
  ir::Value* one = g->AddConstant("one", test::F32({}, {1.f}));
  ir::Value* half = g->AddConstant("half", test::F32({}, {0.5f}));
  ir::Value *d = g->AddValue("d"), *e = g->AddValue("e"), *a = g->AddValue("a"), *m = g->AddValue("m"),
            *y = g->AddValue("y");
  g->AddNode("Div", "div", {x, k}, {d});
  g->AddNode("Erf", "erf", {d}, {e});
  g->AddNode("Add", "add", {one, e}, {a});
  if (form == 0) {
    g->AddNode("Mul", "m1", {x, a}, {m});
    g->AddNode("Mul", "m2", {m, half}, {y});
  } else if (form == 1) {
    g->AddNode("Mul", "m1", {half, x}, {m});
    g->AddNode("Mul", "m2", {a, m}, {y});
  } else {
    g->AddNode("Mul", "m1", {a, half}, {m});
    g->AddNode("Mul", "m2", {m, x}, {y});
  }
  g->outputs().push_back(y);
  if (erf_also_output) g->outputs().push_back(e);
  test::SetLatestVersions(*g);
  return g;
}

int CountOps(const format::CompiledModel& m, const std::string& op) {
  int c = 0;
  for (auto& n : m.graph->nodes()) c += n->op_type() == op;
  return c;
}

// The fused kernel (oneDNN's erf GELU) against x * 0.5 * (1 + erf(x / sqrt 2))
// in double over [-10, 10] in steps of 1/400, in every pattern form.
TEST(Pipeline, GeluFusesIntoOneAccurateKernel) {
  const std::int64_t n = 8001;
  std::vector<float> x(n), y(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = -10.f + static_cast<float>(i) / 400.f;
  for (int form = 0; form < 3; ++form) {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluGraph(form, std::sqrt(2.f), false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 1) << "form " << form;
    EXPECT_EQ(cm.graph->nodes().size(), 1u) << "form " << form;
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})}, {TensorRef::Of(y.data(), {n})}).ok());
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double xd = x[i], want = xd * 0.5 * (1.0 + std::erf(xd / std::sqrt(2.0)));
      const double err = std::fabs(y[i] - want) / std::max(1.0, std::fabs(want));
      worst = std::max(worst, err);
    }
    // float32 has 6e-8 relative resolution; a few ulps of slack.
    EXPECT_LT(worst, 1e-6) << "form " << form;
  }
}

TEST(Pipeline, GeluNearMissesDoNotFuse) {
  const std::int64_t n = 5;
  std::vector<float> x = {-2, -0.5f, 0, 0.5f, 2}, y(n), e(n);
  {  // another divisor: not GELU; computed as written
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluGraph(0, 1.5f, false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
    EXPECT_EQ(CountOps(cm, "Erf"), 1);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})}, {TensorRef::Of(y.data(), {n})}).ok());
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i], x[i] * 0.5 * (1 + std::erf(x[i] / 1.5)), 1e-6) << i;
    }
  }
  {  // Erf's output is also a model output: it must stay
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluGraph(0, std::sqrt(2.f), true, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})},
                                  {TensorRef::Of(y.data(), {n}), TensorRef::Of(e.data(), {n})}).ok());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(e[i], std::erf(x[i] / std::sqrt(2.0)), 1e-6) << i;
  }
  {  // the pass switched off
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions co;
    co.passes.disabled = {"fuse-gelu"};
    auto model = CompileAndLoad(GeluGraph(1, std::sqrt(2.f), false, n), dir, &cm, co);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
  }
}

// A half model computed in float32 holds sqrt(2) as its half type rounds it:
// 1.4140625 in both float16 (10 mantissa bits) and bfloat16 (7): 1.4142135
// = 1 + 0.4142135, 0.4142135 x 1024 = 424.15 -> 424, x 128 = 53.02 -> 53,
// and 424/1024 = 53/128 = 0.4140625. GELU with the exact constant differs
// by less than the half type's rounding, so it fuses; a divisor one float32
// ulp off that value is not a half rounding of sqrt(2) and does not.
TEST(Pipeline, GeluWithAHalfRoundedConstantFuses) {
  const std::int64_t n = 5;
  const float rounded = 1.4140625f;
  {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluGraph(0, rounded, false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 1);
  }
  {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluGraph(0, std::nextafter(rounded, 2.f), false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
    EXPECT_EQ(CountOps(cm, "Erf"), 1);
  }
}

// GELU's tanh approximation as torch.onnx and GPT-2's code write it:
//   c = Pow(x, 3) (cube 0) or x * (x * x) (cube 1) or (x * x) * x (cube 2)
//   s = x + kappa * c;  z = beta * s;  t = Tanh(z);  a = t + 1;  y = (x * a) * 0.5
// (operand orders vary with `cube`); kappa = 0.044715, beta = sqrt(2/pi)
// unless a near miss passes others; `t_also_output`: Tanh's output is also a
// model output.
std::unique_ptr<ir::Graph> GeluTanhGraph(int cube, float kappa, float beta, bool t_also_output, std::int64_t n) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {n});
  g->inputs().push_back(x);
  auto k = [&](const char* name, float v) { return g->AddConstant(name, test::F32({}, {v})); };
  ir::Value *c = g->AddValue("c"), *q = g->AddValue("q"), *s = g->AddValue("s"), *z = g->AddValue("z"),
            *t = g->AddValue("t"), *a = g->AddValue("a"), *m = g->AddValue("m"), *y = g->AddValue("y");
  if (cube == 0) {
    g->AddNode("Pow", "pow", {x, k("three", 3.f)}, {c});
  } else {
    ir::Value* sq = g->AddValue("sq");
    g->AddNode("Mul", "sq", {x, x}, {sq});
    g->AddNode("Mul", "cube", cube == 1 ? std::vector<ir::Value*>{x, sq} : std::vector<ir::Value*>{sq, x}, {c});
  }
  g->AddNode("Mul", "q", cube == 1 ? std::vector<ir::Value*>{k("kappa", kappa), c} : std::vector<ir::Value*>{c, k("kappa", kappa)}, {q});
  g->AddNode("Add", "s", cube == 2 ? std::vector<ir::Value*>{q, x} : std::vector<ir::Value*>{x, q}, {s});
  g->AddNode("Mul", "z", cube == 1 ? std::vector<ir::Value*>{k("beta", beta), s} : std::vector<ir::Value*>{s, k("beta", beta)}, {z});
  g->AddNode("Tanh", "tanh", {z}, {t});
  g->AddNode("Add", "a", {t, k("one", 1.f)}, {a});
  g->AddNode("Mul", "m", {x, a}, {m});
  g->AddNode("Mul", "half", {k("half", 0.5f), m}, {y});
  g->outputs().push_back(y);
  if (t_also_output) g->outputs().push_back(t);
  test::SetLatestVersions(*g);
  return g;
}

// The fused tanh-GELU kernel against 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
// in double over [-12, 12] in steps of 1/400, and at extremes, in every form.
TEST(Pipeline, GeluTanhFusesIntoOneAccurateKernel) {
  std::vector<float> x;
  for (int i = -4800; i <= 4800; ++i) x.push_back(static_cast<float>(i) / 400.f);
  for (float v : {1e-30f, -1e-30f, 1e-20f, 30.f, -30.f, 1e4f, -1e4f, 3e38f, -3e38f}) x.push_back(v);
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  std::vector<float> y(x.size());
  const double beta = std::sqrt(2.0 / 3.14159265358979323846);
  for (int cube = 0; cube < 3; ++cube) {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluTanhGraph(cube, 0.044715f, static_cast<float>(beta), false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_EQ(cm.graph->nodes().size(), 1u) << "cube " << cube;
    const ir::Node& gelu = *cm.graph->nodes()[0];
    EXPECT_EQ(gelu.op_type(), "Gelu");
    EXPECT_EQ(gelu.GetString("approximate", ""), "tanh");
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})}, {TensorRef::Of(y.data(), {n})}).ok());
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double xd = x[i];
      const double want = 0.5 * xd * (1.0 + std::tanh(beta * (xd + 0.044715 * xd * xd * xd)));
      // relative to max(1, |want|): a few float32 ulps; tiny x: relative to x
      const double err = std::fabs(y[i] - want) /
                         std::max({std::fabs(xd) < 1e-3 ? std::fabs(xd) : 1.0, std::fabs(want), 1e-300});
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-6) << "cube " << cube << ": gelu_tanh(" << x[i] << ") = " << y[i] << ", want " << want;
    }
    RecordProperty("gelu_tanh_worst_relative_error_x1e9_cube" + std::to_string(cube), static_cast<int>(worst * 1e9));
  }
  // NaN propagates.
  test::TempDir dir;
  auto model = CompileAndLoad(GeluTanhGraph(0, 0.044715f, static_cast<float>(beta), false, 1), dir);
  ASSERT_TRUE(model.ok());
  float nan = std::numeric_limits<float>::quiet_NaN(), out = 0;
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(&nan, {1})}, {TensorRef::Of(&out, {1})}).ok());
  EXPECT_TRUE(std::isnan(out));
}

TEST(Pipeline, GeluTanhNearMissesDoNotFuse) {
  const std::int64_t n = 5;
  const float beta = static_cast<float>(std::sqrt(2.0 / 3.14159265358979323846));
  std::vector<float> x = {-2, -0.5f, 0, 0.5f, 2}, y(n), t(n);
  auto ref = [](double x, double kappa, double beta) { return 0.5 * x * (1.0 + std::tanh(beta * (x + kappa * x * x * x))); };
  for (auto [kappa, b] : {std::pair<float, float>{0.05f, beta}, {0.044715f, 0.8f}}) {  // other constants: as written
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluTanhGraph(1, kappa, b, false, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
    EXPECT_EQ(CountOps(cm, "Tanh"), 1);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})}, {TensorRef::Of(y.data(), {n})}).ok());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], ref(x[i], kappa, b), 1e-6) << i;
  }
  {  // Tanh's output is also a model output: it must stay
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(GeluTanhGraph(2, 0.044715f, beta, true, n), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {n})},
                                  {TensorRef::Of(y.data(), {n}), TensorRef::Of(t.data(), {n})}).ok());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], ref(x[i], 0.044715, beta), 1e-6) << i;
  }
  {  // the pass switched off
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions co;
    co.passes.disabled = {"fuse-gelu"};
    auto model = CompileAndLoad(GeluTanhGraph(0, 0.044715f, beta, false, n), dir, &cm, co);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "Gelu"), 0);
  }
}

// Layer normalisation as PyTorch exports nn.LayerNorm before opset 17, over
// the last axis of x [rows, n]: mean = ReduceMean(x), d = x - mean,
// v = ReduceMean(Pow(d, 2) or d * d), y = d / Sqrt(v + eps) * gamma + beta.
// `square_by_mul`: d * d; `affine`: with gamma and beta; `axes`: the
// ReduceMeans' axes (a near miss passes others); `d_also_output`: d is a
// model output too (a near miss).
std::unique_ptr<ir::Graph> LayerNormGraph(std::int64_t rows, std::int64_t n, bool square_by_mul, bool affine,
                                          std::vector<std::int64_t> axes, bool d_also_output,
                                          const std::vector<float>& gamma, const std::vector<float>& beta,
                                          std::vector<std::string> dim_params = {}) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {dim_params.size() > 0 && !dim_params[0].empty() ? -1 : rows,
                                                     dim_params.size() > 1 && !dim_params[1].empty() ? -1 : n});
  if (!dim_params.empty()) x->dim_params() = dim_params;
  g->inputs().push_back(x);
  ir::Value *mean = g->AddValue("mean"), *d = g->AddValue("d"), *sq = g->AddValue("sq"), *var = g->AddValue("var"),
            *ve = g->AddValue("ve"), *sd = g->AddValue("sd"), *nrm = g->AddValue("nrm");
  g->AddNode("ReduceMean", "mean", {x}, {mean})->SetAttr("axes", ir::Attribute::Ints(axes));
  g->AddNode("Sub", "sub", {x, mean}, {d});
  if (square_by_mul) g->AddNode("Mul", "sq", {d, d}, {sq});
  else g->AddNode("Pow", "sq", {d, g->AddConstant("two", test::F32({}, {2.f}))}, {sq});
  g->AddNode("ReduceMean", "var", {sq}, {var})->SetAttr("axes", ir::Attribute::Ints(axes));
  g->AddNode("Add", "eps", {var, g->AddConstant("epsv", test::F32({}, {1e-5f}))}, {ve});
  g->AddNode("Sqrt", "sqrt", {ve}, {sd});
  g->AddNode("Div", "div", {d, sd}, {nrm});
  ir::Value* y = nrm;
  if (affine) {
    ir::Value *m = g->AddValue("m"), *b = g->AddValue("y");
    g->AddNode("Mul", "gamma", {g->AddConstant("g", test::F32({n}, gamma)), nrm}, {m});
    g->AddNode("Add", "beta", {m, g->AddConstant("b", test::F32({1, n}, beta))}, {b});
    y = b;
  }
  g->outputs().push_back(y);
  if (d_also_output) g->outputs().push_back(d);
  test::SetLatestVersions(*g);
  return g;
}

// LayerNorm of each row of x [rows, n] in double.
std::vector<double> LayerNormRef(const std::vector<float>& x, std::int64_t rows, std::int64_t n,
                                 const std::vector<float>& gamma, const std::vector<float>& beta, bool affine) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (std::int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    const double rstd = 1.0 / std::sqrt(var / n + 1e-5);
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = (x[r * n + i] - mean) * rstd;
      y[r * n + i] = affine ? v * gamma[i] + beta[i] : v;
    }
  }
  return y;
}

// Rows of 771 values (a vector body and a tail) offset by 1000 (so a
// one-pass variance would cancel): against double, in each form.
TEST(Pipeline, LayerNormFusesIntoOneAccurateKernel) {
  const std::int64_t rows = 5, n = 771;
  std::vector<float> x(rows * n), gamma(n), beta(n), y(rows * n);
  for (std::int64_t i = 0; i < rows * n; ++i) x[i] = 1000.f + static_cast<float>((i * 37) % 101 - 50) / 16.f;
  for (std::int64_t i = 0; i < n; ++i) {
    gamma[i] = 0.5f + static_cast<float>(i % 7) / 4.f;
    beta[i] = static_cast<float>(i % 5) - 2.f;
  }
  for (bool by_mul : {false, true}) {
    for (bool affine : {true, false}) {
      for (std::vector<std::int64_t> axes : {std::vector<std::int64_t>{-1}, std::vector<std::int64_t>{1}}) {
        SCOPED_TRACE(testing::Message() << "d*d " << by_mul << " affine " << affine << " axis " << axes[0]);
        test::TempDir dir;
        format::CompiledModel cm;
        auto model = CompileAndLoad(LayerNormGraph(rows, n, by_mul, affine, axes, false, gamma, beta), dir, &cm);
        ASSERT_TRUE(model.ok()) << model.status().ToString();
        ASSERT_EQ(cm.graph->nodes().size(), 1u);
        const ir::Node& ln = *cm.graph->nodes()[0];
        EXPECT_EQ(ln.op_type(), "LayerNormalization");
        EXPECT_EQ(ln.GetInt("axis", 0), 1);
        EXPECT_EQ(ln.num_inputs(), affine ? 3 : 2);
        ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {rows, n})}, {TensorRef::Of(y.data(), {rows, n})}).ok());
        const std::vector<double> want = LayerNormRef(x, rows, n, gamma, beta, affine);
        double worst = 0;
        for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - want[i]));
        // |want| is below 8 here; float32 leaves a few 1e-7.
        EXPECT_LT(worst, 2e-5);
      }
    }
  }
}

// Rows of 4096 values around 1e4 with spread 1: float lane sums, or a mean
// rounded to float, would leave errors near 1e-3.
TEST(Pipeline, LayerNormIsAccurateOnLongOffsetRows) {
  const std::int64_t rows = 3, n = 4096;
  std::vector<float> x(rows * n), gamma(n, 1.f), beta(n, 0.f), y(rows * n);
  for (std::int64_t i = 0; i < rows * n; ++i) x[i] = 10000.f + static_cast<float>((i * 37) % 17 - 8) / 8.f;
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(LayerNormGraph(rows, n, false, false, {-1}, false, gamma, beta), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(CountOps(cm, "LayerNormalization"), 1);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {rows, n})}, {TensorRef::Of(y.data(), {rows, n})}).ok());
  const std::vector<double> want = LayerNormRef(x, rows, n, gamma, beta, false);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - want[i]));
  EXPECT_LT(worst, 2e-5);
}

// A symbolic batch keeps the fusion; a symbolic normalised dim does not (its
// Scale would be built at the compiler's probe extent). Both run at several
// extents against double.
TEST(Pipeline, LayerNormWithSymbolicDims) {
  std::vector<float> gamma(6), beta(6);
  for (int i = 0; i < 6; ++i) {
    gamma[i] = 1.f + static_cast<float>(i) / 4.f;
    beta[i] = static_cast<float>(i) / 2.f - 1.f;
  }
  for (int which : {0, 1}) {
    SCOPED_TRACE(which ? "symbolic normalised dim" : "symbolic rows");
    test::TempDir dir;
    format::CompiledModel cm;
    const bool affine = which == 0;
    auto model = CompileAndLoad(LayerNormGraph(4, 6, false, affine, {-1}, false, gamma, beta,
                                               which ? std::vector<std::string>{"", "t"} : std::vector<std::string>{"rows", ""}),
                                dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "LayerNormalization"), which ? 0 : 1);
    for (std::int64_t ext : {2, 5, 13}) {
      const std::int64_t rows = which ? 4 : ext, n = which ? ext : 6;
      std::vector<float> x(rows * n), y(rows * n);
      for (std::int64_t i = 0; i < rows * n; ++i) x[i] = static_cast<float>((i * 5) % 11) / 4.f - 1.f;
      ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {rows, n})}, {TensorRef::Of(y.data(), {rows, n})}).ok()) << ext;
      const std::vector<double> want = LayerNormRef(x, rows, n, gamma, beta, affine);
      for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << "extent " << ext << " at " << i;
    }
  }
}

TEST(Pipeline, LayerNormNearMissesDoNotFuse) {
  const std::int64_t rows = 2, n = 4;
  std::vector<float> x = {1, 2, 3, 5, -1, 0, 4, 4}, gamma = {1, 2, 3, 4}, beta = {0, 1, 0, 1}, y(8), d(8);
  const std::vector<double> want = LayerNormRef(x, rows, n, gamma, beta, true);
  {  // d is also a model output: it must stay
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(LayerNormGraph(rows, n, false, true, {-1}, true, gamma, beta), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "LayerNormalization"), 0);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {rows, n})},
                                  {TensorRef::Of(y.data(), {rows, n}), TensorRef::Of(d.data(), {rows, n})}).ok());
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << i;
  }
  {  // normalised over axis 0, which is not trailing: as written
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(LayerNormGraph(rows, n, false, false, {0}, false, gamma, beta), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "LayerNormalization"), 0);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {rows, n})}, {TensorRef::Of(y.data(), {rows, n})}).ok());
    for (int j = 0; j < n; ++j) {  // column j: x[j], x[n + j]
      const double a = x[j], b = x[n + j], m = (a + b) / 2, s = std::sqrt(((a - m) * (a - m) + (b - m) * (b - m)) / 2 + 1e-5);
      EXPECT_NEAR(y[j], (a - m) / s, 1e-5) << j;
      EXPECT_NEAR(y[n + j], (b - m) / s, 1e-5) << j;
    }
  }
  {  // the pass switched off
    test::TempDir dir;
    format::CompiledModel cm;
    CompileOptions co;
    co.passes.disabled = {"fuse-layernorm"};
    auto model = CompileAndLoad(LayerNormGraph(rows, n, false, true, {-1}, false, gamma, beta), dir, &cm, co);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(cm, "LayerNormalization"), 0);
  }
}

// Pad -> AveragePool (count_include_pad 0, as PyTorch writes an average
// pool with count_include_pad=True) and Pad -> Conv: the Pad's spatial pads
// join the consumer's (fuse-pad), the pool counting them. Results against a
// double reference of the padded input; near misses keep their Pad: reflect
// mode, a nonzero pad value, a pad on the channel dim, an AveragePool with
// its own pads not counted, a Pad that is also an output.
struct PadCase {
  std::string what, mode = "constant", consumer = "AveragePool";
  float value = 0;
  std::vector<std::int64_t> pads = {0, 0, 1, 2, 0, 0, 1, 0};
  std::int64_t own_pad = 0;
  bool read_twice = false, fuses = true;
};

void CheckPad(const PadCase& pc) {
  SCOPED_TRACE(pc.what);
  const std::int64_t C = 2, H = 4, W = 5, K = 3;
  std::vector<float> x(C * H * W), w(3 * C * K * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i) + 0.2);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::cos(0.3 * i));
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
  g->inputs().push_back(xv);
  ir::Value *p = g->AddValue("p"), *y = g->AddValue("y");
  std::vector<ir::Value*> pin = {xv, g->AddConstant("pads", test::I64({8}, pc.pads))};
  if (pc.value != 0) pin.push_back(g->AddConstant("pv", test::F32({}, {pc.value})));
  g->AddNode("Pad", "pad", pin, {p})->SetAttr("mode", ir::Attribute::String(pc.mode));
  ir::Node* c;
  const std::int64_t op = pc.own_pad;
  if (pc.consumer == "Conv") {
    c = g->AddNode("Conv", "c", {p, g->AddConstant("w", test::F32({3, C, K, K}, w))}, {y});
  } else {
    c = g->AddNode("AveragePool", "c", {p}, {y});
  }
  c->SetAttr("kernel_shape", ir::Attribute::Ints({K, K}));
  c->SetAttr("pads", ir::Attribute::Ints({op, op, op, op}));
  g->outputs().push_back(y);
  if (pc.read_twice) g->outputs().push_back(p);
  test::SetLatestVersions(*g);
  // Reference: the padded input (constant mode; reflect for that case), then
  // the consumer with its own zero pads (pools divide by the taps inside
  // the padded input: the explicit Pad's values count).
  const std::int64_t pt = pc.pads[2], pl = pc.pads[3], pb = pc.pads[6], pr = pc.pads[7], pcb = pc.pads[1];
  const std::int64_t Cp = C + pcb + pc.pads[5], Hp = H + pt + pb, Wp = W + pl + pr;
  auto padded = [&](std::int64_t ch, std::int64_t i, std::int64_t j) -> double {
    std::int64_t cc = ch - pcb, ii = i - pt, jj = j - pl;
    if (pc.mode == "reflect") {
      ii = ii < 0 ? -ii : ii >= H ? 2 * (H - 1) - ii : ii;
      jj = jj < 0 ? -jj : jj >= W ? 2 * (W - 1) - jj : jj;
    }
    if (cc < 0 || cc >= C || ii < 0 || ii >= H || jj < 0 || jj >= W) return pc.value;
    return x[(cc * H + ii) * W + jj];
  };
  const std::int64_t oc = pc.consumer == "Conv" ? 3 : Cp;
  const std::int64_t Ho = Hp + 2 * op - K + 1, Wo = Wp + 2 * op - K + 1;
  std::vector<double> want(static_cast<std::size_t>(oc * Ho * Wo));
  for (std::int64_t o = 0; o < oc; ++o)
    for (std::int64_t i = 0; i < Ho; ++i)
      for (std::int64_t j = 0; j < Wo; ++j) {
        double s = 0, n = 0;
        for (std::int64_t ci = 0; ci < (pc.consumer == "Conv" ? Cp : 1); ++ci)
          for (std::int64_t u = 0; u < K; ++u)
            for (std::int64_t t = 0; t < K; ++t) {
              const std::int64_t a = i + u - op, b = j + t - op;
              if (a < 0 || b < 0 || a >= Hp || b >= Wp) continue;
              if (pc.consumer == "Conv") {
                s += padded(ci, a, b) * w[((o * C + ci) * K + u) * K + t];
              } else {
                s += padded(o, a, b);
                n += 1;
              }
            }
        want[(o * Ho + i) * Wo + j] = pc.consumer == "Conv" ? s : s / n;
      }
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int pads_left = 0;
  for (auto& n : cm.graph->nodes()) pads_left += n->op_type() == "Pad";
  EXPECT_EQ(pads_left, pc.fuses ? 0 : 1);
  std::vector<float> out(want.size()), pout(static_cast<std::size_t>(Cp * Hp * Wp));
  std::vector<TensorRef> outs = {TensorRef::Of(out.data(), {1, oc, Ho, Wo})};
  if (pc.read_twice) outs.push_back(TensorRef::Of(pout.data(), {1, Cp, Hp, Wp}));
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, C, H, W})}, outs).ok());
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

TEST(Pipeline, ZeroPadFusesIntoTheConvOrAveragePool) {
  CheckPad({"pad -> average pool"});
  PadCase conv;
  conv.what = "pad -> conv";
  conv.consumer = "Conv";
  conv.own_pad = 1;
  CheckPad(conv);
}

TEST(Pipeline, PadNearMissesDoNotFuse) {
  PadCase reflect;
  reflect.what = "reflect mode";
  reflect.mode = "reflect";
  reflect.pads = {0, 0, 1, 2, 0, 0, 1, 1};
  reflect.fuses = false;
  CheckPad(reflect);
  PadCase value;
  value.what = "pad value 2";
  value.value = 2;
  value.fuses = false;
  CheckPad(value);
  PadCase channel;
  channel.what = "a pad on C";
  channel.pads = {0, 1, 1, 0, 0, 0, 0, 1};
  channel.fuses = false;
  CheckPad(channel);
  PadCase own;
  own.what = "the pool's own pads not counted";
  own.own_pad = 1;
  own.fuses = false;
  CheckPad(own);
  PadCase twice;
  twice.what = "the Pad also an output";
  twice.read_twice = true;
  twice.fuses = false;
  CheckPad(twice);
}

// BatchNormalization (one no convolution absorbs) -> Relu / LeakyRelu / Clip:
// the activation joins the BatchNormalization (kiln.activation), on NCHW
// data (no convolution in the graph) and channels-last (between
// convolutions: Conv -> Relu -> BN -> act -> Conv). Near misses keep the
// activation apart: a Sigmoid, and a BN output that is also a model output.
// Against a double reference, with a NaN input (alone: it stays NaN except
// through Relu, which makes it 0 fused or not).
void CheckBnActivation(const std::string& act, bool convs, bool bn_out_too, bool fuses) {
  SCOPED_TRACE(act + (convs ? " between convolutions" : " alone") + (bn_out_too ? ", BN output also an output" : ""));
  const std::int64_t C = 10, H = 4, W = 5;  // channels-last rows: one 8-wide vector and a tail of 2
  std::vector<float> x(C * H * W);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.9 * i) * 2);
  if (!convs) x[7] = std::numeric_limits<float>::quiet_NaN();  // (oneDNN's fused Relu in conv0 would not keep it)
  std::vector<float> sc(C), sh(C), mu(C), var(C);
  for (std::int64_t c = 0; c < C; ++c) {
    sc[c] = static_cast<float>(1.5 * std::cos(0.7 * c));
    sh[c] = static_cast<float>(0.3 * std::sin(1.1 * c));
    mu[c] = static_cast<float>(0.2 * std::cos(1.7 * c));
    var[c] = static_cast<float>(0.5 + 0.1 * c);
  }
  std::vector<float> w0(C * C), w1(C * C);
  for (std::size_t i = 0; i < w0.size(); ++i) w0[i] = static_cast<float>(std::cos(0.4 * i)), w1[i] = static_cast<float>(std::sin(0.6 * i + 1));
  auto g = std::make_unique<ir::Graph>();
  ir::Value* xv = g->AddValue("x", DType::kFloat32, {1, C, H, W});
  g->inputs().push_back(xv);
  ir::Value *in = xv, *n = g->AddValue("n"), *a = g->AddValue("a"), *y = a;
  if (convs) {
    ir::Value *c0 = g->AddValue("c0"), *r0 = g->AddValue("r0");
    g->AddNode("Conv", "conv0", {xv, g->AddConstant("w0", test::F32({C, C, 1, 1}, w0))}, {c0});
    g->AddNode("Relu", "relu0", {c0}, {r0});
    in = r0;
  }
  g->AddNode("BatchNormalization", "bn",
             {in, g->AddConstant("s", test::F32({C}, sc)), g->AddConstant("b", test::F32({C}, sh)),
              g->AddConstant("m", test::F32({C}, mu)), g->AddConstant("v", test::F32({C}, var))},
             {n});
  ir::Node* an = g->AddNode(act, "act", {n}, {a});
  if (act == "LeakyRelu") an->SetAttr("alpha", ir::Attribute::Float(0.1f));
  if (act == "Clip") an->AddInput(g->AddConstant("lo", test::F32({}, {-0.5f}))), an->AddInput(g->AddConstant("hi", test::F32({}, {0.7f})));
  if (convs) {
    y = g->AddValue("y");
    g->AddNode("Conv", "conv1", {a, g->AddConstant("w1", test::F32({C, C, 1, 1}, w1))}, {y});
  }
  g->outputs().push_back(y);
  if (bn_out_too) g->outputs().push_back(n);
  test::SetLatestVersions(*g);
  auto ref_act = [&](double v) {  // Kiln's Relu turns NaN into 0 (as oneDNN's and ONNX Runtime's do)
    if (act == "Relu") return v > 0 ? v : 0.0;
    if (std::isnan(v)) return v;
    if (act == "LeakyRelu") return v < 0 ? 0.1 * v : v;
    if (act == "Clip") return v < -0.5 ? -0.5 : v > 0.7 ? 0.7 : v;
    return 1 / (1 + std::exp(-v));
  };
  std::vector<double> want(x.size()), bnv(x.size());
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t i = 0; i < H * W; ++i) {
      double v = x[c * H * W + i];
      if (convs) {
        double s = 0;
        for (std::int64_t k = 0; k < C; ++k) s += w0[c * C + k] * static_cast<double>(x[k * H * W + i]);
        v = std::isnan(s) ? s : s < 0 ? 0 : s;
      }
      bnv[c * H * W + i] = (v - mu[c]) / std::sqrt(static_cast<double>(var[c]) + 1e-5) * sc[c] + sh[c];
      want[c * H * W + i] = ref_act(bnv[c * H * W + i]);
    }
  if (convs) {
    std::vector<double> z(want.size());
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t i = 0; i < H * W; ++i) {
        double s = 0;
        for (std::int64_t k = 0; k < C; ++k) s += w1[c * C + k] * want[k * H * W + i];
        z[c * H * W + i] = s;
      }
    want = z;
  }
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int acts = 0;
  for (auto& nd : cm.graph->nodes()) {
    acts += nd->op_type() == act;
    if (nd->op_type() == "BatchNormalization") {
      EXPECT_EQ(nd->GetString("kiln.activation", ""), fuses ? act : "");
      EXPECT_EQ(nd->GetInt("kiln.nhwc", 0), convs ? 1 : 0);
    }
  }
  EXPECT_EQ(acts, fuses ? 0 : 1);
  std::vector<float> out(want.size()), nout(want.size());
  std::vector<TensorRef> outs = {TensorRef::Of(out.data(), {1, C, H, W})};
  if (bn_out_too) outs.push_back(TensorRef::Of(nout.data(), {1, C, H, W}));
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, C, H, W})}, outs).ok());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
      continue;
    }
    ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
    if (bn_out_too && !std::isnan(bnv[i])) ASSERT_NEAR(nout[i], bnv[i], 1e-5 * (1 + std::fabs(bnv[i]))) << i;
  }
}

TEST(Pipeline, BatchNormActivationFuses) {
  for (bool convs : {false, true}) {
    for (const char* act : {"Relu", "LeakyRelu", "Clip"}) CheckBnActivation(act, convs, false, true);
  }
}

TEST(Pipeline, BatchNormActivationNearMissesDoNotFuse) {
  for (bool convs : {false, true}) {
    CheckBnActivation("Sigmoid", convs, false, false);
    CheckBnActivation("Relu", convs, true, false);
  }
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

// --- hostile graphs: refused at compile, naming the culprit -----------------

// x -> op -> y with the op's attributes and constant inputs given.
std::unique_ptr<ir::Graph> OneNode(const std::string& op, const Shape& x_shape,
                                   const std::vector<HostTensorPtr>& consts = {},
                                   const std::map<std::string, ir::Attribute>& attrs = {}) {
  auto g = std::make_unique<ir::Graph>();
  g->set_opset(13);
  ir::Value* x = g->AddValue("x", DType::kFloat32, x_shape);
  g->inputs().push_back(x);
  std::vector<ir::Value*> ins = {x};
  for (std::size_t i = 0; i < consts.size(); ++i) ins.push_back(g->AddConstant("c" + std::to_string(i), consts[i]));
  ir::Value* y = g->AddValue("y");
  ir::Node* n = g->AddNode(op, "victim", ins, {y});
  n->set_since_version(op == "Reshape" ? 5 : op == "MaxPool" ? 12 : op == "DepthToSpace" ? 13 : 1);
  for (auto& [k, a] : attrs) n->SetAttr(k, a);
  g->outputs().push_back(y);
  return g;
}

HostTensorPtr I64(std::vector<std::int64_t> v) {
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t->mutable_data_as<std::int64_t>());
  return t;
}

Status CompileError(std::unique_ptr<ir::Graph> g) {
  auto r = CompileGraph(std::move(g), CompileOptions{}, nullptr);
  return r.ok() ? Status::Ok() : r.status();
}

TEST(HostileGraph, InternalFileConstantIsRefused) {
  // The reported disclosure: FileConstant reading /etc/passwd through an
  // internal attribute. Such nodes are created only by the compiler itself.
  auto g = std::make_unique<ir::Graph>();
  ir::Value* s = g->AddValue("secret", DType::kUInt8, {16});
  ir::Node* n = g->AddNode("FileConstant", "steal", {}, {s}, "kiln");
  n->set_since_version(1);
  n->SetAttr("location", ir::Attribute::String("passwd"));
  n->SetAttr("offset", ir::Attribute::Int(0));
  n->SetAttr("length", ir::Attribute::Int(16));
  n->SetAttr("dtype", ir::Attribute::Int(2));
  n->SetAttr("shape", ir::Attribute::Ints({16}));
  n->SetAttr("kiln.base_dir", ir::Attribute::String("/etc"));
  g->outputs().push_back(s);
  Status st = CompileError(std::move(g));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("FileConstant node 'steal' is in domain 'kiln'"), std::string::npos) << st.message();
}

TEST(HostileGraph, ReshapeToAnOverflowingTargetFailsAtCompile) {
  // 2^32 x 2^32 x 4 wraps to 0 in int64 arithmetic; the element count 4 of
  // the input would then "match" a target of 0 elements.
  Status st = CompileError(OneNode("Reshape", {4}, {I64({std::int64_t{1} << 32, std::int64_t{1} << 32, 4})}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Reshape node 'victim'"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("unresolved"), std::string::npos) << st.message();
}

TEST(HostileGraph, EveryInferredOutputIsSizeChecked) {
  // Expand's own inference accepts any target; the central check after
  // inference names the node and the output.
  Status st = CompileError(OneNode("Expand", {1}, {I64({std::int64_t{1} << 20, std::int64_t{1} << 20})}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Expand node 'victim': output 0 'y'"), std::string::npos) << st.message();
  // 2^17 x 2^17 floats = 2^36 bytes = 64 GiB is the limit itself (nothing is
  // allocated at compile); one more row is over it.
  st = CompileError(OneNode("Expand", {1}, {I64({std::int64_t{1} << 17, std::int64_t{1} << 17})}));
  EXPECT_TRUE(st.ok()) << st.message();
  st = CompileError(OneNode("Expand", {1}, {I64({(std::int64_t{1} << 17) + 1, std::int64_t{1} << 17})}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Expand node 'victim': output 0 'y'"), std::string::npos) << st.message();
}

TEST(HostileGraph, HugeBlockSizeIsAnErrorNotADivisionByZero) {
  for (std::int64_t b : {std::int64_t{1} << 32, std::int64_t{1} << 62, std::int64_t{0}, std::int64_t{-2}}) {
    Status st = CompileError(OneNode("DepthToSpace", {1, 16, 2, 2}, {}, {{"blocksize", ir::Attribute::Int(b)}}));
    ASSERT_FALSE(st.ok()) << b;
    EXPECT_NE(st.message().find("DepthToSpace node 'victim': attribute 'blocksize'"), std::string::npos)
        << st.message();
  }
  // a good one still works: [1,16,2,2] with blocksize 2 -> [1,4,4,4]
  auto g = OneNode("DepthToSpace", {1, 16, 2, 2}, {}, {{"blocksize", ir::Attribute::Int(2)}});
  auto r = CompileGraph(std::move(g), CompileOptions{}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->graph->outputs()[0]->shape(), (Shape{1, 4, 4, 4}));
}

TEST(HostileGraph, MaxPoolPadAsLargeAsTheKernelIsRefused) {
  auto attrs = [](std::vector<std::int64_t> pads) {
    return std::map<std::string, ir::Attribute>{{"kernel_shape", ir::Attribute::Ints({2, 2})},
                                                {"pads", ir::Attribute::Ints(std::move(pads))}};
  };
  Status st = CompileError(OneNode("MaxPool", {1, 1, 4, 4}, {}, attrs({0, 0, 0, 2})));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("MaxPool node 'victim': attribute 'pads' value 2 (end of spatial dim 1) must be "
                              "smaller than the kernel extent 2"),
            std::string::npos)
      << st.message();
  // pads of 1 < 2: output (4 + 1 + 1 - 2) / 1 + 1 = 5 per spatial dim
  auto r = CompileGraph(OneNode("MaxPool", {1, 1, 4, 4}, {}, attrs({1, 1, 1, 1})), CompileOptions{}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->graph->outputs()[0]->shape(), (Shape{1, 1, 5, 5}));
}

TEST(HostileGraph, HugeGraphInputIsNamedNotCalledUnresolved) {
  Status st = CompileError(OneNode("Relu", {std::int64_t{1} << 32, std::int64_t{1} << 32}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model input 'x'"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("unresolved"), std::string::npos) << st.message();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
}

TEST(GraphApi, AttributesAreTypeCheckedAgainstTheOnnxSchema) {
  kiln::Graph g("t");
  auto x = g.AddInput("x", DType::kFloat32, {2, 3});
  auto bad = g.AddOp("Softmax", {x}, {{"axis", std::string("one")}}, 1, "sm");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("attribute 'axis' must be of type INT, found STRING"), std::string::npos)
      << bad.status().message();
  auto internal = g.AddOp("Relu", {x}, {{"kiln.activation", std::string("Relu")}}, 1, "r");
  ASSERT_FALSE(internal.ok());
  EXPECT_NE(internal.status().message().find("'kiln.activation' is internal"), std::string::npos);
  // an integer for a float attribute is converted: LeakyRelu alpha = 2
  auto lr = g.AddOp("LeakyRelu", {x}, {{"alpha", std::int64_t{2}}}, 1, "lr");
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  ASSERT_TRUE(g.AddOutput((*lr)[0], "y").ok());
  auto ir = g.TakeIr();
  const ir::Node* n = ir->nodes().back().get();
  ASSERT_EQ(n->name(), "lr");
  EXPECT_EQ(n->FindAttr("alpha")->kind, ir::Attribute::Kind::kFloat);
  EXPECT_EQ(n->GetFloat("alpha", 0), 2.f);
}

TEST(GraphApi, HugeConstantIsRefusedBeforeAllocation) {
  kiln::Graph g("t");
  std::vector<float> data(4);
  auto c = g.AddConstant("w", DType::kFloat32, {std::int64_t{1} << 32, std::int64_t{1} << 32}, data.data());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("AddConstant 'w'"), std::string::npos) << c.status().message();
  c = g.AddConstant("w2", DType::kFloat32, {std::int64_t{1} << 40}, data.data());
  ASSERT_FALSE(c.ok());
}

}  // namespace
}  // namespace kiln
