// Half-precision graphs on targets without fast half arithmetic, and Cast
// simplification.
//
// ComputeHalfInFloat32 ("half-in-float32", import phase): a float16 or
// bfloat16 graph is computed in float32, the way OpenVINO's CPU plugin and
// ONNX Runtime's cast insertion do it on CPUs. Half model inputs are cast to
// float32 once where they enter, half outputs are cast back where they
// leave, and half constants (weights, Constant/ConstantOfShape values)
// become float32 at compile time, so nothing is converted per run inside the
// graph and every op runs its float32 kernel. What the model states about
// rounding stays: an explicit Cast to float16/bfloat16 still rounds (it
// becomes Cast-to-half then Cast-to-float32). Ops whose output type is a
// `dtype` attribute produce float32. Subgraphs (If branches) are converted
// the same way, their formal inputs and outputs included. A graph-API
// FileConstant of a half type is read through a Cast. A graph with
// custom-domain nodes is left alone (a custom op may expect its half
// inputs). What the model computes between its edges is not rounded to half
// on the way (results at least as accurate; a model that relies on half
// overflowing to inf midway sees float32's range instead), except that a
// bfloat16 Conv, MatMul or Gemm is marked (ops::kBf16Attr): where the CPU
// multiplies bfloat16 natively, its kernel rounds its operands to bfloat16
// as the model does, for about twice float32's speed.
//
// SimplifyCasts ("simplify-casts", simplify phase, after inference): a Cast
// to the type its input already has is removed, and in Cast(A->B) ->
// Cast(B->C) where B holds every value of A exactly, the second Cast reads
// the first's input (so an A->B->A round trip becomes a no-op and goes).
#include <cstring>

#include "custom/registry.h"
#include "ops/fused_attrs.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

HostTensorPtr ToFloat32(const HostTensor& t) {
  auto out = std::make_shared<HostTensor>(DType::kFloat32, t.shape());
  const std::int64_t n = NumElements(t.shape());
  const auto* src = t.data_as<std::uint16_t>();
  float* dst = out->mutable_data_as<float>();
  if (t.dtype() == DType::kFloat16) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
  }
  return out;
}

ir::Node* AddCast(ir::Graph& g, const std::string& name, ir::Value* in, ir::Value* out, DType to) {
  ir::Node* c = g.AddNode("Cast", g.UniqueName(name), {in}, {out});
  c->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(to)));
  c->set_since_version(13);
  return c;
}

// Redirects every read of `from` (nodes, subgraph captures, subgraph
// outputs) to `to`, but keeps `g`'s own output slots on `from`.
void RedirectReads(ir::Graph& g, ir::Value* from, ir::Value* to) {
  std::vector<std::size_t> slots;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    if (g.outputs()[i] == from) slots.push_back(i);
  }
  g.ReplaceAllUses(from, to);
  for (std::size_t i : slots) g.outputs()[i] = from;
}

bool HasHalf(const ir::Graph& g, bool* custom) {
  bool half = false;
  ir::ForEachGraph(g, [&](const ir::Graph& sg) {
    for (const auto& v : sg.values()) half |= IsHalf(v->dtype());
    for (const auto& n : sg.nodes()) {
      if (custom::IsCustomNode(*n)) *custom = true;
      for (const auto& [k, a] : n->attrs()) {
        if (a.kind == ir::Attribute::Kind::kTensor && a.t) half |= IsHalf(a.t->dtype());
        if (a.kind == ir::Attribute::Kind::kInt && (k == "to" || k == "dtype")) half |= IsHalf(static_cast<DType>(a.i));
      }
    }
  });
  return half;
}

void ConvertGraph(ir::Graph& g, bool top) {
  // Convolutions and matrix products the model computes in bfloat16 (their
  // operands share one type, known from a weight where an intermediate
  // value has none yet): marked, so that a device with native bfloat16 dot
  // products rounds their operands to bfloat16, as the model does, and runs
  // at that speed (ops::kBf16Attr).
  for (const auto& n : g.nodes()) {
    const std::string& op = n->op_type();
    if ((op != "Conv" && op != "MatMul" && op != "Gemm") || !n->domain().empty() || n->num_inputs() < 2) continue;
    const ir::Value* x = n->input(0);
    const ir::Value* w = n->input(1);
    if ((x && x->dtype() == DType::kBFloat16) || (w && w->dtype() == DType::kBFloat16)) {
      n->SetAttr(ops::kBf16Attr, ir::Attribute::Int(1));
    }
  }
  // Model outputs of a half type: computed in float32, cast back last.
  if (top) {
    for (std::size_t i = 0; i < g.outputs().size(); ++i) {
      ir::Value* o = g.outputs()[i];
      if (!IsHalf(o->dtype()) || g.IsGraphInput(o)) continue;
      const DType orig = o->dtype();
      bool done = false;  // the same value listed twice
      for (std::size_t j = 0; j < i; ++j) done |= g.outputs()[j] == o;
      if (done) continue;
      if (o->is_constant()) {
        ir::Value* f = g.AddConstant(o->name() + "_f32", ToFloat32(*o->constant()));
        RedirectReads(g, o, f);
        continue;
      }
      ir::Node* p = o->producer();
      if (!p) continue;
      int slot = 0;
      while (p->output(slot) != o) ++slot;
      ir::Value* f = g.AddValue(o->name() + "_f32", DType::kFloat32, o->shape());
      RedirectReads(g, o, f);
      g.RebindOutput(p, slot, f);
      ir::Node* c = AddCast(g, o->name() + "_to_" + DTypeName(orig), f, o, orig);
      if (orig == DType::kBFloat16) c->SetAttr(ir::kRoundAttr, ir::Attribute::String(ir::kRoundNearestEven));
    }
  }
  // Inputs: top-level ones are cast once where they enter; a subgraph's
  // formal inputs receive float32 from the (converted) outer graph.
  for (ir::Value* in : std::vector<ir::Value*>(g.inputs())) {
    if (!IsHalf(in->dtype())) continue;
    if (!top) {
      in->set_dtype(DType::kFloat32);
      continue;
    }
    ir::Value* f = g.AddValue(in->name() + "_f32", DType::kFloat32, in->shape());
    RedirectReads(g, in, f);
    AddCast(g, in->name() + "_to_float32", in, f, DType::kFloat32);
  }
  for (const auto& v : g.values()) {
    if (v->is_constant() && IsHalf(v->dtype()) && !(top && g.IsGraphOutput(v.get()))) {
      v->set_constant(ToFloat32(*v->constant()));
    } else if (!v->is_constant() && !g.IsGraphInput(v.get()) && IsHalf(v->dtype()) && !v->producer()) {
      v->set_dtype(DType::kFloat32);  // e.g. a declared subgraph output captured from outside
    }
  }
  std::vector<ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes) {
    if (n->domain() == "kiln") {
      // A graph-API FileConstant (resolved at load) keeps its stored type;
      // a half one is read through a Cast to float32, like a half input.
      if (n->op_type() == "FileConstant" && IsHalf(static_cast<DType>(n->GetInt("dtype", 0)))) {
        ir::Value* o = n->output(0);
        ir::Value* f = g.AddValue(o->name() + "_f32", DType::kFloat32, o->shape());
        RedirectReads(g, o, f);
        AddCast(g, o->name() + "_to_float32", o, f, DType::kFloat32);
      }
      continue;
    }
    for (auto& [k, a] : n->attrs()) {
      if (a.kind == ir::Attribute::Kind::kTensor && a.t && IsHalf(a.t->dtype())) a.t = ToFloat32(*a.t);
      if (a.kind == ir::Attribute::Kind::kGraph && a.g) ConvertGraph(*a.g, false);
      for (auto& sg : a.graphs) ConvertGraph(*sg, false);
      if (a.kind == ir::Attribute::Kind::kInt && k == "dtype" && IsHalf(static_cast<DType>(a.i))) {
        a.i = static_cast<std::int64_t>(DType::kFloat32);
      }
    }
    // An explicit Cast to half keeps its rounding: Cast(to=half) then a
    // Cast to float32, which its readers see.
    if (n->op_type() == "Cast" && n->domain().empty()) {
      const ir::Attribute* to = n->FindAttr("to");
      if (to && to->kind == ir::Attribute::Kind::kInt && IsHalf(static_cast<DType>(to->i)) &&
          !(top && g.IsGraphOutput(n->output(0)) && n->output(0)->uses().empty())) {
        ir::Value* o = n->output(0);
        const DType half = static_cast<DType>(to->i);
        ir::Value* h = g.AddValue(o->name() + "_" + DTypeName(half), half, o->shape());
        g.RebindOutput(n, 0, h);
        // Readers of o (and a subgraph's output slot) get the float32 value.
        AddCast(g, o->name() + "_to_float32", h, o, DType::kFloat32);
      }
    }
  }
}

// Whether every value of type `a` is exactly a value of type `b`.
bool Widens(DType a, DType b) {
  using D = DType;
  if (a == b) return true;
  switch (a) {
    case D::kBool: return b != D::kString && b != D::kUndefined;
    case D::kFloat16:
    case D::kBFloat16: return b == D::kFloat32 || b == D::kFloat64;
    case D::kFloat32: return b == D::kFloat64;
    case D::kInt8: return b == D::kInt16 || b == D::kInt32 || b == D::kInt64 || b == D::kFloat16 ||
                          b == D::kBFloat16 || b == D::kFloat32 || b == D::kFloat64;
    case D::kUInt8: return b == D::kUInt16 || b == D::kInt16 || b == D::kUInt32 || b == D::kInt32 ||
                           b == D::kUInt64 || b == D::kInt64 || b == D::kFloat16 || b == D::kBFloat16 ||
                           b == D::kFloat32 || b == D::kFloat64;
    case D::kInt16: return b == D::kInt32 || b == D::kInt64 || b == D::kFloat32 || b == D::kFloat64;
    case D::kUInt16: return b == D::kUInt32 || b == D::kInt32 || b == D::kUInt64 || b == D::kInt64 ||
                            b == D::kFloat32 || b == D::kFloat64;
    case D::kInt32: return b == D::kInt64 || b == D::kFloat64;
    case D::kUInt32: return b == D::kUInt64 || b == D::kInt64 || b == D::kFloat64;
    default: return false;
  }
}

bool IsPlainCast(const ir::Node& n) {
  if (n.op_type() != "Cast" || !n.domain().empty() || !n.input(0)) return false;
  const ir::Attribute* to = n.FindAttr("to");
  return to && to->kind == ir::Attribute::Kind::kInt && n.output(0)->dtype() == static_cast<DType>(to->i);
}

void SimplifyGraph(ir::Graph& g) {
  std::vector<ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes) {
    for (auto& [k, a] : n->attrs()) {
      if (a.g) SimplifyGraph(*a.g);
      for (auto& sg : a.graphs) SimplifyGraph(*sg);
    }
    if (!IsPlainCast(*n)) continue;
    // Cast(A->B) -> this Cast, B exact for A: read the first Cast's input.
    ir::Node* p = n->input(0)->producer();
    // The first Cast changes no value; the second then acts on the same
    // value as it would on the original type, provided it does not depend on
    // the source type: a float or bool target (rounding of an exact value,
    // x != 0), or an integer target that holds every value of the original
    // type (no saturation, which float sources get, or wraparound, which
    // integer sources get).
    const DType to = n->output(0)->dtype();
    const bool float_or_bool = IsFloating(to) || to == DType::kBool;
    if (p && p->graph() == &g && IsPlainCast(*p) && p->input(0)->dtype() != DType::kUndefined &&
        Widens(p->input(0)->dtype(), p->output(0)->dtype()) && (float_or_bool || Widens(p->input(0)->dtype(), to))) {
      n->SetInput(0, p->input(0));
      // Rounding to nearest applies to a float32 source only.
      if (p->input(0)->dtype() != DType::kFloat32) n->attrs().erase(ir::kRoundAttr);
    }
  }
  // Casts to the type they already have.
  nodes.clear();
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes) {
    if (!IsPlainCast(*n)) continue;
    ir::Value* in = n->input(0);
    ir::Value* out = n->output(0);
    if (in->dtype() != out->dtype() || g.IsGraphOutput(out) || g.IsGraphInput(out)) continue;
    g.ReplaceAllUses(out, in);
    g.RemoveNode(n);
  }
}

}  // namespace

Status ComputeHalfInFloat32(ir::Graph& g, const PassOptions& opts) {
  // Subgraphs are converted with their top-level graph (the pipeline runs
  // again on lowered If branches: nothing left to do there).
  if (opts.target_half_arithmetic || g.parent() != nullptr) return Status::Ok();
  bool custom = false;
  if (!HasHalf(g, &custom) || custom) return Status::Ok();
  // Outputs without a declared type (graphs built with the graph API, ONNX
  // outputs without a tensor type): their types as the model computes them,
  // from inference on a copy, so half outputs stay half.
  bool untyped = false;
  for (const ir::Value* o : g.outputs()) untyped |= o->dtype() == DType::kUndefined;
  if (untyped) {
    auto copy = ir::CloneGraph(g);
    PassOptions probe = opts;
    probe.disabled.insert("fold");
    if (copy->TopologicalSort().ok() && InferShapesAndFold(*copy, probe).ok()) {
      for (std::size_t i = 0; i < g.outputs().size() && i < copy->outputs().size(); ++i) {
        if (g.outputs()[i]->dtype() == DType::kUndefined) g.outputs()[i]->set_dtype(copy->outputs()[i]->dtype());
      }
    }
  }
  ConvertGraph(g, true);
  return g.TopologicalSort();
}

Status SimplifyCasts(ir::Graph& g, const PassOptions&) {
  SimplifyGraph(g);
  return Status::Ok();
}

}  // namespace kiln::passes
