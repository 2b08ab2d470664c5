#!/usr/bin/env bash
# Runs Kiln's libFuzzer targets (tests/fuzz/README.md).
#
#   run_fuzz.sh --build DIR --kiln KILN [--seconds N] [--jobs J] [--work DIR]
#               [--targets "onnx kiln npy meta"] [--replay-only] [--pending]
#               [--keep-going]
#
#   --build    the build with the fuzz_* binaries (KILN_FUZZ=ON, build-asan)
#   --kiln     a kiln CLI used to compile the seed corpora (any build)
#   --seconds  fuzzing time per target (0: only replay the regression inputs)
#   --jobs     targets fuzzed at once (default 2)
#   --pending  replay tests/fuzz/pending/<target>/* and say which still fail
#              (known, unfixed findings; not part of make test)
#   --keep-going  libFuzzer fork mode: go on after a crash, timeout or OOM and
#              collect every reproducer (for hunting; make test stops at the
#              first)
#
# Steps: seed corpora (make_seeds.py), replay of every regression input in
# tests/fuzz/regressions/<target>/ (each must run clean), then each target
# fuzzes for --seconds from the seeds and regressions. Exit status 1 if a
# regression input fails or fuzzing finds a crash, leak, timeout or
# out-of-memory; reproducers land in WORK/artifacts/<target>/.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="" kiln="" seconds=45 jobs=2 work="" targets="onnx kiln npy meta" replay_only=0 pending=0 keep_going=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --kiln) kiln="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --replay-only) replay_only=1; shift ;;
    --pending) pending=1; shift ;;
    --keep-going) keep_going=1; shift ;;
    *) echo "run_fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$build" ] && [ -n "$kiln" ] || { echo "usage: run_fuzz.sh --build DIR --kiln KILN [--seconds N]" >&2; exit 2; }
build="$(cd "$build" && pwd)"
kiln="$(cd "$(dirname "$kiln")" && pwd)/$(basename "$kiln")"
work="${work:-$build/fuzz}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
for t in $targets; do
  [ -x "$build/fuzz_$t" ] || { echo "run_fuzz.sh: $build/fuzz_$t missing (configure with -DKILN_FUZZ=ON)" >&2; exit 2; }
done

[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
# intercept_tls_get_addr=0: see the note at `make test` in the Makefile (Clang 14 LSan tracer crash).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:symbolize=1:intercept_tls_get_addr=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
export KILN_FUZZ_WEIGHT_DIR="$work/seeds/kiln_weights"

echo "== fuzz: seed corpora"
/usr/bin/python3 "$here/make_seeds.py" --kiln "$kiln" --out "$work/seeds" || exit 1

# Per-target libFuzzer flags: -max_len leaves room for the .kiln mutator to
# grow the JSON partition; timeouts are per input.
flags() {
  local t="$1" f="-timeout=30 -rss_limit_mb=3072 -print_final_stats=1"
  [ -f "$here/$t.dict" ] && f="$f -dict=$here/$t.dict"
  case "$t" in
    kiln) f="$f -max_len=65536" ;;
    onnx) f="$f -max_len=8192" ;;
    *) f="$f -max_len=4096" ;;
  esac
  echo "$f"
}

status=0
# Replays every file of DIR through fuzz_<t>; prints one line per file.
replay() {
  local t="$1" dir="$2" label="$3" bad=0 f
  [ -d "$dir" ] || return 0
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    if KILN_FUZZ_STRICT_LOAD=1 "$build/fuzz_$t" $(flags "$t") "$f" >"$work/replay.log" 2>&1; then
      echo "  $label $t/$(basename "$f"): ok"
    else
      echo "  $label $t/$(basename "$f"): FAILS"; bad=1
      grep -E "ERROR|runtime error|SUMMARY|#[0-3] 0x" "$work/replay.log" | head -6 | cut -c1-300 | sed 's/^/      /'
    fi
  done
  return $bad
}

if [ "$pending" = 1 ]; then
  echo "== fuzz: pending findings (tests/fuzz/pending)"
  for t in $targets; do replay "$t" "$here/pending/$t" pending; done
  exit 0
fi

echo "== fuzz: regression inputs (tests/fuzz/regressions)"
for t in $targets; do replay "$t" "$here/regressions/$t" regression || status=1; done
[ "$replay_only" = 1 ] || [ "$seconds" = 0 ] && exit $status

echo "== fuzz: $seconds s per target, $jobs at once"
fuzz_one() {
  local t="$1" log="$work/logs/$1.log"
  rm -rf "$work/corpus/$t" "$work/artifacts/$t" "$work/findings/$t"
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t" "$work/findings/$t" "$work/logs"
  local dirs=("$work/corpus/$t" "$work/seeds/$t")
  [ -d "$here/regressions/$t" ] && dirs+=("$here/regressions/$t")
  local extra=""
  [ "$keep_going" = 1 ] && extra="-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1"
  KILN_FUZZ_FINDINGS_DIR="$work/findings/$t" "$build/fuzz_$t" $(flags "$t") $extra -max_total_time="$seconds" -artifact_prefix="$work/artifacts/$t/" \
    "${dirs[@]}" >"$log" 2>&1
  echo $? >"$work/logs/$t.rc"
}
running=0
for t in $targets; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

echo "== fuzz: results"
for t in $targets; do
  log="$work/logs/$t.log" rc="$(cat "$work/logs/$t.rc" 2>/dev/null || echo 1)"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}')"
  speed="$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}')"
  units="$(grep -o 'stat::new_units_added: *[0-9]*' "$log" | tail -1 | awk '{print $2}')"
  if [ -z "$execs" ]; then  # fork mode (--keep-going): "#N: cov: ... exec/s S ..."
    execs="$(grep -E '^#[0-9]+: cov' "$log" | tail -1 | sed -E 's/^#([0-9]+):.*/\1/')"
    speed="$(grep -E '^#[0-9]+: cov' "$log" | tail -1 | sed -E 's/.*exec\/s ([0-9]+).*/\1/')"
  fi
  printf '  %-5s rc=%s executions=%s (%s/s) new_units=%s\n' "$t" "$rc" "${execs:-?}" "${speed:-?}" "${units:-?}"
  grep -h "kiln-fuzz-stats" "$log" | grep -v "inputs=0 " | tail -1 | sed 's/^/        /'
  if [ -n "$(ls "$work/findings/$t")" ]; then  # non-fatal findings (FINDINGS.md), kept for a look
    echo "  findings (not crashes), inputs kept:"
    ls "$work/findings/$t" | head -5 | sed "s|^|      $work/findings/$t/|"
  fi
  if [ "$rc" != 0 ] || [ -n "$(ls "$work/artifacts/$t")" ]; then
    status=1
    echo "  FAILED: $t (log $log), reproducers:"
    ls "$work/artifacts/$t" | sed "s|^|      $work/artifacts/$t/|"
    grep -E "ERROR: |runtime error|SUMMARY|^    #[0-9]+ 0x" "$log" | head -14 | sed 's/^/      /'
  fi
done
exit $status
