// Gemm and MatMul on oneDNN's matmul. Constant B is packed once at load
// into the layout the primitive asks for (a blocked one where oneDNN has a
// kernel for it), or, where it takes a plain matrix (its gemm on AVX2
// machines), into a row-major copy whose row stride is an odd multiple of 64
// bytes: with a stride of a multiple of 4 KiB (N = 1024, 3072, 4096, ...)
// its rows fall into the same cache sets and the gemm runs at half speed
// (BERT's 768x3072 FFN: 46 GFLOP/s -> 96). The packed copy is shared through
// the model's PrepackCache; Gemm's alpha is folded into it. Constant C
// becomes the primitive's bias.
//
// Kernels for plans of models with symbolic dims made at run time
// (KernelInit::varying_shapes) take A's rows as a run-time dim where B is a
// constant matrix: one primitive (oneDNN's gemm on the plain packed copy)
// then serves every row count, made once per model (oneDNN's primitive
// cache) instead of generating brgemm code for each new shape. Measured on
// Zen 5 (AVX-512), both run at the same speed for such MatMuls (BERT-base
// within 1-3%, either way; bench/RESULTS.md, "Dynamic shapes"); the
// exact-shape path is kept for static models and gears.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "ops/fused_attrs.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

// Row stride (elements) for a packed plain matrix with `n` columns: n
// rounded up to 16 floats (64 bytes), then to an odd multiple of 16; narrow
// matrices (under 64 columns, where padding would multiply their size) keep n.
std::int64_t PaddedRowStride(std::int64_t n) {
  if (n < 64) return n;
  std::int64_t ld = (n + 15) / 16 * 16;
  if ((ld / 16) % 2 == 0) ld += 16;
  return ld;
}

// A row-major descriptor of `dims` whose last-but-one stride is `ld`.
memory::desc PaddedDesc(const memory::dims& dims, std::int64_t ld) {
  memory::dims strides(dims.size(), 1);
  const std::size_t r = dims.size();
  if (r >= 2) strides[r - 2] = ld;
  for (std::size_t i = r - 2; r >= 3 && i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(dims, memory::data_type::f32, strides);
}

// Copies matrix B (src_md: dims [..., K, N], leading dims 1, element
// strides sk and sn: row-major, or transposed as Gemm's transB gives it)
// times `alpha` into dst_md's row-major rows of stride ld >= N (the padded
// plain layout), zeroing the padding. oneDNN 2.6 does this with its generic
// reorder ("simple:any") at about 0.4 GB/s (BERT-base's 768x3072 weight:
// 26 ms); this runs at memory speed. False where the descriptors have
// another form (the caller reorders with oneDNN then).
bool CopyToPaddedRows(const memory::desc& src_md, const float* src, const memory::desc& dst_md, float* dst,
                      float alpha) {
  const dnnl_memory_desc_t& s = src_md.data;
  const dnnl_memory_desc_t& d = dst_md.data;
  if (s.format_kind != dnnl_blocked || d.format_kind != dnnl_blocked || s.ndims != d.ndims || s.ndims < 2 ||
      s.format_desc.blocking.inner_nblks != 0 || d.format_desc.blocking.inner_nblks != 0 || s.offset0 != 0 ||
      d.offset0 != 0 || s.data_type != dnnl_f32 || d.data_type != dnnl_f32) {
    return false;
  }
  const int r = s.ndims;
  for (int i = 0; i < r; ++i) {
    if (s.dims[i] != d.dims[i] || s.padded_dims[i] != s.dims[i] || d.padded_dims[i] != d.dims[i]) return false;
    if (i < r - 2 && s.dims[i] != 1) return false;
  }
  const std::int64_t k = s.dims[r - 2], n = s.dims[r - 1];
  const std::int64_t sk = s.format_desc.blocking.strides[r - 2], sn = s.format_desc.blocking.strides[r - 1];
  const std::int64_t ld = d.format_desc.blocking.strides[r - 2];
  if (d.format_desc.blocking.strides[r - 1] != 1 || ld < n || sk < 0 || sn < 0) return false;
  if (dst_md.get_size() < static_cast<std::size_t>(k * ld) * sizeof(float)) return false;  // rows and padding fit
  if (sn == 1) {
    for (std::int64_t i = 0; i < k; ++i) {
      const float* from = src + i * sk;
      float* to = dst + i * ld;
      if (alpha == 1.f) std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(float));
      else for (std::int64_t j = 0; j < n; ++j) to[j] = from[j] * alpha;
    }
  } else {
    // Transposed (or other strides): 16x16 tiles, so that both sides are
    // read and written a cache line at a time.
    constexpr std::int64_t kT = 16;
    for (std::int64_t i0 = 0; i0 < k; i0 += kT) {
      for (std::int64_t j0 = 0; j0 < n; j0 += kT) {
        const std::int64_t i1 = std::min(k, i0 + kT), j1 = std::min(n, j0 + kT);
        for (std::int64_t j = j0; j < j1; ++j)
          for (std::int64_t i = i0; i < i1; ++i) dst[i * ld + j] = src[i * sk + j * sn] * alpha;
      }
    }
  }
  if (ld > n) {
    for (std::int64_t i = 0; i < k; ++i) std::memset(dst + i * ld + n, 0, static_cast<std::size_t>(ld - n) * sizeof(float));
  }
  return true;
}

// Whether a MatMul / Gemm takes bfloat16 operands: the model computes it in
// bfloat16 (ops::kBf16Attr), the device multiplies bfloat16 natively, and B
// is a constant (a weight; products of two activations stay float32).
bool Bf16(const KernelInit& init) {
  const HostTensor* b = init.const_input(1);
  if (init.node->GetInt(ops::kBf16Attr, 0) != 1 || !init.caps || !init.caps->bf16_dot ||
      init.inputs[0].dtype != DType::kFloat32 || b == nullptr || b->shape().empty()) {
    return false;
  }
  // Multiply-adds per element of A: N (B's last dim; its first for Gemm's
  // transB; 1 for a MatMul by a vector).
  const Shape& bs = b->shape();
  const std::int64_t n = bs.size() == 1                                                     ? 1
                         : init.node->op_type() == "Gemm" && init.node->GetInt("transB", 0) ? bs.front()
                                                                                            : bs.back();
  return Bf16PaysOff(static_cast<double>(n));
}

class MatMulKernel : public Kernel {
 public:
  // a_md/b_md/dst_md describe the (rank-equal) operands; `b_const` (with
  // `alpha` applied), which b_md describes, is packed when given. `bias`
  // (already scaled, dims broadcastable to dst) becomes the primitive's bias
  // when given. `runtime_rows` (2-D plain a_md and dst_md, constant B, a
  // bias of one row): the primitive takes any row count (its rows a
  // run-time dim), B packed plain. `bf16` (ops::kBf16Attr on a CPU with
  // bf16_dot; constant B, plain A): A is rounded to bfloat16 each run and B
  // once, when packed; float32 sums, bias and output. Where oneDNN has no
  // such primitive the float32 one runs.
  Status Init(const ir::Node& node, const memory::desc& a_md, const memory::desc& b_md,
              const memory::desc& dst_md, const HostTensor* b_const, float alpha,
              const HostTensor* bias, const Shape& bias_dims, device::PrepackCache* cache,
              bool runtime_rows = false, bool bf16 = false) {
    dnnl::post_ops po;
    KILN_RETURN_IF_ERROR(AppendFusedActivation(node, po));
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr = UserScratchpad(attr);
    const memory::dims adims = a_md.dims();
    bf16_ = bf16 && b_const && a_md == PlainDesc(Shape(adims.begin(), adims.end()));
    return DnnlCall(node.op_type().c_str(), [&] {
      memory::desc bias_md = bias ? PlainDesc(bias_dims) : memory::desc();
      const memory::dims bdims = b_md.dims();
      memory::desc w_md = b_md;
      memory::desc pa_md = a_md, pdst_md = dst_md;
      const memory::desc a16_md = PlainDesc(Shape(adims.begin(), adims.end()), memory::data_type::bf16);
      std::optional<dnnl::matmul::primitive_desc> bf16_pd;
      if (bf16_) {
        try {
          const memory::desc pa16 = runtime_rows ? memory::desc({DNNL_RUNTIME_DIM_VAL, adims[1]}, memory::data_type::bf16,
                                                                memory::format_tag::ab)
                                                 : a16_md;
          dnnl::matmul::desc d16(pa16, memory::desc(bdims, memory::data_type::bf16, memory::format_tag::any), bias_md,
                                 runtime_rows ? memory::desc({DNNL_RUNTIME_DIM_VAL, dst_md.dims()[1]},
                                                             memory::data_type::f32, memory::format_tag::ab)
                                              : dst_md);
          bf16_pd.emplace(d16, attr, DnnlEngine());
          // oneDNN's reference kernel would be slower than float32's.
          if (std::string(bf16_pd->impl_info_str()).rfind("ref", 0) == 0) bf16_pd.reset(), bf16_ = false;
        } catch (const dnnl::error&) {
          bf16_ = false;  // the float32 primitive below
        }
      }
      if (bf16_) {
        // (bf16_pd set)
      } else if (runtime_rows) {
        w_md = PaddedDesc(bdims, PaddedRowStride(bdims.back()));
        pa_md = memory::desc({DNNL_RUNTIME_DIM_VAL, a_md.dims()[1]}, memory::data_type::f32, memory::format_tag::ab);
        pdst_md = memory::desc({DNNL_RUNTIME_DIM_VAL, dst_md.dims()[1]}, memory::data_type::f32, memory::format_tag::ab);
      } else if (b_const) {
        // The layout oneDNN prefers; a plain answer gets the padded stride.
        dnnl::matmul::desc any(a_md, memory::desc(bdims, memory::data_type::f32, memory::format_tag::any), bias_md, dst_md);
        w_md = dnnl::matmul::primitive_desc(any, attr, DnnlEngine()).weights_desc();
        if (w_md == PlainDesc(Shape(bdims.begin(), bdims.end())) || w_md == b_md) {
          w_md = PaddedDesc(bdims, PaddedRowStride(bdims.back()));
        }
      }
      const dnnl::matmul::primitive_desc pd =
          bf16_ ? *bf16_pd : dnnl::matmul::primitive_desc(dnnl::matmul::desc(pa_md, w_md, bias_md, pdst_md), attr,
                                                          DnnlEngine());
      prim_ = dnnl::matmul(pd);
      a_ = memory(bf16_ ? a16_md : runtime_rows ? a_md : pd.src_desc(), DnnlEngine(), nullptr);
      dst_ = memory(runtime_rows ? dst_md : pd.dst_desc(), DnnlEngine(), nullptr);
      if (b_const) {
        auto pack = [&] {
          auto packed = std::make_shared<memory>(pd.weights_desc(), DnnlEngine());
          if (CopyToPaddedRows(b_md, b_const->data_as<float>(), pd.weights_desc(),
                               static_cast<float*>(packed->get_data_handle()), alpha)) {
            b_const->ReleasePages();
            return packed;
          }
          std::vector<float> scaled;
          const void* src = b_const->data();
          if (alpha != 1.f) {  // same strides as b_md: scale element by element
            scaled.assign(b_const->data_as<float>(), b_const->data_as<float>() + b_const->numel());
            for (float& v : scaled) v *= alpha;
            src = scaled.data();
          }
          memory plain(b_md, DnnlEngine(), const_cast<void*>(src));
          dnnl::reorder(plain, *packed).execute(DnnlStream(), plain, *packed);
          DnnlStream().wait();
          b_const->ReleasePages();  // the packed copy replaces the mapped pages
          return packed;
        };
        std::string layout = PackedLayoutKey(pd.weights_desc());
        // alpha by its bits: two nearby alphas must not share a scaled copy.
        if (!layout.empty()) layout = StrCat("matmul:a", std::bit_cast<std::uint32_t>(alpha), ":", PackedLayoutKey(b_md), ">", layout);
        if (PackedLayoutKey(b_md).empty()) layout.clear();
        packed_ = cache ? cache->Get<memory>(b_const->data(), layout, pack) : pack();
        b_ = *packed_;
      } else {
        b_ = memory(b_md, DnnlEngine(), nullptr);
        runtime_b_ = true;
      }
      scratch_ = ScratchpadFor(pd);
      if (bf16_) {
        // A rounded to bfloat16 into the workspace, after the scratchpad.
        to_bf16_.Init(a_md, a16_md);
        to_bf16_.Place(std::max(scratch_.bytes, to_bf16_.scratch_bytes()));
      }
      args_ = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, scratch_.mem}};
      if (bias) {
        bias_ = memory(pd.bias_desc(), DnnlEngine());
        std::memcpy(bias_.get_data_handle(), bias->data(), bias->nbytes());
        args_[DNNL_ARG_BIAS] = bias_;
      }
    });
  }

  void Execute(const void* a, const void* b, void* out, const device::ExecContext* ctx) {
    if (bf16_) {
      // One workspace for the scratchpads and the rounded A.
      const std::size_t need = workspace_bytes();
      auto* ws = static_cast<std::uint8_t*>(ctx && ctx->workspace && ctx->workspace_bytes >= need ? ctx->workspace
                                                                                                : ThreadScratch(need));
      to_bf16_.Run(a, ws, a_);
      if (scratch_.bytes) scratch_.mem.set_data_handle(ws);
    } else {
      a_.set_data_handle(const_cast<void*>(a));
      scratch_.Bind(ctx);
    }
    if (runtime_b_) b_.set_data_handle(const_cast<void*>(b));
    dst_.set_data_handle(out);
    prim_.execute(DnnlStream(), args_);
    DnnlStream().wait();
  }

  Status Run(const KernelArgs& a) override {
    Execute(a.in(0), a.in(1), a.out(0), a.ctx);
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return bf16_ ? to_bf16_.end() : scratch_.bytes; }

 private:
  dnnl::matmul prim_;
  // bfloat16 operands (Init's `bf16`): the reorder rounding A, where the
  // rounded copy sits in the workspace.
  bool bf16_ = false;
  Bf16Rounding to_bf16_;
  memory a_, b_, bias_, dst_;
  std::shared_ptr<memory> packed_;  // constant B, shared through the PrepackCache
  std::unordered_map<int, memory> args_;
  Scratchpad scratch_;
  bool runtime_b_ = false;
};

// Gemm: Y = alpha * op(A) op(B) + beta * C.
class GemmKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    const ir::Node& node = *init.node;
    const Shape& a = init.inputs[0].shape;
    const Shape& b = init.inputs[1].shape;
    const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
    alpha_ = node.GetFloat("alpha", 1.f);
    beta_ = node.GetFloat("beta", 1.f);
    m_ = ta ? a[1] : a[0];
    const std::int64_t k = ta ? a[0] : a[1];
    n_ = tb ? b[0] : b[1];
    memory::desc a_md = StridedDesc({m_, k}, ta ? Shape{1, m_} : Shape{k, 1});
    memory::desc b_md = StridedDesc({k, n_}, tb ? Shape{1, k} : Shape{n_, 1});
    memory::desc y_md = PlainDesc({m_, n_});
    const HostTensor* bc = init.const_input(1);
    has_c_ = init.inputs.size() > 2 && init.inputs[2].present();
    const HostTensor* cc = has_c_ ? init.const_input(2) : nullptr;
    std::shared_ptr<HostTensor> bias;
    Shape bias_dims;
    if (cc && bc && beta_ != 0.f) {
      // beta*C as a broadcastable bias [1|M, 1|N].
      Shape cs = cc->shape();
      while (cs.size() < 2) cs.insert(cs.begin(), 1);
      bias_dims = cs;
      bias = std::make_shared<HostTensor>(DType::kFloat32, cs);
      for (std::int64_t i = 0; i < cc->numel(); ++i) bias->mutable_data_as<float>()[i] = beta_ * cc->data_as<float>()[i];
      c_in_primitive_ = true;
    }
    scale_after_ = bc ? 1.f : alpha_;
    if (has_c_ && !c_in_primitive_) {
      c_shape_ = init.inputs[2].shape;
      plan_ = MakeBroadcastPlan({m_, n_}, c_shape_, {m_, n_});
    }
    const bool runtime_rows = init.varying_shapes && bc && !ta && (!bias || bias_dims[0] == 1);
    return mm_.Init(node, a_md, b_md, y_md, bc, bc ? alpha_ : 1.f, bias.get(), bias_dims, init.prepack_cache,
                    runtime_rows, Bf16(init) && !ta);
  }

  Status Run(const KernelArgs& a) override {
    float* y = a.out_as<float>(0);
    mm_.Execute(a.in(0), a.in(1), y, a.ctx);
    const std::int64_t total = m_ * n_;
    if (scale_after_ != 1.f) {
      for (std::int64_t i = 0; i < total; ++i) y[i] *= scale_after_;
    }
    if (has_c_ && !c_in_primitive_ && beta_ != 0.f) {
      const float* c = a.in_as<float>(2);
      const float beta = beta_;
      ForEachRow(plan_, [&](std::int64_t o, std::int64_t oa, std::int64_t ob, std::int64_t n,
                            std::int64_t ia, std::int64_t ib) {
        (void)oa;
        (void)ia;
        for (std::int64_t i = 0; i < n; ++i) y[o + i] += beta * c[ob + i * ib];
      });
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return mm_.workspace_bytes(); }

 private:
  MatMulKernel mm_;
  float alpha_ = 1, beta_ = 1, scale_after_ = 1;
  std::int64_t m_ = 0, n_ = 0;
  bool has_c_ = false, c_in_primitive_ = false;
  Shape c_shape_;
  BroadcastPlan plan_;
};

Result<std::unique_ptr<Kernel>> MakeMatMul(const KernelInit& init) {
  Shape a = init.inputs[0].shape, b = init.inputs[1].shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  while (a.size() < b.size()) a.insert(a.begin(), 1);
  while (b.size() < a.size()) b.insert(b.begin(), 1);
  Shape y(a.begin(), a.end() - 2);
  // Broadcast: a dim of 1 takes the other's, 0 included (max would make
  // [0] against [1] a row; fuzz: batch 0 reached oneDNN and failed to load).
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = a[i] == 1 ? b[i] : a[i];
  y.push_back(a[a.size() - 2]);
  y.push_back(b.back());
  if (a.back() == 0 && NumElements(y) != 0 && init.node->GetInt(ops::kBiasAttr, 0) == 1) {
    return Error(StatusCode::kUnimplemented, init.node->Describe(), ": a fused bias with an empty inner dim");
  }
  if (NumElements(y) == 0 || a.back() == 0) {
    const std::size_t bytes = init.outputs[0].bytes();
    return MakeFn([bytes](const KernelArgs& args) {
      if (bytes != 0) std::memset(args.out(0), 0, bytes);  // an empty output has no buffer (null)
      return Status::Ok();
    });
  }
  // A fused bias (kiln.bias): constant [N], broadcast over every other dim.
  const HostTensor* bias = nullptr;
  Shape bias_dims;
  if (init.node->GetInt(ops::kBiasAttr, 0) == 1) {
    bias = init.const_input(2);
    if (!bias || bias->dtype() != DType::kFloat32 || bias->numel() != y.back()) {
      return Error(StatusCode::kInvalidArgument, init.node->Describe(), ": the fused bias (input 2) must be a float32 "
                   "constant of ", y.back(), " elements");
    }
    bias_dims.assign(y.size(), 1);
    bias_dims.back() = y.back();
  }
  auto k = std::make_unique<MatMulKernel>();
  // A constant matrix B (leading dims 1) in a plan of varying shapes: A's
  // leading dims and rows are one run-time row count.
  bool b_matrix = init.varying_shapes && init.const_input(1) != nullptr;
  for (std::size_t i = 0; i + 2 < b.size(); ++i) b_matrix = b_matrix && b[i] == 1;
  if (b_matrix) {
    const std::int64_t rows = NumElements(a) / a.back();
    Shape bias2;
    if (bias) bias2 = {1, y.back()};
    KILN_RETURN_IF_ERROR(k->Init(*init.node, PlainDesc({rows, a.back()}), PlainDesc({b[b.size() - 2], b.back()}),
                                 PlainDesc({rows, y.back()}), init.const_input(1), 1.f, bias, bias2,
                                 init.prepack_cache, /*runtime_rows=*/true, Bf16(init)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  KILN_RETURN_IF_ERROR(k->Init(*init.node, PlainDesc(a), PlainDesc(b), PlainDesc(y), init.const_input(1), 1.f, bias,
                               bias_dims, init.prepack_cache, false, Bf16(init)));
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void RegisterGemmKernels(KernelRegistry& r) {
  r.Register("MatMul", MakeMatMul);
  r.Register("Gemm", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    // An empty output (M or N is 0) has nothing to compute; oneDNN's matmul
    // with a bias divides by zero creating such a primitive (found by the
    // onnx fuzz target).
    if (NumElements(init.outputs[0].shape) == 0) {
      return MakeFn([](const KernelArgs&) { return Status::Ok(); });
    }
    auto k = std::make_unique<GemmKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init));
    return std::unique_ptr<Kernel>(std::move(k));
  });
}

}  // namespace kiln::cpu
