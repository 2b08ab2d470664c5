#!/usr/bin/python3
"""The benchmark suite: Kiln vs ONNX Runtime (onnxruntime-node) on every kind of model, CPU.

  /usr/bin/python3 bench/run_bench.py --kiln build/kiln --work DIR
      [--models LIST] [--threads 1,2] [--runs 50] [--warmup 5] [--rounds 3]
      [--round-ms 1500] [--pin-cpu N] [--out bench/RESULTS.md]

Models (default: all of them):
  torchvision, 1x3x224x224 (tools/export_torchvision.py): resnet18, resnet50, mobilenet_v2,
    mobilenet_v3_small, mobilenet_v3_large, efficientnet_b0, squeezenet1_1, shufflenet_v2_x1_0,
    regnet_y_400mf; and any other torchvision.models name given as tv_NAME (e.g. tv_densenet121,
    or tv_segmentation.lraspp_mobilenet_v3_large for a segmentation model's "out" map:
    architectures outside the default set, for checking that a change generalises)
  bench/suite_export.py: bert_base (seq 128), bert_small (batch 2, seq 32), gpt2 (decoder stack,
    seq 128), db_fpn (640x640), unet (1024x1024), nhwc_resnet18 / nhwc_mobilenet_v3_large /
    nhwc_efficientnet_b0 (NHWC input, Transposes around layout-sensitive ops, as TensorFlow
    converters write them), matmul1024, mlp_b1, mlp_b64
  detector, detector_batched_nms: the SSD-style detector of tests/models/test_detection.py
    (1x3x128x128, TopK/NonZero/NonMaxSuppression post-processing)

For each model: export (cached in DIR/<model>/), `kiln compile`, then
  * accuracy: one `kiln run` and one ONNX Runtime run on the same inputs; every output compared
    with ONNX Runtime's and with PyTorch's: worst = max |kiln - ref| / (atol + rtol |ref|),
    rtol 1e-3, atol 1e-4 x max|ref| (integer outputs: equal); ok when worst <= 1;
  * Transposes: in the source graph and in the compiled one (`kiln inspect --json`);
  * latency: for each thread count, `kiln bench --json` and bench/ort_bench.js interleaved
    (kiln, ort, kiln, ort, ...) for --rounds rounds so machine noise hits both; 1-thread runs of
    both pinned to one CPU (--pin-cpu, default the highest in this process's affinity; -1: not
    pinned), since the vCPUs of a shared host can run at very different speeds and an unpinned
    pair may put the two engines on different ones. Timed runs per
    round: --runs, fewer for slow models (about --round-ms per round, at least 5). median/p90 =
    median over rounds of each round's value;
  * peak RSS of each bench process (its VmHWM, reported by kiln bench and ort_bench.js; ONNX
    Runtime's includes node's own baseline, measured once and reported), and load + first run (Kiln: Model::Load + first
    Execute; ONNX Runtime: InferenceSession.create + first run), medians over rounds.
Writes (replaces) the section between <!-- bench:latency:begin --> and <!-- bench:latency:end -->
in --out: per model and thread count the two medians and p90s, the ratio, peak RSS and
load + first run of both; the geometric mean of the ratios per thread count.
Needs node + onnxruntime-node: run scripts/install_ort.sh first. Exits 1 when a model fails to
export, compile or run, or an output is outside the tolerance.
"""
import argparse
import datetime
import json
import math
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
SUITE_SCRIPT = os.path.join(REPO, "bench", "suite_export.py")
TORCHVISION = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
               "efficientnet_b0", "squeezenet1_1", "shufflenet_v2_x1_0", "regnet_y_400mf")
SUITE = ("bert_base", "bert_small", "gpt2", "db_fpn", "unet", "nhwc_resnet18", "nhwc_mobilenet_v3_large",
         "nhwc_efficientnet_b0", "matmul1024", "mlp_b1", "mlp_b64")  # bench/suite_export.py's
DEFAULT_MODELS = TORCHVISION + SUITE[:5] + ("detector",) + SUITE[5:]
RTOL, ATOL_REL = 1e-3, 1e-4
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


def paired_ratio(a, b):
    """The median over rounds of each round's a / b (lists of per-round medians, same length; the two
    runs of a round are minutes apart at most, so a slow period of a shared host moves both), or
    None where either is missing."""
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x / y for x, y in zip(a, b))


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


def fresh(paths, *scripts):
    t = max(os.path.getmtime(x) for x in scripts)
    return all(os.path.exists(p) and os.path.getmtime(p) >= t for p in paths)


def prepare(model, work):
    """Exports `model` (cached); returns (model dir, [input files], [PyTorch output files])."""
    if model in DETECTORS:
        nms = DETECTORS[model]
        run([sys.executable, DETECTION_SCRIPT, "--work", work, "--nms", nms,
             "--export-only"], f"export {model}")
        mdir = os.path.join(work, "detection_" + nms)
        refs = sorted((f for f in os.listdir(mdir) if f.startswith("expected_") and f.endswith(".npy")),
                      key=lambda f: int(f[9:-4]))
        return mdir, [os.path.join(mdir, "x.npy")], [os.path.join(mdir, f) for f in refs]
    mdir = os.path.join(work, model)
    os.makedirs(mdir, exist_ok=True)
    if model in SUITE:
        meta_file = os.path.join(mdir, "meta.json")
        if not fresh([meta_file, os.path.join(mdir, "model.onnx")], SUITE_SCRIPT,
                     os.path.join(REPO, "tests", "models", "test_bert.py")):
            run([sys.executable, SUITE_SCRIPT, "--model", model, "--out", mdir], f"export {model}")
        else:
            log(f"reusing cached export in {mdir}")
        with open(meta_file) as f:
            meta = json.load(f)
        return (mdir, [os.path.join(mdir, x) for x in meta["inputs"]],
                [os.path.join(mdir, x) for x in meta["outputs"]])
    if not fresh([os.path.join(mdir, f) for f in EXPORT_FILES], EXPORT_SCRIPT):
        run([sys.executable, EXPORT_SCRIPT, "--model", model.removeprefix("tv_"), "--out", mdir], f"export {model}")
    else:
        log(f"reusing cached export in {mdir}")
    return mdir, [os.path.join(mdir, "input.npy")], [os.path.join(mdir, "expected.npy")]




def worst_error(got, ref):
    """max |got - ref| / (atol + rtol |ref|), atol = ATOL_REL * max|ref|; integers: 0 or inf."""
    import numpy as np
    if got.shape != ref.shape:
        return float("inf"), f"shape {list(got.shape)} vs {list(ref.shape)}"
    if got.size == 0:
        return 0.0, ""
    if not np.issubdtype(ref.dtype, np.floating):
        return (0.0 if np.array_equal(got, ref) else float("inf")), ""
    g, r = got.astype(np.float64), ref.astype(np.float64)
    gn, rn = np.isnan(g), np.isnan(r)
    gi, ri = np.isinf(g), np.isinf(r)
    if np.any(gn != rn) or np.any(gi != ri) or np.any(g[gi] != r[ri]):
        return float("inf"), "non-finite values differ"
    fin = np.isfinite(r)
    if not fin.any():
        return 0.0, ""
    atol = ATOL_REL * float(np.max(np.abs(r[fin])))
    err = np.abs(g[fin] - r[fin]) / (atol + RTOL * np.abs(r[fin]) + 1e-300)
    return float(err.max()), ""


def check_accuracy(kiln, node, model, mdir, kfile, onnx_file, inputs, refs):
    """Kiln's outputs against ONNX Runtime's and PyTorch's; returns {'ort': w, 'torch': w}, notes."""
    import numpy as np
    kdir, odir = os.path.join(mdir, "kiln_out"), os.path.join(mdir, "ort_out")
    for d in (kdir, odir):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
    given = [x for i, f in enumerate(inputs) for x in ("--input", f"{i}={f}")]
    run([kiln, "run", kfile, "--threads", "1", "--output-dir", kdir] + given, f"kiln run {model}")
    run([node, ORT_BENCH, onnx_file, "--runs", "1", "--warmup", "0", "--output-dir", odir] + given,
        f"ort run {model}")
    def listed(d):
        return sorted((f for f in os.listdir(d) if f.startswith("output_") and f.endswith(".npy")),
                      key=lambda f: int(f[7:-4]))
    outs = listed(kdir)
    res, notes = {}, []
    for key, files in (("ort", [os.path.join(odir, f) for f in listed(odir)]), ("torch", refs)):
        if len(files) != len(outs):
            res[key] = float("inf")
            notes.append(f"{key}: {len(files)} outputs, kiln {len(outs)}")
            continue
        w = 0.0
        for f, ref in zip(outs, files):
            e, why = worst_error(np.load(os.path.join(kdir, f)), np.load(ref))
            if why:
                notes.append(f"{key} {f}: {why}")
            w = max(w, e)
        res[key] = w
    return res, notes


def count_transposes(kiln, onnx_file, kfile):
    import onnx
    g = onnx.load(onnx_file, load_external_data=False).graph
    src = sum(n.op_type == "Transpose" for n in g.node)
    j = parse_json(run([kiln, "inspect", kfile, "--json"], "kiln inspect"), "kiln inspect")
    return src, int(j.get("op_counts", {}).get("Transpose", 0))


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


def render(args, rows, info, ort_version, node_rss, errors):
    cpu, nproc, rev, date = machine_info()
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())]
                   + sys.argv[1:])
    out = [BEGIN, "## The benchmark suite: Kiln vs ONNX Runtime (CPU)", "",
           f"- Machine: {cpu}, nproc {nproc}; {date}",
           f"- Kiln commit {rev}; ONNX Runtime {ort_version} (onnxruntime-node, "
           "graphOptimizationLevel all, sequential, interOpNumThreads 1)",
           "- Models and method: `bench/run_bench.py`'s docstring (random weights, randomised norms; "
           f"{args.rounds} interleaved rounds, about {args.round_ms} ms of timed runs per round, at most "
           f"{args.runs}; median/p90 = median over rounds; "
           + (f"1-thread runs of both pinned to CPU {args.pin_cpu}" if args.pin_cpu >= 0 else "not pinned")
           + "). Ratio < 1: Kiln is faster. Peak RSS: the "
           f"bench process's (ONNX Runtime's includes node itself: {fmt_bytes(node_rss)} for node with "
           "onnxruntime-node loaded and no session). Load + first: Kiln's Model::Load and first run; "
           "ONNX Runtime's session creation and first run.",
           "",
           "| model | threads | Kiln median ms | Kiln p90 | ORT median ms | ORT p90 | Kiln/ORT "
           "| Kiln peak RSS | ORT peak RSS | Kiln load+first ms | ORT load+first ms |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = {}
    for model, threads, k, o in rows:
        k = k or {}
        o = o or {}
        ratio = (k["median"] / o["median"]) if k.get("median") and o.get("median") else None
        if ratio:
            ratios.setdefault(threads, []).append((model, ratio))
        out.append(f"| {model} | {threads} | {fmt(k.get('median'))} | {fmt(k.get('p90'))} "
                   f"| {fmt(o.get('median'))} | {fmt(o.get('p90'))} | {fmt(ratio, 3)} "
                   f"| {fmt_bytes(k.get('rss'))} | {fmt_bytes(o.get('rss'))} "
                   f"| {fmt(k.get('start'), 1)} | {fmt(o.get('start'), 1)} |")
    out += ["", "| threads | models | geometric mean Kiln/ORT | above 1.1 |", "|---:|---:|---:|---|"]
    for threads, rs in sorted(ratios.items()):
        gm = math.exp(sum(math.log(r) for _, r in rs) / len(rs))
        above = ", ".join(f"{m} {r:.2f}" for m, r in rs if r > 1.1) or "none"
        out.append(f"| {threads} | {len(rs)} | {gm:.3f} | {above} |")
    out += ["", "Accuracy (worst = max |Kiln - reference| / (1e-4 max|reference| + 1e-3 |reference|), "
            "ok when <= 1; integer outputs must be equal), Transposes in the source and compiled graphs, "
            "Kiln's activation arena (`kiln inspect --json`):", "",
            "| model | vs ONNX Runtime | vs PyTorch | Transposes source / compiled | arena | lower bound |",
            "|---|---:|---:|---:|---:|---:|"]
    for model, i in info.items():
        acc = i.get("acc", {})
        tr = i.get("transposes")
        mem = i.get("mem", {})
        out.append(f"| {model} | {fmt_worst(acc.get('ort'))} | {fmt_worst(acc.get('torch'))} "
                   f"| {f'{tr[0]} / {tr[1]}' if tr else 'n/a'} | {fmt_bytes(mem.get('arena_bytes'))} "
                   f"| {fmt_bytes(mem.get('lower_bound_bytes'))} |")
    if errors:
        out += ["", "Errors:", ""] + [f"- {e if len(e) < 300 else e[:297] + '...'}" for e in errors]
    out += ["", f"Command: `{cmd}`", END]
    return "\n".join(out) + "\n"


def fmt_worst(w):
    if w is None:
        return "n/a"
    return f"{w:.3f}" + ("" if w <= 1 else " **FAIL**") if math.isfinite(w) else "**FAIL**"


def int_list(s):
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return v


def node_baseline_rss(node):
    """Peak RSS (VmHWM) of node with onnxruntime-node loaded and no session."""
    mod = os.path.join(REPO, "bench", "ort", "node_modules", "onnxruntime-node")
    script = (f"require({json.dumps(mod)}); const m = /VmHWM:\\s*(\\d+)/.exec(require('fs')"
              ".readFileSync('/proc/self/status', 'latin1')); console.log(m ? Number(m[1]) * 1024 : -1);")
    try:
        v = int(run([node, "-e", script], "node baseline").strip().splitlines()[-1])
        return v if v > 0 else None
    except (BenchError, ValueError, IndexError):
        return None


def bench_rounds(cmds, model, threads, rounds, errors):
    """Interleaved rounds; returns {'kiln': stats or None, 'ort': ...}."""
    res = {"kiln": [], "ort": []}  # a runner that fails once is dropped (None)
    for r in range(rounds):
        for name, cmd in cmds.items():
            if res[name] is None:
                continue
            what = f"{name} bench {model} threads={threads} round {r + 1}"
            try:
                j = parse_json(run(cmd, what), what)
                log(f"  {what}: median {j.get('median_ms')} ms, peak RSS {j.get('peak_rss_bytes', -1) / 2**20:.1f} MiB")
                res[name].append(j)
            except BenchError as e:
                errors.append(str(e))
                log(f"error: {e}")
                res[name] = None
    out = {}
    for name, rs in res.items():
        out[name] = None
        if not rs:
            continue
        try:
            st = stats_from(rs)
        except BenchError as e:
            errors.append(f"{model} threads={threads}: {e}")
            continue
        rss = [r["peak_rss_bytes"] for r in rs if isinstance(r.get("peak_rss_bytes"), int) and r["peak_rss_bytes"] > 0]
        st["rss"] = statistics.median(rss) if rss else None
        if all(isinstance(r.get("load_ms"), (int, float)) and isinstance(r.get("first_ms"), (int, float))
               for r in rs):
            st["start"] = statistics.median(r["load_ms"] + r["first_ms"] for r in rs)
        st["version"] = rs[0].get("ort_version")
        out[name] = st
    return out


def main():
    ap = argparse.ArgumentParser(description="Kiln vs ONNX Runtime: the benchmark suite",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--kiln", required=True, help="path to the kiln binary")
    ap.add_argument("--work", required=True, help="work/cache directory (exports, .kiln files)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", type=int_list, default=[1, 2], help="comma-separated, e.g. 1,2")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per round, at most")
    ap.add_argument("--round-ms", type=int, default=1500, help="timed milliseconds per round, about")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up runs per round, at most")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved kiln/ort rounds")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    ap.add_argument("--node", default="node", help="node executable for bench/ort_bench.js")
    ap.add_argument("--pin-cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="CPU both engines' 1-thread runs are pinned to (taskset); -1: not pinned")
    args = ap.parse_args()

    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        sys.exit(f"error: kiln binary not found or not executable: {kiln}")
    if not os.path.isdir(os.path.join(REPO, "bench", "ort", "node_modules", "onnxruntime-node")):
        sys.exit("error: onnxruntime-node is not installed; run scripts/install_ort.sh")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in TORCHVISION + SUITE + tuple(DETECTORS) and not m.startswith("tv_")]
    if unknown:
        sys.exit(f"error: unknown models {unknown}; known: {', '.join(TORCHVISION + SUITE + tuple(DETECTORS))}")
    rows, info, errors = [], {}, []
    ort_version = "unknown"
    work = os.path.abspath(args.work)
    node_rss = node_baseline_rss(args.node)
    t_start = time.time()
    for model in models:
        info[model] = {}
        try:
            mdir, inputs, refs = prepare(model, work)
            onnx_file, kfile = os.path.join(mdir, "model.onnx"), os.path.join(mdir, "model.kiln")
            run([kiln, "compile", "--model", onnx_file, "--output", kfile], f"kiln compile {model}")
            acc, notes = check_accuracy(kiln, args.node, model, mdir, kfile, onnx_file, inputs, refs)
            info[model]["acc"] = acc
            for key, w in acc.items():
                if not w <= 1:
                    errors.append(f"{model}: outputs differ from {key} (worst {w:.3g}) {'; '.join(notes)}")
            info[model]["transposes"] = count_transposes(kiln, onnx_file, kfile)
            given = [x for i, f in enumerate(inputs) for x in ("--input", f"{i}={f}")]
            probe = parse_json(run([kiln, "bench", kfile, "--runs", "3", "--warmup", "1", "--json"] + given,
                                   f"kiln probe {model}"), "kiln probe")
            if not isinstance(probe.get("median_ms"), (int, float)):
                raise BenchError(f"kiln probe {model}: no median_ms in {probe}")
        except BenchError as e:
            errors.append(f"{model}: {e}")
            log(f"error: {e}")
            rows += [(model, t, None, None) for t in args.threads]
            continue
        info[model]["mem"] = kiln_memory(kiln, kfile)
        runs = max(5, min(args.runs, int(args.round_ms / max(probe["median_ms"], 1e-3))))
        warmup = min(args.warmup, max(1, runs // 5))
        for threads in args.threads:
            common = given + ["--runs", str(runs), "--warmup", str(warmup), "--threads", str(threads)]
            pin = ["taskset", "-c", str(args.pin_cpu)] if threads == 1 and args.pin_cpu >= 0 else []
            cmds = {"kiln": pin + [kiln, "bench", kfile] + common + ["--json"],
                    "ort": pin + [args.node, ORT_BENCH, onnx_file] + common}
            st = bench_rounds(cmds, model, threads, args.rounds, errors)
            if st["ort"] and st["ort"].get("version"):
                ort_version = st["ort"]["version"]
            rows.append((model, threads, st["kiln"], st["ort"]))

    section = render(args, rows, info, ort_version, node_rss, errors)
    write_section(args.out, section, BEGIN, END)
    print(section)
    log(f"wrote the suite section to {args.out} in {time.time() - t_start:.0f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
