// Elementwise unary math kernels (see ops/unary.cc). Each op is a lambda on
// the compute type; half types are widened to float and narrowed back.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/numeric.h"

namespace kiln::cpu {
namespace {

using namespace num;

// y[i] = f(x[i]); make(node, Tag<compute type>) returns f.
template <unsigned S, typename Make>
KernelFactory UnaryKernel(Make make) {
  return [make](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    const std::int64_t n = NumElements(init.inputs[0].shape);
    return MakeTyped<S>(init.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto f = make(*init.node, Tag<Compute<T>>{});
      return [n, f](const KernelArgs& a) {
        const T* x = a.in_as<T>(0);
        T* y = a.out_as<T>(0);
        ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) y[i] = Store<T>(f(Load(x[i])));
        });
        return Status::Ok();
      };
    });
  };
}

// An op without attributes: `expr` uses x of type C.
#define KILN_FN(expr)                                      \
  [](const ir::Node&, auto tag) {                          \
    using C = typename decltype(tag)::type;                \
    return [](C x) -> C { return expr; };                  \
  }

// Two's-complement negation without signed overflow.
template <typename C>
C Negate(C x) {
  if constexpr (std::is_integral_v<C>) return WSub(C(0), x);
  else return -x;
}

template <typename C>
C AbsOf(C x) {
  if constexpr (std::is_unsigned_v<C>) return x;
  else return x < C(0) ? Negate(x) : x;
}

template <typename C>
C SignOf(C x) {
  if constexpr (std::is_unsigned_v<C>) return x > 0 ? C(1) : C(0);
  else return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // 0 and NaN stay
}

}  // namespace

void RegisterUnaryKernels(KernelRegistry& r) {
  r.Register("Abs", UnaryKernel<kNumeric>(KILN_FN(AbsOf(x))));
  r.Register("Neg", UnaryKernel<kFloats | kSigned>(KILN_FN(Negate(x))));
  r.Register("Sign", UnaryKernel<kNumeric>(KILN_FN(SignOf(x))));
  r.Register("Ceil", UnaryKernel<kFloats>(KILN_FN(std::ceil(x))));
  r.Register("Floor", UnaryKernel<kFloats>(KILN_FN(std::floor(x))));
  r.Register("Round", UnaryKernel<kFloats>(KILN_FN(std::nearbyint(x))));  // ties to even
  r.Register("Sqrt", UnaryKernel<kFloats>(KILN_FN(std::sqrt(x))));
  r.Register("Reciprocal", UnaryKernel<kFloats>(KILN_FN(C(1) / x)));
  r.Register("Exp", UnaryKernel<kFloats>(KILN_FN(std::exp(x))));
  r.Register("Log", UnaryKernel<kFloats>(KILN_FN(std::log(x))));
  r.Register("Erf", UnaryKernel<kNumeric>(KILN_FN(static_cast<C>(std::erf(x)))));
  r.Register("Softplus", UnaryKernel<kFloats>(
                             KILN_FN(x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))));
  r.Register("Not", UnaryKernel<kBoolT>(KILN_FN(!x)));
  r.Register("Elu", UnaryKernel<kFloats>([](const ir::Node& n, auto tag) {
    using C = typename decltype(tag)::type;
    const C alpha = n.GetFloat("alpha", 1.0f);
    return [alpha](C x) -> C { return x < C(0) ? alpha * std::expm1(x) : x; };
  }));
  r.Register("Selu", UnaryKernel<kFloats>([](const ir::Node& n, auto tag) {
    using C = typename decltype(tag)::type;
    const bool v1 = n.since_version() < 6;
    const C alpha = n.GetFloat("alpha", v1 ? 1.6732f : 1.67326319217681884765625f);
    const C gamma = n.GetFloat("gamma", v1 ? 1.0507f : 1.05070102214813232421875f);
    return [alpha, gamma](C x) -> C { return x > C(0) ? gamma * x : gamma * alpha * std::expm1(x); };
  }));
}

}  // namespace kiln::cpu
