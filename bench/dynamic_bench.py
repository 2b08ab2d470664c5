#!/usr/bin/python3
"""Dynamic shapes (issue 13): one symbolic .kiln against a static compile per shape, and ONNX Runtime.

  /usr/bin/python3 bench/dynamic_bench.py --kiln build/kiln --work DIR [--shapes 1x16,2x64,4x128]
      [--threads 1] [--runs 30] [--warmup 3] [--rounds 3] [--out bench/RESULTS.md]

Exports the BERT-style encoder of tests/models/test_bert.py with dynamic batch and seq
(test_bert.py --dynamic, which also checks the one .kiln against PyTorch at seven shapes),
compiles it once with no --input-shape (dynamic.kiln), once with ranges up to the largest
benchmarked batch and seq (bounded.kiln: `--input-shape input_ids:1..B,1..S;...`, planned for
the largest shape, one arena shared by its plans) and once per benchmarked shape with
--input-shape (static_BxS.kiln). Per shape, interleaved for --rounds rounds: `kiln bench --json`
on the static file, the dynamic file and the bounded file, and bench/ort_bench.js on the dynamic
ONNX model.
Reports the median over rounds of each median, the ratios dynamic/static and dynamic/ORT, and
the time the dynamic model took to make its plan for that shape (plan_ms: shape inference,
memory plan, kernels, recording; the first run at a new shape pays it). Writes (replaces) the
section between <!-- bench:dynamic:begin --> and <!-- bench:dynamic:end --> in --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from results_md import write_section  # noqa: E402
from run_bench import BenchError, log, machine_info, run  # noqa: E402

BEGIN, END = "<!-- bench:dynamic:begin -->", "<!-- bench:dynamic:end -->"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shapes", default="1x16,2x64,4x128")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    work = os.path.abspath(args.work)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    run([sys.executable, os.path.join(REPO, "tests", "models", "test_bert.py"), "--kiln", kiln, "--work", work,
         "--dynamic", "--max-pos", str(max(s for _, s in shapes))], "export + accuracy check (test_bert.py --dynamic)")
    mdir = os.path.join(work, "bert_dynamic")
    onnx_path, dyn = os.path.join(mdir, "model.onnx"), os.path.join(mdir, "model.kiln")
    bounded = os.path.join(mdir, "bounded.kiln")
    max_b, max_s = max(b for b, _ in shapes), max(s for _, s in shapes)
    run([kiln, "compile", "--model", onnx_path, "--output", bounded, "--input-shape",
         f"input_ids:1..{max_b},1..{max_s};attention_mask:1..{max_b},1..{max_s}"], "bounded compile")
    # Memory: the bounded file's arena is planned once, for the largest signature; the target is
    # at most 1.1 x its lower bound (the most bytes live at once).
    mem = json.loads(run([kiln, "inspect", "--json", bounded], "kiln inspect bounded"))["memory"]
    rows = []
    for batch, seq in shapes:
        tag = f"{batch}x{seq}"
        rng = np.random.default_rng(batch * 1000 + seq)
        ids_path, mask_path = os.path.join(mdir, f"bench_ids_{tag}.npy"), os.path.join(mdir, f"bench_mask_{tag}.npy")
        np.save(ids_path, rng.integers(0, 1000, size=(batch, seq), dtype=np.int64))
        np.save(mask_path, np.ones((batch, seq), dtype=np.int64))
        static = os.path.join(mdir, f"static_{tag}.kiln")
        run([kiln, "compile", "--model", onnx_path, "--output", static, "--input-shape",
             f"input_ids:{batch},{seq};attention_mask:{batch},{seq}"], f"static compile at {tag}")
        inputs = ["--input", f"input_ids={ids_path}", "--input", f"attention_mask={mask_path}"]
        common = ["--runs", str(args.runs), "--warmup", str(args.warmup), "--threads", str(args.threads)]
        res = {"static": [], "dynamic": [], "ort": [], "plan": [], "bounded": [], "bplan": []}
        for _ in range(args.rounds):
            j = json.loads(run([kiln, "bench", static, "--json"] + inputs + common, f"kiln bench static {tag}"))
            res["static"].append(j["median_ms"])
            j = json.loads(run([kiln, "bench", dyn, "--json"] + inputs + common, f"kiln bench dynamic {tag}"))
            res["dynamic"].append(j["median_ms"])
            res["plan"].append(j["plan_ms"])
            j = json.loads(run([kiln, "bench", bounded, "--json"] + inputs + common, f"kiln bench bounded {tag}"))
            res["bounded"].append(j["median_ms"])
            res["bplan"].append(j["plan_ms"])
            out = run(["node", os.path.join(REPO, "bench", "ort_bench.js"), onnx_path] + inputs + common,
                      f"ort bench {tag}")
            res["ort"].append(json.loads(out.strip().splitlines()[-1])["median_ms"])
        med = {k: statistics.median(v) for k, v in res.items()}
        rows.append((tag, med))
        log(f"{tag}: {med}")
    cpu, nproc, rev, date = machine_info()
    lines = [BEGIN, "", f"Machine: {cpu}, {nproc} vCPUs; Kiln {rev}; {date}; "
             f"{args.threads} thread(s), medians over {args.rounds} interleaved rounds of {args.runs} runs.", "",
             f"Command: `/usr/bin/python3 bench/dynamic_bench.py --kiln build/kiln --work DIR --shapes {args.shapes}`",
             "", f"bounded: compiled with `--input-shape input_ids:1..{max_b},1..{max_s};attention_mask:1..{max_b},"
             f"1..{max_s}`: one arena for every plan, {mem['arena_bytes'] / 2**20:.2f} MiB, planned for "
             f"{max_b}x{max_s}; its lower bound (most bytes live at once) {mem['lower_bound_bytes'] / 2**20:.2f} MiB: "
             f"arena / lower bound {mem['arena_bytes'] / max(mem['lower_bound_bytes'], 1):.3f} (target <= 1.1).", "",
             "| batch x seq | static .kiln (ms) | symbolic .kiln (ms) | symbolic / static | bounded (ms) "
             "| bounded / static | ONNX Runtime (ms) | symbolic / ORT | plan, symbolic (ms) | plan, bounded (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for tag, m in rows:
        lines.append(f"| {tag} | {m['static']:.3f} | {m['dynamic']:.3f} | {m['dynamic'] / m['static']:.3f} | "
                     f"{m['bounded']:.3f} | {m['bounded'] / m['static']:.3f} | "
                     f"{m['ort']:.3f} | {m['dynamic'] / m['ort']:.3f} | {m['plan']:.2f} | {m['bplan']:.2f} |")
    lines += ["", END]
    write_section(args.out, "\n".join(lines), BEGIN, END)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"dynamic_bench: error: {e}", file=sys.stderr)
        sys.exit(1)
