#!/usr/bin/env bash
# Builds the bundle scripts/gpu-check.sh runs on a machine with an NVIDIA GPU
# but none of Debian's packages: the kiln binary, Kiln's shared libraries,
# the CUDA backend module, the CUDA test program, the op harness and the non-CUDA shared
# libraries they need (oneDNN, libgomp, protobuf, ONNX, OpenSSL, zlib, ...),
# compressed (at most 64 MiB). The CUDA libraries come from that machine.
#   scripts/make-gpu-bundle.sh [BUILD_DIR] [OUT.tar.xz]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-build-gpu/kiln-gpu-bundle.tar.xz}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$BUILD" --target kiln kiln_cuda kiln_cuda_tests kiln_op_harness weights_load_bench replay_bench
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
B=$STAGE/kiln-gpu
mkdir -p "$B/bin" "$B/lib" "$B/tests"
cp "$BUILD/kiln" "$BUILD/tests/kiln_cuda_tests" "$BUILD/tests/kiln_op_harness" "$BUILD/weights_load_bench" "$BUILD/replay_bench" "$B/bin/"
cp -P "$BUILD"/libkiln.so* "$BUILD"/libkiln_compiler.so* "$BUILD/libkiln_cuda.so" "$B/lib/"
cp "$ROOT/tests/cuda/cli_cuda_device.sh" "$ROOT/tests/cuda/cuda_ops.txt" "$B/tests/"
# Every shared library the programs load, except the C library's own and
# CUDA's (the GPU machine has those that match its driver).
for f in "$B"/bin/* "$B/lib/libkiln_cuda.so"; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libkiln*) ;;
    libcuda.so*|libcudart*|libnvrtc*|libcublas*|libcudnn*|libnccl*) ;;
    *) cp -L "$lib" "$B/lib/" ;;
  esac
done
git -C "$ROOT" rev-parse HEAD > "$B/COMMIT"
mkdir -p "$(dirname "$OUT")"
tar -C "$STAGE" -cJf "$OUT" kiln-gpu
SIZE=$(stat -c %s "$OUT")
echo "bundle: $OUT ($((SIZE / 1048576)) MiB)"
[ "$SIZE" -le $((64 * 1048576)) ] || { echo "bundle over 64 MiB"; exit 1; }
