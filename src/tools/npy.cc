#include "tools/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

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

Result<HostTensor> Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error(StatusCode::kNotFound, "cannot open .npy file '", path, "'");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    return Error(StatusCode::kInvalidArgument, "'", path, "' is not a .npy file (bad magic)");
  }
  std::uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) return Error(StatusCode::kInvalidArgument, "'", path, "': truncated header");
    hlen = b[0] | (b[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) return Error(StatusCode::kInvalidArgument, "'", path, "': truncated header");
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    return Error(StatusCode::kInvalidArgument, "'", path, "': unsupported .npy version ", int(magic[6]));
  }
  if (hlen > (1u << 20)) return Error(StatusCode::kInvalidArgument, "'", path, "': header too large");
  std::string header(hlen, '\0');
  if (!f.read(header.data(), hlen)) return Error(StatusCode::kInvalidArgument, "'", path, "': truncated header");
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'"))) {
    return Error(StatusCode::kInvalidArgument, "'", path, "': header has no descr");
  }
  std::string descr = m[1];
  if (descr == "<b1" || descr == "=b1") descr = "|b1";
  if (descr == "<i1") descr = "|i1";
  if (descr == "<u1") descr = "|u1";
  DType dtype = DType::kUndefined;
  for (auto& d : kDescrs) {
    if (descr == d.code) dtype = d.dtype;
  }
  if (dtype == DType::kUndefined) {
    return Error(StatusCode::kUnimplemented, "'", path, "': unsupported dtype '", descr, "'");
  }
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True"))) {
    return Error(StatusCode::kUnimplemented, "'", path, "': Fortran-order arrays are not supported");
  }
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) {
    return Error(StatusCode::kInvalidArgument, "'", path, "': header has no shape");
  }
  Shape shape;
  std::stringstream ss(m[1].str());
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    tok = std::regex_replace(tok, std::regex("\\s|L"), "");
    if (tok.empty()) continue;
    try {
      shape.push_back(std::stoll(tok));
    } catch (const std::exception&) {
      return Error(StatusCode::kInvalidArgument, "'", path, "': bad shape entry '", tok, "'");
    }
    if (shape.back() < 0) return Error(StatusCode::kInvalidArgument, "'", path, "': negative dim");
  }
  HostTensor t(dtype, shape);
  if (t.nbytes() && !f.read(static_cast<char*>(t.mutable_data()), static_cast<std::streamsize>(t.nbytes()))) {
    return Error(StatusCode::kInvalidArgument, "'", path, "': data truncated (expected ", t.nbytes(),
                 " bytes for ", DTypeName(dtype), ShapeToString(shape), ")");
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
