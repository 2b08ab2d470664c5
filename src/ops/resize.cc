// Resize (10, 11, 13) and Upsample (1, 7, 9, 10). Upsample and Resize-10
// take (X, scales) and behave as Resize with coordinate_transformation_mode
// asymmetric and nearest_mode floor; Upsample's attribute forms are turned
// into that at import.
#include <cmath>

#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

bool OneOf(const std::string& v, std::initializer_list<const char*> set) {
  for (const char* s : set) {
    if (v == s) return true;
  }
  return false;
}

Status InferResize(InferContext& c) {
  const ir::Node& n = c.node();
  const bool legacy = n.op_type() == "Upsample" || n.since_version() < 11;
  const Shape& x = c.in_shape(0);
  const std::size_t r = x.size();
  if (r == 0) return c.Fail("input X must have rank >= 1");
  const std::string mode = n.GetString("mode", "nearest");
  if (!(OneOf(mode, {"nearest", "linear"}) || (!legacy && mode == "cubic") || (n.op_type() == "Upsample" && mode == "bilinear"))) {
    return c.Fail("attribute 'mode' has invalid value '", mode, "' (expected nearest, linear", legacy ? "" : " or cubic", ")");
  }
  if (!legacy) {
    const std::string ct = n.GetString("coordinate_transformation_mode", "half_pixel");
    if (!OneOf(ct, {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"})) {
      return c.Fail("attribute 'coordinate_transformation_mode' has invalid value '", ct, "'");
    }
    const std::string nm = n.GetString("nearest_mode", "round_prefer_floor");
    if (!OneOf(nm, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})) {
      return c.Fail("attribute 'nearest_mode' has invalid value '", nm, "'");
    }
  }
  if (mode != "nearest" && c.in_dtype(0) != DType::kFloat32 && c.in_dtype(0) != DType::kFloat64) {
    return c.Fail("attribute 'mode' = '", mode, "' needs a float32/float64 input, X is ", DTypeName(c.in_dtype(0)));
  }
  const int si = legacy ? 1 : 2, zi = legacy ? -1 : 3;
  const bool has_scales = c.num_inputs() > si && c.has_input(si) && NumElements(c.in_shape(si)) != 0;
  const bool has_sizes = zi > 0 && c.num_inputs() > zi && c.has_input(zi);
  if (has_scales == has_sizes) return c.Fail("exactly one of 'scales' and 'sizes' must be given");
  if (has_scales && (c.in_dtype(si) != DType::kFloat32 || c.in_shape(si).size() != 1)) {
    return c.Fail("input ", si, " (scales) must be a 1-D float tensor, is ", DTypeName(c.in_dtype(si)), " ", ShapeToString(c.in_shape(si)));
  }
  if (has_sizes && (c.in_dtype(zi) != DType::kInt64 || c.in_shape(zi).size() != 1)) {
    return c.Fail("input 3 (sizes) must be a 1-D int64 tensor, is ", DTypeName(c.in_dtype(zi)), " ", ShapeToString(c.in_shape(zi)));
  }
  if (!legacy && c.has_input(1) && NumElements(c.in_shape(1)) > 0 && NumElements(c.in_shape(1)) != static_cast<std::int64_t>(2 * r)) {
    return c.Fail("input 1 (roi) has shape ", ShapeToString(c.in_shape(1)), ", expected ", 2 * r, " values");
  }
  Shape out(r, -1);
  if (const HostTensor* t = c.in_const(has_scales ? si : zi)) {
    if (t->numel() != static_cast<std::int64_t>(r)) {
      return c.Fail("input ", has_scales ? si : zi, " (", has_scales ? "scales" : "sizes", ") has ", t->numel(), " values, X has rank ", r);
    }
    for (std::size_t d = 0; d < r; ++d) {
      if (has_scales) {
        const double s = t->data_as<float>()[d];
        if (!(s > 0)) return c.Fail("'scales' value ", s, " (dim ", d, ") must be > 0");
        if (x[d] >= 0) {
          KILN_ASSIGN_OR_RETURN(out[d], DimFromDouble(c, std::floor(s * static_cast<double>(x[d])),
                                                      StrCat("output dim ", d, " = floor(scale x input dim)")));
        }
      } else {
        out[d] = t->data_as<std::int64_t>()[d];
        if (out[d] < 0) return c.Fail("'sizes' value ", out[d], " (dim ", d, ") is negative");
      }
    }
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

// Upsample-1 (height_scale, width_scale on NCHW) and Upsample-7 ('scales'
// attribute) -> a constant scales input.
Status NormalizeUpsample(ir::Node& n, ir::Graph& g) {
  if (n.since_version() >= 9) return Status::Ok();
  std::vector<float> scales = n.GetFloats("scales");
  if (n.since_version() == 1) {
    scales = {1.f, 1.f, n.GetFloat("height_scale", 1.f), n.GetFloat("width_scale", 1.f)};
    n.attrs().erase("height_scale");
    n.attrs().erase("width_scale");
  } else if (!n.HasAttr("scales")) {
    return Error(StatusCode::kInvalidArgument, n.Describe(), ": attribute 'scales' is required");
  }
  auto t = std::make_shared<HostTensor>(DType::kFloat32, Shape{static_cast<std::int64_t>(scales.size())});
  std::copy(scales.begin(), scales.end(), t->mutable_data_as<float>());
  n.SetInput(1, g.AddConstant(n.name() + "_scales", t));
  n.attrs().erase("scales");
  return Status::Ok();
}

}  // namespace

void RegisterResizeOps(OpRegistry& r) {
  OpDef d;
  d.type = "Resize";
  d.versions = {10, 11, 13};
  d.min_inputs = 1;
  d.max_inputs = 4;
  d.attributes = {"mode", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value", "nearest_mode"};
  d.infer = InferResize;
  r.Register(d);
  OpDef u;
  u.type = "Upsample";
  u.versions = {1, 7, 9, 10};
  u.min_inputs = 1;
  u.max_inputs = 2;
  u.attributes = {"mode", "scales", "height_scale", "width_scale"};
  u.normalize = NormalizeUpsample;
  u.infer = InferResize;
  r.Register(u);
}

}  // namespace kiln::ops
