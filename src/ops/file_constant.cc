// FileConstant attributes: the one encoder and decoder (see file_constant.h).
#include "ops/file_constant.h"

#include "common/checked.h"
#include "common/utf8.h"

namespace kiln::ops {
namespace {

using Kind = ir::Attribute::Kind;

const ir::Attribute* Typed(const ir::Node& n, const char* name, Kind kind, Status* st) {
  const ir::Attribute* a = n.FindAttr(name);
  if (a && a->kind != kind) {
    *st = Error(StatusCode::kInvalidArgument, n.Describe(), ": attribute '", name, "' must be ",
                ir::AttributeKindName(kind), ", found ", ir::AttributeKindName(a->kind));
    return nullptr;
  }
  return a;
}

}  // namespace

bool IsFileConstant(const ir::Node& n) { return n.op_type() == "FileConstant" && n.domain() == "kiln"; }

bool IsValidFileId(const std::string& id) {
  if (id.empty() || id.size() > kMaxFileIdBytes) return false;
  for (unsigned char c : id) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void EncodeFileConstant(ir::Node& n, const weights::WeightRef& r) {
  if (!r.file_id.empty()) {
    n.SetAttr("file_id", ir::Attribute::String(r.file_id));
  } else {
    n.SetAttr("location", ir::Attribute::String(r.location));
  }
  n.SetAttr("offset", ir::Attribute::Int(static_cast<std::int64_t>(r.offset)));
  n.SetAttr("length", ir::Attribute::Int(static_cast<std::int64_t>(r.length)));
  n.SetAttr("dtype", ir::Attribute::Int(static_cast<std::int64_t>(r.dtype)));
  n.SetAttr("shape", ir::Attribute::Ints(r.shape));
  if (!r.sha256.empty()) n.SetAttr("kiln.sha256", ir::Attribute::String(r.sha256));
}

Result<weights::WeightRef> DecodeFileConstant(const ir::Node& n) {
  auto fail = [&](auto&&... parts) {
    return Error(StatusCode::kInvalidArgument, n.Describe(), ": ", std::forward<decltype(parts)>(parts)...);
  };
  Status st = Status::Ok();
  const ir::Attribute* location = Typed(n, "location", Kind::kString, &st);
  const ir::Attribute* file_id = Typed(n, "file_id", Kind::kString, &st);
  const ir::Attribute* offset = Typed(n, "offset", Kind::kInt, &st);
  const ir::Attribute* length = Typed(n, "length", Kind::kInt, &st);
  const ir::Attribute* dtype = Typed(n, "dtype", Kind::kInt, &st);
  const ir::Attribute* shape = Typed(n, "shape", Kind::kInts, &st);
  const ir::Attribute* sha = Typed(n, "kiln.sha256", Kind::kString, &st);
  KILN_RETURN_IF_ERROR(st);
  if (!location == !file_id) {
    return fail("exactly one of the attributes 'location' and 'file_id' must be set, found ",
                location ? "both" : "neither");
  }
  for (auto [a, name] : {std::pair{offset, "offset"}, {length, "length"}, {dtype, "dtype"}, {shape, "shape"}}) {
    if (!a) return fail("missing attribute '", name, "'");
  }
  weights::WeightRef r;
  r.node = n.name();
  if (location) {
    r.location = location->s;
    // A .kiln names only the files a compile writes: never another file of
    // the weight directory, a path, or a file elsewhere.
    if (!weights::IsWeightFileName(r.location)) {
      return fail("external weight location '", EscapeBytes(r.location.substr(0, 128)),
                  "' is not a weight_<sha256> or <name>_weight_combined file name");
    }
  } else {
    r.file_id = file_id->s;
    if (!IsValidFileId(r.file_id)) {
      return fail("attribute 'file_id' = '", EscapeBytes(r.file_id.substr(0, 128)), "' (", r.file_id.size(),
                  " bytes) must be 1 to ", kMaxFileIdBytes, " printable ASCII bytes");
    }
  }
  if (offset->i < 0 || length->i < 0) {
    return fail("attributes 'offset' and 'length' must be >= 0, found ", offset->i, " and ", length->i);
  }
  r.offset = static_cast<std::uint64_t>(offset->i);
  r.length = static_cast<std::uint64_t>(length->i);
  std::int64_t end = 0;
  if (!CheckedAdd(offset->i, length->i, &end)) {
    return fail("attributes 'offset' + 'length' = ", offset->i, " + ", length->i, " overflow int64");
  }
  r.dtype = static_cast<DType>(dtype->i);
  if (dtype->i < 0 || dtype->i > 1000 || !DTypeSupported(r.dtype)) {
    return fail("attribute 'dtype' = ", dtype->i, " is not a supported type");
  }
  r.shape = shape->ints;
  KILN_ASSIGN_OR_RETURN(const std::int64_t bytes,
                        CheckedTensorBytes(r.dtype, r.shape, StrCat(n.Describe(), ": attribute 'shape'")));
  if (bytes != length->i) {
    return fail("attribute 'length' = ", length->i, " does not match dtype ", DTypeName(r.dtype), " x shape ",
                ShapeToString(r.shape), " = ", bytes, " bytes");
  }
  if (sha) {
    r.sha256 = sha->s;
    if (!weights::IsSha256Hex(r.sha256)) return fail("attribute 'kiln.sha256' is not 64 lowercase hex digits");
  }
  return r;
}

}  // namespace kiln::ops
