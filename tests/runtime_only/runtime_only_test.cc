// Links kiln_runtime only (a build with -DKILN_BUILD_COMPILER=OFF: no
// protobuf, no ONNX). Builds y = relu(x * w + b) with the IR, infers it,
// plans its memory, writes it as a .kiln file (all runtime code), then loads
// and runs it on cpu and on sim and checks the hand-computed result. Also
// writes <file>.input.npy (x = 1..6) for the CLI test, and checks that the
// graph API says the compiler is missing.
//
//   kiln_runtime_only_test OUT.kiln
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "format/kiln_file.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "plan/memory_plan.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return 1;
}

kiln::HostTensorPtr F32(kiln::Shape s, std::vector<float> v) {
  auto t = std::make_shared<kiln::HostTensor>(kiln::DType::kFloat32, std::move(s));
  std::memcpy(t->mutable_data(), v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 2) return Fail("usage: kiln_runtime_only_test OUT.kiln");
  const std::string path = argv[1];
  format::CompiledModel cm;
  cm.graph = std::make_unique<ir::Graph>();
  ir::Graph& g = *cm.graph;
  g.set_name("runtime_only");
  ir::Value* x = g.AddValue("x", DType::kFloat32, {2, 3});
  g.inputs().push_back(x);
  ir::Value* w = g.AddConstant("w", F32({2, 3}, {1, 2, 3, 4, 5, 6}));
  ir::Value* b = g.AddConstant("b", F32({3}, {-10, 0, 10}));
  ir::Value* m = g.AddValue("m");
  ir::Value* a = g.AddValue("a");
  ir::Value* y = g.AddValue("y");
  g.AddNode("Mul", "mul", {x, w}, {m});
  g.AddNode("Add", "add", {m, b}, {a});
  g.AddNode("Relu", "relu", {a}, {y});
  g.outputs().push_back(y);
  for (auto& n : g.nodes()) {
    const ops::OpDef* d = ops::OpRegistry::Get().Find(n->op_type(), n->domain());
    if (!d) return Fail("no op definition for " + n->op_type());
    n->set_since_version(d->versions.back());
    Status st = ops::InferNode(*n);
    if (!st.ok()) return Fail(st.ToString());
  }
  auto plan = plan::PlanMemory(g);
  if (!plan.ok()) return Fail(plan.status().ToString());
  cm.plan = std::move(plan).value();
  Status st = format::WriteModelFile(cm, path);
  if (!st.ok()) return Fail(st.ToString());
  {
    // x = 1..6 as .npy (format 1.0, little-endian float32, C order).
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::ofstream f(path + ".input.npy", std::ios::binary | std::ios::trunc);
    const unsigned short len = static_cast<unsigned short>(header.size());
    f.write("\x93NUMPY\x01\x00", 8);
    f.put(static_cast<char>(len & 0xff));
    f.put(static_cast<char>(len >> 8));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    const float xs[6] = {1, 2, 3, 4, 5, 6};
    f.write(reinterpret_cast<const char*>(xs), sizeof xs);
    if (!f) return Fail("cannot write " + path + ".input.npy");
  }
  const std::vector<float> want = {0, 4, 19, 6, 25, 46};  // relu(x*w + b), by hand
  for (const char* dev : {"cpu", "sim"}) {
    LoadOptions o;
    o.device = dev;
    auto model = Model::Load(path, o);
    if (!model.ok()) return Fail(model.status().ToString());
    std::vector<float> xv = {1, 2, 3, 4, 5, 6}, yv(6, -1.f);
    st = (*model)->Execute({TensorRef::Of(xv.data(), {2, 3})}, {TensorRef::Of(yv.data(), {2, 3})});
    if (!st.ok()) return Fail(st.ToString());
    if (yv != want) return Fail(std::string("wrong result on ") + dev);
    std::printf("ok: %s gives relu(x*w + b) = [0, 4, 19, 6, 25, 46]\n", dev);
  }
  Session s;
  auto r = s.RunGraph(1, {}, {});
  if (r.ok() || r.message().find("the compiler is not built in") == std::string::npos) {
    return Fail("the graph API should say the compiler is not built in, said: " + r.ToString());
  }
  std::printf("ok: %s\n", r.message().c_str());
  return 0;
}
