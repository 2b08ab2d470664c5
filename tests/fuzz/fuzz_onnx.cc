// libFuzzer target: ONNX bytes -> import -> the full compile pipeline ->
// .kiln writer -> loader (the compiler's output must pass the plan verifier)
// -> one run on zero-filled inputs. Bad models must fail with an error, never
// crash, hang or read out of bounds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "api/compiler.h"
#include "format/kiln_file.h"
#include "fuzz_util.h"
#include "kiln/runtime.h"
#include "run_zeros.h"

namespace {
kiln_fuzz::Stats g_stats{"onnx"};
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  unsetenv("KILN_CUSTOM_OP_PATH");
  setenv("KILN_WORK_PATH", kiln_fuzz::ScratchDir().c_str(), 1);
  g_stats.names[0] = "compiled";
  g_stats.names[1] = "loaded";
  g_stats.names[2] = "executed";
  g_stats.names[3] = "compiled_but_not_loadable";
  kiln_fuzz::InitStats(&g_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string onnx_path = kiln_fuzz::ScratchDir() + "/model.onnx";
  static const std::string kiln_path = kiln_fuzz::ScratchDir() + "/model.kiln";
  ++g_stats.inputs;
  kiln_fuzz::WriteBytes(onnx_path, data, size);
  kiln::CompileOptions opts;
  auto compiled = kiln::CompileOnnxFile(onnx_path, opts);
  if (!compiled.ok()) return 0;
  ++g_stats.c[0];
  if (!kiln::format::WriteModelFile(*compiled, kiln_path).ok()) return 0;
  kiln::LoadOptions lo;
  lo.threads = 1;
  auto model = kiln::Model::Load(kiln_path, lo);
  if (!model.ok()) {
    // The compiler wrote a file its own loader refuses: worth a look, but a
    // finding for the report rather than a crash (tests/fuzz/FINDINGS.md).
    ++g_stats.c[3];
    static int shown = 0;
    if (shown++ < 5) std::fprintf(stderr, "fuzz_onnx: compiled model fails to load: %s\n",
                                  model.status().ToString().c_str());
    // KILN_FUZZ_FINDINGS_DIR keeps the input (run_fuzz.sh sets it);
    // KILN_FUZZ_STRICT_LOAD makes the disagreement fatal, as when the
    // regression inputs that once showed it are replayed.
    if (const char* dir = std::getenv("KILN_FUZZ_FINDINGS_DIR")) {
      kiln_fuzz::WriteBytes(std::string(dir) + "/not-loadable-" + std::to_string(g_stats.c[3]) + ".onnx", data, size);
    }
    if (std::getenv("KILN_FUZZ_STRICT_LOAD")) std::abort();
    return 0;
  }
  ++g_stats.c[1];
  if (kiln_fuzz::RunOnZeros(**model)) ++g_stats.c[2];
  return 0;
}
