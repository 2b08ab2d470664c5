// The ONNX importer (src/frontend/onnx) on models built in memory with the
// ONNX protobuf API and written to a temporary file: every form of constant
// data and attribute is converted with the values it holds, and malformed
// models (types, initializers, inputs, outputs, opsets, options) are refused
// naming the file, node, attribute or input and what was expected.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "api/compiler.h"
#include "format/kiln_file.h"
#include "frontend/onnx/onnx_import.h"
#include "kiln/runtime.h"
#include "test_util.h"

namespace kiln {
namespace {

using onnx_frontend::ImportOnnxFile;
using onnx_frontend::ImportOptions;

void SetType(onnx::ValueInfoProto* vi, const std::string& name, int elem, const std::vector<std::int64_t>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* sh = tt->mutable_shape();
  for (std::int64_t d : dims) {
    if (d < 0) sh->add_dim()->set_dim_param("N");
    else sh->add_dim()->set_dim_value(d);
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         const std::vector<std::string>& ins, const std::vector<std::string>& outs) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

onnx::AttributeProto* AddAttr(onnx::NodeProto* n, const std::string& name, onnx::AttributeProto::AttributeType t) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(t);
  return a;
}

// x float[2,3] -> Relu 'relu' -> y float[2,3], opset 13.
onnx::ModelProto BaseModel(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  SetType(g->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(g, "Relu", "relu", {"x"}, {"y"});
  SetType(g->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
  return m;
}

class OnnxImportTest : public ::testing::Test {
 protected:
  std::string Write(const onnx::ModelProto& m, const std::string& name = "m.onnx") {
    std::string bytes;
    EXPECT_TRUE(m.SerializeToString(&bytes));
    return WriteBytes(bytes, name);
  }
  std::string WriteBytes(const std::string& bytes, const std::string& name) {
    const std::string p = dir_.file(name);
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  Result<std::unique_ptr<ir::Graph>> Import(const onnx::ModelProto& m, const ImportOptions& opts = {}) {
    path_ = Write(m);
    return ImportOnnxFile(path_, opts);
  }
  // Expects the import to fail with every needle in the message (and the
  // model's path, unless the error is about a command-line option).
  void ExpectRefused(const onnx::ModelProto& m, const std::vector<std::string>& needles,
                     const ImportOptions& opts = {}, bool names_path = true) {
    auto r = Import(m, opts);
    ASSERT_FALSE(r.ok()) << "accepted; expected: " << needles[0];
    if (names_path) {
      EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
    }
    for (const std::string& n : needles) {
      EXPECT_NE(r.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << r.status().message();
    }
  }

  test::TempDir dir_;
  std::string path_;
};

template <typename T>
std::vector<T> Values(const HostTensorPtr& t) {
  const T* p = static_cast<const T*>(t->data());
  return std::vector<T>(p, p + t->nbytes() / sizeof(T));
}

TEST_F(OnnxImportTest, BaseModelImports) {
  auto r = Import(BaseModel());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ir::Graph& g = *r.value();
  EXPECT_EQ(g.name(), "g");
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0]->op_type(), "Relu");
  EXPECT_EQ(g.nodes()[0]->since_version(), 13);  // Relu-13 is current at opset 13
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.inputs()[0]->shape(), (Shape{2, 3}));
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->dtype(), DType::kFloat32);
}

TEST_F(OnnxImportTest, ConstantNodesOfEveryValueForm) {
  auto m = BaseModel();
  auto* g = m.mutable_graph();
  g->clear_name();  // the graph is then named after the file
  AddAttr(AddNode(g, "Constant", "c1", {}, {"cf"}), "value_float", onnx::AttributeProto::FLOAT)->set_f(1.5f);
  AddAttr(AddNode(g, "Constant", "c2", {}, {"ci"}), "value_int", onnx::AttributeProto::INT)->set_i(-7);
  auto* fs = AddAttr(AddNode(g, "Constant", "c3", {}, {"cfs"}), "value_floats", onnx::AttributeProto::FLOATS);
  fs->add_floats(0.25f);
  fs->add_floats(-4);
  auto* is = AddAttr(AddNode(g, "Constant", "c4", {}, {"cis"}), "value_ints", onnx::AttributeProto::INTS);
  for (int v : {3, 4, 5}) is->add_ints(v);
  auto* t = AddAttr(AddNode(g, "Constant", "c5", {}, {"ct"}), "value", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(2);
  t->add_int64_data(-1);
  t->add_int64_data(1LL << 40);
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ir::Graph& ig = *r.value();
  EXPECT_EQ(ig.name(), "m");
  auto c = [&](const char* n) { return ig.FindValue(n)->constant(); };
  ASSERT_TRUE(c("cf") && c("ci") && c("cfs") && c("cis") && c("ct"));
  EXPECT_EQ(c("cf")->shape(), Shape{});
  EXPECT_EQ(Values<float>(c("cf")), (std::vector<float>{1.5f}));
  EXPECT_EQ(c("ci")->dtype(), DType::kInt64);
  EXPECT_EQ(Values<std::int64_t>(c("ci")), (std::vector<std::int64_t>{-7}));
  EXPECT_EQ(c("cfs")->shape(), (Shape{2}));
  EXPECT_EQ(Values<float>(c("cfs")), (std::vector<float>{0.25f, -4}));
  EXPECT_EQ(Values<std::int64_t>(c("cis")), (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(Values<std::int64_t>(c("ct")), (std::vector<std::int64_t>{-1, 1LL << 40}));
}

TEST_F(OnnxImportTest, MalformedConstantNodes) {
  {
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "Constant", "two", {}, {"c"});
    AddAttr(n, "value_float", onnx::AttributeProto::FLOAT)->set_f(1);
    AddAttr(n, "value_int", onnx::AttributeProto::INT)->set_i(1);
    ExpectRefused(m, {"Constant node 'two' must have exactly one value attribute, has 2"});
  }
  {
    auto m = BaseModel();
    AddAttr(AddNode(m.mutable_graph(), "Constant", "str", {}, {"c"}), "value_string", onnx::AttributeProto::STRING)
        ->set_s("hello");
    ExpectRefused(m, {"Constant node 'str': Constant attribute 'value_string' is not supported"});
  }
  {
    auto m = BaseModel();
    AddAttr(AddNode(m.mutable_graph(), "Constant", "outs", {}, {"c", "d"}), "value_int", onnx::AttributeProto::INT);
    ExpectRefused(m, {"Constant node 'outs' must have one output"});
  }
  {
    auto m = BaseModel();
    AddAttr(AddNode(m.mutable_graph(), "Constant", "dup", {}, {"x"}), "value_int", onnx::AttributeProto::INT);
    ExpectRefused(m, {"Constant node 'dup': output 'x' is already defined"});
  }
}

// Initializers without raw_data: each typed field, converted to the
// initializer's type.
TEST_F(OnnxImportTest, InitializersFromTypedDataFields) {
  auto m = BaseModel();
  auto* g = m.mutable_graph();
  auto init = [&](const std::string& name, int type, std::int64_t n) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(n);
    return t;
  };
  auto* f = init("f", onnx::TensorProto::FLOAT, 2);
  f->add_float_data(1.25f);
  f->add_float_data(-3);
  auto* d = init("d", onnx::TensorProto::DOUBLE, 1);
  d->add_double_data(0.1);
  auto* i64 = init("i64", onnx::TensorProto::INT64, 2);
  i64->add_int64_data(INT64_MIN);
  i64->add_int64_data(5);
  auto* u32 = init("u32", onnx::TensorProto::UINT32, 2);
  u32->add_uint64_data(4000000000u);
  u32->add_uint64_data(1);
  auto* u64 = init("u64", onnx::TensorProto::UINT64, 1);
  u64->add_uint64_data(UINT64_MAX);
  auto* i32 = init("i32", onnx::TensorProto::INT32, 2);
  i32->add_int32_data(-2000000000);
  i32->add_int32_data(7);
  auto* i16 = init("i16", onnx::TensorProto::INT16, 2);
  i16->add_int32_data(-300);
  i16->add_int32_data(300);
  auto* u16 = init("u16", onnx::TensorProto::UINT16, 1);
  u16->add_int32_data(65535);
  auto* f16 = init("f16", onnx::TensorProto::FLOAT16, 1);
  f16->add_int32_data(0x3C00);  // 1.0 in binary16 bits
  auto* bf16 = init("bf16", onnx::TensorProto::BFLOAT16, 1);
  bf16->add_int32_data(0xC000);  // -2.0 in bfloat16 bits
  auto* i8 = init("i8", onnx::TensorProto::INT8, 2);
  i8->add_int32_data(-128);
  i8->add_int32_data(127);
  auto* u8 = init("u8", onnx::TensorProto::UINT8, 1);
  u8->add_int32_data(255);
  auto* b = init("b", onnx::TensorProto::BOOL, 2);
  b->add_int32_data(1);
  b->add_int32_data(0);
  // An initializer that is also listed as a graph input is a constant.
  SetType(g->add_input(), "f", onnx::TensorProto::FLOAT, {2});
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ir::Graph& ig = *r.value();
  auto c = [&](const char* n) {
    ir::Value* v = ig.FindValue(n);
    EXPECT_TRUE(v && v->is_constant()) << n;
    return v->constant();
  };
  EXPECT_EQ(Values<float>(c("f")), (std::vector<float>{1.25f, -3}));
  EXPECT_EQ(Values<double>(c("d")), (std::vector<double>{0.1}));
  EXPECT_EQ(Values<std::int64_t>(c("i64")), (std::vector<std::int64_t>{INT64_MIN, 5}));
  EXPECT_EQ(Values<std::uint32_t>(c("u32")), (std::vector<std::uint32_t>{4000000000u, 1}));
  EXPECT_EQ(Values<std::uint64_t>(c("u64")), (std::vector<std::uint64_t>{UINT64_MAX}));
  EXPECT_EQ(Values<std::int32_t>(c("i32")), (std::vector<std::int32_t>{-2000000000, 7}));
  EXPECT_EQ(Values<std::int16_t>(c("i16")), (std::vector<std::int16_t>{-300, 300}));
  EXPECT_EQ(Values<std::uint16_t>(c("u16")), (std::vector<std::uint16_t>{65535}));
  EXPECT_EQ(c("f16")->dtype(), DType::kFloat16);
  EXPECT_EQ(Values<std::uint16_t>(c("f16")), (std::vector<std::uint16_t>{0x3C00}));
  EXPECT_EQ(c("bf16")->dtype(), DType::kBFloat16);
  EXPECT_EQ(Values<std::uint16_t>(c("bf16")), (std::vector<std::uint16_t>{0xC000}));
  EXPECT_EQ(Values<std::int8_t>(c("i8")), (std::vector<std::int8_t>{-128, 127}));
  EXPECT_EQ(Values<std::uint8_t>(c("u8")), (std::vector<std::uint8_t>{255}));
  EXPECT_EQ(c("b")->dtype(), DType::kBool);
  EXPECT_EQ(Values<std::uint8_t>(c("b")), (std::vector<std::uint8_t>{1, 0}));
  // Only x is a graph input.
  ASSERT_EQ(ig.inputs().size(), 1u);
  EXPECT_EQ(ig.inputs()[0]->name(), "x");
}

TEST_F(OnnxImportTest, MalformedInitializers) {
  auto with = [](auto fill) {
    auto m = BaseModel();
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    fill(t);
    return m;
  };
  ExpectRefused(with([](onnx::TensorProto* t) {
                  t->set_data_type(onnx::TensorProto::FLOAT);
                  t->add_dims(2);
                  for (float v : {1.f, 2.f, 3.f}) t->add_float_data(v);
                }),
                {"initializer 'w' has 3 elements of data, shape [2] needs 2"});
  ExpectRefused(with([](onnx::TensorProto* t) {
                  t->set_data_type(onnx::TensorProto::UINT64);
                  t->add_dims(3);
                }),
                {"initializer 'w' has 0 elements of data, shape [3] needs 3"});
  ExpectRefused(with([](onnx::TensorProto* t) {
                  t->set_data_type(onnx::TensorProto::INT32);
                  t->add_dims(2);
                  t->set_raw_data(std::string(7, '\0'));
                }),
                {"initializer 'w' has 7 bytes of raw data, int32[2] needs 8"});
  for (auto type : {onnx::TensorProto::STRING, onnx::TensorProto::COMPLEX64}) {
    ExpectRefused(with([type](onnx::TensorProto* t) {
                    t->set_data_type(type);
                    t->add_dims(1);
                  }),
                  {"initializer 'w' has element type " + onnx::TensorProto_DataType_Name(type) +
                   ", which Kiln does not support"});
  }
  ExpectRefused(with([](onnx::TensorProto* t) {
                  t->set_data_type(onnx::TensorProto::FLOAT);
                  t->add_dims(4);
                  t->add_dims(-2);
                }),
                {"initializer 'w': dim 1 of shape [4,?] is negative (-2)"});
  {
    auto m = with([](onnx::TensorProto* t) {
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_float_data(1);
    });
    auto* t2 = m.mutable_graph()->add_initializer();
    t2->set_name("w");
    t2->set_data_type(onnx::TensorProto::FLOAT);
    ExpectRefused(m, {"duplicate initializer 'w'"});
  }
  {
    auto m = BaseModel();
    auto* sp = m.mutable_graph()->add_sparse_initializer();
    sp->mutable_values()->set_name("s");
    sp->mutable_values()->set_data_type(onnx::TensorProto::FLOAT);
    ExpectRefused(m, {"sparse initializers are not supported"});
  }
}

TEST_F(OnnxImportTest, ExternalData) {
  // 8 bytes of other data, then float32 {0.5, -1.5}.
  std::string blob(8, 'z');
  const float vals[2] = {0.5f, -1.5f};
  blob.append(reinterpret_cast<const char*>(vals), sizeof(vals));
  WriteBytes(blob, "w.bin");
  auto model = [](const std::vector<std::pair<std::string, std::string>>& kv) {
    auto m = BaseModel();
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto& [k, v] : kv) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    return m;
  };
  auto r = Import(model({{"location", "w.bin"}, {"offset", "8"}, {"length", "8"}, {"checksum", "ignored"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<float>(r.value()->FindValue("w")->constant()), (std::vector<float>{0.5f, -1.5f}));

  ExpectRefused(model({{"location", std::string("w.bin\0x", 7)}}), {"initializer 'w': external data location 'w.bin\\x00x' contains a NUL byte"});
  ExpectRefused(model({{"location", "w.bin"}, {"offset", "-8"}}),
                {"initializer 'w': external data 'offset' = '-8' is not a non-negative 64-bit integer"});
  ExpectRefused(model({{"location", "w.bin"}, {"length", "99999999999999999999"}}),
                {"external data 'length' = '99999999999999999999' is not a non-negative 64-bit integer"});
  ExpectRefused(model({{"location", "w.bin"}, {"offset", ""}}), {"external data 'offset' = ''"});
  ExpectRefused(model({{"location", "w.bin"}, {"offset", "12"}}),
                {"initializer 'w': external data [offset 12, +8 bytes) exceeds", "w.bin' (16 bytes)"});
  ExpectRefused(model({{"location", "../w.bin"}}), {"initializer 'w'", "contains '..'"});
  ExpectRefused(model({{"offset", "0"}}), {"initializer 'w': external data has no 'location'"});
}

TEST_F(OnnxImportTest, AttributesOfEveryKindAreConverted) {
  auto m = BaseModel();
  auto* g = m.mutable_graph();
  // Identity declares no attributes: the schema check leaves these to the
  // op definition (after import), so the importer converts them as they are.
  auto* n = AddNode(g, "Identity", "id", {"x"}, {"z"});
  auto* fs = AddAttr(n, "fs", onnx::AttributeProto::FLOATS);
  fs->add_floats(0.5f);
  fs->add_floats(2);
  auto* ss = AddAttr(n, "ss", onnx::AttributeProto::STRINGS);
  ss->add_strings("a");
  ss->add_strings("\xc3\xa9");  // U+00E9, valid UTF-8
  auto* t = AddAttr(n, "t", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::INT32);
  t->add_dims(2);
  t->add_int32_data(9);
  t->add_int32_data(-9);
  auto* ts = AddAttr(n, "ts", onnx::AttributeProto::TENSORS);
  for (float v : {1.f, 2.f}) {
    auto* e = ts->add_tensors();
    e->set_data_type(onnx::TensorProto::FLOAT);
    e->add_float_data(v);
  }
  auto* gs = AddAttr(n, "gs", onnx::AttributeProto::GRAPHS);
  for (const char* name : {"b0", "b1"}) {
    auto* sg = gs->add_graphs();
    sg->set_name(name);
    AddNode(sg, "Identity", "inner", {"x"}, {"o"});  // reads the outer x
    SetType(sg->add_output(), "o", onnx::TensorProto::FLOAT, {2, 3});
  }
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ir::Node* id = r.value()->FindValue("z")->producer();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->GetFloats("fs"), (std::vector<float>{0.5f, 2}));
  ASSERT_TRUE(id->FindAttr("ss"));
  EXPECT_EQ(id->FindAttr("ss")->strings, (std::vector<std::string>{"a", "\xc3\xa9"}));
  ASSERT_TRUE(id->FindAttr("t") && id->FindAttr("t")->t);
  EXPECT_EQ(Values<std::int32_t>(id->FindAttr("t")->t), (std::vector<std::int32_t>{9, -9}));
  ASSERT_TRUE(id->FindAttr("ts"));
  ASSERT_EQ(id->FindAttr("ts")->tensors.size(), 2u);
  EXPECT_EQ(Values<float>(id->FindAttr("ts")->tensors[1]), (std::vector<float>{2}));
  ASSERT_TRUE(id->FindAttr("gs"));
  ASSERT_EQ(id->FindAttr("gs")->graphs.size(), 2u);
  EXPECT_EQ(id->FindAttr("gs")->graphs[1]->name(), "b1");
  ASSERT_EQ(id->FindAttr("gs")->graphs[0]->outputs().size(), 1u);
  // The subgraph's node reads the outer graph's x.
  EXPECT_EQ(id->FindAttr("gs")->graphs[0]->nodes()[0]->input(0), r.value()->FindValue("x"));
}

TEST_F(OnnxImportTest, MalformedAttributes) {
  {
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "Identity", "id", {"x"}, {"z"});
    auto* t = AddAttr(n, "t", onnx::AttributeProto::TENSOR)->mutable_t();
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_float_data(1);
    ExpectRefused(m, {"Identity node 'id' attribute 't' has 1 elements of data, shape [2] needs 2"});
  }
  {
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "Identity", "id", {"x"}, {"z"});
    auto* ts = AddAttr(n, "ts", onnx::AttributeProto::TENSORS);
    ts->add_tensors()->set_data_type(onnx::TensorProto::STRING);
    ExpectRefused(m, {"Identity node 'id' attribute 'ts' has element type STRING"});
  }
  {
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "Identity", "id", {"x"}, {"z"});
    AddAttr(n, "sp", onnx::AttributeProto::SPARSE_TENSOR);
    ExpectRefused(m, {"Identity node 'id' attribute 'sp' has an unsupported type (11)"});
  }
  {
    // A schema attribute of the wrong type names expected and found.
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "LeakyRelu", "lr", {"x"}, {"z"});
    AddAttr(n, "alpha", onnx::AttributeProto::INTS)->add_ints(1);
    ExpectRefused(m, {"LeakyRelu node 'lr': attribute 'alpha' must be of type FLOAT, found INTS"});
  }
  {
    // Inside a subgraph, the error names the path to it.
    auto m = BaseModel();
    auto* n = AddNode(m.mutable_graph(), "Identity", "outer", {"x"}, {"z"});
    auto* sg = AddAttr(n, "gs", onnx::AttributeProto::GRAPHS)->add_graphs();
    sg->set_name("body");
    AddNode(sg, "Identity", "inner", {"nowhere"}, {"o"});
    SetType(sg->add_output(), "o", onnx::TensorProto::FLOAT, {1});
    ExpectRefused(m, {"Identity node 'outer' attribute 'gs': value 'nowhere' is used by", "never defined"});
  }
}

TEST_F(OnnxImportTest, InvalidUtf8AnywhereIsRefused) {
  const std::string bad("a\xff", 2);
  {
    auto m = BaseModel();
    SetType(m.mutable_graph()->add_value_info(), bad, onnx::TensorProto::FLOAT, {1});
    ExpectRefused(m, {"value_info name 'a\\xff' is not valid UTF-8 (byte 1)"});
  }
  {
    auto m = BaseModel();
    auto* ss = AddAttr(AddNode(m.mutable_graph(), "Identity", "id", {"x"}, {"z"}), "ss", onnx::AttributeProto::STRINGS);
    ss->add_strings("ok");
    ss->add_strings(bad);
    ExpectRefused(m, {"Identity node 'id': attribute 'ss' value 'a\\xff' is not valid UTF-8"});
  }
  {
    auto m = BaseModel();
    auto* sg = AddAttr(AddNode(m.mutable_graph(), "Identity", "id", {"x"}, {"z"}), "gs", onnx::AttributeProto::GRAPHS)
                   ->add_graphs();
    sg->set_name(bad);
    ExpectRefused(m, {"Identity node 'id': attribute 'gs': graph name 'a\\xff' is not valid UTF-8"});
  }
  {
    auto m = BaseModel();
    SetType(m.mutable_graph()->add_value_info(), "v", onnx::TensorProto::FLOAT, {1});
    m.mutable_graph()->mutable_value_info(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)
        ->set_dim_param(bad);
    ExpectRefused(m, {"value_info 'v': dim_param 'a\\xff' is not valid UTF-8"});
  }
}

TEST_F(OnnxImportTest, GraphInputs) {
  {
    auto m = BaseModel();
    SetType(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
    ExpectRefused(m, {"duplicate graph input 'x'"});
  }
  {
    auto m = BaseModel();
    auto* in = m.mutable_graph()->add_input();
    in->set_name("seq");
    in->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
    ExpectRefused(m, {"'seq' is not a tensor (sequence/map/optional values are not supported)"});
  }
  {
    auto m = BaseModel();
    SetType(m.mutable_graph()->add_input(), "s", onnx::TensorProto::STRING, {1});
    ExpectRefused(m, {"'s' has element type STRING, which Kiln does not support"});
  }
  {
    // No shape at all: unknown rank, fixed by --input-shape.
    auto m = BaseModel();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    auto r = Import(m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[0]->dim_params(), (std::vector<std::string>{"<unknown rank>"}));
    ImportOptions opts;
    opts.input_shapes["x"] = {4, 5, 6};
    r = Import(m, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[0]->shape(), (Shape{4, 5, 6}));
  }
  {
    auto m = BaseModel();
    ImportOptions opts;
    opts.input_shapes["x"] = {2, 3, 1};
    ExpectRefused(m, {"--input-shape for 'x': rank 3 given, the model's input has rank 2 [2,3]"}, opts, false);
  }
  {
    // A symbolic dim takes the given extent; a fixed one must match.
    auto m = BaseModel();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)
        ->set_dim_param("batch");
    ImportOptions opts;
    opts.input_shapes["x"] = {7, 3};
    auto r = Import(m, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[0]->shape(), (Shape{7, 3}));
  }
}

// --input-shape ranges and gears (format version 7): a range bounds the
// dim's symbol (intersected across inputs sharing it), gears become
// signatures of every input.
TEST_F(OnnxImportTest, RangesAndGearsBecomeSymbolsAndSignatures) {
  // x float[batch,3] -> Relu -> y; z float[batch,seq] -> Relu -> w.
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
  SetType(g->add_input(), "z", onnx::TensorProto::FLOAT, {-1, -1});
  auto* zs = g->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape();
  zs->mutable_dim(0)->set_dim_param("batch");
  AddNode(g, "Relu", "relu_z", {"z"}, {"w"});
  SetType(g->add_output(), "w", onnx::TensorProto::FLOAT, {-1, -1});
  auto import = [&](const char* spec) {
    ImportOptions opts;
    auto parsed = onnx_frontend::ParseInputSpecs(spec);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (parsed.ok()) opts.input_specs = parsed.value();
    return Import(m, opts);
  };
  {
    auto r = import("x:1..8,3;z:2..6,1..100");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const ir::Graph& ig = *r.value();
    EXPECT_EQ(ig.inputs()[0]->shape(), (Shape{-1, 3}));
    EXPECT_EQ(ig.inputs()[1]->shape(), (Shape{-1, -1}));
    EXPECT_EQ(ig.inputs()[1]->dim_params(), (std::vector<std::string>{"batch", "N"}));  // (SetType names -1 dims N)
    EXPECT_EQ(ig.symbols(), (std::map<std::string, ir::SymbolRange>{{"batch", {2, 6}}, {"N", {1, 100}}}));
    EXPECT_TRUE(ig.gears().empty());
  }
  {
    // Gears on z give x its batch too.
    auto r = import("z:2,5|4,7");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const ir::Graph& ig = *r.value();
    EXPECT_EQ(ig.symbols(), (std::map<std::string, ir::SymbolRange>{{"batch", {2, 4}}, {"N", {5, 7}}}));
    EXPECT_EQ(ig.gears(), (std::vector<std::vector<Shape>>{{{2, 3}, {2, 5}}, {{4, 3}, {4, 7}}}));
    EXPECT_TRUE(ig.gears_only());
  }
  {
    auto r = import("z:1..8,1..64|2,5");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->gears(), (std::vector<std::vector<Shape>>{{{2, 3}, {2, 5}}}));
    EXPECT_FALSE(r.value()->gears_only());
  }
  {
    // The same gear twice is planned once.
    auto r = import("z:2,5|2,5|4,7");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->gears().size(), 2u);
  }
  // Refused, each naming the culprit.
  struct Refusal {
    const char* spec;
    const char* needle;
  };
  for (const Refusal& c : {
           Refusal{"x:1..2,3;z:4..6,5",
                   "symbol 'batch' of 'z' dim 0 ranges over 4..6 but 'x' dim 0 gives it 1..2: no extent satisfies both"},
           // A dim the model fixes must lie in the range given for it.
           Refusal{"x:1..4,4..8",
                   "--input-shape for 'x': dim 1 is fixed to 3 in the model, 4..8 given"},
           // Gears on x alone leave z's seq open.
           Refusal{"x:1,3|2,3",
                   "gear 0 leaves input 'z' dim 1 (symbol 'N') open; give that input gears too"},
           // A gear must keep the dims the model fixes (x dim 1 is 3).
           Refusal{"x:1..8,1..10|2,5;z:1..8,1..8",
                   "gear 0 of 'x' has dim 1 = 5, but the model fixes it to 3"},
           // A gear past Kiln's tensor limit fails here, not when the file loads.
           Refusal{"z:1,3|3000000000,8",
                   "gear 1 of 'z'"},
           // Two inputs' gears must agree on their shared symbol.
           Refusal{"x:1,3|2,3;z:1,5|3,5",
                   "gear 1 gives symbol 'batch' 3 at 'z' dim 0 but 2 at 'x' dim 0"}}) {
    auto r = import(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << c.spec << ": " << r.status().message();
  }
}

// ONNX dim_params are the dims' symbols (format version 6): a name kept
// through --input-shape becomes a symbol of the graph fixed to the given
// extent, and the loaded model reports it in TensorInfo::dims.
TEST_F(OnnxImportTest, DimParamsBecomeSymbols) {
  // x float[batch,3] -> Relu -> y; z float[batch,seq] -> Relu -> w.
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
  SetType(g->add_input(), "z", onnx::TensorProto::FLOAT, {-1, -1});
  auto* zs = g->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape();
  zs->mutable_dim(0)->set_dim_param("batch");
  zs->mutable_dim(1)->set_dim_param("seq");
  AddNode(g, "Relu", "relu_z", {"z"}, {"w"});
  SetType(g->add_output(), "w", onnx::TensorProto::FLOAT, {-1, -1});
  {
    ImportOptions opts;
    opts.input_shapes["x"] = {2, 3};
    opts.input_shapes["z"] = {2, 5};
    auto r = Import(m, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const ir::Graph& ig = *r.value();
    EXPECT_EQ(ig.inputs()[0]->shape(), (Shape{2, 3}));
    EXPECT_EQ(ig.inputs()[0]->dim_params(), (std::vector<std::string>{"batch", ""}));
    EXPECT_EQ(ig.inputs()[1]->dim_params(), (std::vector<std::string>{"batch", "seq"}));
    EXPECT_EQ(ig.symbols(), (std::map<std::string, ir::SymbolRange>{{"batch", {2, 2}}, {"seq", {5, 5}}}));
  }
  {
    // Not fixed: the names stay, no symbol yet (the compile refuses the dims).
    auto r = Import(m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[1]->dim_params(), (std::vector<std::string>{"batch", "seq"}));
    EXPECT_TRUE(r.value()->symbols().empty());
  }
  {
    // "batch" given two extents (2 in x, 4 in z): such models compiled
    // before symbols existed, so the name is dropped (no symbol) rather than
    // refused; "seq" stays.
    ImportOptions opts;
    opts.input_shapes["x"] = {2, 3};
    opts.input_shapes["z"] = {4, 5};
    auto r = Import(m, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[0]->dim_params(), (std::vector<std::string>{"", ""}));
    EXPECT_EQ(r.value()->inputs()[1]->dim_params(), (std::vector<std::string>{"", "seq"}));
    EXPECT_EQ(r.value()->symbols(), (std::map<std::string, ir::SymbolRange>{{"seq", {5, 5}}}));
  }
  {
    // A name longer than a .kiln file holds (256 bytes) is dropped; 256 is kept.
    onnx::ModelProto longm = BaseModel();
    auto* shape = longm.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->mutable_dim(0)->set_dim_param(std::string(256, 'a'));
    shape->mutable_dim(1)->set_dim_param(std::string(257, 'b'));
    ImportOptions opts;
    opts.input_shapes["x"] = {2, 3};
    auto r = Import(longm, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->inputs()[0]->dim_params(), (std::vector<std::string>{std::string(256, 'a'), ""}));
    EXPECT_EQ(r.value()->symbols(), (std::map<std::string, ir::SymbolRange>{{std::string(256, 'a'), {2, 2}}}));
  }
  // Compiled with batch = 2 (x) and seq = 5, then loaded: x's dims are
  // {2, 2, 2, "batch"} and {3, 3, 3, ""}; z's {2, 2, 2, "batch"}, {5, 5, 5, "seq"}.
  CompileOptions co;
  co.input_shapes["x"] = {2, 3};
  co.input_shapes["z"] = {2, 5};
  auto compiled = CompileOnnxFile(Write(m, "sym.onnx"), co);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_EQ(compiled.value().graph->symbols(),
            (std::map<std::string, ir::SymbolRange>{{"batch", {2, 2}}, {"seq", {5, 5}}}));
  const std::string kiln_path = dir_.file("sym.kiln");
  ASSERT_TRUE(format::WriteModelFile(compiled.value(), kiln_path).ok());
  auto model = Model::Load(kiln_path, {});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<TensorInfo>& ins = model.value()->inputs();
  ASSERT_EQ(ins.size(), 2u);
  struct Want { std::int64_t value, min, max; std::string symbol; };
  auto expect_dims = [](const TensorInfo& t, const std::vector<Want>& want) {
    ASSERT_EQ(t.dims.size(), want.size()) << t.name;
    for (std::size_t d = 0; d < want.size(); ++d) {
      EXPECT_EQ(t.dims[d].value, want[d].value) << t.name << " dim " << d;
      EXPECT_EQ(t.dims[d].min, want[d].min) << t.name << " dim " << d;
      EXPECT_EQ(t.dims[d].max, want[d].max) << t.name << " dim " << d;
      EXPECT_EQ(t.dims[d].symbol, want[d].symbol) << t.name << " dim " << d;
    }
  };
  expect_dims(ins[0], {{2, 2, 2, "batch"}, {3, 3, 3, ""}});
  expect_dims(ins[1], {{2, 2, 2, "batch"}, {5, 5, 5, "seq"}});
  // Outputs: extents (their symbols are not derived yet).
  const std::vector<TensorInfo>& outs = model.value()->outputs();
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].dims[1].value, 5);
  EXPECT_EQ(outs[1].dims[1].min, 5);
  EXPECT_EQ(outs[1].dims[1].max, 5);
}

TEST_F(OnnxImportTest, ConstantInputs) {
  auto m = BaseModel();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)
      ->set_dim_param("batch");
  {
    ImportOptions opts;
    opts.constant_inputs["x"] = test::F32({4, 3}, std::vector<float>(12, 2.f));
    auto r = Import(m, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ir::Value* x = r.value()->FindValue("x");
    ASSERT_TRUE(x && x->is_constant());
    EXPECT_TRUE(r.value()->inputs().empty());
    EXPECT_EQ(x->constant()->shape(), (Shape{4, 3}));
    EXPECT_TRUE(x->dim_params().empty());
  }
  {
    ImportOptions opts;
    opts.constant_inputs["x"] = test::I64({2, 3}, {1, 2, 3, 4, 5, 6});
    ExpectRefused(m, {"--const-input 'x': the model declares float32, the value is int64"}, opts, false);
  }
  {
    ImportOptions opts;
    opts.constant_inputs["x"] = test::F32({2, 4}, std::vector<float>(8));
    ExpectRefused(m, {"--const-input 'x': the model declares shape [?,3], the value has [2,4]"}, opts, false);
  }
  {
    ImportOptions opts;
    opts.constant_inputs["x"] = test::F32({6}, std::vector<float>(6));
    ExpectRefused(m, {"--const-input 'x': the model declares shape [?,3], the value has [6]"}, opts, false);
  }
  {
    ImportOptions opts;
    opts.constant_inputs["nope"] = test::F32({1}, {1});
    ExpectRefused(m, {"--const-input names 'nope', which is not an input of the model"}, opts, false);
  }
  {
    // Unknown rank: any value fits.
    auto u = BaseModel();
    u.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    ImportOptions opts;
    opts.constant_inputs["x"] = test::F32({5}, std::vector<float>(5));
    auto r = Import(u, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r.value()->FindValue("x")->is_constant());
  }
}

TEST_F(OnnxImportTest, NodeOutputsAndGraphStructure) {
  {
    auto m = BaseModel();
    AddNode(m.mutable_graph(), "Relu", "again", {"x"}, {"x"});
    ExpectRefused(m, {"Relu node 'again': output 'x' is already defined"});
  }
  {
    auto m = BaseModel();
    AddNode(m.mutable_graph(), "Relu", "twice", {"x"}, {"y"});
    ExpectRefused(m, {"Relu node 'twice': output 'y' is already defined"});
  }
  {
    // An unnamed node is named after its op and index; an empty output name
    // gets a placeholder value.
    auto m = BaseModel();
    AddNode(m.mutable_graph(), "Identity", "", {"x"}, {""});
    auto r = Import(m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ir::Value* placeholder = r.value()->FindValue("Identity_1_unused_out");
    ASSERT_TRUE(placeholder);
    ASSERT_TRUE(placeholder->producer());
    EXPECT_EQ(placeholder->producer()->name(), "Identity_1");
  }
  {
    // Nodes out of order are sorted: b = Relu(a) listed before a = Relu(x).
    auto m = BaseModel();
    auto* g = m.mutable_graph();
    g->clear_node();
    AddNode(g, "Relu", "second", {"a"}, {"y"});
    AddNode(g, "Relu", "first", {"x"}, {"a"});
    auto r = Import(m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r.value()->nodes().size(), 2u);
    EXPECT_EQ(r.value()->nodes()[0]->name(), "first");
    EXPECT_EQ(r.value()->nodes()[1]->name(), "second");
  }
  {
    auto m = BaseModel();
    SetType(m.mutable_graph()->add_output(), "ghost", onnx::TensorProto::FLOAT, {1});
    ExpectRefused(m, {"graph output 'ghost' is never produced"});
  }
}

TEST_F(OnnxImportTest, OpsetsAndOpVersions) {
  {
    auto m = BaseModel();
    m.mutable_opset_import(0)->set_domain("com.example");
    ExpectRefused(m, {"imports no default-domain opset"});
  }
  ExpectRefused(BaseModel(18), {"uses ONNX opset 18; Kiln supports opsets 1 to 17"});
  {
    auto m = BaseModel();
    m.mutable_opset_import(0)->set_domain("ai.onnx");
    m.mutable_graph()->mutable_node(0)->set_domain("ai.onnx");
    auto r = Import(m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->opset(), 13);
    EXPECT_EQ(r.value()->nodes()[0]->domain(), "");
  }
  {
    // Range is an ONNX op only from opset 11.
    auto m = BaseModel(10);
    AddNode(m.mutable_graph(), "Range", "range", {"x", "x", "x"}, {"r"});
    ExpectRefused(m, {"Range node 'range': op 'Range' does not exist in ONNX opset 10"});
  }
  {
    // Relu at opset 5 is Relu-1, which Kiln does not implement; an op of an
    // unknown domain is reported with it; Add-1 is implemented.
    auto m = BaseModel(5);
    AddNode(m.mutable_graph(), "Add", "add", {"x", "x"}, {"s"});
    AddNode(m.mutable_graph(), "Frobnicate", "frob", {"x"}, {"f"})->set_domain("com.example");
    auto r = Import(m);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find("uses 2 unsupported operator(s):"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Relu version 1 in node 'relu' (Kiln implements versions 6, 13, 14)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Frobnicate (domain 'com.example') in node 'frob'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'add'"), std::string::npos) << msg;
  }
  {
    auto m = BaseModel();
    m.clear_graph();
    ExpectRefused(m, {"has no graph"});
  }
  {
    auto path = WriteBytes(std::string("\x0a\xff\xff\xff", 4), "junk.onnx");
    auto r = ImportOnnxFile(path, {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("'" + path + "' is not a valid ONNX model (protobuf parse failed)"),
              std::string::npos)
        << r.status().message();
  }
}

// The exact shape a spec fixes (every dim min == max), else {-2}.
Shape ExactShape(const ir::InputSpec& sp) {
  Shape s;
  for (const auto& r : sp.dims) {
    if (r.max < 0 || r.min != r.max) return Shape{-2};
    s.push_back(r.min);
  }
  return s;
}

TEST(OnnxInputShapes, ParsesAndNamesTheBadPart) {
  auto r = onnx_frontend::ParseInputSpecs(";x:1,3,224,224;;y:8;scalar:");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ExactShape(r.value().at("x")), (Shape{1, 3, 224, 224}));
  EXPECT_EQ(ExactShape(r.value().at("y")), (Shape{8}));
  EXPECT_EQ(ExactShape(r.value().at("scalar")), Shape{});
  EXPECT_TRUE(r.value().at("x").gears.empty());
  EXPECT_FALSE(r.value().at("x").ranged);
  EXPECT_EQ(r.value().size(), 3u);
  // The name may itself contain ':' (the last one separates).
  r = onnx_frontend::ParseInputSpecs("ns:x:2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ExactShape(r.value().at("ns:x")), (Shape{2}));

  struct Case {
    const char* spec;
    const char* needle;
  };
  for (const Case& c : {Case{"x", "--input-shape: 'x' is not NAME:DIMS"},
                        Case{":1,2", "--input-shape: ':1,2' is not NAME:DIMS"},
                        Case{"x:1,-2", "--input-shape: dim '-2' of 'x' is not a non-negative integer, A..B, A.. or ?"},
                        Case{"x:1,2a", "dim '2a' of 'x'"},
                        Case{"x:1,,2", "dim '' of 'x'"},
                        Case{"x:1,2,", "'1,2,' of 'x' ends with ','"},
                        Case{"x:99999999999999999999", "dim '99999999999999999999' of 'x'"},
                        Case{"x:1..a", "dim '1..a' of 'x'"},
                        Case{"x:8..2", "range '8..2' of 'x' is empty"},
                        Case{"x:1..2|3..4", "'x' has two ranges"},
                        Case{"x:1,2|3", "the alternatives of 'x' differ in rank (2 and 1)"},
                        Case{"x:1..4,8|9,8", "gear [9,8] of 'x' has dim 0 = 9, outside the range given for it"},
                        Case{"x:1|2;y:1|2|3", "'y' has 3 gears but 'x' has 2"},
                        Case{"x:1;x:2", "'x' is given twice"}}) {
    auto bad = onnx_frontend::ParseInputSpecs(c.spec);
    ASSERT_FALSE(bad.ok()) << c.spec;
    EXPECT_NE(bad.status().message().find(c.needle), std::string::npos) << c.spec << ": " << bad.status().message();
  }
}

TEST(OnnxInputShapes, RangesAndGears) {
  auto r = onnx_frontend::ParseInputSpecs("ids:1..8,16..512;mask:?,1..;x:2..2,3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ir::InputSpec& ids = r.value().at("ids");
  ASSERT_EQ(ids.dims.size(), 2u);
  EXPECT_EQ(ids.dims[0], (ir::SymbolRange{1, 8}));
  EXPECT_EQ(ids.dims[1], (ir::SymbolRange{16, 512}));
  EXPECT_TRUE(ids.ranged);
  EXPECT_TRUE(ids.gears.empty());
  const ir::InputSpec& mask = r.value().at("mask");
  EXPECT_EQ(mask.dims[0], (ir::SymbolRange{1, -1}));
  EXPECT_EQ(mask.dims[1], (ir::SymbolRange{1, -1}));
  EXPECT_EQ(ExactShape(r.value().at("x")), (Shape{2, 3}));  // a range of one extent fixes the dim

  // Gears only: each dim spans its gears' extents, fixed where all agree.
  r = onnx_frontend::ParseInputSpecs("ids:1,128|4,512|2,128");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ir::InputSpec& g = r.value().at("ids");
  EXPECT_FALSE(g.ranged);
  ASSERT_EQ(g.gears.size(), 3u);
  EXPECT_EQ(g.gears[1], (Shape{4, 512}));
  EXPECT_EQ(g.dims[0], (ir::SymbolRange{1, 4}));
  EXPECT_EQ(g.dims[1], (ir::SymbolRange{128, 512}));
  r = onnx_frontend::ParseInputSpecs("ids:1,128|1,256");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().at("ids").dims[0], (ir::SymbolRange{1, 1}));

  // A range with gears inside it (either order).
  r = onnx_frontend::ParseInputSpecs("ids:1,128|1..8,1..512|4,512");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ir::InputSpec& rg = r.value().at("ids");
  EXPECT_TRUE(rg.ranged);
  EXPECT_EQ(rg.dims[1], (ir::SymbolRange{1, 512}));
  ASSERT_EQ(rg.gears.size(), 2u);
  EXPECT_EQ(rg.gears[0], (Shape{1, 128}));
}

}  // namespace

// ONNX Runtime's optimizer writes LayerNormalization (its own, version 1)
// into models below opset 17: imported as that version; other ops that do
// not exist at the model's opset are still refused.
TEST_F(OnnxImportTest, OrtLayerNormalizationBelowOpset17) {
  onnx::ModelProto m = BaseModel(13);
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_output(0, "r");
  auto* ln = AddNode(g, "LayerNormalization", "ln", {"r", "gamma"}, {"y"});
  AddAttr(ln, "epsilon", onnx::AttributeProto::FLOAT)->set_f(1e-5f);
  auto* gamma = g->add_initializer();
  gamma->set_name("gamma");
  gamma->set_data_type(onnx::TensorProto::FLOAT);
  gamma->add_dims(3);
  for (int i = 0; i < 3; ++i) gamma->add_float_data(1.f);
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value()->nodes().size(), 2u);
  EXPECT_EQ(r.value()->nodes()[1]->op_type(), "LayerNormalization");
  EXPECT_EQ(r.value()->nodes()[1]->since_version(), 1);
  g->mutable_node(1)->set_op_type("Gelu");  // ONNX's Gelu is opset 20's
  ExpectRefused(m, {"Gelu"});
}

}  // namespace kiln
