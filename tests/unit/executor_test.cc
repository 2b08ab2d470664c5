// The executor's debug bounds checking catches a kernel that writes past its
// output, and names the node and tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/kernel.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/common_infer.h"
#include "test_util.h"

namespace kiln {
namespace {

// Test-only op "Overflow" (domain kiln.test): copies its input and writes
// `kiln.extra` bytes beyond the end of its output.
void RegisterOverflowOp() {
  static bool done = false;
  if (done) return;
  done = true;
  ops::OpDef d;
  d.type = "Overflow";
  d.domain = "kiln.test";
  d.versions = {1};
  d.infer = ops::InferSameAsInput;
  ops::OpRegistry::Get().Register(d);
  cpu::KernelRegistry::Get().Register("Overflow", [](const cpu::KernelInit& init) {
    const std::size_t n = init.outputs[0].bytes();
    const auto extra = static_cast<std::size_t>(init.node->GetInt("kiln.extra", 0));
    return cpu::MakeFn([n, extra](const cpu::KernelArgs& a) {
      std::memcpy(a.out(0), a.in(0), n);
      std::memset(static_cast<char*>(a.out(0)) + n, 0, extra);
      return Status::Ok();
    });
  }, "kiln.test");
}

std::string Build(const test::TempDir& dir, int extra) {
  RegisterOverflowOp();
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {16});
  g->inputs().push_back(x);
  ir::Value* mid = g->AddValue("mid");
  ir::Value* y = g->AddValue("y");
  ir::Node* o = g->AddNode("Overflow", "bad_kernel", {x}, {mid}, "kiln.test");
  o->SetAttr("kiln.extra", ir::Attribute::Int(extra));
  g->AddNode("Relu", "relu", {mid}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  auto m = CompileGraph(std::move(g), {});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  std::string path = dir.file("m.kiln");
  EXPECT_TRUE(format::WriteModelFile(m.value(), path).ok());
  return path;
}

TEST(Executor, CheckBoundsCatchesOverflowingKernel) {
  test::TempDir dir;
  LoadOptions lo;
  lo.check_bounds = true;
  auto model = Model::Load(Build(dir, 4), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> x(16, 1), y(16);
  Status s = (*model)->Execute({TensorRef::Of(x.data(), {16})}, {TensorRef::Of(y.data(), {16})});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad_kernel"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'mid'"), std::string::npos) << s.message();
}

TEST(Executor, CheckBoundsPassesCorrectKernels) {
  test::TempDir dir;
  LoadOptions lo;
  lo.check_bounds = true;
  auto model = Model::Load(Build(dir, 0), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> x(16, -2), y(16, 5);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {16})}, {TensorRef::Of(y.data(), {16})}).ok());
  EXPECT_EQ(y, std::vector<float>(16, 0.f));
}

}  // namespace
}  // namespace kiln
