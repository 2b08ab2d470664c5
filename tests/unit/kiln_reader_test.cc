// The .kiln reader (src/format): the graph partition's JSON (ParseModelJson)
// field by field, attribute kinds and inline subgraph constants in a
// serialize/parse round trip, UTF-8 checks on write, and the container
// (ParseModelImage / ReadModelFile): header, table, padding and checksums of
// images built here byte by byte. Every refusal is kCorrupt (or names the
// fault) with the JSON path, value, offset or expected-vs-found.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "format/graph_json.h"
#include "format/kiln_file.h"
#include "test_util.h"

namespace kiln {
namespace {

using format::FileHeader;
using format::PartitionEntry;

// ---- ParseModelJson ---------------------------------------------------------

const char* kX = R"({"name":"x","dtype":1,"shape":[2]})";
const char* kY = R"({"name":"y","dtype":1,"shape":[2]})";
const char* kRelu = R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["y"],"attrs":{}})";
const char* kPlan = R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{}})";

struct Doc {
  std::string values = std::string("[") + kX + "," + kY + "]";
  std::string nodes = std::string("[") + kRelu + "]";
  std::string inputs = R"(["x"])";
  std::string outputs = R"(["y"])";
  std::string plan = kPlan;
  std::string extra;  // more top-level members, with a leading comma
  std::string format = R"("kiln-graph")";
  std::string opset = "13";
  std::string Text() const {
    return R"({"format":)" + format + R"(,"graph":{"name":"g","opset":)" + opset + R"(,"values":)" + values +
           R"(,"nodes":)" + nodes + R"(,"inputs":)" + inputs + R"(,"outputs":)" + outputs + R"(},"plan":)" + plan +
           extra + "}";
  }
};

// A node 'n' of op Foo reading x and writing y with the given attrs object.
Doc WithAttrs(const std::string& attrs) {
  Doc d;
  d.nodes = R"([{"name":"n","op":"Foo","domain":"","since":1,"inputs":["x"],"outputs":["y"],"attrs":)" + attrs + "}]";
  return d;
}

// A node 'n' with a graph attribute 'body' whose graph has the given values
// and writes its output o with Identity from its first value.
Doc WithSubgraph(const std::string& sub_values, const std::string& first = "c") {
  return WithAttrs(R"({"body":{"kind":"graph","v":{"name":"b","opset":13,"values":)" + sub_values +
                   R"(,"nodes":[{"name":"i","op":"Identity","domain":"","since":16,"inputs":[")" + first +
                   R"("],"outputs":["o"],"attrs":{}}],"inputs":[],"outputs":["o"]}}})");
}

struct JsonCase {
  std::string json, needle;
};

alignas(64) std::uint8_t g_weights[256];

Result<format::CompiledModel> Parse(const std::string& text) {
  return format::ParseModelJson(text.data(), text.size(), g_weights, sizeof(g_weights), nullptr);
}

void ExpectAllRefused(const std::vector<JsonCase>& cases) {
  for (const JsonCase& c : cases) {
    auto m = Parse(c.json);
    ASSERT_FALSE(m.ok()) << "accepted: " << c.json;
    EXPECT_EQ(m.status().code(), StatusCode::kCorrupt) << m.status().ToString();
    EXPECT_NE(m.status().message().find(c.needle), std::string::npos)
        << "'" << c.needle << "' not in: " << m.status().message() << "\n  for " << c.json;
  }
}

TEST(KilnJson, WellFormedDocumentParses) {
  Doc d;
  d.extra = R"(,"custom_ops":["MyOp","Other"])";
  d.plan = R"({"arena_size":64,"no_reuse_size":128,"lower_bound":32,"const_size":0,"placements":{"x":[2,0,8],"y":[3,0,8]}})";
  auto m = Parse(d.Text());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value().graph->name(), "g");
  EXPECT_EQ(m.value().graph->opset(), 13);
  EXPECT_EQ(m.value().custom_op_types, (std::vector<std::string>{"MyOp", "Other"}));
  EXPECT_EQ(m.value().plan.arena_size, 64u);
  EXPECT_EQ(m.value().plan.no_reuse_size, 128u);
  EXPECT_EQ(m.value().plan.lower_bound, 32u);
  const plan::Placement& y = m.value().plan.placements.at("y");
  EXPECT_EQ(y.region, 3);
  EXPECT_EQ(y.offset, 0u);
  EXPECT_EQ(y.size, 8u);
  ASSERT_EQ(m.value().graph->nodes().size(), 1u);
  EXPECT_EQ(m.value().graph->nodes()[0]->since_version(), 14);
}

// Format version 2: the compile target. Absent (version 1 files): "cpu".
TEST(KilnJson, TargetIsADeviceSpec) {
  Doc plain;
  auto m = Parse(plain.Text());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value().target, "cpu");
  Doc sim;
  sim.extra = R"(,"target":"sim:lack=Relu+Conv,seed=3")";
  m = Parse(sim.Text());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value().target, "sim:lack=Relu+Conv,seed=3");
  auto with = [](const std::string& t) {
    Doc d;
    d.extra = ",\"target\":" + t;
    return d.Text();
  };
  ExpectAllRefused({
      {with(R"("")"), "field 'target' must be a device spec of 1 to 128 bytes, found 0 bytes"},
      {with("\"" + std::string(129, 'a') + "\""), "found 129 bytes"},
      {with(R"("Cpu")"), "field 'target' = 'Cpu' is not a device spec (byte 0 is not allowed there)"},
      {with(R"(":sim")"), "(byte 0 is not allowed there)"},
      {with(R"("sim:lack=Re lu")"), "(byte 11 is not allowed there)"},
      {with(R"("sim:a:b")"), "(byte 5 is not allowed there)"},
      {with("5"), "field 'target' must be a string, found number"},
  });
}

TEST(KilnJson, TopLevelFieldsAndPlan) {
  Doc other;
  other.format = R"("kiln-graph-v2")";
  Doc nofmt;
  nofmt.format = "null";
  Doc big_opset, neg_opset;
  big_opset.opset = "1099511627776";
  neg_opset.opset = "-1099511627776";
  Doc custom_str, custom_num;
  custom_str.extra = R"(,"custom_ops":"MyOp")";
  custom_num.extra = R"(,"custom_ops":["a",1])";
  auto plan = [](const std::string& p) {
    Doc d;
    d.plan = p;
    return d.Text();
  };
  ExpectAllRefused({
      {other.Text(), "graph partition has an unknown format tag 'kiln-graph-v2'"},
      {nofmt.Text(), "field 'format' must be a string, found null"},
      {R"({"graph":{}})", "field 'format' is missing"},
      {R"({"format":"kiln-graph"})", "field 'graph' is missing"},
      {big_opset.Text(), "field 'graph.opset' = 1099511627776 does not fit in a 32-bit integer"},
      {neg_opset.Text(), "field 'graph.opset' = -1099511627776 does not fit in a 32-bit integer"},
      {custom_str.Text(), "field 'custom_ops' must be an array, found string"},
      {custom_num.Text(), "field 'custom_ops[1]' must be a string, found number"},
      {plan("[]"), "field 'plan' must be an object, found array"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":[]})"),
       "field 'plan.placements' must be an object, found array"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0})"),
       "field 'plan.placements' is missing"},
      {plan(R"({"arena_size":0,"no_reuse_size":1.5,"lower_bound":0,"const_size":0,"placements":{}})"),
       "field 'plan.no_reuse_size' must be a non-negative integer, found number"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{"x":[2,0]}})"),
       "placement of 'x': field 'plan.placements['x']' must be [region, offset, size]"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{"x":{"r":2}}})"),
       "placement of 'x': field 'plan.placements['x']' must be [region, offset, size]"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{"x":[4294967296,0,8]}})"),
       "placement of 'x': field 'plan.placements['x'][0]' = 4294967296 does not fit in a 32-bit integer"},
      {plan(R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":0,"placements":{"x":[2,-64,8]}})"),
       "placement of 'x': field 'plan.placements['x'][1]' = -64 is negative"},
      // Not JSON: truncated, and a string that is not UTF-8.
      {"{\"format\":\"kiln-graph\"", "graph partition is not valid JSON"},
      {"{\"format\":\"kiln\xff\"}", "graph partition is not valid JSON"},
  });
}

TEST(KilnJson, Values) {
  auto values = [](const std::string& v) {
    Doc d;
    d.values = "[" + v + "," + kY + "]";
    return d.Text();
  };
  Doc dup;
  dup.values = std::string("[") + kX + "," + kY + "," + kX + "]";
  Doc notarray;
  notarray.values = "{}";
  ExpectAllRefused({
      {notarray.Text(), "field 'graph.values' must be an array, found object"},
      {values(R"({"dtype":1,"shape":[2]})"), "field 'graph.values[0].name' is missing"},
      {values(R"({"name":"","dtype":1,"shape":[2]})"), "field 'graph.values[0].name': a value has an empty name"},
      {dup.Text(), "duplicate value 'x' (graph.values[2])"},
      {values(R"({"name":"x","shape":[2]})"), "value 'x': field 'graph.values[0].dtype' is missing"},
      {values(R"({"name":"x","dtype":8,"shape":[2]})"), "value 'x' has invalid dtype 8"},
      {values(R"({"name":"x","dtype":99,"shape":[2]})"), "value 'x' has invalid dtype 99"},
      {values(R"({"name":"x","dtype":1})"), "value 'x': field 'graph.values[0].shape' is missing"},
      {values(R"({"name":"x","dtype":1,"shape":{"0":2}})"),
       "value 'x': field 'graph.values[0].shape' must be an array, found object"},
      {values(R"({"name":"x","dtype":1,"shape":[2,18446744073709551615]})"),
       "field 'graph.values[0].shape[1]' = 18446744073709551615 does not fit in a signed 64-bit integer"},
      {values(R"({"name":"x","dtype":1,"shape":[2,-1]})"), "value 'x': dim 1 of shape [2,?] is negative (-1)"},
      {values(R"({"name":"x","dtype":1,"shape":[68719476736,2]})"),
       "value 'x': shape [68719476736,2] has more elements than fit in Kiln's limit"},
      {values(R"({"name":"x","dtype":1,"shape":[2],"dynamic":"1"})"),
       "value 'x': field 'graph.values[0].dynamic' must be a non-negative integer, found string"},
      {values(R"({"name":"x","dtype":1,"shape":[2],"dynamic":-1})"),
       "value 'x': field 'graph.values[0].dynamic' = -1 is negative"},
      {values(R"({"name":"x","dtype":1,"shape":[2,3],"dynamic":4})"),
       "value 'x': data-dependent dims mask 4 names dims beyond its rank 2"},
  });
  // A mask within the rank is kept.
  auto ok = Parse(values(R"({"name":"x","dtype":1,"shape":[2],"dynamic":1})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok.value().graph->FindValue("x")->dynamic_mask(), 1u);
}

// Format version 6: per-value "sym" (a name per dim, "" for none) and the
// top-level "symbols" ({name: [min, max]}). The reader checks their JSON
// types; names, ranges and extents are plan::VerifyPlan's (KilnImage below).
TEST(KilnJson, Symbols) {
  Doc d;
  d.values = R"([{"name":"x","dtype":1,"shape":[2],"sym":["batch"]},{"name":"y","dtype":1,"shape":[2],"sym":[""]}])";
  // "symbols" goes into the graph object, before its closing brace.
  auto with_symbols = [](const Doc& doc, const std::string& syms) {
    std::string t = doc.Text();
    return t.insert(t.find(R"(},"plan":)"), R"(,"symbols":)" + syms);  // the graph object's end
  };
  auto m = Parse(with_symbols(d, R"({"batch":[2,2],"seq":[1,-1]})"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ir::Graph& g = *m.value().graph;
  EXPECT_EQ(g.FindValue("x")->dim_params(), (std::vector<std::string>{"batch"}));
  EXPECT_EQ(g.FindValue("y")->dim_params(), (std::vector<std::string>{""}));
  ASSERT_EQ(g.symbols().size(), 2u);
  EXPECT_EQ(g.symbols().at("batch").min, 2);
  EXPECT_EQ(g.symbols().at("batch").max, 2);
  EXPECT_EQ(g.symbols().at("seq").min, 1);
  EXPECT_EQ(g.symbols().at("seq").max, -1);
  // Absent (format version 5 and older): no symbols, no names.
  auto old = Parse(Doc().Text());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old.value().graph->symbols().empty());
  EXPECT_TRUE(old.value().graph->FindValue("x")->dim_params().empty());

  auto values = [](const std::string& v) {
    Doc doc;
    doc.values = "[" + v + "," + kY + "]";
    return doc.Text();
  };
  ExpectAllRefused({
      {values(R"({"name":"x","dtype":1,"shape":[2],"sym":"batch"})"),
       "value 'x': field 'graph.values[0].sym' must be an array, found string"},
      {values(R"({"name":"x","dtype":1,"shape":[2],"sym":[1]})"),
       "value 'x': field 'graph.values[0].sym[0]' must be a string, found number"},
      {with_symbols(Doc(), "[]"), "field 'graph.symbols' must be an object, found array"},
      {with_symbols(Doc(), R"({"batch":2})"), "symbol 'batch': field 'graph.symbols['batch']' must be [min, max], found number"},
      {with_symbols(Doc(), R"({"batch":[1,2,3]})"),
       "symbol 'batch': field 'graph.symbols['batch']' must be [min, max], found an array of 3"},
      {with_symbols(Doc(), R"({"batch":[1,"2"]})"),
       "symbol 'batch': field 'graph.symbols['batch'][1]' must be an integer, found string"},
      {with_symbols(Doc(), R"({"batch":[1.5,2]})"),
       "symbol 'batch': field 'graph.symbols['batch'][0]' must be an integer, found number"},
      {with_symbols(Doc(), R"({"batch":[1,18446744073709551615]})"),
       "symbol 'batch': field 'graph.symbols['batch'][1]' = 18446744073709551615 does not fit in a signed 64-bit integer"},
      // Only the top-level graph has symbols.
      {WithSubgraph(R"([{"name":"c","dtype":1,"shape":[1],"const":{"dtype":1,"shape":[1],"hex":"0000803f"}},)"
                    R"({"name":"o","dtype":1,"shape":[1]}],"symbols":{"n":[1,1]})").Text(),
       "field 'graph.nodes[0].attrs['body'].v.symbols': only the top-level graph has symbols, found them in subgraph 'b'"},
  });
}

TEST(KilnJson, TopLevelConstantsLiveInTheWeightsPartition) {
  // w float32[2] = {1.5, -2} at offset 64 of the 256-byte weights.
  const float w[2] = {1.5f, -2.f};
  std::memset(g_weights, 0, sizeof(g_weights));
  std::memcpy(g_weights + 64, w, sizeof(w));
  auto with_const = [](const std::string& c) {
    Doc d;
    d.values = std::string("[") + kX + "," + kY + R"(,{"name":"w","dtype":1,"shape":[2],"const":)" + c + "}]";
    return d.Text();
  };
  auto ok = Parse(with_const(R"({"offset":64,"size":8})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const HostTensorPtr& t = ok.value().graph->FindValue("w")->constant();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->data(), g_weights + 64);  // in place, not copied
  EXPECT_EQ(t->data_as<float>()[0], 1.5f);
  EXPECT_EQ(t->data_as<float>()[1], -2.f);

  Doc writes_const;
  writes_const.values = std::string("[") + kX + "," + kY + R"(,{"name":"w","dtype":1,"shape":[2],"const":{"offset":64,"size":8}}])";
  writes_const.nodes = R"([{"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["w"],"attrs":{}}])";
  ExpectAllRefused({
      {with_const("5"), "value 'w': field 'graph.values[2].const' must be an object, found number"},
      {with_const(R"({"dtype":1,"shape":[2],"hex":"0000c03f000000c0"})"),
       "value 'w': a top-level constant must live in the weights partition, not inline (graph.values[2].const.hex)"},
      {with_const(R"({"size":8})"), "value 'w': field 'graph.values[2].const.offset' is missing"},
      {with_const(R"({"offset":64})"), "value 'w': field 'graph.values[2].const.size' is missing"},
      {with_const(R"({"offset":64,"size":4})"), "constant 'w': size 4 differs from 8 bytes of float32[2]"},
      {with_const(R"({"offset":256,"size":8})"),
       "constant 'w' at offset 256 size 8 lies outside the weights partition of 256 bytes"},
      {with_const(R"({"offset":18446744073709551615,"size":8})"),
       "constant 'w' at offset 18446744073709551615 size 8 lies outside the weights partition"},
      {with_const(R"({"offset":8,"size":8})"), "constant 'w' at offset 8 in the weights partition is not 64-byte aligned"},
      {writes_const.Text(), "Relu node 'r' writes constant 'w' (output 0)"},
  });
}

TEST(KilnJson, Nodes) {
  auto node = [](const std::string& n) {
    Doc d;
    d.nodes = "[" + n + "]";
    return d.Text();
  };
  Doc notarray;
  notarray.nodes = "{}";
  Doc twice;
  twice.nodes = std::string("[") + kRelu + "," + kRelu + "]";
  ExpectAllRefused({
      {notarray.Text(), "field 'graph.nodes' must be an array, found object"},
      {node(R"({"name":"r","domain":"","since":14,"inputs":["x"],"outputs":["y"],"attrs":{}})"),
       "field 'graph.nodes[0].op' is missing"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["y"],"attrs":[]})"),
       "field 'graph.nodes[0].attrs' must be an object, found array"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["y"]})"),
       "field 'graph.nodes[0].attrs' is missing"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":[0],"outputs":["y"],"attrs":{}})"),
       "field 'graph.nodes[0].inputs[0]' must be a string, found number"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":[null],"attrs":{}})"),
       "field 'graph.nodes[0].outputs[0]' must be a string, found null"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":"y","attrs":{}})"),
       "field 'graph.nodes[0].outputs' must be an array, found string"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["q"],"outputs":["y"],"attrs":{}})"),
       "Relu node 'r' reads unknown value 'q' (input 0)"},
      {node(R"({"name":"r","op":"Relu","domain":"","since":14,"inputs":["x"],"outputs":["q"],"attrs":{}})"),
       "Relu node 'r' writes unknown value 'q' (output 0)"},
      {node(R"({"name":"s","op":"Split","domain":"","since":13,"inputs":["x"],"outputs":["y","y"],"attrs":{}})"),
       "Split node 's' lists value 'y' as two of its outputs"},
      {twice.Text(), "Relu node 'r' writes value 'y' (output 0), which"},
  });
  // An empty input name is an absent optional input.
  auto ok = Parse(node(R"({"name":"c","op":"Clip","domain":"","since":13,"inputs":["x","","x"],"outputs":["y"],"attrs":{}})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const ir::Node* clip = ok.value().graph->FindValue("y")->producer();
  ASSERT_TRUE(clip);
  ASSERT_EQ(clip->num_inputs(), 3);
  EXPECT_EQ(clip->input(1), nullptr);
  EXPECT_EQ(clip->input(2), ok.value().graph->FindValue("x"));
}

TEST(KilnJson, GraphInputsAndOutputs) {
  Doc unknown_in, unknown_out, num_out, produced_in, inputs_obj;
  unknown_in.inputs = R"(["x","q"])";
  unknown_out.outputs = R"(["q"])";
  num_out.outputs = "[1]";
  produced_in.inputs = R"(["x","y"])";
  inputs_obj.inputs = "{}";
  ExpectAllRefused({
      {unknown_in.Text(), "graph 'g' lists unknown value 'q' as inputs[1]"},
      {unknown_out.Text(), "graph 'g' lists unknown value 'q' as outputs[0]"},
      {num_out.Text(), "field 'graph.outputs[0]' must be a string, found number"},
      {inputs_obj.Text(), "field 'graph.inputs' must be an array, found object"},
      {produced_in.Text(), "value 'y' is a constant or graph input but is also produced by"},
  });
}

TEST(KilnJson, AttributeKinds) {
  auto ok = Parse(WithAttrs(R"({
      "f":{"kind":"float","v":0.25}, "nan":{"kind":"float","v":null},
      "i":{"kind":"int","v":-9007199254740993}, "s":{"kind":"string","v":"same_upper"},
      "fs":{"kind":"floats","v":[1,-0.5,null]}, "is":{"kind":"ints","v":[3,18446744073709551]},
      "ss":{"kind":"strings","v":["a",""]},
      "t":{"kind":"tensor","v":{"dtype":7,"shape":[2],"hex":"ffffffffffffffff0a00000000000000"}},
      "ts":{"kind":"tensors","v":[{"dtype":2,"shape":[],"hex":"7f"},{"dtype":3,"shape":[2,1],"hex":"80ff"}]},
      "gs":{"kind":"graphs","v":[{"name":"g0","opset":13,"values":[],"nodes":[],"inputs":[],"outputs":[]},
                                  {"name":"g1","opset":13,"values":[],"nodes":[],"inputs":[],"outputs":[]}]}
    })")
                      .Text());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const ir::Node* n = ok.value().graph->FindValue("y")->producer();
  ASSERT_TRUE(n);
  EXPECT_EQ(n->GetFloat("f", 0), 0.25f);
  EXPECT_TRUE(std::isnan(n->GetFloat("nan", 0)));
  EXPECT_EQ(n->GetInt("i", 0), -9007199254740993LL);
  EXPECT_EQ(n->GetString("s", ""), "same_upper");
  const std::vector<float> fs = n->GetFloats("fs");
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0], 1.f);
  EXPECT_EQ(fs[1], -0.5f);
  EXPECT_TRUE(std::isnan(fs[2]));
  EXPECT_EQ(n->GetInts("is"), (std::vector<std::int64_t>{3, 18446744073709551LL}));
  EXPECT_EQ(n->FindAttr("ss")->strings, (std::vector<std::string>{"a", ""}));
  const HostTensorPtr& t = n->FindAttr("t")->t;
  ASSERT_TRUE(t);
  EXPECT_EQ(t->dtype(), DType::kInt64);
  EXPECT_EQ(t->data_as<std::int64_t>()[0], -1);  // ff x 8, little-endian
  EXPECT_EQ(t->data_as<std::int64_t>()[1], 10);
  const auto& ts = n->FindAttr("ts")->tensors;
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0]->dtype(), DType::kUInt8);
  EXPECT_EQ(ts[0]->shape(), Shape{});
  EXPECT_EQ(ts[0]->data_as<std::uint8_t>()[0], 0x7f);
  EXPECT_EQ(ts[1]->shape(), (Shape{2, 1}));
  EXPECT_EQ(ts[1]->data_as<std::int8_t>()[0], -128);
  EXPECT_EQ(ts[1]->data_as<std::int8_t>()[1], -1);
  const auto& gs = n->FindAttr("gs")->graphs;
  ASSERT_EQ(gs.size(), 2u);
  EXPECT_EQ(gs[1]->name(), "g1");
  EXPECT_EQ(gs[1]->parent(), ok.value().graph.get());
}

TEST(KilnJson, MalformedAttributes) {
  auto attr = [](const std::string& a) { return WithAttrs(R"({"a":)" + a + "}").Text(); };
  ExpectAllRefused({
      {attr(R"({"v":1})"), "Foo node 'n' attribute 'a': field 'graph.nodes[0].attrs['a'].kind' is missing"},
      {attr(R"({"kind":"int"})"), "field 'graph.nodes[0].attrs['a'].v' is missing"},
      {attr(R"({"kind":"complex","v":1})"), "field 'graph.nodes[0].attrs['a'].kind': unknown attribute kind 'complex'"},
      {attr(R"({"kind":"int","v":1.5})"), "field 'graph.nodes[0].attrs['a'].v' must be an integer, found number"},
      {attr(R"({"kind":"string","v":1})"), "field 'graph.nodes[0].attrs['a'].v' must be a string, found number"},
      {attr(R"({"kind":"floats","v":[1,"2"]})"), "field 'graph.nodes[0].attrs['a'].v[1]' must be a number, found string"},
      {attr(R"({"kind":"ints","v":3})"), "field 'graph.nodes[0].attrs['a'].v' must be an array, found number"},
      {attr(R"({"kind":"strings","v":["a",2]})"), "field 'graph.nodes[0].attrs['a'].v[1]' must be a string, found number"},
      {attr(R"({"kind":"tensor","v":{"dtype":1,"shape":[2],"hex":"0000"}})"),
       "tensor 'graph.nodes[0].attrs['a'].v': hex data has 4 digits, expected 16 for float32[2]"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"shape":[1],"hex":"AB"}})"),
       "tensor 'graph.nodes[0].attrs['a'].v': bad hex digit in tensor data"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"shape":[1],"hex":"g0"}})"), "bad hex digit in tensor data"},
      {attr(R"({"kind":"tensor","v":{"dtype":99,"shape":[1],"hex":"00"}})"),
       "tensor 'graph.nodes[0].attrs['a'].v' has invalid dtype 99"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"shape":[1],"hex":0}})"),
       "field 'graph.nodes[0].attrs['a'].v.hex' must be a string, found number"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"shape":[1]}})"), "field 'graph.nodes[0].attrs['a'].v.hex' is missing"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"shape":[-3],"hex":""}})"),
       "tensor 'graph.nodes[0].attrs['a'].v': dim 0 of shape [?] is negative (-3)"},
      {attr(R"({"kind":"tensor","v":{"dtype":2,"hex":""}})"), "field 'graph.nodes[0].attrs['a'].v.shape' is missing"},
      {attr(R"({"kind":"tensors","v":[{"dtype":2,"shape":[1],"hex":"00"},{"shape":[1],"hex":"00"}]})"),
       "field 'graph.nodes[0].attrs['a'].v[1].dtype' is missing"},
      {attr(R"({"kind":"graphs","v":{}})"), "field 'graph.nodes[0].attrs['a'].v' must be an array, found object"},
      {attr(R"({"kind":"graphs","v":[{"name":"g0","opset":13,"values":[],"nodes":[],"inputs":[]}]})"),
       "field 'graph.nodes[0].attrs['a'].v[0].outputs' is missing"},
      {attr(R"({"kind":"graph","v":[]})"),
       "Foo node 'n' attribute 'a': field 'graph.nodes[0].attrs['a'].v' must be an object, found array"},
  });
}

TEST(KilnJson, SubgraphConstantsAreInline) {
  // c float32[1] = 1.0 (0x3f800000, little-endian 0000803f).
  auto ok = Parse(WithSubgraph(R"([{"name":"c","dtype":1,"shape":[1],"const":{"dtype":1,"shape":[1],"hex":"0000803f"}},
                                   {"name":"o","dtype":1,"shape":[1]}])")
                      .Text());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const auto& body = ok.value().graph->FindValue("y")->producer()->FindAttr("body")->g;
  ASSERT_TRUE(body);
  ir::Value* c = body->FindValue("c");
  ASSERT_TRUE(c && c->is_constant());
  EXPECT_EQ(c->constant()->data_as<float>()[0], 1.0f);

  auto sub = [](const std::string& c) {
    return WithSubgraph("[" + c + R"(,{"name":"o","dtype":1,"shape":[1]}])").Text();
  };
  const std::string where = "graph.nodes[0].attrs['body'].v.values[0].const";
  ExpectAllRefused({
      {sub(R"({"name":"c","dtype":1,"shape":[1],"const":{"offset":0,"size":4}})"),
       "Foo node 'n' attribute 'body': value 'c': a subgraph constant must hold its data inline (" + where + ".hex)"},
      {sub(R"({"name":"c","dtype":1,"shape":[1],"const":{"dtype":7,"shape":[1],"hex":"0100000000000000"}})"),
       "value 'c' is declared float32[1] but its data is int64[1]"},
      {sub(R"({"name":"c","dtype":1,"shape":[1],"const":{"dtype":1,"shape":[1,1],"hex":"0000803f"}})"),
       "value 'c' is declared float32[1] but its data is float32[1,1]"},
      {sub(R"({"name":"c","dtype":1,"shape":[1],"const":{"dtype":1,"shape":[1],"hex":"0000803"}})"),
       "value 'c': tensor '" + where + "': hex data has 7 digits, expected 8 for float32[1]"},
      {sub(R"({"name":"c","dtype":1,"shape":[1],"const":{"dtype":1,"shape":[1],"hex":"0000803F"}})"),
       "value 'c': tensor '" + where + "': bad hex digit in tensor data"},
  });
}

TEST(KilnJson, SubgraphNestingIsBounded) {
  // Graph attributes nested `depth` deep below the top-level graph.
  auto nested = [](int depth) {
    std::string g = R"({"name":"leaf","opset":13,"values":[],"nodes":[],"inputs":[],"outputs":[]})";
    for (int i = 0; i < depth - 1; ++i) {
      g = R"({"name":"l","opset":13,"values":[],"nodes":[{"name":"n","op":"Foo","domain":"","since":1,"inputs":[],"outputs":[],"attrs":{"g":{"kind":"graph","v":)" +
          g + R"(}}}],"inputs":[],"outputs":[]})";
    }
    return WithAttrs(R"({"g":{"kind":"graph","v":)" + g + "}}").Text();
  };
  auto ok = Parse(nested(32));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  auto deep = Parse(nested(33));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(deep.status().message().find("subgraphs nested more than 32 deep"), std::string::npos)
      << deep.status().message();
}

// ---- SerializeModelJson -> ParseModelJson ---------------------------------

// x float32[2] -> Foo 'n' (every attribute kind; its subgraphs hold an
// inline constant) -> y; no top-level constants, so the plan only places x
// and y.
format::CompiledModel AttrModel(const std::string& value_name = "x") {
  format::CompiledModel m;
  m.graph = std::make_unique<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.set_name("attrs");
  g.set_opset(13);
  ir::Value* x = g.AddValue(value_name, DType::kFloat32, {2});
  ir::Value* y = g.AddValue("y", DType::kFloat32, {2});
  g.inputs().push_back(x);
  ir::Node* n = g.AddNode("Foo", "n", {x}, {y}, "my.domain");
  n->set_since_version(3);
  auto sub = [&](const std::string& name, float c) {
    auto s = std::make_shared<ir::Graph>();
    s->set_name(name);
    s->set_parent(&g);
    s->AddConstant("c", test::F32({1}, {c}));
    ir::Value* o = s->AddValue("o", DType::kFloat32, {1});
    s->AddNode("Identity", "i", {s->FindValue("c")}, {o})->set_since_version(16);
    s->outputs().push_back(o);
    return s;
  };
  n->SetAttr("f", ir::Attribute::Float(-0.75f));
  n->SetAttr("i", ir::Attribute::Int(INT64_MIN));
  n->SetAttr("s", ir::Attribute::String("text \"quoted\""));
  n->SetAttr("fs", ir::Attribute::Floats({1.5f, -2.f}));
  n->SetAttr("is", ir::Attribute::Ints({7, -8}));
  ir::Attribute ss;
  ss.kind = ir::Attribute::Kind::kStrings;
  ss.strings = {"p", "q"};
  n->SetAttr("ss", ss);
  n->SetAttr("t", ir::Attribute::Tensor(test::I64({2}, {1, -1})));
  ir::Attribute ts;
  ts.kind = ir::Attribute::Kind::kTensors;
  ts.tensors = {test::F32({}, {3.f}), test::I64({1}, {258})};
  n->SetAttr("ts", ts);
  ir::Attribute ga;
  ga.kind = ir::Attribute::Kind::kGraph;
  ga.g = sub("then", 2.f);
  n->SetAttr("g", ga);
  ir::Attribute gs;
  gs.kind = ir::Attribute::Kind::kGraphs;
  gs.graphs = {sub("b0", 4.f), sub("b1", 8.f)};
  n->SetAttr("gs", gs);
  g.outputs().push_back(y);
  m.plan.placements[value_name] = {2, 0, 8};
  m.plan.placements["y"] = {3, 0, 8};
  m.custom_op_types = {"Foo"};
  return m;
}

TEST(KilnJson, EveryAttributeKindRoundTrips) {
  auto text = format::SerializeModelJson(AttrModel());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto m = format::ParseModelJson(text.value().data(), text.value().size(), nullptr, 0, nullptr);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ir::Node* n = m.value().graph->FindValue("y")->producer();
  ASSERT_TRUE(n);
  EXPECT_EQ(n->domain(), "my.domain");
  EXPECT_EQ(n->since_version(), 3);
  EXPECT_EQ(n->GetFloat("f", 0), -0.75f);
  EXPECT_EQ(n->GetInt("i", 0), INT64_MIN);
  EXPECT_EQ(n->GetString("s", ""), "text \"quoted\"");
  EXPECT_EQ(n->GetFloats("fs"), (std::vector<float>{1.5f, -2.f}));
  EXPECT_EQ(n->GetInts("is"), (std::vector<std::int64_t>{7, -8}));
  EXPECT_EQ(n->FindAttr("ss")->strings, (std::vector<std::string>{"p", "q"}));
  const HostTensorPtr& t = n->FindAttr("t")->t;
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape(), (Shape{2}));
  EXPECT_EQ(t->data_as<std::int64_t>()[1], -1);
  const auto& ts = n->FindAttr("ts")->tensors;
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0]->shape(), Shape{});
  EXPECT_EQ(ts[0]->data_as<float>()[0], 3.f);
  EXPECT_EQ(ts[1]->data_as<std::int64_t>()[0], 258);
  const auto& g = n->FindAttr("g")->g;
  ASSERT_TRUE(g);
  EXPECT_EQ(g->name(), "then");
  EXPECT_EQ(g->FindValue("c")->constant()->data_as<float>()[0], 2.f);
  const auto& gs = n->FindAttr("gs")->graphs;
  ASSERT_EQ(gs.size(), 2u);
  EXPECT_EQ(gs[1]->name(), "b1");
  EXPECT_EQ(gs[1]->FindValue("c")->constant()->data_as<float>()[0], 8.f);
  EXPECT_EQ(m.value().custom_op_types, (std::vector<std::string>{"Foo"}));
  EXPECT_EQ(m.value().plan.placements.at("y").region, 3);
}

TEST(KilnJson, SymbolsRoundTrip) {
  format::CompiledModel m = AttrModel();
  ir::Graph& g = *m.graph;
  g.symbols()["batch"] = {2, 2};
  g.symbols()["unused"] = {0, -1};
  g.FindValue("x")->dim_params() = {"batch"};
  auto text = format::SerializeModelJson(m);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // Written as the format says: "sym" on x only (y names no dim), the table
  // in the top-level graph.
  EXPECT_NE(text.value().find(R"("sym":["batch"])"), std::string::npos) << text.value();
  EXPECT_EQ(text.value().find(R"("sym")"), text.value().rfind(R"("sym")"));
  EXPECT_NE(text.value().find(R"("symbols":{"batch":[2,2],"unused":[0,-1]})"), std::string::npos) << text.value();
  auto back = format::ParseModelJson(text.value().data(), text.value().size(), nullptr, 0, nullptr);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ir::Graph& r = *back.value().graph;
  EXPECT_EQ(r.symbols(), (std::map<std::string, ir::SymbolRange>{{"batch", {2, 2}}, {"unused", {0, -1}}}));
  EXPECT_EQ(r.FindValue("x")->dim_params(), (std::vector<std::string>{"batch"}));
  EXPECT_TRUE(r.FindValue("y")->dim_params().empty());
  EXPECT_TRUE(plan::VerifyGraph(r).ok()) << plan::VerifyGraph(r).ToString();
}

TEST(KilnJson, NamesMustBeValidUtf8ToBeWritten) {
  // 2-, 3- and 4-byte sequences (U+00E9, U+20AC, U+1F600) are written and read back.
  const std::string good = "x\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  auto text = format::SerializeModelJson(AttrModel(good));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = format::ParseModelJson(text.value().data(), text.value().size(), nullptr, 0, nullptr);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back.value().graph->FindValue(good));

  struct Bad {
    std::string name, shown;
  };
  const std::vector<Bad> bad = {
      {"\xc0\x80", "\\xc0\\x80"},              // overlong NUL
      {"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},      // overlong '/'
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},      // surrogate U+D800
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
      {"a\xe2\x82", "a\\xe2\\x82"},            // truncated
      {"\xe2(\xa1", "\\xe2(\\xa1"},            // bad continuation byte
      {"\xf8\x88\x80\x80\x80", "\\xf8"},       // 5-byte form
      {"\x80", "\\x80"},                       // lone continuation byte
  };
  for (const Bad& b : bad) {
    auto t = format::SerializeModelJson(AttrModel(b.name));
    ASSERT_FALSE(t.ok()) << b.shown;
    EXPECT_NE(t.status().message().find("string '" + b.shown), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("not valid UTF-8"), std::string::npos) << t.status().message();
  }
  // An attribute name is an object key.
  auto m = AttrModel();
  m.graph->FindValue("y")->producer()->SetAttr("k\xff", ir::Attribute::Int(1));
  auto t = format::SerializeModelJson(m);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("name 'k\\xff' (a key of graph.nodes[0].attrs)"), std::string::npos)
      << t.status().message();
}

// ---- ParseModelImage on images built byte by byte -------------------------

struct Part {
  std::uint32_t type;
  std::uint64_t offset;
  std::string bytes;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A .kiln image: header, table of `parts`, the parts' bytes at their
// offsets, zeros elsewhere, `size` bytes in all; CRCs correct unless
// `tweak` (called before the header CRC is computed) changes things.
class Image {
 public:
  Image(const std::vector<Part>& parts, std::uint64_t size,
        const std::function<void(FileHeader&, std::vector<PartitionEntry>&)>& tweak = nullptr)
      : size_(size) {
    buf_.reset(static_cast<std::uint8_t*>(std::aligned_alloc(4096, (size + 4096) / 4096 * 4096)));
    std::memset(buf_.get(), 0, (size + 4096) / 4096 * 4096);
    std::vector<PartitionEntry> table;
    for (const Part& p : parts) {
      PartitionEntry e = {};
      e.type = p.type;
      e.offset = p.offset;
      e.size = p.bytes.size();
      e.crc = format::Crc32(p.bytes.data(), p.bytes.size());
      table.push_back(e);
      if (p.offset + p.bytes.size() <= size) std::memcpy(buf_.get() + p.offset, p.bytes.data(), p.bytes.size());
    }
    FileHeader h = {};
    std::memcpy(h.magic, format::kMagic, 8);
    h.version = format::kFormatVersion;
    h.header_size = sizeof(FileHeader);
    h.num_partitions = static_cast<std::uint32_t>(table.size());
    h.table_offset = sizeof(FileHeader);
    h.file_size = size;
    if (tweak) tweak(h, table);
    h.crc = 0;
    std::uint32_t crc = format::Crc32(&h, sizeof(h));
    // The CRC covers the table as the header declares it.
    std::vector<PartitionEntry> declared(h.num_partitions);
    for (std::size_t i = 0; i < declared.size() && i < table.size(); ++i) declared[i] = table[i];
    h.crc = format::Crc32(declared.data(), declared.size() * sizeof(PartitionEntry), crc);
    std::memcpy(buf_.get(), &h, sizeof(h));
    const std::uint64_t table_bytes = std::min<std::uint64_t>(table.size() * sizeof(PartitionEntry),
                                                              size > 64 ? size - 64 : 0);
    std::memcpy(buf_.get() + 64, table.data(), table_bytes);
  }
  std::uint8_t* data() { return buf_.get(); }
  Result<format::CompiledModel> Parse(const format::ReadOptions& opts = {}) {
    return format::ParseModelImage(buf_.get(), size_, nullptr, "img.kiln", opts);
  }

 private:
  std::unique_ptr<std::uint8_t, FreeDeleter> buf_;
  std::uint64_t size_;
};

constexpr std::uint32_t kGraph = static_cast<std::uint32_t>(format::PartitionType::kGraph);
constexpr std::uint32_t kWeights = static_cast<std::uint32_t>(format::PartitionType::kWeights);

void ExpectCorrupt(Result<format::CompiledModel> r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "accepted; expected " << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
  EXPECT_NE(r.status().message().find("model file 'img.kiln': "), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << "'" << needle << "' not in: " << r.status().message();
}

// x float32[2] -> Relu -> y with a plan that verifies: x alone in region 2,
// y in region 3, no arena, const_size = the 8-byte weights partition.
Doc ImgDoc() {
  Doc d;
  d.plan = R"({"arena_size":0,"no_reuse_size":16,"lower_bound":0,"const_size":8,"placements":{"x":[2,0,8],"y":[3,0,8]}})";
  return d;
}

// The graph JSON at 192 (bytes 128..192 stay zero), an 8-byte weights
// partition at 4096: 4104 bytes.
std::vector<Part> Parts(const std::string& json = ImgDoc().Text()) {
  return {{kGraph, 192, json}, {kWeights, 4096, std::string(8, '\x11')}};
}

TEST(KilnImage, HandBuiltImageParses) {
  Image img(Parts(), 4104);
  auto m = img.Parse();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value().graph->name(), "g");
  // Trailing zero bytes after the last partition are allowed.
  Image longer(Parts(), 4200);
  auto m2 = longer.Parse();
  EXPECT_TRUE(m2.ok()) << m2.status().ToString();
}

TEST(KilnImage, HeaderFaults) {
  {
    Image img(Parts(), 4104);
    ExpectCorrupt(format::ParseModelImage(img.data(), 63, nullptr, "img.kiln"), "too small to be a .kiln file (63 bytes)");
  }
  {
    Image img(Parts(), 4104);
    auto r = format::ParseModelImage(img.data() + 8, 4096, nullptr, "img.kiln");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("model image of 'img.kiln' is not 64-byte aligned in memory"), std::string::npos)
        << r.status().message();
  }
  using Tweak = std::function<void(FileHeader&, std::vector<PartitionEntry>&)>;
  const std::vector<std::pair<Tweak, std::string>> faults = {
      {[](FileHeader& h, auto&) { h.magic[0] = 'k'; }, "bad magic (not a .kiln file)"},
      {[](FileHeader& h, auto&) { h.version = 17; }, "format version 17, this Kiln reads versions 1 to 16"},
      {[](FileHeader& h, auto&) { h.version = 0; }, "format version 0, this Kiln reads versions 1 to 16"},
      {[](FileHeader& h, auto&) { h.header_size = 128; }, "header size 128, expected 64"},
      {[](FileHeader& h, auto&) { h.num_partitions = 0; }, "partition count 0 out of range 1..64"},
      {[](FileHeader& h, auto&) { h.num_partitions = 65; }, "partition count 65 out of range 1..64"},
      {[](FileHeader& h, auto&) { h.file_size = 4096; }, "header says 4096 bytes, file has 4104 (truncated?)"},
      {[](FileHeader& h, auto&) { h.table_offset = 128; }, "partition table (offset 128) lies outside the file"},
      {[](FileHeader& h, auto&) { h.reserved[23] = 1; }, "header has non-zero reserved bytes"},
      {[](FileHeader&, auto& t) { t[1].offset = 8192; }, "partition 1 at offset 8192 size 8 lies outside the file of 4104 bytes"},
      {[](FileHeader&, auto& t) { t[1].size = 9; }, "partition 1 at offset 4096 size 9 lies outside the file of 4104 bytes"},
      {[](FileHeader&, auto& t) { t[1].type = 3; }, "partition 1 has unknown type 3"},
      {[](FileHeader&, auto& t) { t[1].type = kGraph; }, "partition type 1 appears twice"},
      {[](FileHeader&, auto& t) { t[0].flags = 1; }, "partition 0 has non-zero reserved fields"},
      {[](FileHeader&, auto& t) { t[1].reserved = 7; }, "partition 1 has non-zero reserved fields"},
      // Three partitions declared, the third entry all zeros: type 0.
      {[](FileHeader& h, auto&) { h.num_partitions = 3; }, "partition 2 has unknown type 0"},
      {[](FileHeader&, auto& t) { t[0].crc ^= 1; }, "graph partition checksum mismatch"},
      {[](FileHeader&, auto& t) { t[1].crc ^= 1; }, "weights partition checksum mismatch"},
  };
  for (const auto& [tweak, needle] : faults) {
    Image img(Parts(), 4104, tweak);
    ExpectCorrupt(img.Parse(), needle);
  }
  {
    // The header CRC itself.
    Image img(Parts(), 4104);
    img.data()[offsetof(FileHeader, crc)] ^= 0x40;
    ExpectCorrupt(img.Parse(), "header checksum mismatch");
  }
  {
    // A 96-byte file that declares two entries: the table runs past the end.
    Image img({{kGraph, 64, ""}}, 96, [](FileHeader& h, auto&) { h.num_partitions = 2; });
    ExpectCorrupt(img.Parse(), "partition table (offset 64) lies outside the file");
  }
  {
    // Skipping the weights checksum accepts damaged weights.
    Image img(Parts(), 4104, [](FileHeader&, auto& t) { t[1].crc ^= 1; });
    auto r = img.Parse({.verify_weights_checksum = false});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }
}

TEST(KilnImage, LayoutFaults) {
  const std::string json = ImgDoc().Text();
  ExpectCorrupt(Image({{kGraph, 128, json}}, 128 + json.size()).Parse(), "missing graph or weights partition");
  ExpectCorrupt(Image({{kWeights, 4096, "w"}}, 4097).Parse(), "missing graph or weights partition");
  // The graph at 4000 runs into the weights at 4096.
  ExpectCorrupt(Image({{kGraph, 4000, json}, {kWeights, 4096, "w"}}, 4096 + json.size()).Parse(),
                "partitions overlap at offset 4096");
  ExpectCorrupt(Image({{kGraph, 128, json}, {kWeights, 2048, "w"}}, 2049).Parse(),
                "weights partition at offset 2048 is not 4096-byte aligned");
  {
    Image img(Parts(), 4104);
    img.data()[3000] = 1;
    ExpectCorrupt(img.Parse(), "non-zero padding byte at offset 3000");
  }
  {
    Image img(Parts(), 4200);
    img.data()[4199] = 1;
    ExpectCorrupt(img.Parse(), "non-zero trailing byte at offset 4199");
  }
  {
    Image img(Parts(), 4104);
    img.data()[100] = 1;  // inside the table's span (2 entries end at 128)
    ExpectCorrupt(img.Parse(), "header checksum mismatch");
  }
  // What the JSON and the plan verifier say is reported with the file name.
  ExpectCorrupt(Image(Parts("[]"), 4104).Parse(), "the graph partition must be a JSON object, found array");
  Doc badplan;
  badplan.plan = R"({"arena_size":0,"no_reuse_size":0,"lower_bound":0,"const_size":8,"placements":{"x":[2,0,8]}})";
  auto r = Image(Parts(badplan.Text()), 4104).Parse();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model file 'img.kiln'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'y'"), std::string::npos) << r.status().message();
}

// Format version 6 symbols through the verifier: x float32[2] named
// "batch" (dim 0), with the range `range` and x's names `sym`.
std::string SymDoc(const std::string& sym, const std::string& symbols) {
  Doc d = ImgDoc();
  d.values = R"([{"name":"x","dtype":1,"shape":[2],"sym":)" + sym + "}," + kY + "]";
  std::string t = d.Text();
  return t.insert(t.find(R"(},"plan":)"), R"(,"symbols":)" + symbols);  // the graph object's end
}

TEST(KilnImage, SymbolsAreVerified) {
  {
    auto m = Image(Parts(SymDoc(R"(["batch"])", R"({"batch":[2,2]})")), 4104).Parse();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m.value().graph->inputs()[0]->dim_params(), (std::vector<std::string>{"batch"}));
  }
  for (const char* range : {"[1,2]", "[0,-1]", "[2,68719476736]"}) {  // 2 within each
    auto m = Image(Parts(SymDoc(R"(["batch"])", std::string(R"({"batch":)") + range + "}")), 4104).Parse();
    EXPECT_TRUE(m.ok()) << range << ": " << m.status().ToString();
  }
  {
    // A version 5 file (no symbols) still reads.
    Image img(Parts(), 4104, [](FileHeader& h, auto&) { h.version = 5; });
    auto m = img.Parse();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_TRUE(m.value().graph->symbols().empty());
  }
  const std::string long_name(257, 'n');
  const std::vector<std::pair<std::string, std::string>> faults = {
      {SymDoc(R"(["batch","seq"])", R"({"batch":[2,2]})"),
       "value 'x': sym has 2 names, expected 1 (one per dim of float32[2])"},
      {SymDoc(R"([])", R"({"batch":[2,2]})"), "value 'x': sym has 0 names, expected 1 (one per dim of float32[2])"},
      {SymDoc(R"(["seq"])", R"({"batch":[2,2]})"), "value 'x' dim 0: symbol 'seq' is not in the graph's symbols"},
      {SymDoc(R"(["batch"])", "{}"), "value 'x' dim 0: symbol 'batch' is not in the graph's symbols"},
      {SymDoc(R"(["batch"])", R"({"batch":[3,8]})"),
       "value 'x' dim 0 has extent 2, outside the range [3, 8] of its symbol 'batch'"},
      {SymDoc(R"(["batch"])", R"({"batch":[1,1]})"),
       "value 'x' dim 0 has extent 2, outside the range [1, 1] of its symbol 'batch'"},
      {SymDoc(R"(["batch"])", R"({"batch":[3,-1]})"),
       "value 'x' dim 0 has extent 2, outside the range [3, unbounded] of its symbol 'batch'"},
      {SymDoc(R"(["batch"])", R"({"batch":[4,2]})"),
       "symbol 'batch' has range [4, 2], expected 0 <= min <= max <= 68719476736 or max = -1 (unbounded)"},
      {SymDoc(R"(["batch"])", R"({"batch":[-1,2]})"), "symbol 'batch' has range [-1, 2], expected 0 <= min"},
      {SymDoc(R"(["batch"])", R"({"batch":[2,-2]})"), "symbol 'batch' has range [2, -2], expected 0 <= min"},
      {SymDoc(R"(["batch"])", R"({"batch":[2,68719476737]})"),
       "symbol 'batch' has range [2, 68719476737], expected 0 <= min <= max <= 68719476736"},
      {SymDoc(R"(["batch"])", R"({"batch":[68719476737,-1]})"), "symbol 'batch' has range [68719476737, -1]"},
      {SymDoc("[\"" + long_name + "\"]", "{\"" + long_name + "\":[2,2]}"),
       "graph symbols: symbol name '" + long_name.substr(0, 64) + "...' has 257 bytes, expected 1 to 256"},
      {SymDoc(R"(["batch"])", R"({"batch":[2,2],"":[1,1]})"),
       "graph symbols: symbol name '' has 0 bytes, expected 1 to 256"},
  };
  for (const auto& [json, needle] : faults) ExpectCorrupt(Image(Parts(json), 4104).Parse(), needle);
  {
    // A name of 256 bytes is the longest allowed.
    const std::string n256(256, 'n');
    auto m = Image(Parts(SymDoc("[\"" + n256 + "\"]", "{\"" + n256 + "\":[2,2]}")), 4104).Parse();
    EXPECT_TRUE(m.ok()) << m.status().ToString();
  }
}

// Graphs built in memory (VerifyGraph): a subgraph with symbols, a name
// that is not UTF-8, a data-dependent dim (its bound is not checked).
TEST(KilnImage, SymbolsInMemoryGraphs) {
  format::CompiledModel m = AttrModel();
  ir::Graph& g = *m.graph;
  g.symbols()["batch"] = {2, 2};
  g.FindValue("x")->dim_params() = {"batch"};
  EXPECT_TRUE(plan::VerifyGraph(g).ok()) << plan::VerifyGraph(g).ToString();
  ir::Graph& then = *g.FindValue("y")->producer()->FindAttr("g")->g;
  then.symbols()["n"] = {1, 1};
  Status st = plan::VerifyGraph(g);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("subgraph 'then' has symbols; only the top-level graph has a symbol table"),
            std::string::npos) << st.message();
  then.symbols().clear();
  g.symbols()["b\xff"] = {1, 1};
  st = plan::VerifyGraph(g);
  EXPECT_NE(st.message().find("graph symbols: symbol name 'b\\xff' is not valid UTF-8 (byte 1)"), std::string::npos)
      << st.message();
  g.symbols().erase("b\xff");
  g.symbols()["batch"] = {5, 6};  // x's extent 2 is outside; as a data-dependent dim it is a bound
  g.FindValue("y")->dim_params() = {"batch"};
  g.FindValue("y")->set_dynamic_mask(1);
  st = plan::VerifyGraph(g);
  EXPECT_NE(st.message().find("value 'x' dim 0 has extent 2, outside the range [5, 6] of its symbol 'batch'"),
            std::string::npos) << st.message();
  g.FindValue("x")->dim_params().clear();
  EXPECT_TRUE(plan::VerifyGraph(g).ok()) << plan::VerifyGraph(g).ToString();
}

TEST(KilnImage, ReadModelFileOfSmallAndDamagedFiles) {
  test::TempDir dir;
  const std::string p = dir.file("t.kiln");
  {
    std::ofstream f(p, std::ios::binary);
    f << "KILNMDL";
  }
  auto r = format::ReadModelFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("model file '" + p + "': too small to be a .kiln file (7 bytes)"), std::string::npos)
      << r.status().message();
  {
    Image img(Parts(), 4104);
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(img.data()), 4104);
  }
  auto ok = format::ReadModelFile(p);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok.value().file_size, 4104u);
  EXPECT_EQ(ok.value().model.graph->name(), "g");
}

}  // namespace
}  // namespace kiln
