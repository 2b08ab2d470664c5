// Load-time external weights: find, check, load and share them.
//
// A WeightManager belongs to a session (or to one Model when used alone).
// Every FileConstant of a model is resolved to device memory by the cheapest
// route allowed:
//   - user memory registered for its file name (used in place, never freed);
//   - kMap: the file mapped read-only and used in place (CPU; zero copy);
//   - kCopy: the file read in chunks into device memory (combined files get
//     one allocation, single-weight files one each). Where device memory is
//     host-addressable (CPU) the chunks are read straight into it by two
//     readers; otherwise (and always with kStagedCopy) through two staging
//     buffers, the read of chunk i+1 overlapping the copy of chunk i: the path
//     a GPU needs, kept testable on the CPU.
// On a device whose memory is not host-addressable (sim, a GPU), weights of
// at most kHostWeightBytes are read into host memory instead (the runtime
// uploads them with the embedded constants): load-time shape inference reads
// such values (Reshape's shape, Slice's starts), as a GPU engine keeps shape
// tensors on the host. Verification hashes what is resident, copied back.
// Within a manager, a weight already resident (same SHA-256, or same file and
// offset) is not loaded again: models share it, and memory is released when
// the last model using it goes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "common/weight_ref.h"
#include "device/device.h"

namespace kiln::weights {

inline constexpr std::uint64_t kHostWeightBytes = 4096;

enum class LoadMode { kAuto, kMap, kCopy, kStagedCopy };

struct UserWeightMemory {
  void* data = nullptr;
  std::size_t size = 0;
};

struct WeightLoadConfig {
  std::string weight_dir;                 // empty: <model dir>/weight
  LoadMode mode = LoadMode::kAuto;        // kAuto: map if the device can, else copy
  std::size_t chunk_bytes = 10u << 20;    // kCopy chunk size
  int reader_threads = 0;                 // staged copy: readers per chunk (0: half the hardware threads, <= 8)
  bool verify = false;                    // check each weight's SHA-256
  std::map<std::string, UserWeightMemory> user_memory;  // by file name
  // Graph-API weights (WeightRef::file_id): the caller's file (path) or
  // memory (data, size), by file_id.
  struct File {
    std::string path;
    void* data = nullptr;
    std::size_t size = 0;
  };
  std::map<std::string, File> files;
};

struct WeightManagerStats {
  std::uint64_t bytes_read = 0;       // read from files (copy path) or hashed
  std::uint64_t bytes_mapped = 0;     // mapped in place
  std::uint64_t files_opened = 0;
  std::uint64_t weights_shared = 0;   // resolutions served from memory
  std::uint64_t resident_bytes = 0;   // device bytes currently held (copies)
};

class WeightManager {
 public:
  // Loads into `device`'s memory (cpu when null).
  explicit WeightManager(device::Device* device = nullptr);
  device::Device& device() const;
  ~WeightManager();
  WeightManager(const WeightManager&) = delete;
  WeightManager& operator=(const WeightManager&) = delete;

  // Resolves `refs` (in order). The returned tensors borrow device memory
  // kept alive by the tensors themselves. Errors name the node and file.
  Result<std::vector<HostTensorPtr>> Acquire(const std::vector<WeightRef>& refs,
                                             const WeightLoadConfig& cfg, const std::string& model_dir);
  WeightManagerStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln::weights
