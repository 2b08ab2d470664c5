#include "ops/op_registry.h"

#include <algorithm>
#include <sstream>

namespace kiln::ops {

Result<int> InferContext::Axis(std::int64_t axis, std::size_t rank, const char* what) const {
  auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    return Fail("attribute '", what, "' = ", axis, " is out of range for rank ", rank,
                " (expected ", -r, "..", r - 1, ")");
  }
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

OpRegistry& OpRegistry::Get() {
  static OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    RegisterElementwiseOps(*reg);
    RegisterActivationOps(*reg);
    RegisterConvOps(*reg);
    RegisterGemmOps(*reg);
    RegisterPoolOps(*reg);
    RegisterNormOps(*reg);
    RegisterShapeOps(*reg);
    RegisterUnaryOps(*reg);
    RegisterReduceOps(*reg);
    RegisterTensorOpsOps(*reg);
    RegisterConvTransposeOps(*reg);
    RegisterResizeOps(*reg);
    RegisterRnnOps(*reg);
    RegisterInternalOps(*reg);
    RegisterControlFlowOps(*reg);
    return reg;
  }();
  return *r;
}

void OpRegistry::Register(OpDef def) {
  auto key = std::make_pair(def.type, def.domain);
  defs_[key] = std::move(def);
}

const OpDef* OpRegistry::Find(const std::string& type, const std::string& domain) const {
  std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = defs_.find({type, d});
  if (it == defs_.end() && d != "kiln") it = defs_.find({type, "kiln.custom"});  // custom ops: by type
  return it == defs_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> out;
  for (auto& [k, d] : defs_) {
    if (k.second.empty()) out.push_back(k.first);
  }
  return out;
}

Status InferNode(ir::Node& node) {
  const OpDef* def = OpRegistry::Get().Find(node.op_type(), node.domain());
  if (!def) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": op '", node.op_type(),
                 "' (domain '", node.domain(), "') is not supported");
  }
  int present = node.num_inputs();
  if (present < def->min_inputs || present > def->max_inputs) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": expected ", def->min_inputs,
                 "..", def->max_inputs, " inputs, found ", present);
  }
  for (int i = 0; i < def->min_inputs; ++i) {
    if (!node.input(i)) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": required input ", i,
                   " is missing");
    }
  }
  if (node.num_outputs() < def->min_outputs || node.num_outputs() > def->max_outputs) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": expected ", def->min_outputs,
                 "..", def->max_outputs, " outputs, found ", node.num_outputs());
  }
  for (auto& [name, a] : node.attrs()) {
    if (!def->any_attributes && !def->attributes.count(name) && name.rfind("kiln.", 0) != 0) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": unknown attribute '", name,
                   "'");
    }
  }
  for (int i = 0; i < node.num_inputs(); ++i) {
    ir::Value* v = node.input(i);
    if (v && v->dtype() == DType::kUndefined) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": input ", i, " '",
                   v->name(), "' has no known element type");
    }
    if (v && !DTypeSupported(v->dtype())) {
      return Error(StatusCode::kUnimplemented, node.Describe(), ": input ", i, " '", v->name(),
                   "' has element type ", DTypeName(v->dtype()), ", which Kiln does not support");
    }
  }
  if (!def->input_types.empty() && node.input(0) &&
      !def->input_types.count(node.input(0)->dtype())) {
    std::ostringstream os;
    for (DType t : def->input_types) os << ' ' << DTypeName(t);
    return Error(StatusCode::kUnimplemented, node.Describe(), ": input type ",
                 DTypeName(node.input(0)->dtype()), " is not supported (supported:", os.str(), ")");
  }
  InferContext ctx(node);
  return def->infer(ctx);
}

Result<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (da < 0 || db < 0) {
      out[i] = -1;
    } else {
      return Error(StatusCode::kInvalidArgument, "shapes ", ShapeToString(a), " and ",
                   ShapeToString(b), " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    }
  }
  return out;
}

}  // namespace kiln::ops
