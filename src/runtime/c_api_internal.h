// The C API's handles (include/kiln/kiln_c.h) and the guard every C entry
// point runs its body in: shared by the runtime part (runtime/c_api.cc, in
// libkiln.so) and the compiler part (api/c_api_compiler.cc).
#pragma once

#include <map>
#include <memory>
#include <new>
#include <type_traits>
#include <string>
#include <vector>

#include "kiln/kiln_c.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "ir/graph.h"

struct kiln_compile_options {
  int external_weight = 0;
  std::string external_weight_dir;
  std::string target = "cpu";
  std::string model_name;
  std::map<std::string, kiln::Shape> input_shapes;
  std::map<std::string, kiln::ir::InputSpec> input_specs;  // kiln_compile_options_set_input_spec
};

struct kiln_summary {
  kiln::CompiledGraphSummary s;
};

struct kiln_load_config {
  kiln::LoadOptions o;
};

struct kiln_model {
  std::unique_ptr<kiln::Model> m;
  std::vector<std::vector<kiln_dim>> in_dims, out_dims;
  std::vector<kiln::TensorRef> ins, outs;  // bound buffers
  std::vector<kiln::TensorRef> run_outs;   // the last kiln_model_run's (Kiln's memory)
};

struct kiln_stream {
  std::unique_ptr<kiln::Stream> s;
};

struct kiln_session {
  std::unique_ptr<kiln::Session> s;
  kiln_compile_options compile;  // for graphs added to the session
  kiln::LoadOptions load;        // for models loaded without a configuration
};

namespace kiln::capi {

// Records `s` as this thread's last error and returns its code.
kiln_status Fail(const Status& s);
kiln_status Fail(kiln_status code, const std::string& message);

// Runs `f` (returning kiln_status or Status): exceptions become
// KILN_INTERNAL / KILN_OUT_OF_RANGE with a message; nothing crosses the C
// boundary.
template <typename F>
kiln_status Guard(const char* call, F&& f) noexcept {
  try {
    if constexpr (std::is_same_v<decltype(f()), Status>) {
      Status s = f();
      return s.ok() ? KILN_OK : Fail(s.WithContext(call));
    } else {
      return f();
    }
  } catch (const std::bad_alloc&) {
    return Fail(KILN_OUT_OF_RANGE, std::string(call) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(KILN_INTERNAL, std::string(call) + ": unexpected exception: " + e.what());
  } catch (...) {
    return Fail(KILN_INTERNAL, std::string(call) + ": unexpected exception");
  }
}

// NULL arguments are refused with a message naming the call and argument.
#define KILN_C_REQUIRE(arg)                                                                        \
  do {                                                                                            \
    if (!(arg)) return ::kiln::capi::Fail(KILN_INVALID_ARGUMENT, std::string(__func__) + ": " #arg \
                                                                     " is NULL");                  \
  } while (0)

// A string setter: `field(*h) = value`, NULLs refused naming the call.
template <typename H, typename F>
kiln_status SetString(H* h, const char* value, F field, const char* call) {
  if (!h) return Fail(KILN_INVALID_ARGUMENT, std::string(call) + ": the handle is NULL");
  if (!value) return Fail(KILN_INVALID_ARGUMENT, std::string(call) + ": the value is NULL");
  return Guard(call, [&] {
    field(*h) = value;
    return KILN_OK;
  });
}

Result<std::vector<TensorRef>> Refs(const kiln_tensor* t, std::size_t n, const char* what);
Result<TensorRef> Ref(const kiln_tensor& t, const char* what, std::size_t index);
kiln_model* WrapModel(std::unique_ptr<Model> m);

}  // namespace kiln::capi
