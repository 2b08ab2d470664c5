// External weights: the weight directory (StoreWeights / ReadMeta /
// MigrateWeights), and loading (WeightManager through Model and Session):
// map, chunked copy, user memory, verification, session sharing, unload
// order, and locations that try to leave the weight directory. Everything
// runs on real files in a temporary directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "test_util.h"
#include "weights/sha256.h"
#include "weights/weight_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using weights::StoreOptions;
using weights::StoreStats;
using weights::WeightRef;

// ---- helpers -----------------------------------------------------------------

HostTensorPtr Blob(const std::string& bytes) {
  auto t = std::make_shared<HostTensor>(DType::kUInt8, Shape{static_cast<std::int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t->mutable_data(), bytes.data(), bytes.size());
  return t;
}

// `n` pseudo-random bytes (distinct seeds give distinct contents).
std::string RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void WriteAll(const fs::path& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::string Slice(const fs::path& p, std::uint64_t off, std::uint64_t len) {
  std::string all = ReadAll(p);
  if (off > all.size() || len > all.size() - off) return "<out of range>";
  return all.substr(off, len);
}

std::set<std::string> FilesIn(const fs::path& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

int CountPrefix(const fs::path& dir, const std::string& prefix) {
  int n = 0;
  for (auto& f : FilesIn(dir)) n += f.rfind(prefix, 0) == 0;
  return n;
}

ino_t Inode(const fs::path& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

Result<std::vector<WeightRef>> Store(const fs::path& dir, const std::vector<std::string>& contents, int mode,
                                        StoreStats* stats = nullptr, const std::string& model_name = "m",
                                        int threads = 4) {
  std::vector<HostTensorPtr> blobs;
  for (auto& c : contents) blobs.push_back(Blob(c));
  StoreOptions o;
  o.mode = mode;
  o.model_name = model_name;
  o.writer_threads = threads;
  return weights::StoreWeights(dir.string(), blobs, o, stats);
}

// Every meta.json entry is well formed and, where its file covers its range,
// holds exactly the bytes its hash names. Entries whose file is gone or too
// short are tolerated only with `allow_absent` (a store must prune or rewrite
// them before relying on them).
void ExpectMetaConsistent(const fs::path& dir, bool allow_absent = false) {
  auto meta = weights::ReadMeta(dir.string());
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  for (auto& [h, r] : meta.value()) {
    EXPECT_EQ(h, r.sha256);
    std::error_code ec;
    const auto size = fs::file_size(dir / r.location, ec);
    const bool present = !ec && r.offset <= size && r.length <= size - r.offset;
    if (!present) {
      EXPECT_TRUE(allow_absent) << "meta.json entry " << h << " -> " << r.location << " [" << r.offset << ", +"
                                << r.length << ") is not backed by its file";
      continue;
    }
    const std::string bytes = Slice(dir / r.location, r.offset, r.length);
    EXPECT_EQ(weights::Sha256Hex(bytes.data(), bytes.size()), h)
        << "meta.json entry " << r.location << " [" << r.offset << ", +" << r.length << ") holds other bytes";
  }
}

// Each record names bytes equal to `contents[i]`.
void ExpectRecordsHold(const fs::path& dir, const std::vector<WeightRef>& recs,
                       const std::vector<std::string>& contents) {
  ASSERT_EQ(recs.size(), contents.size());
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].length, contents[i].size()) << i;
    EXPECT_EQ(recs[i].sha256, weights::Sha256Hex(contents[i].data(), contents[i].size())) << i;
    EXPECT_TRUE(Slice(dir / recs[i].location, recs[i].offset, recs[i].length) == contents[i])
        << "record " << i << " (" << recs[i].location << " @" << recs[i].offset << ") holds other bytes";
  }
}

// ---- SHA-256 and naming --------------------------------------------------------

// FIPS 180-2 appendix B / NIST CSRC example vectors for SHA-256.
const char* kAbc = "abc";
const char* kAbcDigest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
const char* kTwoBlock = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
const char* kTwoBlockDigest = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
const char* kMillionADigest = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
const char* kEmptyDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(WeightSha256, FipsTestVectors) {
  EXPECT_EQ(weights::Sha256Hex(kAbc, 3), kAbcDigest);
  EXPECT_EQ(weights::Sha256Hex(kTwoBlock, std::strlen(kTwoBlock)), kTwoBlockDigest);
  const std::string million(1000000, 'a');
  EXPECT_EQ(weights::Sha256Hex(million.data(), million.size()), kMillionADigest);
  EXPECT_EQ(weights::Sha256Hex("", 0), kEmptyDigest);
  EXPECT_TRUE(weights::IsSha256Hex(kAbcDigest));
  EXPECT_FALSE(weights::IsSha256Hex(std::string(kAbcDigest).substr(1)));
  EXPECT_FALSE(weights::IsSha256Hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
}

TEST(WeightDir, Mode1FilesAreNamedBySha256OfTheRawBytes) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  StoreStats st;
  auto recs = Store(dir, {kAbc, kTwoBlock, std::string(1000000, 'a')}, 1, &st);
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  const char* digests[] = {kAbcDigest, kTwoBlockDigest, kMillionADigest};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(recs.value()[i].sha256, digests[i]);
    EXPECT_EQ(recs.value()[i].location, std::string("weight_") + digests[i]);
    EXPECT_EQ(recs.value()[i].offset, 0u);
  }
  EXPECT_EQ(ReadAll(dir / (std::string("weight_") + kAbcDigest)), "abc");
  EXPECT_EQ(ReadAll(dir / (std::string("weight_") + kMillionADigest)), std::string(1000000, 'a'));
  EXPECT_EQ(st.weights, 3u);
  EXPECT_EQ(st.unique, 3u);
  EXPECT_EQ(st.written, 3u);
  EXPECT_EQ(st.bytes_written, 3u + 56u + 1000000u);
  // Only the weights, the index and its lock; no temporaries left behind.
  EXPECT_EQ(FilesIn(dir), (std::set<std::string>{std::string("weight_") + kAbcDigest,
                                                  std::string("weight_") + kTwoBlockDigest,
                                                  std::string("weight_") + kMillionADigest, "meta.json",
                                                  "meta.json.lock"}));
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, MetaJsonFormatMatchesRecords) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  auto r1 = Store(dir, {kAbc, RandomBytes(700, 1)}, 1);
  ASSERT_TRUE(r1.ok());
  auto r2 = Store(dir, {RandomBytes(10, 2), RandomBytes(600, 3)}, 2, nullptr, "net");
  ASSERT_TRUE(r2.ok());
  auto j = nlohmann::json::parse(ReadAll(dir / "meta.json"));
  EXPECT_EQ(j.at("format"), "kiln-weights");
  EXPECT_EQ(j.at("version"), 1);
  ASSERT_EQ(j.at("weights").size(), 4u);
  for (const auto* rs : {&r1.value(), &r2.value()}) {
    for (const WeightRef& r : *rs) {
      const auto& e = j.at("weights").at(r.sha256);
      EXPECT_EQ(e.at("file"), r.location);
      EXPECT_EQ(e.at("offset").get<std::uint64_t>(), r.offset);
      EXPECT_EQ(e.at("length").get<std::uint64_t>(), r.length);
    }
  }
  EXPECT_EQ(r2.value()[0].location, "net_weight_combined");
  auto meta = weights::ReadMeta(dir.string());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta.value().size(), 4u);
  EXPECT_EQ(meta.value().at(kAbcDigest).location, std::string("weight_") + kAbcDigest);
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, ReadMetaOfDirectoryWithoutIndexIsEmpty) {
  test::TempDir tmp;
  auto meta = weights::ReadMeta(tmp.file("nothing_here"));
  ASSERT_TRUE(meta.ok());
  EXPECT_TRUE(meta.value().empty());
}

// A meta.json that is not a kiln-weights index at all is refused naming the
// file, and a compile does not clobber it.
TEST(WeightDir, MalformedMetaJsonIsRejectedNamingTheFile) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  fs::create_directories(dir);
  const std::vector<std::string> bad = {
      "{not json",
      "[1, 2]",
      R"({"format": "something-else", "version": 1, "weights": {}})",
      R"({"format": "kiln-weights", "version": 2, "weights": {}})",
      R"({"format": "kiln-weights", "version": 1, "weights": [1]})",
      R"({"format": "kiln-weights", "version": 1})",
  };
  for (const std::string& text : bad) {
    WriteAll(dir / "meta.json", text);
    auto meta = weights::ReadMeta(dir.string());
    ASSERT_FALSE(meta.ok()) << text;
    EXPECT_EQ(meta.status().code(), StatusCode::kCorrupt) << text;
    EXPECT_NE(meta.status().message().find("meta.json"), std::string::npos) << meta.status().ToString();
    auto recs = Store(dir, {kAbc}, 1);
    ASSERT_FALSE(recs.ok());
    EXPECT_NE(recs.status().message().find("meta.json"), std::string::npos);
    EXPECT_EQ(ReadAll(dir / "meta.json"), text);
  }
}

// Entries of the wrong form are dropped with a warning naming them, never
// used; a compile rewrites the index without them.
TEST(WeightDir, InvalidMetaEntriesAreDroppedWithAWarning) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  ASSERT_TRUE(Store(dir, {kAbc}, 2, nullptr, "m").ok());
  const std::string h = kAbcDigest, z(64, '0');
  auto entry = [](const std::string& key, const std::string& body) { return "\"" + key + "\": " + body; };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {entry("nothex", R"({"file": "m_weight_combined", "offset": 0, "length": 3})"), "nothex"},
      {entry(z, R"({"file": "../outside", "offset": 0, "length": 3})"), "../outside"},
      {entry(z, R"({"file": "/etc/passwd", "offset": 0, "length": 3})"), "/etc/passwd"},
      {entry(z, R"({"file": "meta.json", "offset": 0, "length": 3})"), "meta.json"},
      {entry(z, R"({"file": "../x_weight_combined", "offset": 0, "length": 3})"), "../x_weight_combined"},
      {entry(z, R"({"file": "m_weight_combined", "offset": -512, "length": 3})"), "non-negative"},
      {entry(z, R"({"file": "m_weight_combined", "offset": 100, "length": 3})"), "not a multiple of 512"},
      {entry(z, R"({"file": "m_weight_combined", "offset": 18446744073709551104, "length": 3})"), "overflows"},
      {entry(z, R"({"file": "m_weight_combined", "offset": 0, "length": 0})"), "length is 0"},
      {entry(z, R"({"file": "weight_)" + h + R"(", "offset": 0, "length": 3})"), "can only hold"},
      {entry(z, R"({"file": 7, "offset": 0, "length": 3})"), "\"file\""},
      {entry(z, R"("str")"), "not an object"},
  };
  const std::string good = entry(h, R"({"file": "m_weight_combined", "offset": 0, "length": 3})");
  for (auto& [e, needle] : bad) {
    const std::string text = R"({"format": "kiln-weights", "version": 1, "weights": {)" + good + ", " + e + "}}";
    WriteAll(dir / "meta.json", text);
    std::vector<std::string> warnings;
    auto meta = weights::ReadMeta(dir.string(), &warnings);
    ASSERT_TRUE(meta.ok()) << meta.status().ToString();
    EXPECT_EQ(meta.value().size(), 1u) << e;
    EXPECT_TRUE(meta.value().count(h)) << e;
    ASSERT_EQ(warnings.size(), 1u) << e;
    EXPECT_NE(warnings[0].find(needle), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("meta.json"), std::string::npos) << warnings[0];
    StoreStats st;
    auto recs = Store(dir, {kAbc, "xyz"}, 2, &st, "m");
    ASSERT_TRUE(recs.ok()) << recs.status().ToString();
    EXPECT_EQ(st.reused, 1u);
    EXPECT_FALSE(st.warnings.empty());
    ExpectRecordsHold(dir, recs.value(), {kAbc, "xyz"});
    std::vector<std::string> after;
    ASSERT_TRUE(weights::ReadMeta(dir.string(), &after).ok());
    EXPECT_TRUE(after.empty()) << "the dropped entry survived: " << after[0];
    ExpectMetaConsistent(dir);
  }
}

TEST(WeightDir, InvalidModeIsRejected) {
  test::TempDir tmp;
  for (int mode : {0, 3, -1}) {
    auto recs = Store(tmp.file("w"), {kAbc}, mode);
    ASSERT_FALSE(recs.ok());
    EXPECT_EQ(recs.status().code(), StatusCode::kInvalidArgument);
  }
}

// ---- dedup -----------------------------------------------------------------------

TEST(WeightDir, DedupWithinOneModel) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir tmp;
    const fs::path dir = tmp.file("w");
    const std::string a = RandomBytes(1000, 1), b = RandomBytes(1000, 2), c = RandomBytes(10, 3);
    StoreStats st;
    auto recs = Store(dir, {a, b, a, c, b}, mode, &st);
    ASSERT_TRUE(recs.ok()) << recs.status().ToString();
    EXPECT_EQ(st.weights, 5u);
    EXPECT_EQ(st.unique, 3u);
    EXPECT_EQ(st.written, 3u);
    EXPECT_EQ(st.bytes_written, 2010u);
    EXPECT_EQ(st.reused, 0u);
    const auto& r = recs.value();
    EXPECT_EQ(r[0].location, r[2].location);
    EXPECT_EQ(r[0].offset, r[2].offset);
    EXPECT_EQ(r[1].offset, r[4].offset);
    ExpectRecordsHold(dir, r, {a, b, a, c, b});
    if (mode == 1) {
      EXPECT_EQ(CountPrefix(dir, "weight_"), 3);
    }
    if (mode == 2) {
      EXPECT_EQ(CountPrefix(dir, "m_weight_combined"), 1);
      // 3 distinct blobs, each padded to 512: the duplicates take no room.
      EXPECT_EQ(fs::file_size(dir / "m_weight_combined"), 1024u + 1024u + 512u);
    }
    auto meta = weights::ReadMeta(dir.string());
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(meta.value().size(), 3u);
  }
}

TEST(WeightDir, DedupAcrossTwoModelsInOneDirectoryMode1) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(4096, 1), b = RandomBytes(4096, 2), c = RandomBytes(100, 3);
  StoreStats s1, s2;
  auto r1 = Store(dir, {a, b}, 1, &s1, "first");
  ASSERT_TRUE(r1.ok());
  const fs::path b_file = dir / r1.value()[1].location;
  const ino_t b_inode = Inode(b_file);
  const auto b_mtime = fs::last_write_time(b_file);
  auto r2 = Store(dir, {b, c}, 1, &s2, "second");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(s2.unique, 2u);
  EXPECT_EQ(s2.written, 1u);
  EXPECT_EQ(s2.reused, 1u);
  EXPECT_EQ(s2.bytes_written, 100u);
  EXPECT_EQ(r2.value()[0].location, r1.value()[1].location);
  // The shared weight was not written again (same inode, same mtime).
  EXPECT_EQ(Inode(b_file), b_inode);
  EXPECT_EQ(fs::last_write_time(b_file), b_mtime);
  EXPECT_EQ(CountPrefix(dir, "weight_"), 3);
  ExpectRecordsHold(dir, r2.value(), {b, c});
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, DedupAcrossTwoModelsInOneDirectoryMode2) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(3000, 1), b = RandomBytes(3000, 2), c = RandomBytes(100, 3);
  StoreStats s2;
  auto r1 = Store(dir, {a, b}, 2, nullptr, "first");
  ASSERT_TRUE(r1.ok());
  const auto first_size = fs::file_size(dir / "first_weight_combined");
  const std::string first_bytes = ReadAll(dir / "first_weight_combined");
  auto r2 = Store(dir, {b, c}, 2, &s2, "second");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(s2.written, 1u);
  EXPECT_EQ(s2.reused, 1u);
  // b stays where the first model put it; only c goes to the second file.
  EXPECT_EQ(r2.value()[0].location, "first_weight_combined");
  EXPECT_EQ(r2.value()[0].offset, r1.value()[1].offset);
  EXPECT_EQ(r2.value()[1].location, "second_weight_combined");
  EXPECT_EQ(fs::file_size(dir / "first_weight_combined"), first_size);
  EXPECT_EQ(ReadAll(dir / "first_weight_combined"), first_bytes);
  EXPECT_EQ(fs::file_size(dir / "second_weight_combined"), 512u);
  ExpectRecordsHold(dir, r2.value(), {b, c});
  ExpectMetaConsistent(dir);
  // Storing the same model again writes nothing.
  StoreStats s3;
  auto r3 = Store(dir, {a, b, c}, 2, &s3, "first");
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(s3.written, 0u);
  EXPECT_EQ(s3.reused, 3u);
  EXPECT_EQ(fs::file_size(dir / "first_weight_combined"), first_size);
}

TEST(WeightDir, Mode1And2MixInOneDirectory) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(100, 1), b = RandomBytes(200, 2), c = RandomBytes(300, 3);
  StoreStats s;
  auto r1 = Store(dir, {a}, 1);
  ASSERT_TRUE(r1.ok());
  auto r2 = Store(dir, {a, b}, 2, &s);  // a is reused from its mode-1 file
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(s.written, 1u);
  EXPECT_EQ(r2.value()[0].location, r1.value()[0].location);
  EXPECT_EQ(r2.value()[1].location, "m_weight_combined");
  auto r3 = Store(dir, {b, c}, 1, &s);  // b is reused from the combined file
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(s.written, 1u);
  EXPECT_EQ(r3.value()[0].location, "m_weight_combined");
  EXPECT_EQ(r3.value()[1].location, "weight_" + weights::Sha256Hex(c.data(), c.size()));
  ExpectRecordsHold(dir, r3.value(), {b, c});
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, ThreadedStoresIntoOneDirectoryWriteEachWeightOnce) {
  // Four "compiles" at once, sharing half their weights, in both modes.
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir tmp;
    const fs::path dir = tmp.file("w");
    std::vector<std::vector<std::string>> models(4);
    std::set<std::string> distinct;
    for (int m = 0; m < 4; ++m) {
      for (int k = 0; k < 6; ++k) {
        // weights 0..2 are shared by all models, 3..5 are the model's own
        const unsigned seed = k < 3 ? k : 100 * (m + 1) + k;
        models[m].push_back(RandomBytes(5000 + 37 * k, seed));
        distinct.insert(models[m].back());
      }
    }
    std::vector<Result<std::vector<WeightRef>>> out(
        4, Result<std::vector<WeightRef>>(Error(StatusCode::kInternal, "not run")));
    std::vector<StoreStats> stats(4);
    std::vector<std::thread> th;
    for (int m = 0; m < 4; ++m) {
      th.emplace_back([&, m] { out[m] = Store(dir, models[m], mode, &stats[m], "model" + std::to_string(m), 2); });
    }
    for (auto& t : th) t.join();
    std::uint64_t written = 0;
    for (int m = 0; m < 4; ++m) {
      ASSERT_TRUE(out[m].ok()) << out[m].status().ToString();
      ExpectRecordsHold(dir, out[m].value(), models[m]);
      written += stats[m].written;
    }
    EXPECT_EQ(written, distinct.size());
    auto meta = weights::ReadMeta(dir.string());
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(meta.value().size(), distinct.size());
    ExpectMetaConsistent(dir);
    for (auto& f : FilesIn(dir)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
  }
}

// ---- mode 2 layout -----------------------------------------------------------------

TEST(WeightDir, Mode2OffsetsAre512AlignedAndAppendsKeepOldBytes) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  std::vector<std::string> first = {RandomBytes(1, 1), RandomBytes(513, 2), RandomBytes(1000, 3),
                                    RandomBytes(512, 4), RandomBytes(7, 5)};
  auto r1 = Store(dir, first, 2, nullptr, "net");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto& r : r1.value()) {
    EXPECT_EQ(r.location, "net_weight_combined");
    EXPECT_EQ(r.offset % 512, 0u) << r.offset;
    ranges.emplace_back(r.offset, r.offset + r.length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  ExpectRecordsHold(dir, r1.value(), first);
  const std::string before = ReadAll(dir / "net_weight_combined");
  EXPECT_EQ(before.size() % 512, 0u);
  // Padding is zeros.
  for (auto& r : r1.value()) {
    const std::uint64_t end = r.offset + r.length, pad_end = (end + 511) / 512 * 512;
    for (std::uint64_t p = end; p < pad_end; ++p) {
      bool overlaps = false;
      for (auto& [s, e] : ranges) overlaps |= p >= s && p < e;
      if (!overlaps) {
        EXPECT_EQ(before[p], '\0') << p;
      }
    }
  }
  // A second model with the same name appends, aligned, past the old data.
  std::vector<std::string> second = {RandomBytes(3, 6), first[1], RandomBytes(2000, 7)};
  StoreStats st;
  auto r2 = Store(dir, second, 2, &st, "net");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(st.written, 2u);
  for (auto& r : r2.value()) EXPECT_EQ(r.offset % 512, 0u) << r.offset;
  EXPECT_GE(r2.value()[0].offset, before.size());
  EXPECT_EQ(r2.value()[1].offset, r1.value()[1].offset);
  EXPECT_EQ(ReadAll(dir / "net_weight_combined").substr(0, before.size()), before);
  ExpectRecordsHold(dir, r2.value(), second);
  ExpectMetaConsistent(dir);
}

// ---- deleted / truncated files -----------------------------------------------------

TEST(WeightDir, DeletedMode1FileIsWrittenAgain) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(1000, 1), b = RandomBytes(1000, 2);
  auto r1 = Store(dir, {a, b}, 1);
  ASSERT_TRUE(r1.ok());
  fs::remove(dir / r1.value()[0].location);
  StoreStats st;
  auto r2 = Store(dir, {a, b}, 1, &st);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(st.written, 1u);
  EXPECT_EQ(st.reused, 1u);
  ExpectRecordsHold(dir, r2.value(), {a, b});
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, TruncatedMode1FileIsWrittenAgain) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(1000, 1);
  auto r1 = Store(dir, {a}, 1);
  ASSERT_TRUE(r1.ok());
  fs::resize_file(dir / r1.value()[0].location, 10);
  StoreStats st;
  auto r2 = Store(dir, {a}, 1, &st);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(st.written, 1u);
  ExpectRecordsHold(dir, r2.value(), {a});
}

TEST(WeightDir, DeletedCombinedFileIsWrittenAgain) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(1000, 1), b = RandomBytes(1000, 2);
  ASSERT_TRUE(Store(dir, {a, b}, 2).ok());
  fs::remove(dir / "m_weight_combined");
  StoreStats st;
  auto r2 = Store(dir, {a, b}, 2, &st);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(st.written, 2u);
  ExpectRecordsHold(dir, r2.value(), {a, b});
  ExpectMetaConsistent(dir);
}

// The combined file is deleted and another model is compiled into a fresh
// file of that name: the old entries still name the file at their old offsets,
// which now hold other bytes. They must not be trusted afterwards.
TEST(WeightDir, StaleEntriesOfDeletedCombinedFileAreNotReused) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(100, 1), b = RandomBytes(100, 2), c = RandomBytes(4000, 3);
  auto r1 = Store(dir, {a, b}, 2);  // a and b at 0 and 512
  ASSERT_TRUE(r1.ok());
  fs::remove(dir / "m_weight_combined");
  auto r2 = Store(dir, {c}, 2);     // c at [0, 4000) of a fresh file
  ASSERT_TRUE(r2.ok());
  ExpectRecordsHold(dir, r2.value(), {c});
  ExpectMetaConsistent(dir, /*allow_absent=*/true);
  auto r3 = Store(dir, {a, b}, 2);
  ASSERT_TRUE(r3.ok());
  ExpectRecordsHold(dir, r3.value(), {a, b});
  ExpectMetaConsistent(dir, true);
}

// Truncating a combined file and appending to it must not leave entries of the
// cut-off weights pointing at the appended bytes.
TEST(WeightDir, StaleEntriesOfTruncatedCombinedFileAreNotReused) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(100, 1), b = RandomBytes(100, 2), c = RandomBytes(100, 3),
                    d = RandomBytes(1000, 4);
  auto r1 = Store(dir, {a, b, c}, 2);  // a @0, b @512, c @1024
  ASSERT_TRUE(r1.ok());
  fs::resize_file(dir / "m_weight_combined", 600);  // b cut, c gone
  auto r2 = Store(dir, {d}, 2);
  ASSERT_TRUE(r2.ok());
  ExpectRecordsHold(dir, r2.value(), {d});
  ExpectMetaConsistent(dir, true);
  auto r3 = Store(dir, {a, b, c}, 2);
  ASSERT_TRUE(r3.ok());
  ExpectRecordsHold(dir, r3.value(), {a, b, c});
  ExpectMetaConsistent(dir, true);
}

// ---- migration from a temporary directory -------------------------------------------

TEST(WeightDir, MigrateMovesWeightsAndRemovesTheTemporaryDirectory) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir tmp;
    const fs::path from = tmp.file("tmp_weight_1"), to = tmp.file("out/weight");
    const std::vector<std::string> w = {RandomBytes(1000, 1), RandomBytes(50, 2)};
    auto recs = Store(from, w, mode);
    ASSERT_TRUE(recs.ok());
    const ino_t moved = Inode(from / recs.value()[0].location);
    StoreOptions o;
    o.mode = mode;
    o.model_name = "m";
    auto out = weights::MigrateWeights(from.string(), to.string(), recs.value(), o);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_FALSE(fs::exists(from));
    ExpectRecordsHold(to, out.value(), w);
    ExpectMetaConsistent(to);
    // Same file system: renamed, not copied.
    EXPECT_EQ(Inode(to / out.value()[0].location), moved);
    for (auto& f : FilesIn(to)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
  }
}

TEST(WeightDir, MigrateMergesWithWeightsAlreadyThere) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir tmp;
    const fs::path from = tmp.file("tmp_weight_1"), to = tmp.file("out/weight");
    const std::string a = RandomBytes(1000, 1), b = RandomBytes(1000, 2), c = RandomBytes(1000, 3);
    ASSERT_TRUE(Store(to, {a, b}, mode, nullptr, "other").ok());
    auto recs = Store(from, {b, c}, mode, nullptr, "m");
    ASSERT_TRUE(recs.ok());
    StoreOptions o;
    o.mode = mode;
    o.model_name = "m";
    auto out = weights::MigrateWeights(from.string(), to.string(), recs.value(), o);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_FALSE(fs::exists(from));
    ExpectRecordsHold(to, out.value(), {b, c});
    ExpectMetaConsistent(to);
    auto meta = weights::ReadMeta(to.string());
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(meta.value().size(), 3u);
    if (mode == 1) {
      EXPECT_EQ(CountPrefix(to, "weight_"), 3);
    }
  }
}

// Recompiling a changed model offline in mode 2: the output directory already
// holds <model>_weight_combined from the previous compile, with other bytes.
TEST(WeightDir, MigrateIntoDirectoryWithAnOlderCombinedFileOfTheSameName) {
  test::TempDir tmp;
  const fs::path from = tmp.file("tmp_weight_1"), to = tmp.file("out/weight");
  const std::string old1 = RandomBytes(800, 1), old2 = RandomBytes(800, 2);
  const std::string new1 = RandomBytes(800, 3), new2 = RandomBytes(900, 4);
  ASSERT_TRUE(Store(to, {old1, old2}, 2, nullptr, "m").ok());
  auto recs = Store(from, {new1, new2}, 2, nullptr, "m");
  ASSERT_TRUE(recs.ok());
  StoreOptions o;
  o.mode = 2;
  o.model_name = "m";
  auto out = weights::MigrateWeights(from.string(), to.string(), recs.value(), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectRecordsHold(to, out.value(), {new1, new2});
  ExpectMetaConsistent(to);
  EXPECT_FALSE(fs::exists(from));
}

// The output directory's combined file was deleted (meta.json kept); the new
// compile lays the same weights out at other offsets.
TEST(WeightDir, MigrateAfterCombinedFileWasDeleted) {
  test::TempDir tmp;
  const fs::path from = tmp.file("tmp_weight_1"), to = tmp.file("out/weight");
  const std::string a = RandomBytes(300, 1), b = RandomBytes(300, 2), x = RandomBytes(4000, 3);
  ASSERT_TRUE(Store(to, {a, b}, 2, nullptr, "m").ok());  // a, b at 0 and 512
  fs::remove(to / "m_weight_combined");
  ASSERT_TRUE(Store(from, {x}, 2, nullptr, "m").ok());     // x at [0, 4000)
  auto recs = Store(from, {a, b}, 2, nullptr, "m");        // a, b from 4096 on
  ASSERT_TRUE(recs.ok());
  StoreOptions o;
  o.mode = 2;
  o.model_name = "m";
  auto out = weights::MigrateWeights(from.string(), to.string(), recs.value(), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectRecordsHold(to, out.value(), {a, b});
  ExpectMetaConsistent(to, true);
}

// ---- hostile stores: names, tampering, leftovers -------------------------------------

TEST(WeightDir, ModelNamesThatLeaveTheDirectoryAreRefusedBeforeAnythingIsWritten) {
  test::TempDir tmp;
  for (const std::string& name : {std::string("../x"), std::string("a/b"), std::string(".."), std::string("a..b"),
                                 std::string("x\x01y"), std::string("x\ny"), std::string(200, 'n'),
                                 std::string("a\\b"), std::string("x\xffy"), std::string("\xc0\xaf"),
                                 std::string("/abs"), std::string("n\0ul", 4)}) {
    Status st = weights::CheckModelName(name);
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("invalid model name"), std::string::npos) << st.message();
    for (int mode : {1, 2}) {
      const fs::path dir = tmp.file("w" + std::to_string(mode));
      auto recs = Store(dir, {kAbc}, mode, nullptr, name);
      ASSERT_FALSE(recs.ok()) << name;
      EXPECT_FALSE(fs::exists(dir)) << "written for model name " << name;
    }
  }
  EXPECT_TRUE(weights::CheckModelName(std::string("\x01")).message().find("\\x01") != std::string::npos);
  for (const std::string& name : {std::string("m"), std::string("resnet-18.v2"), std::string("a b"),
                                  std::string("модель"), std::string("x_weight_combined"), std::string(128, 'n')}) {
    EXPECT_TRUE(weights::CheckModelName(name).ok()) << name;
  }
  EXPECT_TRUE(weights::IsWeightFileName(std::string("weight_") + kAbcDigest));
  EXPECT_TRUE(weights::IsWeightFileName("m_weight_combined"));
  for (const char* f : {"meta.json", "weight_abc", "../m_weight_combined", "_weight_combined", "a/b_weight_combined",
                        "meta.json.lock"}) {
    EXPECT_FALSE(weights::IsWeightFileName(f)) << f;
  }
}

TEST(WeightDir, FlippedByteInASingleFileIsRepairedAtTheNextStore) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(5000, 1), b = RandomBytes(700, 2);
  ASSERT_TRUE(Store(dir, {a, b}, 1).ok());
  const fs::path fa = dir / ("weight_" + weights::Sha256Hex(a.data(), a.size()));
  std::string bytes = ReadAll(fa);
  bytes[1234] ^= 1;
  WriteAll(fa, bytes);
  for (int mode : {1, 2}) {
    StoreStats st;
    auto recs = Store(dir, {a, b}, mode, &st);
    ASSERT_TRUE(recs.ok()) << recs.status().ToString();
    EXPECT_EQ(st.repaired, mode == 1 ? 1u : 0u) << mode;
    EXPECT_EQ(st.written, mode == 1 ? 1u : 0u) << mode;
    ExpectRecordsHold(dir, recs.value(), {a, b});
    ExpectMetaConsistent(dir);
    EXPECT_EQ(ReadAll(fa), a);
  }
}

TEST(WeightDir, FlippedByteInACombinedFileIsNeverReusedAndOtherBytesStay) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(5000, 1), b = RandomBytes(700, 2);
  auto first = Store(dir, {a, b}, 2, nullptr, "m");
  ASSERT_TRUE(first.ok());
  const fs::path f = dir / "m_weight_combined";
  std::string bytes = ReadAll(f);
  bytes[first.value()[0].offset + 10] ^= 0x80;
  WriteAll(f, bytes);
  StoreStats st;
  auto recs = Store(dir, {a, b}, 2, &st, "m");
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  EXPECT_EQ(st.repaired, 1u);
  EXPECT_EQ(st.written, 1u);
  EXPECT_EQ(st.reused, 1u);
  EXPECT_NE(recs.value()[0].offset, first.value()[0].offset);
  EXPECT_EQ(recs.value()[1].offset, first.value()[1].offset);
  ExpectRecordsHold(dir, recs.value(), {a, b});
  ExpectMetaConsistent(dir);
  // An entry edited to point at another weight's range is dropped, not used,
  // and that range is not touched.
  auto j = nlohmann::json::parse(ReadAll(dir / "meta.json"));
  const std::string ha = weights::Sha256Hex(a.data(), a.size());
  j["weights"][ha]["offset"] = recs.value()[1].offset;
  WriteAll(dir / "meta.json", j.dump());
  const std::string before = ReadAll(f);
  auto again = Store(dir, {a, b}, 2, &st, "m");
  ASSERT_TRUE(again.ok());
  ExpectRecordsHold(dir, again.value(), {a, b});
  EXPECT_EQ(ReadAll(f).substr(0, before.size()), before);
  ExpectMetaConsistent(dir);
}

// Hashing is paid once per file state: a warm store reads nothing; a file
// whose stamp changed (even to identical bytes) is hashed again.
TEST(WeightDir, VerifiedStampsKeepAWarmStoreFromRehashing) {
  test::TempDir tmp;
  for (int mode : {1, 2}) {
    const fs::path dir = tmp.file("w" + std::to_string(mode));
    const std::string a = RandomBytes(5000, 1), b = RandomBytes(700, 2);
    StoreStats st;
    auto recs = Store(dir, {a, b}, mode, &st, "m");
    ASSERT_TRUE(recs.ok());
    ASSERT_TRUE(Store(dir, {a, b}, mode, &st, "m").ok());
    EXPECT_EQ(st.bytes_verified, 0u) << "fresh writes are known good";
    EXPECT_EQ(st.reused, 2u);
    const fs::path f = dir / recs.value()[0].location;
    WriteAll(f, ReadAll(f));  // same bytes, new mtime/ctime
    ASSERT_TRUE(Store(dir, {a, b}, mode, &st, "m").ok());
    EXPECT_EQ(st.bytes_verified, mode == 1 ? a.size() : a.size() + b.size()) << mode;
    EXPECT_EQ(st.written, 0u);
    // meta.json gone: files are hashed before they are adopted.
    fs::remove(dir / "meta.json");
    ASSERT_TRUE(Store(dir, {a, b}, mode, &st, "m").ok());
    EXPECT_EQ(st.bytes_verified, mode == 1 ? a.size() + b.size() : 0u) << mode;
    ExpectMetaConsistent(dir);
  }
}

TEST(WeightDir, NonRegularWeightFilesAreRefusedNamingThem) {
  test::TempDir tmp;
  const std::string a = RandomBytes(600, 1);
  const std::string single = "weight_" + weights::Sha256Hex(a.data(), a.size());
  struct Planted {
    std::string file;
    int mode;
    bool fifo;
    const char* kind;
  };
  for (const Planted& p : {Planted{single, 1, true, "FIFO"}, Planted{single, 1, false, "directory"},
                           Planted{"m_weight_combined", 2, true, "FIFO"},
                           Planted{"m_weight_combined", 2, false, "directory"},
                           Planted{"meta.json", 1, true, "FIFO"}}) {
    const fs::path dir = tmp.file(p.file + std::to_string(p.mode) + p.kind);
    ASSERT_TRUE(Store(dir, {a}, p.mode, nullptr, "m").ok());
    fs::remove(dir / p.file);
    if (p.fifo) {
      ASSERT_EQ(mkfifo((dir / p.file).c_str(), 0644), 0);
    } else {
      fs::create_directories(dir / p.file / "sub");
    }
    auto recs = Store(dir, {a}, p.mode, nullptr, "m");
    ASSERT_FALSE(recs.ok()) << p.file;
    EXPECT_NE(recs.status().message().find(p.file), std::string::npos) << recs.status().ToString();
    EXPECT_NE(recs.status().message().find(p.kind), std::string::npos) << recs.status().ToString();
  }
}

TEST(WeightDir, StaleTemporariesOfDeadProcessesAreRemoved) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  ASSERT_TRUE(Store(dir, {kAbc}, 1).ok());
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string d = std::to_string(dead), live = std::to_string(getppid());
  const std::vector<std::string> stale = {"weight_" + std::string(kAbcDigest) + ".tmp." + d + ".0",
                                          "meta.json.tmp." + d + ".4", "m_weight_combined.tmp." + d + ".1",
                                          "meta.json.append.tmp." + d + ".0",
                                          "weight_" + std::string(kTwoBlockDigest) + ".tmp." + d + ".1403.7"};
  const std::vector<std::string> kept = {"meta.json.tmp." + live + ".0", "notes.tmp." + d + ".0",
                                         "meta.json.tmp.x.0"};
  for (auto& f : stale) WriteAll(dir / f, "partial");
  for (auto& f : kept) WriteAll(dir / f, "other");
  StoreStats st;
  ASSERT_TRUE(Store(dir, {kAbc}, 1, &st).ok());
  for (auto& f : stale) EXPECT_FALSE(fs::exists(dir / f)) << f;
  for (auto& f : kept) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(st.warnings.size(), stale.size());
}

TEST(WeightDir, InterruptedAppendIsTruncatedAwayByTheNextStore) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(700, 1), b = RandomBytes(900, 2);
  ASSERT_TRUE(Store(dir, {a}, 2, nullptr, "m").ok());
  const fs::path f = dir / "m_weight_combined";
  const auto len = fs::file_size(f);
  // What kill -9 in the middle of an append leaves: the record, bytes past it.
  WriteAll(dir / "meta.json.append", R"({"file": "m_weight_combined", "length": )" + std::to_string(len) + "}");
  { std::ofstream(f, std::ios::binary | std::ios::app) << std::string(3000, '\xee'); }
  StoreStats st;
  auto recs = Store(dir, {a, b}, 2, &st, "m");
  ASSERT_TRUE(recs.ok());
  EXPECT_EQ(recs.value()[1].offset, (len + 511) / 512 * 512) << "the append built on the garbage";
  EXPECT_FALSE(fs::exists(dir / "meta.json.append"));
  ExpectRecordsHold(dir, recs.value(), {a, b});
  // A record older than meta.json (crash after meta.json was written) does not
  // cut recorded bytes.
  WriteAll(dir / "meta.json.append", R"({"file": "m_weight_combined", "length": 0})");
  const auto full = fs::file_size(f);
  ASSERT_TRUE(Store(dir, {a, b}, 2, &st, "m").ok());
  EXPECT_EQ(fs::file_size(f), full);
  EXPECT_FALSE(fs::exists(dir / "meta.json.append"));
  ExpectMetaConsistent(dir);
}

// kill -9 after a new combined file was renamed into place but before
// meta.json recorded it: the next store removes the orphan.
TEST(WeightDir, OrphanCombinedFileOfAnInterruptedCompileIsRemoved) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(700, 1);
  ASSERT_TRUE(Store(dir, {a}, 1).ok());
  WriteAll(dir / "m_weight_combined", RandomBytes(1024, 2));
  WriteAll(dir / "meta.json.append", R"({"file": "m_weight_combined", "length": 0})");
  auto recs = Store(dir, {a, "bc"}, 2, nullptr, "m");
  ASSERT_TRUE(recs.ok());
  EXPECT_EQ(recs.value()[1].location, "m_weight_combined");
  EXPECT_EQ(recs.value()[1].offset, 0u);
  EXPECT_EQ(fs::file_size(dir / "m_weight_combined"), 512u);
  ExpectMetaConsistent(dir);
}

TEST(WeightDir, HardLinkedCombinedFileIsNotAppendedTo) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  ASSERT_TRUE(Store(dir, {RandomBytes(700, 1)}, 2, nullptr, "m").ok());
  const fs::path outside = tmp.file("outside");
  fs::create_hard_link(dir / "m_weight_combined", outside);
  const std::string before = ReadAll(outside);
  auto recs = Store(dir, {RandomBytes(900, 2)}, 2, nullptr, "m");
  ASSERT_FALSE(recs.ok());
  EXPECT_NE(recs.status().message().find("hard links"), std::string::npos) << recs.status().ToString();
  EXPECT_NE(recs.status().message().find("m_weight_combined"), std::string::npos);
  EXPECT_EQ(ReadAll(outside), before);
}

// A failed append (here: the file size limit, as a full disk would) is
// truncated back, says why, and leaves meta.json as it was.
TEST(WeightDir, FailedAppendIsTruncatedBackAndSaysWhy) {
  test::TempDir tmp;
  const fs::path dir = tmp.file("w");
  const std::string a = RandomBytes(700, 1), big = RandomBytes(1 << 20, 2);
  ASSERT_TRUE(Store(dir, {a}, 2, nullptr, "m").ok());
  const fs::path f = dir / "m_weight_combined";
  const std::string before = ReadAll(f), meta_before = ReadAll(dir / "meta.json");
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  auto recs = Store(dir, {a, big}, 2, nullptr, "m");
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(recs.ok());
  EXPECT_NE(recs.status().message().find("appending to"), std::string::npos) << recs.status().ToString();
  EXPECT_NE(recs.status().message().find(std::strerror(EFBIG)), std::string::npos) << recs.status().ToString();
  EXPECT_NE(recs.status().message().find("truncated back"), std::string::npos) << recs.status().ToString();
  EXPECT_EQ(ReadAll(f), before);
  EXPECT_EQ(ReadAll(dir / "meta.json"), meta_before);
  EXPECT_FALSE(fs::exists(dir / "meta.json.append"));
  for (auto& name : FilesIn(dir)) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
  auto ok = Store(dir, {a, big}, 2, nullptr, "m");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value()[1].offset, (before.size() + 511) / 512 * 512);
  ExpectMetaConsistent(dir);
}

// ---- loading: models with external weights ------------------------------------------

// y = relu(x @ W + b), x [2,4], W [4,3], b [3]    (relu = false: no Relu)
std::unique_ptr<ir::Graph> MatMulAddRelu(bool relu = true) {
  auto g = std::make_unique<ir::Graph>();
  g->set_name("mlp");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 4});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({4, 3}, {1, 0, 2,    //
                                                       0, 1, 0,    //
                                                       1, 1, 1,    //
                                                       0, 0, -1}));
  ir::Value* b = g->AddConstant("b", test::F32({3}, {-1, 0.5f, 2}));
  ir::Value* m = g->AddValue("m");
  ir::Value* a = g->AddValue("a");
  g->AddNode("MatMul", "matmul", {x, w}, {m});
  g->AddNode("Add", "add", {m, b}, {a});
  if (relu) {
    ir::Value* y = g->AddValue("y");
    g->AddNode("Relu", "relu", {a}, {y});
    g->outputs().push_back(y);
  } else {
    g->outputs().push_back(a);
  }
  test::SetLatestVersions(*g);
  return g;
}

const std::vector<float> kX = {1, 2, 3, 4,  //
                               -1, 0, 1, 0};
// x @ W: row 0 = [1+3, 2+3, 2+3-4] = [4, 5, 1]; row 1 = [-1+1, 1, -2+1] = [0, 1, -1]
// + b:   row 0 = [3, 5.5, 3];                    row 1 = [-1, 1.5, 1]
const std::vector<float> kNoRelu = {3, 5.5f, 3, -1, 1.5f, 1};
const std::vector<float> kRelu = {3, 5.5f, 3, 0, 1.5f, 1};
constexpr std::uint64_t kWBytes = 4 * 3 * 4, kBBytes = 3 * 4;

std::vector<float> RunModel(Model& m) {
  std::vector<float> y(6, -7);
  Status s = m.Execute({TensorRef::Of(kX.data(), {2, 4})}, {TensorRef::Of(y.data(), {2, 3})});
  EXPECT_TRUE(s.ok()) << s.ToString();
  return y;
}

// Compiles MatMulAddRelu to `kiln_path` with weights in `weight_dir`.
Result<format::CompiledModel> CompileTo(const std::string& kiln_path, int mode, const std::string& weight_dir,
                                        bool relu = true, const std::string& name = "mlp") {
  CompileOptions o;
  o.external_weight = mode;
  o.external_weight_dir = weight_dir;
  o.model_name = name;
  KILN_ASSIGN_OR_RETURN(format::CompiledModel cm, CompileGraph(MatMulAddRelu(relu), o));
  KILN_RETURN_IF_ERROR(format::WriteModelFile(cm, kiln_path));
  return cm;
}

// The external weight of `size` bytes (node empty if none).
weights::WeightRef FindWeight(const std::vector<weights::WeightRef>& ws, std::uint64_t size) {
  for (auto& w : ws) {
    if (w.length == size) return w;
  }
  return {};
}

// Which file (if any) /proc/self/maps shows mapped at `p`.
std::string MappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) {
      auto slash = line.find('/');
      return slash == std::string::npos ? "" : line.substr(slash);
    }
  }
  return "";
}

class ExternalWeightsTest : public ::testing::Test {
 protected:
  std::string kiln_file(const std::string& n = "m.kiln") const { return dir_.file(n); }
  std::string weight_dir() const { return dir_.file("weight"); }
  test::TempDir dir_;
};

TEST_F(ExternalWeightsTest, Modes012GiveIdenticalOutputs) {
  std::vector<std::vector<float>> outs;
  for (int mode : {0, 1, 2}) {
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, mode ? d.file("weight") : "");
    ASSERT_TRUE(cm.ok()) << cm.status().ToString();
    EXPECT_EQ(ListExternalWeights(*cm.value().graph).value().size(), mode ? 2u : 0u);
    for (auto lm : {WeightLoadMode::kAuto, WeightLoadMode::kMap, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
      if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
      LoadOptions lo;
      lo.weight_load_mode = lm;
      auto m = Model::Load(d.file("m.kiln"), lo);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      outs.push_back(RunModel(**m));
      EXPECT_EQ(outs.back(), kRelu);
    }
  }
}

TEST_F(ExternalWeightsTest, FileConstantsCarryTheirHashAndLocation) {
  auto cm = CompileTo(kiln_file(), 1, weight_dir());
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  auto ws = ListExternalWeights(*cm.value().graph).value();
  const weights::WeightRef w = FindWeight(ws, kWBytes);
  ASSERT_FALSE(w.node.empty());
  const std::string bytes = ReadAll(fs::path(weight_dir()) / w.location);
  ASSERT_EQ(bytes.size(), kWBytes);
  EXPECT_EQ(w.sha256, weights::Sha256Hex(bytes.data(), bytes.size()));
  EXPECT_EQ(w.location, "weight_" + w.sha256);
  const float* f = reinterpret_cast<const float*>(bytes.data());
  EXPECT_EQ(std::vector<float>(f, f + 12), (std::vector<float>{1, 0, 2, 0, 1, 0, 1, 1, 1, 0, 0, -1}));
}

TEST_F(ExternalWeightsTest, MapUsesTheFileInPlace) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
    ASSERT_TRUE(cm.ok());
    const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
    ASSERT_FALSE(w.node.empty());
    Session s;
    LoadOptions lo;
    lo.weight_load_mode = WeightLoadMode::kMap;
    auto m = s.LoadModel(d.file("m.kiln"), lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(RunModel(**m), kRelu);
    const void* p = (*m)->ConstantData(w.node);
    ASSERT_NE(p, nullptr);
    // The constant lives in a mapping of its weight file, at its offset.
    EXPECT_NE(MappingOf(p).find(w.location), std::string::npos) << MappingOf(p);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, w.offset % 4096);
    // Advised MADV_NOHUGEPAGE (common/file.h MapReadOnly: PMD-mapped page
    // cache slowed the whole process in periodic bursts).
    EXPECT_NE(test::VmFlagsOf(p).find(" nh"), std::string::npos) << test::VmFlagsOf(p);
    const WeightStats st = s.weight_stats();
    EXPECT_EQ(st.bytes_read, 0u);
    EXPECT_GT(st.bytes_mapped, 0u);
    EXPECT_EQ(st.resident_bytes, 0u);
    EXPECT_EQ(st.files_opened, mode == 1 ? 2u : 1u);
  }
}

TEST_F(ExternalWeightsTest, CopyReadsInChunksIntoDeviceMemory) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
    ASSERT_TRUE(cm.ok());
    const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
    ASSERT_FALSE(w.node.empty());
    std::uint64_t file_bytes = 0;
    for (auto& e : fs::directory_iterator(d.file("weight"))) {
      const std::string f = e.path().filename().string();
      if (f.rfind("weight_", 0) == 0 || f.find("_weight_combined") != std::string::npos) file_bytes += e.file_size();
    }
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{10} << 20}) {
      Session s;
      LoadOptions lo;
      lo.weight_load_mode = WeightLoadMode::kCopy;
      lo.weight_chunk_bytes = chunk;
      auto m = s.LoadModel(d.file("m.kiln"), lo);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ(RunModel(**m), kRelu);
      const void* p = (*m)->ConstantData(w.node);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(MappingOf(p).find("weight"), std::string::npos) << MappingOf(p);
      EXPECT_EQ(std::memcmp(p, ReadAll(fs::path(d.file("weight")) / w.location).data() + w.offset, kWBytes), 0);
      const WeightStats st = s.weight_stats();
      EXPECT_EQ(st.bytes_read, file_bytes);
      EXPECT_EQ(st.bytes_mapped, 0u);
      EXPECT_EQ(st.resident_bytes, file_bytes);
    }
  }
}

TEST_F(ExternalWeightsTest, LargeWeightCopiedInManySmallChunks) {
  // A weight bigger than many chunks (and not a multiple of the chunk size).
  auto g = std::make_unique<ir::Graph>();
  const int k = 301, n = 257;
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, k});
  g->inputs().push_back(x);
  std::vector<float> wv(static_cast<std::size_t>(k) * n);
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < n; ++j) wv[static_cast<std::size_t>(i) * n + j] = static_cast<float>((i * 7 + j * 3) % 11) - 5;
  }
  ir::Value* w = g->AddConstant("big", test::F32({k, n}, wv));
  ir::Value* y = g->AddValue("y");
  g->AddNode("MatMul", "mm", {x, w}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  CompileOptions o;
  o.external_weight = 2;
  o.external_weight_dir = weight_dir();
  auto cm = CompileGraph(std::move(g), o);
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ASSERT_TRUE(format::WriteModelFile(cm.value(), kiln_file()).ok());
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kCopy;
  lo.weight_chunk_bytes = 4096;
  auto m = Model::Load(kiln_file(), lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // x = e_i picks row i of W.
  for (int i : {0, 1, 150, 300}) {
    std::vector<float> xv(k, 0), yv(n, 0);
    xv[i] = 1;
    ASSERT_TRUE((*m)->Execute({TensorRef::Of(xv.data(), {1, k})}, {TensorRef::Of(yv.data(), {1, n})}).ok());
    EXPECT_TRUE(std::equal(yv.begin(), yv.end(), wv.begin() + static_cast<std::ptrdiff_t>(i) * n)) << i;
  }
}

TEST_F(ExternalWeightsTest, WeightDirOptionOverridesTheDefault) {
  auto cm = CompileTo(kiln_file(), 1, dir_.file("elsewhere"));
  ASSERT_TRUE(cm.ok());
  auto m = Model::Load(kiln_file(), {});  // <model dir>/weight does not exist
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  LoadOptions lo;
  lo.weight_dir = dir_.file("elsewhere");
  m = Model::Load(kiln_file(), lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(RunModel(**m), kRelu);
}

// ---- user memory ---------------------------------------------------------------------

TEST_F(ExternalWeightsTest, UserMemoryIsUsedInPlaceWithoutReadingFiles) {
  auto cm = CompileTo(kiln_file(), 2, weight_dir());
  ASSERT_TRUE(cm.ok());
  const auto ws = ListExternalWeights(*cm.value().graph).value();
  const std::string combined = "mlp_weight_combined";
  for (auto& w : ws) EXPECT_EQ(w.location, combined);
  const std::string bytes = ReadAll(fs::path(weight_dir()) / combined);
  // The caller's buffer, already filled; the directory is gone so nothing can
  // be read from it.
  std::vector<std::uint8_t> user(bytes.begin(), bytes.end());
  fs::remove_all(weight_dir());
  LoadOptions lo;
  lo.SetExternalWeightAddress(combined, user.data(), user.size());
  Session s;
  auto m = s.LoadModel(kiln_file(), lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (auto& w : ws) {
    EXPECT_EQ((*m)->ConstantData(w.node), user.data() + w.offset) << w.node;
  }
  EXPECT_EQ(RunModel(**m), kRelu);
  const WeightStats st = s.weight_stats();
  EXPECT_EQ(st.bytes_read, 0u);
  EXPECT_EQ(st.bytes_mapped, 0u);
  EXPECT_EQ(st.files_opened, 0u);
  EXPECT_EQ(st.resident_bytes, 0u);
  // The weights come from the caller's buffer: a model loaded after a change
  // to it computes with the change. (Kernels pack what they read at load, so
  // the model already loaded keeps the old values.)
  const weights::WeightRef w = FindWeight(ws, kWBytes);
  ASSERT_FALSE(w.node.empty());
  const float three = 3;
  std::memcpy(user.data() + w.offset, &three, 4);  // W[0][0]: 1 -> 3
  Session s2;
  auto m2 = s2.LoadModel(kiln_file(), lo);
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  // row 0, col 0: 1*3 + 3*1 - 1 = 5; row 1, col 0: -1*3 + 1 - 1 = -3 -> relu 0
  EXPECT_EQ(RunModel(**m2), (std::vector<float>{5, 5.5f, 3, 0, 1.5f, 1}));
  EXPECT_EQ(s2.weight_stats().bytes_read, 0u);
  m2.value().reset();
  m.value().reset();
  EXPECT_EQ(user.size(), bytes.size());  // still ours, never freed by Kiln
}

TEST_F(ExternalWeightsTest, UserMemoryForMode1Files) {
  auto cm = CompileTo(kiln_file(), 1, weight_dir());
  ASSERT_TRUE(cm.ok());
  const auto ws = ListExternalWeights(*cm.value().graph).value();
  std::vector<std::vector<std::uint8_t>> bufs;
  LoadOptions lo;
  for (auto& w : ws) {
    const std::string bytes = ReadAll(fs::path(weight_dir()) / w.location);
    bufs.emplace_back(bytes.begin(), bytes.end());
    lo.SetExternalWeightAddress(w.location, bufs.back().data(), bufs.back().size());
  }
  fs::remove_all(weight_dir());
  auto m = Model::Load(kiln_file(), lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (std::size_t i = 0; i < ws.size(); ++i) EXPECT_EQ((*m)->ConstantData(ws[i].node), bufs[i].data());
  EXPECT_EQ(RunModel(**m), kRelu);
}

TEST_F(ExternalWeightsTest, UserMemoryTooSmallIsAnErrorNamingFileNodeAndSizes) {
  auto cm = CompileTo(kiln_file(), 2, weight_dir());
  ASSERT_TRUE(cm.ok());
  const auto ws = ListExternalWeights(*cm.value().graph).value();
  const weights::WeightRef* last = &ws[0];
  for (auto& w : ws) {
    if (w.offset > last->offset) last = &w;
  }
  const std::uint64_t required = last->offset + last->length;
  std::vector<std::uint8_t> user(required - 1);
  LoadOptions lo;
  lo.SetExternalWeightAddress(last->location, user.data(), user.size());
  auto m = Model::Load(kiln_file(), lo);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().ToString();
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(msg.find(last->location), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + last->node + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(required)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(required - 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("m.kiln"), std::string::npos) << msg;
}

// ---- damaged weight files ----------------------------------------------------------

TEST_F(ExternalWeightsTest, MissingWeightFileIsNamed) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
    ASSERT_TRUE(cm.ok());
    const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
    fs::remove(fs::path(d.file("weight")) / w.location);
    for (auto lm : {WeightLoadMode::kMap, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
      if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
      LoadOptions lo;
      lo.weight_load_mode = lm;
      auto m = Model::Load(d.file("m.kiln"), lo);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
      EXPECT_NE(m.status().ToString().find(w.location), std::string::npos) << m.status().ToString();
    }
  }
}

// A FIFO or directory planted as a weight file is refused at load without
// blocking in open().
TEST_F(ExternalWeightsTest, NonRegularWeightFileIsRefusedWithoutHanging) {
  for (int mode : {1, 2}) {
    for (bool fifo : {true, false}) {
      SCOPED_TRACE(StrCat("mode ", mode, fifo ? " fifo" : " directory"));
      test::TempDir d;
      auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
      ASSERT_TRUE(cm.ok());
      const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
      const fs::path f = fs::path(d.file("weight")) / w.location;
      fs::remove(f);
      if (fifo) {
        ASSERT_EQ(mkfifo(f.c_str(), 0644), 0);
      } else {
        fs::create_directories(f);
      }
      for (auto lm : {WeightLoadMode::kMap, WeightLoadMode::kCopy}) {
        if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
        LoadOptions lo;
        lo.weight_load_mode = lm;
        auto m = Model::Load(d.file("m.kiln"), lo);
        ASSERT_FALSE(m.ok());
        EXPECT_NE(m.status().ToString().find(w.location), std::string::npos) << m.status().ToString();
        EXPECT_NE(m.status().ToString().find(fifo ? "FIFO" : "directory"), std::string::npos) << m.status().ToString();
      }
    }
  }
}

TEST_F(ExternalWeightsTest, TruncatedWeightFileIsNamed) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
    ASSERT_TRUE(cm.ok());
    const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
    const fs::path f = fs::path(d.file("weight")) / w.location;
    fs::resize_file(f, w.offset + w.length - 1);
    for (auto lm : {WeightLoadMode::kMap, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
      if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
      for (bool verify : {false, true}) {
        LoadOptions lo;
        lo.weight_load_mode = lm;
        lo.verify_weights = verify;
        auto m = Model::Load(d.file("m.kiln"), lo);
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
        const std::string msg = m.status().ToString();
        EXPECT_NE(msg.find(w.location), std::string::npos) << msg;
        EXPECT_NE(msg.find("'" + w.node + "'"), std::string::npos) << msg;
      }
    }
  }
}

TEST_F(ExternalWeightsTest, TamperedWeightFileFailsVerificationNamingIt) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    test::TempDir d;
    auto cm = CompileTo(d.file("m.kiln"), mode, d.file("weight"));
    ASSERT_TRUE(cm.ok());
    const weights::WeightRef w = FindWeight(ListExternalWeights(*cm.value().graph).value(), kWBytes);
    const fs::path f = fs::path(d.file("weight")) / w.location;
    std::string bytes = ReadAll(f);
    // W[0][0]: 1.0f -> 3.0f (same size, other content).
    float three = 3;
    std::memcpy(&bytes[w.offset], &three, 4);
    WriteAll(f, bytes);
    for (auto lm : {WeightLoadMode::kMap, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
      if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
      LoadOptions lo;
      lo.weight_load_mode = lm;
      lo.verify_weights = true;
      auto m = Model::Load(d.file("m.kiln"), lo);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
      const std::string msg = m.status().ToString();
      EXPECT_NE(msg.find(w.location), std::string::npos) << msg;
      EXPECT_NE(msg.find("SHA-256"), std::string::npos) << msg;
      // Without verification the tampered bytes are used as they are:
      // row 0 col 0 becomes 3*1 + 3 - 1 = 5.
      lo.verify_weights = false;
      m = Model::Load(d.file("m.kiln"), lo);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      std::vector<float> want = kRelu;
      want[0] = 5;
      EXPECT_EQ(RunModel(**m), want);
    }
  }
}

// ---- session sharing and unload order ----------------------------------------------

class SessionTest : public ExternalWeightsTest {
 protected:
  // Two models (with and without the Relu) sharing W and b in one directory.
  void Build(int mode) {
    auto a = CompileTo(kiln_file("a.kiln"), mode, weight_dir(), true, "a");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = CompileTo(kiln_file("b.kiln"), mode, weight_dir(), false, "b");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (auto& e : fs::directory_iterator(weight_dir())) {
      const std::string f = e.path().filename().string();
      if (f.rfind("weight_", 0) == 0 || f.find("_weight_combined") != std::string::npos) file_bytes_ += e.file_size();
    }
  }
  std::uint64_t file_bytes_ = 0;
};

TEST_F(SessionTest, SecondModelReadsNothing) {
  for (int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    fs::remove_all(weight_dir());
    file_bytes_ = 0;
    Build(mode);
    if (mode == 2) {
      EXPECT_FALSE(fs::exists(fs::path(weight_dir()) / "b_weight_combined"));  // b wrote nothing
    }
    Session s;
    LoadOptions lo;
    lo.weight_load_mode = WeightLoadMode::kCopy;
    auto a = s.LoadModel(kiln_file("a.kiln"), lo);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    const WeightStats after_a = s.weight_stats();
    EXPECT_EQ(after_a.bytes_read, file_bytes_);
    EXPECT_EQ(after_a.weights_shared, 0u);
    auto b = s.LoadModel(kiln_file("b.kiln"), lo);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const WeightStats after_b = s.weight_stats();
    EXPECT_EQ(after_b.bytes_read, after_a.bytes_read);  // nothing read for the second model
    EXPECT_EQ(after_b.files_opened, after_a.files_opened);
    EXPECT_EQ(after_b.weights_shared, 2u);
    EXPECT_EQ(after_b.resident_bytes, file_bytes_);     // held once
    EXPECT_EQ((*a)->ConstantData("w"), (*b)->ConstantData("w"));
    EXPECT_EQ(RunModel(**a), kRelu);
    EXPECT_EQ(RunModel(**b), kNoRelu);
  }
}

TEST_F(SessionTest, MappedWeightsAreSharedToo) {
  Build(2);
  Session s;
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kMap;
  auto a = s.LoadModel(kiln_file("a.kiln"), lo);
  ASSERT_TRUE(a.ok());
  const WeightStats after_a = s.weight_stats();
  auto b = s.LoadModel(kiln_file("b.kiln"), lo);
  ASSERT_TRUE(b.ok());
  const WeightStats after_b = s.weight_stats();
  EXPECT_EQ(after_b.bytes_mapped, after_a.bytes_mapped);
  EXPECT_EQ(after_b.files_opened, after_a.files_opened);
  EXPECT_EQ(after_b.weights_shared, 2u);
  EXPECT_EQ((*a)->ConstantData("w"), (*b)->ConstantData("w"));
  EXPECT_EQ(RunModel(**b), kNoRelu);
}

TEST_F(SessionTest, ModelsLoadedWithoutASessionDoNotShare) {
  Build(1);
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kCopy;
  auto a = Model::Load(kiln_file("a.kiln"), lo);
  auto b = Model::Load(kiln_file("b.kiln"), lo);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->ConstantData("w"), (*b)->ConstantData("w"));
  EXPECT_EQ(RunModel(**a), kRelu);
  EXPECT_EQ(RunModel(**b), kNoRelu);
}

TEST_F(SessionTest, UnloadOrder) {
  Build(1);
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kCopy;
  for (bool first_a : {true, false}) {
    SCOPED_TRACE(first_a);
    Session s;
    auto a = s.LoadModel(kiln_file("a.kiln"), lo);
    auto b = s.LoadModel(kiln_file("b.kiln"), lo);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(s.weight_stats().resident_bytes, file_bytes_);
    // Drop one; the other still computes correctly from the shared weights.
    if (first_a) {
      a.value().reset();
      EXPECT_EQ(RunModel(**b), kNoRelu);
    } else {
      b.value().reset();
      EXPECT_EQ(RunModel(**a), kRelu);
    }
    EXPECT_EQ(s.weight_stats().resident_bytes, file_bytes_);
    // Drop the other: memory goes back.
    (first_a ? b : a).value().reset();
    EXPECT_EQ(s.weight_stats().resident_bytes, 0u);
    // Loading again reads again.
    const std::uint64_t read = s.weight_stats().bytes_read;
    auto c = s.LoadModel(kiln_file("a.kiln"), lo);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(s.weight_stats().bytes_read, read + file_bytes_);
    EXPECT_EQ(RunModel(**c), kRelu);
  }
}

TEST_F(SessionTest, ModelsOutliveTheirSession) {
  Build(2);
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kCopy;
  std::unique_ptr<Model> a, b;
  {
    Session s;
    auto ra = s.LoadModel(kiln_file("a.kiln"), lo);
    auto rb = s.LoadModel(kiln_file("b.kiln"), lo);
    ASSERT_TRUE(ra.ok() && rb.ok());
    a = std::move(ra).value();
    b = std::move(rb).value();
  }
  EXPECT_EQ(RunModel(*a), kRelu);
  a.reset();
  EXPECT_EQ(RunModel(*b), kNoRelu);
}

TEST_F(SessionTest, SharedWeightIsNotReadFromADamagedFileAgain) {
  // Once resident, a weight is served by hash; the second model's files are
  // not touched (it may even lack them).
  Build(1);
  Session s;
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kCopy;
  auto a = s.LoadModel(kiln_file("a.kiln"), lo);
  ASSERT_TRUE(a.ok());
  fs::remove_all(weight_dir());
  auto b = s.LoadModel(kiln_file("b.kiln"), lo);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(RunModel(**b), kNoRelu);
}

TEST_F(SessionTest, SharedWeightIsVerifiedForAModelThatAsksForIt) {
  // Model a maps the weights (MAP_SHARED); the files are then modified in
  // place, which the mapping sees. Model b, served from the session by hash,
  // asks for verification and must notice.
  Build(1);
  Session s;
  LoadOptions lo;
  lo.weight_load_mode = WeightLoadMode::kMap;
  auto a = s.LoadModel(kiln_file("a.kiln"), lo);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (auto& e : fs::directory_iterator(weight_dir())) {
    if (e.path().filename().string().rfind("weight_", 0) != 0) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x40);
    f.seekp(0);
    f.write(&b, 1);
  }
  lo.verify_weights = true;
  auto b = s.LoadModel(kiln_file("b.kiln"), lo);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("SHA-256"), std::string::npos) << b.status().ToString();
}

// ---- locations that leave the weight directory ---------------------------------------

TEST_F(ExternalWeightsTest, FileConstantLocationsOutsideTheWeightDirectoryAreRefused) {
  auto cm = CompileTo(kiln_file(), 1, weight_dir());
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ir::Node* fc = nullptr;
  for (auto& n : cm.value().graph->nodes()) {
    if (n->op_type() == "FileConstant" && n->GetInt("length", 0) == static_cast<std::int64_t>(kWBytes)) fc = n.get();
  }
  ASSERT_NE(fc, nullptr);
  const std::string node = fc->name();
  const std::string good = fc->GetString("location", "");
  // A valid copy of the weight outside the directory: only the check stops it.
  const fs::path outside = dir_.file("x");
  fs::copy_file(fs::path(weight_dir()) / good, outside);
  fs::create_directories(fs::path(weight_dir()) / "a");
  fs::create_symlink(outside, fs::path(weight_dir()) / "link");
  fs::create_directory_symlink(dir_.file(""), fs::path(weight_dir()) / "updir");
  // A valid weight file name that is a symlink to outside the directory
  // (a store someone tampered with): refused when resolved.
  const std::string escaping = "weight_" + std::string(64, 'e');
  fs::create_symlink(outside, fs::path(weight_dir()) / escaping);
  // A valid combined-file name that links inside: allowed.
  fs::create_symlink(fs::path(weight_dir()) / good, fs::path(weight_dir()) / "alias_weight_combined");
  struct Case {
    std::string location, needle;
  };
  // A .kiln names only weight_<sha256> and <name>_weight_combined files:
  // paths, other files of the store and symlink names are refused before
  // any file is opened.
  const std::string not_a_name = "is not a weight_<sha256> or <name>_weight_combined file name";
  const std::vector<Case> bad = {
      {"../x", not_a_name},
      {"a/../../x", not_a_name},
      {"a/../x_nonexistent/../../x", not_a_name},
      {outside.string(), not_a_name},
      {"link", not_a_name},
      {"updir/x", not_a_name},
      {"meta.json", not_a_name},
      {"a/../" + good, not_a_name},
      {good + std::string("\0/../x", 6), not_a_name},
      {escaping, "outside the weight directory"},
  };
  for (const Case& c : bad) {
    SCOPED_TRACE(c.location);
    fc->SetAttr("location", ir::Attribute::String(c.location));
    ASSERT_TRUE(format::WriteModelFile(cm.value(), kiln_file()).ok());
    for (auto lm : {WeightLoadMode::kMap, WeightLoadMode::kCopy}) {
      if (lm == WeightLoadMode::kMap && !test::DefaultDeviceMapsHostMemory()) continue;  // sim: refused (device_test.cc)
      LoadOptions lo;
      lo.weight_load_mode = lm;
      auto m = Model::Load(kiln_file(), lo);
      ASSERT_FALSE(m.ok());
      const std::string msg = m.status().ToString();
      EXPECT_NE(msg.find("'" + node + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    }
    Session s;
    auto m = s.LoadModel(kiln_file(), {});
    EXPECT_FALSE(m.ok());
  }
  // Positive controls: the original location, and a symlink that stays inside.
  for (const std::string& loc : {good, std::string("alias_weight_combined")}) {
    SCOPED_TRACE(loc);
    fc->SetAttr("location", ir::Attribute::String(loc));
    ASSERT_TRUE(format::WriteModelFile(cm.value(), kiln_file()).ok());
    auto m = Model::Load(kiln_file(), {});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(RunModel(**m), kRelu);
  }
}

TEST_F(ExternalWeightsTest, MalformedFileConstantIsRejectedNamingTheNode) {
  auto cm = CompileTo(kiln_file(), 1, weight_dir());
  ASSERT_TRUE(cm.ok());
  ir::Node* fc = nullptr;
  for (auto& n : cm.value().graph->nodes()) {
    if (n->op_type() == "FileConstant" && n->GetInt("length", 0) == static_cast<std::int64_t>(kWBytes)) fc = n.get();
  }
  ASSERT_NE(fc, nullptr);
  const std::string node = fc->name();
  // length disagreeing with dtype x shape must not reach the file (it would
  // let a kernel read past the weight).
  fc->SetAttr("length", ir::Attribute::Int(8));
  ASSERT_TRUE(format::WriteModelFile(cm.value(), kiln_file()).ok());
  auto m = Model::Load(kiln_file(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("'" + node + "'"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().ToString().find("length"), std::string::npos) << m.status().ToString();
  // Offset past the end of the file.
  fc->SetAttr("length", ir::Attribute::Int(static_cast<std::int64_t>(kWBytes)));
  fc->SetAttr("offset", ir::Attribute::Int(1 << 20));
  ASSERT_TRUE(format::WriteModelFile(cm.value(), kiln_file()).ok());
  m = Model::Load(kiln_file(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(m.status().ToString().find("'" + node + "'"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace kiln
