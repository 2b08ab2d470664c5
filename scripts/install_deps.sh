#!/usr/bin/env bash
# Installs Kiln's Debian 12 packages (idempotent; apt-get only runs when
# something is missing). Usage: install_deps.sh build|test|bench|cov
#   build: compiler toolchain and libraries, plus Python/ONNX for the sample
#          and pybind11/python3-dev/venv/pip for the Python package
#   test:  build + GoogleTest, pytest, PyTorch/torchvision (reference models), Clang 14
#          with its sanitizer/libFuzzer runtimes and llvm-symbolizer
#          (sanitizer, TSan and fuzz builds)
#   bench: test + Node.js/npm (ONNX Runtime baseline, see install_ort.sh)
#   cov:   test + gcovr (scripts/coverage.sh)
set -euo pipefail
level="${1:-build}"

pkgs=(g++ cmake ninja-build pkg-config
      libonnx-dev libprotobuf-dev protobuf-compiler
      libdnnl-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libssl-dev
      python3 python3-numpy python3-onnx
      python3-dev pybind11-dev python3-pybind11 python3-venv python3-pip python3-setuptools python3-wheel)
if [ "$level" = test ] || [ "$level" = bench ] || [ "$level" = cov ]; then
  pkgs+=(libgtest-dev libgmock-dev libbenchmark-dev python3-torch python3-torchvision python3-pytest
         clang-14 libclang-rt-14-dev llvm-14)
fi
if [ "$level" = cov ]; then
  pkgs+=(gcovr)
fi
if [ "$level" = bench ]; then
  pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node may come from elsewhere (e.g. NodeSource): accept a working node/npm.
if [ "$level" = bench ] && command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [ "$p" = nodejs ] || [ "$p" = npm ] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps($level): all packages present"
  exit 0
fi
echo "install_deps($level): installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
echo "install_deps($level): done"
