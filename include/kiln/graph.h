// Building a graph in C++: inputs with dtype/shape, any op (built-in ONNX op
// or a registered custom op) by type with inputs and attributes, constants,
// outputs. Hand the result to Session::AddGraph.
//
//   kiln::Graph g("add");
//   auto x = g.AddInput("x", kiln::DType::kFloat32, {4096, 4096});
//   auto y = g.AddInput("y", kiln::DType::kFloat32, {4096, 4096});
//   auto z = g.AddOp("AddRefresh", {x, y});          // Result<std::vector<Tensor>>
//   g.AddOutput(z.value()[0], "z");
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln {

namespace ir { class Graph; }

using AttrValue = std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>>;
using Attributes = std::map<std::string, AttrValue>;

class Graph {
 public:
  // A value in the graph under construction.
  struct Tensor {
    int id = -1;
  };

  explicit Graph(std::string name = "graph");
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;

  Tensor AddInput(const std::string& name, DType dtype, Shape shape);
  // Copies `data` (numel * element size bytes).
  Result<Tensor> AddConstant(const std::string& name, DType dtype, Shape shape, const void* data);
  // A constant read from the caller's file: bytes [offset, offset + dtype
  // size x numel) of `path`, read now (the file may change afterwards). When
  // the graph compiles they are stored like any constant: embedded, or
  // written to the external weight store in modes 1 and 2. Errors name the
  // file and the sizes (file too short, not a regular file).
  Result<Tensor> AddConstantFromFile(const std::string& name, DType dtype, Shape shape, const std::string& path,
                                     std::uint64_t offset = 0);
  // A FileConstant resolved when the compiled graph is loaded (GE's file_id
  // with a value table): its bytes are [offset, offset + dtype size x numel)
  // of the file or memory that LoadOptions::SetWeightFile /
  // SetWeightFileAddress (SessionOptions::load for a session's graphs) give
  // for `file_id`. Nothing is read or stored at compile time. file_id: 1 to
  // 256 printable ASCII bytes.
  Result<Tensor> AddFileConstant(const std::string& name, DType dtype, Shape shape, const std::string& file_id,
                                 std::uint64_t offset = 0);
  // Adds a node; errors name the op type (unknown type, bad tensor handle).
  // Types are checked when the graph compiles.
  Result<std::vector<Tensor>> AddOp(const std::string& type, const std::vector<Tensor>& inputs,
                                    const Attributes& attrs = {}, int num_outputs = 1,
                                    const std::string& name = "");
  // Marks `t` as a graph output (named `name` if given).
  Status AddOutput(Tensor t, const std::string& name = "");

  // Internal: hands the IR over (the Graph is empty afterwards).
  std::unique_ptr<ir::Graph> TakeIr();
  // Internal: wraps an IR graph (an imported ONNX model, for the C API).
  static Graph FromIr(std::unique_ptr<ir::Graph> g);

 private:
  std::unique_ptr<ir::Graph> g_;
  int counter_ = 0;
};

}  // namespace kiln
