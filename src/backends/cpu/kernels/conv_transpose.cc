// ConvTranspose on oneDNN's deconvolution (float32, 1-D/2-D/3-D, grouped,
// dilated). ONNX weights [C_in, C_out/group, k...] are described to oneDNN by
// strides and reordered into its preferred layout: once at load when
// constant, else on every run. Output padding (extra output at the end) is a
// negative right padding. Channels-last (the layout pass's kiln.nhwc) for
// 2-D.
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

}  // namespace

void RegisterConvTransposeKernels(KernelRegistry& r) {
  r.Register("ConvTranspose", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<ConvTransposeKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init));
    return std::unique_ptr<Kernel>(std::move(k));
  });
}

}  // namespace kiln::cpu
