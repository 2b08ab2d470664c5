// Gemm and MatMul.
#include "ops/common_infer.h"
#include "ops/fused_attrs.h"

namespace kiln::ops {
namespace {

Status InferGemm(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  KILN_ASSIGN_OR_RETURN(const Shape out, GemmOutputShape(c, 0, 1));
  const std::int64_t m = out[0], n = out[1];
  if (c.has_input(2)) {
    auto s = BroadcastShapes(c.in_shape(2), Shape{m, n});
    if (!s.ok() || s.value() != Shape{m, n}) {
      return c.Fail("C of shape ", ShapeToString(c.in_shape(2)), " does not broadcast to [", m, ",", n, "]");
    }
  }
  KILN_RETURN_IF_ERROR(CheckBf16Attr(c));
  c.SetOutput(0, c.in_dtype(0), {m, n});
  return Status::Ok();
}

Status InferMatMul(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
  KILN_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c, 0, 1));
  // A fused bias (kiln.bias = 1, input 2): [N], the output's last dim.
  KILN_ASSIGN_OR_RETURN(const bool bias, CheckFusedInput(c, kBiasAttr, 2, "bias"));
  if (bias && (out.empty() || c.in_shape(2) != Shape{out.back()})) {
    return c.Fail("bias input 2 has shape ", ShapeToString(c.in_shape(2)), ", expected [",
                  out.empty() ? 0 : out.back(), "] (the output's last dim)");
  }
  KILN_RETURN_IF_ERROR(CheckBf16Attr(c));
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

}  // namespace

Result<Shape> GemmOutputShape(InferContext& c, int a_index, int b_index) {
  const Shape& a = c.in_shape(a_index);
  const Shape& b = c.in_shape(b_index);
  if (a.size() != 2 || b.size() != 2) {
    return c.Fail("A and B must be 2-D, found ", ShapeToString(a), " and ", ShapeToString(b));
  }
  const bool ta = c.node().GetInt("transA", 0) != 0, tb = c.node().GetInt("transB", 0) != 0;
  const std::int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const std::int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k >= 0 && kb >= 0 && k != kb) {
    return c.Fail("inner dims differ: A", ShapeToString(a), ta ? " (transposed)" : "", " vs B", ShapeToString(b),
                  tb ? " (transposed)" : "", ": ", k, " != ", kb);
  }
  return Shape{m, n};
}

Result<Shape> MatMulOutputShape(InferContext& c, int a_index, int b_index) {
  Shape a = c.in_shape(a_index), b = c.in_shape(b_index);
  if (a.empty() || b.empty()) return c.Fail("MatMul inputs must have rank >= 1");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() >= 0 && b[b.size() - 2] >= 0 && a.back() != b[b.size() - 2]) {
    return c.Fail("inner dims differ: ", ShapeToString(c.in_shape(a_index)), " x ", ShapeToString(c.in_shape(b_index)));
  }
  auto batch = BroadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch.ok()) return c.Fail("batch dims: ", batch.status().message());
  Shape out = batch.value();
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  return out;
}

void RegisterGemmOps(OpRegistry& r) {
  OpDef g;
  g.type = "Gemm";
  g.versions = {7, 9, 11, 13};
  g.min_inputs = 2;
  g.max_inputs = 3;
  g.attributes = {"alpha", "beta", "transA", "transB"};
  g.input_types = {DType::kFloat32};
  g.infer = InferGemm;
  r.Register(g);
  OpDef m;
  m.type = "MatMul";
  m.versions = {1, 9, 13};
  m.min_inputs = 2;
  m.max_inputs = 3;  // input 2: the bias of kiln.bias (InferMatMul)
  m.input_types = {DType::kFloat32};
  m.infer = InferMatMul;
  r.Register(m);
}

}  // namespace kiln::ops
