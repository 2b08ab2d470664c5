// If: constant conditions fold away at compile time, runtime conditions run
// the chosen branch (captured outer values, nesting), bad branches give clear
// errors. Every model goes through a .kiln file and Model::Load.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "test_util.h"

namespace kiln {
namespace {

using V = std::vector<float>;

HostTensorPtr Bool(bool b) {
  auto t = std::make_shared<HostTensor>(DType::kBool, Shape{});
  *t->mutable_data_as<std::uint8_t>() = b;
  return t;
}

std::shared_ptr<ir::Graph> Branch(ir::Graph* parent, const std::string& name) {
  auto b = std::make_shared<ir::Graph>();
  b->set_parent(parent);
  b->set_name(name);
  return b;
}

// A one-node branch: out = op(ins...).
std::shared_ptr<ir::Graph> OneOp(ir::Graph* parent, const std::string& name, const std::string& op,
                                 std::vector<ir::Value*> ins) {
  auto b = Branch(parent, name);
  ir::Value* o = b->AddValue(name + "_out");
  b->AddNode(op, name + "_" + op, ins, {o});
  b->outputs().push_back(o);
  return b;
}

ir::Node* AddIf(ir::Graph& g, const std::string& name, ir::Value* cond, std::shared_ptr<ir::Graph> then_b,
                std::shared_ptr<ir::Graph> else_b, ir::Value* out) {
  ir::Node* n = g.AddNode("If", name, {cond}, {out});
  ir::Attribute t, e;
  t.kind = e.kind = ir::Attribute::Kind::kGraph;
  t.g = std::move(then_b);
  e.g = std::move(else_b);
  n->SetAttr("then_branch", t);
  n->SetAttr("else_branch", e);
  return n;
}

using test::CompileAndLoad;

int CountOps(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

// inputs c (bool, or a constant if `constant_cond`), x[2], y[2]:
//   a = x * 2;  r = If(c) then {a + y} else {a - w}  (w = [1, 3], outer constant);  out = r * 10
// The If node is added before a's producer: ordering must follow captures.
std::unique_ptr<ir::Graph> CaptureModel(std::optional<bool> constant_cond) {
  auto g = std::make_unique<ir::Graph>();
  g->set_name("capture");
  ir::Value* c = constant_cond ? g->AddConstant("c", Bool(*constant_cond)) : g->AddValue("c", DType::kBool, {});
  if (!constant_cond) g->inputs().push_back(c);
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2});
  ir::Value* y = g->AddValue("y", DType::kFloat32, {2});
  g->inputs().push_back(x);
  g->inputs().push_back(y);
  ir::Value* two = g->AddConstant("two", test::F32({}, {2}));
  ir::Value* ten = g->AddConstant("ten", test::F32({}, {10}));
  ir::Value* w = g->AddConstant("w", test::F32({2}, {1, 3}));
  ir::Value* a = g->AddValue("a");
  ir::Value* r = g->AddValue("r");
  ir::Value* out = g->AddValue("out");
  AddIf(*g, "if1", c, OneOp(g.get(), "then", "Add", {a, y}), OneOp(g.get(), "else", "Sub", {a, w}), r);
  g->AddNode("Mul", "mul", {x, two}, {a});
  g->AddNode("Mul", "mul10", {r, ten}, {out});
  g->outputs().push_back(out);
  return g;
}

TEST(ControlFlow, RuntimeConditionRunsEitherBranchWithCapturedValues) {
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(CaptureModel(std::nullopt), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // The If reads cond plus the captured non-constant values (a, y); the
  // constant w was copied into the else branch.
  ASSERT_EQ(CountOps(*cm.graph, "If"), 1);
  const ir::Node* n = nullptr;
  for (auto& node : cm.graph->nodes()) {
    if (node->op_type() == "If") n = node.get();
  }
  ASSERT_EQ(n->num_inputs(), 3);
  EXPECT_EQ(n->input(1)->name(), "a");
  EXPECT_EQ(n->input(2)->name(), "y");
  EXPECT_EQ(n->FindAttr("then_branch")->g->inputs().size(), 2u);
  EXPECT_EQ(n->FindAttr("else_branch")->g->inputs().size(), 2u);

  V x = {1, 2}, y = {5, 7}, out(2);
  for (bool c : {true, false}) {
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(&c, {}), TensorRef::Of(x.data(), {2}), TensorRef::Of(y.data(), {2})},
                                  {TensorRef::Of(out.data(), {2})}).ok());
    // a = [2, 4]; then: a + y = [7, 11]; else: a - w = [1, 1]; times 10
    EXPECT_EQ(out, c ? V({70, 110}) : V({10, 10})) << "cond " << c;
  }
}

// A file compiled for the CPU loaded on a device lacking an op that only a
// branch uses: refused naming the branch's node, and the half-built branch
// executor waits for the argument-block copies it queued on its parent's
// stream before freeing their memory (before, a use after free).
TEST(ControlFlow, ABranchOpTheDeviceLacksIsRefusedCleanly) {
  test::TempDir dir;
  auto model = CompileAndLoad(CaptureModel(std::nullopt), dir, nullptr);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  LoadOptions o;
  o.device = "sim:lack=Sub,delay_us=200";
  auto m = Model::Load(dir.file("m.kiln"), o);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("If node 'if1' attribute 'else_branch'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device 'sim:lack=Sub,delay_us=200' has no kernel for Sub"), std::string::npos) << msg;
}

TEST(ControlFlow, ConstantConditionInlinesTheTakenBranch) {
  for (bool c : {true, false}) {
    test::TempDir dir;
    format::CompiledModel cm;
    auto model = CompileAndLoad(CaptureModel(c), dir, &cm);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(CountOps(*cm.graph, "If"), 0);
    EXPECT_EQ(CountOps(*cm.graph, c ? "Add" : "Sub"), 1);
    EXPECT_EQ(CountOps(*cm.graph, c ? "Sub" : "Add"), 0);
    V x = {1, 2}, y = {5, 7}, out(2);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {2}), TensorRef::Of(y.data(), {2})},
                                  {TensorRef::Of(out.data(), {2})}).ok());
    EXPECT_EQ(out, c ? V({70, 110}) : V({10, 10}));
  }
}

// With a constant condition the branches may differ in shape: only the taken
// one counts. cond = (1 > 2) folds to false: out = Concat(x, x).
TEST(ControlFlow, ConstantConditionAllowsBranchesOfDifferentShapes) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2});
  g->inputs().push_back(x);
  ir::Value* c = g->AddValue("c");
  g->AddNode("Greater", "gt", {g->AddConstant("one", test::F32({}, {1})), g->AddConstant("two", test::F32({}, {2}))},
             {c});
  auto else_b = OneOp(g.get(), "else", "Concat", {x, x});
  else_b->nodes()[0]->SetAttr("axis", ir::Attribute::Int(0));
  ir::Value* out = g->AddValue("out");
  AddIf(*g, "if1", c, OneOp(g.get(), "then", "Neg", {x}), else_b, out);
  g->outputs().push_back(out);
  test::TempDir dir;
  format::CompiledModel cm;
  auto model = CompileAndLoad(std::move(g), dir, &cm);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(CountOps(*cm.graph, "If"), 0);
  V xv = {1, 2}, o(4);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(xv.data(), {2})}, {TensorRef::Of(o.data(), {4})}).ok());
  EXPECT_EQ(o, V({1, 2, 1, 2}));
  EXPECT_EQ((*model)->outputs()[0].name, "out");
}

// out = If(c) then { If(d) then {a + y} else {a * y} } else { x },  a = 2x:
// the inner branches capture values two levels up, the outer else branch
// yields a captured value directly.
TEST(ControlFlow, NestedIf) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* c = g->AddValue("c", DType::kBool, {});
  ir::Value* d = g->AddValue("d", DType::kBool, {1});
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2});
  ir::Value* y = g->AddValue("y", DType::kFloat32, {2});
  for (ir::Value* v : {c, d, x, y}) g->inputs().push_back(v);
  ir::Value* a = g->AddValue("a");
  g->AddNode("Mul", "mul", {x, g->AddConstant("two", test::F32({}, {2}))}, {a});
  auto then_b = Branch(g.get(), "outer_then");
  ir::Value* inner = then_b->AddValue("inner_out");
  AddIf(*then_b, "inner", d, OneOp(then_b.get(), "it", "Add", {a, y}), OneOp(then_b.get(), "ie", "Mul", {a, y}),
        inner);
  then_b->outputs().push_back(inner);
  auto else_b = Branch(g.get(), "outer_else");
  else_b->outputs().push_back(x);
  ir::Value* out = g->AddValue("out");
  AddIf(*g, "outer", c, then_b, else_b, out);
  g->outputs().push_back(out);
  test::TempDir dir;
  auto model = CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  V xv = {1, 2}, yv = {5, 7}, o(2);
  for (bool cv : {true, false}) {
    for (bool dv : {true, false}) {
      ASSERT_TRUE((*model)->Execute({TensorRef::Of(&cv, {}), TensorRef::Of(&dv, {1}), TensorRef::Of(xv.data(), {2}),
                                     TensorRef::Of(yv.data(), {2})},
                                    {TensorRef::Of(o.data(), {2})}).ok());
      // a = [2, 4]; a + y = [7, 11]; a * y = [10, 28]
      EXPECT_EQ(o, !cv ? V({1, 2}) : dv ? V({7, 11}) : V({10, 28})) << cv << dv;
    }
  }
}

std::string CompileError(std::unique_ptr<ir::Graph> g) {
  test::SetLatestVersions(*g);
  auto m = CompileGraph(std::move(g), {});
  return m.ok() ? "compiled" : m.status().message();
}

// x[2], c -> If(c) then {then_b} else {else_b}
std::unique_ptr<ir::Graph> IfModel(const std::function<std::shared_ptr<ir::Graph>(ir::Graph*, ir::Value*)>& then_b,
                                   const std::function<std::shared_ptr<ir::Graph>(ir::Graph*, ir::Value*)>& else_b) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* c = g->AddValue("c", DType::kBool, {});
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2});
  g->inputs().push_back(c);
  g->inputs().push_back(x);
  ir::Value* out = g->AddValue("out");
  AddIf(*g, "if1", c, then_b(g.get(), x), else_b(g.get(), x), out);
  g->outputs().push_back(out);
  return g;
}

TEST(ControlFlow, BranchReadingAnUndefinedValueIsAnError) {
  std::string msg = CompileError(IfModel(
      [](ir::Graph* p, ir::Value* x) {
        auto b = Branch(p, "then");
        ir::Value* ghost = b->AddValue("ghost", DType::kFloat32, {2});  // produced by nothing
        ir::Value* o = b->AddValue("t");
        b->AddNode("Add", "tadd", {x, ghost}, {o});
        b->outputs().push_back(o);
        return b;
      },
      [](ir::Graph* p, ir::Value* x) { return OneOp(p, "else", "Neg", {x}); }));
  EXPECT_NE(msg.find("If node 'if1' attribute 'then_branch'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Add node 'tadd'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ghost'"), std::string::npos) << msg;
}

TEST(ControlFlow, BranchesOfDifferentExtentsGiveADataDependentOutput) {
  // then Neg(x) -> [2], else Concat(x, x) -> [4]: the If yields [<=4].
  auto g = IfModel([](ir::Graph* p, ir::Value* x) { return OneOp(p, "then", "Neg", {x}); },
                   [](ir::Graph* p, ir::Value* x) {
                     auto b = OneOp(p, "else", "Concat", {x, x});
                     b->nodes()[0]->SetAttr("axis", ir::Attribute::Int(0));
                     return b;
                   });
  test::SetLatestVersions(*g);
  auto m = CompileGraph(std::move(g), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ir::Value* out = m.value().graph->outputs()[0];
  EXPECT_EQ(out->shape(), (Shape{4}));
  EXPECT_EQ(out->dynamic_mask(), 1u);
}

TEST(ControlFlow, BranchesOfDifferentTypesAreAnError) {
  std::string msg;
  msg = CompileError(IfModel([](ir::Graph* p, ir::Value* x) { return OneOp(p, "then", "Neg", {x}); },
                             [](ir::Graph* p, ir::Value* x) {
                               auto b = OneOp(p, "else", "Cast", {x});
                               b->nodes()[0]->SetAttr("to", ir::Attribute::Int(static_cast<int>(DType::kInt64)));
                               return b;
                             }));
  EXPECT_NE(msg.find("If node 'if1': output 0: then_branch yields float32, else_branch yields int64"),
            std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// If branches in a .kiln file are untrusted like the rest of it: each branch
// is verified (values, roles, self-containment) when the file is read, and
// every branch node is re-inferred against its recorded shapes at load.
TEST(ControlFlow, HostileBranchesInAFileAreRefused) {
  struct Fault {
    std::function<void(ir::Graph& then_b, ir::Graph& else_b, ir::Graph& outer)> apply;
    std::vector<std::string> needles;
  };
  std::vector<Fault> faults = {
      // recorded shape of a branch value that inference does not give
      {[](ir::Graph&, ir::Graph& e, ir::Graph&) { e.outputs()[0]->set_shape({3}); },
       {"If node 'if1' attribute 'else_branch'", "Sub node", "is recorded as float32[3] but infers to float32[2]"}},
      // a branch node reading a value of the enclosing graph
      {[](ir::Graph& t, ir::Graph&, ir::Graph& outer) { t.nodes()[0]->SetInput(1, outer.FindValue("x")); },
       {"If node 'if1' attribute 'then_branch'", "reads outer value 'x'", "self-contained"}},
      // the same branch input listed twice
      {[](ir::Graph& t, ir::Graph&, ir::Graph&) { t.inputs().push_back(t.inputs()[0]); },
       {"If node 'if1' attribute 'then_branch'", "is listed twice"}},
      // a branch op version Kiln does not implement
      {[](ir::Graph&, ir::Graph& e, ir::Graph&) { e.nodes()[0]->set_since_version(2); },
       {"If node 'if1' attribute 'else_branch'", "has op version 2"}},
  };
  for (const Fault& f : faults) {
    test::TempDir dir;
    format::CompiledModel cm;
    ASSERT_TRUE(CompileAndLoad(CaptureModel(std::nullopt), dir, &cm).ok());
    ir::Node* n = nullptr;
    for (auto& node : cm.graph->nodes()) {
      if (node->op_type() == "If") n = node.get();
    }
    ASSERT_NE(n, nullptr);
    f.apply(*n->FindAttr("then_branch")->g, *n->FindAttr("else_branch")->g, *cm.graph);
    const std::string path = dir.file("hostile_if.kiln");
    ASSERT_TRUE(format::WriteModelFile(cm, path).ok());
    auto model = Model::Load(path, {});
    ASSERT_FALSE(model.ok()) << f.needles[1];
    EXPECT_EQ(model.status().code(), StatusCode::kCorrupt) << model.status().ToString();
    for (const std::string& s : f.needles) {
      EXPECT_NE(model.status().message().find(s), std::string::npos) << s << " in: " << model.status().message();
    }
  }
}

}  // namespace
}  // namespace kiln
