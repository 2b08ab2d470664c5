// Recurrent ops: LSTM (1, 7, 14), GRU (1, 3, 7, 14), RNN (1, 7, 14).
//
// Inputs: X, W, R, B, sequence_lens, initial_h (+ initial_c, P for LSTM);
// outputs Y, Y_h (+ Y_c for LSTM), all optional. Gates per direction:
// LSTM 4 (i, o, f, c), GRU 3 (z, r, h), RNN 1. layout (14) = 1 puts batch
// first in X, Y, Y_h, Y_c, initial_h and initial_c.
//
// Activations: `activations` names f, g(, h) for each direction (forward
// first); names are matched case-insensitively. activation_alpha/activation_beta are consumed in order
// by the activations that take them (as onnxruntime does): Affine (alpha,
// beta; defaults 1, 0), LeakyRelu (alpha, 0.01), ThresholdedRelu (alpha, 1),
// ScaledTanh (alpha, beta; 1, 1), HardSigmoid (alpha, beta; 0.2, 0.5),
// Elu (alpha, 1). The CPU kernel parses them the same way
// (backends/cpu/kernels/rnn.cc).
//
// com.microsoft DynamicQuantizeLSTM (version 1), what ONNX Runtime's
// quantize_dynamic writes for an LSTM with constant weights: LSTM's inputs
// and attributes, but W [nd, input_size, 4H] and R [nd, H, 4H] (transposed)
// in int8 or uint8, then W_scale, W_zero_point, R_scale, R_zero_point
// (inputs 8-11, required): float32 scales of shape [nd] (per direction) or
// [nd, 4H] (per output column), zero points of the weight's type and the
// scale's shape. As in ONNX Runtime's kernel an int8 weight's zero points
// must be 0 and a uint8 weight's all equal (checked where constant).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

struct RnnKind {
  int gates;        // gate blocks in W/R
  int activations;  // activation functions per direction
};

RnnKind KindOf(const std::string& op) {
  if (op == "LSTM" || op == "DynamicQuantizeLSTM") return {4, 3};
  if (op == "GRU") return {3, 2};
  return {1, 1};
}

const char* const kInputNames[] = {"X",         "W",       "R",       "B",
                                   "sequence_lens", "initial_h", "initial_c", "P",
                                   "W_scale",   "W_zero_point", "R_scale", "R_zero_point"};

bool KnownActivation(const std::string& name) {
  static const char* const kNames[] = {"sigmoid", "tanh", "relu", "hardsigmoid", "leakyrelu",
                                       "thresholdedrelu", "scaledtanh", "affine", "elu",
                                       "softsign", "softplus"};
  std::string l = name;
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return std::find(std::begin(kNames), std::end(kNames), l) != std::end(kNames);
}

// dims[i] == want, treating unknown (-1) as a match.
bool DimOk(std::int64_t have, std::int64_t want) { return have < 0 || want < 0 || have == want; }

Status CheckShape(InferContext& c, int i, const Shape& want) {
  const Shape& s = c.in_shape(i);
  bool ok = s.size() == want.size();
  for (std::size_t k = 0; ok && k < s.size(); ++k) ok = DimOk(s[k], want[k]);
  if (!ok) {
    return c.Fail("input ", i, " (", kInputNames[i], ") has shape ", ShapeToString(s),
                  ", expected ", ShapeToString(want));
  }
  return Status::Ok();
}

// DynamicQuantizeLSTM's inputs 8-11: each scale float32 of shape [nd] or
// [nd, 4H], its zero point of the same shape; constant zero points 0 for an
// int8 weight, all equal for a uint8 one (ONNX Runtime's kernel rejects
// others); constant scales finite and positive.
Status CheckWeightQuantization(InferContext& c, std::int64_t nd, std::int64_t gh) {
  for (int i : {8, 10}) {
    if (!c.has_input(i) || !c.has_input(i + 1)) {
      return c.Fail("input ", c.has_input(i) ? i + 1 : i, " (", kInputNames[c.has_input(i) ? i + 1 : i],
                    ") is required");
    }
    if (c.in_dtype(i) != DType::kFloat32) {
      return c.Fail("input ", i, " (", kInputNames[i], ") has type ", DTypeName(c.in_dtype(i)), ", expected float32");
    }
    const Shape& s = c.in_shape(i);
    const bool ok = (s.size() == 1 && DimOk(s[0], nd)) || (s.size() == 2 && DimOk(s[0], nd) && DimOk(s[1], gh));
    if (!ok) {
      return c.Fail("input ", i, " (", kInputNames[i], ") has shape ", ShapeToString(s), ", expected [", nd,
                    "] (per direction) or [", nd, ", ", gh, "] (per column)");
    }
    if (c.in_shape(i + 1) != s) {
      return c.Fail("input ", i + 1, " (", kInputNames[i + 1], ") has shape ", ShapeToString(c.in_shape(i + 1)),
                    ", expected its scale's ", ShapeToString(s));
    }
    if (const HostTensor* t = c.in_const(i)) {
      for (std::int64_t k = 0; k < t->numel(); ++k) {
        const float v = t->data_as<float>()[k];
        if (!(v > 0.f) || !std::isfinite(v)) {
          return c.Fail("input ", i, " (", kInputNames[i], ") has ", v, " at ", k, ", expected a finite scale > 0");
        }
      }
    }
    if (const HostTensor* z = c.in_const(i + 1)) {
      const bool s8 = z->dtype() == DType::kInt8;
      for (std::int64_t k = 0; k < z->numel(); ++k) {
        const int v = s8 ? z->data_as<std::int8_t>()[k] : z->data_as<std::uint8_t>()[k];
        const int first = s8 ? 0 : z->data_as<std::uint8_t>()[0];
        if (v != first) {
          return c.Fail("input ", i + 1, " (", kInputNames[i + 1], ") has ", v, " at ", k, ", expected ",
                        s8 ? "0 (an int8 weight's zero point)" : "one zero point throughout (uint8 weights)",
                        " as ONNX Runtime's kernel requires");
        }
      }
    }
  }
  return Status::Ok();
}

Status InferRnn(InferContext& c) {
  const ir::Node& n = c.node();
  const std::string& op = n.op_type();
  const int version = n.since_version();
  const RnnKind kind = KindOf(op);
  const bool quantized = op == "DynamicQuantizeLSTM";

  // Version-specific attributes.
  if (n.HasAttr("output_sequence") && version >= 7) {
    return c.Fail("attribute 'output_sequence' exists only before ", op, "-7");
  }
  if (n.HasAttr("layout") && version < 14) {
    return c.Fail("attribute 'layout' needs ", op, "-14 or later (node follows ", op, "-", version, ")");
  }
  if (op == "GRU" && n.HasAttr("linear_before_reset") && version < 3) {
    return c.Fail("attribute 'linear_before_reset' needs GRU-3 or later");
  }

  const std::string direction = n.GetString("direction", "forward");
  int nd = 0;
  if (direction == "forward" || direction == "reverse") nd = 1;
  else if (direction == "bidirectional") nd = 2;
  else {
    return c.Fail("attribute 'direction' is '", direction,
                  "', expected 'forward', 'reverse' or 'bidirectional'");
  }
  const std::int64_t layout = n.GetInt("layout", 0);
  if (layout != 0 && layout != 1) return c.Fail("attribute 'layout' must be 0 or 1, found ", layout);
  if (n.HasAttr("clip") && !(n.GetFloat("clip", 0.f) > 0.f)) {
    return c.Fail("attribute 'clip' must be positive, found ", n.GetFloat("clip", 0.f));
  }
  if (kind.gates == 4) {
    const std::int64_t f = n.GetInt("input_forget", 0);
    if (f != 0 && f != 1) return c.Fail("attribute 'input_forget' must be 0 or 1, found ", f);
  }
  if (n.HasAttr("activations")) {
    const ir::Attribute* a = n.FindAttr("activations");
    if (a->kind != ir::Attribute::Kind::kStrings) {
      return c.Fail("attribute 'activations' must be a list of strings, is ", ir::AttributeKindName(a->kind));
    }
    const std::size_t k = a->strings.size();
    if (k != static_cast<std::size_t>(kind.activations * nd)) {
      return c.Fail("attribute 'activations' has ", k, " names, expected ", kind.activations * nd, " (",
                    kind.activations, " per direction, ", nd, " direction", nd > 1 ? "s" : "", ")");
    }
    for (const std::string& s : a->strings) {
      if (!KnownActivation(s)) {
        return c.Fail("attribute 'activations': unknown activation '", s,
                      "' (expected Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, ThresholdedRelu, "
                      "ScaledTanh, Affine, Elu, Softsign or Softplus)");
      }
    }
  }

  // Types: X float32 (OpDef), the other float inputs the same, sequence_lens
  // int32/int64; DynamicQuantizeLSTM's W and R 8-bit, its zero points of
  // their weight's type.
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    if (quantized && (i == 1 || i == 2)) {
      if (c.in_dtype(i) != DType::kInt8 && c.in_dtype(i) != DType::kUInt8) {
        return c.Fail("input ", i, " (", kInputNames[i], ") has type ", DTypeName(c.in_dtype(i)),
                      ", expected int8 or uint8");
      }
    } else if (quantized && (i == 9 || i == 11)) {
      if (c.in_dtype(i) != c.in_dtype(i == 9 ? 1 : 2)) {
        return c.Fail("input ", i, " (", kInputNames[i], ") has type ", DTypeName(c.in_dtype(i)), " but ",
                      kInputNames[i == 9 ? 1 : 2], " has ", DTypeName(c.in_dtype(i == 9 ? 1 : 2)),
                      " (they must match)");
      }
    } else if (i == 4) {
      if (c.in_dtype(i) != DType::kInt32 && c.in_dtype(i) != DType::kInt64) {
        return c.Fail("input 4 (sequence_lens) must be int32, is ", DTypeName(c.in_dtype(i)));
      }
    } else if (c.in_dtype(i) != c.in_dtype(0)) {
      return c.Fail("input ", i, " (", kInputNames[i], ") has type ", DTypeName(c.in_dtype(i)),
                    " but X has ", DTypeName(c.in_dtype(0)), " (they must match)");
    }
  }

  const Shape& x = c.in_shape(0);
  if (x.size() != 3) {
    return c.Fail("input 0 (X) must have rank 3 (", layout ? "batch, seq_length" : "seq_length, batch",
                  ", input_size), has shape ", ShapeToString(x));
  }
  const std::int64_t seq = layout ? x[1] : x[0], batch = layout ? x[0] : x[1], in_size = x[2];
  const Shape& w = c.in_shape(1);
  const Shape& r = c.in_shape(2);
  if (w.size() != 3) return c.Fail("input 1 (W) must have rank 3, has shape ", ShapeToString(w));
  if (r.size() != 3) return c.Fail("input 2 (R) must have rank 3, has shape ", ShapeToString(r));

  // The gate dim of W: 1, or 2 in DynamicQuantizeLSTM's transposed W.
  const std::size_t gd = quantized ? 2 : 1;
  std::int64_t hidden = -1;
  if (n.HasAttr("hidden_size")) {
    hidden = n.GetInt("hidden_size", 0);
    KILN_RETURN_IF_ERROR(CheckAttrRange(c, "hidden_size", hidden, 1));
    if (w[gd] >= 0 && w[gd] != kind.gates * hidden) {
      return c.Fail("attribute 'hidden_size' = ", hidden, " does not match input 1 (W) of shape ",
                    ShapeToString(w), ": expected dim ", gd, " = ", kind.gates, " * ", hidden, " = ",
                    kind.gates * hidden);
    }
  } else if (!quantized && r[2] >= 0) {
    hidden = r[2];
  } else if (quantized && r[1] >= 0) {
    hidden = r[1];
  } else if (w[gd] >= 0) {
    hidden = w[gd] / kind.gates;
  }
  if (hidden < 0) return c.Fail("attribute 'hidden_size' is absent and W/R have unknown shapes");
  const std::int64_t gh = kind.gates * hidden;
  KILN_RETURN_IF_ERROR(CheckShape(c, 1, quantized ? Shape{nd, in_size, gh} : Shape{nd, gh, in_size}));
  KILN_RETURN_IF_ERROR(CheckShape(c, 2, quantized ? Shape{nd, hidden, gh} : Shape{nd, gh, hidden}));
  if (quantized) KILN_RETURN_IF_ERROR(CheckWeightQuantization(c, nd, gh));
  if (c.has_input(3)) KILN_RETURN_IF_ERROR(CheckShape(c, 3, {nd, 2 * gh}));
  if (c.has_input(4)) {
    KILN_RETURN_IF_ERROR(CheckShape(c, 4, {batch}));
    if (const HostTensor* t = c.in_const(4); t && seq >= 0) {
      for (std::int64_t b = 0; b < t->numel(); ++b) {
        const std::int64_t len = t->dtype() == DType::kInt32 ? t->data_as<std::int32_t>()[b]
                                                             : t->data_as<std::int64_t>()[b];
        if (len < 0 || len > seq) {
          return c.Fail("input 4 (sequence_lens) has ", len, " for batch entry ", b,
                        ", expected 0..", seq, " (seq_length)");
        }
      }
    }
  }
  const Shape state = layout ? Shape{batch, nd, hidden} : Shape{nd, batch, hidden};
  if (c.has_input(5)) KILN_RETURN_IF_ERROR(CheckShape(c, 5, state));
  if (c.has_input(6)) KILN_RETURN_IF_ERROR(CheckShape(c, 6, state));
  if (c.has_input(7)) KILN_RETURN_IF_ERROR(CheckShape(c, 7, {nd, 3 * hidden}));

  const DType t = c.in_dtype(0);
  if (c.num_outputs() > 0) {
    c.SetOutput(0, t, layout ? Shape{batch, seq, nd, hidden} : Shape{seq, nd, batch, hidden});
  }
  for (int j = 1; j < c.num_outputs(); ++j) c.SetOutput(j, t, state);
  return Status::Ok();
}

void Define(OpRegistry& r, const char* type, std::vector<int> versions, int max_inputs, int max_outputs,
            std::set<std::string> extra) {
  OpDef d;
  d.type = type;
  d.versions = std::move(versions);
  d.min_inputs = 3;
  d.max_inputs = max_inputs;
  d.min_outputs = 0;
  d.max_outputs = max_outputs;
  d.attributes = {"activation_alpha", "activation_beta", "activations", "clip", "direction",
                  "hidden_size", "layout", "output_sequence"};
  d.attributes.insert(extra.begin(), extra.end());
  d.input_types = {DType::kFloat32};
  d.infer = InferRnn;
  r.Register(d);
}

}  // namespace

void RegisterRnnOps(OpRegistry& r) {
  Define(r, "LSTM", {1, 7, 14}, 8, 3, {"input_forget"});
  Define(r, "GRU", {1, 3, 7, 14}, 6, 2, {"linear_before_reset"});
  Define(r, "RNN", {1, 7, 14}, 6, 2, {});
  OpDef q;
  q.type = "DynamicQuantizeLSTM";
  q.domain = kMicrosoftDomain;
  q.versions = {1};
  q.min_inputs = 3;  // 8-11 are required too; optional 3-7 sit between (inference checks)
  q.max_inputs = 12;
  q.min_outputs = 0;
  q.max_outputs = 3;
  q.attributes = {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                  "input_forget"};
  q.input_types = {DType::kFloat32};
  q.infer = InferRnn;
  r.Register(q);
}

}  // namespace kiln::ops
