// libFuzzer target: a weight store's meta.json. The input becomes meta.json
// of a store that holds a fixed set of files (one right, one damaged
// content-named file, a combined file); kiln::weights::ReadMeta parses it and,
// when it parses, StoreWeights stores two known blobs into that store (mode 1
// or 2). Whatever meta.json says, the records returned must point at bytes
// equal to the blobs: a store must never record a reference to wrong bytes
// (set KILN_FUZZ_META_STORE_CHECK=0 to only look for crashes).
//
// The blobs and file names are mirrored in tests/fuzz/make_seeds.py.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "weights/sha256.h"
#include "weights/weight_dir.h"

namespace {

kiln_fuzz::Stats g_stats{"meta"};
bool g_check = true;

std::vector<std::uint8_t> BlobA() {
  std::vector<std::uint8_t> b(1000);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 % 251);
  return b;
}
std::vector<std::uint8_t> BlobB() {
  std::vector<std::uint8_t> b(100);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>((i * 13 + 5) % 256);
  return b;
}

kiln::HostTensorPtr AsTensor(const std::vector<std::uint8_t>& b) {
  auto t = std::make_shared<kiln::HostTensor>(kiln::DType::kUInt8, kiln::Shape{static_cast<std::int64_t>(b.size())});
  std::memcpy(t->mutable_data(), b.data(), b.size());
  return t;
}

// The store before each input: weight_<sha(A)> (right), weight_<sha(B)> with
// one byte flipped, m_weight_combined = A at 0, B at 1024 (512-aligned).
void ResetStore(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  const auto a = BlobA(), b = BlobB();
  const std::string ha = kiln::weights::Sha256Hex(a.data(), a.size());
  const std::string hb = kiln::weights::Sha256Hex(b.data(), b.size());
  kiln_fuzz::WriteBytes(dir + "/weight_" + ha, a.data(), a.size());
  auto bad = b;
  bad[17] ^= 0x40;
  kiln_fuzz::WriteBytes(dir + "/weight_" + hb, bad.data(), bad.size());
  std::vector<std::uint8_t> comb(1024 + b.size(), 0);
  std::memcpy(comb.data(), a.data(), a.size());
  std::memcpy(comb.data() + 1024, b.data(), b.size());
  kiln_fuzz::WriteBytes(dir + "/m_weight_combined", comb.data(), comb.size());
}

bool RangeEquals(const std::string& path, std::uint64_t offset, const std::vector<std::uint8_t>& want) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  f.seekg(static_cast<std::streamoff>(offset));
  std::vector<char> got(want.size());
  f.read(got.data(), static_cast<std::streamsize>(got.size()));
  return f && std::memcmp(got.data(), want.data(), want.size()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* e = std::getenv("KILN_FUZZ_META_STORE_CHECK");
  g_check = !(e && std::string(e) == "0");
  g_stats.names[0] = "parsed";
  g_stats.names[1] = "stored";
  kiln_fuzz::InitStats(&g_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = kiln_fuzz::ScratchDir() + "/store";
  ++g_stats.inputs;
  ResetStore(dir);
  kiln_fuzz::WriteBytes(dir + "/meta.json", data, size);
  auto meta = kiln::weights::ReadMeta(dir);
  if (!meta.ok()) return 0;
  ++g_stats.c[0];
  const std::vector<std::vector<std::uint8_t>> blobs = {BlobA(), BlobB()};
  kiln::weights::StoreOptions so;
  so.mode = 1 + static_cast<int>(size % 2);
  so.model_name = "m";
  so.writer_threads = 1;
  auto recs = kiln::weights::StoreWeights(dir, {AsTensor(blobs[0]), AsTensor(blobs[1])}, so);
  if (!recs.ok()) return 0;
  ++g_stats.c[1];
  if (!g_check) return 0;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    const auto& r = (*recs)[i];
    if (r.length != blobs[i].size() || !RangeEquals(dir + "/" + r.location, r.offset, blobs[i])) {
      std::fprintf(stderr,
                   "fuzz_meta: StoreWeights (mode %d) recorded blob %zu at '%s' offset %llu length %llu, "
                   "which does not hold its bytes\n",
                   so.mode, i, r.location.c_str(), static_cast<unsigned long long>(r.offset),
                   static_cast<unsigned long long>(r.length));
      std::abort();
    }
  }
  return 0;
}
