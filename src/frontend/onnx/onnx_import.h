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
  std::map<std::string, Shape> input_shapes;  // by graph input name
  // Graph inputs replaced by these values (they become constants, so shapes
  // that depend on them resolve at compile time). By input name.
  std::map<std::string, HostTensorPtr> constant_inputs;
};

Result<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path,
                                                  const ImportOptions& opts);

// Parses "x:1,3,224,224;y:1,8" into a map; error names the bad part.
Result<std::map<std::string, Shape>> ParseInputShapes(const std::string& spec);

}  // namespace kiln::onnx_frontend
