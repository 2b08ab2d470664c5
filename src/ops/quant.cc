// Quantized ops (ONNX): QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv. Scales are float32; zero points int8 or uint8 (int32 for
// DequantizeLinear's int32 input, where it must be 0).
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"

namespace kiln::ops {
namespace {

bool IsInt8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// A scale or zero point: a scalar / one element (per tensor), or 1-D with
// `per` elements (per channel or row) when `per` >= 0. Names the input.
Status CheckQuantParam(InferContext& c, int i, const char* what, std::int64_t per) {
  if (!c.has_input(i)) return Status::Ok();
  const Shape& s = c.in_shape(i);
  const std::int64_t n = NumElements(s);
  if (n == 1 && s.size() <= 1) return Status::Ok();
  if (per >= 0 && s.size() == 1 && s[0] == per) return Status::Ok();
  if (per >= 0) return c.Fail("input ", i, " (", what, ") must be a scalar or have shape [", per, "], has ", ShapeToString(s));
  return c.Fail("input ", i, " (", what, ") must be a scalar, has shape ", ShapeToString(s));
}

Status CheckType(InferContext& c, int i, const char* what, std::initializer_list<DType> ok) {
  if (!c.has_input(i)) return Status::Ok();
  for (DType t : ok) {
    if (c.in_dtype(i) == t) return Status::Ok();
  }
  std::string names;
  for (DType t : ok) names += StrCat(names.empty() ? "" : " or ", DTypeName(t));
  return c.Fail("input ", i, " (", what, ") has type ", DTypeName(c.in_dtype(i)), ", expected ", names);
}

// The extent of the quantization axis (opset 13 `axis`, default 1) of
// input 0, or -1 when the node is per tensor only (opset 10).
Result<std::int64_t> AxisExtent(InferContext& c) {
  // Per tensor (a one-element scale): `axis` is not used, whatever it says.
  if (c.node().since_version() < 13 || NumElements(c.in_shape(1)) == 1) return std::int64_t{-1};
  const Shape& x = c.in_shape(0);
  if (x.empty()) return std::int64_t{-1};
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 1), x.size(), "axis"));
  return x[static_cast<std::size_t>(axis)];
}

Status InferQuantize(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "x", {DType::kFloat32, DType::kInt32}));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "y_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckType(c, 2, "y_zero_point", {DType::kUInt8, DType::kInt8}));
  KILN_ASSIGN_OR_RETURN(std::int64_t per, AxisExtent(c));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 1, "y_scale", per));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "y_zero_point", per));
  if (c.has_input(2) && NumElements(c.in_shape(2)) != NumElements(c.in_shape(1))) {
    return c.Fail("y_zero_point shape ", ShapeToString(c.in_shape(2)), " differs from y_scale's ", ShapeToString(c.in_shape(1)));
  }
  c.SetOutput(0, c.has_input(2) ? c.in_dtype(2) : DType::kUInt8, c.in_shape(0));
  return Status::Ok();
}

Status InferDequantize(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "x", {DType::kUInt8, DType::kInt8, DType::kInt32}));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "x_scale", {DType::kFloat32}));
  if (c.has_input(2) && c.in_dtype(2) != c.in_dtype(0)) {
    return c.Fail("x_zero_point has type ", DTypeName(c.in_dtype(2)), " but x has ", DTypeName(c.in_dtype(0)), " (they must match)");
  }
  KILN_ASSIGN_OR_RETURN(std::int64_t per, AxisExtent(c));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 1, "x_scale", per));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "x_zero_point", per));
  if (c.has_input(2) && NumElements(c.in_shape(2)) != NumElements(c.in_shape(1))) {
    return c.Fail("x_zero_point shape ", ShapeToString(c.in_shape(2)), " differs from x_scale's ", ShapeToString(c.in_shape(1)));
  }
  c.SetOutput(0, DType::kFloat32, c.in_shape(0));
  return Status::Ok();
}

Status InferDynamicQuantize(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "x", {DType::kFloat32}));
  c.SetOutput(0, DType::kUInt8, c.in_shape(0));
  if (c.num_outputs() > 1) c.SetOutput(1, DType::kFloat32, {});
  if (c.num_outputs() > 2) c.SetOutput(2, DType::kUInt8, {});
  return Status::Ok();
}

// A MatMulInteger / QLinearMatMul zero point or scale of A (per row: [M]
// for 2-D A) or B (per column: [N] for 2-D B), or a scalar.
Status CheckMatMulParam(InferContext& c, int i, const char* what, int operand, bool rows) {
  if (!c.has_input(i)) return Status::Ok();
  const Shape& x = c.in_shape(operand);
  const std::int64_t per = x.size() == 2 ? x[rows ? 0 : 1] : -1;
  return CheckQuantParam(c, i, what, per);
}

Status InferMatMulInteger(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "A", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "B", {DType::kUInt8, DType::kInt8}));
  for (int i : {2, 3}) {
    if (c.has_input(i) && c.in_dtype(i) != c.in_dtype(i - 2)) {
      return c.Fail("input ", i, " (zero point) has type ", DTypeName(c.in_dtype(i)), " but input ", i - 2, " has ",
                    DTypeName(c.in_dtype(i - 2)), " (they must match)");
    }
  }
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 2, "a_zero_point", 0, true));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 3, "b_zero_point", 1, false));
  KILN_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c, 0, 1));
  c.SetOutput(0, DType::kInt32, out);
  return Status::Ok();
}

Status InferQLinearMatMul(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "a", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 3, "b", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 7, "y_zero_point", {DType::kUInt8, DType::kInt8}));
  for (int i : {1, 4, 6}) KILN_RETURN_IF_ERROR(CheckType(c, i, "scale", {DType::kFloat32}));
  for (auto [zp, x] : {std::pair{2, 0}, std::pair{5, 3}}) {
    if (c.in_dtype(zp) != c.in_dtype(x)) {
      return c.Fail("input ", zp, " (zero point) has type ", DTypeName(c.in_dtype(zp)), " but input ", x, " has ",
                    DTypeName(c.in_dtype(x)), " (they must match)");
    }
  }
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 1, "a_scale", 0, true));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 2, "a_zero_point", 0, true));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 4, "b_scale", 3, false));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 5, "b_zero_point", 3, false));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 6, "y_scale", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 7, "y_zero_point", -1));
  KILN_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c, 0, 3));
  c.SetOutput(0, c.in_dtype(7), out);
  return Status::Ok();
}

Status InferConvInteger(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "x", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "w", {DType::kUInt8, DType::kInt8}));
  for (int i : {2, 3}) {
    if (c.has_input(i) && c.in_dtype(i) != c.in_dtype(i - 2)) {
      return c.Fail("input ", i, " (zero point) has type ", DTypeName(c.in_dtype(i)), " but input ", i - 2, " has ",
                    DTypeName(c.in_dtype(i - 2)), " (they must match)");
    }
  }
  if (c.in_shape(0).size() < 3) return c.Fail("input x must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(c.in_shape(0)));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "x_zero_point", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 3, "w_zero_point", c.in_shape(1).empty() ? -1 : c.in_shape(1)[0]));
  KILN_ASSIGN_OR_RETURN(Shape out, ConvOutputShape(c, c.in_shape(0), 1, -1));
  c.SetOutput(0, DType::kInt32, out);
  return Status::Ok();
}

Status InferQLinearConv(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "x", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 3, "w", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 7, "y_zero_point", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 8, "B", {DType::kInt32}));
  for (int i : {1, 4, 6}) KILN_RETURN_IF_ERROR(CheckType(c, i, "scale", {DType::kFloat32}));
  for (auto [zp, x] : {std::pair{2, 0}, std::pair{5, 3}}) {
    if (c.in_dtype(zp) != c.in_dtype(x)) {
      return c.Fail("input ", zp, " (zero point) has type ", DTypeName(c.in_dtype(zp)), " but input ", x, " has ",
                    DTypeName(c.in_dtype(x)), " (they must match)");
    }
  }
  // Channels-last (kiln.nhwc, the layout pass): x and y are NHWC.
  const bool nhwc = c.node().GetInt(kNhwcAttr, 0) != 0;
  Shape x = c.in_shape(0);
  if (nhwc) {
    if (x.size() != 4) return c.Fail("channels-last QLinearConv needs a 4-D input");
    x = {x[0], x[3], x[1], x[2]};
  }
  if (x.size() < 3) return c.Fail("input x must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(c.in_shape(0)));
  const std::int64_t m = c.in_shape(3).empty() ? -1 : c.in_shape(3)[0];
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 1, "x_scale", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "x_zero_point", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 4, "w_scale", m));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 5, "w_zero_point", m));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 6, "y_scale", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 7, "y_zero_point", -1));
  KILN_ASSIGN_OR_RETURN(Shape out, ConvOutputShape(c, x, 3, 8));
  if (nhwc) out = {out[0], out[2], out[3], out[1]};
  c.SetOutput(0, c.in_dtype(7), out);
  return Status::Ok();
}

}  // namespace

void RegisterQuantOps(OpRegistry& r) {
  const std::set<std::string> conv_attrs = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
  r.Register(Def("QuantizeLinear", {10, 13}, 2, 3, {"axis"}, InferQuantize));
  r.Register(Def("DequantizeLinear", {10, 13}, 2, 3, {"axis"}, InferDequantize));
  OpDef dq = Def("DynamicQuantizeLinear", {11}, 1, 1, {}, InferDynamicQuantize);
  dq.min_outputs = dq.max_outputs = 3;
  r.Register(dq);
  r.Register(Def("MatMulInteger", {10}, 2, 4, {}, InferMatMulInteger));
  r.Register(Def("QLinearMatMul", {10}, 8, 8, {}, InferQLinearMatMul));
  r.Register(Def("ConvInteger", {10}, 2, 4, conv_attrs, InferConvInteger));
  r.Register(Def("QLinearConv", {10}, 8, 9, conv_attrs, InferQLinearConv));
}

}  // namespace kiln::ops
