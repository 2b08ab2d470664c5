// Binary elementwise ops with NumPy-style broadcasting.
#include "ops/common_infer.h"

namespace kiln::ops {

Status InferBroadcastBinary(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
  auto s = BroadcastShapes(c.in_shape(0), c.in_shape(1));
  if (!s.ok()) return c.Fail(s.status().message());
  c.SetOutput(0, c.in_dtype(0), s.value());
  return Status::Ok();
}

void RegisterElementwiseOps(OpRegistry& r) {
  for (const char* name : {"Add", "Sub", "Mul", "Div"}) {
    OpDef d;
    d.type = name;
    d.versions = {7, 13, 14};
    d.min_inputs = d.max_inputs = 2;
    d.input_types = NumericTypes();
    d.infer = InferBroadcastBinary;
    r.Register(d);
  }
}

}  // namespace kiln::ops
