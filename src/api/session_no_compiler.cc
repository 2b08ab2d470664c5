// Session's graph API in a build without the compiler
// (-DKILN_BUILD_COMPILER=OFF): every call says so. With the compiler these
// are defined in src/api/session.cc (kiln_compiler).
#include "kiln/runtime.h"

namespace kiln {
namespace {
Status NoCompiler(const char* call) {
  return Error(StatusCode::kUnimplemented, "Session::", call,
               ": the compiler is not built in (Kiln was configured with -DKILN_BUILD_COMPILER=OFF); "
               "compile graphs with a full build and load the .kiln file with Session::LoadModel");
}
}  // namespace

Result<std::uint32_t> Session::AddGraph(Graph&&) { return NoCompiler("AddGraph"); }
Status Session::CompileGraph(std::uint32_t) { return NoCompiler("CompileGraph"); }
Status Session::LoadGraph(std::uint32_t, Stream*) { return NoCompiler("LoadGraph"); }
Status Session::ExecuteGraphWithStreamAsync(std::uint32_t, Stream&, const std::vector<TensorRef>&,
                                            const std::vector<TensorRef>&) {
  return NoCompiler("ExecuteGraphWithStreamAsync");
}
Status Session::RunGraph(std::uint32_t, const std::vector<TensorRef>&, const std::vector<TensorRef>&) {
  return NoCompiler("RunGraph");
}
Status Session::RemoveGraph(std::uint32_t) { return NoCompiler("RemoveGraph"); }
Result<CompiledGraphSummary> Session::GetCompiledGraphSummary(std::uint32_t) const {
  return NoCompiler("GetCompiledGraphSummary");
}

}  // namespace kiln
