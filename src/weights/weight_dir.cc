#include "weights/weight_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/checked.h"
#include "common/file.h"
#include "format/kiln_file.h"
#include "ir/graph.h"
#include "ops/file_constant.h"
#include "weights/sha256.h"
#include "common/weight_ref.h"

namespace kiln::weights {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLockFile = "meta.json.lock";
constexpr const char* kAppendIntent = "meta.json.append";
constexpr std::int64_t kMaxMetaBytes = std::int64_t{1} << 30;
// A file changed less than this before its stamp was taken may change again
// within the same timestamp tick unseen: its stamp is not cached.
constexpr std::int64_t kRacyNs = 1'000'000'000;

// Printable form of an untrusted name for messages.
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

WeightRef MakeRef(const std::string& sha256, const std::string& location, std::uint64_t offset, std::uint64_t length) {
  WeightRef r;
  r.sha256 = sha256;
  r.location = location;
  r.offset = offset;
  r.length = length;
  return r;
}

std::uint64_t AlignUp(std::uint64_t v) { return (v + kCombinedAlignment - 1) / kCombinedAlignment * kCombinedAlignment; }

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* FileKind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
       : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

// ---- stamps and the verification cache -------------------------------------

struct Stamp {
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const Stamp&) const = default;
};

Stamp StampOf(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec};
}

bool Racy(const Stamp& s) { return NowNs() - s.ctime_ns < kRacyNs; }

using Range = std::tuple<std::uint64_t, std::uint64_t, std::string>;  // offset, length, sha256

// Ranges of a file known to hash to their SHA-256 while the file has `stamp`.
struct FileCache {
  Stamp stamp;
  std::set<Range> ranges;
};

// ---- the directory lock -------------------------------------------------------

// flock on <dir>/meta.json.lock for the object's lifetime: exclusive for a
// writable directory, shared (or none, when the lock file cannot be created)
// for a read-only one.
class DirLock {
 public:
  static Result<DirLock> Acquire(const std::string& dir, bool read_only) {
    const std::string path = (fs::path(dir) / kLockFile).string();
    // flock needs no write access: opened read-only, the lock works for every
    // user of a shared directory whoever created the file.
    int fd = read_only ? open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
                       : open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
    if (fd < 0) {
      if (read_only && errno == ENOENT) return DirLock(-1);  // nothing writes there without creating it
      return Error(StatusCode::kIoError, "cannot open lock file '", path, "': ", std::strerror(errno));
    }
    UniqueFd owned(fd);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error(StatusCode::kInvalidArgument, "lock file '", path, "' is ", FileKind(st.st_mode),
                   ", not a regular file");
    }
    while (flock(fd, read_only ? LOCK_SH : LOCK_EX) != 0) {
      if (errno != EINTR) return Error(StatusCode::kIoError, "cannot lock '", path, "': ", std::strerror(errno));
    }
    return DirLock(owned.release());
  }
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock() {
    if (fd_ >= 0) {
      flock(fd_, LOCK_UN);
      close(fd_);
    }
  }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

// ---- atomic writes ----------------------------------------------------------------

std::string UniqueSuffix() {
  static std::atomic<unsigned> counter{0};
  return StrCat(".tmp.", getpid(), ".", counter++);
}

Status WriteAll(int fd, const void* data, std::uint64_t size, std::uint64_t offset, const std::string& what) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, p + done, std::min<std::uint64_t>(size - done, 1u << 30), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error(StatusCode::kIoError, what, " failed after ", done, " of ", size, " bytes: ",
                   n < 0 ? std::strerror(errno) : "no progress");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

// Writes `data` to dir/name via a temporary name + fsync + rename. Returns the
// stamp of the file now under the final name.
Result<Stamp> WriteFileAtomic(const fs::path& dir, const std::string& name, const void* data, std::uint64_t size) {
  const fs::path final_path = dir / name;
  const fs::path tmp = dir / (name + UniqueSuffix());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Error(StatusCode::kIoError, "cannot create '", tmp.string(), "': ", std::strerror(errno));
  UniqueFd owned(fd);
  Status w = WriteAll(fd, data, size, 0, StrCat("writing '", tmp.string(), "'"));
  if (w.ok() && fsync(fd) != 0) w = Error(StatusCode::kIoError, "flushing '", tmp.string(), "' failed: ", std::strerror(errno));
  if (w.ok() && close(owned.release()) != 0) {
    w = Error(StatusCode::kIoError, "closing '", tmp.string(), "' failed: ", std::strerror(errno));
  }
  if (w.ok() && rename(tmp.c_str(), final_path.c_str()) != 0) {
    w = Error(StatusCode::kIoError, "cannot rename '", tmp.string(), "' to '", final_path.string(), "': ",
              std::strerror(errno));
  }
  if (!w.ok()) {
    unlink(tmp.c_str());
    return w;
  }
  struct stat st {};
  if (lstat(final_path.c_str(), &st) != 0) {
    return Error(StatusCode::kIoError, "cannot stat '", final_path.string(), "': ", std::strerror(errno));
  }
  return StampOf(st);
}

// ---- the store --------------------------------------------------------------------

// One read-modify-write of a weight directory (under its lock).
struct Store {
  fs::path dir;
  bool read_only = false;
  std::string read_only_reason;
  std::map<std::string, WeightRef> meta;
  std::map<std::string, FileCache> cache;  // by file name
  bool dirty = false;                      // meta.json must be rewritten
  std::vector<std::string> warnings;
  std::uint64_t bytes_verified = 0;
  std::mutex mu;  // cache, dirty, warnings, bytes_verified (writer threads)

  fs::path MetaPath() const { return dir / kMetaFile; }

  void Warn(std::string w) {
    std::cerr << "kiln: warning: " << w << "\n";
    warnings.push_back(std::move(w));
  }

  void Remember(const std::string& file, const Stamp& stamp, Range r) {
    FileCache& c = cache[file];
    if (!(c.stamp == stamp)) {
      c.stamp = stamp;
      c.ranges.clear();
    }
    if (c.ranges.insert(std::move(r)).second) dirty = true;
  }
};

// Why entry (h, e) of meta.json cannot be used, or "" when it can.
std::string EntryProblem(const std::string& h, const nlohmann::json& e, WeightRef* r) {
  if (!IsSha256Hex(h)) return "its key is not 64 lowercase hex digits";
  if (!e.is_object()) return "it is not an object";
  auto file = e.find("file"), offset = e.find("offset"), length = e.find("length");
  if (file == e.end() || !file->is_string()) return "it has no \"file\" string";
  if (offset == e.end() || !offset->is_number_unsigned() || length == e.end() || !length->is_number_unsigned()) {
    return "its \"offset\"/\"length\" are not non-negative integers";
  }
  r->sha256 = h;
  r->location = file->get<std::string>();
  r->offset = offset->get<std::uint64_t>();
  r->length = length->get<std::uint64_t>();
  if (!IsWeightFileName(r->location)) {
    return StrCat("its file '", Printable(r->location), "' is neither weight_<sha256> nor <model>", kCombinedSuffix);
  }
  std::uint64_t end = 0;
  if (!CheckedAddU(r->offset, r->length, &end) || end > static_cast<std::uint64_t>(INT64_MAX)) {
    return StrCat("its range offset ", r->offset, " + length ", r->length, " overflows");
  }
  if (r->length == 0) return "its length is 0";
  if (IsSingleName(r->location) && (r->location.compare(7, 64, h) != 0 || r->offset != 0)) {
    return StrCat("file '", r->location, "' can only hold the whole weight ", h);
  }
  if (IsCombinedName(r->location) && r->offset % kCombinedAlignment != 0) {
    return StrCat("its offset ", r->offset, " is not a multiple of ", kCombinedAlignment);
  }
  return {};
}

bool ParseStamp(const nlohmann::json& j, Stamp* s) {
  for (const char* k : {"dev", "ino", "size", "mtime_ns", "ctime_ns"}) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer()) return false;
  }
  s->dev = j["dev"].get<std::uint64_t>();
  s->ino = j["ino"].get<std::uint64_t>();
  s->size = j["size"].get<std::uint64_t>();
  s->mtime_ns = j["mtime_ns"].get<std::int64_t>();
  s->ctime_ns = j["ctime_ns"].get<std::int64_t>();
  return true;
}

// Reads meta.json into s.meta and s.cache. Malformed entries are dropped with
// a warning; a malformed cache is ignored (it only saves hashing).
Status LoadMeta(Store& s, std::vector<std::string>* warnings_out) {
  const fs::path path = s.MetaPath();
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Error(StatusCode::kIoError, "cannot stat '", path.string(), "': ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Error(StatusCode::kInvalidArgument, "weight index '", path.string(), "' is ", FileKind(st.st_mode),
                 ", not a regular file");
  }
  KILN_ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path.string(), "weight index", kMaxMetaBytes));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string fix = " (remove it to rebuild the index: weight files are then hashed before they are reused)";
  if (j.is_discarded() || !j.is_object()) {
    return Error(StatusCode::kCorrupt, "'", path.string(), "' is malformed: not a JSON object", fix);
  }
  auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || fmt->get<std::string>() != "kiln-weights") {
    return Error(StatusCode::kCorrupt, "'", path.string(), "' is malformed: unknown format tag (expected \"kiln-weights\")", fix);
  }
  auto ver = j.find("version");
  if (ver == j.end() || !ver->is_number_unsigned() || ver->get<std::uint64_t>() != 1) {
    return Error(StatusCode::kCorrupt, "'", path.string(), "' is malformed: version is not 1 (written by a newer Kiln?)");
  }
  auto weights = j.find("weights");
  if (weights == j.end() || !weights->is_object()) {
    return Error(StatusCode::kCorrupt, "'", path.string(), "' is malformed: no \"weights\" object", fix);
  }
  std::vector<std::string> warn;
  for (auto& [h, e] : weights->items()) {
    WeightRef r;
    std::string why = EntryProblem(h, e, &r);
    if (!why.empty()) {
      warn.push_back(StrCat("'", path.string(), "': ignoring entry '", Printable(h), "': ", why));
      s.dirty = true;
      continue;
    }
    s.meta[h] = r;
  }
  auto verified = j.find("verified");
  if (verified != j.end() && verified->is_object()) {
    for (auto& [file, e] : verified->items()) {
      FileCache c;
      if (!IsWeightFileName(file) || !e.is_object() || !ParseStamp(e, &c.stamp)) continue;
      if (IsSingleName(file)) {
        c.ranges.insert({0, c.stamp.size, file.substr(7)});
      } else {
        auto rs = e.find("ranges");
        if (rs == e.end() || !rs->is_array()) continue;
        for (auto& x : *rs) {
          if (x.is_array() && x.size() == 3 && x[0].is_number_unsigned() && x[1].is_number_unsigned() &&
              x[2].is_string()) {
            c.ranges.insert({x[0].get<std::uint64_t>(), x[1].get<std::uint64_t>(), x[2].get<std::string>()});
          }
        }
      }
      s.cache[file] = std::move(c);
    }
  }
  for (auto& w : warn) {
    if (warnings_out) warnings_out->push_back(w);
    else s.Warn(w);
  }
  return Status::Ok();
}

Status WriteMeta(Store& s) {
  nlohmann::json w = nlohmann::json::object(), v = nlohmann::json::object();
  std::map<std::string, std::set<Range>> used;  // the cache keeps only ranges meta.json records
  for (auto& [h, r] : s.meta) {
    w[h] = {{"file", r.location}, {"offset", r.offset}, {"length", r.length}};
    used[r.location].insert({r.offset, r.length, h});
  }
  for (auto& [file, c] : s.cache) {
    auto u = used.find(file);
    if (u == used.end()) continue;
    std::erase_if(c.ranges, [&](const Range& r) { return !u->second.count(r); });
    if (c.ranges.empty()) continue;
    nlohmann::json e = {{"dev", c.stamp.dev}, {"ino", c.stamp.ino}, {"size", c.stamp.size},
                        {"mtime_ns", c.stamp.mtime_ns}, {"ctime_ns", c.stamp.ctime_ns}};
    if (IsSingleName(file)) {
      if (c.ranges.size() != 1 || *c.ranges.begin() != Range{0, c.stamp.size, file.substr(7)}) continue;
    } else {
      nlohmann::json rs = nlohmann::json::array();
      for (auto& [o, l, h] : c.ranges) rs.push_back({o, l, h});
      e["ranges"] = std::move(rs);
    }
    v[file] = std::move(e);
  }
  std::string text =
      nlohmann::json{{"format", "kiln-weights"}, {"version", 1}, {"weights", w}, {"verified", v}}.dump(1);
  KILN_RETURN_IF_ERROR(WriteFileAtomic(s.dir, kMetaFile, text.data(), text.size()).status());
  s.dirty = false;
  return Status::Ok();
}

// Whether dir/r.location is a regular file covering [offset, offset + length).
bool Present(const fs::path& dir, const WeightRef& r) {
  struct stat st {};
  if (lstat((dir / r.location).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const auto size = static_cast<std::uint64_t>(st.st_size);
  return r.offset <= size && r.length <= size - r.offset;
}

// Drops the entries whose file is gone or no longer covers them (deleted or
// truncated by hand).
void PruneAbsent(Store& s) {
  for (auto it = s.meta.begin(); it != s.meta.end();) {
    if (Present(s.dir, it->second)) {
      ++it;
    } else {
      it = s.meta.erase(it);
      s.dirty = true;
    }
  }
}

// Removes `<name>.tmp.<pid>.<n>` left by processes that are gone (or by this
// one: with the exclusive lock held, none of ours is in flight).
void CleanStaleTemporaries(Store& s) {
  DIR* d = opendir(s.dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const auto pos = name.rfind(".tmp.");
    if (pos == std::string::npos) continue;
    const std::string base = name.substr(0, pos);
    if (!IsWeightFileName(base) && base != kMetaFile && base != kAppendIntent) continue;
    std::size_t i = pos + 5;
    long long pid = 0;
    std::size_t digits = 0;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 12; ++i, ++digits) pid = pid * 10 + (name[i] - '0');
    if (digits == 0 || (i < name.size() && name[i] != '.')) continue;
    const bool alive = pid != getpid() && pid > 0 && pid <= INT32_MAX &&
                       (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!alive) stale.push_back(name);
  }
  closedir(d);
  for (auto& name : stale) {
    if (unlink((s.dir / name).c_str()) == 0) s.Warn(StrCat("removed stale temporary '", (s.dir / name).string(), "'"));
  }
}

// An append cut short (kill -9) left bytes past what meta.json records:
// truncate the file back to its length before the append.
void RecoverInterruptedAppend(Store& s) {
  const fs::path path = s.dir / kAppendIntent;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  std::string file;
  std::uint64_t length = 0;
  if (S_ISREG(st.st_mode)) {
    auto text = ReadRegularFile(path.string(), "append record", 4096);
    auto j = nlohmann::json::parse(text.ok() ? text.value() : std::string(), nullptr, false);
    if (j.is_object() && j.contains("file") && j["file"].is_string() && j.contains("length") &&
        j["length"].is_number_unsigned()) {
      file = j["file"].get<std::string>();
      length = j["length"].get<std::uint64_t>();
    }
  }
  if (IsCombinedName(file)) {
    std::uint64_t used = 0;
    for (auto& [h, r] : s.meta) {
      if (r.location == file) used = std::max(used, r.offset + r.length);
    }
    const fs::path target = s.dir / file;
    struct stat ft {};
    if (used == 0 && length == 0 && lstat(target.c_str(), &ft) == 0 && S_ISREG(ft.st_mode)) {
      // A new combined file whose compile died before meta.json recorded it.
      if (unlink(target.c_str()) == 0) s.Warn(StrCat("removed '", target.string(), "' of an interrupted compile"));
    } else if (used <= length && lstat(target.c_str(), &ft) == 0 && S_ISREG(ft.st_mode) &&
               static_cast<std::uint64_t>(ft.st_size) > length) {
      UniqueFd fd(open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
      if (fd && ftruncate(fd.get(), static_cast<off_t>(length)) == 0) {
        fsync(fd.get());
        s.Warn(StrCat("'", target.string(), "': removed ", static_cast<std::uint64_t>(ft.st_size) - length,
                      " bytes of an interrupted append"));
      }
    }
  }
  unlink(path.c_str());
}

enum class Check { kOk, kAbsent, kMismatch };

// Whether r.location holds bytes hashing to r.sha256 in its range. A single
// weight file must be exactly the weight. Non-regular files are an error.
Result<Check> CheckRecord(Store& s, const WeightRef& r) {
  const fs::path path = s.dir / r.location;
  struct stat lst {};
  if (lstat(path.c_str(), &lst) != 0) {
    if (errno == ENOENT) return Check::kAbsent;
    return Error(StatusCode::kIoError, "cannot stat weight file '", path.string(), "': ", std::strerror(errno));
  }
  if (!S_ISREG(lst.st_mode)) {
    return Error(StatusCode::kInvalidArgument, "weight file '", path.string(), "' is ", FileKind(lst.st_mode),
                 ", not a regular file (remove it from the weight directory)");
  }
  KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(path.string(), "weight file"));
  struct stat st {};
  if (fstat(f.fd.get(), &st) != 0 || st.st_ino != lst.st_ino || st.st_dev != lst.st_dev) {
    return Error(StatusCode::kIoError, "weight file '", path.string(), "' changed while it was being checked");
  }
  const Stamp stamp = StampOf(st);
  const std::uint64_t size = stamp.size;
  if (IsSingleName(r.location) && size != r.length) return size == 0 ? Check::kAbsent : Check::kMismatch;
  if (r.offset > size || r.length > size - r.offset) return Check::kAbsent;
  Range range{r.offset, r.length, r.sha256};
  {
    std::lock_guard<std::mutex> l(s.mu);
    auto it = s.cache.find(r.location);
    if (it != s.cache.end() && it->second.stamp == stamp && it->second.ranges.count(range)) return Check::kOk;
  }
  KILN_ASSIGN_OR_RETURN(std::string h, Sha256OfFileRange(f.fd.get(), r.offset, r.length, StrCat("weight file '", path.string(), "'")));
  std::lock_guard<std::mutex> l(s.mu);
  s.bytes_verified += r.length;
  if (h != r.sha256) return Check::kMismatch;
  if (!Racy(stamp)) s.Remember(r.location, stamp, std::move(range));
  return Check::kOk;
}

template <typename Fn>
Status ParallelEach(std::size_t n, int threads, Fn fn) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < n;) {
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = s;
      }
    }
  };
  const int t = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  std::vector<std::thread> pool;
  for (int i = 1; i < t; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return first;
}

// Opens the directory: lock, stale temporaries, meta.json, interrupted appends.
// `inspect_only`: as for a read-only directory (shared lock, nothing cleaned).
Result<DirLock> OpenStore(Store& s, const std::string& dir_str, bool inspect_only = false) {
  s.dir = fs::path(dir_str);
  if (inspect_only) {
    s.read_only = true;
    s.read_only_reason = "inspected only";
  } else if (access(dir_str.c_str(), W_OK) != 0) {
    s.read_only = true;
    s.read_only_reason = std::strerror(errno);
  }
  KILN_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir_str, s.read_only));
  if (!s.read_only) CleanStaleTemporaries(s);
  KILN_RETURN_IF_ERROR(LoadMeta(s, nullptr));
  if (!s.read_only) RecoverInterruptedAppend(s);
  PruneAbsent(s);
  return lock;
}

Result<std::vector<WeightRef>> StoreHashed(const std::string& dir_str, const std::vector<HostTensorPtr>& blobs,
                                              const std::vector<std::string>& hashes, const StoreOptions& opts,
                                              StoreStats* stats) {
  const fs::path dir(dir_str);
  Store s;
  KILN_ASSIGN_OR_RETURN(DirLock lock, OpenStore(s, dir_str));
  StoreStats st;
  st.weights = blobs.size();
  // The records of every blob, in order, once the store holds them all.
  auto finish = [&]() -> std::vector<WeightRef> {
    std::vector<WeightRef> out;
    for (std::size_t i = 0; i < blobs.size(); ++i) out.push_back(s.meta.at(hashes[i]));
    st.bytes_verified = s.bytes_verified;
    st.warnings = s.warnings;
    if (stats) *stats = st;
    return out;
  };
  std::map<std::string, std::size_t> todo;  // hash -> first blob index: to write
  std::vector<std::pair<std::string, std::size_t>> singles;  // weight_<h> files to (re)write
  // Which bytes already in the directory could serve each distinct weight:
  // its meta.json entry, else a content-named file. Checked (hashed where the
  // cache does not vouch for them) on the writer pool.
  struct Candidate {
    std::size_t blob;
    WeightRef rec;
    bool recorded;  // from meta.json
    Check check = Check::kAbsent;
  };
  std::vector<Candidate> cands;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    const std::string& h = hashes[i];
    if (!seen.insert(h).second) continue;
    ++st.unique;
    const std::uint64_t n = blobs[i]->nbytes();
    auto it = s.meta.find(h);
    if (it != s.meta.end() && it->second.length != n) {
      s.Warn(StrCat("'", s.MetaPath().string(), "': ignoring entry '", h, "': length ", it->second.length,
                    " is not the weight's ", n, " bytes"));
      s.meta.erase(it);
      s.dirty = true;
      it = s.meta.end();
    }
    if (it != s.meta.end()) cands.push_back({i, it->second, true});
    else cands.push_back({i, MakeRef(h, "weight_" + h, 0, n), false});
  }
  auto check_all = [&](const std::vector<std::size_t>& which) {
    return ParallelEach(which.size(), opts.writer_threads, [&](std::size_t k) -> Status {
      Candidate& c = cands[which[k]];
      KILN_ASSIGN_OR_RETURN(c.check, CheckRecord(s, c.rec));
      return Status::Ok();
    });
  };
  std::vector<std::size_t> all(cands.size());
  for (std::size_t k = 0; k < cands.size(); ++k) all[k] = k;
  KILN_RETURN_IF_ERROR(check_all(all));
  std::vector<std::size_t> fallback;  // recorded entries that failed: try weight_<h>
  for (std::size_t k = 0; k < cands.size(); ++k) {
    Candidate& c = cands[k];
    if (!c.recorded) continue;
    const WeightRef& r = c.rec;
    if (c.check == Check::kOk) {
      ++st.reused;
      continue;
    }
    if (c.check == Check::kMismatch && IsSingleName(r.location)) {
      // The name binds the content: the file is damaged, replace it.
      s.Warn(StrCat("weight file '", (dir / r.location).string(), "' does not hash to its name: rewriting it"));
      ++st.repaired;
      singles.push_back({r.sha256, c.blob});
      continue;
    }
    if (c.check == Check::kMismatch) {
      // Either the bytes or the entry was altered: the range is not patched
      // in place (it may hold another weight); the weight is stored again.
      s.Warn(StrCat("weight file '", (dir / r.location).string(), "' bytes [", r.offset, ", +", r.length,
                    ") do not match their SHA-256 ", r.sha256, ": entry dropped, the weight is stored again"));
      ++st.repaired;
    }
    s.meta.erase(r.sha256);
    s.dirty = true;
    c = {c.blob, MakeRef(r.sha256, "weight_" + r.sha256, 0, r.length), false};
    if (!IsSingleName(r.location)) fallback.push_back(k);  // (a missing weight_<h> stays missing)
  }
  KILN_RETURN_IF_ERROR(check_all(fallback));
  for (Candidate& c : cands) {
    if (c.recorded) continue;
    // A content-named file already there (migrated, meta.json lost, or
    // written by a mode-1 compile) is adopted, in either mode, only once it
    // hashes to its name; a damaged one is rewritten.
    const std::string& h = c.rec.sha256;
    if (c.check == Check::kOk) {
      s.meta[h] = c.rec;
      s.dirty = true;
      ++st.reused;
    } else if (c.check == Check::kMismatch) {
      s.Warn(StrCat("weight file '", (dir / c.rec.location).string(), "' does not hash to its name: rewriting it"));
      ++st.repaired;
      singles.push_back({h, c.blob});
    } else if (opts.mode == 1) {
      singles.push_back({h, c.blob});
    } else {
      todo[h] = c.blob;
    }
  }
  const std::size_t to_write = todo.size() + singles.size();
  if (s.read_only) {
    if (to_write > 0) {
      return Error(StatusCode::kIoError, "weight directory '", dir_str, "' is read-only (", s.read_only_reason,
                   ") and ", to_write, " of the model's weights are missing or damaged in it");
    }
    return finish();
  }
  // Single-weight files: new, or rewritten over damaged ones.
  KILN_RETURN_IF_ERROR(ParallelEach(singles.size(), opts.writer_threads, [&](std::size_t k) -> Status {
    const auto& [h, i] = singles[k];
    const std::string name = "weight_" + h;
    const std::uint64_t n = blobs[i]->nbytes();
    KILN_ASSIGN_OR_RETURN(Stamp stamp, WriteFileAtomic(dir, name, blobs[i]->data(), n));
    std::lock_guard<std::mutex> l(s.mu);
    s.meta[h] = MakeRef(h, name, 0, n);
    s.dirty = true;
    s.Remember(name, stamp, {0, n, h});
    return Status::Ok();
  }));
  // Mode 2: one append (or a new file) for everything missing.
  std::string appended;            // file appended to, if any
  std::uint64_t appended_from = 0;  // its length before
  bool created = false;
  std::vector<std::pair<std::string, std::size_t>> work(todo.begin(), todo.end());
  if (!work.empty()) {
    const std::string name = (opts.model_name.empty() ? std::string("model") : opts.model_name) + kCombinedSuffix;
    const fs::path path = dir / name;
    struct stat lst {};
    const bool exists = lstat(path.c_str(), &lst) == 0;
    if (exists && !S_ISREG(lst.st_mode)) {
      return Error(StatusCode::kInvalidArgument, "weight file '", path.string(), "' is ", FileKind(lst.st_mode),
                   ", not a regular file (remove it from the weight directory)");
    }
    UniqueFd fd;
    std::uint64_t length = 0;
    Stamp before;
    if (exists) {
      fd = UniqueFd(open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
      struct stat fst {};
      if (!fd) return Error(StatusCode::kIoError, "cannot open '", path.string(), "' to append: ", std::strerror(errno));
      if (fstat(fd.get(), &fst) != 0 || !S_ISREG(fst.st_mode)) {
        return Error(StatusCode::kInvalidArgument, "weight file '", path.string(), "' is not a regular file");
      }
      if (fst.st_nlink != 1) {
        // Appending would change every other name of the file too (a hard
        // link planted to a file outside, or a snapshot).
        return Error(StatusCode::kInvalidArgument, "weight file '", path.string(), "' has ", fst.st_nlink,
                     " hard links: Kiln appends only to a combined file that has one name");
      }
      before = StampOf(fst);
      length = before.size;
    }
    const std::uint64_t base = AlignUp(length);
    std::uint64_t end = base;
    std::vector<std::uint64_t> offsets;
    for (auto& [h, i] : work) {
      offsets.push_back(end);
      if (!CheckedAddU(end, blobs[i]->nbytes(), &end) || end > (std::uint64_t{1} << 62)) {
        return Error(StatusCode::kOutOfRange, "combined weight file '", path.string(), "' would exceed 2^62 bytes");
      }
      end = AlignUp(end);
    }
    std::vector<std::uint8_t> buf(end - base, 0);
    for (std::size_t k = 0; k < work.size(); ++k) {
      const HostTensor& b = *blobs[work[k].second];
      std::memcpy(buf.data() + (offsets[k] - base), b.data(), b.nbytes());
    }
    Stamp after;
    if (!exists) {
      // Announced too: a kill -9 between the rename and meta.json leaves a
      // file nothing records, which the next compile removes.
      const std::string intent = nlohmann::json{{"file", name}, {"length", 0}}.dump();
      KILN_RETURN_IF_ERROR(WriteFileAtomic(dir, kAppendIntent, intent.data(), intent.size()).status());
      auto written = WriteFileAtomic(dir, name, buf.data(), buf.size());
      if (!written.ok()) {
        unlink((dir / kAppendIntent).c_str());
        return written.status();
      }
      after = written.value();
      created = true;
    } else {
      // Announce the append, so that a kill -9 during it is undone by the
      // next compile; a failure is undone here.
      const std::string intent = nlohmann::json{{"file", name}, {"length", length}}.dump();
      KILN_RETURN_IF_ERROR(WriteFileAtomic(dir, kAppendIntent, intent.data(), intent.size()).status());
      appended = name;
      appended_from = length;
      Status w = WriteAll(fd.get(), buf.data(), buf.size(), base, StrCat("appending to '", path.string(), "'"));
      if (w.ok() && fsync(fd.get()) != 0) {
        w = Error(StatusCode::kIoError, "appending to '", path.string(), "' failed: flush: ", std::strerror(errno));
      }
      struct stat fst {};
      if (w.ok() && fstat(fd.get(), &fst) != 0) w = Error(StatusCode::kIoError, "cannot stat '", path.string(), "'");
      if (!w.ok()) {
        const bool undone = ftruncate(fd.get(), static_cast<off_t>(length)) == 0 && fsync(fd.get()) == 0;
        if (undone) unlink((dir / kAppendIntent).c_str());
        return Error(StatusCode::kIoError, w.message(),
                     undone ? StrCat("; the file was truncated back to ", length, " bytes")
                            : std::string("; the next compile truncates it back"));
      }
      after = StampOf(fst);
    }
    std::set<Range> ranges;
    auto c = s.cache.find(name);
    if (exists && c != s.cache.end() && c->second.stamp == before) ranges = c->second.ranges;
    for (std::size_t k = 0; k < work.size(); ++k) {
      const auto& [h, i] = work[k];
      s.meta[h] = MakeRef(h, name, offsets[k], blobs[i]->nbytes());
      ranges.insert({offsets[k], blobs[i]->nbytes(), h});
    }
    s.cache[name] = {after, std::move(ranges)};
    s.dirty = true;
  }
  for (auto& [h, i] : work) {
    ++st.written;
    st.bytes_written += blobs[i]->nbytes();
  }
  for (auto& [h, i] : singles) {
    ++st.written;
    st.bytes_written += blobs[i]->nbytes();
  }
  if (s.dirty) {
    Status w = WriteMeta(s);
    if (!w.ok()) {
      // Nothing may reference what this compile appended: undo it.
      if (!appended.empty()) {
        UniqueFd fd(open((dir / appended).c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
        if (fd && ftruncate(fd.get(), static_cast<off_t>(appended_from)) == 0 && fsync(fd.get()) == 0) {
          unlink((dir / kAppendIntent).c_str());
        }
      } else if (created) {
        if (unlink((dir / ((opts.model_name.empty() ? std::string("model") : opts.model_name) + kCombinedSuffix)).c_str()) == 0) {
          unlink((dir / kAppendIntent).c_str());
        }
      }
      return w;
    }
  }
  if (!appended.empty() || created) unlink((dir / kAppendIntent).c_str());
  return finish();
}

}  // namespace

Status CheckModelName(const std::string& name) {
  std::string why = ModelNameProblem(name);
  if (why.empty()) return Status::Ok();
  return Error(StatusCode::kInvalidArgument, "invalid model name '", Printable(name), "': ", why,
               " (it names the file <model name>", kCombinedSuffix, " inside the weight directory)");
}

Result<std::map<std::string, WeightRef>> ReadMeta(const std::string& dir, std::vector<std::string>* warnings) {
  Store s;
  s.dir = fs::path(dir);
  std::vector<std::string> local;
  KILN_RETURN_IF_ERROR(LoadMeta(s, warnings ? warnings : &local));
  return std::move(s.meta);
}

Result<std::vector<WeightRef>> StoreWeights(const std::string& dir_str,
                                               const std::vector<HostTensorPtr>& blobs,
                                               const StoreOptions& opts, StoreStats* stats) {
  if (opts.mode != 1 && opts.mode != 2) {
    return Error(StatusCode::kInvalidArgument, "external weight mode must be 1 or 2, got ", opts.mode);
  }
  KILN_RETURN_IF_ERROR(CheckModelName(opts.model_name.empty() ? std::string("model") : opts.model_name));
  std::error_code ec;
  fs::create_directories(dir_str, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create weight directory '", dir_str, "': ", ec.message());
  // Hash first (outside the lock): the pool spreads SHA-256 over threads.
  std::vector<std::string> hashes(blobs.size());
  KILN_RETURN_IF_ERROR(ParallelEach(blobs.size(), opts.writer_threads, [&](std::size_t i) {
    hashes[i] = Sha256Hex(blobs[i]->data(), blobs[i]->nbytes());
    return Status::Ok();
  }));
  return StoreHashed(dir_str, blobs, hashes, opts, stats);
}

Result<std::vector<WeightRef>> MigrateWeights(const std::string& from, const std::string& to,
                                                 const std::vector<WeightRef>& records,
                                                 const StoreOptions& opts, StoreStats* final_stats) {
  std::set<std::string> moved;  // contents that arrived by rename
  std::uint64_t moved_bytes = 0;
  KILN_RETURN_IF_ERROR(CheckModelName(opts.model_name.empty() ? std::string("model") : opts.model_name));
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create weight directory '", to, "': ", ec.message());
  {
    // Move files the target lacks (content-named ones, or a combined file
    // nobody else wrote yet) instead of writing them again. Their entries are
    // hashed like any other before the store below reuses them.
    Store s;
    KILN_ASSIGN_OR_RETURN(DirLock lock, OpenStore(s, to));
    if (!s.read_only) {
      std::set<std::string> files;
      for (auto& r : records) {
        if (IsWeightFileName(r.location)) files.insert(r.location);
      }
      for (const std::string& f : files) {
        struct stat st {};
        if (lstat((fs::path(to) / f).c_str(), &st) == 0) continue;
        if (rename((fs::path(from) / f).c_str(), (fs::path(to) / f).c_str()) != 0) continue;  // other fs: Store copies
        for (auto& r : records) {
          if (r.location != f || s.meta.count(r.sha256)) continue;  // already present: not new here
          s.meta[r.sha256] = r;
          if (moved.insert(r.sha256).second) moved_bytes += r.length;
        }
        s.dirty = true;
      }
      if (s.dirty) KILN_RETURN_IF_ERROR(WriteMeta(s));
    }
  }
  // Whatever could not be moved is read back and stored (deduplicated). A
  // record's offsets are those of its file in `from`: read it there while it
  // is still there (`to` may hold an unrelated file of the same name, e.g. the
  // previous compile's <model>_weight_combined); a moved file is in `to`.
  std::vector<HostTensorPtr> blobs(records.size());
  std::vector<std::string> hashes(records.size());
  KILN_RETURN_IF_ERROR(ParallelEach(records.size(), opts.writer_threads, [&](std::size_t i) -> Status {
    const WeightRef& r = records[i];
    auto t = std::make_shared<HostTensor>(DType::kUInt8, Shape{static_cast<std::int64_t>(r.length)});
    fs::path src = fs::path(from) / r.location;
    struct stat st {};
    if (lstat(src.c_str(), &st) != 0) src = fs::path(to) / r.location;
    KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(src.string(), "migrating weights"));
    KILN_RETURN_IF_ERROR(PreadExact(f.fd.get(), t->mutable_data(), static_cast<std::int64_t>(r.length),
                                    static_cast<std::int64_t>(r.offset), StrCat("migrating weights: '", src.string(), "'")));
    hashes[i] = Sha256Hex(t->data(), r.length);
    if (hashes[i] != r.sha256) {
      return Error(StatusCode::kCorrupt, "migrating weights: '", src.string(), "' [", r.offset, ", +", r.length,
                   ") does not hash to ", r.sha256, " (modified during the compile?)");
    }
    blobs[i] = std::move(t);
    return Status::Ok();
  }));
  StoreStats stats;
  auto out = StoreHashed(to, blobs, hashes, opts, &stats);
  if (out.ok()) fs::remove_all(from, ec);
  if (out.ok() && final_stats) {
    // What reached `to`: moved contents count as written there, not as
    // already present (the store below found them because they were moved).
    const std::uint64_t m = std::min<std::uint64_t>(moved.size(), stats.reused);
    stats.reused -= m;
    stats.written += m;
    stats.bytes_written += moved_bytes;
    *final_stats = std::move(stats);
  }
  return out;
}

// ---- housekeeping: list and gc ------------------------------------------------------

namespace {

// A model given to list or gc: the file as read (its graph is rewritten in
// place by gc) and its references into the store (file_id weights left out).
struct ModelRefs {
  std::string path;  // as given
  format::LoadedFile file;
  std::vector<WeightRef> refs;
};

bool SameFile(const fs::path& a, const fs::path& b) {
  struct stat sa {}, sb {};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

Result<ModelRefs> ReadModelRefs(const std::string& dir, const std::string& path) {
  ModelRefs m;
  m.path = path;
  KILN_ASSIGN_OR_RETURN(m.file, format::ReadModelFile(path));
  auto all = ListExternalWeights(*m.file.model.graph);
  if (!all.ok()) return all.status().WithContext(StrCat("model '", path, "'"));
  for (auto& r : all.value()) {
    if (r.file_id.empty()) m.refs.push_back(std::move(r));
  }
  if (m.refs.empty()) return m;
  const fs::path model_dir = fs::absolute(path).parent_path();
  const std::string& rec = m.file.model.weight_dir;
  const fs::path wdir = rec.empty() ? model_dir / "weight" : (model_dir / fs::path(rec)).lexically_normal();
  if (!SameFile(wdir, dir)) {
    return Error(StatusCode::kInvalidArgument, "model '", path, "' keeps its external weights in '", wdir.string(),
                 "' (", rec.empty() ? std::string("not recorded: <model dir>/weight") : StrCat("recorded as '", rec, "'"),
                 "), not in '", dir, "'");
  }
  return m;
}

Result<std::vector<ModelRefs>> ReadModels(const std::string& dir, const std::vector<std::string>& paths) {
  std::vector<ModelRefs> out;
  for (const std::string& p : paths) {
    bool dup = false;
    for (auto& m : out) dup = dup || SameFile(m.path, p);
    if (dup) continue;  // the same file twice: read (and rewritten) once
    KILN_ASSIGN_OR_RETURN(ModelRefs m, ReadModelRefs(dir, p));
    out.push_back(std::move(m));
  }
  return out;
}

Status CheckIsDir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return Error(StatusCode::kNotFound, "weight directory '", dir, "': ", std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return Error(StatusCode::kInvalidArgument, "weight directory '", dir, "' is not a directory");
  return Status::Ok();
}

// The weight files of the directory (weight file names only): name -> size.
// One that is not a regular file is refused, as the store refuses it.
Result<std::map<std::string, std::uint64_t>> ScanWeightFiles(const fs::path& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return Error(StatusCode::kIoError, "cannot read weight directory '", dir.string(), "': ", std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (IsWeightFileName(n)) names.push_back(std::move(n));
  }
  closedir(d);
  std::map<std::string, std::uint64_t> out;
  for (const std::string& n : names) {
    struct stat st {};
    if (lstat((dir / n).c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return Error(StatusCode::kIoError, "cannot stat weight file '", (dir / n).string(), "': ", std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      return Error(StatusCode::kInvalidArgument, "weight file '", (dir / n).string(), "' is ", FileKind(st.st_mode),
                   ", not a regular file (remove it from the weight directory)");
    }
    out[n] = static_cast<std::uint64_t>(st.st_size);
  }
  return out;
}

// A combined file rewritten without its unused ranges.
struct Compaction {
  std::string from, to;
  std::uint64_t new_size = 0;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> moved;  // (offset, length) -> new offset
};

// A combined-file name not in use: <model>.gc<N>_weight_combined (a
// previous ".gc<N>" replaced), shortened to a valid model name if needed.
std::string FreshCombinedName(const fs::path& dir, const std::string& old, const std::set<std::string>& taken) {
  std::string base = old.substr(0, old.size() - std::strlen(kCombinedSuffix));
  const auto pos = base.rfind(".gc");
  if (pos != std::string::npos && pos + 3 < base.size() &&
      std::all_of(base.begin() + static_cast<std::ptrdiff_t>(pos) + 3, base.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    base.resize(pos);
  }
  for (unsigned k = 1;; ++k) {
    const std::string tail = StrCat(".gc", k);
    std::string b = base.substr(0, kMaxModelNameBytes - std::min(kMaxModelNameBytes, tail.size()));
    // (a cut UTF-8 sequence or a '.' before ".gc" is taken off)
    for (int i = 0; i < 8 && !b.empty() && !ModelNameProblem(b + tail).empty(); ++i) b.pop_back();
    std::string cand = b + tail;
    if (!ModelNameProblem(cand).empty()) cand = StrCat("gc", k);
    cand += kCombinedSuffix;
    struct stat st {};
    if (!taken.count(cand) && lstat((dir / cand).c_str(), &st) != 0 && errno == ENOENT) return cand;
  }
}

void FsyncPath(const fs::path& p, bool directory) {
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : O_NONBLOCK));
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

// Step (a) of a compaction: the used ranges copied to their new offsets in a
// new file (temporary name, fsync, rename).
Status WriteCompacted(const fs::path& dir, const Compaction& c) {
  const fs::path src = dir / c.from, final_path = dir / c.to, tmp = dir / (c.to + UniqueSuffix());
  KILN_ASSIGN_OR_RETURN(OpenedFile in, OpenRegularFile(src.string(), "weight file"));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Error(StatusCode::kIoError, "cannot create '", tmp.string(), "': ", std::strerror(errno));
  UniqueFd out(fd);
  std::vector<std::uint8_t> buf(std::size_t{8} << 20);
  Status w = Status::Ok();
  for (auto& [key, to] : c.moved) {
    const auto& [from, length] = key;
    for (std::uint64_t done = 0; w.ok() && done < length;) {
      const std::uint64_t n = std::min<std::uint64_t>(buf.size(), length - done);
      w = PreadExact(in.fd.get(), buf.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(from + done),
                     StrCat("reading '", src.string(), "'"));
      if (w.ok()) w = WriteAll(fd, buf.data(), n, to + done, StrCat("writing '", tmp.string(), "'"));
      done += n;
    }
    if (!w.ok()) break;
  }
  if (w.ok() && ftruncate(fd, static_cast<off_t>(c.new_size)) != 0) {
    w = Error(StatusCode::kIoError, "cannot extend '", tmp.string(), "': ", std::strerror(errno));
  }
  if (w.ok() && fsync(fd) != 0) w = Error(StatusCode::kIoError, "flushing '", tmp.string(), "' failed: ", std::strerror(errno));
  if (w.ok() && close(out.release()) != 0) {
    w = Error(StatusCode::kIoError, "closing '", tmp.string(), "' failed: ", std::strerror(errno));
  }
  if (w.ok() && rename(tmp.c_str(), final_path.c_str()) != 0) {
    w = Error(StatusCode::kIoError, "cannot rename '", tmp.string(), "' to '", final_path.string(), "': ",
              std::strerror(errno));
  }
  if (!w.ok()) unlink(tmp.c_str());
  return w;
}

bool SameEntry(const WeightRef& a, const WeightRef& b) {
  return a.location == b.location && a.offset == b.offset && a.length == b.length;
}

}  // namespace

Result<std::vector<StoreEntry>> ListStore(const std::string& dir_str, const std::vector<std::string>& models) {
  KILN_RETURN_IF_ERROR(CheckIsDir(dir_str));
  KILN_ASSIGN_OR_RETURN(std::vector<ModelRefs> ms, ReadModels(dir_str, models));
  Store s;
  s.dir = fs::path(dir_str);
  KILN_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir_str, /*read_only=*/true));
  KILN_RETURN_IF_ERROR(LoadMeta(s, nullptr));
  KILN_ASSIGN_OR_RETURN(auto files, ScanWeightFiles(s.dir));
  std::vector<StoreEntry> out;
  std::set<std::string> recorded_files;
  for (auto& [h, r] : s.meta) {
    StoreEntry e;
    e.ref = r;
    e.present = Present(s.dir, r);
    for (auto& m : ms) {
      for (auto& u : m.refs) {
        if (SameEntry(u, r) && (u.sha256.empty() || u.sha256 == h)) {
          e.used_by.push_back(m.path);
          break;
        }
      }
    }
    recorded_files.insert(r.location);
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const StoreEntry& a, const StoreEntry& b) {
    return std::tie(a.ref.location, a.ref.offset) < std::tie(b.ref.location, b.ref.offset);
  });
  for (auto& [name, size] : files) {
    if (recorded_files.count(name)) continue;
    StoreEntry e;
    e.recorded = false;
    e.ref.location = name;
    e.ref.length = size;
    const std::string& file = name;  // (a lambda may not capture a structured binding before C++20 in Clang 14)
    for (auto& m : ms) {
      if (std::any_of(m.refs.begin(), m.refs.end(), [&](const WeightRef& u) { return u.location == file; })) {
        e.used_by.push_back(m.path);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

Result<GcReport> CollectGarbage(const std::string& dir_str, const std::vector<std::string>& keep, bool dry_run) {
  if (keep.empty()) {
    return Error(StatusCode::kInvalidArgument, "weights gc of '", dir_str,
                 "': no model to keep was given (--keep A.kiln ...): refusing to remove every weight");
  }
  KILN_RETURN_IF_ERROR(CheckIsDir(dir_str));
  KILN_ASSIGN_OR_RETURN(std::vector<ModelRefs> ms, ReadModels(dir_str, keep));
  const fs::path dir(dir_str);
  Store s;
  KILN_ASSIGN_OR_RETURN(DirLock lock, OpenStore(s, dir_str, /*inspect_only=*/dry_run));
  if (s.read_only && !dry_run) {
    return Error(StatusCode::kIoError, "weight directory '", dir_str, "' is read-only (", s.read_only_reason,
                 "): gc cannot change it");
  }
  KILN_ASSIGN_OR_RETURN(auto files, ScanWeightFiles(dir));

  // Every reference of the kept models, checked before anything changes.
  struct Use {
    const ModelRefs* model;
    WeightRef ref;
  };
  std::vector<Use> uses;
  std::set<std::tuple<std::string, std::uint64_t, std::uint64_t, std::string>> seen;
  auto where = [&](const Use& u) {
    return StrCat("model '", u.model->path, "': FileConstant '", u.ref.node, "' uses weight ",
                  u.ref.sha256.empty() ? std::string("(no SHA-256 recorded)") : u.ref.sha256, " ('", u.ref.location,
                  "' [", u.ref.offset, ", +", u.ref.length, "))");
  };
  const std::string unchanged = " (nothing was changed)";
  for (auto& m : ms) {
    for (auto& r : m.refs) {
      if (!seen.insert({r.location, r.offset, r.length, r.sha256}).second) continue;
      Use u{&m, r};
      auto f = files.find(r.location);
      if (f == files.end()) {
        return Error(StatusCode::kNotFound, where(u), ", but '", (dir / r.location).string(), "' does not exist", unchanged);
      }
      if (r.offset > f->second || r.length > f->second - r.offset) {
        return Error(StatusCode::kNotFound, where(u), ", but '", (dir / r.location).string(), "' is only ", f->second,
                     " bytes", unchanged);
      }
      if (!r.sha256.empty() && !s.meta.count(r.sha256)) {
        return Error(StatusCode::kNotFound, where(u), ", which '", s.MetaPath().string(), "' does not record", unchanged);
      }
      uses.push_back(std::move(u));
    }
  }
  KILN_RETURN_IF_ERROR(ParallelEach(uses.size(), 4, [&](std::size_t k) -> Status {
    Use& u = uses[k];
    if (u.ref.sha256.empty()) {
      const fs::path p = dir / u.ref.location;
      KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(p.string(), "weight file"));
      KILN_ASSIGN_OR_RETURN(u.ref.sha256, Sha256OfFileRange(f.fd.get(), u.ref.offset, u.ref.length,
                                                            StrCat("weight file '", p.string(), "'")));
      if (!s.meta.count(u.ref.sha256)) {
        return Error(StatusCode::kNotFound, where(u), " hashing to ", u.ref.sha256, ", which '", s.MetaPath().string(),
                     "' does not record", unchanged);
      }
      return Status::Ok();
    }
    KILN_ASSIGN_OR_RETURN(Check c, CheckRecord(s, u.ref));
    if (c != Check::kOk) {
      return Error(StatusCode::kCorrupt, where(u), ", but those bytes of '", (dir / u.ref.location).string(),
                   "' do not hash to it", unchanged);
    }
    return Status::Ok();
  }));
  // A weight a kept model finds elsewhere than where meta.json records it (a
  // gc cut short between rewriting the models and meta.json, or a stale
  // copy) is pointed at the recorded copy when that one holds it, so that
  // gc run again converges on one copy per weight.
  using Where = std::tuple<std::string, std::uint64_t, std::uint64_t>;  // location, offset, length
  std::map<Where, WeightRef> redirect;
  for (auto& u : uses) {
    auto m = s.meta.find(u.ref.sha256);
    if (m == s.meta.end() || SameEntry(m->second, u.ref) || m->second.length != u.ref.length) continue;
    KILN_ASSIGN_OR_RETURN(Check c, CheckRecord(s, m->second));
    if (c == Check::kOk) redirect[{u.ref.location, u.ref.offset, u.ref.length}] = m->second;
  }
  auto target = [&](WeightRef r) {
    auto it = redirect.find({r.location, r.offset, r.length});
    if (it != redirect.end()) {
      r.location = it->second.location;
      r.offset = it->second.offset;
    }
    return r;
  };
  std::map<std::string, std::set<Range>> used;  // file -> ranges the kept models use
  for (auto& u : uses) {
    const WeightRef t = target(u.ref);
    used[t.location].insert({t.offset, t.length, u.ref.sha256});
  }

  // The plan.
  GcReport rep;
  rep.dry_run = dry_run;
  std::set<std::string> taken;
  for (auto& [name, size] : files) taken.insert(name);
  std::vector<Compaction> compactions;
  for (auto& [name, size] : files) {
    auto u = used.find(name);
    if (u == used.end()) {
      rep.removed.push_back(name);
      rep.bytes_freed += size;
      continue;
    }
    if (IsSingleName(name)) continue;
    Compaction c;
    c.from = name;
    bool moves = false;
    for (auto& [off, len, h] : u->second) {
      if (c.moved.count({off, len})) continue;
      c.moved[{off, len}] = c.new_size;
      moves = moves || c.new_size != off;
      c.new_size = AlignUp(c.new_size + len);
    }
    if (!moves && c.new_size >= size) continue;  // nothing unused in it
    c.to = FreshCombinedName(dir, name, taken);
    taken.insert(c.to);
    rep.bytes_freed += size - std::min(size, c.new_size);
    rep.compacted.push_back({c.from, c.to});
    compactions.push_back(std::move(c));
  }
  std::map<std::string, const Compaction*> by_from;
  for (auto& c : compactions) by_from[c.from] = &c;
  auto relocate = [&](WeightRef r) {
    auto it = by_from.find(r.location);
    if (it != by_from.end()) {
      r.offset = it->second->moved.at({r.offset, r.length});
      r.location = it->second->to;
    }
    return r;
  };
  // meta.json after: each entry at a range a kept model uses (where the
  // entry's own range is unused, another used copy of the weight), moved with
  // its compacted file; the others dropped.
  std::map<std::string, WeightRef> any_use;
  for (auto& [file, rs] : used) {
    for (auto& [o, l, h] : rs) any_use.emplace(h, MakeRef(h, file, o, l));
  }
  std::map<std::string, WeightRef> new_meta;
  bool meta_changed = s.dirty;
  for (auto& [h, e] : s.meta) {
    auto u = used.find(e.location);
    if (u != used.end() && u->second.count({e.offset, e.length, h})) {
      new_meta[h] = relocate(e);
    } else if (auto a = any_use.find(h); a != any_use.end()) {
      new_meta[h] = relocate(a->second);
    } else {
      ++rep.entries_dropped;
      meta_changed = true;
      continue;
    }
    meta_changed = meta_changed || !SameEntry(new_meta[h], e);
  }
  auto changed = [&](const WeightRef& r) {
    return by_from.count(r.location) > 0 || redirect.count({r.location, r.offset, r.length}) > 0;
  };
  std::vector<ModelRefs*> rewrite;
  for (auto& m : ms) {
    if (std::any_of(m.refs.begin(), m.refs.end(), changed)) {
      rewrite.push_back(&m);
      rep.rewritten_models.push_back(m.path);
    }
  }
  if (dry_run) return rep;

  // (a) the compacted files, under new names.
  for (auto& c : compactions) KILN_RETURN_IF_ERROR(WriteCompacted(dir, c));
  if (!compactions.empty()) FsyncPath(dir, true);
  // (b) the kept models that used the old files (each replaced atomically).
  for (ModelRefs* m : rewrite) {
    Status st = Status::Ok();
    ir::ForEachGraph(*m->file.model.graph, [&](ir::Graph& g) {
      for (auto& n : g.nodes()) {
        if (!st.ok() || !ops::IsFileConstant(*n)) continue;
        auto r = ops::DecodeFileConstant(*n);
        if (!r.ok()) {
          st = r.status();
          continue;
        }
        if (!r.value().file_id.empty() || !changed(r.value())) continue;
        ops::EncodeFileConstant(*n, relocate(target(r.value())));
      }
    });
    std::error_code ec;
    const fs::path target = fs::canonical(m->path, ec);  // (a symlink's target is rewritten)
    if (st.ok() && ec) st = Error(StatusCode::kIoError, "cannot resolve '", m->path, "': ", ec.message());
    if (st.ok()) st = format::WriteModelFile(m->file.model, target.string());
    if (!st.ok()) {
      return st.WithContext(StrCat("weights gc: rewriting model '", m->path,
                                   "' (the store is unchanged but for new compacted files, which the next gc removes)"));
    }
    FsyncPath(target, false);
    FsyncPath(target.parent_path(), true);
  }
  // (c) meta.json.
  if (meta_changed || !compactions.empty()) {
    s.meta = std::move(new_meta);
    KILN_RETURN_IF_ERROR(WriteMeta(s));
    FsyncPath(dir, true);
  }
  // (d) only now the files nothing uses any more.
  std::vector<std::string> gone = rep.removed;
  for (auto& c : compactions) gone.push_back(c.from);
  for (const std::string& name : gone) {
    if (unlink((dir / name).c_str()) != 0 && errno != ENOENT) {
      return Error(StatusCode::kIoError, "weights gc: cannot remove '", (dir / name).string(), "': ",
                   std::strerror(errno), " (meta.json no longer references it: the next gc removes it)");
    }
  }
  return rep;
}

}  // namespace kiln::weights
