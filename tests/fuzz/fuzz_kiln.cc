// libFuzzer target: a `.kiln` file is loaded (container checks, JSON graph
// and plan parse, plan verification, kernel creation) and, when it loads,
// executed once on zero-filled inputs.
//
// Checksums catch accidents, not attacks, and a blind mutation nearly always
// breaks one. The custom mutator below therefore takes the file apart
// (graph JSON partition, weights partition), mutates one of them (or, now and
// then, the raw bytes including header and table) and writes it back with a
// consistent header, table, padding and CRC-32s, so that mutations reach the
// JSON parser and the plan verifier. The counters printed at exit give the
// share of inputs that pass every container check (magic, sizes, table,
// padding, checksums) and so reach the graph/plan verifier.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <limits>

#include <nlohmann/json.hpp>

#include "format/kiln_file.h"
#include "fuzz_util.h"
#include "kiln/runtime.h"
#include "run_zeros.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using kiln::format::FileHeader;
using kiln::format::PartitionEntry;

constexpr std::uint64_t kAlign = kiln::format::kWeightsAlignment;
std::uint64_t AlignUp(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

std::uint32_t HeaderCrc(FileHeader h, const PartitionEntry* table, std::uint32_t n) {
  h.crc = 0;
  std::uint32_t c = kiln::format::Crc32(&h, sizeof(h));
  return kiln::format::Crc32(table, sizeof(PartitionEntry) * n, c);
}

// The two partitions of a file whose header and table are readable (offsets
// inside the data); false otherwise.
bool Split(const std::uint8_t* d, std::size_t n, std::string* json, std::string* weights) {
  if (n < sizeof(FileHeader)) return false;
  FileHeader h;
  std::memcpy(&h, d, sizeof(h));
  if (std::memcmp(h.magic, kiln::format::kMagic, 8) != 0) return false;
  if (h.num_partitions == 0 || h.num_partitions > 64 || h.table_offset > n ||
      (n - h.table_offset) / sizeof(PartitionEntry) < h.num_partitions) {
    return false;
  }
  bool got_json = false, got_weights = false;
  for (std::uint32_t i = 0; i < h.num_partitions; ++i) {
    PartitionEntry e;
    std::memcpy(&e, d + h.table_offset + i * sizeof(PartitionEntry), sizeof(e));
    if (e.offset > n || e.size > n - e.offset) return false;
    std::string bytes(reinterpret_cast<const char*>(d + e.offset), e.size);
    if (e.type == 1 && !got_json) { *json = std::move(bytes); got_json = true; }
    if (e.type == 2 && !got_weights) { *weights = std::move(bytes); got_weights = true; }
  }
  return got_json && got_weights;
}

// Lays out a well-formed file exactly as WriteModelFile does.
std::vector<std::uint8_t> Assemble(const std::string& json, const std::string& weights) {
  PartitionEntry table[2] = {};
  std::uint64_t cursor = sizeof(FileHeader) + sizeof(table);
  table[0] = {1, 0, AlignUp(cursor, 64), json.size(), kiln::format::Crc32(json.data(), json.size()), 0};
  cursor = table[0].offset + table[0].size;
  table[1] = {2, 0, AlignUp(cursor, kAlign), weights.size(),
              kiln::format::Crc32(weights.data(), weights.size()), 0};
  FileHeader h = {};
  std::memcpy(h.magic, kiln::format::kMagic, 8);
  h.version = kiln::format::kFormatVersion;
  h.header_size = sizeof(FileHeader);
  h.num_partitions = 2;
  h.table_offset = sizeof(FileHeader);
  h.file_size = table[1].offset + table[1].size;
  h.crc = HeaderCrc(h, table, 2);
  std::vector<std::uint8_t> out(h.file_size, 0);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), table, sizeof(table));
  std::memcpy(out.data() + table[0].offset, json.data(), json.size());
  std::memcpy(out.data() + table[1].offset, weights.data(), weights.size());
  return out;
}

// Recomputes file size, partition and header CRCs in place (raw mutations).
void FixChecksums(std::uint8_t* d, std::size_t n) {
  if (n < sizeof(FileHeader)) return;
  FileHeader h;
  std::memcpy(&h, d, sizeof(h));
  h.file_size = n;
  if (h.num_partitions == 0 || h.num_partitions > 64 || h.table_offset > n ||
      (n - h.table_offset) / sizeof(PartitionEntry) < h.num_partitions) {
    std::memcpy(d, &h, sizeof(h));
    return;
  }
  std::vector<PartitionEntry> table(h.num_partitions);
  std::memcpy(table.data(), d + h.table_offset, table.size() * sizeof(PartitionEntry));
  for (auto& e : table) {
    if (e.offset <= n && e.size <= n - e.offset) e.crc = kiln::format::Crc32(d + e.offset, e.size);
  }
  std::memcpy(d + h.table_offset, table.data(), table.size() * sizeof(PartitionEntry));
  h.crc = HeaderCrc(h, table.data(), h.num_partitions);
  std::memcpy(d, &h, sizeof(h));
}

// Mirrors the container checks of ReadModelFile: true when a file gets past
// all of them to the JSON graph/plan parser and verifier.
bool PassesContainerChecks(const std::uint8_t* d, std::size_t n) {
  if (n < sizeof(FileHeader)) return false;
  FileHeader h;
  std::memcpy(&h, d, sizeof(h));
  if (std::memcmp(h.magic, kiln::format::kMagic, 8) != 0 || h.version < kiln::format::kOldestFormatVersion ||
      h.version > kiln::format::kFormatVersion ||
      h.header_size != sizeof(FileHeader) || h.num_partitions == 0 || h.num_partitions > 64 ||
      h.file_size != n || h.table_offset != sizeof(FileHeader) ||
      h.table_offset + std::uint64_t{h.num_partitions} * sizeof(PartitionEntry) > n) {
    return false;
  }
  std::vector<PartitionEntry> table(h.num_partitions);
  std::memcpy(table.data(), d + h.table_offset, table.size() * sizeof(PartitionEntry));
  if (HeaderCrc(h, table.data(), h.num_partitions) != h.crc) return false;
  int seen[3] = {0, 0, 0};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> used = {
      {0, h.table_offset + std::uint64_t{h.num_partitions} * sizeof(PartitionEntry)}};
  for (const auto& e : table) {
    if (e.offset > n || e.size > n - e.offset) return false;
    if (e.type != 1 && e.type != 2) return false;
    if (seen[e.type]++) return false;
    if (kiln::format::Crc32(d + e.offset, e.size) != e.crc) return false;
    if (e.type == 2 && e.offset % kAlign != 0) return false;
    used.emplace_back(e.offset, e.offset + e.size);
  }
  if (!seen[1] || !seen[2]) return false;
  std::sort(used.begin(), used.end());
  std::uint64_t cursor = 0;
  for (auto& [b, e] : used) {
    if (b < cursor) return false;
    for (std::uint64_t i = cursor; i < b; ++i) if (d[i]) return false;
    cursor = e;
  }
  for (std::uint64_t i = cursor; i < n; ++i) if (d[i]) return false;
  return true;
}


// Structure-aware mutation of the graph/plan JSON: parse it, change one leaf
// (a number to an edge value or a near neighbour, a string to another string
// of the document) or one array (drop, duplicate or swap elements), dump it.
// Keeps the JSON well formed, so mutations hit the plan verifier's checks
// (placements, sizes, roles, names) instead of the JSON parser.
bool MutateJsonTree(std::string* text, unsigned seed) {
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return false;
  std::vector<nlohmann::json*> leaves, arrays;
  std::vector<std::string> strings;
  std::vector<nlohmann::json*> stack = {&doc};
  while (!stack.empty()) {
    nlohmann::json* j = stack.back();
    stack.pop_back();
    if (j->is_object()) {
      for (auto& [k, v] : j->items()) { strings.push_back(k); stack.push_back(&v); }
    } else if (j->is_array()) {
      arrays.push_back(j);
      for (auto& v : *j) stack.push_back(&v);
    } else {
      leaves.push_back(j);
      if (j->is_string()) strings.push_back(j->get<std::string>());
    }
  }
  std::uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&r] { r ^= r << 13; r ^= r >> 7; r ^= r << 17; return r; };
  if (!arrays.empty() && next() % 4 == 0) {
    nlohmann::json& a = *arrays[next() % arrays.size()];
    if (a.empty()) return false;
    const std::size_t i = next() % a.size(), k = next() % a.size();
    switch (next() % 3) {
      case 0: a.erase(a.begin() + static_cast<std::ptrdiff_t>(i)); break;
      case 1: a.push_back(a[i]); break;
      default: std::swap(a[i], a[k]); break;
    }
  } else {
    if (leaves.empty()) return false;
    nlohmann::json& v = *leaves[next() % leaves.size()];
    static const std::int64_t kEdges[] = {0, 1, -1, 2, 3, 4, 63, 64, 65, 4095, 4096, 2147483647,
                                          2147483648LL, 4294967295LL, 4294967296LL,
                                          9223372036854775807LL, (-9223372036854775807LL - 1)};
    if (v.is_number_integer() || v.is_number_unsigned()) {
      const std::int64_t old = v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>())
                                                      : v.get<std::int64_t>();
      switch (next() % 4) {
        case 0: v = kEdges[next() % (sizeof(kEdges) / sizeof(kEdges[0]))]; break;
        case 1: v = static_cast<std::int64_t>(static_cast<std::uint64_t>(old) + next() % 129 - 64); break;
        case 2: v = static_cast<std::uint64_t>(old) * 2; break;
        default: v = std::numeric_limits<std::uint64_t>::max() - next() % 4; break;
      }
    } else if (v.is_string() && !strings.empty()) {
      v = strings[next() % strings.size()];
    } else if (v.is_number_float()) {
      v = static_cast<double>(kEdges[next() % (sizeof(kEdges) / sizeof(kEdges[0]))]);
    } else {
      v = static_cast<std::int64_t>(next() % 8);
    }
  }
  *text = doc.dump();
  return true;
}

kiln_fuzz::Stats g_stats{"kiln"};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  unsetenv("KILN_CUSTOM_OP_PATH");  // never dlopen anything a fuzzed file names
  g_stats.names[0] = "reach_verifier";
  g_stats.names[1] = "loaded";
  g_stats.names[2] = "executed";
  kiln_fuzz::InitStats(&g_stats);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::string json, weights;
  const unsigned choice = seed % 16;
  // 6/16: the JSON's tree (MutateJsonTree), 6/16: the JSON's bytes
  // (libFuzzer's mutations), 2/16: the weights blob, each re-assembled into
  // a consistent file; 2/16 (and anything unreadable): raw bytes, header and
  // table included, with sizes and checksums fixed afterwards.
  if (choice < 14 && Split(data, size, &json, &weights)) {
    std::string& part = choice < 12 ? json : weights;
    if (choice < 6 && MutateJsonTree(&json, seed)) {
      std::vector<std::uint8_t> out = Assemble(json, weights);
      if (out.size() <= max_size) {
        std::memcpy(data, out.data(), out.size());
        return out.size();
      }
    }
    std::size_t len = part.size();
    const std::size_t cap = len * 2 + 256;
    part.resize(cap);
    len = LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(part.data()), len, cap);
    part.resize(len);
    std::vector<std::uint8_t> out = Assemble(json, weights);
    if (out.size() <= max_size) {
      std::memcpy(data, out.data(), out.size());
      return out.size();
    }
  }
  std::size_t n = LLVMFuzzerMutate(data, size, max_size);
  FixChecksums(data, n);
  return n;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::ScratchDir() + "/model.kiln";
  ++g_stats.inputs;
  if (PassesContainerChecks(data, size)) ++g_stats.c[0];
  kiln_fuzz::WriteBytes(path, data, size);
  kiln::LoadOptions opts;
  opts.threads = 1;
  // The seeds' external weights (tests/fuzz/make_seeds.py), read only.
  static const std::string weight_dir = [] {
    const char* e = std::getenv("KILN_FUZZ_WEIGHT_DIR");
    return e ? std::string(e) : kiln_fuzz::ScratchDir() + "/weight";
  }();
  opts.weight_dir = weight_dir;
  auto model = kiln::Model::Load(path, opts);
  if (!model.ok()) return 0;
  ++g_stats.c[1];
  if (kiln_fuzz::RunOnZeros(**model)) ++g_stats.c[2];
  return 0;
}
