#!/bin/sh
# Kiln as a user installs it: `cmake --install` into a fresh prefix, then
#  - the installed CLI (RPATH to the installed libraries) compiles and runs
#    a model;
#  - examples/c_api builds with find_package(Kiln) (Kiln::runtime) and with
#    pkg-config (kiln), and both run the model: add.onnx filled with 1 gives
#    y = 1 + 0.5 i, first values 1 1.5 2 2.5 3;
#  - a C++ program linked with Kiln::compiler compiles the ONNX file.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR MODELS_DIR WORK_DIR
set -eu
build=$1 src=$2 models=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(ls -d "$prefix"/lib*/ | head -1)
test -e "$lib/libkiln.so.0" && test -e "$lib/libkiln_compiler.so.0" || { echo "libraries not installed"; exit 1; }
test -f "$prefix/include/kiln/kiln_c.h" || { echo "kiln_c.h not installed"; exit 1; }

# The installed CLI finds its libraries without LD_LIBRARY_PATH.
env -u LD_LIBRARY_PATH "$prefix/bin/kiln" compile --model "$models/add.onnx" --output "$work/add.kiln" >/dev/null

# find_package(Kiln)
cmake -S "$src/examples/c_api" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
LD_LIBRARY_PATH=$lib "$work/cmake-build/run_model" "$work/add.kiln" 1 | tee "$work/cmake.out"
grep -q "output 0 first values: 1 1.5 2 2.5 3" "$work/cmake.out"

# pkg-config
PKG_CONFIG_PATH=$lib/pkgconfig
export PKG_CONFIG_PATH
cc -std=c99 "$src/examples/c_api/run_model.c" $(pkg-config --cflags --libs kiln) -o "$work/run_model_pc"
LD_LIBRARY_PATH=$lib "$work/run_model_pc" "$work/add.kiln" 1 | grep -q "output 0 first values: 1 1.5 2 2.5 3"
pkg-config --exists --print-errors "kiln-compiler = $(pkg-config --modversion kiln)"

# Kiln::compiler from C++
mkdir -p "$work/cxx"
cat > "$work/cxx/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(kiln_cxx_consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Kiln REQUIRED COMPONENTS runtime compiler)
add_executable(compile_it main.cc)
target_link_libraries(compile_it PRIVATE Kiln::compiler)
CMAKE
cat > "$work/cxx/main.cc" <<'CXX'
#include <cstdio>
#include "kiln/kiln_c.h"
#include "kiln/runtime.h"
int main(int argc, char** argv) {
  if (kiln_compile(argv[1], argv[2], nullptr, nullptr) != KILN_OK) {
    std::fprintf(stderr, "%s\n", kiln_last_error_message());
    return 1;
  }
  auto m = kiln::Model::Load(argv[2], {});
  if (!m.ok()) return 1;
  std::printf("inputs %zu outputs %zu\n", (*m)->inputs().size(), (*m)->outputs().size());
  return 0;
}
CXX
cmake -S "$work/cxx" -B "$work/cxx/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cxx/build" >/dev/null
LD_LIBRARY_PATH=$lib "$work/cxx/build/compile_it" "$models/add.onnx" "$work/add2.kiln" | grep -q "inputs 1 outputs 1"
echo INSTALL-OK
