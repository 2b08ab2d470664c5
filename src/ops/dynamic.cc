// Ops whose output extents depend on input values: NonZero and
// NonMaxSuppression. Their output shape is an upper bound (memory is planned
// for it) with the data-dependent dims marked dynamic; the kernel reports the
// actual extents per run (see ir::Value::dynamic_mask).
#include <algorithm>

#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

Status InferNonZero(InferContext& c) {
  const Shape& x = c.in_shape(0);
  const std::int64_t n = NumElements(x);
  if (n < 0) return c.Fail("input 0 has unresolved dims ", ShapeToString(x));
  // [rank, <=numel]; a scalar has one coordinate row (ONNX Runtime and the
  // ONNX reference both give [1, n]).
  c.SetOutput(0, DType::kInt64, {std::max<std::int64_t>(static_cast<std::int64_t>(x.size()), 1), n});
  c.SetOutputDynamic(0, n > 0 ? 0b10 : 0);
  return Status::Ok();
}

// A scalar or 1-element input of type `t`; its value when constant.
Status ScalarInput(InferContext& c, int i, DType t, const char* what) {
  if (!c.has_input(i)) return Status::Ok();
  if (c.in_dtype(i) != t) {
    return c.Fail("input ", i, " (", what, ") must be ", DTypeName(t), ", found ", DTypeName(c.in_dtype(i)));
  }
  if (NumElements(c.in_shape(i)) != 1 || c.in_shape(i).size() > 1) {
    return c.Fail("input ", i, " (", what, ") must be a scalar or 1-element tensor, found shape ",
                  ShapeToString(c.in_shape(i)));
  }
  return Status::Ok();
}

Status InferNonMaxSuppression(InferContext& c) {
  const std::int64_t center = c.node().GetInt("center_point_box", 0);
  if (center != 0 && center != 1) {
    return c.Fail("attribute 'center_point_box' = ", center, " is not allowed (expected 0 or 1)");
  }
  const Shape& boxes = c.in_shape(0);
  const Shape& scores = c.in_shape(1);
  for (int i = 0; i < 2; ++i) {
    if (c.in_dtype(i) != DType::kFloat32) {
      return c.Fail("input ", i, " must be float32, found ", DTypeName(c.in_dtype(i)));
    }
  }
  if (boxes.size() != 3 || boxes[2] != 4) {
    return c.Fail("input 0 (boxes) must have shape [batches, boxes, 4], found ", ShapeToString(boxes));
  }
  if (scores.size() != 3) {
    return c.Fail("input 1 (scores) must have shape [batches, classes, boxes], found ", ShapeToString(scores));
  }
  if (scores[0] != boxes[0] || scores[2] != boxes[1]) {
    return c.Fail("scores ", ShapeToString(scores), " do not match boxes ", ShapeToString(boxes),
                  " (expected [", boxes[0], ", classes, ", boxes[1], "])");
  }
  KILN_RETURN_IF_ERROR(ScalarInput(c, 2, DType::kInt64, "max_output_boxes_per_class"));
  KILN_RETURN_IF_ERROR(ScalarInput(c, 3, DType::kFloat32, "iou_threshold"));
  KILN_RETURN_IF_ERROR(ScalarInput(c, 4, DType::kFloat32, "score_threshold"));
  // At most min(max_output_boxes_per_class, boxes) per batch and class; an
  // absent limit selects nothing, a run-time one is bounded by the boxes.
  std::int64_t per_class = 0;
  if (c.has_input(2)) {
    per_class = boxes[1];
    if (const HostTensor* t = c.in_const(2)) per_class = std::clamp<std::int64_t>(t->ToInt64Vector()[0], 0, boxes[1]);
  }
  std::int64_t bound = -1;  // unknown while a dim is
  if (boxes[0] >= 0 && scores[1] >= 0 && per_class >= 0) {
    KILN_ASSIGN_OR_RETURN(bound, MulDims(c, boxes[0], scores[1], "the output bound batches x classes"));
    KILN_ASSIGN_OR_RETURN(bound, MulDims(c, bound, per_class, "the output bound batches x classes x boxes"));
  }
  c.SetOutput(0, DType::kInt64, {bound, 3});
  c.SetOutputDynamic(0, bound > 0 ? 1 : 0);  // [<=bound, 3]
  return Status::Ok();
}

}  // namespace

void RegisterDynamicOps(OpRegistry& r) {
  r.Register(Def("NonZero", {9, 13}, 1, 1, {}, InferNonZero));
  r.Register(Def("NonMaxSuppression", {10, 11}, 2, 5, {"center_point_box"}, InferNonMaxSuppression));
}

}  // namespace kiln::ops
