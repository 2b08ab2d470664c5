// ONNX Runtime's fused contrib ops (domain com.microsoft, version 1), what
// its graph optimizer writes into a saved optimized model
// (SessionOptions.optimized_model_filepath, 'extended' level): FusedConv,
// FusedGemm, FusedMatMul, Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd and
// SkipLayerNormalization; and Attention / QAttention and
// EmbedLayerNormalization / QEmbedLayerNormalization, which its transformer
// optimizer and quantize_dynamic write for BERT-style models. Inference here checks each one as ONNX Runtime's
// CPU kernel does and gives its outputs; the lower-contrib pass then
// rewrites it into the standard ops it fuses (src/passes/lower_contrib.cc),
// which Kiln's own fusions take from there. LayerNormalization below
// opset 17, which ONNX Runtime also writes (its own definition in the ONNX
// domain, the same as opset 17's), is registered in norm.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

// Runs the standard op's inference on this node (its attributes are a
// superset of that op's, its inputs that op's; the extra attributes are
// checked here).
Status InferLike(InferContext& c, const char* op) {
  const OpDef* def = OpRegistry::Get().Find(op);
  if (!def || !def->infer) return c.Fail("internal: no inference for ", op);
  return def->infer(c);
}

Status CheckFloat(InferContext& c, int i, const char* what) {
  if (c.in_dtype(i) != DType::kFloat32) {
    return c.Fail("input ", i, " (", what, ") has type ", DTypeName(c.in_dtype(i)), ", expected float32");
  }
  return Status::Ok();
}

// Input i is a 1-D tensor of `n` values (n < 0: unknown, any length).
Status CheckVector(InferContext& c, int i, const char* what, std::int64_t n) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, i, what));
  const Shape& s = c.in_shape(i);
  if (s.size() != 1 || (n >= 0 && s[0] >= 0 && s[0] != n)) {
    return c.Fail("input ", i, " (", what, ") has shape ", ShapeToString(s), ", expected [", n, "]");
  }
  return Status::Ok();
}

// FusedConv's `activation` and `activation_params`: the activations ONNX
// Runtime's CPU kernel fuses (MLAS), with the parameter counts it reads.
Status CheckConvActivation(InferContext& c) {
  const ir::Node& n = c.node();
  const std::string act = n.GetString("activation", "");
  const std::size_t params = n.GetFloats("activation_params").size();
  std::size_t want = 0;
  if (act == "Relu" || act == "Tanh" || act == "Sigmoid") want = 0;
  else if (act == "LeakyRelu") want = 1;
  else if (act == "Clip" || act == "HardSigmoid") want = 2;
  else {
    return c.Fail("attribute 'activation' is '", act,
                  "', expected Relu, Tanh, Sigmoid, LeakyRelu, Clip or HardSigmoid (ONNX Runtime's FusedConv)");
  }
  if (params != want && !(want == 0 && params == 0)) {
    return c.Fail("attribute 'activation_params' has ", params, " values, ", act, " takes ", want);
  }
  for (float v : n.GetFloats("activation_params")) {
    if (std::isnan(v)) return c.Fail("attribute 'activation_params' holds NaN");
  }
  return Status::Ok();
}

// FusedConv(X, W, B?, Z?): Y = activation(Conv(X, W, B) + Z).
Status InferFusedConv(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckConvActivation(c));
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  KILN_ASSIGN_OR_RETURN(const Shape y, ConvOutputShape(c, c.in_shape(0), 1, 2));
  c.SetOutput(0, c.in_dtype(0), y);
  if (c.has_input(3)) {
    KILN_RETURN_IF_ERROR(CheckFloat(c, 3, "Z"));
    if (c.in_shape(3) != y) {
      return c.Fail("input 3 (Z) has shape ", ShapeToString(c.in_shape(3)), ", expected the output's ",
                    ShapeToString(y));
    }
  }
  return Status::Ok();
}

// FusedGemm's `activation`: the ONNX activations ONNX Runtime's kernel
// takes (its element-wise functors), parameters in activation_alpha /
// activation_beta / activation_gamma.
bool KnownGemmActivation(const std::string& a) {
  for (const char* k : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Elu", "Selu", "Softplus",
                        "Softsign", "ThresholdedRelu"}) {
    if (a == k) return true;
  }
  return false;
}

Status InferFusedGemm(InferContext& c) {
  const std::string act = c.node().GetString("activation", "");
  if (!KnownGemmActivation(act)) {
    return c.Fail("attribute 'activation' is '", act,
                  "', expected Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, Elu, Selu, Softplus, Softsign or "
                  "ThresholdedRelu");
  }
  for (const char* a : {"activation_alpha", "activation_beta", "activation_gamma"}) {
    if (c.node().HasAttr(a) && !std::isfinite(c.node().GetFloat(a, 0.f))) {
      return c.Fail("attribute '", a, "' must be finite, found ", c.node().GetFloat(a, 0.f));
    }
  }
  return InferLike(c, "Gemm");
}

// The last two dims of s swapped (rank >= 2).
Shape Swapped(Shape s) {
  if (s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

// FusedMatMul(A, B): alpha * op(A) op(B), op a transpose of the last two
// dims where transA / transB (rank 1: none). transBatchA / transBatchB
// (batch dims moved past the matrix dims) are refused.
Status InferFusedMatMul(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
  for (const char* a : {"transBatchA", "transBatchB"}) {
    if (c.node().GetInt(a, 0) != 0) return c.Fail("attribute '", a, "' = 1 is not supported");
  }
  if (!std::isfinite(c.node().GetFloat("alpha", 1.f))) {
    return c.Fail("attribute 'alpha' must be finite, found ", c.node().GetFloat("alpha", 1.f));
  }
  Shape a = c.in_shape(0), b = c.in_shape(1);
  if (a.empty() || b.empty()) return c.Fail("inputs must have rank >= 1");
  if (c.node().GetInt("transA", 0) != 0) a = Swapped(a);
  if (c.node().GetInt("transB", 0) != 0) b = Swapped(b);
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() >= 0 && b[b.size() - 2] >= 0 && a.back() != b[b.size() - 2]) {
    return c.Fail("inner dims differ: ", ShapeToString(c.in_shape(0)), " x ", ShapeToString(c.in_shape(1)),
                  " (after transA / transB)");
  }
  auto batch = BroadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch.ok()) return c.Fail("batch dims: ", batch.status().message());
  Shape out = batch.value();
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

// Gelu(X), QuickGelu(X): float32, X's shape.
Status InferGeluLike(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "X"));
  if (c.node().op_type() == "QuickGelu" && !std::isfinite(c.node().GetFloat("alpha", 1.702f))) {
    return c.Fail("attribute 'alpha' must be finite, found ", c.node().GetFloat("alpha", 1.702f));
  }
  c.SetOutput(0, DType::kFloat32, c.in_shape(0));
  return Status::Ok();
}

// BiasGelu(A, B) and FastGelu(X, bias?): the bias a vector of X's last dim.
Status InferBiasGelu(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "X"));
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input 0 must have rank >= 1");
  if (c.has_input(1)) KILN_RETURN_IF_ERROR(CheckVector(c, 1, "bias", x.back()));
  c.SetOutput(0, DType::kFloat32, x);
  return Status::Ok();
}

// BiasAdd(X [N, S, C], bias [C], skip [N, S, C]) = X + bias + skip.
Status InferBiasAdd(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "X"));
  const Shape& x = c.in_shape(0);
  if (x.size() != 3) return c.Fail("input 0 (X) has shape ", ShapeToString(x), ", expected rank 3");
  KILN_RETURN_IF_ERROR(CheckVector(c, 1, "bias", x[2]));
  KILN_RETURN_IF_ERROR(CheckFloat(c, 2, "skip"));
  if (c.in_shape(2) != x) {
    return c.Fail("input 2 (skip) has shape ", ShapeToString(c.in_shape(2)), ", expected X's ", ShapeToString(x));
  }
  c.SetOutput(0, DType::kFloat32, x);
  return Status::Ok();
}

// SkipLayerNormalization(input, skip, gamma, beta?, bias?): s = input +
// skip (+ bias); output = LayerNormalization(s) over the last dim (epsilon);
// outputs mean and inv_std_var ([..., 1]) and input_skip_bias_sum (s).
Status InferSkipLayerNorm(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "input"));
  const Shape& x = c.in_shape(0);
  if (x.size() != 2 && x.size() != 3) {
    return c.Fail("input 0 (input) has shape ", ShapeToString(x), ", expected rank 2 or 3");
  }
  KILN_RETURN_IF_ERROR(CheckFloat(c, 1, "skip"));
  auto b = BroadcastShapes(c.in_shape(1), x);
  if (!b.ok() || b.value() != x) {
    return c.Fail("input 1 (skip) has shape ", ShapeToString(c.in_shape(1)), ", which does not broadcast to input's ",
                  ShapeToString(x));
  }
  const std::int64_t h = x.back();
  KILN_RETURN_IF_ERROR(CheckVector(c, 2, "gamma", h));
  if (c.has_input(3)) KILN_RETURN_IF_ERROR(CheckVector(c, 3, "beta", h));
  if (c.has_input(4)) KILN_RETURN_IF_ERROR(CheckVector(c, 4, "bias", h));
  const float eps = c.node().GetFloat("epsilon", 1e-12f);
  if (!(eps >= 0.f) || !std::isfinite(eps)) return c.Fail("attribute 'epsilon' must be finite and >= 0, found ", eps);
  Shape stat = x;
  stat.back() = 1;
  for (int j = 0; j < c.num_outputs(); ++j) {
    if (c.node().output(j)) c.SetOutput(j, DType::kFloat32, j == 1 || j == 2 ? stat : x);
  }
  return Status::Ok();
}

// ---- Attention and QAttention (ONNX Runtime's BERT attention) ------------

// Known dims a and b differ (an unknown one, -1, matches anything).
bool Differ(std::int64_t a, std::int64_t b) { return a >= 0 && b >= 0 && a != b; }

// The sizes of Q, K and V in the packed projection: qkv_hidden_sizes
// (Attention) or a third of the weights' columns each; each a multiple of
// num_heads, Q's equal to K's. Returns {q, k, v}.
Result<std::array<std::int64_t, 3>> AttentionSizes(InferContext& c, std::int64_t columns) {
  const ir::Node& n = c.node();
  const std::int64_t heads = n.GetInt("num_heads", 0);
  KILN_RETURN_IF_ERROR(CheckAttrRange(c, "num_heads", heads, 1));
  std::array<std::int64_t, 3> sz{};
  const std::vector<std::int64_t> given = n.GetInts("qkv_hidden_sizes");
  if (!given.empty()) {
    if (given.size() != 3) return c.Fail("attribute 'qkv_hidden_sizes' has ", given.size(), " values, expected 3");
    for (int i = 0; i < 3; ++i) {
      KILN_RETURN_IF_ERROR(CheckAttrRange(c, "qkv_hidden_sizes", given[i], 1));
      sz[i] = given[i];
    }
    std::int64_t sum = 0;
    KILN_ASSIGN_OR_RETURN(sum, AddDims(c, sz[0], sz[1], "qkv_hidden_sizes"));
    KILN_ASSIGN_OR_RETURN(sum, AddDims(c, sum, sz[2], "qkv_hidden_sizes"));
    if (Differ(columns, sum)) {
      return c.Fail("attribute 'qkv_hidden_sizes' sums to ", sum, " but the weights have ", columns, " columns");
    }
  } else {
    if (columns < 0) return c.Fail("input 1 (weights) needs a known column count");
    if (columns % 3 != 0) return c.Fail("input 1 (weights) has ", columns, " columns, expected a multiple of 3");
    sz = {columns / 3, columns / 3, columns / 3};
  }
  if (sz[0] != sz[1]) {
    return c.Fail("attribute 'qkv_hidden_sizes': Q's size ", sz[0], " differs from K's ", sz[1]);
  }
  for (int i = 0; i < 3; ++i) {
    if (sz[i] == 0) return c.Fail("hidden size of ", "QKV"[i], " is 0 (the weights have ", columns, " columns)");
    if (sz[i] % heads != 0) {
      return c.Fail("hidden size ", sz[i], " of ", "QKV"[i], " is not a multiple of num_heads (", heads, ")");
    }
  }
  return sz;
}

// The attention attributes every form checks: rotary embedding and a
// shared past / present buffer refused; unidirectional 0 or 1;
// mask_filter_value finite; scale finite and >= 0 (0: 1 / sqrt(head size)).
Status CheckAttentionAttrs(InferContext& c) {
  const ir::Node& n = c.node();
  for (const char* a : {"do_rotary", "past_present_share_buffer"}) {
    if (n.GetInt(a, 0) != 0) return c.Fail("attribute '", a, "' = ", n.GetInt(a, 0), " is not supported");
  }
  const std::int64_t uni = n.GetInt("unidirectional", 0);
  if (uni != 0 && uni != 1) return c.Fail("attribute 'unidirectional' must be 0 or 1, found ", uni);
  const float filter = n.GetFloat("mask_filter_value", -10000.f), scale = n.GetFloat("scale", 0.f);
  if (!std::isfinite(filter)) return c.Fail("attribute 'mask_filter_value' must be finite, found ", filter);
  if (!std::isfinite(scale) || scale < 0.f) {
    return c.Fail("attribute 'scale' must be finite and >= 0 (0: 1 / sqrt(head size)), found ", scale);
  }
  return Status::Ok();
}

// The mask (input mask_i, int32: [B] end positions, [2B] end and start
// positions where `starts`, [B, T] 0/1, [B, S, T] 0/1) and attention_bias
// (input bias_i, [B or 1, N or 1, S, T]) of an attention of `heads` heads
// over batch B, S queries and T keys in all (past included).
Status CheckMaskAndBias(InferContext& c, int mask_i, const char* mask_name, bool starts, int bias_i,
                        std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t total) {
  if (c.has_input(mask_i)) {
    if (c.in_dtype(mask_i) != DType::kInt32) {
      return c.Fail("input ", mask_i, " (", mask_name, ") has type ", DTypeName(c.in_dtype(mask_i)),
                    ", expected int32");
    }
    const Shape& m = c.in_shape(mask_i);
    bool ok = false;
    if (m.size() == 1) {
      // The rewrite tells [B] from [2B] by the lengths, so they must be known.
      ok = m[0] >= 0 && batch >= 0 && (m[0] == batch || (starts && m[0] == 2 * batch));
    } else if (m.size() == 2) {
      ok = !Differ(m[0], batch) && !Differ(m[1], total);
    } else if (m.size() == 3) {
      ok = !Differ(m[0], batch) && !Differ(m[1], seq) && !Differ(m[2], total);
    }
    if (!ok) {
      return c.Fail("input ", mask_i, " (", mask_name, ") has shape ", ShapeToString(m), ", expected [", batch, "], ",
                    starts ? "[2 x " + std::to_string(batch) + "], " : std::string(), "[", batch, ", ", total,
                    "] or [", batch, ", ", seq, ", ", total, "]");
    }
  }
  if (bias_i >= 0 && c.has_input(bias_i)) {
    KILN_RETURN_IF_ERROR(CheckFloat(c, bias_i, "attention_bias"));
    const Shape& b = c.in_shape(bias_i);
    if (b.size() != 4 || (b[0] != 1 && Differ(b[0], batch)) || (b[1] != 1 && Differ(b[1], heads)) ||
        Differ(b[2], seq) || Differ(b[3], total)) {
      return c.Fail("input ", bias_i, " (attention_bias) has shape ", ShapeToString(b), ", expected [", batch,
                    " or 1, ", heads, " or 1, ", seq, ", ", total, "]");
    }
  }
  return Status::Ok();
}

// What Attention and QAttention share after the projection: the
// attributes, mask_index (int32: [B] end positions, [2B] end and start
// positions, [B, T] 0/1, [B, S, T] 0/1), past ([2, B, N, P, H]) and
// attention_bias ([B or 1, N or 1, S, T]); sets output [B, S, v] and
// present [2, B, N, T, H].
Status InferAttentionTail(InferContext& c, const Shape& x, const std::array<std::int64_t, 3>& sz, int mask_i,
                          int past_i, int bias_i) {
  const ir::Node& n = c.node();
  KILN_RETURN_IF_ERROR(CheckAttentionAttrs(c));
  const std::int64_t heads = n.GetInt("num_heads", 0), batch = x[0], seq = x[1];
  const std::int64_t head = sz[0] / heads;
  std::int64_t past = 0;
  if (c.has_input(past_i)) {
    KILN_RETURN_IF_ERROR(CheckFloat(c, past_i, "past"));
    const Shape& p = c.in_shape(past_i);
    if (sz[0] != sz[2]) return c.Fail("input ", past_i, " (past) needs V's hidden size equal to Q's and K's");
    if (p.size() != 5 || Differ(p[0], 2) || Differ(p[1], batch) || Differ(p[2], heads) || Differ(p[4], head)) {
      return c.Fail("input ", past_i, " (past) has shape ", ShapeToString(p), ", expected [2, ", batch, ", ", heads,
                    ", past length, ", head, "]");
    }
    past = p[3];
  }
  std::int64_t total = -1;
  if (past >= 0 && seq >= 0) {
    KILN_ASSIGN_OR_RETURN(total, AddDims(c, past, seq, "past + sequence length"));
  }
  KILN_RETURN_IF_ERROR(CheckMaskAndBias(c, mask_i, "mask_index", true, bias_i, batch, heads, seq, total));
  c.SetOutput(0, DType::kFloat32, {batch, seq, sz[2]});
  if (c.num_outputs() > 1 && n.output(1)) {
    if (sz[1] != sz[2]) return c.Fail("output 1 (present) needs V's hidden size equal to K's");
    c.SetOutput(1, DType::kFloat32, {2, batch, heads, total, head});
  }
  return Status::Ok();
}

// Attention(input [B, S, D], weights [D, q + k + v], bias?, mask_index?,
// past?, attention_bias?): multi-head self-attention on the packed
// projection (ONNX Runtime's CPU kernel; past_sequence_length, rotary
// embedding and a shared past / present buffer refused).
Status InferAttention(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "input"));
  KILN_RETURN_IF_ERROR(CheckFloat(c, 1, "weights"));
  const Shape& x = c.in_shape(0);
  const Shape& w = c.in_shape(1);
  if (x.size() != 3) return c.Fail("input 0 (input) has shape ", ShapeToString(x), ", expected [batch, sequence, hidden]");
  if (w.size() != 2 || Differ(w[0], x[2])) {
    return c.Fail("input 1 (weights) has shape ", ShapeToString(w), ", expected [", x[2], ", q + k + v hidden]");
  }
  KILN_ASSIGN_OR_RETURN(const auto sz, AttentionSizes(c, w[1]));
  if (c.has_input(2)) KILN_RETURN_IF_ERROR(CheckVector(c, 2, "bias", sz[0] + sz[1] + sz[2]));
  if (c.has_input(6)) return c.Fail("input 6 (past_sequence_length) is not supported");
  return InferAttentionTail(c, x, sz, 3, 4, 5);
}

// QAttention(input, weight, bias, input_scale, weight_scale, mask_index?,
// input_zero_point?, weight_zero_point?, past?): Attention on the
// projection float(sum of (input - izp)(weight - wzp)) * (input_scale *
// weight_scale) + bias, 8-bit input and weight; weight_scale and
// weight_zero_point per tensor or per column.
Status InferQAttention(InferContext& c) {
  const DType xt = c.in_dtype(0), wt = c.in_dtype(1);
  for (auto [i, t, what] : {std::tuple{0, xt, "input"}, std::tuple{1, wt, "weight"}}) {
    if (t != DType::kUInt8 && t != DType::kInt8) {
      return c.Fail("input ", i, " (", what, ") has type ", DTypeName(t), ", expected uint8 or int8");
    }
  }
  const Shape& x = c.in_shape(0);
  const Shape& w = c.in_shape(1);
  if (x.size() != 3) return c.Fail("input 0 (input) has shape ", ShapeToString(x), ", expected [batch, sequence, hidden]");
  if (w.size() != 2 || Differ(w[0], x[2])) {
    return c.Fail("input 1 (weight) has shape ", ShapeToString(w), ", expected [", x[2], ", 3 x hidden]");
  }
  if (!c.node().GetInts("qkv_hidden_sizes").empty()) return c.Fail("attribute 'qkv_hidden_sizes' is not QAttention's");
  KILN_ASSIGN_OR_RETURN(const auto sz, AttentionSizes(c, w[1]));
  const std::int64_t cols = sz[0] * 3;
  KILN_RETURN_IF_ERROR(CheckVector(c, 2, "bias", cols));
  auto scalar_or_columns = [&](int i, const char* what, DType t) -> Status {
    if (c.in_dtype(i) != t) {
      return c.Fail("input ", i, " (", what, ") has type ", DTypeName(c.in_dtype(i)), ", expected ", DTypeName(t));
    }
    const Shape& s = c.in_shape(i);
    const std::int64_t e = s.empty() ? 1 : s.size() == 1 ? s[0] : -2;
    if (e != 1 && (i == 3 || i == 6 || Differ(e, cols) || e == -2)) {
      return c.Fail("input ", i, " (", what, ") has shape ", ShapeToString(s), ", expected a scalar",
                    i == 3 || i == 6 ? "" : StrCat(" or [", cols, "]"));
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(scalar_or_columns(3, "input_scale", DType::kFloat32));
  KILN_RETURN_IF_ERROR(scalar_or_columns(4, "weight_scale", DType::kFloat32));
  if (c.has_input(6)) KILN_RETURN_IF_ERROR(scalar_or_columns(6, "input_zero_point", xt));
  if (c.has_input(7)) KILN_RETURN_IF_ERROR(scalar_or_columns(7, "weight_zero_point", wt));
  return InferAttentionTail(c, x, sz, 5, 8, -1);
}

// ---- EmbedLayerNormalization and QEmbedLayerNormalization ------------------

// A shape holding exactly one value (a scalar, [1], [1, 1]...).
bool OneValue(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](std::int64_t d) { return d == 1; });
}

// An int32 [B, S] ids input (or a mask) of input_ids' shape; position_ids
// may also be [1, S].
Status CheckIds(InferContext& c, int i, const char* what, const Shape& ids, bool broadcast_batch) {
  if (c.in_dtype(i) != DType::kInt32) {
    return c.Fail("input ", i, " (", what, ") has type ", DTypeName(c.in_dtype(i)), ", expected int32");
  }
  const Shape& s = c.in_shape(i);
  if (s.size() != 2 || (Differ(s[0], ids[0]) && !(broadcast_batch && s[0] == 1)) || Differ(s[1], ids[1])) {
    return c.Fail("input ", i, " (", what, ") has shape ", ShapeToString(s), ", expected input_ids' ",
                  ShapeToString(ids), broadcast_batch ? " or [1, sequence]" : "");
  }
  return Status::Ok();
}

// The tables and vectors of (Q)EmbedLayerNormalization: word, position and
// segment tables [rows, H], gamma and beta [H], each of type `t` (float32,
// or 8-bit where quantized, `ts` then the other 8-bit type allowed too).
Status CheckEmbedTables(InferContext& c, const int idx[5], DType t, std::int64_t* hidden) {
  static const char* kNames[5] = {"word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"};
  *hidden = c.in_shape(idx[0]).size() == 2 ? c.in_shape(idx[0])[1] : -1;
  for (int k = 0; k < 5; ++k) {
    const int i = idx[k];
    if (!c.has_input(i)) continue;
    const bool quantized = t != DType::kFloat32;
    const DType it = c.in_dtype(i);
    if (quantized ? (it != DType::kUInt8 && it != DType::kInt8) : it != DType::kFloat32) {
      return c.Fail("input ", i, " (", kNames[k], ") has type ", DTypeName(it), ", expected ",
                    quantized ? "uint8 or int8" : "float32");
    }
    const Shape& s = c.in_shape(i);
    const bool table = k < 3;
    if (s.size() != (table ? 2u : 1u) || Differ(s.back(), *hidden) || (table && s[0] == 0)) {
      return c.Fail("input ", i, " (", kNames[k], ") has shape ", ShapeToString(s), ", expected ",
                    table ? StrCat("[rows >= 1, ", *hidden, "]") : StrCat("[", *hidden, "]"));
    }
  }
  if (*hidden == 0 || c.in_shape(idx[0]).size() != 2) return c.Fail("input ", idx[0], " (word_embedding) must be [rows, hidden >= 1]");
  return Status::Ok();
}

// Without position_ids, positions 0..S-1 index the position table (input
// 3): a known S past its rows fails here, as ONNX Runtime's kernel fails.
Status CheckPositions(InferContext& c, const Shape& ids, bool given) {
  const std::int64_t rows = c.in_shape(3)[0];
  if (!given && ids[1] >= 0 && rows >= 0 && ids[1] > rows) {
    return c.Fail("sequence length ", ids[1], " exceeds input 3 (position_embedding)'s ", rows,
                  " rows (positions 0..", ids[1] - 1, " without position_ids)");
  }
  return Status::Ok();
}

// Outputs: [B, S, H] float32, mask_index int32 [B], embedding_sum [B, S, H].
Status SetEmbedOutputs(InferContext& c, const Shape& ids, std::int64_t hidden) {
  const float eps = c.node().GetFloat("epsilon", 1e-12f);
  if (!(eps >= 0.f) || !std::isfinite(eps)) return c.Fail("attribute 'epsilon' must be finite and >= 0, found ", eps);
  c.SetOutput(0, DType::kFloat32, {ids[0], ids[1], hidden});
  if (c.num_outputs() > 1 && c.node().output(1)) c.SetOutput(1, DType::kInt32, {ids[0]});
  if (c.num_outputs() > 2 && c.node().output(2)) c.SetOutput(2, DType::kFloat32, {ids[0], ids[1], hidden});
  return Status::Ok();
}

// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding,
// position_embedding, segment_embedding?, gamma, beta?, mask?,
// position_ids?): LayerNormalization(word[ids] + position[pos] +
// segment[seg]) over the hidden dim; mask_index[b] = count of mask == 1.
Status InferEmbedLayerNorm(InferContext& c) {
  if (c.in_dtype(0) != DType::kInt32) {
    return c.Fail("input 0 (input_ids) has type ", DTypeName(c.in_dtype(0)), ", expected int32");
  }
  const Shape ids = c.in_shape(0);
  if (ids.size() != 2) return c.Fail("input 0 (input_ids) has shape ", ShapeToString(ids), ", expected [batch, sequence]");
  if (c.has_input(1) != c.has_input(4)) {
    return c.Fail("inputs 1 (segment_ids) and 4 (segment_embedding) must be both present or both absent");
  }
  if (c.has_input(1)) KILN_RETURN_IF_ERROR(CheckIds(c, 1, "segment_ids", ids, false));
  for (auto [i, what] : {std::pair{2, "word_embedding"}, std::pair{3, "position_embedding"}, std::pair{5, "gamma"}}) {
    if (!c.has_input(i)) return c.Fail("input ", i, " (", what, ") is required");
  }
  const int idx[5] = {2, 3, 4, 5, 6};
  std::int64_t hidden = 0;
  KILN_RETURN_IF_ERROR(CheckEmbedTables(c, idx, DType::kFloat32, &hidden));
  if (c.has_input(7)) KILN_RETURN_IF_ERROR(CheckIds(c, 7, "mask", ids, false));
  if (c.has_input(8)) KILN_RETURN_IF_ERROR(CheckIds(c, 8, "position_ids", ids, true));
  KILN_RETURN_IF_ERROR(CheckPositions(c, ids, c.has_input(8)));
  return SetEmbedOutputs(c, ids, hidden);
}

// QEmbedLayerNormalization(input_ids, segment_ids?, word, position,
// segment?, gamma, beta (8-bit), mask?, then the five scales and the five
// zero points in that order): EmbedLayerNormalization of the dequantized
// tables and vectors ((q - zp) * scale).
Status InferQEmbedLayerNorm(InferContext& c) {
  if (c.in_dtype(0) != DType::kInt32) {
    return c.Fail("input 0 (input_ids) has type ", DTypeName(c.in_dtype(0)), ", expected int32");
  }
  const Shape ids = c.in_shape(0);
  if (ids.size() != 2) return c.Fail("input 0 (input_ids) has shape ", ShapeToString(ids), ", expected [batch, sequence]");
  if (c.has_input(1) != c.has_input(4) || c.has_input(4) != c.has_input(10) || c.has_input(4) != c.has_input(15)) {
    return c.Fail("inputs 1 (segment_ids), 4 (segment_embedding), 10 and 15 (its scale and zero point) must be all "
                  "present or all absent");
  }
  if (c.has_input(1)) KILN_RETURN_IF_ERROR(CheckIds(c, 1, "segment_ids", ids, false));
  const int idx[5] = {2, 3, 4, 5, 6};
  for (int k = 0; k < 5; ++k) {
    if (k != 2 && !c.has_input(idx[k])) return c.Fail("input ", idx[k], " is required");
  }
  std::int64_t hidden = 0;
  KILN_RETURN_IF_ERROR(CheckEmbedTables(c, idx, DType::kUInt8, &hidden));
  if (c.has_input(7)) KILN_RETURN_IF_ERROR(CheckIds(c, 7, "mask", ids, false));
  KILN_RETURN_IF_ERROR(CheckPositions(c, ids, false));
  for (int k = 0; k < 5; ++k) {
    const int table = idx[k], si = 8 + k, zi = 13 + k;
    if (!c.has_input(table)) continue;
    if (!c.has_input(si) || !c.has_input(zi)) return c.Fail("inputs ", si, " and ", zi, " (scale, zero point of input ", table, ") are required");
    if (c.in_dtype(si) != DType::kFloat32 || !OneValue(c.in_shape(si))) {
      return c.Fail("input ", si, " (a scale) has type ", DTypeName(c.in_dtype(si)), " and shape ",
                    ShapeToString(c.in_shape(si)), ", expected one float32");
    }
    if (c.in_dtype(zi) != c.in_dtype(table) || !OneValue(c.in_shape(zi))) {
      return c.Fail("input ", zi, " (a zero point) has type ", DTypeName(c.in_dtype(zi)), " and shape ",
                    ShapeToString(c.in_shape(zi)), ", expected one ", DTypeName(c.in_dtype(table)));
    }
  }
  return SetEmbedOutputs(c, ids, hidden);
}

// MultiHeadAttention(query [B, S, D], key, value, bias?, key_padding_mask?,
// attention_bias?, past_key?, past_value?) -> output [B, S, Dv],
// present_key?, present_value? (ONNX Runtime's CPU kernel's forms): key
// [B, L, D] and value [B, L, Dv], each projected slice plus its part of
// bias [D + D + Dv]; or key and value already split into heads, [B, N, L,
// H] and [B, N, L, Hv] (cross-attention's cached K and V; no bias there,
// no past); past_key [B, N, P, H] and past_value [B, N, P, Hv] together.
// Refused, each named: packed QKV in query, packed KV in key (ONNX
// Runtime's CPU kernel refuses both), past_sequence_length,
// cache_indirection and the qk output.
Status InferMultiHeadAttention(InferContext& c) {
  const ir::Node& n = c.node();
  const std::int64_t heads = n.GetInt("num_heads", 0);
  KILN_RETURN_IF_ERROR(CheckAttrRange(c, "num_heads", heads, 1));
  KILN_RETURN_IF_ERROR(CheckAttentionAttrs(c));
  if (c.has_input(8)) return c.Fail("input 8 (past_sequence_length) is not supported");
  if (c.has_input(9)) return c.Fail("input 9 (cache_indirection) is not supported");
  if (c.num_outputs() > 3 && n.output(3)) return c.Fail("output 3 (qk) is not supported");
  KILN_RETURN_IF_ERROR(CheckFloat(c, 0, "query"));
  const Shape& q = c.in_shape(0);
  if (q.size() == 5) return c.Fail("input 0 (query) is packed Q, K and V ", ShapeToString(q), ", which is not supported");
  if (q.size() != 3) return c.Fail("input 0 (query) has shape ", ShapeToString(q), ", expected [batch, sequence, hidden]");
  const std::int64_t batch = q[0], seq = q[1], hidden = q[2];
  if (hidden < 0) return c.Fail("input 0 (query) needs a known hidden size, found ", ShapeToString(q));
  if (hidden == 0 || hidden % heads != 0) {
    return c.Fail("input 0 (query) has hidden size ", hidden, ", expected a positive multiple of num_heads (", heads, ")");
  }
  const std::int64_t head = hidden / heads;
  if (c.has_input(1) && c.in_shape(1).size() == 5) {
    return c.Fail("input 1 (key) is packed K and V ", ShapeToString(c.in_shape(1)), ", which is not supported");
  }
  if (!c.has_input(1) || !c.has_input(2)) {
    return c.Fail("inputs 1 (key) and 2 (value) are required (packed Q, K and V in query is not supported)");
  }
  KILN_RETURN_IF_ERROR(CheckFloat(c, 1, "key"));
  KILN_RETURN_IF_ERROR(CheckFloat(c, 2, "value"));
  const Shape& k = c.in_shape(1);
  const Shape& v = c.in_shape(2);
  std::int64_t kv_len = -1, v_hidden = -1;
  if (k.size() == 3) {
    if (Differ(k[0], batch) || Differ(k[2], hidden)) {
      return c.Fail("input 1 (key) has shape ", ShapeToString(k), ", expected [", batch, ", kv length, ", hidden, "]");
    }
    if (v.size() != 3 || Differ(v[0], batch) || Differ(v[1], k[1]) || v[2] < 0) {
      return c.Fail("input 2 (value) has shape ", ShapeToString(v), ", expected [", batch, ", ", k[1],
                    ", v hidden] (a known v hidden)");
    }
    kv_len = k[1];
    v_hidden = v[2];
  } else if (k.size() == 4) {
    if (Differ(k[0], batch) || Differ(k[1], heads) || Differ(k[3], head)) {
      return c.Fail("input 1 (key) has shape ", ShapeToString(k), ", expected [", batch, ", ", heads, ", kv length, ",
                    head, "]");
    }
    if (v.size() != 4 || Differ(v[0], batch) || Differ(v[1], heads) || Differ(v[2], k[2]) || v[3] < 0) {
      return c.Fail("input 2 (value) has shape ", ShapeToString(v), ", expected [", batch, ", ", heads, ", ", k[2],
                    ", v head size] (a known v head size)");
    }
    if (c.has_input(3)) return c.Fail("input 3 (bias) with key and value split into heads is not supported");
    if (c.has_input(6) || c.has_input(7)) {
      return c.Fail("inputs 6 and 7 (past_key, past_value) with key and value split into heads are not supported");
    }
    kv_len = k[2];
    KILN_ASSIGN_OR_RETURN(v_hidden, MulDims(c, v[3], heads, "v hidden size"));
  } else {
    return c.Fail("input 1 (key) has shape ", ShapeToString(k), ", expected [", batch, ", kv length, ", hidden,
                  "] or [", batch, ", ", heads, ", kv length, ", head, "]");
  }
  if (v_hidden == 0 || v_hidden % heads != 0) {
    return c.Fail("input 2 (value) has hidden size ", v_hidden, ", expected a positive multiple of num_heads (", heads,
                  ")");
  }
  const std::int64_t v_head = v_hidden / heads;
  if (c.has_input(3)) {
    std::int64_t all = 0;
    KILN_ASSIGN_OR_RETURN(all, AddDims(c, hidden, hidden, "bias size"));
    KILN_ASSIGN_OR_RETURN(all, AddDims(c, all, v_hidden, "bias size"));
    KILN_RETURN_IF_ERROR(CheckVector(c, 3, "bias", all));
  }
  std::int64_t past = 0;
  if (c.has_input(6) != c.has_input(7)) return c.Fail("inputs 6 (past_key) and 7 (past_value) go together");
  if (c.has_input(6)) {
    KILN_RETURN_IF_ERROR(CheckFloat(c, 6, "past_key"));
    KILN_RETURN_IF_ERROR(CheckFloat(c, 7, "past_value"));
    const Shape& pk = c.in_shape(6);
    const Shape& pv = c.in_shape(7);
    if (pk.size() != 4 || Differ(pk[0], batch) || Differ(pk[1], heads) || Differ(pk[3], head)) {
      return c.Fail("input 6 (past_key) has shape ", ShapeToString(pk), ", expected [", batch, ", ", heads,
                    ", past length, ", head, "]");
    }
    if (pv.size() != 4 || Differ(pv[0], batch) || Differ(pv[1], heads) || Differ(pv[2], pk[2]) ||
        Differ(pv[3], v_head)) {
      return c.Fail("input 7 (past_value) has shape ", ShapeToString(pv), ", expected [", batch, ", ", heads, ", ",
                    pk[2], ", ", v_head, "]");
    }
    past = pk[2];
  }
  std::int64_t total = -1;
  if (past >= 0 && kv_len >= 0) {
    KILN_ASSIGN_OR_RETURN(total, AddDims(c, past, kv_len, "past + kv length"));
  }
  // ONNX Runtime's causal mask is self-attention's: query i sees keys up
  // to P + i. Keys of another length (unknown ones: checked at run time)
  // are refused.
  if (n.GetInt("unidirectional", 0) == 1 && Differ(kv_len, seq)) {
    return c.Fail("attribute 'unidirectional' with ", kv_len, " keys for ", seq,
                  " queries (cross-attention) is not supported");
  }
  KILN_RETURN_IF_ERROR(CheckMaskAndBias(c, 4, "key_padding_mask", false, 5, batch, heads, seq, total));
  c.SetOutput(0, DType::kFloat32, {batch, seq, v_hidden});
  if (c.num_outputs() > 1 && n.output(1)) c.SetOutput(1, DType::kFloat32, {batch, heads, total, head});
  if (c.num_outputs() > 2 && n.output(2)) c.SetOutput(2, DType::kFloat32, {batch, heads, total, v_head});
  return Status::Ok();
}

}  // namespace

// The kinds of the attributes these ops take (com.microsoft attributes get
// no schema check at import): a mistyped one is an error, not its default.
Status CheckOrtAttrKinds(InferContext& c) {
  using K = ir::Attribute::Kind;
  static const std::pair<const char*, K> kKinds[] = {
      {"num_heads", K::kInt},         {"qkv_hidden_sizes", K::kInts},   {"unidirectional", K::kInt},
      {"mask_filter_value", K::kFloat}, {"scale", K::kFloat},           {"do_rotary", K::kInt},
      {"rotary_embedding_dim", K::kInt}, {"past_present_share_buffer", K::kInt}, {"epsilon", K::kFloat},
      {"mask_index_type", K::kInt},   {"activation", K::kString},       {"activation_params", K::kFloats},
      {"activation_alpha", K::kFloat}, {"activation_beta", K::kFloat},  {"activation_gamma", K::kFloat},
      {"alpha", K::kFloat},           {"beta", K::kFloat},              {"transA", K::kInt},
      {"transB", K::kInt},            {"transBatchA", K::kInt},         {"transBatchB", K::kInt},
      {"auto_pad", K::kString},       {"dilations", K::kInts},          {"group", K::kInt},
      {"kernel_shape", K::kInts},     {"pads", K::kInts},               {"strides", K::kInts}};
  static const char* kNames[] = {"an int", "a float", "a string", "ints", "floats"};
  for (const auto& [name, kind] : kKinds) {
    const int k = kind == K::kInt ? 0 : kind == K::kFloat ? 1 : kind == K::kString ? 2 : kind == K::kInts ? 3 : 4;
    KILN_RETURN_IF_ERROR(CheckAttrKind(c, name, kind, kNames[k]));
  }
  return Status::Ok();
}

void RegisterOrtFusedOps(OpRegistry& r) {
  auto ms = [&r](OpDef d, std::vector<DType> types = {DType::kFloat32}) {
    d.domain = kMicrosoftDomain;
    d.infer = [infer = std::move(d.infer)](InferContext& c) {
      KILN_RETURN_IF_ERROR(CheckOrtAttrKinds(c));
      return infer(c);
    };
    d.input_types = std::set<DType>(types.begin(), types.end());
    r.Register(std::move(d));
  };
  ms(Def("FusedConv", {1}, 2, 4,
         {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "activation", "activation_params"},
         InferFusedConv));
  ms(Def("FusedGemm", {1}, 2, 3,
         {"alpha", "beta", "transA", "transB", "activation", "activation_alpha", "activation_beta",
          "activation_gamma"},
         InferFusedGemm));
  ms(Def("FusedMatMul", {1}, 2, 2, {"alpha", "transA", "transB", "transBatchA", "transBatchB"}, InferFusedMatMul));
  ms(Def("Gelu", {1}, 1, 1, {}, InferGeluLike));
  ms(Def("QuickGelu", {1}, 1, 1, {"alpha"}, InferGeluLike));
  ms(Def("BiasGelu", {1}, 2, 2, {}, InferBiasGelu));
  ms(Def("FastGelu", {1}, 1, 2, {}, InferBiasGelu));
  ms(Def("BiasAdd", {1}, 3, 3, {}, InferBiasAdd));
  OpDef skip = Def("SkipLayerNormalization", {1}, 3, 5, {"epsilon"}, InferSkipLayerNorm);
  skip.min_outputs = 1;
  skip.max_outputs = 4;
  ms(skip);
  OpDef att = Def("Attention", {1}, 2, 7,
                  {"num_heads", "qkv_hidden_sizes", "unidirectional", "mask_filter_value", "scale", "do_rotary",
                   "rotary_embedding_dim", "past_present_share_buffer"},
                  InferAttention);
  att.max_outputs = 2;
  ms(att);
  OpDef mha = Def("MultiHeadAttention", {1}, 1, 10, {"num_heads", "unidirectional", "mask_filter_value", "scale"},
                  InferMultiHeadAttention);
  mha.max_outputs = 4;
  ms(mha);
  OpDef qatt = Def("QAttention", {1}, 5, 9,
                   {"num_heads", "unidirectional", "mask_filter_value", "scale", "do_rotary", "rotary_embedding_dim",
                    "past_present_share_buffer"},
                   InferQAttention);
  qatt.max_outputs = 2;
  ms(qatt, {DType::kUInt8, DType::kInt8});
  // Inputs 0, 2, 3 and 5 are required, 1 and 4 optional: inference checks.
  OpDef emb = Def("EmbedLayerNormalization", {1}, 1, 9, {"epsilon", "mask_index_type"}, InferEmbedLayerNorm);
  emb.max_outputs = 3;
  ms(emb, {DType::kInt32});
  OpDef qemb = Def("QEmbedLayerNormalization", {1}, 1, 18, {"epsilon"}, InferQEmbedLayerNorm);
  qemb.max_outputs = 2;
  ms(qemb, {DType::kInt32});
}

}  // namespace kiln::ops
