// The CLI's .npy reader (src/tools/npy.cc) on hand-made bytes: every dtype
// and header form NumPy writes is read with the right values, and every kind
// of malformed header, dtype, shape or size is refused naming the file and
// what is wrong (expected vs found where there is one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.h"
#include "tools/npy.h"

namespace kiln {
namespace {

// "\x93NUMPY", version, header length (2 bytes for v1, 4 for v2/v3), the
// header text as given (no padding added), then `data`.
std::string Npy(const std::string& header, const std::string& data = "", int version = 1) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(version));
  out.push_back('\0');
  const std::uint32_t n = static_cast<std::uint32_t>(header.size());
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  if (version != 1) {
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    out.push_back(static_cast<char>((n >> 24) & 0xff));
  }
  return out + header + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string Dict(const std::string& descr, const std::string& shape, const std::string& order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

template <typename T>
std::vector<T> Values(const HostTensor& t) {
  const T* p = static_cast<const T*>(t.data());
  return std::vector<T>(p, p + t.nbytes() / sizeof(T));
}

// Expects a failure whose message contains every needle (and the name the
// bytes were given).
void ExpectRefused(const Result<HostTensor>& r, const std::vector<std::string>& needles,
                   const std::string& what = "in.npy") {
  ASSERT_FALSE(r.ok()) << "accepted; expected: " << needles[0];
  EXPECT_NE(r.status().message().find("'" + what + "'"), std::string::npos) << r.status().message();
  for (const std::string& n : needles) {
    EXPECT_NE(r.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << r.status().message();
  }
}

TEST(Npy, Float32MatrixHasItsValuesAndShape) {
  auto r = npy::Parse(Npy(Dict("<f4", "(2, 3)"), Bytes<float>({1, 2, 3, 4, 5, 6.5f})), "in.npy");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().dtype(), DType::kFloat32);
  EXPECT_EQ(r.value().shape(), (Shape{2, 3}));
  EXPECT_EQ(Values<float>(r.value()), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
}

TEST(Npy, EveryNumericDescrMapsToItsDType) {
  struct Case {
    const char* descr;
    DType dtype;
    std::size_t size;
  };
  const Case cases[] = {
      {"<f4", DType::kFloat32, 4}, {"<f8", DType::kFloat64, 8}, {"<f2", DType::kFloat16, 2},
      {"<i8", DType::kInt64, 8},   {"<i4", DType::kInt32, 4},   {"<i2", DType::kInt16, 2},
      {"|i1", DType::kInt8, 1},    {"|u1", DType::kUInt8, 1},   {"<u2", DType::kUInt16, 2},
      {"<u4", DType::kUInt32, 4},  {"<u8", DType::kUInt64, 8},  {"|b1", DType::kBool, 1},
      // One-byte types in any byte order are the same type.
      {"<b1", DType::kBool, 1},    {"=b1", DType::kBool, 1},    {">b1", DType::kBool, 1},
      {"<i1", DType::kInt8, 1},    {"=i1", DType::kInt8, 1},    {">i1", DType::kInt8, 1},
      {"<u1", DType::kUInt8, 1},   {"=u1", DType::kUInt8, 1},   {">u1", DType::kUInt8, 1},
  };
  for (const Case& c : cases) {
    // Three elements 0x01.., 0x02.., 0x03.. so the data is checked byte for byte.
    std::string data;
    for (int e = 1; e <= 3; ++e) data.append(c.size, static_cast<char>(e));
    auto r = npy::Parse(Npy(Dict(c.descr, "(3,)"), data), "in.npy");
    ASSERT_TRUE(r.ok()) << c.descr << ": " << r.status().ToString();
    EXPECT_EQ(r.value().dtype(), c.dtype) << c.descr;
    EXPECT_EQ(r.value().shape(), (Shape{3})) << c.descr;
    ASSERT_EQ(r.value().nbytes(), 3 * c.size) << c.descr;
    EXPECT_EQ(std::memcmp(r.value().data(), data.data(), data.size()), 0) << c.descr;
  }
}

TEST(Npy, HeaderVariantsNumPyAndPython2Write) {
  const std::string six = Bytes<std::int64_t>({10, -20, 30, -40, 50, -60});
  const std::vector<std::string> headers = {
      // Double quotes, no trailing comma, tabs/newlines/CR as space.
      "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (2, 3)}",
      "\t{'shape': (2,3),\r\n 'descr': '<i8', 'fortran_order': False}  \n",
      // Python 2 longs.
      "{'descr': '<i8', 'fortran_order': False, 'shape': (2L, 3L), }",
      // Spaces before the separators.
      "{ 'descr' : '<i8' , 'fortran_order' : False , 'shape' : ( 2 , 3 , ) }",
  };
  for (const std::string& h : headers) {
    auto r = npy::Parse(Npy(h, six), "in.npy");
    ASSERT_TRUE(r.ok()) << h << ": " << r.status().ToString();
    EXPECT_EQ(r.value().shape(), (Shape{2, 3})) << h;
    EXPECT_EQ(Values<std::int64_t>(r.value()), (std::vector<std::int64_t>{10, -20, 30, -40, 50, -60})) << h;
  }
}

TEST(Npy, Versions2And3HaveAFourByteHeaderLength) {
  for (int version : {2, 3}) {
    auto r = npy::Parse(Npy(Dict("<i4", "(2,)"), Bytes<std::int32_t>({7, -8}), version), "in.npy");
    ASSERT_TRUE(r.ok()) << version << ": " << r.status().ToString();
    EXPECT_EQ(Values<std::int32_t>(r.value()), (std::vector<std::int32_t>{7, -8}));
  }
}

TEST(Npy, ScalarEmptyAndOneDimFortranArrays) {
  auto scalar = npy::Parse(Npy(Dict("<f8", "()"), Bytes<double>({2.25})), "in.npy");
  ASSERT_TRUE(scalar.ok()) << scalar.status().ToString();
  EXPECT_EQ(scalar.value().shape(), Shape{});
  EXPECT_EQ(Values<double>(scalar.value()), (std::vector<double>{2.25}));

  auto empty = npy::Parse(Npy(Dict("<f4", "(0, 5)")), "in.npy");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty.value().shape(), (Shape{0, 5}));
  EXPECT_EQ(empty.value().nbytes(), 0u);

  // Fortran order is the same layout for one dim.
  auto f1 = npy::Parse(Npy(Dict("<i2", "(3,)", "True"), Bytes<std::int16_t>({1, 2, 3})), "in.npy");
  ASSERT_TRUE(f1.ok()) << f1.status().ToString();
  EXPECT_EQ(Values<std::int16_t>(f1.value()), (std::vector<std::int16_t>{1, 2, 3}));
}

TEST(Npy, PreambleErrors) {
  ExpectRefused(npy::Parse("", "in.npy"), {"is not a .npy file (bad magic)"});
  ExpectRefused(npy::Parse(std::string("\x93NUMPY\x01", 7), "in.npy"), {"bad magic"});
  ExpectRefused(npy::Parse("PK\x03\x04 not numpy at all", "in.npy"), {"bad magic"});
  // Version 2 needs 12 bytes for its 4-byte header length.
  ExpectRefused(npy::Parse(std::string("\x93NUMPY\x02\x00\x10\x00\x00", 11), "in.npy"), {"truncated header"});
  for (int v : {0, 4, 255}) {
    ExpectRefused(npy::Parse(Npy(Dict("<f4", "(1,)"), Bytes<float>({1}), v), "in.npy"),
                  {"unsupported .npy version " + std::to_string(v)});
  }
  // 65537 bytes declared (v2), limit 65536.
  std::string big("\x93NUMPY\x02\x00\x01\x00\x01\x00", 12);
  ExpectRefused(npy::Parse(big, "in.npy"), {"header length 65537 exceeds the limit of 65536 bytes"});
  // 100 bytes declared, 20 present.
  std::string cut = Npy(std::string(100, ' ')).substr(0, 10 + 20);
  ExpectRefused(npy::Parse(cut, "in.npy"), {"truncated header (100 bytes declared, 20 present)"});
}

TEST(Npy, MalformedHeaderDicts) {
  struct Case {
    std::string header, needle;
  };
  const std::vector<Case> cases = {
      {"['descr', '<f4']", "bad .npy header: expected '{' at the start of the header dict"},
      {"{descr: '<f4'}", "expected a quoted string at header offset 1"},
      {"{'descr' '<f4'}", "expected ':' after key 'descr'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "key 'descr' appears twice"},
      {"{'fortran_order': False, 'fortran_order': True, 'descr': '<f4', 'shape': (1,)}",
       "key 'fortran_order' appears twice"},
      {"{'shape': (1,), 'shape': (1,), 'descr': '<f4', 'fortran_order': False}", "key 'shape' appears twice"},
      {"{'fortran_order': 0}", "'fortran_order' must be True or False"},
      {"{'fortran_order': false}", "'fortran_order' must be True or False"},
      {"{'order': 'C'}", "unexpected key 'order' (a .npy header has 'descr', 'fortran_order' and 'shape')"},
      {"{'descr': '<f4' 'shape': (1,)}", "expected ',' or '}' at header offset 16"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "unexpected text after the header dict at header offset 56"},
      {"{'fortran_order': False, 'shape': (1,)}", "header has no 'descr'"},
      {"{'descr': '<f4', 'shape': (1,)}", "header has no 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False}", "header has no 'shape'"},
      {"{'de\\scr': '<f4'}", "escapes are not allowed in header strings"},
      {"{'" + std::string(70, 'k') + "': 1}", "header string too long"},
      {"{'descr", "unterminated string in the header"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1, 2]}", "'shape' must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "'shape' entry at header offset 51 is not a non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", "'shape' entry at header offset 54 is not a non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", "'shape' entry at header offset 53 is not a non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 99999999999999999999)}", "'shape' entry 1 does not fit in int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2; 3)}", "expected ',' or ')' in 'shape' at header offset 52"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    auto r = npy::Parse(Npy(c.header), "in.npy");
    ExpectRefused(r, {"bad .npy header", c.needle});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  // 65 dims of 1 (the limit is 64).
  std::string dims;
  for (int i = 0; i < 65; ++i) dims += "1,";
  ExpectRefused(npy::Parse(Npy(Dict("<f4", "(" + dims + ")"), Bytes<float>({1})), "in.npy"),
                {"'shape' has more than 64 dims"});
}

TEST(Npy, UnsupportedDTypesAndFortranOrder) {
  for (const char* descr : {">f4", "<c8", "|O", "<U3", "f4", "<f16"}) {
    auto r = npy::Parse(Npy(Dict(descr, "(1,)"), std::string(4, '\0')), "in.npy");
    ExpectRefused(r, {std::string("unsupported dtype '") + descr + "'", "little-endian numeric and bool types only"});
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  }
  auto r = npy::Parse(Npy(Dict("<f4", "(2, 2)", "True"), Bytes<float>({1, 2, 3, 4})), "in.npy");
  ExpectRefused(r, {"Fortran-order arrays are not supported"});
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
}

TEST(Npy, SizesAreCheckedBeforeAnythingIsAllocated) {
  // The limit is 2^36 bytes: 2^18 x 2^18 x 2^18 elements are far over it,
  // one dim of 2^36 + 1 is over it on its own, and 2^34 + 1 floats are
  // 4 bytes over it.
  ExpectRefused(npy::Parse(Npy(Dict("<f4", "(262144, 262144, 262144)")), "in.npy"),
                {"shape [262144,262144,262144] has more elements than fit in Kiln's limit"});
  ExpectRefused(npy::Parse(Npy(Dict("|u1", "(68719476737,)")), "in.npy"),
                {"dim 0 of shape [68719476737] (68719476737) exceeds Kiln's limit"});
  ExpectRefused(npy::Parse(Npy(Dict("<f4", "(17179869185,)")), "in.npy"),
                {"float32 tensor of shape [17179869185] would need more than Kiln's limit"});
  // The header says float32[2,3] (24 bytes); the data is 20 or 28 bytes.
  const std::string h = Dict("<f4", "(2, 3)");
  const std::size_t off = 10 + h.size();
  for (std::size_t n : {20u, 28u}) {
    auto r = npy::Parse(Npy(h, std::string(n, '\0')), "in.npy");
    ExpectRefused(r, {"file is " + std::to_string(off + n) + " bytes but its header (float32[2,3]) needs " +
                      std::to_string(off) + " + 24 bytes"});
  }
}

TEST(Npy, LoadReadsFilesAndNamesThePath) {
  test::TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream f(dir.file(name), std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return dir.file(name);
  };
  const std::string ok = write("ok.npy", Npy(Dict("<u2", "(2, 2)"), Bytes<std::uint16_t>({1, 2, 65535, 4}), 2));
  auto r = npy::Load(ok);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().shape(), (Shape{2, 2}));
  EXPECT_EQ(Values<std::uint16_t>(r.value()), (std::vector<std::uint16_t>{1, 2, 65535, 4}));

  auto empty = npy::Load(write("empty.npy", Npy(Dict("<f4", "(0,)"))));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty.value().nbytes(), 0u);

  const std::string tiny = write("tiny.npy", "\x93NUM");
  ExpectRefused(npy::Load(tiny), {"bad magic"}, tiny);
  const std::string shortdata = write("short.npy", Npy(Dict("<f8", "(4,)"), Bytes<double>({1, 2, 3})));
  ExpectRefused(npy::Load(shortdata), {"bytes but its header (float64[4]) needs"}, shortdata);
  const std::string badhdr = write("bad.npy", Npy("{'descr': '<f4', 'fortran_order': False}"));
  ExpectRefused(npy::Load(badhdr), {"header has no 'shape'"}, badhdr);

  auto missing = npy::Load(dir.file("missing.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir.file("missing.npy")), std::string::npos) << missing.status().message();
  auto directory = npy::Load(dir.file(""));
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos) << directory.status().message();
}

TEST(Npy, SaveWritesAnAlignedV1FileThatLoadsBack) {
  test::TempDir dir;
  auto t = std::make_shared<HostTensor>(DType::kInt32, Shape{3});
  std::int32_t vals[3] = {-1, 0, 123456};
  std::memcpy(t->mutable_data(), vals, sizeof(vals));
  const std::string p = dir.file("a.npy");
  ASSERT_TRUE(npy::Save(p, *t).ok());
  std::ifstream f(p, std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(f), {}};
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t hlen = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);  // data starts 64-byte aligned
  EXPECT_EQ(bytes.size(), 10 + hlen + 12);
  const std::string header = bytes.substr(10, hlen);
  EXPECT_EQ(header.rfind("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  auto back = npy::Load(p);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(Values<std::int32_t>(back.value()), (std::vector<std::int32_t>{-1, 0, 123456}));

  // Two dims: "(2, 1)" is written "(2,1)"; scalars "()".
  auto m = std::make_shared<HostTensor>(DType::kFloat64, Shape{2, 1});
  ASSERT_TRUE(npy::Save(p, *m).ok());
  auto mb = npy::Load(p);
  ASSERT_TRUE(mb.ok()) << mb.status().ToString();
  EXPECT_EQ(mb.value().shape(), (Shape{2, 1}));
  auto s = std::make_shared<HostTensor>(DType::kBool, Shape{});
  ASSERT_TRUE(npy::Save(p, *s).ok());
  auto sb = npy::Load(p);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb.value().dtype(), DType::kBool);
  EXPECT_EQ(sb.value().shape(), Shape{});
}

TEST(Npy, SaveBFloat16AsRawUInt16Bits) {
  test::TempDir dir;
  auto t = std::make_shared<HostTensor>(DType::kBFloat16, Shape{2});
  std::uint16_t bits[2] = {0x3f80, 0xc000};  // 1.0, -2.0
  std::memcpy(t->mutable_data(), bits, sizeof(bits));
  ASSERT_TRUE(npy::Save(dir.file("b.npy"), *t).ok());
  auto back = npy::Load(dir.file("b.npy"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back.value().dtype(), DType::kUInt16);
  EXPECT_EQ(Values<std::uint16_t>(back.value()), (std::vector<std::uint16_t>{0x3f80, 0xc000}));
}

TEST(Npy, SaveErrorsNameThePath) {
  test::TempDir dir;
  auto t = std::make_shared<HostTensor>(DType::kFloat32, Shape{1});
  Status st = npy::Save(dir.file("no/such/dir/x.npy"), *t);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot create '" + dir.file("no/such/dir/x.npy.tmp") + "'"), std::string::npos)
      << st.message();
  // A non-empty directory in the way: the rename fails and the temporary goes.
  std::filesystem::create_directories(dir.file("taken/inside"));
  st = npy::Save(dir.file("taken"), *t);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot rename '" + dir.file("taken.tmp") + "' to '" + dir.file("taken") + "'"),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("taken.tmp")));
  auto u = std::make_shared<HostTensor>(DType::kUndefined, Shape{});
  st = npy::Save(dir.file("u.npy"), *u);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("as .npy"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln
