// Fusions: a zero Pad into the Conv / AveragePool after it,
// Conv/ConvTranspose+BatchNormalization folding, and Conv/Gemm/MatMul + bias +
// activation fusion into one kernel (oneDNN post-ops), SiLU (x * Sigmoid(x))
// included as the Swish activation and x * HardSigmoid(x) (alpha 1/6, beta
// 1/2) as HardSwish.
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "ops/fused_attrs.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

bool OnlyUse(const ir::Graph& g, const ir::Value* v, const ir::Node* user) {
  return !g.IsGraphOutput(v) && v->uses().size() == 1 && v->uses()[0].node == user;
}

const ir::Node* SoleConsumer(const ir::Graph& g, const ir::Value* v) {
  if (g.IsGraphOutput(v) || v->uses().size() != 1) return nullptr;
  return v->uses()[0].node;
}

bool IsF32Const(const ir::Value* v) {
  return v && v->is_constant() && v->dtype() == DType::kFloat32;
}

// Replaces `second` (whose input 0 is first's only output) by making `first`
// produce second's output. `removed` collects deleted nodes so loops over a
// snapshot of the node list skip them.
void Absorb(ir::Graph& g, ir::Node* first, ir::Node* second, std::unordered_set<const ir::Node*>& removed) {
  ir::Value* out = second->output(0);
  removed.insert(second);
  g.RemoveNode(second);
  g.RebindOutput(first, 0, out);
}

// The Mul of x * G(x), G a `gate` op (Sigmoid: SiLU; HardSigmoid:
// HardSwish as TensorFlow converters write it), when `x` is read by exactly
// that G and that Mul (in either input order), G's output only by the Mul,
// neither a graph output; else null.
ir::Node* GatedMul(const ir::Graph& g, ir::Value* x, const char* gate) {
  if (g.IsGraphOutput(x) || x->uses().size() != 2) return nullptr;
  ir::Node* sig = nullptr;
  ir::Node* mul = nullptr;
  for (const ir::Use& u : x->uses()) {
    ir::Node* n = u.node;
    if (!n->domain().empty()) return nullptr;
    if (n->op_type() == gate) sig = n;
    else if (n->op_type() == "Mul") mul = n;
  }
  if (!sig || !mul || mul->num_inputs() != 2 || sig->num_outputs() != 1) return nullptr;
  ir::Value* s = sig->output(0);
  const bool pair = (mul->input(0) == x && mul->input(1) == s) || (mul->input(0) == s && mul->input(1) == x);
  if (!pair || !OnlyUse(g, s, mul) || mul->output(0)->shape() != x->shape() ||
      mul->output(0)->dtype() != DType::kFloat32) {
    return nullptr;
  }
  return mul;
}

// An activation after a rescaled integer op (Relu, LeakyRelu, Clip with
// constant bounds), read only there, which its epilogue computes exactly
// as the activation's own kernel would: absorbed (kiln.activation).
void AbsorbRescaleActivation(ir::Graph& g, ir::Node* op, std::unordered_set<const ir::Node*>& removed) {
  const ir::Node* act_c = SoleConsumer(g, op->output(0));
  if (!act_c || !act_c->domain().empty()) return;
  auto* act = const_cast<ir::Node*>(act_c);
  const std::string& t = act->op_type();
  float alpha = 0, beta = 0;
  bool ok = t == "Relu";
  if (t == "LeakyRelu") {
    alpha = act->GetFloat("alpha", 0.01f);
    ok = true;
  } else if (t == "Clip" && act->since_version() >= 11) {
    ir::Value* lo = act->input(1);
    ir::Value* hi = act->input(2);
    ok = (!lo || IsF32Const(lo)) && (!hi || IsF32Const(hi));
    if (ok) {
      alpha = lo ? lo->constant()->data_as<float>()[0] : -INFINITY;
      beta = hi ? hi->constant()->data_as<float>()[0] : INFINITY;
    }
  }
  if (ok && act->output(0)->shape() == op->output(0)->shape()) {
    op->SetAttr(kActAttr, ir::Attribute::String(t));
    op->SetAttr(kActAlphaAttr, ir::Attribute::Float(alpha));
    op->SetAttr(kActBetaAttr, ir::Attribute::Float(beta));
    Absorb(g, op, act, removed);
  }
}

}  // namespace

Status FoldConvBatchNorm(ir::Graph& g, const PassOptions&) {
  std::vector<ir::Node*> bns;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "BatchNormalization" && n->domain().empty()) bns.push_back(n.get());
  }
  std::unordered_set<const ir::Node*> removed;
  for (ir::Node* bn : bns) {
    ir::Value* x = bn->input(0);
    ir::Node* conv = x->producer();
    if (!conv || (conv->op_type() != "Conv" && conv->op_type() != "ConvTranspose") || !conv->domain().empty() ||
        !OnlyUse(g, x, bn)) {
      continue;
    }
    const bool deconv = conv->op_type() == "ConvTranspose";
    if (bn->num_outputs() != 1 || bn->GetInt("training_mode", 0) != 0) continue;
    if (bn->GetInt("spatial", 1) != 1) continue;  // BatchNormalization-7 spatial=0: per-element statistics
    if (!IsF32Const(conv->input(1)) || (conv->input(2) && !IsF32Const(conv->input(2)))) continue;
    bool consts = true;
    for (int i = 1; i < 5; ++i) consts &= IsF32Const(bn->input(i));
    if (!consts || x->dtype() != DType::kFloat32) continue;
    const HostTensor& w = *conv->input(1)->constant();
    // Conv weights: [OC, IC/group, k...]; ConvTranspose: [IC, OC/group, k...].
    const std::int64_t group = deconv ? conv->GetInt("group", 1) : 1;
    if (group < 1 || w.shape().size() < 2 || w.numel() == 0 || w.shape()[0] % group != 0) continue;
    const std::int64_t oc = deconv ? w.shape()[1] * group : w.shape()[0];
    if (NumElements(bn->input(1)->shape()) != oc) continue;
    const std::int64_t per = w.numel() / (deconv ? w.shape()[0] * w.shape()[1] : oc);
    const float eps = bn->GetFloat("epsilon", 1e-5f);
    const float* scale = bn->input(1)->constant()->data_as<float>();
    const float* shift = bn->input(2)->constant()->data_as<float>();
    const float* mean = bn->input(3)->constant()->data_as<float>();
    const float* var = bn->input(4)->constant()->data_as<float>();
    const float* b0 = conv->input(2) ? conv->input(2)->constant()->data_as<float>() : nullptr;
    auto nw = std::make_shared<HostTensor>(DType::kFloat32, w.shape());
    auto nb = std::make_shared<HostTensor>(DType::kFloat32, Shape{oc});
    std::vector<double> f(static_cast<std::size_t>(oc));
    for (std::int64_t o = 0; o < oc; ++o) {
      f[o] = static_cast<double>(scale[o]) / std::sqrt(static_cast<double>(var[o]) + eps);
      const double b = b0 ? b0[o] : 0.0;
      nb->mutable_data_as<float>()[o] = static_cast<float>((b - mean[o]) * f[o] + shift[o]);
    }
    if (!deconv) {
      for (std::int64_t o = 0; o < oc; ++o) {
        for (std::int64_t k = 0; k < per; ++k) {
          nw->mutable_data_as<float>()[o * per + k] = static_cast<float>(w.data_as<float>()[o * per + k] * f[o]);
        }
      }
    } else {  // W[i, j, k...] feeds output channel (i / (IC/group)) * (OC/group) + j
      const std::int64_t ic = w.shape()[0], ocg = w.shape()[1], icg = ic / group;
      for (std::int64_t i = 0; i < ic; ++i) {
        for (std::int64_t j = 0; j < ocg; ++j) {
          const double fo = f[(i / icg) * ocg + j];
          for (std::int64_t k = 0; k < per; ++k) {
            const std::int64_t at = (i * ocg + j) * per + k;
            nw->mutable_data_as<float>()[at] = static_cast<float>(w.data_as<float>()[at] * fo);
          }
        }
      }
    }
    conv->SetInput(1, g.AddConstant(conv->input(1)->name() + "_bnfold", nw));
    conv->SetInput(2, g.AddConstant(conv->name() + "_bias_bnfold", nb));
    Absorb(g, conv, bn, removed);
  }
  return Status::Ok();
}

Status FuseBiasActivation(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_fused_epilogues) return Status::Ok();  // the target's kernels take no epilogues
  // 1. MatMul(A[M,K], const B[K,N]) + Add(const bias[N] or [1,N]) -> Gemm;
  std::unordered_set<const ir::Node*> removed;
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  //    MatMul(A[..., M, K] of rank 3 or more, const B[K,N]) + Add(const bias
  //    [N], [1, N], [1, 1, N], ...) -> MatMul with the bias as input 2
  //    (kiln.bias = 1; format version 12): transformers' projections.
  for (ir::Node* mm : nodes) {
    if (removed.count(mm)) continue;
    if (mm->op_type() != "MatMul" || !mm->domain().empty() || mm->num_inputs() != 2) continue;
    ir::Value* a = mm->input(0);
    ir::Value* b = mm->input(1);
    ir::Value* y = mm->output(0);
    if (a->shape().size() < 2 || !IsF32Const(b) || b->shape().size() != 2 || a->dtype() != DType::kFloat32) continue;
    const ir::Node* add_c = SoleConsumer(g, y);
    if (!add_c || add_c->op_type() != "Add" || add_c->HasAttr("axis")) continue;  // old-form broadcast: skip
    auto* add = const_cast<ir::Node*>(add_c);
    ir::Value* bias = add->input(0) == y ? add->input(1) : add->input(0);
    const std::int64_t k = b->shape()[0], n = b->shape()[1];
    if (!IsF32Const(bias) || bias == y || NumElements(bias->shape()) != n || bias->shape().size() > y->shape().size()) {
      continue;
    }
    bool per_n = true;  // every dim but the last is 1
    for (std::size_t i = 0; i + 1 < bias->shape().size(); ++i) per_n = per_n && bias->shape()[i] == 1;
    if (!per_n || add->output(0)->shape() != y->shape()) continue;
    if (a->shape().size() == 2) {
      if (bias->shape().size() > 2) continue;
      mm->set_op_type("Gemm");
      mm->set_since_version(13);
      mm->SetInput(2, bias);
    } else {
      if (k <= 0 || n <= 0) continue;
      auto flat = std::make_shared<HostTensor>(DType::kFloat32, Shape{n}, bias->constant()->data(), bias->constant());
      mm->SetInput(2, g.AddConstant(bias->name() + "_flat", flat));
      mm->SetAttr(ops::kBiasAttr, ir::Attribute::Int(1));
    }
    Absorb(g, mm, add, removed);
  }
  // 2. Conv + Add(const per-channel bias) when the Conv has none.
  nodes.clear();
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* conv : nodes) {
    if (removed.count(conv)) continue;
    if (conv->op_type() != "Conv" || !conv->domain().empty() || conv->input(2)) continue;
    const ir::Node* add_c = SoleConsumer(g, conv->output(0));
    if (!add_c || add_c->op_type() != "Add" || add_c->HasAttr("axis") || conv->output(0)->shape().size() < 3) continue;
    auto* add = const_cast<ir::Node*>(add_c);
    ir::Value* bias = add->input(0) == conv->output(0) ? add->input(1) : add->input(0);
    const auto& ys = conv->output(0)->shape();
    // The channel axis: 1, or the last for a channels-last Conv (this pass
    // runs again after the layout pass).
    const std::size_t ca = conv->GetInt(ops::kNhwcAttr, 0) != 0 ? ys.size() - 1 : 1;
    const std::int64_t c = ys[ca];
    // C values along the channel axis only: shape [..., C, 1, 1]
    // (channels-last: [..., C]).
    if (!IsF32Const(bias) || NumElements(bias->shape()) != c || !ops::PerAxisOrOne(bias->shape(), ys, ca)) continue;
    auto flat = std::make_shared<HostTensor>(DType::kFloat32, Shape{c},
                                             bias->constant()->data(), bias->constant());
    conv->SetInput(2, g.AddConstant(bias->name() + "_flat", flat));
    Absorb(g, conv, add, removed);
  }
  // 3. Conv/Gemm + activation.
  nodes.clear();
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* op : nodes) {
    if (removed.count(op)) continue;
    // MatMul: by a constant B [K, N] (what oneDNN's matmul runs with an
    // epilogue).
    const bool matmul = op->op_type() == "MatMul" && op->domain().empty() && IsF32Const(op->input(1)) &&
                        op->input(1)->shape().size() == 2 && op->input(0)->shape().size() >= 2;
    // An inference BatchNormalization no convolution absorbed (DenseNet's
    // BN -> Relu before each 1x1 convolution): Relu, LeakyRelu and Clip
    // applied by its kernel as it writes (format version 14).
    const bool bn = op->op_type() == "BatchNormalization" && op->num_outputs() == 1 &&
                    op->GetInt("training_mode", 0) == 0 && op->GetInt("spatial", 1) == 1;
    if ((op->op_type() != "Conv" && op->op_type() != "Gemm" && !matmul && !bn) || !op->domain().empty()) continue;
    if (op->HasAttr(kActAttr) || op->output(0)->dtype() != DType::kFloat32) continue;
    if (bn) {
      const ir::Node* act_c = SoleConsumer(g, op->output(0));
      if (!act_c || !act_c->domain().empty() ||
          (act_c->op_type() != "Relu" && act_c->op_type() != "LeakyRelu" && act_c->op_type() != "Clip")) {
        continue;
      }
    }
    // SiLU / Swish, x * Sigmoid(x) (EfficientNet, YOLO): the output feeds
    // exactly a Sigmoid and the Mul of the two.
    if (ir::Node* mul = GatedMul(g, op->output(0), "Sigmoid")) {
      ir::Node* sig = mul->input(0) == op->output(0) ? mul->input(1)->producer() : mul->input(0)->producer();
      removed.insert(sig);
      g.RemoveNode(sig);
      op->SetAttr(kActAttr, ir::Attribute::String("Swish"));
      op->SetAttr(kActAlphaAttr, ir::Attribute::Float(1.f));
      op->SetAttr(kActBetaAttr, ir::Attribute::Float(0.f));
      Absorb(g, op, mul, removed);
      continue;
    }
    // HardSwish written out, x * HardSigmoid(x) with HardSigmoid's alpha 1/6
    // and beta 1/2 (TensorFlow converters; MobileNetV3): the HardSwish
    // post-op, x * min(max(x + 3, 0), 6) / 6.
    if (ir::Node* mul = GatedMul(g, op->output(0), "HardSigmoid")) {
      ir::Node* hs = mul->input(0) == op->output(0) ? mul->input(1)->producer() : mul->input(0)->producer();
      if (std::fabs(hs->GetFloat("alpha", 0.2f) - 1.f / 6) <= 1e-6f && hs->GetFloat("beta", 0.5f) == 0.5f) {
        removed.insert(hs);
        g.RemoveNode(hs);
        op->SetAttr(kActAttr, ir::Attribute::String("HardSwish"));
        op->SetAttr(kActAlphaAttr, ir::Attribute::Float(0.f));
        op->SetAttr(kActBetaAttr, ir::Attribute::Float(0.f));
        Absorb(g, op, mul, removed);
        continue;
      }
    }
    const ir::Node* act_c = SoleConsumer(g, op->output(0));
    if (!act_c) continue;
    auto* act = const_cast<ir::Node*>(act_c);
    const std::string& t = act->op_type();
    // fuse-gelu's erf GELU (kiln.Gelu without approximate="tanh"): oneDNN's
    // gelu_erf, the kernel kiln.Gelu itself runs.
    const bool gelu = act->domain() == "kiln" && t == "Gelu" && act->GetString("approximate", "none") == "none";
    if (!act->domain().empty() && !gelu) continue;
    float alpha = 0, beta = 0;
    if (gelu || t == "Relu" || t == "Sigmoid" || t == "Tanh" || t == "HardSwish") {
    } else if (t == "LeakyRelu") {
      alpha = act->GetFloat("alpha", 0.01f);
    } else if (t == "HardSigmoid") {
      alpha = act->GetFloat("alpha", 0.2f);
      beta = act->GetFloat("beta", 0.5f);
    } else if (t == "Clip") {
      ir::Value* lo = act->input(1);
      ir::Value* hi = act->input(2);
      if ((lo && !IsF32Const(lo)) || (hi && !IsF32Const(hi))) continue;
      alpha = lo ? lo->constant()->data_as<float>()[0] : -INFINITY;
      beta = hi ? hi->constant()->data_as<float>()[0] : INFINITY;
    } else {
      continue;
    }
    op->SetAttr(kActAttr, ir::Attribute::String(t));
    op->SetAttr(kActAlphaAttr, ir::Attribute::Float(alpha));
    op->SetAttr(kActBetaAttr, ir::Attribute::Float(beta));
    Absorb(g, op, act, removed);
  }
  return Status::Ok();
}

// The residual R of an Add that alone reads y (float32), with R, y and the
// sum of exactly one type and fully static shape (no broadcasting: a
// symbolic or data-dependent dim of R and one of y may hold the same probe
// extent yet differ at run time); the Add in *add. Null: none.
static ir::Value* ResidualAdd(ir::Graph& g, ir::Value* y, ir::Node** add) {
  const ir::Node* add_c = SoleConsumer(g, y);
  if (!add_c || add_c->op_type() != "Add" || !add_c->domain().empty() || add_c->HasAttr("axis") ||
      add_c->HasAttr("broadcast") || add_c->num_inputs() != 2) {
    return nullptr;
  }
  *add = const_cast<ir::Node*>(add_c);
  ir::Value* r = (*add)->input(0) == y ? (*add)->input(1) : (*add)->input(0);
  ir::Value* z = (*add)->output(0);
  if (!r || r == y || y->dtype() != DType::kFloat32 || r->dtype() != y->dtype() || z->dtype() != y->dtype() ||
      r->shape() != y->shape() || z->shape() != y->shape() || y->varying_mask() != 0 || r->varying_mask() != 0 ||
      z->varying_mask() != 0) {
    return nullptr;
  }
  return r;
}

Status FuseConvResidual(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_fused_epilogues) return Status::Ok();
  // Conv (bias or none, no activation yet) whose output is read only by an
  // Add of a residual R of exactly the output's type and shape -> one Conv
  // with R as input 3 and kiln.sum = 1 (oneDNN adds it in the convolution's
  // epilogue; an activation after the Add fuses at the end of this pass,
  // applied after the sum). Shapes must be fully static: a symbolic or data-dependent dim
  // of R and one of the output may hold the same probe extent yet differ at
  // run time, where the Add would broadcast.
  std::unordered_set<const ir::Node*> removed;
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  bool fused = false;
  for (ir::Node* conv : nodes) {
    if (removed.count(conv)) continue;
    if (conv->op_type() != "Conv" || !conv->domain().empty() || conv->num_outputs() != 1 ||
        conv->num_inputs() > 3 || conv->HasAttr(kActAttr) || conv->HasAttr(ops::kSumAttr)) {
      continue;
    }
    ir::Node* add = nullptr;
    ir::Value* r = ResidualAdd(g, conv->output(0), &add);
    if (!r) continue;
    conv->SetInput(3, r);  // an absent bias stays an empty slot 2
    conv->SetAttr(ops::kSumAttr, ir::Attribute::Int(1));
    Absorb(g, conv, add, removed);
    fused = true;
  }
  // A rescaled ConvInteger (fuse-integer-rescale) with no activation yet,
  // read only by such an Add: R becomes its input 7 (kiln.sum = 1, format
  // version 16), an activation after the Add its kiln.activation, applied
  // after the sum: act(float(sum) * S + B + R), each step rounded as the
  // graph's ops (bit for bit); the range a DynamicQuantizeLinear (or an
  // op quantizing its input) reads is then the fused op's to report.
  for (ir::Node* op : nodes) {
    if (removed.count(op) || op->op_type() != "ConvInteger" || !op->domain().empty() || op->num_outputs() != 1 ||
        op->GetInt(ops::kRescaleAttr, 0) != 1 || op->HasAttr(kActAttr) || op->HasAttr(ops::kSumAttr) ||
        op->num_inputs() > 7) {
      continue;
    }
    ir::Node* add = nullptr;
    ir::Value* r = ResidualAdd(g, op->output(0), &add);
    if (!r) continue;
    op->SetInput(7, r);
    op->SetAttr(ops::kSumAttr, ir::Attribute::Int(1));
    Absorb(g, op, add, removed);
    AbsorbRescaleActivation(g, op, removed);
    fused = true;
  }
  if (!fused) return Status::Ok();
  // R may have been computed after the Conv (it is never computed from the
  // Conv's output, which only the Add read): restore the order.
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  // An activation after the Add is now the fused Conv's (applied after the
  // sum), unless bias/activation fusion is switched off.
  return opts.disabled.count("fuse-bias-activation") ? Status::Ok() : FuseBiasActivation(g, opts);
}

}  // namespace kiln::passes

namespace kiln::passes {
namespace {

// Whether `s` (float32, static) is one value, or one per `axis` of `y`
// (extent k) with 1 in every other dim, aligned to the right: what
// broadcasting against y reads per output channel / column, and what the
// loader's inference accepts for kiln.rescale's inputs 4 and 5.
bool PerAxisOrOne(const ir::Value* s, const ir::Value* y, std::size_t axis) {
  return s && s->dtype() == DType::kFloat32 && s->varying_mask() == 0 && ops::PerAxisOrOne(s->shape(), y->shape(), axis);
}

// Whether `a` and `b` are the same value, or constants of one element with
// the same type and bytes (a Q/DQ pair's scale or zero point).
bool SameScalar(const ir::Value* a, const ir::Value* b) {
  if (!a || !b) return false;
  if (a == b) return true;
  if (!a->is_constant() || !b->is_constant() || a->dtype() != b->dtype()) return false;
  const HostTensor& x = *a->constant();
  const HostTensor& y = *b->constant();
  return NumElements(x.shape()) == 1 && NumElements(y.shape()) == 1 &&
         std::memcmp(x.data(), y.data(), DTypeSize(x.dtype())) == 0;
}

// A constant zero of one element (a zero point).
bool IsZeroScalar(const ir::Value* v) {
  if (!v || !v->is_constant() || NumElements(v->shape()) != 1) return false;
  const auto* p = static_cast<const std::uint8_t*>(v->constant()->data());
  for (std::size_t i = 0; i < DTypeSize(v->dtype()); ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

// Pad (constant mode, zero value, constant pads on the spatial dims only,
// none negative) read only by a Conv or an AveragePool, as input 0: its pads
// are added to the consumer's (PyTorch writes this for
// count_include_pad=True average pooling in Inception; converters for
// TensorFlow's explicit padding before convolutions). The AveragePool then
// counts the padding (count_include_pad = 1), as it counted the Pad's zeros;
// only without ceil_mode (whose extra windows could overhang the padded
// extent) and where its own pads are 0 or already counted. Conv and
// AveragePool with auto_pad stay as they are.
Status FusePad(ir::Graph& g, const PassOptions&) {
  std::vector<ir::Node*> pads;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "Pad" && n->domain().empty()) pads.push_back(n.get());
  }
  for (ir::Node* pad : pads) {
    ir::Value* x = pad->input(0);
    ir::Value* y = pad->output(0);
    if (!x || pad->num_outputs() != 1 || pad->GetString("mode", "constant") != "constant") continue;
    if (!pad->input(1) || !pad->input(1)->is_constant()) continue;
    if (pad->input(2) && !IsZeroScalar(pad->input(2))) continue;
    ir::Node* c = const_cast<ir::Node*>(SoleConsumer(g, y));
    if (!c || !c->domain().empty() || c->input(0) != y || (c->op_type() != "Conv" && c->op_type() != "AveragePool")) continue;
    for (int i = 1; i < c->num_inputs(); ++i) {
      if (c->input(i) == y) c = nullptr;
    }
    if (!c) continue;
    const std::size_t r = x->shape().size();
    const std::vector<std::int64_t> p = pad->input(1)->constant()->ToInt64Vector();
    if (r < 3 || p.size() != 2 * r || p[0] || p[1] || p[r] || p[r + 1]) continue;
    const std::size_t sp = r - 2;
    bool ok = true;
    for (std::int64_t v : p) ok &= v >= 0;
    const std::string auto_pad = c->GetString("auto_pad", "NOTSET");
    if (!ok || (auto_pad != "NOTSET" && !auto_pad.empty())) continue;
    std::vector<std::int64_t> cp = c->GetInts("pads");
    if (cp.empty()) cp.assign(2 * sp, 0);
    if (cp.size() != 2 * sp) continue;
    if (c->op_type() == "AveragePool") {
      bool zero = true;
      for (std::int64_t v : cp) zero &= v == 0;
      if (c->GetInt("ceil_mode", 0) != 0 || (!zero && c->GetInt("count_include_pad", 0) == 0)) continue;
      c->SetAttr("count_include_pad", ir::Attribute::Int(1));
    }
    for (std::size_t i = 0; i < sp; ++i) {
      cp[i] += p[2 + i];
      cp[sp + i] += p[r + 2 + i];
    }
    c->SetAttr("pads", ir::Attribute::Ints(cp));
    c->SetInput(0, x);
    g.RemoveNode(pad);
  }
  g.RemoveUnusedValues();
  return Status::Ok();
}

// ConvInteger / MatMulInteger -> Cast(to float32) -> Mul(S) [-> Add(constant
// bias B)] [-> Relu / LeakyRelu / Clip], as ONNX Runtime's dynamic
// quantization writes a Conv or MatMul: one node (kiln.rescale = 1, S input
// 4, B input 5, the activation as kiln.activation), whose kernel computes
// float(sum) * S + B in that order, each step rounded as the graph's ops
// round it (oneDNN's float32 destination and post-ops on the int8 route), so
// the result is the graph's, bit for bit. S and B: one value, or one per
// output channel (ConvInteger) / column (MatMulInteger by a 2-D B); S may
// be computed (x_scale * w_scale, per run), B must be a constant.
Status FuseIntegerRescale(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_fused_epilogues) return Status::Ok();
  std::unordered_set<const ir::Node*> removed;
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  bool fused = false;
  for (ir::Node* op : nodes) {
    if (removed.count(op)) continue;
    const bool conv = op->op_type() == "ConvInteger";
    if ((!conv && op->op_type() != "MatMulInteger") || !op->domain().empty() || op->num_outputs() != 1 ||
        op->num_inputs() > 4 || op->HasAttr(ops::kRescaleAttr) || op->HasAttr(kActAttr)) {
      continue;
    }
    ir::Value* y = op->output(0);
    if (y->dtype() != DType::kInt32 || y->shape().size() < (conv ? 3u : 2u)) continue;
    // MatMulInteger: per column only for a 2-D B (the output's last dim is
    // then B's columns).
    if (!conv && (!op->input(1) || op->input(1)->shape().size() != 2 || op->input(0)->shape().size() < 2)) continue;
    if (opts.target_has_kernel) {
      ir::Graph probe;
      ir::Node* p = probe.AddNode(op->op_type(), "probe", {}, {});
      p->SetAttr(ops::kRescaleAttr, ir::Attribute::Int(1));
      if (!opts.target_has_kernel(*p)) continue;
    }
    const std::size_t axis = conv ? 1 : y->shape().size() - 1;
    const ir::Node* cast_c = SoleConsumer(g, y);
    if (!cast_c || cast_c->op_type() != "Cast" || !cast_c->domain().empty() ||
        cast_c->GetInt("to", 0) != static_cast<std::int64_t>(1) /* FLOAT */ || cast_c->num_outputs() != 1) {
      continue;
    }
    auto* cast = const_cast<ir::Node*>(cast_c);
    ir::Value* f = cast->output(0);
    const ir::Node* mul_c = SoleConsumer(g, f);
    if (!mul_c || mul_c->op_type() != "Mul" || !mul_c->domain().empty() || mul_c->num_inputs() != 2 ||
        mul_c->HasAttr("broadcast")) {
      continue;
    }
    auto* mul = const_cast<ir::Node*>(mul_c);
    ir::Value* s = mul->input(0) == f ? mul->input(1) : mul->input(0);
    if (s == f || f->dtype() != DType::kFloat32 || !PerAxisOrOne(s, y, axis) ||
        mul->output(0)->shape() != y->shape()) {
      continue;
    }
    op->SetInput(4, s);
    op->SetAttr(ops::kRescaleAttr, ir::Attribute::Int(1));
    fused = true;
    removed.insert(cast);
    g.RemoveNode(cast);
    Absorb(g, op, mul, removed);
    // A constant bias, one per channel / column (or one value).
    if (const ir::Node* add_c = SoleConsumer(g, op->output(0));
        add_c && add_c->op_type() == "Add" && add_c->domain().empty() && add_c->num_inputs() == 2 &&
        !add_c->HasAttr("broadcast")) {
      auto* add = const_cast<ir::Node*>(add_c);
      ir::Value* z = op->output(0);
      ir::Value* b = add->input(0) == z ? add->input(1) : add->input(0);
      if (b != z && IsF32Const(b) && PerAxisOrOne(b, z, axis) && add->output(0)->shape() == z->shape()) {
        op->SetInput(5, b);
        Absorb(g, op, add, removed);
      }
    }
    AbsorbRescaleActivation(g, op, removed);
  }
  // QLinearMatMul -> DequantizeLinear with its own y_scale and y_zero_point
  // [-> Add(constant bias)]: QDQ transformers' projections (fuse-qdq made
  // the QLinearMatMul; its dequantized result feeds the float bias Add).
  // One node (kiln.dequantize = 1) writes the float32 result.
  nodes.clear();
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* op : nodes) {
    if (removed.count(op) || op->op_type() != "QLinearMatMul" || !op->domain().empty() || op->num_inputs() != 8 ||
        op->num_outputs() != 1 || op->HasAttr(ops::kDequantizeAttr)) {
      continue;
    }
    ir::Value* q = op->output(0);
    if (q->shape().empty()) continue;
    if (opts.target_has_kernel) {
      ir::Graph probe;
      ir::Node* p = probe.AddNode("QLinearMatMul", "probe", {}, {});
      p->SetAttr(ops::kDequantizeAttr, ir::Attribute::Int(1));
      if (!opts.target_has_kernel(*p)) continue;
    }
    const ir::Node* dq_c = SoleConsumer(g, q);
    if (!dq_c || dq_c->op_type() != "DequantizeLinear" || !dq_c->domain().empty() || dq_c->input(0) != q ||
        dq_c->num_outputs() != 1 || dq_c->output(0)->dtype() != DType::kFloat32 ||
        !SameScalar(dq_c->input(1), op->input(6)) ||
        !(dq_c->num_inputs() > 2 && dq_c->input(2) ? SameScalar(dq_c->input(2), op->input(7))
                                                   : IsZeroScalar(op->input(7)))) {
      continue;
    }
    auto* dq = const_cast<ir::Node*>(dq_c);
    op->SetAttr(ops::kDequantizeAttr, ir::Attribute::Int(1));
    Absorb(g, op, dq, removed);
    fused = true;
    ir::Value* z = op->output(0);
    if (const ir::Node* add_c = SoleConsumer(g, z);
        add_c && add_c->op_type() == "Add" && add_c->domain().empty() && add_c->num_inputs() == 2 &&
        !add_c->HasAttr("broadcast")) {
      auto* add = const_cast<ir::Node*>(add_c);
      ir::Value* b = add->input(0) == z ? add->input(1) : add->input(0);
      if (b != z && IsF32Const(b) && PerAxisOrOne(b, z, z->shape().size() - 1) && add->output(0)->shape() == z->shape()) {
        op->SetInput(8, b);
        Absorb(g, op, add, removed);
      }
    }
  }
  // S may be computed after the integer op in the node order.
  return fused ? g.TopologicalSort() : Status::Ok();
}

// DynamicQuantizeLinear (x -> q, x_scale, x_zero_point) whose q only
// rescaled ConvIntegers / MatMulIntegers read, as input 0 with its zero
// point as input 2: each of them reads x instead, with x_scale as input 6
// (kiln.quantize_input = 1), and quantizes it itself, with the same
// arithmetic (kernels/quant.cc), so that q is never written and read
// back: the int16-product kernel quantizes each row of its int16 image
// as it makes it. Where such an op's scale (input 4) is a Mul of x_scale
// and another value that only it reads, that value becomes input 4 and
// the op multiplies by x_scale itself (kiln.scale_by_x = 1: the same
// product, multiplication being commutative), one task less. The
// DynamicQuantizeLinear stays for x_scale and x_zero_point (its kernel
// skips q, which nothing reads), unless one op alone reads them: that op
// then computes them itself (kiln.quantize_input = 2) and it goes.
Status FuseQuantizeInput(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_fused_epilogues) return Status::Ok();
  std::vector<ir::Node*> dqls;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "DynamicQuantizeLinear" && n->domain().empty() && n->num_outputs() == 3 &&
        n->num_inputs() == 1 && n->input(0) && n->input(0)->dtype() == DType::kFloat32) {
      dqls.push_back(n.get());
    }
  }
  std::unordered_set<const ir::Node*> removed;
  for (ir::Node* d : dqls) {
    ir::Value* q = d->output(0);
    ir::Value* xs = d->output(1);
    ir::Value* xz = d->output(2);
    if (!q || !xs || !xz || g.IsGraphOutput(q) || q->uses().empty()) continue;
    bool ok = true;
    std::vector<ir::Node*> ops;
    for (const ir::Use& u : q->uses()) {
      ir::Node* op = u.node;
      const std::string& t = op->op_type();
      ok = ok && (t == "ConvInteger" || t == "MatMulInteger") && op->domain().empty() && u.index == 0 &&
           op->GetInt(ops::kRescaleAttr, 0) == 1 && !op->HasAttr(ops::kQuantizeInputAttr) &&
           (op->num_inputs() <= 6 || !op->input(6)) &&
           op->num_outputs() == 1 && op->output(0)->dtype() == DType::kFloat32 && op->input(2) == xz &&
           std::find(ops.begin(), ops.end(), op) == ops.end();  // q at one input of each
      if (!ok) break;
      ops.push_back(op);
    }
    if (!ok) continue;
    if (opts.target_has_kernel) {
      for (ir::Node* op : ops) {
        ir::Graph probe;
        ir::Node* p = probe.AddNode(op->op_type(), "probe", {}, {});
        p->SetAttr(ops::kRescaleAttr, ir::Attribute::Int(1));
        p->SetAttr(ops::kQuantizeInputAttr, ir::Attribute::Int(1));
        ok = ok && opts.target_has_kernel(*p);
      }
      if (!ok) continue;
    }
    for (ir::Node* op : ops) {
      op->SetInput(0, d->input(0));
      op->SetInput(6, xs);
      op->SetAttr(ops::kQuantizeInputAttr, ir::Attribute::Int(1));
      // S = Mul(x_scale, w_scale) read by this op alone.
      ir::Value* sv = op->input(4);
      ir::Node* mul = sv ? sv->producer() : nullptr;
      if (!mul || removed.count(mul) || mul->op_type() != "Mul" || !mul->domain().empty() || mul->num_inputs() != 2 ||
          mul->num_outputs() != 1 || mul->HasAttr("broadcast") || SoleConsumer(g, sv) != op) {
        continue;
      }
      ir::Value* other = mul->input(0) == xs ? mul->input(1) : mul->input(1) == xs ? mul->input(0) : nullptr;
      // x_scale is one value: the product has the other factor's shape.
      if (!other || other == xs || other->dtype() != DType::kFloat32 || other->shape() != sv->shape()) continue;
      op->SetInput(4, other);
      op->SetAttr(ops::kScaleByXAttr, ir::Attribute::Int(1));
      removed.insert(mul);
      g.RemoveNode(mul);
    }
    // The op alone reads what the DynamicQuantizeLinear gives: it computes
    // x_scale and the zero point itself (kiln.quantize_input = 2) and the
    // DynamicQuantizeLinear goes, one task less.
    if (ops.size() != 1 || g.IsGraphOutput(xs) || g.IsGraphOutput(xz)) continue;
    ir::Node* op = ops[0];
    bool alone = true;
    for (const ir::Value* v : {xs, xz}) {
      for (const ir::Use& u : v->uses()) alone = alone && u.node == op && (u.index == 2 || u.index == 6);
    }
    if (!alone) continue;
    if (opts.target_has_kernel) {
      ir::Graph probe;
      ir::Node* p = probe.AddNode(op->op_type(), "probe", {}, {});
      p->SetAttr(ops::kRescaleAttr, ir::Attribute::Int(1));
      p->SetAttr(ops::kQuantizeInputAttr, ir::Attribute::Int(2));
      if (!opts.target_has_kernel(*p)) continue;
    }
    op->SetInput(2, nullptr);
    op->SetInput(6, nullptr);
    op->TrimAbsentTrailingInputs();
    op->SetAttr(ops::kQuantizeInputAttr, ir::Attribute::Int(2));
    removed.insert(d);
    g.RemoveNode(d);
  }
  g.RemoveUnusedValues();
  return Status::Ok();
}

}  // namespace kiln::passes
