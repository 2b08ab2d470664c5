// Writes the graph-API models the C and Python tests load (Kiln's graph API
// is C++; a .kiln made from it is what C and Python programs receive):
//
//   file_id.kiln  y = x + w, x float32[2, 3]; w is a FileConstant with
//                 file_id "w-table" at offset 8 (resolved at load)
//   w_table.bin   8 bytes of 0xEE, then w = [0, 0.5, 1, 1.5, 2, 2.5] as
//                 float32 (the file the tests pass for "w-table")
//
// Usage: make_file_id_model OUT_DIR
#include <cstdio>
#include <fstream>
#include <vector>

#include "api/compiler.h"
#include "kiln/graph.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  std::vector<char> bytes(8, static_cast<char>(0xEE));
  const float w[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};
  bytes.insert(bytes.end(), reinterpret_cast<const char*>(w), reinterpret_cast<const char*>(w) + sizeof w);
  std::ofstream(out + "/w_table.bin", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  kiln::Graph g("file_id");
  auto x = g.AddInput("x", kiln::DType::kFloat32, {2, 3});
  auto wt = g.AddFileConstant("w", kiln::DType::kFloat32, {2, 3}, "w-table", 8);
  if (!wt.ok()) return std::fprintf(stderr, "%s\n", wt.status().ToString().c_str()), 1;
  auto y = g.AddOp("Add", {x, wt.value()}, {}, 1, "add");
  if (!y.ok()) return std::fprintf(stderr, "%s\n", y.status().ToString().c_str()), 1;
  if (auto st = g.AddOutput(y.value()[0], "y"); !st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  auto m = kiln::CompileGraph(g.TakeIr(), kiln::CompileOptions{});
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  if (auto st = kiln::format::WriteModelFile(m.value(), out + "/file_id.kiln"); !st.ok()) {
    return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  }
  std::printf("wrote %s/file_id.kiln and w_table.bin\n", out.c_str());
  return 0;
}
