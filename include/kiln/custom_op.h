// Kiln custom-operator API.
//
// A custom operator is a class combining capability interfaces:
//   ShapeInferOp   — output shapes and types, called at compile time;
//   EagerExecuteOp — Execute(), called ONCE when a graph is loaded: it builds
//                    or loads its kernel (e.g. with kiln/rtc.h), gets its
//                    output buffers (MallocOutputTensor), registers its
//                    argument block (MallocReadOnlyDevArgs) and launches the
//                    kernel on the context's stream, which records the launch
//                    into the graph's task list. Executions replay the list;
//                    Execute is not called again.
//   ArgsUpdater    — UpdateHostArgs(), called before a run whose input/output
//                    addresses changed: rewrite the pointer fields of the host
//                    copy of each registered block (GetKernelArgs(kHost, i))
//                    from the current tensors. Kiln copies changed blocks to
//                    their device copies as a task on the stream, so a run in
//                    flight is never disturbed.
// Ops without ArgsUpdater are "not refreshable": the compiler inserts Identity
// copies between them and the model's inputs/outputs, so their own addresses
// never change (and every run pays for the copies).
//
// Registration: one instance per op type, either explicitly
// (kiln::RegisterCustomOp) or, in a package (a shared library found under
// $KILN_CUSTOM_OP_PATH/<dir>/op_graph/lib/<os>/<arch>/*.so), with
// KILN_CUSTOM_OP_PACKAGE, which exports the ABI version and a registration
// function Kiln calls.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"
#include "kiln/stream.h"

namespace kiln {

inline constexpr std::uint32_t kCustomOpAbiVersion = 1;

enum class Placement { kHost, kDevice };

// A tensor on the device (CPU: host memory). Not owned.
struct DeviceTensor {
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::size_t bytes = 0;
};

// Attribute values of the op's node (ints, floats, strings and their lists).
class OpAttributes {
 public:
  virtual ~OpAttributes() = default;
  virtual bool Has(const std::string& name) const = 0;
  virtual std::int64_t GetInt(const std::string& name, std::int64_t def) const = 0;
  virtual float GetFloat(const std::string& name, float def) const = 0;
  virtual std::string GetString(const std::string& name, const std::string& def) const = 0;
  virtual std::vector<std::int64_t> GetInts(const std::string& name) const = 0;
};

class InferShapeContext {
 public:
  virtual ~InferShapeContext() = default;
  virtual const std::string& node_name() const = 0;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  virtual const Shape& input_shape(int i) const = 0;
  virtual DType input_dtype(int i) const = 0;
  virtual Status SetOutputShape(int i, Shape shape) = 0;
  virtual Status SetOutputDataType(int i, DType dtype) = 0;
  virtual const OpAttributes& attributes() const = 0;
};

class EagerExecuteContext {
 public:
  virtual ~EagerExecuteContext() = default;
  virtual const std::string& node_name() const = 0;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  virtual const OpAttributes& attributes() const = 0;
  // Current input i (OUT_OF_RANGE error for a bad index).
  virtual Result<DeviceTensor> GetInputTensor(int i) = 0;
  // The (planned) buffer of output i, with its inferred shape and type.
  virtual Result<DeviceTensor> MallocOutputTensor(int i) = 0;
  // Scratch memory owned by the graph, valid for every run.
  virtual Result<void*> MallocWorkspace(std::size_t bytes) = 0;
  // Registers an argument block: Kiln keeps a host copy and a device copy
  // (initialised from `host_args`) and returns the device copy's address,
  // which the kernel launch should pass. Blocks are numbered in order.
  virtual Result<const void*> MallocReadOnlyDevArgs(const void* host_args, std::size_t size) = 0;
  // The stream to launch on (recording while the graph loads).
  virtual Stream& GetStream() = 0;
};

class ArgsUpdaterContext {
 public:
  virtual ~ArgsUpdaterContext() = default;
  virtual const std::string& node_name() const = 0;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  // Tensors at their addresses for the coming run.
  virtual Result<DeviceTensor> GetInputTensor(int i) = 0;
  virtual Result<DeviceTensor> GetOutputTensor(int i) = 0;
  // The index-th block registered by Execute: kHost gives the writable host
  // copy; kDevice the device copy's address (read-only to the op).
  virtual Result<void*> GetKernelArgs(Placement placement, int index) = 0;
  virtual std::size_t num_kernel_args() const = 0;
};

class ShapeInferOp {
 public:
  virtual ~ShapeInferOp() = default;
  virtual Status InferShape(InferShapeContext& ctx) = 0;
  virtual Status InferDataType(InferShapeContext& ctx) = 0;
};

class EagerExecuteOp {
 public:
  virtual ~EagerExecuteOp() = default;
  virtual Status Execute(EagerExecuteContext& ctx) = 0;
};

class ArgsUpdater {
 public:
  virtual ~ArgsUpdater() = default;
  virtual Status UpdateHostArgs(ArgsUpdaterContext& ctx) = 0;
};

// Base for custom-op classes (so one object can be held and queried).
class CustomOp {
 public:
  virtual ~CustomOp() = default;
};

// Registers `op` for `op_type` (one instance per type; a second registration
// of the same type is an error). The op must derive from CustomOp and from
// ShapeInferOp and EagerExecuteOp; ArgsUpdater is optional.
Status RegisterCustomOp(const std::string& op_type, std::unique_ptr<CustomOp> op);
// The registered op, or null.
CustomOp* FindCustomOp(const std::string& op_type);
// Loads every package under each directory of $KILN_CUSTOM_OP_PATH
// (':'-separated): <dir>/op_graph/lib/<os>/<arch>/*.so. Errors say where
// Kiln looked, which library failed and why (missing symbol, ABI version).
Status LoadCustomOpPackages();
// Loads one package library.
Status LoadCustomOpLibrary(const std::string& path);

// Registration hook a package exports (see KILN_CUSTOM_OP_PACKAGE).
class CustomOpRegistrar {
 public:
  virtual ~CustomOpRegistrar() = default;
  virtual Status Register(const std::string& op_type, std::unique_ptr<CustomOp> op) = 0;
};

}  // namespace kiln

// In a package's source: KILN_CUSTOM_OP_PACKAGE(registrar) { registrar.Register("MyOp", ...); return {}; }
#define KILN_CUSTOM_OP_PACKAGE(reg)                                                     \
  extern "C" std::uint32_t kiln_custom_op_abi_version() { return ::kiln::kCustomOpAbiVersion; } \
  static ::kiln::Status KilnRegisterCustomOpsImpl(::kiln::CustomOpRegistrar& reg);       \
  extern "C" int kiln_register_custom_ops(::kiln::CustomOpRegistrar* r, char* err, std::size_t errlen) { \
    ::kiln::Status s = KilnRegisterCustomOpsImpl(*r);                                     \
    if (!s.ok() && err && errlen) {                                                      \
      std::snprintf(err, errlen, "%s", s.ToString().c_str());                             \
    }                                                                                    \
    return s.ok() ? 0 : 1;                                                               \
  }                                                                                      \
  static ::kiln::Status KilnRegisterCustomOpsImpl(::kiln::CustomOpRegistrar& reg)

// Explicit in-process registration: KILN_REGISTER_CUSTOM_OP(AddRefresh, AddRefreshOp);
#define KILN_REGISTER_CUSTOM_OP(type_name, cls) \
  ::kiln::RegisterCustomOp(#type_name, std::make_unique<cls>())
