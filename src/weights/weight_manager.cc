#include "weights/weight_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/file.h"
#include "kiln/stream.h"
#include "runtime/devices.h"
#include "weights/path.h"
#include "weights/sha256.h"

namespace kiln::weights {
namespace {

namespace fs = std::filesystem;

// A whole weight file resident on the device: mapped, or copied.
struct Block {
  device::Device* device = nullptr;
  void* data = nullptr;
  std::uint64_t size = 0;
  bool mapped = false;
  ~Block() {
    if (!data) return;
    if (mapped) munmap(data, size);
    else device->Free(data);
  }
};


// Reads [off, off + len) of fd into p.
Status ReadFully(int fd, std::uint8_t* p, std::uint64_t off, std::uint64_t len, const std::string& path) {
  std::uint64_t done = 0;
  while (done < len) {
    ssize_t r = pread(fd, p + done, len - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return Error(StatusCode::kIoError, "reading '", path, "' at offset ", off + done, " failed",
                   r == 0 ? " (file shrank?)" : "");
    }
    done += static_cast<std::uint64_t>(r);
  }
  return Status::Ok();
}

// Reads [0, size) of fd into device memory at dst in chunks. Where the host
// addresses device memory, two readers read alternate chunks straight into
// it. Otherwise through two staging buffers (pinned where the device has
// pinned memory): readers fill one, each its share of the chunk, while the
// other is copied to the device.
Status ChunkedCopy(int fd, device::Device& dev, std::uint8_t* dst, std::uint64_t size, std::size_t chunk,
                   const std::string& path, bool staged, int reader_threads) {
  if (size == 0) return Status::Ok();
  chunk = std::max<std::size_t>(chunk, 4096);
  if (dev.caps().host_addressable && !staged) {
    // Device memory is host-addressable (CPU): the read is the copy. Two
    // readers take alternate chunks so the file reads overlap.
    const std::uint64_t n_chunks = (size + chunk - 1) / chunk;
    Status st[2];
    auto reader = [&](int k) {
      for (std::uint64_t i = static_cast<std::uint64_t>(k); i < n_chunks && st[k].ok(); i += 2) {
        const std::uint64_t off = i * chunk;
        st[k] = ReadFully(fd, dst + off, off, std::min<std::uint64_t>(chunk, size - off), path);
      }
    };
    std::thread other(reader, 1);
    reader(0);
    other.join();
    return st[0].ok() ? st[1] : st[0];
  }
  // Two staging buffers: pinned host memory where the device has it (the
  // copy then reads the buffer by DMA, later: its buffer is released when
  // the copy has run), else plain host memory (Copy takes the bytes at once).
  const std::size_t buf_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size));
  const bool pinned = dev.caps().pinned_host_memory;
  std::vector<std::uint8_t> plain[2];
  struct Pinned {
    device::Device* dev = nullptr;
    void* p = nullptr;
    ~Pinned() {
      if (p) dev->Free(p);
    }
  } pinned_buf[2];
  std::uint8_t* staging[2] = {nullptr, nullptr};
  for (int k = 0; k < 2; ++k) {
    if (pinned) {
      auto p = dev.Allocate(buf_bytes, device::MemoryKind::kPinnedHost);
      if (!p.ok()) return p.status().WithContext("allocating pinned staging for '" + path + "'");
      pinned_buf[k].dev = &dev;
      pinned_buf[k].p = p.value();
      staging[k] = static_cast<std::uint8_t*>(p.value());
    } else {
      plain[k].resize(buf_bytes);
      staging[k] = plain[k].data();
    }
  }
  const std::uint64_t n_chunks = (size + chunk - 1) / chunk;
  // Readers: each reads its share of every chunk, so page-cache copies run
  // on several cores (one thread's pread moves far less than a GPU's DMA).
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int n_readers =
      reader_threads > 0
          ? std::min(reader_threads, 64)
          : static_cast<int>(std::clamp<std::uint64_t>(
                std::min<std::uint64_t>(hw / 2, buf_bytes / (std::size_t{256} << 10)), 1, 8));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> progress(static_cast<std::size_t>(n_readers), 0);  // chunks each reader has read
  std::uint64_t released = 0;  // chunks whose staging buffer is free again
  bool stop = false;
  Status read_status;
  auto filled = [&] { return *std::min_element(progress.begin(), progress.end()); };
  auto read_share = [&](int r) {
    for (std::uint64_t i = 0; i < n_chunks; ++i) {
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return stop || i < released + 2; });  // chunk i - 2's buffer is free
        if (stop) return;
      }
      const std::uint64_t off = i * chunk, len = std::min<std::uint64_t>(chunk, size - off);
      const std::uint64_t share = (len + n_readers - 1) / n_readers;
      const std::uint64_t begin = std::min<std::uint64_t>(len, share * r), end = std::min<std::uint64_t>(len, begin + share);
      Status st = ReadFully(fd, staging[i % 2] + begin, off + begin, end - begin, path);
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (read_status.ok()) read_status = std::move(st);
        stop = true;
        cv.notify_all();
        return;
      }
      std::lock_guard<std::mutex> l(mu);
      progress[static_cast<std::size_t>(r)] = i + 1;
      cv.notify_all();
    }
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < n_readers; ++r) readers.emplace_back(read_share, r);
  auto release = [&](std::uint64_t n) {
    std::lock_guard<std::mutex> l(mu);
    released = n;
    cv.notify_all();
  };
  auto stop_readers = [&] {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    cv.notify_all();
  };
  Status copy_status;
  // (after the buffers: destroyed first, waiting for queued copies)
  auto stream = dev.CreateSyncStream();
  if (!stream.ok()) copy_status = stream.status();
  Event copied[2];
  for (std::uint64_t i = 0; i < n_chunks && copy_status.ok(); ++i) {
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return stop || filled() > i; });
      if (stop) break;
    }
    const std::uint64_t off = i * chunk, len = std::min<std::uint64_t>(chunk, size - off);
    if (!pinned) {
      // The bytes are taken before Copy returns: the staging buffer is free.
      copy_status = (*stream)->Copy(dst + off, staging[i % 2], len, device::CopyKind::kHostToDevice);
      release(i + 1);
      continue;
    }
    // Chunk i's copy is queued; chunk i - 1's buffer is free once its copy
    // has run, while the reader fills it with chunk i + 1 after that.
    copy_status = (*stream)->CopyHeld(dst + off, staging[i % 2], len);
    if (copy_status.ok()) copy_status = (*stream)->RecordEvent(copied[i % 2]);
    if (copy_status.ok() && i > 0) copy_status = copied[(i - 1) % 2].Synchronize();
    if (copy_status.ok()) release(i);
  }
  if (!copy_status.ok()) stop_readers();
  for (std::thread& t : readers) t.join();
  if (stream.ok()) {
    Status st = (*stream)->Synchronize();
    if (copy_status.ok()) copy_status = st;
  }
  if (!read_status.ok()) return read_status;
  return copy_status;
}

}  // namespace

struct WeightManager::Impl {
  device::Device* device;
  mutable std::mutex mu;
  std::map<std::string, std::weak_ptr<Block>> blocks;  // "map|copy:" + canonical path
  std::map<std::string, std::weak_ptr<const HostTensor>> by_hash;
  std::map<std::pair<std::string, std::uint64_t>, std::weak_ptr<const HostTensor>> by_location;
  WeightManagerStats stats;

  Result<std::shared_ptr<Block>> LoadFile(const fs::path& path, bool map, const WeightLoadConfig& cfg,
                                          const std::string& what) {
    const std::string key = (map ? "map:" : "copy:") + path.string();  // staged and direct copies share
    if (auto b = blocks[key].lock()) return b;
    // Non-blocking open + fstat: a FIFO or device planted as a weight file is
    // refused instead of hanging the load.
    KILN_ASSIGN_OR_RETURN(OpenedFile file, OpenRegularFile(path.string(), StrCat(what, ": weight file")));
    const UniqueFd& fd = file.fd;
    auto b = std::make_shared<Block>();
    b->device = device;
    b->size = static_cast<std::uint64_t>(file.size);
    ++stats.files_opened;
    if (map) {
      if (b->size > 0) {
        void* p = MapReadOnly(fd.get(), b->size, /*shared=*/true);
        if (p == nullptr) return Error(StatusCode::kIoError, what, ": cannot map '", path.string(), "': ", std::strerror(errno));
        b->data = p;
        b->mapped = true;
      }
      stats.bytes_mapped += b->size;
    } else {
      KILN_ASSIGN_OR_RETURN(b->data, device->Allocate(b->size));
      KILN_RETURN_IF_ERROR(ChunkedCopy(fd.get(), *device, static_cast<std::uint8_t*>(b->data), b->size,
                                       cfg.chunk_bytes, path.string(), cfg.mode == LoadMode::kStagedCopy,
                                       cfg.reader_threads));
      stats.bytes_read += b->size;
      stats.resident_bytes += b->size;
    }
    blocks[key] = b;
    return b;
  }
};

WeightManager::WeightManager(device::Device* device) : impl_(std::make_shared<Impl>()) {
  impl_->device = device ? device : &runtime::CpuDevice();
}
device::Device& WeightManager::device() const { return *impl_->device; }
WeightManager::~WeightManager() = default;

WeightManagerStats WeightManager::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  WeightManagerStats s = impl_->stats;
  s.resident_bytes = 0;
  for (auto& [k, w] : impl_->blocks) {
    if (auto b = w.lock(); b && !b->mapped) s.resident_bytes += b->size;
  }
  return s;
}

Result<std::vector<HostTensorPtr>> WeightManager::Acquire(const std::vector<WeightRef>& refs,
                                                          const WeightLoadConfig& cfg,
                                                          const std::string& model_dir) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Impl& im = *impl_;
  const fs::path dir = cfg.weight_dir.empty() ? fs::path(model_dir) / "weight" : fs::path(cfg.weight_dir);
  const device::Capabilities& caps = im.device->caps();
  const bool map = cfg.mode == LoadMode::kMap || (cfg.mode == LoadMode::kAuto && caps.maps_host_memory);
  if (cfg.mode == LoadMode::kMap && !caps.maps_host_memory) {
    return Error(StatusCode::kInvalidArgument, "weight load mode 'map' is impossible on device '", im.device->spec(),
                 "': it cannot use host memory (a mapped weight file) in place; use 'auto', 'copy' or 'staged'");
  }
  // SHA-256 of resident bytes (copied back where the host cannot read them).
  auto hash = [&](const HostTensor& t, std::uint64_t len) -> Result<std::string> {
    if (!t.device() || caps.host_addressable) return Sha256Hex(t.data(), len);
    std::vector<std::uint8_t> host(len);
    KILN_ASSIGN_OR_RETURN(auto s, im.device->CreateSyncStream());
    KILN_RETURN_IF_ERROR(s->Copy(host.data(), t.data(), len, device::CopyKind::kDeviceToHost));
    KILN_RETURN_IF_ERROR(s->Synchronize());
    return Sha256Hex(host.data(), len);
  };
  std::vector<HostTensorPtr> out;
  for (const WeightRef& r : refs) {
    const std::string what = StrCat("FileConstant node '", r.node, "'");
    // A graph-API weight: the caller's table resolves its file_id to a file
    // or to memory; it never touches the weight directory.
    const WeightLoadConfig::File* file = nullptr;
    if (!r.file_id.empty()) {
      auto f = cfg.files.find(r.file_id);
      if (f == cfg.files.end()) {
        return Error(StatusCode::kInvalidArgument, what, " reads file_id '", r.file_id,
                     "', which the load options do not resolve: give its file or memory with "
                     "LoadOptions::SetWeightFile / SetWeightFileAddress (C: kiln_load_config_set_weight_file*, "
                     "Python: weight_files=)");
      }
      file = &f->second;
    }
    // User memory wins over the directory.
    auto um = file ? cfg.user_memory.end() : cfg.user_memory.find(r.location);
    if (um != cfg.user_memory.end() || (file && file->path.empty())) {
      const UserWeightMemory m = file ? UserWeightMemory{file->data, file->size} : um->second;
      const std::string whose = file ? StrCat("file_id '", r.file_id, "'") : StrCat("weight file '", r.location, "'");
      if (!m.data && r.length) return Error(StatusCode::kInvalidArgument, "user memory for ", whose, " is null");
      if (r.offset > m.size || r.length > m.size - r.offset) {
        return Error(StatusCode::kInvalidArgument, "user memory for ", whose, " is too small: ", what,
                     " needs bytes [", r.offset, ", ", r.offset + r.length, ") = ", r.offset + r.length,
                     " bytes required, ", m.size, " provided");
      }
      out.push_back(std::make_shared<HostTensor>(r.dtype, r.shape, static_cast<std::uint8_t*>(m.data) + r.offset, nullptr));
      continue;
    }
    if (!r.sha256.empty()) {
      if (auto t = im.by_hash[r.sha256].lock(); t && t->dtype() == r.dtype && t->shape() == r.shape) {
        // A shared weight is checked for this model too when it asks for it.
        KILN_ASSIGN_OR_RETURN(std::string h, cfg.verify ? hash(*t, r.length) : Result<std::string>(r.sha256));
        if (h != r.sha256) {
          return Error(StatusCode::kCorrupt, "shared weight for ", what, " fails its SHA-256 check (expected ",
                       r.sha256, "): its file was modified after it was first loaded");
        }
        ++im.stats.weights_shared;
        out.push_back(t);
        continue;
      }
    }
    // (A file_id's path is the caller's own choice, used as given.)
    fs::path path;
    if (file) {
      path = fs::path(file->path);
    } else {
      KILN_ASSIGN_OR_RETURN(path, ResolveInside(dir, r.location, what));
    }
    const std::pair<std::string, std::uint64_t> loc_key{path.string() + (map ? "|map" : "|copy"), r.offset};
    if (auto t = im.by_location[loc_key].lock(); t && t->dtype() == r.dtype && t->shape() == r.shape) {
      KILN_ASSIGN_OR_RETURN(std::string h,
                            cfg.verify && !r.sha256.empty() ? hash(*t, r.length) : Result<std::string>(r.sha256));
      if (h != r.sha256) {
        return Error(StatusCode::kCorrupt, "weight file '", path.string(), "' bytes [", r.offset, ", ",
                     r.offset + r.length, ") for ", what, " fail their SHA-256 check (expected ", r.sha256,
                     "): the file was modified");
      }
      ++im.stats.weights_shared;
      out.push_back(t);
      continue;
    }
    if (!caps.host_addressable && !map && r.length <= kHostWeightBytes) {
      // Small weights stay on the host (see the header).
      KILN_ASSIGN_OR_RETURN(OpenedFile file, OpenRegularFile(path.string(), StrCat(what, ": weight file")));
      ++im.stats.files_opened;
      if (r.offset > static_cast<std::uint64_t>(file.size) || r.length > static_cast<std::uint64_t>(file.size) - r.offset) {
        return Error(StatusCode::kCorrupt, "weight file '", path.string(), "' has ", file.size, " bytes but ", what,
                     " needs [", r.offset, ", ", r.offset + r.length, ") (truncated?)");
      }
      auto t = std::make_shared<HostTensor>(r.dtype, r.shape);
      if (t->nbytes() != r.length) {
        return Error(StatusCode::kCorrupt, what, ": length ", r.length, " does not match ", DTypeName(r.dtype),
                     ShapeToString(r.shape));
      }
      KILN_RETURN_IF_ERROR(ReadFully(file.fd.get(), static_cast<std::uint8_t*>(t->mutable_data()), r.offset,
                                     r.length, path.string()));
      im.stats.bytes_read += r.length;
      if (cfg.verify && !r.sha256.empty() && Sha256Hex(t->data(), r.length) != r.sha256) {
        return Error(StatusCode::kCorrupt, "weight file '", path.string(), "' bytes [", r.offset, ", ",
                     r.offset + r.length, ") for ", what, " fail their SHA-256 check (expected ", r.sha256,
                     "): the file was modified");
      }
      if (!r.sha256.empty()) im.by_hash[r.sha256] = t;
      im.by_location[loc_key] = t;
      out.push_back(t);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<Block> block, im.LoadFile(path, map, cfg, what));
    if (r.offset > block->size || r.length > block->size - r.offset) {
      return Error(StatusCode::kCorrupt, "weight file '", path.string(), "' has ", block->size, " bytes but ", what,
                   " needs [", r.offset, ", ", r.offset + r.length, ") (truncated?)");
    }
    const auto* p = static_cast<const std::uint8_t*>(block->data) + r.offset;
    auto t = std::make_shared<HostTensor>(r.dtype, r.shape, p, block);
    if (!block->mapped) t->set_device(im.device);
    t->set_file_pages(block->mapped);
    if (cfg.verify && !r.sha256.empty()) {
      KILN_ASSIGN_OR_RETURN(std::string h, hash(*t, r.length));
      if (h != r.sha256) {
        return Error(StatusCode::kCorrupt, "weight file '", path.string(), "' bytes [", r.offset, ", ",
                     r.offset + r.length, ") for ", what, " fail their SHA-256 check (expected ", r.sha256,
                     "): the file was modified");
      }
    }
    if (!r.sha256.empty()) im.by_hash[r.sha256] = t;
    im.by_location[loc_key] = t;
    out.push_back(t);
  }
  return out;
}

}  // namespace kiln::weights
