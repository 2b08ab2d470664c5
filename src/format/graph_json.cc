#include "format/graph_json.h"

#include <algorithm>
#include <limits>
#include <new>

#include <nlohmann/json.hpp>

#include "common/checked.h"

namespace kiln::format {
namespace {

using nlohmann::json;

std::string ToHex(const void* data, std::size_t n) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::string s(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

Status FromHex(const std::string& s, std::uint8_t* out, std::size_t n) {
  if (s.size() != 2 * n) return Error(StatusCode::kCorrupt, "hex data has ", s.size() / 2, " bytes, expected ", n);
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return Error(StatusCode::kCorrupt, "bad hex digit in tensor data");
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return Status::Ok();
}

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// above U+10FFFF): nlohmann's dump throws on anything else.
bool ValidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (n - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    static const std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Printable form of a string that may not be UTF-8 (non-ASCII bytes as \xNN).
std::string Printable(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

// Finds the first object key or string in `j` that is not valid UTF-8 and
// describes it ("string 'a\xff' at graph.values[2].name").
bool FindInvalidUtf8(const json& j, const std::string& path, std::string* what) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (ValidUtf8(s)) return false;
    *what = StrCat("string '", Printable(s), "' at ", path.empty() ? std::string("top level") : path);
    return true;
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!ValidUtf8(it.key())) {
        *what = StrCat("name '", Printable(it.key()), "' (a key of ", path.empty() ? std::string("top level") : path, ")");
        return true;
      }
      if (FindInvalidUtf8(it.value(), path.empty() ? it.key() : StrCat(path, ".", it.key()), what)) return true;
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (FindInvalidUtf8(j[i], StrCat(path, "[", i, "]"), what)) return true;
    }
  }
  return false;
}

json TensorToJson(const HostTensor& t) {
  return json{{"dtype", static_cast<int>(t.dtype())}, {"shape", t.shape()},
              {"hex", ToHex(t.data(), t.nbytes())}};
}

json GraphToJson(const ir::Graph& g, const plan::MemoryPlan* plan);

json AttrToJson(const ir::Attribute& a) {
  using K = ir::Attribute::Kind;
  json j{{"kind", ir::AttributeKindName(a.kind)}};
  switch (a.kind) {
    case K::kFloat: j["v"] = a.f; break;
    case K::kInt: j["v"] = a.i; break;
    case K::kString: j["v"] = a.s; break;
    case K::kFloats: j["v"] = a.floats; break;
    case K::kInts: j["v"] = a.ints; break;
    case K::kStrings: j["v"] = a.strings; break;
    case K::kTensor: j["v"] = TensorToJson(*a.t); break;
    case K::kTensors: {
      json arr = json::array();
      for (auto& t : a.tensors) arr.push_back(TensorToJson(*t));
      j["v"] = arr;
      break;
    }
    case K::kGraph: j["v"] = GraphToJson(*a.g, nullptr); break;
    case K::kGraphs: {
      json arr = json::array();
      for (auto& sg : a.graphs) arr.push_back(GraphToJson(*sg, nullptr));
      j["v"] = arr;
      break;
    }
    default: break;
  }
  return j;
}

json GraphToJson(const ir::Graph& g, const plan::MemoryPlan* plan) {
  json values = json::array();
  for (auto& v : g.values()) {
    json jv{{"name", v->name()}, {"dtype", static_cast<int>(v->dtype())}, {"shape", v->shape()}};
    if (v->is_dynamic()) jv["dynamic"] = v->dynamic_mask();
    if (v->symbolic_mask()) jv["symbolic"] = v->symbolic_mask();  // format version 6
    if (v->shape_input()) jv["shape_input"] = true;                // format version 8
    const auto& sym = v->dim_params();
    if (std::any_of(sym.begin(), sym.end(), [](const std::string& s) { return !s.empty(); })) {
      jv["sym"] = sym;  // format version 6
    }
    if (v->is_constant()) {
      if (plan) {
        const plan::Placement& p = plan->placements.at(v->name());
        jv["const"] = json{{"offset", p.offset}, {"size", p.size}};
      } else {
        jv["const"] = TensorToJson(*v->constant());
      }
    }
    values.push_back(jv);
  }
  json nodes = json::array();
  for (auto& n : g.nodes()) {
    json ins = json::array(), outs = json::array(), attrs = json::object();
    for (ir::Value* in : n->inputs()) ins.push_back(in ? in->name() : "");
    for (ir::Value* o : n->outputs()) outs.push_back(o->name());
    for (auto& [k, a] : n->attrs()) attrs[k] = AttrToJson(a);
    nodes.push_back(json{{"name", n->name()}, {"op", n->op_type()}, {"domain", n->domain()},
                         {"since", n->since_version()}, {"inputs", ins}, {"outputs", outs},
                         {"attrs", attrs}});
  }
  json ins = json::array(), outs = json::array();
  for (ir::Value* v : g.inputs()) ins.push_back(v->name());
  for (ir::Value* v : g.outputs()) outs.push_back(v->name());
  json jg{{"name", g.name()}, {"opset", g.opset()}, {"values", values},
          {"nodes", nodes}, {"inputs", ins}, {"outputs", outs}};
  if (!g.symbols().empty()) {  // format version 6 (top-level graph only)
    json syms = json::object();
    for (auto& [name, r] : g.symbols()) syms[name] = json::array({r.min, r.max});
    jg["symbols"] = syms;
  }
  if (!g.gears().empty()) {  // format version 7 (top-level graph only)
    json gears = json::array();
    for (const auto& sig : g.gears()) {
      json js = json::array();
      for (const Shape& s : sig) js.push_back(s);
      gears.push_back(js);
    }
    jg["gears"] = gears;
    jg["gears_only"] = g.gears_only();
  }
  return jg;
}

// ---- parsing ---------------------------------------------------------------
//
// The graph partition is untrusted input. Every field is read through the
// accessors below: a missing field or one of the wrong JSON type is a kCorrupt
// error naming the field's path (e.g. "graph.values[3].shape"); nothing here
// throws. Semantic checks (roles, placements, inference) follow in
// plan::VerifyPlan and at Model::Load.

// Nesting limit for subgraph attributes (If inside If inside ...).
constexpr int kMaxGraphDepth = 32;

template <typename... Args>
Status Corrupt(const Args&... args) {
  return Error(StatusCode::kCorrupt, args...);
}

Status TypeError(const std::string& path, const char* expected, const json& j) {
  return Corrupt("field '", path, "' must be ", expected, ", found ", j.type_name());
}

Result<const json*> Field(const json& obj, const std::string& path, const char* key) {
  if (!obj.is_object()) {
    if (path.empty()) return Corrupt("the graph partition must be a JSON object, found ", obj.type_name());
    return TypeError(path, "an object", obj);
  }
  auto it = obj.find(key);
  if (it == obj.end()) return Corrupt("field '", path.empty() ? std::string(key) : StrCat(path, ".", key), "' is missing");
  return &*it;
}

Result<std::string> AsString(const json& j, const std::string& path) {
  if (!j.is_string()) return TypeError(path, "a string", j);
  return j.get_ref<const std::string&>();
}

Result<std::int64_t> AsInt(const json& j, const std::string& path) {
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<std::int64_t>();
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(u);
    return Corrupt("field '", path, "' = ", u, " does not fit in a signed 64-bit integer");
  }
  return TypeError(path, "an integer", j);
}

Result<int> AsInt32(const json& j, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::int64_t v, AsInt(j, path));
  if (v < INT32_MIN || v > INT32_MAX) return Corrupt("field '", path, "' = ", v, " does not fit in a 32-bit integer");
  return static_cast<int>(v);
}

Result<std::uint64_t> AsUInt(const json& j, const std::string& path) {
  if (j.is_number_unsigned()) return j.get<std::uint64_t>();
  if (j.is_number_integer()) return Corrupt("field '", path, "' = ", j.get<std::int64_t>(), " is negative");
  return TypeError(path, "a non-negative integer", j);
}

Result<float> AsFloat(const json& j, const std::string& path) {
  if (j.is_null()) return std::numeric_limits<float>::quiet_NaN();  // the writer's form of NaN/inf
  if (!j.is_number()) return TypeError(path, "a number", j);
  return static_cast<float>(j.get<double>());
}

Result<const json*> AsArray(const json& j, const std::string& path) {
  if (!j.is_array()) return TypeError(path, "an array", j);
  return &j;
}

std::string At(const std::string& path, std::size_t i) { return StrCat(path, "[", i, "]"); }
std::string Dot(const std::string& path, const char* key) { return path.empty() ? std::string(key) : StrCat(path, ".", key); }

Result<std::string> StrField(const json& o, const std::string& path, const char* key) {
  KILN_ASSIGN_OR_RETURN(const json* j, Field(o, path, key));
  return AsString(*j, Dot(path, key));
}
Result<int> Int32Field(const json& o, const std::string& path, const char* key) {
  KILN_ASSIGN_OR_RETURN(const json* j, Field(o, path, key));
  return AsInt32(*j, Dot(path, key));
}
Result<std::uint64_t> UIntField(const json& o, const std::string& path, const char* key) {
  KILN_ASSIGN_OR_RETURN(const json* j, Field(o, path, key));
  return AsUInt(*j, Dot(path, key));
}
Result<const json*> ArrayField(const json& o, const std::string& path, const char* key) {
  KILN_ASSIGN_OR_RETURN(const json* j, Field(o, path, key));
  return AsArray(*j, Dot(path, key));
}

Result<Shape> AsShape(const json& j, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(const json* arr, AsArray(j, path));
  Shape s;
  s.reserve(arr->size());
  for (std::size_t i = 0; i < arr->size(); ++i) {
    KILN_ASSIGN_OR_RETURN(std::int64_t d, AsInt((*arr)[i], At(path, i)));
    s.push_back(d);
  }
  return s;
}

template <typename T, typename F>
Result<std::vector<T>> AsList(const json& j, const std::string& path, F one) {
  KILN_ASSIGN_OR_RETURN(const json* arr, AsArray(j, path));
  std::vector<T> out;
  out.reserve(arr->size());
  for (std::size_t i = 0; i < arr->size(); ++i) {
    KILN_ASSIGN_OR_RETURN(T v, one((*arr)[i], At(path, i)));
    out.push_back(std::move(v));
  }
  return out;
}

// dtype code -> a dtype Kiln can hold, else an error naming `what`.
Result<DType> DTypeOf(int code, const std::string& what) {
  const auto t = static_cast<DType>(code);
  if (!DTypeSupported(t)) return Corrupt(what, " has invalid dtype ", code);
  return t;
}

// Inline tensor (subgraph constants, tensor attributes): dtype, shape, hex.
// The size is checked and the hex text's length compared with it before
// anything is allocated.
Result<HostTensorPtr> TensorFromJson(const json& j, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(int code, Int32Field(j, path, "dtype"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeOf(code, StrCat("tensor '", path, "'")));
  KILN_ASSIGN_OR_RETURN(const json* js, Field(j, path, "shape"));
  KILN_ASSIGN_OR_RETURN(Shape shape, AsShape(*js, Dot(path, "shape")));
  auto bytes = CheckedTensorBytes(dtype, shape, StrCat("tensor '", path, "'"));
  if (!bytes.ok()) return Corrupt(bytes.status().message());
  KILN_ASSIGN_OR_RETURN(const json* jh, Field(j, path, "hex"));
  if (!jh->is_string()) return TypeError(Dot(path, "hex"), "a string", *jh);
  const std::string& hex = jh->get_ref<const std::string&>();
  const auto n = static_cast<std::size_t>(bytes.value());
  if (hex.size() != 2 * n) {
    return Corrupt("tensor '", path, "': hex data has ", hex.size(), " digits, expected ", 2 * n, " for ",
                   DTypeName(dtype), ShapeToString(shape));
  }
  auto t = std::make_shared<HostTensor>(dtype, shape);
  Status st = FromHex(hex, static_cast<std::uint8_t*>(t->mutable_data()), n);
  if (!st.ok()) return Corrupt("tensor '", path, "': ", st.message());
  return HostTensorPtr(t);
}

struct ParseCtx {
  const std::uint8_t* weights;
  std::uint64_t weights_size;
  std::shared_ptr<const void> owner;
  bool file_pages = false;
};

Result<std::unique_ptr<ir::Graph>> GraphFromJson(const json& j, ir::Graph* parent, const ParseCtx& ctx,
                                                 const std::string& path, int depth);

Result<ir::Attribute> AttrFromJson(const json& j, ir::Graph* owner, const ParseCtx& ctx, const std::string& path,
                                   int depth) {
  using K = ir::Attribute::Kind;
  ir::Attribute a;
  KILN_ASSIGN_OR_RETURN(std::string kind, StrField(j, path, "kind"));
  KILN_ASSIGN_OR_RETURN(const json* jv, Field(j, path, "v"));
  const json& v = *jv;
  const std::string vp = Dot(path, "v");
  if (kind == "float") {
    a.kind = K::kFloat;
    KILN_ASSIGN_OR_RETURN(a.f, AsFloat(v, vp));
  } else if (kind == "int") {
    a.kind = K::kInt;
    KILN_ASSIGN_OR_RETURN(a.i, AsInt(v, vp));
  } else if (kind == "string") {
    a.kind = K::kString;
    KILN_ASSIGN_OR_RETURN(a.s, AsString(v, vp));
  } else if (kind == "floats") {
    a.kind = K::kFloats;
    KILN_ASSIGN_OR_RETURN(a.floats, AsList<float>(v, vp, AsFloat));
  } else if (kind == "ints") {
    a.kind = K::kInts;
    KILN_ASSIGN_OR_RETURN(a.ints, AsList<std::int64_t>(v, vp, AsInt));
  } else if (kind == "strings") {
    a.kind = K::kStrings;
    KILN_ASSIGN_OR_RETURN(a.strings, AsList<std::string>(v, vp, AsString));
  } else if (kind == "tensor") {
    a.kind = K::kTensor;
    KILN_ASSIGN_OR_RETURN(a.t, TensorFromJson(v, vp));
  } else if (kind == "tensors") {
    a.kind = K::kTensors;
    KILN_ASSIGN_OR_RETURN(a.tensors, AsList<HostTensorPtr>(v, vp, TensorFromJson));
  } else if (kind == "graph" || kind == "graphs") {
    if (depth + 1 > kMaxGraphDepth) {
      return Corrupt("field '", path, "': subgraphs nested more than ", kMaxGraphDepth, " deep");
    }
    if (kind == "graph") {
      a.kind = K::kGraph;
      KILN_ASSIGN_OR_RETURN(auto g, GraphFromJson(v, owner, ctx, vp, depth + 1));
      a.g = std::move(g);
    } else {
      a.kind = K::kGraphs;
      KILN_ASSIGN_OR_RETURN(const json* arr, AsArray(v, vp));
      for (std::size_t i = 0; i < arr->size(); ++i) {
        KILN_ASSIGN_OR_RETURN(auto g, GraphFromJson((*arr)[i], owner, ctx, At(vp, i), depth + 1));
        a.graphs.push_back(std::move(g));
      }
    }
  } else {
    return Corrupt("field '", path, ".kind': unknown attribute kind '", kind, "'");
  }
  return a;
}

// One value: name, dtype, shape, optional dynamic mask and constant data.
// Top-level constants live in the weights partition ({offset, size});
// constants of subgraphs are inline ({dtype, shape, hex}).
Status ValueFromJson(const json& jv, ir::Graph& g, const ParseCtx& ctx, const std::string& path, int depth) {
  KILN_ASSIGN_OR_RETURN(std::string name, StrField(jv, path, "name"));
  if (name.empty()) return Corrupt("field '", path, ".name': a value has an empty name");
  if (g.FindValue(name)) return Corrupt("duplicate value '", name, "' (", path, ")");
  const std::string what = StrCat("value '", name, "'");
  auto ctx_err = [&](const Status& st) { return Corrupt(what, ": ", st.message()); };
  auto code = Int32Field(jv, path, "dtype");
  if (!code.ok()) return ctx_err(code.status());
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeOf(code.value(), what));
  auto js = Field(jv, path, "shape");
  if (!js.ok()) return ctx_err(js.status());
  auto shape = AsShape(*js.value(), Dot(path, "shape"));
  if (!shape.ok()) return ctx_err(shape.status());
  auto bytes = CheckedTensorBytes(dtype, shape.value(), what);
  if (!bytes.ok()) return Corrupt(bytes.status().message());
  ir::Value* v = g.AddValue(name, dtype, shape.value());
  // A dims mask ("dynamic"; "symbolic", format version 6, which the loader
  // re-infers in ReinferGraph): absent is 0; it names dims within the rank.
  auto mask_field = [&](const char* key, const char* kind) -> Result<std::uint64_t> {
    if (!jv.contains(key)) return std::uint64_t{0};
    auto mask = UIntField(jv, path, key);
    if (!mask.ok()) return ctx_err(mask.status());
    const std::size_t rank = shape.value().size();
    if (rank < 64 && (mask.value() >> rank) != 0) {
      return Corrupt(what, ": ", kind, " dims mask ", mask.value(), " names dims beyond its rank ", rank);
    }
    return mask.value();
  };
  KILN_ASSIGN_OR_RETURN(std::uint64_t dynamic, mask_field("dynamic", "data-dependent"));
  KILN_ASSIGN_OR_RETURN(std::uint64_t symbolic, mask_field("symbolic", "symbolic"));
  v->set_dynamic_mask(dynamic);
  v->set_symbolic_mask(symbolic);
  if (jv.contains("shape_input")) {  // format version 8: checked by plan::VerifyPlan and the loader's inference
    const std::string sp = Dot(path, "shape_input");
    if (!jv.at("shape_input").is_boolean()) return TypeError(sp, "a boolean", jv.at("shape_input"));
    v->set_shape_input(jv.at("shape_input").get<bool>());
  }
  if (jv.contains("sym")) {  // format version 6: names checked by plan::VerifyPlan
    auto sym = AsList<std::string>(jv.at("sym"), Dot(path, "sym"), AsString);
    if (!sym.ok()) return ctx_err(sym.status());
    if (sym.value().size() != shape.value().size()) {  // (an empty list would read as "no names")
      return Corrupt(what, ": sym has ", sym.value().size(), " names, expected ", shape.value().size(),
                     " (one per dim of ", DTypeName(dtype), ShapeToString(shape.value()), ")");
    }
    v->dim_params() = std::move(sym).value();
  }
  if (!jv.contains("const")) return Status::Ok();
  const json& c = jv.at("const");
  const std::string cp = Dot(path, "const");
  if (!c.is_object()) return ctx_err(TypeError(cp, "an object", c));
  if (depth > 0) {
    if (!c.contains("hex")) return Corrupt(what, ": a subgraph constant must hold its data inline (", cp, ".hex)");
    auto t = TensorFromJson(c, cp);
    if (!t.ok()) return ctx_err(t.status());
    if (t.value()->dtype() != dtype || t.value()->shape() != shape.value()) {
      return Corrupt(what, " is declared ", DTypeName(dtype), ShapeToString(shape.value()), " but its data is ",
                     DTypeName(t.value()->dtype()), ShapeToString(t.value()->shape()));
    }
    v->set_constant(t.value());
    return Status::Ok();
  }
  if (c.contains("hex")) {
    return Corrupt(what, ": a top-level constant must live in the weights partition, not inline (", cp, ".hex)");
  }
  auto offset = UIntField(c, cp, "offset");
  if (!offset.ok()) return ctx_err(offset.status());
  auto size = UIntField(c, cp, "size");
  if (!size.ok()) return ctx_err(size.status());
  const auto expected = static_cast<std::uint64_t>(bytes.value());
  if (size.value() != expected) {
    return Corrupt("constant '", name, "': size ", size.value(), " differs from ", expected, " bytes of ",
                   DTypeName(dtype), ShapeToString(shape.value()));
  }
  if (offset.value() > ctx.weights_size || size.value() > ctx.weights_size - offset.value()) {
    return Corrupt("constant '", name, "' at offset ", offset.value(), " size ", size.value(),
                   " lies outside the weights partition of ", ctx.weights_size, " bytes");
  }
  if (offset.value() % 64 != 0) {
    return Corrupt("constant '", name, "' at offset ", offset.value(),
                   " in the weights partition is not 64-byte aligned");
  }
  auto t = std::make_shared<HostTensor>(dtype, shape.value(), ctx.weights + offset.value(), ctx.owner);
  t->set_file_pages(ctx.file_pages);
  v->set_constant(std::move(t));
  return Status::Ok();
}

Result<std::unique_ptr<ir::Graph>> GraphFromJson(const json& j, ir::Graph* parent, const ParseCtx& ctx,
                                                 const std::string& path, int depth) {
  auto g = std::make_unique<ir::Graph>();
  g->set_parent(parent);
  KILN_ASSIGN_OR_RETURN(std::string gname, StrField(j, path, "name"));
  g->set_name(gname);
  KILN_ASSIGN_OR_RETURN(int opset, Int32Field(j, path, "opset"));
  g->set_opset(opset);
  if (j.contains("symbols")) {  // format version 6; ranges checked by plan::VerifyPlan
    const std::string sp = Dot(path, "symbols");
    if (depth > 0) {
      return Corrupt("field '", sp, "': only the top-level graph has symbols, found them in subgraph '", gname, "'");
    }
    const json& js = j.at("symbols");
    if (!js.is_object()) return TypeError(sp, "an object", js);
    for (auto& [name, r] : js.items()) {
      const std::string rp = StrCat(sp, "['", name, "']");
      if (!r.is_array() || r.size() != 2) {
        return Corrupt("symbol '", name, "': field '", rp, "' must be [min, max], found ",
                       r.is_array() ? StrCat("an array of ", r.size()) : std::string(r.type_name()));
      }
      auto lo = AsInt(r[0], At(rp, 0));
      if (!lo.ok()) return Corrupt("symbol '", name, "': ", lo.status().message());
      auto hi = AsInt(r[1], At(rp, 1));
      if (!hi.ok()) return Corrupt("symbol '", name, "': ", hi.status().message());
      g->symbols()[name] = ir::SymbolRange{lo.value(), hi.value()};
    }
  }
  if (j.contains("gears") || j.contains("gears_only")) {  // format version 7; checked by plan::VerifyPlan
    const std::string gp = Dot(path, "gears");
    if (depth > 0) {
      return Corrupt("field '", gp, "': only the top-level graph has gears, found them in subgraph '", gname, "'");
    }
    KILN_ASSIGN_OR_RETURN(const json* gears, ArrayField(j, path, "gears"));
    if (gears->empty() || gears->size() > ir::kMaxGears) {
      return Corrupt("field '", gp, "' lists ", gears->size(), " gears, expected 1 to ", ir::kMaxGears);
    }
    for (std::size_t k = 0; k < gears->size(); ++k) {
      auto sig = AsList<Shape>((*gears)[k], At(gp, k), AsShape);
      if (!sig.ok()) return Corrupt("gear ", k, ": ", sig.status().message());
      g->gears().push_back(std::move(sig).value());
    }
    const std::string op = Dot(path, "gears_only");
    if (!j.contains("gears_only")) return Corrupt("field '", op, "' is missing (a graph with gears has it)");
    if (!j.at("gears_only").is_boolean()) return TypeError(op, "a boolean", j.at("gears_only"));
    g->set_gears_only(j.at("gears_only").get<bool>());
  }
  KILN_ASSIGN_OR_RETURN(const json* values, ArrayField(j, path, "values"));
  for (std::size_t i = 0; i < values->size(); ++i) {
    KILN_RETURN_IF_ERROR(ValueFromJson((*values)[i], *g, ctx, At(Dot(path, "values"), i), depth));
  }
  KILN_ASSIGN_OR_RETURN(const json* nodes, ArrayField(j, path, "nodes"));
  for (std::size_t ni = 0; ni < nodes->size(); ++ni) {
    const json& jn = (*nodes)[ni];
    const std::string np = At(Dot(path, "nodes"), ni);
    KILN_ASSIGN_OR_RETURN(std::string name, StrField(jn, np, "name"));
    KILN_ASSIGN_OR_RETURN(std::string op, StrField(jn, np, "op"));
    KILN_ASSIGN_OR_RETURN(std::string domain, StrField(jn, np, "domain"));
    KILN_ASSIGN_OR_RETURN(int since, Int32Field(jn, np, "since"));
    const std::string who = StrCat(op, " node '", name, "'");
    KILN_ASSIGN_OR_RETURN(const json* jins, ArrayField(jn, np, "inputs"));
    KILN_ASSIGN_OR_RETURN(const json* jouts, ArrayField(jn, np, "outputs"));
    KILN_ASSIGN_OR_RETURN(const json* jattrs, Field(jn, np, "attrs"));
    if (!jattrs->is_object()) return TypeError(Dot(np, "attrs"), "an object", *jattrs);
    std::vector<ir::Value*> ins, outs;
    for (std::size_t i = 0; i < jins->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::string s, AsString((*jins)[i], At(Dot(np, "inputs"), i)));
      if (s.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      ir::Value* v = g->LookupValue(s);
      if (!v) return Corrupt(who, " reads unknown value '", s, "' (input ", i, ")");
      ins.push_back(v);
    }
    for (std::size_t i = 0; i < jouts->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::string s, AsString((*jouts)[i], At(Dot(np, "outputs"), i)));
      ir::Value* v = g->FindValue(s);
      if (!v) return Corrupt(who, " writes unknown value '", s, "' (output ", i, ")");
      if (v->is_constant()) return Corrupt(who, " writes constant '", s, "' (output ", i, ")");
      if (v->producer()) {
        return Corrupt(who, " writes value '", s, "' (output ", i, "), which ", v->producer()->Describe(),
                       " already writes; every value has one producer");
      }
      if (std::find(outs.begin(), outs.end(), v) != outs.end()) {
        return Corrupt(who, " lists value '", s, "' as two of its outputs");
      }
      outs.push_back(v);
    }
    ir::Node* n = g->AddNode(op, name, ins, outs, domain);
    n->set_since_version(since);
    for (auto& [k, ja] : jattrs->items()) {
      auto a = AttrFromJson(ja, g.get(), ctx, StrCat(np, ".attrs['", k, "']"), depth);
      if (!a.ok()) return Corrupt(who, " attribute '", k, "': ", a.status().message());
      n->SetAttr(k, std::move(a).value());
    }
  }
  for (const char* list : {"inputs", "outputs"}) {
    KILN_ASSIGN_OR_RETURN(const json* arr, ArrayField(j, path, list));
    for (std::size_t i = 0; i < arr->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::string s, AsString((*arr)[i], At(Dot(path, list), i)));
      ir::Value* v = g->FindValue(s);
      if (!v) return Corrupt("graph '", gname, "' lists unknown value '", s, "' as ", list, "[", i, "]");
      (list[0] == 'i' ? g->inputs() : g->outputs()).push_back(v);
    }
  }
  Status st = g->Verify();
  if (!st.ok()) return Corrupt(st.message());
  return g;
}

}  // namespace

// A device spec as runtime::OpenDevice takes it: a kind of lowercase letters,
// digits and '_', then optionally ':' and options of letters, digits and
// "_+=,.-"; 1 to 128 bytes.
static Status CheckTargetSpec(const std::string& t) {
  if (t.empty() || t.size() > 128) {
    return Corrupt("field 'target' must be a device spec of 1 to 128 bytes, found ", t.size(), " bytes");
  }
  bool options = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    const bool kind_ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    const bool opt_ok = kind_ok || (c >= 'A' && c <= 'Z') || c == '+' || c == '=' || c == ',' || c == '.' || c == '-';
    if (!options && c == ':' && i > 0) {
      options = true;
      continue;
    }
    if (!(options ? opt_ok : kind_ok)) {
      return Corrupt("field 'target' = '", std::string(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(t.size(), 64))),
                     "' is not a device spec (byte ", i, " is not allowed there)");
    }
  }
  return Status::Ok();
}

// A recorded weight directory: "." or a relative path of 1 to 4096 bytes,
// without NUL or backslash bytes and with no empty or "." components (what the writer
// produces from std::filesystem::relative). ".." components are allowed here;
// whether a directory outside the model's own may be used is the loader's
// decision (LoadOptions::trust_recorded_weight_dir).
static Status CheckWeightDirField(const std::string& d) {
  if (d.empty() || d.size() > 4096) {
    return Corrupt("field 'weight_dir' must be a relative path of 1 to 4096 bytes, found ", d.size(), " bytes");
  }
  if (d == ".") return Status::Ok();  // the model's own directory
  if (d.front() == '/') return Corrupt("field 'weight_dir' must be relative to the model file, found an absolute path");
  std::size_t start = 0;
  while (start <= d.size()) {
    std::size_t end = d.find('/', start);
    if (end == std::string::npos) end = d.size();
    const std::string part = d.substr(start, end - start);
    if (part.empty() || part == ".") {
      return Corrupt("field 'weight_dir' has an empty or '.' component (byte ", start, ")");
    }
    for (char c : part) {
      if (c == '\0' || c == '\\') return Corrupt("field 'weight_dir' holds a NUL or backslash byte");
    }
    start = end + 1;
  }
  return Status::Ok();
}

Result<std::string> SerializeModelJson(const CompiledModel& model) {
  try {
    json placements = json::object();
    for (auto& [name, p] : model.plan.placements) {
      placements[name] = json::array({p.region, p.offset, p.size});
    }
    json j{{"format", "kiln-graph"},
           {"target", model.target},
           {"custom_ops", model.custom_op_types},
           {"graph", GraphToJson(*model.graph, &model.plan)},
           {"weight_dir", model.weight_dir},
           {"plan", json{{"arena_size", model.plan.arena_size},
                         {"host_arena_size", model.plan.host_arena_size},
                         {"no_reuse_size", model.plan.no_reuse_size},
                         {"lower_bound", model.plan.lower_bound},
                         {"const_size", model.plan.const_size},
                         {"placements", placements}}}};
    std::string bad;
    if (FindInvalidUtf8(j, "", &bad)) {
      return Error(StatusCode::kInvalidArgument, "cannot write the model: ", bad,
                   " is not valid UTF-8 (names and strings in a .kiln file must be)");
    }
    return j.dump();
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, "cannot write the model: out of memory serializing its graph");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot write the model: ", e.what());
  }
}

Result<CompiledModel> ParseModelJson(const char* text, std::size_t size, const std::uint8_t* weights,
                                     std::uint64_t weights_size, std::shared_ptr<const void> owner,
                                     bool file_pages) {
  try {
    json j = json::parse(text, text + size, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      // Parse again for the position of the fault (rare: a damaged file).
      try {
        (void)json::parse(text, text + size);
      } catch (const json::exception& e) {
        return Corrupt("graph partition is not valid JSON: ", e.what());
      }
      return Corrupt("graph partition is not valid JSON");
    }
    KILN_ASSIGN_OR_RETURN(std::string tag, StrField(j, "", "format"));
    if (tag != "kiln-graph") return Corrupt("graph partition has an unknown format tag '", tag, "'");
    CompiledModel m;
    ParseCtx ctx{weights, weights_size, std::move(owner), file_pages};
    KILN_ASSIGN_OR_RETURN(const json* jg, Field(j, "", "graph"));
    KILN_ASSIGN_OR_RETURN(m.graph, GraphFromJson(*jg, nullptr, ctx, "graph", 0));
    if (j.contains("target")) {  // format version 2; absent (version 1): compiled for "cpu"
      KILN_ASSIGN_OR_RETURN(m.target, AsString(j.at("target"), "target"));
      KILN_RETURN_IF_ERROR(CheckTargetSpec(m.target));
    }
    if (j.contains("weight_dir")) {  // format version 4; "" or absent: not recorded
      KILN_ASSIGN_OR_RETURN(m.weight_dir, AsString(j.at("weight_dir"), "weight_dir"));
      if (!m.weight_dir.empty()) KILN_RETURN_IF_ERROR(CheckWeightDirField(m.weight_dir));
    }
    if (j.contains("custom_ops")) {
      KILN_ASSIGN_OR_RETURN(m.custom_op_types, AsList<std::string>(j.at("custom_ops"), "custom_ops", AsString));
    }
    KILN_ASSIGN_OR_RETURN(const json* jp, Field(j, "", "plan"));
    const json& p = *jp;
    KILN_ASSIGN_OR_RETURN(m.plan.arena_size, UIntField(p, "plan", "arena_size"));
    if (p.contains("host_arena_size")) {  // format version 3; absent: nothing runs on the CPU
      KILN_ASSIGN_OR_RETURN(m.plan.host_arena_size, UIntField(p, "plan", "host_arena_size"));
    }
    KILN_ASSIGN_OR_RETURN(m.plan.no_reuse_size, UIntField(p, "plan", "no_reuse_size"));
    KILN_ASSIGN_OR_RETURN(m.plan.lower_bound, UIntField(p, "plan", "lower_bound"));
    KILN_ASSIGN_OR_RETURN(m.plan.const_size, UIntField(p, "plan", "const_size"));
    KILN_ASSIGN_OR_RETURN(const json* jpl, Field(p, "plan", "placements"));
    if (!jpl->is_object()) return TypeError("plan.placements", "an object", *jpl);
    for (auto& [name, e] : jpl->items()) {
      const std::string ep = StrCat("plan.placements['", name, "']");
      if (!e.is_array() || e.size() != 3) {
        return Corrupt("placement of '", name, "': field '", ep, "' must be [region, offset, size]");
      }
      plan::Placement pl;
      auto region = AsInt32(e[0], At(ep, 0));
      auto offset = AsUInt(e[1], At(ep, 1));
      auto bytes = AsUInt(e[2], At(ep, 2));
      for (const Status* st : {&region.status(), &offset.status(), &bytes.status()}) {
        if (!st->ok()) return Corrupt("placement of '", name, "': ", st->message());
      }
      pl = {region.value(), offset.value(), bytes.value()};
      m.plan.placements[name] = pl;
    }
    return m;
  } catch (const std::bad_alloc&) {
    return Corrupt("graph partition of ", size, " bytes: out of memory while parsing it");
  } catch (const std::exception& e) {
    return Corrupt("graph partition is malformed: ", e.what());
  }
}

}  // namespace kiln::format
