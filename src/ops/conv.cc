// Conv.
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::ops {
namespace {

Status InferConv(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  const bool nhwc = c.node().GetInt(kNhwcAttr, 0) != 0;
  Shape x = c.in_shape(0);
  if (nhwc) {
    if (x.size() != 4) return c.Fail("channels-last Conv needs a 4-D input");
    x = {x[0], x[3], x[1], x[2]};
  }
  KILN_ASSIGN_OR_RETURN(Shape out, ConvOutputShape(c, x, 1, 2));
  if (nhwc) out = {out[0], out[2], out[3], out[1]};
  // The fused residual (kiln.sum = 1, input 3): exactly the output's type
  // and shape, no broadcasting.
  KILN_ASSIGN_OR_RETURN(const bool residual, CheckFusedInput(c, kSumAttr, 3, "residual"));
  if (residual && c.in_shape(3) != out) {
    return c.Fail("residual input 3 has shape ", ShapeToString(c.in_shape(3)), ", expected the output's ",
                  ShapeToString(out));
  }
  KILN_RETURN_IF_ERROR(CheckBf16Attr(c));
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

}  // namespace

Result<Shape> ConvOutputShape(InferContext& c, const Shape& x, int w_index, int bias_index) {
  const Shape& w = c.in_shape(w_index);
  if (x.size() < 3) return c.Fail("input X must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(x));
  if (w.size() != x.size()) return c.Fail("weight W has rank ", w.size(), ", expected ", x.size(), " like X");
  const std::int64_t group = c.node().GetInt("group", 1);
  KILN_RETURN_IF_ERROR(CheckAttrRange(c, "group", group, 1));
  if (x[1] >= 0 && w[1] >= 0 && (x[1] % group != 0 || x[1] / group != w[1])) {
    return c.Fail("input channels ", x[1], " != W dim 1 (", w[1], ") x group (", group, ")");
  }
  if (w[0] >= 0 && w[0] % group != 0) return c.Fail("output channels ", w[0], " not divisible by group ", group);
  std::vector<std::int64_t> kernel(w.begin() + 2, w.end());
  if (auto ks = c.node().GetInts("kernel_shape"); !ks.empty() && ks != kernel) {
    return c.Fail("attribute 'kernel_shape' ", ShapeToString(ks), " does not match W's spatial dims ", ShapeToString(kernel));
  }
  if (bias_index >= 0 && c.has_input(bias_index) &&
      (c.in_shape(bias_index).size() != 1 || (w[0] >= 0 && c.in_shape(bias_index)[0] != w[0]))) {
    return c.Fail("bias B must have shape [", w[0], "], has ", ShapeToString(c.in_shape(bias_index)));
  }
  KILN_ASSIGN_OR_RETURN(Window win, ComputeWindow(c.node(), Shape(x.begin() + 2, x.end()), kernel, false));
  Shape out = {x[0], w[0]};
  out.insert(out.end(), win.out.begin(), win.out.end());
  return out;
}

void RegisterConvOps(OpRegistry& r) {
  OpDef d;
  d.type = "Conv";
  d.versions = {1, 11};
  d.min_inputs = 2;
  d.max_inputs = 4;  // input 3: the residual of kiln.sum (InferConv)
  d.attributes = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
  d.input_types = {DType::kFloat32};
  d.infer = InferConv;
  r.Register(d);
}

}  // namespace kiln::ops
