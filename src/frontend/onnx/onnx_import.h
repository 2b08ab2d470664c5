// ONNX frontend: reads an ONNX model file into Kiln IR.
//
// Initializers and Constant nodes become constant values; ONNX external data
// is read from files inside the model's directory only. Symbolic or unknown
// input dims are fixed with ImportOptions::input_shapes. Every node is checked
// against Kiln's op definitions, and all unsupported ops are reported at once.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/tensor.h"
#include "ir/graph.h"

namespace kiln::onnx_frontend {

inline constexpr int kMinOpset = 1;  // per-op versions decide what is implemented
inline constexpr int kMaxOpset = 17;

struct ImportOptions {
  std::map<std::string, Shape> input_shapes;  // by graph input name: exact shapes
  // Ranges and gears by graph input name (ParseInputSpecs); an input named
  // in both takes its spec from here.
  std::map<std::string, ir::InputSpec> input_specs;
  // Graph inputs replaced by these values (they become constants, so shapes
  // that depend on them resolve at compile time). By input name.
  std::map<std::string, HostTensorPtr> constant_inputs;
};

Result<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path,
                                                  const ImportOptions& opts);

// Parses --input-shape: "NAME:DIMS[|DIMS...][;NAME:...]", DIMS a comma list
// of extents N, ranges A..B / A.. and ? (any extent); alternatives that are
// exact shapes are gears, at most one alternative is a range ("x:1,3,224,224",
// "ids:1..8,1..512", "ids:1,128|4,512", "ids:1..8,1..512|1,128"). Errors name
// the bad part.
Result<std::map<std::string, ir::InputSpec>> ParseInputSpecs(const std::string& spec);

}  // namespace kiln::onnx_frontend
