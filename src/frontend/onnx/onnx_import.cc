#include "frontend/onnx/onnx_import.h"

#include <cstdlib>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/checked.h"
#include "common/file.h"
#include "common/utf8.h"
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

// ---------------------------------------------------------------------------
// What a model may not contain: names that are not valid UTF-8 (everything
// Kiln writes is JSON), nodes of Kiln's own domains and Kiln's internal
// attributes ("kiln.*": e.g. FileConstant, kiln.sha256, kiln.activation).
// Checked on the whole proto, subgraphs included, before anything is built.

// Kiln's internal domain. "kiln.custom" is where registered custom ops live;
// a model may name it (custom ops are found by type in any other domain too).
bool IsInternalDomain(const std::string& d) {
  return d == "kiln" || (d.rfind("kiln.", 0) == 0 && d != "kiln.custom");
}

bool IsInternalAttribute(const std::string& name) { return name.rfind("kiln.", 0) == 0; }

Status CheckUtf8(const std::string& s, const Ctx& ctx, const std::string& what) {
  const std::size_t bad = FindInvalidUtf8(s);
  if (bad == std::string::npos) return Status::Ok();
  return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, what, " '", EscapeBytes(s),
               "' is not valid UTF-8 (byte ", bad, ")");
}

Status CheckTypeProtoNames(const onnx::ValueInfoProto& vi, const Ctx& ctx, const std::string& what) {
  KILN_RETURN_IF_ERROR(CheckUtf8(vi.name(), ctx, what + " name"));
  if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape()) {
    for (const auto& d : vi.type().tensor_type().shape().dim()) {
      if (d.has_dim_param()) {
        KILN_RETURN_IF_ERROR(CheckUtf8(d.dim_param(), ctx, StrCat(what, " '", vi.name(), "': dim_param")));
      }
    }
  }
  return Status::Ok();
}

Status CheckGraphProto(const onnx::GraphProto& gp, Ctx& ctx) {
  KILN_RETURN_IF_ERROR(CheckUtf8(gp.name(), ctx, "graph name"));
  for (const auto& t : gp.initializer()) KILN_RETURN_IF_ERROR(CheckUtf8(t.name(), ctx, "initializer name"));
  for (const auto& vi : gp.input()) KILN_RETURN_IF_ERROR(CheckTypeProtoNames(vi, ctx, "graph input"));
  for (const auto& vi : gp.output()) KILN_RETURN_IF_ERROR(CheckTypeProtoNames(vi, ctx, "graph output"));
  for (const auto& vi : gp.value_info()) KILN_RETURN_IF_ERROR(CheckTypeProtoNames(vi, ctx, "value_info"));
  int counter = 0;
  for (const auto& np : gp.node()) {
    KILN_RETURN_IF_ERROR(CheckUtf8(np.name(), ctx, "node name"));
    KILN_RETURN_IF_ERROR(CheckUtf8(np.op_type(), ctx, StrCat("node '", np.name(), "': op type")));
    const std::string node_name = np.name().empty() ? StrCat(np.op_type(), "_", counter) : np.name();
    ++counter;
    const std::string what = StrCat(np.op_type(), " node '", node_name, "'");
    KILN_RETURN_IF_ERROR(CheckUtf8(np.domain(), ctx, what + ": domain"));
    if (IsInternalDomain(np.domain())) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, what, " is in domain '", np.domain(),
                   "', which is internal to Kiln and may not appear in a model");
    }
    for (const auto& s : np.input()) KILN_RETURN_IF_ERROR(CheckUtf8(s, ctx, what + ": input name"));
    for (const auto& s : np.output()) KILN_RETURN_IF_ERROR(CheckUtf8(s, ctx, what + ": output name"));
    for (const auto& ap : np.attribute()) {
      KILN_RETURN_IF_ERROR(CheckUtf8(ap.name(), ctx, what + ": attribute name"));
      if (IsInternalAttribute(ap.name())) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, what, ": attribute '", ap.name(),
                     "' is internal to Kiln and may not appear in a model");
      }
      const std::string aw = StrCat(what, ": attribute '", ap.name(), "'");
      if (ap.type() == onnx::AttributeProto::STRING || !ap.s().empty()) {
        KILN_RETURN_IF_ERROR(CheckUtf8(ap.s(), ctx, aw + " value"));
      }
      for (const auto& s : ap.strings()) KILN_RETURN_IF_ERROR(CheckUtf8(s, ctx, aw + " value"));
      const std::string outer = ctx.scope;
      ctx.scope += aw + ": ";
      if (ap.has_g()) KILN_RETURN_IF_ERROR(CheckGraphProto(ap.g(), ctx));
      for (const auto& sg : ap.graphs()) KILN_RETURN_IF_ERROR(CheckGraphProto(sg, ctx));
      ctx.scope = outer;
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Tensors. The declared dims and type are checked (CheckedTensorBytes) before
// anything is allocated or read; the data must then be exactly that long.

// A zero-filled tensor; an allocation failure is an error naming `what`.
Result<std::shared_ptr<HostTensor>> AllocTensor(DType dtype, const Shape& shape, const std::string& what) {
  try {
    return std::make_shared<HostTensor>(dtype, shape);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, what, ": cannot allocate ",
                 static_cast<std::uint64_t>(NumElements(shape)) * DTypeSize(dtype), " bytes for ",
                 DTypeName(dtype), ShapeToString(shape));
  }
}

// A non-negative decimal integer (no sign, no spaces), overflow-checked.
bool ParseDecimal(const std::string& s, std::int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (!CheckedMul(v, 10, &v) || !CheckedAdd(v, c - '0', &v)) return false;
  }
  *out = v;
  return true;
}

// ONNX external data (TensorProto.data_location = EXTERNAL): `location`
// relative to the model's directory (resolved inside it: no absolute path,
// no "..", no symlink leading out), `offset` and `length` in bytes. Nothing
// else is honoured.
Status ReadExternalData(const onnx::TensorProto& tp, const Ctx& ctx, const std::string& what, std::int64_t nbytes,
                        void* dst) {
  std::string location;
  bool has_location = false;
  std::int64_t offset = 0, length = nbytes;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
      has_location = true;
    } else if (kv.key() == "offset" || kv.key() == "length") {
      if (!ParseDecimal(kv.value(), kv.key() == "offset" ? &offset : &length)) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data '", kv.key(), "' = '",
                     EscapeBytes(kv.value()), "' is not a non-negative 64-bit integer");
      }
    }
  }
  if (!has_location || location.empty()) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data has no 'location'");
  }
  if (location.find('\0') != std::string::npos) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data location '",
                 EscapeBytes(location), "' contains a NUL byte");
  }
  if (length != nbytes) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data length ", length,
                 " does not match ", nbytes, " bytes for ", DTypeName(static_cast<DType>(tp.data_type())),
                 ShapeToString(Shape(tp.dims().begin(), tp.dims().end())));
  }
  KILN_ASSIGN_OR_RETURN(fs::path file, weights::ResolveInside(ctx.dir, location, ctx.path + ": " + what));
  KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(file.string(), ctx.path + ": " + what + ": external data"));
  std::int64_t end = 0;
  if (!CheckedAdd(offset, nbytes, &end) || end > f.size) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": external data [offset ", offset, ", +",
                 nbytes, " bytes) exceeds '", file.string(), "' (", f.size, " bytes)");
  }
  if (nbytes == 0) return Status::Ok();
  return PreadExact(f.fd.get(), dst, nbytes, offset, StrCat(ctx.path, ": ", what, ": external data '", file.string(), "'"));
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
  // Declared size first: nothing is allocated or read for a shape that
  // overflows or exceeds the limit.
  KILN_ASSIGN_OR_RETURN(const std::int64_t nbytes_checked, CheckedTensorBytes(dtype, shape, ctx.path + ": " + what));
  const std::int64_t n = NumElements(shape);
  const auto nbytes = static_cast<std::size_t>(nbytes_checked);
  auto count_error = [&](std::size_t found) {
    return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " has ", found,
                 " elements of data, shape ", ShapeToString(shape), " needs ", n);
  };
  // The data's length must match before the tensor is even allocated.
  if (tp.data_location() != onnx::TensorProto::EXTERNAL) {
    std::int64_t found = 0;
    if (tp.has_raw_data()) {
      if (tp.raw_data().size() != nbytes) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, " has ", tp.raw_data().size(),
                     " bytes of raw data, ", DTypeName(dtype), ShapeToString(shape), " needs ", nbytes);
      }
    } else {
      switch (dtype) {
        case DType::kFloat32: found = tp.float_data_size(); break;
        case DType::kFloat64: found = tp.double_data_size(); break;
        case DType::kInt64: found = tp.int64_data_size(); break;
        case DType::kUInt32: case DType::kUInt64: found = tp.uint64_data_size(); break;
        default: found = tp.int32_data_size(); break;
      }
      if (found != n) return count_error(static_cast<std::size_t>(found));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto t, AllocTensor(dtype, shape, ctx.path + ": " + what));
  auto* out = static_cast<std::uint8_t*>(t->mutable_data());
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    KILN_RETURN_IF_ERROR(ReadExternalData(tp, ctx, what, nbytes_checked, out));
    return HostTensorPtr(t);
  }
  if (tp.has_raw_data()) {
    if (nbytes) std::memcpy(out, tp.raw_data().data(), nbytes);
    return HostTensorPtr(t);
  }
  switch (dtype) {
    case DType::kFloat32: CopyConvert(tp.float_data(), reinterpret_cast<float*>(out)); break;
    case DType::kFloat64: CopyConvert(tp.double_data(), reinterpret_cast<double*>(out)); break;
    case DType::kInt64: CopyConvert(tp.int64_data(), reinterpret_cast<std::int64_t*>(out)); break;
    case DType::kUInt32: CopyConvert(tp.uint64_data(), reinterpret_cast<std::uint32_t*>(out)); break;
    case DType::kUInt64: CopyConvert(tp.uint64_data(), reinterpret_cast<std::uint64_t*>(out)); break;
    case DType::kInt32: CopyConvert(tp.int32_data(), reinterpret_cast<std::int32_t*>(out)); break;
    case DType::kInt16: CopyConvert(tp.int32_data(), reinterpret_cast<std::int16_t*>(out)); break;
    case DType::kUInt16: case DType::kFloat16: case DType::kBFloat16:
      CopyConvert(tp.int32_data(), reinterpret_cast<std::uint16_t*>(out)); break;
    case DType::kInt8: CopyConvert(tp.int32_data(), reinterpret_cast<std::int8_t*>(out)); break;
    case DType::kUInt8: case DType::kBool: CopyConvert(tp.int32_data(), reinterpret_cast<std::uint8_t*>(out)); break;
    default: return Error(StatusCode::kInternal, what, ": unhandled dtype ", DTypeName(dtype));
  }
  return HostTensorPtr(t);
}

// A graph input's declared (or --input-shape) shape: known dims within
// 0..kMaxTensorBytes, dtype x shape within the limit.
Status CheckInputShape(const ir::Value& v, const std::string& what) {
  for (std::size_t d = 0; d < v.shape().size(); ++d) {
    if (v.shape()[d] > kMaxTensorBytes) {
      return Error(StatusCode::kOutOfRange, what, ": dim ", d, " of shape ", ShapeToString(v.shape()),
                   " is larger than Kiln's limit of ", kMaxTensorBytes, " bytes per tensor allows");
    }
  }
  return CheckShapeSize(v.dtype(), v.shape(), what);
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

// Gears from --input-shape: signature k takes the k-th gear of every input
// that lists gears; the other inputs' symbolic dims follow from the symbols
// those fix. The signatures (one shape per graph input) go to Graph::gears;
// without any range given, they are the only admissible ones.
Status SetGears(ir::Graph& g, const std::map<std::string, ir::InputSpec>& specs, const std::string& path) {
  std::size_t count = 0;
  bool ranged = false;
  std::string first;
  for (auto& [name, sp] : specs) {
    ranged = ranged || sp.ranged;
    if (sp.gears.empty()) continue;
    if (count != 0 && sp.gears.size() != count) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: '", name, "' has ", sp.gears.size(),
                   " gears but '", first, "' has ", count, "; every input with gears lists the same number");
    }
    if (sp.gears.size() > ir::kMaxGears) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: '", name, "' has ", sp.gears.size(),
                   " gears; at most ", ir::kMaxGears);
    }
    count = sp.gears.size();
    if (first.empty()) first = name;
  }
  if (count == 0) return Status::Ok();
  for (std::size_t k = 0; k < count; ++k) {
    std::map<std::string, std::pair<std::int64_t, std::string>> assign;
    for (const ir::Value* v : g.inputs()) {
      auto it = specs.find(v->name());
      if (it == specs.end() || it->second.gears.empty()) continue;
      const Shape& gs = it->second.gears[k];
      if (gs.size() != v->shape().size()) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: gear ", k, " of '", v->name(), "' has rank ",
                     gs.size(), ", the input has rank ", v->shape().size());
      }
      KILN_RETURN_IF_ERROR(
          CheckShapeSize(v->dtype(), gs, StrCat("--input-shape: gear ", k, " of '", v->name(), "'")));
      for (std::size_t d = 0; d < gs.size(); ++d) {
        if (v->shape()[d] >= 0) {
          if (gs[d] != v->shape()[d]) {
            return Error(StatusCode::kInvalidArgument, "--input-shape: gear ", k, " of '", v->name(), "' has dim ", d,
                         " = ", gs[d], ", but the model fixes it to ", v->shape()[d]);
          }
          continue;
        }
        const std::string& sym = v->dim_params()[d];
        const std::string who = StrCat("'", v->name(), "' dim ", d);
        auto [a, added] = assign.emplace(sym, std::make_pair(gs[d], who));
        if (!added && a->second.first != gs[d]) {
          return Error(StatusCode::kInvalidArgument, "--input-shape: gear ", k, " gives symbol '", sym, "' ",
                       gs[d], " at ", who, " but ", a->second.first, " at ", a->second.second);
        }
        auto r = g.symbols().find(sym);
        if (r != g.symbols().end() && (gs[d] < r->second.min || (r->second.max >= 0 && gs[d] > r->second.max))) {
          return Error(StatusCode::kInvalidArgument, "--input-shape: gear ", k, " gives symbol '", sym, "' ", gs[d],
                       " at ", who, ", outside its range ", ir::RangeText(r->second));
        }
      }
    }
    std::vector<Shape> sig;
    for (const ir::Value* v : g.inputs()) {
      Shape s = v->shape();
      for (std::size_t d = 0; d < s.size(); ++d) {
        if (s[d] >= 0) continue;
        const std::string& sym = d < v->dim_params().size() ? v->dim_params()[d] : std::string();
        auto fixed = g.symbols().find(sym);
        if (!sym.empty() && fixed != g.symbols().end() && fixed->second.max == fixed->second.min) {
          s[d] = fixed->second.min;  // fixed by another input's exact shape
          continue;
        }
        auto a = assign.find(sym);
        if (sym.empty() || a == assign.end()) {
          return Error(StatusCode::kInvalidArgument, path, ": --input-shape: gear ", k, " leaves input '", v->name(),
                       "' dim ", d, sym.empty() ? std::string() : StrCat(" (symbol '", sym, "')"),
                       " open; give that input gears too");
        }
        s[d] = a->second.first;
      }
      sig.push_back(std::move(s));
    }
    // The same signature listed twice is planned once.
    if (std::find(g.gears().begin(), g.gears().end(), sig) == g.gears().end()) g.gears().push_back(std::move(sig));
  }
  g.set_gears_only(!ranged);
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

// Every attribute the ONNX schema of the node's op declares must have the
// declared type (a string where an int is expected is an error, not the
// default). Attributes the schema does not know are left to the op
// definition's check (an error naming the attribute).
Status CheckAttributeTypes(const onnx::NodeProto& np, const onnx::OpSchema& schema, const Ctx& ctx,
                           const std::string& what) {
  for (const auto& ap : np.attribute()) {
    auto it = schema.attributes().find(ap.name());
    if (it == schema.attributes().end()) continue;
    const auto expected = static_cast<onnx::AttributeProto::AttributeType>(it->second.type);
    if (ap.type() != expected) {
      return Error(StatusCode::kInvalidArgument, ctx.path, ": ", ctx.scope, what, ": attribute '", ap.name(),
                   "' must be of type ", onnx::AttributeProto::AttributeType_Name(expected), ", found ",
                   onnx::AttributeProto::AttributeType_IsValid(ap.type())
                       ? onnx::AttributeProto::AttributeType_Name(ap.type())
                       : StrCat("type ", static_cast<int>(ap.type())));
    }
  }
  return Status::Ok();
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

// The symbols of a top-level input: each named dim (ONNX dim_param) whose
// extent is known (given by --input-shape) becomes symbol `name` of the
// graph with range [extent, extent]; unknown extents get no symbol here
// (InferShapesAndFold refuses them). A name Kiln cannot keep as a symbol
// loses it (the dims become unnamed, as before symbols existed): one longer
// than kMaxSymbolNameBytes, and one given two extents (ONNX says dims named
// alike are equal, but such models compiled before), collected in
// `conflicts` and dropped by DropSymbols once every input is read.
void RecordSymbols(ir::Value& v, ir::Graph& g, std::set<std::string>& conflicts) {
  auto& names = v.dim_params();
  if (names.size() != v.shape().size()) return;  // unknown rank
  for (std::size_t d = 0; d < names.size(); ++d) {
    const std::int64_t e = v.shape()[d];
    if (names[d].empty() || e < 0) continue;
    if (names[d].size() > ir::kMaxSymbolNameBytes) {
      names[d].clear();
      continue;
    }
    auto [it, added] = g.symbols().emplace(names[d], ir::SymbolRange{e, e});
    if (!added && it->second.min != e) conflicts.insert(names[d]);
  }
}

void DropSymbols(ir::Graph& g, const std::set<std::string>& names) {
  if (names.empty()) return;
  for (const std::string& n : names) g.symbols().erase(n);
  for (ir::Value* v : g.inputs()) {
    for (std::string& n : v->dim_params()) {
      if (names.count(n)) n.clear();
    }
  }
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
    KILN_ASSIGN_OR_RETURN(auto t, ConvertTensor(init, ctx, "initializer '" + init.name() + "'"));
    g->AddConstant(init.name(), t);
  }
  if (gp.sparse_initializer_size() > 0) {
    return Error(StatusCode::kUnimplemented, ctx.path, ": sparse initializers are not supported");
  }
  std::set<std::string> used_shape_overrides;
  std::set<std::string> symbol_conflicts;  // names given two extents
  // --input-shape: exact shapes, then ranges and gears; and the range each
  // symbol gets from them (with the first input dim that gave it).
  std::map<std::string, ir::InputSpec> specs;
  if (opts) {
    for (auto& [name, shape] : opts->input_shapes) {
      ir::InputSpec& sp = specs[name];
      for (std::int64_t e : shape) sp.dims.push_back(e < 0 ? ir::SymbolRange{1, -1} : ir::SymbolRange{e, e});
    }
    for (auto& [name, sp] : opts->input_specs) specs[name] = sp;
  }
  std::map<std::string, std::pair<ir::SymbolRange, std::string>> ranges;
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
      auto it = specs.find(in.name());
      if (it != specs.end()) {
        used_shape_overrides.insert(in.name());
        const ir::InputSpec& spec = it->second;
        const std::size_t rank = spec.dims.size();
        const Shape have = v->shape();
        bool unknown_rank = !v->dim_params().empty() && v->dim_params()[0] == "<unknown rank>";
        if (!unknown_rank && rank != have.size()) {
          return Error(StatusCode::kInvalidArgument, "--input-shape for '", in.name(), "': rank ",
                       rank, " given, the model's input has rank ", have.size(), " ",
                       ShapeToString(have));
        }
        // The dims keep their names (symbols, each fixed to the given
        // extent below, or ranging as given); an input declared without a
        // shape has none.
        auto& names = v->dim_params();
        if (unknown_rank) names.assign(rank, "");
        names.resize(rank);
        Shape s(rank);
        for (std::size_t i = 0; i < rank; ++i) {
          const ir::SymbolRange& r = spec.dims[i];
          const bool exact = r.max >= 0 && r.min == r.max;
          if (!unknown_rank && have[i] >= 0) {
            if (have[i] < r.min || (r.max >= 0 && have[i] > r.max)) {
              return Error(StatusCode::kInvalidArgument, "--input-shape for '", in.name(), "': dim ", i,
                           " is fixed to ", have[i], " in the model, ",
                           exact ? StrCat(r.min) : ir::RangeText(r), " given");
            }
            s[i] = have[i];
            continue;
          }
          if (exact) {
            s[i] = r.min;
            continue;
          }
          s[i] = -1;
          if (names[i].empty() || names[i].size() > ir::kMaxSymbolNameBytes) {
            names[i] = ir::DefaultSymbolName(in.name(), i);
          }
          const std::string who = StrCat("'", in.name(), "' dim ", i);
          auto [rit, added] = ranges.emplace(names[i], std::make_pair(r, who));
          if (!added) {  // another input's dim with the same symbol: both ranges hold
            ir::SymbolRange& both = rit->second.first;
            const ir::SymbolRange before = both;
            both.min = std::max(both.min, r.min);
            if (r.max >= 0) both.max = both.max < 0 ? r.max : std::min(both.max, r.max);
            if (both.max >= 0 && both.max < both.min) {
              return Error(StatusCode::kInvalidArgument, "--input-shape: symbol '", names[i], "' of ", who,
                           " ranges over ", ir::RangeText(r), " but ", rit->second.second,
                           " gives it ", ir::RangeText(before),
                           ": no extent satisfies both");
            }
          }
        }
        v->set_shape(std::move(s));
      }
    }
    KILN_RETURN_IF_ERROR(CheckInputShape(*v, StrCat(ctx.path, ": ", ctx.scope, "graph input '", in.name(), "'",
                                                    used_shape_overrides.count(in.name()) ? " (with --input-shape)" : "")));
    if (!parent) RecordSymbols(*v, *g, symbol_conflicts);
    g->inputs().push_back(v);
  }
  DropSymbols(*g, symbol_conflicts);
  // Ranges: a symbol fixed by another input's exact shape must lie in them.
  for (auto& [name, rw] : ranges) {
    if (symbol_conflicts.count(name)) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: symbol '", name, "' of ", rw.second,
                   " is given a range, but other inputs fix it to different extents");
    }
    auto it = g->symbols().find(name);
    if (it == g->symbols().end()) {
      g->symbols()[name] = rw.first;
      continue;
    }
    const ir::SymbolRange& r = rw.first;
    if (it->second.min < r.min || (r.max >= 0 && it->second.min > r.max)) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: symbol '", name, "' of ", rw.second,
                   " ranges over ", ir::RangeText(r),
                   " but another input fixes it to ", it->second.min);
    }
  }
  if (!parent) KILN_RETURN_IF_ERROR(SetGears(*g, specs, ctx.path));
  if (opts) {
    for (auto& [name, t] : opts->constant_inputs) {
      if (!used_shape_overrides.count(name)) {
        return Error(StatusCode::kInvalidArgument, "--const-input names '", name, "', which is not an input of the model");
      }
    }
    for (auto& [name, s] : specs) {
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
    const onnx::OpSchema* schema =
        default_domain ? onnx::OpSchemaRegistry::Schema(np.op_type(), ctx.opset, "") : nullptr;
    if (schema) KILN_RETURN_IF_ERROR(CheckAttributeTypes(np, *schema, ctx, what));
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
      // ONNX Runtime defines LayerNormalization in the ONNX domain for every
      // opset (version 1, the arithmetic opset 17 adopted); its optimizer
      // writes it into older models.
      const bool ort_layernorm = !schema && n->op_type() == "LayerNormalization" && ctx.opset < 17;
      if (!schema && !ort_layernorm) {
        return Error(StatusCode::kInvalidArgument, ctx.path, ": ", what, ": op '", n->op_type(),
                     "' does not exist in ONNX opset ", ctx.opset);
      }
      n->set_since_version(schema ? schema->SinceVersion() : 1);
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
    if (v->dtype() == DType::kUndefined && out.type().has_tensor_type() &&
        DTypeSupported(static_cast<DType>(out.type().tensor_type().elem_type()))) {
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
  KILN_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, "ONNX model", INT32_MAX));
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
  KILN_RETURN_IF_ERROR(CheckGraphProto(model.graph(), ctx));
  KILN_ASSIGN_OR_RETURN(auto g, ConvertGraph(model.graph(), nullptr, ctx, &opts));
  if (!ctx.unsupported.empty()) {
    std::string msg = StrCat("'", path, "' uses ", ctx.unsupported.size(), " unsupported operator(s):");
    bool custom_domain = false;
    for (auto& u : ctx.unsupported) {
      msg += "\n  " + u;
      custom_domain = custom_domain || u.find("(domain '") != std::string::npos;
    }
    if (custom_domain) {
      const char* env = std::getenv("KILN_CUSTOM_OP_PATH");
      msg += StrCat("\nops of other domains come from custom-op packages: none registers these (",
                    env ? StrCat("KILN_CUSTOM_OP_PATH=", env) : std::string("KILN_CUSTOM_OP_PATH is not set"), ")");
    }
    return Status(StatusCode::kUnimplemented, msg);
  }
  if (g->name().empty()) g->set_name(fs::path(path).stem().string());
  KILN_RETURN_IF_ERROR(g->TopologicalSort().WithContext(path));
  KILN_RETURN_IF_ERROR(g->Verify().WithContext(path));
  return g;
}

namespace {

// One extent of an --input-shape spec: a non-negative integer within
// Kiln's tensor limit.
Result<std::int64_t> ParseExtent(const std::string& t, const std::string& name, const std::string& dim) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(t, &used);
    if (used == t.size() && v >= 0 && v <= kMaxTensorBytes && !t.empty() && t[0] != '+' && t[0] != ' ') return v;
  } catch (const std::exception&) {
  }
  return Error(StatusCode::kInvalidArgument, "--input-shape: dim '", dim, "' of '", name,
               "' is not a non-negative integer, A..B, A.. or ? (extents up to ", kMaxTensorBytes, ")");
}

}  // namespace

Result<std::map<std::string, ir::InputSpec>> ParseInputSpecs(const std::string& spec) {
  std::map<std::string, ir::InputSpec> out;
  std::stringstream ss(spec);
  std::string item;
  std::size_t gear_count = 0;
  std::string gear_input;  // the first input with gears (for messages)
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    auto colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Error(StatusCode::kInvalidArgument, "--input-shape: '", item,
                   "' is not NAME:DIMS (DIMS: d0,d1,... with each d an extent N, a range A..B or A.., or ?; "
                   "alternatives separated by | are gears)");
    }
    std::string name = item.substr(0, colon);
    if (out.count(name)) return Error(StatusCode::kInvalidArgument, "--input-shape: '", name, "' is given twice");
    ir::InputSpec in;
    std::vector<ir::SymbolRange> range;
    bool have_range = false;
    std::stringstream as(item.substr(colon + 1));
    std::string alt;
    std::vector<std::string> alts;
    while (std::getline(as, alt, '|')) alts.push_back(alt);
    if (alts.empty()) alts.emplace_back();  // "x:" is a scalar
    if (!item.empty() && item.back() == '|') alts.emplace_back();
    for (const std::string& a : alts) {
      std::vector<ir::SymbolRange> dims;
      bool exact = true;
      std::stringstream ds(a);
      std::string d;
      while (std::getline(ds, d, ',')) {
        ir::SymbolRange r;
        const auto dots = d.find("..");
        if (d == "?") {
          r = ir::SymbolRange{1, -1};
        } else if (dots != std::string::npos) {
          KILN_ASSIGN_OR_RETURN(r.min, ParseExtent(d.substr(0, dots), name, d));
          const std::string hi = d.substr(dots + 2);
          if (hi.empty()) {
            r.max = -1;
          } else {
            KILN_ASSIGN_OR_RETURN(r.max, ParseExtent(hi, name, d));
            if (r.max < r.min) {
              return Error(StatusCode::kInvalidArgument, "--input-shape: range '", d, "' of '", name, "' is empty");
            }
          }
        } else {
          KILN_ASSIGN_OR_RETURN(std::int64_t v, ParseExtent(d, name, d));
          r = ir::SymbolRange{v, v};
        }
        exact = exact && r.max >= 0 && r.min == r.max;
        dims.push_back(r);
      }
      if (!a.empty() && a.back() == ',') {
        return Error(StatusCode::kInvalidArgument, "--input-shape: '", a, "' of '", name, "' ends with ','");
      }
      if (!in.gears.empty() && dims.size() != in.gears.front().size()) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: the alternatives of '", name,
                     "' differ in rank (", in.gears.front().size(), " and ", dims.size(), ")");
      }
      if (have_range && dims.size() != range.size()) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: the alternatives of '", name,
                     "' differ in rank (", range.size(), " and ", dims.size(), ")");
      }
      if (exact) {
        Shape s;
        for (const auto& r : dims) s.push_back(r.min);
        in.gears.push_back(std::move(s));
      } else {
        if (have_range) {
          return Error(StatusCode::kInvalidArgument, "--input-shape: '", name,
                       "' has two ranges; give one range and exact shapes (gears) as the other alternatives");
        }
        have_range = true;
        range = std::move(dims);
      }
    }
    if (in.gears.size() == 1 && !have_range) {
      // One exact shape: a fixed input, not a gear.
      for (std::int64_t e : in.gears.front()) in.dims.push_back(ir::SymbolRange{e, e});
      in.gears.clear();
    } else if (have_range) {
      in.dims = std::move(range);
      in.ranged = true;
      for (const Shape& gs : in.gears) {
        for (std::size_t k = 0; k < gs.size(); ++k) {
          const ir::SymbolRange& r = in.dims[k];
          if (gs[k] < r.min || (r.max >= 0 && gs[k] > r.max)) {
            return Error(StatusCode::kInvalidArgument, "--input-shape: gear ", ShapeToString(gs), " of '", name,
                         "' has dim ", k, " = ", gs[k], ", outside the range given for it");
          }
        }
      }
    } else {
      // Gears only: each dim ranges over its gears' extents (fixed where all agree).
      in.dims.assign(in.gears.front().size(), ir::SymbolRange{kMaxTensorBytes, 0});
      for (const Shape& gs : in.gears) {
        for (std::size_t k = 0; k < gs.size(); ++k) {
          in.dims[k].min = std::min(in.dims[k].min, gs[k]);
          in.dims[k].max = std::max(in.dims[k].max, gs[k]);
        }
      }
    }
    if (!in.gears.empty()) {
      if (in.gears.size() > ir::kMaxGears) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: '", name, "' has ", in.gears.size(),
                     " gears; at most ", ir::kMaxGears);
      }
      if (gear_count != 0 && in.gears.size() != gear_count) {
        return Error(StatusCode::kInvalidArgument, "--input-shape: '", name, "' has ", in.gears.size(),
                     " gears but '", gear_input, "' has ", gear_count,
                     "; every input with gears lists the same number (gear k combines the k-th of each)");
      }
      gear_count = in.gears.size();
      if (gear_input.empty()) gear_input = name;
    }
    out[name] = std::move(in);
  }
  return out;
}

}  // namespace kiln::onnx_frontend
