// Unary activation kernels and Softmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/act_elem.h"
#include "backends/cpu/kernels/util.h"
#include "backends/cpu/kernels/vec_math.h"

namespace kiln::cpu {
namespace {

// Unary float op: f(x) for every element, in parallel chunks.
template <typename MakeFn>
KernelFactory FloatUnary(MakeFn make_fn) {
  return [make_fn](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    const std::int64_t n = NumElements(init.inputs[0].shape);
    std::unique_ptr<Kernel> k;
    Status st = DispatchFloat(init.inputs[0].dtype, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      auto fn = make_fn(*init.node, Tag<T>{});
      k = std::make_unique<FnKernel>([n, fn](const KernelArgs& a) {
        const T* x = a.in_as<T>(0);
        T* y = a.out_as<T>(0);
        ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) y[i] = fn(x[i]);
        });
        return Status::Ok();
      });
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return k;
  };
}

#define KILN_UNARY(expr)                                   \
  [](const ir::Node& node, auto tag) {                     \
    using T = typename decltype(tag)::type;                \
    (void)node;                                            \
    return expr;                                           \
  }

Result<std::unique_ptr<Kernel>> MakeRelu(const KernelInit& init) {
  const std::int64_t n = NumElements(init.inputs[0].shape);
  std::unique_ptr<Kernel> k;
  Status st = DispatchNumeric(init.inputs[0].dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    k = std::make_unique<FnKernel>([n](const KernelArgs& a) {
      const T* x = a.in_as<T>(0);
      T* y = a.out_as<T>(0);
      ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = ReluElem(x[i]);
      });
      return Status::Ok();
    });
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return k;
}

// ClipElem (act_elem.h). Bounds by value: a store through y could otherwise
// alias them. x may be y (in place).
template <typename T>
void ClipRun(const T* x, T* y, std::int64_t n, T lo, T hi) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = ClipElem(x[i], lo, hi);
}

Result<std::unique_ptr<Kernel>> MakeClip(const KernelInit& init) {
  const std::int64_t n = NumElements(init.inputs[0].shape);
  const bool has_min = init.inputs.size() > 1 && init.inputs[1].present();
  const bool has_max = init.inputs.size() > 2 && init.inputs[2].present();
  std::unique_ptr<Kernel> k;
  Status st = DispatchNumeric(init.inputs[0].dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    k = std::make_unique<FnKernel>([n, has_min, has_max](const KernelArgs& a) {
      const T* x = a.in_as<T>(0);
      T* y = a.out_as<T>(0);
      const T lo = has_min ? a.in_as<T>(1)[0] : std::numeric_limits<T>::lowest();
      const T hi = has_max ? a.in_as<T>(2)[0] : std::numeric_limits<T>::max();
      ParallelFor(n, 32768, [&](std::int64_t b, std::int64_t e) { ClipRun(x + b, y + b, e - b, lo, hi); });
      return Status::Ok();
    });
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return k;
}

// A oneDNN primitive reading one plain tensor and writing one of the same
// desc (Softmax, GELU): Init builds it from a primitive descriptor, Run
// binds the argument block's pointers. Nothing runs on an empty tensor (its
// buffer may be null).
class DnnlSrcDstKernel : public Kernel {
 public:
  Status Run(const KernelArgs& a) override {
    if (n_ <= 0) return Status::Ok();
    src_.set_data_handle(const_cast<void*>(a.in(0)));
    dst_.set_data_handle(a.out(0));
    prim_.execute(DnnlStream(), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratch_.Bind(a.ctx)}});
    DnnlStream().wait();
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_.bytes; }

 protected:
  template <typename Primitive, typename PD>
  void Set(const PD& pd, const dnnl::memory::desc& md) {
    prim_ = Primitive(pd);
    scratch_ = ScratchpadFor(pd);
    src_ = dnnl::memory(md, DnnlEngine(), nullptr);
    dst_ = dnnl::memory(md, DnnlEngine(), nullptr);
  }
  std::int64_t n_ = 0;

 private:
  dnnl::primitive prim_;
  dnnl::memory src_, dst_;
  Scratchpad scratch_;
};

// float32 Softmax on oneDNN (vectorised, accurate: tested against a double
// reference in unary_test.cc): the tensor seen as [outer, len, inner],
// softmax over dim 1.
class DnnlSoftmaxKernel : public DnnlSrcDstKernel {
 public:
  Status Init(std::int64_t outer, std::int64_t len, std::int64_t inner) {
    n_ = outer * len * inner;
    if (n_ == 0) return Status::Ok();
    return DnnlCall("Softmax", [&] {
      const dnnl::memory::desc md = PlainDesc({outer, len, inner});
      dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
      Set<dnnl::softmax_forward>(dnnl::softmax_forward::primitive_desc(d, UserScratchpad(), DnnlEngine()), md);
    });
  }
};

Result<std::unique_ptr<Kernel>> MakeSoftmax(const KernelInit& init) {
  const Shape& s = init.inputs[0].shape;
  const auto rank = static_cast<std::int64_t>(s.size());
  const bool v13 = init.node->since_version() >= 13;
  std::int64_t axis = init.node->GetInt("axis", v13 ? -1 : 1);
  if (axis < 0) axis += std::max<std::int64_t>(rank, 1);
  std::int64_t outer = 1, len = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (i < axis) outer *= s[i];
    else if (i == axis || !v13) len *= s[i];  // before 13: the input is coerced to 2-D at axis
    else inner *= s[i];
  }
  if (init.inputs[0].dtype == DType::kFloat32) {
    auto k = std::make_unique<DnnlSoftmaxKernel>();
    KILN_RETURN_IF_ERROR(k->Init(outer, len, inner));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  std::unique_ptr<Kernel> k;
  Status st = DispatchFloat(init.inputs[0].dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    k = std::make_unique<FnKernel>([outer, len, inner](const KernelArgs& a) {
      if (outer * len * inner == 0) return Status::Ok();  // empty tensor: nothing to do (its buffer may be null)
      const T* x = a.in_as<T>(0);
      T* y = a.out_as<T>(0);
      ParallelFor(outer * inner, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(len, 1)),
                  [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          const std::int64_t o = r / inner, in = r % inner;
          const T* xr = x + o * len * inner + in;
          T* yr = y + o * len * inner + in;
          T mx = -std::numeric_limits<T>::infinity();
          for (std::int64_t i = 0; i < len; ++i) mx = std::max(mx, xr[i * inner]);
          T sum = 0;
          for (std::int64_t i = 0; i < len; ++i) {
            T v = std::exp(xr[i * inner] - mx);
            yr[i * inner] = v;
            sum += v;
          }
          const T inv = T(1) / sum;
          for (std::int64_t i = 0; i < len; ++i) yr[i * inner] *= inv;
        }
      });
      return Status::Ok();
    });
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return k;
}

// float32 elementwise ops on oneDNN's eltwise primitive (vectorised):
// kiln.Gelu (the exact, erf GELU) and Sigmoid; Tanh and kiln.Gelu with
// approximate="tanh" on vec_math.h's own loops (oneDNN's are 5x slower on
// AVX2). Each is tested against a double reference (pipeline_test.cc for
// GELU over [-10, 10]; unary_test.cc for Tanh, tanh-GELU and Sigmoid over
// [-30, 30] and their extremes).
class DnnlEltwiseKernel : public DnnlSrcDstKernel {
 public:
  Status Init(const KernelInit& init, dnnl::algorithm alg) {
    n_ = NumElements(init.outputs[0].shape);
    if (n_ <= 0) return Status::Ok();
    return DnnlCall(init.node->op_type().c_str(), [&] {
      const dnnl::memory::desc md = PlainDesc({n_});
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, 0.f, 0.f);
      Set<dnnl::eltwise_forward>(dnnl::eltwise_forward::primitive_desc(d, UserScratchpad(), DnnlEngine()), md);
    });
  }
};

// float32 through one of vec_math.h's functions, split over the kernel's
// threads.
class VecUnaryKernel : public Kernel {
 public:
  using Fn = void (*)(const float*, float*, std::int64_t);
  VecUnaryKernel(Fn fn, std::int64_t n) : fn_(fn), n_(n) {}
  Status Run(const KernelArgs& a) override {
    const float* x = a.in_as<float>(0);
    float* y = a.out_as<float>(0);
    ParallelFor(n_, 16384, [&](std::int64_t b, std::int64_t e) { fn_(x + b, y + b, e - b); });
    return Status::Ok();
  }

 private:
  Fn fn_;
  std::int64_t n_;
};

// float32 on oneDNN's `alg`; other types through `fallback`.
KernelFactory Eltwise(dnnl::algorithm alg, KernelFactory fallback) {
  return [alg, fallback](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    if (init.inputs[0].dtype != DType::kFloat32) return fallback(init);
    auto k = std::make_unique<DnnlEltwiseKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init, alg));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace

void RegisterActivationKernels(KernelRegistry& r) {
  r.Register("Gelu", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    if (init.node->GetString("approximate", "none") == "tanh") {
      return std::unique_ptr<Kernel>(
          std::make_unique<VecUnaryKernel>(GeluTanhF32, std::max<std::int64_t>(0, NumElements(init.outputs[0].shape))));
    }
    auto k = std::make_unique<DnnlEltwiseKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init, dnnl::algorithm::eltwise_gelu_erf));
    return std::unique_ptr<Kernel>(std::move(k));
  }, "kiln");
  r.Register("Relu", MakeRelu);
  r.Register("Clip", MakeClip);
  r.Register("Softmax", MakeSoftmax);
  r.Register("Sigmoid", Eltwise(dnnl::algorithm::eltwise_logistic,
                                 FloatUnary(KILN_UNARY([](T x) { return T(1) / (T(1) + std::exp(-x)); }))));
  r.Register("Tanh", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    if (init.inputs[0].dtype == DType::kFloat32) {
      return std::unique_ptr<Kernel>(
          std::make_unique<VecUnaryKernel>(TanhF32, std::max<std::int64_t>(0, NumElements(init.outputs[0].shape))));
    }
    return FloatUnary(KILN_UNARY([](T x) { return std::tanh(x); }))(init);
  });
  r.Register("HardSwish", FloatUnary(KILN_UNARY([](T x) {
    return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
  })));
  r.Register("HardSigmoid", FloatUnary([](const ir::Node& node, auto tag) {
    using T = typename decltype(tag)::type;
    const T alpha = node.GetFloat("alpha", 0.2f), beta = node.GetFloat("beta", 0.5f);
    return [alpha, beta](T x) { return std::max(T(0), std::min(T(1), alpha * x + beta)); };
  }));
  r.Register("LeakyRelu", FloatUnary([](const ir::Node& node, auto tag) {
    using T = typename decltype(tag)::type;
    const T alpha = node.GetFloat("alpha", 0.01f);
    return [alpha](T x) { return LeakyReluElem(x, alpha); };
  }));
}

}  // namespace kiln::cpu
