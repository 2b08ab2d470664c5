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

// --- hostile input: UTF-8 names and typed attribute getters --------------

#include "common/utf8.h"

TEST(Utf8, AcceptsWellFormedSequences) {
  using kiln::FindInvalidUtf8;
  EXPECT_EQ(FindInvalidUtf8(""), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("conv_1/weight:0"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("caf\xc3\xa9"), std::string_view::npos);            // U+00E9
  EXPECT_EQ(FindInvalidUtf8("\xe2\x82\xac"), std::string_view::npos);           // U+20AC
  EXPECT_EQ(FindInvalidUtf8("\xed\x9f\xbf"), std::string_view::npos);           // U+D7FF, last before surrogates
  EXPECT_EQ(FindInvalidUtf8("\xf0\x9f\x98\x80"), std::string_view::npos);       // U+1F600
  EXPECT_EQ(FindInvalidUtf8("\xf4\x8f\xbf\xbf"), std::string_view::npos);       // U+10FFFF
}

TEST(Utf8, ReportsTheFirstBadByte) {
  using kiln::FindInvalidUtf8;
  EXPECT_EQ(FindInvalidUtf8("ab\xff"), 2u);                  // never valid
  EXPECT_EQ(FindInvalidUtf8("a\x80"), 1u);                   // lone continuation byte
  EXPECT_EQ(FindInvalidUtf8("\xc0\xaf"), 0u);                // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("x\xe0\x80\xaf"), 1u);           // overlong 3-byte
  EXPECT_EQ(FindInvalidUtf8("\xed\xa0\x80"), 0u);            // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("ok\xf4\x90\x80\x80"), 2u);      // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(FindInvalidUtf8("abc\xe2\x82"), 3u);             // truncated at the end
  EXPECT_EQ(FindInvalidUtf8("\xc3(x"), 0u);                  // bad continuation
  EXPECT_EQ(std::string(kiln::EscapeBytes("a\xff\n\\")), "a\\xff\\x0a\\x5c");
}

TEST(Graph, VerifyRefusesNamesThatAreNotUtf8) {
  kiln::ir::Graph g;
  auto* x = g.AddValue("x", kiln::DType::kFloat32, {2});
  auto* y = g.AddValue("y\xff", kiln::DType::kFloat32, {2});
  g.inputs().push_back(x);
  g.AddNode("Relu", "r", {x}, {y});
  g.outputs().push_back(y);
  kiln::Status s = g.Verify();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("value name 'y\\xff' is not valid UTF-8 (byte 1)"), std::string::npos) << s.message();

  kiln::ir::Graph h;
  auto* a = h.AddValue("a", kiln::DType::kFloat32, {2});
  auto* b = h.AddValue("b", kiln::DType::kFloat32, {2});
  h.inputs().push_back(a);
  kiln::ir::Node* n = h.AddNode("DepthToSpace", "d", {a}, {b});
  n->SetAttr("mode", kiln::ir::Attribute::String("DC\xc0\xafR"));
  h.outputs().push_back(b);
  s = h.Verify();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("DepthToSpace node 'd': attribute 'mode': value"), std::string::npos) << s.message();
}

TEST(Graph, TypedGettersReadOnlyTheirKind) {
  kiln::ir::Graph g;
  auto* x = g.AddValue("x", kiln::DType::kFloat32, {2});
  auto* y = g.AddValue("y", kiln::DType::kFloat32, {2});
  kiln::ir::Node* n = g.AddNode("Softmax", "s", {x}, {y});
  n->SetAttr("axis", kiln::ir::Attribute::String("one"));
  n->SetAttr("alpha", kiln::ir::Attribute::Int(7));
  n->SetAttr("ks", kiln::ir::Attribute::Floats({2.f, 2.f}));
  EXPECT_EQ(n->GetInt("axis", -1), -1);
  EXPECT_EQ(n->GetFloat("alpha", 0.5f), 0.5f);
  EXPECT_EQ(n->GetString("alpha", "d"), "d");
  EXPECT_EQ(n->GetInts("ks", {3}), std::vector<std::int64_t>{3});
  EXPECT_EQ(n->GetInt("alpha", 0), 7);
}
