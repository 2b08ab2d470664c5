// The runtime half of the C API (include/kiln/kiln_c.h): library queries,
// load configurations, models, streams and sessions' model loading.
#include <cstring>
#include <functional>
#include <string>

#include "kiln/dtype.h"
#include "runtime/c_api_internal.h"
#include "runtime/devices.h"
#include "runtime/session_impl.h"

namespace kiln::capi {
namespace {
thread_local std::string t_last_error;

kiln_status CodeOf(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return KILN_OK;
    case StatusCode::kInvalidArgument: return KILN_INVALID_ARGUMENT;
    case StatusCode::kNotFound: return KILN_NOT_FOUND;
    case StatusCode::kUnimplemented: return KILN_UNIMPLEMENTED;
    case StatusCode::kIoError: return KILN_IO_ERROR;
    case StatusCode::kCorrupt: return KILN_CORRUPT;
    case StatusCode::kOutOfRange: return KILN_OUT_OF_RANGE;
    case StatusCode::kInternal: return KILN_INTERNAL;
  }
  return KILN_INTERNAL;
}

// The symbols point into `t`, which lives as long as the model.
std::vector<kiln_dim> DimsOf(const TensorInfo& t) {
  std::vector<kiln_dim> d;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (i < t.dims.size()) {
      const DimInfo& di = t.dims[i];
      d.push_back({di.value, di.min, di.max, di.symbol.empty() ? nullptr : di.symbol.c_str()});
      continue;
    }
    const bool dynamic = i < 64 && (t.dynamic_dims >> i & 1);
    const std::int64_t v = t.shape[i];
    if (dynamic || v < 0) {
      d.push_back({-1, 0, v < 0 ? -1 : v, nullptr});
    } else {
      d.push_back({v, v, v, nullptr});
    }
  }
  return d;
}

kiln_status Info(const std::vector<TensorInfo>& infos, const std::vector<std::vector<kiln_dim>>& dims,
                 std::size_t index, kiln_tensor_info* out, const char* what) {
  if (index >= infos.size()) {
    return Fail(KILN_OUT_OF_RANGE, StrCat(what, " ", index, " does not exist: the model has ", infos.size()));
  }
  const TensorInfo& t = infos[index];
  out->name = t.name.c_str();
  out->dtype = static_cast<kiln_dtype>(t.dtype);
  out->rank = t.shape.size();
  out->dims = dims[index].data();
  out->bytes = t.bytes;
  return KILN_OK;
}

kiln_status Bind(std::vector<TensorRef>& slots, std::size_t index, const kiln_tensor* t, const char* what) {
  if (index >= slots.size()) {
    return Fail(KILN_OUT_OF_RANGE, StrCat(what, " ", index, " does not exist: the model has ", slots.size()));
  }
  auto r = Ref(*t, what, index);
  if (!r.ok()) return Fail(r.status());
  slots[index] = std::move(r).value();
  return KILN_OK;
}
}  // namespace

kiln_status Fail(const Status& s) {
  t_last_error = s.message();
  return CodeOf(s.code());
}

kiln_status Fail(kiln_status code, const std::string& message) {
  t_last_error = message;
  return code;
}

Result<TensorRef> Ref(const kiln_tensor& t, const char* what, std::size_t index) {
  if (t.rank > 64) return Error(StatusCode::kInvalidArgument, what, " ", index, ": rank ", t.rank, " (at most 64)");
  if (t.rank && !t.shape) return Error(StatusCode::kInvalidArgument, what, " ", index, ": shape is NULL");
  if (t.memory != KILN_MEMORY_HOST && t.memory != KILN_MEMORY_DEVICE) {
    return Error(StatusCode::kInvalidArgument, what, " ", index, ": memory ", static_cast<int>(t.memory),
                 " is neither KILN_MEMORY_HOST nor KILN_MEMORY_DEVICE");
  }
  TensorRef r;
  r.data = t.data;
  r.dtype = static_cast<DType>(t.dtype);
  r.shape.assign(t.shape, t.shape + t.rank);
  r.on_device = t.memory == KILN_MEMORY_DEVICE;
  return r;
}

Result<std::vector<TensorRef>> Refs(const kiln_tensor* t, std::size_t n, const char* what) {
  if (n && !t) return Error(StatusCode::kInvalidArgument, what, "s: NULL array of ", n);
  std::vector<TensorRef> out;
  for (std::size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(TensorRef r, Ref(t[i], what, i));
    out.push_back(std::move(r));
  }
  return out;
}

kiln_model* WrapModel(std::unique_ptr<Model> m) {
  auto* h = new kiln_model();
  for (const TensorInfo& t : m->inputs()) h->in_dims.push_back(DimsOf(t));
  for (const TensorInfo& t : m->outputs()) h->out_dims.push_back(DimsOf(t));
  h->ins.resize(m->inputs().size());
  h->outs.resize(m->outputs().size());
  h->m = std::move(m);
  return h;
}

}  // namespace kiln::capi

using kiln::capi::Fail;
using kiln::capi::Guard;

extern "C" {

uint32_t kiln_abi_version(void) { return KILN_ABI_VERSION; }
const char* kiln_version_string(void) { return "0.1.0"; }
const char* kiln_last_error_message(void) { return kiln::capi::t_last_error.c_str(); }

const char* kiln_status_name(kiln_status status) {
  switch (status) {
    case KILN_OK: return "OK";
    case KILN_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case KILN_NOT_FOUND: return "NOT_FOUND";
    case KILN_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case KILN_IO_ERROR: return "IO_ERROR";
    case KILN_CORRUPT: return "CORRUPT";
    case KILN_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case KILN_INTERNAL: return "INTERNAL";
    default: break;
  }
  return "UNKNOWN";
}

const char* kiln_dtype_name(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_DTYPE_COMPLEX64: return "complex64";
    case KILN_DTYPE_COMPLEX128: return "complex128";
    case KILN_DTYPE_FLOAT8E4M3FN: return "float8e4m3fn";
    case KILN_DTYPE_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case KILN_DTYPE_FLOAT8E5M2: return "float8e5m2";
    case KILN_DTYPE_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    case KILN_DTYPE_UINT4: return "uint4";
    case KILN_DTYPE_INT4: return "int4";
    case KILN_DTYPE_STRING: return "string";
    default: break;
  }
  const kiln::DType d = static_cast<kiln::DType>(dtype);
  return kiln::DTypeSupported(d) ? kiln::DTypeName(d) : "undefined";
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_DTYPE_COMPLEX64: return 8;
    case KILN_DTYPE_COMPLEX128: return 16;
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ: return 1;
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_STRING: return 0;
    default: break;
  }
  const kiln::DType d = static_cast<kiln::DType>(dtype);
  return kiln::DTypeSupported(d) ? kiln::DTypeSize(d) : 0;
}

kiln_device_kind kiln_device_kind_of(const char* device) {
  if (!device) return KILN_DEVICE_UNKNOWN;
  const std::string s(device);
  const std::string kind = s.substr(0, s.find_first_of(":"));
  if (kind == "cpu") return KILN_DEVICE_CPU;
  if (kind == "sim") return KILN_DEVICE_SIM;
  if (kind == "cuda") return KILN_DEVICE_CUDA;
  return KILN_DEVICE_UNKNOWN;
}

kiln_status kiln_device_check(const char* device) {
  KILN_C_REQUIRE(device);
  return Guard("kiln_device_check", [&]() -> kiln::Status { return kiln::runtime::OpenDevice(device).status(); });
}

// ---- load configuration ----
kiln_status kiln_load_config_create(kiln_load_config** out) {
  KILN_C_REQUIRE(out);
  return Guard("kiln_load_config_create", [&] {
    *out = new kiln_load_config();
    return KILN_OK;
  });
}
void kiln_load_config_free(kiln_load_config* config) { delete config; }

kiln_status kiln_load_config_set_device(kiln_load_config* config, const char* device) {
  return kiln::capi::SetString(config, device, [](kiln_load_config& c) -> std::string& { return c.o.device; },
                               __func__);
}
kiln_status kiln_load_config_set_threads(kiln_load_config* config, int threads) {
  KILN_C_REQUIRE(config);
  if (threads < 1 || threads > 1024) {
    return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": threads ", threads, " (expected 1..1024)"));
  }
  config->o.threads = threads;
  return KILN_OK;
}
kiln_status kiln_load_config_set_plan_cache(kiln_load_config* config, size_t max_plans, uint64_t max_bytes) {
  KILN_C_REQUIRE(config);
  if (max_plans < 1) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": max_plans 0 (expected >= 1)"));
  config->o.max_plans = max_plans;
  config->o.max_plan_bytes = max_bytes;
  return KILN_OK;
}
kiln_status kiln_load_config_set_weight_dir(kiln_load_config* config, const char* dir) {
  return kiln::capi::SetString(config, dir, [](kiln_load_config& c) -> std::string& { return c.o.weight_dir; },
                               __func__);
}
kiln_status kiln_load_config_set_weight_load_mode(kiln_load_config* config, kiln_weight_load_mode mode) {
  KILN_C_REQUIRE(config);
  switch (mode) {
    case KILN_WEIGHTS_AUTO: config->o.weight_load_mode = kiln::WeightLoadMode::kAuto; return KILN_OK;
    case KILN_WEIGHTS_MAP: config->o.weight_load_mode = kiln::WeightLoadMode::kMap; return KILN_OK;
    case KILN_WEIGHTS_COPY: config->o.weight_load_mode = kiln::WeightLoadMode::kCopy; return KILN_OK;
    case KILN_WEIGHTS_STAGED_COPY: config->o.weight_load_mode = kiln::WeightLoadMode::kStagedCopy; return KILN_OK;
    default: break;
  }
  return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": unknown mode ", static_cast<int>(mode)));
}
kiln_status kiln_load_config_set_trust_recorded_weight_dir(kiln_load_config* config, int trust) {
  KILN_C_REQUIRE(config);
  config->o.trust_recorded_weight_dir = trust != 0;
  return KILN_OK;
}
kiln_status kiln_load_config_set_verify_weights(kiln_load_config* config, int verify) {
  KILN_C_REQUIRE(config);
  config->o.verify_weights = verify != 0;
  return KILN_OK;
}
kiln_status kiln_load_config_set_external_weight_address(kiln_load_config* config, const char* file_name, void* data,
                                                        size_t size) {
  KILN_C_REQUIRE(config);
  KILN_C_REQUIRE(file_name);
  if (!data && size) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": data is NULL for ", size, " bytes"));
  return Guard(__func__, [&] {
    config->o.SetExternalWeightAddress(file_name, data, size);
    return KILN_OK;
  });
}

kiln_status kiln_load_config_set_weight_file(kiln_load_config* config, const char* file_id, const char* path) {
  KILN_C_REQUIRE(config);
  KILN_C_REQUIRE(file_id);
  KILN_C_REQUIRE(path);
  if (!*path) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": empty path for file_id '", file_id, "'"));
  return Guard(__func__, [&] {
    config->o.SetWeightFile(file_id, path);
    return KILN_OK;
  });
}

kiln_status kiln_load_config_set_weight_file_address(kiln_load_config* config, const char* file_id, void* data,
                                                     size_t size) {
  KILN_C_REQUIRE(config);
  KILN_C_REQUIRE(file_id);
  if (!data && size) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": data is NULL for ", size, " bytes"));
  return Guard(__func__, [&] {
    config->o.SetWeightFileAddress(file_id, data, size);
    return KILN_OK;
  });
}

// ---- model ----
kiln_status kiln_model_load(const char* path, const kiln_load_config* config, kiln_model** out) {
  KILN_C_REQUIRE(path);
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_model_load", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto m, kiln::Model::Load(path, config ? config->o : kiln::LoadOptions{}));
    *out = kiln::capi::WrapModel(std::move(m));
    return kiln::Status::Ok();
  });
}

kiln_status kiln_model_load_from_memory(const void* data, size_t size, const kiln_load_config* config,
                                        kiln_model** out) {
  KILN_C_REQUIRE(data);
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_model_load_from_memory", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto m, kiln::Model::LoadFromMemory(data, size, config ? config->o : kiln::LoadOptions{}));
    *out = kiln::capi::WrapModel(std::move(m));
    return kiln::Status::Ok();
  });
}

void kiln_model_free(kiln_model* model) { delete model; }

size_t kiln_model_input_count(const kiln_model* model) { return model ? model->m->inputs().size() : 0; }
size_t kiln_model_output_count(const kiln_model* model) { return model ? model->m->outputs().size() : 0; }

kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(out);
  return kiln::capi::Info(model->m->inputs(), model->in_dims, index, out, "input");
}
kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(out);
  return kiln::capi::Info(model->m->outputs(), model->out_dims, index, out, "output");
}

kiln_status kiln_model_input_is_shape_input(const kiln_model* model, size_t index, int* out) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(out);
  const auto& ins = model->m->inputs();
  if (index >= ins.size()) {
    return Fail(KILN_INVALID_ARGUMENT,
                kiln::StrCat(__func__, ": input index ", index, " out of range (the model has ", ins.size(), ")"));
  }
  *out = ins[index].shape_input ? 1 : 0;
  return KILN_OK;
}

kiln_status kiln_model_output_rank_alternatives(const kiln_model* model, size_t index, size_t* count) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(count);
  const auto& outs = model->m->outputs();
  if (index >= outs.size()) {
    return Fail(KILN_INVALID_ARGUMENT,
                kiln::StrCat(__func__, ": output index ", index, " out of range (the model has ", outs.size(), ")"));
  }
  *count = outs[index].rank_alternatives.size();
  return KILN_OK;
}

kiln_status kiln_model_bind_input(kiln_model* model, size_t index, const kiln_tensor* tensor) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(tensor);
  return Guard(__func__, [&] { return kiln::capi::Bind(model->ins, index, tensor, "input"); });
}
kiln_status kiln_model_bind_output(kiln_model* model, size_t index, const kiln_tensor* tensor) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(tensor);
  return Guard(__func__, [&] { return kiln::capi::Bind(model->outs, index, tensor, "output"); });
}

kiln_status kiln_model_execute(kiln_model* model) {
  KILN_C_REQUIRE(model);
  return Guard("kiln_model_execute", [&] { return model->m->Execute(model->ins, model->outs); });
}

kiln_status kiln_model_execute_async(kiln_model* model, kiln_stream* stream) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(stream);
  return Guard("kiln_model_execute_async", [&] { return model->m->ExecuteAsync(*stream->s, model->ins, model->outs); });
}

kiln_status kiln_model_run(kiln_model* model) {
  KILN_C_REQUIRE(model);
  return Guard("kiln_model_run", [&]() -> kiln::Status {
    model->run_outs.clear();
    KILN_ASSIGN_OR_RETURN(model->run_outs, model->m->Run(model->ins));
    return kiln::Status::Ok();
  });
}

kiln_status kiln_model_run_output(const kiln_model* model, size_t index, kiln_tensor* out) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(out);
  if (index >= model->run_outs.size()) {
    return Fail(KILN_OUT_OF_RANGE, kiln::StrCat("kiln_model_run_output: output ", index, " does not exist",
                                                model->run_outs.empty() ? " (no kiln_model_run has succeeded)"
                                                                        : ""));
  }
  const kiln::TensorRef& t = model->run_outs[index];
  out->data = t.data;
  out->dtype = static_cast<kiln_dtype>(t.dtype);
  out->shape = t.shape.data();
  out->rank = t.shape.size();
  out->memory = KILN_MEMORY_HOST;
  return KILN_OK;
}

// What both output-shape calls share: the index and buffer checks, and
// writing the shape `get` gives (a Result<kiln::Shape>) to dims/rank.
static kiln_status OutputShapeCall(const kiln_model* model, size_t index, int64_t* dims, size_t capacity,
                                   size_t* rank, const char* call,
                                   const std::function<kiln::Result<kiln::Shape>()>& get) {
  if (index >= model->m->outputs().size()) {
    return Fail(KILN_OUT_OF_RANGE, kiln::StrCat("output ", index, " does not exist: the model has ",
                                                model->m->outputs().size()));
  }
  if (capacity && !dims) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(call, ": dims is NULL"));
  return Guard(call, [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(kiln::Shape s, get());
    *rank = s.size();
    for (std::size_t i = 0; i < s.size() && i < capacity; ++i) dims[i] = s[i];
    return kiln::Status::Ok();
  });
}

kiln_status kiln_model_output_shape(const kiln_model* model, size_t index, int64_t* dims, size_t capacity,
                                    size_t* rank) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(rank);
  return OutputShapeCall(model, index, dims, capacity, rank, __func__,
                         [&]() -> kiln::Result<kiln::Shape> { return model->m->output_shape(index); });
}

kiln_status kiln_model_output_shape_for_inputs(kiln_model* model, size_t index, int64_t* dims, size_t capacity,
                                               size_t* rank) {
  KILN_C_REQUIRE(model);
  KILN_C_REQUIRE(rank);
  return OutputShapeCall(model, index, dims, capacity, rank, __func__, [&]() -> kiln::Result<kiln::Shape> {
    for (std::size_t i = 0; i < model->ins.size(); ++i) {
      if (model->ins[i].dtype == kiln::DType::kUndefined) {
        return kiln::Error(kiln::StatusCode::kInvalidArgument, "input ", i, " '", model->m->inputs()[i].name,
                           "' is not bound (kiln_model_bind_input)");
      }
    }
    // The bound inputs' values too (a model with shape inputs).
    KILN_ASSIGN_OR_RETURN(std::vector<kiln::Shape> outs, model->m->OutputShapesFor(model->ins));
    return outs.at(index);
  });
}

// ---- stream ----
kiln_status kiln_stream_create(const char* device, kiln_stream** out) {
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_stream_create", [&]() -> kiln::Status {
    auto s = device && *device ? kiln::Stream::Create(device) : kiln::Stream::Create();
    if (!s.ok()) return s.status();
    *out = new kiln_stream{std::move(s).value()};
    return kiln::Status::Ok();
  });
}
kiln_status kiln_stream_synchronize(kiln_stream* stream) {
  KILN_C_REQUIRE(stream);
  return Guard("kiln_stream_synchronize", [&] { return stream->s->Synchronize(); });
}
void kiln_stream_free(kiln_stream* stream) {
  try {
    delete stream;
  } catch (...) {
  }
}

// ---- session ----
kiln_status kiln_session_create(const kiln_compile_options* options, const kiln_load_config* config,
                                kiln_session** out) {
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_session_create", [&] {
    kiln::SessionOptions so;
    if (options) {
      so.external_weight = options->external_weight;
      so.external_weight_dir = options->external_weight_dir;
    }
    if (config) so.load = config->o;
    auto* h = new kiln_session();
    if (options) h->compile = *options;
    if (config) h->load = config->o;
    h->s = std::make_unique<kiln::Session>(std::move(so));
    *out = h;
    return KILN_OK;
  });
}
void kiln_session_free(kiln_session* session) {
  try {
    delete session;
  } catch (...) {
  }
}
kiln_status kiln_session_load_model(kiln_session* session, const char* path, const kiln_load_config* config,
                                    kiln_model** out) {
  KILN_C_REQUIRE(session);
  KILN_C_REQUIRE(path);
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_session_load_model", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto m, session->s->LoadModel(path, config ? config->o : session->load));
    *out = kiln::capi::WrapModel(std::move(m));
    return kiln::Status::Ok();
  });
}
kiln_status kiln_session_weight_stats(const kiln_session* session, kiln_weight_stats* out) {
  KILN_C_REQUIRE(session);
  KILN_C_REQUIRE(out);
  return Guard(__func__, [&] {
    const kiln::WeightStats w = session->s->weight_stats();
    *out = {w.bytes_read, w.bytes_mapped, w.files_opened, w.weights_shared, w.resident_bytes};
    return KILN_OK;
  });
}

}  // extern "C"
