// LSTM, GRU and RNN: tiny cells (input and hidden size 1) whose results are
// derived by hand from the ONNX equations, the options that change them
// (direction, sequence_lens, layout, peepholes, clip, input_forget,
// linear_before_reset, activations with alpha/beta), runtime vs constant
// weights, and the error messages. com.microsoft DynamicQuantizeLSTM
// against ONNX Runtime's DeepCPU LSTM with 8-bit weights, written out
// below as a scalar loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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


// ---------------------------------------------------------------------------
// DynamicQuantizeLSTM. The reference is ONNX Runtime's kernel written out
// (onnxruntime/core/providers/cpu/rnn/uni_directional_lstm.cc and
// rnn_helpers.cc ComputeGemm, uint8 activations): per direction, X over its
// first max(sequence_lens) steps and each step's H over the batch are
// quantized with DynamicQuantizeLinear's float32 arithmetic (scale (max -
// min) / 255 over a range holding 0, zero point and values rounded to even,
// saturated); the products are exact integers, scaled by a_scale *
// w_scale[column] in float32; the gate input is (XW + HR) + (Wb + Rb); an
// entry past its length is 0 in H from then on (Y is an output here).

struct Quant {
  float s = 0.f;
  int zp = 0;
};
Quant RangeOf(const std::vector<float>& v) {
  float mn = 0.f, mx = 0.f;
  for (float x : v) {
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  Quant q;
  q.s = (mx - mn) / 255.f;
  q.zp = q.s > 0 ? static_cast<int>(std::clamp(std::nearbyint(0.f - mn / q.s), 0.f, 255.f)) : 0;
  return q;
}
int Centered(float x, Quant q) {
  if (!(q.s > 0)) return 0;
  return static_cast<int>(std::clamp(std::nearbyint(x / q.s) + static_cast<float>(q.zp), 0.f, 255.f)) - q.zp;
}

struct QLstm {
  int S = 0, B = 0, I = 0, H = 0, D = 1;
  bool u8 = false, per_column = false;
  std::vector<float> x, bias, h0, c0;          // bias [D, 8H], h0 / c0 [D, B, H] (empty: absent)
  std::vector<int> wq, rq, lens;               // W [D, I, 4H], R [D, H, 4H] as stored
  std::vector<float> ws, rs;                   // [D] or [D, 4H]
  int wz = 0, rz = 0;                          // zero points (one value)
};

// Y [S, D, B, H], Y_h and Y_c [D, B, H].
std::vector<std::vector<float>> QLstmReference(const QLstm& c) {
  const int G = 4 * c.H;
  std::vector<float> y(static_cast<std::size_t>(c.S * c.D * c.B * c.H), 0.f), yh(c.D * c.B * c.H, 0.f),
      yc(c.D * c.B * c.H, 0.f);
  std::vector<int> lens = c.lens.empty() ? std::vector<int>(c.B, c.S) : c.lens;
  const int steps = *std::max_element(lens.begin(), lens.end());
  const std::vector<float> xrows(c.x.begin(), c.x.begin() + steps * c.B * c.I);
  const Quant xq = RangeOf(xrows);
  auto scale = [&](const std::vector<float>& v, int d, int j) { return c.per_column ? v[d * G + j] : v[d]; };
  for (int d = 0; d < c.D; ++d) {
    const bool reverse = c.D == 2 ? d == 1 : false;
    std::vector<float> h(c.B * c.H, 0.f), cs(c.B * c.H, 0.f);
    if (!c.h0.empty()) std::copy(c.h0.begin() + d * c.B * c.H, c.h0.begin() + (d + 1) * c.B * c.H, h.begin());
    if (!c.c0.empty()) std::copy(c.c0.begin() + d * c.B * c.H, c.c0.begin() + (d + 1) * c.B * c.H, cs.begin());
    for (int s = 0; s < steps; ++s) {
      std::vector<float> hin = h;
      for (int b = 0; b < c.B; ++b) {
        if (lens[b] < s) std::fill(hin.begin() + b * c.H, hin.begin() + (b + 1) * c.H, 0.f);
      }
      const Quant hq = RangeOf(hin);
      for (int b = 0; b < c.B; ++b) {
        if (s >= lens[b]) continue;
        const int t = reverse ? lens[b] - 1 - s : s;
        std::vector<float> g(G);
        for (int j = 0; j < G; ++j) {
          std::int64_t ax = 0, ah = 0;
          for (int k = 0; k < c.I; ++k) {
            ax += static_cast<std::int64_t>(Centered(c.x[(t * c.B + b) * c.I + k], xq)) *
                  (c.wq[(d * c.I + k) * G + j] - c.wz);
          }
          for (int k = 0; k < c.H; ++k) {
            ah += static_cast<std::int64_t>(Centered(hin[b * c.H + k], hq)) * (c.rq[(d * c.H + k) * G + j] - c.rz);
          }
          const float xw = static_cast<float>(ax) * (xq.s * scale(c.ws, d, j));
          const float hr = static_cast<float>(ah) * (hq.s * scale(c.rs, d, j));
          const float bias = c.bias.empty() ? 0.f : c.bias[d * 2 * G + j] + c.bias[d * 2 * G + G + j];
          g[j] = (xw + hr) + bias;
        }
        for (int k = 0; k < c.H; ++k) {
          const float i = Sig(g[k]), o = Sig(g[c.H + k]), f = Sig(g[2 * c.H + k]), cc = std::tanh(g[3 * c.H + k]);
          float& cell = cs[b * c.H + k];
          cell = f * cell + i * cc;
          h[b * c.H + k] = o * std::tanh(cell);
          y[((t * c.D + d) * c.B + b) * c.H + k] = h[b * c.H + k];
        }
      }
    }
    std::copy(h.begin(), h.end(), yh.begin() + d * c.B * c.H);
    std::copy(cs.begin(), cs.end(), yc.begin() + d * c.B * c.H);
  }
  return {y, yh, yc};
}

HostTensorPtr Eight(bool u8, Shape s, const std::vector<int>& v) {
  if (u8) return test::Tensor<std::uint8_t>(DType::kUInt8, std::move(s), std::vector<std::uint8_t>(v.begin(), v.end()));
  return test::Tensor<std::int8_t>(DType::kInt8, std::move(s), std::vector<std::int8_t>(v.begin(), v.end()));
}

Result<std::vector<HostTensorPtr>> RunQLstm(const QLstm& c) {
  const int G = 4 * c.H;
  const Shape sc = c.per_column ? Shape{c.D, G} : Shape{c.D};
  const std::int64_t nsc = c.per_column ? c.D * G : c.D;
  std::vector<test::In> in = {F32T({c.S, c.B, c.I}, c.x), Eight(c.u8, {c.D, c.I, G}, c.wq),
                              Eight(c.u8, {c.D, c.H, G}, c.rq)};
  in.push_back(c.bias.empty() ? test::In(nullptr) : test::In(F32T({c.D, 2 * G}, c.bias)));
  in.push_back(c.lens.empty() ? test::In(nullptr) : test::In(I32T({c.B}, std::vector<std::int32_t>(c.lens.begin(), c.lens.end()))));
  in.push_back(c.h0.empty() ? test::In(nullptr) : test::In(F32T({c.D, c.B, c.H}, c.h0)));
  in.push_back(c.c0.empty() ? test::In(nullptr) : test::In(F32T({c.D, c.B, c.H}, c.c0)));
  in.push_back(nullptr);
  in.push_back(F32T(sc, c.ws));
  in.push_back(Eight(c.u8, sc, std::vector<int>(static_cast<std::size_t>(nsc), c.wz)));
  in.push_back(F32T(sc, c.rs));
  in.push_back(Eight(c.u8, sc, std::vector<int>(static_cast<std::size_t>(nsc), c.rz)));
  NodeRunner r("DynamicQuantizeLSTM", 1, in, 3, ops::kMicrosoftDomain);
  r.Attr("hidden_size", Int(c.H));
  if (c.D == 2) r.Attr("direction", Str("bidirectional"));
  return r.Run();
}

// Deterministic values: x in (-amp, amp), weights over the full 8-bit range.
QLstm MakeQLstm(int S, int B, int I, int H, int D, bool u8, bool per_column) {
  QLstm c;
  c.S = S, c.B = B, c.I = I, c.H = H, c.D = D, c.u8 = u8, c.per_column = per_column;
  const int G = 4 * H;
  for (int i = 0; i < S * B * I; ++i) c.x.push_back(1.5f * std::sin(0.37f * i + 0.1f));
  const int lo = u8 ? 0 : -128, span = u8 ? 256 : 255;
  for (int i = 0; i < D * I * G; ++i) c.wq.push_back(lo + (i * 97 + 13) % span);
  for (int i = 0; i < D * H * G; ++i) c.rq.push_back(lo + (i * 61 + 7) % span);
  c.wz = u8 ? 128 : 0;
  c.rz = u8 ? 131 : 0;
  const int ns = per_column ? D * G : D;
  for (int i = 0; i < ns; ++i) {
    c.ws.push_back(0.004f + 0.0005f * (i % 5));
    c.rs.push_back(0.006f + 0.0007f * (i % 3));
  }
  return c;
}

void ExpectQLstm(const QLstm& c, float tol = 2e-5f) {
  auto got = RunQLstm(c);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto want = QLstmReference(c);
  for (int j = 0; j < 3; ++j) {
    const std::vector<float> g = Values<float>(got.value()[j]);
    ASSERT_EQ(g.size(), want[j].size()) << "output " << j;
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[j][i], tol) << "output " << j << " at " << i;
  }
}

TEST(DynamicQuantizeLstm, ForwardInt8PerColumnWithBias) {
  QLstm c = MakeQLstm(4, 2, 3, 3, 1, false, true);
  for (int i = 0; i < 8 * c.H; ++i) c.bias.push_back(0.2f * std::cos(1.3f * i));
  ExpectQLstm(c);
}

TEST(DynamicQuantizeLstm, BidirectionalUint8StatesAndSequenceLens) {
  QLstm c = MakeQLstm(4, 3, 2, 2, 2, true, false);
  for (int i = 0; i < 2 * 3 * 2; ++i) {
    c.h0.push_back(0.3f * std::sin(0.9f * i));
    c.c0.push_back(0.5f * std::cos(0.4f * i));
  }
  c.lens = {4, 1, 3};
  ExpectQLstm(c);
}

// Weights within [-64, 64] of their zero point (ONNX Runtime's reduce_range)
// take the uint8 x int8 pair-sum kernel: inputs not a multiple of 4, five
// batch rows (a row block and one more), int8 and uint8.
TEST(DynamicQuantizeLstm, SevenBitWeights) {
  for (bool u8 : {false, true}) {
    QLstm c = MakeQLstm(3, 5, 7, 3, u8 ? 2 : 1, u8, !u8);
    for (int& v : c.wq) v = c.wz + (v - c.wz) / 2;
    c.rz = u8 ? 128 : 0;
    for (std::size_t i = 0; i < c.rq.size(); ++i) c.rq[i] = c.rz + static_cast<int>((i * 37) % 129) - 64;
    for (int i = 0; i < 8 * c.H * c.D; ++i) c.bias.push_back(0.1f * std::sin(0.8f * i));
    ExpectQLstm(c);
  }
}

// 640 inputs of full-range int8 weights: a column's sum can pass 2^24
// (float32's exact range); the int32 sums stay exact.
TEST(DynamicQuantizeLstm, LongReductionStaysExact) {
  QLstm c = MakeQLstm(2, 1, 640, 2, 1, false, false);
  for (std::size_t i = 0; i < c.wq.size(); ++i) c.wq[i] = (i % 2 ? 127 : -127) * ((i / 8) % 3 == 0 ? -1 : 1);
  ExpectQLstm(c);
}

TEST(DynamicQuantizeLstm, ErrorsNameTheInput) {
  QLstm c = MakeQLstm(2, 1, 2, 1, 1, false, false);
  c.wz = 3;  // an int8 weight's zero point must be 0
  auto r = RunQLstm(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 9 (W_zero_point) has 3"), std::string::npos) << r.status().message();
  c = MakeQLstm(2, 1, 2, 1, 1, false, false);
  c.rs[0] = 0.f;
  r = RunQLstm(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 10 (R_scale) has 0"), std::string::npos) << r.status().message();
  // LSTM's layout of W ([nd, 4H, I]) is not DynamicQuantizeLSTM's.
  NodeRunner bad("DynamicQuantizeLSTM", 1,
                 {F32T({1, 1, 3}, {1, 2, 3}), Eight(false, {1, 4, 3}, std::vector<int>(12, 1)),
                  Eight(false, {1, 1, 4}, std::vector<int>(4, 1)), nullptr, nullptr, nullptr, nullptr, nullptr,
                  F32T({1}, {0.1f}), Eight(false, {1}, {0}), F32T({1}, {0.1f}), Eight(false, {1}, {0})},
                 3, ops::kMicrosoftDomain);
  bad.Attr("hidden_size", Int(1));
  ExpectError(bad, {"input 1 (W) of shape [1,4,3]: expected dim 2 = 4 * 1 = 4"});
  NodeRunner f32("DynamicQuantizeLSTM", 1,
                 {F32T({1, 1, 1}, {1}), F32T({1, 1, 4}, {1, 1, 1, 1}), Eight(false, {1, 1, 4}, {1, 1, 1, 1}),
                  nullptr, nullptr, nullptr, nullptr, nullptr, F32T({1}, {0.1f}), Eight(false, {1}, {0}),
                  F32T({1}, {0.1f}), Eight(false, {1}, {0})},
                 3, ops::kMicrosoftDomain);
  ExpectError(f32, {"input 1 (W) has type float32, expected int8 or uint8"});
}

}  // namespace
}  // namespace kiln
