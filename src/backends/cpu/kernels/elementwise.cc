// Binary elementwise kernels (Add, Sub, Mul, Div) with broadcasting.
#include <cmath>

#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

std::vector<std::int64_t> Strides(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
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

template <typename T, typename TO, typename Op>
void BinaryRows(const BroadcastPlan& p, const T* a, const T* b, TO* out, Op op) {
  ForEachRow(p, [&](std::int64_t o, std::int64_t oa, std::int64_t ob, std::int64_t n,
                    std::int64_t ia, std::int64_t ib) {
    const T* pa = a + oa;
    const T* pb = b + ob;
    TO* po = out + o;
    if (ia == 1 && ib == 1) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
    } else if (ia == 1 && ib == 0) {
      const T vb = pb[0];
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i], vb);
    } else if (ia == 0 && ib == 1) {
      const T va = pa[0];
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(va, pb[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i] = op(pa[i * ia], pb[i * ib]);
    }
  });
}

template <typename OpFactory>
KernelFactory ArithmeticFactory(OpFactory make_op) {
  return [make_op](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    BroadcastPlan plan = MakeBroadcastPlan(init.inputs[0].shape, init.inputs[1].shape, init.outputs[0].shape);
    const DType t = init.inputs[0].dtype;
    std::unique_ptr<Kernel> k;
    Status st = DispatchNumeric(t, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      auto op = make_op(Tag<T>{});
      k = std::make_unique<FnKernel>([plan, op](const KernelArgs& a) {
        BinaryRows(plan, a.in_as<T>(0), a.in_as<T>(1), a.out_as<T>(0), op);
        return Status::Ok();
      });
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return k;
  };
}

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& r) {
  r.Register("Add", ArithmeticFactory([](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T x, T y) { return static_cast<T>(x + y); };
  }));
  r.Register("Sub", ArithmeticFactory([](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T x, T y) { return static_cast<T>(x - y); };
  }));
  r.Register("Mul", ArithmeticFactory([](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T x, T y) { return static_cast<T>(x * y); };
  }));
  r.Register("Div", ArithmeticFactory([](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T x, T y) -> T {
      if constexpr (std::is_integral_v<T>) {
        return y == 0 ? T{0} : static_cast<T>(x / y);  // ONNX leaves x/0 undefined; avoid the trap
      } else {
        return x / y;
      }
    };
  }));
}

}  // namespace kiln::cpu
