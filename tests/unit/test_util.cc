#include "test_util.h"

#include <cstdio>
#include <fstream>

#include "runtime/devices.h"

#include "ops/op_registry.h"

namespace kiln::test {

void SetLatestVersions(ir::Graph& g) {
  for (auto& n : g.nodes()) {
    if (const ops::OpDef* d = ops::OpRegistry::Get().Find(n->op_type(), n->domain())) {
      n->set_since_version(d->versions.back());
    }
    for (auto& [k, a] : n->attrs()) {
      if (a.g) SetLatestVersions(*a.g);
    }
  }
}

std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool DefaultDeviceMapsHostMemory() {
  auto d = runtime::OpenDevice("");
  return d.ok() && d.value()->caps().maps_host_memory;
}

Result<std::unique_ptr<Model>> CompileAndLoad(std::unique_ptr<ir::Graph> g, const TempDir& dir,
                                              format::CompiledModel* keep, CompileOptions opts,
                                              const LoadOptions& load) {
  SetLatestVersions(*g);
  return CompileAndLoadAsIs(std::move(g), dir, keep, std::move(opts), load);
}

Result<std::unique_ptr<Model>> CompileAndLoadAsIs(std::unique_ptr<ir::Graph> g, const TempDir& dir,
                                                  format::CompiledModel* keep, CompileOptions opts,
                                                  const LoadOptions& load) {
  auto m = CompileGraph(std::move(g), opts);
  if (!m.ok()) return m.status();
  KILN_RETURN_IF_ERROR(format::WriteModelFile(m.value(), dir.file("m.kiln")));
  if (keep) *keep = std::move(m).value();
  return Model::Load(dir.file("m.kiln"), load);
}

}  // namespace kiln::test
