// Session internals shared by the runtime (LoadModel) and the compiler
// library (the graph API).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "weights/weight_manager.h"

namespace kiln {

// Builds a runnable model from a compiled graph (resolving custom ops and
// external weights, recording the task list). `keepalive` holds whatever the
// graph's constants borrow from (a file mapping). `default_weight_dir` is used
// when opts.weight_dir is empty. `what` names the model in errors.
Result<std::unique_ptr<Model>> CreateModel(format::CompiledModel model, std::shared_ptr<const void> keepalive,
                                           const LoadOptions& opts, weights::WeightManager& manager,
                                           const std::string& default_weight_dir, Stream* load_stream,
                                           const std::string& what);

struct Session::Impl {
  struct GraphEntry {
    std::unique_ptr<ir::Graph> graph;                 // until compiled
    std::optional<format::CompiledModel> compiled;    // until loaded
    CompiledGraphSummary summary;
    bool compiled_once = false;
    std::unique_ptr<Model> model;                     // once loaded
  };
  SessionOptions opts;
  // One weight manager per device: a weight is loaded once per device and
  // content.
  std::map<device::Device*, std::shared_ptr<weights::WeightManager>> weights;
  Result<weights::WeightManager*> WeightsFor(const std::string& device_spec);
  std::map<std::uint32_t, GraphEntry> graphs;
  std::uint32_t next_id = 1;
  std::vector<std::string> temp_dirs;  // removed when the session ends
  ~Impl();
};

}  // namespace kiln
