#include "api/compiler.h"

#include "frontend/onnx/onnx_import.h"
#include "plan/memory_plan.h"

namespace kiln {

Result<format::CompiledModel> CompileGraph(std::unique_ptr<ir::Graph> graph,
                                           const CompileOptions& opts, CompileReport* report) {
  std::vector<std::string> log;
  KILN_RETURN_IF_ERROR(graph->TopologicalSort());
  KILN_RETURN_IF_ERROR(passes::PassManager::Default().Run(*graph, opts.passes, &log));
  KILN_RETURN_IF_ERROR(graph->TopologicalSort());
  KILN_ASSIGN_OR_RETURN(plan::MemoryPlan plan, plan::PlanMemory(*graph));
  if (report) report->pass_log = std::move(log);
  format::CompiledModel m;
  m.graph = std::move(graph);
  m.plan = std::move(plan);
  return m;
}

Result<format::CompiledModel> CompileOnnxFile(const std::string& path, const CompileOptions& opts,
                                              CompileReport* report) {
  onnx_frontend::ImportOptions io;
  io.input_shapes = opts.input_shapes;
  KILN_ASSIGN_OR_RETURN(auto g, onnx_frontend::ImportOnnxFile(path, io));
  auto m = CompileGraph(std::move(g), opts, report);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

}  // namespace kiln
