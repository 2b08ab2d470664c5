// The compiler entry point: ONNX file -> optimised, planned CompiledModel.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "passes/pass_manager.h"

namespace kiln {

struct CompileOptions {
  std::map<std::string, Shape> input_shapes;  // fixes symbolic/unknown dims
  // Ranges and gears (the --input-shape grammar, onnx_frontend::ParseInputSpecs);
  // an input named here takes its spec from here, not from input_shapes.
  std::map<std::string, ir::InputSpec> input_specs;
  std::map<std::string, HostTensorPtr> constant_inputs;  // inputs baked in as constants
  passes::PassOptions passes;                 // switches by pass or phase name
  // External weights: 0 = embedded in the .kiln file, 1 = one file per weight
  // (weight_<sha256>), 2 = one combined file (<model_name>_weight_combined).
  int external_weight = 0;
  // Where to write them; empty = a temporary tmp_weight_<pid>_<n> directory
  // under $KILN_WORK_PATH (else the working directory).
  std::string external_weight_dir;
  int weight_writer_threads = 8;
  std::string model_name;  // mode 2 file prefix; default: the graph's name
  // The device kind the model is compiled for ("cpu", "sim", "sim:lack=Relu"):
  // passes ask it what it supports (layouts, fusions); the .kiln records it.
  std::string target = "cpu";
};

// ExternalWeightInfo and ListExternalWeights: format/kiln_file.h (the
// runtime-only build's `kiln inspect` uses them too).

struct CompileReport {
  std::vector<std::string> pass_log;
  std::string weight_dir;          // where external weights were written
  bool weight_dir_is_temporary = false;
  std::vector<weights::WeightRef> weight_records;
  weights::StoreStats weight_stats;
};


// Offline compiles: moves weights from a temporary directory to `final_dir`
// (merging with what is there) and repoints the graph's FileConstants.
Status MigrateExternalWeights(format::CompiledModel& model, CompileReport& report,
                              const std::string& final_dir, const CompileOptions& opts);

// Imports, optimises and plans. Errors name file, node, attribute.
Result<format::CompiledModel> CompileOnnxFile(const std::string& path, const CompileOptions& opts,
                                              CompileReport* report = nullptr);

// What `kiln compile` does (and the C and Python APIs): CompileOnnxFile, then
// for an offline external-weight compile (no external_weight_dir) the move of
// the weights to <output dir>/weight, then the .kiln written atomically.
// opts.model_name defaults to the output's stem.
Result<format::CompiledModel> CompileOnnxFileTo(const std::string& path, const std::string& output,
                                                const CompileOptions& opts, CompileReport* report = nullptr);

// The summary of a compiled model (sessions, the C and Python APIs).
CompiledGraphSummary SummarizeCompiled(const format::CompiledModel& model, const CompileReport& report);

// Optimises and plans a graph built in memory.
Result<format::CompiledModel> CompileGraph(std::unique_ptr<ir::Graph> graph,
                                           const CompileOptions& opts,
                                           CompileReport* report = nullptr);

}  // namespace kiln
