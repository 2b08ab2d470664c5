// A directory of external weights and its meta.json index (compile side).
//
//   mode 1: one file per weight, `weight_<sha256>`;
//   mode 2: one combined file `<model>_weight_combined`, each weight at a
//           512-byte-aligned offset.
// meta.json maps sha256 -> {file, offset, length}. Every read-modify-write of
// the directory holds an exclusive flock on `meta.json.lock`, so compiles in
// separate processes serialise; meta.json is replaced atomically (temporary
// name + rename), new weight files likewise, and appends to a combined file
// only become visible once meta.json records them. A weight whose hash is
// recorded and whose file holds it is never written again, whichever mode
// wrote it (modes mix freely in one directory).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace kiln::weights {

inline constexpr std::uint64_t kCombinedAlignment = 512;
inline constexpr const char* kMetaFile = "meta.json";

struct WeightRecord {
  std::string sha256;
  std::string file;       // relative to the weight directory
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct StoreStats {
  std::uint64_t weights = 0;          // blobs asked to store
  std::uint64_t unique = 0;           // distinct contents among them
  std::uint64_t written = 0;          // blobs actually written
  std::uint64_t bytes_written = 0;
  std::uint64_t reused = 0;           // already present in the directory
};

struct StoreOptions {
  int mode = 1;                  // 1 or 2
  std::string model_name;        // mode 2 file name prefix
  int writer_threads = 8;        // mode 1 hashing/writing pool
};

// Stores `blobs` into `dir` (created if missing). Returns one record per blob,
// in order. Errors name the directory and file.
Result<std::vector<WeightRecord>> StoreWeights(const std::string& dir,
                                               const std::vector<HostTensorPtr>& blobs,
                                               const StoreOptions& opts, StoreStats* stats = nullptr);

// Reads meta.json of `dir` (empty map if absent). Errors: kCorrupt naming the file.
Result<std::map<std::string, WeightRecord>> ReadMeta(const std::string& dir);

// Moves the weights in `from` into `to` (merging meta.json under `to`'s lock)
// and removes `from`. Returns records valid in `to` for the given hashes.
Result<std::vector<WeightRecord>> MigrateWeights(const std::string& from, const std::string& to,
                                                 const std::vector<WeightRecord>& records,
                                                 const StoreOptions& opts);

}  // namespace kiln::weights
