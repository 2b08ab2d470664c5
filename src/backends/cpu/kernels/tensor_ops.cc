// Tensor-op kernels: ConstantOfShape, Expand, Tile, DepthToSpace,
// SpaceToDepth (strided copies), GatherElements, GatherND, ScatterND, Pad,
// Range, Size, Split, TopK, Trilu and Einsum. Data movement works on elements
// as raw bytes (any element type); arithmetic dispatches on the type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "ops/tensor_ops.h"

namespace kiln::cpu {
namespace {

using I64 = std::int64_t;


// Product of dims [b, e) of s (e < 0: to the end).
I64 Prod(const Shape& s, I64 b = 0, I64 e = -1) {
  const I64 end = e < 0 ? static_cast<I64>(s.size()) : std::min<I64>(e, s.size());
  I64 p = 1;
  for (I64 i = b; i < end; ++i) p *= s[i];
  return p;
}


// Converts a double to one element of type `t` at `dst`.
void StoreScalar(DType t, double v, void* dst) {
  switch (t) {
    case DType::kFloat16: *static_cast<std::uint16_t*>(dst) = FloatToHalf(static_cast<float>(v)); return;
    case DType::kBFloat16: *static_cast<std::uint16_t*>(dst) = FloatToBFloat16(static_cast<float>(v)); return;
    case DType::kBool: *static_cast<std::uint8_t*>(dst) = v != 0; return;
    default:
      (void)DispatchNumeric(t, [&](auto tag) {
        *static_cast<typename decltype(tag)::type*>(dst) = static_cast<typename decltype(tag)::type>(v);
        return Status::Ok();
      });
  }
}

// ---- Strided copies ----------------------------------------------------------

using View = StridedView;

View Collapse(const View& v) { return CollapseStridedView(v, 1); }

// `dims` of `shape` (row-major) read in the order `perm`.
View Permuted(const Shape& shape, const std::vector<int>& perm) {
  const std::vector<I64> st = Strides(shape);
  View v;
  for (int p : perm) {
    v.dims.push_back(shape[p]);
    v.strides.push_back(st[p]);
  }
  return v;
}

template <typename E>
void StridedCopy(const View& v, const E* in, E* out) {
  const std::size_t r = v.dims.size();
  const I64 cols = v.dims[r - 1], sc = v.strides[r - 1];
  const I64 rows = cols ? Prod(v.dims) / cols : 0;
  if (rows == 0) return;
  in += v.offset;
  ParallelFor(rows, std::max<I64>(1, 16384 / std::max<I64>(cols, 1)), [&](I64 b, I64 e) {
    std::vector<I64> idx(r, 0);
    I64 base = 0;
    for (I64 d = static_cast<I64>(r) - 2, rem = b; d >= 0; --d) {
      idx[d] = rem % v.dims[d];
      rem /= v.dims[d];
      base += idx[d] * v.strides[d];
    }
    for (I64 row = b; row < e; ++row) {
      E* dst = out + row * cols;
      const E* src = in + base;
      if (sc == 1) std::memcpy(dst, src, cols * sizeof(E));
      else for (I64 j = 0; j < cols; ++j) dst[j] = src[j * sc];
      for (I64 d = static_cast<I64>(r) - 2; d >= 0; --d) {
        base += v.strides[d];
        if (++idx[d] < v.dims[d]) break;
        base -= idx[d] * v.strides[d];
        idx[d] = 0;
      }
    }
  });
}

Status CopyView(const View& v, std::size_t esize, const void* in, void* out) {
  return DispatchBySize(esize, [&](auto tag) {
    using E = typename decltype(tag)::type;
    StridedCopy(v, static_cast<const E*>(in), static_cast<E*>(out));
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> ViewKernel(const View& view, DType t) {
  const View v = Collapse(view);
  const std::size_t esize = DTypeSize(t);
  return MakeFn([v, esize](const KernelArgs& a) { return CopyView(v, esize, a.in(0), a.out(0)); });
}

Result<std::unique_ptr<Kernel>> MakeExpand(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const Shape& y = init.outputs[0].shape;
  const std::vector<I64> st = Strides(x);
  View v;
  v.dims = y;
  v.strides.assign(y.size(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t o = y.size() - x.size() + i;
    v.strides[o] = x[i] == 1 ? 0 : st[i];
  }
  return ViewKernel(v, init.inputs[0].dtype);
}

Result<std::unique_ptr<Kernel>> MakeTile(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const Shape& y = init.outputs[0].shape;
  const std::vector<I64> st = Strides(x);
  View v;
  for (std::size_t d = 0; d < x.size(); ++d) {  // each dim as (repeat, original)
    v.dims.insert(v.dims.end(), {x[d] ? y[d] / x[d] : 0, x[d]});
    v.strides.insert(v.strides.end(), {0, st[d]});
  }
  return ViewKernel(v, init.inputs[0].dtype);
}

Result<std::unique_ptr<Kernel>> MakeDepthSpace(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const I64 b = init.node->GetInt("blocksize", 1), n = x[0], c = x[1], h = x[2], w = x[3];
  View v;
  if (init.node->op_type() == "SpaceToDepth") {
    v = Permuted({n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4});
  } else if (init.node->GetString("mode", "DCR") == "DCR") {
    v = Permuted({n, b, b, c / (b * b), h, w}, {0, 3, 4, 1, 5, 2});
  } else {
    v = Permuted({n, c / (b * b), b, b, h, w}, {0, 1, 4, 2, 5, 3});
  }
  return ViewKernel(v, init.inputs[0].dtype);
}

Result<std::unique_ptr<Kernel>> MakeConstantOfShape(const KernelInit& init) {
  std::vector<std::uint8_t> value(DTypeSize(init.outputs[0].dtype), 0);
  if (const ir::Attribute* a = init.node->FindAttr("value"); a && a->t) {
    std::memcpy(value.data(), a->t->data(), value.size());
  }
  const I64 n = NumElements(init.outputs[0].shape);
  return MakeFn([value, n](const KernelArgs& a) {
    return DispatchBySize(value.size(), [&](auto tag) {
      using E = typename decltype(tag)::type;
      E v;
      std::memcpy(&v, value.data(), sizeof(E));
      std::fill_n(a.out_as<E>(0), n, v);
      return Status::Ok();
    });
  });
}

// ---- Gather / scatter ---------------------------------------------------------

Status IndexError(I64 v, I64 n, I64 at) {
  return Error(StatusCode::kOutOfRange, "index ", v, " (element ", at, " of 'indices') is out of range for a dim of size ", n,
               " (expected ", -n, "..", n - 1, ")");
}

Result<std::unique_ptr<Kernel>> MakeGatherElements(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const Shape& q = init.inputs[1].shape;
  const auto r = static_cast<I64>(x.size());
  I64 axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += r;
  const std::vector<I64> st = Strides(x);
  const std::size_t esize = DTypeSize(init.inputs[0].dtype);
  const bool i32 = init.inputs[1].dtype == DType::kInt32;
  return MakeFn([=](const KernelArgs& a) -> Status {
    const I64 total = NumElements(q), cols = q[r - 1], n = x[axis];
    auto idx_at = [&](I64 i) -> I64 { return i32 ? a.in_as<std::int32_t>(1)[i] : a.in_as<I64>(1)[i]; };
    for (I64 i = 0; i < total; ++i) {
      const I64 v = idx_at(i);
      if (v < -n || v >= n) return IndexError(v, n, i);
    }
    return DispatchBySize(esize, [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* in = a.in_as<E>(0);
      E* out = a.out_as<E>(0);
      ParallelFor(cols ? total / cols : 0, std::max<I64>(1, 16384 / std::max<I64>(cols, 1)), [&](I64 b, I64 e) {
        for (I64 row = b; row < e; ++row) {
          I64 base = 0;  // offset of the row without the axis coordinate
          for (I64 d = r - 2, rem = row; d >= 0; --d) {
            if (d != axis) base += rem % q[d] * st[d];
            rem /= q[d];
          }
          for (I64 j = 0; j < cols; ++j) {
            I64 v = idx_at(row * cols + j);
            if (v < 0) v += n;
            out[row * cols + j] = in[base + (axis == r - 1 ? 0 : j * st[r - 1]) + v * st[axis]];
          }
        }
      });
      return Status::Ok();
    });
  });
}

// Element offset (in units of the trailing slice) of each index tuple of
// `idx` ([..., last]) into dims x[b:b+last], per batch; checks ranges.
Status TupleOffsets(const Shape& x, I64 b, const I64* idx, I64 tuples, I64 last, std::vector<I64>* out) {
  out->resize(tuples);
  for (I64 t = 0; t < tuples; ++t) {
    I64 off = 0;
    for (I64 k = 0; k < last; ++k) {
      const I64 n = x[b + k];
      I64 v = idx[t * last + k];
      if (v < -n || v >= n) return IndexError(v, n, t * last + k);
      off = off * n + (v < 0 ? v + n : v);
    }
    (*out)[t] = off;
  }
  return Status::Ok();
}

Result<std::unique_ptr<Kernel>> MakeGatherND(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const Shape& q = init.inputs[1].shape;
  const I64 b = init.node->GetInt("batch_dims", 0), last = q.back();
  const I64 batches = Prod(x, 0, b), tuples = Prod(q, 0, q.size() - 1);
  const std::size_t esize = DTypeSize(init.inputs[0].dtype);
  const std::size_t slice = static_cast<std::size_t>(Prod(x, b + last)) * esize;
  const I64 batch_stride = Prod(x, b, b + last);  // in slices
  return MakeFn([=](const KernelArgs& a) -> Status {
    std::vector<I64> offs;
    KILN_RETURN_IF_ERROR(TupleOffsets(x, b, a.in_as<I64>(1), tuples, last, &offs));
    const auto* in = static_cast<const char*>(a.in(0));
    auto* out = static_cast<char*>(a.out(0));
    const I64 per_batch = batches ? tuples / batches : 0;
    ParallelFor(tuples, std::max<I64>(1, 65536 / std::max<std::size_t>(slice, 1)), [&](I64 s, I64 e) {
      for (I64 t = s; t < e; ++t) {
        const I64 batch = per_batch ? t / per_batch : 0;
        std::memcpy(out + t * slice, in + (batch * batch_stride + offs[t]) * slice, slice);
      }
    });
    return Status::Ok();
  });
}

template <typename T>
void Reduce(const std::string& red, T* dst, const T* src, I64 n) {
  if (red == "add") for (I64 i = 0; i < n; ++i) dst[i] += src[i];
  else if (red == "mul") for (I64 i = 0; i < n; ++i) dst[i] *= src[i];
  else if (red == "max") for (I64 i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
  else for (I64 i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
}

Result<std::unique_ptr<Kernel>> MakeScatterND(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const Shape& q = init.inputs[1].shape;
  const I64 last = q.back(), tuples = Prod(q, 0, q.size() - 1), slice = Prod(x, last);
  const DType t = init.inputs[0].dtype;
  const std::size_t esize = DTypeSize(t), bytes = init.outputs[0].bytes();
  const std::string red = init.node->GetString("reduction", "none");
  return MakeFn([=](const KernelArgs& a) -> Status {
    std::vector<I64> offs;
    KILN_RETURN_IF_ERROR(TupleOffsets(x, 0, a.in_as<I64>(1), tuples, last, &offs));
    auto* out = static_cast<char*>(a.out(0));
    if (out != a.in(0)) std::memcpy(out, a.in(0), bytes);
    const auto* upd = static_cast<const char*>(a.in(2));
    if (red == "none") {
      for (I64 k = 0; k < tuples; ++k) std::memcpy(out + offs[k] * slice * esize, upd + k * slice * esize, slice * esize);
      return Status::Ok();
    }
    return DispatchNumeric(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (I64 k = 0; k < tuples; ++k) {
        Reduce(red, reinterpret_cast<T*>(out) + offs[k] * slice, reinterpret_cast<const T*>(upd) + k * slice, slice);
      }
      return Status::Ok();
    });
  });
}

// ---- Pad ----------------------------------------------------------------------

// Source index along a dim of size n for padded position s (may be outside
// 0..n-1); -1 = the constant.
I64 PadSource(I64 s, I64 n, int mode) {
  if (s >= 0 && s < n) return s;
  if (mode == 0) return -1;
  if (mode == 2 || n == 1) return std::clamp<I64>(s, 0, n - 1);  // edge
  const I64 period = 2 * (n - 1);  // reflect (without repeating the edge)
  s %= period;
  if (s < 0) s += period;
  return s < n ? s : period - s;
}

Result<std::unique_ptr<Kernel>> MakePad(const KernelInit& init) {
  const std::string m = init.node->GetString("mode", "constant");
  const int mode = m == "constant" ? 0 : m == "reflect" ? 1 : 2;
  const Shape& x = init.inputs[0].shape;
  const Shape& y = init.outputs[0].shape;
  const DType t = init.inputs[0].dtype;
  const bool has_value = init.inputs.size() > 2 && init.inputs[2].present();
  const DType vt = has_value ? init.inputs[2].dtype : t;
  return MakeFn([=](const KernelArgs& a) -> Status {
    const std::vector<I64> pads = IntsOf(init, a, 1);
    const std::size_t r = x.size(), esize = DTypeSize(t);
    for (std::size_t d = 0; d < r; ++d) {
      if (pads.size() != 2 * r || x[d] + pads[d] + pads[d + r] != y[d]) {
        return Error(StatusCode::kInvalidArgument, "'pads' ", ShapeToString(pads), " do not give the compiled output shape ", ShapeToString(y));
      }
    }
    std::uint64_t value = 0;
    if (has_value && vt == t) std::memcpy(&value, a.in(2), esize);
    else if (has_value) {
      double v = 0;
      (void)DispatchNumeric(vt, [&](auto tag) { v = static_cast<double>(*a.in_as<typename decltype(tag)::type>(2)); return Status::Ok(); });
      StoreScalar(t, v, &value);
    }
    if (r == 0) {
      std::memcpy(a.out(0), a.in(0), esize);
      return Status::Ok();
    }
    std::vector<std::vector<I64>> src(r);
    for (std::size_t d = 0; d < r; ++d) {
      for (I64 o = 0; o < y[d]; ++o) src[d].push_back(PadSource(o - pads[d], x[d], mode));
    }
    const std::vector<I64> st = Strides(x);
    const I64 cols = y[r - 1], rows = cols ? NumElements(y) / cols : 0;
    return DispatchBySize(esize, [&](auto tag) {
      using E = typename decltype(tag)::type;
      E fill;
      std::memcpy(&fill, &value, sizeof(E));
      const E* in = a.in_as<E>(0);
      E* out = a.out_as<E>(0);
      const std::vector<I64>& last = src[r - 1];
      ParallelFor(rows, std::max<I64>(1, 16384 / std::max<I64>(cols, 1)), [&](I64 b, I64 e) {
        for (I64 row = b; row < e; ++row) {
          I64 base = 0;
          bool constant = false;
          for (I64 d = static_cast<I64>(r) - 2, rem = row; d >= 0; --d) {
            const I64 s = src[d][rem % y[d]];
            rem /= y[d];
            constant |= s < 0;
            base += s * st[d];
          }
          E* dst = out + row * cols;
          if (constant) {
            std::fill_n(dst, cols, fill);
            continue;
          }
          for (I64 j = 0; j < cols; ++j) dst[j] = last[j] < 0 ? fill : in[base + last[j]];
        }
      });
      return Status::Ok();
    });
  });
}

// ---- Range, Size, Split, Trilu ----------------------------------------------------

Result<std::unique_ptr<Kernel>> MakeRange(const KernelInit& init) {
  const DType t = init.outputs[0].dtype;
  const I64 n = NumElements(init.outputs[0].shape);
  return MakeFn([t, n](const KernelArgs& a) {
    return DispatchNumeric(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T start = *a.in_as<T>(0), delta = *a.in_as<T>(2);
      T* out = a.out_as<T>(0);
      if constexpr (std::is_integral_v<T>) {
        // In 128 bits: i * delta may not fit T although every element does
        // (each lies between start and limit).
        for (I64 i = 0; i < n; ++i) {
          out[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
        }
      } else {
        for (I64 i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      }
      return Status::Ok();
    });
  });
}

Result<std::unique_ptr<Kernel>> MakeSize(const KernelInit& init) {
  const I64 n = NumElements(init.inputs[0].shape);
  return MakeFn([n](const KernelArgs& a) {
    *a.out_as<I64>(0) = n;
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> MakeSplit(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  I64 axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += static_cast<I64>(x.size());
  const std::size_t esize = DTypeSize(init.inputs[0].dtype);
  const I64 outer = Prod(x, 0, axis), inner = Prod(x, axis + 1);
  std::vector<std::size_t> chunk;  // bytes per outer index, per output
  for (const TensorDesc& o : init.outputs) chunk.push_back(o.shape[axis] * inner * esize);
  const std::size_t in_chunk = x[axis] * inner * esize;
  return MakeFn([=](const KernelArgs& a) {
    const auto* in = static_cast<const char*>(a.in(0));
    ParallelFor(outer, std::max<I64>(1, 65536 / std::max<std::size_t>(in_chunk, 1)), [&](I64 b, I64 e) {
      for (I64 o = b; o < e; ++o) {
        std::size_t off = o * in_chunk;
        for (std::size_t j = 0; j < chunk.size(); off += chunk[j++]) {
          if (chunk[j]) std::memcpy(static_cast<char*>(a.out(static_cast<int>(j))) + o * chunk[j], in + off, chunk[j]);
        }
      }
    });
    return Status::Ok();
  });
}

Result<std::unique_ptr<Kernel>> MakeTrilu(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const I64 rows = x[x.size() - 2], cols = x.back(), mats = rows * cols != 0 ? NumElements(x) / (rows * cols) : 0;
  const bool upper = init.node->GetInt("upper", 1) != 0, has_k = init.inputs.size() > 1 && init.inputs[1].present();
  const std::size_t esize = DTypeSize(init.inputs[0].dtype);
  return MakeFn([=](const KernelArgs& a) {
    // Any k beyond +-(rows + cols) keeps all or nothing: clamped so that
    // i + k cannot overflow.
    const I64 k = has_k ? std::clamp<I64>(IntsOf(init, a, 1)[0], -(rows + cols + 1), rows + cols + 1) : 0;
    const auto* in = static_cast<const char*>(a.in(0));
    auto* out = static_cast<char*>(a.out(0));
    ParallelFor(mats * rows, std::max<I64>(1, 4096 / std::max<I64>(cols, 1)), [&](I64 b, I64 e) {
      for (I64 m = b; m < e; ++m) {
        const I64 i = m % rows;
        // Kept columns: j >= i + k (upper) or j <= i + k (lower).
        const I64 lo = upper ? std::clamp<I64>(i + k, 0, cols) : 0, hi = upper ? cols : std::clamp<I64>(i + k + 1, 0, cols);
        char* dst = out + m * cols * esize;
        std::memset(dst, 0, cols * esize);
        if (hi > lo) std::memcpy(dst + lo * esize, in + (m * cols + lo) * esize, (hi - lo) * esize);
      }
    });
    return Status::Ok();
  });
}

// ---- TopK ---------------------------------------------------------------------------

template <typename T>
Status RunTopK(const KernelArgs& a, const Shape& x, int axis, I64 k, bool largest, bool sorted) {
  (void)sorted;  // results are always sorted (allowed when sorted=0)
  const I64 n = x[axis], outer = Prod(x, 0, axis), inner = Prod(x, axis + 1);
  const T* in = a.in_as<T>(0);
  T* vals = a.out_as<T>(0);
  I64* idx = a.out_as<I64>(1);
  ParallelFor(outer * inner, std::max<I64>(1, 4096 / std::max<I64>(n, 1)), [&](I64 b, I64 e) {
    std::vector<I64> order(n);
    for (I64 line = b; line < e; ++line) {
      const I64 o = line / inner, i = line % inner;
      const T* src = in + o * n * inner + i;
      std::iota(order.begin(), order.end(), I64{0});
      // Ties keep the lower index first; NaN counts as the largest value.
      auto cmp = [&](I64 p, I64 q) {
        const T u = src[p * inner], v = src[q * inner];
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(u) || std::isnan(v)) {
            if (std::isnan(u) && std::isnan(v)) return p < q;
            return largest ? std::isnan(u) : std::isnan(v);
          }
        }
        if (u != v) return largest ? u > v : u < v;
        return p < q;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
      for (I64 j = 0; j < k; ++j) {
        vals[(o * k + j) * inner + i] = src[order[j] * inner];
        idx[(o * k + j) * inner + i] = order[j];
      }
    }
  });
  return Status::Ok();
}

Result<std::unique_ptr<Kernel>> MakeTopK(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  I64 axis = init.node->GetInt("axis", -1);
  if (axis < 0) axis += static_cast<I64>(x.size());
  const bool largest = init.node->GetInt("largest", 1) != 0, sorted = init.node->GetInt("sorted", 1) != 0;
  const DType t = init.inputs[0].dtype;
  const I64 k_out = init.outputs[0].shape[axis];
  return MakeFn([=](const KernelArgs& a) -> Status {
    const I64 k = IntsOf(init, a, 1)[0];
    if (k < 0 || k > x[axis]) {
      return Error(StatusCode::kInvalidArgument, "'k' = ", k, " is out of range for axis ", axis, " of size ", x[axis]);
    }
    if (k != k_out) return Error(StatusCode::kInvalidArgument, "'k' = ", k, ", but the model was compiled for k = ", k_out);
    return DispatchNumeric(t, [&](auto tag) {
      return RunTopK<typename decltype(tag)::type>(a, x, static_cast<int>(axis), k, largest, sorted);
    });
  });
}

// ---- Einsum -------------------------------------------------------------------------
//
// Planned at load: each operand's repeated labels become a diagonal (strided
// copy); labels no later operand or the output needs are summed out; operands
// then combine left to right as batched matmuls ([batch, m, k] x [batch, k, n],
// operands transposed into that layout first; oneDNN for float32); a last
// strided copy puts the result in the output's label order.

template <typename T>
class EinsumKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    std::vector<Shape> shapes;
    for (const TensorDesc& d : init.inputs) shapes.push_back(d.shape);
    KILN_ASSIGN_OR_RETURN(spec_, ops::ParseEinsum(init.node->GetString("equation", ""), shapes));
    const int n = static_cast<int>(shapes.size());
    std::vector<Opnd> ops;
    for (int k = 0; k < n; ++k) ops.push_back(Diagonal(-1 - k, spec_.inputs[k], shapes[k]));
    auto needed_after = [&](int k) {  // labels of operands after k and the output
      std::vector<bool> need(spec_.sizes.size(), false);
      for (int l : spec_.output) need[l] = true;
      for (int j = k + 1; j < n; ++j) {
        for (int l : ops[j].labels) need[l] = true;
      }
      return need;
    };
    Opnd cur = ops[0];
    for (int k = 1; k < n; ++k) {
      std::vector<bool> need = needed_after(k);
      std::vector<bool> in_b(need.size(), false), in_a(need.size(), false);
      for (int l : ops[k].labels) in_b[l] = true;
      for (int l : cur.labels) in_a[l] = true;
      KILN_RETURN_IF_ERROR(SumOut(&cur, [&](int l) { return need[l] || in_b[l]; }));
      Opnd b = ops[k];
      KILN_RETURN_IF_ERROR(SumOut(&b, [&](int l) { return need[l] || in_a[l]; }));
      KILN_RETURN_IF_ERROR(Combine(cur, b, need, &cur));
    }
    std::vector<bool> need = needed_after(n - 1);
    KILN_RETURN_IF_ERROR(SumOut(&cur, [&](int l) { return need[l]; }));
    Step s;
    s.kind = Step::kCopy;
    s.src = cur.buf;
    s.dst = kOut;
    s.view = Arrange(cur, spec_.output);
    steps_.push_back(s);
    return Status::Ok();
  }

  Status Run(const KernelArgs& a) override {
    std::vector<std::vector<T>> temps(temp_sizes_.size());
    for (std::size_t i = 0; i < temps.size(); ++i) temps[i].resize(temp_sizes_[i]);
    auto ptr = [&](int id) -> T* {
      if (id == kOut) return a.out_as<T>(0);
      if (id < 0) return const_cast<T*>(a.in_as<T>(-1 - id));
      return temps[id].data();
    };
    for (const Step& s : steps_) {
      const T* src = ptr(s.src);
      T* dst = ptr(s.dst);
      if (s.kind == Step::kCopy) {
        StridedCopy(s.view, src, dst);
      } else if (s.kind == Step::kSum) {
        ParallelFor(s.m, std::max<I64>(1, 16384 / std::max<I64>(s.k, 1)), [&](I64 b, I64 e) {
          for (I64 i = b; i < e; ++i) {
            T acc = 0;
            for (I64 j = 0; j < s.k; ++j) acc += src[i * s.k + j];
            dst[i] = acc;
          }
        });
      } else {
        MatMul(s, src, ptr(s.src2), dst, a.ctx);
      }
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override {
    std::size_t w = 0;
    for (const Step& s : steps_) w = std::max(w, s.scratch ? s.scratch->bytes : 0);
    return w;
  }

 private:
  static constexpr int kOut = 1 << 30;
  struct Opnd {  // a contiguous row-major tensor with one label per dim
    int buf;
    std::vector<int> labels;
    Shape dims;
  };
  struct Step {
    enum Kind { kCopy, kSum, kMatMul } kind = kCopy;
    int src = 0, src2 = 0, dst = 0;
    View view;                     // kCopy
    I64 batch = 1, m = 1, k = 1, n = 1;  // kSum: m rows of k; kMatMul
    std::shared_ptr<dnnl::matmul> prim;
    std::shared_ptr<Scratchpad> scratch;  // the primitive's user scratchpad
  };

  int NewTemp(I64 size) {
    temp_sizes_.push_back(static_cast<std::size_t>(size));
    return static_cast<int>(temp_sizes_.size() - 1);
  }

  // `o` read in label order `order` (labels of o), broadcasting its size-1
  // dims to the label sizes.
  View Arrange(const Opnd& o, const std::vector<int>& order) const {
    const std::vector<I64> st = Strides(o.dims);
    View v;
    for (int l : order) {
      const auto p = std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin();
      const I64 size = std::max(spec_.sizes[l], o.dims[p]);
      v.dims.push_back(size);
      v.strides.push_back(o.dims[p] == 1 && size != 1 ? 0 : st[p]);
    }
    return Collapse(v);
  }

  static bool Identity(const View& v) {
    I64 want = 1;
    for (std::size_t d = v.dims.size(); d-- > 0;) {
      if (v.dims[d] != 1 && v.strides[d] != want) return false;
      want *= v.dims[d];
    }
    return v.offset == 0;
  }

  // `o` rearranged to `order` in a new buffer (or as is when that is its layout).
  Opnd Rearranged(const Opnd& o, const std::vector<int>& order) {
    Opnd r{o.buf, order, {}};
    for (int l : order) {
      const auto p = std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin();
      r.dims.push_back(std::max(spec_.sizes[l], o.dims[p]));
    }
    const View v = Arrange(o, order);
    if (Identity(v) && NumElements(r.dims) == NumElements(o.dims)) return r;
    Step s;
    s.kind = Step::kCopy;
    s.src = o.buf;
    s.dst = r.buf = NewTemp(NumElements(r.dims));
    s.view = v;
    steps_.push_back(s);
    return r;
  }

  // Input `buf` with repeated labels reduced to their diagonal.
  Opnd Diagonal(int buf, const std::vector<int>& labels, const Shape& shape) {
    const std::vector<I64> st = Strides(shape);
    Opnd o{buf, {}, {}};
    View v;
    for (std::size_t d = 0; d < labels.size(); ++d) {
      const auto p = std::find(o.labels.begin(), o.labels.end(), labels[d]) - o.labels.begin();
      if (p < static_cast<I64>(o.labels.size())) {
        v.strides[p] += st[d];
        continue;
      }
      o.labels.push_back(labels[d]);
      o.dims.push_back(shape[d]);
      v.dims.push_back(shape[d]);
      v.strides.push_back(st[d]);
    }
    if (o.labels.size() == labels.size()) return o;
    Step s;
    s.kind = Step::kCopy;
    s.src = buf;
    s.dst = o.buf = NewTemp(NumElements(o.dims));
    s.view = Collapse(v);
    steps_.push_back(s);
    return o;
  }

  // Sums out the labels of *o for which keep(label) is false.
  template <typename Keep>
  Status SumOut(Opnd* o, Keep&& keep) {
    std::vector<int> kept, dropped;
    for (int l : o->labels) (keep(l) ? kept : dropped).push_back(l);
    if (dropped.empty()) return Status::Ok();
    std::vector<int> order = kept;
    order.insert(order.end(), dropped.begin(), dropped.end());
    Opnd r = Rearranged(*o, order);
    Step s;
    s.kind = Step::kSum;
    s.src = r.buf;
    s.k = Prod(r.dims, static_cast<I64>(kept.size()));
    s.m = Prod(r.dims, 0, static_cast<I64>(kept.size()));
    Opnd out{NewTemp(s.m), kept, Shape(r.dims.begin(), r.dims.begin() + kept.size())};
    s.dst = out.buf;
    steps_.push_back(s);
    *o = out;
    return Status::Ok();
  }

  Status Combine(const Opnd& a, const Opnd& b, const std::vector<bool>& need, Opnd* out) {
    std::vector<int> batch, ma, con, nb;
    auto has = [](const Opnd& o, int l) { return std::find(o.labels.begin(), o.labels.end(), l) != o.labels.end(); };
    for (int l : a.labels) (has(b, l) ? (need[l] ? batch : con) : ma).push_back(l);
    for (int l : b.labels) {
      if (!has(a, l)) nb.push_back(l);
    }
    auto cat = [](std::initializer_list<const std::vector<int>*> parts) {
      std::vector<int> r;
      for (auto* p : parts) r.insert(r.end(), p->begin(), p->end());
      return r;
    };
    const Opnd ra = Rearranged(a, cat({&batch, &ma, &con}));
    const Opnd rb = Rearranged(b, cat({&batch, &con, &nb}));
    auto size_of = [&](const std::vector<int>& ls) {
      I64 p = 1;
      for (int l : ls) {
        const auto pa = std::find(ra.labels.begin(), ra.labels.end(), l) - ra.labels.begin();
        p *= pa < static_cast<I64>(ra.labels.size()) ? ra.dims[pa]
                                                      : rb.dims[std::find(rb.labels.begin(), rb.labels.end(), l) - rb.labels.begin()];
      }
      return p;
    };
    Step s;
    s.kind = Step::kMatMul;
    s.src = ra.buf;
    s.src2 = rb.buf;
    s.batch = size_of(batch);
    s.m = size_of(ma);
    s.k = size_of(con);
    s.n = size_of(nb);
    out->labels = cat({&batch, &ma, &nb});
    out->dims.clear();
    for (std::size_t i = 0; i < batch.size() + ma.size(); ++i) out->dims.push_back(ra.dims[i]);
    for (std::size_t i = batch.size() + con.size(); i < rb.dims.size(); ++i) out->dims.push_back(rb.dims[i]);
    s.dst = out->buf = NewTemp(NumElements(out->dims));
    if constexpr (std::is_same_v<T, float>) {
      if (s.batch * s.m * s.n * s.k > 0) {
        KILN_RETURN_IF_ERROR(DnnlCall("Einsum", [&] {
          dnnl::matmul::desc d(PlainDesc({s.batch, s.m, s.k}), PlainDesc({s.batch, s.k, s.n}), PlainDesc({s.batch, s.m, s.n}));
          dnnl::matmul::primitive_desc pd(d, UserScratchpad(), DnnlEngine());
          s.prim = std::make_shared<dnnl::matmul>(pd);
          s.scratch = std::make_shared<Scratchpad>(ScratchpadFor(pd));
        }));
      }
    }
    steps_.push_back(s);
    return Status::Ok();
  }

  void MatMul(const Step& s, const T* a, const T* b, T* c, const device::ExecContext* ctx) const {
    if (s.prim) {
      using dnnl::memory;
      memory am(PlainDesc({s.batch, s.m, s.k}), DnnlEngine(), const_cast<T*>(a));
      memory bm(PlainDesc({s.batch, s.k, s.n}), DnnlEngine(), const_cast<T*>(b));
      memory cm(PlainDesc({s.batch, s.m, s.n}), DnnlEngine(), c);
      s.prim->execute(DnnlStream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                                     {DNNL_ARG_SCRATCHPAD, s.scratch->Bind(ctx)}});
      DnnlStream().wait();
      return;
    }
    // No oneDNN matmul for this type (float64, integers): blocked loops.
    ParallelFor(s.batch * s.m, std::max<I64>(1, 4096 / std::max<I64>(s.k * s.n, 1)), [&](I64 lo, I64 hi) {
      for (I64 bi = lo; bi < hi; ++bi) {
        const I64 bt = bi / std::max<I64>(s.m, 1);
        T* crow = c + bi * s.n;
        std::fill_n(crow, s.n, T(0));
        const T* arow = a + bi * s.k;
        const T* bmat = b + bt * s.k * s.n;
        for (I64 kk = 0; kk < s.k; ++kk) {
          const T av = arow[kk];
          const T* brow = bmat + kk * s.n;
          for (I64 j = 0; j < s.n; ++j) crow[j] += av * brow[j];
        }
      }
    });
  }

  ops::EinsumSpec spec_;
  std::vector<Step> steps_;
  std::vector<std::size_t> temp_sizes_;
};

Result<std::unique_ptr<Kernel>> MakeEinsum(const KernelInit& init) {
  std::unique_ptr<Kernel> k;
  KILN_RETURN_IF_ERROR(DispatchNumeric(init.inputs[0].dtype, [&](auto tag) -> Status {
    auto e = std::make_unique<EinsumKernel<typename decltype(tag)::type>>();
    KILN_RETURN_IF_ERROR(e->Init(init));
    k = std::move(e);
    return Status::Ok();
  }));
  return k;
}

}  // namespace

void RegisterTensorOpsKernels(KernelRegistry& r) {
  r.Register("ConstantOfShape", MakeConstantOfShape);
  r.Register("Expand", MakeExpand);
  r.Register("Tile", MakeTile);
  r.Register("DepthToSpace", MakeDepthSpace);
  r.Register("SpaceToDepth", MakeDepthSpace);
  r.Register("GatherElements", MakeGatherElements);
  r.Register("GatherND", MakeGatherND);
  r.Register("ScatterND", MakeScatterND);
  r.Register("Pad", MakePad);
  r.Register("Range", MakeRange);
  r.Register("Size", MakeSize);
  r.Register("Split", MakeSplit);
  r.Register("Trilu", MakeTrilu);
  r.Register("TopK", MakeTopK);
  r.Register("Einsum", MakeEinsum);
}

}  // namespace kiln::cpu
