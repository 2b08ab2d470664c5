// Unary activations (Relu, Sigmoid, HardSigmoid, HardSwish, Clip, Tanh,
// LeakyRelu) and Softmax.
#include "ops/common_infer.h"

namespace kiln::ops {

Status AttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index) {
  const ir::Attribute* a = n.FindAttr(attr);
  if (!a) return Status::Ok();
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{static_cast<std::int64_t>(a->ints.size())});
  std::copy(a->ints.begin(), a->ints.end(), t->mutable_data_as<std::int64_t>());
  n.SetInput(index, g.AddConstant(n.name() + "_" + attr, t));
  n.attrs().erase(attr);
  return Status::Ok();
}

Status FloatAttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index) {
  const ir::Attribute* a = n.FindAttr(attr);
  if (!a) return Status::Ok();
  auto t = std::make_shared<HostTensor>(DType::kFloat32, Shape{});
  *t->mutable_data_as<float>() = a->f;
  n.SetInput(index, g.AddConstant(n.name() + "_" + attr, t));
  n.attrs().erase(attr);
  return Status::Ok();
}

namespace {

void Unary(OpRegistry& r, const char* name, std::vector<int> versions, std::set<std::string> attrs,
           std::set<DType> types = FloatTypes()) {
  OpDef d;
  d.type = name;
  d.versions = std::move(versions);
  d.attributes = std::move(attrs);
  d.input_types = std::move(types);
  d.infer = InferSameAsInput;
  r.Register(d);
}

Status InferClip(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (c.has_input(i) && !c.in_shape(i).empty() && NumElements(c.in_shape(i)) != 1) {
      return c.Fail("input ", i, " (", i == 1 ? "min" : "max", ") must be a scalar, has shape ",
                    ShapeToString(c.in_shape(i)));
    }
  }
  return InferSameAsInput(c);
}

Status InferSoftmax(InferContext& c) {
  const std::size_t rank = c.in_shape(0).size();
  const std::int64_t def = c.node().since_version() >= 13 ? -1 : 1;
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", def), rank == 0 ? 1 : rank, "axis"));
  (void)axis;
  return InferSameAsInput(c);
}

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  Unary(r, "Relu", {6, 13, 14}, {}, NumericTypes());
  Unary(r, "Sigmoid", {6, 13}, {});
  Unary(r, "Tanh", {6, 13}, {});
  Unary(r, "HardSigmoid", {6}, {"alpha", "beta"});
  Unary(r, "HardSwish", {14}, {});
  Unary(r, "LeakyRelu", {6, 16}, {"alpha"});
  {
    OpDef d;
    d.type = "Clip";
    d.versions = {6, 11, 12, 13};
    d.min_inputs = 1;
    d.max_inputs = 3;
    d.attributes = {"min", "max"};
    d.input_types = NumericTypes();
    d.normalize = [](ir::Node& n, ir::Graph& g) -> Status {
      if (n.since_version() >= 11) return Status::Ok();
      // Clip-6: bounds are attributes with defaults -/+ float max.
      if (!n.HasAttr("min")) n.SetAttr("min", ir::Attribute::Float(-3.402823466e+38f));
      if (!n.HasAttr("max")) n.SetAttr("max", ir::Attribute::Float(3.402823466e+38f));
      KILN_RETURN_IF_ERROR(FloatAttrToInput(n, g, "min", 1));
      return FloatAttrToInput(n, g, "max", 2);
    };
    d.infer = InferClip;
    r.Register(d);
  }
  {
    OpDef d;
    d.type = "Softmax";
    d.versions = {1, 11, 13};
    d.attributes = {"axis"};
    d.input_types = FloatTypes();
    d.infer = InferSoftmax;
    r.Register(d);
  }
}

}  // namespace kiln::ops
