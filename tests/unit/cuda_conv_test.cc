// Which Conv nodes the CUDA backend takes and their cuDNN geometry
// (src/backends/cuda/conv_params.h), hand-derived. No GPU.
#include <gtest/gtest.h>

#include "backends/cuda/conv_params.h"
#include "ir/graph.h"

namespace kiln::cuda {
namespace {

TEST(CudaConvPlan, GeometryFromAttributes) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Conv", "conv", {}, {});
  n->SetAttr("pads", ir::Attribute::Ints({1, 2, 1, 2}));
  n->SetAttr("strides", ir::Attribute::Ints({2, 1}));
  n->SetAttr("dilations", ir::Attribute::Ints({1, 2}));
  // H: (9 + 2 - 3) / 2 + 1 = 5; W: (10 + 4 - (2 * (3 - 1) + 1)) / 1 + 1 = 10.
  auto p = ConvPlanFor(*n, {2, 4, 9, 10}, {8, 4, 3, 3}, true, {8}, {2, 8, 5, 10});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->n, 2);
  EXPECT_EQ(p->c, 4);
  EXPECT_EQ(p->k, 8);
  EXPECT_EQ(p->pad_h, 1);
  EXPECT_EQ(p->pad_w, 2);
  EXPECT_EQ(p->stride_h, 2);
  EXPECT_EQ(p->dil_w, 2);
  EXPECT_EQ(p->out_h, 5);
  EXPECT_EQ(p->out_w, 10);
  EXPECT_TRUE(p->has_bias);
  // Depthwise: group = C.
  ir::Node* dw = g.AddNode("Conv", "dw", {}, {});
  dw->SetAttr("group", ir::Attribute::Int(6));
  dw->SetAttr("auto_pad", ir::Attribute::String("SAME_UPPER"));
  auto q = ConvPlanFor(*dw, {1, 6, 7, 7}, {6, 1, 3, 3}, false, {}, {1, 6, 7, 7});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->group, 6);
  EXPECT_EQ(q->pad_h, 1);
}

TEST(CudaConvPlan, RefusesWhatCudnnCannotTake) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Conv", "conv", {}, {});
  n->SetAttr("pads", ir::Attribute::Ints({0, 0, 1, 1}));  // asymmetric
  auto p = ConvPlanFor(*n, {1, 3, 8, 8}, {4, 3, 2, 2}, false, {}, {1, 4, 8, 8});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("asymmetric"), std::string::npos) << p.status().message();
  ir::Node* same = g.AddNode("Conv", "same", {}, {});  // even kernel, SAME_UPPER: total pad 1
  same->SetAttr("auto_pad", ir::Attribute::String("SAME_UPPER"));
  EXPECT_FALSE(ConvPlanFor(*same, {1, 3, 8, 8}, {4, 3, 2, 2}, false, {}, {1, 4, 8, 8}).ok());
  ir::Node* c1 = g.AddNode("Conv", "c1", {}, {});
  EXPECT_FALSE(ConvPlanFor(*c1, {1, 3, 8}, {4, 3, 3}, false, {}, {1, 4, 6}).ok());  // 1-D
  EXPECT_FALSE(ConvPlanFor(*c1, {1, 3, 8, 8}, {4, 3, 3, 3}, false, {}, {1, 4, 7, 7}).ok());  // wrong Y
  EXPECT_FALSE(ConvPlanFor(*c1, {1, 3, 8, 8}, {4, 3, 3, 3}, true, {3}, {1, 4, 6, 6}).ok());  // bias
  ir::Node* nhwc = g.AddNode("Conv", "nhwc", {}, {});
  nhwc->SetAttr("kiln.nhwc", ir::Attribute::Int(1));
  EXPECT_FALSE(ConvPlanFor(*nhwc, {1, 3, 8, 8}, {4, 3, 3, 3}, false, {}, {1, 4, 6, 6}).ok());
}

}  // namespace
}  // namespace kiln::cuda
