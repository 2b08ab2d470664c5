// libFuzzer target: .npy bytes -> kiln::npy::Parse (header parser, checked
// sizes). What parses must survive a round trip: Save, Load from the file,
// same dtype, shape and bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "tools/npy.h"

namespace {
kiln_fuzz::Stats g_stats{"npy"};
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_stats.names[0] = "parsed";
  kiln_fuzz::InitStats(&g_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::ScratchDir() + "/t.npy";
  ++g_stats.inputs;
  auto t = kiln::npy::Parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
  if (!t.ok()) return 0;
  ++g_stats.c[0];
  if (!kiln::npy::Save(path, *t).ok()) return 0;  // e.g. a dtype the writer does not support
  auto back = kiln::npy::Load(path);
  if (!back.ok() || back->dtype() != t->dtype() || back->shape() != t->shape() ||
      back->nbytes() != t->nbytes() ||
      (t->nbytes() && std::memcmp(back->data(), t->data(), t->nbytes()) != 0)) {
    std::fprintf(stderr, "npy round trip changed the tensor: %s\n",
                 back.ok() ? "different dtype/shape/bytes" : back.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
