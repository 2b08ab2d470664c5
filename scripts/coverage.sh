#!/usr/bin/env bash
# Branch coverage of the code that reads untrusted input (make coverage; not
# part of CI: a separate gcc --coverage build plus the unit, CLI and hostile
# tests take a while on 2 cores).
#
#   scripts/coverage.sh [BUILD_DIR]      (default build-cov)
#
# Builds BUILD_DIR with gcc --coverage (-O0), runs the unit-labelled tests
# (GoogleTest unit tests, cli_bad_input, cli_hostile, cli_external_weights,
# the sample), then reports gcovr branch coverage (exception-only and
# unreachable branches excluded) for the ONNX importer, the .kiln reader,
# the .npy reader, the weight store, and overall (plus the memory plan and
# its verifier, src/plan/). Reports land in
# BUILD_DIR/coverage/ (summary.txt, coverage.json, per-file branches.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build-cov}"
jobs="${JOBS:-$(nproc)}"
scripts/install_deps.sh cov
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0" \
  -DCMAKE_CXX_COMPILER=g++ -DKILN_COVERAGE=ON -DKILN_CONFORMANCE=OFF -DKILN_MODEL_TESTS=OFF
cmake --build "$dir" -j "$jobs" --target kiln_unit_tests kiln args_refresh_add
find "$dir" -name '*.gcda' -delete
ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L unit || echo "coverage: some tests failed (coverage still reported)"

out="$dir/coverage"
mkdir -p "$out"
common=(--root . --exclude-unreachable-branches --exclude-throw-branches)
gcovr "${common[@]}" --object-directory "$dir" --filter 'src/' --filter 'include/' \
  --json "$out/coverage.json" -j "$jobs"
summary() {  # name, filters...
  local name="$1"; shift
  local f=() p
  for p in "$@"; do f+=(--filter "$p"); done
  local s
  s="$(gcovr --add-tracefile "$out/coverage.json" "${f[@]}" --print-summary -o /dev/null)"
  printf '%-28s %s | %s\n' "$name" "$(echo "$s" | grep '^branches' | sed 's/branches: *//')" \
    "lines $(echo "$s" | grep '^lines' | sed 's/lines: *//')"
}
{
  echo "branch coverage (gcovr, exception-only and unreachable branches excluded)"
  summary "ONNX importer" 'src/frontend/onnx/'
  summary ".kiln reader" 'src/format/'
  summary ".kiln plan verifier" 'src/plan/'
  summary ".npy reader" 'src/tools/npy\.cc'
  summary "weight store" 'src/weights/'
  summary "overall (src/)" 'src/'
} | tee "$out/summary.txt"
gcovr --add-tracefile "$out/coverage.json" --filter 'src/' --branches --sort-percentage -o "$out/branches.txt"
echo "coverage: per-file branch table in $out/branches.txt"
