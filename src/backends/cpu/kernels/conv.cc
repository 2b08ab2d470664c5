// Conv on oneDNN: constant weights are reordered once, at load, into the
// layout oneDNN's kernel wants; bias and a fused activation ride along.
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

class ConvKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    const ir::Node& node = *init.node;
    const bool nhwc = node.GetInt(ops::kNhwcAttr, 0) != 0;
    Shape x = init.inputs[0].shape;
    const Shape& w = init.inputs[1].shape;
    Shape y = init.outputs[0].shape;
    if (nhwc) {  // physical NHWC -> logical NCHW dims
      x = {x[0], x[3], x[1], x[2]};
      y = {y[0], y[3], y[1], y[2]};
    }
    const std::int64_t group = node.GetInt("group", 1);
    KILN_ASSIGN_OR_RETURN(const DnnlConvWindow win, ConvWindow(node, x, w));
    const memory::dims &strides = win.strides, &dil = win.dilations, &pl = win.pads_begin, &pr = win.pads_end;
    const Shape wg = GroupedWeights(w, group);
    const memory::desc src_md = nhwc ? memory::desc(memory::dims(x.begin(), x.end()), memory::data_type::f32, tag::nhwc) : PlainDesc(x);
    const memory::desc dst_md = nhwc ? memory::desc(memory::dims(y.begin(), y.end()), memory::data_type::f32, tag::nhwc) : PlainDesc(y);
    const memory::desc w_plain = PlainDesc(wg);
    const HostTensor* wconst = init.const_input(1);
    const bool has_bias = init.inputs.size() > 2 && init.inputs[2].present();
    dnnl::post_ops po;
    KILN_RETURN_IF_ERROR(AppendFusedActivation(node, po));
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr = UserScratchpad(attr);
    return DnnlCall("Conv", [&] {
      memory::desc w_md = wconst ? memory::desc(memory::dims(wg.begin(), wg.end()), memory::data_type::f32, tag::any) : w_plain;
      memory::desc b_md = has_bias ? PlainDesc({w[0]}) : memory::desc();
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        src_md, w_md, b_md, dst_md, strides, dil, pl, pr);
      dnnl::convolution_forward::primitive_desc pd(d, attr, DnnlEngine());
      prim_ = dnnl::convolution_forward(pd);
      src_ = memory(pd.src_desc(), DnnlEngine(), nullptr);
      dst_ = memory(pd.dst_desc(), DnnlEngine(), nullptr);
      if (wconst) {
        // Packed once per layout and model: the plans of a model with
        // symbolic dims share it (device::PrepackCache).
        auto pack = [&] {
          auto packed = std::make_shared<memory>(pd.weights_desc(), DnnlEngine());
          memory plain(w_plain, DnnlEngine(), const_cast<void*>(wconst->data()));
          dnnl::reorder(plain, *packed).execute(DnnlStream(), plain, *packed);
          DnnlStream().wait();
          return packed;
        };
        std::string layout = PackedLayoutKey(pd.weights_desc());
        if (!layout.empty()) layout = "conv:" + layout;
        packed_ = init.prepack_cache ? init.prepack_cache->Get<memory>(wconst->data(), layout, pack) : pack();
        weights_ = *packed_;
        runtime_weights_ = false;
      } else {
        weights_ = memory(w_plain, DnnlEngine(), nullptr);
        runtime_weights_ = true;
      }
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
    src_.set_data_handle(const_cast<void*>(a.in(0)));
    dst_.set_data_handle(a.out(0));
    if (runtime_weights_) weights_.set_data_handle(const_cast<void*>(a.in(1)));
    if (bias_) bias_.set_data_handle(const_cast<void*>(a.in(2)));
    scratch_.Bind(a.ctx);
    prim_.execute(DnnlStream(), args_);
    DnnlStream().wait();
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override { return scratch_.bytes; }

 private:
  dnnl::convolution_forward prim_;
  memory src_, weights_, bias_, dst_;
  std::shared_ptr<memory> packed_;  // constant weights, shared through the PrepackCache
  std::unordered_map<int, memory> args_;
  Scratchpad scratch_;
  bool runtime_weights_ = false;
};

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register("Conv", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<ConvKernel>();
    KILN_RETURN_IF_ERROR(k->Init(init));
    return std::unique_ptr<Kernel>(std::move(k));
  });
}

}  // namespace kiln::cpu
