// Quantized ops (ONNX): QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv. Scales are float32; zero points int8 or uint8 (int32 for
// DequantizeLinear's int32 input, where it must be 0).
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"

namespace kiln::ops {
namespace {

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
  // com.microsoft's version 1 has opset 13's per-axis form.
  const bool per_axis_form = c.node().since_version() >= 13 || c.node().domain() == kMicrosoftDomain;
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "axis", ir::Attribute::Kind::kInt, "an int"));
  if (!per_axis_form || NumElements(c.in_shape(1)) == 1) return std::int64_t{-1};
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

// Input i (absent: fine), a float32 of one value or one per `axis` of the
// output `out` (1 in every other dim, aligned to the right as broadcasting
// reads it): a fused scale or bias.
Status CheckPerAxis(InferContext& c, int i, const char* what, const Shape& out, std::size_t axis) {
  if (!c.has_input(i)) return Status::Ok();
  KILN_RETURN_IF_ERROR(CheckType(c, i, what, {DType::kFloat32}));
  const Shape& s = c.in_shape(i);
  const bool ok = PerAxisOrOne(s, out, axis);
  if (!ok) {
    return c.Fail("input ", i, " (", what, ") has shape ", ShapeToString(s), ", expected one value or ",
                  axis < out.size() ? out[axis] : -1, " along dim ", axis, " of the output ", ShapeToString(out));
  }
  return Status::Ok();
}

// kiln.rescale on a ConvInteger / MatMulInteger (fuse-integer-rescale): the
// scale (input 4, required) and bias (input 5, optional) are float32, each
// one value or one per `axis` of the output `out` (1 in every other dim,
// aligned to the right as broadcasting reads them), and the output is
// float32. Returns whether the node carries it.
Result<bool> CheckRescale(InferContext& c, const Shape& out, std::size_t axis) {
  const std::int64_t v = c.node().GetInt(kRescaleAttr, 0);
  if (v != 0 && v != 1) return c.Fail("attribute '", kRescaleAttr, "' must be 0 or 1, found ", v);
  if (v == 0) {
    if (c.has_input(4) || c.has_input(5)) {
      return c.Fail("inputs 4 and 5 (a fused scale and bias) need attribute '", kRescaleAttr, "' = 1");
    }
    return false;
  }
  if (!c.has_input(4)) return c.Fail("attribute '", kRescaleAttr, "' = 1 needs the scale input 4");
  KILN_RETURN_IF_ERROR(CheckPerAxis(c, 4, "fused scale", out, axis));
  KILN_RETURN_IF_ERROR(CheckPerAxis(c, 5, "fused bias", out, axis));
  return true;
}

// The activation's type: uint8 / int8, or float32 with kiln.quantize_input.
Status CheckIntegerInput(InferContext& c, const char* what) {
  const std::int64_t q = c.node().GetInt(kQuantizeInputAttr, 0);
  if (q < 0 || q > 2) return c.Fail("attribute '", kQuantizeInputAttr, "' must be 0, 1 or 2, found ", q);
  if (q != 0) return CheckType(c, 0, what, {DType::kFloat32});
  return CheckType(c, 0, what, {DType::kUInt8, DType::kInt8});
}

// kiln.quantize_input and kiln.scale_by_x on a ConvInteger / MatMulInteger
// (fuse-quantize-input), checked after kiln.rescale (`rescaled`): input 0
// float32 (CheckIntegerInput); with 1, input 6 the float32 scale and input
// 2 the uint8 zero point of DynamicQuantizeLinear, one value each; with 2
// (the op computes both itself) neither; scale_by_x only with
// quantize_input. Input 6 is absent but with 1.
Status CheckQuantizeInput(InferContext& c, bool rescaled) {
  const std::int64_t q = c.node().GetInt(kQuantizeInputAttr, 0), sx = c.node().GetInt(kScaleByXAttr, 0);
  if (q < 0 || q > 2) return c.Fail("attribute '", kQuantizeInputAttr, "' must be 0, 1 or 2, found ", q);
  if (sx != 0 && sx != 1) return c.Fail("attribute '", kScaleByXAttr, "' must be 0 or 1, found ", sx);
  if (q != 1 && c.has_input(6)) return c.Fail("input 6 (x_scale) needs attribute '", kQuantizeInputAttr, "' = 1");
  if (q == 0) {
    if (sx == 1) return c.Fail("attribute '", kScaleByXAttr, "' = 1 needs '", kQuantizeInputAttr, "' = 1 or 2");
    return Status::Ok();
  }
  if (!rescaled) return c.Fail("attribute '", kQuantizeInputAttr, "' = ", q, " needs '", kRescaleAttr, "' = 1");
  if (q == 2) {
    if (c.has_input(2)) {
      return c.Fail("input 2 (x_zero_point) with attribute '", kQuantizeInputAttr, "' = 2, which computes it");
    }
    return Status::Ok();
  }
  if (!c.has_input(6)) return c.Fail("attribute '", kQuantizeInputAttr, "' = 1 needs the scale input 6 (x_scale)");
  if (!c.has_input(2)) return c.Fail("attribute '", kQuantizeInputAttr, "' = 1 needs the zero point input 2");
  KILN_RETURN_IF_ERROR(CheckType(c, 6, "x_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckType(c, 2, "x_zero_point", {DType::kUInt8}));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 6, "x_scale", -1));
  return CheckQuantParam(c, 2, "x_zero_point", -1);
}

// kiln.dequantize on a QLinearMatMul (fuse-integer-rescale): its output is
// float32, (q - y_zero_point) * y_scale [+ B], q what the op would return,
// B (input 8, optional) float32, one value or one per column. Returns
// whether the node carries it.
Result<bool> CheckDequantizedOutput(InferContext& c, const Shape& out) {
  const std::int64_t v = c.node().GetInt(kDequantizeAttr, 0);
  if (v != 0 && v != 1) return c.Fail("attribute '", kDequantizeAttr, "' must be 0 or 1, found ", v);
  if (v == 0 && c.has_input(8)) return c.Fail("input 8 (a fused bias) needs attribute '", kDequantizeAttr, "' = 1");
  if (v == 1 && !out.empty()) KILN_RETURN_IF_ERROR(CheckPerAxis(c, 8, "fused bias", out, out.size() - 1));
  return v == 1;
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
  KILN_RETURN_IF_ERROR(CheckIntegerInput(c, "A"));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "B", {DType::kUInt8, DType::kInt8}));
  const bool quantizes = c.node().GetInt(kQuantizeInputAttr, 0) == 1;  // input 2: CheckQuantizeInput
  for (int i : {2, 3}) {
    if (c.has_input(i) && !(i == 2 && quantizes) && c.in_dtype(i) != c.in_dtype(i - 2)) {
      return c.Fail("input ", i, " (zero point) has type ", DTypeName(c.in_dtype(i)), " but input ", i - 2, " has ",
                    DTypeName(c.in_dtype(i - 2)), " (they must match)");
    }
  }
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 2, "a_zero_point", 0, true));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, 3, "b_zero_point", 1, false));
  KILN_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c, 0, 1));
  KILN_ASSIGN_OR_RETURN(const bool rescaled, CheckRescale(c, out, out.empty() ? 0 : out.size() - 1));
  KILN_RETURN_IF_ERROR(CheckQuantizeInput(c, rescaled));
  c.SetOutput(0, rescaled ? DType::kFloat32 : DType::kInt32, out);
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
  KILN_ASSIGN_OR_RETURN(const bool dequantized, CheckDequantizedOutput(c, out));
  c.SetOutput(0, dequantized ? DType::kFloat32 : c.in_dtype(7), out);
  return Status::Ok();
}

Status InferConvInteger(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckIntegerInput(c, "x"));
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "w", {DType::kUInt8, DType::kInt8}));
  const bool quantizes = c.node().GetInt(kQuantizeInputAttr, 0) == 1;  // input 2: CheckQuantizeInput
  for (int i : {2, 3}) {
    if (c.has_input(i) && !(i == 2 && quantizes) && c.in_dtype(i) != c.in_dtype(i - 2)) {
      return c.Fail("input ", i, " (zero point) has type ", DTypeName(c.in_dtype(i)), " but input ", i - 2, " has ",
                    DTypeName(c.in_dtype(i - 2)), " (they must match)");
    }
  }
  // Channels-last (kiln.nhwc, the layout pass; only with kiln.rescale): x
  // and y are NHWC; the fused scale and bias keep their shapes for the NCHW
  // output (one per channel either way).
  const bool nhwc = c.node().GetInt(kNhwcAttr, 0) != 0;
  Shape x = c.in_shape(0);
  if (nhwc) {
    if (x.size() != 4) return c.Fail("channels-last ConvInteger needs a 4-D input");
    if (c.node().GetInt(kRescaleAttr, 0) == 0) return c.Fail("channels-last ConvInteger needs '", kRescaleAttr, "' = 1");
    x = {x[0], x[3], x[1], x[2]};
  }
  if (x.size() < 3) return c.Fail("input x must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(c.in_shape(0)));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "x_zero_point", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 3, "w_zero_point", c.in_shape(1).empty() ? -1 : c.in_shape(1)[0]));
  KILN_ASSIGN_OR_RETURN(Shape out, ConvOutputShape(c, x, 1, -1));
  KILN_ASSIGN_OR_RETURN(const bool rescaled, CheckRescale(c, out, 1));
  KILN_RETURN_IF_ERROR(CheckQuantizeInput(c, rescaled));
  if (nhwc) out = {out[0], out[2], out[3], out[1]};
  // A fused residual (kiln.sum = 1, input 7; fuse-residual, format version
  // 16): float32, exactly the (float32) output's shape, only with the
  // rescale: act(float(sum) * S + B + R).
  const std::int64_t sum = c.node().GetInt(kSumAttr, 0);
  if (sum != 0 && sum != 1) return c.Fail("attribute '", kSumAttr, "' must be 0 or 1, found ", sum);
  if ((sum == 1) != c.has_input(7)) {
    return sum == 1 ? c.Fail("attribute '", kSumAttr, "' = 1 needs the residual input 7")
                    : c.Fail("input 7 (a fused residual) needs attribute '", kSumAttr, "' = 1");
  }
  if (sum == 1) {
    if (!rescaled) return c.Fail("attribute '", kSumAttr, "' = 1 needs '", kRescaleAttr, "' = 1");
    KILN_RETURN_IF_ERROR(CheckType(c, 7, "residual", {DType::kFloat32}));
    if (c.in_shape(7) != out) {
      return c.Fail("residual input 7 has shape ", ShapeToString(c.in_shape(7)), ", expected the output's ",
                    ShapeToString(out));
    }
  }
  c.SetOutput(0, rescaled ? DType::kFloat32 : DType::kInt32, out);
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

// com.microsoft QLinear* ops (ONNX Runtime's contrib ops, as its quantizer
// writes QOperator models). Every scale and zero point is per tensor.
// Checks input `x` (int8/uint8) and its scale / zero point at `scale`,
// `scale` + 1 (optional): the zero point, when given, has x's type.
Status CheckQuantTensor(InferContext& c, int x, int scale) {
  if (!c.has_input(x)) return c.Fail("input ", x, " is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, x, "x", {DType::kUInt8, DType::kInt8}));
  if (!c.has_input(scale)) return c.Fail("input ", scale, " (scale) is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, scale, "scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, scale, "scale", -1));
  if (c.has_input(scale + 1)) {
    if (c.in_dtype(scale + 1) != c.in_dtype(x)) {
      return c.Fail("input ", scale + 1, " (zero point) has type ", DTypeName(c.in_dtype(scale + 1)), " but input ", x,
                    " has ", DTypeName(c.in_dtype(x)), " (they must match)");
    }
    KILN_RETURN_IF_ERROR(CheckQuantParam(c, scale + 1, "zero point", -1));
  }
  return Status::Ok();
}

// The output's scale at `scale` and optional zero point at `scale` + 1, of
// input `x`'s type.
Status CheckOutputParams(InferContext& c, int scale, int x) {
  if (!c.has_input(scale)) return c.Fail("input ", scale, " (output scale) is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, scale, "output scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, scale, "output scale", -1));
  if (c.has_input(scale + 1)) {
    if (c.in_dtype(scale + 1) != c.in_dtype(x)) {
      return c.Fail("input ", scale + 1, " (output zero point) has type ", DTypeName(c.in_dtype(scale + 1)),
                    " but input ", x, " has ", DTypeName(c.in_dtype(x)), " (they must match)");
    }
    KILN_RETURN_IF_ERROR(CheckQuantParam(c, scale + 1, "output zero point", -1));
  }
  return Status::Ok();
}

// QLinearAdd / QLinearMul: A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale,
// C_zp?; A and B broadcast (NumPy).
// Input `i` (named `what`) of input `j`'s (named `other`) type.
Status CheckSameType(InferContext& c, int i, const char* what, int j, const char* other) {
  if (c.in_dtype(i) == c.in_dtype(j)) return Status::Ok();
  return c.Fail("input ", i, " (", what, ") has type ", DTypeName(c.in_dtype(i)), " but input ", j, " (", other,
                ") has ", DTypeName(c.in_dtype(j)), " (they must match)");
}

Status InferQLinearBinary(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 0, 1));
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 3, 4));
  KILN_RETURN_IF_ERROR(CheckSameType(c, 3, "B", 0, "A"));
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 6, 0));
  auto s = BroadcastShapes(c.in_shape(0), c.in_shape(3));
  if (!s.ok()) return c.Fail(s.status().message());
  c.SetOutput(0, c.in_dtype(0), s.value());
  return Status::Ok();
}

// QLinearSigmoid / QLinearLeakyRelu: X, X_scale, X_zp?, Y_scale, Y_zp?.
Status InferQLinearUnary(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 0, 1));
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 3, 0));
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "alpha", ir::Attribute::Kind::kFloat, "a float"));
  if (c.node().op_type() == "QLinearLeakyRelu" && !std::isfinite(c.node().GetFloat("alpha", 0.01f))) {
    return c.Fail("attribute 'alpha' must be finite, found ", c.node().GetFloat("alpha", 0.01f));
  }
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return Status::Ok();
}

// The quantized pools' X, x_scale, x_zp?, y_scale, y_zp? and their
// channels_last (0 or 1): whether it is 1.
Result<bool> CheckQuantPool(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 0, 1));
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 3, 0));
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "channels_last", ir::Attribute::Kind::kInt, "an int"));
  const std::int64_t last = c.node().GetInt("channels_last", 0);
  if (last != 0 && last != 1) return c.Fail("attribute 'channels_last' must be 0 or 1, found ", last);
  return last == 1;
}

// QLinearGlobalAveragePool: X, x_scale, x_zp?, y_scale, y_zp?; attribute
// channels_last (X is [N, spatial..., C]).
Status InferQLinearGlobalAveragePool(InferContext& c) {
  KILN_ASSIGN_OR_RETURN(const bool last, CheckQuantPool(c));
  Shape out = c.in_shape(0);
  if (out.size() < 3) return c.Fail("input X must have rank >= 3, has shape ", ShapeToString(out));
  for (std::size_t d = last ? 1 : 2; d < out.size() - (last ? 1 : 0); ++d) out[d] = 1;
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

// QLinearAveragePool: X, x_scale, x_zp?, y_scale, y_zp?; AveragePool's
// attributes and channels_last (X and Y [N, H, W, C]; 2-D pooling only).
// ONNX Runtime dequantizes, averages in float32 and quantizes; lower-contrib
// rewrites it into DequantizeLinear -> AveragePool -> QuantizeLinear.
Status InferQLinearAveragePool(InferContext& c) {
  KILN_ASSIGN_OR_RETURN(const bool last, CheckQuantPool(c));
  return InferPoolShape(c, last);
}

// com.microsoft QLinearSoftmax: X, X_scale, x_zp?, y_scale, y_zp?;
// attributes opset (required: the opset of the Softmax it replaced; below
// 13 the softmax runs over the flattened dims from `axis` on, from 13 over
// `axis` alone) and axis (default -1 for every opset: ONNX Runtime's schema
// default, which its kernel reads before its own opset-dependent one). The
// CPU kernel computes it as ONNX Runtime's does (kernels/quant.cc).
Status InferQLinearSoftmax(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 0, 1));
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 3, 0));
  if (!c.node().HasAttr("opset")) return c.Fail("attribute 'opset' is required");
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "opset", ir::Attribute::Kind::kInt, "an int"));
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "axis", ir::Attribute::Kind::kInt, "an int"));
  const std::int64_t opset = c.node().GetInt("opset", 13);
  if (opset < 1) return c.Fail("attribute 'opset' must be at least 1, found ", opset);
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input X must have rank >= 1, has shape ", ShapeToString(x));
  KILN_RETURN_IF_ERROR(c.Axis(c.node().GetInt("axis", -1), x.size(), "axis").status());
  c.SetOutput(0, c.in_dtype(0), x);
  return Status::Ok();
}

// com.microsoft QLinearWhere: condition, X, x_scale, x_zp, Y, y_scale,
// y_zp, z_scale, z_zp (all nine required, as ONNX Runtime's kernel
// requires them; X, Y and the zero points of one type). Output: Where
// (condition, X, Y) requantised to (z_scale, z_zp), broadcast over the
// three. ONNX Runtime maps X and Y through 256-entry tables made by
// dequantizing and quantizing (round half to even, saturate);
// lower-contrib rewrites it into DequantizeLinear -> Where ->
// QuantizeLinear, the same arithmetic element by element.
Status InferQLinearWhere(InferContext& c) {
  for (int i = 0; i < 9; ++i) {
    if (!c.has_input(i)) return c.Fail("input ", i, " is missing (QLinearWhere takes nine inputs)");
  }
  if (c.in_dtype(0) != DType::kBool) return c.Fail("input 0 (condition) must be bool, is ", DTypeName(c.in_dtype(0)));
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 1, 2));
  KILN_RETURN_IF_ERROR(CheckQuantTensor(c, 4, 5));
  KILN_RETURN_IF_ERROR(CheckSameType(c, 4, "Y", 1, "X"));
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 7, 1));
  Shape s = c.in_shape(0);
  for (int i : {1, 4}) {
    auto b = BroadcastShapes(s, c.in_shape(i));
    if (!b.ok()) return c.Fail("input ", i, ": ", b.status().message());
    s = b.value();
  }
  c.SetOutput(0, c.in_dtype(1), std::move(s));
  return Status::Ok();
}

// The B side of com.microsoft MatMulIntegerToFloat / DynamicQuantizeMatMul
// (what ONNX Runtime's graph optimizer writes for quantize_dynamic's
// MatMulInteger -> Cast -> Mul [-> Add] chains): B (uint8 / int8) at `b`,
// b_scale (float32, scalar or [N] with a 2-D B) at `bs`, b_zero_point?
// (B's type, b_scale's shape or scalar) at `bz`, bias? (float32 [N]) at
// `bias`. The output: float32 MatMul(A, B) of A at 0. lower-contrib
// rewrites both into MatMulInteger -> Cast -> Mul(a_scale * b_scale)
// [-> Add(bias)], ONNX Runtime's arithmetic (its multiplier is a_scale *
// b_scale in float32, applied to float(acc)).
Status InferIntegerToFloatB(InferContext& c, int b, int bs, int bz, int bias) {
  if (!c.has_input(b)) return c.Fail("input ", b, " (B) is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, b, "B", {DType::kUInt8, DType::kInt8}));
  if (!c.has_input(bs)) return c.Fail("input ", bs, " (b_scale) is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, bs, "b_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckMatMulParam(c, bs, "b_scale", b, false));
  if (c.has_input(bz)) {
    if (c.in_dtype(bz) != c.in_dtype(b)) {
      return c.Fail("input ", bz, " (b_zero_point) has type ", DTypeName(c.in_dtype(bz)), " but input ", b, " (B) has ",
                    DTypeName(c.in_dtype(b)), " (they must match)");
    }
    KILN_RETURN_IF_ERROR(CheckMatMulParam(c, bz, "b_zero_point", b, false));
    if (NumElements(c.in_shape(bz)) != 1 && c.in_shape(bz) != c.in_shape(bs)) {
      return c.Fail("input ", bz, " (b_zero_point) has shape ", ShapeToString(c.in_shape(bz)), " but b_scale has ",
                    ShapeToString(c.in_shape(bs)), " (per column, they must match)");
    }
  }
  KILN_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c, 0, b));
  if (c.has_input(bias)) {
    KILN_RETURN_IF_ERROR(CheckType(c, bias, "bias", {DType::kFloat32}));
    const Shape& s = c.in_shape(bias);
    if (out.empty() || s.size() != 1 || s[0] != out.back()) {
      return c.Fail("input ", bias, " (bias) must have shape [", out.empty() ? 0 : out.back(), "], has ",
                    ShapeToString(s));
    }
  }
  c.SetOutput(0, DType::kFloat32, out);
  return Status::Ok();
}

// com.microsoft MatMulIntegerToFloat: A, B, a_scale, b_scale, a_zero_point?,
// b_zero_point?, bias?: Y = float((A - a_zp)(B - b_zp)) * (a_scale * b_scale)
// [+ bias].
Status InferMatMulIntegerToFloat(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "A", {DType::kUInt8, DType::kInt8}));
  if (!c.has_input(2)) return c.Fail("input 2 (a_scale) is missing");
  KILN_RETURN_IF_ERROR(CheckType(c, 2, "a_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "a_scale", -1));
  if (c.has_input(4)) {
    if (c.in_dtype(4) != c.in_dtype(0)) {
      return c.Fail("input 4 (a_zero_point) has type ", DTypeName(c.in_dtype(4)), " but input 0 (A) has ",
                    DTypeName(c.in_dtype(0)), " (they must match)");
    }
    KILN_RETURN_IF_ERROR(CheckQuantParam(c, 4, "a_zero_point", -1));
  }
  return InferIntegerToFloatB(c, 1, 3, 5, 6);
}

// com.microsoft DynamicQuantizeMatMul: A (float32), B, b_scale,
// b_zero_point?, bias?: A quantized as DynamicQuantizeLinear does (uint8,
// its range widened to 0; ONNX Runtime's kernel computes the same scale,
// zero point and rounding), then MatMulIntegerToFloat.
Status InferDynamicQuantizeMatMul(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "A", {DType::kFloat32}));
  return InferIntegerToFloatB(c, 1, 2, 3, 4);
}

// QLinearConcat: Y_scale, Y_zp, then (X, X_scale, X_zp) per input; `axis`.
Status InferQLinearConcat(InferContext& c) {
  const int n = c.num_inputs();
  if (n < 5 || (n - 2) % 3 != 0) {
    return c.Fail("has ", n, " inputs, expected Y_scale, Y_zero_point and a (X, X_scale, X_zero_point) triple per input");
  }
  if (!c.has_input(2)) return c.Fail("input 2 is missing");
  KILN_RETURN_IF_ERROR(CheckOutputParams(c, 0, 2));
  if (!c.node().HasAttr("axis")) return c.Fail("attribute 'axis' is required");
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "axis", ir::Attribute::Kind::kInt, "an int"));
  const Shape& x0 = c.in_shape(2);
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 0), x0.size(), "axis"));
  Shape out = x0;
  for (int i = 2; i < n; i += 3) {
    KILN_RETURN_IF_ERROR(CheckQuantTensor(c, i, i + 1));
    if (c.in_dtype(i) != c.in_dtype(2)) {
      return c.Fail("input ", i, " has type ", DTypeName(c.in_dtype(i)), " but input 2 has ", DTypeName(c.in_dtype(2)),
                    " (they must match)");
    }
    if (i != 2) KILN_RETURN_IF_ERROR(MergeConcatShape(c, i, 2, x0, c.in_shape(i), axis, &out));
  }
  c.SetOutput(0, c.in_dtype(2), out);
  return Status::Ok();
}

// com.microsoft QGemm (ONNX Runtime's quantizer writes it for a Gemm in a
// QOperator model): A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?
// (int32), y_scale?, y_zero_point?; attributes alpha, transA, transB. With
// A' and B' the (transposed) operands, acc = C + (A' - a_zp)(B' - b_zp[n])
// in int32 and s[n] = alpha * a_scale * b_scale[n] (in that order, float32,
// then / y_scale when quantized), Y = float(acc) * s[n], or with y_scale and
// y_zero_point saturate(round_even(float(acc) * s[n]) + y_zp): ONNX
// Runtime's CPU kernel. lower-contrib rewrites it into MatMulInteger and
// elementwise ops after inference; this checks what ONNX Runtime's kernel
// checks (scales, zero points and C's shapes), so that the rewrite's
// broadcasting cannot accept more.
Status InferQGemm(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckAttrKind(c, "alpha", ir::Attribute::Kind::kFloat, "a float"));
  if (!std::isfinite(c.node().GetFloat("alpha", 1.f))) return c.Fail("attribute 'alpha' must be finite");
  for (const char* t : {"transA", "transB"}) {
    KILN_RETURN_IF_ERROR(CheckAttrKind(c, t, ir::Attribute::Kind::kInt, "an int"));
    const std::int64_t v = c.node().GetInt(t, 0);
    if (v != 0 && v != 1) return c.Fail("attribute '", t, "' must be 0 or 1, is ", v);
  }
  for (int i : {0, 1, 3, 4}) {
    if (!c.has_input(i)) return c.Fail("input ", i, " is missing");
  }
  KILN_RETURN_IF_ERROR(CheckType(c, 0, "A", {DType::kUInt8, DType::kInt8}));
  KILN_RETURN_IF_ERROR(CheckType(c, 3, "B", {DType::kUInt8, DType::kInt8}));
  KILN_ASSIGN_OR_RETURN(const Shape out, GemmOutputShape(c, 0, 3));
  const std::int64_t m = out[0], n = out[1];
  for (auto [zp, x] : {std::pair{2, 0}, std::pair{5, 3}}) {
    if (c.has_input(zp) && c.in_dtype(zp) != c.in_dtype(x)) {
      return c.Fail("input ", zp, " (zero point) has type ", DTypeName(c.in_dtype(zp)), " but input ", x, " has ",
                    DTypeName(c.in_dtype(x)), " (they must match)");
    }
  }
  KILN_RETURN_IF_ERROR(CheckType(c, 1, "a_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckType(c, 4, "b_scale", {DType::kFloat32}));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 1, "a_scale", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 2, "a_zero_point", -1));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 4, "b_scale", n));
  KILN_RETURN_IF_ERROR(CheckQuantParam(c, 5, "b_zero_point", n));
  if (c.has_input(5) && NumElements(c.in_shape(5)) != NumElements(c.in_shape(4))) {
    return c.Fail("input 5 (b_zero_point) has shape ", ShapeToString(c.in_shape(5)), " but input 4 (b_scale) has ",
                  ShapeToString(c.in_shape(4)), " (they must match)");
  }
  if (c.has_input(6)) {
    KILN_RETURN_IF_ERROR(CheckType(c, 6, "C", {DType::kInt32}));
    auto s = BroadcastShapes(c.in_shape(6), Shape{m, n});
    if (c.in_shape(6).size() > 2 || !s.ok() || s.value() != Shape{m, n}) {
      return c.Fail("input 6 (C) of shape ", ShapeToString(c.in_shape(6)), " does not broadcast to [", m, ",", n, "]");
    }
  }
  if (c.has_input(7) != c.has_input(8)) {
    return c.Fail("y_scale (input 7) and y_zero_point (input 8) must be given together (a quantized output) or not "
                  "at all (float32)");
  }
  if (c.has_input(7)) {
    KILN_RETURN_IF_ERROR(CheckType(c, 7, "y_scale", {DType::kFloat32}));
    KILN_RETURN_IF_ERROR(CheckType(c, 8, "y_zero_point", {DType::kUInt8, DType::kInt8}));
    KILN_RETURN_IF_ERROR(CheckQuantParam(c, 7, "y_scale", -1));
    KILN_RETURN_IF_ERROR(CheckQuantParam(c, 8, "y_zero_point", -1));
  }
  c.SetOutput(0, c.has_input(8) ? c.in_dtype(8) : DType::kFloat32, {m, n});
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
  // Inputs 4 and 5: kiln.rescale's scale and bias (CheckRescale); 6:
  // kiln.quantize_input's x_scale (CheckQuantizeInput).
  r.Register(Def("MatMulInteger", {10}, 2, 7, {}, InferMatMulInteger));
  r.Register(Def("QLinearMatMul", {10}, 8, 9, {}, InferQLinearMatMul));  // input 8: kiln.dequantize's bias
  r.Register(Def("ConvInteger", {10}, 2, 8, conv_attrs, InferConvInteger));  // 7: kiln.sum's residual
  r.Register(Def("QLinearConv", {10}, 8, 9, conv_attrs, InferQLinearConv));
  // ONNX Runtime's contrib forms (domain com.microsoft, version 1). Their
  // zero points are optional inputs between required ones: inference checks
  // which inputs are present.
  auto ms = [&r](OpDef d) {
    d.domain = kMicrosoftDomain;
    r.Register(std::move(d));
  };
  ms(Def("QuantizeLinear", {1}, 2, 3, {"axis"}, InferQuantize));
  ms(Def("DequantizeLinear", {1}, 2, 3, {"axis"}, InferDequantize));
  ms(Def("QLinearAdd", {1}, 1, 8, {}, InferQLinearBinary));
  ms(Def("QLinearMul", {1}, 1, 8, {}, InferQLinearBinary));
  ms(Def("QLinearSigmoid", {1}, 1, 5, {}, InferQLinearUnary));
  ms(Def("QLinearLeakyRelu", {1}, 1, 5, {"alpha"}, InferQLinearUnary));
  ms(Def("QLinearGlobalAveragePool", {1}, 1, 5, {"channels_last"}, InferQLinearGlobalAveragePool));
  ms(Def("QLinearConcat", {1}, 1, 2 + 3 * (1 << 18), {"axis"}, InferQLinearConcat));
  ms(Def("QGemm", {1}, 6, 9, {"alpha", "transA", "transB"}, InferQGemm));  // lower-contrib rewrites it
  ms(Def("QLinearAveragePool", {1}, 1, 5,
         {"auto_pad", "ceil_mode", "channels_last", "count_include_pad", "kernel_shape", "pads", "strides"},
         InferQLinearAveragePool));  // lower-contrib rewrites it
  ms(Def("QLinearSoftmax", {1}, 4, 5, {"axis", "opset"}, InferQLinearSoftmax));
  ms(Def("QLinearWhere", {1}, 9, 9, {}, InferQLinearWhere));  // lower-contrib rewrites it
  ms(Def("MatMulIntegerToFloat", {1}, 4, 7, {}, InferMatMulIntegerToFloat));  // lower-contrib rewrites it
  ms(Def("DynamicQuantizeMatMul", {1}, 3, 5, {}, InferDynamicQuantizeMatMul));  // lower-contrib rewrites it
}

}  // namespace kiln::ops
