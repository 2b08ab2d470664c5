// Inference helpers shared by op definition files.
#pragma once

#include <cmath>
#include <string_view>

#include "common/checked.h"
#include "ops/fused_attrs.h"
#include "ops/op_registry.h"

namespace kiln::ops {

// Shape arithmetic on dims and attribute values from a model that may be
// hostile: never overflows, never divides by zero. Operands are
// non-negative; results above kMaxTensorBytes (no dim of a tensor Kiln
// accepts can be larger) are errors naming the node and `what`.
inline Result<std::int64_t> MulDims(const InferContext& c, std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t r = 0;
  if (a < 0 || b < 0 || !CheckedMul(a, b, &r) || r > kMaxTensorBytes) {
    return c.Fail(what, ": ", a, " x ", b, " is outside 0..", kMaxTensorBytes, " (Kiln's limit per tensor)");
  }
  return r;
}
inline Result<std::int64_t> AddDims(const InferContext& c, std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t r = 0;
  if (a < 0 || b < 0 || !CheckedAdd(a, b, &r) || r > kMaxTensorBytes) {
    return c.Fail(what, ": ", a, " + ", b, " is outside 0..", kMaxTensorBytes, " (Kiln's limit per tensor)");
  }
  return r;
}
// An attribute value used in shape arithmetic (kernel, stride, dilation,
// pad, block size, group...): must lie in [lo, kMaxTensorBytes].
inline Status CheckAttrRange(const InferContext& c, std::string_view attr, std::int64_t v, std::int64_t lo) {
  if (v < lo || v > kMaxTensorBytes) {
    return c.Fail("attribute '", attr, "' = ", v, " is out of range (expected ", lo, "..", kMaxTensorBytes, ")");
  }
  return Status::Ok();
}
// A floating-point extent (Resize scales, Range count): finite and within
// 0..kMaxTensorBytes before it is converted to an integer.
inline Result<std::int64_t> DimFromDouble(const InferContext& c, double v, std::string_view what) {
  if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxTensorBytes)) {
    return c.Fail(what, " = ", v, " is not an extent in 0..", kMaxTensorBytes, " (Kiln's limit per tensor)");
  }
  return static_cast<std::int64_t>(v);
}

// Concat's shape rule (Concat, QLinearConcat): merges input `i`'s shape
// `xi` into `out`, which starts as input `first`'s shape `x0`: the same rank,
// equal dims off `axis`, summed (checked) on it, -1 (unknown) where either
// is. Errors name input i and input `first`.
inline Status MergeConcatShape(const InferContext& c, int i, int first, const Shape& x0, const Shape& xi, int axis,
                               Shape* out) {
  if (xi.size() != x0.size()) {
    return c.Fail("input ", i, " has rank ", xi.size(), ", input ", first, " has rank ", x0.size(), " (they must match)");
  }
  for (std::size_t d = 0; d < xi.size(); ++d) {
    if (static_cast<int>(d) == axis) {
      if ((*out)[d] < 0 || xi[d] < 0) {
        (*out)[d] = -1;
      } else {
        KILN_ASSIGN_OR_RETURN((*out)[d], AddDims(c, (*out)[d], xi[d], StrCat("the concatenated axis ", axis)));
      }
    } else if (xi[d] >= 0 && x0[d] >= 0 && xi[d] != x0[d]) {
      return c.Fail("input ", i, " has shape ", ShapeToString(xi), ", incompatible with input ", first, "'s ",
                    ShapeToString(x0), " outside axis ", axis);
    } else if ((*out)[d] < 0) {
      (*out)[d] = xi[d];
    }
  }
  return Status::Ok();
}

// An attribute, when present, of kind `k`: ONNX's schema check covers only
// the default domain, and a mistyped attribute would read as its default.
inline Status CheckAttrKind(InferContext& c, const char* name, ir::Attribute::Kind k, const char* kind) {
  const ir::Attribute* a = c.node().FindAttr(name);
  if (a && a->kind != k) return c.Fail("attribute '", name, "' must be ", kind);
  return Status::Ok();
}

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

// An input a fusion pass added (kiln.sum's residual, kiln.bias's bias):
// attribute `attr` is 0 or 1, input `index` present if and only if it is 1,
// and then of input 0's type. Returns whether it is present; the caller
// checks its shape.
inline Result<bool> CheckFusedInput(InferContext& c, const char* attr, int index, const char* noun) {
  const std::int64_t v = c.node().GetInt(attr, 0);
  if (v != 0 && v != 1) return c.Fail("attribute '", attr, "' must be 0 or 1, found ", v);
  if ((v == 1) != c.has_input(index)) {
    return v == 1 ? c.Fail("attribute '", attr, "' = 1 needs the ", noun, " input ", index)
                  : c.Fail("input ", index, " (a fused ", noun, ") needs attribute '", attr, "' = 1");
  }
  if (v == 1 && c.in_dtype(index) != c.in_dtype(0)) {
    return c.Fail(noun, " input ", index, " has type ", DTypeName(c.in_dtype(index)), ", expected ",
                  DTypeName(c.in_dtype(0)));
  }
  return v == 1;
}

// ops::kBf16Attr ("kiln.bf16", on Conv, MatMul and Gemm): 0 or 1, and 1
// only on float32 operands (a bfloat16 model computed in float32).
inline Status CheckBf16Attr(InferContext& c) {
  const std::int64_t b = c.node().GetInt(kBf16Attr, 0);
  if (b != 0 && b != 1) return c.Fail("attribute '", kBf16Attr, "' must be 0 or 1, found ", b);
  if (b == 1 && c.in_dtype(0) != DType::kFloat32) {
    return c.Fail("attribute '", kBf16Attr, "' = 1 needs float32 operands (a bfloat16 model computed in float32), found ",
                  DTypeName(c.in_dtype(0)));
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

// Output shape [M, N] of a Gemm of 2-D inputs a_index x b_index, each
// transposed where the node's transA / transB say (Gemm, QGemm); errors
// name a rank other than 2 and differing inner dims.
Result<Shape> GemmOutputShape(InferContext& c, int a_index, int b_index);
// Output shape of a MatMul of inputs a_index x b_index (NumPy matmul rules;
// MatMul, MatMulInteger, QLinearMatMul).
Result<Shape> MatMulOutputShape(InferContext& c, int a_index, int b_index);
// Pooling (MaxPool, AveragePool, Global*, com.microsoft QLinearAveragePool)
// output 0 (and 1, MaxPool's Indices): input 0's type and the window's shape
// from the node's attributes; `nhwc`: input and output are [N, H, W, C].
Status InferPoolShape(InferContext& c, bool nhwc);
// Output shape (NCHW order) of a convolution of logical NCHW input shape `x`
// with weight input w_index and optional bias input bias_index (-1: none),
// from the node's Conv attributes (Conv, ConvInteger, QLinearConv).
Result<Shape> ConvOutputShape(InferContext& c, const Shape& x, int w_index, int bias_index);

// Turns attribute `attr` (ints) into a constant int64 input at `index`.
Status AttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index);
// Same for a float attribute (scalar float32 constant); absent attr = absent input.
Status FloatAttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index);

}  // namespace kiln::ops
