// Host side of the CUDA elementwise kernels, without CUDA: which ONNX ops
// they run and the parameters a node gives them (tested in every build).
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/ew_common.h"
#include "common/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

enum class EwKind { kNone, kUnary, kBinary, kCopy, kSoftmax, kLayerNorm, kTranspose, kWhere, kCompare, kGather, kPool, kCast };

// What runs `op_type` (domain "" or "kiln") on inputs of `dtypes`: float32
// unary and two-input binary ops, Softmax and LayerNormalization; copies
// and Transpose of any type.
EwKind ElementwiseKind(const std::string& op_type, const std::string& domain, const std::vector<DType>& dtypes);

// The parameters for `node` with static `out` and input shapes: the op
// code and its attributes, and for binary ops the broadcast strides
// (numpy rules; at most KILN_EW_MAX_RANK output dims). Errors name the node.
// The broadcast part alone: dims, rank, contiguous and a's and b's strides
// of `out` (numpy rules); p's other fields are left alone.
Status FillBroadcast(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, KilnEwParams* p);
// Three inputs: a -> sa, b -> sb, c -> sc.
Status FillBroadcast3(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, const Shape& c,
                      KilnEwParams* p);

Result<KilnEwParams> UnaryParams(const ir::Node& node, const Shape& out);
Result<KilnEwParams> BinaryParams(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b);
// Softmax (axis as the node's opset defines it: from 13 one axis, before
// that the 2-D coercion at `axis`).
Result<KilnRowParams> SoftmaxParams(const ir::Node& node, const Shape& x);
// LayerNormalization with Y only (Mean / InvStdDev outputs refused); scale
// and B hold the normalised shape's elements or one value.
Result<KilnRowParams> LayerNormParams(const ir::Node& node, const Shape& x, const Shape& scale, bool has_bias,
                                      const Shape& bias, int num_outputs);
Result<KilnTransposeParams> TransposeParams(const ir::Node& node, const Shape& in, DType dtype);
// Where(cond, x, y): three-way broadcast; op = the element size.
Result<KilnEwParams> WhereParams(const ir::Node& node, const Shape& out, const Shape& cond, const Shape& x,
                                 const Shape& y, DType dtype);
// Less / LessOrEqual / Greater / GreaterOrEqual / Equal.
Result<KilnEwParams> CompareParams(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b);
// MaxPool (Y only) / AveragePool / GlobalAveragePool / GlobalMaxPool on
// float32 NCHW-style tensors with 1 to 3 spatial dims.
Result<KilnPoolParams> PoolParams(const ir::Node& node, const Shape& x, const Shape& y, int num_outputs);
// Cast between float32, int32, int64, bool, uint8 and int8 (`to` read from
// the node; other types refused, so they stay on the CPU). The element
// count in p.n; *types = from * 16 + to (KilnCastType).
Result<KilnEwParams> CastParams(const ir::Node& node, const Shape& x, DType from, int* types);
Result<KilnGatherParams> GatherParams(const ir::Node& node, const Shape& data, DType dtype, const Shape& indices,
                                      DType index_type);

}  // namespace kiln::cuda
