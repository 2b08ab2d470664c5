// Channels-last layout: 2-D Conv, ConvTranspose, QLinearConv (and pooling) run fastest in oneDNN with
// NHWC activations (its brgconv kernels: ~2x the NCHW gemm path here). This
// pass runs each eligible op on NHWC tensors between a pair of Transposes,
// pushes the NHWC->NCHW Transposes down through layout-agnostic elementwise
// ops, inference BatchNormalization (run channels-last), Concat, Slice and reductions (their axes remapped), ShuffleNet's channel shuffle
// (Reshape-Transpose-Reshape, rewritten for NHWC) and Resize (its per-axis vectors permuted), cancels Transpose pairs that meet, and turns Transposes that only
// move size-1 dims into free Reshapes. What remains is a Transpose at each
// edge of a channels-last region.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

const std::vector<std::int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<std::int64_t> kToNchw = {0, 3, 1, 2};

// A QLinearConv the int8 kernel runs channels-last: constant int8 weights
// (zero point 0) or uint8 ones (zero point 128), constant scales, zero
// points and bias (backends/cpu/kernels/quant.cc, DnnlQConvKernel).
bool QConvEligible(const ir::Node& n) {
  const ir::Value* x = n.input(0);
  if (!x || x->shape().size() != 4 || (x->dtype() != DType::kUInt8 && x->dtype() != DType::kInt8)) return false;
  for (int i = 1; i < n.num_inputs(); ++i) {
    if (n.input(i) && !n.input(i)->is_constant()) return false;
  }
  if (n.num_inputs() < 8 || !n.input(3) || !n.input(5)) return false;
  // Finite output scales (as DnnlQConvKernel needs; else it refuses and the
  // reference kernel runs on NCHW copies, correct but slow).
  const float xs = n.input(1)->constant()->data_as<float>()[0], ys = n.input(6)->constant()->data_as<float>()[0];
  const HostTensor& wsc = *n.input(4)->constant();
  for (std::int64_t i = 0; i < NumElements(wsc.shape()); ++i) {
    if (!std::isfinite(xs * wsc.data_as<float>()[i] / ys)) return false;
  }
  const HostTensor& zp = *n.input(5)->constant();
  const bool u8 = zp.dtype() == DType::kUInt8;
  for (std::int64_t i = 0; i < NumElements(zp.shape()); ++i) {
    const int z = u8 ? zp.data_as<std::uint8_t>()[i] : zp.data_as<std::int8_t>()[i];
    if (z != (u8 ? 128 : 0)) return false;
  }
  return true;
}

// A ConvInteger with its rescale fused (kiln.rescale, fuse-integer-rescale:
// a float32 output) on a 4-D 8-bit input with constant weights: the int8
// kernel runs it channels-last (elsewhere its fallback permutes copies).
bool RescaledConvIntegerEligible(const ir::Node& n) {
  const ir::Value* x = n.input(0);
  return n.GetInt(ops::kRescaleAttr, 0) == 1 && x && x->shape().size() == 4 &&
         (x->dtype() == DType::kUInt8 || x->dtype() == DType::kInt8) && n.input(1) && n.input(1)->is_constant();
}

// Convolutions: what a channels-last region forms around.
bool IsConvolution(const ir::Node& n) {
  return n.op_type() == "Conv" || n.op_type() == "QLinearConv" || n.op_type() == "ConvInteger";
}

bool Eligible(const ir::Node& n) {
  if (!n.domain().empty() || n.HasAttr(ops::kNhwcAttr)) return false;
  if (n.op_type() == "QLinearConv") return QConvEligible(n);
  if (n.op_type() == "ConvInteger") return RescaledConvIntegerEligible(n);
  const ir::Value* x = n.input(0);
  const std::string& t = n.op_type();
  if (!x || x->shape().size() != 4) return false;
  // MaxPool also on int8 tensors (an int8 model's, after fuse-qdq).
  const bool int8_pool = t == "MaxPool" && (x->dtype() == DType::kUInt8 || x->dtype() == DType::kInt8);
  if (x->dtype() != DType::kFloat32 && !int8_pool) return false;
  if (t == "Conv" || t == "ConvTranspose") return true;
  if (t == "MaxPool") return n.num_outputs() == 1 && n.GetInt("storage_order", 0) == 0;
  return t == "AveragePool" || t == "GlobalAveragePool" || t == "GlobalMaxPool";
}

bool IsTranspose(const ir::Node* n, const std::vector<std::int64_t>& perm) {
  return n && n->op_type() == "Transpose" && n->domain().empty() && n->GetInts("perm") == perm;
}

Result<ir::Node*> AddTranspose(ir::Graph& g, ir::Value* in, ir::Value* out,
                               const std::vector<std::int64_t>& perm) {
  ir::Node* t = g.AddNode("Transpose", g.UniqueName("layout_transpose"), {in}, {out});
  t->set_since_version(13);
  t->SetAttr("perm", ir::Attribute::Ints(perm));
  KILN_RETURN_IF_ERROR(ops::InferNode(*t));
  return t;
}

// A constant broadcast against a rank-4 NCHW tensor, permuted to NHWC.
HostTensorPtr PermuteConstant(const HostTensor& c) {
  Shape s = c.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  Shape o = {s[0], s[2], s[3], s[1]};
  auto t = std::make_shared<HostTensor>(c.dtype(), o);
  const std::size_t es = DTypeSize(c.dtype());
  const auto* src = static_cast<const std::uint8_t*>(c.data());
  auto* dst = static_cast<std::uint8_t*>(t->mutable_data());
  for (std::int64_t n = 0; n < s[0]; ++n)
    for (std::int64_t ch = 0; ch < s[1]; ++ch)
      for (std::int64_t h = 0; h < s[2]; ++h)
        for (std::int64_t w = 0; w < s[3]; ++w) {
          std::int64_t si = ((n * s[1] + ch) * s[2] + h) * s[3] + w;
          std::int64_t di = ((n * s[2] + h) * s[3] + w) * s[1] + ch;
          std::memcpy(dst + di * es, src + si * es, es);
        }
  return t;
}

// Whether input i of a com.microsoft QLinear* node is a data tensor (not a
// scale or zero point).
bool IsQData(const ir::Node& n, int i) {
  if (n.op_type() == "QLinearConcat") return i >= 2 && (i - 2) % 3 == 0;
  if (n.op_type() == "QLinearAdd" || n.op_type() == "QLinearMul") return i == 0 || i == 3;
  return i == 0;
}

// A Resize/Upsample on a 4-D tensor whose scales, sizes and roi are
// constants (or absent): its kernel treats every axis alike, so on NHWC data
// it is the same op with those vectors permuted (PermuteAxesVector).
bool MovableResize(const ir::Node& n) {
  if ((n.op_type() != "Resize" && n.op_type() != "Upsample") || !n.domain().empty() || n.num_outputs() != 1 ||
      n.output(0)->shape().size() != 4 || n.HasAttr("axes")) {
    return false;
  }
  for (int i = 1; i < n.num_inputs(); ++i) {
    const ir::Value* v = n.input(i);
    if (!v) continue;
    const std::int64_t len = NumElements(v->shape());
    if (!v->is_constant() || v->shape().size() != 1 || (len != 0 && len != 4 && len != 8)) return false;
  }
  return true;
}

// A per-axis vector of a rank-4 NCHW op (4 entries, or 8: starts then ends,
// as Resize's roi) in NHWC order.
HostTensorPtr PermuteAxesVector(const HostTensor& c) {
  auto t = std::make_shared<HostTensor>(c.dtype(), c.shape());
  const std::size_t es = DTypeSize(c.dtype());
  const auto* src = static_cast<const std::uint8_t*>(c.data());
  auto* dst = static_cast<std::uint8_t*>(t->mutable_data());
  for (std::int64_t half = 0; half < c.numel() / 4; ++half) {
    for (std::int64_t i = 0; i < 4; ++i) std::memcpy(dst + (half * 4 + i) * es, src + (half * 4 + kToNhwc[i]) * es, es);
  }
  return t;
}

// A Slice of a rank-4 tensor with constant starts, ends, axes and steps:
// on NHWC data the same Slice with its axes remapped (ShuffleNet's channel
// split).
bool MovableSlice(const ir::Node& n) {
  if (n.op_type() != "Slice" || !n.domain().empty() || n.num_outputs() != 1 || n.num_inputs() < 3 ||
      !n.input(0) || n.input(0)->shape().size() != 4) {
    return false;
  }
  for (int i = 1; i < n.num_inputs(); ++i) {
    if (n.input(i) && (!n.input(i)->is_constant() || n.input(i)->shape().size() != 1)) return false;
  }
  return true;
}

// The axes of a ReduceMean/Max/Min/Sum over a rank-4 tensor (attribute, or
// ReduceSum-13's constant input 1); empty when not given or not constant.
std::vector<std::int64_t> ReduceAxes(const ir::Node& n) {
  if (n.HasAttr("axes")) return n.GetInts("axes");
  if (n.num_inputs() > 1 && n.input(1) && n.input(1)->is_constant()) return n.input(1)->constant()->ToInt64Vector();
  return {};
}

// A reduction over given axes of a rank-4 tensor: on NHWC data the same
// reduction over the remapped axes. With keepdims its rank-4 output is NHWC
// too; without, only where the kept dims come out in the same order either
// way (the channels reduced, or both spatial dims: global pooling written
// as ReduceMean), so that no Transpose is needed after it.
bool MovableReduce(const ir::Node& n) {
  static const std::set<std::string> kOps = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"};
  if (!kOps.count(n.op_type()) || !n.domain().empty() || n.num_outputs() != 1 || !n.input(0) ||
      n.input(0)->shape().size() != 4) {
    return false;
  }
  const std::vector<std::int64_t> axes = ReduceAxes(n);
  if (axes.empty()) return false;
  bool reduced[4] = {false, false, false, false};
  for (std::int64_t a : axes) {
    if (a < -4 || a > 3) return false;
    reduced[a < 0 ? a + 4 : a] = true;
  }
  return n.GetInt("keepdims", 1) != 0 || reduced[1] || (reduced[2] && reduced[3]);
}

HostTensorPtr Int64Vector(const std::vector<std::int64_t>& v) {
  auto t = std::make_shared<HostTensor>(DType::kInt64, Shape{static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t->mutable_data_as<std::int64_t>());
  return t;
}

// An inference BatchNormalization on a 4-D float32 tensor (one not folded
// into a convolution: DenseNet's pre-activation BN after each Concat): its
// kernel runs channels-last (kiln.nhwc, format version 14), the per-channel
// parameters unchanged.
bool MovableBatchNorm(const ir::Node& n) {
  return n.op_type() == "BatchNormalization" && n.domain().empty() && !n.HasAttr(ops::kNhwcAttr) &&
         n.num_outputs() == 1 && n.GetInt("spatial", 1) == 1 && n.GetInt("training_mode", 0) == 0 && n.input(0) &&
         n.input(0)->shape().size() == 4 && n.input(0)->dtype() == DType::kFloat32;
}

bool LayoutAgnostic(const ir::Node& n) {
  if (MovableResize(n) || MovableSlice(n) || MovableReduce(n) || MovableBatchNorm(n)) return true;
  // DynamicQuantizeLinear: y elementwise, its scale and zero point from
  // the minimum and maximum (the same in any order).
  if (n.op_type() == "DynamicQuantizeLinear" && n.domain().empty() && n.output(0)->shape().size() == 4) return true;
  // Per-tensor QuantizeLinear / DequantizeLinear are elementwise too.
  if ((n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear") && n.domain().empty() &&
      n.num_outputs() == 1 && n.output(0)->shape().size() == 4) {
    for (int i = 1; i < n.num_inputs(); ++i) {
      if (n.input(i) && NumElements(n.input(i)->shape()) != 1) return false;
    }
    return true;
  }
  // ONNX Runtime's per-tensor QLinear* ops (QOperator models): element-wise,
  // Concat on a remapped axis, pooling with channels_last.
  if (n.domain() == ops::kMicrosoftDomain) {
    static const std::set<std::string> kQOps = {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                                                "QLinearConcat", "QLinearGlobalAveragePool"};
    if (!kQOps.count(n.op_type()) || n.num_outputs() != 1 || n.output(0)->shape().size() != 4) return false;
    if (n.op_type() == "QLinearGlobalAveragePool" && n.GetInt("channels_last", 0) != 0) return false;
    for (int i = 0; i < n.num_inputs(); ++i) {  // scales and zero points: single values
      if (n.input(i) && !IsQData(n, i) && NumElements(n.input(i)->shape()) != 1) return false;
    }
    return true;
  }
  static const std::set<std::string> kOps = {"Relu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",
                                             "LeakyRelu", "Add", "Sub", "Mul", "Div", "Concat", "Identity"};
  if (!n.domain().empty() || !kOps.count(n.op_type()) || n.num_outputs() != 1 ||
      n.output(0)->shape().size() != 4) {
    return false;
  }
  // Old-form (pre-7) binary ops with an explicit broadcast axis are not.
  return n.op_type() == "Concat" || !n.HasAttr("axis");
}

// Position of NCHW axis `a` in NHWC.
std::int64_t NhwcAxis(std::int64_t a) {
  static const std::int64_t kMap[4] = {0, 3, 1, 2};
  return kMap[a < 0 ? a + 4 : a];
}

// `n` (its inputs already rewired to channels-last values) now computes
// channels-last: its output becomes a new `_nhwc` value, inferred, and a
// NHWC->NCHW Transpose gives the old output value (and its readers) the
// layout they had.
Status OutputThroughNchwTranspose(ir::Graph& g, ir::Node* n) {
  ir::Value* y = n->output(0);
  ir::Value* yt = g.AddValue(y->name() + "_nhwc");
  g.RebindOutput(n, 0, yt);
  KILN_RETURN_IF_ERROR(ops::InferNode(*n));
  return AddTranspose(g, yt, y, kToNchw).status();
}

// Moves NHWC->NCHW Transposes below `n` when all its tensor inputs come
// through one. Returns whether it rewrote.
Result<bool> PushDown(ir::Graph& g, ir::Node* n) {
  bool any = false;
  for (int i = 0; i < n->num_inputs(); ++i) {
    ir::Value* in = n->input(i);
    if (!in) continue;
    if (in->is_constant()) {
      if (in->shape().size() > 4) return false;
      continue;
    }
    if (!IsTranspose(in->producer(), kToNchw)) return false;
    any = true;
  }
  if (!any) return false;
  const bool qop = n->domain() == ops::kMicrosoftDomain;
  if (qop) {
    // Every data input must come through a transpose (no constants to permute).
    for (int i = 0; i < n->num_inputs(); ++i) {
      if (IsQData(*n, i) && (!n->input(i) || n->input(i)->is_constant())) return false;
    }
    if (n->op_type() == "QLinearConcat") n->SetAttr("axis", ir::Attribute::Int(NhwcAxis(n->GetInt("axis", 0))));
    if (n->op_type() == "QLinearGlobalAveragePool") n->SetAttr("channels_last", ir::Attribute::Int(1));
  }
  if (n->op_type() == "Concat" && !qop) {
    // Every input must come through a transpose (no constants to permute).
    for (ir::Value* in : n->inputs()) {
      if (!in || in->is_constant()) return false;
    }
    n->SetAttr("axis", ir::Attribute::Int(NhwcAxis(n->GetInt("axis", 1))));
  }
  if (MovableSlice(*n)) {
    // Data through the Transpose; the axes (all of starts' when absent)
    // remapped; starts, ends and steps as they are.
    if (n->input(0)->is_constant()) return false;
    std::vector<std::int64_t> axes;
    if (n->num_inputs() > 3 && n->input(3)) {
      axes = n->input(3)->constant()->ToInt64Vector();
    } else {
      for (std::int64_t a = 0; a < NumElements(n->input(1)->shape()); ++a) axes.push_back(a);
    }
    for (std::int64_t& a : axes) {
      if (a < -4 || a > 3) return false;  // inference reports it
      a = NhwcAxis(a);
    }
    n->SetInput(0, n->input(0)->producer()->input(0));
    n->SetInput(3, g.AddConstant(n->name() + "_axes_nhwc", Int64Vector(axes)));
    KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, n));
    return true;
  }
  if (MovableBatchNorm(*n)) {
    if (!IsTranspose(n->input(0)->producer(), kToNchw)) return false;
    n->SetInput(0, n->input(0)->producer()->input(0));
    n->SetAttr(ops::kNhwcAttr, ir::Attribute::Int(1));
    KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, n));
    return true;
  }
  if (MovableReduce(*n)) {
    if (n->input(0)->is_constant()) return false;
    std::vector<std::int64_t> axes = ReduceAxes(*n);
    for (std::int64_t& a : axes) a = NhwcAxis(a);
    n->SetInput(0, n->input(0)->producer()->input(0));
    if (n->HasAttr("axes")) {
      n->SetAttr("axes", ir::Attribute::Ints(axes));
    } else {
      n->SetInput(1, g.AddConstant(n->name() + "_axes_nhwc", Int64Vector(axes)));
    }
    if (n->GetInt("keepdims", 1) == 0) {  // the same output either way (MovableReduce)
      KILN_RETURN_IF_ERROR(ops::InferNode(*n));
      return true;
    }
    KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, n));
    return true;
  }
  const bool resize = MovableResize(*n);
  if (resize && (!n->input(0) || n->input(0)->is_constant())) return false;
  for (int i = 0; i < n->num_inputs(); ++i) {
    ir::Value* in = n->input(i);
    if (!in) continue;
    if (resize && i > 0) {  // scales, sizes, roi: per-axis vectors
      if (NumElements(in->shape()) > 0) n->SetInput(i, g.AddConstant(in->name() + "_nhwc", PermuteAxesVector(*in->constant())));
      continue;
    }
    if (in->is_constant()) {
      // Single values (Clip bounds, scalars) broadcast the same either way.
      if (NumElements(in->shape()) > 1) {
        n->SetInput(i, g.AddConstant(in->name() + "_nhwc", PermuteConstant(*in->constant())));
      }
      continue;
    }
    n->SetInput(i, in->producer()->input(0));
  }
  KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, n));
  return true;
}

// ShuffleNet's channel shuffle of a channels-last tensor's NCHW view:
// Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose [0, 2, 1, 3, 4],
// Reshape back to [N, C, H, W]. On the NHWC data it is Reshape
// [N, H, W, C] -> [N, H, W, g, C/g], Transpose [0, 1, 2, 4, 3], Reshape
// back: rewritten so, with the NHWC->NCHW Transpose after it. Static
// shapes only; the intermediate values read by nothing else.
Result<bool> PushDownShuffle(ir::Graph& g, ir::Node* r1) {
  if (r1->op_type() != "Reshape" || !r1->domain().empty() || r1->num_inputs() < 2) return false;
  ir::Value* x = r1->input(0);
  if (!x || !IsTranspose(x->producer(), kToNchw) || x->varying_mask() != 0) return false;
  const Shape xs = x->shape();
  ir::Value* m = r1->output(0);
  const Shape& ms = m->shape();
  if (xs.size() != 4 || ms.size() != 5 || m->varying_mask() != 0 || ms[0] != xs[0] || ms[1] * ms[2] != xs[1] ||
      ms[3] != xs[2] || ms[4] != xs[3] || g.IsGraphOutput(m) || m->uses().size() != 1) {
    return false;
  }
  ir::Node* t = m->uses()[0].node;
  if (!IsTranspose(t, {0, 2, 1, 3, 4})) return false;
  ir::Value* tv = t->output(0);
  if (g.IsGraphOutput(tv) || tv->uses().size() != 1) return false;
  ir::Node* r2 = tv->uses()[0].node;
  if (r2->op_type() != "Reshape" || !r2->domain().empty() || r2->input(0) != tv || r2->num_inputs() < 2 ||
      r2->output(0)->shape() != xs || r2->output(0)->varying_mask() != 0) {
    return false;
  }
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3], groups = ms[1];
  r1->SetInput(0, x->producer()->input(0));
  r1->SetInput(1, g.AddConstant(r1->name() + "_shape_nhwc", Int64Vector({n, h, w, groups, c / groups})));
  KILN_RETURN_IF_ERROR(ops::InferNode(*r1));
  t->SetAttr("perm", ir::Attribute::Ints({0, 1, 2, 4, 3}));
  KILN_RETURN_IF_ERROR(ops::InferNode(*t));
  r2->SetInput(1, g.AddConstant(r2->name() + "_shape_nhwc", Int64Vector({n, h, w, c})));
  KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, r2));
  return true;
}

}  // namespace

Status ConvertToChannelsLast(ir::Graph& g, const PassOptions& opts) {
  if (!opts.target_channels_last) return Status::Ok();  // the target has no NHWC kernels
  std::vector<ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  // Pooling goes channels-last only to join the region of a channels-last
  // Conv: in a graph without one (a quantized model whose convolutions are
  // QLinearConv) it would only gain a Transpose on each side.
  bool any_conv = false;
  for (ir::Node* n : nodes) any_conv |= IsConvolution(*n) && Eligible(*n);
  std::map<ir::Value*, ir::Value*> to_nhwc;  // one Transpose per value read by several such ops
  for (ir::Node* n : nodes) {
    if (!Eligible(*n) || (!IsConvolution(*n) && !any_conv)) continue;
    ir::Value* x = n->input(0);
    ir::Value*& xt = to_nhwc[x];
    if (!xt) {
      xt = g.AddValue(x->name() + "_nhwc");
      KILN_RETURN_IF_ERROR(AddTranspose(g, x, xt, kToNhwc).status());
    }
    n->SetInput(0, xt);
    n->SetAttr(ops::kNhwcAttr, ir::Attribute::Int(1));
    KILN_RETURN_IF_ERROR(OutputThroughNchwTranspose(g, n));
  }
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  // Push NHWC->NCHW transposes down through elementwise ops, to a fixpoint.
  for (bool changed = true; changed;) {
    changed = false;
    nodes.clear();
    for (auto& n : g.nodes()) nodes.push_back(n.get());
    for (ir::Node* n : nodes) {
      if (n->op_type() == "Reshape") {
        KILN_ASSIGN_OR_RETURN(bool did, PushDownShuffle(g, n));
        changed |= did;
        continue;
      }
      if (!LayoutAgnostic(*n)) continue;
      KILN_ASSIGN_OR_RETURN(bool did, PushDown(g, n));
      changed |= did;
    }
    KILN_RETURN_IF_ERROR(g.TopologicalSort());
  }
  // Cancel NCHW->NHWC right after NHWC->NCHW.
  nodes.clear();
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* t : nodes) {
    if (!IsTranspose(t, kToNhwc) || !IsTranspose(t->input(0)->producer(), kToNchw)) continue;
    ir::Value* out = t->output(0);
    if (g.IsGraphOutput(out)) continue;
    ir::Value* src = t->input(0)->producer()->input(0);
    g.ReplaceAllUses(out, src);
  }
  KILN_RETURN_IF_ERROR(EliminateDeadCode(g, opts));
  // Transposes that only move size-1 dims are reshapes (views: no copy).
  nodes.clear();
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* t : nodes) {
    if (t->op_type() != "Transpose" || !t->domain().empty()) continue;
    const Shape& s = t->input(0)->shape();
    std::vector<std::int64_t> perm = t->GetInts("perm");
    if (!t->HasAttr("perm")) {  // default: reverse the dims
      for (std::int64_t i = static_cast<std::int64_t>(s.size()) - 1; i >= 0; --i) perm.push_back(i);
    }
    std::vector<std::int64_t> moved;
    for (std::int64_t p : perm) {
      if (s[p] != 1) moved.push_back(p);
    }
    if (!std::is_sorted(moved.begin(), moved.end())) continue;
    const Shape& os = t->output(0)->shape();
    const std::uint64_t dyn = t->output(0)->varying_mask();
    if (dyn & (dyn - 1)) continue;  // two data-dependent or symbolic dims: not one Reshape target
    auto shape = std::make_shared<HostTensor>(DType::kInt64, Shape{static_cast<std::int64_t>(os.size())});
    std::copy(os.begin(), os.end(), shape->mutable_data_as<std::int64_t>());
    for (std::size_t d = 0; d < os.size() && d < 64; ++d) {
      if (dyn >> d & 1) shape->mutable_data_as<std::int64_t>()[d] = -1;  // the run-time extent
    }
    t->set_op_type("Reshape");
    t->set_since_version(14);
    t->attrs().erase("perm");
    t->SetInput(1, g.AddConstant(t->name() + "_shape", shape));
    KILN_RETURN_IF_ERROR(ops::InferNode(*t));
  }
  return g.TopologicalSort();
}

}  // namespace kiln::passes
