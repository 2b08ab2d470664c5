// The .kiln loader's verifier (plan::VerifyPlan, ParseModelJson, the
// load-time re-inference): plans written by the compiler pass; every kind of
// hostile plan is refused with kCorrupt naming the value or node, the offset,
// size and region. Files here are written by WriteModelFile, so their
// checksums are valid and only the verifier stands between them and the
// kernels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "format/graph_json.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "plan/memory_plan.h"
#include "test_util.h"

namespace kiln {
namespace {

// x, y [2,8] -> a = x+y -> b = a*W -> c = Reshape(b, S) (a view of b) ->
// d = Tanh(c) -> out = Sigmoid(d);  out2 = a*C.
// Plan: a [1,0,64], b = c [1,64,64], d [1,128,64], arena 192 bytes;
// x, y in regions 2, 3; out, out2 in regions 4, 5; W, C, S at 0, 64, 128.
std::unique_ptr<ir::Graph> BaseGraph() {
  auto g = std::make_unique<ir::Graph>();
  g->set_name("base");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 8});
  ir::Value* y = g->AddValue("y", DType::kFloat32, {2, 8});
  g->inputs() = {x, y};
  std::vector<float> w(16), c(16, 0.5f);
  for (int i = 0; i < 16; ++i) w[i] = static_cast<float>(i) / 10;
  ir::Value* W = g->AddConstant("W", test::F32({2, 8}, w));
  ir::Value* C = g->AddConstant("C", test::F32({2, 8}, c));
  ir::Value* S = g->AddConstant("S", test::I64({2}, {4, 4}));
  ir::Value* a = g->AddValue("a");
  ir::Value* b = g->AddValue("b");
  ir::Value* cv = g->AddValue("c");
  ir::Value* d = g->AddValue("d");
  ir::Value* out = g->AddValue("out");
  ir::Value* out2 = g->AddValue("out2");
  g->AddNode("Add", "add", {x, y}, {a});
  g->AddNode("Mul", "mul", {a, W}, {b});
  g->AddNode("Reshape", "reshape", {b, S}, {cv});
  g->AddNode("Tanh", "tanh", {cv}, {d});
  g->AddNode("Sigmoid", "sigmoid", {d}, {out});
  g->AddNode("Mul", "mul2", {a, C}, {out2});
  g->outputs() = {out, out2};
  test::SetLatestVersions(*g);
  return g;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class VerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = CompileGraph(BaseGraph(), {});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    path_ = dir_.file("base.kiln");
    ASSERT_TRUE(format::WriteModelFile(m.value(), path_).ok());
    Parse(path_);
    ASSERT_TRUE(model_.graph);
    // The layout the tests below rely on (hand-derived, see BaseGraph).
    auto& pl = model_.plan.placements;
    ASSERT_EQ(model_.plan.arena_size, 192u);
    ASSERT_EQ(pl.at("a").offset, 0u);
    ASSERT_EQ(pl.at("b").offset, 64u);
    ASSERT_EQ(pl.at("c").offset, 64u);
    ASSERT_EQ(pl.at("d").offset, 128u);
    ASSERT_EQ(pl.at("x").region, 2);
    ASSERT_EQ(pl.at("out2").region, 5);
  }

  // Reads `path` into page-aligned memory and parses (and verifies) it.
  void Parse(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<char> bytes{std::istreambuf_iterator<char>(f), {}};
    std::shared_ptr<void> buf(std::aligned_alloc(4096, (bytes.size() + 4095) / 4096 * 4096), FreeDeleter());
    std::memcpy(buf.get(), bytes.data(), bytes.size());
    image_ = buf;
    size_ = bytes.size();
    auto m = format::ParseModelImage(static_cast<const std::uint8_t*>(buf.get()), size_, buf, path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    format::PartitionEntry e[2];
    std::memcpy(e, static_cast<const char*>(buf.get()) + sizeof(format::FileHeader), sizeof(e));
    for (auto& p : e) {
      if (p.type == static_cast<std::uint32_t>(format::PartitionType::kWeights)) {
        weights_ = static_cast<const std::uint8_t*>(buf.get()) + p.offset;
        weights_size_ = p.size;
      }
    }
  }

  Status Verify() { return plan::VerifyPlan(*model_.graph, model_.plan, weights_, weights_size_); }

  // Expects kCorrupt with every needle in the message.
  void ExpectRefused(const std::vector<std::string>& needles) {
    Status st = Verify();
    ASSERT_FALSE(st.ok()) << "accepted";
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
    for (const std::string& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << n << " in: " << st.message();
  }

  ir::Graph& g() { return *model_.graph; }
  ir::Value* v(const std::string& name) { return g().FindValue(name); }
  plan::Placement& p(const std::string& name) { return model_.plan.placements[name]; }

  test::TempDir dir_;
  std::string path_;
  std::shared_ptr<void> image_;
  std::size_t size_ = 0;
  const std::uint8_t* weights_ = nullptr;
  std::uint64_t weights_size_ = 0;
  format::CompiledModel model_;
};

TEST_F(VerifierTest, CompiledPlanVerifies) { EXPECT_TRUE(Verify().ok()) << Verify().ToString(); }

TEST_F(VerifierTest, PlansOfOtherCompiledGraphsVerify) {
  // A longer chain with views, fan-out and a view feeding an output: every
  // plan PlanMemory makes must pass its own verifier (ReadModelFile runs it).
  auto gr = std::make_unique<ir::Graph>();
  ir::Value* x = gr->AddValue("x", DType::kFloat32, {4, 6});
  gr->inputs() = {x};
  ir::Value* shape = gr->AddConstant("shape", test::I64({2}, {6, 4}));
  ir::Value* back = gr->AddConstant("back", test::I64({2}, {4, 6}));
  ir::Value* cur = x;
  std::vector<ir::Value*> outs;
  for (int i = 0; i < 12; ++i) {
    ir::Value* r = gr->AddValue("r" + std::to_string(i));
    gr->AddNode(i % 2 ? "Relu" : "Tanh", "n" + std::to_string(i), {cur}, {r});
    ir::Value* v1 = gr->AddValue("v" + std::to_string(i));
    gr->AddNode("Reshape", "view" + std::to_string(i), {r, shape}, {v1});
    ir::Value* v2 = gr->AddValue("w" + std::to_string(i));
    gr->AddNode("Reshape", "back" + std::to_string(i), {v1, back}, {v2});
    ir::Value* s = gr->AddValue("s" + std::to_string(i));
    gr->AddNode("Add", "add" + std::to_string(i), {v2, i ? cur : x}, {s});
    cur = s;
    if (i % 5 == 4) outs.push_back(v1);
  }
  outs.push_back(cur);
  gr->outputs() = outs;
  test::SetLatestVersions(*gr);
  auto m = CompileGraph(std::move(gr), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string path = dir_.file("chain.kiln");
  ASSERT_TRUE(format::WriteModelFile(m.value(), path).ok());
  auto loaded = Model::Load(path, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
}

TEST_F(VerifierTest, PlacementsOutsideTheirRegion) {
  p("d").offset = 192;
  ExpectRefused({"value 'd'", "offset 192", "region 1 (arena)", "past the arena's 192 bytes"});
  p("d").offset = 128;
  p("x").offset = 64;
  ExpectRefused({"value 'x'", "offset 64", "region 2 (input 0 'x')", "offset 0 of its region"});
  p("x").offset = 0;
  p("out2").offset = std::uint64_t{1} << 40;
  ExpectRefused({"value 'out2'", "region 5 (output 1 'out2')"});
  p("out2").offset = 0;
  p("a").region = 7;
  ExpectRefused({"value 'a'", "region 7", "regions 0..6"});
  p("a").region = 6;  // the host arena: only values written on the CPU
  ExpectRefused({"value 'a'", "region 6 (host arena)", "Add node 'add' writes it in device memory"});
  p("a").region = 1;
  p("a").offset = UINT64_MAX - 63;
  ExpectRefused({"value 'a'", "overflows"});
  p("a").offset = 0;
  EXPECT_TRUE(Verify().ok()) << Verify().ToString();
}

TEST_F(VerifierTest, IntermediateInInputOrOutputRegion) {
  p("a") = {2, 0, 64};
  ExpectRefused({"value 'a'", "region 2 (input 0 'x')", "holds only input 'x'"});
  p("a") = {5, 0, 64};
  ExpectRefused({"value 'a'", "holds only output 'out2'"});
  p("a") = {1, 0, 64};
  p("y") = {1, 0, 64};
  ExpectRefused({"value 'y'", "cannot live in the arena"});
}

TEST_F(VerifierTest, DuplicateInputAndConstantAsInput) {
  g().inputs().push_back(v("x"));
  ExpectRefused({"input 'x' is listed twice (graph inputs 0 and 2)"});
  g().inputs().pop_back();
  g().inputs().push_back(v("W"));
  ExpectRefused({"constant 'W' is listed as graph input 2"});
  g().inputs().pop_back();
  g().outputs().push_back(v("out"));
  ExpectRefused({"output 'out' is listed twice"});
}

TEST_F(VerifierTest, HugeOrWrongArenaSize) {
  for (std::uint64_t size : {UINT64_MAX, UINT64_MAX - 63, std::uint64_t{1} << 63, std::uint64_t{256}}) {
    model_.plan.arena_size = size;
    ExpectRefused({StrCat("arena_size ", size, " differs from the 192 bytes")});
  }
  // A placement that fits a near-2^64 arena: rounding up would wrap.
  model_.plan.arena_size = UINT64_MAX - 63;
  p("d").offset = UINT64_MAX - 127;
  ExpectRefused({"past the 192 bytes of all arena tensors"});
}

TEST_F(VerifierTest, UnalignedOffsets) {
  p("a").offset = 8;
  ExpectRefused({"value 'a'", "offset 8", "not 64-byte aligned"});
  p("a").offset = 0;
  p("d").offset = 100;
  ExpectRefused({"value 'd'", "offset 100", "not 64-byte aligned"});
}

TEST_F(VerifierTest, ConstantPlacementMustBeItsData) {
  p("W").offset = 64;  // C's bytes
  ExpectRefused({"value 'W'", "region 0 (constants)", "not there"});
  p("W").offset = 0;
  p("W").region = 1;
  ExpectRefused({"value 'W'", "constant cannot live in the arena"});
  p("W").region = 0;
  p("a").region = 0;
  ExpectRefused({"value 'a'", "only constants"});
}

TEST_F(VerifierTest, OutputRenamedToAnArenaTensor) {
  g().outputs()[0] = v("a");
  Status st = Verify();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'a'"), std::string::npos) << st.message();
  g().outputs()[0] = v("out");
  std::swap(g().outputs()[0], g().outputs()[1]);
  ExpectRefused({"holds only output"});
}

TEST_F(VerifierTest, SizeMustBeDTypeTimesShape) {
  p("a").size = 65;
  ExpectRefused({"value 'a'", "size 65", "differs from the 64 bytes of float32[2,8]"});
  p("a").size = 64;
  v("d")->set_shape({4, 8});
  ExpectRefused({"value 'd'", "differs from the 128 bytes of float32[4,8]"});
  v("d")->set_shape({std::int64_t{1} << 40, std::int64_t{1} << 40});
  ExpectRefused({"value 'd'", "64 GiB) per tensor"});
}

TEST_F(VerifierTest, ViewsAndLifetimes) {
  p("c").offset = 128;
  ExpectRefused({"Reshape node 'reshape'", "does not share its input 'b'"});
  p("c").offset = 64;
  // a (live until mul2, the last node) and d (tanh..sigmoid) on the same bytes
  p("a").offset = 128;
  ExpectRefused({"'a'", "'d'", "share bytes while both are live"});
  p("a").offset = 0;
  g().FindValue("d")->producer()->SetAttr(plan::kAliasAttr, ir::Attribute::Int(1));
  ExpectRefused({"Tanh node 'tanh'", "marked as a view"});
}

TEST_F(VerifierTest, EveryWrittenValueIsPlacedAndEveryPlacementNamed) {
  model_.plan.placements.erase("d");
  ExpectRefused({"value 'd' (written by Tanh node 'tanh') has no placement"});
  p("d") = {1, 128, 64};
  p("ghost") = {1, 0, 64};
  ExpectRefused({"unknown value 'ghost'"});
  model_.plan.placements.erase("ghost");
  model_.plan.const_size = 4096;
  ExpectRefused({"const_size 4096 differs", "192 bytes"});
}

TEST_F(VerifierTest, RolesOfGraphValues) {
  g().outputs()[1] = v("y");
  ExpectRefused({"graph output 1 'y' is also graph input 1"});
  g().outputs()[1] = v("out2");
  v("x")->set_dynamic_mask(1);
  ExpectRefused({"input 'x' is marked data-dependent"});
  v("x")->set_dynamic_mask(0);
  v("a")->set_dynamic_mask(4);
  ExpectRefused({"value 'a'", "beyond its rank 2"});
}

// Hostile plans written as real files (valid checksums): refused at load,
// before any allocation or kernel, by Model::Load and by ReadModelFile.
TEST_F(VerifierTest, HostileFilesAreRefusedByLoad) {
  std::vector<std::pair<std::function<void(format::CompiledModel&)>, std::string>> faults = {
      {[](format::CompiledModel& m) { m.plan.arena_size = UINT64_MAX; }, "arena_size 18446744073709551615"},
      {[](format::CompiledModel& m) { m.plan.placements["x"].offset = 4096; }, "value 'x' placed at offset 4096"},
      {[](format::CompiledModel& m) { m.plan.placements["a"] = {2, 0, 64}; }, "holds only input 'x'"},
      {[](format::CompiledModel& m) { m.graph->inputs().push_back(m.graph->FindValue("y")); }, "listed twice"},
  };
  for (auto& [fault, needle] : faults) {
    auto m = CompileGraph(BaseGraph(), {});
    ASSERT_TRUE(m.ok());
    fault(m.value());
    const std::string path = dir_.file("hostile.kiln");
    ASSERT_TRUE(format::WriteModelFile(m.value(), path).ok());
    auto loaded = Model::Load(path, {});
    ASSERT_FALSE(loaded.ok()) << needle;
    EXPECT_EQ(loaded.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(loaded.status().message().find(needle), std::string::npos) << loaded.status().message();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status().message();
    auto read = format::ReadModelFile(path);
    ASSERT_FALSE(read.ok());
    EXPECT_NE(read.status().message().find(needle), std::string::npos) << read.status().message();
  }
}

// What only re-inference sees: a recorded shape with the right byte size
// but the wrong dims, and an op version Kiln does not implement.
TEST_F(VerifierTest, LoadReinfersEveryNode) {
  auto m = CompileGraph(BaseGraph(), {});
  ASSERT_TRUE(m.ok());
  m.value().graph->FindValue("d")->set_shape({2, 8});
  const std::string path = dir_.file("reinfer.kiln");
  ASSERT_TRUE(format::WriteModelFile(m.value(), path).ok());
  auto loaded = Model::Load(path, {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("Tanh node 'tanh' output 'd' is recorded as float32[2,8] but infers to "
                                           "float32[4,4]"),
            std::string::npos)
      << loaded.status().message();

  auto m2 = CompileGraph(BaseGraph(), {});
  ASSERT_TRUE(m2.ok());
  m2.value().graph->FindValue("d")->producer()->set_since_version(99);
  ASSERT_TRUE(format::WriteModelFile(m2.value(), path).ok());
  loaded = Model::Load(path, {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("Tanh node 'tanh' has op version 99"), std::string::npos)
      << loaded.status().message();
}

TEST(GraphJson, WrongFieldTypesNameTheField) {
  struct Case {
    std::string json, needle;
  };
  const std::string values =
      R"("values":[{"name":"x","dtype":1,"shape":[2]},{"name":"y","dtype":1,"shape":[2]}])";
  const std::string nodes = R"("nodes":[{"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["y"],"attrs":{}}])";
  const std::string plan = R"("plan":{"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{}})";
  auto doc = [&](const std::string& v, const std::string& n, const std::string& p) {
    return R"({"format":"kiln-graph","graph":{"name":"g","opset":13,)" + v + "," + n +
           R"(,"inputs":["x"],"outputs":["y"]},)" + p + "}";
  };
  std::vector<Case> cases = {
      {doc(values, nodes, plan), ""},  // well-formed
      {doc(R"("values":[{"name":"x","dtype":"f32","shape":[2]}])", nodes, plan),
       "field 'graph.values[0].dtype' must be an integer, found string"},
      {doc(R"("values":[{"name":"x","dtype":1,"shape":[2.5]}])", nodes, plan),
       "field 'graph.values[0].shape[0]' must be an integer, found number"},
      {doc(R"("values":[{"name":7,"dtype":1,"shape":[2]}])", nodes, plan),
       "field 'graph.values[0].name' must be a string, found number"},
      {doc(values, R"("nodes":[{"name":"r","op":"Relu","domain":"","since":"14","inputs":["x"],"outputs":["y"],"attrs":{}}])", plan),
       "field 'graph.nodes[0].since' must be an integer, found string"},
      {doc(values, R"("nodes":[{"name":"r","op":"Relu","domain":"","since":14,"inputs":"x","outputs":["y"],"attrs":{}}])", plan),
       "field 'graph.nodes[0].inputs' must be an array, found string"},
      {doc(values, R"("nodes":[{"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["y"],"attrs":{"alpha":{"kind":"float","v":"x"}}}])", plan),
       "field 'graph.nodes[0].attrs['alpha'].v' must be a number, found string"},
      {doc(values, nodes, R"("plan":{"arena_size":-1,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{}})"),
       "field 'plan.arena_size' = -1 is negative"},
      {doc(values, nodes, R"("plan":{"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{"x":[2,0,"8"]}})"),
       "placement of 'x': field 'plan.placements['x'][2]' must be a non-negative integer, found string"},
      {doc(values, nodes, R"("plan":{"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{}})"),
       "field 'plan.arena_size' is missing"},
      {R"({"format":"kiln-graph","graph":[]})", "field 'graph' must be an object, found array"},
      {R"([1,2,3])", "the graph partition must be a JSON object, found array"},
      {"{\"format\":\"kiln-graph\",", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto m = format::ParseModelJson(c.json.data(), c.json.size(), nullptr, 0, nullptr);
    if (c.needle.empty()) {
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      continue;
    }
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(m.status().message().find(c.needle), std::string::npos) << m.status().message();
  }
}

TEST(GraphJson, InvalidUtf8NameIsAnErrorNotAThrow) {
  // (The importer refuses such names; a graph built in process can still
  // hold one.)
  auto m = CompileGraph(BaseGraph(), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  m.value().graph->AddValue(std::string("add\xff\xfe", 5), DType::kFloat32, {1});
  auto text = format::SerializeModelJson(m.value());
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("'add\\xff\\xfe'"), std::string::npos) << text.status().message();
  EXPECT_NE(text.status().message().find("not valid UTF-8"), std::string::npos) << text.status().message();
  test::TempDir dir;
  Status st = format::WriteModelFile(m.value(), dir.file("m.kiln"));
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.kiln")));
}

// Placement (format version 3): BaseGraph compiled for a target without
// Tanh. Hand-derived: tanh runs on the CPU; its input c is copied to the
// host (c_on_host), it writes d in host memory, and d is copied back
// (d_on_device) for sigmoid. The host arena (region 2 + 2 + 2 = 6) holds
// c_on_host and d, both live while tanh runs: 64 + 64 = 128 bytes.
class PlacementVerifierTest : public VerifierTest {
 protected:
  void SetUp() override {
    CompileOptions co;
    co.target = "sim:lack=Tanh";
    auto m = CompileGraph(BaseGraph(), co);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    path_ = dir_.file("placed.kiln");
    ASSERT_TRUE(format::WriteModelFile(m.value(), path_).ok());
    Parse(path_);
    ASSERT_TRUE(model_.graph);
  }
  ir::Node* node(const std::string& name) {
    for (auto& n : g().nodes()) {
      if (n->name() == name) return n.get();
    }
    return nullptr;
  }
};

TEST_F(PlacementVerifierTest, TheCompilerPlacesWhatTheTargetLacksOnTheCpu) {
  ASSERT_TRUE(Verify().ok()) << Verify().ToString();
  ASSERT_TRUE(node("tanh"));
  EXPECT_TRUE(ir::IsHostPlaced(*node("tanh")));
  int on_cpu = 0, to_host = 0, to_device = 0;
  for (auto& n : g().nodes()) {
    on_cpu += ir::IsHostPlaced(*n);
    to_host += ir::IsCopyToHost(*n);
    to_device += ir::IsCopyFromHost(*n);
  }
  EXPECT_EQ(on_cpu, 1);
  EXPECT_EQ(to_host, 1);
  EXPECT_EQ(to_device, 1);
  ASSERT_TRUE(v("c_on_host") && v("d_on_device"));
  EXPECT_EQ(node("tanh")->input(0), v("c_on_host"));
  EXPECT_EQ(node("sigmoid")->input(0), v("d_on_device"));
  EXPECT_EQ(model_.plan.host_arena_size, 128u);
  EXPECT_EQ(p("c_on_host").region, 6);
  EXPECT_EQ(p("d").region, 6);
  EXPECT_EQ(p("d_on_device").region, plan::kRegionArena);
}

TEST_F(PlacementVerifierTest, InconsistentPlacementsAreRefused) {
  node("tanh")->attrs().erase(ir::kPlaceAttr);
  ExpectRefused({"Tanh node 'tanh' runs on the target device but reads 'c_on_host', which lives in host memory"});
}

TEST_F(PlacementVerifierTest, OnlyCpuIsAPlacement) {
  node("tanh")->SetAttr(ir::kPlaceAttr, ir::Attribute::String("gpu"));
  ExpectRefused({"Tanh node 'tanh'", "attribute 'kiln.device' must be the string \"cpu\""});
}

TEST_F(PlacementVerifierTest, ACpuNodeReadingDeviceMemoryIsRefused) {
  node("mul2")->SetAttr(ir::kPlaceAttr, ir::Attribute::String("cpu"));
  ExpectRefused({"Mul node 'mul2' runs on the CPU but reads 'a', which lives in device memory"});
}

TEST_F(PlacementVerifierTest, CopiesAndControlFlowStayOnTheTarget) {
  for (auto& n : g().nodes()) {
    if (ir::IsCopyToHost(*n)) n->SetAttr(ir::kPlaceAttr, ir::Attribute::String("cpu"));
  }
  ExpectRefused({"MemcpyToHost node 'copy_to_host_c' cannot be placed on the CPU"});
}

TEST_F(PlacementVerifierTest, HostValuesLiveInTheHostArenaOnly) {
  p("d").region = plan::kRegionArena;
  ExpectRefused({"value 'd'", "region 1 (arena)", "Tanh node 'tanh' writes it in host memory"});
}

TEST_F(PlacementVerifierTest, DeviceValuesStayOutOfTheHostArena) {
  p("d_on_device").region = 6;
  ExpectRefused({"value 'd_on_device'", "region 6 (host arena)", "writes it in device memory"});
}

TEST_F(PlacementVerifierTest, TheHostArenaSizeIsWhatItsPlacementsNeed) {
  model_.plan.host_arena_size = 64;
  ExpectRefused({"value '", "past the host arena's 64 bytes"});
  model_.plan.host_arena_size = 1u << 30;
  ExpectRefused({"plan host_arena_size 1073741824 differs from the 128 bytes its host arena placements need"});
}

TEST_F(PlacementVerifierTest, LiveHostTensorsMayNotShareBytes) {
  p("d").offset = 0;
  p("c_on_host").offset = 0;
  model_.plan.host_arena_size = 64;
  ExpectRefused({"share bytes while both are live", "Tanh node 'tanh'"});
}

TEST_F(PlacementVerifierTest, OutputsAreNeverHostValues) {
  // sigmoid reads d (host) directly and writes output 'out' on the CPU.
  node("sigmoid")->SetInput(0, v("d"));
  node("sigmoid")->SetAttr(ir::kPlaceAttr, ir::Attribute::String("cpu"));
  ExpectRefused({"graph output 'out' is written into host memory by Sigmoid node 'sigmoid'"});
}

}  // namespace
}  // namespace kiln
