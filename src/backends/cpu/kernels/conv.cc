// Conv on oneDNN: constant weights are reordered once, at load, into the
// layout oneDNN's kernel wants; bias and a fused activation ride along. A
// channels-last convolution that oneDNN runs faster on blocked activations
// runs between two reorders (BlockedIsFaster).
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/util.h"
#include "backends/cpu/kernels/winograd.h"
#include "common/checked.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

// Whether a channels-last convolution runs faster on oneDNN's blocked
// activations (nChw8c) between two reorders. oneDNN's AVX2 kernel (what a
// machine without AVX-512 gets; AVX-512 machines get brgconv, fast on NHWC)
// loses up to half its speed on NHWC tensors larger than the L2 cache, and
// not on smaller ones or with few channels. Measured on an AVX2 EPYC (1 MiB
// L2), 3x3 stride 1, 1 thread, NHWC vs reorder + nChw8c + reorder: 64->64 at
// 56x56 2.51 vs 2.59 ms; 64->64 at 112x112 11.4 vs 10.4; 128->128 at 56x56
// 12.5 vs 10.1; 128->64 at 256x256 206 vs 109; 16->16 at 1024x1024 62 vs 75;
// 32->16 at 1024x1024 153 vs 152. Hence: that kernel, at least 32 input and
// output channels, and an input of at least 2 MiB (and, in Init, blocked
// copies of input and output of at most 128 MiB together: they take the
// kernel's workspace).
bool BlockedIsFaster(const dnnl::convolution_forward::primitive_desc& pd, const Shape& x, const Shape& y) {
  if (std::string(pd.impl_info_str()) != "jit:avx2" || x.size() != 4) return false;
  const std::int64_t in_bytes = NumElements(x) * 4;
  return x[1] >= 32 && y[1] >= 32 && in_bytes >= (std::int64_t{2} << 20);
}

// How a fused residual (kiln.sum, input 3) is added: by oneDNN's sum
// post-op onto a copy of it in the output (kSum; the blocked route copies it
// by its reorder); else by its binary post-op reading it (kBinary); or,
// where neither keeps the convolution's kernel, by a binary primitive after
// the convolution carrying the activation (kSeparate). Sum first: oneDNN's
// AVX2 kernel loses 4-5% with a binary post-op (3x3, 64-512 channels,
// 56x56-7x7, 1 thread, AVX2 EPYC), more than the copy costs.
enum class Residual { kNone, kBinary, kSum, kSeparate };

// Whether a convolution runs on Winograd F(4x4, 3x3) (winograd.h) instead
// of oneDNN: channels-last float32, 3x3, stride 1, no dilation, one group,
// constant weights, where oneDNN would run its AVX2 kernel ("jit:avx2"),
// input and output channels multiples of 8, at least 16 output tiles of 4x4,
// an activation the Winograd epilogue applies. Measured on an AVX2 EPYC
// (bench/winograd_bench; bench/RESULTS.md, "Winograd"): 0.25-0.72 of
// oneDNN's time on every layer shape tried, 8 to 512 channels; the tile and
// size limits keep the transformed weights (4x the filter) where they are
// used often enough. Where oneDNN would run its AVX-512 brgconv, the same
// AVX2 code still wins on layers with 32+ channels in and out and 64+ tiles
// (0.62-0.73 per layer on a Zen 5; 0.82-0.96 whole models), and with 25-63
// tiles mostly inside the map and 64+ channels, not on few tiles or 8-16
// channels, so only those. $KILN_CONV_WINOGRAD=off disables it;
// $KILN_CONV_WINOGRAD_AVX512=off keeps brgconv's layers on oneDNN.
std::optional<WinogradAct> WinogradActivation(const ir::Node& node) {
  const ir::Attribute* a = node.FindAttr(ops::kActAttr);
  if (!a) return WinogradAct::kNone;
  if (a->s == "Relu") return WinogradAct::kRelu;
  if (a->s == "LeakyRelu") return WinogradAct::kLeakyRelu;
  if (a->s == "Clip") return WinogradAct::kClip;
  return std::nullopt;
}
bool UseWinograd(const ir::Node& node, bool nhwc, std::int64_t group, const DnnlConvWindow& win, const Shape& x,
                 const Shape& w, const Shape& y, const std::string& onednn_impl, bool const_weights, DType dtype) {
  const char* env = std::getenv("KILN_CONV_WINOGRAD");
  if ((env && std::string(env) == "off") || !WinogradAvailable()) return false;
  const char* env512 = std::getenv("KILN_CONV_WINOGRAD_AVX512");
  const bool avx512 = onednn_impl.rfind("brgconv:avx512", 0) == 0 && !(env512 && std::string(env512) == "off");
  if (!nhwc || group != 1 || !const_weights || dtype != DType::kFloat32 || (onednn_impl != "jit:avx2" && !avx512)) {
    return false;
  }
  if (x.size() != 4 || w.size() != 4 || w[2] != 3 || w[3] != 3) return false;
  for (std::size_t i = 0; i < 2; ++i) {
    if (win.strides[i] != 1 || win.dilations[i] != 0 || win.pads_begin[i] < 0 || win.pads_end[i] < 0) return false;
  }
  if (x[1] < 8 || y[1] < 8 || x[1] % 8 != 0 || y[1] % 8 != 0) return false;
  std::int64_t tiles = 0, packed = 0;  // output tiles; floats of the packed weights
  if (!CheckedMul(y[0], ((y[2] + 3) / 4) * ((y[3] + 3) / 4), &tiles) ||
      !CheckedMul(36 * ((y[1] + 15) / 16 * 16), x[1], &packed) || packed > kMaxTensorBytes / 4) {
    return false;
  }
  // Transformed weights of more than 16 MiB (beyond 256 x 256 channels)
  // only for 49+ tiles (a 28x28 map): the 4x weights pay for themselves in
  // compute there (0.64-0.65 of brgconv's time at 512 and 2048 -> 512
  // channels, 1 and 2 threads), and a stack of 512-channel layers at 14x14
  // keeps its memory.
  if (packed * 4 > (std::int64_t{16} << 20) && tiles < 49) return false;
  if (avx512) {
    // Against brgconv (Zen 5, bench/winograd_bench, 1 / 2 threads): 64+
    // tiles with 32+ channels win; with 25-63 tiles only where the tiles
    // are mostly real outputs (computed 4x4 blocks at least 80% inside the
    // map) and 64+ channels: 28x28 0.62-0.70 / 0.65-0.75, 20x20 0.76 /
    // 0.72, 18x18 0.90 / 0.91; lost: 14x14 (16 tiles, 77% inside)
    // 1.01-1.12, 32 channels at 28x28 at 2 threads 1.52.
    if (x[1] < 32 || y[1] < 32) return false;
    std::int64_t hw = 0, inside = 0, inside5 = 0, computed4 = 0;  // output pixels, of tiles * 16 computed
    if (!CheckedMul(y[2], y[3], &hw) || !CheckedMul(y[0], hw, &inside) || !CheckedMul(inside, 5, &inside5) ||
        !CheckedMul(tiles, 64, &computed4)) {
      return false;
    }
    const bool dense = inside5 >= computed4;
    if (tiles < 64 && (tiles < 25 || !dense || x[1] < 64 || y[1] < 64)) return false;
  }
  return tiles >= 16 && WinogradActivation(node).has_value();
}

// Which convolutions take bfloat16 operands (ops::kBf16Attr): all but
// depthwise ones ($KILN_BF16_DEPTHWISE=on takes those too).
bool Bf16DepthwiseOk(std::int64_t group, std::int64_t c, std::int64_t k) {
  if (group == 1 || group != c || group != k) return true;
  const char* env = std::getenv("KILN_BF16_DEPTHWISE");
  return env && std::string(env) == "on";
}

class ConvKernel : public Kernel {
 public:
  // allow_bf16: take bfloat16 operands where the node and device ask for
  // it (a failure then is retried without: RegisterConvKernels).
  Status Init(const KernelInit& init, bool allow_bf16) {
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
    const HostTensor* wconst = init.const_input(1);
    // A convolution the model computes in bfloat16, on a CPU that multiplies
    // bfloat16 natively: X (rounded here, each run) and W (once, when packed)
    // in bfloat16, float32 sums and output. Constant weights only.
    // (Multiply-adds per input element: output channels per group times the
    // window, over the stride's area, i.e. numel(Y) (C/g) k... / numel(X).)
    const double macs_per_input = static_cast<double>(NumElements(y)) * static_cast<double>(NumElements(w)) /
                                  std::max<double>(1, static_cast<double>(w[0])) /
                                  std::max<double>(1, static_cast<double>(NumElements(x)));
    bf16_ = allow_bf16 && node.GetInt(ops::kBf16Attr, 0) == 1 && init.caps && init.caps->bf16_dot && wconst &&
            init.inputs[0].dtype == DType::kFloat32 && Bf16DepthwiseOk(group, x[1], w[0]) &&
            Bf16PaysOff(macs_per_input);
    const memory::data_type xdt = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc src_f32 = nhwc ? memory::desc(memory::dims(x.begin(), x.end()), memory::data_type::f32, tag::nhwc) : PlainDesc(x);
    const memory::desc src_md = nhwc ? memory::desc(memory::dims(x.begin(), x.end()), xdt, tag::nhwc) : PlainDesc(x, xdt);
    const memory::desc dst_md = nhwc ? memory::desc(memory::dims(y.begin(), y.end()), memory::data_type::f32, tag::nhwc) : PlainDesc(y);
    const memory::desc w_plain = PlainDesc(wg);
    const bool has_bias = init.inputs.size() > 2 && init.inputs[2].present();
    const bool residual = node.GetInt(ops::kSumAttr, 0) == 1 && init.inputs.size() > 3 && init.inputs[3].present();
    in_place_planned_ = residual && node.FindAttr("kiln.inplace") != nullptr;  // plan::kInPlaceAttr
    bias_present_ = has_bias, residual_present_ = residual;
    // Post-ops: the residual (`how`) and then the node's activation (`act`).
    dnnl::post_ops act_po;
    KILN_RETURN_IF_ERROR(AppendFusedActivation(node, act_po));
    const bool has_act = act_po.len() > 0;
    auto make_attr = [&](Residual how, bool act) {
      dnnl::post_ops po;
      if (how == Residual::kBinary) po.append_binary(dnnl::algorithm::binary_add, dst_md);
      if (how == Residual::kSum) po.append_sum(1.f);
      if (act) (void)AppendFusedActivation(node, po);  // checked above
      dnnl::primitive_attr attr;
      attr.set_post_ops(po);
      return UserScratchpad(attr);
    };
    return DnnlCall("Conv", [&] {
      memory::desc w_md = wconst ? memory::desc(memory::dims(wg.begin(), wg.end()), xdt, tag::any) : w_plain;
      memory::desc b_md = has_bias ? PlainDesc({w[0]}) : memory::desc();
      auto make_pd = [&](const memory::desc& s, const memory::desc& d, Residual how, bool act) {
        dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           s, w_md, b_md, d, strides, dil, pl, pr);
        return dnnl::convolution_forward::primitive_desc(cd, make_attr(how, act), DnnlEngine());
      };
      // Whether a residual post-op keeps the kernel oneDNN picks without
      // one (else it may fall back to a slow one, or refuse).
      auto try_pd = [&](const memory::desc& s, const memory::desc& d, Residual how,
                        const std::string& want) -> std::optional<dnnl::convolution_forward::primitive_desc> {
        try {
          auto pd = make_pd(s, d, how, has_act);
          if (want.empty() || pd.impl_info_str() == want) return pd;
        } catch (const dnnl::error&) {
        }
        return std::nullopt;
      };
      dnnl::convolution_forward::primitive_desc pd = make_pd(src_md, dst_md, Residual::kNone, has_act);
      const std::string plain_impl = pd.impl_info_str();
      if (bf16_ && plain_impl.rfind("ref", 0) == 0) {  // oneDNN's reference kernel: float32 is faster
        throw dnnl::error(dnnl_unimplemented, "no optimized bfloat16 convolution");
      }
      if (!bf16_ && UseWinograd(node, nhwc, group, win, x, w, y, plain_impl, wconst != nullptr, init.inputs[0].dtype)) {
        wino_shape_ = WinogradShape{x[0], x[2], x[3], x[1], y[1], y[2], y[3], pl[0], pl[1]};
        wino_act_ = *WinogradActivation(node);
        wino_alpha_ = node.GetFloat(ops::kActAlphaAttr, 0.f);
        wino_beta_ = node.GetFloat(ops::kActBetaAttr, 0.f);
        const std::int64_t k = y[1], c = x[1];
        // Packed once per model (and shared by its plans) like oneDNN's.
        auto pack = [&] {
          const std::size_t floats = WinogradPackedFloats(k, c);
          auto u = std::shared_ptr<float>(static_cast<float*>(std::aligned_alloc(64, (floats * 4 + 63) / 64 * 64)),
                                          [](float* p) { std::free(p); });
          if (!u) throw std::bad_alloc();
          WinogradPackWeights(static_cast<const float*>(wconst->data()), k, c, u.get());
          wconst->ReleasePages();
          return u;
        };
        const std::string layout = StrCat("winograd-f4x3:", k, "x", c);
        wino_weights_ = init.prepack_cache ? init.prepack_cache->Get<float>(wconst->data(), layout, pack) : pack();
        return;
      }
      if (residual) {
        // $KILN_CONV_RESIDUAL = binary | separate skips the routes before it
        // (tests reach each route with it).
        const char* force = std::getenv("KILN_CONV_RESIDUAL");
        const std::string skip = force ? force : "";
        std::optional<dnnl::convolution_forward::primitive_desc> m, b;
        if (skip != "binary" && skip != "separate") m = try_pd(src_md, dst_md, Residual::kSum, plain_impl);
        if (!m && skip != "separate") b = try_pd(src_md, dst_md, Residual::kBinary, plain_impl);
        if (m) {
          pd = *m, residual_ = Residual::kSum;
        } else if (b) {
          pd = *b, residual_ = Residual::kBinary;
        } else {
          pd = make_pd(src_md, dst_md, Residual::kNone, false);
          residual_ = Residual::kSeparate;
          dnnl::primitive_attr battr;
          battr.set_post_ops(act_po);
          dnnl::binary::desc bd(dnnl::algorithm::binary_add, dst_md, dst_md, dst_md);
          dnnl::binary::primitive_desc bpd(bd, UserScratchpad(battr), DnnlEngine());
          add_ = dnnl::binary(bpd);
          add_scratch_ = ScratchpadFor(bpd);
        }
      }
      if (!bf16_ && nhwc && group == 1 && BlockedIsFaster(pd, x, y)) {
        // The same convolution on oneDNN's blocked activations (nChw8c),
        // between two reorders; a residual is reordered into the blocked
        // output and summed onto.
        const memory::desc src_any(memory::dims(x.begin(), x.end()), memory::data_type::f32, tag::any);
        const memory::desc dst_any(memory::dims(y.begin(), y.end()), memory::data_type::f32, tag::any);
        auto pdb = try_pd(src_any, dst_any, residual ? Residual::kSum : Residual::kNone, "");
        // The blocked copies live in the kernel's workspace: at most 128 MiB
        // of them (the largest, few-channel layers gain least).
        const std::size_t copies = pdb ? pdb->src_desc().get_size() + pdb->dst_desc().get_size() : 0;
        if (pdb && pdb->src_desc() != src_md && pdb->dst_desc() != dst_md && copies <= (std::size_t{128} << 20)) {
          pd = *pdb;
          if (residual) residual_ = Residual::kSum, add_ = dnnl::binary();
          const dnnl::primitive_attr rattr = UserScratchpad();
          dnnl::reorder::primitive_desc to(DnnlEngine(), src_md, DnnlEngine(), pd.src_desc(), rattr);
          dnnl::reorder::primitive_desc from(DnnlEngine(), pd.dst_desc(), DnnlEngine(), dst_md, rattr);
          dnnl::reorder::primitive_desc res(DnnlEngine(), dst_md, DnnlEngine(), pd.dst_desc(), rattr);
          to_blocked_ = dnnl::reorder(to);
          from_blocked_ = dnnl::reorder(from);
          if (residual) res_to_blocked_ = dnnl::reorder(res);
          user_src_ = memory(src_md, DnnlEngine(), nullptr);
          user_dst_ = memory(dst_md, DnnlEngine(), nullptr);
          // Workspace: [scratchpads (conv's, reorders') | blocked src | blocked dst].
          auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
          const std::size_t scr = up(std::max({pd.scratchpad_desc().get_size(), to.scratchpad_desc().get_size(),
                                               from.scratchpad_desc().get_size(), res.scratchpad_desc().get_size()}));
          src_at_ = scr;
          dst_at_ = src_at_ + up(pd.src_desc().get_size());
          blocked_bytes_ = dst_at_ + up(pd.dst_desc().get_size());
          reorder_scratch_[0] = memory(to.scratchpad_desc(), DnnlEngine(), nullptr);
          reorder_scratch_[1] = memory(from.scratchpad_desc(), DnnlEngine(), nullptr);
          reorder_scratch_[2] = memory(res.scratchpad_desc(), DnnlEngine(), nullptr);
        }
      }
      prim_ = dnnl::convolution_forward(pd);
      src_ = memory(pd.src_desc(), DnnlEngine(), nullptr);
      dst_ = memory(pd.dst_desc(), DnnlEngine(), nullptr);
      if (residual) res_ = memory(dst_md, DnnlEngine(), nullptr);
      if (wconst) {
        // Packed once per layout and model: the plans of a model with
        // symbolic dims share it (device::PrepackCache).
        auto pack = [&] {
          auto packed = std::make_shared<memory>(pd.weights_desc(), DnnlEngine());
          memory plain(w_plain, DnnlEngine(), const_cast<void*>(wconst->data()));
          dnnl::reorder(plain, *packed).execute(DnnlStream(), plain, *packed);
          DnnlStream().wait();
          wconst->ReleasePages();  // the packed copy replaces the mapped pages
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
      res_copy_at_ = (std::max(scratch_.bytes, add_scratch_.bytes) + 63) / 64 * 64;
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, scratch_.mem}};
      if (residual_ == Residual::kBinary) args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = res_;
      if (has_bias) {
        bias_ = memory(pd.bias_desc(), DnnlEngine(), nullptr);
        args_[DNNL_ARG_BIAS] = bias_;
      }
      if (bf16_) {
        // X rounded to bfloat16 into the workspace, after everything else
        // there (the run's scratch starts at its beginning).
        to_bf16_.Init(src_f32, pd.src_desc());
        to_bf16_.Place(BaseWorkspaceBytes());
      }
    });
  }

  Status Run(const KernelArgs& a) override {
    if (wino_weights_) {
      WinogradEpilogue e;
      e.bias = bias_present_ ? a.in_as<float>(2) : nullptr;
      e.residual = residual_present_ ? a.in_as<float>(3) : nullptr;  // may be the output (in place)
      e.act = wino_act_, e.alpha = wino_alpha_, e.beta = wino_beta_;
      WinogradConvNhwc(wino_shape_, a.in_as<float>(0), wino_weights_.get(), a.out_as<float>(0), e);
      return Status::Ok();
    }
    if (runtime_weights_) weights_.set_data_handle(const_cast<void*>(a.in(1)));
    if (bias_) bias_.set_data_handle(const_cast<void*>(a.in(2)));
    if (res_) res_.set_data_handle(const_cast<void*>(a.in(3)));
    if (blocked_bytes_) {  // (never with bf16_)
      const device::ExecContext* ctx = a.ctx;
      auto* ws = static_cast<std::uint8_t*>(ctx && ctx->workspace && ctx->workspace_bytes >= blocked_bytes_
                                                ? ctx->workspace
                                                : ThreadScratch(blocked_bytes_));
      src_.set_data_handle(ws + src_at_);
      dst_.set_data_handle(ws + dst_at_);
      scratch_.mem.set_data_handle(ws);
      for (memory& m : reorder_scratch_) m.set_data_handle(ws);
      user_src_.set_data_handle(const_cast<void*>(a.in(0)));
      user_dst_.set_data_handle(a.out(0));
      to_blocked_.execute(DnnlStream(), {{DNNL_ARG_FROM, user_src_}, {DNNL_ARG_TO, src_},
                                         {DNNL_ARG_SCRATCHPAD, reorder_scratch_[0]}});
      if (res_) {
        res_to_blocked_.execute(DnnlStream(), {{DNNL_ARG_FROM, res_}, {DNNL_ARG_TO, dst_},
                                               {DNNL_ARG_SCRATCHPAD, reorder_scratch_[2]}});
      }
      prim_.execute(DnnlStream(), args_);
      from_blocked_.execute(DnnlStream(), {{DNNL_ARG_FROM, dst_}, {DNNL_ARG_TO, user_dst_},
                                           {DNNL_ARG_SCRATCHPAD, reorder_scratch_[1]}});
      DnnlStream().wait();
      return Status::Ok();
    }
    // bf16_: one workspace for the run's scratch and the rounded X (a
    // second ThreadScratch call could move the first's buffer).
    const device::ExecContext* run_ctx = a.ctx;
    std::uint8_t* fixed_ws = nullptr;
    if (bf16_) {
      const std::size_t need = workspace_bytes();
      fixed_ws = static_cast<std::uint8_t*>(run_ctx && run_ctx->workspace && run_ctx->workspace_bytes >= need
                                                ? run_ctx->workspace
                                                : ThreadScratch(need));
      to_bf16_.Run(a.in(0), fixed_ws, src_);
    } else {
      src_.set_data_handle(const_cast<void*>(a.in(0)));
    }
    auto scratch_for = [&](std::size_t need) -> void* {
      if (fixed_ws) return fixed_ws;
      return run_ctx && run_ctx->workspace && run_ctx->workspace_bytes >= need ? run_ctx->workspace : ThreadScratch(need);
    };
    dst_.set_data_handle(a.out(0));
    // The residual is either the output's own bytes (the memory planner put
    // the output over it: kiln.inplace) or a distinct tensor.
    const bool in_place = res_ && a.in(3) == a.out(0);
    if (residual_ == Residual::kSum && !in_place) std::memcpy(a.out(0), a.in(3), res_.get_desc().get_size());
    if (in_place && residual_ != Residual::kSum) {
      // The convolution overwrites the residual before it is read: read a
      // copy, after the scratchpads in the workspace.
      const std::size_t need = res_copy_at_ + res_.get_desc().get_size();
      auto* ws = static_cast<std::uint8_t*>(scratch_for(need));
      std::memcpy(ws + res_copy_at_, a.in(3), res_.get_desc().get_size());
      res_.set_data_handle(ws + res_copy_at_);
      if (scratch_.bytes) scratch_.mem.set_data_handle(ws);
      if (add_scratch_.bytes) add_scratch_.mem.set_data_handle(ws);
    } else if (add_scratch_.bytes) {
      // One buffer for both scratchpads (two ThreadScratch calls could
      // free the first's when the second grows it).
      void* ws = scratch_for(std::max(scratch_.bytes, add_scratch_.bytes));
      if (scratch_.bytes) scratch_.mem.set_data_handle(ws);
      add_scratch_.mem.set_data_handle(ws);
    } else if (fixed_ws) {
      if (scratch_.bytes) scratch_.mem.set_data_handle(fixed_ws);
    } else {
      scratch_.Bind(a.ctx);
    }
    prim_.execute(DnnlStream(), args_);
    if (residual_ == Residual::kSeparate) {
      add_.execute(DnnlStream(), {{DNNL_ARG_SRC_0, dst_}, {DNNL_ARG_SRC_1, res_}, {DNNL_ARG_DST, dst_},
                                  {DNNL_ARG_SCRATCHPAD, add_scratch_.mem}});
    }
    DnnlStream().wait();
    return Status::Ok();
  }
  std::size_t workspace_bytes() const override {
    return bf16_ ? to_bf16_.end() : BaseWorkspaceBytes();
  }
  bool bf16() const { return bf16_; }

 private:
  std::size_t BaseWorkspaceBytes() const {
    if (wino_weights_) return 0;  // the threads' scratch memory
    if (blocked_bytes_) return blocked_bytes_;
    // kBinary/kSeparate: room for a copy of the residual where the plan
    // put the output over it (an unplanned overlap takes ThreadScratch).
    if (in_place_planned_ && (residual_ == Residual::kBinary || residual_ == Residual::kSeparate)) {
      return res_copy_at_ + res_.get_desc().get_size();
    }
    return std::max({scratch_.bytes, add_scratch_.bytes, bf16_ ? to_bf16_.scratch_bytes() : std::size_t{0}});
  }

  dnnl::convolution_forward prim_;
  memory src_, weights_, bias_, dst_, res_;
  std::shared_ptr<memory> packed_;  // constant weights, shared through the PrepackCache
  std::unordered_map<int, memory> args_;
  Scratchpad scratch_;
  bool runtime_weights_ = false;
  Residual residual_ = Residual::kNone;
  dnnl::binary add_;  // kSeparate: dst = act(dst + residual)
  Scratchpad add_scratch_;
  std::size_t res_copy_at_ = 0;  // workspace offset of an in-place residual's copy (kBinary, kSeparate)
  bool in_place_planned_ = false;  // the node carries kiln.inplace
  // Channels-last run on blocked activations (BlockedIsFaster): the reorders
  // and where the blocked tensors sit in the workspace.
  dnnl::reorder to_blocked_, from_blocked_, res_to_blocked_;
  memory user_src_, user_dst_, reorder_scratch_[3];
  std::size_t src_at_ = 0, dst_at_ = 0, blocked_bytes_ = 0;
  // Winograd F(4x4, 3x3) (UseWinograd): the transformed weights, shared
  // through the PrepackCache; null when oneDNN runs the convolution.
  std::shared_ptr<float> wino_weights_;
  WinogradShape wino_shape_;
  WinogradAct wino_act_ = WinogradAct::kNone;
  float wino_alpha_ = 0.f, wino_beta_ = 0.f;
  bool bias_present_ = false, residual_present_ = false;
  // bfloat16 operands (ops::kBf16Attr on a CPU with bf16_dot): the reorder
  // that rounds X, and where the rounded copy sits in the workspace.
  bool bf16_ = false;
  Bf16Rounding to_bf16_;
};

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register("Conv", [](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<ConvKernel>();
    Status st = k->Init(init, /*allow_bf16=*/true);
    if (!st.ok() && k->bf16()) {  // no (fast) bfloat16 primitive for it: float32, as elsewhere
      k = std::make_unique<ConvKernel>();
      st = k->Init(init, /*allow_bf16=*/false);
    }
    KILN_RETURN_IF_ERROR(st);
    return std::unique_ptr<Kernel>(std::move(k));
  });
}

}  // namespace kiln::cpu
