#include "backends/cuda/conv_params.h"

#include <algorithm>
#include <climits>

#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::cuda {

Result<ConvPlan> ConvPlanFor(const ir::Node& node, const Shape& x, const Shape& w, bool has_bias, const Shape& b,
                             const Shape& y) {
  auto refuse = [&](const std::string& why) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": CUDA convolution: ", why);
  };
  if (node.GetInt(ops::kNhwcAttr, 0) != 0) return refuse("channels-last layout");
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return refuse("only 2-D convolutions (4-D X, W and Y)");
  for (const Shape* s : {&x, &w, &y}) {
    std::int64_t n = 1;
    for (std::int64_t d : *s) {
      if (d < 0 || d > INT_MAX) return refuse("dims must be known and within int");
      n = std::min<std::int64_t>(n * d, std::int64_t{1} << 40);
    }
    if (n > INT_MAX) return refuse("a tensor of 2^31 elements or more (cuDNN's 4-D descriptors)");
  }
  const std::int64_t group = node.GetInt("group", 1);
  if (group < 1 || x[1] % group != 0 || x[1] / group != w[1] || w[0] % group != 0) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": X ", ShapeToString(x), " and W ", ShapeToString(w),
                 " do not fit group ", group);
  }
  if (has_bias && (b.size() != 1 || b[0] != w[0])) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": bias ", ShapeToString(b), " is not [", w[0], "]");
  }
  KILN_ASSIGN_OR_RETURN(ops::Window win, ops::ComputeWindow(node, {x[2], x[3]}, {w[2], w[3]}, false));
  for (int d = 0; d < 2; ++d) {
    if (win.pads_begin[d] != win.pads_end[d]) {
      return refuse("asymmetric padding (" + std::to_string(win.pads_begin[d]) + " before, " +
                    std::to_string(win.pads_end[d]) + " after)");
    }
    for (std::int64_t v : {win.pads_begin[d], win.strides[d], win.dilations[d]}) {
      if (v > INT_MAX) return refuse("a stride, dilation or pad beyond int");
    }
  }
  if (y[0] != x[0] || y[1] != w[0] || y[2] != win.out[0] || y[3] != win.out[1]) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": output ", ShapeToString(y), " is not [", x[0], ",",
                 w[0], ",", win.out[0], ",", win.out[1], "]");
  }
  ConvPlan p;
  p.n = static_cast<int>(x[0]);
  p.c = static_cast<int>(x[1]);
  p.h = static_cast<int>(x[2]);
  p.w = static_cast<int>(x[3]);
  p.k = static_cast<int>(w[0]);
  p.kh = static_cast<int>(w[2]);
  p.kw = static_cast<int>(w[3]);
  p.group = static_cast<int>(group);
  p.pad_h = static_cast<int>(win.pads_begin[0]);
  p.pad_w = static_cast<int>(win.pads_begin[1]);
  p.stride_h = static_cast<int>(win.strides[0]);
  p.stride_w = static_cast<int>(win.strides[1]);
  p.dil_h = static_cast<int>(win.dilations[0]);
  p.dil_w = static_cast<int>(win.dilations[1]);
  p.out_h = static_cast<int>(y[2]);
  p.out_w = static_cast<int>(y[3]);
  p.has_bias = has_bias;
  return p;
}

}  // namespace kiln::cuda
