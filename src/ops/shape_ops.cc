// Shape and data-movement ops: Flatten, Reshape, Transpose, Concat, Identity,
// Constant, Shape, Gather, Unsqueeze, Squeeze, Slice, Cast.
//
// Ops whose output shape depends on an input's values (Reshape, Slice,
// Squeeze, Unsqueeze) read it with in_const(); when it is not a compile-time
// constant the affected dims are left -1 and the compiler reports them.
#include "ops/shape_ops.h"

#include "common/checked.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "ops/common_infer.h"

namespace kiln::ops {

DimSpan ShapeSpan(std::int64_t rank, std::int64_t start, std::int64_t end) {
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<std::int64_t>(start, 0, rank);
  end = std::clamp<std::int64_t>(end, start, rank);  // before the start: empty
  return {start, end};
}

HostTensorPtr ShapeValueOf(const Shape& dims, std::int64_t start, std::int64_t end, std::uint64_t unknown) {
  const DimSpan span = ShapeSpan(static_cast<std::int64_t>(dims.size()), start, end);
  for (std::int64_t d = span.start; d < span.end && d < 64; ++d) {
    if (unknown >> d & 1) return nullptr;
  }
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{span.size()});
  for (std::int64_t d = span.start; d < span.end; ++d) t->mutable_data_as<std::int64_t>()[d - span.start] = dims[d];
  return t;
}

Result<Shape> ReshapeTarget(const Shape& in, const std::vector<std::int64_t>& spec, bool allowzero) {
  Shape out(spec.size());
  int infer_at = -1;
  std::int64_t known = 1;
  bool unknown = false, has_zero = false;
  auto fail = [&](const auto&... args) {
    return Error(StatusCode::kInvalidArgument, "cannot reshape ", ShapeToString(in), " to ",
                 ShapeToString(spec), ": ", args...);
  };
  for (std::size_t i = 0; i < spec.size(); ++i) {
    std::int64_t v = spec[i];
    if (v == -1) {
      if (infer_at >= 0) return fail("more than one -1 (dims ", infer_at, " and ", i, ")");
      infer_at = static_cast<int>(i);
      continue;
    }
    if (v < -1) return fail("dim ", i, " is ", v, " (dims must be >= -1)");
    if (v == 0) {
      has_zero = true;
      if (!allowzero) {
        if (i >= in.size()) return fail("dim ", i, " is 0 (copy the input dim), but the input has rank ", in.size());
        v = in[i];
      }
    }
    out[i] = v;
    if (v < 0) unknown = true;
    else if (!CheckedMul(known, v, &known) || known > kMaxTensorBytes) {
      return fail("the target's dims multiply to more than Kiln's limit of ", kMaxTensorBytes, " elements");
    }
  }
  if (allowzero && has_zero && infer_at >= 0) return fail("allowzero=1 forbids 0 together with -1");
  const std::int64_t total = NumElements(in);
  if (infer_at >= 0) {
    if (unknown || total < 0) {
      out[infer_at] = -1;
    } else if (known == 0 || total % known != 0) {
      return fail("the input's ", total, " elements cannot fill the -1 dim (other dims hold ", known, ")");
    } else {
      out[infer_at] = total / known;
    }
  } else if (!unknown && total >= 0 && known != total) {
    return fail("element counts differ (", total, " vs ", known, ")");
  }
  return out;
}

namespace {
// Normalises Squeeze/Unsqueeze axes against `rank` into a mask.
Result<std::vector<bool>> AxesMask(const std::vector<std::int64_t>& axes, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  std::vector<bool> mask(rank, false);
  for (std::int64_t a : axes) {
    if (a < -r || a >= r) {
      return Error(StatusCode::kInvalidArgument, "'axes' value ", a, " is out of range for rank ", r, " (expected ", -r, "..", r - 1, ")");
    }
    const std::int64_t ax = a < 0 ? a + r : a;
    if (mask[ax]) return Error(StatusCode::kInvalidArgument, "'axes' lists axis ", ax, " twice");
    mask[ax] = true;
  }
  return mask;
}
}  // namespace

Result<Shape> SqueezeShape(const Shape& in, const std::vector<std::int64_t>* axes) {
  std::vector<bool> mask(in.size(), false);
  if (axes) {
    KILN_ASSIGN_OR_RETURN(mask, AxesMask(*axes, in.size()));
  }
  Shape out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (axes && mask[i] && in[i] >= 0 && in[i] != 1) {
      return Error(StatusCode::kInvalidArgument, "cannot squeeze axis ", i, " of size ", in[i], " (input shape ", ShapeToString(in), ")");
    }
    if (!(axes ? mask[i] : in[i] == 1)) out.push_back(in[i]);
  }
  return out;
}

Result<Shape> UnsqueezeShape(const Shape& in, const std::vector<std::int64_t>& axes) {
  KILN_ASSIGN_OR_RETURN(std::vector<bool> mask, AxesMask(axes, in.size() + axes.size()));
  Shape out;
  auto next = in.begin();
  for (bool m : mask) out.push_back(m ? 1 : *next++);
  return out;
}

Result<std::vector<SliceDim>> SlicePlan(const Shape& in, const std::vector<std::int64_t>& starts,
                                        const std::vector<std::int64_t>& ends,
                                        std::vector<std::int64_t> axes,
                                        std::vector<std::int64_t> steps) {
  auto fail = [](const auto&... args) { return Error(StatusCode::kInvalidArgument, args...); };
  const auto rank = static_cast<std::int64_t>(in.size());
  const std::size_t n = starts.size();
  if (ends.size() != n) return fail("'starts' has ", n, " values but 'ends' has ", ends.size());
  if (axes.empty()) {
    if (static_cast<std::int64_t>(n) > rank) return fail("'starts' has ", n, " values, more than the input rank ", rank);
    for (std::size_t i = 0; i < n; ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);
  if (axes.size() != n) return fail("'axes' has ", axes.size(), " values, 'starts' has ", n);
  if (steps.size() != n) return fail("'steps' has ", steps.size(), " values, 'starts' has ", n);
  std::vector<SliceDim> plan(in.size());
  std::vector<bool> seen(in.size(), false);
  for (std::size_t i = 0; i < in.size(); ++i) plan[i] = {0, 1, in[i]};
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t a = axes[i];
    if (a < -rank || a >= rank) return fail("'axes' value ", a, " is out of range for rank ", rank);
    if (a < 0) a += rank;
    if (seen[a]) return fail("'axes' lists axis ", a, " twice");
    seen[a] = true;
    const std::int64_t step = steps[i], dim = in[a];
    if (step == 0) return fail("'steps' value for axis ", a, " is 0");
    if (dim <= 0) {
      plan[a] = {0, step, dim};
      continue;
    }
    std::int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
    }
    const std::int64_t span = step > 0 ? e - s : s - e;
    const std::int64_t mag = step > 0 ? step : (step == INT64_MIN ? INT64_MAX : -step);
    plan[a] = {s, step, span <= 0 ? 0 : (span - 1) / mag + 1};
  }
  return plan;
}

namespace {

std::int64_t Product(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t p = 1;
  bool unknown = false;
  for (std::size_t i = b; i < e; ++i) {
    if (s[i] == 0) return 0;
    if (s[i] < 0) unknown = true;
    else p *= s[i];
  }
  return unknown ? -1 : p;
}

// Input i must be a 1-D integer tensor (int64, or int32 too when `int32_ok`).
Status CheckIndexInput(InferContext& c, int i, const char* what, bool int32_ok) {
  if (!c.has_input(i)) return Status::Ok();
  const DType t = c.in_dtype(i);
  if (t != DType::kInt64 && !(int32_ok && t == DType::kInt32)) {
    return c.Fail("input ", i, " (", what, ") must be ", int32_ok ? "int32 or int64" : "int64", ", is ", DTypeName(t));
  }
  if (c.in_shape(i).size() != 1) {
    return c.Fail("input ", i, " (", what, ") must be 1-D, has shape ", ShapeToString(c.in_shape(i)));
  }
  return Status::Ok();
}

std::optional<std::vector<std::int64_t>> ConstInts(InferContext& c, int i) {
  const HostTensor* t = c.in_const(i);
  if (!t) return std::nullopt;
  return t->ToInt64Vector();
}

// Dropout (7, 10, 12, 13), as at inference: output 0 is the input and the
// optional mask is all true (bool from version 10, the input's type in 7).
// The drop ratio (attribute before 12, input 1 from 12; default 0.5) must be
// in [0, 1). A training-mode Dropout (input 2 true) with a nonzero ratio
// draws a random mask each run: refused, naming the node, since Kiln runs
// inference (such a model was exported in training mode) -- here when both
// are constants, else by the kernel when a run gives such values.
Status InferDropout(InferContext& c) {
  const bool v12 = c.node().since_version() >= 12;
  std::optional<double> ratio = 0.5;  // nullopt: an input not known when compiling
  if (!v12) {
    ratio = c.node().GetFloat("ratio", 0.5f);
  } else if (c.has_input(1)) {
    const DType t = c.in_dtype(1);
    if (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16 && t != DType::kFloat64) {
      return c.Fail("input 1 'ratio' has type ", DTypeName(t), ", expected a float scalar");
    }
    if (NumElements(c.in_shape(1)) != 1) {
      return c.Fail("input 1 'ratio' has shape ", ShapeToString(c.in_shape(1)), ", expected a scalar");
    }
    const HostTensor* r = c.in_const(1);
    ratio = r ? std::optional<double>(r->GetAsDouble(0)) : std::nullopt;
  }
  if (ratio && !(*ratio >= 0 && *ratio < 1)) return c.Fail("ratio = ", *ratio, " is outside [0, 1)");
  if (v12 && c.has_input(2)) {
    if (c.in_dtype(2) != DType::kBool || NumElements(c.in_shape(2)) != 1) {
      return c.Fail("input 2 'training_mode' is ", DTypeName(c.in_dtype(2)), ShapeToString(c.in_shape(2)),
                    ", expected a bool scalar");
    }
    const HostTensor* t = c.in_const(2);
    if (t && t->GetAsDouble(0) != 0 && ratio && *ratio != 0) {
      return c.Fail("training_mode is true with ratio ", *ratio, ": a training-time Dropout drops values at random, "
                    "and Kiln runs inference only (export the model in eval mode)");
    }
  }
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  if (c.num_outputs() > 1) c.SetOutput(1, c.node().since_version() >= 10 ? DType::kBool : c.in_dtype(0), c.in_shape(0));
  return Status::Ok();
}

Status InferFlatten(InferContext& c) {
  const Shape& x = c.in_shape(0);
  const auto r = static_cast<std::int64_t>(x.size());
  std::int64_t axis = c.node().GetInt("axis", 1);
  if (axis < -r || axis > r) {
    return c.Fail("attribute 'axis' = ", axis, " is out of range for rank ", r, " (expected ", -r, "..", r, ")");
  }
  if (axis < 0) axis += r;
  c.SetOutput(0, c.in_dtype(0), {Product(x, 0, axis), Product(x, axis, x.size())});
  return Status::Ok();
}

Status InferReshape(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckIndexInput(c, 1, "shape", false));
  auto spec = ConstInts(c, 1);
  if (!spec) {
    const std::int64_t n = c.in_shape(1)[0];
    c.SetOutput(0, c.in_dtype(0), Shape(n < 0 ? 1 : n, -1));
    return Status::Ok();
  }
  // A target the run computes from data with no bound the arithmetic
  // proves: its provisional bound (ir::Value::bound_provisional) bounds the
  // output dims the target resolves to (-1 inferred, 0 copied), each run
  // checking them before it runs (a larger one raises the bound).
  const ir::Value* target = c.node().input(1);
  if (target && !target->constant() && !target->bound_value() && target->bound_provisional()) {
    Shape out(spec->begin(), spec->end());
    for (std::int64_t& d : out) d = std::max<std::int64_t>(d, 0);
    c.SetOutput(0, c.in_dtype(0), out);
    return Status::Ok();
  }
  auto out = ReshapeTarget(c.in_shape(0), *spec, c.node().GetInt("allowzero", 0) != 0);
  if (!out.ok()) return c.Fail(out.status().message());
  c.SetOutput(0, c.in_dtype(0), out.value());
  return Status::Ok();
}

Status InferTranspose(InferContext& c) {
  const Shape& x = c.in_shape(0);
  const std::size_t r = x.size();
  std::vector<std::int64_t> perm = c.node().GetInts("perm");
  if (!c.node().HasAttr("perm")) {
    // Default: reverse the dims. Made explicit so passes can read it.
    for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(r - 1 - i));
    c.node().SetAttr("perm", ir::Attribute::Ints(perm));
  }
  if (perm.size() != r) return c.Fail("attribute 'perm' has ", perm.size(), " values, the input has rank ", r);
  std::vector<bool> seen(r, false);
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<std::int64_t>(r) || seen[perm[i]]) {
      return c.Fail("attribute 'perm' ", ShapeToString(perm), " is not a permutation of 0..", r - 1);
    }
    seen[perm[i]] = true;
    out[i] = x[perm[i]];
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferConcat(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, c.num_inputs() - 1));
  if (!c.node().HasAttr("axis")) return c.Fail("attribute 'axis' is required");
  const Shape& x0 = c.in_shape(0);
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 0), x0.size(), "axis"));
  Shape out = x0;
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return c.Fail("input ", i, " is missing");
    KILN_RETURN_IF_ERROR(MergeConcatShape(c, i, 0, x0, c.in_shape(i), axis, &out));
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferConstant(InferContext& c) {
  const ir::Node& n = c.node();
  if (n.attrs().size() != 1) return c.Fail("needs exactly one value attribute, has ", n.attrs().size());
  const auto& [name, a] = *n.attrs().begin();
  if (name == "value" && a.t) c.SetOutput(0, a.t->dtype(), a.t->shape());
  else if (name == "value_float") c.SetOutput(0, DType::kFloat32, {});
  else if (name == "value_int") c.SetOutput(0, DType::kInt64, {});
  else if (name == "value_floats") c.SetOutput(0, DType::kFloat32, {static_cast<std::int64_t>(a.floats.size())});
  else if (name == "value_ints") c.SetOutput(0, DType::kInt64, {static_cast<std::int64_t>(a.ints.size())});
  else {
    return Error(StatusCode::kUnimplemented, n.Describe(), ": attribute '", name,
                 "' is not supported (string and sparse constants are not)");
  }
  return Status::Ok();
}

Status InferShape(InferContext& c) {
  const auto r = static_cast<std::int64_t>(c.in_shape(0).size());
  const DimSpan span = ShapeSpan(r, c.node().GetInt("start", 0), c.node().GetInt("end", r));
  c.SetOutput(0, DType::kInt64, {span.size()});
  return Status::Ok();
}

Status InferGather(InferContext& c) {
  const DType it = c.in_dtype(1);
  if (it != DType::kInt32 && it != DType::kInt64) {
    return c.Fail("input 1 (indices) must be int32 or int64, is ", DTypeName(it));
  }
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input 0 (data) must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 0), x.size(), "axis"));
  if (const HostTensor* idx = c.in_const(1); idx && x[axis] >= 0) {
    for (std::int64_t i = 0; i < idx->numel(); ++i) {
      const std::int64_t v = idx->GetAsInt64(i);
      if (v < -x[axis] || v >= x[axis]) {
        return c.Fail("index ", v, " (input 1, element ", i, ") is out of range for axis ", axis,
                      " of size ", x[axis], " (expected ", -x[axis], "..", x[axis] - 1, ")");
      }
    }
  }
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), c.in_shape(1).begin(), c.in_shape(1).end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferUnsqueeze(InferContext& c) {
  if (!c.has_input(1)) return c.Fail("'axes' is required (attribute before opset 13, input 1 since)");
  KILN_RETURN_IF_ERROR(CheckIndexInput(c, 1, "axes", false));
  const Shape& x = c.in_shape(0);
  auto axes = ConstInts(c, 1);
  if (!axes) {
    const std::int64_t n = c.in_shape(1)[0];
    c.SetOutput(0, c.in_dtype(0), Shape(x.size() + (n < 0 ? 1 : n), -1));
    return Status::Ok();
  }
  auto out = UnsqueezeShape(x, *axes);
  if (!out.ok()) return c.Fail(out.status().message());
  c.SetOutput(0, c.in_dtype(0), out.value());
  return Status::Ok();
}

Status InferSqueeze(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckIndexInput(c, 1, "axes", false));
  const Shape& x = c.in_shape(0);
  auto axes = c.has_input(1) ? ConstInts(c, 1) : std::nullopt;
  if (c.has_input(1) && !axes) {
    const std::int64_t n = c.in_shape(1)[0];
    c.SetOutput(0, c.in_dtype(0), Shape(n < 0 || n > static_cast<std::int64_t>(x.size()) ? 1 : x.size() - n, -1));
    return Status::Ok();
  }
  auto out = SqueezeShape(x, axes ? &*axes : nullptr);
  if (!out.ok()) return c.Fail(out.status().message());
  c.SetOutput(0, c.in_dtype(0), out.value());
  return Status::Ok();
}

Status InferSlice(InferContext& c) {
  static const char* kNames[] = {"data", "starts", "ends", "axes", "steps"};
  for (int i = 1; i < c.num_inputs(); ++i) KILN_RETURN_IF_ERROR(CheckIndexInput(c, i, kNames[i], true));
  const Shape& x = c.in_shape(0);
  std::vector<std::vector<std::int64_t>> v(5);
  bool known = true;
  for (int i = 1; i < 5; ++i) {
    if (!c.has_input(i)) continue;
    auto vals = ConstInts(c, i);
    if (vals) v[i] = *vals;
    else known = false;
  }
  if (!known) {
    Shape out(x.size(), -1);
    // Values the run computes from data: each sliced dim is at most its
    // input's (every dim where the axes are data too), data-dependent.
    bool data = false;
    for (int i = 1; i < c.num_inputs(); ++i) data = data || (c.has_input(i) && !c.in_const(i) && c.DecidedByData(i));
    if (data && IsStatic(x)) {
      std::uint64_t mask = c.in_dynamic(0);
      const auto rank = static_cast<std::int64_t>(x.size());
      auto mark = [&](std::int64_t a) {
        if (a < 0) a += rank;
        if (a >= 0 && a < rank && a < 64) mask |= std::uint64_t{1} << a;
      };
      if (c.has_input(3) && !c.in_const(3)) {
        for (std::int64_t d = 0; d < rank; ++d) mark(d);
      } else if (c.has_input(3)) {
        for (std::int64_t a : v[3]) mark(a);
      } else {  // axes 0 .. len(starts) - 1
        const Shape& st = c.in_shape(1);
        for (std::int64_t d = 0; st.size() == 1 && d < st[0]; ++d) mark(d);
      }
      c.SetOutput(0, c.in_dtype(0), x);
      c.SetOutputDynamic(0, mask);
      return Status::Ok();
    }
    if (c.has_input(3) && c.in_const(3)) {  // dims not sliced keep their size
      out = x;
      for (std::int64_t a : v[3]) {
        if (a < 0) a += static_cast<std::int64_t>(x.size());
        if (a >= 0 && a < static_cast<std::int64_t>(x.size())) out[a] = -1;
      }
    }
    c.SetOutput(0, c.in_dtype(0), out);
    return Status::Ok();
  }
  auto plan = SlicePlan(x, v[1], v[2], v[3], v[4]);
  if (!plan.ok()) return c.Fail(plan.status().message());
  Shape out;
  for (const SliceDim& d : plan.value()) out.push_back(d.len);
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferCast(InferContext& c) {
  const ir::Attribute* to = c.node().FindAttr("to");
  if (!to || to->kind != ir::Attribute::Kind::kInt) return c.Fail("attribute 'to' (an element type) is required");
  const auto t = static_cast<DType>(to->i);
  if (t == DType::kString) {
    return Error(StatusCode::kUnimplemented, c.node().Describe(), ": attribute 'to' = STRING: casts to string are not supported");
  }
  if (!DTypeSupported(t)) {
    return Error(StatusCode::kUnimplemented, c.node().Describe(), ": attribute 'to' = ", to->i,
                 " is not an element type Kiln supports");
  }
  // ir::kRoundAttr (half-in-float32's Cast to a declared bfloat16 output)
  // means rounding to nearest from float32, and belongs on no other Cast
  // (the loader refuses it there): where the model computes that output in
  // another type (bool, an integer), the mark goes; such a Cast is exact
  // or defined without it.
  if (c.in_dtype(0) != DType::kFloat32 && c.in_dtype(0) != DType::kUndefined) c.node().attrs().erase(ir::kRoundAttr);
  c.SetOutput(0, t, c.in_shape(0));
  return Status::Ok();
}

// Cast-1 names the target type with a string ("FLOAT"); later versions use
// the TensorProto number.
Status NormalizeCast(ir::Node& n, ir::Graph&) {
  const ir::Attribute* to = n.FindAttr("to");
  if (!to || to->kind != ir::Attribute::Kind::kString) return Status::Ok();
  static const std::pair<const char*, DType> kNames[] = {
      {"FLOAT", DType::kFloat32}, {"UINT8", DType::kUInt8},     {"INT8", DType::kInt8},
      {"UINT16", DType::kUInt16}, {"INT16", DType::kInt16},     {"INT32", DType::kInt32},
      {"INT64", DType::kInt64},   {"STRING", DType::kString},   {"BOOL", DType::kBool},
      {"FLOAT16", DType::kFloat16}, {"DOUBLE", DType::kFloat64}, {"UINT32", DType::kUInt32},
      {"UINT64", DType::kUInt64}, {"BFLOAT16", DType::kBFloat16}};
  std::string s = to->s;
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (auto& [name, t] : kNames) {
    if (s == name) {
      n.SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(t)));
      return Status::Ok();
    }
  }
  return Error(StatusCode::kInvalidArgument, n.Describe(), ": attribute 'to' = '", to->s, "' is not an element type name");
}


// Moves attribute `attr` of versions before `since` into input `index`.
std::function<Status(ir::Node&, ir::Graph&)> AttrsToInputs(int since, std::vector<std::pair<std::string, int>> moves) {
  return [since, moves](ir::Node& n, ir::Graph& g) -> Status {
    if (n.since_version() >= since) return Status::Ok();
    for (auto& [attr, index] : moves) KILN_RETURN_IF_ERROR(AttrToInput(n, g, attr, index));
    return Status::Ok();
  };
}

}  // namespace

void RegisterShapeOps(OpRegistry& r) {
  r.Register(Def("Flatten", {1, 9, 11, 13}, 1, 1, {"axis"}, InferFlatten));
  r.Register(Def("Reshape", {5, 13, 14}, 2, 2, {"allowzero"}, InferReshape));
  r.Register(Def("Transpose", {1, 13}, 1, 1, {"perm"}, InferTranspose));
  r.Register(Def("Concat", {4, 11, 13}, 1, 1 << 20, {"axis"}, InferConcat));
  r.Register(Def("Identity", {1, 13, 14, 16}, 1, 1, {}, InferSameAsInput));
  OpDef dropout = Def("Dropout", {7, 10, 12, 13}, 1, 3, {"ratio", "seed"}, InferDropout);
  dropout.max_outputs = 2;
  r.Register(dropout);
  r.Register(Def("Constant", {1, 9, 11, 12, 13}, 0, 0,
                 {"value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
                  "value_string", "value_strings"},
                 InferConstant));
  r.Register(Def("Shape", {1, 13, 15}, 1, 1, {"start", "end"}, InferShape));
  r.Register(Def("Gather", {1, 11, 13}, 2, 2, {"axis"}, InferGather));
  OpDef unsqueeze = Def("Unsqueeze", {1, 11, 13}, 1, 2, {"axes"}, InferUnsqueeze);
  unsqueeze.normalize = AttrsToInputs(13, {{"axes", 1}});
  r.Register(unsqueeze);
  OpDef squeeze = Def("Squeeze", {1, 11, 13}, 1, 2, {"axes"}, InferSqueeze);
  squeeze.normalize = AttrsToInputs(13, {{"axes", 1}});
  r.Register(squeeze);
  OpDef slice = Def("Slice", {1, 10, 11, 13}, 3, 5, {"starts", "ends", "axes"}, InferSlice);
  slice.normalize = AttrsToInputs(10, {{"starts", 1}, {"ends", 2}, {"axes", 3}});
  r.Register(slice);
  OpDef cast = Def("Cast", {1, 6, 9, 13}, 1, 1, {"to"}, InferCast);
  cast.normalize = NormalizeCast;
  r.Register(cast);
}

}  // namespace kiln::ops
