// The compiler entry point: ONNX file -> optimised, planned CompiledModel.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "format/kiln_file.h"
#include "passes/pass_manager.h"

namespace kiln {

struct CompileOptions {
  std::map<std::string, Shape> input_shapes;  // fixes symbolic/unknown dims
  passes::PassOptions passes;                 // switches by pass or phase name
};

struct CompileReport {
  std::vector<std::string> pass_log;
};

// Imports, optimises and plans. Errors name file, node, attribute.
Result<format::CompiledModel> CompileOnnxFile(const std::string& path, const CompileOptions& opts,
                                              CompileReport* report = nullptr);

// Optimises and plans a graph built in memory.
Result<format::CompiledModel> CompileGraph(std::unique_ptr<ir::Graph> graph,
                                           const CompileOptions& opts,
                                           CompileReport* report = nullptr);

}  // namespace kiln
