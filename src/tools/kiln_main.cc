// The `kiln` command line: compile, run, inspect, bench, ops, weights list / gc.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <exception>
#include <new>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <cstring>

#ifdef KILN_HAVE_COMPILER
#include "api/compiler.h"
#include "frontend/onnx/onnx_import.h"
#endif
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "runtime/devices.h"
#include "runtime/executor.h"
#include "tools/npy.h"
#include "weights/weight_dir.h"

namespace {

using kiln::Status;
using kiln::StatusCode;
using nlohmann::json;

int Fail(const Status& s) {
  std::cerr << "kiln: error: " << s.ToString() << "\n";
  return 1;
}

std::string HumanBytes(std::uint64_t b) {
  char buf[64];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// ---- inputs ----------------------------------------------------------------

kiln::HostTensor RandomTensor(const kiln::TensorInfo& info, unsigned seed) {
  kiln::HostTensor t(info.dtype, info.shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  std::uniform_int_distribution<int> small(0, 9);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case kiln::DType::kFloat32: t.mutable_data_as<float>()[i] = real(rng); break;
      case kiln::DType::kFloat64: t.mutable_data_as<double>()[i] = real(rng); break;
      case kiln::DType::kFloat16: t.mutable_data_as<std::uint16_t>()[i] = kiln::FloatToHalf(real(rng)); break;
      case kiln::DType::kInt64: t.mutable_data_as<std::int64_t>()[i] = small(rng); break;
      case kiln::DType::kInt32: t.mutable_data_as<std::int32_t>()[i] = small(rng); break;
      case kiln::DType::kBool: t.mutable_data_as<std::uint8_t>()[i] = small(rng) & 1; break;
      default: static_cast<std::uint8_t*>(t.mutable_data())[i * kiln::DTypeSize(info.dtype)] = static_cast<std::uint8_t>(small(rng));
    }
  }
  return t;
}

// Resolves --input NAME=FILE / INDEX=FILE against the model; fills the rest
// with seeded random data.
kiln::Result<std::vector<kiln::HostTensor>> PrepareInputs(const kiln::Model& model,
                                                          const std::vector<std::string>& specs,
                                                          unsigned seed, bool verbose) {
  const auto& infos = model.inputs();
  std::vector<std::optional<kiln::HostTensor>> given(infos.size());
  for (const std::string& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      return kiln::Error(StatusCode::kInvalidArgument, "--input '", spec, "' is not NAME=FILE.npy or INDEX=FILE.npy");
    }
    std::string key = spec.substr(0, eq), file = spec.substr(eq + 1);
    int idx = -1;
    for (std::size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].name == key) idx = static_cast<int>(i);
    }
    if (idx < 0 && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) {
      std::size_t v = 0;
      auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), v);
      if (ec != std::errc() || end != key.data() + key.size() || v >= infos.size()) {
        return kiln::Error(StatusCode::kInvalidArgument, "--input index ", key, " is out of range: the model has ",
                           infos.size(), " input(s)");
      }
      idx = static_cast<int>(v);
    }
    if (idx < 0) {
      std::string names;
      for (auto& i : infos) names += (names.empty() ? "" : ", ") + i.name;
      return kiln::Error(StatusCode::kInvalidArgument, "--input names '", key,
                         "', which is not an input of the model (inputs: ", names, ")");
    }
    KILN_ASSIGN_OR_RETURN(kiln::HostTensor t, kiln::npy::Load(file));
    const auto& info = infos[idx];
    if (info.dtype == kiln::DType::kBFloat16 && t.dtype() == kiln::DType::kUInt16) {
      // NumPy has no bfloat16: accept its raw bits as uint16.
      t = kiln::HostTensor(kiln::DType::kBFloat16, t.shape(), t.data(), std::make_shared<kiln::HostTensor>(t));
    }
    if (t.dtype() != info.dtype) {
      return kiln::Error(StatusCode::kInvalidArgument, "input ", idx, " '", info.name, "' from '", file,
                         "': expected dtype ", kiln::DTypeName(info.dtype), ", found ", kiln::DTypeName(t.dtype()));
    }
    // Symbolic dims (-1) take the file's extent; the model checks them
    // against their symbol's range when it runs.
    bool shape_ok = t.shape().size() == info.shape.size();
    for (std::size_t d = 0; shape_ok && d < info.shape.size(); ++d) {
      shape_ok = info.shape[d] < 0 || t.shape()[d] == info.shape[d];
    }
    if (!shape_ok) {
      return kiln::Error(StatusCode::kInvalidArgument, "input ", idx, " '", info.name, "' from '", file,
                         "': expected shape ", kiln::ShapeToString(info.shape), ", found ",
                         kiln::ShapeToString(t.shape()));
    }
    given[idx] = std::move(t);
  }
  std::vector<kiln::HostTensor> out;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (given[i]) {
      out.push_back(std::move(*given[i]));
    } else {
      if (infos[i].shape_input) {
        return kiln::Error(StatusCode::kInvalidArgument, "input ", i, " '", infos[i].name,
                           "' decides shapes (its values are a shape, starts, sizes, ...): give it with --input ",
                           infos[i].name, "=FILE.npy");
      }
      if (!kiln::IsStatic(infos[i].shape)) {
        std::string dims;
        for (const auto& d : infos[i].dims) {
          dims += (dims.empty() ? "" : ",") + (d.value >= 0 ? std::to_string(d.value) : d.symbol);
        }
        return kiln::Error(StatusCode::kInvalidArgument, "input ", i, " '", infos[i].name, "' has symbolic dims [",
                           dims, "]: give it with --input ", infos[i].name, "=FILE.npy");
      }
      if (verbose) {
        std::cerr << "kiln: input " << i << " '" << infos[i].name << "' not given: using seeded random "
                  << kiln::DTypeName(infos[i].dtype) << kiln::ShapeToString(infos[i].shape) << "\n";
      }
      out.push_back(RandomTensor(infos[i], seed + static_cast<unsigned>(i)));
    }
  }
  return out;
}

struct Bound {
  std::vector<kiln::HostTensor> outputs;
  std::vector<kiln::TensorRef> in_refs, out_refs;
};

// Outputs are allocated with the shapes the model gives for these inputs.
kiln::Result<Bound> Bind(kiln::Model& model, std::vector<kiln::HostTensor>& inputs) {
  Bound b;
  std::vector<kiln::Shape> in_shapes;
  for (auto& t : inputs) {
    b.in_refs.push_back({const_cast<void*>(t.data()), t.dtype(), t.shape()});
    in_shapes.push_back(t.shape());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<kiln::Shape> out_shapes, model.OutputShapesFor(b.in_refs));
  for (std::size_t j = 0; j < model.outputs().size() && j < out_shapes.size(); ++j) {
    b.outputs.emplace_back(model.outputs()[j].dtype, out_shapes[j]);
  }
  for (auto& t : b.outputs) b.out_refs.push_back({t.mutable_data(), t.dtype(), t.shape()});
  return b;
}

// Whether the outputs' bounds for these inputs grew past `b`'s (a run
// raised a provisional bound: a shape computed from data with no bound
// the model proves): the caller allocates again and runs again.
bool BoundsGrew(kiln::Model& model, const Bound& b) {
  auto again = model.OutputShapesFor(b.in_refs);
  if (!again.ok() || again.value().size() != b.outputs.size()) return false;
  for (std::size_t j = 0; j < b.outputs.size(); ++j) {
    if (again.value()[j] != b.outputs[j].shape()) return true;
  }
  return false;
}
constexpr int kMaxRebinds = 8;

// ---- commands --------------------------------------------------------------

struct ExternalWeightFlags {
  std::string target = "cpu";
  int mode = 0;
  std::string dir;
  int writer_threads = 8;
  std::string model_name;
};

int Compile(const std::string& model, const std::string& output, const std::string& shapes,
            const std::vector<std::string>& disable, const std::vector<std::string>& const_inputs, bool verbose,
            const ExternalWeightFlags& ew) {
#ifndef KILN_HAVE_COMPILER
  (void)model, (void)output, (void)shapes, (void)disable, (void)const_inputs, (void)verbose, (void)ew;
  return Fail(kiln::Error(StatusCode::kUnimplemented,
                          "kiln compile: the compiler is not built in (Kiln was configured with "
                          "-DKILN_BUILD_COMPILER=OFF); this kiln runs, inspects and benchmarks .kiln files"));
#else
  kiln::CompileOptions opts;
  opts.target = ew.target;
  opts.external_weight = ew.mode;
  opts.external_weight_dir = ew.dir;
  opts.weight_writer_threads = ew.writer_threads;
  opts.model_name = ew.model_name.empty() ? std::filesystem::path(output).stem().string() : ew.model_name;
  if (!shapes.empty()) {
    auto parsed = kiln::onnx_frontend::ParseInputSpecs(shapes);
    if (!parsed.ok()) return Fail(parsed.status());
    opts.input_specs = parsed.value();
  }
  opts.passes.disabled.insert(disable.begin(), disable.end());
  for (const std::string& spec : const_inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(kiln::Error(StatusCode::kInvalidArgument, "--const-input '", spec, "' is not NAME=FILE.npy"));
    }
    auto t = kiln::npy::Load(spec.substr(eq + 1));
    if (!t.ok()) return Fail(t.status());
    opts.constant_inputs[spec.substr(0, eq)] = std::make_shared<kiln::HostTensor>(std::move(t).value());
  }
  kiln::CompileReport report;
  auto t0 = std::chrono::steady_clock::now();
  auto m = kiln::CompileOnnxFileTo(model, output, opts, &report);
  if (!m.ok()) return Fail(m.status());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (verbose) {
    for (auto& l : report.pass_log) std::cout << "  pass " << l << "\n";
  }
  const auto& plan = m.value().plan;
  std::cout << "compiled " << model << " -> " << output << " in " << static_cast<int>(ms) << " ms: "
            << m.value().graph->nodes().size() << " nodes, weights " << HumanBytes(plan.const_size)
            << ", arena " << HumanBytes(plan.arena_size) << "\n";
  if (opts.external_weight != 0) {
    const auto& s = report.weight_stats;
    std::cout << "external weights (mode " << opts.external_weight << "): " << s.weights << " constants, " << s.unique
              << " distinct, " << s.written << " written (" << HumanBytes(s.bytes_written) << "), " << s.reused
              << " already present, in " << report.weight_dir << "\n";
  }
  return 0;
#endif
}

void PrintTensorSummary(const std::string& label, const kiln::HostTensor& t) {
  std::cout << label << " " << kiln::DTypeName(t.dtype()) << kiln::ShapeToString(t.shape());
  const std::int64_t n = t.numel();
  if (n > 0 && t.dtype() != kiln::DType::kString) {
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    std::int64_t arg = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      double v = t.GetAsDouble(i);
      if (v > mx) { mx = v; arg = i; }
      mn = std::min(mn, v);
      sum += v;
    }
    std::cout << "  min " << mn << "  max " << mx << " (at " << arg << ")  mean " << sum / n << "  first:";
    for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 5); ++i) std::cout << " " << t.GetAsDouble(i);
  }
  std::cout << "\n";
}

int Run(const std::string& path, const std::vector<std::string>& input_specs, const std::string& out_dir,
        kiln::LoadOptions lo) {
  const int threads = lo.threads;
  const bool check_bounds = lo.check_bounds;
  auto t0 = std::chrono::steady_clock::now();
  auto model = kiln::Model::Load(path, lo);
  if (!model.ok()) return Fail(model.status());
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto inputs = PrepareInputs(*model.value(), input_specs, 0, true);
  if (!inputs.ok()) return Fail(inputs.status());
  kiln::Result<Bound> bound = kiln::Error(StatusCode::kInternal, "not bound");
  // --check-bounds: outputs go to guarded buffers, checked after the run.
  constexpr std::size_t kGuard = 64;
  std::vector<std::vector<std::uint8_t>> guarded;
  auto t1 = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    bound = Bind(*model.value(), inputs.value());
    if (!bound.ok()) return Fail(bound.status());
    Bound& b = bound.value();
    guarded.clear();
    if (check_bounds) {
      for (std::size_t i = 0; i < b.outputs.size(); ++i) {
        guarded.emplace_back(b.outputs[i].nbytes() + 2 * kGuard, 0xA5);
        b.out_refs[i].data = guarded.back().data() + kGuard;
      }
    }
    t1 = std::chrono::steady_clock::now();
    Status st = model.value()->Execute(b.in_refs, b.out_refs);
    if (st.ok()) break;
    if (attempt >= kMaxRebinds || !BoundsGrew(*model.value(), b)) return Fail(st);
  }
  Bound& b = bound.value();
  double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  for (std::size_t i = 0; i < guarded.size(); ++i) {
    const auto& g = guarded[i];
    const std::size_t n = b.outputs[i].nbytes();
    for (std::size_t k = 0; k < kGuard; ++k) {
      if (g[k] != 0xA5 || g[kGuard + n + k] != 0xA5) {
        return Fail(kiln::Error(StatusCode::kInternal, "a kernel wrote out of bounds of output ", i, " '",
                                model.value()->outputs()[i].name, "'"));
      }
    }
    std::memcpy(b.outputs[i].mutable_data(), g.data() + kGuard, n);
  }
  // Data-dependent outputs: keep the dense prefix of their actual shape.
  for (std::size_t i = 0; i < b.outputs.size(); ++i) {
    kiln::Shape actual = model.value()->output_shape(i);
    if (actual == b.outputs[i].shape()) continue;
    kiln::HostTensor t(b.outputs[i].dtype(), actual);
    std::memcpy(t.mutable_data(), b.outputs[i].data(), t.nbytes());
    b.outputs[i] = std::move(t);
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Fail(kiln::Error(StatusCode::kIoError, "cannot create output directory '", out_dir, "': ", ec.message()));
  }
  for (std::size_t i = 0; i < b.outputs.size(); ++i) {
    PrintTensorSummary(kiln::StrCat("output ", i, " '", model.value()->outputs()[i].name, "'"), b.outputs[i]);
    if (!out_dir.empty()) {
      std::string file = (std::filesystem::path(out_dir) / kiln::StrCat("output_", i, ".npy")).string();
      Status s = kiln::npy::Save(file, b.outputs[i]);
      if (!s.ok()) return Fail(s);
    }
  }
  std::printf("load %.2f ms, first run %.3f ms (%d thread%s)%s\n", load_ms, run_ms, threads,
              threads == 1 ? "" : "s", out_dir.empty() ? "" : (", outputs written to " + out_dir).c_str());
  return 0;
}

// Per dim, as kiln::DimInfo: extent ("value", -1 if data-dependent or
// symbolic), range, symbol ("" if none) and kind ("static", "symbolic",
// "data").
json DimsJson(const kiln::ir::Value& v, const kiln::ir::Graph& g) {
  json dims = json::array();
  const auto& names = v.dim_params();
  for (std::size_t d = 0; d < v.shape().size(); ++d) {
    const std::int64_t e = v.shape()[d];
    const std::string sym = d < names.size() ? names[d] : std::string();
    std::int64_t value = e, lo = e, hi = e;
    auto it = sym.empty() ? g.symbols().end() : g.symbols().find(sym);
    if (it != g.symbols().end()) {
      lo = it->second.min;
      hi = it->second.max;
    }
    std::string kind = "static";
    const bool data = d < 64 && (v.dynamic_mask() >> d & 1);
    if (data && !(v.symbolic_mask() >> d & 1)) {
      value = -1, lo = 0, hi = e, kind = "data";
    } else if ((it != g.symbols().end() && lo != hi) || (d < 64 && (v.symbolic_mask() >> d & 1))) {
      // follows from symbols, unnamed (or data-dependent with a bound that does)
      if (it == g.symbols().end() || data) lo = 0, hi = -1;
      value = -1, kind = "symbolic";  // each run's input shapes give it
    }
    dims.push_back({{"value", value}, {"min", lo}, {"max", hi}, {"symbol", sym}, {"kind", kind}});
  }
  return dims;
}

// What the loader's inference finds that the file does not record, by
// output index: outputs whose rank depends on the data (kiln::TensorInfo::
// rank_alternatives), and outputs whose data-dependent extents follow from
// a provisional bound (no bound is known before a run). Found by inferring
// a copy of the graph as the loader does, only where some output has a
// data-dependent dim, and best effort (nothing where that inference needs
// what inspect does not load, such as external weights).
struct Inferred {
  std::map<std::size_t, std::vector<kiln::Shape>> alternatives;
  std::set<std::size_t> provisional;
};
Inferred InferOutputs(const kiln::ir::Graph& g) {
  bool candidate = false;
  for (const auto* v : g.outputs()) candidate = candidate || v->dynamic_mask() != 0;
  Inferred out;
  if (!candidate) return out;
  auto c = kiln::ir::CloneGraph(g);
  // If branches first, as the loader does (their values' bounds too).
  std::function<bool(kiln::ir::Graph&)> infer = [&infer](kiln::ir::Graph& sg) {
    for (auto& n : sg.nodes()) {
      for (const char* b : {"then_branch", "else_branch"}) {
        kiln::ir::Attribute* a = n->op_type() == "If" && n->FindAttr(b) ? &n->attrs()[b] : nullptr;
        if (!a || !a->g || a->g->inputs().size() + 1 != static_cast<std::size_t>(n->num_inputs())) continue;
        for (std::size_t i = 0; i < a->g->inputs().size(); ++i) {
          if (n->input(static_cast<int>(i) + 1)) kiln::ops::PassUpperBound(*n->input(static_cast<int>(i) + 1), *a->g->inputs()[i]);
        }
        if (!infer(*a->g)) return false;
      }
      if (!kiln::ops::InferNode(*n).ok() || !kiln::cpu::EvalUpperBound(*n, kiln::cpu::kBoundValueLimit).ok()) return false;
    }
    return true;
  };
  if (!infer(*c)) return out;
  const auto provisional = kiln::runtime::ProvisionallyBounded(*c);
  for (std::size_t i = 0; i < c->outputs().size(); ++i) {
    for (const auto& a : c->outputs()[i]->rank_alternatives()) out.alternatives[i].push_back(a.shape);
    if (provisional.count(c->outputs()[i])) out.provisional.insert(i);
  }
  return out;
}

json InspectJson(const kiln::format::LoadedFile& f) {
  const auto& g = *f.model.graph;
  const auto& p = f.model.plan;
  const Inferred inferred = InferOutputs(g);
  const auto& alternatives = inferred.alternatives;
  json ins = json::array(), outs = json::array(), nodes = json::array();
  std::map<std::string, int> counts;
  for (auto* v : g.inputs()) {
    ins.push_back({{"name", v->name()}, {"dtype", kiln::DTypeName(v->dtype())}, {"shape", v->shape()},
                   {"dims", DimsJson(*v, g)}, {"shape_input", v->shape_input()}});
  }
  for (auto* v : g.outputs()) {
    json dyn = json::array();  // data-dependent dims: "shape" holds their upper bound
    for (std::size_t d = 0; d < v->shape().size() && d < 64; ++d) {
      if (v->dynamic_mask() >> d & 1) dyn.push_back(d);
    }
    json dims = DimsJson(*v, g);
    if (inferred.provisional.count(outs.size())) {  // data-dependent with no bound known before a run
      for (auto& d : dims) {
        if (d["kind"] == "data") d["max"] = -1;
      }
    }
    outs.push_back({{"name", v->name()}, {"dtype", kiln::DTypeName(v->dtype())}, {"shape", v->shape()},
                    {"dynamic_dims", dyn}, {"dims", dims}});
    auto a = alternatives.find(outs.size() - 1);
    if (a != alternatives.end()) outs.back()["rank_alternatives"] = a->second;
  }
  json symbols = json::object();  // name -> {min, max}; max -1: unbounded
  for (auto& [name, r] : g.symbols()) symbols[name] = {{"min", r.min}, {"max", r.max}};
  for (auto& n : g.nodes()) {
    counts[n->op_type()]++;
    json attrs = json::object();
    for (auto& [k, a] : n->attrs()) {
      if (k.rfind("kiln.", 0) == 0) attrs[k] = a.kind == kiln::ir::Attribute::Kind::kString ? json(a.s) : a.kind == kiln::ir::Attribute::Kind::kFloat ? json(a.f) : json(a.i);
    }
    json node{{"name", n->name()}, {"op", n->op_type()}, {"fused", attrs},
              {"placement", kiln::ir::IsHostPlaced(*n) ? "cpu" : "target"}};
    if (kiln::ir::IsCopyToHost(*n) || kiln::ir::IsCopyFromHost(*n)) {
      node["copies"] = n->input(0) ? n->input(0)->name() : std::string();
      node["bytes"] = static_cast<std::uint64_t>(kiln::NumElements(n->output(0)->shape())) *
                      kiln::DTypeSize(n->output(0)->dtype());
    }
    nodes.push_back(node);
  }
  json ext = json::array();
  auto ws = kiln::ListExternalWeights(g);  // (the load decoded them: cannot fail here)
  for (auto& w : ws.ok() ? ws.value() : std::vector<kiln::weights::WeightRef>{}) {
    json e{{"node", w.node}, {"path", w.location}, {"size", w.length}, {"offset", w.offset}, {"id", w.sha256}};
    if (!w.file_id.empty()) e["file_id"] = w.file_id;
    ext.push_back(e);
  }
  return json{{"file_size", f.file_size},
              {"target", f.model.target},
              {"external_weights", ext},
              {"weight_dir", f.model.weight_dir},
              {"symbols", symbols},
              {"gears", g.gears()},
              {"gears_only", g.gears_only()},
              {"inputs", ins},
              {"outputs", outs},
              {"num_nodes", g.nodes().size()},
              {"op_counts", counts},
              {"nodes", nodes},
              {"memory", {{"arena_bytes", p.arena_size},
                          {"host_arena_bytes", p.host_arena_size},
                          {"no_reuse_bytes", p.no_reuse_size},
                          {"lower_bound_bytes", p.lower_bound},
                          {"weights_bytes", p.const_size},
                          {"arena_over_lower_bound",
                           p.lower_bound ? double(p.arena_size + p.host_arena_size) / p.lower_bound : 1.0}}}};
}

int Inspect(const std::string& path, bool as_json) {
  auto f = kiln::format::ReadModelFile(path);
  if (!f.ok()) return Fail(f.status());
  json j = InspectJson(f.value());
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << path << " (" << HumanBytes(j["file_size"]) << ", compiled for " << j["target"].get<std::string>() << ")\n";
  for (const char* k : {"inputs", "outputs"}) {
    std::cout << k << ":\n";
    for (auto& t : j[k]) {
      // "[batch=1,3,224,224]": named dims show their symbol; data-dependent
      // dims their bound ("<=50"); symbolic dims their symbol ("[batch,3,h,w]")
      // and its range unless it is 1.. unbounded ("seq=1..512").
      std::string shape = "[";
      for (auto& d : t["dims"]) {
        if (shape.size() > 1) shape += ",";
        const std::string sym = d["symbol"].get<std::string>();
        const std::int64_t value = d["value"].get<std::int64_t>(), lo = d["min"].get<std::int64_t>(),
                           hi = d["max"].get<std::int64_t>();
        if (d["kind"] == "symbolic") {  // "batch" (1.. unbounded), else "batch=1..512"
          if (sym.empty()) {
            shape += "?";  // follows from the input symbols
            continue;
          }
          shape += sym;
          if (lo != 1 || hi >= 0) shape += "=" + std::to_string(lo) + ".." + (hi < 0 ? "" : std::to_string(hi));
          continue;
        }
        if (!sym.empty()) shape += sym + "=";
        if (value < 0) {  // data-dependent: its bound, "?" where none is known before a run
          shape += hi < 0 ? std::string("?") : "<=" + std::to_string(hi);
        } else {
          shape += std::to_string(value);
          if (lo != value || hi != value) shape += " (" + std::to_string(lo) + ".." + (hi < 0 ? "" : std::to_string(hi)) + ")";
        }
      }
      std::cout << "  " << t["name"].get<std::string>() << " " << t["dtype"].get<std::string>() << shape << "]"
                << (t.value("shape_input", false) ? "  (shape input: its values decide shapes; plans are made per value)"
                                                   : "");
      if (t.contains("rank_alternatives")) {  // "(rank depends on the data: [3,4] or [24])"
        std::string alts;
        for (auto& a : t["rank_alternatives"]) alts += (alts.empty() ? "" : " or ") + kiln::ShapeToString(a.get<kiln::Shape>());
        std::cout << "  (rank depends on the data: " << alts << ")";
      }
      std::cout << "\n";
    }
  }
  if (!j["gears"].empty()) {  // "gears: [1,128] [1,128] | [4,512] [4,512]"
    std::string gears;
    for (auto& sig : j["gears"]) {
      std::string one;
      for (auto& s : sig) one += (one.empty() ? "" : " ") + kiln::ShapeToString(s.get<kiln::Shape>());
      gears += (gears.empty() ? "" : " | ") + one;
    }
    std::cout << "gears: " << gears
              << (j["gears_only"].get<bool>() ? " (planned at load; no other input shapes are admitted)"
                                              : " (planned at load)")
              << "\n";
  }
  if (!j["external_weights"].empty()) {
    std::uint64_t total = 0;
    std::set<std::string> files;
    for (auto& w : j["external_weights"]) {
      total += w["size"].get<std::uint64_t>();
      files.insert(w["path"].get<std::string>());
    }
    std::cout << "external weights: " << j["external_weights"].size() << " (" << HumanBytes(total) << ") in "
              << files.size() << " file(s) of the weight directory ("
              << (j["weight_dir"].get<std::string>().empty()
                      ? std::string("not recorded: <model dir>/weight")
                      : "recorded: '" + j["weight_dir"].get<std::string>() + "', relative to the model file")
              << ")\n";
  }
  for (auto& n : j["nodes"]) {
    if (n["fused"].contains("kiln.inserted_for")) {
      std::cout << "inserted copy " << n["name"].get<std::string>() << ": custom op '"
                << n["fused"]["kiln.inserted_for"].get<std::string>()
                << "' does not implement ArgsUpdater, so this Identity runs every execution\n";
    }
  }
  // Placement: nodes the target has no kernel for run on the CPU, with copies.
  {
    std::vector<const json*> on_cpu, copies;
    for (auto& n : j["nodes"]) {
      if (n["placement"] == "cpu") on_cpu.push_back(&n);
      if (n.contains("copies")) copies.push_back(&n);
    }
    if (!on_cpu.empty()) {
      std::cout << "placement: " << j["num_nodes"].get<std::size_t>() - on_cpu.size() << " nodes on the target, "
                << on_cpu.size() << " on the CPU (the target has no kernel for them), " << copies.size()
                << " copies inserted\n";
      for (const json* n : on_cpu) {
        std::cout << "  cpu   " << (*n)["op"].get<std::string>() << " '" << (*n)["name"].get<std::string>() << "'\n";
      }
      for (const json* n : copies) {
        const bool to_host = (*n)["op"] == kiln::ir::kMemcpyToHost;
        std::cout << "  copy  " << (to_host ? "to host   " : "to device ") << "'" << (*n)["copies"].get<std::string>()
                  << "' (" << HumanBytes((*n)["bytes"]) << ")\n";
      }
    }
  }
  std::cout << "ops (" << j["num_nodes"] << " nodes):\n";
  for (auto& [op, c] : j["op_counts"].items()) std::cout << "  " << op << " x" << c << "\n";
  auto& m = j["memory"];
  std::cout << "memory plan:\n"
            << "  arena (planned)        " << HumanBytes(m["arena_bytes"]) << "\n"
            << (m["host_arena_bytes"].get<std::uint64_t>() == 0
                    ? std::string()
                    : "  host arena (CPU nodes) " + HumanBytes(m["host_arena_bytes"]) + "\n")
            << "  lower bound (max live) " << HumanBytes(m["lower_bound_bytes"]) << "\n"
            << "  no reuse (sum)         " << HumanBytes(m["no_reuse_bytes"]) << "\n"
            << "  arena / lower bound    " << m["arena_over_lower_bound"].get<double>() << "\n"
            << "  weights                " << HumanBytes(m["weights_bytes"]) << "\n";
  // Plans per input signature (symbolic dims, shape inputs): what the
  // runtime's plan cache holds.
  bool per_signature = false, bounded = true;
  for (auto& t : j["inputs"]) {
    if (t.value("shape_input", false)) per_signature = true, bounded = false;
    for (auto& d : t["dims"]) {
      if (d["kind"] != "symbolic") continue;
      per_signature = true;
      bounded = bounded && d["max"].get<std::int64_t>() >= 0;
    }
  }
  if (per_signature) {
    std::cout << "plans: one per input signature, made at run time and cached (at most 8 by default: "
                 "LoadOptions::max_plans / max_plan_bytes, kiln run/bench --max-plans / --max-plan-bytes); "
              << (bounded ? "all share one arena of the size above (planned for the largest shapes)"
                          : "each has its own arena, sized for its shapes (the size above is for the compile-time "
                            "probe shapes)")
              << "\n";
  }
  return 0;
}

// Writes `text` to `path` through a temporary name and a rename: a failed
// write leaves no half-written file where a good one stood.
Status WriteTextAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Error(StatusCode::kIoError, "cannot create '", tmp, "': ", std::strerror(errno));
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return Error(StatusCode::kIoError, "cannot write '", path, "': ", std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return Error(StatusCode::kIoError, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
  return Status::Ok();
}

// `kiln bench --profile FILE`: a Chrome / Perfetto trace of the timed runs
// (one complete event per task and run, with op type and input shapes) and
// a per-op table on stdout: time per run (sum over the op's tasks of each
// task's median), share, and GFLOP/s for the ops whose FLOPs are counted.
Status WriteProfile(const kiln::Model& model, const std::string& file, int warmup, int runs, std::FILE* out) {
  const std::vector<kiln::TaskProfile> tasks = model.profile();
  json events = json::array();
  struct OpRow {
    double us = 0, flops = 0, flop_us = 0;
    int tasks = 0;
  };
  std::map<std::string, OpRow> ops;
  double total_us = 0;
  for (const kiln::TaskProfile& t : tasks) {
    std::vector<double> durs;
    for (std::size_t r = static_cast<std::size_t>(warmup); r < t.spans_us.size(); ++r) {
      const auto& [start, dur] = t.spans_us[r];
      durs.push_back(dur);
      events.push_back({{"name", t.node}, {"cat", t.op}, {"ph", "X"}, {"ts", start}, {"dur", dur}, {"pid", 1},
                        {"tid", 1}, {"args",
                         {{"op", t.op},
                          {"shapes", t.shapes},
                          {"run", r - warmup},
                          {"cost_us", t.cost_us},
                          {"one_thread", t.one_thread}}}});
    }
    if (durs.empty()) continue;
    std::sort(durs.begin(), durs.end());
    const double med = durs.size() % 2 ? durs[durs.size() / 2] : 0.5 * (durs[durs.size() / 2 - 1] + durs[durs.size() / 2]);
    OpRow& row = ops[t.op];
    row.us += med;
    row.tasks += 1;
    if (t.flops > 0) {
      row.flops += t.flops;
      row.flop_us += med;
    }
    total_us += med;
  }
  json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"},
             {"otherData", {{"runs", runs}, {"warmup_runs_excluded", warmup}}}};
  KILN_RETURN_IF_ERROR(WriteTextAtomic(file, trace.dump()));
  std::vector<std::pair<std::string, OpRow>> rows(ops.begin(), ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  std::fprintf(out, "per-op time (sum of each task's median over %d runs; %zu tasks timed, custom ops not):\n", runs,
               tasks.size());
  std::fprintf(out, "  %-24s %6s %10s %7s %9s\n", "op", "tasks", "ms/run", "share", "GFLOP/s");
  for (const auto& [op, r] : rows) {
    char gf[32] = "";
    if (r.flop_us > 0) std::snprintf(gf, sizeof(gf), "%.1f", r.flops / (r.flop_us * 1e3));
    std::fprintf(out, "  %-24s %6d %10.3f %6.1f%% %9s\n", op.c_str(), r.tasks, r.us / 1e3,
                 total_us > 0 ? 100.0 * r.us / total_us : 0.0, gf);
  }
  std::fprintf(out, "  %-24s %6zu %10.3f %6.1f%%\n", "total", tasks.size(), total_us / 1e3, 100.0);
  std::fprintf(out, "trace written to %s (open it in chrome://tracing or ui.perfetto.dev)\n", file.c_str());
  return Status::Ok();
}

// This process's peak resident set (VmHWM of /proc/self/status), in bytes;
// -1 where it cannot be read. Unlike getrusage's ru_maxrss it starts afresh
// at exec, so a parent's size does not count.
std::int64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      long long kb = -1;
      if (std::sscanf(line.c_str() + 6, "%lld", &kb) == 1) return static_cast<std::int64_t>(kb) * 1024;
    }
  }
  return -1;
}

int Bench(const std::string& path, const std::vector<std::string>& input_specs, int runs, int warmup,
          kiln::LoadOptions lo, bool as_json, const std::string& profile_file) {
  const int threads = lo.threads;
  lo.profile = !profile_file.empty();
  auto t_load = std::chrono::steady_clock::now();
  auto model = kiln::Model::Load(path, lo);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count();
  if (!model.ok()) return Fail(model.status());
  const std::uint64_t plans_at_load = model.value()->plan_stats().created;  // (gears are made at load)
  auto inputs = PrepareInputs(*model.value(), input_specs, 0, !as_json);
  if (!inputs.ok()) return Fail(inputs.status());
  auto bound = Bind(*model.value(), inputs.value());
  if (!bound.ok()) return Fail(bound.status());
  double first_ms = -1;  // the first run's time (plans, first touches), whether warm-up or timed
  for (int i = 0; i < warmup; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Status st = model.value()->Execute(bound.value().in_refs, bound.value().out_refs);
    if (i == 0) first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // The outputs' bounds grew (a provisional bound raised): allocate again.
    for (int attempt = 0; !st.ok() && attempt < kMaxRebinds && BoundsGrew(*model.value(), bound.value()); ++attempt) {
      bound = Bind(*model.value(), inputs.value());
      if (!bound.ok()) return Fail(bound.status());
      st = model.value()->Execute(bound.value().in_refs, bound.value().out_refs);
    }
    if (!st.ok()) return Fail(st);
  }
  Bound& b = bound.value();
  const bool bar = isatty(STDERR_FILENO) && !as_json;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Status st = model.value()->Execute(b.in_refs, b.out_refs);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!st.ok()) return Fail(st);
    if (first_ms < 0) first_ms = ms.back();
    if (bar) {
      int w = 30, done = (i + 1) * w / runs;
      std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(done, '#').c_str(), std::string(w - done, '.').c_str(), i + 1, runs);
      if (i + 1 == runs) std::fprintf(stderr, "\n");
    }
  }
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  auto pct = [&](double p) { return s[std::min<std::size_t>(s.size() - 1, static_cast<std::size_t>(p * (s.size() - 1) + 0.5))]; };
  double median = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  // Symbolic input dims: the plan for these input shapes was made before the
  // first run (shapes inferred, memory planned, kernels created, recorded),
  // or at load when they are a gear (its time is in load_ms).
  const auto& ins = model.value()->inputs();
  const auto& outs = model.value()->outputs();
  const bool symbolic =
      std::any_of(ins.begin(), ins.end(),
                  [](const kiln::TensorInfo& t) { return !kiln::IsStatic(t.shape) || t.shape_input; }) ||
      std::any_of(outs.begin(), outs.end(), [](const kiln::TensorInfo& t) {
        // (data-dependent dims with no bound before a run: provisional bounds, planned per run)
        return !kiln::IsStatic(t.shape) &&
               (t.dynamic_dims == 0 || std::any_of(t.dims.begin(), t.dims.end(),
                                                   [](const kiln::DimInfo& d) { return d.value < 0 && d.max < 0; }));
      });
  const bool gear = model.value()->plan_stats().created == plans_at_load;
  const double plan_ms = gear ? 0.0 : model.value()->plan_stats().last_plan_us / 1000.0;
  if (as_json) {
    json j{{"model", path}, {"runs", runs}, {"warmup", warmup}, {"threads", threads},
           {"median_ms", median}, {"p90_ms", pct(0.9)}, {"min_ms", s.front()}, {"max_ms", s.back()},
           {"load_ms", load_ms}, {"first_ms", first_ms}, {"peak_rss_bytes", PeakRssBytes()},
           // Whether this CPU's kernels take bfloat16 operands where a model
           // computes in bfloat16 (device::Capabilities::bf16_dot).
           {"cpu_bf16_dot", kiln::runtime::CpuDevice().caps().bf16_dot}};
    if (symbolic) {
      // The plan cache: plans held and the arena bytes they use
      // (--max-plans, --max-plan-bytes bound them).
      const kiln::PlanStats ps = model.value()->plan_stats();
      j["plan_ms"] = plan_ms;
      j["gear"] = gear;
      j["plans_cached"] = ps.cached;
      j["plan_cache_bytes"] = ps.arena_bytes;
      j["bound_raises"] = ps.bound_raises;  // runs that raised a provisional bound and ran again
    }
    std::cout << j.dump() << "\n";
  } else {
    const std::string plan = !symbolic ? std::string()
                             : gear    ? std::string(" (these shapes are a gear: planned at load)")
                                       : kiln::StrCat(" (plan for these shapes ", plan_ms, " ms)");
    const std::string cache =
        !symbolic ? std::string()
                  : kiln::StrCat("; plan cache: ", model.value()->plan_stats().cached, " plan(s), ",
                                 HumanBytes(model.value()->plan_stats().arena_bytes), " of arenas",
                                 model.value()->plan_stats().bound_raises
                                     ? kiln::StrCat("; provisional bounds raised ",
                                                    model.value()->plan_stats().bound_raises, " time(s)")
                                     : std::string());
    std::printf("%s: %d runs, %d thread%s: median %.3f ms, p90 %.3f ms, min %.3f ms%s%s\n", path.c_str(), runs,
                threads, threads == 1 ? "" : "s", median, pct(0.9), s.front(), plan.c_str(), cache.c_str());
  }
  if (!profile_file.empty()) {
    // With --json the table goes to stderr: stdout stays one JSON object.
    Status st = WriteProfile(*model.value(), profile_file, warmup, runs, as_json ? stderr : stdout);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// ---- weights list / gc ---------------------------------------------------------

int WeightsList(const std::string& dir, const std::vector<std::string>& models) {
  auto entries = kiln::weights::ListStore(dir, models);
  if (!entries.ok()) return Fail(entries.status());
  std::uint64_t n = 0, bytes = 0, used_bytes = 0, unref = 0, unref_bytes = 0;
  std::printf("%-16s  %-40s  %10s  %-24s  %s\n", "sha256", "file", "offset", "length", "used by");
  for (auto& e : entries.value()) {
    std::string users;
    for (auto& m : e.used_by) users += (users.empty() ? "" : " ") + m;
    if (users.empty()) users = models.empty() ? "-" : "unused";
    const std::string len = e.ref.length < 1024 ? kiln::StrCat(e.ref.length, " B")
                                                 : kiln::StrCat(e.ref.length, " B (", HumanBytes(e.ref.length), ")");
    if (e.recorded) {
      ++n;
      bytes += e.ref.length;
      if (!e.used_by.empty()) used_bytes += e.ref.length;
      std::printf("%-16s  %-40s  %10llu  %-24s  %s%s\n", e.ref.sha256.substr(0, 16).c_str(), e.ref.location.c_str(),
                  static_cast<unsigned long long>(e.ref.offset), len.c_str(), users.c_str(),
                  e.present ? "" : "  [missing: its file does not cover it]");
    } else {
      ++unref;
      unref_bytes += e.ref.length;
      std::printf("%-16s  %-40s  %10s  %-24s  %s  [not in meta.json]\n", "-", e.ref.location.c_str(), "-", len.c_str(),
                  users.c_str());
    }
  }
  std::printf("total: %llu entr%s, %s", static_cast<unsigned long long>(n), n == 1 ? "y" : "ies", HumanBytes(bytes).c_str());
  if (!models.empty()) std::printf(" (%s used by the given models)", HumanBytes(used_bytes).c_str());
  std::printf("; %llu file%s not in meta.json, %s\n", static_cast<unsigned long long>(unref), unref == 1 ? "" : "s",
              HumanBytes(unref_bytes).c_str());
  return 0;
}

int WeightsGc(const std::string& dir, const std::vector<std::string>& keep, bool dry_run) {
  auto rep = kiln::weights::CollectGarbage(dir, keep, dry_run);
  if (!rep.ok()) return Fail(rep.status());
  const auto& r = rep.value();
  const char* verb = dry_run ? "would remove" : "removed";
  for (auto& f : r.removed) std::printf("%s %s\n", verb, f.c_str());
  for (auto& [from, to] : r.compacted) std::printf("%s %s -> %s\n", dry_run ? "would compact" : "compacted", from.c_str(), to.c_str());
  for (auto& m : r.rewritten_models) std::printf("%s %s\n", dry_run ? "would rewrite" : "rewrote", m.c_str());
  std::printf("%s%zu file%s removed, %zu combined file%s rewritten, %zu .kiln file%s rewritten, %llu meta.json entr%s "
              "dropped, %s freed\n",
              dry_run ? "dry run, nothing changed: " : "", r.removed.size(), r.removed.size() == 1 ? "" : "s", r.compacted.size(),
              r.compacted.size() == 1 ? "" : "s", r.rewritten_models.size(), r.rewritten_models.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(r.entries_dropped), r.entries_dropped == 1 ? "y" : "ies",
              HumanBytes(r.bytes_freed).c_str());
  return 0;
}

}  // namespace

static int RealMain(int argc, char** argv) {
  CLI::App app{"kiln: compile ONNX models to .kiln files and run them"};
  app.require_subcommand(1);

  std::string model, output, shapes, path, out_dir;
  std::vector<std::string> inputs, disable;
  int threads = 1, runs = 50, warmup = 5;
  bool as_json = false, verbose = false, no_verify = false, check_bounds = false;

  auto* compile = app.add_subcommand("compile", "compile an ONNX model into a .kiln file");
  compile->add_option("--model", model, "ONNX model")->required();
  compile->add_option("--output", output, "output .kiln file")->required();
  compile->add_option("--input-shape", shapes,
                       "fix input shapes (\"x:1,3,224,224;y:1,8\"), bound symbolic dims with ranges "
                       "(\"ids:1..8,1..512\", A.. or ? for unbounded) or list gears planned at load "
                       "(\"ids:1,128|4,512\")");
  compile->add_option("--disable-pass", disable, "skip a pass or phase by name (repeatable)");
  std::vector<std::string> const_inputs;
  compile->add_option("--const-input", const_inputs, "NAME=FILE.npy: bake an input's value in as a constant (repeatable)");
  compile->add_flag("-v,--verbose", verbose, "print the pass log");
  ExternalWeightFlags ew;
  compile->add_option("--external-weight", ew.mode, "0 = embedded (default), 1 = one file per weight, 2 = one combined file")
      ->check(CLI::IsMember({0, 1, 2}));
  compile->add_option("--external-weight-dir", ew.dir, "where to write external weights (default: <output dir>/weight)");
  compile->add_option("--weight-writer-threads", ew.writer_threads, "threads hashing/writing weights")->check(CLI::Range(1, 256));
  compile->add_option("--model-name", ew.model_name, "mode 2 file prefix (default: output file stem)");
  std::string target = "cpu";
  compile->add_option("--target", target, "device kind to compile for: cpu | sim[:options] | cuda[:N] (passes ask it what it supports)");

  auto* run = app.add_subcommand("run", "run a .kiln model once");
  run->add_option("model", path, ".kiln file")->required();
  run->add_option("--input", inputs, "NAME=FILE.npy or INDEX=FILE.npy (repeatable)");
  run->add_option("--output-dir", out_dir, "write output_<i>.npy here");
  run->add_option("--threads", threads, "kernel threads")->check(CLI::Range(1, 256));
  run->add_flag("--no-verify-weights", no_verify, "skip the weights checksum at load");
  run->add_flag("--check-bounds", check_bounds, "debug: guard every tensor and catch out-of-bounds writes");

  auto* inspect = app.add_subcommand("inspect", "describe a .kiln model");
  inspect->add_option("model", path, ".kiln file")->required();
  inspect->add_flag("--json", as_json, "JSON output");

  auto* bench = app.add_subcommand("bench", "time repeated runs of a .kiln model");
  bench->add_option("model", path, ".kiln file")->required();
  bench->add_option("--input", inputs, "NAME=FILE.npy or INDEX=FILE.npy (repeatable)");
  bench->add_option("--runs", runs, "timed runs")->check(CLI::Range(1, 1000000));
  bench->add_option("--warmup", warmup, "untimed runs first")->check(CLI::Range(0, 1000000));
  bench->add_option("--threads", threads, "kernel threads")->check(CLI::Range(1, 256));
  bench->add_flag("--json", as_json, "one JSON object: median_ms, p90_ms, min_ms");
  std::string profile_file;
  bench->add_option("--profile", profile_file,
                    "time every task: write a Chrome/Perfetto trace to this file and print a per-op table");
  std::string weight_dir, weight_load = "auto";
  std::vector<std::string> weight_files;
  bool verify_sha = false, trust_weight_dir = false;
  double chunk_mib = 10;
  std::string device;
  std::size_t max_plans = 8;
  std::uint64_t max_plan_bytes = 0;
  for (CLI::App* sub : {run, bench}) {
    sub->add_option("--max-plans", max_plans,
                    "models with symbolic dims or shape inputs: plans kept (one per input signature)")
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--max-plan-bytes", max_plan_bytes, "and the arena bytes they may hold in all (0: no bound)");
    sub->add_option("--device", device,
                    "cpu | sim (a simulated discrete device; options: sim:lack=Op1+Op2,seed=N,delay_us=N) | "
                    "cuda[:N] (an NVIDIA GPU; the CUDA backend module); "
                    "default: $KILN_DEVICE, else cpu");
    sub->add_option("--weight-dir", weight_dir,
                    "external weight directory (default: the one the model records, else <model dir>/weight)");
    sub->add_flag("--trust-weight-dir", trust_weight_dir,
                  "use the weight directory the model records even where it lies outside the model's directory");
    sub->add_flag("--verify-weights", verify_sha, "check every external weight's SHA-256");
    sub->add_option("--weight-load", weight_load, "auto | map | copy | staged (copy through staging buffers, the GPU path)")
        ->check(CLI::IsMember({"auto", "map", "copy", "staged"}));
    sub->add_option("--weight-chunk-mib", chunk_mib, "chunk size of the copy path")->check(CLI::Range(0.004, 4096.0));
    sub->add_option("--weight-file", weight_files,
                    "ID=PATH: the file a graph-API weight with file_id ID reads (repeatable)");
  }

  auto* ops = app.add_subcommand("ops", "list supported ONNX operators");

  auto* weights = app.add_subcommand("weights", "inspect and clean an external-weight directory");
  weights->require_subcommand(1);
  std::string store;
  std::vector<std::string> given;
  bool dry_run = false;
  auto* wlist = weights->add_subcommand("list", "list a weight directory's entries and the given models using each");
  wlist->add_option("dir", store, "weight directory")->required();
  wlist->add_option("--model", given, ".kiln file whose use to show (repeatable)");
  auto* wgc = weights->add_subcommand("gc", "remove what the kept models do not use; compact combined files");
  wgc->add_option("dir", store, "weight directory")->required();
  wgc->add_option("--keep", given, ".kiln file whose weights stay (repeatable; at least one)");
  wgc->add_flag("--dry-run", dry_run, "print what would be removed or rewritten; change nothing");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with status 0: CLI11 prints them.
    // A usage error is bad input like any other: "kiln: error: ..." and
    // status 1 (CLI11's own statuses are 105-109 by kind).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "kiln: error: " << e.what() << "\nRun with --help for more information.\n";
    return 1;
  }
  kiln::LoadOptions lo;
  lo.device = device;
  lo.threads = threads;
  lo.verify_weights_checksum = !no_verify;
  lo.check_bounds = check_bounds;
  lo.max_plans = max_plans;
  lo.max_plan_bytes = max_plan_bytes;
  lo.weight_dir = weight_dir;
  lo.trust_recorded_weight_dir = trust_weight_dir;
  lo.verify_weights = verify_sha;
  lo.weight_load_mode = weight_load == "map" ? kiln::WeightLoadMode::kMap
                      : weight_load == "copy" ? kiln::WeightLoadMode::kCopy
                      : weight_load == "staged" ? kiln::WeightLoadMode::kStagedCopy : kiln::WeightLoadMode::kAuto;
  lo.weight_chunk_bytes = static_cast<std::size_t>(chunk_mib * 1048576.0);
  for (const std::string& wf : weight_files) {
    const auto eq = wf.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == wf.size()) {
      return Fail(kiln::Error(StatusCode::kInvalidArgument, "--weight-file '", wf, "': expected ID=PATH"));
    }
    lo.SetWeightFile(wf.substr(0, eq), wf.substr(eq + 1));
  }
  ew.target = target;
  if (*compile) return Compile(model, output, shapes, disable, const_inputs, verbose, ew);
  if (*run) return Run(path, inputs, out_dir, lo);
  if (*inspect) return Inspect(path, as_json);
  if (*bench) return Bench(path, inputs, runs, warmup, lo, as_json, profile_file);
  if (*wlist) return WeightsList(store, given);
  if (*wgc) {
    if (given.empty()) {
      return Fail(kiln::Error(StatusCode::kInvalidArgument, "weights gc: no --keep A.kiln given: refusing to remove "
                              "every weight of '", store, "' (name each model whose weights must stay)"));
    }
    return WeightsGc(store, given, dry_run);
  }
  if (*ops) {
    for (auto& t : kiln::ops::OpRegistry::Get().Types()) std::cout << t << "\n";
    return 0;
  }
  return 1;
}

// No exception may leave the CLI: an allocation failure or a library error
// becomes a clean error and exit status 1, never std::terminate.
int main(int argc, char** argv) {
  try {
    return RealMain(argc, argv);
  } catch (const std::bad_alloc&) {
    return Fail(kiln::Error(StatusCode::kOutOfRange, "out of memory (an allocation failed)"));
  } catch (const std::exception& e) {
    return Fail(kiln::Error(StatusCode::kInternal, "unexpected exception: ", e.what()));
  } catch (...) {
    return Fail(kiln::Error(StatusCode::kInternal, "unexpected exception of unknown type"));
  }
}
