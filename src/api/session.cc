// Session's graph API (compiles in-process, so it lives in kiln_compiler).
#include <filesystem>

#include "api/compiler.h"
#include "kiln/graph.h"
#include "kiln/stream.h"
#include "runtime/session_impl.h"

namespace kiln {
namespace {

Result<Session::Impl::GraphEntry*> Entry(Session::Impl& im, std::uint32_t id) {
  auto it = im.graphs.find(id);
  if (it == im.graphs.end()) return Error(StatusCode::kNotFound, "graph id ", id, " is not in this session");
  return &it->second;
}

}  // namespace

Result<std::uint32_t> Session::AddGraph(Graph&& graph) {
  std::unique_ptr<ir::Graph> g = graph.TakeIr();
  if (!g) return Error(StatusCode::kInvalidArgument, "AddGraph: the graph is empty (already added?)");
  if (g->outputs().empty()) return Error(StatusCode::kInvalidArgument, "AddGraph: graph '", g->name(), "' has no outputs");
  const std::uint32_t id = impl_->next_id++;
  impl_->graphs[id].graph = std::move(g);
  return id;
}

Status Session::CompileGraph(std::uint32_t id) {
  KILN_ASSIGN_OR_RETURN(Impl::GraphEntry * e, Entry(*impl_, id));
  if (e->compiled_once) return Status::Ok();
  CompileOptions co;
  co.external_weight = impl_->opts.external_weight;
  co.external_weight_dir = impl_->opts.external_weight_dir;
  co.weight_writer_threads = impl_->opts.weight_writer_threads;
  CompileReport rep;
  const std::string name = e->graph->name();
  auto m = kiln::CompileGraph(std::move(e->graph), co, &rep);
  if (!m.ok()) return m.status().WithContext(StrCat("compiling graph ", id, " ('", name, "')"));
  if (rep.weight_dir_is_temporary) impl_->temp_dirs.push_back(rep.weight_dir);
  e->summary = SummarizeCompiled(m.value(), rep);
  e->compiled = std::move(m).value();
  e->compiled_once = true;
  return Status::Ok();
}

Status Session::LoadGraph(std::uint32_t id, Stream* stream) {
  KILN_ASSIGN_OR_RETURN(Impl::GraphEntry * e, Entry(*impl_, id));
  if (e->model) return Status::Ok();
  KILN_RETURN_IF_ERROR(CompileGraph(id));
  if (!e->compiled) return Error(StatusCode::kInternal, "graph ", id, " has no compiled form");
  KILN_ASSIGN_OR_RETURN(weights::WeightManager* manager, impl_->WeightsFor(impl_->opts.load.device));
  auto model = CreateModel(std::move(*e->compiled), nullptr, impl_->opts.load, *manager, e->summary.weight_dir,
                           stream, StrCat("graph ", id));
  e->compiled.reset();
  if (!model.ok()) return model.status();
  e->model = std::move(model).value();
  return Status::Ok();
}

Status Session::ExecuteGraphWithStreamAsync(std::uint32_t id, Stream& stream, const std::vector<TensorRef>& inputs,
                                            const std::vector<TensorRef>& outputs) {
  KILN_ASSIGN_OR_RETURN(Impl::GraphEntry * e, Entry(*impl_, id));
  if (!e->model) return Error(StatusCode::kInvalidArgument, "graph ", id, " is not loaded: call LoadGraph first");
  return e->model->ExecuteAsync(stream, inputs, outputs).WithContext(StrCat("graph ", id));
}

Status Session::RunGraph(std::uint32_t id, const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs) {
  KILN_ASSIGN_OR_RETURN(Impl::GraphEntry * e, Entry(*impl_, id));
  if (!e->model) KILN_RETURN_IF_ERROR(LoadGraph(id, nullptr));
  return e->model->Execute(inputs, outputs).WithContext(StrCat("graph ", id));
}

Status Session::RemoveGraph(std::uint32_t id) {
  auto it = impl_->graphs.find(id);
  if (it == impl_->graphs.end()) return Error(StatusCode::kNotFound, "graph id ", id, " is not in this session");
  impl_->graphs.erase(it);
  return Status::Ok();
}

Result<CompiledGraphSummary> Session::GetCompiledGraphSummary(std::uint32_t id) const {
  KILN_ASSIGN_OR_RETURN(Impl::GraphEntry * e, Entry(*impl_, id));
  if (!e->compiled_once) return Error(StatusCode::kInvalidArgument, "graph ", id, " is not compiled yet");
  return e->summary;
}

}  // namespace kiln
