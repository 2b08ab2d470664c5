// Reductions: Reduce{Max,Min,Mean,Prod,Sum,L1,L2,SumSquare,LogSum,LogSumExp}
// (axes attribute; ReduceSum-13 takes axes as an optional input, with
// noop_with_empty_axes), ArgMax/ArgMin and CumSum.
#include "ops/math_common.h"

namespace kiln::ops {

namespace {

// Reduced output shape, given which dims are reduced.
Shape ReducedShape(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!mask[i]) out.push_back(in[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

Status InferReduce(InferContext& c) {
  const ir::Node& n = c.node();
  const Shape& in = c.in_shape(0);
  const bool keepdims = n.GetInt("keepdims", 1) != 0;
  std::vector<std::int64_t> axes;
  const std::vector<std::int64_t>* axes_in = nullptr;
  if (c.num_inputs() > 1 && c.has_input(1)) {
    if (c.in_dtype(1) != DType::kInt64 || c.in_shape(1).size() != 1) {
      return c.Fail("input 1 (axes) must be a 1-D int64 tensor, is ", DTypeName(c.in_dtype(1)), " ",
                    ShapeToString(c.in_shape(1)));
    }
    if (const HostTensor* t = c.in_const(1)) {
      axes = t->ToInt64Vector();
    } else if (c.in_shape(1)[0] != 0) {
      // Axes known only at run time: the rank is all that can be told.
      const std::int64_t k = c.in_shape(1)[0];
      const auto rank = static_cast<std::int64_t>(in.size());
      c.SetOutput(0, c.in_dtype(0), Shape(keepdims || k < 0 ? rank : std::max<std::int64_t>(0, rank - k), -1));
      return Status::Ok();
    }
    axes_in = &axes;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<bool> mask, ReduceMask(n, in.size(), axes_in));
  c.SetOutput(0, c.in_dtype(0), ReducedShape(in, mask, keepdims));
  return Status::Ok();
}

Status InferArg(InferContext& c) {
  const ir::Node& n = c.node();
  const Shape& in = c.in_shape(0);
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(n.GetInt("axis", 0), in.size(), "axis"));
  if (in[axis] == 0) return c.Fail("attribute 'axis' = ", axis, " selects a dim of size 0");
  std::vector<bool> mask(in.size(), false);
  mask[axis] = true;
  c.SetOutput(0, DType::kInt64, ReducedShape(in, mask, n.GetInt("keepdims", 1) != 0));
  return Status::Ok();
}

Status InferCumSum(InferContext& c) {
  if (c.in_dtype(1) != DType::kInt32 && c.in_dtype(1) != DType::kInt64) {
    return c.Fail("input 1 (axis) must be int32 or int64, is ", DTypeName(c.in_dtype(1)));
  }
  if (c.in_shape(1).size() > 1 || NumElements(c.in_shape(1)) != 1) {
    return c.Fail("input 1 (axis) must be a scalar, has shape ", ShapeToString(c.in_shape(1)));
  }
  if (const HostTensor* t = c.in_const(1)) {
    const std::int64_t axis = t->GetAsInt64(0);
    const auto r = static_cast<std::int64_t>(c.in_shape(0).size());
    if (axis < -r || axis >= r) {
      return c.Fail("input 1 (axis) = ", axis, " is out of range for rank ", r, " (expected ", -r, "..",
                    r - 1, ")");
    }
  }
  return InferSameAsInput(c);
}

}  // namespace

void RegisterReduceOps(OpRegistry& r) {
  const std::set<DType>& num = NumericHalfTypes();
  for (const char* name : {"ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    OpDef d;
    d.type = name;
    const bool v12 = d.type == "ReduceMax" || d.type == "ReduceMin";  // 12 added int8/uint8
    d.versions = v12 ? std::vector<int>{1, 11, 12, 13} : std::vector<int>{1, 11, 13};
    d.attributes = {"axes", "keepdims"};
    d.input_types = num;
    d.infer = InferReduce;
    r.Register(d);
  }
  {
    OpDef d;
    d.type = "ReduceSum";
    d.versions = {1, 11, 13};
    d.max_inputs = 2;
    d.attributes = {"axes", "keepdims", "noop_with_empty_axes"};
    d.input_types = num;
    d.infer = [](InferContext& c) -> Status {
      const ir::Node& n = c.node();
      const bool v13 = n.since_version() >= 13;
      if (v13 && n.HasAttr("axes")) {
        return c.Fail("attribute 'axes' does not exist from version 13 (axes are input 1)");
      }
      if (!v13 && n.HasAttr("noop_with_empty_axes")) {
        return c.Fail("attribute 'noop_with_empty_axes' needs version 13, node has ", n.since_version());
      }
      if (!v13 && c.num_inputs() > 1) return c.Fail("input 1 (axes) needs version 13, node has ", n.since_version());
      return InferReduce(c);
    };
    r.Register(d);
  }
  for (const char* name : {"ArgMax", "ArgMin"}) {
    OpDef d;
    d.type = name;
    d.versions = {1, 11, 12, 13};
    d.attributes = {"axis", "keepdims", "select_last_index"};
    d.input_types = num;
    d.infer = InferArg;
    r.Register(d);
  }
  {
    OpDef d;
    d.type = "CumSum";
    d.versions = {11, 14};
    d.min_inputs = d.max_inputs = 2;
    d.attributes = {"exclusive", "reverse"};
    d.input_types = Union({FloatHalfTypes(), {DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt64}});
    d.infer = InferCumSum;
    r.Register(d);
  }
}

}  // namespace kiln::ops
