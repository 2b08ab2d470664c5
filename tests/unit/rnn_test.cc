// LSTM, GRU and RNN: tiny cells (input and hidden size 1) whose results are
// derived by hand from the ONNX equations, the options that change them
// (direction, sequence_lens, layout, peepholes, clip, input_forget,
// linear_before_reset, activations with alpha/beta), runtime vs constant
// weights, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::I32T;
using test::Int;
using test::NodeRunner;
using test::Values;

float Sig(float x) { return 1.f / (1.f + std::exp(-x)); }

ir::Attribute Str(const std::string& s) { return ir::Attribute::String(s); }
ir::Attribute Strs(std::vector<std::string> v) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kStrings;
  a.strings = std::move(v);
  return a;
}
ir::Attribute Fl(float v) { return ir::Attribute::Float(v); }
ir::Attribute Fls(std::vector<float> v) { return ir::Attribute::Floats(std::move(v)); }

std::vector<float> Out(const Result<std::vector<HostTensorPtr>>& r, int j) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values<float>(r.value()[j]) : std::vector<float>{};
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << "at " << i;
}

void ExpectError(NodeRunner& r, std::initializer_list<const char*> parts) {
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  for (const char* p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

// LSTM, two steps. W = (i, o, f, c) = (0, 0, 0, 1), R = (0, 0, 0, 2), no
// bias, zero initial state: i = o = f = 1/2 throughout, and
//   C1 = tanh(x1) / 2,                   H1 = tanh(C1) / 2
//   C2 = C1 / 2 + tanh(x2 + 2 H1) / 2,   H2 = tanh(C2) / 2
TEST(Lstm, TwoStepsByHand) {
  NodeRunner r("LSTM", 14,
               {F32T({2, 1, 1}, {1, -1}), F32T({1, 4, 1}, {0, 0, 0, 1}), F32T({1, 4, 1}, {0, 0, 0, 2})}, 3);
  r.Attr("hidden_size", Int(1));
  auto out = r.Run();
  const float c1 = std::tanh(1.f) / 2, h1 = std::tanh(c1) / 2;
  const float c2 = c1 / 2 + std::tanh(-1.f + 2 * h1) / 2, h2 = std::tanh(c2) / 2;
  ExpectNear(Out(out, 0), {h1, h2});
  ExpectNear(Out(out, 1), {h2});
  ExpectNear(Out(out, 2), {c2});
  EXPECT_EQ(r.out_shape(0), (Shape{2, 1, 1, 1}));
  EXPECT_EQ(r.out_shape(1), (Shape{1, 1, 1}));
  EXPECT_EQ(r.out_shape(2), (Shape{1, 1, 1}));
}

// One step with peepholes P = (1, 1, 1), C0 = 1, x = 1, W = (0, 0, 0, 1):
//   i = f = σ(C0), C = f C0 + i tanh(1), o = σ(C), H = o tanh(C).
// input_forget replaces f by 1 - i; clip bounds every gate's pre-activation.
TEST(Lstm, PeepholesInputForgetAndClip) {
  auto run = [](bool input_forget, float clip) {
    NodeRunner r("LSTM", 14,
                 {F32T({1, 1, 1}, {1}), F32T({1, 4, 1}, {0, 0, 0, 1}), F32T({1, 4, 1}, {0, 0, 0, 0}), nullptr,
                  nullptr, F32T({1, 1, 1}, {0}), F32T({1, 1, 1}, {1}), F32T({1, 3}, {1, 1, 1})},
                 3);
    r.Attr("hidden_size", Int(1));
    if (input_forget) r.Attr("input_forget", Int(1));
    if (clip > 0) r.Attr("clip", Fl(clip));
    auto out = r.Run();
    return std::make_pair(Out(out, 1), Out(out, 2));
  };
  {
    const float i = Sig(1), f = Sig(1), c = f + i * std::tanh(1.f), o = Sig(c);
    auto [h, cc] = run(false, 0);
    ExpectNear(h, {o * std::tanh(c)});
    ExpectNear(cc, {c});
  }
  {
    const float i = Sig(1), f = 1 - i, c = f + i * std::tanh(1.f), o = Sig(c);
    auto [h, cc] = run(true, 0);
    ExpectNear(h, {o * std::tanh(c)});
    ExpectNear(cc, {c});
  }
  {
    const float i = Sig(0.5f), f = Sig(0.5f), c = f + i * std::tanh(0.5f), o = Sig(std::min(c, 0.5f));
    auto [h, cc] = run(false, 0.5f);
    ExpectNear(h, {o * std::tanh(c)});  // the cell state itself is not clipped
    ExpectNear(cc, {c});
  }
}

// GRU, one step: W = (z, r, h) = (0, 0, 1), R = (0, 0, 1), H0 = 1, x = 2,
// bias only Rbh = 1. z = r = 1/2;
//   linear_before_reset = 0: h~ = tanh(x + (r H0) Rh + Rbh) = tanh(3.5)
//   linear_before_reset = 1: h~ = tanh(x + r (H0 Rh + Rbh))  = tanh(3)
// and H = (1 - z) h~ + z H0.
TEST(Gru, LinearBeforeReset) {
  for (int lbr : {0, 1}) {
    NodeRunner r("GRU", 14,
                 {F32T({1, 1, 1}, {2}), F32T({1, 3, 1}, {0, 0, 1}), F32T({1, 3, 1}, {0, 0, 1}),
                  F32T({1, 6}, {0, 0, 0, 0, 0, 1}), nullptr, F32T({1, 1, 1}, {1})},
                 2);
    r.Attr("hidden_size", Int(1));
    r.Attr("linear_before_reset", Int(lbr));
    auto out = r.Run();
    const float hh = std::tanh(lbr ? 3.f : 3.5f);
    ExpectNear(Out(out, 0), {0.5f * hh + 0.5f});
    ExpectNear(Out(out, 1), {0.5f * hh + 0.5f});
  }
}

// activation_alpha/beta are consumed in order by the functions that take
// them: HardSigmoid takes alpha 0.5 and beta 0.25, LeakyRelu alpha 0.1.
// W = (0, 0, -1), x = 2, H0 = 0: z = r = 0.25, h~ = 0.1 * -2, H = 0.75 h~.
TEST(Gru, ActivationsWithAlphaBeta) {
  NodeRunner r("GRU", 7, {F32T({1, 1, 1}, {2}), F32T({1, 3, 1}, {0, 0, -1}), F32T({1, 3, 1}, {0, 0, 0})}, 2);
  r.Attr("hidden_size", Int(1));
  r.Attr("activations", Strs({"HardSigmoid", "LeakyRelu"}));
  r.Attr("activation_alpha", Fls({0.5f, 0.1f}));
  r.Attr("activation_beta", Fls({0.25f}));
  ExpectNear(Out(r.Run(), 1), {0.75f * -0.2f});
}

// RNN with Relu, W = 1, R = 0.5, x = (1, 2):
//   forward: H = 1, then 2 + 0.5 = 2.5;  reverse: H = 2 (t=1), then 1 + 1 = 2 (t=0).
TEST(Rnn, Directions) {
  auto make = [](const char* dir, int nd) {
    std::vector<float> w(nd, 1.f), rr(nd, 0.5f);
    auto r = std::make_unique<NodeRunner>(
        "RNN", 14, std::vector<test::In>{F32T({2, 1, 1}, {1, 2}), F32T(Shape{nd, 1, 1}, w), F32T(Shape{nd, 1, 1}, rr)}, 2);
    r->Attr("hidden_size", Int(1));
    r->Attr("direction", Str(dir));
    r->Attr("activations", Strs(std::vector<std::string>(nd, "Relu")));
    return r;
  };
  {
    auto rp = make("forward", 1);
    NodeRunner& r = *rp;
    auto out = r.Run();
    ExpectNear(Out(out, 0), {1, 2.5f});
    ExpectNear(Out(out, 1), {2.5f});
  }
  {
    auto rp = make("reverse", 1);
    NodeRunner& r = *rp;
    auto out = r.Run();
    ExpectNear(Out(out, 0), {2, 2});
    ExpectNear(Out(out, 1), {2});
  }
  {
    auto rp = make("bidirectional", 2);
    NodeRunner& r = *rp;
    auto out = r.Run();
    EXPECT_EQ(r.out_shape(0), (Shape{2, 2, 1, 1}));
    ExpectNear(Out(out, 0), {1, 2, 2.5f, 2});  // [t][direction]
    ExpectNear(Out(out, 1), {2.5f, 2});
  }
}

// sequence_lens (2, 1), X[t][b] = (1, 3), (2, 5), Relu, W = 1, R = 0.5:
// entry 1 stops after one step: Y is 0 past its length, Y_h keeps its state.
TEST(Rnn, SequenceLensAndLayout) {
  for (const char* dir : {"forward", "reverse"}) {
    NodeRunner r("RNN", 14,
                 {F32T({2, 2, 1}, {1, 3, 2, 5}), F32T({1, 1, 1}, {1}), F32T({1, 1, 1}, {0.5f}), nullptr,
                  I32T({2}, {2, 1})},
                 2);
    r.Attr("hidden_size", Int(1));
    r.Attr("direction", Str(dir));
    r.Attr("activations", Strs({"Relu"}));
    auto out = r.Run();
    if (std::string(dir) == "forward") {
      ExpectNear(Out(out, 0), {1, 3, 2.5f, 0});
      ExpectNear(Out(out, 1), {2.5f, 3});
    } else {
      ExpectNear(Out(out, 0), {2, 3, 2, 0});
      ExpectNear(Out(out, 1), {2, 3});
    }
  }
  // layout = 1: the same data batch-first.
  NodeRunner r("RNN", 14,
               {F32T({2, 2, 1}, {1, 2, 3, 5}), F32T({1, 1, 1}, {1}), F32T({1, 1, 1}, {0.5f}), nullptr,
                I32T({2}, {2, 1})},
               2);
  r.Attr("hidden_size", Int(1));
  r.Attr("layout", Int(1));
  r.Attr("activations", Strs({"Relu"}));
  auto out = r.Run();
  EXPECT_EQ(r.out_shape(0), (Shape{2, 2, 1, 1}));
  EXPECT_EQ(r.out_shape(1), (Shape{2, 1, 1}));
  ExpectNear(Out(out, 0), {1, 2.5f, 3, 0});  // [b][t]
  ExpectNear(Out(out, 1), {2.5f, 3});
}

// The kernel reads non-constant W and R in place (no load-time reorder);
// results must match the constant-weight path.
TEST(Lstm, RuntimeWeightsMatchConstantWeights) {
  const int S = 3, B = 2, I = 3, H = 4;
  std::vector<float> x(S * B * I), w(2 * 4 * H * I), rr(2 * 4 * H * H), b(2 * 8 * H);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * i);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * std::cos(0.3f * i);
  for (std::size_t i = 0; i < rr.size(); ++i) rr[i] = 0.4f * std::sin(1.1f * i + 0.2f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * std::cos(2.3f * i);
  auto xt = F32T({S, B, I}, x), wt = F32T({2, 4 * H, I}, w), rt = F32T({2, 4 * H, H}, rr), bt = F32T({2, 8 * H}, b);
  NodeRunner r("LSTM", 14, {xt, wt, rt, bt}, 3);
  r.Attr("hidden_size", Int(H));
  r.Attr("direction", Str("bidirectional"));
  auto constant = r.Run();
  ASSERT_TRUE(constant.ok()) << constant.status().ToString();

  cpu::KernelInit init;
  init.node = &r.node();
  for (auto& t : {xt, wt, rt, bt}) init.inputs.push_back({t->dtype(), t->shape()});
  for (ir::Value* o : r.node().outputs()) init.outputs.push_back({o->dtype(), o->shape()});
  auto kernel = cpu::CreateKernel(init);  // no const_inputs: all read at run time
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  std::vector<std::vector<float>> outs;
  std::vector<void*> ptrs;
  for (auto& t : {xt, wt, rt, bt}) ptrs.push_back(const_cast<void*>(t->data()));
  for (auto& d : init.outputs) outs.emplace_back(static_cast<std::size_t>(NumElements(d.shape)), -1.f);
  for (auto& o : outs) ptrs.push_back(o.data());
  ASSERT_TRUE(kernel.value()->Run({ptrs.data(), 4}).ok());
  for (int j = 0; j < 3; ++j) ExpectNear(outs[j], Values<float>(constant.value()[j]));
}

TEST(RnnErrors, HiddenSizeMismatchWithW) {
  NodeRunner r("LSTM", 14, {F32T({1, 1, 1}, {1}), F32T({1, 4, 1}, {0, 0, 0, 1}), F32T({1, 4, 1}, {0, 0, 0, 0})}, 3);
  r.Attr("hidden_size", Int(2));
  ExpectError(r, {"LSTM node 'node'", "'hidden_size'", "[1,4,1]", "8"});
}

TEST(RnnErrors, BadDirection) {
  NodeRunner r("GRU", 14, {F32T({1, 1, 1}, {1}), F32T({1, 3, 1}, {0, 0, 1}), F32T({1, 3, 1}, {0, 0, 0})}, 2);
  r.Attr("hidden_size", Int(1));
  r.Attr("direction", Str("sideways"));
  ExpectError(r, {"GRU node 'node'", "'direction'", "sideways"});
}

TEST(RnnErrors, UnknownActivationIsNamed) {
  NodeRunner r("RNN", 14, {F32T({1, 1, 1}, {1}), F32T({1, 1, 1}, {1}), F32T({1, 1, 1}, {0})}, 2);
  r.Attr("hidden_size", Int(1));
  r.Attr("activations", Strs({"Swish"}));
  ExpectError(r, {"RNN node 'node'", "'activations'", "'Swish'"});
}

TEST(RnnErrors, ActivationCountAndOtherAttributes) {
  auto gru = [] {
    auto r = std::make_unique<NodeRunner>(
        "GRU", 14,
        std::vector<test::In>{F32T({1, 1, 1}, {1}), F32T({2, 3, 1}, {0, 0, 1, 0, 0, 1}), F32T({2, 3, 1}, {0, 0, 0, 0, 0, 0})},
        2);
    r->Attr("hidden_size", Int(1));
    r->Attr("direction", Str("bidirectional"));
    return r;
  };
  {
    auto rp = gru();
    NodeRunner& r = *rp;
    r.Attr("activations", Strs({"Sigmoid", "Tanh"}));  // one direction's worth
    ExpectError(r, {"'activations'", "expected 4"});
  }
  {
    auto rp = gru();
    NodeRunner& r = *rp;
    r.Attr("layout", Int(2));
    ExpectError(r, {"'layout'"});
  }
  {
    auto rp = gru();
    NodeRunner& r = *rp;
    r.Attr("clip", Fl(-1.f));
    ExpectError(r, {"'clip'"});
  }
  {
    auto rp = gru();
    NodeRunner& r = *rp;
    r.node().set_since_version(7);
    r.Attr("layout", Int(0));
    ExpectError(r, {"'layout'", "GRU-14"});
  }
}

TEST(RnnErrors, InputShapesAndSequenceLens) {
  {
    // R must be [num_directions, 4*hidden, hidden].
    NodeRunner r("LSTM", 14, {F32T({1, 1, 1}, {1}), F32T({1, 4, 1}, {0, 0, 0, 1}), F32T({1, 4, 2}, {0, 0, 0, 0, 0, 0, 0, 0})}, 3);
    r.Attr("hidden_size", Int(1));
    ExpectError(r, {"input 2 (R)", "[1,4,2]", "[1,4,1]"});
  }
  {
    NodeRunner r("RNN", 14, {F32T({2, 1, 1}, {1, 2}), F32T({1, 1, 1}, {1}), F32T({1, 1, 1}, {0}), nullptr, I32T({1}, {3})}, 2);
    r.Attr("hidden_size", Int(1));
    ExpectError(r, {"sequence_lens", "3", "0..2"});
  }
}

}  // namespace
}  // namespace kiln
