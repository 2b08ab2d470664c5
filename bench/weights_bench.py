#!/usr/bin/python3
"""External-weights benchmark: compile throughput, load time, memory, sharing.

  /usr/bin/python3 bench/weights_bench.py --kiln build/kiln --helper build/weights_load_bench
      --work DIR [--runs 5] [--ort-runs 3] [--out bench/RESULTS.md] [--keep] [--node node]

Builds a model with ~1 GiB of weights (16 MatMuls with [4096, 4096] float32 weights,
which the MatMul kernel reads in place) as ONNX with ONNX external data, then measures:

  - this machine's limits (helper): memcpy bandwidth (into touched and into freshly
    allocated memory), OpenSSL SHA-256 bandwidth (1 and 8 threads), write + fsync +
    rename bandwidth of 16 x 64 MiB files (1 and 8 threads);
  - mode-1 store throughput (weights::StoreWeights of 16 x 64 MiB, 1 and 8 writer
    threads) against the limit 1 / (1/SHA-256 + 1/write) with the same thread count
    (a store hashes everything, then writes), and the end-to-end `kiln compile` time;
  - load time (median over --runs fresh processes, page cache warm, nothing mapped)
    and peak RSS of the loading process for: embedded (mode 0,
    with and without the CRC-32 of the embedded weights), mode 1 and mode 2, each
    mapped and chunked-copy; next to ONNX Runtime (onnxruntime-node) creating a
    session on the same model with ONNX external data (bench/ort_bench.js load_ms);
  - chunked-copy bandwidth (weight bytes / load time) against memcpy bandwidth;
  - four models sharing their weights (one mode-2 weight directory) loaded into one
    Session: RSS after each load, against loading them separately.

Writes (replaces) the section between <!-- bench:weights:begin --> and
<!-- bench:weights:end --> in --out. The ~5 GiB of files it creates are removed at the
end unless --keep.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_md import write_section  # noqa: E402

import numpy as np
import onnx
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORT_BENCH = os.path.join(REPO, "bench", "ort_bench.js")
BEGIN, END = "<!-- bench:weights:begin -->", "<!-- bench:weights:end -->"
LAYERS, DIM = 16, 4096
BLOB = ["--blobs", "16", "--blob-mib", "64"]
MIB = 1 << 20


class BenchError(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, what, timeout=900, env=None):
    log("+ " + " ".join(shlex.quote(str(c)) for c in cmd))
    try:
        p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what} timed out after {timeout}s")
    except OSError as e:
        raise BenchError(f"{what}: cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        raise BenchError(f"{what} failed (exit {p.returncode}): {(p.stderr.strip() or p.stdout.strip())[-1500:]}")
    return p.stdout


def last_json(text, what):
    for line in reversed(text.strip().splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise BenchError(f"{what}: no JSON in output: {text.strip()[-300:]!r}")


def helper_json(args, what):
    return last_json(run([ARGS.helper, *args], what), what)


# ---- the model ------------------------------------------------------------------------

def build_models(d):
    """d/model.onnx (+ d/weights.bin, ONNX external data) and three variants sharing
    the same weights.bin: y = x @ W0 @ W1 ... (variant k has a Relu after layer k)."""
    os.makedirs(d, exist_ok=True)
    data = os.path.join(d, "weights.bin")
    rng = np.random.default_rng(0)
    inits = []
    t0 = time.time()
    with open(data, "wb") as f:
        for i in range(LAYERS):
            # Scaled so that activations stay O(1) through 16 layers.
            w = (rng.random((DIM, DIM), dtype=np.float32) - 0.5) * np.float32(3.4 / np.sqrt(DIM))
            off = f.tell()
            f.write(w.tobytes())
            t = helper.make_tensor_value_info(f"w{i}", TensorProto.FLOAT, [DIM, DIM])  # for type only
            tp = onnx.TensorProto()
            tp.name, tp.data_type = f"w{i}", TensorProto.FLOAT
            tp.dims.extend([DIM, DIM])
            tp.data_location = TensorProto.EXTERNAL
            for k, v in (("location", "weights.bin"), ("offset", str(off)), ("length", str(w.nbytes))):
                e = tp.external_data.add()
                e.key, e.value = k, v
            inits.append(tp)
            del t
    log(f"wrote {os.path.getsize(data) / MIB:.0f} MiB of weights in {time.time() - t0:.1f}s")
    paths = []
    for variant in range(4):
        nodes, cur = [], "x"
        for i in range(LAYERS):
            nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
            cur = f"y{i}"
            if variant and i == variant:
                nodes.append(helper.make_node("Relu", [cur], [f"r{i}"], name=f"relu{i}"))
                cur = f"r{i}"
        g = helper.make_graph(nodes, f"big{variant}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, DIM])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, DIM])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = os.path.join(d, "model.onnx" if variant == 0 else f"variant{variant}.onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        paths.append(path)
    return paths, os.path.getsize(data)


def kiln_compile(onnx_path, out, mode, extra=()):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    text = run([ARGS.kiln, "compile", "--model", onnx_path, "--output", out, "--external-weight", mode, *extra],
               f"kiln compile mode {mode}")
    m = re.search(r" in (\d+) ms", text)
    w = re.search(r"(\d+) written", text)
    return {"ms": int(m.group(1)) if m else None, "written": int(w.group(1)) if w else None, "log": text.strip()}


# ---- measurements -----------------------------------------------------------------------

def median_of(results, key):
    return statistics.median(r[key] for r in results)


def measure_load(name, model, extra, runs):
    helper_json(["load", model, *extra], f"{name} warm-up")  # page cache warm
    res = [helper_json(["load", model, *extra], f"{name} load") for _ in range(runs)]
    once = helper_json(["load", model, *extra, "--run"], f"{name} run")
    return {"name": name, "load_ms": median_of(res, "load_ms"), "min_ms": min(r["load_ms"] for r in res),
            "peak_kib": median_of(res, "peak_rss_kib"), "rss_before_kib": median_of(res, "rss_before_kib"),
            "rss_after_kib": median_of(res, "rss_after_kib"), "run_ms": once["run_ms"],
            "stats": res[-1], "runs": runs}


def measure_ort(model, runs):
    if not os.path.isdir(os.path.join(REPO, "bench", "ort", "node_modules", "onnxruntime-node")):
        raise BenchError("onnxruntime-node is not installed; run scripts/install_ort.sh")
    cmd = [ARGS.node, ORT_BENCH, model, "--runs", "1", "--warmup", "0"]
    res = [last_json(run(cmd, "ort session"), "ort") for _ in range(runs)]
    return {"load_ms": median_of(res, "load_ms"), "min_ms": min(r["load_ms"] for r in res),
            "version": res[0].get("ort_version", "unknown"), "runs": runs}


def machine_info(work):
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                fl = line.split()
                flags = ", ".join(x for x in ("sha_ni", "avx2", "avx512f") if x in fl)
                break
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.0f} GiB"
    fs = subprocess.run(["df", "-T", work], stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1].split()
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    date += ", load average %.1f at start" % os.getloadavg()[0]
    return {"cpu": cpu, "flags": flags, "nproc": os.cpu_count(), "mem": mem,
            "disk": f"{fs[0]} ({fs[1]})" if len(fs) > 1 else "?", "rev": rev + (" (dirty)" if dirty else ""),
            "date": date}


# ---- report -----------------------------------------------------------------------------

def f1(x):
    return "n/a" if x is None else f"{x:.1f}"


def f2(x):
    return "n/a" if x is None else f"{x:.2f}"


def render(r):
    m = r["machine"]
    gib = r["weight_bytes"] / 2**30
    wmib = r["weight_bytes"] / MIB
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())] + sys.argv[1:])
    out = [BEGIN, "## External weights: compile throughput, load time, memory", "",
           f"- Machine: {m['cpu']} ({m['flags']}), nproc {m['nproc']}, {m['mem']} RAM, work dir on {m['disk']}; "
           f"{m['date']}; Kiln commit {m['rev']}" + (f"; {ARGS.label}" if ARGS.label else ""),
           f"- Model: {LAYERS} MatMuls x = x @ W_i with W_i float32 [{DIM}, {DIM}] = {wmib:.0f} MiB of weights "
           "(ONNX external data, one file); MatMul reads constant weights in place.",
           f"- Loads: median over {r['runs']} fresh processes after one warm-up process (page cache warm, nothing "
           "mapped); peak RSS = VmHWM of the loading process, read right after the load (includes the process' own "
           f"~{r['base_rss_mib']:.0f} MiB before loading). getrusage's ru_maxrss is not used: on Linux it carries "
           "over the RSS the process had before execve (the forking Python driver's), which hides small peaks.", ""]
    lim = r["limits"]
    out += ["### Machine limits (bench/weights_load_bench)", "",
            "| measure | value |", "|---|---:|",
            f"| memcpy 256 MiB, touched destination (median of 5) | {f2(lim['memcpy']['memcpy_gbps'])} GB/s |",
            f"| memcpy 256 MiB into a fresh allocation (page faults included) | {f2(lim['memcpy']['memcpy_fresh_gbps'])} GB/s |",
            f"| SHA-256 (OpenSSL), 1 thread | {f2(lim['sha1'])} GB/s |",
            f"| SHA-256 (OpenSSL), 8 threads | {f2(lim['sha8'])} GB/s |",
            f"| write + fsync + rename, 16 x 64 MiB, 1 thread | {f2(lim['write1'])} GB/s |",
            f"| write + fsync + rename, 16 x 64 MiB, 8 threads | {f2(lim['write8'])} GB/s |", ""]
    out += ["### Compile throughput, mode 1 (one file per weight)", "",
            "Store = `weights::StoreWeights` of 16 x 64 MiB distinct blobs into an empty directory (hash all, "
            "then write each file + fsync + rename under the directory lock). Limit = 1 / (1/SHA-256 + 1/write) "
            "at the same thread count.", "",
            "| writer threads | store | limit (SHA-256 + write) | store / limit | `kiln compile` end to end (1 GiB ONNX) |",
            "|---:|---:|---:|---:|---:|"]
    for t in (1, 8):
        s = r["store"][t]
        limit = 1 / (1 / lim[f"sha{t}"] + 1 / lim[f"write{t}"])
        c = r["compile_mode1"].get(t)
        cs = f"{c / 1000:.2f} s ({gib / (c / 1000):.2f} GiB/s)" if c else "n/a"
        out.append(f"| {t} | {s['store_gbps']:.2f} GB/s ({s['store_ms'] / 1000:.2f} s) | {limit:.2f} GB/s "
                   f"| {s['store_gbps'] / limit:.2f} | {cs} |")
    out += ["", f"Other compiles of the same model: embedded (mode 0) {r['compile_other'].get(0, 'n/a')} ms, "
                f"mode 2 {r['compile_other'].get(2, 'n/a')} ms (`kiln compile`, includes reading the ONNX external data).",
            ""]
    out += ["### Load time (~1 GiB of weights)", "",
            "| model | load median ms | load min ms | peak RSS MiB | peak RSS - weights MiB | bytes read MiB "
            "| bytes mapped MiB | first run ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for L in r["loads"]:
        st = L["stats"]
        peak = L["peak_kib"] / 1024
        out.append(f"| {L['name']} | {f1(L['load_ms'])} | {f1(L['min_ms'])} | {peak:.0f} | {peak - wmib:+.0f} "
                   f"| {st['bytes_read'] / MIB:.0f} | {st['bytes_mapped'] / MIB:.0f} | {f1(L['run_ms'])} |")
    ort = r.get("ort")
    if ort:
        out.append(f"| ONNX Runtime {ort['version']} session creation (same model, ONNX external data; "
                   f"median of {ort['runs']}) | {f1(ort['load_ms'])} | {f1(ort['min_ms'])} | | | | | |")
    out.append("")
    g = r["goals"]
    out += ["### Goals", "",
            "| goal | measured | met |", "|---|---|:---:|",
            f"| mapped mode-2 load of 1 GiB under 20 ms | {f1(g['map2_ms'])} ms | {'yes' if g['map2_ms'] < 20 else 'NO'} |",
            f"| chunked copy at >= 70% of memcpy bandwidth | mode 2 copy {f2(g['copy_gbps'])} GB/s = "
            f"{g['copy_vs_memcpy'] * 100:.0f}% of memcpy (touched), {g['copy_vs_fresh'] * 100:.0f}% of memcpy into "
            f"fresh memory | {'yes' if g['copy_vs_memcpy'] >= 0.7 else 'NO'} |",
            f"| peak RSS during load <= weights + 64 MiB | worst external-weight load: {g['worst_name']} peak "
            f"{g['worst_peak_mib']:.0f} MiB = weights {g['worst_peak_mib'] - wmib:+.0f} MiB | "
            f"{'yes' if g['worst_peak_mib'] <= wmib + 64 else 'NO'} |",
            f"| 4 models sharing weights in one Session use the weight memory once | RSS after 4 loads "
            f"{g['session_rss_mib']:.0f} MiB (1 model: {g['session_first_mib']:.0f} MiB; separately: "
            f"{g['separate_rss_mib']:.0f} MiB) | {'yes' if g['session_once'] else 'NO'} |", ""]
    s = r["session"]
    out += ["### Four models sharing weights", "",
            "Four .kiln files (the model and three variants with a Relu after layer 1, 2 or 3) compiled in mode 2 "
            f"into one weight directory (the three later compiles wrote {s['written_later']} weights). RSS "
            "(/proc/self/statm) after each load:", "",
            "| load | RSS after each load, MiB | bytes read MiB | weights shared |", "|---|---|---:|---:|"]
    for key, label in (("copy", "one Session, chunked copy"), ("map", "one Session, mapped, each model run once"),
                       ("separate", "four Model::Load (no Session), chunked copy")):
        v = s[key]
        counters = ("n/a (no shared counters) | n/a" if key == "separate"
                    else f"{v['bytes_read'] / MIB:.0f} | {v['weights_shared']}")
        out.append(f"| {label} | {' / '.join(f'{x / 1024:.0f}' for x in v['rss_after_each_kib'])} | {counters} |")
    if r["errors"]:
        out += ["", "Errors:", ""] + [f"- {e[:300]}" for e in r["errors"]]
    out += ["", f"Command: `{cmd}` ({r['elapsed_s']:.0f} s)", END]
    return "\n".join(out) + "\n"


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--helper", required=True, help="build/weights_load_bench")
    ap.add_argument("--work", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ort-runs", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    ap.add_argument("--node", default="node")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--label", default="", help="extra text for the machine line (e.g. which build)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script itself")
    ARGS = ap.parse_args()
    global LAYERS, DIM, BLOB
    if ARGS.smoke:
        LAYERS, DIM, BLOB = 4, 512, ["--blobs", "4", "--blob-mib", "2"]
    ARGS.kiln, ARGS.helper = os.path.abspath(ARGS.kiln), os.path.abspath(ARGS.helper)
    work = os.path.abspath(ARGS.work)
    t_start = time.time()
    os.makedirs(work, exist_ok=True)
    r = {"machine": machine_info(work), "runs": ARGS.runs, "errors": []}
    try:
        # ---- machine limits and store throughput
        lim = {"memcpy": helper_json(["memcpy", "--mib", "256", "--reps", "5"], "memcpy")}
        for t in (1, 8):
            lim[f"sha{t}"] = helper_json(["sha256", "--mib", "128", "--threads", t], "sha256")["sha256_gbps"]
        r["store"] = {}
        for t in (1, 8):
            d = os.path.join(work, f"write{t}")
            lim[f"write{t}"] = helper_json(["write", "--dir", d, "--threads", t, *BLOB], "write")["write_gbps"]
            shutil.rmtree(d)
            d = os.path.join(work, f"store{t}")
            shutil.rmtree(d, ignore_errors=True)
            r["store"][t] = helper_json(["store", "--dir", d, "--threads", t, "--seed", t, *BLOB], "store")
            shutil.rmtree(d)
        r["limits"] = lim

        # ---- the 1 GiB model, compiled every way
        src = os.path.join(work, "src")
        paths, r["weight_bytes"] = build_models(src)
        onnx_path = paths[0]
        m0, m1, m2 = (os.path.join(work, f"m{i}") for i in range(3))
        for d in (m0, m1, m2, os.path.join(work, "share")):
            shutil.rmtree(d, ignore_errors=True)
        r["compile_other"] = {0: kiln_compile(onnx_path, os.path.join(m0, "model.kiln"), 0)["ms"]}
        r["compile_mode1"] = {}
        for t in (1, 8):
            shutil.rmtree(m1, ignore_errors=True)
            c = kiln_compile(onnx_path, os.path.join(m1, "model.kiln"), 1, ["--weight-writer-threads", t])
            r["compile_mode1"][t] = c["ms"]
            if c["written"] != LAYERS:
                r["errors"].append(f"mode-1 compile wrote {c['written']} weights, expected {LAYERS}")
        r["compile_other"][2] = kiln_compile(onnx_path, os.path.join(m2, "model.kiln"), 2)["ms"]
        share = [os.path.join(m2, "model.kiln")]
        written_later = 0
        for k, p in enumerate(paths[1:], 1):
            out = os.path.join(work, "share", f"variant{k}.kiln")
            c = kiln_compile(p, out, 2, ["--external-weight-dir", os.path.join(m2, "weight")])
            written_later += c["written"] or 0
            share.append(out)

        # ---- loads
        base = helper_json(["memcpy", "--mib", "1", "--reps", "1"], "base")  # noqa: F841 (warms the binary)
        loads = [
            measure_load("embedded (mode 0), CRC-32 verified", os.path.join(m0, "model.kiln"), [], ARGS.runs),
            measure_load("embedded (mode 0), --no-verify-weights", os.path.join(m0, "model.kiln"), ["--no-crc"], ARGS.runs),
            measure_load("mode 1, mapped", os.path.join(m1, "model.kiln"), ["--mode", "map"], ARGS.runs),
            measure_load("mode 1, chunked copy (10 MiB chunks)", os.path.join(m1, "model.kiln"), ["--mode", "copy"], ARGS.runs),
            measure_load("mode 2, mapped", os.path.join(m2, "model.kiln"), ["--mode", "map"], ARGS.runs),
            measure_load("mode 2, chunked copy (10 MiB chunks)", os.path.join(m2, "model.kiln"), ["--mode", "copy"], ARGS.runs),
        ]
        r["loads"] = loads
        r["base_rss_mib"] = statistics.median(L["rss_before_kib"] for L in loads) / 1024
        try:
            r["ort"] = measure_ort(onnx_path, ARGS.ort_runs)
        except BenchError as e:
            r["errors"].append(f"ONNX Runtime: {e}")
            log(f"error: {e}")

        # ---- sharing
        wdir = ["--weight-dir", os.path.join(m2, "weight")]
        r["session"] = {
            "written_later": written_later,
            "copy": helper_json(["session", "--mode", "copy", *wdir, *share], "session copy"),
            "map": helper_json(["session", "--mode", "map", "--run", *wdir, *share], "session map"),
            "separate": helper_json(["session", "--mode", "copy", "--separate", *wdir, *share], "separate copy"),
        }

        # ---- goals
        by = {L["name"]: L for L in loads}
        copy2 = by["mode 2, chunked copy (10 MiB chunks)"]
        copy_gbps = r["weight_bytes"] / (copy2["load_ms"] / 1000) / 1e9
        ext = [L for L in loads if not L["name"].startswith("embedded")]
        worst = max(ext, key=lambda L: L["peak_kib"])
        s = r["session"]
        wmib = r["weight_bytes"] / MIB
        g = {"map2_ms": by["mode 2, mapped"]["load_ms"], "copy_gbps": copy_gbps,
             "copy_vs_memcpy": copy_gbps / lim["memcpy"]["memcpy_gbps"],
             "copy_vs_fresh": copy_gbps / lim["memcpy"]["memcpy_fresh_gbps"],
             "worst_name": worst["name"], "worst_peak_mib": worst["peak_kib"] / 1024,
             "session_rss_mib": s["copy"]["rss_after_each_kib"][-1] / 1024,
             "session_first_mib": s["copy"]["rss_after_each_kib"][0] / 1024,
             "separate_rss_mib": s["separate"]["rss_after_each_kib"][-1] / 1024}
        g["session_once"] = g["session_rss_mib"] - g["session_first_mib"] < 0.1 * wmib
        r["goals"] = g
    except BenchError as e:
        r["errors"].append(str(e))
        log(f"error: {e}")
        raise
    finally:
        if not ARGS.keep:
            for d in ("src", "m0", "m1", "m2", "share", "write1", "write8", "store1", "store8"):
                shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    r["elapsed_s"] = time.time() - t_start
    section = render(r)
    write_section(ARGS.out, section, BEGIN, END)
    print(section)
    log(f"wrote the weights section to {ARGS.out} in {r['elapsed_s']:.0f}s")
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
