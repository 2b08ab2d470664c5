#include "api/compiler.h"
#include "runtime/executor.h"

#include "runtime/devices.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include <set>

#include "custom/registry.h"
#include "frontend/onnx/onnx_import.h"
#include "plan/memory_plan.h"
#include "weights/weight_dir.h"

namespace kiln {

namespace {

std::atomic<int> g_temp_counter{0};

// Whether `name` is tmp_weight_<pid>_<n> of a process that no longer exists.
bool IsStaleTempWeightDir(const std::string& name) {
  const std::string prefix = "tmp_weight_";
  if (name.rfind(prefix, 0) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  const auto us = rest.find('_');
  if (us == 0 || us == std::string::npos || us > 9 || us + 1 == rest.size()) return false;
  long pid = 0;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (i == us) continue;
    if (rest[i] < '0' || rest[i] > '9') return false;
    if (i < us) pid = pid * 10 + (rest[i] - '0');
  }
  if (pid <= 0 || pid == getpid()) return false;
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// A fresh tmp_weight_<pid>_<n> path under $KILN_WORK_PATH (else the working
// directory). Directories of that form left by processes that are gone
// (kill -9 during a compile) are removed first.
std::string TempWeightDir() {
  const char* work = std::getenv("KILN_WORK_PATH");
  std::error_code ec;
  std::filesystem::path base = work && *work ? std::filesystem::path(work) : std::filesystem::current_path(ec);
  if (base.empty()) base = ".";
  for (std::filesystem::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsStaleTempWeightDir(name) && it->is_directory(ec) && !it->is_symlink(ec)) {
      std::error_code rm;
      std::filesystem::remove_all(it->path(), rm);
    }
  }
  return (base / StrCat("tmp_weight_", getpid(), "_", g_temp_counter++)).string();
}

// Removes a temporary weight directory when the compile that made it fails.
class TempDirGuard {
 public:
  explicit TempDirGuard(std::string dir = {}) : dir_(std::move(dir)) {}
  TempDirGuard(const TempDirGuard&) = delete;
  TempDirGuard& operator=(const TempDirGuard&) = delete;
  ~TempDirGuard() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Set(std::string dir) { dir_ = std::move(dir); }
  void Keep() { dir_.clear(); }

 private:
  std::string dir_;
};

weights::StoreOptions StoreOpts(const CompileOptions& opts, const ir::Graph& g) {
  weights::StoreOptions so;
  so.mode = opts.external_weight;
  // An explicit name is checked by the store (an error naming it); a graph
  // name that is not a valid file prefix falls back to "model".
  so.model_name = opts.model_name.empty()
                      ? (weights::CheckModelName(g.name()).ok() ? g.name() : std::string("model"))
                      : opts.model_name;
  so.writer_threads = opts.weight_writer_threads;
  return so;
}

}  // namespace

Status MigrateExternalWeights(format::CompiledModel& model, CompileReport& report,
                              const std::string& final_dir, const CompileOptions& opts) {
  if (!report.weight_dir_is_temporary || report.weight_dir.empty()) return Status::Ok();
  // A failed migration may have moved part of the temporary directory
  // already: the model is unusable then, and the directory is removed.
  TempDirGuard guard(report.weight_dir);
  weights::StoreStats moved;
  KILN_ASSIGN_OR_RETURN(auto records, weights::MigrateWeights(report.weight_dir, final_dir, report.weight_records,
                                                              StoreOpts(opts, *model.graph), &moved));
  // The statistics say what reached the final directory (not what the
  // temporary one received): a weight already there is reused, not written.
  report.weight_stats.written = moved.written;
  report.weight_stats.bytes_written = moved.bytes_written;
  report.weight_stats.reused = moved.reused;
  report.weight_stats.repaired += moved.repaired;
  report.weight_stats.warnings.insert(report.weight_stats.warnings.end(), moved.warnings.begin(), moved.warnings.end());
  KILN_RETURN_IF_ERROR(passes::RelocateFileConstants(*model.graph, records));
  guard.Keep();  // MigrateWeights removed it
  report.weight_records = std::move(records);
  report.weight_dir = final_dir;
  report.weight_dir_is_temporary = false;
  return Status::Ok();
}

namespace {

// No exception crosses the compiler's API: an allocation that fails (a
// model too large for the machine) or any other exception from a library
// becomes an error naming what was being compiled.
template <typename F>
auto NoThrow(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, what, ": out of memory while compiling");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, what, ": unexpected exception while compiling: ", e.what());
  }
}

Result<format::CompiledModel> CompileGraphImpl(std::unique_ptr<ir::Graph> graph, const CompileOptions& opts,
                                               CompileReport* report) {
  if (!graph) return Error(StatusCode::kInvalidArgument, "CompileGraph: no graph");
  if (opts.external_weight < 0 || opts.external_weight > 2) {
    return Error(StatusCode::kInvalidArgument, "external_weight must be 0 (embedded), 1 (one file per weight) or 2 "
                 "(one combined file), got ", opts.external_weight);
  }
  if (opts.weight_writer_threads < 1) {
    return Error(StatusCode::kInvalidArgument, "weight writer threads must be >= 1, got ", opts.weight_writer_threads);
  }
  auto target = runtime::OpenCompileTarget(opts.target.empty() ? "cpu" : opts.target);
  if (!target.ok()) return target.status().WithContext("compile target");
  passes::PassOptions popts = opts.passes;
  popts.target_channels_last = target.value()->caps().channels_last_conv;
  popts.target_fused_epilogues = target.value()->caps().fused_epilogues;
  popts.target_half_arithmetic = target.value()->caps().half_arithmetic;
  device::Device* tdev = target.value();
  if (tdev != &runtime::CpuDevice()) {  // on the CPU itself nothing moves
    popts.target_has_kernel = [tdev](const ir::Node& n) {
      std::vector<DType> dtypes;
      for (const ir::Value* v : n.inputs()) dtypes.push_back(v ? v->dtype() : DType::kUndefined);
      return tdev->SupportsNode(n, dtypes);
    };
  }
  std::vector<std::string> log;
  KILN_RETURN_IF_ERROR(graph->TopologicalSort());
  KILN_RETURN_IF_ERROR(passes::PassManager::Default().Run(*graph, popts, &log));
  KILN_RETURN_IF_ERROR(graph->TopologicalSort());
  // Every gear specializes and plans here as the loader will make it: a
  // gear the model cannot run fails the compile, not the load.
  for (std::size_t k = 0; k < graph->gears().size(); ++k) {
    const auto& sig = graph->gears()[k];
    std::string shapes;
    for (const Shape& s : sig) shapes += StrCat(shapes.empty() ? "" : ", ", ShapeToString(s));
    auto c = ir::CloneGraph(*graph);
    for (std::size_t i = 0; i < sig.size() && i < c->inputs().size(); ++i) c->inputs()[i]->set_shape(sig[i]);
    Status st = runtime::SpecializeGraph(*c);
    if (st.ok()) st = plan::PlanMemory(*c).status();
    if (!st.ok()) return st.WithContext(StrCat("gear ", k, " (input shapes ", shapes, ")"));
  }
  CompileReport local;
  CompileReport& rep = report ? *report : local;
  TempDirGuard temp_guard;  // a failed compile removes its temporary weight directory
  if (opts.external_weight != 0) {
    rep.weight_dir = opts.external_weight_dir.empty() ? TempWeightDir() : opts.external_weight_dir;
    rep.weight_dir_is_temporary = opts.external_weight_dir.empty();
    if (rep.weight_dir_is_temporary) temp_guard.Set(rep.weight_dir);
    KILN_ASSIGN_OR_RETURN(rep.weight_records,
                          passes::ExternalizeConstants(*graph, rep.weight_dir, StoreOpts(opts, *graph), &rep.weight_stats));
  }
  KILN_ASSIGN_OR_RETURN(plan::MemoryPlan plan, plan::PlanMemory(*graph));
  temp_guard.Keep();
  rep.pass_log = std::move(log);
  format::CompiledModel m;
  std::set<std::string> custom_types;
  for (auto& n : graph->nodes()) {
    if (custom::IsCustomNode(*n)) custom_types.insert(n->op_type());
  }
  m.custom_op_types.assign(custom_types.begin(), custom_types.end());
  m.graph = std::move(graph);
  m.plan = std::move(plan);
  m.target = target.value()->spec();
  return m;
}

}  // namespace

Result<format::CompiledModel> CompileGraph(std::unique_ptr<ir::Graph> graph,
                                           const CompileOptions& opts, CompileReport* report) {
  const std::string what = StrCat("graph '", graph ? graph->name() : std::string(), "'");
  return NoThrow(what, [&] { return CompileGraphImpl(std::move(graph), opts, report); });
}

Result<format::CompiledModel> CompileOnnxFile(const std::string& path, const CompileOptions& opts,
                                              CompileReport* report) {
  return NoThrow(path, [&]() -> Result<format::CompiledModel> {
    // Packages under $KILN_CUSTOM_OP_PATH give the importer and shape
    // inference their ops (found by type in any non-ONNX domain).
    KILN_RETURN_IF_ERROR(LoadCustomOpPackages().WithContext(StrCat("compiling '", path, "'")));
    onnx_frontend::ImportOptions io;
    io.input_shapes = opts.input_shapes;
    io.input_specs = opts.input_specs;
    io.constant_inputs = opts.constant_inputs;
    KILN_ASSIGN_OR_RETURN(auto g, onnx_frontend::ImportOnnxFile(path, io));
    auto m = CompileGraph(std::move(g), opts, report);
    if (!m.ok()) return m.status().WithContext(path);
    return m;
  });
}

CompiledGraphSummary SummarizeCompiled(const format::CompiledModel& cm, const CompileReport& report) {
  CompiledGraphSummary s;
  s.num_nodes = cm.graph->nodes().size();
  s.arena_bytes = cm.plan.arena_size;
  s.no_reuse_bytes = cm.plan.no_reuse_size;
  s.lower_bound_bytes = cm.plan.lower_bound;
  s.embedded_weight_bytes = cm.plan.const_size;
  s.weight_dir = report.weight_dir;
  auto ws = ListExternalWeights(*cm.graph);  // (decoded when compiled or loaded: cannot fail here)
  if (ws.ok()) {
    for (auto& w : ws.value()) s.external_weights.push_back({w.location, w.length, w.offset, w.sha256, w.file_id});
  }
  for (auto& n : cm.graph->nodes()) {
    if (!n->HasAttr("kiln.inserted_for")) continue;
    const std::string op = n->GetString("kiln.inserted_for", "");
    const ir::Node* target = nullptr;
    for (auto& o : cm.graph->nodes()) {
      if (o->name() == op) target = o.get();
    }
    s.inserted_identities.push_back(
        {n->name(), op,
         StrCat("custom op '", op, "' (type ", target ? target->op_type() : std::string("?"),
                ") does not implement ArgsUpdater, so its model inputs/outputs are copied each run")});
  }
  return s;
}

namespace {

// Whether the graph has weights in a weight directory (not file_id ones).
bool HasDirectoryWeights(const ir::Graph& g) {
  auto ws = ListExternalWeights(g);
  if (!ws.ok()) return true;
  for (auto& w : ws.value()) {
    if (w.file_id.empty()) return true;
  }
  return false;
}

}  // namespace

Result<format::CompiledModel> CompileOnnxFileTo(const std::string& path, const std::string& output,
                                                const CompileOptions& opts, CompileReport* report) {
  CompileReport local;
  CompileReport& r = report ? *report : local;
  CompileOptions o = opts;
  if (o.model_name.empty()) o.model_name = std::filesystem::path(output).stem().string();
  KILN_ASSIGN_OR_RETURN(format::CompiledModel m, CompileOnnxFile(path, o, &r));
  if (r.weight_dir_is_temporary) {
    // Offline compile: weights move next to the model, locations stay relative.
    std::error_code ec;
    auto final_dir = std::filesystem::absolute(output, ec).parent_path() / "weight";
    if (ec) return Error(StatusCode::kIoError, "output '", output, "': ", ec.message());
    KILN_RETURN_IF_ERROR(MigrateExternalWeights(m, r, final_dir.string(), o));
  }
  if (HasDirectoryWeights(*m.graph) && !r.weight_dir.empty()) {
    // The .kiln records its weight directory relative to itself, so it runs
    // without flags wherever the two move together.
    std::error_code ec;
    const auto out_dir = std::filesystem::absolute(output, ec).parent_path();
    const auto wdir = std::filesystem::absolute(r.weight_dir, ec);
    if (ec) return Error(StatusCode::kIoError, "weight directory '", r.weight_dir, "': ", ec.message());
    const std::string rel = wdir.lexically_normal().lexically_relative(out_dir.lexically_normal()).generic_string();
    m.weight_dir = rel;  // "." where the weights sit next to the .kiln
  }
  KILN_RETURN_IF_ERROR(format::WriteModelFile(m, output));
  return m;
}

}  // namespace kiln
