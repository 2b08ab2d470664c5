// ONNX Runtime's fused contrib ops (domain com.microsoft, version 1), what
// its graph optimizer writes into a saved optimized model
// (SessionOptions.optimized_model_filepath, 'extended' level): FusedConv,
// FusedGemm, FusedMatMul, Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd and
// SkipLayerNormalization. Inference here checks each one as ONNX Runtime's
// CPU kernel does and gives its outputs; the lower-contrib pass then
// rewrites it into the standard ops it fuses (src/passes/lower_contrib.cc),
// which Kiln's own fusions take from there. LayerNormalization below
// opset 17, which ONNX Runtime also writes (its own definition in the ONNX
// domain, the same as opset 17's), is registered in norm.cc.
#include <cmath>

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

}  // namespace

void RegisterOrtFusedOps(OpRegistry& r) {
  auto ms = [&r](OpDef d, std::vector<DType> types = {DType::kFloat32}) {
    d.domain = kMicrosoftDomain;
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
}

}  // namespace kiln::ops
