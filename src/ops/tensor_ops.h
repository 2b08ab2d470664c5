// Helpers shared by the tensor-op definitions (tensor_ops.cc) and their CPU
// kernels: Einsum's equation parser. Errors carry no node name; callers add it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace kiln::ops {

// A parsed Einsum equation. Labels are small ints: letters a-z A-Z are
// 0..51, the dims an ellipsis covers are 52.. (aligned from the right, so
// the same id is the same broadcast dim in every operand).
struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // per operand: the label of each dim
  std::vector<int> output;               // the label of each output dim
  std::vector<std::int64_t> sizes;       // per label id: its size (-1 unknown, 0 unused)
};

// Parses `equation` (whitespace ignored; implicit output when there is no
// "->") against the operands' shapes. Size-1 dims broadcast.
Result<EinsumSpec> ParseEinsum(const std::string& equation, const std::vector<Shape>& shapes);

}  // namespace kiln::ops
