// Reduction kernels: Reduce* (one engine, ops as map/combine/finish
// triples, floats accumulated in double), ArgMax/ArgMin and CumSum.
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "backends/cpu/kernels/numeric.h"
#include "ops/math_common.h"

namespace kiln::cpu {
namespace {

using namespace num;

// Input viewed as: output = groups x width (width: the innermost kept dims,
// contiguous), each output reducing router x rlen elements (rlen: the
// innermost reduced dims). Size-1 dims are dropped, adjacent dims of the
// same kind merged.
struct ReducePlan {
  std::int64_t groups = 1, width = 1;
  std::vector<std::int64_t> gdims, gstrides;  // kept dims above the width block
  std::vector<std::int64_t> rdims, rstrides;  // reduced dims above the innermost
  std::int64_t router = 1, rlen = 1, rstride = 0;
  std::int64_t rcount = 1;  // elements per output
};

ReducePlan MakeReducePlan(const Shape& in, const std::vector<bool>& mask) {
  struct Dim { std::int64_t size, stride; bool red; };
  const auto st = Strides(in);
  std::vector<Dim> ds;
  ReducePlan p;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (mask[i]) p.rcount *= in[i];
    if (in[i] == 1) continue;
    if (!ds.empty() && ds.back().red == mask[i]) {
      ds.back().size *= in[i];
      ds.back().stride = st[i];
    } else {
      ds.push_back({in[i], st[i], mask[i]});
    }
  }
  if (!ds.empty() && !ds.back().red) {
    p.width = ds.back().size;
    ds.pop_back();
  }
  if (!ds.empty() && ds.back().red) {
    p.rlen = ds.back().size;
    p.rstride = ds.back().stride;
    ds.pop_back();
  }
  for (const Dim& d : ds) {
    auto& dims = d.red ? p.rdims : p.gdims;
    auto& strides = d.red ? p.rstrides : p.gstrides;
    dims.push_back(d.size);
    strides.push_back(d.stride);
    (d.red ? p.router : p.groups) *= d.size;
  }
  return p;
}

// Input offset of multi-index number `i` over dims/strides (row-major).
std::int64_t OffsetOf(std::int64_t i, const std::vector<std::int64_t>& dims,
                      const std::vector<std::int64_t>& strides) {
  std::int64_t off = 0;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    off += (i % dims[d]) * strides[d];
    i /= dims[d];
  }
  return off;
}

template <typename A, typename Map, typename Comb, typename Fin>
struct Reducer {
  A id;
  Map map;    // compute type -> A
  Comb comb;  // (A, A) -> A
  Fin fin;    // (A, count) -> compute type
};
template <typename A, typename Map, typename Comb, typename Fin>
Reducer<A, Map, Comb, Fin> MakeReducer(A id, Map m, Comb c, Fin f) {
  return {id, m, c, f};
}

constexpr std::int64_t kBlock = 128;  // outputs accumulated together

// Folds reduced elements [r0, r1) (linear over router x rlen) of outputs
// w0..w0+wn of the group at input offset `base` into acc[0..wn).
template <typename T, typename R, typename A>
void Accumulate(const ReducePlan& p, const R& red, const T* x, std::int64_t base, std::int64_t wn,
                std::int64_t r0, std::int64_t r1, A* acc) {
  if (r0 >= r1) return;
  std::int64_t ro = r0 / p.rlen, k = r0 % p.rlen, r = r0;
  const std::size_t nd = p.rdims.size();
  std::vector<std::int64_t> idx(nd);
  std::int64_t off = 0;
  for (std::int64_t i = ro, d = static_cast<std::int64_t>(nd) - 1; d >= 0; --d) {
    idx[d] = i % p.rdims[d];
    i /= p.rdims[d];
    off += idx[d] * p.rstrides[d];
  }
  while (r < r1) {
    const std::int64_t kend = std::min(p.rlen, k + (r1 - r));
    r += kend - k;
    const T* px = x + base + off;
    const std::int64_t rs = p.rstride;
    if (wn == 1) {  // one output: four independent chains
      A a0 = acc[0], a1 = red.id, a2 = red.id, a3 = red.id;
      for (; k + 4 <= kend; k += 4) {
        a0 = red.comb(a0, red.map(Load(px[k * rs])));
        a1 = red.comb(a1, red.map(Load(px[(k + 1) * rs])));
        a2 = red.comb(a2, red.map(Load(px[(k + 2) * rs])));
        a3 = red.comb(a3, red.map(Load(px[(k + 3) * rs])));
      }
      for (; k < kend; ++k) a0 = red.comb(a0, red.map(Load(px[k * rs])));
      acc[0] = red.comb(red.comb(a0, a1), red.comb(a2, a3));
    }
    for (; k < kend; ++k) {
      const T* q = px + k * rs;
      for (std::int64_t w = 0; w < wn; ++w) acc[w] = red.comb(acc[w], red.map(Load(q[w])));
    }
    k = 0;
    for (int d = static_cast<int>(nd) - 1; d >= 0; --d) {
      off += p.rstrides[d];
      if (++idx[d] < p.rdims[d]) break;
      off -= idx[d] * p.rstrides[d];
      idx[d] = 0;
    }
  }
}

template <typename T, typename R>
void RunReduce(const ReducePlan& p, const R& red, const T* x, T* y) {
  using A = decltype(red.id);
  const std::int64_t wblocks = (p.width + kBlock - 1) / kBlock;
  const std::int64_t units = p.groups * wblocks, total_r = p.router * p.rlen;
  auto unit_range = [&](std::int64_t u, std::int64_t* base, std::int64_t* w0, std::int64_t* wn) {
    *w0 = (u % wblocks) * kBlock;
    *wn = std::min(kBlock, p.width - *w0);
    *base = OffsetOf(u / wblocks, p.gdims, p.gstrides) + *w0;
  };
  auto store = [&](std::int64_t u, std::int64_t w0, std::int64_t wn, const A* acc) {
    T* out = y + (u / wblocks) * p.width + w0;
    for (std::int64_t w = 0; w < wn; ++w) out[w] = Store<T>(red.fin(acc[w], p.rcount));
  };
  const int threads = NumThreads();
  const std::int64_t work = p.groups * p.width * total_r;
  if (units >= threads || total_r < 4 * threads || work < 65536) {
    ParallelFor(units, std::max<std::int64_t>(1, 65536 / (kBlock * std::max<std::int64_t>(total_r, 1))),
                [&](std::int64_t b, std::int64_t e) {
      std::array<A, kBlock> acc;
      for (std::int64_t u = b; u < e; ++u) {
        std::int64_t base, w0, wn;
        unit_range(u, &base, &w0, &wn);
        std::fill(acc.begin(), acc.begin() + wn, red.id);
        Accumulate(p, red, x, base, wn, 0, total_r, acc.data());
        store(u, w0, wn, acc.data());
      }
    });
    return;
  }
  // Few outputs, long reductions: split each reduction across the threads.
  for (std::int64_t u = 0; u < units; ++u) {
    std::int64_t base, w0, wn;
    unit_range(u, &base, &w0, &wn);
    std::vector<A> part(static_cast<std::size_t>(threads * wn), red.id);
    ParallelFor(threads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t c = b; c < e; ++c) {
        Accumulate(p, red, x, base, wn, total_r * c / threads, total_r * (c + 1) / threads, &part[c * wn]);
      }
    });
    for (int c = 1; c < threads; ++c) {
      for (std::int64_t w = 0; w < wn; ++w) part[w] = red.comb(part[w], part[c * wn + w]);
    }
    store(u, w0, wn, part.data());
  }
}

// Axes from input 1 (`axes`: its data) or, when null, the attribute.
Result<ReducePlan> PlanFor(const ir::Node& node, const Shape& in, const std::vector<std::int64_t>* axes) {
  KILN_ASSIGN_OR_RETURN(std::vector<bool> mask, ops::ReduceMask(node, in.size(), axes));
  return MakeReducePlan(in, mask);
}

template <typename MakeRed>
KernelFactory ReduceKernel(MakeRed make_red) {
  return [make_red](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    const ir::Node& node = *init.node;
    const Shape in = init.inputs[0].shape;
    const bool has_axes = init.inputs.size() > 1 && init.inputs[1].present();
    const std::int64_t n_axes = has_axes ? NumElements(init.inputs[1].shape) : 0;
    const std::int64_t n_out = NumElements(init.outputs[0].shape);
    std::optional<ReducePlan> fixed;  // unset: axes are run-time data
    if (!has_axes) {
      KILN_ASSIGN_OR_RETURN(fixed, PlanFor(node, in, nullptr));
    } else if (n_axes == 0 || init.const_input(1)) {
      std::vector<std::int64_t> axes;
      if (n_axes) axes = init.const_input(1)->ToInt64Vector();
      KILN_ASSIGN_OR_RETURN(fixed, PlanFor(node, in, &axes));
    }
    return MakeTyped<kNumeric>(init.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto red = make_red(Tag<Compute<T>>{});
      return [fixed, red, &node, in, n_axes, n_out](const KernelArgs& a) -> Status {
        if (fixed) {
          RunReduce(*fixed, red, a.in_as<T>(0), a.out_as<T>(0));
          return Status::Ok();
        }
        const std::int64_t* ad = a.in_as<std::int64_t>(1);
        const std::vector<std::int64_t> axes(ad, ad + n_axes);
        KILN_ASSIGN_OR_RETURN(ReducePlan p, PlanFor(node, in, &axes));
        if (p.groups * p.width != n_out) {
          return Error(StatusCode::kInvalidArgument, node.Describe(),
                       ": input 1 (axes) gives a result size other than the output's ", n_out);
        }
        RunReduce(p, red, a.in_as<T>(0), a.out_as<T>(0));
        return Status::Ok();
      };
    });
  };
}

// Accumulator of sums: double for floats, 64-bit for integers.
template <typename C>
using Wide = std::conditional_t<std::is_floating_point_v<C>, double,
                                std::conditional_t<std::is_signed_v<C>, std::int64_t, std::uint64_t>>;

template <typename C>
C Lowest() {
  return std::is_floating_point_v<C> ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
}
template <typename C>
C Highest() {
  return std::is_floating_point_v<C> ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
}

// log-sum-exp state: max and sum of exp(x - max).
struct Lse {
  double m, s;
};
Lse LseComb(Lse a, Lse b) {
  if (b.s == 0) return a;
  if (a.s == 0) return b;
  if (a.m == b.m) return {a.m, a.s + b.s};
  return a.m > b.m ? Lse{a.m, a.s + b.s * std::exp(b.m - a.m)} : Lse{b.m, b.s + a.s * std::exp(a.m - b.m)};
}

#define KILN_RED(A, id, map, comb, fin)                                      \
  [](auto tag) {                                                             \
    using C = typename decltype(tag)::type;                                  \
    using W = Wide<C>;                                                       \
    (void)sizeof(W);                                                         \
    return MakeReducer<A>(id, [](C x) -> A { return map; },                  \
                          [](A a, A b) -> A { return comb; },                \
                          [](A a, std::int64_t n) -> C { (void)n; return fin; }); \
  }

// ---- ArgMax / ArgMin ---------------------------------------------------------

template <bool kMax>
Result<std::unique_ptr<Kernel>> MakeArg(const KernelInit& init) {
  const Shape& s = init.inputs[0].shape;
  std::int64_t axis = init.node->GetInt("axis", 0);
  if (axis < 0) axis += static_cast<std::int64_t>(s.size());
  std::int64_t outer = 1, len = s[axis], inner = 1;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(s.size()); ++i) {
    if (i < axis) outer *= s[i];
    if (i > axis) inner *= s[i];
  }
  const bool last = init.node->GetInt("select_last_index", 0) != 0;
  return MakeTyped<kNumeric>(init.inputs[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    return [outer, len, inner, last](const KernelArgs& a) {
      const T* x = a.in_as<T>(0);
      std::int64_t* y = a.out_as<std::int64_t>(0);
      const std::int64_t iblocks = (inner + kBlock - 1) / kBlock;
      ParallelFor(outer * iblocks, std::max<std::int64_t>(1, 16384 / (kBlock * std::max<std::int64_t>(len, 1))),
                  [&](std::int64_t b, std::int64_t e) {
        std::array<C, kBlock> best;
        for (std::int64_t u = b; u < e; ++u) {
          const std::int64_t o = u / iblocks, i0 = (u % iblocks) * kBlock, n = std::min(kBlock, inner - i0);
          std::int64_t* yo = y + o * inner + i0;
          for (std::int64_t i = 0; i < n; ++i) {
            best[i] = Load(x[o * len * inner + i0 + i]);
            yo[i] = 0;
          }
          for (std::int64_t k = 1; k < len; ++k) {
            const T* row = x + (o * len + k) * inner + i0;
            for (std::int64_t i = 0; i < n; ++i) {
              const C v = Load(row[i]), bv = best[i];
              bool take = kMax ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
              if constexpr (std::is_floating_point_v<C>) take = take || (v != v && (last || bv == bv));
              if (take) {
                best[i] = v;
                yo[i] = k;
              }
            }
          }
        }
      });
      return Status::Ok();
    };
  });
}

// ---- CumSum ------------------------------------------------------------------

Result<std::unique_ptr<Kernel>> MakeCumSum(const KernelInit& init) {
  const Shape s = init.inputs[0].shape;
  const DType axis_type = init.inputs[1].dtype;
  const bool exclusive = init.node->GetInt("exclusive", 0) != 0;
  const bool reverse = init.node->GetInt("reverse", 0) != 0;
  const ir::Node* node = init.node;
  return MakeTyped<kFloats | kI32I64 | kU32U64>(init.inputs[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = Wide<Compute<T>>;
    return [s, axis_type, exclusive, reverse, node](const KernelArgs& a) -> Status {
      const auto rank = static_cast<std::int64_t>(s.size());
      std::int64_t axis = axis_type == DType::kInt32 ? a.in_as<std::int32_t>(1)[0] : a.in_as<std::int64_t>(1)[0];
      if (axis < -rank || axis >= rank) {
        return Error(StatusCode::kInvalidArgument, node->Describe(), ": input 1 (axis) = ", axis,
                     " is out of range for rank ", rank);
      }
      if (axis < 0) axis += rank;
      std::int64_t outer = 1, len = s[axis], inner = 1;
      for (std::int64_t i = 0; i < rank; ++i) {
        if (i < axis) outer *= s[i];
        if (i > axis) inner *= s[i];
      }
      const T* x = a.in_as<T>(0);
      T* y = a.out_as<T>(0);
      const std::int64_t iblocks = (inner + kBlock - 1) / kBlock;
      ParallelFor(outer * iblocks, std::max<std::int64_t>(1, 16384 / (kBlock * std::max<std::int64_t>(len, 1))),
                  [&](std::int64_t b, std::int64_t e) {
        std::array<W, kBlock> acc;
        for (std::int64_t u = b; u < e; ++u) {
          const std::int64_t o = u / iblocks, i0 = (u % iblocks) * kBlock, n = std::min(kBlock, inner - i0);
          std::fill(acc.begin(), acc.begin() + n, W(0));
          for (std::int64_t j = 0; j < len; ++j) {
            const std::int64_t off = (o * len + (reverse ? len - 1 - j : j)) * inner + i0;
            for (std::int64_t i = 0; i < n; ++i) {
              const W v = static_cast<W>(Load(x[off + i]));
              if (exclusive) {
                y[off + i] = Store<T>(acc[i]);
                acc[i] = WAdd(acc[i], v);
              } else {
                acc[i] = WAdd(acc[i], v);
                y[off + i] = Store<T>(acc[i]);
              }
            }
          }
        }
      });
      return Status::Ok();
    };
  });
}

}  // namespace

void RegisterReduceKernels(KernelRegistry& r) {
  r.Register("ReduceSum", ReduceKernel(KILN_RED(W, W(0), W(x), WAdd(a, b), static_cast<C>(a))));
  r.Register("ReduceMean", ReduceKernel(KILN_RED(W, W(0), W(x), WAdd(a, b),
                                                 static_cast<C>(static_cast<double>(a) / static_cast<double>(n)))));
  r.Register("ReduceProd", ReduceKernel(KILN_RED(W, W(1), W(x), WMul(a, b), static_cast<C>(a))));
  r.Register("ReduceMax", ReduceKernel(KILN_RED(C, Lowest<C>(), x, (a > b || a != a) ? a : b, a)));
  r.Register("ReduceMin", ReduceKernel(KILN_RED(C, Highest<C>(), x, (a < b || a != a) ? a : b, a)));
  r.Register("ReduceL1", ReduceKernel(KILN_RED(W, W(0), x < C(0) ? WSub(W(0), W(x)) : W(x), WAdd(a, b), static_cast<C>(a))));
  r.Register("ReduceL2", ReduceKernel(KILN_RED(double, 0.0, static_cast<double>(x) * static_cast<double>(x), a + b,
                                               static_cast<C>(std::sqrt(a)))));
  r.Register("ReduceSumSquare", ReduceKernel(KILN_RED(W, W(0), WMul(W(x), W(x)), WAdd(a, b), static_cast<C>(a))));
  r.Register("ReduceLogSum", ReduceKernel(KILN_RED(double, 0.0, static_cast<double>(x), a + b,
                                                   static_cast<C>(std::log(a)))));
  r.Register("ReduceLogSumExp",
             ReduceKernel(KILN_RED(Lse, (Lse{-std::numeric_limits<double>::infinity(), 0}),
                                   (Lse{static_cast<double>(x), std::isinf(static_cast<double>(x)) && x < C(0) ? 0.0 : 1.0}),
                                   LseComb(a, b), static_cast<C>(a.m + std::log(a.s)))));
  r.Register("ArgMax", MakeArg<true>);
  r.Register("ArgMin", MakeArg<false>);
  r.Register("CumSum", MakeCumSum);
}

}  // namespace kiln::cpu
