// Helpers for unit tests: build small graphs, constants, temp paths.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "api/compiler.h"
#include "common/tensor.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "format/kiln_file.h"

namespace kiln::test {

inline HostTensorPtr F32(Shape s, std::vector<float> v) {
  auto t = std::make_shared<HostTensor>(DType::kFloat32, std::move(s));
  std::copy(v.begin(), v.end(), t->mutable_data_as<float>());
  return t;
}

inline HostTensorPtr I64(Shape s, std::vector<std::int64_t> v) {
  auto t = std::make_shared<HostTensor>(DType::kInt64, std::move(s));
  std::copy(v.begin(), v.end(), t->mutable_data_as<std::int64_t>());
  return t;
}

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

// Sets since_version to the latest version Kiln implements for each node
// (subgraphs included).
void SetLatestVersions(ir::Graph& g);

// Whether the device tests run on ($KILN_DEVICE, else cpu) can use host
// memory in place (mapped weight files): false on sim.
bool DefaultDeviceMapsHostMemory();

// The VmFlags line of /proc/self/smaps for the mapping holding `p` (e.g.
// "VmFlags: rd mr mw me nh"), "" when no mapping holds it.
std::string VmFlagsOf(const void* p);

// Compiles `g` (latest op versions), writes dir/m.kiln and loads it back;
// `keep` receives the compiled model if given; `load` are the load options.
Result<std::unique_ptr<Model>> CompileAndLoad(std::unique_ptr<ir::Graph> g, const TempDir& dir,
                                              format::CompiledModel* keep = nullptr, CompileOptions opts = {},
                                              const LoadOptions& load = {});
// The same, with the op versions the graph's nodes already have.
Result<std::unique_ptr<Model>> CompileAndLoadAsIs(std::unique_ptr<ir::Graph> g, const TempDir& dir,
                                                  format::CompiledModel* keep = nullptr, CompileOptions opts = {},
                                                  const LoadOptions& load = {});

}  // namespace kiln::test
