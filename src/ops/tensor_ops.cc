// Tensor ops: ConstantOfShape, Expand, GatherElements, GatherND, Pad, Range,
// ScatterND, Size, Split, Tile, TopK, Trilu, DepthToSpace, SpaceToDepth,
// Einsum.
//
// Ops whose output shape depends on an input's values (ConstantOfShape,
// Expand, Pad, Range, Split, Tile, TopK) read it with in_const(); when it is
// not a compile-time constant the affected dims are left -1.
#include "ops/tensor_ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "ops/common_infer.h"

namespace kiln::ops {

Result<EinsumSpec> ParseEinsum(const std::string& equation, const std::vector<Shape>& shapes) {
  auto fail = [&](const auto&... args) {
    return Error(StatusCode::kInvalidArgument, "equation '", equation, "': ", args...);
  };
  std::string eq;
  for (char ch : equation) {
    if (!std::isspace(static_cast<unsigned char>(ch))) eq += ch;
  }
  const std::size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',') terms.emplace_back();
    else terms.back() += ch;
  }
  if (terms.size() != shapes.size()) return fail("has ", terms.size(), " operand terms but the node has ", shapes.size(), " inputs");
  auto label = [](char ch) { return ch >= 'a' && ch <= 'z' ? ch - 'a' : ch >= 'A' && ch <= 'Z' ? 26 + ch - 'A' : -1; };
  // Splits a term into letters before/after its ellipsis (if any).
  struct Term { std::vector<int> pre, post; bool ell = false; };
  auto parse_term = [&](const std::string& t, Term* out) -> Status {
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        if (out->ell) return fail("term '", t, "' has more than one ellipsis");
        out->ell = true;
        i += 2;
        continue;
      }
      const int l = label(t[i]);
      if (l < 0) return fail("term '", t, "' has invalid character '", t[i], "' (letters and '...' only)");
      (out->ell ? out->post : out->pre).push_back(l);
    }
    return Status::Ok();
  };
  std::vector<Term> in(terms.size());
  int ell_dims = 0;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    KILN_RETURN_IF_ERROR(parse_term(terms[k], &in[k]));
    const int letters = static_cast<int>(in[k].pre.size() + in[k].post.size()), rank = static_cast<int>(shapes[k].size());
    if (in[k].ell ? letters > rank : letters != rank) {
      return fail("term '", terms[k], "' has ", letters, " labels but input ", k, " has rank ", rank);
    }
    if (in[k].ell) ell_dims = std::max(ell_dims, rank - letters);
  }
  EinsumSpec s;
  s.sizes.assign(52 + ell_dims, 0);
  std::vector<int> count(52 + ell_dims, 0);  // occurrences over all terms
  std::vector<bool> set(52 + ell_dims, false);
  for (std::size_t k = 0; k < in.size(); ++k) {
    std::vector<int> ids = in[k].pre;
    const int e = static_cast<int>(shapes[k].size() - in[k].pre.size() - in[k].post.size());
    for (int j = 0; j < e; ++j) ids.push_back(52 + ell_dims - e + j);
    ids.insert(ids.end(), in[k].post.begin(), in[k].post.end());
    for (std::size_t d = 0; d < ids.size(); ++d) {
      const int l = ids[d];
      const std::int64_t dim = shapes[k][d];
      const auto first = std::find(ids.begin(), ids.end(), l) - ids.begin();
      if (first < static_cast<std::ptrdiff_t>(d) && shapes[k][first] != dim) {  // a diagonal: no broadcasting
        return fail("input ", k, " repeats a label over dims ", first, " and ", d, " of different sizes (", shapes[k][first], " vs ", dim, ")");
      }
      std::int64_t& cur = s.sizes[l];
      ++count[l];
      if (!set[l] || cur == 1 || (cur < 0 && dim >= 0)) {
        if (!set[l] || dim != 1) cur = dim;
        set[l] = true;
      } else if (dim >= 0 && dim != 1 && dim != cur) {
        return fail("the label of dim ", d, " of input ", k, " has size ", dim, " there but ", cur, " elsewhere");
      }
    }
    s.inputs.push_back(ids);
  }
  if (arrow != std::string::npos) {
    Term out;
    KILN_RETURN_IF_ERROR(parse_term(eq.substr(arrow + 2), &out));
    std::vector<int> ids = out.pre;
    if (out.ell) {
      for (int j = 0; j < ell_dims; ++j) ids.push_back(52 + j);
    }
    ids.insert(ids.end(), out.post.begin(), out.post.end());
    std::vector<bool> seen(s.sizes.size(), false);
    for (int l : ids) {
      if (seen[l]) return fail("the output repeats a label");
      if (!count[l]) return fail("the output has a label that no input has");
      seen[l] = true;
    }
    s.output = ids;
  } else {  // implicit: the ellipsis dims, then labels used once, in ASCII order
    for (int j = 0; j < ell_dims; ++j) s.output.push_back(52 + j);
    for (int i = 0; i < 52; ++i) {
      const int l = (i + 26) % 52;
      if (count[l] == 1) s.output.push_back(l);
    }
  }
  return s;
}

namespace {

std::optional<std::vector<std::int64_t>> ConstInts(InferContext& c, int i) {
  const HostTensor* t = c.in_const(i);
  if (!t) return std::nullopt;
  return t->ToInt64Vector();
}

// Input i must be an integer tensor (int64, or int32 too when `int32_ok`)
// of rank `rank` (-1: any; -2: a scalar or a one-element 1-D tensor).
Status IntInput(InferContext& c, int i, const char* what, int rank, bool int32_ok = false) {
  if (!c.has_input(i)) return Status::Ok();
  const DType t = c.in_dtype(i);
  if (t != DType::kInt64 && !(int32_ok && t == DType::kInt32)) {
    return c.Fail("input ", i, " (", what, ") must be ", int32_ok ? "int32 or int64" : "int64", ", is ", DTypeName(t));
  }
  const Shape& s = c.in_shape(i);
  const bool ok = rank == -1 || (rank == -2 ? s.size() <= 1 && NumElements(s) != 0 && (s.empty() || s[0] <= 1)
                                            : static_cast<int>(s.size()) == rank);
  if (!ok) {
    return c.Fail("input ", i, " (", what, ") must be ", rank == -2 ? "a scalar or a 1-element 1-D tensor" : rank == 0 ? "a scalar" : "1-D",
                  ", has shape ", ShapeToString(s));
  }
  return Status::Ok();
}

Status InferConstantOfShape(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 0, "shape", 1));
  DType t = DType::kFloat32;
  if (const ir::Attribute* v = c.node().FindAttr("value")) {
    if (!v->t || v->t->numel() != 1) return c.Fail("attribute 'value' must be a one-element tensor");
    t = v->t->dtype();
    if (!DTypeSupported(t) || t == DType::kString) return c.Fail("attribute 'value' has unsupported type ", DTypeName(t));
  }
  auto spec = ConstInts(c, 0);
  if (!spec) {
    const std::int64_t n = c.in_shape(0)[0];
    c.SetOutput(0, t, Shape(n < 0 ? 1 : n, -1));
    return Status::Ok();
  }
  for (std::int64_t d : *spec) {
    if (d < 0) return c.Fail("input 0 (shape) ", ShapeToString(*spec), " has a negative dim");
  }
  c.SetOutput(0, t, *spec);
  return Status::Ok();
}

Status InferExpand(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "shape", 1));
  const Shape& x = c.in_shape(0);
  auto spec = ConstInts(c, 1);
  if (!spec) {
    const std::int64_t n = c.in_shape(1)[0];
    c.SetOutput(0, c.in_dtype(0), Shape(std::max<std::int64_t>(n, x.size()), -1));
    return Status::Ok();
  }
  for (std::int64_t d : *spec) {
    if (d < 0) return c.Fail("input 1 (shape) ", ShapeToString(*spec), " has a negative dim");
  }
  auto out = BroadcastShapes(x, *spec);
  if (!out.ok()) return c.Fail("input shape ", ShapeToString(x), " cannot expand to ", ShapeToString(*spec), ": ", out.status().message());
  c.SetOutput(0, c.in_dtype(0), out.value());
  return Status::Ok();
}

// Checks constant indices (input i) against a dim of size n.
Status CheckIndices(InferContext& c, int i, std::int64_t n, const char* what) {
  const HostTensor* idx = c.in_const(i);
  if (!idx || n < 0) return Status::Ok();
  for (std::int64_t k = 0; k < idx->numel(); ++k) {
    const std::int64_t v = idx->GetAsInt64(k);
    if (v < -n || v >= n) {
      return c.Fail("index ", v, " (input ", i, ", element ", k, ") is out of range for ", what, " of size ", n,
                    " (expected ", -n, "..", n - 1, ")");
    }
  }
  return Status::Ok();
}

Status InferGatherElements(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "indices", -1, true));
  const Shape& x = c.in_shape(0);
  const Shape& idx = c.in_shape(1);
  if (x.empty()) return c.Fail("input 0 (data) must have rank >= 1");
  if (idx.size() != x.size()) return c.Fail("input 1 (indices) has rank ", idx.size(), ", data has rank ", x.size(), " (they must match)");
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 0), x.size(), "axis"));
  KILN_RETURN_IF_ERROR(CheckIndices(c, 1, x[axis], "the axis"));
  c.SetOutput(0, c.in_dtype(0), idx);
  return Status::Ok();
}

Status InferGatherND(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "indices", -1));
  const Shape& x = c.in_shape(0);
  const Shape& idx = c.in_shape(1);
  const std::int64_t b = c.node().GetInt("batch_dims", 0);
  const auto r = static_cast<std::int64_t>(x.size()), q = static_cast<std::int64_t>(idx.size());
  if (r < 1 || q < 1) return c.Fail("data and indices must have rank >= 1, have shapes ", ShapeToString(x), " and ", ShapeToString(idx));
  if (b < 0 || b >= std::min(r, q)) return c.Fail("attribute 'batch_dims' = ", b, " must be in 0..", std::min(r, q) - 1);
  const std::int64_t last = idx.back();
  if (last < 0) return c.Fail("the last dim of indices must be known");
  if (last < 1 || last > r - b) return c.Fail("the last dim of indices (", last, ") must be in 1..", r - b, " (data rank - batch_dims)");
  for (std::int64_t d = 0; d < b; ++d) {
    if (x[d] >= 0 && idx[d] >= 0 && x[d] != idx[d]) {
      return c.Fail("batch dim ", d, " differs: data ", ShapeToString(x), ", indices ", ShapeToString(idx));
    }
  }
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), x.begin() + b + last, x.end());
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferPad(InferContext& c) {
  const std::string mode = c.node().GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    return c.Fail("attribute 'mode' has invalid value '", mode, "' (expected constant, reflect or edge)");
  }
  if (!c.has_input(1)) return c.Fail("'pads' is required (attribute before opset 11, input 1 since)");
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "pads", 1));
  if (c.has_input(2) && NumElements(c.in_shape(2)) != 1) {
    return c.Fail("input 2 (constant_value) must hold one value, has shape ", ShapeToString(c.in_shape(2)));
  }
  const Shape& x = c.in_shape(0);
  const std::size_t r = x.size();
  auto pads = ConstInts(c, 1);
  if (!pads) {
    c.SetOutput(0, c.in_dtype(0), Shape(r, -1));
    return Status::Ok();
  }
  if (pads->size() != 2 * r) return c.Fail("'pads' has ", pads->size(), " values, expected ", 2 * r, " (2 x input rank)");
  Shape out(r);
  for (std::size_t d = 0; d < r; ++d) {
    const std::int64_t b = (*pads)[d], e = (*pads)[d + r];
    if (x[d] < 0) {
      out[d] = -1;
      continue;
    }
    const __int128 padded = static_cast<__int128>(x[d]) + b + e;
    if (padded > kMaxTensorBytes) {
      return c.Fail("'pads' ", ShapeToString(*pads), " make dim ", d, " larger than Kiln's limit of ", kMaxTensorBytes);
    }
    out[d] = static_cast<std::int64_t>(padded);
    if (out[d] < 0) return c.Fail("'pads' ", ShapeToString(*pads), " removes more than the ", x[d], " elements of dim ", d);
    if (mode != "constant" && x[d] == 0 && (b > 0 || e > 0)) {
      return c.Fail("attribute 'mode' = '", mode, "' cannot pad dim ", d, ", which is empty");
    }
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferRange(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 2));
  const DType t = c.in_dtype(0);
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt16 && t != DType::kInt32 && t != DType::kInt64) {
    return c.Fail("input type ", DTypeName(t), " is not supported (float, double, int16, int32, int64)");
  }
  static const char* kNames[] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    if (NumElements(c.in_shape(i)) != 1) return c.Fail("input ", i, " (", kNames[i], ") must be a scalar, has shape ", ShapeToString(c.in_shape(i)));
  }
  const HostTensor *s = c.in_const(0), *l = c.in_const(1), *d = c.in_const(2);
  if (!s || !l || !d) {
    c.SetOutput(0, t, {-1});
    return Status::Ok();
  }
  std::int64_t n;
  if (IsFloating(t)) {
    const double delta = d->GetAsDouble(0);
    if (delta == 0) return c.Fail("input 2 (delta) is 0");
    const double count = std::ceil((l->GetAsDouble(0) - s->GetAsDouble(0)) / delta);
    KILN_ASSIGN_OR_RETURN(n, DimFromDouble(c, std::isnan(count) ? count : std::max(count, 0.0),
                                           "the element count ceil((limit - start) / delta)"));
  } else {
    // In 128 bits: limit - start and the division cannot overflow.
    const __int128 delta = d->GetAsInt64(0), span = static_cast<__int128>(l->GetAsInt64(0)) - s->GetAsInt64(0);
    if (delta == 0) return c.Fail("input 2 (delta) is 0");
    const __int128 q = span / delta + ((span % delta != 0) && ((span > 0) == (delta > 0)) ? 1 : 0);
    if (q > kMaxTensorBytes) {
      return c.Fail("the element count ceil((limit - start) / delta) is larger than Kiln's limit of ", kMaxTensorBytes);
    }
    n = static_cast<std::int64_t>(q);
  }
  c.SetOutput(0, t, {std::max<std::int64_t>(n, 0)});
  return Status::Ok();
}

Status InferScatterND(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "indices", -1));
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, 0));
  if (c.in_dtype(2) != c.in_dtype(0)) return c.Fail("input 2 (updates) has type ", DTypeName(c.in_dtype(2)), ", data has ", DTypeName(c.in_dtype(0)));
  const std::string red = c.node().GetString("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min") {
    return c.Fail("attribute 'reduction' has invalid value '", red, "' (expected none, add, mul, max or min)");
  }
  if (red != "none" && c.in_dtype(0) == DType::kBool) return c.Fail("attribute 'reduction' = '", red, "' needs a numeric type");
  const Shape& x = c.in_shape(0);
  const Shape& idx = c.in_shape(1);
  if (x.empty() || idx.empty()) return c.Fail("data and indices must have rank >= 1");
  const std::int64_t last = idx.back();
  if (last < 0) return c.Fail("the last dim of indices must be known");
  if (last < 1 || last > static_cast<std::int64_t>(x.size())) return c.Fail("the last dim of indices (", last, ") must be in 1..", x.size());
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + last, x.end());
  const Shape& u = c.in_shape(2);
  bool ok = u.size() == want.size();
  for (std::size_t d = 0; ok && d < u.size(); ++d) ok = u[d] < 0 || want[d] < 0 || u[d] == want[d];
  if (!ok) return c.Fail("input 2 (updates) has shape ", ShapeToString(u), ", expected ", ShapeToString(want));
  c.SetOutput(0, c.in_dtype(0), x);
  return Status::Ok();
}

Status InferSize(InferContext& c) {
  c.SetOutput(0, DType::kInt64, {});
  return Status::Ok();
}

Status InferSplit(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "split", 1));
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input 0 must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", 0), x.size(), "axis"));
  const int n = c.num_outputs();
  const std::int64_t dim = x[axis];
  std::vector<std::int64_t> sizes(n, -1);
  if (c.has_input(1)) {
    auto split = ConstInts(c, 1);
    if (split) {
      if (static_cast<int>(split->size()) != n) return c.Fail("'split' has ", split->size(), " values but the node has ", n, " outputs");
      std::int64_t sum = 0;
      for (std::int64_t v : *split) {
        if (v < 0) return c.Fail("'split' ", ShapeToString(*split), " has a negative size");
        KILN_ASSIGN_OR_RETURN(sum, AddDims(c, sum, v, "the sum of 'split'"));
      }
      if (dim >= 0 && sum != dim) return c.Fail("'split' ", ShapeToString(*split), " sums to ", sum, ", but axis ", axis, " has size ", dim);
      sizes = *split;
    } else if (dim >= 0 && c.DecidedByData(1)) {
      // Sizes computed from data: each output at most the whole axis,
      // data-dependent there (each run reads the sizes and checks them).
      const std::uint64_t mask = c.in_dynamic(0) | (axis < 64 ? std::uint64_t{1} << axis : 0);
      for (int j = 0; j < n; ++j) {
        c.SetOutput(j, c.in_dtype(0), x);
        c.SetOutputDynamic(j, mask);
      }
      return Status::Ok();
    }
  } else if (dim >= 0) {
    if (dim % n != 0) return c.Fail("axis ", axis, " of size ", dim, " cannot be split into ", n, " equal parts");
    sizes.assign(n, dim / n);
  }
  for (int j = 0; j < n; ++j) {
    Shape s = x;
    s[axis] = sizes[j];
    c.SetOutput(j, c.in_dtype(0), s);
  }
  return Status::Ok();
}

Status InferTile(InferContext& c) {
  const Shape& x = c.in_shape(0);
  Shape out = x;
  if (c.node().since_version() == 1) {  // Tile-1: (input, tiles, axis) scalars
    if (c.num_inputs() != 3 || !c.has_input(2)) return c.Fail("Tile-1 needs inputs (input, tiles, axis)");
    KILN_RETURN_IF_ERROR(IntInput(c, 1, "tiles", -2));
    KILN_RETURN_IF_ERROR(IntInput(c, 2, "axis", -2));
    const HostTensor *t = c.in_const(1), *a = c.in_const(2);
    if (!a) {
      c.SetOutput(0, c.in_dtype(0), Shape(x.size(), -1));
      return Status::Ok();
    }
    KILN_ASSIGN_OR_RETURN(int axis, c.Axis(a->GetAsInt64(0), x.size(), "axis"));
    if (t && t->GetAsInt64(0) < 0) return c.Fail("input 1 (tiles) is negative");
    out[axis] = -1;
    if (t && x[axis] >= 0) {
      KILN_ASSIGN_OR_RETURN(out[axis], MulDims(c, x[axis], t->GetAsInt64(0), "input dim x tiles"));
    }
    c.SetOutput(0, c.in_dtype(0), out);
    return Status::Ok();
  }
  if (c.num_inputs() != 2) return c.Fail("expected 2 inputs (input, repeats), found ", c.num_inputs());
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "repeats", 1));
  auto rep = ConstInts(c, 1);
  if (!rep) {
    c.SetOutput(0, c.in_dtype(0), Shape(x.size(), -1));
    return Status::Ok();
  }
  if (rep->size() != x.size()) return c.Fail("input 1 (repeats) has ", rep->size(), " values, the input has rank ", x.size());
  for (std::size_t d = 0; d < x.size(); ++d) {
    if ((*rep)[d] < 0) return c.Fail("input 1 (repeats) ", ShapeToString(*rep), " has a negative value");
    out[d] = -1;
    if (x[d] >= 0) {
      KILN_ASSIGN_OR_RETURN(out[d], MulDims(c, x[d], (*rep)[d], StrCat("dim ", d, " x repeats")));
    }
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}

Status InferTopK(InferContext& c) {
  if (!c.has_input(1)) return c.Fail("'k' is required (attribute before opset 10, input 1 since)");
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "K", -2));
  const Shape& x = c.in_shape(0);
  if (x.empty()) return c.Fail("input 0 must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int axis, c.Axis(c.node().GetInt("axis", -1), x.size(), "axis"));
  for (const char* a : {"largest", "sorted"}) {
    const std::int64_t v = c.node().GetInt(a, 1);
    if (v != 0 && v != 1) return c.Fail("attribute '", a, "' must be 0 or 1, found ", v);
  }
  Shape out = x;
  out[axis] = -1;
  if (const HostTensor* k = c.in_const(1)) {
    const std::int64_t kv = k->GetAsInt64(0);
    if (kv < 0) return c.Fail("'k' = ", kv, " is negative");
    if (x[axis] >= 0 && kv > x[axis]) return c.Fail("'k' = ", kv, " exceeds the size ", x[axis], " of axis ", axis);
    out[axis] = kv;
  } else if (x[axis] >= 0 && c.DecidedByData(1)) {
    // K computed from data: at most the axis, data-dependent there.
    out[axis] = x[axis];
    c.SetOutput(0, c.in_dtype(0), out);
    c.SetOutput(1, DType::kInt64, out);
    const std::uint64_t mask = c.in_dynamic(0) | (axis < 64 ? std::uint64_t{1} << axis : 0);
    c.SetOutputDynamic(0, mask);
    c.SetOutputDynamic(1, mask);
    return Status::Ok();
  }
  c.SetOutput(0, c.in_dtype(0), out);
  c.SetOutput(1, DType::kInt64, out);
  return Status::Ok();
}

Status InferTrilu(InferContext& c) {
  KILN_RETURN_IF_ERROR(IntInput(c, 1, "k", -2));
  if (c.in_shape(0).size() < 2) return c.Fail("input 0 must have rank >= 2, has shape ", ShapeToString(c.in_shape(0)));
  const std::int64_t upper = c.node().GetInt("upper", 1);
  if (upper != 0 && upper != 1) return c.Fail("attribute 'upper' must be 0 or 1, found ", upper);
  return InferSameAsInput(c);
}

Status InferDepthSpace(InferContext& c) {
  const bool d2s = c.node().op_type() == "DepthToSpace";
  const Shape& x = c.in_shape(0);
  if (x.size() != 4) return c.Fail("input must be 4-D (N, C, H, W), has shape ", ShapeToString(x));
  const ir::Attribute* bs = c.node().FindAttr("blocksize");
  if (!bs) return c.Fail("attribute 'blocksize' is required");
  const std::int64_t b = bs->kind == ir::Attribute::Kind::kInt ? bs->i : 0;
  KILN_RETURN_IF_ERROR(CheckAttrRange(c, "blocksize", b, 1));
  KILN_ASSIGN_OR_RETURN(const std::int64_t bb, MulDims(c, b, b, "attribute 'blocksize' squared"));
  const std::string mode = c.node().GetString("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return c.Fail("attribute 'mode' has invalid value '", mode, "' (expected DCR or CRD)");
  auto div = [](std::int64_t v, std::int64_t f) -> Result<std::int64_t> { return v < 0 ? -1 : v / f; };
  auto mul = [&](std::int64_t v, std::int64_t f) -> Result<std::int64_t> {
    if (v < 0) return std::int64_t{-1};
    return MulDims(c, v, f, "input dim x attribute 'blocksize'");
  };
  Shape out(4);
  out[0] = x[0];
  if (d2s) {
    if (x[1] >= 0 && x[1] % bb != 0) {
      return c.Fail("attribute 'blocksize' = ", b, ": channels ", x[1], " are not divisible by blocksize^2 = ", bb);
    }
    KILN_ASSIGN_OR_RETURN(out[1], div(x[1], bb));
    KILN_ASSIGN_OR_RETURN(out[2], mul(x[2], b));
    KILN_ASSIGN_OR_RETURN(out[3], mul(x[3], b));
    c.SetOutput(0, c.in_dtype(0), out);
  } else {
    for (int d = 2; d < 4; ++d) {
      if (x[d] >= 0 && x[d] % b != 0) {
        return c.Fail("attribute 'blocksize' = ", b, " does not divide spatial dim ", d, " of size ", x[d]);
      }
    }
    KILN_ASSIGN_OR_RETURN(out[1], mul(x[1], bb));
    KILN_ASSIGN_OR_RETURN(out[2], div(x[2], b));
    KILN_ASSIGN_OR_RETURN(out[3], div(x[3], b));
    c.SetOutput(0, c.in_dtype(0), out);
  }
  return Status::Ok();
}

Status InferEinsum(InferContext& c) {
  KILN_RETURN_IF_ERROR(CheckSameTypes(c, 0, c.num_inputs() - 1));
  const ir::Attribute* eq = c.node().FindAttr("equation");
  if (!eq) return c.Fail("attribute 'equation' is required");
  std::vector<Shape> shapes;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return c.Fail("input ", i, " is missing");
    shapes.push_back(c.in_shape(i));
  }
  auto spec = ParseEinsum(eq->s, shapes);
  if (!spec.ok()) return c.Fail("attribute 'equation': ", spec.status().message());
  Shape out;
  for (int l : spec.value().output) out.push_back(spec.value().sizes[l]);
  c.SetOutput(0, c.in_dtype(0), out);
  return Status::Ok();
}


// An int attribute as a 1-element int64 input.
Status IntAttrToInput(ir::Node& n, ir::Graph& g, const std::string& attr, int index) {
  const ir::Attribute* a = n.FindAttr(attr);
  if (!a) return Status::Ok();
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{1});
  *t->mutable_data_as<std::int64_t>() = a->i;
  n.SetInput(index, g.AddConstant(n.name() + "_" + attr, t));
  n.attrs().erase(attr);
  return Status::Ok();
}

}  // namespace

void RegisterTensorOpsOps(OpRegistry& r) {
  r.Register(Def("ConstantOfShape", {9}, 1, 1, {"value"}, InferConstantOfShape));
  r.Register(Def("Expand", {8, 13}, 2, 2, {}, InferExpand));
  r.Register(Def("GatherElements", {11, 13}, 2, 2, {"axis"}, InferGatherElements));
  r.Register(Def("GatherND", {11, 12, 13}, 2, 2, {"batch_dims"}, InferGatherND));
  OpDef pad = Def("Pad", {1, 2, 11, 13}, 1, 3, {"mode", "pads", "paddings", "value"}, InferPad);
  pad.normalize = [](ir::Node& n, ir::Graph& g) -> Status {
    if (n.since_version() >= 11) return Status::Ok();
    KILN_RETURN_IF_ERROR(AttrToInput(n, g, n.since_version() == 1 ? "paddings" : "pads", 1));
    return FloatAttrToInput(n, g, "value", 2);
  };
  r.Register(pad);
  r.Register(Def("Range", {11}, 3, 3, {}, InferRange));
  r.Register(Def("ScatterND", {11, 13, 16}, 3, 3, {"reduction"}, InferScatterND));
  r.Register(Def("Size", {1, 13}, 1, 1, {}, InferSize));
  OpDef split = Def("Split", {1, 2, 11, 13}, 1, 2, {"axis", "split"}, InferSplit);
  split.max_outputs = 1 << 20;
  split.normalize = [](ir::Node& n, ir::Graph& g) -> Status {
    return n.since_version() >= 13 ? Status::Ok() : AttrToInput(n, g, "split", 1);
  };
  r.Register(split);
  r.Register(Def("Tile", {1, 6, 13}, 2, 3, {}, InferTile));
  OpDef topk = Def("TopK", {1, 10, 11}, 1, 2, {"axis", "k", "largest", "sorted"}, InferTopK, NumericTypes());
  topk.min_outputs = topk.max_outputs = 2;
  topk.normalize = [](ir::Node& n, ir::Graph& g) -> Status {
    return n.since_version() >= 10 ? Status::Ok() : IntAttrToInput(n, g, "k", 1);
  };
  r.Register(topk);
  r.Register(Def("Trilu", {14}, 1, 2, {"upper"}, InferTrilu));
  r.Register(Def("DepthToSpace", {1, 11, 13}, 1, 1, {"blocksize", "mode"}, InferDepthSpace));
  r.Register(Def("SpaceToDepth", {1, 13}, 1, 1, {"blocksize"}, InferDepthSpace));
  r.Register(Def("Einsum", {12}, 1, 1 << 20, {"equation"}, InferEinsum, NumericTypes()));
}

}  // namespace kiln::ops
