#include <gtest/gtest.h>

#include "ir/graph.h"

namespace kiln::ir {

TEST(Graph, TopologicalSortOrdersProducersFirst) {
  Graph g;
  Value* x = g.AddValue("x", DType::kFloat32, {2});
  g.inputs().push_back(x);
  Value* a = g.AddValue("a");
  Value* b = g.AddValue("b");
  g.AddNode("Relu", "second", {a}, {b});
  g.AddNode("Relu", "first", {x}, {a});
  g.outputs().push_back(b);
  ASSERT_TRUE(g.TopologicalSort().ok());
  EXPECT_EQ(g.nodes()[0]->name(), "first");
  EXPECT_EQ(g.nodes()[1]->name(), "second");
  EXPECT_TRUE(g.Verify().ok());
}

}  // namespace kiln::ir
