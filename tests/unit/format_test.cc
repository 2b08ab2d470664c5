// The .kiln file: round trip, and every kind of damage is detected.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "test_util.h"

namespace kiln {
namespace {

std::vector<char> ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void WriteAll(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// y = relu(x * w + b)   (w, b constants)
Result<format::CompiledModel> SmallModel() {
  auto g = std::make_unique<ir::Graph>();
  g->set_name("small");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 3}, {1, 2, 3, 4, 5, 6}));
  ir::Value* b = g->AddConstant("b", test::F32({3}, {-10, 0, 10}));
  ir::Value* m = g->AddValue("m");
  ir::Value* a = g->AddValue("a");
  ir::Value* y = g->AddValue("y");
  g->AddNode("Mul", "mul", {x, w}, {m});
  g->AddNode("Add", "add", {m, b}, {a});
  g->AddNode("Relu", "relu", {a}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  return CompileGraph(std::move(g), {});
}

class FormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = SmallModel();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    path_ = dir_.file("m.kiln");
    ASSERT_TRUE(format::WriteModelFile(m.value(), path_).ok());
    bytes_ = ReadAll(path_);
  }
  test::TempDir dir_;
  std::string path_;
  std::vector<char> bytes_;
};

TEST_F(FormatTest, RoundTripRunsWithHandComputedResult) {
  auto model = Model::Load(path_, {});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<float> x = {1, 1, 1, 1, 1, 1}, y(6, -1);
  ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {2, 3})}, {TensorRef::Of(y.data(), {2, 3})}).ok());
  // relu(x*w + b) with x = 1: [1-10, 2, 3+10, 4-10, 5, 6+10]
  EXPECT_EQ(y, (std::vector<float>{0, 2, 13, 0, 5, 16}));
}

TEST_F(FormatTest, ConstantsReadInPlaceFromAMappingWithoutHugePages) {
  auto model = Model::Load(path_, {});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // b is read in place by the Add kernel: it points into the file mapping,
  // which MapReadOnly advised MADV_NOHUGEPAGE ("nh").
  const void* b = (*model)->ConstantData("b");
  ASSERT_NE(b, nullptr);
  const std::string flags = test::VmFlagsOf(b);
  EXPECT_NE(flags.find(" nh"), std::string::npos) << flags;
}

TEST_F(FormatTest, WeightsPartitionIsPageAligned) {
  auto f = format::ReadModelFile(path_);
  ASSERT_TRUE(f.ok());
  format::PartitionEntry e[2];
  std::memcpy(e, bytes_.data() + sizeof(format::FileHeader), sizeof(e));
  for (auto& p : e) {
    if (p.type == static_cast<std::uint32_t>(format::PartitionType::kWeights)) EXPECT_EQ(p.offset % 4096, 0u);
  }
}

TEST_F(FormatTest, EveryHeaderAndTableByteFlipIsDetected) {
  const std::size_t n = sizeof(format::FileHeader) + 2 * sizeof(format::PartitionEntry);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<char> b = bytes_;
    b[i] ^= 0x5a;
    WriteAll(path_, b);
    auto r = format::ReadModelFile(path_);
    ASSERT_FALSE(r.ok()) << "flip of byte " << i << " went unnoticed";
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
    EXPECT_NE(r.status().message().find(path_), std::string::npos);
  }
}

TEST_F(FormatTest, GraphAndWeightCorruptionIsDetected) {
  for (std::size_t i : {std::size_t{200}, bytes_.size() - 3}) {
    std::vector<char> b = bytes_;
    b[i] ^= 0x01;
    WriteAll(path_, b);
    auto r = format::ReadModelFile(path_);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().ToString();
  }
}

TEST_F(FormatTest, TruncatedFilesAreRejected) {
  for (std::size_t len : {std::size_t{0}, std::size_t{10}, std::size_t{64}, std::size_t{100}, bytes_.size() - 1}) {
    WriteAll(path_, std::vector<char>(bytes_.begin(), bytes_.begin() + static_cast<long>(len)));
    auto r = Model::Load(path_, {});
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
  }
}

TEST_F(FormatTest, MissingFileIsNotFound) {
  auto r = Model::Load(dir_.file("nope.kiln"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// A FIFO (or directory) given as the model is refused at once: opening a
// FIFO for reading used to block until a writer appeared.
TEST_F(FormatTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = dir_.file("fifo.kiln");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_directory(dir_.file("dir.kiln"));
  for (const std::string& p : {fifo, dir_.file("dir.kiln")}) {
    auto r = Model::Load(p, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(format::ReadModelFile(p).ok());
  }
}

TEST_F(FormatTest, WriteIsAtomic) {
  // A failed write (directory as target) leaves the old file intact and no temp.
  auto m = SmallModel();
  ASSERT_TRUE(m.ok());
  std::filesystem::create_directory(dir_.file("d"));
  EXPECT_FALSE(format::WriteModelFile(m.value(), dir_.file("d")).ok());
  for (auto& e : std::filesystem::directory_iterator(dir_.file(""))) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  EXPECT_EQ(ReadAll(path_), bytes_);
}

TEST_F(FormatTest, ExecuteChecksBindings) {
  auto model = Model::Load(path_, {});
  ASSERT_TRUE(model.ok());
  std::vector<float> x(6), y(6);
  std::vector<double> xd(6);
  auto& m = *model.value();
  Status s = m.Execute({}, {TensorRef::Of(y.data(), {2, 3})});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 1 inputs, got 0"), std::string::npos) << s.message();
  s = m.Execute({TensorRef::Of(x.data(), {3, 2})}, {TensorRef::Of(y.data(), {2, 3})});
  EXPECT_NE(s.message().find("expected shape [2,3], got [3,2]"), std::string::npos) << s.message();
  s = m.Execute({TensorRef::Of(xd.data(), {2, 3})}, {TensorRef::Of(y.data(), {2, 3})});
  EXPECT_NE(s.message().find("expected dtype float32, got float64"), std::string::npos) << s.message();
}

TEST_F(FormatTest, AddressRefreshRewritesOnlyChangedBindings) {
  auto model = Model::Load(path_, {});
  ASSERT_TRUE(model.ok());
  auto& m = *model.value();
  std::vector<float> x1(6, 1), x2(6, 2), y1(6), y2(6);
  ASSERT_TRUE(m.Execute({TensorRef::Of(x1.data(), {2, 3})}, {TensorRef::Of(y1.data(), {2, 3})}).ok());
  EXPECT_EQ(m.last_stats().slots_refreshed, 2u);  // x read by Mul, y written by Relu
  ASSERT_TRUE(m.Execute({TensorRef::Of(x1.data(), {2, 3})}, {TensorRef::Of(y1.data(), {2, 3})}).ok());
  EXPECT_EQ(m.last_stats().slots_refreshed, 0u);
  ASSERT_TRUE(m.Execute({TensorRef::Of(x2.data(), {2, 3})}, {TensorRef::Of(y2.data(), {2, 3})}).ok());
  EXPECT_EQ(m.last_stats().slots_refreshed, 2u);
  // x = 2: relu(2w + b) = [0, 4, 16, 0, 10, 22]
  EXPECT_EQ(y2, (std::vector<float>{0, 4, 16, 0, 10, 22}));
  EXPECT_EQ(y1, (std::vector<float>{0, 2, 13, 0, 5, 16}));
}

}  // namespace
}  // namespace kiln
