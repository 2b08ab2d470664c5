// Host side of the CUDA convolution (cuDNN), without CUDA: which Conv nodes
// it takes and their cuDNN geometry (tested in every build).
#pragma once

#include "common/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

struct ConvPlan {
  int n = 0, c = 0, h = 0, w = 0;      // X, NCHW
  int k = 0, kh = 0, kw = 0;           // W: [K, C / group, kh, kw]
  int group = 1;
  int pad_h = 0, pad_w = 0;            // symmetric (cuDNN's only kind)
  int stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int out_h = 0, out_w = 0;
  bool has_bias = false;
};

// A float32 2-D NCHW Conv (not channels-last, no fused activation) whose
// padding is the same at both ends of each spatial dim (explicit pads or
// auto_pad), with every dim within int. Errors name the node and what is
// not supported.
Result<ConvPlan> ConvPlanFor(const ir::Node& node, const Shape& x, const Shape& w, bool has_bias, const Shape& b,
                             const Shape& y);

}  // namespace kiln::cuda
