// ConvTranspose geometry, shared by its definition and its CPU kernel.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::ops {

struct DeconvGeometry {
  // Per spatial dim. pads_end may be below zero when output_padding or
  // output_shape asks for more output than the kernel covers (those
  // positions get only the bias); `out` is the output size.
  std::vector<std::int64_t> strides, dilations, pads_begin, pads_end, out;
};

// `in` = spatial input dims (known), `kernel` = spatial kernel dims. Reads
// strides, dilations, pads, auto_pad, output_padding and output_shape; errors
// name the node and attribute.
Result<DeconvGeometry> ComputeDeconv(const ir::Node& node, const Shape& in, const std::vector<std::int64_t>& kernel);

}  // namespace kiln::ops
