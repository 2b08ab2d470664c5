#include "tools/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <sstream>
#include <string_view>

#include "common/checked.h"
#include "common/file.h"

namespace kiln::npy {
namespace {

struct Descr { const char* code; DType dtype; };
const Descr kDescrs[] = {
    {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<f2", DType::kFloat16},
    {"<i8", DType::kInt64},   {"<i4", DType::kInt32},   {"<i2", DType::kInt16},
    {"|i1", DType::kInt8},    {"|u1", DType::kUInt8},   {"<u2", DType::kUInt16},
    {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64},  {"|b1", DType::kBool},
};

}  // namespace

namespace {

// The .npy header limit: NumPy itself refuses headers over 10000 bytes unless
// told otherwise; 64 KiB leaves room for any shape while bounding the parse.
constexpr std::size_t kMaxHeaderBytes = 65536;

struct Header {
  DType dtype = DType::kUndefined;
  Shape shape;
  std::size_t data_offset = 0;  // where the array data starts
  std::int64_t data_bytes = 0;  // dtype x shape, checked
};

// A hand-checked parser for the header's Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Only the three keys NumPy writes are accepted, each once.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Status Parse(Header* h) {
    SkipSpace();
    if (!Eat('{')) return Fail("expected '{' at the start of the header dict");
    bool have_descr = false, have_order = false, have_shape = false;
    std::string descr;
    bool fortran = false;
    for (;;) {
      SkipSpace();
      if (Eat('}')) break;
      std::string key;
      KILN_RETURN_IF_ERROR(ParseString(&key));
      SkipSpace();
      if (!Eat(':')) return Fail(StrCat("expected ':' after key '", key, "'"));
      SkipSpace();
      if (key == "descr") {
        if (have_descr) return Fail("key 'descr' appears twice");
        have_descr = true;
        KILN_RETURN_IF_ERROR(ParseString(&descr));
      } else if (key == "fortran_order") {
        if (have_order) return Fail("key 'fortran_order' appears twice");
        have_order = true;
        if (EatWord("True")) fortran = true;
        else if (EatWord("False")) fortran = false;
        else return Fail("'fortran_order' must be True or False");
      } else if (key == "shape") {
        if (have_shape) return Fail("key 'shape' appears twice");
        have_shape = true;
        KILN_RETURN_IF_ERROR(ParseShape(&h->shape));
      } else {
        return Fail(StrCat("unexpected key '", key, "' (a .npy header has 'descr', 'fortran_order' and 'shape')"));
      }
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat('}')) break;
      return Fail(StrCat("expected ',' or '}' at header offset ", pos_));
    }
    SkipSpace();
    if (pos_ != s_.size()) return Fail(StrCat("unexpected text after the header dict at header offset ", pos_));
    if (!have_descr) return Fail("header has no 'descr'");
    if (!have_order) return Fail("header has no 'fortran_order'");
    if (!have_shape) return Fail("header has no 'shape'");
    if (descr == "<b1" || descr == "=b1" || descr == ">b1") descr = "|b1";
    if (descr == "<i1" || descr == "=i1" || descr == ">i1") descr = "|i1";
    if (descr == "<u1" || descr == "=u1" || descr == ">u1") descr = "|u1";
    for (auto& d : kDescrs) {
      if (descr == d.code) h->dtype = d.dtype;
    }
    if (h->dtype == DType::kUndefined) {
      return Error(StatusCode::kUnimplemented, "'", what_, "': unsupported dtype '", descr,
                   "' (little-endian numeric and bool types only)");
    }
    if (fortran && h->shape.size() > 1) {
      return Error(StatusCode::kUnimplemented, "'", what_, "': Fortran-order arrays are not supported");
    }
    return Status::Ok();
  }

 private:
  Status Fail(const std::string& msg) const {
    return Error(StatusCode::kInvalidArgument, "'", what_, "': bad .npy header: ", msg);
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; }
    return false;
  }
  bool EatWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) == w) { pos_ += w.size(); return true; }
    return false;
  }
  Status ParseString(std::string* out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return Fail(StrCat("expected a quoted string at header offset ", pos_));
    }
    char q = s_[pos_++];
    std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') return Fail("escapes are not allowed in header strings");
      if (pos_ - start > 64) return Fail("header string too long");
      ++pos_;
    }
    if (pos_ >= s_.size()) return Fail("unterminated string in the header");
    *out = std::string(s_.substr(start, pos_ - start));
    ++pos_;
    return Status::Ok();
  }
  Status ParseShape(Shape* shape) {
    if (!Eat('(')) return Fail("'shape' must be a tuple");
    for (;;) {
      SkipSpace();
      if (Eat(')')) return Status::Ok();
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') {
        return Fail(StrCat("'shape' entry at header offset ", pos_, " is not a non-negative integer"));
      }
      std::int64_t v = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (!CheckedMul(v, 10, &v) || !CheckedAdd(v, s_[pos_] - '0', &v)) {
          return Fail(StrCat("'shape' entry ", shape->size(), " does not fit in int64"));
        }
        ++pos_;
      }
      Eat('L');  // Python 2 longs
      if (shape->size() >= 64) return Fail("'shape' has more than 64 dims");
      shape->push_back(v);
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat(')')) return Status::Ok();
      return Fail(StrCat("expected ',' or ')' in 'shape' at header offset ", pos_));
    }
  }

  std::string_view s_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

// Parses magic, version, header length and header from the file's first
// bytes (`avail` of them); the data size is checked but not read.
Status ParsePreamble(const char* p, std::size_t avail, const std::string& what, Header* h) {
  if (avail < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
    return Error(StatusCode::kInvalidArgument, "'", what, "' is not a .npy file (bad magic)");
  }
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  std::size_t hlen = 0, pre = 0;
  if (b[6] == 1) {
    hlen = b[8] | (b[9] << 8);
    pre = 10;
  } else if (b[6] == 2 || b[6] == 3) {
    if (avail < 12) return Error(StatusCode::kInvalidArgument, "'", what, "': truncated header");
    hlen = b[8] | (b[9] << 8) | (b[10] << 16) | (static_cast<std::size_t>(b[11]) << 24);
    pre = 12;
  } else {
    return Error(StatusCode::kInvalidArgument, "'", what, "': unsupported .npy version ", int(b[6]));
  }
  if (hlen > kMaxHeaderBytes) {
    return Error(StatusCode::kInvalidArgument, "'", what, "': header length ", hlen, " exceeds the limit of ",
                 kMaxHeaderBytes, " bytes");
  }
  if (avail - pre < hlen) {
    return Error(StatusCode::kInvalidArgument, "'", what, "': truncated header (", hlen, " bytes declared, ",
                 avail - pre, " present)");
  }
  HeaderParser parser(std::string_view(p + pre, hlen), what);
  KILN_RETURN_IF_ERROR(parser.Parse(h));
  h->data_offset = pre + hlen;
  KILN_ASSIGN_OR_RETURN(h->data_bytes, CheckedTensorBytes(h->dtype, h->shape, StrCat("'", what, "'")));
  return Status::Ok();
}

Status CheckDataSize(const Header& h, std::int64_t file_size, const std::string& what) {
  std::int64_t need = 0;
  if (!CheckedAdd(static_cast<std::int64_t>(h.data_offset), h.data_bytes, &need) || file_size != need) {
    return Error(StatusCode::kInvalidArgument, "'", what, "': file is ", file_size, " bytes but its header (",
                 DTypeName(h.dtype), ShapeToString(h.shape), ") needs ", h.data_offset, " + ", h.data_bytes,
                 " bytes");
  }
  return Status::Ok();
}

}  // namespace

Result<HostTensor> Parse(std::string_view bytes, const std::string& what) {
  Header h;
  KILN_RETURN_IF_ERROR(ParsePreamble(bytes.data(), bytes.size(), what, &h));
  KILN_RETURN_IF_ERROR(CheckDataSize(h, static_cast<std::int64_t>(bytes.size()), what));
  HostTensor t(h.dtype, h.shape);
  if (h.data_bytes) std::memcpy(t.mutable_data(), bytes.data() + h.data_offset, static_cast<std::size_t>(h.data_bytes));
  return t;
}

Result<HostTensor> Load(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(path, ".npy file"));
  std::string head(static_cast<std::size_t>(std::min<std::int64_t>(f.size, 12 + kMaxHeaderBytes)), '\0');
  KILN_RETURN_IF_ERROR(PreadExact(f.fd.get(), head.data(), static_cast<std::int64_t>(head.size()), 0,
                                  StrCat("'", path, "'")));
  Header h;
  KILN_RETURN_IF_ERROR(ParsePreamble(head.data(), head.size(), path, &h));
  KILN_RETURN_IF_ERROR(CheckDataSize(h, f.size, path));
  HostTensor t(h.dtype, h.shape);
  if (h.data_bytes) {
    KILN_RETURN_IF_ERROR(PreadExact(f.fd.get(), t.mutable_data(), h.data_bytes,
                                    static_cast<std::int64_t>(h.data_offset), StrCat("'", path, "'")));
  }
  return t;
}

Status Save(const std::string& path, const HostTensor& t) {
  const char* code = nullptr;
  for (auto& d : kDescrs) {
    if (d.dtype == t.dtype()) code = d.code;
  }
  if (t.dtype() == DType::kBFloat16) code = "<u2";  // NumPy has no bfloat16: raw bits, as ONNX's tools do
  if (!code) return Error(StatusCode::kUnimplemented, "cannot save ", DTypeName(t.dtype()), " as .npy");
  std::ostringstream shape;
  shape << '(';
  for (std::size_t i = 0; i < t.shape().size(); ++i) shape << t.shape()[i] << (t.shape().size() == 1 || i + 1 < t.shape().size() ? "," : "");
  shape << ')';
  std::string header = StrCat("{'descr': '", code, "', 'fortran_order': False, 'shape': ", shape.str(), ", }");
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Error(StatusCode::kIoError, "cannot create '", tmp, "'");
    f.write("\x93NUMPY\x01\x00", 8);
    auto len = static_cast<std::uint16_t>(header.size());
    char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    f.write(lb, 2);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
    if (!f) return Error(StatusCode::kIoError, "writing '", tmp, "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Error(StatusCode::kIoError, "cannot rename '", tmp, "' to '", path, "'");
  }
  return Status::Ok();
}

}  // namespace kiln::npy
