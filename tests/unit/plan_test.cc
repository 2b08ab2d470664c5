// Memory planning: liveness-based reuse, the lower bound, views as aliases.
#include <gtest/gtest.h>

#include "plan/memory_plan.h"
#include "test_util.h"

namespace kiln {
namespace {

// x -> Relu -> Relu -> ... -> y, n nodes of `elems` floats each.
std::unique_ptr<ir::Graph> Chain(int n, std::int64_t elems) {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* cur = g->AddValue("x", DType::kFloat32, {elems});
  g->inputs().push_back(cur);
  for (int i = 0; i < n; ++i) {
    ir::Value* next = g->AddValue("r" + std::to_string(i), DType::kFloat32, {elems});
    g->AddNode("Relu", "relu" + std::to_string(i), {cur}, {next});
    cur = next;
  }
  g->outputs().push_back(cur);
  test::SetLatestVersions(*g);
  return g;
}

TEST(MemoryPlan, ChainReusesTwoBuffers) {
  auto g = Chain(6, 1024);  // 5 intermediates of 4 KiB, the 6th is the output
  auto plan = plan::PlanMemory(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->no_reuse_size, 5u * 4096);
  EXPECT_EQ(plan->lower_bound, 2u * 4096);  // producer and consumer overlap
  EXPECT_EQ(plan->arena_size, 2u * 4096);
  EXPECT_EQ(plan->placements.at("x").region, plan::kRegionIoBase);
  EXPECT_EQ(plan->placements.at("r5").region, plan::kRegionIoBase + 1);
  // Neighbours never share bytes.
  for (int i = 0; i + 1 < 5; ++i) {
    EXPECT_NE(plan->placements.at("r" + std::to_string(i)).offset,
              plan->placements.at("r" + std::to_string(i + 1)).offset);
  }
}

TEST(MemoryPlan, LiveValuesNeverOverlap) {
  // A diamond: a = relu(x); b = relu(a); c = relu(a); y = b + c. a, b, c
  // are all live while computing c.
  ir::Graph g;
  ir::Value* x = g.AddValue("x", DType::kFloat32, {256});
  g.inputs().push_back(x);
  auto v = [&](const char* n) { return g.AddValue(n, DType::kFloat32, {256}); };
  ir::Value *a = v("a"), *b = v("b"), *c = v("c"), *y = v("y");
  g.AddNode("Relu", "n1", {x}, {a});
  g.AddNode("Relu", "n2", {a}, {b});
  g.AddNode("Relu", "n3", {a}, {c});
  g.AddNode("Add", "n4", {b, c}, {y});
  g.outputs().push_back(y);
  test::SetLatestVersions(g);
  auto plan = plan::PlanMemory(g);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->lower_bound, 3u * 1024);
  EXPECT_EQ(plan->arena_size, 3u * 1024);
  std::set<std::uint64_t> offsets = {plan->placements.at("a").offset, plan->placements.at("b").offset,
                                     plan->placements.at("c").offset};
  EXPECT_EQ(offsets.size(), 3u);
}

TEST(MemoryPlan, UnresolvedShapeIsAnError) {
  auto g = Chain(2, 16);
  g->values()[1]->set_shape({-1});
  auto plan = plan::PlanMemory(*g);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("unresolved shape"), std::string::npos) << plan.status().ToString();
}

}  // namespace
}  // namespace kiln
