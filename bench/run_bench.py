#!/usr/bin/python3
"""Latency benchmark: Kiln vs ONNX Runtime (onnxruntime-node) on torchvision models.

  /usr/bin/python3 bench/run_bench.py --kiln build/kiln --work DIR
      [--models resnet18,mobilenet_v2,squeezenet1_0,detector,detector_batched_nms] [--threads 1,2] [--runs 50]
      [--warmup 5] [--rounds 3] [--out bench/RESULTS.md]

For each model: export with tools/export_torchvision.py (cached in DIR/<model>/), compile
with `kiln compile`, then for each thread count run `kiln bench --json` and
bench/ort_bench.js on the same input.npy, interleaved (kiln, ort, kiln, ort, ...) for
--rounds rounds so machine noise hits both. Reported median/p90 are the median over rounds
of each round's median/p90; min is the min over rounds. Writes (replaces) the section
between <!-- bench:latency:begin --> and <!-- bench:latency:end --> in --out.
Needs node + onnxruntime-node: run scripts/install_ort.sh first.
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_md import write_section  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORT_SCRIPT = os.path.join(REPO, "tools", "export_torchvision.py")
ORT_BENCH = os.path.join(REPO, "bench", "ort_bench.js")
EXPORT_FILES = ("model.onnx", "input.npy", "expected.npy")
DETECTION_SCRIPT = os.path.join(REPO, "tests", "models", "test_detection.py")
# Pseudo-models: the SSD-style detector of tests/models/test_detection.py (128x128 input, TopK +
# NonZero + NonMaxSuppression post-processing), with its two NMS exports.
DETECTORS = {"detector": "offset", "detector_batched_nms": "batched"}
BEGIN, END = "<!-- bench:latency:begin -->", "<!-- bench:latency:end -->"
MEM_KEYS = ("arena_bytes", "lower_bound_bytes", "no_reuse_bytes")


class BenchError(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, what, timeout=3600):
    log("+ " + " ".join(shlex.quote(c) for c in cmd))
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what} timed out after {timeout}s")
    except OSError as e:
        raise BenchError(f"{what}: cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip())[-2000:]
        raise BenchError(f"{what} failed (exit {p.returncode}): {tail}")
    return p.stdout


def parse_json(text, what):
    """Parses a tool's JSON output: the whole text, else its last line that is a JSON object."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise BenchError(f"{what}: no JSON object in output: {text.strip()[-500:]!r}")


def export_detector(model, work):
    """Exports a detector pseudo-model; returns (model dir, input file)."""
    nms = DETECTORS[model]
    run([sys.executable, DETECTION_SCRIPT, "--work", work, "--nms", nms,
         "--export-only"], f"export {model}")
    mdir = os.path.join(work, "detection_" + nms)
    return mdir, os.path.join(mdir, "x.npy")


def ensure_export(model, mdir):
    paths = [os.path.join(mdir, f) for f in EXPORT_FILES]
    script_mtime = os.path.getmtime(EXPORT_SCRIPT)
    if all(os.path.exists(p) and os.path.getmtime(p) >= script_mtime for p in paths):
        log(f"reusing cached export in {mdir}")
        return
    run([sys.executable, EXPORT_SCRIPT, "--model", model, "--out", mdir], f"export {model}")


def find_keys(obj, keys):
    """Finds the given keys anywhere in a nested JSON object (first occurrence wins)."""
    found = {}
    stack = [obj]
    while stack:
        o = stack.pop(0)
        if isinstance(o, dict):
            for k, v in o.items():
                if k in keys and k not in found and isinstance(v, (int, float)):
                    found[k] = v
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(o, list):
            stack.extend(o)
    return found


def kiln_memory(kiln, kfile):
    try:
        p = subprocess.run([kiln, "inspect", kfile, "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=300)
        if p.returncode != 0:
            return {}
        return find_keys(parse_json(p.stdout, "kiln inspect"), MEM_KEYS)
    except (OSError, subprocess.TimeoutExpired, BenchError):
        return {}


def stats_from(results, key_med="median_ms", key_p90="p90_ms", key_min="min_ms"):
    for r in results:
        for k in (key_med, key_p90, key_min):
            if not isinstance(r.get(k), (int, float)):
                raise BenchError(f"bench JSON lacks numeric '{k}': {r}")
    return {"median": statistics.median(r[key_med] for r in results),
            "p90": statistics.median(r[key_p90] for r in results),
            "min": min(r[key_min] for r in results)}


def machine_info():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        nproc = subprocess.run(["nproc"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        nproc = str(len(os.sched_getaffinity(0)))
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        rev = (rev + (" (dirty)" if dirty else "")) if rev else "unknown"
    except OSError:
        rev = "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return cpu, nproc, rev, date


def fmt(x, nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}"


def fmt_bytes(n):
    return f"{n / 2**20:.1f} MiB" if n is not None else "n/a"


def render(args, rows, mem, ort_version, errors):
    cpu, nproc, rev, date = machine_info()
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())]
                   + sys.argv[1:])
    out = [BEGIN, "## Latency: Kiln vs ONNX Runtime (CPU, batch 1)", "",
           f"- Machine: {cpu}, nproc {nproc}; {date}",
           f"- Kiln commit {rev}; ONNX Runtime {ort_version} (onnxruntime-node, "
           "graphOptimizationLevel all, sequential, interOpNumThreads 1)",
           f"- Each model: 1x3x224x224 float32 input, random weights with randomised BatchNorm "
           f"(tools/export_torchvision.py); `detector*`: the SSD-style detector of "
           f"tests/models/test_detection.py (1x3x128x128, TopK/NonZero/NonMaxSuppression "
           f"post-processing, data-dependent output extents; `_batched_nms`: torchvision's "
           f"batched_nms export, an If around the NMS). {args.rounds} interleaved rounds (kiln, ort, kiln, ort, ...), "
           f"each {args.runs} timed runs after {args.warmup} warm-up runs; median/p90 = median over "
           "rounds of each round's value, min = min over rounds. Ratio < 1 means Kiln is faster.",
           "",
           "| model | threads | Kiln median ms | Kiln p90 ms | Kiln min ms "
           "| ORT median ms | ORT p90 ms | ORT min ms | Kiln/ORT median |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model, threads, k, o in rows:
        k = k or {}
        o = o or {}
        ratio = (k["median"] / o["median"]) if k.get("median") and o.get("median") else None
        out.append(f"| {model} | {threads} | {fmt(k.get('median'))} | {fmt(k.get('p90'))} "
                   f"| {fmt(k.get('min'))} | {fmt(o.get('median'))} | {fmt(o.get('p90'))} "
                   f"| {fmt(o.get('min'))} | {fmt(ratio, 3)} |")
    if any(mem.values()):
        out += ["", "Kiln activation memory (`kiln inspect --json`):", "",
                "| model | arena | lower bound | no reuse | arena / no reuse |",
                "|---|---:|---:|---:|---:|"]
        for model, m in mem.items():
            if not m:
                continue
            a, lb, nr = (m.get(k) for k in MEM_KEYS)
            share = f"{a / nr:.2f}" if a is not None and nr else "n/a"
            out.append(f"| {model} | {fmt_bytes(a)} | {fmt_bytes(lb)} | {fmt_bytes(nr)} | {share} |")
    if errors:
        out += ["", "Errors:", ""] + [f"- {e if len(e) < 300 else e[:297] + '...'}" for e in errors]
    out += ["", f"Command: `{cmd}`", END]
    return "\n".join(out) + "\n"


def int_list(s):
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return v


def main():
    ap = argparse.ArgumentParser(description="Kiln vs ONNX Runtime latency benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--kiln", required=True, help="path to the kiln binary")
    ap.add_argument("--work", required=True, help="work/cache directory (exports, .kiln files)")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_0,detector,detector_batched_nms")
    ap.add_argument("--threads", type=int_list, default=[1, 2], help="comma-separated, e.g. 1,2")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per round")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved kiln/ort rounds")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    ap.add_argument("--node", default="node", help="node executable for bench/ort_bench.js")
    args = ap.parse_args()

    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        sys.exit(f"error: kiln binary not found or not executable: {kiln}")
    if not os.path.isdir(os.path.join(REPO, "bench", "ort", "node_modules", "onnxruntime-node")):
        sys.exit("error: onnxruntime-node is not installed; run scripts/install_ort.sh")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    rows, mem, errors = [], {}, []
    ort_version = "unknown"
    t_start = time.time()
    for model in models:
        mdir = os.path.abspath(os.path.join(args.work, model))
        inp = os.path.join(mdir, "input.npy")
        try:
            if model in DETECTORS:
                mdir, inp = export_detector(model, os.path.abspath(args.work))
            else:
                os.makedirs(mdir, exist_ok=True)
                ensure_export(model, mdir)
            onnx_file, kfile = os.path.join(mdir, "model.onnx"), os.path.join(mdir, "model.kiln")
            run([kiln, "compile", "--model", onnx_file, "--output", kfile], f"kiln compile {model}")
        except BenchError as e:
            errors.append(f"{model}: {e}")
            log(f"error: {e}")
            rows += [(model, t, None, None) for t in args.threads]
            continue
        mem[model] = kiln_memory(kiln, kfile)
        for threads in args.threads:
            common = ["--input", "0=" + inp, "--runs", str(args.runs),
                      "--warmup", str(args.warmup), "--threads", str(threads)]
            cmds = {"kiln": [kiln, "bench", kfile] + common + ["--json"],
                    "ort": [args.node, ORT_BENCH, onnx_file] + common}
            res = {"kiln": [], "ort": []}  # a runner that fails once is dropped (None)
            for r in range(args.rounds):
                for name, cmd in cmds.items():
                    if res[name] is None:
                        continue
                    what = f"{name} bench {model} threads={threads} round {r + 1}"
                    try:
                        j = parse_json(run(cmd, what), what)
                        log(f"  {what}: median {j.get('median_ms')} ms")
                        res[name].append(j)
                        if name == "ort":
                            ort_version = j.get("ort_version", ort_version)
                    except BenchError as e:
                        errors.append(str(e))
                        log(f"error: {e}")
                        res[name] = None
            k = o = None
            try:
                k = stats_from(res["kiln"]) if res["kiln"] else None
                o = stats_from(res["ort"]) if res["ort"] else None
            except BenchError as e:
                errors.append(f"{model} threads={threads}: {e}")
            rows.append((model, threads, k, o))

    section = render(args, rows, mem, ort_version, errors)
    write_section(args.out, section, BEGIN, END)
    print(section)
    log(f"wrote latency section to {args.out} in {time.time() - t_start:.0f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
