#!/usr/bin/env bash
# Install the ONNX Runtime baseline used by bench/ort_bench.js (idempotent).
# Node + npm come from Debian; onnxruntime-node comes from the npm registry and
# bundles the x64 CPU libonnxruntime.so.1 itself. ONNXRUNTIME_NODE_INSTALL=skip
# stops its post-install script from trying to download the CUDA/TensorRT extras.
# No lockfile is written: package.json pins onnxruntime-node exactly.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORT_DIR="$ROOT/bench/ort"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install_ort: node/npm missing; installing Debian's nodejs and npm" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi

PKG="$ORT_DIR/node_modules/onnxruntime-node/package.json"
WANT="$(node -p 'require(process.argv[1]).dependencies["onnxruntime-node"]' "$ORT_DIR/package.json")"
if [ -f "$PKG" ]; then
    HAVE="$(node -p 'require(process.argv[1]).version' "$PKG")"
    if [ "$HAVE" = "$WANT" ]; then
        echo "install_ort: onnxruntime-node $HAVE already installed in $ORT_DIR/node_modules"
        exit 0
    fi
    echo "install_ort: found onnxruntime-node $HAVE, want $WANT; reinstalling"
fi

echo "install_ort: npm install in $ORT_DIR (node $(node --version))"
cd "$ORT_DIR"
ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --no-package-lock --loglevel=error
node -e 'const o=require("onnxruntime-node"); console.log("install_ort: ok, onnxruntime-node", require("onnxruntime-node/package.json").version)'
