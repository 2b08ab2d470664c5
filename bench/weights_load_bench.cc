// Helper for bench/weights_bench.py: one measurement per process, one JSON
// line on stdout.
//
//   weights_load_bench load MODEL.kiln [--weight-dir D] [--mode auto|map|copy]
//                      [--chunk-mib N] [--no-crc] [--run]
//       load time, RSS before / peak (VmHWM; ru_maxrss also given) / after,
//       weight stats; --run
//       executes once afterwards (inputs 0.01) and reports run_ms.
//   weights_load_bench session [--mode copy|map] [--weight-dir D] [--separate] [--run] M1.kiln M2.kiln ...
//       loads every model through one Session (or --separate: Model::Load
//       each) and reports RSS after each load.
//   weights_load_bench memcpy [--mib N] [--reps R]
//       memcpy bandwidth into touched and into freshly allocated memory.
//   weights_load_bench sha256 [--mib N] [--threads T]
//       OpenSSL SHA-256 bandwidth (T threads, each hashing its own buffer).
//   weights_load_bench write --dir D [--blobs N] [--blob-mib M] [--threads T]
//       write + fsync + rename of N files of M MiB with T threads (what a
//       mode-1 store does), i.e. this disk's write limit.
//   weights_load_bench store --dir D [--blobs N] [--blob-mib M] [--threads T] [--mode 1|2]
//       weights::StoreWeights of N random blobs into an empty directory.
//   weights_load_bench upload --dir D --device SPEC [--blobs N] [--blob-mib M] [--chunk-mib C]
//                      [--readers R] [--reps K] [--bw-mib B]
//       N random blobs stored as one combined file (mode 2) in the empty
//       directory D, then loaded K times into SPEC's memory through a fresh
//       WeightManager (the chunked copy path: pinned staging where the
//       device has it, R readers), beside the device's pinned and pageable
//       host->device copy bandwidth measured in the same process (B MiB,
//       median of 5). The file is in the page cache (just written).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor.h"
#include "kiln/runtime.h"
#include "runtime/devices.h"
#include "weights/sha256.h"
#include "weights/weight_manager.h"
#include "weights/weight_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

std::uint64_t RssKib() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

// Peak RSS of this process image: VmHWM. (getrusage's ru_maxrss is not used
// as the peak: on Linux it carries over the RSS of the process image before
// execve, i.e. of the parent that forked us, e.g. a large Python driver.)
std::uint64_t PeakRssKib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

std::uint64_t RuMaxRssKib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss);
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "weights_load_bench: error: %s\n", msg.c_str());
  std::exit(1);
}

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> opts;
  bool flag(const std::string& k) const { return opts.count(k) > 0; }
  std::string get(const std::string& k, const std::string& d) const {
    auto it = opts.find(k);
    return it == opts.end() ? d : it->second;
  }
  double num(const std::string& k, double d) const {
    auto it = opts.find(k);
    return it == opts.end() ? d : std::atof(it->second.c_str());
  }
};

Args Parse(int argc, char** argv, int first) {
  static const char* kFlags[] = {"--no-crc", "--run", "--separate", "--reload"};
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      bool is_flag = false;
      for (const char* f : kFlags) is_flag |= s == f;
      if (is_flag) {
        a.opts[s] = "1";
      } else {
        if (i + 1 >= argc) Die(s + " needs a value");
        a.opts[s] = argv[++i];
      }
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

kiln::LoadOptions LoadOpts(const Args& a) {
  kiln::LoadOptions lo;
  lo.weight_dir = a.get("--weight-dir", "");
  const std::string mode = a.get("--mode", "auto");
  lo.weight_load_mode = mode == "map" ? kiln::WeightLoadMode::kMap
                      : mode == "copy" ? kiln::WeightLoadMode::kCopy
                      : mode == "staged" ? kiln::WeightLoadMode::kStagedCopy : kiln::WeightLoadMode::kAuto;
  lo.weight_chunk_bytes = static_cast<std::size_t>(a.num("--chunk-mib", 10) * 1048576.0);
  lo.verify_weights_checksum = !a.flag("--no-crc");
  return lo;
}

// Runs the model once on inputs of 0.01; returns ms.
double RunOnce(kiln::Model& m) {
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<kiln::TensorRef> in, out;
  for (auto& t : m.inputs()) {
    bufs.emplace_back(t.bytes);
    if (t.dtype == kiln::DType::kFloat32) {
      float* f = reinterpret_cast<float*>(bufs.back().data());
      std::fill(f, f + t.bytes / 4, 0.01f);
    }
    in.push_back({bufs.back().data(), t.dtype, t.shape});
  }
  for (auto& t : m.outputs()) {
    bufs.emplace_back(t.bytes);
    out.push_back({bufs.back().data(), t.dtype, t.shape});
  }
  auto t0 = Clock::now();
  kiln::Status st = m.Execute(in, out);
  auto t1 = Clock::now();
  if (!st.ok()) Die(st.ToString());
  return Ms(t0, t1);
}

std::string StatsJson(const kiln::WeightStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\"bytes_read\": %llu, \"bytes_mapped\": %llu, \"files_opened\": %llu, \"weights_shared\": %llu, "
                "\"resident_bytes\": %llu",
                static_cast<unsigned long long>(s.bytes_read), static_cast<unsigned long long>(s.bytes_mapped),
                static_cast<unsigned long long>(s.files_opened), static_cast<unsigned long long>(s.weights_shared),
                static_cast<unsigned long long>(s.resident_bytes));
  return buf;
}

int CmdLoad(const Args& a) {
  if (a.positional.size() != 1) Die("load needs one model");
  const kiln::LoadOptions lo = LoadOpts(a);
  const std::uint64_t rss0 = RssKib(), peak0 = PeakRssKib();
  // A Session so weight_stats() can be reported; it shares nothing here.
  kiln::Session session;
  auto t0 = Clock::now();
  auto m = session.LoadModel(a.positional[0], lo);
  auto t1 = Clock::now();
  if (!m.ok()) Die(m.status().ToString());
  const std::uint64_t peak = PeakRssKib(), ru_max = RuMaxRssKib(), rss1 = RssKib();
  double run_ms = -1;
  std::uint64_t rss_run = 0;
  if (a.flag("--run")) {
    run_ms = RunOnce(**m);
    rss_run = RssKib();
  }
  double reload_ms = -1;
  const auto weight_bytes = static_cast<unsigned long long>((*m)->weight_bytes());
  if (a.flag("--reload")) {
    // Drop the model and load it again in this process: copied weights land
    // in device memory the first load already touched (the CPU device keeps
    // freed blocks warm, as a GPU's allocator does).
    m.value().reset();
    kiln::Session again;
    auto t2 = Clock::now();
    auto m2 = again.LoadModel(a.positional[0], lo);
    auto t3 = Clock::now();
    if (!m2.ok()) Die(m2.status().ToString());
    reload_ms = Ms(t2, t3);
  }
  std::printf("{\"reload_ms\": %.3f, ", reload_ms);
  std::printf("\"load_ms\": %.3f, \"rss_before_kib\": %llu, \"peak_before_kib\": %llu, \"peak_rss_kib\": %llu, "
              "\"ru_maxrss_kib\": %llu, \"rss_after_kib\": %llu, \"run_ms\": %.3f, \"rss_after_run_kib\": %llu, "
              "\"weight_bytes\": %llu, %s}\n",
              Ms(t0, t1), static_cast<unsigned long long>(rss0), static_cast<unsigned long long>(peak0),
              static_cast<unsigned long long>(peak), static_cast<unsigned long long>(ru_max),
              static_cast<unsigned long long>(rss1), run_ms,
              static_cast<unsigned long long>(rss_run), weight_bytes,
              StatsJson(session.weight_stats()).c_str());
  return 0;
}

int CmdSession(const Args& a) {
  if (a.positional.empty()) Die("session needs models");
  const kiln::LoadOptions lo = LoadOpts(a);
  kiln::Session session;
  std::vector<std::unique_ptr<kiln::Model>> models;
  std::string rss = "[";
  const std::uint64_t rss0 = RssKib();
  auto t0 = Clock::now();
  for (auto& p : a.positional) {
    auto m = a.flag("--separate") ? kiln::Model::Load(p, lo) : session.LoadModel(p, lo);
    if (!m.ok()) Die(m.status().ToString());
    models.push_back(std::move(m).value());
    if (a.flag("--run")) RunOnce(*models.back());
    rss += (rss.size() > 1 ? ", " : "") + std::to_string(RssKib());
  }
  auto t1 = Clock::now();
  rss += "]";
  std::printf("{\"models\": %zu, \"load_ms_total\": %.3f, \"rss_before_kib\": %llu, \"rss_after_each_kib\": %s, "
              "\"peak_rss_kib\": %llu, %s}\n",
              models.size(), Ms(t0, t1), static_cast<unsigned long long>(rss0), rss.c_str(),
              static_cast<unsigned long long>(PeakRssKib()), StatsJson(session.weight_stats()).c_str());
  return 0;
}

int CmdMemcpy(const Args& a) {
  const std::size_t bytes = static_cast<std::size_t>(a.num("--mib", 256) * 1048576.0);
  const int reps = static_cast<int>(a.num("--reps", 5));
  std::vector<std::uint8_t> src(bytes, 1), dst(bytes, 2);  // touched
  std::vector<double> touched, fresh;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    auto t1 = Clock::now();
    touched.push_back(bytes / (Ms(t0, t1) * 1e-3) / 1e9);
    if (dst[bytes / 2] != 1) Die("memcpy check");
    // Into memory that is not yet faulted in (what a fresh allocation is).
    void* p = std::aligned_alloc(64, bytes);
    auto t2 = Clock::now();
    std::memcpy(p, src.data(), bytes);
    auto t3 = Clock::now();
    fresh.push_back(bytes / (Ms(t2, t3) * 1e-3) / 1e9);
    if (static_cast<std::uint8_t*>(p)[bytes / 3] != 1) Die("memcpy check");
    std::free(p);
  }
  std::sort(touched.begin(), touched.end());
  std::sort(fresh.begin(), fresh.end());
  std::printf("{\"mib\": %.0f, \"reps\": %d, \"memcpy_gbps\": %.3f, \"memcpy_best_gbps\": %.3f, "
              "\"memcpy_fresh_gbps\": %.3f, \"memcpy_fresh_best_gbps\": %.3f}\n",
              bytes / 1048576.0, reps, touched[touched.size() / 2], touched.back(), fresh[fresh.size() / 2],
              fresh.back());
  return 0;
}

void Fill(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::uint8_t>(i);
}

template <typename Fn>
void Parallel(int threads, int n, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i; (i = next++) < n;) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

int CmdSha(const Args& a) {
  const std::size_t bytes = static_cast<std::size_t>(a.num("--mib", 256) * 1048576.0);
  const int threads = static_cast<int>(a.num("--threads", 1));
  std::vector<std::vector<std::uint8_t>> bufs(threads, std::vector<std::uint8_t>(bytes));
  for (int t = 0; t < threads; ++t) Fill(bufs[t].data(), bytes, t + 1);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    Parallel(threads, threads, [&](int i) {
      std::string h = kiln::weights::Sha256Hex(bufs[i].data(), bufs[i].size());
      if (h.size() != 64) Die("sha");
    });
    auto t1 = Clock::now();
    best = std::max(best, static_cast<double>(bytes) * threads / (Ms(t0, t1) * 1e-3) / 1e9);
  }
  std::printf("{\"mib\": %.0f, \"threads\": %d, \"sha256_gbps\": %.3f}\n", bytes / 1048576.0, threads, best);
  return 0;
}

std::vector<kiln::HostTensorPtr> Blobs(const Args& a) {
  const int n = static_cast<int>(a.num("--blobs", 16));
  const std::size_t bytes = static_cast<std::size_t>(a.num("--blob-mib", 64) * 1048576.0);
  std::vector<kiln::HostTensorPtr> blobs;
  for (int i = 0; i < n; ++i) {
    auto t = std::make_shared<kiln::HostTensor>(kiln::DType::kUInt8, kiln::Shape{static_cast<std::int64_t>(bytes)});
    Fill(static_cast<std::uint8_t*>(t->mutable_data()), bytes, 1000 + i + static_cast<std::uint64_t>(a.num("--seed", 0)) * 100);
    blobs.push_back(t);
  }
  return blobs;
}

int CmdWrite(const Args& a) {
  const std::string dir = a.get("--dir", "");
  if (dir.empty()) Die("write needs --dir");
  std::filesystem::create_directories(dir);
  const int threads = static_cast<int>(a.num("--threads", 1));
  auto blobs = Blobs(a);
  std::uint64_t total = 0;
  for (auto& b : blobs) total += b->nbytes();
  auto t0 = Clock::now();
  Parallel(threads, static_cast<int>(blobs.size()), [&](int i) {
    const std::string final_path = dir + "/blob_" + std::to_string(i), tmp = final_path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) Die("cannot create " + tmp);
    const auto* p = static_cast<const std::uint8_t*>(blobs[i]->data());
    std::size_t done = 0, n = blobs[i]->nbytes();
    while (done < n) {
      ssize_t w = write(fd, p + done, std::min<std::size_t>(n - done, 1u << 30));
      if (w <= 0) Die("write failed");
      done += static_cast<std::size_t>(w);
    }
    if (fsync(fd) != 0 || close(fd) != 0) Die("fsync failed");
    if (rename(tmp.c_str(), final_path.c_str()) != 0) Die("rename failed");
  });
  auto t1 = Clock::now();
  std::printf("{\"bytes\": %llu, \"threads\": %d, \"write_ms\": %.3f, \"write_gbps\": %.3f}\n",
              static_cast<unsigned long long>(total), threads, Ms(t0, t1), total / (Ms(t0, t1) * 1e-3) / 1e9);
  return 0;
}

int CmdStore(const Args& a) {
  const std::string dir = a.get("--dir", "");
  if (dir.empty()) Die("store needs --dir");
  auto blobs = Blobs(a);
  std::uint64_t total = 0;
  for (auto& b : blobs) total += b->nbytes();
  kiln::weights::StoreOptions so;
  so.mode = static_cast<int>(a.num("--mode", 1));
  so.writer_threads = static_cast<int>(a.num("--threads", 8));
  so.model_name = "bench";
  kiln::weights::StoreStats st;
  auto t0 = Clock::now();
  auto r = kiln::weights::StoreWeights(dir, blobs, so, &st);
  auto t1 = Clock::now();
  if (!r.ok()) Die(r.status().ToString());
  std::printf("{\"bytes\": %llu, \"threads\": %d, \"mode\": %d, \"store_ms\": %.3f, \"store_gbps\": %.3f, "
              "\"written\": %llu}\n",
              static_cast<unsigned long long>(total), so.writer_threads, so.mode, Ms(t0, t1),
              total / (Ms(t0, t1) * 1e-3) / 1e9, static_cast<unsigned long long>(st.written));
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int CmdUpload(const Args& a) {
  const std::string dir = a.get("--dir", "");
  if (dir.empty()) Die("upload needs --dir");
  auto dev_r = kiln::runtime::OpenDevice(a.get("--device", "cpu"));
  if (!dev_r.ok()) Die(dev_r.status().ToString());
  kiln::device::Device& dev = *dev_r.value();
  std::uint64_t total = 0;
  std::vector<kiln::weights::WeightRef> refs;
  {
    auto blobs = Blobs(a);
    for (auto& b : blobs) total += b->nbytes();
    kiln::weights::StoreOptions so;
    so.mode = 2;
    so.writer_threads = 8;
    so.model_name = "upload";
    auto r = kiln::weights::StoreWeights(dir, blobs, so, nullptr);
    if (!r.ok()) Die(r.status().ToString());
    refs = r.value();
  }
  // Host->device copy bandwidth of this device: from pinned memory (DMA
  // alone: CopyHeld) and from pageable memory (Copy).
  const std::size_t bw = static_cast<std::size_t>(a.num("--bw-mib", 256) * 1048576.0);
  auto pin = dev.Allocate(bw, kiln::device::MemoryKind::kPinnedHost);
  auto dst = dev.Allocate(bw);
  auto stream = dev.CreateStream();
  if (!pin.ok() || !dst.ok() || !stream.ok()) Die("cannot allocate the bandwidth buffers");
  std::memset(pin.value(), 1, bw);
  std::vector<std::uint8_t> pageable(bw, 1);
  auto gbps = [&](bool pinned) {
    std::vector<double> ms;
    for (int i = 0; i < 6; ++i) {
      auto t0 = Clock::now();
      kiln::Status st = pinned ? (*stream)->CopyHeld(dst.value(), pin.value(), bw)
                               : (*stream)->Copy(dst.value(), pageable.data(), bw, kiln::device::CopyKind::kHostToDevice);
      if (st.ok()) st = (*stream)->Synchronize();
      if (!st.ok()) Die(st.ToString());
      if (i > 0) ms.push_back(Ms(t0, Clock::now()));
    }
    return bw / (Median(ms) * 1e-3) / 1e9;
  };
  const double pinned_gbps = gbps(true), pageable_gbps = gbps(false);
  dev.Free(pin.value());
  dev.Free(dst.value());
  kiln::weights::WeightLoadConfig cfg;
  cfg.weight_dir = dir;
  cfg.mode = kiln::weights::LoadMode::kStagedCopy;
  cfg.chunk_bytes = static_cast<std::size_t>(a.num("--chunk-mib", 10) * 1048576.0);
  cfg.reader_threads = static_cast<int>(a.num("--readers", 0));
  std::vector<double> ms;
  const int reps = static_cast<int>(a.num("--reps", 3));
  for (int i = 0; i < reps; ++i) {
    kiln::weights::WeightManager wm(&dev);
    auto t0 = Clock::now();
    auto r = wm.Acquire(refs, cfg, dir);
    const double t = Ms(t0, Clock::now());
    if (!r.ok()) Die(r.status().ToString());
    ms.push_back(t);
  }
  const double up_ms = Median(ms), up_gbps = total / (up_ms * 1e-3) / 1e9;
  std::printf("{\"device\": \"%s\", \"bytes\": %llu, \"chunk_mib\": %.3f, \"readers\": %d, \"upload_ms\": %.3f, "
              "\"upload_gbps\": %.3f, \"pinned_h2d_gbps\": %.3f, \"pageable_h2d_gbps\": %.3f, "
              "\"upload_over_pinned\": %.3f}\n",
              dev.spec().c_str(), static_cast<unsigned long long>(total), cfg.chunk_bytes / 1048576.0,
              cfg.reader_threads, up_ms, up_gbps, pinned_gbps, pageable_gbps, up_gbps / pinned_gbps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: weights_load_bench load|session|memcpy|sha256|write|store|upload ...");
  const std::string cmd = argv[1];
  const Args a = Parse(argc, argv, 2);
  if (cmd == "load") return CmdLoad(a);
  if (cmd == "session") return CmdSession(a);
  if (cmd == "memcpy") return CmdMemcpy(a);
  if (cmd == "sha256") return CmdSha(a);
  if (cmd == "write") return CmdWrite(a);
  if (cmd == "store") return CmdStore(a);
  if (cmd == "upload") return CmdUpload(a);
  Die("unknown command " + cmd);
}
