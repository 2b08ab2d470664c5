#!/bin/sh
# Builds the sample against an installed Kiln, installs its package in the
# layout Kiln's custom-op search expects, and runs it with
# KILN_CUSTOM_OP_PATH pointing there.
#
#   KILN_PREFIX=/opt/kiln ./run.sh [--size N] [--runs R] [--warmup W]
#
# Without KILN_PREFIX, Kiln's own build (KILN_BUILD, default <repo>/build,
# made by `make build`) is installed into <this dir>/out/kiln first.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${SAMPLE_OUT:-$here/out}
if [ -z "${KILN_PREFIX:-}" ]; then
  KILN_PREFIX=$out/kiln
  cmake --install "${KILN_BUILD:-$here/../../../build}" --prefix "$KILN_PREFIX" >/dev/null
fi
cmake -S "$here" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$KILN_PREFIX" >/dev/null
cmake --build "$out/build" >/dev/null
cmake --install "$out/build" --prefix "$out/package" >/dev/null
echo "package: $(cd "$out/package" && find op_graph -type f | sort | tr '\n' ' ')"
lib=$(ls -d "$KILN_PREFIX"/lib*/ | head -1)
KILN_CUSTOM_OP_PATH="$out/package" LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$out/build/args_refresh_add" "$@"
