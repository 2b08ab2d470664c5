// The executor's debug bounds checking catches a kernel that writes past its
// output, and names the node and tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>

#include "backends/cpu/kernel.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "ops/common_infer.h"
#include "runtime/executor.h"
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

// y = relu(x + c), c = 2.
std::unique_ptr<ir::Graph> AddRelu() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {64});
  g->inputs().push_back(x);
  ir::Value* c = g->AddConstant("c", test::F32({64}, std::vector<float>(64, 2.f)));
  ir::Value* s = g->AddValue("s");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Add", "add", {x, c}, {s});
  g->AddNode("Relu", "relu", {s}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  return g;
}

// Destroying a Model while ExecuteAsync runs on it are still queued: the
// queued work keeps what it refers to alive (a use-after-free before; this
// test runs under ASan in the sanitizer build).
TEST(AsyncModelLifetime, DestroyingAModelWithQueuedRunsIsSafe) {
  test::TempDir dir;
  auto model = test::CompileAndLoad(AddRelu(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  ASSERT_TRUE((*stream)->LaunchHostFunc([open] {
    open.wait();
    return Status::Ok();
  }).ok());
  std::vector<float> x1(64, 1), x2(64, -5), y1(64, -1), y2(64, -1);
  ASSERT_TRUE((*model)->ExecuteAsync(**stream, {TensorRef::Of(x1.data(), {64})}, {TensorRef::Of(y1.data(), {64})}).ok());
  ASSERT_TRUE((*model)->ExecuteAsync(**stream, {TensorRef::Of(x2.data(), {64})}, {TensorRef::Of(y2.data(), {64})}).ok());
  model.value().reset();  // both runs are still queued behind the gate
  gate.set_value();
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(y1, std::vector<float>(64, 3.f));  // relu(1 + 2)
  EXPECT_EQ(y2, std::vector<float>(64, 0.f));  // relu(-5 + 2)
}

// Work skipped because earlier work on the stream failed still lets go of
// the model (LeakSanitizer would report it otherwise) and writes nothing.
TEST(AsyncModelLifetime, SkippedQueuedRunReleasesTheModel) {
  test::TempDir dir;
  auto model = test::CompileAndLoad(AddRelu(), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  ASSERT_TRUE((*stream)->LaunchHostFunc([open] {
    open.wait();
    return Error(StatusCode::kInternal, "earlier work failed");
  }).ok());
  std::vector<float> x(64, 1), y(64, -1);
  ASSERT_TRUE((*model)->ExecuteAsync(**stream, {TensorRef::Of(x.data(), {64})}, {TensorRef::Of(y.data(), {64})}).ok());
  model.value().reset();
  gate.set_value();
  Status st = (*stream)->Synchronize();
  EXPECT_NE(st.message().find("earlier work failed"), std::string::npos) << st.ToString();
  EXPECT_EQ(y, std::vector<float>(64, -1.f));
}

// An exception thrown by queued work becomes the stream's error instead of
// terminating the process from the worker thread.
TEST(AsyncModelLifetime, ExceptionsInQueuedWorkBecomeStatus) {
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->LaunchHostFunc([]() -> Status { throw std::runtime_error("boom"); }).ok());
  Status st = (*stream)->Synchronize();
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("boom"), std::string::npos) << st.ToString();
}

// A kernel factory or kernel that throws (oneDNN's C++ API throws
// dnnl::error) gives an error naming the node; nothing escapes.
TEST(Executor, ThrowingKernelsBecomeErrorsNamingTheNode) {
  static bool registered = false;
  if (!registered) {
    registered = true;
    ops::OpDef d;
    d.type = "Throws";
    d.domain = "kiln.test";
    d.versions = {1};
    d.infer = ops::InferSameAsInput;
    ops::OpRegistry::Get().Register(d);
    cpu::KernelRegistry::Get().Register("Throws", [](const cpu::KernelInit& init) -> Result<std::unique_ptr<cpu::Kernel>> {
      if (init.node->GetInt("kiln.at_create", 0)) throw std::runtime_error("could not create a primitive");
      return cpu::MakeFn([](const cpu::KernelArgs&) -> Status { throw std::bad_alloc(); });
    }, "kiln.test");
  }
  for (int at_create : {1, 0}) {
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {4});
    g->inputs().push_back(x);
    ir::Value* y = g->AddValue("y");
    ir::Node* n = g->AddNode("Throws", "thrower", {x}, {y}, "kiln.test");
    n->SetAttr("kiln.at_create", ir::Attribute::Int(at_create));
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    test::TempDir dir;
    auto model = test::CompileAndLoad(std::move(g), dir);
    if (at_create) {
      ASSERT_FALSE(model.ok());
      EXPECT_NE(model.status().message().find("Throws node 'thrower'"), std::string::npos) << model.status().ToString();
      EXPECT_NE(model.status().message().find("could not create a primitive"), std::string::npos)
          << model.status().ToString();
      continue;
    }
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> xs(4), ys(4);
    Status st = (*model)->Execute({TensorRef::Of(xs.data(), {4})}, {TensorRef::Of(ys.data(), {4})});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
    EXPECT_NE(st.message().find("Throws node 'thrower'"), std::string::npos) << st.ToString();
  }
}

std::int64_t ResidentBytes() {
  std::ifstream f("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Loading does not touch the arena (it used to be memset, so a model too
// large for the machine was OOM-killed instead of failing): a 128 MiB
// intermediate costs no resident memory until a run writes it.
TEST(AsyncModelLifetime, LoadDoesNotTouchTheArena) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer allocators and shadow memory change the resident set";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  GTEST_SKIP() << "sanitizer allocators and shadow memory change the resident set";
#endif
#endif
  constexpr std::int64_t kN = 32 << 20;  // floats: 128 MiB
  auto g = std::make_unique<ir::Graph>();
  ir::Value* x = g->AddValue("x", DType::kFloat32, {kN});
  g->inputs().push_back(x);
  ir::Value* a = g->AddValue("a");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Relu", "r1", {x}, {a});
  g->AddNode("Neg", "n2", {a}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  test::TempDir dir;
  const std::int64_t before = ResidentBytes();
  auto model = test::CompileAndLoad(std::move(g), dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_GE((*model)->arena_bytes(), static_cast<std::uint64_t>(kN * 4));
  EXPECT_LT(ResidentBytes() - before, kN * 4 / 2) << "loading touched the arena";
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Small tasks run on one kernel thread (runtime::SmallTask): the executor's
// estimate of a task's time on one thread (runtime::TaskCostNs: 0.015 ns per
// activation byte, 0.055 per constant byte, per-element cost of the ops that
// compute more than arithmetic, 0.015 ns per float multiply-add, 0.003 per
// 8-bit one, 0.03 per depthwise one) against $KILN_SMALL_TASK_US (default
// 12). The expected costs below are worked out by hand from those rates.
TEST(Executor, SmallTaskEstimatesATasksTimeOnOneThread) {
  ir::Graph g;
  auto value = [&](const std::string& name, DType t, Shape shape) { return g.AddValue(name, t, shape); };
  auto weight = [&](const std::string& name, DType t, Shape shape) {
    auto w = std::make_shared<HostTensor>(t, shape);
    std::memset(w->mutable_data(), 0, w->nbytes());
    return g.AddConstant(name, w);
  };
  auto add = [&](const std::string& name, Shape shape, bool constant_b = false) {
    ir::Value* a = value(name + "_a", DType::kFloat32, shape);
    ir::Value* b = constant_b ? weight(name + "_b", DType::kFloat32, shape) : value(name + "_b", DType::kFloat32, shape);
    return g.AddNode("Add", name, {a, b}, {value(name + "_y", DType::kFloat32, shape)});
  };
  // Moving values: 3 operands x 64 KiB x 0.015 ns.
  EXPECT_NEAR(runtime::TaskCostNs(*add("add", {128, 128})), 3 * 65536 * 0.015, 1e-6);
  // A constant operand costs 0.055 per byte.
  EXPECT_NEAR(runtime::TaskCostNs(*add("weights", {128, 128}, true)), 2 * 65536 * 0.015 + 65536 * 0.055, 1e-6);
  // Gelu: 0.4 ns per output element on top of its bytes.
  ir::Node* gelu = g.AddNode("Gelu", "gelu", {value("g_x", DType::kFloat32, {16, 512})},
                             {value("g_y", DType::kFloat32, {16, 512})});
  EXPECT_NEAR(runtime::TaskCostNs(*gelu), 2 * 32768 * 0.015 + 8192 * 0.4, 1e-6);
  // MatMul [32,128] x W[128,512]: 32 x 512 x 128 multiply-adds.
  ir::Node* mm = g.AddNode("MatMul", "mm", {value("m_a", DType::kFloat32, {32, 128}), weight("m_w", DType::kFloat32, {128, 512})},
                           {value("m_y", DType::kFloat32, {32, 512})});
  EXPECT_NEAR(runtime::TaskCostNs(*mm), (16384 + 65536) * 0.015 + 262144 * 0.055 + 32 * 512 * 128 * 0.015, 1e-6);
  // The same in 8 bits: 0.003 per multiply-add.
  ir::Node* mmi = g.AddNode("MatMulInteger", "mmi",
                            {value("i_a", DType::kUInt8, {32, 128}), weight("i_w", DType::kInt8, {128, 512})},
                            {value("i_y", DType::kInt32, {32, 512})});
  EXPECT_NEAR(runtime::TaskCostNs(*mmi), (4096 + 65536) * 0.015 + 65536 * 0.055 + 32 * 512 * 128 * 0.003, 1e-6);
  // A depthwise Conv: group == input channels, 9 multiply-adds per output at 0.03.
  ir::Node* dw = g.AddNode("Conv", "dw",
                           {value("d_x", DType::kFloat32, {1, 116, 14, 14}), weight("d_w", DType::kFloat32, {116, 1, 3, 3})},
                           {value("d_y", DType::kFloat32, {1, 116, 14, 14})});
  dw->SetAttr("group", ir::Attribute::Int(116));
  EXPECT_NEAR(runtime::TaskCostNs(*dw),
              2 * 116 * 196 * 4 * 0.015 + 116 * 9 * 4 * 0.055 + 116 * 196 * 9 * 0.03, 1e-6);

  ::unsetenv("KILN_SMALL_TASK_US");
  EXPECT_TRUE(runtime::SmallTask(*add("tiny", {4, 4})));
  EXPECT_TRUE(runtime::SmallTask(*add("just_under", {256, 260})));   // 3 x 266240 x 0.015 = 11980.8 ns
  EXPECT_FALSE(runtime::SmallTask(*add("just_over", {256, 261})));   // 3 x 267264 x 0.015 = 12026.9 ns
  EXPECT_TRUE(runtime::SmallTask(*gelu));                            // 4.3 us
  EXPECT_FALSE(runtime::SmallTask(*mm));                             // 47.1 us: worth a second thread
  EXPECT_TRUE(runtime::SmallTask(*mmi));                             // 10.9 us
  // Without 8-bit dot products (device::Capabilities::int8_dot): 0.011 per
  // 8-bit multiply-add, and the same MatMulInteger is worth a second thread.
  EXPECT_NEAR(runtime::TaskCostNs(*mmi, false), (4096 + 65536) * 0.015 + 65536 * 0.055 + 32 * 512 * 128 * 0.011, 1e-6);
  EXPECT_FALSE(runtime::SmallTask(*mmi, runtime::SmallTaskNs(), false));  // 27.7 us
  ir::Node* sym = add("symbolic", {4, 4});
  sym->input(0)->set_symbolic_mask(1);
  EXPECT_FALSE(runtime::SmallTask(*sym));  // a dim that varies: its size is not known here
  ::setenv("KILN_SMALL_TASK_US", "0", 1);
  EXPECT_FALSE(runtime::SmallTask(*add("off", {4, 4})));
  ::setenv("KILN_SMALL_TASK_US", "100", 1);
  EXPECT_TRUE(runtime::SmallTask(*mm));
  ::unsetenv("KILN_SMALL_TASK_US");
}

// A model mixing small and large tasks gives at 2 threads what it gives at 1.
TEST(Executor, SmallTasksOnOneThreadGiveTheSameResults) {
  std::vector<float> xv = {-2, -1, 0, 1, 2, 3, -4, 5}, bv(256 * 512);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(static_cast<int>(i % 97) - 48);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    auto g = std::make_unique<ir::Graph>();
    ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 8});
    ir::Value* big = g->AddValue("big", DType::kFloat32, {256, 512});
    g->inputs().push_back(x);
    g->inputs().push_back(big);
    ir::Value* r = g->AddValue("r");
    ir::Value* s = g->AddValue("s");
    ir::Value* y = g->AddValue("y");
    g->AddNode("Relu", "small_relu", {x}, {r});  // small: one thread at 2
    g->AddNode("Neg", "big_neg", {big}, {s});    // 512 KiB each side: both threads
    g->AddNode("Abs", "big_abs", {s}, {y});
    g->outputs().push_back(r);
    g->outputs().push_back(y);
    test::TempDir d;
    LoadOptions lo;
    lo.threads = threads;
    auto m = test::CompileAndLoad(std::move(g), d, nullptr, {}, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<float> rv(8, 7), yv(bv.size(), 7);
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE((*m)->Execute({TensorRef::Of(xv.data(), {1, 8}), TensorRef::Of(bv.data(), {256, 512})},
                                {TensorRef::Of(rv.data(), {1, 8}), TensorRef::Of(yv.data(), {256, 512})})
                      .ok());
      EXPECT_EQ(rv, (std::vector<float>{0, 0, 0, 1, 2, 3, 0, 5}));
      for (std::size_t i = 0; i < bv.size(); ++i) ASSERT_EQ(yv[i], std::abs(bv[i])) << i;
    }
  }
}

}  // namespace
}  // namespace kiln
