// BatchNormalization: inference, and training mode (batch statistics plus
// the running-statistics outputs). LayerNormalization, InstanceNormalization.
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"

namespace kiln::ops {
namespace {

Status InferBatchNorm(InferContext& c) {
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  const ir::Node& n = c.node();
  const Shape& x = c.in_shape(0);
  if (x.size() < 2) return c.Fail("input X must have rank >= 2 (N, C, ...), has shape ", ShapeToString(x));
  // spatial=0 (BatchNormalization-7 only): statistics per (C, D1, ...) element.
  const bool spatial = n.GetInt("spatial", 1) != 0;
  // Channels-last (kiln.nhwc = 1, the layout pass; format version 14): X and
  // Y are NHWC, one channel per value of the last dim. Inference only.
  const std::int64_t nhwc = n.GetInt(kNhwcAttr, 0);
  if (nhwc != 0 && nhwc != 1) return c.Fail("attribute 'kiln.nhwc' must be 0 or 1, found ", nhwc);
  if (nhwc) {
    if (x.size() != 4 || !spatial || c.num_outputs() != 1 || n.GetInt("training_mode", 0) != 0) {
      return c.Fail("attribute 'kiln.nhwc' needs a 4-D X, spatial statistics, inference mode and one output (X ",
                    ShapeToString(x), ", ", c.num_outputs(), " outputs)");
    }
  }
  const std::int64_t params = nhwc ? x[3] : spatial ? x[1] : NumElements(Shape(x.begin() + 1, x.end()));
  for (int i = 1; i < 5; ++i) {
    if (!IsFloating(c.in_dtype(i))) {
      return c.Fail("input ", i, " (", kNames[i], ") must be a floating-point tensor, is ", DTypeName(c.in_dtype(i)));
    }
    const std::int64_t k = NumElements(c.in_shape(i));
    if (k >= 0 && params >= 0 && k != params) {
      return c.Fail("input ", i, " (", kNames[i], ") has shape ", ShapeToString(c.in_shape(i)), ", expected ", params,
                    " values (one per ", spatial ? "channel" : "element of a sample", " of X ", ShapeToString(x), ")");
    }
  }
  if (n.since_version() >= 14 && c.num_outputs() > 3) {
    return c.Fail("has ", c.num_outputs(), " outputs; BatchNormalization-", n.since_version(), " has at most 3");
  }
  const std::int64_t mode = n.GetInt("training_mode", 0);
  if (mode != 0 && mode != 1) return c.Fail("attribute 'training_mode' must be 0 or 1, found ", mode);
  c.SetOutput(0, c.in_dtype(0), x);
  // Outputs 1.. are (running) mean, var, then (before 14) saved mean, var.
  for (int j = 1; j < c.num_outputs(); ++j) {
    const int src = j % 2 ? 3 : 4;
    c.SetOutput(j, c.in_dtype(src), c.in_shape(src));
  }
  return Status::Ok();
}

Status InferLayerNorm(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input X must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", -1), x.size(), "axis"));
  const std::int64_t stash = c.node().GetInt("stash_type", 1);
  if (stash != 1 && stash != 11) return c.Fail("attribute 'stash_type' = ", stash, " is not supported (1 = float, 11 = double)");
  const Shape inner(x.begin() + axis, x.end());
  for (int i = 1; i < 3; ++i) {  // Scale and B broadcast to X's normalized dims
    if (!c.has_input(i)) continue;
    const Shape& s = c.in_shape(i);
    bool ok = s.size() <= inner.size();
    for (std::size_t d = 0; ok && d < s.size(); ++d) {
      const std::int64_t t = inner[inner.size() - s.size() + d];
      ok = s[d] == 1 || s[d] < 0 || t < 0 || s[d] == t;
    }
    if (!ok) return c.Fail("input ", i, " (", i == 1 ? "Scale" : "B", ") has shape ", ShapeToString(s), ", not broadcastable to the normalized dims ", ShapeToString(inner));
  }
  c.SetOutput(0, c.in_dtype(0), x);
  Shape stat(x.begin(), x.begin() + axis);
  stat.resize(x.size(), 1);
  for (int j = 1; j < c.num_outputs(); ++j) c.SetOutput(j, static_cast<DType>(stash), stat);
  return Status::Ok();
}

Status InferInstanceNorm(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  const Shape& x = c.in_shape(0);
  if (x.size() < 3) return c.Fail("input must have rank >= 3 (N, C, D1, ...), has shape ", ShapeToString(x));
  for (int i = 1; i < 3; ++i) {
    const Shape& s = c.in_shape(i);
    if (s.size() != 1 || (s[0] >= 0 && x[1] >= 0 && s[0] != x[1])) {
      return c.Fail("input ", i, " (", i == 1 ? "scale" : "B", ") must have shape [", x[1], "], has ", ShapeToString(s));
    }
  }
  return InferSameAsInput(c);
}

}  // namespace

void RegisterNormOps(OpRegistry& r) {
  OpDef ln;
  ln.type = "LayerNormalization";
  // 1: ONNX Runtime's own LayerNormalization in the ONNX domain, which its
  // optimizer writes into models of opsets below 17 (the same inputs,
  // attributes and arithmetic as opset 17's).
  ln.versions = {1, 17};
  ln.min_inputs = 2;
  ln.max_inputs = 3;
  ln.max_outputs = 3;
  ln.attributes = {"axis", "epsilon", "stash_type"};
  ln.input_types = FloatTypes();
  ln.infer = InferLayerNorm;
  r.Register(ln);
  OpDef in;
  in.type = "InstanceNormalization";
  in.versions = {1, 6};
  in.min_inputs = in.max_inputs = 3;
  in.attributes = {"epsilon", "consumed_inputs"};
  in.input_types = FloatTypes();
  in.infer = InferInstanceNorm;
  r.Register(in);

  OpDef d;
  d.type = "BatchNormalization";
  d.versions = {7, 9, 14, 15};
  d.min_inputs = d.max_inputs = 5;
  d.max_outputs = 5;
  d.attributes = {"epsilon", "momentum", "spatial", "training_mode"};
  d.input_types = FloatTypes();
  d.infer = InferBatchNorm;
  r.Register(d);
}

}  // namespace kiln::ops
