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
// Runs of one model are ordered even across streams: an ExecuteAsync on
// another stream than the previous one waits (on the device) for that run,
// and Execute waits for a run still queued.
// Deploying needs only this runtime library (no protobuf/ONNX).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln {

// One dim of an input or output. `value`: its extent, or -1 for a dim that
// varies: a data-dependent dim, or a symbolic one (an input dim compiled
// without a fixed extent, and what follows from it). [min, max]: the
// extents it may take (max -1: unbounded): for a dim named by a symbol of
// the model ("batch"), the symbol's range; for a data-dependent dim, 0 to
// its upper bound; otherwise value..value. `symbol`: the model's name for
// the dim, "" if it has none. (A model compiled with --input-shape batch=1
// reports {1, 1, 1, "batch"}; one compiled with batch left open reports
// {-1, 1, -1, "batch"}.)
struct DimInfo {
  std::int64_t value = 0;
  std::int64_t min = 0;
  std::int64_t max = 0;
  std::string symbol;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  // For data-dependent dims: their upper bound. Symbolic dims: -1 (the
  // extent comes with each run's input shapes; Model::OutputShapes gives
  // the outputs' for given input shapes).
  Shape shape;
  std::size_t bytes = 0;  // bytes of `shape` (the buffer to bind); 0 if a dim is symbolic
  // Bit d set: dim d is data-dependent (outputs after NonZero,
  // NonMaxSuppression, ...). Bind a buffer of the upper-bound shape; the
  // run writes the actual tensor densely at its start and
  // Model::output_shape tells its shape.
  std::uint64_t dynamic_dims = 0;
  // Per dim (shape.size() entries): extent, range and symbol.
  std::vector<DimInfo> dims;
  // An input whose values decide shapes (a Reshape's target, Slice's
  // starts, Expand's shape, ... fed as a model input): plans are made per
  // signature of input shapes and of these inputs' values, which are read
  // on the host before each run (pass them in host memory).
  bool shape_input = false;
  // An output whose rank depends on the data (an If whose branches yield
  // different ranks, and what is computed from it elementwise): each entry
  // is one shape it may take, data-dependent dims at their bound; `shape`
  // is the one of most bytes (bind a buffer of that shape, every dim in
  // dynamic_dims) and Model::output_shape gives each run's. Empty for every
  // other tensor.
  std::vector<Shape> rank_alternatives;
};

// A caller-owned buffer with its claimed type and shape (checked against the
// model's). Kiln never frees it.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;
  // Where `data` lives. Host memory (false) is copied to and from the
  // model's device around each run where the device cannot use host memory
  // (sim, a GPU); device memory (true: a DeviceBuffer of the model's device)
  // is bound in place, by address refresh. On cpu both are bound in place.
  bool on_device = false;
  template <typename T> static TensorRef Of(T* p, Shape s);
  static TensorRef Of(const float* p, Shape s) { return {const_cast<float*>(p), DType::kFloat32, std::move(s)}; }
};

namespace weights { class WeightManager; }

// Memory of a device ("cpu", "sim", ...), for binding model inputs and
// outputs without copies (TensorRef::on_device) or for filling external
// weights in user memory. On cpu it is host memory.
class DeviceBuffer {
 public:
  static Result<std::unique_ptr<DeviceBuffer>> Allocate(const std::string& device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Synchronous copies; errors name the range and the buffer's size.
  Status CopyFromHost(const void* src, std::size_t bytes, std::size_t offset = 0);
  Status CopyToHost(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  TensorRef Ref(DType dtype, Shape shape) const { return {data_, dtype, std::move(shape), true}; }

  struct Impl;

 private:
  DeviceBuffer() = default;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  Impl* impl_ = nullptr;
};

// How external weight files are brought to the device.
enum class WeightLoadMode {
  kAuto,  // map in place where the device can use host memory (CPU), else copy
  kMap,   // map the files read-only and use them in place (zero copy; refused where the device cannot use host memory)
  kCopy,  // read in chunks into device memory (straight into it where it is host-addressable)
  kStagedCopy,  // always through staging buffers, reads overlapping copies: the GPU path, on any device
};

struct LoadOptions {
  // The device to run on: "cpu", or "sim" (a simulated discrete device that
  // runs the CPU kernels on memory the host may not touch; options after a
  // colon: "sim:lack=Relu+Conv,seed=7,delay_us=100"). See docs/design.md.
  // Empty: $KILN_DEVICE if set (how the test suites run on every device),
  // else "cpu".
  std::string device;
  int threads = 1;                      // kernel threads (OpenMP), per model
  bool verify_weights_checksum = true;  // CRC-32 of the embedded weights
  // Debug mode: every intermediate gets its own allocation framed by guard
  // bytes, checked after each kernel; an out-of-bounds write fails the run
  // with an error naming the node and tensor. Slower; for tests.
  bool check_bounds = false;
  // Profiling: every built-in task's start and duration are recorded per run
  // (Model::profile(); `kiln bench --profile`). Costs two clock reads per task.
  bool profile = false;

  // External weights (models compiled with external_weight 1 or 2).
  // Empty: the directory the .kiln records (relative to itself; a file
  // compiled with an external weight directory records it), else
  // <model dir>/weight.
  std::string weight_dir;
  // A recorded weight directory outside the model's own directory (say
  // "../store") is used only when this is set; otherwise loading fails
  // naming it. (A .kiln from a stranger must not pick what Kiln reads.)
  bool trust_recorded_weight_dir = false;
  WeightLoadMode weight_load_mode = WeightLoadMode::kAuto;
  std::size_t weight_chunk_bytes = 10u << 20;
  // Threads reading each chunk of the copy path on a device whose memory
  // the host cannot address (a GPU), each its share: 0 = half the hardware
  // threads, at most 8.
  int weight_reader_threads = 0;
  bool verify_weights = false;          // check every weight's SHA-256
  // Use `size` bytes at `data`, already filled by the caller, as the contents
  // of weight file `file_name` instead of reading it (wins over weight_dir).
  // Kiln never frees it; it must outlive the model. Too small -> error naming
  // the file, node, required and provided sizes.
  void SetExternalWeightAddress(const std::string& file_name, void* data, std::size_t size) {
    user_weight_memory[file_name] = {data, size};
  }
  struct UserMemory { void* data; std::size_t size; };
  std::map<std::string, UserMemory> user_weight_memory;

  // Weights made by Graph::AddFileConstant(..., file_id, ...) are resolved
  // here, by file_id: a file the caller names (read or mapped like a weight
  // file, the path used as given) or `size` bytes at `data` that the caller
  // filled (kept by the caller, as above). Each weight reads its bytes
  // [offset, offset + length) of it; an id missing here, or a file or memory
  // too small, fails the load naming the node and id.
  void SetWeightFile(const std::string& file_id, const std::string& path) {
    weight_files[file_id] = {path, nullptr, 0};
  }
  void SetWeightFileAddress(const std::string& file_id, void* data, std::size_t size) {
    weight_files[file_id] = {std::string(), data, size};
  }
  struct WeightFile {
    std::string path;  // empty: data/size
    void* data = nullptr;
    std::size_t size = 0;
  };
  std::map<std::string, WeightFile> weight_files;

  // Models with symbolic input dims: at most this many plans (one per
  // signature of input shapes) are kept; the least recently used is dropped
  // beyond it (a run still queued on a stream keeps its plan alive until it
  // has run; the last run's plan lives until the next run). At least 1.
  std::size_t max_plans = 8;
  // And at most this many arena bytes in all (PlanStats::arena_bytes; 0: no
  // bound): least recently used plans are dropped until the held plans fit,
  // except the newest, which is kept even when it alone is larger. Gears'
  // plans count but are never dropped.
  std::uint64_t max_plan_bytes = 0;
};

// Counters of a session's external-weight loading.
struct WeightStats {
  std::uint64_t bytes_read = 0;       // read from weight files into device memory
  std::uint64_t bytes_mapped = 0;     // mapped and used in place
  std::uint64_t files_opened = 0;
  std::uint64_t weights_shared = 0;   // weights served from what was already loaded
  std::uint64_t resident_bytes = 0;   // device memory held for copied weights now
};

// Per-execution counters.
struct ExecutionStats {
  std::uint64_t tasks_run = 0;
  std::uint64_t slots_refreshed = 0;  // argument-block pointers rewritten
};

// A model's plans (one recorded task list, arena layout and kernels per
// signature of input shapes; see Model::Execute), over its lifetime.
struct PlanStats {
  std::uint64_t created = 0;  // plans made (the one made at load included)
  std::uint64_t evicted = 0;  // dropped, least recently used first, beyond LoadOptions::max_plans / max_plan_bytes
  std::uint64_t hits = 0;     // runs (and OutputShapes calls) that found their plan made
  std::uint64_t cached = 0;   // plans held now
  double last_plan_us = 0;    // time to make the latest plan (inference, memory plan, kernels)
  // Its parts: copying and specializing the graph (shape inference,
  // folding), the memory plan, and the executor (kernels, argument blocks,
  // the recorded task list).
  double last_specialize_us = 0;
  double last_memory_plan_us = 0;
  double last_executor_us = 0;
  std::uint64_t gears = 0;    // plans made at load for the model's gears (kept, never evicted)
  // Runs that computed a value above the provisional bound its plan was
  // made for (a shape from data with no bound the model proves, as
  // Range(0, ReduceMax(x))): each raised the bound, dropped the plans and
  // ran again from the start.
  std::uint64_t bound_raises = 0;
  // Arena bytes the held plans use: a bounded model's plans share one arena
  // (counted once); a plan that needs more than it, or of an unbounded
  // model, has its own.
  std::uint64_t arena_bytes = 0;
  // Constant weights kernels repacked into their library's layout (a
  // convolution's), made and shared: plans of one model share a packed copy
  // when they want the same layout, as plans at other extents usually do.
  std::uint64_t packed_weights_made = 0;
  std::uint64_t packed_weights_shared = 0;
  // A model with symbolic dims: kernels of its static part (nodes whose
  // shapes and inputs no symbol decides), made by the first plan that needs
  // each and reused by later plans, as a static model's are.
  std::uint64_t static_kernels_made = 0;
  std::uint64_t static_kernels_shared = 0;
};

class Stream;

// One task of a profiled model (LoadOptions::profile): its node, op type,
// input shapes, and per run (oldest first, at most the last 10000 runs) the
// start (microseconds since the model was loaded) and duration.
struct TaskProfile {
  std::string node;
  std::string op;
  std::string shapes;  // e.g. "float32[1,3,224,224] float32[64,3,7,7]"
  double flops = 0;    // per run, for Conv/ConvTranspose/MatMul/Gemm (0: not counted)
  std::vector<std::pair<double, double>> spans_us;  // (start, duration)
  // The executor's estimate of the task's time on one thread (static shapes;
  // 0: not estimated), and whether it therefore runs on one kernel thread
  // when the model runs on several (tasks under $KILN_SMALL_TASK_US).
  double cost_us = 0;
  bool one_thread = false;
};

class Model {
 public:
  virtual ~Model() = default;
  // Maps, verifies and prepares `path` (kernels are created here, once).
  // Errors: kNotFound / kIoError for the file, kCorrupt for a malformed file,
  // kUnimplemented for an op this runtime lacks.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const LoadOptions& opts);
  // The same from a .kiln image in memory (copied: the caller may free it on
  // return; verified like a file). External weights come from
  // opts.weight_dir or SetExternalWeightAddress only.
  static Result<std::unique_ptr<Model>> LoadFromMemory(const void* data, std::size_t size, const LoadOptions& opts);

  virtual const std::vector<TensorInfo>& inputs() const = 0;
  virtual const std::vector<TensorInfo>& outputs() const = 0;
  // Planned arena bytes and embedded-constant bytes.
  virtual std::uint64_t arena_bytes() const = 0;
  virtual std::uint64_t weight_bytes() const = 0;
  virtual void set_threads(int threads) = 0;
  // Address at which the model holds constant (weight) `name` — inside the
  // mapped file, user memory or device memory — or null if there is none.
  // (Kernels that repack a weight for speed, e.g. Conv, keep a packed copy.)
  virtual const void* ConstantData(const std::string& name) const = 0;

  // Runs the model on caller-owned buffers, in model input/output order.
  // Buffers whose address changed since the last call are rebound by
  // rewriting argument-block pointers; nothing is copied. Errors
  // (kInvalidArgument) name the input/output and expected vs found count,
  // dtype or shape.
  // A model with symbolic input dims runs at any input shapes its symbols
  // admit (an extent within the symbol's range, one extent per symbol
  // across inputs; an error names input, dim, symbol and range). Each new
  // signature of input shapes gets a plan of its own (shapes inferred,
  // memory planned, kernels created, the task list recorded, custom ops'
  // Execute called), made on its first run and reused after: runs
  // alternating between a few signatures plan once per signature. Outputs
  // are bound with the shapes OutputShapes gives for those inputs.
  virtual Status Execute(const std::vector<TensorRef>& inputs,
                         const std::vector<TensorRef>& outputs) = 0;
  // The same, queued on `stream` (refresh happens now, the replay when the
  // stream reaches it). Buffers must stay valid until then.
  virtual Status ExecuteAsync(Stream& stream, const std::vector<TensorRef>& inputs,
                              const std::vector<TensorRef>& outputs) = 0;
  // Runs the model with outputs in host memory Kiln allocates and keeps:
  // the returned references (model output order) give each output's
  // actual shape and stay valid until the next Run or the model's end.
  // The buffers are reused across runs and grown when the outputs' bounds
  // grow (another signature, a raised provisional bound: the run is then
  // repeated; see OutputShapesFor). Errors as Execute's.
  virtual Result<std::vector<TensorRef>> Run(const std::vector<TensorRef>& inputs) = 0;
  virtual const ExecutionStats& last_stats() const = 0;
  // Output i's shape in the last completed run (after ExecuteAsync: once the
  // stream has run it). Equals outputs()[i].shape unless dynamic_dims is set.
  virtual Shape output_shape(std::size_t i) const = 0;
  // The per-task timings of the runs so far (empty unless loaded with
  // LoadOptions::profile). Custom ops' launches are not timed.
  virtual std::vector<TaskProfile> profile() const = 0;
  // The output shapes a run with these input shapes has (for data-dependent
  // dims: their upper bound): makes (or finds) that signature's plan. Errors
  // as Execute's for the inputs.
  // A model with shape inputs (TensorInfo::shape_input) has output shapes
  // that depend on those inputs' values: OutputShapes refuses it, naming the
  // input; OutputShapesFor reads them from the inputs as Execute would.
  virtual Result<std::vector<Shape>> OutputShapes(const std::vector<Shape>& input_shapes) = 0;
  // Provisional bounds: a shape the run computes from data with no bound
  // the model proves (Range(0, ReduceMax(x)) of a large float x, c - n) is
  // planned for a provisional bound (its TensorInfo dims: max -1, value
  // -1). Execute, when a run computes a larger value, raises the bound
  // (twice the old one for a single value, else the run's values), drops
  // the plans and runs again from the start with a plan for it; if the
  // bound outputs no longer have the plan's shapes, it fails naming the
  // raised value, and OutputShapesFor gives the shapes to allocate and run
  // again with (PlanStats::bound_raises counts the raises).
  virtual Result<std::vector<Shape>> OutputShapesFor(const std::vector<TensorRef>& inputs) = 0;
  virtual PlanStats plan_stats() const = 0;
};

class Graph;   // kiln/graph.h
class Stream;  // kiln/stream.h

struct SessionOptions {
  // For graphs added with AddGraph: external weights (0 embedded, 1 one file
  // per weight, 2 one combined file) and where to write them; without a
  // directory a temporary tmp_weight_<pid>_<n> is used and removed when the
  // session ends (a directory you give is never removed).
  int external_weight = 0;
  std::string external_weight_dir;
  int weight_writer_threads = 8;
  LoadOptions load;  // threads, weight loading for graphs of this session
};

struct CompiledGraphSummary {
  std::size_t num_nodes = 0;
  std::uint64_t arena_bytes = 0, no_reuse_bytes = 0, lower_bound_bytes = 0;
  std::uint64_t embedded_weight_bytes = 0;
  struct ExternalWeight {
    std::string path;  // relative to weight_dir; empty for a file_id weight
    std::uint64_t size = 0, offset = 0;
    std::string id;    // SHA-256 (empty for a file_id weight)
    std::string file_id;  // Graph::AddFileConstant's id, resolved at load
  };
  std::string weight_dir;
  std::vector<ExternalWeight> external_weights;
  struct InsertedIdentity {
    std::string node, for_op, reason;
  };
  std::vector<InsertedIdentity> inserted_identities;
};

// A session: models loaded through it share external weights (each weight is
// loaded once per device and content, freed when its last model goes), and
// graphs built in memory are added, compiled, loaded (their task list
// recorded) and executed by id. Thread-compatible: one caller at a time.
class Session {
 public:
  explicit Session(SessionOptions opts = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // A compiled .kiln file.
  Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const LoadOptions& opts);
  WeightStats weight_stats() const;

  // Graphs built in memory. These need the compiler library (kiln_compiler).
  Result<std::uint32_t> AddGraph(Graph&& graph);
  Status CompileGraph(std::uint32_t id);
  // Records the task list once (custom ops' Execute runs now, launching on
  // `stream`); compiles first if needed.
  Status LoadGraph(std::uint32_t id, Stream* stream = nullptr);
  // Binds caller-owned buffers (refreshing moved addresses) and queues the
  // replay on `stream`; returns at once. Buffers must stay valid until the
  // stream has run it (Stream::Synchronize).
  Status ExecuteGraphWithStreamAsync(std::uint32_t id, Stream& stream, const std::vector<TensorRef>& inputs,
                                     const std::vector<TensorRef>& outputs);
  // Synchronous run on the calling thread (compiles and loads if needed).
  Status RunGraph(std::uint32_t id, const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs);
  Status RemoveGraph(std::uint32_t id);
  Result<CompiledGraphSummary> GetCompiledGraphSummary(std::uint32_t id) const;
  // The loaded graph's model (inputs(), outputs(), last_stats()), or null.
  Model* GetLoadedGraph(std::uint32_t id) const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
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
