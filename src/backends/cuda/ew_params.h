// Host side of the CUDA elementwise kernels, without CUDA: which ONNX ops
// they run and the parameters a node gives them (tested in every build).
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/ew_common.h"
#include "common/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

enum class EwKind { kNone, kUnary, kBinary, kCopy };

// What runs `op_type` (domain "" or "kiln") on inputs of `dtypes`: float32
// unary and two-input binary ops, and byte copies of any type.
EwKind ElementwiseKind(const std::string& op_type, const std::string& domain, const std::vector<DType>& dtypes);

// The parameters for `node` with static `out` and input shapes: the op
// code and its attributes, and for binary ops the broadcast strides
// (numpy rules; at most KILN_EW_MAX_RANK output dims). Errors name the node.
// The broadcast part alone: dims, rank, contiguous and a's and b's strides
// of `out` (numpy rules); p's other fields are left alone.
Status FillBroadcast(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, KilnEwParams* p);

Result<KilnEwParams> UnaryParams(const ir::Node& node, const Shape& out);
Result<KilnEwParams> BinaryParams(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b);

}  // namespace kiln::cuda
