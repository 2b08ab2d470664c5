// Broadcasting elementwise kernels: arithmetic (Add, Sub, Mul, Div, Pow, Mod,
// PRelu), variadic Max/Min, comparisons, logic and Where. Ops are lambdas on
// the compute type (float for the half types); see numeric.h.
#include <cmath>
#include <type_traits>

#include "backends/cpu/kernels/numeric.h"
#include "ops/math_common.h"

namespace kiln::cpu {

std::vector<std::int64_t> Strides(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

StridedView CollapseStridedView(const StridedView& v, std::size_t min_dims) {
  StridedView c;
  c.offset = v.offset;
  for (std::size_t i = 0; i < v.dims.size(); ++i) {
    if (v.dims[i] == 1) continue;
    if (!c.dims.empty() && c.strides.back() == v.strides[i] * v.dims[i]) {
      c.dims.back() *= v.dims[i];
      c.strides.back() = v.strides[i];
      continue;
    }
    c.dims.push_back(v.dims[i]);
    c.strides.push_back(v.strides[i]);
  }
  while (c.dims.size() < min_dims) {
    c.dims.insert(c.dims.begin(), 1);
    c.strides.insert(c.strides.begin(), 0);
  }
  return c;
}

BroadcastPlan MakeBroadcastPlan(const Shape& a, const Shape& b, const Shape& out) {
  const std::size_t r = out.size();
  std::vector<std::int64_t> da(r, 1), db(r, 1);
  for (std::size_t i = 0; i < a.size(); ++i) da[r - a.size() + i] = a[i];
  for (std::size_t i = 0; i < b.size(); ++i) db[r - b.size() + i] = b[i];
  auto sa_full = Strides(Shape(da.begin(), da.end()));
  auto sb_full = Strides(Shape(db.begin(), db.end()));
  BroadcastPlan p;
  p.total = NumElements(out);
  for (std::size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;  // size-1 dims do not matter
    std::int64_t sa = da[i] == 1 ? 0 : sa_full[i];
    std::int64_t sb = db[i] == 1 ? 0 : sb_full[i];
    if (!p.dims.empty()) {
      std::size_t k = p.dims.size() - 1;
      // Merge with the previous dim when both inputs stay contiguous across it.
      bool a_ok = (p.sa[k] == 0 && sa == 0) || (p.sa[k] != 0 && sa != 0 && p.sa[k] == sa * out[i]);
      bool b_ok = (p.sb[k] == 0 && sb == 0) || (p.sb[k] != 0 && sb != 0 && p.sb[k] == sb * out[i]);
      if (a_ok && b_ok) {
        p.dims[k] *= out[i];
        p.sa[k] = sa;
        p.sb[k] = sb;
        continue;
      }
    }
    p.dims.push_back(out[i]);
    p.sa.push_back(sa);
    p.sb.push_back(sb);
  }
  if (p.dims.empty()) {
    p.dims = {1};
    p.sa = {0};
    p.sb = {0};
  }
  return p;
}

namespace {

using namespace num;

template <typename TA, typename TB, typename TO, typename Op>
void BinaryRows(const BroadcastPlan& p, const TA* a, const TB* b, TO* out, Op op) {
  ForEachRow(p, [&](std::int64_t o, std::int64_t oa, std::int64_t ob, std::int64_t n,
                    std::int64_t ia, std::int64_t ib) {
    const TA* pa = a + oa;
    const TB* pb = b + ob;
    TO* po = out + o;
    if (ia == 1 && ib == 1) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
    } else if (ia == 1 && ib == 0) {
      const TB vb = pb[0];
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i], vb);
    } else if (ia == 0 && ib == 1) {
      const TA va = pa[0];
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(va, pb[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i * ia], pb[i * ib]);
    }
  });
}

// Storage-typed wrapper of a compute-typed op.
template <typename TA, typename TB, typename TO, typename F>
auto Stored(F f) {
  return [f](TA x, TB y) { return Store<TO>(f(Load(x), Load(y))); };
}

enum class Out { kSameAsA, kBool };

// Two-input op: input 0's type in SA, input 1's in SB (0 = same as input 0).
// make(node, Tag<CA>, Tag<CB>) returns the op on compute types.
template <unsigned SA, unsigned SB, Out O, typename Make>
KernelFactory Binary(Make make) {
  return [make](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    const Shape b_shape = ops::LegacyBroadcastB(*init.node, init.inputs[0].shape, init.inputs[1].shape);
    const BroadcastPlan plan = MakeBroadcastPlan(init.inputs[0].shape, b_shape, init.outputs[0].shape);
    std::unique_ptr<Kernel> k;
    KILN_RETURN_IF_ERROR(Dispatch<SA>(init.inputs[0].dtype, [&](auto ta) -> Status {
      using TA = typename decltype(ta)::type;
      auto with_b = [&](auto tb) -> Status {
        using TB = typename decltype(tb)::type;
        using TO = std::conditional_t<O == Out::kBool, bool, TA>;
        auto op = Stored<TA, TB, TO>(make(*init.node, Tag<Compute<TA>>{}, Tag<Compute<TB>>{}));
        k = std::make_unique<FnKernel>([plan, op](const KernelArgs& a) {
          BinaryRows(plan, a.in_as<TA>(0), a.in_as<TB>(1), a.out_as<TO>(0), op);
          return Status::Ok();
        });
        return Status::Ok();
      };
      if constexpr (SB == 0) {
        return with_b(ta);
      } else {
        return Dispatch<SB>(init.inputs[1].dtype, with_b);
      }
    }));
    return k;
  };
}

// Same-type op on compute type C: `expr` uses x, y.
#define KILN_OP2(expr)                                          \
  [](const ir::Node&, auto ta, auto) {                          \
    using C = typename decltype(ta)::type;                      \
    return [](C x, C y) { return expr; };                       \
  }

// NaN-propagating max/min, as numpy.maximum/minimum.
template <typename C> C MaxOf(C x, C y) { return (x > y || x != x) ? x : y; }
template <typename C> C MinOf(C x, C y) { return (x < y || x != x) ? x : y; }

// Max/Min over 1..n inputs: out = op(in0, in1), then out = op(out, in_i).
template <bool kMax>
Result<std::unique_ptr<Kernel>> MakeMaxMin(const KernelInit& init) {
  const Shape& out = init.outputs[0].shape;
  std::vector<BroadcastPlan> plans;
  const int n = static_cast<int>(init.inputs.size());
  plans.push_back(MakeBroadcastPlan(init.inputs[0].shape, init.inputs[n > 1].shape, out));
  for (int i = 2; i < n; ++i) plans.push_back(MakeBroadcastPlan(out, init.inputs[i].shape, out));
  return MakeTyped<kNumeric>(init.inputs[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto op = Stored<T, T, T>([](Compute<T> x, Compute<T> y) { return kMax ? MaxOf(x, y) : MinOf(x, y); });
    return [plans, op, n](const KernelArgs& a) {
      T* y = a.out_as<T>(0);
      BinaryRows(plans[0], a.in_as<T>(0), a.in_as<T>(n > 1), y, op);
      for (int i = 2; i < n; ++i) BinaryRows(plans[i - 1], y, a.in_as<T>(i), y, op);  // in place
      return Status::Ok();
    };
  });
}

// Where(c, x, y): out = broadcast y, then out[i] = x[i] where c[i]. Any type,
// moved as raw elements of its size.
Result<std::unique_ptr<Kernel>> MakeWhere(const KernelInit& init) {
  const Shape& out = init.outputs[0].shape;
  const BroadcastPlan py = MakeBroadcastPlan(init.inputs[2].shape, init.inputs[2].shape, out);
  const BroadcastPlan pcx = MakeBroadcastPlan(init.inputs[0].shape, init.inputs[1].shape, out);
  auto make = [&](auto tag) -> Result<std::unique_ptr<Kernel>> {
    using T = typename decltype(tag)::type;
    return MakeFn([py, pcx](const KernelArgs& a) {
      const bool* c = a.in_as<bool>(0);
      const T* x = a.in_as<T>(1);
      const T* y = a.in_as<T>(2);
      T* o = a.out_as<T>(0);
      ForEachRow(py, [&](std::int64_t oo, std::int64_t oy, std::int64_t, std::int64_t n, std::int64_t iy,
                         std::int64_t) {
        for (std::int64_t i = 0; i < n; ++i) o[oo + i] = y[oy + i * iy];
      });
      ForEachRow(pcx, [&](std::int64_t oo, std::int64_t oc, std::int64_t ox, std::int64_t n, std::int64_t ic,
                          std::int64_t ix) {
        // Branch-free (a blend the compiler vectorises); strides 0/1 split
        // out so the common broadcast rows have no multiplies.
        if (ic == 1 && ix == 0) {
          const T xv = x[ox];
          for (std::int64_t i = 0; i < n; ++i) o[oo + i] = c[oc + i] ? xv : o[oo + i];
        } else if (ic == 1 && ix == 1) {
          for (std::int64_t i = 0; i < n; ++i) o[oo + i] = c[oc + i] ? x[ox + i] : o[oo + i];
        } else {
          for (std::int64_t i = 0; i < n; ++i) o[oo + i] = c[oc + i * ic] ? x[ox + i * ix] : o[oo + i];
        }
      });
      return Status::Ok();
    });
  };
  switch (DTypeSize(init.inputs[1].dtype)) {
    case 1: return make(Tag<std::uint8_t>{});
    case 2: return make(Tag<std::uint16_t>{});
    case 4: return make(Tag<std::uint32_t>{});
    case 8: return make(Tag<std::uint64_t>{});
    default:
      return Error(StatusCode::kUnimplemented, "element type ", DTypeName(init.inputs[1].dtype),
                   " is not supported here");
  }
}

template <typename CA, typename CB>
CA PowOf(CA x, CB y) {
  if constexpr (std::is_integral_v<CA> && std::is_integral_v<CB>) {
    if constexpr (std::is_signed_v<CB>) {
      if (y < 0) return x == 1 ? CA(1) : x == -1 ? (y % 2 ? CA(-1) : CA(1)) : CA(0);
    }
    CA r = 1, b = x;  // by squaring, wrapping like numpy
    for (auto e = static_cast<std::uint64_t>(y); e; e >>= 1) {
      if (e & 1) r = WMul(r, b);
      b = WMul(b, b);
    }
    return r;
  } else if constexpr (std::is_same_v<CA, float> && std::is_same_v<CB, float>) {
    return y == 2.f ? x * x : std::pow(x, y);
  } else {
    return static_cast<CA>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
}

template <typename C>
C ModOf(C x, C y, bool fmod) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::fmod(x, y);
  } else {
    if (y == 0) return 0;  // undefined in ONNX; avoid the trap
    if constexpr (std::is_signed_v<C>) {
      if (y == -1) return 0;  // also avoids INT_MIN % -1
      C r = static_cast<C>(x % y);
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r = static_cast<C>(r + y);
      return r;
    } else {
      return static_cast<C>(x % y);
    }
  }
}

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& r) {
  r.Register("Add", Binary<kNumeric, 0, Out::kSameAsA>(KILN_OP2(WAdd(x, y))));
  r.Register("Sub", Binary<kNumeric, 0, Out::kSameAsA>(KILN_OP2(WSub(x, y))));
  r.Register("Mul", Binary<kNumeric, 0, Out::kSameAsA>(KILN_OP2(WMul(x, y))));
  r.Register("Div", Binary<kNumeric, 0, Out::kSameAsA>([](const ir::Node&, auto ta, auto) {
    using C = typename decltype(ta)::type;
    return [](C x, C y) -> C {
      if constexpr (std::is_integral_v<C>) {
        if (y == 0) return C{0};  // ONNX leaves x/0 undefined; avoid the trap
        if constexpr (std::is_signed_v<C>) {
          if (y == -1) return WSub(C(0), x);  // INT_MIN / -1 wraps
        }
        return static_cast<C>(x / y);
      } else {
        return x / y;
      }
    };
  }));
  r.Register("Pow", Binary<kFloats | kI32I64, kNumeric, Out::kSameAsA>([](const ir::Node&, auto ta, auto tb) {
    using CA = typename decltype(ta)::type;
    using CB = typename decltype(tb)::type;
    return [](CA x, CB y) { return PowOf(x, y); };
  }));
  r.Register("Mod", Binary<kNumeric, 0, Out::kSameAsA>([](const ir::Node& n, auto ta, auto) {
    using C = typename decltype(ta)::type;
    const bool fmod = n.GetInt("fmod", 0) != 0;
    return [fmod](C x, C y) { return ModOf(x, y, fmod); };
  }));
  r.Register("PRelu", Binary<kFloats | kI32I64 | kU32U64, 0, Out::kSameAsA>([](const ir::Node&, auto ta, auto) {
    using C = typename decltype(ta)::type;
    return [](C x, C s) -> C {
      if constexpr (std::is_unsigned_v<C>) return x;
      else return x < C(0) ? WMul(s, x) : x;
    };
  }));
  r.Register("Max", MakeMaxMin<true>);
  r.Register("Min", MakeMaxMin<false>);
  r.Register("Equal", Binary<kAll, 0, Out::kBool>(KILN_OP2(x == y)));
  r.Register("Greater", Binary<kNumeric, 0, Out::kBool>(KILN_OP2(x > y)));
  r.Register("GreaterOrEqual", Binary<kNumeric, 0, Out::kBool>(KILN_OP2(x >= y)));
  r.Register("Less", Binary<kNumeric, 0, Out::kBool>(KILN_OP2(x < y)));
  r.Register("LessOrEqual", Binary<kNumeric, 0, Out::kBool>(KILN_OP2(x <= y)));
  r.Register("And", Binary<kBoolT, 0, Out::kBool>(KILN_OP2(x && y)));
  r.Register("Or", Binary<kBoolT, 0, Out::kBool>(KILN_OP2(x || y)));
  r.Register("Xor", Binary<kBoolT, 0, Out::kBool>(KILN_OP2(x != y)));
  r.Register("Where", MakeWhere);
}

}  // namespace kiln::cpu
