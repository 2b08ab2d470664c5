// Pass "lower-contrib" (after infer-and-fold; required): ONNX Runtime
// contrib ops that Kiln runs as standard ops, rewritten into them.
//
// com.microsoft QGemm (ops/quant.cc states its definition) becomes
//   [Transpose] -> MatMulInteger(A', B', a_zp, b_zp) [-> Add(C)] -> Cast(float)
//   -> Mul(s) [-> QuantizeLinear(scale 1, y_zp)]
// with s = (alpha * a_scale) * b_scale [/ y_scale] as Mul / Div nodes. Every
// step is the kernel's own arithmetic: the int32 sums are exact, Cast rounds
// to nearest as the kernel's conversion does, the Mul is its one float
// multiply, and QuantizeLinear with scale 1 (x / 1 = x) rounds half to even
// and saturates as its requantisation does (clamping before or after
// rounding agrees: the bounds are integers). Inference then runs again over
// the graph, which folds the scale chain and a constant B's Transpose into
// constants (float32 IEEE products and quotient, as the kernel computes
// them) and lets the later passes see MatMulInteger with constant weights.
#include "ops/op_registry.h"
#include "passes/pass_manager.h"

namespace kiln::passes {
namespace {

ir::Value* Scalar(ir::Graph& g, const std::string& name, DType t, float v) {
  auto c = std::make_shared<HostTensor>(t, Shape{});
  if (t == DType::kFloat32) {
    *c->mutable_data_as<float>() = v;
  } else {
    *static_cast<std::uint8_t*>(c->mutable_data()) = 0;  // a zero point (uint8 or int8): 0
  }
  return g.AddConstant(g.UniqueName(name), c);
}

void LowerQGemm(ir::Graph& g, ir::Node* n) {
  const std::string base = n->name().empty() ? "qgemm" : n->name();
  auto in = [&](int i) { return i < n->num_inputs() ? n->input(i) : nullptr; };
  ir::Value *a = in(0), *as = in(1), *az = in(2), *b = in(3), *bs = in(4), *bz = in(5), *c = in(6), *ys = in(7),
            *yz = in(8);
  ir::Value* y = n->output(0);
  const float alpha = n->GetFloat("alpha", 1.f);
  const bool ta = n->GetInt("transA", 0) != 0, tb = n->GetInt("transB", 0) != 0;
  const DType a_type = a->dtype(), b_type = b->dtype();
  g.RemoveNode(n);
  auto node = [&](const char* op, const std::string& suffix, std::vector<ir::Value*> ins, ir::Value* out = nullptr,
                  int version = 13) {
    const std::string name = g.UniqueName(base + "/" + suffix);
    if (!out) out = g.AddValue(g.UniqueName(name + "_out"));
    ir::Node* m = g.AddNode(op, name, std::move(ins), {out});
    m->set_since_version(version);
    return m;
  };
  auto transposed = [&](ir::Value* v, const char* what) {
    ir::Node* t = node("Transpose", what, {v});
    t->SetAttr("perm", ir::Attribute::Ints({1, 0}));
    return t->output(0);
  };
  if (ta) a = transposed(a, "transpose_a");
  if (tb) b = transposed(b, "transpose_b");
  if (!az) az = Scalar(g, base + "/a_zero_point", a_type, 0.f);
  if (!bz) bz = Scalar(g, base + "/b_zero_point", b_type, 0.f);
  ir::Value* acc = node("MatMulInteger", "matmul", {a, b, az, bz}, nullptr, 10)->output(0);
  if (c) acc = node("Add", "add_c", {acc, c})->output(0);
  ir::Node* cast = node("Cast", "to_float", {acc});
  cast->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kFloat32)));
  ir::Value* s = node("Mul", "alpha_a_scale", {Scalar(g, base + "/alpha", DType::kFloat32, alpha), as})->output(0);
  s = node("Mul", "scale", {s, bs})->output(0);
  if (ys) s = node("Div", "requant_scale", {s, ys})->output(0);
  if (!ys) {
    node("Mul", "scaled", {cast->output(0), s}, y);
    return;
  }
  ir::Value* f = node("Mul", "scaled", {cast->output(0), s})->output(0);
  auto one = std::make_shared<HostTensor>(DType::kFloat32, yz->shape());
  *one->mutable_data_as<float>() = 1.f;
  node("QuantizeLinear", "quantize", {f, g.AddConstant(g.UniqueName(base + "/one"), one), yz}, y);
}

}  // namespace

Status LowerContribOps(ir::Graph& g, const PassOptions& opts) {
  std::vector<ir::Node*> qgemms;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "QGemm" && n->domain() == ops::kMicrosoftDomain) qgemms.push_back(n.get());
  }
  if (qgemms.empty()) return Status::Ok();
  for (ir::Node* n : qgemms) LowerQGemm(g, n);
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  return InferShapesAndFold(g, opts);
}

}  // namespace kiln::passes
