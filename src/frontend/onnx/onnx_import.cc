#include "frontend/onnx/onnx_import.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ops/op_registry.h"
#include "weights/path.h"

namespace kiln::onnx_frontend {
namespace {

namespace fs = std::filesystem;

struct Ctx {
  std::string path;       // model file, for messages
  fs::path dir;           // model directory (external data root)
  int opset = 0;
  std::vector<std::string> unsupported;  // collected, reported together
  std::string scope;      // "If node 'x' attribute 'then_branch': " inside subgraphs
};

Result<std::string> ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return Error(StatusCode::kNotFound, "cannot open '", p.string(), "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename Src, typename Dst>
void CopyConvert(const Src& src, Dst* dst) {
  for (int i = 0; i < src.size(); ++i) dst[i] = static_cast<Dst>(src.Get(i));
}

Result<HostTensorPtr> ConvertTensor(const onnx::TensorProto& tp, const Ctx& ctx,
                                    const std::string& what) {
  auto dtype = static_cast<DType>(tp.data_type());
  if (!DTypeSupported(dtype)) {
    return Error(StatusCode::kUnimplemented, ctx.path, ": ", what, " has element type ",
                 onnx::TensorProto_DataType_Name(tp.data_type()), ", which Kiln does not support");
  }
  Shape shape(tp.dims().begin(), tp.dims().end());
  for (auto d : shape) {
    if (d < 0) return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " has negative dim ", d);
  }
  auto t = std::make_shared<HostTensor>(dtype, shape);
  const std::size_t nbytes = t->nbytes();
  const std::int64_t n = t->numel();
  auto* out = static_cast<std::uint8_t*>(t->mutable_data());
  auto count_error = [&](std::size_t found) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " has ", found,
                 " elements of data, shape ", ShapeToString(shape), " needs ", n);
  };
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    std::uint64_t offset = 0, length = nbytes;
    bool has_length = false;
    for (const auto& kv : tp.external_data()) {
      try {
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = std::stoull(kv.value());
        else if (kv.key() == "length") { length = std::stoull(kv.value()); has_length = true; }
      } catch (const std::exception&) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": bad external data '",
                     kv.key(), "' = '", kv.value(), "'");
      }
    }
    KILN_ASSIGN_OR_RETURN(fs::path file, weights::ResolveInside(ctx.dir, location, ctx.path + ": " + what));
    if (has_length && length != nbytes) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external length ", length,
                   " does not match ", nbytes, " bytes for ", DTypeName(dtype), ShapeToString(shape));
    }
    std::ifstream f(file, std::ios::binary);
    if (!f) return Error(StatusCode::kNotFound, ctx.path, ": ", what, ": cannot open external data '", file.string(), "'");
    std::error_code ec;
    std::uint64_t fsize = fs::file_size(file, ec);
    if (ec || offset > fsize || nbytes > fsize - offset) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data [", offset,
                   ", +", nbytes, ") exceeds '", file.string(), "' (", fsize, " bytes)");
    }
    f.seekg(static_cast<std::streamoff>(offset));
    f.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(nbytes));
    if (!f) return Error(StatusCode::kIoError, ctx.path, ": ", what, ": reading external data failed");
    return HostTensorPtr(t);
  }
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != nbytes) return count_error(tp.raw_data().size() / DTypeSize(dtype));
    std::memcpy(out, tp.raw_data().data(), nbytes);
    return HostTensorPtr(t);
  }
  switch (dtype) {
    case DType::kFloat32:
      if (tp.float_data_size() != n) return count_error(tp.float_data_size());
      CopyConvert(tp.float_data(), reinterpret_cast<float*>(out));
      break;
    case DType::kFloat64:
      if (tp.double_data_size() != n) return count_error(tp.double_data_size());
      CopyConvert(tp.double_data(), reinterpret_cast<double*>(out));
      break;
    case DType::kInt64:
      if (tp.int64_data_size() != n) return count_error(tp.int64_data_size());
      CopyConvert(tp.int64_data(), reinterpret_cast<std::int64_t*>(out));
      break;
    case DType::kUInt32: case DType::kUInt64:
      if (tp.uint64_data_size() != n) return count_error(tp.uint64_data_size());
      if (dtype == DType::kUInt32) CopyConvert(tp.uint64_data(), reinterpret_cast<std::uint32_t*>(out));
      else CopyConvert(tp.uint64_data(), reinterpret_cast<std::uint64_t*>(out));
      break;
    case DType::kInt32: CopyConvert(tp.int32_data(), reinterpret_cast<std::int32_t*>(out)); [[fallthrough]];
    default: {
      if (tp.int32_data_size() != n) return count_error(tp.int32_data_size());
      switch (dtype) {
        case DType::kInt32: break;
        case DType::kInt16: CopyConvert(tp.int32_data(), reinterpret_cast<std::int16_t*>(out)); break;
        case DType::kUInt16: case DType::kFloat16: case DType::kBFloat16:
          CopyConvert(tp.int32_data(), reinterpret_cast<std::uint16_t*>(out)); break;
        case DType::kInt8: CopyConvert(tp.int32_data(), reinterpret_cast<std::int8_t*>(out)); break;
        case DType::kUInt8: case DType::kBool:
          CopyConvert(tp.int32_data(), reinterpret_cast<std::uint8_t*>(out)); break;
        default: return Error(StatusCode::kInternal, "unhandled dtype");
      }
    }
  }
  return HostTensorPtr(t);
}

Status AddExternalInitializer(ir::Graph& g, const onnx::TensorProto& tp, const Ctx& ctx) {
  const std::string what = StrCat(ctx.path, ": initializer '", tp.name(), "'");
  auto dtype = static_cast<DType>(tp.data_type());
  if (!DTypeSupported(dtype)) {
    return Error(StatusCode::kUnimplemented, what, " has element type ",
                 onnx::TensorProto_DataType_Name(tp.data_type()), ", which Kiln does not support");
  }
  std::vector<std::int64_t> shape(tp.dims().begin(), tp.dims().end());
  std::uint64_t nbytes = DTypeSize(dtype);
  for (auto d : shape) {
    if (d < 0) return Error(StatusCode::kInvalidArgument, what, " has negative dim ", d);
    nbytes *= static_cast<std::uint64_t>(d);
  }
  std::string location;
  std::int64_t offset = 0, length = static_cast<std::int64_t>(nbytes);
  for (const auto& kv : tp.external_data()) {
    try {
      std::size_t used = 0;
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset") {
        offset = std::stoll(kv.value(), &used);
        if (used != kv.value().size() || offset < 0) throw std::invalid_argument("offset");
      } else if (kv.key() == "length") {
        length = std::stoll(kv.value(), &used);
        if (used != kv.value().size() || length < 0) throw std::invalid_argument("length");
      }
    } catch (const std::exception&) {
      return Error(StatusCode::kInvalidArgument, what, ": bad external data '", kv.key(), "' = '", kv.value(), "'");
    }
  }
  if (static_cast<std::uint64_t>(length) != nbytes) {
    return Error(StatusCode::kInvalidArgument, what, ": external length ", length, " does not match ", nbytes,
                 " bytes for ", DTypeName(dtype), ShapeToString(shape));
  }
  ir::Value* v = g.AddValue(tp.name(), dtype, shape);
  ir::Node* n = g.AddNode("FileConstant", tp.name(), {}, {v}, "kiln");
  n->set_since_version(1);
  n->SetAttr("location", ir::Attribute::String(location));
  n->SetAttr("offset", ir::Attribute::Int(offset));
  n->SetAttr("length", ir::Attribute::Int(length));
  n->SetAttr("dtype", ir::Attribute::Int(static_cast<std::int64_t>(dtype)));
  n->SetAttr("shape", ir::Attribute::Ints(shape));
  n->SetAttr("kiln.base_dir", ir::Attribute::String(ctx.dir.string()));
  return Status::Ok();
}

Status SetTypeFromProto(ir::Value* v, const onnx::ValueInfoProto& vi, const Ctx& ctx) {
  if (!vi.type().has_tensor_type()) {
    return Error(StatusCode::kUnimplemented, ctx.path, ": '", vi.name(),
                 "' is not a tensor (sequence/map/optional values are not supported)");
  }
  const auto& tt = vi.type().tensor_type();
  auto dtype = static_cast<DType>(tt.elem_type());
  if (!DTypeSupported(dtype)) {
    return Error(StatusCode::kUnimplemented, ctx.path, ": '", vi.name(), "' has element type ",
                 onnx::TensorProto_DataType_Name(tt.elem_type()), ", which Kiln does not support");
  }
  v->set_dtype(dtype);
  if (tt.has_shape()) {
    Shape s;
    std::vector<std::string> params;
    for (const auto& d : tt.shape().dim()) {
      s.push_back(d.has_dim_value() ? d.dim_value() : -1);
      params.push_back(d.has_dim_param() ? d.dim_param() : "");
    }
    v->set_shape(s);
    v->dim_params() = params;
  } else {
    v->set_shape({});
    v->dim_params() = {"<unknown rank>"};
  }
  return Status::Ok();
}

Result<std::unique_ptr<ir::Graph>> ConvertGraph(const onnx::GraphProto& gp, ir::Graph* parent,
                                                Ctx& ctx, const ImportOptions* opts);

Result<ir::Attribute> ConvertAttribute(const onnx::AttributeProto& ap, ir::Graph* owner, Ctx& ctx,
                                       const std::string& what) {
  using K = ir::Attribute::Kind;
  ir::Attribute a;
  switch (ap.type()) {
    case onnx::AttributeProto::FLOAT: a.kind = K::kFloat; a.f = ap.f(); break;
    case onnx::AttributeProto::INT: a.kind = K::kInt; a.i = ap.i(); break;
    case onnx::AttributeProto::STRING: a.kind = K::kString; a.s = ap.s(); break;
    case onnx::AttributeProto::FLOATS: a.kind = K::kFloats; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case onnx::AttributeProto::INTS: a.kind = K::kInts; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case onnx::AttributeProto::STRINGS: a.kind = K::kStrings; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case onnx::AttributeProto::TENSOR: {
      a.kind = K::kTensor;
      KILN_ASSIGN_OR_RETURN(a.t, ConvertTensor(ap.t(), ctx, what + " attribute '" + ap.name() + "'"));
      break;
    }
    case onnx::AttributeProto::TENSORS: {
      a.kind = K::kTensors;
      for (const auto& t : ap.tensors()) {
        KILN_ASSIGN_OR_RETURN(auto ht, ConvertTensor(t, ctx, what + " attribute '" + ap.name() + "'"));
        a.tensors.push_back(ht);
      }
      break;
    }
    case onnx::AttributeProto::GRAPH:
    case onnx::AttributeProto::GRAPHS: {
      a.kind = ap.type() == onnx::AttributeProto::GRAPH ? K::kGraph : K::kGraphs;
      const std::string outer = ctx.scope;
      ctx.scope += StrCat(what, " attribute '", ap.name(), "': ");
      for (int i = 0; i < (a.kind == K::kGraph ? 1 : ap.graphs_size()); ++i) {
        auto g = ConvertGraph(a.kind == K::kGraph ? ap.g() : ap.graphs(i), owner, ctx, nullptr);
        if (!g.ok()) return g.status();
        (a.kind == K::kGraph ? a.g : a.graphs.emplace_back()) = std::move(g).value();
      }
      ctx.scope = outer;
      break;
    }
    default:
      return Error(StatusCode::kUnimplemented, ctx.path, ": ", what, " attribute '", ap.name(),
                   "' has an unsupported type (", static_cast<int>(ap.type()), ")");
  }
  return a;
}

// A Constant node's value as a tensor.
Result<HostTensorPtr> ConstantNodeValue(const onnx::NodeProto& np, Ctx& ctx, const std::string& what) {
  if (np.attribute_size() != 1) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " must have exactly one value attribute, has ", np.attribute_size());
  }
  const auto& ap = np.attribute(0);
  const std::string& n = ap.name();
  auto scalar = [](DType t, Shape s) { return std::make_shared<HostTensor>(t, std::move(s)); };
  if (n == "value") return ConvertTensor(ap.t(), ctx, what);
  if (n == "value_float") { auto t = scalar(DType::kFloat32, {}); *t->mutable_data_as<float>() = ap.f(); return HostTensorPtr(t); }
  if (n == "value_int") { auto t = scalar(DType::kInt64, {}); *t->mutable_data_as<std::int64_t>() = ap.i(); return HostTensorPtr(t); }
  if (n == "value_floats") {
    auto t = scalar(DType::kFloat32, {ap.floats_size()});
    std::copy(ap.floats().begin(), ap.floats().end(), t->mutable_data_as<float>());
    return HostTensorPtr(t);
  }
  if (n == "value_ints") {
    auto t = scalar(DType::kInt64, {ap.ints_size()});
    std::copy(ap.ints().begin(), ap.ints().end(), t->mutable_data_as<std::int64_t>());
    return HostTensorPtr(t);
  }
  return Error(StatusCode::kUnimplemented, ctx.path, ": ", what, ": Constant attribute '", n,
               "' is not supported (string/sparse constants)");
}

Result<std::unique_ptr<ir::Graph>> ConvertGraph(const onnx::GraphProto& gp, ir::Graph* parent,
                                                Ctx& ctx, const ImportOptions* opts) {
  auto g = std::make_unique<ir::Graph>();
  g->set_parent(parent);
  g->set_name(gp.name());
  g->set_opset(ctx.opset);
  std::set<std::string> init_names;
  for (const auto& init : gp.initializer()) {
    if (!init_names.insert(init.name()).second || g->FindValue(init.name())) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": duplicate initializer '", init.name(), "'");
    }
    if (init.data_location() == onnx::TensorProto::EXTERNAL) {
      // Kept as a FileConstant; the load-file-constants pass reads it (inside
      // the model's directory only, bounds-checked).
      KILN_RETURN_IF_ERROR(AddExternalInitializer(*g, init, ctx));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(auto t, ConvertTensor(init, ctx, "initializer '" + init.name() + "'"));
    g->AddConstant(init.name(), t);
  }
  if (gp.sparse_initializer_size() > 0) {
    return Error(StatusCode::kUnimplemented, ctx.path, ": sparse initializers are not supported");
  }
  std::set<std::string> used_shape_overrides;
  for (const auto& in : gp.input()) {
    if (init_names.count(in.name())) continue;  // an initializer listed as input: a constant
    if (g->FindValue(in.name())) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": duplicate graph input '", in.name(), "'");
    }
    if (opts && opts->constant_inputs.count(in.name())) {
      const HostTensorPtr& t = opts->constant_inputs.at(in.name());
      ir::Value* v = g->AddValue(in.name());
      KILN_RETURN_IF_ERROR(SetTypeFromProto(v, in, ctx));
      if (v->dtype() != t->dtype()) {
        return Error(StatusCode::kInvalidArgument, "--const-input '", in.name(), "': the model declares ",
                     DTypeName(v->dtype()), ", the value is ", DTypeName(t->dtype()));
      }
      const Shape& decl = v->shape();
      bool ok = decl.size() == t->shape().size() || (v->dim_params().size() == 1 && v->dim_params()[0] == "<unknown rank>");
      for (std::size_t i = 0; ok && i < decl.size() && i < t->shape().size(); ++i) ok = decl[i] < 0 || decl[i] == t->shape()[i];
      if (!ok) {
        return Error(StatusCode::kInvalidArgument, "--const-input '", in.name(), "': the model declares shape ",
                     ShapeToString(decl), ", the value has ", ShapeToString(t->shape()));
      }
      v->set_constant(t);
      v->dim_params().clear();
      used_shape_overrides.insert(in.name());
      continue;
    }
    ir::Value* v = g->AddValue(in.name());
    KILN_RETURN_IF_ERROR(SetTypeFromProto(v, in, ctx));
    if (opts) {
      auto it = opts->input_shapes.find(in.name());
      if (it != opts->input_shapes.end()) {
        used_shape_overrides.insert(in.name());
        const Shape& want = it->second;
        const Shape& have = v->shape();
        bool unknown_rank = !v->dim_params().empty() && v->dim_params()[0] == "<unknown rank>";
        if (!unknown_rank && want.size() != have.size()) {
          return Error(StatusCode::kInvalidArgument, "--input-shape for '", in.name(), "': rank ",
                       want.size(), " given, the model's input has rank ", have.size(), " ",
                       ShapeToString(have));
        }
        for (std::size_t i = 0; i < have.size() && !unknown_rank; ++i) {
          if (have[i] >= 0 && have[i] != want[i]) {
            return Error(StatusCode::kInvalidArgument, "--input-shape for '", in.name(), "': dim ", i,
                         " is fixed to ", have[i], " in the model, ", want[i], " given");
          }
        }
        v->set_shape(want);
        v->dim_params().assign(want.size(), "");
      }
    }
    g->inputs().push_back(v);
  }
  if (opts) {
    for (auto& [name, t] : opts->constant_inputs) {
      if (!used_shape_overrides.count(name)) {
        return Error(StatusCode::kInvalidArgument, "--const-input names '", name, "', which is not an input of the model");
      }
    }
    for (auto& [name, s] : opts->input_shapes) {
      if (!used_shape_overrides.count(name)) {
        std::string names;
        for (ir::Value* v : g->inputs()) names += (names.empty() ? "" : ", ") + v->name();
        return Error(StatusCode::kInvalidArgument, "--input-shape names '", name,
                     "', which is not an input of the model (inputs: ", names, ")");
      }
    }
  }
  int counter = 0;
  for (const auto& np : gp.node()) {
    std::string node_name = np.name().empty() ? StrCat(np.op_type(), "_", counter) : np.name();
    ++counter;
    std::string what = StrCat(np.op_type(), " node '", node_name, "'");
    const bool default_domain = np.domain().empty() || np.domain() == "ai.onnx";
    if (default_domain && np.op_type() == "Constant") {
      if (np.output_size() != 1) return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " must have one output");
      if (g->FindValue(np.output(0))) return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": output '", np.output(0), "' is already defined");
      KILN_ASSIGN_OR_RETURN(auto t, ConstantNodeValue(np, ctx, what));
      g->AddConstant(np.output(0), t);
      continue;
    }
    std::vector<ir::Value*> ins, outs;
    for (const std::string& in : np.input()) {
      if (in.empty()) { ins.push_back(nullptr); continue; }
      ir::Value* v = g->LookupValue(in);
      if (!v) {
        // Possibly defined by a later node (unsorted graph): create a placeholder.
        v = g->AddValue(in);
      }
      ins.push_back(v);
    }
    for (const std::string& out : np.output()) {
      if (out.empty()) {
        outs.push_back(g->AddValue(StrCat(node_name, "_unused_out")));
        continue;
      }
      ir::Value* v = g->FindValue(out);
      if (v && (v->producer() || v->is_constant() || g->IsGraphInput(v))) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": output '", out,
                     "' is already defined");
      }
      if (!v) v = g->AddValue(out);
      outs.push_back(v);
    }
    ir::Node* n = g->AddNode(np.op_type(), node_name, ins, outs, default_domain ? "" : np.domain());
    for (const auto& ap : np.attribute()) {
      KILN_ASSIGN_OR_RETURN(ir::Attribute a, ConvertAttribute(ap, g.get(), ctx, what));
      n->SetAttr(ap.name(), std::move(a));
    }
    const ops::OpDef* def = ops::OpRegistry::Get().Find(n->op_type(), n->domain());
    if (!def) {
      ctx.unsupported.push_back(StrCat(n->op_type(), n->domain().empty() ? "" : " (domain '" + n->domain() + "')",
                                       " in node '", node_name, "'"));
      continue;
    }
    if (default_domain) {
      const auto* schema = onnx::OpSchemaRegistry::Schema(n->op_type(), ctx.opset, "");
      if (!schema) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": op '", n->op_type(),
                     "' does not exist in ONNX opset ", ctx.opset);
      }
      n->set_since_version(schema->SinceVersion());
    } else {
      n->set_since_version(1);
    }
    bool known = false;
    std::string versions;
    for (int v : def->versions) {
      known |= v == n->since_version();
      versions += (versions.empty() ? "" : ", ") + std::to_string(v);
    }
    if (!known) {
      ctx.unsupported.push_back(StrCat(n->op_type(), " version ", n->since_version(), " in node '",
                                       node_name, "' (Kiln implements versions ", versions, ")"));
      continue;
    }
    if (def->normalize) {
      Status st = def->normalize(*n, *g);
      if (!st.ok()) return st.WithContext(ctx.path);
    }
  }
  for (const auto& out : gp.output()) {
    ir::Value* v = g->LookupValue(out.name());
    if (!v) return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, "graph output '", out.name(), "' is never produced");
    if (v->dtype() == DType::kUndefined && out.type().has_tensor_type()) {
      v->set_dtype(static_cast<DType>(out.type().tensor_type().elem_type()));
    }
    g->outputs().push_back(v);
  }
  for (auto& v : g->values()) {
    if (!v->producer() && !v->is_constant() && !g->IsGraphInput(v.get()) && !v->uses().empty()) {
      // Only an error if a node of a supported op reads it.
      if (ctx.unsupported.empty()) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, "value '", v->name(),
                     "' is used by ", v->uses()[0].node->Describe(), " but never defined");
      }
    }
  }
  return g;
}

}  // namespace

Result<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path, const ImportOptions& opts) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return Error(StatusCode::kNotFound, "ONNX model '", path, "' does not exist or is not a file");
  }
  KILN_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  onnx::ModelProto model;
  {
    google::protobuf::io::ArrayInputStream ais(bytes.data(), static_cast<int>(bytes.size()));
    google::protobuf::io::CodedInputStream cis(&ais);
    cis.SetTotalBytesLimit(INT32_MAX);
    if (!model.ParseFromCodedStream(&cis) || !cis.ConsumedEntireMessage()) {
      return Error(StatusCode::kInvalidArgument, "'", path, "' is not a valid ONNX model (protobuf parse failed)");
    }
  }
  if (!model.has_graph()) return Error(StatusCode::kInvalidArgument, "'", path, "' has no graph");
  Ctx ctx;
  ctx.path = path;
  ctx.dir = fs::absolute(path).parent_path();
  for (const auto& imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") ctx.opset = static_cast<int>(imp.version());
  }
  if (ctx.opset == 0) return Error(StatusCode::kInvalidArgument, "'", path, "' imports no default-domain opset");
  if (ctx.opset < kMinOpset || ctx.opset > kMaxOpset) {
    return Error(StatusCode::kUnimplemented, "'", path, "' uses ONNX opset ", ctx.opset,
                 "; Kiln supports opsets ", kMinOpset, " to ", kMaxOpset);
  }
  KILN_ASSIGN_OR_RETURN(auto g, ConvertGraph(model.graph(), nullptr, ctx, &opts));
  if (!ctx.unsupported.empty()) {
    std::string msg = StrCat("'", path, "' uses ", ctx.unsupported.size(), " unsupported operator(s):");
    for (auto& u : ctx.unsupported) msg += "\n  " + u;
    return Status(StatusCode::kUnimplemented, msg);
  }
  if (g->name().empty()) g->set_name(fs::path(path).stem().string());
  KILN_RETURN_IF_ERROR(g->TopologicalSort().WithContext(path));
  KILN_RETURN_IF_ERROR(g->Verify().WithContext(path));
  return g;
}

Result<std::map<std::string, Shape>> ParseInputShapes(const std::string& spec) {
  std::map<std::string, Shape> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    auto colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: '", item, "' is not NAME:d0,d1,...");
    }
    std::string name = item.substr(0, colon);
    Shape s;
    std::stringstream ds(item.substr(colon + 1));
    std::string d;
    while (std::getline(ds, d, ',')) {
      try {
        std::size_t used = 0;
        long long v = std::stoll(d, &used);
        if (used != d.size() || v < 0) throw std::invalid_argument(d);
        s.push_back(v);
      } catch (const std::exception&) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: dim '", d, "' of '", name,
                     "' is not a non-negative integer");
      }
    }
    out[name] = s;
  }
  return out;
}

}  // namespace kiln::onnx_frontend
