#include "format/kiln_file.h"

#include "ops/file_constant.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/checked.h"
#include "common/file.h"
#include "format/graph_json.h"

namespace kiln::format {
namespace {

std::uint64_t AlignUp(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

std::uint32_t HeaderCrc(FileHeader h, const PartitionEntry* table, std::uint32_t n) {
  h.crc = 0;
  std::uint32_t c = Crc32(&h, sizeof(h));
  return Crc32(table, sizeof(PartitionEntry) * n, c);
}

}  // namespace

std::uint32_t Crc32(const void* data, std::size_t size, std::uint32_t seed) {
  return static_cast<std::uint32_t>(
      crc32_z(seed, static_cast<const Bytef*>(data), static_cast<z_size_t>(size)));
}

namespace {
// `<path>.tmp.<pid>` files left by writers that were killed (kill -9, power
// loss) are removed when the next writer of the same path starts; those of
// live processes are left alone.
void RemoveStaleTemporaries(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp.";
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
}

Status WriteModelFileImpl(const CompiledModel& model, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string json, SerializeModelJson(model));
  // Weights blob laid out by the plan.
  std::vector<std::uint8_t> weights(model.plan.const_size, 0);
  for (auto& v : model.graph->values()) {
    if (!v->is_constant()) continue;
    auto it = model.plan.placements.find(v->name());
    if (it == model.plan.placements.end()) {
      return Error(StatusCode::kInternal, "constant '", v->name(), "' has no placement");
    }
    const plan::Placement& p = it->second;
    std::uint64_t end = 0;
    if (!CheckedAddU(p.offset, p.size, &end) || end > weights.size() || p.size != v->constant()->nbytes()) {
      return Error(StatusCode::kInternal, "constant '", v->name(), "' placed outside the blob");
    }
    if (p.size) std::memcpy(weights.data() + p.offset, v->constant()->data(), p.size);
  }
  const std::uint32_t n = 2;
  PartitionEntry table[n] = {};
  std::uint64_t cursor = sizeof(FileHeader) + sizeof(table);
  table[0] = {static_cast<std::uint32_t>(PartitionType::kGraph), 0, AlignUp(cursor, 64),
              json.size(), Crc32(json.data(), json.size()), 0};
  cursor = table[0].offset + table[0].size;
  table[1] = {static_cast<std::uint32_t>(PartitionType::kWeights), 0,
              AlignUp(cursor, kWeightsAlignment), weights.size(),
              Crc32(weights.data(), weights.size()), 0};
  FileHeader h = {};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFormatVersion;
  h.header_size = sizeof(FileHeader);
  h.num_partitions = n;
  h.table_offset = sizeof(FileHeader);
  h.file_size = table[1].offset + table[1].size;
  h.crc = HeaderCrc(h, table, n);

  RemoveStaleTemporaries(path);
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Error(StatusCode::kIoError, "cannot create '", tmp, "': ", std::strerror(errno));
    auto pad_to = [&](std::uint64_t off) {
      std::uint64_t pos = static_cast<std::uint64_t>(f.tellp());
      static const char zeros[4096] = {};
      while (pos < off) {
        std::uint64_t k = std::min<std::uint64_t>(off - pos, sizeof(zeros));
        f.write(zeros, static_cast<std::streamsize>(k));
        pos += k;
      }
    };
    f.write(reinterpret_cast<const char*>(&h), sizeof(h));
    f.write(reinterpret_cast<const char*>(table), sizeof(table));
    pad_to(table[0].offset);
    f.write(json.data(), static_cast<std::streamsize>(json.size()));
    pad_to(table[1].offset);
    f.write(reinterpret_cast<const char*>(weights.data()), static_cast<std::streamsize>(weights.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return Error(StatusCode::kIoError, "writing '", tmp, "' failed: ", std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    return Error(StatusCode::kIoError, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
  return Status::Ok();
}
}  // namespace

Status WriteModelFile(const CompiledModel& model, const std::string& path) {
  try {
    return WriteModelFileImpl(model, path);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, "cannot write '", path, "': out of memory (weights of ",
                 model.plan.const_size, " bytes)");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot write '", path, "': ", e.what());
  }
}


namespace {
struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};
}  // namespace

Result<CompiledModel> ParseModelImage(const std::uint8_t* base, std::uint64_t size,
                                      std::shared_ptr<const void> owner, const std::string& path,
                                      const ReadOptions& opts, bool file_pages) {
  auto corrupt = [&](const auto&... args) {
    return Error(StatusCode::kCorrupt, "model file '", path, "': ", args...);
  };
  if (size < sizeof(FileHeader)) return corrupt("too small to be a .kiln file (", size, " bytes)");
  if (reinterpret_cast<std::uintptr_t>(base) % plan::kAlignment != 0) {
    return Error(StatusCode::kInvalidArgument, "model image of '", path, "' is not ", plan::kAlignment,
                 "-byte aligned in memory");
  }
  FileHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) return corrupt("bad magic (not a .kiln file)");
  if (h.version < kOldestFormatVersion || h.version > kFormatVersion) {
    return corrupt("format version ", h.version, ", this Kiln reads versions ", kOldestFormatVersion, " to ",
                   kFormatVersion);
  }
  if (h.header_size != sizeof(FileHeader)) return corrupt("header size ", h.header_size, ", expected ", sizeof(FileHeader));
  if (h.num_partitions == 0 || h.num_partitions > 64) return corrupt("partition count ", h.num_partitions, " out of range 1..64");
  if (h.file_size != size) return corrupt("header says ", h.file_size, " bytes, file has ", size, " (truncated?)");
  if (h.table_offset != sizeof(FileHeader) ||
      h.table_offset + std::uint64_t{h.num_partitions} * sizeof(PartitionEntry) > size) {
    return corrupt("partition table (offset ", h.table_offset, ") lies outside the file");
  }
  std::vector<PartitionEntry> table(h.num_partitions);
  std::memcpy(table.data(), base + h.table_offset, sizeof(PartitionEntry) * h.num_partitions);
  if (HeaderCrc(h, table.data(), h.num_partitions) != h.crc) return corrupt("header checksum mismatch");
  const PartitionEntry* graph_part = nullptr;
  const PartitionEntry* weights_part = nullptr;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const PartitionEntry& e = table[i];
    if (e.offset > size || e.size > size - e.offset) {
      return corrupt("partition ", i, " at offset ", e.offset, " size ", e.size, " lies outside the file of ", size,
                     " bytes");
    }
    const PartitionEntry** slot = nullptr;
    if (e.type == static_cast<std::uint32_t>(PartitionType::kGraph)) slot = &graph_part;
    else if (e.type == static_cast<std::uint32_t>(PartitionType::kWeights)) slot = &weights_part;
    else return corrupt("partition ", i, " has unknown type ", e.type);
    if (*slot) return corrupt("partition type ", e.type, " appears twice");
    if (e.flags != 0 || e.reserved != 0) return corrupt("partition ", i, " has non-zero reserved fields");
    *slot = &e;
  }
  for (std::uint8_t b : h.reserved) {
    if (b != 0) return corrupt("header has non-zero reserved bytes");
  }
  if (!graph_part || !weights_part) return corrupt("missing graph or weights partition");
  // Every byte outside the header, table and partitions is zero padding.
  {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> used = {
        {0, h.table_offset + std::uint64_t{h.num_partitions} * sizeof(PartitionEntry)}};
    for (const PartitionEntry& e : table) used.emplace_back(e.offset, e.offset + e.size);
    std::sort(used.begin(), used.end());
    std::uint64_t cursor = 0;
    for (auto& [b, e] : used) {
      if (b < cursor) return corrupt("partitions overlap at offset ", b);
      for (std::uint64_t i = cursor; i < b; ++i) {
        if (base[i] != 0) return corrupt("non-zero padding byte at offset ", i);
      }
      cursor = e;
    }
    for (std::uint64_t i = cursor; i < size; ++i) {
      if (base[i] != 0) return corrupt("non-zero trailing byte at offset ", i);
    }
  }
  if (weights_part->offset % kWeightsAlignment != 0) {
    return corrupt("weights partition at offset ", weights_part->offset, " is not ", kWeightsAlignment, "-byte aligned");
  }
  if (Crc32(base + graph_part->offset, graph_part->size) != graph_part->crc) {
    return corrupt("graph partition checksum mismatch");
  }
  if (opts.verify_weights_checksum &&
      Crc32(base + weights_part->offset, weights_part->size) != weights_part->crc) {
    return corrupt("weights partition checksum mismatch");
  }
  auto model = ParseModelJson(reinterpret_cast<const char*>(base + graph_part->offset), graph_part->size,
                              base + weights_part->offset, weights_part->size, std::move(owner), file_pages);
  if (!model.ok()) return model.status().WithContext(StrCat("model file '", path, "'"));
  // The plan is untrusted too: verify it before any allocation or kernel.
  Status st = plan::VerifyPlan(*model.value().graph, model.value().plan, base + weights_part->offset,
                               weights_part->size);
  if (!st.ok()) return st.WithContext(StrCat("model file '", path, "'"));
  return model;
}

Result<LoadedFile> ReadModelFile(const std::string& path, const ReadOptions& opts) {
  try {
    // Non-blocking open + fstat: a FIFO, device or directory is refused
    // without hanging.
    auto opened = OpenRegularFile(path, "model file");
    if (!opened.ok()) return opened.status();
    const auto size = static_cast<std::uint64_t>(opened.value().size);
    if (size < sizeof(FileHeader)) {
      return Error(StatusCode::kCorrupt, "model file '", path, "': too small to be a .kiln file (", size, " bytes)");
    }
    auto map = std::make_shared<Mapping>();
    map->addr = MapReadOnly(opened.value().fd.get(), size, /*shared=*/false);
    if (map->addr == nullptr) {
      return Error(StatusCode::kIoError, "cannot map model file '", path, "' (", size, " bytes): ", std::strerror(errno));
    }
    map->size = size;
    KILN_ASSIGN_OR_RETURN(CompiledModel model,
                          ParseModelImage(static_cast<const std::uint8_t*>(map->addr), size, map, path, opts,
                                                          /*file_pages=*/true));
    LoadedFile lf;
    lf.model = std::move(model);
    lf.mapping = map;
    lf.file_size = size;
    return lf;
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, "model file '", path, "': out of memory while reading it");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "model file '", path, "': ", e.what());
  }
}

}  // namespace kiln::format

namespace kiln {

Result<std::vector<weights::WeightRef>> ListExternalWeights(const ir::Graph& g) {
  std::vector<weights::WeightRef> out;
  Status st = Status::Ok();
  ir::ForEachGraph(g, [&](const ir::Graph& sub) {  // If branches' weights too
    for (auto& n : sub.nodes()) {
      if (!st.ok() || !ops::IsFileConstant(*n)) continue;
      auto r = ops::DecodeFileConstant(*n);
      if (!r.ok()) {
        st = r.status();
        continue;
      }
      out.push_back(std::move(r).value());
    }
  });
  if (!st.ok()) return st;
  return out;
}

}  // namespace kiln
