#include "format/graph_json.h"

#include <nlohmann/json.hpp>

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
  return json{{"name", g.name()}, {"opset", g.opset()}, {"values", values},
              {"nodes", nodes}, {"inputs", ins}, {"outputs", outs}};
}

// ---- parsing ---------------------------------------------------------------

Result<HostTensorPtr> TensorFromJson(const json& j) {
  auto dtype = static_cast<DType>(j.at("dtype").get<int>());
  if (!DTypeSupported(dtype)) return Error(StatusCode::kCorrupt, "tensor has invalid dtype ", static_cast<int>(dtype));
  Shape shape = j.at("shape").get<Shape>();
  for (auto d : shape) {
    if (d < 0 || d > (std::int64_t{1} << 40)) return Error(StatusCode::kCorrupt, "tensor has invalid dim ", d);
  }
  auto t = std::make_shared<HostTensor>(dtype, shape);
  KILN_RETURN_IF_ERROR(FromHex(j.at("hex").get<std::string>(),
                               static_cast<std::uint8_t*>(t->mutable_data()), t->nbytes()));
  return HostTensorPtr(t);
}

struct ParseCtx {
  const std::uint8_t* weights;
  std::uint64_t weights_size;
  std::shared_ptr<const void> owner;
};

Result<std::unique_ptr<ir::Graph>> GraphFromJson(const json& j, ir::Graph* parent,
                                                 const ParseCtx& ctx);

Result<ir::Attribute> AttrFromJson(const json& j, ir::Graph* owner, const ParseCtx& ctx) {
  using K = ir::Attribute::Kind;
  ir::Attribute a;
  std::string kind = j.at("kind").get<std::string>();
  const json& v = j.at("v");
  if (kind == "float") { a.kind = K::kFloat; a.f = v.get<float>(); }
  else if (kind == "int") { a.kind = K::kInt; a.i = v.get<std::int64_t>(); }
  else if (kind == "string") { a.kind = K::kString; a.s = v.get<std::string>(); }
  else if (kind == "floats") { a.kind = K::kFloats; a.floats = v.get<std::vector<float>>(); }
  else if (kind == "ints") { a.kind = K::kInts; a.ints = v.get<std::vector<std::int64_t>>(); }
  else if (kind == "strings") { a.kind = K::kStrings; a.strings = v.get<std::vector<std::string>>(); }
  else if (kind == "tensor") { a.kind = K::kTensor; KILN_ASSIGN_OR_RETURN(a.t, TensorFromJson(v)); }
  else if (kind == "tensors") {
    a.kind = K::kTensors;
    for (auto& e : v) { KILN_ASSIGN_OR_RETURN(auto t, TensorFromJson(e)); a.tensors.push_back(t); }
  } else if (kind == "graph") {
    a.kind = K::kGraph;
    KILN_ASSIGN_OR_RETURN(auto g, GraphFromJson(v, owner, ctx));
    a.g = std::move(g);
  } else if (kind == "graphs") {
    a.kind = K::kGraphs;
    for (auto& e : v) {
      KILN_ASSIGN_OR_RETURN(auto g, GraphFromJson(e, owner, ctx));
      a.graphs.push_back(std::move(g));
    }
  } else {
    return Error(StatusCode::kCorrupt, "unknown attribute kind '", kind, "'");
  }
  return a;
}

Result<std::unique_ptr<ir::Graph>> GraphFromJson(const json& j, ir::Graph* parent,
                                                 const ParseCtx& ctx) {
  auto g = std::make_unique<ir::Graph>();
  g->set_parent(parent);
  g->set_name(j.at("name").get<std::string>());
  g->set_opset(j.at("opset").get<int>());
  for (const json& jv : j.at("values")) {
    std::string name = jv.at("name").get<std::string>();
    if (g->FindValue(name)) return Error(StatusCode::kCorrupt, "duplicate value '", name, "'");
    auto dtype = static_cast<DType>(jv.at("dtype").get<int>());
    Shape shape = jv.at("shape").get<Shape>();
    ir::Value* v = g->AddValue(name, dtype, shape);
    if (jv.contains("dynamic")) v->set_dynamic_mask(jv.at("dynamic").get<std::uint64_t>());
    if (jv.contains("const")) {
      const json& c = jv.at("const");
      if (c.contains("hex")) {
        KILN_ASSIGN_OR_RETURN(auto t, TensorFromJson(c));
        v->set_constant(t);
        continue;
      }
      if (!DTypeSupported(dtype) || !IsStatic(shape)) {
        return Error(StatusCode::kCorrupt, "constant '", name, "' has invalid dtype or shape");
      }
      auto offset = c.at("offset").get<std::uint64_t>();
      auto size = c.at("size").get<std::uint64_t>();
      std::uint64_t expected = static_cast<std::uint64_t>(NumElements(shape)) * DTypeSize(dtype);
      if (size != expected || offset > ctx.weights_size || size > ctx.weights_size - offset) {
        return Error(StatusCode::kCorrupt, "constant '", name, "' (offset ", offset, ", size ",
                     size, ", expected size ", expected, ") lies outside the weights partition of ",
                     ctx.weights_size, " bytes");
      }
      v->set_constant(std::make_shared<HostTensor>(dtype, shape, ctx.weights + offset, ctx.owner));
    }
  }
  for (const json& jn : j.at("nodes")) {
    std::vector<ir::Value*> ins, outs;
    for (const json& name : jn.at("inputs")) {
      std::string s = name.get<std::string>();
      if (s.empty()) { ins.push_back(nullptr); continue; }
      ir::Value* v = g->LookupValue(s);
      if (!v) return Error(StatusCode::kCorrupt, "node '", jn.at("name").get<std::string>(), "' reads unknown value '", s, "'");
      ins.push_back(v);
    }
    for (const json& name : jn.at("outputs")) {
      ir::Value* v = g->FindValue(name.get<std::string>());
      if (!v || v->producer() || v->is_constant()) {
        return Error(StatusCode::kCorrupt, "node '", jn.at("name").get<std::string>(),
                     "' has an invalid output '", name.get<std::string>(), "'");
      }
      outs.push_back(v);
    }
    ir::Node* n = g->AddNode(jn.at("op").get<std::string>(), jn.at("name").get<std::string>(),
                             ins, outs, jn.at("domain").get<std::string>());
    n->set_since_version(jn.at("since").get<int>());
    for (auto& [k, ja] : jn.at("attrs").items()) {
      KILN_ASSIGN_OR_RETURN(ir::Attribute a, AttrFromJson(ja, g.get(), ctx));
      n->SetAttr(k, std::move(a));
    }
  }
  for (const json& name : j.at("inputs")) {
    ir::Value* v = g->FindValue(name.get<std::string>());
    if (!v) return Error(StatusCode::kCorrupt, "unknown graph input '", name.get<std::string>(), "'");
    g->inputs().push_back(v);
  }
  for (const json& name : j.at("outputs")) {
    ir::Value* v = g->FindValue(name.get<std::string>());
    if (!v) return Error(StatusCode::kCorrupt, "unknown graph output '", name.get<std::string>(), "'");
    g->outputs().push_back(v);
  }
  KILN_RETURN_IF_ERROR(g->Verify());
  return g;
}

}  // namespace

std::string SerializeModelJson(const CompiledModel& model) {
  json placements = json::object();
  for (auto& [name, p] : model.plan.placements) {
    placements[name] = json::array({p.region, p.offset, p.size});
  }
  json j{{"format", "kiln-graph"},
         {"custom_ops", model.custom_op_types},
         {"graph", GraphToJson(*model.graph, &model.plan)},
         {"plan", json{{"arena_size", model.plan.arena_size},
                       {"no_reuse_size", model.plan.no_reuse_size},
                       {"lower_bound", model.plan.lower_bound},
                       {"const_size", model.plan.const_size},
                       {"placements", placements}}}};
  return j.dump();
}

Result<CompiledModel> ParseModelJson(const std::string& text, const std::uint8_t* weights,
                                     std::uint64_t weights_size,
                                     std::shared_ptr<const void> owner) {
  try {
    json j = json::parse(text);
    if (j.at("format").get<std::string>() != "kiln-graph") {
      return Error(StatusCode::kCorrupt, "graph partition has an unknown format tag");
    }
    CompiledModel m;
    ParseCtx ctx{weights, weights_size, std::move(owner)};
    auto g = GraphFromJson(j.at("graph"), nullptr, ctx);
    if (!g.ok()) return g.status().code() == StatusCode::kCorrupt ? g.status()
           : Status(StatusCode::kCorrupt, g.status().message());
    m.graph = std::move(g).value();
    if (j.contains("custom_ops")) m.custom_op_types = j.at("custom_ops").get<std::vector<std::string>>();
    const json& p = j.at("plan");
    m.plan.arena_size = p.at("arena_size").get<std::uint64_t>();
    m.plan.no_reuse_size = p.at("no_reuse_size").get<std::uint64_t>();
    m.plan.lower_bound = p.at("lower_bound").get<std::uint64_t>();
    m.plan.const_size = p.at("const_size").get<std::uint64_t>();
    for (auto& [name, e] : p.at("placements").items()) {
      plan::Placement pl{e.at(0).get<int>(), e.at(1).get<std::uint64_t>(), e.at(2).get<std::uint64_t>()};
      m.plan.placements[name] = pl;
    }
    return m;
  } catch (const std::exception& e) {
    return Error(StatusCode::kCorrupt, "graph partition is malformed: ", e.what());
  }
}

}  // namespace kiln::format
