// kiln._kiln: the Python binding (pybind11 + NumPy) behind the `kiln`
// package (python/kiln/__init__.py). See docs/python.md.
//
// - Inputs that are C-contiguous NumPy arrays (or buffers) of the input's
//   dtype are bound in place; outputs are NumPy arrays Kiln writes directly
//   (allocated here, or the caller's via `outputs=`): no copies either way.
// - The GIL is released while a model runs.
// - Kiln's errors raise kiln.Error subclasses named after the status code.
// - Buffers registered as external-weight memory stay referenced by the
//   model that uses them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/compiler.h"
#include "custom/registry.h"
#include "format/kiln_file.h"
#include "frontend/onnx/onnx_import.h"
#include "kiln/custom_op.h"
#include "kiln/graph.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"

namespace py = pybind11;

namespace {

// kiln.Error and one subclass per status code (set up in the module init).
std::map<kiln::StatusCode, PyObject*> g_errors;
PyObject* g_error_base = nullptr;

struct StatusError {
  kiln::Status status;
};

[[noreturn]] void Raise(const kiln::Status& s) { throw StatusError{s}; }
void Check(const kiln::Status& s) {
  if (!s.ok()) Raise(s);
}
template <typename T>
T Take(kiln::Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

py::dtype ToNumpy(kiln::DType t) {
  switch (t) {
    case kiln::DType::kFloat32: return py::dtype("float32");
    case kiln::DType::kFloat64: return py::dtype("float64");
    case kiln::DType::kFloat16: return py::dtype("float16");
    case kiln::DType::kBFloat16: return py::dtype("uint16");  // NumPy has no bfloat16: its bits
    case kiln::DType::kInt8: return py::dtype("int8");
    case kiln::DType::kUInt8: return py::dtype("uint8");
    case kiln::DType::kInt16: return py::dtype("int16");
    case kiln::DType::kUInt16: return py::dtype("uint16");
    case kiln::DType::kInt32: return py::dtype("int32");
    case kiln::DType::kUInt32: return py::dtype("uint32");
    case kiln::DType::kInt64: return py::dtype("int64");
    case kiln::DType::kUInt64: return py::dtype("uint64");
    case kiln::DType::kBool: return py::dtype("bool");
    default: break;
  }
  Raise(kiln::Error(kiln::StatusCode::kUnimplemented, "dtype ", kiln::DTypeName(t), " has no NumPy equivalent"));
}

struct PyTensorInfo {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;  // data-dependent dims: their bound
  std::vector<int> dynamic_dims;
  std::size_t nbytes = 0;
  std::vector<kiln::DimInfo> dims;  // per dim: value (-1: varies), min, max (-1: unbounded), symbol
  bool shape_input = false;         // its values decide shapes (kiln::TensorInfo::shape_input)
  std::vector<std::vector<std::int64_t>> rank_alternatives;  // kiln::TensorInfo::rank_alternatives
};

PyTensorInfo Describe(const kiln::TensorInfo& t) {
  PyTensorInfo p{t.name, kiln::DTypeName(t.dtype), t.shape, {}, t.bytes, t.dims, t.shape_input, t.rank_alternatives};
  for (std::size_t d = 0; d < t.shape.size() && d < 64; ++d) {
    if (t.dynamic_dims >> d & 1) p.dynamic_dims.push_back(static_cast<int>(d));
  }
  return p;
}

struct PyExternalWeight {
  std::string path, id, file_id;
  std::uint64_t size = 0, offset = 0;
};

struct PySummary {
  std::size_t num_nodes = 0;
  std::uint64_t arena_bytes = 0, embedded_weight_bytes = 0;
  std::string weight_dir;
  std::vector<PyExternalWeight> external_weights;
};

PySummary Summarize(const kiln::CompiledGraphSummary& s) {
  PySummary p{s.num_nodes, s.arena_bytes, s.embedded_weight_bytes, s.weight_dir, {}};
  for (auto& w : s.external_weights) p.external_weights.push_back({w.path, w.id, w.file_id, w.size, w.offset});
  return p;
}

struct LoadArgs {
  int threads = 1;
  std::string device;
  std::optional<std::string> weight_dir;
  bool trust_weight_dir = false;
  std::string weight_load = "auto";
  bool verify_weights = false;
  std::optional<py::dict> weights;  // file name -> buffer
  std::optional<py::dict> weight_files;  // file_id -> path (str / os.PathLike) or buffer
  std::size_t max_plans = 8;             // kiln::LoadOptions::max_plans
  std::uint64_t max_plan_bytes = 0;      // kiln::LoadOptions::max_plan_bytes
};

kiln::LoadOptions Options(const LoadArgs& a, std::vector<py::object>* keep) {
  kiln::LoadOptions o;
  if (a.threads < 1 || a.threads > 1024) {
    Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "threads = ", a.threads, " (expected 1..1024)"));
  }
  o.threads = a.threads;
  o.device = a.device;
  if (a.max_plans < 1) Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "max_plans = ", a.max_plans, " (expected >= 1)"));
  o.max_plans = a.max_plans;
  o.max_plan_bytes = a.max_plan_bytes;
  if (a.weight_dir) o.weight_dir = *a.weight_dir;
  o.trust_recorded_weight_dir = a.trust_weight_dir;
  o.verify_weights = a.verify_weights;
  if (a.weight_load == "map") o.weight_load_mode = kiln::WeightLoadMode::kMap;
  else if (a.weight_load == "copy") o.weight_load_mode = kiln::WeightLoadMode::kCopy;
  else if (a.weight_load == "staged") o.weight_load_mode = kiln::WeightLoadMode::kStagedCopy;
  else if (a.weight_load != "auto") {
    Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "weight_load = '", a.weight_load,
                      "' (expected auto, map, copy or staged)"));
  }
  if (a.weights) {
    for (auto& [k, v] : *a.weights) {
      const std::string file = py::cast<std::string>(k);
      py::buffer b = py::reinterpret_borrow<py::buffer>(v);
      py::buffer_info info = b.request();
      const bool contiguous = info.ndim <= 1 || info.strides.back() == info.itemsize;
      if (!contiguous) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "weights['", file, "']: the buffer is not contiguous"));
      }
      o.SetExternalWeightAddress(file, info.ptr, static_cast<std::size_t>(info.size * info.itemsize));
      keep->push_back(py::reinterpret_borrow<py::object>(v));  // alive while the model is
    }
  }
  if (a.weight_files) {
    py::object fspath = py::module_::import("os").attr("fspath");
    for (auto& [k, v] : *a.weight_files) {
      const std::string id = py::cast<std::string>(k);
      if (py::isinstance<py::str>(v) || py::hasattr(v, "__fspath__")) {
        o.SetWeightFile(id, py::cast<std::string>(fspath(v)));
        continue;
      }
      if (!PyObject_CheckBuffer(v.ptr())) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "weight_files['", id,
                          "']: expected a path (str or os.PathLike) or a buffer (bytes, NumPy array), got ",
                          py::cast<std::string>(py::str(v.get_type().attr("__name__")))));
      }
      py::buffer b = py::reinterpret_borrow<py::buffer>(v);
      py::buffer_info info = b.request();
      const bool contiguous = info.ndim <= 1 || info.strides.back() == info.itemsize;
      if (!contiguous) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "weight_files['", id, "']: the buffer is not contiguous"));
      }
      o.SetWeightFileAddress(id, info.ptr, static_cast<std::size_t>(info.size * info.itemsize));
      keep->push_back(py::reinterpret_borrow<py::object>(v));  // alive while the model is
    }
  }
  return o;
}

// A loaded model and what it holds on to.
class PyModel {
 public:
  PyModel(std::unique_ptr<kiln::Model> m, std::vector<py::object> keep, std::string path)
      : owned_(std::move(m)), m_(owned_.get()), keep_(std::move(keep)), path_(std::move(path)) {}
  // A session's graph model, borrowed for one call.
  explicit PyModel(kiln::Model* borrowed) : m_(borrowed) {}

  std::vector<PyTensorInfo> inputs() const {
    std::vector<PyTensorInfo> v;
    for (auto& t : m_->inputs()) v.push_back(Describe(t));
    return v;
  }
  // The output shapes for these input shapes (makes that signature's plan).
  std::vector<kiln::Shape> OutputShapes(const std::vector<kiln::Shape>& input_shapes) {
    std::optional<kiln::Result<std::vector<kiln::Shape>>> r;
    {
      py::gil_scoped_release release;
      r.emplace(m_->OutputShapes(input_shapes));
    }
    Check(r->status());
    return std::move(*r).value();
  }
  py::dict PlanStats() const {
    const kiln::PlanStats s = m_->plan_stats();
    py::dict d;
    d["created"] = s.created;
    d["evicted"] = s.evicted;
    d["hits"] = s.hits;
    d["cached"] = s.cached;
    d["last_plan_us"] = s.last_plan_us;
    d["last_specialize_us"] = s.last_specialize_us;
    d["last_memory_plan_us"] = s.last_memory_plan_us;
    d["last_executor_us"] = s.last_executor_us;
    d["gears"] = s.gears;
    d["arena_bytes"] = s.arena_bytes;
    d["packed_weights_made"] = s.packed_weights_made;
    d["packed_weights_shared"] = s.packed_weights_shared;
    d["static_kernels_made"] = s.static_kernels_made;
    d["static_kernels_shared"] = s.static_kernels_shared;
    d["bound_raises"] = s.bound_raises;
    return d;
  }
  std::vector<PyTensorInfo> outputs() const {
    std::vector<PyTensorInfo> v;
    for (auto& t : m_->outputs()) v.push_back(Describe(t));
    return v;
  }

  // inputs: a dict name -> array or a sequence in model order; outputs
  // (optional): the same, arrays Kiln writes in place.
  py::dict Run(py::object inputs, py::object outputs) {
    const auto& ins = m_->inputs();
    const auto& outs = m_->outputs();
    std::vector<py::array> in_arrays = Collect(inputs, ins, "input", false);
    std::vector<kiln::Shape> in_shapes;
    for (auto& a : in_arrays) in_shapes.emplace_back(a.shape(), a.shape() + a.ndim());
    // The outputs' shapes for these inputs (symbolic dims: the plan's).
    std::vector<kiln::Shape> out_shapes;
    for (auto& t : outs) out_shapes.push_back(t.shape);
    std::vector<kiln::TensorRef> in_refs, out_refs;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      in_refs.push_back({const_cast<void*>(in_arrays[i].data()), ins[i].dtype, in_shapes[i]});
    }
    if (std::any_of(ins.begin(), ins.end(),
                    [](const kiln::TensorInfo& t) { return !kiln::IsStatic(t.shape) || t.shape_input; }) ||
        std::any_of(outs.begin(), outs.end(), [](const kiln::TensorInfo& t) { return !kiln::IsStatic(t.shape); })) {
      auto r = m_->OutputShapesFor(in_refs);
      Check(r.status());
      out_shapes = std::move(r).value();
    }
    std::vector<py::array> out_arrays;
    if (!outputs.is_none()) {
      std::vector<kiln::TensorInfo> want = outs;
      for (std::size_t i = 0; i < want.size() && i < out_shapes.size(); ++i) want[i].shape = out_shapes[i];
      out_arrays = Collect(outputs, want, "output", true);
    } else {
      for (std::size_t i = 0; i < outs.size(); ++i) out_arrays.push_back(py::array(ToNumpy(outs[i].dtype), out_shapes[i]));
    }
    for (std::size_t i = 0; i < outs.size(); ++i) {
      out_refs.push_back({out_arrays[i].mutable_data(), outs[i].dtype, out_shapes[i]});
    }
    last_inputs_.clear();
    for (auto& r : in_refs) last_inputs_.push_back(reinterpret_cast<std::uintptr_t>(r.data));
    kiln::Status st;
    for (int attempt = 0;; ++attempt) {
      {
        py::gil_scoped_release release;
        st = m_->Execute(in_refs, out_refs);
      }
      // Outputs allocated here whose bounds a run raised (a shape computed
      // from data with no bound the model proves: a provisional bound):
      // allocated again for the raised bounds and run again.
      if (st.ok() || !outputs.is_none() || attempt >= 8) break;
      auto again = m_->OutputShapesFor(in_refs);
      if (!again.ok() || again.value() == out_shapes) break;
      out_shapes = std::move(again).value();
      for (std::size_t i = 0; i < outs.size(); ++i) {
        out_arrays[i] = py::array(ToNumpy(outs[i].dtype), out_shapes[i]);
        out_refs[i] = {out_arrays[i].mutable_data(), outs[i].dtype, out_shapes[i]};
      }
    }
    Check(st);
    py::dict result;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      py::array a = out_arrays[i];
      const kiln::Shape actual = m_->output_shape(i);
      if (actual != out_shapes[i]) {  // data-dependent dims: the dense prefix, as a view
        std::int64_t n = 1;
        for (auto d : actual) n *= d;
        a = a.attr("reshape")(-1).attr("__getitem__")(py::slice(0, n, 1)).attr("reshape")(py::cast(actual));
      }
      result[py::str(outs[i].name)] = a;
    }
    return result;
  }

  PySummary summary() const { return summary_; }
  // The input addresses bound in the last run (tests of zero-copy binding).
  const std::vector<std::uintptr_t>& last_input_addresses() const { return last_inputs_; }
  void set_summary(PySummary s) { summary_ = std::move(s); }
  std::uint64_t arena_bytes() const { return m_->arena_bytes(); }
  const std::string& path() const { return path_; }

 private:
  // Arrays for every model input/output: C-contiguous, of its dtype and
  // shape. An input that is not contiguous is copied (a contiguous array is
  // used in place); an output must be usable in place.
  std::vector<py::array> Collect(py::object given, const std::vector<kiln::TensorInfo>& infos, const char* what,
                                 bool writable) {
    std::vector<py::object> objs(infos.size());
    if (py::isinstance<py::dict>(given)) {
      py::dict d = given;
      for (auto& [k, v] : d) {
        const std::string name = py::cast<std::string>(k);
        std::size_t idx = infos.size();
        for (std::size_t i = 0; i < infos.size(); ++i) {
          if (infos[i].name == name) idx = i;
        }
        if (idx == infos.size()) {
          std::string names;
          for (auto& t : infos) names += (names.empty() ? "" : ", ") + t.name;
          Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " '", name, "' is not an ", what,
                            " of the model (", what, "s: ", names, ")"));
        }
        objs[idx] = py::reinterpret_borrow<py::object>(v);
      }
    } else {
      py::sequence s = given;
      if (s.size() != infos.size()) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, "expected ", infos.size(), " ", what, "s, got ",
                          s.size()));
      }
      for (std::size_t i = 0; i < infos.size(); ++i) objs[i] = s[i];
    }
    std::vector<py::array> out;
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const kiln::TensorInfo& t = infos[i];
      if (!objs[i]) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " ", i, " '", t.name, "' is missing"));
      }
      const py::dtype want = ToNumpy(t.dtype);
      py::array a = py::array::ensure(objs[i]);
      if (!a) Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " '", t.name, "' is not an array"));
      if (!a.dtype().is(want) && !a.dtype().equal(want)) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " ", i, " '", t.name, "': expected dtype ",
                          kiln::DTypeName(t.dtype), ", found ", py::str(a.dtype()).cast<std::string>()));
      }
      kiln::Shape shape(a.shape(), a.shape() + a.ndim());
      // Symbolic dims (-1) take the array's extent: the model checks them.
      bool shape_ok = shape.size() == t.shape.size();
      for (std::size_t d = 0; shape_ok && d < shape.size(); ++d) shape_ok = t.shape[d] < 0 || shape[d] == t.shape[d];
      if (!shape_ok) {
        Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " ", i, " '", t.name, "': expected shape ",
                          kiln::ShapeToString(t.shape), ", found ", kiln::ShapeToString(shape)));
      }
      const bool contiguous = (a.flags() & py::array::c_style) != 0;
      if (writable) {
        if (!contiguous || !a.writeable()) {
          Raise(kiln::Error(kiln::StatusCode::kInvalidArgument, what, " ", i, " '", t.name,
                            "': must be a writeable C-contiguous array (Kiln writes it in place)"));
        }
      } else if (!contiguous) {
        a = py::array::ensure(a, py::array::c_style | py::array::forcecast);
      }
      out.push_back(a);
    }
    return out;
  }

  std::unique_ptr<kiln::Model> owned_;
  kiln::Model* m_ = nullptr;
  std::vector<py::object> keep_;
  std::string path_;
  PySummary summary_;
  std::vector<std::uintptr_t> last_inputs_;
};

// The summary of a .kiln file: nodes, arena, weights (read from the file).
PySummary FileSummary(const std::string& path) {
  auto f = kiln::format::ReadModelFile(path);
  if (!f.ok()) return {};
  PySummary s;
  s.num_nodes = f->model.graph->nodes().size();
  s.arena_bytes = f->model.plan.arena_size;
  s.embedded_weight_bytes = f->model.plan.const_size;
  s.weight_dir = f->model.weight_dir;
  auto ws = kiln::ListExternalWeights(*f->model.graph);
  if (!ws.ok()) return {};
  for (auto& w : ws.value()) s.external_weights.push_back({w.location, w.sha256, w.file_id, w.length, w.offset});
  return s;
}

std::unique_ptr<PyModel> Wrap(std::unique_ptr<kiln::Model> m, std::vector<py::object> keep, const std::string& path) {
  auto p = std::make_unique<PyModel>(std::move(m), std::move(keep), path);
  if (!path.empty()) p->set_summary(FileSummary(path));
  return p;
}

// Loading, as every load call does it: the options (keeping user weight
// buffers referenced), `load` run with the GIL released, the result wrapped.
template <typename F>
std::unique_ptr<PyModel> LoadWith(const LoadArgs& a, const std::string& path, F&& load) {
  std::vector<py::object> keep;
  kiln::LoadOptions o = Options(a, &keep);
  std::optional<kiln::Result<std::unique_ptr<kiln::Model>>> r;
  {
    py::gil_scoped_release release;
    r.emplace(load(o));
  }
  return Wrap(Take(std::move(*r)), std::move(keep), path);
}

std::map<std::string, kiln::Shape> Shapes(const std::optional<std::map<std::string, std::vector<std::int64_t>>>& s) {
  std::map<std::string, kiln::Shape> out;
  if (s) {
    for (auto& [k, v] : *s) out[k] = v;
  }
  return out;
}

class PySession {
 public:
  PySession(int external_weight, std::optional<std::string> external_weight_dir, LoadArgs load)
      : load_(std::move(load)) {
    kiln::SessionOptions so;
    so.external_weight = external_weight;
    if (external_weight_dir) so.external_weight_dir = *external_weight_dir;
    so.load = Options(load_, &keep_);
    s_ = std::make_unique<kiln::Session>(std::move(so));
  }
  std::unique_ptr<PyModel> Load(const std::string& path, LoadArgs a) {
    return LoadWith(a, path, [&](const kiln::LoadOptions& o) { return s_->LoadModel(path, o); });
  }
  std::uint32_t AddGraph(const std::string& onnx_path,
                         std::optional<std::map<std::string, std::vector<std::int64_t>>> input_shapes) {
    Check(kiln::LoadCustomOpPackages());
    kiln::onnx_frontend::ImportOptions io;
    io.input_shapes = Shapes(input_shapes);
    auto g = Take(kiln::onnx_frontend::ImportOnnxFile(onnx_path, io));
    return Take(s_->AddGraph(kiln::Graph::FromIr(std::move(g))));
  }
  void CompileGraph(std::uint32_t id) { Check(s_->CompileGraph(id)); }
  void LoadGraph(std::uint32_t id) { Check(s_->LoadGraph(id)); }
  py::dict RunGraph(std::uint32_t id, py::object inputs) {
    Check(s_->LoadGraph(id));
    kiln::Model* m = s_->GetLoadedGraph(id);
    if (!m) Raise(kiln::Error(kiln::StatusCode::kInternal, "graph ", id, " is not loaded"));
    return PyModel(m).Run(inputs, py::none());
  }
  void RemoveGraph(std::uint32_t id) { Check(s_->RemoveGraph(id)); }
  PySummary GraphSummary(std::uint32_t id) { return Summarize(Take(s_->GetCompiledGraphSummary(id))); }
  py::dict WeightStats() const {
    kiln::WeightStats w = s_->weight_stats();
    py::dict d;
    d["bytes_read"] = w.bytes_read;
    d["bytes_mapped"] = w.bytes_mapped;
    d["files_opened"] = w.files_opened;
    d["weights_shared"] = w.weights_shared;
    d["resident_bytes"] = w.resident_bytes;
    return d;
  }

 private:
  LoadArgs load_;
  std::vector<py::object> keep_;
  std::unique_ptr<kiln::Session> s_;
};

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's Python binding (use the `kiln` package)";
  g_error_base = PyErr_NewException("kiln.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_error_base);
  const std::pair<kiln::StatusCode, const char*> codes[] = {
      {kiln::StatusCode::kInvalidArgument, "InvalidArgument"}, {kiln::StatusCode::kNotFound, "NotFound"},
      {kiln::StatusCode::kUnimplemented, "Unimplemented"},     {kiln::StatusCode::kIoError, "IoError"},
      {kiln::StatusCode::kCorrupt, "Corrupt"},                 {kiln::StatusCode::kOutOfRange, "OutOfRange"},
      {kiln::StatusCode::kInternal, "Internal"}};
  for (auto& [code, name] : codes) {
    PyObject* e = PyErr_NewException((std::string("kiln.") + name).c_str(), g_error_base, nullptr);
    g_errors[code] = e;
    m.attr(name) = py::handle(e);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = g_errors.find(e.status.code());
      PyErr_SetString(it != g_errors.end() ? it->second : g_error_base, e.status.message().c_str());
    }
  });

  py::class_<kiln::DimInfo>(m, "DimInfo")
      .def_readonly("value", &kiln::DimInfo::value)
      .def_readonly("min", &kiln::DimInfo::min)
      .def_readonly("max", &kiln::DimInfo::max)
      .def_readonly("symbol", &kiln::DimInfo::symbol)
      .def("__repr__", [](const kiln::DimInfo& d) {
        return "DimInfo(" + std::to_string(d.value) + ", " + std::to_string(d.min) + ".." + std::to_string(d.max) +
               (d.symbol.empty() ? "" : ", '" + d.symbol + "'") + ")";
      });
  py::class_<PyTensorInfo>(m, "TensorInfo")
      .def_readonly("name", &PyTensorInfo::name)
      .def_readonly("dtype", &PyTensorInfo::dtype)
      .def_readonly("shape", &PyTensorInfo::shape)
      .def_readonly("dynamic_dims", &PyTensorInfo::dynamic_dims)
      .def_readonly("nbytes", &PyTensorInfo::nbytes)
      .def_readonly("dims", &PyTensorInfo::dims)
      .def_readonly("shape_input", &PyTensorInfo::shape_input)
      .def_readonly("rank_alternatives", &PyTensorInfo::rank_alternatives)
      .def("__repr__", [](const PyTensorInfo& t) {
        return "TensorInfo('" + t.name + "', " + t.dtype + kiln::ShapeToString(t.shape) + ")";
      });
  py::class_<PyExternalWeight>(m, "ExternalWeight")
      .def_readonly("path", &PyExternalWeight::path)
      .def_readonly("id", &PyExternalWeight::id)
      .def_readonly("file_id", &PyExternalWeight::file_id)
      .def_readonly("size", &PyExternalWeight::size)
      .def_readonly("offset", &PyExternalWeight::offset)
      .def("__repr__", [](const PyExternalWeight& w) {
        return "ExternalWeight('" + w.path + "', size=" + std::to_string(w.size) +
               ", offset=" + std::to_string(w.offset) + ")";
      });
  py::class_<PySummary>(m, "Summary")
      .def_readonly("num_nodes", &PySummary::num_nodes)
      .def_readonly("arena_bytes", &PySummary::arena_bytes)
      .def_readonly("embedded_weight_bytes", &PySummary::embedded_weight_bytes)
      .def_readonly("weight_dir", &PySummary::weight_dir)
      .def_readonly("external_weights", &PySummary::external_weights);
  py::class_<LoadArgs>(m, "_LoadArgs")
      .def(py::init<>())
      .def_readwrite("threads", &LoadArgs::threads)
      .def_readwrite("device", &LoadArgs::device)
      .def_readwrite("weight_dir", &LoadArgs::weight_dir)
      .def_readwrite("trust_weight_dir", &LoadArgs::trust_weight_dir)
      .def_readwrite("weight_load", &LoadArgs::weight_load)
      .def_readwrite("verify_weights", &LoadArgs::verify_weights)
      .def_readwrite("weights", &LoadArgs::weights)
      .def_readwrite("weight_files", &LoadArgs::weight_files)
      .def_readwrite("max_plans", &LoadArgs::max_plans)
      .def_readwrite("max_plan_bytes", &LoadArgs::max_plan_bytes);
  py::class_<PyModel>(m, "Model")
      .def_property_readonly("inputs", &PyModel::inputs)
      .def_property_readonly("outputs", &PyModel::outputs)
      .def_property_readonly("arena_bytes", &PyModel::arena_bytes)
      .def_property_readonly("path", &PyModel::path)
      .def("summary", &PyModel::summary)
      .def("_last_input_addresses", &PyModel::last_input_addresses)
      .def("output_shapes", &PyModel::OutputShapes, py::arg("input_shapes"))
      .def("plan_stats", &PyModel::PlanStats)
      .def("run", &PyModel::Run, py::arg("inputs"), py::arg("outputs") = py::none());
  py::class_<PySession>(m, "Session")
      .def(py::init<int, std::optional<std::string>, LoadArgs>())
      .def("load", &PySession::Load)
      .def("add_graph", &PySession::AddGraph, py::arg("onnx_path"), py::arg("input_shapes") = py::none())
      .def("compile_graph", &PySession::CompileGraph)
      .def("load_graph", &PySession::LoadGraph)
      .def("run_graph", &PySession::RunGraph)
      .def("remove_graph", &PySession::RemoveGraph)
      .def("graph_summary", &PySession::GraphSummary)
      .def("weight_stats", &PySession::WeightStats);

  m.def(
      "compile",
      [](const std::string& model, const std::string& output, int external_weight,
         std::optional<std::string> external_weight_dir,
         std::optional<std::map<std::string, std::vector<std::int64_t>>> input_shapes, const std::string& target,
         std::optional<std::string> model_name, std::optional<std::string> input_spec) {
        kiln::CompileOptions o;
        o.external_weight = external_weight;
        if (external_weight_dir) o.external_weight_dir = *external_weight_dir;
        o.input_shapes = Shapes(input_shapes);
        if (input_spec) o.input_specs = Take(kiln::onnx_frontend::ParseInputSpecs(*input_spec));
        o.target = target;
        if (model_name) o.model_name = *model_name;
        kiln::CompileReport report;
        std::optional<kiln::Result<kiln::format::CompiledModel>> r;
        {
          py::gil_scoped_release release;
          r.emplace(kiln::CompileOnnxFileTo(model, output, o, &report));
        }
        kiln::format::CompiledModel cm = Take(std::move(*r));
        return Summarize(kiln::SummarizeCompiled(cm, report));
      },
      py::arg("model"), py::arg("output"), py::arg("external_weight") = 0, py::arg("external_weight_dir") = py::none(),
      py::arg("input_shapes") = py::none(), py::arg("target") = "cpu", py::arg("model_name") = py::none(),
      py::arg("input_spec") = py::none());
  m.def("load", [](const std::string& path, LoadArgs a) {
    return LoadWith(a, path, [&](const kiln::LoadOptions& o) { return kiln::Model::Load(path, o); });
  });
  m.def("load_bytes", [](py::buffer data, LoadArgs a) {
    py::buffer_info info = data.request();  // `data` stays referenced by the caller's frame
    const auto bytes = static_cast<std::size_t>(info.size * info.itemsize);
    return LoadWith(a, "", [&](const kiln::LoadOptions& o) { return kiln::Model::LoadFromMemory(info.ptr, bytes, o); });
  });
  m.def("load_custom_op_packages", [] { Check(kiln::LoadCustomOpPackages()); });
  m.def("load_custom_op_library", [](const std::string& path) { Check(kiln::LoadCustomOpLibrary(path)); });
  m.def("custom_op_search_dirs", [] { return kiln::custom::PackageSearchDirs(); });
  m.def("registered_custom_op", [](const std::string& type) { return kiln::FindCustomOp(type) != nullptr; });
  m.attr("__version__") = "0.1.0";
}
