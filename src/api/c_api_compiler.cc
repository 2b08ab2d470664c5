// The compiler half of the C API (include/kiln/kiln_c.h): compile options,
// compiling ONNX files, summaries, and sessions' graphs.
#include <string>

#include "api/compiler.h"
#include "frontend/onnx/onnx_import.h"
#include "kiln/custom_op.h"
#include "kiln/graph.h"
#include "runtime/c_api_internal.h"

using kiln::capi::Fail;
using kiln::capi::Guard;

namespace {
kiln::CompileOptions ToOptions(const kiln_compile_options* o) {
  kiln::CompileOptions co;
  if (!o) return co;
  co.external_weight = o->external_weight;
  co.external_weight_dir = o->external_weight_dir;
  co.target = o->target;
  co.model_name = o->model_name;
  co.input_shapes = o->input_shapes;
  co.input_specs = o->input_specs;
  return co;
}

}  // namespace

extern "C" {

kiln_status kiln_compile_options_create(kiln_compile_options** out) {
  KILN_C_REQUIRE(out);
  return Guard("kiln_compile_options_create", [&] {
    *out = new kiln_compile_options();
    return KILN_OK;
  });
}
void kiln_compile_options_free(kiln_compile_options* options) { delete options; }

kiln_status kiln_compile_options_set_external_weight(kiln_compile_options* options, int mode) {
  KILN_C_REQUIRE(options);
  if (mode < 0 || mode > 2) {
    return Fail(KILN_INVALID_ARGUMENT,
                kiln::StrCat(__func__, ": mode ", mode, " (expected 0 embedded, 1 per-weight files, 2 combined)"));
  }
  options->external_weight = mode;
  return KILN_OK;
}
kiln_status kiln_compile_options_set_external_weight_dir(kiln_compile_options* options, const char* dir) {
  return kiln::capi::SetString(
      options, dir, [](kiln_compile_options& o) -> std::string& { return o.external_weight_dir; }, __func__);
}
kiln_status kiln_compile_options_set_target(kiln_compile_options* options, const char* device) {
  return kiln::capi::SetString(options, device, [](kiln_compile_options& o) -> std::string& { return o.target; },
                               __func__);
}
kiln_status kiln_compile_options_set_model_name(kiln_compile_options* options, const char* name) {
  return kiln::capi::SetString(options, name, [](kiln_compile_options& o) -> std::string& { return o.model_name; },
                               __func__);
}
kiln_status kiln_compile_options_set_input_shape(kiln_compile_options* options, const char* name,
                                                 const int64_t* dims, size_t rank) {
  KILN_C_REQUIRE(options);
  KILN_C_REQUIRE(name);
  if (rank && !dims) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": dims is NULL for rank ", rank));
  if (rank > 64) return Fail(KILN_INVALID_ARGUMENT, kiln::StrCat(__func__, ": rank ", rank, " (at most 64)"));
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < -1) {
      return Fail(KILN_INVALID_ARGUMENT,
                  kiln::StrCat(__func__, ": input '", name, "' dim ", i, " is ", dims[i], " (expected >= 0, or -1)"));
    }
  }
  return Guard(__func__, [&] {
    options->input_shapes[name] = kiln::Shape(dims, dims + rank);
    options->input_specs.erase(name);
    return KILN_OK;
  });
}

kiln_status kiln_compile_options_set_input_spec(kiln_compile_options* options, const char* spec) {
  KILN_C_REQUIRE(options);
  KILN_C_REQUIRE(spec);
  return Guard(__func__, [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto parsed, kiln::onnx_frontend::ParseInputSpecs(spec));
    for (auto& [name, s] : parsed) {
      options->input_shapes.erase(name);
      options->input_specs[name] = std::move(s);
    }
    return kiln::Status::Ok();
  });
}

kiln_status kiln_compile(const char* onnx_path, const char* output, const kiln_compile_options* options,
                         kiln_summary** summary) {
  KILN_C_REQUIRE(onnx_path);
  KILN_C_REQUIRE(output);
  if (summary) *summary = nullptr;
  return Guard("kiln_compile", [&]() -> kiln::Status {
    kiln::CompileReport report;
    KILN_ASSIGN_OR_RETURN(kiln::format::CompiledModel m,
                          kiln::CompileOnnxFileTo(onnx_path, output, ToOptions(options), &report));
    if (summary) *summary = new kiln_summary{kiln::SummarizeCompiled(m, report)};
    return kiln::Status::Ok();
  });
}

// ---- summary ----
void kiln_summary_free(kiln_summary* summary) { delete summary; }
size_t kiln_summary_num_nodes(const kiln_summary* summary) { return summary ? summary->s.num_nodes : 0; }
uint64_t kiln_summary_arena_bytes(const kiln_summary* summary) { return summary ? summary->s.arena_bytes : 0; }
uint64_t kiln_summary_embedded_weight_bytes(const kiln_summary* summary) {
  return summary ? summary->s.embedded_weight_bytes : 0;
}
const char* kiln_summary_weight_dir(const kiln_summary* summary) {
  return summary ? summary->s.weight_dir.c_str() : "";
}
size_t kiln_summary_external_weight_count(const kiln_summary* summary) {
  return summary ? summary->s.external_weights.size() : 0;
}
kiln_status kiln_summary_external_weight(const kiln_summary* summary, size_t index, kiln_external_weight* out) {
  KILN_C_REQUIRE(summary);
  KILN_C_REQUIRE(out);
  if (index >= summary->s.external_weights.size()) {
    return Fail(KILN_OUT_OF_RANGE, kiln::StrCat("external weight ", index, " does not exist: the summary has ",
                                                summary->s.external_weights.size()));
  }
  const auto& w = summary->s.external_weights[index];
  *out = {w.path.c_str(), w.size, w.offset, w.id.c_str()};
  return KILN_OK;
}

// ---- session graphs ----
kiln_status kiln_session_add_graph(kiln_session* session, const char* onnx_path, uint32_t* id) {
  KILN_C_REQUIRE(session);
  KILN_C_REQUIRE(onnx_path);
  KILN_C_REQUIRE(id);
  return Guard("kiln_session_add_graph", [&]() -> kiln::Status {
    KILN_RETURN_IF_ERROR(kiln::LoadCustomOpPackages().WithContext(kiln::StrCat("importing '", onnx_path, "'")));
    kiln::onnx_frontend::ImportOptions io;
    io.input_shapes = session->compile.input_shapes;
    io.input_specs = session->compile.input_specs;
    KILN_ASSIGN_OR_RETURN(auto g, kiln::onnx_frontend::ImportOnnxFile(onnx_path, io));
    KILN_ASSIGN_OR_RETURN(*id, session->s->AddGraph(kiln::Graph::FromIr(std::move(g))));
    return kiln::Status::Ok();
  });
}
kiln_status kiln_session_compile_graph(kiln_session* session, uint32_t id) {
  KILN_C_REQUIRE(session);
  return Guard("kiln_session_compile_graph", [&] { return session->s->CompileGraph(id); });
}
kiln_status kiln_session_load_graph(kiln_session* session, uint32_t id, kiln_stream* stream) {
  KILN_C_REQUIRE(session);
  return Guard("kiln_session_load_graph", [&] { return session->s->LoadGraph(id, stream ? stream->s.get() : nullptr); });
}
kiln_status kiln_session_execute_graph(kiln_session* session, uint32_t id, const kiln_tensor* inputs,
                                       size_t num_inputs, const kiln_tensor* outputs, size_t num_outputs) {
  KILN_C_REQUIRE(session);
  return Guard("kiln_session_execute_graph", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto ins, kiln::capi::Refs(inputs, num_inputs, "input"));
    KILN_ASSIGN_OR_RETURN(auto outs, kiln::capi::Refs(outputs, num_outputs, "output"));
    return session->s->RunGraph(id, ins, outs);
  });
}
kiln_status kiln_session_execute_graph_async(kiln_session* session, uint32_t id, kiln_stream* stream,
                                             const kiln_tensor* inputs, size_t num_inputs,
                                             const kiln_tensor* outputs, size_t num_outputs) {
  KILN_C_REQUIRE(session);
  KILN_C_REQUIRE(stream);
  return Guard("kiln_session_execute_graph_async", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(auto ins, kiln::capi::Refs(inputs, num_inputs, "input"));
    KILN_ASSIGN_OR_RETURN(auto outs, kiln::capi::Refs(outputs, num_outputs, "output"));
    return session->s->ExecuteGraphWithStreamAsync(id, *stream->s, ins, outs);
  });
}
kiln_status kiln_session_graph_summary(const kiln_session* session, uint32_t id, kiln_summary** out) {
  KILN_C_REQUIRE(session);
  KILN_C_REQUIRE(out);
  *out = nullptr;
  return Guard("kiln_session_graph_summary", [&]() -> kiln::Status {
    KILN_ASSIGN_OR_RETURN(kiln::CompiledGraphSummary s, session->s->GetCompiledGraphSummary(id));
    *out = new kiln_summary{std::move(s)};
    return kiln::Status::Ok();
  });
}
kiln_status kiln_session_remove_graph(kiln_session* session, uint32_t id) {
  KILN_C_REQUIRE(session);
  return Guard("kiln_session_remove_graph", [&] { return session->s->RemoveGraph(id); });
}

}  // extern "C"
