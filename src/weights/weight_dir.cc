#include "weights/weight_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "weights/sha256.h"

namespace kiln::weights {
namespace {

namespace fs = std::filesystem;

// Exclusive flock on <dir>/meta.json.lock for the object's lifetime.
class DirLock {
 public:
  static Result<DirLock> Acquire(const std::string& dir) {
    std::string path = (fs::path(dir) / "meta.json.lock").string();
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Error(StatusCode::kIoError, "cannot open lock file '", path, "': ", std::strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        int e = errno;
        close(fd);
        return Error(StatusCode::kIoError, "cannot lock '", path, "': ", std::strerror(e));
      }
    }
    return DirLock(fd);
  }
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
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

std::string UniqueSuffix() {
  static std::atomic<unsigned> counter{0};
  std::ostringstream os;
  os << ".tmp." << getpid() << "." << std::this_thread::get_id() << "." << counter++;
  return os.str();
}

// Writes `data` to dir/name via a temporary name + fsync + rename.
Status WriteFileAtomic(const fs::path& dir, const std::string& name, const void* data, std::uint64_t size) {
  const fs::path final_path = dir / name;
  const fs::path tmp = dir / (name + UniqueSuffix());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error(StatusCode::kIoError, "cannot create '", tmp.string(), "': ", std::strerror(errno));
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, p + done, std::min<std::uint64_t>(size - done, 1u << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return Error(StatusCode::kIoError, "writing '", tmp.string(), "' failed: ", std::strerror(e));
    }
    done += static_cast<std::uint64_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmp.c_str());
    return Error(StatusCode::kIoError, "flushing '", tmp.string(), "' failed");
  }
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return Error(StatusCode::kIoError, "cannot rename to '", final_path.string(), "': ", std::strerror(e));
  }
  return Status::Ok();
}

std::uint64_t AlignUp(std::uint64_t v) { return (v + kCombinedAlignment - 1) / kCombinedAlignment * kCombinedAlignment; }

bool PlainFileName(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..";
}

Status WriteMeta(const std::string& dir, const std::map<std::string, WeightRecord>& meta) {
  nlohmann::json w = nlohmann::json::object();
  for (auto& [h, r] : meta) w[h] = {{"file", r.file}, {"offset", r.offset}, {"length", r.length}};
  std::string text = nlohmann::json{{"format", "kiln-weights"}, {"version", 1}, {"weights", w}}.dump(1);
  return WriteFileAtomic(dir, kMetaFile, text.data(), text.size());
}

// Whether dir/r.file exists and covers [offset, offset + length).
bool Present(const fs::path& dir, const WeightRecord& r) {
  std::error_code ec;
  auto size = fs::file_size(dir / r.file, ec);
  return !ec && r.offset <= size && r.length <= size - r.offset;
}

// Drops the entries whose file is gone or no longer covers them (deleted or
// truncated by hand). Kept, they would be trusted once a new file of that name
// (or an append to a truncated one) puts other bytes at their offsets.
// Returns whether any was dropped. Call with the directory lock held.
bool PruneAbsent(const fs::path& dir, std::map<std::string, WeightRecord>& meta) {
  bool pruned = false;
  for (auto it = meta.begin(); it != meta.end();) {
    if (Present(dir, it->second)) {
      ++it;
    } else {
      it = meta.erase(it);
      pruned = true;
    }
  }
  return pruned;
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

}  // namespace

Result<std::map<std::string, WeightRecord>> ReadMeta(const std::string& dir) {
  std::map<std::string, WeightRecord> meta;
  const fs::path path = fs::path(dir) / kMetaFile;
  std::ifstream f(path);
  if (!f) return meta;
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    auto j = nlohmann::json::parse(ss.str());
    if (j.at("format").get<std::string>() != "kiln-weights") throw std::runtime_error("unknown format tag");
    for (auto& [h, e] : j.at("weights").items()) {
      if (!e.at("offset").is_number_unsigned() || !e.at("length").is_number_unsigned()) {
        throw std::runtime_error("entry '" + h + "' has a negative or non-integer offset/length");
      }
      WeightRecord r{h, e.at("file").get<std::string>(), e.at("offset").get<std::uint64_t>(),
                     e.at("length").get<std::uint64_t>()};
      if (!IsSha256Hex(h) || !PlainFileName(r.file)) throw std::runtime_error("bad entry '" + h + "'");
      meta[h] = r;
    }
  } catch (const std::exception& e) {
    return Error(StatusCode::kCorrupt, "'", path.string(), "' is malformed: ", e.what());
  }
  return meta;
}

Result<std::vector<WeightRecord>> StoreWeights(const std::string& dir_str,
                                               const std::vector<HostTensorPtr>& blobs,
                                               const StoreOptions& opts, StoreStats* stats) {
  if (opts.mode != 1 && opts.mode != 2) {
    return Error(StatusCode::kInvalidArgument, "external weight mode must be 1 or 2, got ", opts.mode);
  }
  const fs::path dir(dir_str);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create weight directory '", dir_str, "': ", ec.message());
  // Hash first (outside the lock): the pool spreads SHA-256 over threads.
  std::vector<std::string> hashes(blobs.size());
  KILN_RETURN_IF_ERROR(ParallelEach(blobs.size(), opts.writer_threads, [&](std::size_t i) {
    hashes[i] = Sha256Hex(blobs[i]->data(), blobs[i]->nbytes());
    return Status::Ok();
  }));
  KILN_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir_str));
  KILN_ASSIGN_OR_RETURN(auto meta, ReadMeta(dir_str));
  PruneAbsent(dir, meta);
  StoreStats st;
  st.weights = blobs.size();
  std::map<std::string, std::size_t> todo;  // hash -> first blob index
  std::set<std::string> seen;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    if (!seen.insert(hashes[i]).second) continue;
    ++st.unique;
    auto it = meta.find(hashes[i]);
    if (it != meta.end() && it->second.length == blobs[i]->nbytes() && Present(dir, it->second)) {
      ++st.reused;
      continue;
    }
    const std::string single = "weight_" + hashes[i];
    WeightRecord adopt{hashes[i], single, 0, blobs[i]->nbytes()};
    if (opts.mode == 1 && fs::file_size(dir / single, ec) == blobs[i]->nbytes() && !ec) {
      meta[hashes[i]] = adopt;  // content-named file already there (e.g. migrated)
      ++st.reused;
      continue;
    }
    todo[hashes[i]] = i;
  }
  std::vector<std::pair<std::string, std::size_t>> work(todo.begin(), todo.end());
  if (opts.mode == 1) {
    std::mutex mu;
    KILN_RETURN_IF_ERROR(ParallelEach(work.size(), opts.writer_threads, [&](std::size_t k) -> Status {
      const auto& [h, i] = work[k];
      const std::string name = "weight_" + h;
      KILN_RETURN_IF_ERROR(WriteFileAtomic(dir, name, blobs[i]->data(), blobs[i]->nbytes()));
      std::lock_guard<std::mutex> l(mu);
      meta[h] = {h, name, 0, blobs[i]->nbytes()};
      return Status::Ok();
    }));
  } else if (!work.empty()) {
    const std::string name = (opts.model_name.empty() ? std::string("model") : opts.model_name) + "_weight_combined";
    const fs::path path = dir / name;
    std::uint64_t base = 0;
    const bool exists = fs::exists(path, ec);
    if (exists) base = AlignUp(fs::file_size(path, ec));
    std::uint64_t end = base;
    std::vector<std::uint64_t> offsets;
    for (auto& [h, i] : work) {
      offsets.push_back(end);
      end = AlignUp(end + blobs[i]->nbytes());
    }
    std::vector<std::uint8_t> buf(end - base, 0);
    for (std::size_t k = 0; k < work.size(); ++k) {
      const HostTensor& b = *blobs[work[k].second];
      std::memcpy(buf.data() + (offsets[k] - base), b.data(), b.nbytes());
    }
    if (!exists) {
      KILN_RETURN_IF_ERROR(WriteFileAtomic(dir, name, buf.data(), buf.size()));
    } else {
      // Append past the recorded data; entries appear only via meta.json below.
      int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return Error(StatusCode::kIoError, "cannot open '", path.string(), "': ", std::strerror(errno));
      std::uint64_t done = 0;
      while (done < buf.size()) {
        ssize_t n = pwrite(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(base + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          close(fd);
          return Error(StatusCode::kIoError, "appending to '", path.string(), "' failed");
        }
        done += static_cast<std::uint64_t>(n);
      }
      if (fsync(fd) != 0 || close(fd) != 0) return Error(StatusCode::kIoError, "flushing '", path.string(), "' failed");
    }
    for (std::size_t k = 0; k < work.size(); ++k) {
      const auto& [h, i] = work[k];
      meta[h] = {h, name, offsets[k], blobs[i]->nbytes()};
    }
  }
  for (auto& [h, i] : work) {
    ++st.written;
    st.bytes_written += blobs[i]->nbytes();
  }
  KILN_RETURN_IF_ERROR(WriteMeta(dir_str, meta));
  std::vector<WeightRecord> out;
  for (std::size_t i = 0; i < blobs.size(); ++i) out.push_back(meta.at(hashes[i]));
  if (stats) *stats = st;
  return out;
}

Result<std::vector<WeightRecord>> MigrateWeights(const std::string& from, const std::string& to,
                                                 const std::vector<WeightRecord>& records,
                                                 const StoreOptions& opts) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create weight directory '", to, "': ", ec.message());
  {
    // Move files the target lacks (content-named ones, or a combined file
    // nobody else wrote yet) instead of writing them again.
    KILN_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(to));
    KILN_ASSIGN_OR_RETURN(auto meta, ReadMeta(to));
    // Entries naming a file that is gone must not survive a file of that name
    // being moved in.
    bool changed = PruneAbsent(to, meta);
    std::set<std::string> files;
    for (auto& r : records) files.insert(r.file);
    for (const std::string& f : files) {
      if (fs::exists(fs::path(to) / f, ec)) continue;
      if (rename((fs::path(from) / f).c_str(), (fs::path(to) / f).c_str()) != 0) continue;  // other fs: Store copies
      for (auto& r : records) {
        if (r.file == f && !meta.count(r.sha256)) meta[r.sha256] = r;
      }
      changed = true;
    }
    if (changed) KILN_RETURN_IF_ERROR(WriteMeta(to, meta));
  }
  // Whatever could not be moved is read back and stored (deduplicated). A
  // record's offsets are those of its file in `from`: read it there while it
  // is still there (`to` may hold an unrelated file of the same name, e.g. the
  // previous compile's <model>_weight_combined); a moved file is in `to`.
  std::vector<HostTensorPtr> blobs;
  for (const WeightRecord& r : records) {
    auto t = std::make_shared<HostTensor>(DType::kUInt8, Shape{static_cast<std::int64_t>(r.length)});
    fs::path src = fs::path(from) / r.file;
    if (!fs::exists(src, ec)) src = fs::path(to) / r.file;
    std::ifstream f(src, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(r.offset));
    f.read(static_cast<char*>(t->mutable_data()), static_cast<std::streamsize>(r.length));
    if (!f) return Error(StatusCode::kIoError, "migrating weights: cannot read '", src.string(), "' [", r.offset, ", +", r.length, ")");
    blobs.push_back(t);
  }
  auto out = StoreWeights(to, blobs, opts);
  if (out.ok()) fs::remove_all(from, ec);
  return out;
}

}  // namespace kiln::weights
