// ConvTranspose.
#include "ops/conv_transpose.h"

#include "common/checked.h"
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"

namespace kiln::ops {

Result<DeconvGeometry> ComputeDeconv(const ir::Node& node, const Shape& in, const std::vector<std::int64_t>& kernel) {
  const std::size_t n = in.size();
  auto fail = [&](const auto&... args) { return Error(StatusCode::kInvalidArgument, node.Describe(), ": ", args...); };
  DeconvGeometry g;
  g.strides = node.GetInts("strides", std::vector<std::int64_t>(n, 1));
  g.dilations = node.GetInts("dilations", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> pads = node.GetInts("pads", std::vector<std::int64_t>(2 * n, 0));
  std::vector<std::int64_t> opad = node.GetInts("output_padding", std::vector<std::int64_t>(n, 0));
  std::vector<std::int64_t> oshape = node.GetInts("output_shape");
  if (oshape.size() == n + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);  // full N, C, spatial form
  if (g.strides.size() != n) return fail("attribute 'strides' has ", g.strides.size(), " values, expected ", n);
  if (g.dilations.size() != n) return fail("attribute 'dilations' has ", g.dilations.size(), " values, expected ", n);
  if (pads.size() != 2 * n) return fail("attribute 'pads' has ", pads.size(), " values, expected ", 2 * n);
  if (opad.size() != n) return fail("attribute 'output_padding' has ", opad.size(), " values, expected ", n);
  if (!oshape.empty() && oshape.size() != n) return fail("attribute 'output_shape' has ", oshape.size(), " values, expected ", n);
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    return fail("attribute 'auto_pad' has invalid value '", auto_pad, "' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)");
  }
  g.pads_begin.assign(n, 0);
  g.pads_end.assign(n, 0);
  g.out.assign(n, -1);
  // Every value within its range and at most kMaxTensorBytes, every product
  // checked: with input dims at most kMaxTensorBytes nothing below overflows.
  auto range = [&](const char* attr, std::int64_t v, std::int64_t lo) -> Status {
    if (v < lo || v > kMaxTensorBytes) {
      return fail("attribute '", attr, "' value ", v, " is out of range (expected ", lo, "..", kMaxTensorBytes, ")");
    }
    return Status::Ok();
  };
  auto mul = [&](std::int64_t a, std::int64_t b, std::size_t i, std::int64_t* r) -> Status {
    if (!CheckedMul(a, b, r) || *r > kMaxTensorBytes) {
      return fail("spatial dim ", i, ": ", a, " x ", b, " is larger than ", kMaxTensorBytes);
    }
    return Status::Ok();
  };
  for (std::size_t i = 0; i < n; ++i) {
    KILN_RETURN_IF_ERROR(range("strides", g.strides[i], 1));
    KILN_RETURN_IF_ERROR(range("dilations", g.dilations[i], 1));
    KILN_RETURN_IF_ERROR(range("kernel_shape", kernel[i], 1));
    KILN_RETURN_IF_ERROR(range("pads", pads[i], 0));
    KILN_RETURN_IF_ERROR(range("pads", pads[i + n], 0));
    KILN_RETURN_IF_ERROR(range("output_padding", opad[i], 0));
    if (!oshape.empty()) KILN_RETURN_IF_ERROR(range("output_shape", oshape[i], 0));
    if (in[i] < 0) continue;
    // Output without padding: every position some input element reaches.
    std::int64_t sx = 0, dk = 0;
    KILN_RETURN_IF_ERROR(mul(g.strides[i], in[i] > 0 ? in[i] - 1 : 0, i, &sx));
    if (in[i] == 0) sx = -g.strides[i];
    KILN_RETURN_IF_ERROR(mul(g.dilations[i], kernel[i] - 1, i, &dk));
    const std::int64_t base = sx + dk + 1;
    std::int64_t pb = pads[i], pe = pads[i + n];
    if (auto_pad == "VALID") pb = pe = 0;
    if (!oshape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      std::int64_t target = oshape.empty() ? 0 : oshape[i];
      if (oshape.empty()) KILN_RETURN_IF_ERROR(mul(in[i], g.strides[i], i, &target));
      const std::int64_t total = base + opad[i] - target;
      const std::int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);  // floor(total / 2)
      pb = auto_pad == "SAME_UPPER" ? half : total - half;
      pe = total - pb;
      if (pb < 0) pe += pb, pb = 0;  // more output than the kernel covers: the extra goes at the end
    }
    g.pads_begin[i] = pb;
    g.pads_end[i] = pe - opad[i];
    g.out[i] = base - pb - g.pads_end[i];
    if (g.out[i] < 1) return fail("output spatial dim ", i, " would be ", g.out[i], " (check 'pads' / 'output_shape')");
  }
  return g;
}

namespace {

Status InferConvTranspose(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  // Channels-last (kiln.nhwc, the layout pass): x and y are NHWC.
  const bool nhwc = c.node().GetInt(kNhwcAttr, 0) != 0;
  Shape x = c.in_shape(0);
  if (nhwc) {
    if (x.size() != 4) return c.Fail("channels-last ConvTranspose needs a 4-D input");
    x = {x[0], x[3], x[1], x[2]};
  }
  const Shape& w = c.in_shape(1);
  if (x.size() < 3) return c.Fail("input X must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(x));
  if (w.size() != x.size()) return c.Fail("weight W has rank ", w.size(), ", expected ", x.size(), " like X");
  const std::int64_t group = c.node().GetInt("group", 1);
  if (group < 1) return c.Fail("attribute 'group' must be >= 1, found ", group);
  if (x[1] >= 0 && w[0] >= 0 && x[1] != w[0]) return c.Fail("input channels ", x[1], " != W dim 0 (", w[0], ")");
  if (w[0] >= 0 && w[0] % group != 0) return c.Fail("input channels ", w[0], " not divisible by attribute 'group' = ", group);
  std::vector<std::int64_t> kernel(w.begin() + 2, w.end());
  if (auto ks = c.node().GetInts("kernel_shape"); !ks.empty() && ks != kernel) {
    return c.Fail("attribute 'kernel_shape' ", ShapeToString(ks), " does not match W's spatial dims ", ShapeToString(kernel));
  }
  KILN_RETURN_IF_ERROR(CheckAttrRange(c, "group", group, 1));
  std::int64_t oc = -1;
  if (w[1] >= 0) {
    KILN_ASSIGN_OR_RETURN(oc, MulDims(c, w[1], group, "output channels W dim 1 x attribute 'group'"));
  }
  if (c.has_input(2) && (c.in_shape(2).size() != 1 || (oc >= 0 && c.in_shape(2)[0] != oc))) {
    return c.Fail("bias B must have shape [", oc, "], has ", ShapeToString(c.in_shape(2)));
  }
  KILN_ASSIGN_OR_RETURN(DeconvGeometry g, ComputeDeconv(c.node(), Shape(x.begin() + 2, x.end()), kernel));
  Shape out = {x[0], oc};
  out.insert(out.end(), g.out.begin(), g.out.end());
  if (nhwc) out = {out[0], out[2], out[3], out[1]};
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

}  // namespace

void RegisterConvTransposeOps(OpRegistry& r) {
  OpDef d;
  d.type = "ConvTranspose";
  d.versions = {1, 11};
  d.min_inputs = 2;
  d.max_inputs = 3;
  d.attributes = {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"};
  d.input_types = {DType::kFloat32};
  d.infer = InferConvTranspose;
  r.Register(d);
}

}  // namespace kiln::ops
