// BatchNormalization: inference with constant and runtime statistics,
// training mode's running statistics, spatial=0, and shape errors.
// LayerNormalization and InstanceNormalization.
#include <gtest/gtest.h>

#include <cmath>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::Int;
using test::NodeRunner;
using test::Values;

// x: channel 0 = [1, 2], channel 1 = [3, 4]; scale [1, 2], B [0, 1].
std::vector<test::In> Inputs(test::In mean, test::In var) {
  return {F32T({1, 2, 1, 2}, {1, 2, 3, 4}), F32T({2}, {1, 2}), F32T({2}, {0, 1}), std::move(mean), std::move(var)};
}

void ExpectFloats(const Result<std::vector<HostTensorPtr>>& r, int j, const std::vector<float>& want) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float> got = Values<float>(r.value()[j]);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "output " << j << " element " << i;
}

TEST(BatchNorm, InferenceWithConstantStatistics) {
  NodeRunner r("BatchNormalization", 15, Inputs(F32T({2}, {1.5f, 3.5f}), F32T({2}, {0.25f, 0.25f})));
  r.Attr("epsilon", ir::Attribute::Float(0));
  // ch0: (x - 1.5) / 0.5; ch1: (x - 3.5) / 0.5 * 2 + 1
  ExpectFloats(r.Run(), 0, {-1, 1, -1, 3});
}

TEST(BatchNorm, InferenceWithRuntimeStatistics) {
  NodeRunner r("BatchNormalization", 9, Inputs({DType::kFloat32, {2}}, {DType::kFloat32, {2}}));
  r.Attr("epsilon", ir::Attribute::Float(0));
  ExpectFloats(r.Run({F32T({2}, {1.5f, 3.5f}), F32T({2}, {0.25f, 0.25f})}), 0, {-1, 1, -1, 3});
}

TEST(BatchNorm, TrainingModeUpdatesRunningStatistics) {
  NodeRunner r("BatchNormalization", 15, Inputs(F32T({2}, {0, 0}), F32T({2}, {1, 1})), 3);
  r.Attr("epsilon", ir::Attribute::Float(0)).Attr("training_mode", Int(1));
  auto out = r.Run();
  // Batch statistics: mean [1.5, 3.5], variance [0.25, 0.25] (population).
  ExpectFloats(out, 0, {-1, 1, -1, 3});
  ExpectFloats(out, 1, {0.15f, 0.35f});     // 0.9 * 0 + 0.1 * mean
  ExpectFloats(out, 2, {0.925f, 0.925f});   // 0.9 * 1 + 0.1 * 0.25
}

TEST(BatchNorm, Version7NonSpatialNormalisesPerElement) {
  NodeRunner r("BatchNormalization", 7,
               {F32T({1, 1, 2}, {5, 7}), F32T({1, 2}, {1, 1}), F32T({1, 2}, {0, 0}), F32T({1, 2}, {1, 2}),
                F32T({1, 2}, {1, 1})});
  r.Attr("epsilon", ir::Attribute::Float(0)).Attr("spatial", Int(0));
  ExpectFloats(r.Run(), 0, {4, 5});
}

TEST(BatchNorm, WrongStatisticsShapeNamesTheInput) {
  NodeRunner r("BatchNormalization", 15, Inputs(F32T({3}, {0, 0, 0}), F32T({2}, {1, 1})));
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input_mean"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("BatchNormalization node 'node'"), std::string::npos) << st.message();
}

// Rows [1, 2, 3] and [2, 4, 6]: means 2 and 4, variances 2/3 and 8/3.
TEST(LayerNorm, LastAxisWithStatisticsOutputs) {
  NodeRunner r("LayerNormalization", 17, {F32T({2, 3}, {1, 2, 3, 2, 4, 6}), F32T({3}, {1, 2, 1}), F32T({3}, {0, 0, 1})}, 3);
  r.Attr("epsilon", ir::Attribute::Float(0));
  auto out = r.Run();
  const float a = 1 / std::sqrt(2.f / 3), b = 1 / std::sqrt(8.f / 3);
  ExpectFloats(out, 0, {-a, 0, a + 1, -2 * b, 0, 2 * b + 1});
  ExpectFloats(out, 1, {2, 4});
  ExpectFloats(out, 2, {a, b});
  EXPECT_EQ(r.out_shape(1), (Shape{2, 1}));
}

TEST(LayerNorm, AxisZeroAndBroadcastScale) {
  // All four elements [0, 2, 4, 6]: mean 3, variance 5; scalar-like Scale [1] = 2, no B.
  NodeRunner r("LayerNormalization", 17, {F32T({2, 2}, {0, 2, 4, 6}), F32T({1}, {2})});
  r.Attr("axis", Int(0)).Attr("epsilon", ir::Attribute::Float(0));
  const float s = 2 / std::sqrt(5.f);
  ExpectFloats(r.Run(), 0, {-3 * s, -s, s, 3 * s});
}

TEST(LayerNorm, Errors) {
  NodeRunner axis("LayerNormalization", 17, {F32T({2, 2}, {0, 1, 2, 3}), F32T({2}, {1, 1})});
  axis.Attr("axis", Int(2));
  Status st = axis.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'axis'"), std::string::npos) << st.message();
  NodeRunner scale("LayerNormalization", 17, {F32T({2, 2}, {0, 1, 2, 3}), F32T({3}, {1, 1, 1})});
  st = scale.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Scale"), std::string::npos) << st.message();
  NodeRunner stash("LayerNormalization", 17, {F32T({2, 2}, {0, 1, 2, 3}), F32T({2}, {1, 1})});
  stash.Attr("stash_type", Int(7));
  st = stash.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'stash_type'"), std::string::npos) << st.message();
}

TEST(InstanceNorm, PerSampleAndChannel) {
  // Channel 0 = [1, 3] (mean 2, variance 1), channel 1 = [2, 4] (mean 3, variance 1).
  NodeRunner r("InstanceNormalization", 6, {F32T({1, 2, 1, 2}, {1, 3, 2, 4}), F32T({2}, {2, 5}), F32T({2}, {1, -1})});
  r.Attr("epsilon", ir::Attribute::Float(0));
  ExpectFloats(r.Run(), 0, {-1, 3, -6, 4});
  NodeRunner v1("InstanceNormalization", 1, {F32T({1, 1, 4}, {0, 0, 4, 4}), F32T({1}, {1}), F32T({1}, {0})});
  v1.Attr("epsilon", ir::Attribute::Float(0)).Attr("consumed_inputs", test::Ints({}));
  ExpectFloats(v1.Run(), 0, {-1, -1, 1, 1});
  NodeRunner bad("InstanceNormalization", 6, {F32T({1, 2, 2}, {1, 2, 3, 4}), F32T({3}, {1, 1, 1}), F32T({2}, {0, 0})});
  Status st = bad.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("scale"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln
