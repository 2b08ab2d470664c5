// The graph API's weights from the caller's files: AddConstantFromFile (read
// when added, stored like any constant) and AddFileConstant (a file_id the
// caller resolves at load from a file or memory). Expected values are
// derived by hand: y = x + w with the w bytes written here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "api/compiler.h"
#include "format/kiln_file.h"
#include "kiln/graph.h"
#include "kiln/runtime.h"
#include "test_util.h"
#include "weights/sha256.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::vector<float> kW = {0.5f, -1, 2, 4, -8, 16};
const std::vector<float> kX = {1, 2, 3, 4, 5, 6};
const std::vector<float> kY = {1.5f, 1, 5, 8, -3, 22};  // kX + kW, by hand

// `pad` bytes of 0xEE, then kW as float32.
std::string WriteTable(const test::TempDir& dir, const std::string& name, std::size_t pad) {
  std::string bytes(pad, '\xEE');
  bytes.append(reinterpret_cast<const char*>(kW.data()), kW.size() * sizeof(float));
  const std::string p = dir.file(name);
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

// y = x + w, w from `make`.
template <typename F>
Graph AddGraphWith(F make) {
  Graph g("fw");
  auto x = g.AddInput("x", DType::kFloat32, {2, 3});
  Result<Graph::Tensor> w = make(g);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  auto y = g.AddOp("Add", {x, w.value()}, {}, 1, "add");
  EXPECT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_TRUE(g.AddOutput(y.value()[0], "y").ok());
  return g;
}

std::vector<float> RunSession(Session& s, std::uint32_t id) {
  std::vector<float> y(6, 0);
  Status st = s.RunGraph(id, {TensorRef::Of(kX.data(), {2, 3})}, {TensorRef::Of(y.data(), {2, 3})});
  EXPECT_TRUE(st.ok()) << st.ToString();
  return y;
}

TEST(GraphWeights, ConstantFromFileIsStoredInEveryMode) {
  test::TempDir dir;
  const std::string table = WriteTable(dir, "table.bin", 12);
  const std::string digest = weights::Sha256Hex(kW.data(), kW.size() * sizeof(float));
  for (int mode : {0, 1, 2}) {
    SessionOptions so;
    so.external_weight = mode;
    if (mode) so.external_weight_dir = dir.file("store" + std::to_string(mode));
    Session s(so);
    auto id = s.AddGraph(AddGraphWith([&](Graph& g) {
      return g.AddConstantFromFile("w", DType::kFloat32, {2, 3}, table, 12);
    }));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(s.CompileGraph(*id).ok());
    auto sum = s.GetCompiledGraphSummary(*id);
    ASSERT_TRUE(sum.ok());
    if (mode == 0) {
      EXPECT_TRUE(sum->external_weights.empty());
      EXPECT_GE(sum->embedded_weight_bytes, 24u);
    } else {
      // The bytes went into the store: its entry hashes to them.
      ASSERT_EQ(sum->external_weights.size(), 1u) << mode;
      EXPECT_EQ(sum->external_weights[0].id, digest);
      EXPECT_EQ(sum->external_weights[0].size, 24u);
      EXPECT_TRUE(sum->external_weights[0].file_id.empty());
      EXPECT_TRUE(fs::exists(fs::path(so.external_weight_dir) / sum->external_weights[0].path));
    }
    EXPECT_EQ(RunSession(s, *id), kY) << "mode " << mode;
  }
}

TEST(GraphWeights, ConstantFromFileErrorsNameTheFile) {
  test::TempDir dir;
  const std::string table = WriteTable(dir, "table.bin", 0);
  Graph g("e");
  auto missing = g.AddConstantFromFile("w", DType::kFloat32, {2, 3}, dir.file("nope.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos) << missing.status().ToString();
  auto shrt = g.AddConstantFromFile("w", DType::kFloat32, {2, 3}, table, 4);  // needs [4, 28) of 24
  ASSERT_FALSE(shrt.ok());
  EXPECT_NE(shrt.status().message().find("has 24 bytes"), std::string::npos) << shrt.status().ToString();
  EXPECT_NE(shrt.status().message().find("needs [4, 28)"), std::string::npos) << shrt.status().ToString();
  auto d = g.AddConstantFromFile("w", DType::kFloat32, {2, 3}, dir.file(""));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos) << d.status().ToString();
  auto dyn = g.AddConstantFromFile("w", DType::kFloat32, {-1, 3}, table);
  EXPECT_FALSE(dyn.ok());
}

TEST(GraphWeights, FileIdResolvedFromAFileOrMemoryAtLoad) {
  test::TempDir dir;
  const std::string table = WriteTable(dir, "table.bin", 40);
  std::vector<unsigned char> mem(40, 0xEE);
  mem.resize(40 + 24);
  std::memcpy(mem.data() + 40, kW.data(), 24);
  for (int how : {0, 1}) {
    for (int mode : {0, 1}) {  // the external-weight mode never touches a file_id weight
      SessionOptions so;
      so.external_weight = mode;
      if (mode) so.external_weight_dir = dir.file("store");
      if (how == 0) so.load.SetWeightFile("tbl", table);
      else so.load.SetWeightFileAddress("tbl", mem.data(), mem.size());
      Session s(so);
      auto id = s.AddGraph(AddGraphWith([](Graph& g) {
        return g.AddFileConstant("w", DType::kFloat32, {2, 3}, "tbl", 40);
      }));
      ASSERT_TRUE(id.ok());
      ASSERT_TRUE(s.CompileGraph(*id).ok());
      auto sum = s.GetCompiledGraphSummary(*id);
      ASSERT_TRUE(sum.ok());
      ASSERT_EQ(sum->external_weights.size(), 1u);
      EXPECT_EQ(sum->external_weights[0].file_id, "tbl");
      EXPECT_TRUE(sum->external_weights[0].path.empty());
      EXPECT_EQ(sum->external_weights[0].offset, 40u);
      EXPECT_EQ(RunSession(s, *id), kY) << "how " << how << " mode " << mode;
    }
  }
}

// A float16 graph-API FileConstant (resolved at load) read by a float16
// graph computed in float32: one Cast after it, y = x + w exact in float16.
TEST(GraphWeights, HalfFileIdWeightInAHalfGraph) {
  const std::vector<float> xs = {1, 2, 3, 4, 5, 6}, ws = {0.5f, -1, 0.25f, 8, -0.125f, 2};
  std::vector<std::uint16_t> x16, w16, want;
  for (int i = 0; i < 6; ++i) {
    x16.push_back(FloatToHalf(xs[i]));
    w16.push_back(FloatToHalf(ws[i]));
    want.push_back(FloatToHalf(xs[i] + ws[i]));
  }
  SessionOptions so;
  so.load.SetWeightFileAddress("tbl", w16.data(), w16.size() * 2);
  Session s(so);
  Graph g("half");
  auto x = g.AddInput("x", DType::kFloat16, {2, 3});
  auto w = g.AddFileConstant("w", DType::kFloat16, {2, 3}, "tbl");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto y = g.AddOp("Add", {x, w.value()}, {}, 1, "add");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_TRUE(g.AddOutput(y.value()[0], "y").ok());
  auto id = s.AddGraph(std::move(g));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(s.CompileGraph(*id).ok());
  std::vector<std::uint16_t> out(6, 0);
  Status st = s.RunGraph(*id, {{x16.data(), DType::kFloat16, {2, 3}}}, {{out.data(), DType::kFloat16, {2, 3}}});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out, want);
}

TEST(GraphWeights, FileIdErrorsNameTheIdNodeAndSizes) {
  test::TempDir dir;
  Graph g("bad");
  for (const std::string& id : {std::string(), std::string(300, 'a'), std::string("a\nb")}) {
    auto t = g.AddFileConstant("w", DType::kFloat32, {2, 3}, id);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("printable ASCII"), std::string::npos) << t.status().ToString();
  }
  // Not given at load.
  {
    Session s;
    auto id = s.AddGraph(AddGraphWith([](Graph& g) { return g.AddFileConstant("w", DType::kFloat32, {2, 3}, "tbl"); }));
    ASSERT_TRUE(id.ok());
    Status st = s.LoadGraph(*id);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("FileConstant node 'w' reads file_id 'tbl'"), std::string::npos) << st.ToString();
  }
  // A file too short for offset + length, and memory too small.
  const std::string table = WriteTable(dir, "table.bin", 0);
  std::vector<float> small(5);
  for (int how : {0, 1}) {
    SessionOptions so;
    if (how == 0) so.load.SetWeightFile("tbl", table);
    else so.load.SetWeightFileAddress("tbl", small.data(), small.size() * sizeof(float));
    Session s(so);
    auto id = s.AddGraph(AddGraphWith([&](Graph& g) {
      return g.AddFileConstant("w", DType::kFloat32, {2, 3}, "tbl", how == 0 ? 8 : 0);
    }));
    ASSERT_TRUE(id.ok());
    Status st = s.LoadGraph(*id);
    ASSERT_FALSE(st.ok());
    const std::string want = how == 0 ? "needs [8, 32)" : "24 bytes required, 20 provided";
    EXPECT_NE(st.message().find(want), std::string::npos) << st.ToString();
  }
}

TEST(GraphWeights, FileIdSurvivesAKilnFileAndEveryLoadMode) {
  test::TempDir dir;
  const std::string table = WriteTable(dir, "table.bin", 8);
  Graph g = AddGraphWith([](Graph& g) { return g.AddFileConstant("w", DType::kFloat32, {2, 3}, "tbl", 8); });
  auto m = CompileGraph(g.TakeIr(), CompileOptions{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string path = dir.file("fw.kiln");
  ASSERT_TRUE(format::WriteModelFile(m.value(), path).ok());
  auto f = format::ReadModelFile(path);
  ASSERT_TRUE(f.ok());
  auto ws = ListExternalWeights(*f->model.graph);
  ASSERT_TRUE(ws.ok());
  ASSERT_EQ(ws->size(), 1u);
  EXPECT_EQ((*ws)[0].file_id, "tbl");
  EXPECT_TRUE((*ws)[0].location.empty());
  EXPECT_TRUE(f->model.weight_dir.empty());  // no weight directory to record
  for (WeightLoadMode wm : {WeightLoadMode::kAuto, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
    LoadOptions lo;
    lo.weight_load_mode = wm;
    lo.SetWeightFile("tbl", table);
    auto model = Model::Load(path, lo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> y(6);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(kX.data(), {2, 3})}, {TensorRef::Of(y.data(), {2, 3})}).ok());
    EXPECT_EQ(y, kY) << static_cast<int>(wm);
  }
}

}  // namespace
}  // namespace kiln
