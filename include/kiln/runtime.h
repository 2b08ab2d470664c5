// Kiln runtime C++ API: load a compiled .kiln model, describe its inputs and
// outputs, bind caller-owned buffers, execute.
//
//   auto model = kiln::Model::Load("resnet18.kiln", {});
//   if (!model.ok()) { ... model.status().ToString() ... }
//   std::vector<float> x(3 * 224 * 224), y(1000);
//   kiln::Status s = (*model)->Execute({kiln::TensorRef::Of(x.data(), {1, 3, 224, 224})},
//                                      {kiln::TensorRef::Of(y.data(), {1, 1000})});
//
// A Model is not thread-safe: one Execute at a time (it owns one arena).
// Deploying needs only this runtime library (no protobuf/ONNX).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::size_t bytes = 0;
};

// A caller-owned buffer with its claimed type and shape (checked against the
// model's). Kiln never frees it.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;
  template <typename T> static TensorRef Of(T* p, Shape s);
  static TensorRef Of(const float* p, Shape s) { return {const_cast<float*>(p), DType::kFloat32, std::move(s)}; }
};

struct LoadOptions {
  int threads = 1;                      // kernel threads (OpenMP)
  bool verify_weights_checksum = true;  // CRC-32 of the embedded weights
  // Debug mode: every intermediate gets its own allocation framed by guard
  // bytes, checked after each kernel; an out-of-bounds write fails the run
  // with an error naming the node and tensor. Slower; for tests.
  bool check_bounds = false;
};

// Per-execution counters.
struct ExecutionStats {
  std::uint64_t tasks_run = 0;
  std::uint64_t slots_refreshed = 0;  // argument-block pointers rewritten
};

class Model {
 public:
  virtual ~Model() = default;
  // Maps, verifies and prepares `path` (kernels are created here, once).
  // Errors: kNotFound / kIoError for the file, kCorrupt for a malformed file,
  // kUnimplemented for an op this runtime lacks.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const LoadOptions& opts);

  virtual const std::vector<TensorInfo>& inputs() const = 0;
  virtual const std::vector<TensorInfo>& outputs() const = 0;
  // Planned arena bytes and embedded-constant bytes.
  virtual std::uint64_t arena_bytes() const = 0;
  virtual std::uint64_t weight_bytes() const = 0;
  virtual void set_threads(int threads) = 0;

  // Runs the model on caller-owned buffers, in model input/output order.
  // Buffers whose address changed since the last call are rebound by
  // rewriting argument-block pointers; nothing is copied. Errors
  // (kInvalidArgument) name the input/output and expected vs found count,
  // dtype or shape.
  virtual Status Execute(const std::vector<TensorRef>& inputs,
                         const std::vector<TensorRef>& outputs) = 0;
  virtual const ExecutionStats& last_stats() const = 0;
};

template <typename T>
TensorRef TensorRef::Of(T* p, Shape s) {
  DType t = DType::kUndefined;
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) t = DType::kFloat32;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, double>) t = DType::kFloat64;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, std::int64_t>) t = DType::kInt64;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, std::int32_t>) t = DType::kInt32;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, std::uint8_t>) t = DType::kUInt8;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, std::int8_t>) t = DType::kInt8;
  else if constexpr (std::is_same_v<std::remove_const_t<T>, bool>) t = DType::kBool;
  return {const_cast<std::remove_const_t<T>*>(p), t, std::move(s)};
}

}  // namespace kiln
