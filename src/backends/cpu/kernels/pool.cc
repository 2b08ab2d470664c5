// Pooling kernels. Float32 MaxPool/AveragePool run on oneDNN (pooling_v2:
// dilation, asymmetric pads; ceil_mode as extra end padding), except a
// channels-last MaxPool (float32, int8, uint8), which runs a vectorised loop
// over C-vectors (NhwcMaxPool). A direct loop
// covers the rest: the Indices output, other element types, and ceil-mode
// windows that oneDNN would average over a different count. Global pools are
// plain reductions.
#include <array>
#include <type_traits>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

using dnnl::memory;

// Logical NCHW geometry; spatial dims padded to three with leading 1s.
// Channels-last tensors (kiln.nhwc) keep C innermost.
struct Geom {
  std::int64_t n = 1, c = 1;
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
  bool nhwc = false;
  std::int64_t in_size() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_size() const { return out[0] * out[1] * out[2]; }
  // Element offset of plane (n, c) and the stride between spatial positions.
  std::int64_t in_base(std::int64_t nc) const { return nhwc ? nc / c * in_size() * c + nc % c : nc * in_size(); }
  std::int64_t out_base(std::int64_t nc) const { return nhwc ? nc / c * out_size() * c + nc % c : nc * out_size(); }
  std::int64_t step() const { return nhwc ? c : 1; }
};

Result<Geom> MakeGeom(const KernelInit& init) {
  Geom g;
  g.nhwc = init.node->GetInt(ops::kNhwcAttr, 0) != 0;
  Shape x = init.inputs[0].shape, y = init.outputs[0].shape;
  if (g.nhwc) {
    x = {x[0], x[3], x[1], x[2]};
    y = {y[0], y[3], y[1], y[2]};
  }
  g.n = x[0];
  g.c = x[1];
  const std::size_t sp = x.size() - 2;
  if (sp > 3) return Error(StatusCode::kUnimplemented, "pooling over ", sp, " spatial dims (at most 3 supported)");
  for (std::size_t i = 0; i < sp; ++i) {
    g.in[3 - sp + i] = x[2 + i];
    g.out[3 - sp + i] = y[2 + i];
  }
  return g;
}

// Per spatial dim and output position: the input positions a window reads,
// and how many of its taps fall inside the padded input (the divisor of
// AveragePool with count_include_pad).
struct Taps {
  std::vector<std::int64_t> pos, begin, span;
};

std::array<Taps, 3> MakeTaps(const Geom& g, const ops::Window& w) {
  std::array<Taps, 3> t;
  const std::size_t sp = w.kernel.size();
  for (std::size_t d = 0; d < 3; ++d) {
    const bool real = d >= 3 - sp;
    const std::size_t k = real ? d - (3 - sp) : 0;
    const std::int64_t kern = real ? w.kernel[k] : 1, stride = real ? w.strides[k] : 1;
    const std::int64_t dil = real ? w.dilations[k] : 1, pl = real ? w.pads_begin[k] : 0;
    const std::int64_t pr = real ? w.pads_end[k] : 0, in = g.in[d];
    for (std::int64_t o = 0; o < g.out[d]; ++o) {
      t[d].begin.push_back(static_cast<std::int64_t>(t[d].pos.size()));
      std::int64_t span = 0;
      for (std::int64_t i = 0, p = o * stride - pl; i < kern; ++i, p += dil) {
        span += p >= -pl && p < in + pr;
        if (p >= 0 && p < in) t[d].pos.push_back(p);
      }
      t[d].span.push_back(span);
    }
    t[d].begin.push_back(static_cast<std::int64_t>(t[d].pos.size()));
  }
  return t;
}

enum class Mode { kMax, kAvgExclude, kAvgInclude };

template <typename T>
void PoolLoop(const Geom& g, const std::array<Taps, 3>& t, Mode mode, bool col_major, const T* x, T* y,
              std::int64_t* indices) {
  const std::int64_t D = g.in[0], H = g.in[1], W = g.in[2], step = g.step();
  ParallelFor(g.n * g.c, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t nc = b; nc < e; ++nc) {
      const T* xp = x + g.in_base(nc);
      const std::int64_t ob = g.out_base(nc);
      std::int64_t o = 0;
      for (std::int64_t od = 0; od < g.out[0]; ++od) {
        for (std::int64_t oh = 0; oh < g.out[1]; ++oh) {
          for (std::int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
            T best = std::numeric_limits<T>::lowest();
            std::int64_t arg = -1, count = 0;
            double sum = 0;
            for (std::int64_t a = t[0].begin[od]; a < t[0].begin[od + 1]; ++a) {
              for (std::int64_t bb = t[1].begin[oh]; bb < t[1].begin[oh + 1]; ++bb) {
                for (std::int64_t cc = t[2].begin[ow]; cc < t[2].begin[ow + 1]; ++cc) {
                  const std::int64_t s = (t[0].pos[a] * H + t[1].pos[bb]) * W + t[2].pos[cc];
                  const T v = xp[s * step];
                  if (mode == Mode::kMax) {
                    if (arg < 0 || v > best) {
                      best = v;
                      arg = col_major ? t[0].pos[a] + t[1].pos[bb] * D + t[2].pos[cc] * D * H : s;
                    }
                  } else {
                    sum += static_cast<double>(v);
                    ++count;
                  }
                }
              }
            }
            T& out = y[ob + o * step];
            if (mode == Mode::kMax) {
              out = best;
              if (indices) indices[ob + o * step] = arg < 0 ? -1 : nc * g.in_size() + arg;
            } else {
              const std::int64_t div = mode == Mode::kAvgInclude ? t[0].span[od] * t[1].span[oh] * t[2].span[ow] : count;
              out = div ? static_cast<T>(sum / static_cast<double>(div)) : T(0);
            }
          }
        }
      }
    }
  });
}

class DnnlPoolKernel : public Kernel {
 public:
  // Builds the primitive; false (no error) when oneDNN cannot express the
  // node exactly.
  // `t`: f32, or u8/s8 for max pooling (int8 models' MaxPool).
  bool Init(const Geom& g, const ops::Window& w, Mode mode, memory::data_type t = memory::data_type::f32) {
    const std::size_t sp = w.kernel.size();
    memory::dims strides(w.strides.begin(), w.strides.end()), kernel(w.kernel.begin(), w.kernel.end());
    memory::dims dil(sp), pl(w.pads_begin.begin(), w.pads_begin.end()), pr(sp);
    for (std::size_t i = 0; i < sp; ++i) {
      dil[i] = w.dilations[i] - 1;
      const std::int64_t in = g.in[3 - sp + i], out = g.out[3 - sp + i], ext = w.dilations[i] * (w.kernel[i] - 1) + 1;
      // oneDNN derives the output size by flooring: adjust the end padding
      // to give ONNX's (possibly ceil-mode) output size.
      auto outputs = [&](std::int64_t r) { return (in + pl[i] + r - ext) / w.strides[i] + 1; };
      pr[i] = w.pads_end[i];
      if (outputs(pr[i]) != out) pr[i] = (out - 1) * w.strides[i] + ext - in - pl[i];
      if (pr[i] < 0 || outputs(pr[i]) != out) return false;
      // Include-padding averages would count the extra padding.
      if (mode == Mode::kAvgInclude && pr[i] > w.pads_end[i]) return false;
    }
    Shape lx = {g.n, g.c}, ly = {g.n, g.c};
    for (std::size_t i = 0; i < sp; ++i) {
      lx.push_back(g.in[3 - sp + i]);
      ly.push_back(g.out[3 - sp + i]);
    }
    auto desc = [&](const Shape& s) {
      return g.nhwc ? memory::desc(memory::dims(s.begin(), s.end()), t, memory::format_tag::nhwc) : PlainDesc(s, t);
    };
    const dnnl::algorithm alg = mode == Mode::kMax        ? dnnl::algorithm::pooling_max
                                : mode == Mode::kAvgInclude ? dnnl::algorithm::pooling_avg_include_padding
                                                            : dnnl::algorithm::pooling_avg_exclude_padding;
    auto channels_last = [&](const Shape& s) {
      const memory::format_tag tag = s.size() == 3 ? memory::format_tag::nwc
                                     : s.size() == 4 ? memory::format_tag::nhwc
                                                     : memory::format_tag::ndhwc;
      return memory::desc(memory::dims(s.begin(), s.end()), t, tag);
    };
    auto slow = [](const dnnl::pooling_v2_forward::primitive_desc& pd) {
      const std::string impl = pd.impl_info_str();
      return impl.rfind("ref", 0) == 0 || impl.rfind("simple", 0) == 0;
    };
    bool ok = true;
    return DnnlCall("pooling", [&] {
             auto make = [&](const memory::desc& x, const memory::desc& y) {
               dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, x, y, strides, kernel, dil, pl, pr);
               return dnnl::pooling_v2_forward::primitive_desc(d, UserScratchpad(), DnnlEngine());
             };
             dnnl::pooling_v2_forward::primitive_desc pd = make(desc(lx), desc(ly));
             if (slow(pd) && !g.nhwc) {
               // oneDNN pools NCHW with its reference or "simple" kernels
               // (18 ms for ResNet's stem): pool channels-last between two
               // reorders instead when that has a fast kernel.
               dnnl::pooling_v2_forward::primitive_desc cl = make(channels_last(lx), channels_last(ly));
               if (!slow(cl)) {
                 to_src_ = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), desc(lx), DnnlEngine(), cl.src_desc()));
                 from_dst_ = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), cl.dst_desc(), DnnlEngine(), desc(ly)));
                 src_plain_ = desc(lx);
                 dst_plain_ = desc(ly);
                 pd = cl;
               }
             }
             // oneDNN's reference pooling is far slower than Kiln's own loop.
             if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
               ok = false;
               return;
             }
             prim_ = dnnl::pooling_v2_forward(pd);
             src_ = memory(pd.src_desc(), DnnlEngine(), nullptr);
             dst_ = memory(pd.dst_desc(), DnnlEngine(), nullptr);
             scratch_ = ScratchpadFor(pd);
           }).ok() && ok;
  }

  Status Run(const KernelArgs& a) override {
    dnnl::stream& s = DnnlStream();
    if (to_src_) {  // channels-last copies, per thread, reused
      thread_local std::vector<std::uint8_t> xb, yb;
      if (xb.size() < src_.get_desc().get_size()) xb.resize(src_.get_desc().get_size());
      if (yb.size() < dst_.get_desc().get_size()) yb.resize(dst_.get_desc().get_size());
      memory xp(src_plain_, DnnlEngine(), const_cast<void*>(a.in(0))), yp(dst_plain_, DnnlEngine(), a.out(0));
      src_.set_data_handle(xb.data());
      dst_.set_data_handle(yb.data());
      to_src_.execute(s, xp, src_);
      prim_.execute(s, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratch_.Bind(a.ctx)}});
      from_dst_.execute(s, dst_, yp);
      s.wait();
      return Status::Ok();
    }
    src_.set_data_handle(const_cast<void*>(a.in(0)));
    dst_.set_data_handle(a.out(0));
    prim_.execute(s, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratch_.Bind(a.ctx)}});
    s.wait();
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_.bytes; }

 private:
  dnnl::pooling_v2_forward prim_;
  dnnl::reorder to_src_, from_dst_;  // NCHW pooled channels-last
  memory::desc src_plain_, dst_plain_;
  memory src_, dst_;
  Scratchpad scratch_;
};

// Channels-last MaxPool: each output pixel is the elementwise maximum of
// the C-vectors its window reads (contiguous). oneDNN's AVX2 pooling on
// NHWC transposes through a blocked scratch copy: ResNet's 3x3 stride-2 stem
// pool (64 channels, 112x112) took 0.89 ms there. Per output pixel the
// window's tap pointers are gathered once, then each chunk of channels is
// reduced over the taps in registers and stored once (AVX2 where the CPU
// has it: 4 vectors at a time; SqueezeNet's 3x3 pool of 111x111x64 took 220
// us on a Zen 5 with the baseline SSE2 loop that stored after every tap).
// NaN propagates (as in PyTorch's max_pool2d and NumPy's max): a NaN tap
// makes its channel's output NaN.
template <typename T>
inline T MaxNan(T acc, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return (v > acc || v != v) ? v : acc;  // a NaN acc stays: v > NaN is false
  } else {
    return v > acc ? v : acc;
  }
}

template <typename T>
void MaxOfTapsScalar(const T* const* taps, std::int64_t n, T* y, std::int64_t c0, std::int64_t c) {
  for (std::int64_t q = c0; q < c; ++q) {
    T acc = taps[0][q];
    for (std::int64_t t = 1; t < n; ++t) acc = MaxNan(acc, taps[t][q]);
    y[q] = acc;
  }
}

#if defined(__x86_64__) || defined(__i386__)
// Float32: max_ps(v, acc) returns acc when either is NaN, so a NaN
// accumulator stays; NaN taps are collected in a mask and OR-ed in (all
// bits set is a NaN).
template <int kVecs>
__attribute__((target("avx2"))) inline void MaxTapsF32(const float* const* taps, std::int64_t n, float* y,
                                                      std::int64_t q) {
  __m256 acc[kVecs], nan[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    acc[v] = _mm256_loadu_ps(taps[0] + q + 8 * v);
    nan[v] = _mm256_setzero_ps();
  }
  for (std::int64_t t = 1; t < n; ++t) {
    for (int v = 0; v < kVecs; ++v) {
      const __m256 x = _mm256_loadu_ps(taps[t] + q + 8 * v);
      acc[v] = _mm256_max_ps(x, acc[v]);
      nan[v] = _mm256_or_ps(nan[v], _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
  }
  for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(y + q + 8 * v, _mm256_or_ps(acc[v], nan[v]));
}

// The same over 16 lanes, the NaN taps collected in a mask register.
template <int kVecs>
__attribute__((target("avx512f"))) inline void MaxTapsF32x16(const float* const* taps, std::int64_t n, float* y,
                                                            std::int64_t q) {
  __m512 acc[kVecs];
  __mmask16 nan[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    acc[v] = _mm512_loadu_ps(taps[0] + q + 16 * v);
    nan[v] = 0;
  }
  for (std::int64_t t = 1; t < n; ++t) {
    for (int v = 0; v < kVecs; ++v) {
      const __m512 x = _mm512_loadu_ps(taps[t] + q + 16 * v);
      acc[v] = _mm512_max_ps(x, acc[v]);
      nan[v] = static_cast<__mmask16>(nan[v] | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q));
    }
  }
  for (int v = 0; v < kVecs; ++v) {
    _mm512_storeu_ps(y + q + 16 * v, _mm512_mask_mov_ps(acc[v], nan[v], _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())));
  }
}

__attribute__((target("avx512f"))) void MaxOfTapsAvx512(const float* const* taps, std::int64_t n, float* y,
                                                        std::int64_t c) {
  std::int64_t q = 0;
  for (; q + 64 <= c; q += 64) MaxTapsF32x16<4>(taps, n, y, q);
  for (; q + 16 <= c; q += 16) MaxTapsF32x16<1>(taps, n, y, q);
  MaxOfTapsScalar(taps, n, y, q, c);
}

__attribute__((target("avx2"))) void MaxOfTapsAvx2(const float* const* taps, std::int64_t n, float* y,
                                                   std::int64_t c) {
  std::int64_t q = 0;
  for (; q + 32 <= c; q += 32) MaxTapsF32<4>(taps, n, y, q);
  for (; q + 8 <= c; q += 8) MaxTapsF32<1>(taps, n, y, q);
  MaxOfTapsScalar(taps, n, y, q, c);
}

__attribute__((target("avx2"))) inline __m256i Load8At(const void* p, std::int64_t off) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const char*>(p) + off));
}

template <bool kSigned, int kVecs>
__attribute__((target("avx2"))) inline void MaxTaps8(const void* const* taps, std::int64_t n, void* y,
                                                    std::int64_t q) {
  __m256i acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = Load8At(taps[0], q + 32 * v);
  for (std::int64_t t = 1; t < n; ++t) {
    for (int v = 0; v < kVecs; ++v) {
      acc[v] = kSigned ? _mm256_max_epi8(acc[v], Load8At(taps[t], q + 32 * v))
                     : _mm256_max_epu8(acc[v], Load8At(taps[t], q + 32 * v));
    }
  }
  for (int v = 0; v < kVecs; ++v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<char*>(y) + q + 32 * v), acc[v]);
  }
}

template <typename T>
__attribute__((target("avx2"))) void MaxOfTapsAvx2(const T* const* taps, std::int64_t n, T* y, std::int64_t c) {
  constexpr bool kSigned = std::is_signed_v<T>;
  const void* const* raw = reinterpret_cast<const void* const*>(taps);
  std::int64_t q = 0;
  for (; q + 128 <= c; q += 128) MaxTaps8<kSigned, 4>(raw, n, y, q);
  for (; q + 32 <= c; q += 32) MaxTaps8<kSigned, 1>(raw, n, y, q);
  MaxOfTapsScalar(taps, n, y, q, c);
}
#endif

template <typename T>
void NhwcMaxPool(const Geom& g, const std::array<Taps, 3>& t, const T* x, T* y) {
  const std::int64_t c = g.c, rows = g.n * g.out[0] * g.out[1];
  const std::int64_t per_row = std::max<std::int64_t>(1, g.out[2] * c);
  std::int64_t most = 1;  // taps of the largest window
  for (std::size_t d = 0; d < 3; ++d) {
    std::int64_t m = 0;
    for (std::size_t o = 0; o + 1 < t[d].begin.size(); ++o) m = std::max(m, t[d].begin[o + 1] - t[d].begin[o]);
    most *= m;
  }
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool avx512 = Avx512Allowed();
#else
  constexpr bool avx2 = false, avx512 = false;
#endif
  ParallelFor(rows, std::max<std::int64_t>(1, 16384 / per_row), [&](std::int64_t b, std::int64_t e) {
    std::vector<const T*> taps(static_cast<std::size_t>(std::max<std::int64_t>(most, 1)));
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t n = r / (g.out[0] * g.out[1]), od = r / g.out[1] % g.out[0], oh = r % g.out[1];
      for (std::int64_t ow = 0; ow < g.out[2]; ++ow) {
        T* yp = y + (r * g.out[2] + ow) * c;
        std::int64_t k = 0;
        for (std::int64_t i = t[0].begin[od]; i < t[0].begin[od + 1]; ++i) {
          for (std::int64_t j = t[1].begin[oh]; j < t[1].begin[oh + 1]; ++j) {
            const std::int64_t row = ((n * g.in[0] + t[0].pos[i]) * g.in[1] + t[1].pos[j]) * g.in[2];
            for (std::int64_t l = t[2].begin[ow]; l < t[2].begin[ow + 1]; ++l) taps[k++] = x + (row + t[2].pos[l]) * c;
          }
        }
        if (k == 0) {
          std::fill(yp, yp + c, std::numeric_limits<T>::lowest());  // a window wholly in the padding
          continue;
        }
#if defined(__x86_64__) || defined(__i386__)
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t>) {
          if constexpr (std::is_same_v<T, float>) {
            if (avx512) {
              MaxOfTapsAvx512(taps.data(), k, yp, c);
              continue;
            }
          }
          if (avx2) {
            MaxOfTapsAvx2(taps.data(), k, yp, c);
            continue;
          }
        }
#endif
        MaxOfTapsScalar(taps.data(), k, yp, 0, c);
      }
    }
  });
}

Result<std::unique_ptr<Kernel>> MakePool(const KernelInit& init) {
  const ir::Node& node = *init.node;
  KILN_ASSIGN_OR_RETURN(const Geom g, MakeGeom(init));
  const Shape& x = init.inputs[0].shape;
  const Shape spatial = g.nhwc ? Shape{x[1], x[2]} : Shape(x.begin() + 2, x.end());
  KILN_ASSIGN_OR_RETURN(ops::Window w, ops::ComputeWindow(node, spatial, node.GetInts("kernel_shape"), true));
  const bool is_max = node.op_type() == "MaxPool";
  const Mode mode = is_max ? Mode::kMax : node.GetInt("count_include_pad", 0) ? Mode::kAvgInclude : Mode::kAvgExclude;
  const bool with_indices = init.outputs.size() > 1 && init.outputs[1].present();
  const DType t = init.inputs[0].dtype;
  const bool dnnl_type = t == DType::kFloat32 || (is_max && (t == DType::kUInt8 || t == DType::kInt8));
  if (is_max && g.nhwc && dnnl_type && !with_indices) {
    const auto taps = MakeTaps(g, w);
    std::unique_ptr<Kernel> k;
    KILN_RETURN_IF_ERROR(DispatchNumeric(t, [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      k = std::make_unique<FnKernel>([g, taps](const KernelArgs& a) {
        NhwcMaxPool(g, taps, a.in_as<T>(0), a.out_as<T>(0));
        return Status::Ok();
      });
      return Status::Ok();
    }));
    return k;
  }
  if (dnnl_type && !with_indices && g.n * g.c * g.out_size() > 0) {
    auto k = std::make_unique<DnnlPoolKernel>();
    const memory::data_type dt = t == DType::kFloat32 ? memory::data_type::f32
                                 : t == DType::kUInt8 ? memory::data_type::u8
                                                      : memory::data_type::s8;
    if (k->Init(g, w, mode, dt)) return std::unique_ptr<Kernel>(std::move(k));
  }
  const auto taps = MakeTaps(g, w);
  const bool col_major = node.GetInt("storage_order", 0) == 1;
  std::unique_ptr<Kernel> k;
  KILN_RETURN_IF_ERROR(DispatchNumeric(init.inputs[0].dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    k = std::make_unique<FnKernel>([g, taps, mode, col_major, with_indices](const KernelArgs& a) {
      PoolLoop(g, taps, mode, col_major, a.in_as<T>(0), a.out_as<T>(0),
               with_indices ? a.out_as<std::int64_t>(1) : nullptr);
      return Status::Ok();
    });
    return Status::Ok();
  }));
  return k;
}

// Spans a channels-last global pool cuts each image into: at most 256 rows
// each (summed in the element type, the spans' sums then in double), and
// enough of about 16K values to share among threads; never more than rows.
inline std::int64_t GlobalPoolParts(std::int64_t s, std::int64_t c) {
  const std::int64_t by_rows = (s + 255) / 256, by_size = std::min<std::int64_t>(16, s * c / 16384);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(std::max(by_rows, by_size), s));
}

// Reduces each (n, c) plane of `s` elements; channels-last input keeps C innermost.
template <typename T>
void GlobalPool(std::int64_t n, std::int64_t c, std::int64_t s, bool nhwc, bool is_max, const T* x, T* y) {
  if (!nhwc) {
    ParallelFor(n * c, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(s, 1)), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t p = b; p < e; ++p) {
        const T* xp = x + p * s;
        if (is_max) {
          T m = s ? xp[0] : T(0);
          for (std::int64_t i = 1; i < s; ++i) m = xp[i] > m || xp[i] != xp[i] ? xp[i] : m;  // NaN propagates (as NumPy's max)
          y[p] = m;
        } else {
          double sum = 0;
          for (std::int64_t i = 0; i < s; ++i) sum += xp[i];
          y[p] = static_cast<T>(s ? sum / static_cast<double>(s) : 0.0);
        }
      }
    });
    return;
  }
  // Channels-last: each image's rows of C values are cut into `parts`
  // spans (a count fixed by the size, not by the thread count, so results
  // do not depend on it); each span is reduced over contiguous rows (the
  // loop over C vectorizes) into its own partial row, and the partials are
  // combined in order, in double.
  const std::int64_t parts = GlobalPoolParts(s, c);
  const std::size_t cs = static_cast<std::size_t>(c);
  thread_local std::vector<T> partial;
  if (partial.size() < static_cast<std::size_t>(n * parts) * cs) partial.resize(static_cast<std::size_t>(n * parts) * cs);
  T* part = partial.data();
  // Threads only for about 256K values and more: below that, the fork and
  // reading what other cores wrote cost more than they save.
  const std::int64_t span = std::max<std::int64_t>(1, s * c / parts);
  ParallelFor(n * parts, std::max<std::int64_t>(1, 131072 / span), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t i = item / parts, q = item % parts;
      const std::int64_t j0 = s * q / parts, j1 = s * (q + 1) / parts;
      T* __restrict acc = part + static_cast<std::size_t>(item) * cs;
      const T* xp = x + i * s * c;
      if (j0 == j1) {  // an empty span (s < parts): the identity of its reduction
        for (std::int64_t k = 0; k < c; ++k) acc[k] = is_max ? -std::numeric_limits<T>::infinity() : T(0);
        continue;
      }
      for (std::int64_t k = 0; k < c; ++k) acc[k] = xp[j0 * c + k];
      for (std::int64_t j = j0 + 1; j < j1; ++j) {
        const T* __restrict row = xp + j * c;
        if (is_max) {
          for (std::int64_t k = 0; k < c; ++k) acc[k] = row[k] > acc[k] || row[k] != row[k] ? row[k] : acc[k];
        } else {
          for (std::int64_t k = 0; k < c; ++k) acc[k] += row[k];
        }
      }
    }
  });
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t k = 0; k < c; ++k) {
      const T* p0 = part + static_cast<std::size_t>(i * parts) * cs + k;
      double v = p0[0];
      for (std::int64_t q = 1; q < parts; ++q) {
        const double w = p0[static_cast<std::size_t>(q) * cs];
        v = is_max ? (w > v || w != w ? w : v) : v + w;  // a NaN span stays NaN
      }
      y[i * c + k] = static_cast<T>(is_max || !s ? (s ? v : 0.0) : v / static_cast<double>(s));
    }
  }
}

Result<std::unique_ptr<Kernel>> MakeGlobalPool(const KernelInit& init) {
  const Shape& x = init.inputs[0].shape;
  const bool nhwc = init.node->GetInt(ops::kNhwcAttr, 0) != 0;
  const bool is_max = init.node->op_type() == "GlobalMaxPool";
  const std::int64_t n = x[0], c = nhwc ? x.back() : x[1], s = NumElements(x) / std::max<std::int64_t>(n * c, 1);
  std::unique_ptr<Kernel> k;
  KILN_RETURN_IF_ERROR(DispatchFloat(init.inputs[0].dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    k = std::make_unique<FnKernel>([=](const KernelArgs& a) {
      GlobalPool(n, c, s, nhwc, is_max, a.in_as<T>(0), a.out_as<T>(0));
      return Status::Ok();
    });
    return Status::Ok();
  }));
  return k;
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  r.Register("MaxPool", MakePool);
  r.Register("AveragePool", MakePool);
  r.Register("GlobalAveragePool", MakeGlobalPool);
  r.Register("GlobalMaxPool", MakeGlobalPool);
}

}  // namespace kiln::cpu
