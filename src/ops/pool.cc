// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool. Window geometry
// (pads, auto_pad, ceil_mode, dilations) comes from ops::ComputeWindow, as
// for Conv.
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::ops {
namespace {

Status InferPool(InferContext& c) {
  // Channels-last nodes (set by the layout pass) carry physical NHWC shapes.
  return InferPoolShape(c, c.node().GetInt(kNhwcAttr, 0) != 0);
}

void Pool(OpRegistry& r, const char* type, std::vector<int> versions, std::set<std::string> attrs,
          std::set<DType> types, int max_outputs = 1) {
  OpDef d;
  d.type = type;
  d.versions = std::move(versions);
  d.max_outputs = max_outputs;
  d.attributes = std::move(attrs);
  d.input_types = std::move(types);
  d.infer = InferPool;
  r.Register(d);
}

}  // namespace

Status InferPoolShape(InferContext& c, bool nhwc) {
  Shape x = c.in_shape(0);
  if (nhwc) {
    if (x.size() != 4) return c.Fail("channels-last pooling needs a 4-D input, has shape ", ShapeToString(x));
    x = {x[0], x[3], x[1], x[2]};
  }
  if (x.size() < 3) return c.Fail("input X must have rank >= 3 (N, C, spatial...), has shape ", ShapeToString(x));
  const Shape spatial(x.begin() + 2, x.end());
  Shape out = {x[0], x[1]};
  if (c.node().op_type().rfind("Global", 0) == 0) {
    out.resize(x.size(), 1);
  } else {
    if (!c.node().HasAttr("kernel_shape")) return c.Fail("attribute 'kernel_shape' is required");
    const std::vector<std::int64_t> kernel = c.node().GetInts("kernel_shape");
    if (kernel.size() != spatial.size()) {
      return c.Fail("attribute 'kernel_shape' has ", kernel.size(), " values, the input has ", spatial.size(), " spatial dims");
    }
    const std::int64_t order = c.node().GetInt("storage_order", 0);
    if (order != 0 && order != 1) return c.Fail("attribute 'storage_order' must be 0 or 1, found ", order);
    if (c.num_outputs() > 1 && c.node().since_version() < 8) return c.Fail("output 1 (Indices) needs MaxPool-8 or later");
    KILN_ASSIGN_OR_RETURN(Window win, ComputeWindow(c.node(), spatial, kernel, true));
    // A pad as large as the (dilated) kernel extent makes windows that see
    // only padding (MaxPool would output the lowest float, AveragePool divide
    // by zero): the ONNX spec and ONNX Runtime refuse such pads.
    const std::vector<std::int64_t> pads = c.node().GetInts("pads");
    const std::size_t n = spatial.size();
    const bool explicit_pads = c.node().GetString("auto_pad", "NOTSET") == "NOTSET";
    for (std::size_t i = 0; explicit_pads && i < n && pads.size() == 2 * n; ++i) {
      for (std::size_t side = 0; side < 2; ++side) {
        const std::int64_t p = pads[i + side * n];
        if (p >= win.ext[i]) {
          return c.Fail("attribute 'pads' value ", p, " (", side ? "end" : "begin", " of spatial dim ", i,
                        ") must be smaller than the kernel extent ", win.ext[i]);
        }
      }
    }
    out.insert(out.end(), win.out.begin(), win.out.end());
  }
  if (nhwc) out = {out[0], out[2], out[3], out[1]};
  c.SetOutput(0, c.in_dtype(0), out);
  if (c.num_outputs() > 1) c.SetOutput(1, DType::kInt64, out);
  return Status::Ok();
}

void RegisterPoolOps(OpRegistry& r) {
  Pool(r, "MaxPool", {1, 8, 10, 11, 12},
       {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
       {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8}, 2);
  Pool(r, "AveragePool", {1, 7, 10, 11},
       {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}, FloatTypes());
  Pool(r, "GlobalAveragePool", {1}, {}, FloatTypes());
  Pool(r, "GlobalMaxPool", {1}, {}, FloatTypes());
}

}  // namespace kiln::ops
