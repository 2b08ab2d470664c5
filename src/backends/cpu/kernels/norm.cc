// BatchNormalization: y = x * a + b per channel, a = scale / sqrt(var + eps),
// b = B - mean * a. With constant statistics (inference) a and b are computed
// once, at load; in training mode from the batch, with the running-statistics
// outputs. X is viewed as [N, P, inner]: P channels (or, for spatial=0, every
// element of a sample) each with `inner` contiguous values.
//
// LayerNormalization: X as [outer, inner] rows, each normalized with its own
// mean and variance, then Scale and B (broadcast to the row) applied; float32
// rows on vec_math.h's loop (BERT's [128, 768]: 0.23 -> 0.03 ms), others in
// double.
// InstanceNormalization: the same per (n, c) over the spatial dims, with a
// per-channel scale and bias.
#include <cmath>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/act_elem.h"
#include "backends/cpu/kernels/util.h"
#include "backends/cpu/kernels/vec_math.h"
#include "ops/fused_attrs.h"

namespace kiln::cpu {
namespace {

// Parameter tensors may be float16/bfloat16/float32/float64 (opset 15).
std::vector<double> LoadParams(const void* p, DType t, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kFloat64: v[i] = static_cast<const double*>(p)[i]; break;
      case DType::kFloat16: v[i] = HalfToFloat(static_cast<const std::uint16_t*>(p)[i]); break;
      case DType::kBFloat16: v[i] = BFloat16ToFloat(static_cast<const std::uint16_t*>(p)[i]); break;
      default: v[i] = static_cast<const float*>(p)[i];
    }
  }
  return v;
}

void StoreParams(void* p, DType t, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case DType::kFloat64: static_cast<double*>(p)[i] = v[i]; break;
      case DType::kFloat16: static_cast<std::uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v[i])); break;
      case DType::kBFloat16: static_cast<std::uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v[i])); break;
      default: static_cast<float*>(p)[i] = static_cast<float>(v[i]);
    }
  }
}

// The activation fuse-bias-activation gives a BatchNormalization
// (kiln.activation: Relu, LeakyRelu or Clip; format version 14), applied
// as the values are written, each exactly as the separate op's kernel
// (activation.cc) computes it: Relu's v > 0 ? v : 0 (a NaN becomes 0, as
// oneDNN's fused Relu makes it), LeakyRelu's and Clip's comparisons.
struct BnAct {
  enum Kind { kNone, kRelu, kLeakyRelu, kClip } kind = kNone;
  float alpha = 0, beta = 0;
  template <typename T>
  T operator()(T v) const {
    switch (kind) {  // the separate kernels' element functions (act_elem.h)
      case kRelu: return ReluElem(v);
      case kLeakyRelu: return LeakyReluElem(v, static_cast<T>(alpha));
      case kClip: return ClipElem(v, static_cast<T>(alpha), static_cast<T>(beta));
      default: return v;
    }
  }
};

Result<BnAct> BnActivation(const ir::Node& node) {
  BnAct a;
  const ir::Attribute* at = node.FindAttr(ops::kActAttr);
  if (!at) return a;
  a.alpha = node.GetFloat(ops::kActAlphaAttr, 0.f);
  a.beta = node.GetFloat(ops::kActBetaAttr, 0.f);
  if (at->s == "Relu") a.kind = BnAct::kRelu;
  else if (at->s == "LeakyRelu") a.kind = BnAct::kLeakyRelu;
  else if (at->s == "Clip") a.kind = BnAct::kClip;
  else return Error(StatusCode::kInvalidArgument, node.Describe(), ": fused activation '", at->s,
                    "' is not one a BatchNormalization applies (Relu, LeakyRelu, Clip)");
  return a;
}

// Channels-last rows: y[r][c] = act(x[r][c] * s[c] + t[c]) for rows [b, e)
// of p channels (a multiply, then an add: the same rounding as the NCHW
// loop). x may be y (in place).
template <typename T>
void BnRows(const T* x, T* y, const T* s, const T* t, std::int64_t p, std::int64_t b, std::int64_t e, BnAct act) {
  for (std::int64_t r = b; r < e; ++r) {
    for (std::int64_t c = 0; c < p; ++c) y[r * p + c] = act(x[r * p + c] * s[c] + t[c]);
  }
}

#if defined(__x86_64__) || defined(__i386__)
// Without an activation or with Relu (max_ps(v, 0): 0 where v is NaN, as
// BnAct's).
__attribute__((target("avx2"))) void BnRowsAvx2(const float* x, float* y, const float* s, const float* t,
                                                std::int64_t p, std::int64_t b, std::int64_t e, BnAct act) {
  const bool relu = act.kind == BnAct::kRelu;
  const __m256 zero = _mm256_setzero_ps();
  for (std::int64_t r = b; r < e; ++r) {
    const float* xr = x + r * p;
    float* yr = y + r * p;
    std::int64_t c = 0;
    for (; c + 8 <= p; c += 8) {
      __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + c), _mm256_loadu_ps(s + c)), _mm256_loadu_ps(t + c));
      if (relu) v = _mm256_max_ps(v, zero);
      _mm256_storeu_ps(yr + c, v);
    }
    for (; c < p; ++c) yr[c] = act(xr[c] * s[c] + t[c]);
  }
}
#endif

template <typename T>
class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(const KernelInit& init, BnAct act) : init_(init), act_(act) {
    const ir::Node& node = *init.node;
    const Shape& x = init.inputs[0].shape;
    const bool spatial = node.GetInt("spatial", 1) != 0;
    nhwc_ = node.GetInt(ops::kNhwcAttr, 0) != 0;  // inference only (ops/norm.cc)
    n_ = x[0];
    p_ = nhwc_ ? x[3] : spatial ? x[1] : NumElements(Shape(x.begin() + 1, x.end()));
    inner_ = nhwc_ ? x[1] * x[2] : spatial ? NumElements(Shape(x.begin() + 2, x.end())) : 1;
    eps_ = node.GetFloat("epsilon", 1e-5f);
    momentum_ = node.GetFloat("momentum", 0.9f);
    training_ = node.since_version() >= 14 ? node.GetInt("training_mode", 0) != 0 : node.num_outputs() > 1;
    bool consts = !training_;
    for (int i = 1; i < 5; ++i) consts = consts && init.const_input(i);
    if (consts) Affine(Param(nullptr, 1), Param(nullptr, 2), Param(nullptr, 3), Param(nullptr, 4));
    fixed_ = consts;
  }

  Status Run(const KernelArgs& a) override {
    const T* x = a.in_as<T>(0);
    if (!fixed_) {
      std::vector<double> mean = Param(&a, 3), var = Param(&a, 4);
      if (training_) {
        std::vector<double> bm, bv;
        BatchStats(x, &bm, &bv);
        Outputs(a, mean, var, bm, bv);
        mean = bm;
        var = bv;
      } else {
        Outputs(a, mean, var, mean, var);
      }
      Affine(Param(&a, 1), Param(&a, 2), mean, var);
    }
    T* y = a.out_as<T>(0);
    const std::int64_t inner = inner_, p = p_;
    if (nhwc_) {  // rows of p channels
      const T* s = scale_.data();
      const T* t = shift_.data();
#if defined(__x86_64__) || defined(__i386__)
      static const bool avx2 = __builtin_cpu_supports("avx2");
#else
      constexpr bool avx2 = false;
#endif
      ParallelFor(n_ * inner, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(p, 1)), [&](std::int64_t b, std::int64_t e) {
#if defined(__x86_64__) || defined(__i386__)
        if constexpr (std::is_same_v<T, float>) {
          if (avx2 && (act_.kind == BnAct::kNone || act_.kind == BnAct::kRelu)) return BnRowsAvx2(x, y, s, t, p, b, e, act_);
        }
#endif
        BnRows(x, y, s, t, p, b, e, act_);
      });
      return Status::Ok();
    }
    ParallelFor(n_ * p, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(inner, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const T s = scale_[r % p], t = shift_[r % p];
        const T* xr = x + r * inner;
        T* yr = y + r * inner;
        for (std::int64_t i = 0; i < inner; ++i) yr[i] = act_(xr[i] * s + t);
      }
    });
    return Status::Ok();
  }

 private:
  std::vector<double> Param(const KernelArgs* a, int i) const {
    const void* p = init_.const_input(i) ? init_.const_input(i)->data() : a->in(i);
    return LoadParams(p, init_.inputs[i].dtype, p_);
  }

  void Affine(const std::vector<double>& s, const std::vector<double>& b, const std::vector<double>& mean,
              const std::vector<double>& var) {
    scale_.resize(p_);
    shift_.resize(p_);
    for (std::int64_t c = 0; c < p_; ++c) {
      const double f = s[c] / std::sqrt(var[c] + eps_);
      scale_[c] = static_cast<T>(f);
      shift_[c] = static_cast<T>(b[c] - mean[c] * f);
    }
  }

  // Per-channel mean and (population) variance over N and inner.
  void BatchStats(const T* x, std::vector<double>* mean, std::vector<double>* var) const {
    mean->assign(p_, 0.0);
    var->assign(p_, 0.0);
    const double count = static_cast<double>(n_ * inner_);
    ParallelFor(p_, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t c = b; c < e; ++c) {
        double sum = 0, sq = 0;
        for (std::int64_t n = 0; n < n_; ++n) {
          const T* xr = x + (n * p_ + c) * inner_;
          for (std::int64_t i = 0; i < inner_; ++i) sum += xr[i];
        }
        const double m = count > 0 ? sum / count : 0.0;
        for (std::int64_t n = 0; n < n_; ++n) {
          const T* xr = x + (n * p_ + c) * inner_;
          for (std::int64_t i = 0; i < inner_; ++i) sq += (xr[i] - m) * (xr[i] - m);
        }
        (*mean)[c] = m;
        (*var)[c] = count > 0 ? sq / count : 0.0;
      }
    });
  }

  // Outputs 1..: running mean, running var; before opset 14 also the saved
  // (batch) mean and var.
  void Outputs(const KernelArgs& a, const std::vector<double>& mean, const std::vector<double>& var,
               const std::vector<double>& bm, const std::vector<double>& bv) const {
    const double m = training_ ? momentum_ : 1.0;
    std::vector<double> rm(p_), rv(p_);
    for (std::int64_t c = 0; c < p_; ++c) {
      rm[c] = mean[c] * m + bm[c] * (1 - m);
      rv[c] = var[c] * m + bv[c] * (1 - m);
    }
    const std::vector<double>* vals[] = {&rm, &rv, &bm, &bv};
    for (std::size_t j = 1; j < init_.outputs.size() && j < 5; ++j) {
      if (init_.outputs[j].present()) StoreParams(a.out(static_cast<int>(j)), init_.outputs[j].dtype, *vals[j - 1]);
    }
  }

  KernelInit init_;
  std::int64_t n_ = 0, p_ = 0, inner_ = 0;
  double eps_ = 1e-5, momentum_ = 0.9;
  bool training_ = false, fixed_ = false, nhwc_ = false;
  BnAct act_;
  std::vector<T> scale_, shift_;
};

// Parameter input i broadcast (numpy, right-aligned) to `target` dims, as doubles.
std::vector<double> BroadcastParam(const KernelInit& init, const KernelArgs* a, int i, const Shape& target) {
  const Shape& s = init.inputs[i].shape;
  const void* p = init.const_input(i) ? init.const_input(i)->data() : a->in(i);
  const std::vector<double> v = LoadParams(p, init.inputs[i].dtype, NumElements(s));
  const std::int64_t n = NumElements(target);
  std::vector<double> out(static_cast<std::size_t>(n));
  const std::vector<std::int64_t> st = Strides(s);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t rem = k, off = 0;
    for (std::size_t d = target.size(); d-- > 0;) {
      const std::int64_t c = rem % target[d];
      rem /= target[d];
      const std::size_t sd = d + s.size();
      if (sd >= target.size() && s[sd - target.size()] != 1) off += c * st[sd - target.size()];
    }
    out[k] = v[off];
  }
  return out;
}

// Mean and 1/sqrt(var + eps) of n values (two passes, in double).
template <typename T>
void RowStats(const T* x, std::int64_t n, double eps, double* mean, double* inv) {
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += x[i];
  const double m = n ? sum / n : 0.0;
  for (std::int64_t i = 0; i < n; ++i) sq += (x[i] - m) * (x[i] - m);
  *mean = m;
  *inv = 1.0 / std::sqrt((n ? sq / n : 0.0) + eps);
}

template <typename T>
class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const KernelInit& init) : init_(init) {
    const Shape& x = init.inputs[0].shape;
    std::int64_t axis = init.node->GetInt("axis", -1);
    if (axis < 0) axis += static_cast<std::int64_t>(x.size());
    inner_shape_ = Shape(x.begin() + axis, x.end());
    inner_ = NumElements(inner_shape_);
    outer_ = inner_ ? NumElements(x) / inner_ : 0;
    eps_ = init.node->GetFloat("epsilon", 1e-5f);
    has_b_ = init.inputs.size() > 2 && init.inputs[2].present();
    fixed_ = init.const_input(1) && (!has_b_ || init.const_input(2));
    if (fixed_) Params(nullptr);
  }

  Status Run(const KernelArgs& a) override {
    if (!fixed_) Params(&a);
    const T* x = a.in_as<T>(0);
    T* y = a.out_as<T>(0);
    const int nout = static_cast<int>(init_.outputs.size());
    ParallelFor(outer_, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(inner_, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        double mean, inv;
        if constexpr (std::is_same_v<T, float>) {  // vectorised (vec_math.h)
          LayerNormRowF32(x + r * inner_, y + r * inner_, inner_, scale_f_.data(), has_b_ ? bias_f_.data() : nullptr,
                          eps_, &mean, &inv);
        } else {
          RowStats(x + r * inner_, inner_, eps_, &mean, &inv);
          for (std::int64_t i = 0; i < inner_; ++i) {
            y[r * inner_ + i] = static_cast<T>((x[r * inner_ + i] - mean) * inv * scale_[i] + bias_[i]);
          }
        }
        for (int j = 1; j < nout; ++j) {
          if (!init_.outputs[j].present()) continue;
          const double v = j == 1 ? mean : inv;
          if (init_.outputs[j].dtype == DType::kFloat64) a.out_as<double>(j)[r] = v;
          else a.out_as<float>(j)[r] = static_cast<float>(v);
        }
      }
    });
    return Status::Ok();
  }

 private:
  void Params(const KernelArgs* a) {
    scale_ = BroadcastParam(init_, a, 1, inner_shape_);
    bias_ = has_b_ ? BroadcastParam(init_, a, 2, inner_shape_) : std::vector<double>(inner_, 0.0);
    scale_f_.assign(scale_.begin(), scale_.end());
    bias_f_.assign(bias_.begin(), bias_.end());
  }

  KernelInit init_;
  Shape inner_shape_;
  std::int64_t inner_ = 0, outer_ = 0;
  double eps_ = 1e-5;
  bool has_b_ = false, fixed_ = false;
  std::vector<double> scale_, bias_;
  std::vector<float> scale_f_, bias_f_;  // the float32 path's copies
};

template <typename T>
class InstanceNormKernel : public Kernel {
 public:
  explicit InstanceNormKernel(const KernelInit& init) : init_(init) {
    const Shape& x = init.inputs[0].shape;
    c_ = x[1];
    inner_ = NumElements(Shape(x.begin() + 2, x.end()));
    rows_ = x[0] * c_;
    eps_ = init.node->GetFloat("epsilon", 1e-5f);
  }

  Status Run(const KernelArgs& a) override {
    auto param = [&](int i) {
      const void* p = init_.const_input(i) ? init_.const_input(i)->data() : a.in(i);
      return LoadParams(p, init_.inputs[i].dtype, c_);
    };
    const std::vector<double> scale = param(1), bias = param(2);
    const T* x = a.in_as<T>(0);
    T* y = a.out_as<T>(0);
    ParallelFor(rows_, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(inner_, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        double mean, inv;
        RowStats(x + r * inner_, inner_, eps_, &mean, &inv);
        const double s = scale[r % c_] * inv, t = bias[r % c_];
        for (std::int64_t i = 0; i < inner_; ++i) y[r * inner_ + i] = static_cast<T>((x[r * inner_ + i] - mean) * s + t);
      }
    });
    return Status::Ok();
  }

 private:
  KernelInit init_;
  std::int64_t c_ = 0, inner_ = 0, rows_ = 0;
  double eps_ = 1e-5;
};

template <template <typename> class K>
Result<std::unique_ptr<Kernel>> MakeFloatKernel(const KernelInit& init) {
  std::unique_ptr<Kernel> k;
  KILN_RETURN_IF_ERROR(DispatchFloat(init.inputs[0].dtype, [&](auto tag) -> Status {
    k = std::make_unique<K<typename decltype(tag)::type>>(init);
    return Status::Ok();
  }));
  return k;
}

}  // namespace

void RegisterNormKernels(KernelRegistry& r) {
  r.Register("BatchNormalization", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    std::unique_ptr<Kernel> k;
    KILN_ASSIGN_OR_RETURN(const BnAct act, BnActivation(*init.node));
    KILN_RETURN_IF_ERROR(DispatchFloat(init.inputs[0].dtype, [&](auto tag) -> Status {
      k = std::make_unique<BatchNormKernel<typename decltype(tag)::type>>(init, act);
      return Status::Ok();
    }));
    return k;
  });
  r.Register("LayerNormalization", MakeFloatKernel<LayerNormKernel>);
  r.Register("InstanceNormalization", MakeFloatKernel<InstanceNormKernel>);
}

}  // namespace kiln::cpu
