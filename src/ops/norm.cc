// BatchNormalization: inference, and training mode (batch statistics plus
// the running-statistics outputs).
#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

Status InferBatchNorm(InferContext& c) {
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  const ir::Node& n = c.node();
  const Shape& x = c.in_shape(0);
  if (x.size() < 2) return c.Fail("input X must have rank >= 2 (N, C, ...), has shape ", ShapeToString(x));
  // spatial=0 (BatchNormalization-7 only): statistics per (C, D1, ...) element.
  const bool spatial = n.GetInt("spatial", 1) != 0;
  const std::int64_t params = spatial ? x[1] : NumElements(Shape(x.begin() + 1, x.end()));
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

}  // namespace

void RegisterNormOps(OpRegistry& r) {
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
