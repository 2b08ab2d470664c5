#include "kiln/graph.h"

#include <cstring>

#include <onnx/defs/schema.h>

#include "common/checked.h"
#include "common/file.h"
#include "common/utf8.h"
#include "custom/registry.h"
#include "ir/graph.h"
#include "ops/file_constant.h"
#include "ops/op_registry.h"

namespace kiln {

Graph::Graph(std::string name) : g_(std::make_unique<ir::Graph>()) {
  g_->set_name(std::move(name));
  g_->set_opset(17);
}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

namespace {
ir::Value* ValueOf(ir::Graph& g, Graph::Tensor t) {
  if (t.id < 0 || t.id >= static_cast<int>(g.values().size())) return nullptr;
  return g.values()[t.id].get();
}
Graph::Tensor HandleOf(const ir::Graph& g, const ir::Value* v) {
  for (std::size_t i = 0; i < g.values().size(); ++i) {
    if (g.values()[i].get() == v) return {static_cast<int>(i)};
  }
  return {};
}
}  // namespace

Graph::Tensor Graph::AddInput(const std::string& name, DType dtype, Shape shape) {
  ir::Value* v = g_->AddValue(name, dtype, std::move(shape));
  g_->inputs().push_back(v);
  return HandleOf(*g_, v);
}

Result<Graph::Tensor> Graph::AddConstant(const std::string& name, DType dtype, Shape shape, const void* data) {
  if (!DTypeSupported(dtype)) return Error(StatusCode::kInvalidArgument, "AddConstant '", name, "': unsupported dtype");
  if (!IsStatic(shape)) return Error(StatusCode::kInvalidArgument, "AddConstant '", name, "': shape must be static");
  const std::string what = StrCat("AddConstant '", name, "'");
  KILN_RETURN_IF_ERROR(CheckedTensorBytes(dtype, shape, what).status());
  std::shared_ptr<HostTensor> t;
  try {
    t = std::make_shared<HostTensor>(dtype, std::move(shape));
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, what, ": cannot allocate its ", DTypeName(dtype), " tensor");
  }
  if (t->nbytes()) {
    if (!data) return Error(StatusCode::kInvalidArgument, "AddConstant '", name, "': null data");
    std::memcpy(t->mutable_data(), data, t->nbytes());
  }
  return HandleOf(*g_, g_->AddConstant(name, t));
}

namespace {

Result<std::int64_t> ConstantBytes(const char* fn, const std::string& name, DType dtype, const Shape& shape,
                                   std::uint64_t offset) {
  const std::string what = StrCat(fn, " '", name, "'");
  if (!DTypeSupported(dtype)) return Error(StatusCode::kInvalidArgument, what, ": unsupported dtype");
  if (!IsStatic(shape)) return Error(StatusCode::kInvalidArgument, what, ": shape must be static");
  KILN_ASSIGN_OR_RETURN(std::int64_t bytes, CheckedTensorBytes(dtype, shape, what));
  std::int64_t end = 0;
  if (offset > static_cast<std::uint64_t>(kMaxTensorBytes) * 4 ||
      !CheckedAdd(static_cast<std::int64_t>(offset), bytes, &end)) {
    return Error(StatusCode::kInvalidArgument, what, ": offset ", offset, " + ", bytes, " bytes is out of range");
  }
  return bytes;
}

}  // namespace

Result<Graph::Tensor> Graph::AddConstantFromFile(const std::string& name, DType dtype, Shape shape,
                                                 const std::string& path, std::uint64_t offset) {
  KILN_ASSIGN_OR_RETURN(const std::int64_t bytes, ConstantBytes("AddConstantFromFile", name, dtype, shape, offset));
  const std::string what = StrCat("AddConstantFromFile '", name, "': file '", path, "'");
  KILN_ASSIGN_OR_RETURN(OpenedFile file, OpenRegularFile(path, what));
  if (offset > static_cast<std::uint64_t>(file.size) || static_cast<std::uint64_t>(bytes) > file.size - offset) {
    return Error(StatusCode::kInvalidArgument, what, " has ", file.size, " bytes; ", DTypeName(dtype),
                 ShapeToString(shape), " at offset ", offset, " needs [", offset, ", ", offset + bytes, ")");
  }
  std::shared_ptr<HostTensor> t;
  try {
    t = std::make_shared<HostTensor>(dtype, std::move(shape));
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, what, ": cannot allocate ", bytes, " bytes");
  }
  if (bytes) {
    KILN_RETURN_IF_ERROR(PreadExact(file.fd.get(), t->mutable_data(), bytes, static_cast<std::int64_t>(offset), what));
  }
  return HandleOf(*g_, g_->AddConstant(name, t));
}

Result<Graph::Tensor> Graph::AddFileConstant(const std::string& name, DType dtype, Shape shape,
                                             const std::string& file_id, std::uint64_t offset) {
  KILN_ASSIGN_OR_RETURN(const std::int64_t bytes, ConstantBytes("AddFileConstant", name, dtype, shape, offset));
  if (!ops::IsValidFileId(file_id)) {
    return Error(StatusCode::kInvalidArgument, "AddFileConstant '", name, "': file_id '", EscapeBytes(file_id.substr(0, 64)),
                 "' (", file_id.size(), " bytes) must be 1 to ", ops::kMaxFileIdBytes, " printable ASCII bytes");
  }
  weights::WeightRef r;
  r.file_id = file_id;
  r.offset = offset;
  r.length = static_cast<std::uint64_t>(bytes);
  r.dtype = dtype;
  r.shape = shape;
  ir::Value* v = g_->AddValue(name, dtype, std::move(shape));
  ir::Node* n = g_->AddNode("FileConstant", name, {}, {v}, "kiln");
  n->set_since_version(1);
  ops::EncodeFileConstant(*n, r);
  return HandleOf(*g_, v);
}

Result<std::vector<Graph::Tensor>> Graph::AddOp(const std::string& type, const std::vector<Tensor>& inputs,
                                                const Attributes& attrs, int num_outputs, const std::string& name) {
  const ops::OpDef* def = ops::OpRegistry::Get().Find(type, "");
  if (!def) {
    std::string where;
    for (const std::string& d : custom::PackageSearchDirs()) where += (where.empty() ? "" : ", ") + d;
    return Error(StatusCode::kNotFound, "AddOp: op type '", type,
                 "' is neither a built-in op nor a registered custom op (RegisterCustomOp, or a package loaded with "
                 "LoadCustomOpPackages from ", where.empty() ? std::string("$KILN_CUSTOM_OP_PATH, which is not set") : where,
                 ")");
  }
  if (num_outputs < 1) return Error(StatusCode::kInvalidArgument, "AddOp '", type, "': num_outputs must be >= 1");
  std::vector<ir::Value*> ins;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = ValueOf(*g_, inputs[i]);
    if (!v) return Error(StatusCode::kInvalidArgument, "AddOp '", type, "': input ", i, " is not a tensor of this graph");
    ins.push_back(v);
  }
  const std::string node_name = name.empty() ? StrCat(type, "_", counter_++) : name;
  // The ONNX schema of a built-in op says each attribute's type: an int
  // given for a float attribute is converted, any other mismatch is an error
  // (as for an ONNX file). Kiln's internal attributes are not accepted.
  const onnx::OpSchema* schema =
      def->domain.empty() ? onnx::OpSchemaRegistry::Schema(type, g_->opset(), "") : nullptr;
  for (const auto& [k, v] : attrs) {
    if (k.rfind("kiln.", 0) == 0) {
      return Error(StatusCode::kInvalidArgument, "AddOp '", type, "' node '", node_name, "': attribute '", k,
                   "' is internal to Kiln");
    }
    if (schema) {
      auto it = schema->attributes().find(k);
      if (it != schema->attributes().end()) {
        const auto want = it->second.type;
        const bool is_int = std::holds_alternative<std::int64_t>(v);
        const auto found = is_int ? onnx::AttributeProto::INT
                           : std::holds_alternative<float>(v) ? onnx::AttributeProto::FLOAT
                           : std::holds_alternative<std::string>(v) ? onnx::AttributeProto::STRING
                           : std::holds_alternative<std::vector<std::int64_t>>(v) ? onnx::AttributeProto::INTS
                                                                                    : onnx::AttributeProto::FLOATS;
        if (want != found && !(is_int && want == onnx::AttributeProto::FLOAT)) {
          return Error(StatusCode::kInvalidArgument, "AddOp '", type, "' node '", node_name, "': attribute '", k,
                       "' must be of type ", onnx::AttributeProto::AttributeType_Name(want), ", found ",
                       onnx::AttributeProto::AttributeType_Name(found));
        }
      }
    }
  }
  std::vector<ir::Value*> outs;
  for (int j = 0; j < num_outputs; ++j) outs.push_back(g_->AddValue(StrCat(node_name, "_out", j)));
  ir::Node* n = g_->AddNode(type, node_name, ins, outs, def->domain == "kiln.custom" ? "kiln.custom" : "");
  n->set_since_version(def->versions.back());
  for (const auto& [k, v] : attrs) {
    ir::Attribute a;
    const bool to_float = schema && schema->attributes().count(k) &&
                          schema->attributes().at(k).type == onnx::AttributeProto::FLOAT;
    if (auto* i = std::get_if<std::int64_t>(&v); i && to_float) a = ir::Attribute::Float(static_cast<float>(*i));
    else if (auto* i = std::get_if<std::int64_t>(&v)) a = ir::Attribute::Int(*i);
    else if (auto* f = std::get_if<float>(&v)) a = ir::Attribute::Float(*f);
    else if (auto* s = std::get_if<std::string>(&v)) a = ir::Attribute::String(*s);
    else if (auto* is = std::get_if<std::vector<std::int64_t>>(&v)) a = ir::Attribute::Ints(*is);
    else a = ir::Attribute::Floats(std::get<std::vector<float>>(v));
    n->SetAttr(k, a);
  }
  std::vector<Tensor> out;
  for (ir::Value* o : outs) out.push_back(HandleOf(*g_, o));
  return out;
}

Status Graph::AddOutput(Tensor t, const std::string& name) {
  ir::Value* v = ValueOf(*g_, t);
  if (!v) return Error(StatusCode::kInvalidArgument, "AddOutput: not a tensor of this graph");
  if (!name.empty() && name != v->name()) {
    if (g_->FindValue(name)) return Error(StatusCode::kInvalidArgument, "AddOutput: name '", name, "' is taken");
    KILN_RETURN_IF_ERROR(g_->RenameValue(v, name));
  }
  g_->outputs().push_back(v);
  return Status::Ok();
}

std::unique_ptr<ir::Graph> Graph::TakeIr() { return std::move(g_); }

Graph Graph::FromIr(std::unique_ptr<ir::Graph> g) {
  Graph out;
  out.g_ = std::move(g);
  return out;
}

}  // namespace kiln
