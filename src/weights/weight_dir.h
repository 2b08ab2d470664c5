// A directory of external weights and its meta.json index (compile side).
//
//   mode 1: one file per weight, `weight_<sha256>`;
//   mode 2: one combined file `<model>_weight_combined`, each weight at a
//           512-byte-aligned offset.
// meta.json maps sha256 -> {file, offset, length}. Every read-modify-write of
// the directory holds an exclusive flock on `meta.json.lock`, so compiles in
// separate processes serialise; meta.json is replaced atomically (temporary
// name `<name>.tmp.<pid>.<n>` + fsync + rename), new weight files likewise,
// and appends to a combined file only become visible once meta.json records
// them (an append in flight is announced in `meta.json.append`, so one cut
// short by kill -9 is truncated away by the next compile; one that fails is
// truncated back at once). Temporaries of processes that are gone are removed
// under the lock.
//
// Nothing on disk is trusted: meta.json entries of the wrong form (file names
// other than `weight_<sha>` / `<model>_weight_combined`, ranges outside their
// file) are dropped with a warning, and before a compile records a reference
// to bytes already in the directory it checks that they hash to the recorded
// SHA-256. A `weight_<sha>` that does not is rewritten (atomically: a new
// file renamed over it); a combined-file range that does not has its entry
// dropped and the weight stored again (an edited offset may point at another
// weight's bytes, so the range is never patched in place). Hashing is paid once: meta.json's "verified"
// section records, per file, the (device, inode, size, mtime, ctime) it had
// when its ranges were hashed or written; a file whose stamp still matches is
// not read again. (The stamp is not a MAC: it catches accidents and stray
// edits, not a forger who can also rewrite meta.json; `--verify-weights` at
// load time checks every byte.)
//
// A directory that cannot be written (read-only mount, no permission) is used
// read-only under a shared lock (or none when the lock file cannot be
// created): compiles succeed when every weight is already there and intact.
//
// A weight whose hash is recorded and whose file holds it is never written
// again, whichever mode wrote it (modes mix freely in one directory).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "common/weight_ref.h"

namespace kiln::weights {

inline constexpr std::uint64_t kCombinedAlignment = 512;
inline constexpr const char* kMetaFile = "meta.json";

struct StoreStats {
  std::uint64_t weights = 0;          // blobs asked to store
  std::uint64_t unique = 0;           // distinct contents among them
  std::uint64_t written = 0;          // blobs actually written
  std::uint64_t bytes_written = 0;
  std::uint64_t reused = 0;           // already present in the directory
  std::uint64_t repaired = 0;         // present but damaged: rewritten (counted in written too)
  std::uint64_t bytes_verified = 0;   // bytes already on disk hashed before being reused
  std::vector<std::string> warnings;  // dropped meta.json entries, repairs, recovered appends
};

struct StoreOptions {
  int mode = 1;                  // 1 or 2
  std::string model_name;        // mode 2 file name prefix
  int writer_threads = 8;        // mode 1 hashing/writing pool
};

// Stores `blobs` into `dir` (created if missing). Returns one record per blob,
// in order. The model name is checked first (nothing is written for a bad
// one). Errors name the directory and file: a weight file that is not a
// regular file (FIFO, device, directory, symlink) is refused, not opened.
Result<std::vector<WeightRef>> StoreWeights(const std::string& dir,
                                               const std::vector<HostTensorPtr>& blobs,
                                               const StoreOptions& opts, StoreStats* stats = nullptr);

// Reads meta.json of `dir` (empty map if absent). Entries of the wrong form
// are dropped (a warning each in `warnings` when given). Errors: kCorrupt
// naming the file when it is not a kiln-weights index at all (not JSON, other
// format tag or version), kInvalidArgument when it is not a regular file.
Result<std::map<std::string, WeightRef>> ReadMeta(const std::string& dir,
                                                     std::vector<std::string>* warnings = nullptr);

// A model name (mode 2 file prefix) that names a file inside the directory:
// 1..128 bytes of valid UTF-8, no '/', '\', "..", NUL or other control
// characters. Errors (kInvalidArgument) name the value.
Status CheckModelName(const std::string& name);

// Moves the weights in `from` into `to` (merging meta.json under `to`'s lock)
// and removes `from`. Returns records valid in `to` for the given hashes.
Result<std::vector<WeightRef>> MigrateWeights(const std::string& from, const std::string& to,
                                                 const std::vector<WeightRef>& records,
                                                 const StoreOptions& opts, StoreStats* final_stats = nullptr);

}  // namespace kiln::weights
