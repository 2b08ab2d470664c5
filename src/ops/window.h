// Sliding-window geometry shared by Conv, ConvTranspose and the pooling ops:
// kernel, strides, dilations and pads (explicit or auto_pad) -> output dims.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ops {

struct Window {
  std::vector<std::int64_t> kernel, strides, dilations, pads_begin, pads_end, out;
  std::vector<std::int64_t> ext;  // dilated kernel extent per spatial dim
};

// `in` = spatial input dims, `kernel` = spatial kernel dims. Reads the
// node's strides, dilations, pads, auto_pad (and ceil_mode when
// `allow_ceil`). Errors name the node and attribute. Every kernel, stride,
// dilation, pad and the dilated extent must be at most kMaxTensorBytes (with
// input dims at most that too, the arithmetic cannot overflow).
Result<Window> ComputeWindow(const ir::Node& node, const Shape& in,
                             const std::vector<std::int64_t>& kernel, bool allow_ceil);

}  // namespace kiln::ops
