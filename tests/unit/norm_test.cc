// BatchNormalization: inference with constant and runtime statistics,
// training mode's running statistics, spatial=0, and shape errors.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln
