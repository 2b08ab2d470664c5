// Custom operators: the context methods, the order of callbacks, refresh of
// only what moved, Identity insertion, failing UpdateHostArgs, package
// loading errors; streams and events.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "format/kiln_file.h"
#include "kiln/custom_op.h"
#include "kiln/graph.h"
#include "kiln/rtc.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "test_util.h"

namespace kiln {
namespace {

// Scale: y = x * factor (float32), kernel in this file; logs every callback.
struct ScaleArgs {
  const float* x;
  float* y;
  long n;
  float factor;
};
void ScaleKernel(const void* p) {
  const auto* a = static_cast<const ScaleArgs*>(p);
  for (long i = 0; i < a->n; ++i) a->y[i] = a->x[i] * a->factor;
}

std::vector<std::string>& Log() {
  static std::vector<std::string> log;
  return log;
}

class ScaleBase : public CustomOp, public ShapeInferOp, public EagerExecuteOp {
 public:
  Status InferShape(InferShapeContext& ctx) override {
    Log().push_back("InferShape");
    return ctx.SetOutputShape(0, ctx.input_shape(0));
  }
  Status InferDataType(InferShapeContext& ctx) override {
    Log().push_back("InferDataType");
    return ctx.SetOutputDataType(0, ctx.input_dtype(0));
  }
  Status Execute(EagerExecuteContext& ctx) override {
    Log().push_back("Execute");
    // Bounds of every context method.
    EXPECT_EQ(ctx.GetInputTensor(1).status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(ctx.GetInputTensor(-1).status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(ctx.MallocOutputTensor(1).status().code(), StatusCode::kOutOfRange);
    EXPECT_FALSE(ctx.MallocReadOnlyDevArgs(nullptr, 4).ok());
    KILN_ASSIGN_OR_RETURN(DeviceTensor x, ctx.GetInputTensor(0));
    KILN_ASSIGN_OR_RETURN(DeviceTensor y, ctx.MallocOutputTensor(0));
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(y.shape, x.shape);
    KILN_ASSIGN_OR_RETURN(void* ws, ctx.MallocWorkspace(64));
    EXPECT_NE(ws, nullptr);
    ScaleArgs a{static_cast<const float*>(x.data), static_cast<float*>(y.data),
                static_cast<long>(x.bytes / 4), static_cast<float>(ctx.attributes().GetFloat("factor", 2.f))};
    KILN_ASSIGN_OR_RETURN(const void* dev, ctx.MallocReadOnlyDevArgs(&a, sizeof a));
    return ctx.GetStream().LaunchKernel(ScaleKernel, dev);
  }
};

class ScaleRefresh final : public ScaleBase, public ArgsUpdater {
 public:
  static inline std::atomic<int> fail_next{0};
  Status UpdateHostArgs(ArgsUpdaterContext& ctx) override {
    Log().push_back("UpdateHostArgs");
    if (fail_next.exchange(0)) return Error(StatusCode::kInternal, "deliberate failure");
    EXPECT_EQ(ctx.num_kernel_args(), 1u);
    EXPECT_EQ(ctx.GetKernelArgs(Placement::kHost, 1).status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(ctx.GetOutputTensor(1).status().code(), StatusCode::kOutOfRange);
    KILN_ASSIGN_OR_RETURN(void* host, ctx.GetKernelArgs(Placement::kHost, 0));
    KILN_ASSIGN_OR_RETURN(void* dev, ctx.GetKernelArgs(Placement::kDevice, 0));
    EXPECT_NE(host, dev);
    KILN_ASSIGN_OR_RETURN(DeviceTensor x, ctx.GetInputTensor(0));
    KILN_ASSIGN_OR_RETURN(DeviceTensor y, ctx.GetOutputTensor(0));
    auto* a = static_cast<ScaleArgs*>(host);
    a->x = static_cast<const float*>(x.data);
    a->y = static_cast<float*>(y.data);
    return Status::Ok();
  }
};
class ScaleNoRefresh final : public ScaleBase {};

void RegisterOnce() {
  static bool done = [] {
    EXPECT_TRUE(KILN_REGISTER_CUSTOM_OP(TestScaleRefresh, ScaleRefresh).ok());
    EXPECT_TRUE(KILN_REGISTER_CUSTOM_OP(TestScaleNoRefresh, ScaleNoRefresh).ok());
    return true;
  }();
  (void)done;
}

// y = op(x) * 1 via Relu(op(x))? Keep it direct: graph x -> op -> y.
Result<std::uint32_t> AddScaleGraph(Session& s, const char* type, float factor = 3.f) {
  Graph g(type);
  auto x = g.AddInput("x", DType::kFloat32, {4});
  KILN_ASSIGN_OR_RETURN(auto y, g.AddOp(type, {x}, {{"factor", factor}}, 1, "scale"));
  KILN_RETURN_IF_ERROR(g.AddOutput(y[0], "y"));
  return s.AddGraph(std::move(g));
}

TEST(CustomOp, RegistrationErrors) {
  RegisterOnce();
  EXPECT_FALSE(KILN_REGISTER_CUSTOM_OP(TestScaleRefresh, ScaleRefresh).ok());  // twice
  Status s = KILN_REGISTER_CUSTOM_OP(Relu, ScaleRefresh);                    // built-in name
  EXPECT_NE(s.message().find("built-in"), std::string::npos) << s.message();
  Graph g;
  auto x = g.AddInput("x", DType::kFloat32, {4});
  auto r = g.AddOp("NoSuchOpAnywhere", {x});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("NoSuchOpAnywhere"), std::string::npos);
}

TEST(CustomOp, CallbackOrderAndRefreshOfOnlyWhatMoved) {
  RegisterOnce();
  Session s;
  auto id = AddScaleGraph(s, "TestScaleRefresh");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Log().clear();
  ASSERT_TRUE(s.CompileGraph(*id).ok());
  EXPECT_EQ(Log(), (std::vector<std::string>{"InferShape", "InferDataType"}));
  auto summary = s.GetCompiledGraphSummary(*id);
  ASSERT_TRUE(summary.ok());
  EXPECT_TRUE(summary->inserted_identities.empty());
  Log().clear();
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(s.LoadGraph(*id, stream->get()).ok());
  EXPECT_EQ(Log(), (std::vector<std::string>{"Execute"}));
  Log().clear();
  std::vector<float> x1 = {1, 2, 3, 4}, x2 = {-1, 0, 1, 2}, y1(4), y2(4);
  auto run = [&](std::vector<float>& x, std::vector<float>& y) {
    return s.ExecuteGraphWithStreamAsync(*id, **stream, {TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {4})});
  };
  ASSERT_TRUE(run(x1, y1).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(y1, (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(Log(), (std::vector<std::string>{"UpdateHostArgs"}));  // first real buffers
  Log().clear();
  ASSERT_TRUE(run(x1, y1).ok());  // same addresses: nothing to refresh
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_TRUE(Log().empty());
  EXPECT_EQ(s.GetLoadedGraph(*id)->last_stats().slots_refreshed, 0u);
  ASSERT_TRUE(run(x1, y2).ok());  // only the output moved
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(Log(), (std::vector<std::string>{"UpdateHostArgs"}));
  EXPECT_EQ(y2, (std::vector<float>{3, 6, 9, 12}));
  // Two runs queued back to back with different buffers: each sees its own.
  Log().clear();
  std::fill(y1.begin(), y1.end(), 0.f);
  std::fill(y2.begin(), y2.end(), 0.f);
  ASSERT_TRUE(run(x2, y1).ok());
  ASSERT_TRUE(run(x1, y2).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(y1, (std::vector<float>{-3, 0, 3, 6}));
  EXPECT_EQ(y2, (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(Log().size(), 2u);
}

TEST(CustomOp, FailingUpdateHostArgsFailsTheRunClearly) {
  RegisterOnce();
  Session s;
  auto id = AddScaleGraph(s, "TestScaleRefresh");
  ASSERT_TRUE(id.ok());
  std::vector<float> x = {1, 1, 1, 1}, y(4);
  ScaleRefresh::fail_next = 1;
  Status st = s.RunGraph(*id, {TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {4})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("UpdateHostArgs failed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("deliberate failure"), std::string::npos);
  EXPECT_NE(st.message().find("scale"), std::string::npos);
  // The same buffers again: the refresh is retried and succeeds.
  ASSERT_TRUE(s.RunGraph(*id, {TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {4})}).ok());
  EXPECT_EQ(y, (std::vector<float>{3, 3, 3, 3}));
}

TEST(CustomOp, NonRefreshableOpsGetIdentityCopies) {
  RegisterOnce();
  Session s;
  auto id = AddScaleGraph(s, "TestScaleNoRefresh", 0.5f);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(s.CompileGraph(*id).ok());
  auto summary = s.GetCompiledGraphSummary(*id);
  ASSERT_TRUE(summary.ok());
  ASSERT_EQ(summary->inserted_identities.size(), 2u);  // x in, y out
  for (auto& ii : summary->inserted_identities) {
    EXPECT_EQ(ii.for_op, "scale");
    EXPECT_NE(ii.reason.find("ArgsUpdater"), std::string::npos);
  }
  std::vector<float> x1 = {2, 4, 6, 8}, x2 = {8, 6, 4, 2}, y1(4), y2(4);
  ASSERT_TRUE(s.RunGraph(*id, {TensorRef::Of(x1.data(), {4})}, {TensorRef::Of(y1.data(), {4})}).ok());
  ASSERT_TRUE(s.RunGraph(*id, {TensorRef::Of(x2.data(), {4})}, {TensorRef::Of(y2.data(), {4})}).ok());
  EXPECT_EQ(y1, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(y2, (std::vector<float>{4, 3, 2, 1}));
  EXPECT_EQ(s.GetLoadedGraph(*id)->last_stats().tasks_run, 3u);  // copy in, op, copy out
}

TEST(CustomOp, KilnFileRecordsCustomOpsAndMissingOnesFailClearly) {
  RegisterOnce();
  test::TempDir dir;
  Graph g("needs_ghost");
  auto x = g.AddInput("x", DType::kFloat32, {4});
  auto y = g.AddOp("TestScaleRefresh", {x}, {}, 1, "scale");
  ASSERT_TRUE(y.ok());
  ASSERT_TRUE(g.AddOutput(y.value()[0], "y").ok());
  auto m = CompileGraph(g.TakeIr(), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->custom_op_types, (std::vector<std::string>{"TestScaleRefresh"}));
  // Pretend it needs a type nobody registered.
  for (auto& n : m->graph->nodes()) {
    if (n->op_type() == "TestScaleRefresh") n->set_op_type("GhostOp");
  }
  m->custom_op_types = {"GhostOp"};
  ASSERT_TRUE(format::WriteModelFile(m.value(), dir.file("ghost.kiln")).ok());
  setenv("KILN_CUSTOM_OP_PATH", dir.file("pkgs").c_str(), 1);
  auto model = Model::Load(dir.file("ghost.kiln"), {});
  unsetenv("KILN_CUSTOM_OP_PATH");
  ASSERT_FALSE(model.ok());
  const std::string& msg = model.status().message();
  EXPECT_NE(msg.find("GhostOp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op_graph/lib/linux"), std::string::npos) << msg;
}

// Builds a shared library from `source` with Kiln's RTC and installs it as a
// package under root/op_graph/lib/linux/<arch>/.
std::string InstallPackage(const std::string& root, const std::string& name, const std::string& source) {
  auto prog = rtc::Program::Create(name, source, {});
  EXPECT_TRUE(prog.ok());
  EXPECT_TRUE((*prog)->Compile().ok()) << (*prog)->log();
  auto bin = (*prog)->Binary();
  EXPECT_TRUE(bin.ok());
  std::string arch = "x86_64";
#if defined(__aarch64__)
  arch = "aarch64";
#endif
  auto dir = std::filesystem::path(root) / "op_graph" / "lib" / "linux" / arch;
  std::filesystem::create_directories(dir);
  std::string path = (dir / ("lib" + name + ".so")).string();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bin->data()), static_cast<std::streamsize>(bin->size()));
  return path;
}

TEST(CustomOp, PackageLoadingErrorsSayWhere) {
  test::TempDir dir;
  setenv("KILN_RTC_CACHE_DIR", dir.file("rtc").c_str(), 1);
  // A library that is not a package.
  std::string plain = InstallPackage(dir.file("a"), "notapackage", "extern \"C\" int f() { return 1; }\n");
  setenv("KILN_CUSTOM_OP_PATH", dir.file("a").c_str(), 1);
  Status s = LoadCustomOpPackages();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(plain), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("kiln_custom_op_abi_version"), std::string::npos);
  // A package built for another ABI version.
  std::string old = InstallPackage(dir.file("b"), "oldabi",
                                   "#include <cstdint>\n#include <cstddef>\n"
                                   "extern \"C\" std::uint32_t kiln_custom_op_abi_version() { return 999; }\n"
                                   "extern \"C\" int kiln_register_custom_ops(void*, char*, std::size_t) { return 0; }\n");
  setenv("KILN_CUSTOM_OP_PATH", dir.file("b").c_str(), 1);
  s = LoadCustomOpPackages();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ABI version 999"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(old), std::string::npos);
  // A missing library file.
  s = LoadCustomOpLibrary(dir.file("nope.so"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("nope.so"), std::string::npos);
  unsetenv("KILN_CUSTOM_OP_PATH");
  unsetenv("KILN_RTC_CACHE_DIR");
}

TEST(CustomOp, PackageFromCustomOpPathRegistersAndRuns) {
  setenv("KILN_CUSTOM_OP_PATH", KILN_TEST_PACKAGE_ROOT, 1);
  Status s = LoadCustomOpPackages();
  unsetenv("KILN_CUSTOM_OP_PATH");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NE(FindCustomOp("PkgDouble"), nullptr);
  Session sess;
  Graph g("pkg");
  auto x = g.AddInput("x", DType::kFloat32, {3});
  auto y = g.AddOp("PkgDouble", {x});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_TRUE(g.AddOutput(y.value()[0], "y").ok());
  auto id = sess.AddGraph(std::move(g));
  ASSERT_TRUE(id.ok());
  std::vector<float> xv = {1, -2, 3.5f}, yv(3);
  ASSERT_TRUE(sess.RunGraph(*id, {TensorRef::Of(xv.data(), {3})}, {TensorRef::Of(yv.data(), {3})}).ok());
  EXPECT_EQ(yv, (std::vector<float>{2, -4, 7}));
}

TEST(Streams, InOrderEventsAndErrors) {
  auto a = Stream::Create();
  auto b = Stream::Create();
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int> order;
  std::mutex mu;
  auto push = [&](int v) {
    return [&, v]() {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(v);
      return Status::Ok();
    };
  };
  Event e;
  EXPECT_TRUE(e.Query());  // never recorded
  ASSERT_TRUE((*a)->LaunchHostFunc([&]() {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::lock_guard<std::mutex> l(mu);
    order.push_back(1);
    return Status::Ok();
  }).ok());
  ASSERT_TRUE((*a)->RecordEvent(e).ok());
  ASSERT_TRUE((*b)->WaitEvent(e).ok());
  ASSERT_TRUE((*b)->LaunchHostFunc(push(2)).ok());  // must wait for stream a's work
  ASSERT_TRUE((*b)->Synchronize().ok());
  EXPECT_TRUE(e.Query());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  // An error is reported once by Synchronize; later work is skipped until then.
  std::atomic<int> ran{0};
  ASSERT_TRUE((*a)->LaunchHostFunc([] { return Error(StatusCode::kInternal, "boom"); }).ok());
  ASSERT_TRUE((*a)->LaunchHostFunc([&] { ++ran; return Status::Ok(); }).ok());
  Status s = (*a)->Synchronize();
  EXPECT_NE(s.message().find("boom"), std::string::npos);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE((*a)->Synchronize().ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*a)->LaunchHostFunc(push(10 + i)).ok());
  ASSERT_TRUE((*a)->Synchronize().ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[2 + i], 10 + i);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// On a discrete device (sim) the op's kernel reads device memory and its
// argument block is refreshed through ArgsUpdater when device buffers move;
// host buffers are staged through the I/O stand-ins (bound once: no refresh).
TEST(CustomOp, RefreshThroughDeviceBuffersOnSim) {
  RegisterOnce();
  ScaleRefresh::fail_next = 0;
  SessionOptions so;
  so.load.device = "sim";
  Session s(so);
  auto id = AddScaleGraph(s, "TestScaleRefresh");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto stream = Stream::Create("sim");
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(s.LoadGraph(*id, stream->get()).ok());
  auto x1 = DeviceBuffer::Allocate("sim", 16), x2 = DeviceBuffer::Allocate("sim", 16);
  auto y1 = DeviceBuffer::Allocate("sim", 16), y2 = DeviceBuffer::Allocate("sim", 16);
  ASSERT_TRUE(x1.ok() && x2.ok() && y1.ok() && y2.ok());
  const std::vector<float> a = {1, 2, 3, 4}, b = {-1, 0, 1, 2};
  ASSERT_TRUE((*x1)->CopyFromHost(a.data(), 16).ok());
  ASSERT_TRUE((*x2)->CopyFromHost(b.data(), 16).ok());
  auto run = [&](DeviceBuffer& x, DeviceBuffer& y) {
    return s.ExecuteGraphWithStreamAsync(*id, **stream, {x.Ref(DType::kFloat32, {4})}, {y.Ref(DType::kFloat32, {4})});
  };
  Log().clear();
  ASSERT_TRUE(run(**x1, **y1).ok());
  ASSERT_TRUE(run(**x2, **y2).ok());  // queued back to back: each sees its own buffers
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(Log(), (std::vector<std::string>{"UpdateHostArgs", "UpdateHostArgs"}));
  std::vector<float> r1(4), r2(4);
  ASSERT_TRUE((*y1)->CopyToHost(r1.data(), 16).ok());
  ASSERT_TRUE((*y2)->CopyToHost(r2.data(), 16).ok());
  EXPECT_EQ(r1, (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(r2, (std::vector<float>{-3, 0, 3, 6}));
  // Host buffers: staged, correct, and no refresh after the first binding.
  Log().clear();
  std::vector<float> hx = {2, 2, 2, 2}, hy(4);
  ASSERT_TRUE(s.RunGraph(*id, {TensorRef::Of(hx.data(), {4})}, {TensorRef::Of(hy.data(), {4})}).ok());
  EXPECT_EQ(hy, (std::vector<float>{6, 6, 6, 6}));
  EXPECT_EQ(Log(), (std::vector<std::string>{"UpdateHostArgs"}));  // bound to the stand-ins once
  Log().clear();
  std::vector<float> hy2(4);
  ASSERT_TRUE(s.RunGraph(*id, {TensorRef::Of(hx.data(), {4})}, {TensorRef::Of(hy2.data(), {4})}).ok());
  EXPECT_EQ(hy2, (std::vector<float>{6, 6, 6, 6}));
  EXPECT_TRUE(Log().empty());
}

}  // namespace
}  // namespace kiln
