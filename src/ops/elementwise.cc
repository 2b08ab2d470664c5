// Binary and n-ary elementwise ops with NumPy-style broadcasting: Add, Sub,
// Mul, Div, Pow, Mod, PRelu, Max, Min, comparisons (Equal, Greater,
// GreaterOrEqual, Less, LessOrEqual), logic (And, Or, Xor) and Where.
// Versions before 7 use the legacy `broadcast`/`axis` attributes.
#include "ops/math_common.h"

namespace kiln::ops {

namespace {

enum class OutType { kSameAsA, kBool };

// Output shape of a two-input op; checks the legacy broadcast form.
Result<Shape> BinaryShape(InferContext& c) {
  const Shape &a = c.in_shape(0), &b = c.in_shape(1);
  const ir::Node& n = c.node();
  if (n.since_version() >= 7) {
    for (const char* attr : {"broadcast", "axis"}) {
      if (n.HasAttr(attr)) return c.Fail("attribute '", attr, "' exists only before opset 7");
    }
  } else {
    if (n.GetInt("broadcast", 0) == 0) {
      if (a != b) {
        return c.Fail("shapes ", ShapeToString(a), " and ", ShapeToString(b),
                      " differ and attribute 'broadcast' is 0");
      }
      return a;
    }
    const auto ra = static_cast<std::int64_t>(a.size()), rb = static_cast<std::int64_t>(b.size());
    const std::int64_t axis = n.GetInt("axis", ra - rb);
    if (rb > ra || axis < 0 || axis > ra - rb) {
      return c.Fail("attribute 'axis' = ", axis, " cannot place B ", ShapeToString(b), " in A ",
                    ShapeToString(a));
    }
    for (std::int64_t i = 0; i < rb; ++i) {
      if (b[i] != 1 && b[i] != a[axis + i]) {
        return c.Fail("B ", ShapeToString(b), " does not match A ", ShapeToString(a),
                      " from attribute 'axis' = ", axis);
      }
    }
    return a;
  }
  auto s = BroadcastShapes(a, b);
  if (!s.ok()) return c.Fail(s.status().message());
  return s.value();
}

std::function<Status(InferContext&)> InferBinary(OutType out, bool same_types = true) {
  return [out, same_types](InferContext& c) -> Status {
    if (same_types) KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
    KILN_ASSIGN_OR_RETURN(Shape s, BinaryShape(c));
    c.SetOutput(0, out == OutType::kBool ? DType::kBool : c.in_dtype(0), std::move(s));
    return Status::Ok();
  };
}

// All inputs share a type; output = broadcast of all shapes (before
// version 8: all shapes equal).
Status InferVariadic(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, c.num_inputs() - 1));
  Shape s = c.in_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (c.node().since_version() < 8 && c.in_shape(i) != s) {
      return c.Fail("input ", i, " has shape ", ShapeToString(c.in_shape(i)), " but input 0 has ",
                    ShapeToString(s), " (no broadcasting before version 8)");
    }
    auto b = BroadcastShapes(s, c.in_shape(i));
    if (!b.ok()) return c.Fail("input ", i, ": ", b.status().message());
    s = b.value();
  }
  c.SetOutput(0, c.in_dtype(0), std::move(s));
  return Status::Ok();
}

Status InferPow(InferContext& c) {
  if (c.node().since_version() < 12) KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
  if (!NumericHalfTypes().count(c.in_dtype(1))) {
    return c.Fail("input 1 (exponent) has unsupported type ", DTypeName(c.in_dtype(1)));
  }
  KILN_ASSIGN_OR_RETURN(Shape s, BinaryShape(c));
  c.SetOutput(0, c.in_dtype(0), std::move(s));
  return Status::Ok();
}

Status InferMod(InferContext& c) {
  const std::int64_t fmod = c.node().GetInt("fmod", 0);
  if (fmod != 0 && fmod != 1) return c.Fail("attribute 'fmod' must be 0 or 1, is ", fmod);
  if (fmod == 0 && FloatHalfTypes().count(c.in_dtype(0))) {
    return c.Fail("attribute 'fmod' must be 1 for floating-point input type ",
                  DTypeName(c.in_dtype(0)));
  }
  return InferBinary(OutType::kSameAsA)(c);
}

// Slope broadcasts to X ("unidirectional"); output = X.
Status InferPRelu(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 1));
  auto s = BroadcastShapes(c.in_shape(0), c.in_shape(1));
  if (!s.ok() || s.value() != c.in_shape(0)) {
    return c.Fail("input 1 (slope) ", ShapeToString(c.in_shape(1)), " does not broadcast to X ",
                  ShapeToString(c.in_shape(0)));
  }
  return InferSameAsInput(c);
}

Status InferWhere(InferContext& c) {
  if (c.in_dtype(0) != DType::kBool) {
    return c.Fail("input 0 (condition) must be bool, is ", DTypeName(c.in_dtype(0)));
  }
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 1, 2));
  Shape s = c.in_shape(0);
  for (int i = 1; i < 3; ++i) {
    auto b = BroadcastShapes(s, c.in_shape(i));
    if (!b.ok()) return c.Fail("input ", i, ": ", b.status().message());
    s = b.value();
  }
  c.SetOutput(0, c.in_dtype(1), std::move(s));
  return Status::Ok();
}

const std::set<std::string> kLegacy = {"broadcast", "axis"};

// Opset<7 forms whose broadcast is NumPy's (broadcast=1 without axis: B is a
// suffix of A) become the version-7 form; an explicit axis stays legacy.
Status NormalizeLegacy(ir::Node& n, ir::Graph&) {
  if (n.since_version() >= 7) return Status::Ok();
  n.attrs().erase("consumed_inputs");
  if (n.GetInt("broadcast", 0) == 1 && !n.HasAttr("axis")) {
    n.attrs().erase("broadcast");
    n.set_since_version(7);
  }
  return Status::Ok();
}

void Reg(OpRegistry& r, const char* name, std::vector<int> versions, std::set<DType> types,
         std::function<Status(InferContext&)> infer, int min_in = 2, int max_in = 2,
         std::set<std::string> attrs = {}) {
  OpDef d;
  d.type = name;
  d.versions = std::move(versions);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.input_types = std::move(types);
  d.attributes = std::move(attrs);
  d.infer = std::move(infer);
  if (d.attributes.count("broadcast")) d.normalize = NormalizeLegacy;
  r.Register(d);
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& r) {
  const std::set<DType>& num = NumericHalfTypes();
  const std::set<DType> num_bool = Union({num, {DType::kBool}});
  for (const char* name : {"Add", "Sub", "Mul", "Div"}) {
    Reg(r, name, {1, 6, 7, 13, 14}, num, InferBinary(OutType::kSameAsA), 2, 2,
        {"broadcast", "axis", "consumed_inputs"});
  }
  Reg(r, "Pow", {1, 7, 12, 13, 15}, Union({FloatHalfTypes(), {DType::kInt32, DType::kInt64}}),
      InferPow, 2, 2, kLegacy);
  Reg(r, "Mod", {10, 13}, num, InferMod, 2, 2, {"fmod"});
  Reg(r, "PRelu", {1, 6, 7, 9, 16},
      Union({FloatHalfTypes(), {DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt64}}),
      InferPRelu, 2, 2, {"consumed_inputs"});
  for (const char* name : {"Max", "Min"}) {
    Reg(r, name, {1, 6, 8, 12, 13}, num, InferVariadic, 1, 1 << 20, {"consumed_inputs"});
  }
  Reg(r, "Equal", {1, 7, 11, 13}, num_bool, InferBinary(OutType::kBool), 2, 2, kLegacy);
  for (const char* name : {"Greater", "Less"}) {
    Reg(r, name, {1, 7, 9, 13}, num, InferBinary(OutType::kBool), 2, 2, kLegacy);
  }
  for (const char* name : {"GreaterOrEqual", "LessOrEqual"}) {
    Reg(r, name, {12, 16}, num, InferBinary(OutType::kBool));
  }
  for (const char* name : {"And", "Or", "Xor"}) {
    Reg(r, name, {1, 7}, {DType::kBool}, InferBinary(OutType::kBool), 2, 2, kLegacy);
  }
  Reg(r, "Where", {9, 16}, {DType::kBool}, InferWhere, 3, 3);
}

}  // namespace kiln::ops
