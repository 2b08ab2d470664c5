// Inference helpers shared by op definition files.
#pragma once

#include "ops/op_registry.h"

namespace kiln::ops {

// Output 0 = input 0's type and shape.
inline Status InferSameAsInput(InferContext& c) {
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return Status::Ok();
}

// Checks inputs [first, last] (present ones) share input `first`'s type.
inline Status CheckSameTypes(InferContext& c, int first, int last) {
  for (int i = first + 1; i <= last && i < c.num_inputs(); ++i) {
    if (c.has_input(i) && c.in_dtype(i) != c.in_dtype(first)) {
      return c.Fail("input ", i, " has type ", DTypeName(c.in_dtype(i)), " but input ", first,
                    " has ", DTypeName(c.in_dtype(first)), " (they must match)");
    }
  }
  return Status::Ok();
}

// Type sets.
inline const std::set<DType>& FloatTypes() {
  static const std::set<DType> s = {DType::kFloat32, DType::kFloat64};
  return s;
}
inline const std::set<DType>& NumericTypes() {
  static const std::set<DType> s = {DType::kFloat32, DType::kFloat64,
                                    DType::kInt8,    DType::kUInt8,   DType::kInt16,
                                    DType::kUInt16,  DType::kInt32,   DType::kUInt32,
                                    DType::kInt64,   DType::kUInt64};
  return s;
}

// An OpDef with one output (types: accepted for input 0; empty = any).
inline OpDef Def(const char* type, std::vector<int> versions, int min_in, int max_in, std::set<std::string> attrs,
                 std::function<Status(InferContext&)> infer, std::set<DType> types = {}) {
  OpDef d;
  d.type = type;
  d.versions = std::move(versions);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.attributes = std::move(attrs);
  d.input_types = std::move(types);
  d.infer = std::move(infer);
  return d;
}

// Turns attribute `attr` (ints) into a constant int64 input at `index`.
Status AttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index);
// Same for a float attribute (scalar float32 constant); absent attr = absent input.
Status FloatAttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index);

}  // namespace kiln::ops
