#!/usr/bin/env bash
# The GPU check, one command, on a machine with an NVIDIA GPU and its driver
# but no Debian packages (docs/design.md "The CUDA backend"):
#   bash scripts/gpu-check.sh [BUNDLE.tar.xz]
# The bundle comes from scripts/make-gpu-bundle.sh on the build machine.
# It uses the CUDA libraries of the machine it runs on (the toolkit's, else
# the ones PyTorch's Python environment carries). It runs the CUDA tests
# (none may be skipped: there is a GPU), the op harness on the GPU, the
# device tests under compute-sanitizer's memcheck, then the CLI check, and
# writes logs under $OUT (or ./gpu-out).
set -uo pipefail
BUNDLE=${1:-build-gpu/kiln-gpu-bundle.tar.xz}
OUTDIR=${OUT:-$PWD/gpu-out}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d)
tar -C "$WORK" -xJf "$BUNDLE" || { echo "cannot unpack $BUNDLE"; exit 1; }
K=$WORK/kiln-gpu
echo "bundle commit: $(cat "$K/COMMIT")"
nvidia-smi -L || true
# CUDA libraries: the toolkit's, then PyTorch's pip packages (cuDNN, NVRTC).
CUDA_LIBS=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && CUDA_LIBS="$CUDA_LIBS:$d"; done
PY=$(command -v python3 || echo /usr/bin/python3)
SITE=$("$PY" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
if [ -n "$SITE" ] && [ -d "$SITE/nvidia" ]; then
  for d in "$SITE"/nvidia/*/lib "$SITE"/nvidia/cu13/lib; do [ -d "$d" ] && CUDA_LIBS="$CUDA_LIBS:$d"; done
fi
export LD_LIBRARY_PATH="$K/lib$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_CUDA_MODULE="$K/lib/libkiln_cuda.so"
export KILN_RTC_CACHE_DIR="$WORK/rtc"
status=0
summary=""

step() {  # step NAME COMMAND...: runs it, logs to $OUTDIR/NAME.log
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  summary="$summary$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")\n"
  tail -n 15 "$OUTDIR/$name.log"
  [ $rc -eq 0 ] || status=1
  return $rc
}

step cuda_tests "$K/bin/kiln_cuda_tests"
if grep -q "SKIPPED \]" "$OUTDIR/cuda_tests.log"; then
  echo "FAIL: tests were skipped on a machine with a GPU"; status=1
  summary="${summary}cuda_tests: tests skipped (no GPU seen?)\n"
fi
# Every op case of the harness on cpu, sim and the GPU, each against a
# float64 reference and the CPU's output (ops without a CUDA kernel run as
# CPU nodes inside the graph; those CUDA has kernels for must be on the GPU).
CUDA_OPS=$(cat "$K/tests/cuda_ops.txt")  # tests/cuda/cuda_ops.txt
# Conv_asymmetric_pads: cuDNN pads symmetrically, so that case runs on the CPU.
step op_harness_cuda "$K/bin/kiln_op_harness" --device all --expect-on-device "$CUDA_OPS" \
  --allow-on-cpu Conv_asymmetric_pads
step op_harness_cuda_perf "$K/bin/kiln_op_harness" --device all --perf --runs 50
# memcheck (the tests provoke API errors on purpose: those are not reported).
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$SAN" ]; then
  before=$status
  step cuda_tests_memcheck "$SAN" --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$K/bin/kiln_cuda_tests" --gtest_filter='CudaDevice.*'
  if grep -q "not supported" "$OUTDIR/cuda_tests_memcheck.log"; then
    summary="${summary}cuda_tests_memcheck: compute-sanitizer does not support this machine (gVisor?): not counted\n"
    status=$before
  fi
fi
sh "$K/tests/cli_cuda_device.sh" "$K/bin/kiln" "$WORK/cli" "$PY" > "$OUTDIR/cli_cuda_device.log" 2>&1
rc=$?
tail -n 15 "$OUTDIR/cli_cuda_device.log"
case $rc in
  0) summary="${summary}cli_cuda_device              PASS\n" ;;
  77) summary="${summary}cli_cuda_device              SKIP (known gap: $(grep SKIP "$OUTDIR/cli_cuda_device.log" | head -1))\n" ;;
  *) summary="${summary}cli_cuda_device              FAIL rc=$rc\n"; status=1 ;;
esac
echo
echo "== gpu-check summary =="
printf "$summary"
echo "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
