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
#include <utility>
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

// ---- housekeeping (kiln weights list / gc) -------------------------------------
//
// "Kept" models are .kiln files whose FileConstants (If branches included)
// reference this directory: their recorded weight directory (or
// <model dir>/weight) must be `dir` itself, else the call fails naming both.
// FileConstants with a file_id are the caller's own files and are ignored.

struct StoreEntry {
  // A meta.json entry (sha256, location, offset, length), or, when !recorded,
  // a weight file meta.json does not reference (sha256 empty, offset 0,
  // length = its size).
  WeightRef ref;
  bool recorded = true;
  bool present = true;                // recorded: its file covers the range
  std::vector<std::string> used_by;   // the given models that reference it (as given)
};

// Lists `dir` under a shared lock, changing nothing: every meta.json entry,
// then the weight files it does not reference. `models` fill used_by.
// Errors: a model that cannot be read, references another directory, or a
// weight file name that is not a regular file (named).
Result<std::vector<StoreEntry>> ListStore(const std::string& dir, const std::vector<std::string>& models);

struct GcReport {
  bool dry_run = false;
  std::vector<std::string> removed;                                   // file names in dir
  std::vector<std::pair<std::string, std::string>> compacted;         // old -> new combined file
  std::vector<std::string> rewritten_models;                          // kept .kiln paths rewritten
  std::uint64_t entries_dropped = 0;                                  // meta.json entries
  std::uint64_t bytes_freed = 0;
};

// Removes from `dir` what the `keep` models do not reference, under the
// directory's exclusive lock: unused weight_<sha> files, combined files no
// kept model uses, and meta.json entries for them; a combined file of which
// only some ranges are used is compacted into <model>.gc<N>_weight_combined.
// Order (each step atomic, so a kill -9 anywhere leaves every kept model
// loadable and a later gc finishes the job): new combined files (temporary +
// fsync + rename), the kept .kiln files that used the old ones, meta.json,
// then the unlinks. Everything is checked first: a kept model referencing a
// weight meta.json does not record, or bytes missing from or not hashing to
// their SHA-256 in `dir`, fails naming the model, node and weight with
// nothing changed. Files whose names are not weight file names are never
// touched. `keep` must not be empty. `dry_run`: the report of what would be
// done; nothing is changed.
Result<GcReport> CollectGarbage(const std::string& dir, const std::vector<std::string>& keep, bool dry_run);

}  // namespace kiln::weights
