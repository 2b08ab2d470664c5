// The FileConstant node's attributes, encoded and decoded in one place.
//
// FileConstant (domain "kiln", no inputs, one output). Attributes:
//   location    string  weight_<sha256> or <model>_weight_combined, relative
//                       to the weight directory (compiler-made weights), or
//   file_id     string  1 to 256 printable ASCII bytes: a graph-API weight
//                       the caller resolves at load (LoadOptions::weight_files)
//                       -- exactly one of the two (format version 5);
//   offset, length      bytes, >= 0; length == dtype size x numel;
//   dtype               ONNX element type number; shape  ints;
//   kiln.sha256         optional, 64 lowercase hex digits.
#pragma once

#include "common/status.h"
#include "ir/graph.h"
#include "common/weight_ref.h"

namespace kiln::ops {

inline constexpr std::size_t kMaxFileIdBytes = 256;

bool IsFileConstant(const ir::Node& n);
// Sets the attributes from `r` (location or file_id, offset, length, dtype,
// shape, sha256 when not empty). r.node is not used.
void EncodeFileConstant(ir::Node& n, const weights::WeightRef& r);
// Reads and checks every attribute (types, ranges, exactly one of
// location/file_id, location a weight file name, length against dtype x
// shape with the checked helper). Errors name the node and attribute.
Result<weights::WeightRef> DecodeFileConstant(const ir::Node& n);
// Whether `id` is a valid file_id (non-empty, <= kMaxFileIdBytes, printable ASCII).
bool IsValidFileId(const std::string& id);

}  // namespace kiln::ops
