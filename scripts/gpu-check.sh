#!/usr/bin/env bash
# The GPU check, one command, on a machine with an NVIDIA GPU and its driver
# but no Debian packages (docs/design.md "The CUDA backend"):
#   bash scripts/gpu-check.sh [BUNDLE.tar.xz]
# The bundle comes from scripts/make-gpu-bundle.sh on the build machine.
# It uses the CUDA libraries of the machine it runs on (the toolkit's, else
# the ones PyTorch's Python environment carries). It runs the CUDA tests
# (none may be skipped: there is a GPU), the op harness on the GPU, the
# device tests under compute-sanitizer's memcheck, then the CLI check, and
# writes its logs to $OUT/gpu-check-logs.tgz (or ./gpu-out).
set -uo pipefail
BUNDLE=${1:-build-gpu/kiln-gpu-bundle.tar.xz}
OUTDIR=${OUT:-$PWD/gpu-out}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d)
# Logs go to $WORK/logs, packed into $OUTDIR/gpu-check-logs.tgz after every
# step (the device tool returns at most 8 files, also when a call times out).
LOGS=$WORK/logs
mkdir -p "$LOGS"
save_logs() { tar -czf "$OUTDIR/gpu-check-logs.tgz" -C "$LOGS" . 2>/dev/null; }
tar -C "$WORK" -xJf "$BUNDLE" || { echo "cannot unpack $BUNDLE"; exit 1; }
K=$WORK/kiln-gpu
echo "bundle commit: $(cat "$K/COMMIT")"
nvidia-smi -L || true
"$(command -v python3 || echo /usr/bin/python3)" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" 2>&1 | tail -1
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

step() {  # step NAME SECONDS COMMAND...: runs it (at most SECONDS), logs to $LOGS/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  summary="$summary$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")\n"
  tail -n 15 "$LOGS/$name.log"
  [ $rc -eq 0 ] || status=1
  save_logs
  return $rc
}

step cuda_tests 60 "$K/bin/kiln_cuda_tests"
if grep -q "SKIPPED \]" "$LOGS/cuda_tests.log"; then
  echo "FAIL: tests were skipped on a machine with a GPU"; status=1
  summary="${summary}cuda_tests: tests skipped (no GPU seen?)\n"
fi
# Every op case of the harness on cpu, sim and the GPU, each against a
# float64 reference and the CPU's output (ops without a CUDA kernel run as
# CPU nodes inside the graph; those CUDA has kernels for must be on the GPU).
CUDA_OPS=$(cat "$K/tests/cuda_ops.txt")  # tests/cuda/cuda_ops.txt
# Conv_asymmetric_pads: cuDNN pads symmetrically, so that case runs on the CPU.
step op_harness_cuda 60 "$K/bin/kiln_op_harness" --device all --expect-on-device "$CUDA_OPS" \
  --allow-on-cpu Conv_asymmetric_pads
timeout -k 5 45 sh "$K/tests/cli_cuda_device.sh" "$K/bin/kiln" "$WORK/cli" "$PY" > "$LOGS/cli_cuda_device.log" 2>&1
rc=$?
tail -n 15 "$LOGS/cli_cuda_device.log"
case $rc in
  0) summary="${summary}cli_cuda_device              PASS\n" ;;
  77) summary="${summary}cli_cuda_device              SKIP (known gap: $(grep SKIP "$LOGS/cli_cuda_device.log" | head -1))\n" ;;
  *) summary="${summary}cli_cuda_device              FAIL rc=$rc\n"; status=1 ;;
esac
# ResNet-50, BERT-base and a small encoder with symbolic batch and seq at three
# shapes (exported here with seeded weights): outputs against
# PyTorch in float64, latency against PyTorch eager and CUDA graphs.
step models 240 "$PY" "$(dirname "$0")/gpu-models.py" --kiln "$K/bin/kiln" --work "$WORK/models" \
  --runs "${GPU_CHECK_RUNS:-200}"
cp "$WORK/models/models.json" "$LOGS/" 2>/dev/null
# Where BERT-base's time goes: one run under Nsight Compute, summed by kernel
# (not counted in the verdict: ncu may be missing or refused on a machine).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
BD=$WORK/models/bert_base
if [ -n "$NCU" ] && [ -f "$BD/cuda.kiln" ]; then
  timeout -k 5 120 "$NCU" --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base \
    --log-file "$LOGS/ncu_bert.csv" "$K/bin/kiln" run "$BD/cuda.kiln" --device cuda \
    --input "input_ids=$BD/input_ids.npy" --input "attention_mask=$BD/attention_mask.npy" --output-dir "$WORK/ncu_out" \
    > "$LOGS/ncu_bert.log" 2>&1 && "$PY" "$(dirname "$0")/ncu_summary.py" "$LOGS/ncu_bert.csv" --top 12
  summary="${summary}ncu_bert                     rc=$? (profile only, not counted)\n"
fi
# External weights to the GPU: 4 GiB in one combined file (page cache), the
# chunked copy through pinned staging against this GPU's pinned host->device
# bandwidth measured in the same process; then one reader, for scale.
step weights_upload 120 sh -c "'$K/bin/weights_load_bench' upload --dir '$WORK/wu' --device cuda --blobs 64 --blob-mib 64 \
  --reps 3 && '$K/bin/weights_load_bench' upload --dir '$WORK/wu1' --device cuda --blobs 16 --blob-mib 64 --readers 1"
rm -rf "$WORK/wu" "$WORK/wu1"
# Replay on the GPU: per-task cost of a recorded chain of 1000 Relus, and what
# moving device-memory bindings costs per run (the refresh target, < 5 us).
step replay 60 "$K/bin/replay_bench" --device cuda --nodes 1000 --runs 500 --refresh-nodes 8 --elems 4096
step op_harness_cuda_perf 45 "$K/bin/kiln_op_harness" --device all --perf --runs 50
# memcheck (the tests provoke API errors on purpose: those are not reported).
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$SAN" ]; then
  before=$status
  step cuda_tests_memcheck 90 "$SAN" --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$K/bin/kiln_cuda_tests" --gtest_filter='CudaDevice.*'
  if grep -q "not supported" "$LOGS/cuda_tests_memcheck.log"; then
    summary="${summary}cuda_tests_memcheck: compute-sanitizer does not support this machine (gVisor?): not counted\n"
    status=$before
  fi
fi
save_logs
echo
echo "== gpu-check summary =="
printf "$summary"
echo "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
