// ConvTranspose on oneDNN's deconvolution (float32, 1-D/2-D/3-D, grouped,
// dilated). ONNX weights [C_in, C_out/group, k...] are described to oneDNN by
// strides and reordered into its preferred layout: once at load when
// constant, else on every run. Output padding (extra output at the end) is a
// negative right padding. Channels-last (the layout pass's kiln.nhwc) for
// 2-D.
#include <cstring>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "ops/conv_transpose.h"
#include "ops/fused_attrs.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

memory::desc ActDesc(const Shape& s, bool nhwc) {
  return nhwc ? memory::desc(memory::dims(s.begin(), s.end()), memory::data_type::f32, memory::format_tag::nhwc)
              : PlainDesc(s);
}

class ConvTransposeKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    const ir::Node& node = *init.node;
    // Channels-last (kiln.nhwc): x and y are NHWC; oneDNN gets their logical
    // NCHW dims with the nhwc tag.
    const bool nhwc = node.GetInt(ops::kNhwcAttr, 0) != 0;
    Shape x = init.inputs[0].shape, y = init.outputs[0].shape;
    if (nhwc) {
      x = {x[0], x[3], x[1], x[2]};
      y = {y[0], y[3], y[1], y[2]};
    }
    const Shape& w = init.inputs[1].shape;
    const std::int64_t group = node.GetInt("group", 1);
    const std::size_t sp = x.size() - 2;
    KILN_ASSIGN_OR_RETURN(ops::DeconvGeometry geo, ops::ComputeDeconv(node, Shape(x.begin() + 2, x.end()),
                                                                      std::vector<std::int64_t>(w.begin() + 2, w.end())));
    memory::dims strides(geo.strides.begin(), geo.strides.end()), dil(sp);
    memory::dims pl(geo.pads_begin.begin(), geo.pads_begin.end()), pr(geo.pads_end.begin(), geo.pads_end.end());
    for (std::size_t i = 0; i < sp; ++i) dil[i] = geo.dilations[i] - 1;
    // Logical oneDNN weights: [OC, IC, k...] or [G, OC/G, IC/G, k...].
    const std::vector<std::int64_t> st = Strides(w);
    const std::int64_t icg = w[0] / group, ocg = w[1];
    Shape wd, ws;
    if (group > 1) {
      wd = {group, ocg, icg};
      ws = {icg * st[0], st[1], st[0]};
    } else {
      wd = {ocg, w[0]};
      ws = {st[1], st[0]};
    }
    wd.insert(wd.end(), w.begin() + 2, w.end());
    ws.insert(ws.end(), st.begin() + 2, st.end());
    const memory::desc w_user = StridedDesc(wd, ws);
    const HostTensor* wconst = init.const_input(1);
    const bool has_bias = init.inputs.size() > 2 && init.inputs[2].present();
    return DnnlCall("ConvTranspose", [&] {
      memory::desc w_any(memory::dims(wd.begin(), wd.end()), memory::data_type::f32, memory::format_tag::any);
      memory::desc b_md = has_bias ? PlainDesc({y[1]}) : memory::desc();
      dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                          ActDesc(x, nhwc), w_any, b_md, ActDesc(y, nhwc), strides, dil, pl, pr);
      dnnl::deconvolution_forward::primitive_desc pd(d, UserScratchpad(), DnnlEngine());
      prim_ = dnnl::deconvolution_forward(pd);
      src_ = memory(pd.src_desc(), DnnlEngine(), nullptr);
      dst_ = memory(pd.dst_desc(), DnnlEngine(), nullptr);
      weights_ = memory(pd.weights_desc(), DnnlEngine());
      user_w_ = memory(w_user, DnnlEngine(), wconst ? const_cast<void*>(wconst->data()) : nullptr);
      dnnl::reorder::primitive_desc rpd(user_w_, weights_, UserScratchpad());
      reorder_ = dnnl::reorder(rpd);
      reorder_scratch_ = ScratchpadFor(rpd);
      reorder_args_ = {{DNNL_ARG_FROM, user_w_}, {DNNL_ARG_TO, weights_}, {DNNL_ARG_SCRATCHPAD, reorder_scratch_.mem}};
      if (wconst) {
        reorder_scratch_.Bind(nullptr);  // at creation: this thread's scratch
        reorder_.execute(DnnlStream(), reorder_args_);
        DnnlStream().wait();
      }
      runtime_weights_ = !wconst;
      scratch_ = ScratchpadFor(pd);
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, scratch_.mem}};
      if (has_bias) {
        bias_ = memory(pd.bias_desc(), DnnlEngine(), nullptr);
        args_[DNNL_ARG_BIAS] = bias_;
      }
    });
  }

  Status Run(const KernelArgs& a) override {
    if (runtime_weights_) {
      user_w_.set_data_handle(const_cast<void*>(a.in(1)));
      reorder_scratch_.Bind(a.ctx);
      reorder_.execute(DnnlStream(), reorder_args_);
    }
    src_.set_data_handle(const_cast<void*>(a.in(0)));
    dst_.set_data_handle(a.out(0));
    if (bias_) bias_.set_data_handle(const_cast<void*>(a.in(2)));
    scratch_.Bind(a.ctx);
    prim_.execute(DnnlStream(), args_);
    DnnlStream().wait();
    return Status::Ok();
  }
  // The reorder runs before the deconvolution: they share the workspace.
  std::size_t workspace_bytes() const override { return std::max(scratch_.bytes, reorder_scratch_.bytes); }

 private:
  dnnl::deconvolution_forward prim_;
  dnnl::reorder reorder_;
  memory src_, weights_, user_w_, bias_, dst_;
  std::unordered_map<int, memory> args_;
  std::unordered_map<int, memory> reorder_args_;
  Scratchpad scratch_, reorder_scratch_;
  bool runtime_weights_ = false;
};

// A channels-last 2-D ConvTranspose whose kernel equals its stride, without
// padding, dilation or groups (the 2x2 stride-2 upsampling of U-Nets and
// segmentation heads): every input pixel writes its own kh x kw patch, so
// for each kernel row u it is one matmul, X [N*H, W, C_in] times
// W_u [C_in, kw*C_out] (columns (t, o) = W[c, o, u, t]), written straight
// into output rows kh*h + u through a strided destination. oneDNN's
// deconvolution took 128 ms for 32->16 channels at 512x512 -> 1024x1024 on
// an AVX2 EPYC, 1 thread; this runs at the matmul's speed.
class PatchDeconvKernel : public Kernel {
 public:
  static bool Applies(const KernelInit& init, const ops::DeconvGeometry& geo) {
    const ir::Node& node = *init.node;
    const Shape& w = init.inputs[1].shape;
    // An empty input (a batch of 0): oneDNN's matmul takes no M of 0; the
    // deconvolution does.
    if (NumElements(init.inputs[0].shape) == 0) return false;
    if (node.GetInt(ops::kNhwcAttr, 0) == 0 || node.GetInt("group", 1) != 1 || w.size() != 4 ||
        !init.const_input(1) || (init.inputs.size() > 2 && init.inputs[2].present() && !init.const_input(2))) {
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      if (geo.strides[i] != w[2 + i] || geo.dilations[i] != 1 || geo.pads_begin[i] != 0 || geo.pads_end[i] != 0) return false;
    }
    return true;
  }

  Status Init(const KernelInit& init) {
    const Shape& x = init.inputs[0].shape;  // NHWC
    const Shape& w = init.inputs[1].shape;  // [C_in, C_out, kh, kw]
    const Shape& y = init.outputs[0].shape;  // NHWC
    const std::int64_t n = x[0], h = x[1], wd = x[2], cin = x[3], cout = w[1], kh = w[2], kw = w[3];
    const std::int64_t ow = y[2];
    const float* wt = init.const_input(1)->data_as<float>();
    const float* bias = init.inputs.size() > 2 && init.inputs[2].present() ? init.const_input(2)->data_as<float>() : nullptr;
    return DnnlCall("ConvTranspose", [&] {
      const memory::desc a_md({n * h, wd, cin}, memory::data_type::f32, memory::dims{wd * cin, cin, 1});
      const memory::desc b_plain({1, cin, kw * cout}, memory::data_type::f32, memory::format_tag::abc);
      const memory::desc b_any({1, cin, kw * cout}, memory::data_type::f32, memory::format_tag::any);
      const memory::desc d_md({n * h, wd, kw * cout}, memory::data_type::f32, memory::dims{kh * ow * cout, kw * cout, 1});
      const memory::desc bias_md = bias ? PlainDesc({1, 1, kw * cout}) : memory::desc();
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, bias_md, d_md), UserScratchpad(), DnnlEngine());
      prim_ = dnnl::matmul(pd);
      src_ = memory(a_md, DnnlEngine(), nullptr);
      dst_ = memory(d_md, DnnlEngine(), nullptr);
      scratch_ = ScratchpadFor(pd);
      std::vector<float> wu(static_cast<std::size_t>(cin * kw * cout));
      for (std::int64_t u = 0; u < kh; ++u) {
        for (std::int64_t c = 0; c < cin; ++c)
          for (std::int64_t t = 0; t < kw; ++t)
            for (std::int64_t o = 0; o < cout; ++o) wu[(c * kw + t) * cout + o] = wt[((c * cout + o) * kh + u) * kw + t];
        memory plain(b_plain, DnnlEngine(), wu.data());
        weights_.emplace_back(pd.weights_desc(), DnnlEngine());
        dnnl::reorder(plain, weights_.back()).execute(DnnlStream(), plain, weights_.back());
        DnnlStream().wait();
      }
      if (bias) {
        bias_ = memory(bias_md, DnnlEngine());
        for (std::int64_t t = 0; t < kw; ++t) {
          std::memcpy(static_cast<float*>(bias_.get_data_handle()) + t * cout, bias, static_cast<std::size_t>(cout) * 4);
        }
      }
      row_bytes_ = static_cast<std::size_t>(ow * cout) * 4;
    });
  }

  Status Run(const KernelArgs& a) override {
    src_.set_data_handle(const_cast<void*>(a.in(0)));
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_},
                                            {DNNL_ARG_SCRATCHPAD, scratch_.Bind(a.ctx)}};
    if (bias_) args[DNNL_ARG_BIAS] = bias_;
    for (std::size_t u = 0; u < weights_.size(); ++u) {
      dst_.set_data_handle(static_cast<std::uint8_t*>(a.out(0)) + u * row_bytes_);
      args[DNNL_ARG_WEIGHTS] = weights_[u];
      prim_.execute(DnnlStream(), args);
    }
    DnnlStream().wait();
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_.bytes; }

 private:
  dnnl::matmul prim_;
  memory src_, dst_, bias_;
  std::vector<memory> weights_;  // per kernel row
  Scratchpad scratch_;
  std::size_t row_bytes_ = 0;
};

}  // namespace

void RegisterConvTransposeKernels(KernelRegistry& r) {
  r.Register("ConvTranspose", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    if (init.inputs[0].shape.size() == 4 && init.inputs[1].shape.size() == 4) {
      const Shape& x = init.inputs[0].shape;
      const Shape& w = init.inputs[1].shape;
      const bool nhwc = init.node->GetInt(ops::kNhwcAttr, 0) != 0;
      const Shape sp = nhwc ? Shape{x[1], x[2]} : Shape{x[2], x[3]};
      KILN_ASSIGN_OR_RETURN(ops::DeconvGeometry geo, ops::ComputeDeconv(*init.node, sp, {w[2], w[3]}));
      if (PatchDeconvKernel::Applies(init, geo)) {
        auto k = std::make_unique<PatchDeconvKernel>();
        KILN_RETURN_IF_ERROR(k->Init(init));
        return std::unique_ptr<Kernel>(std::move(k));
      }
    }
    auto k = std::make_unique<ConvTransposeKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init));
    return std::unique_ptr<Kernel>(std::move(k));
  });
}

}  // namespace kiln::cpu
