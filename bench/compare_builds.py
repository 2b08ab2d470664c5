#!/usr/bin/python3
"""Old binary against new: latency of the models in bench/RESULTS.md.

  /usr/bin/python3 bench/compare_builds.py --old OLD/kiln --new NEW/kiln --work DIR
      [--models resnet18,mobilenet_v2,squeezenet1_0,detector,detector_batched_nms]
      [--threads 1] [--runs 30] [--warmup 5] [--rounds 5] [--device cpu]

Uses exported models in DIR/<model>/ (model.onnx and input.npy or x.npy): the
cache of bench/run_bench.py, or the model tests' build/models (detection_offset
and detection_batched are run_bench.py's detector and detector_batched_nms). Each binary compiles its own .kiln, then
`kiln bench --json` runs interleaved (old, new, old, new, ...) for --rounds
rounds so machine noise hits both (the order alternates between rounds). Per model: the median over rounds of each
round's median, new/old ratio; then the geometric mean of the ratios. Prints a
Markdown table.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def compile_model(kiln, onnx, out):
    subprocess.run([kiln, "compile", "--model", onnx, "--output", out], check=True, capture_output=True, timeout=900)


def bench(kiln, kiln_file, inputs, threads, runs, warmup, device):
    cmd = [kiln, "bench", kiln_file, "--runs", str(runs), "--warmup", str(warmup), "--threads", str(threads), "--json"]
    if device:
        cmd += ["--device", device]
    for spec in inputs:
        cmd += ["--input", spec]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(p.stdout.strip().splitlines()[-1])["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_0,detector,detector_batched_nms")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="", help="passed to the new binary only (the old one has no --device)")
    a = ap.parse_args()
    rows, ratios = [], []
    for m in a.models.split(","):
        mdir = os.path.join(a.work, m)
        onnx = os.path.join(mdir, "model.onnx")
        if not os.path.exists(onnx):
            sys.exit(f"{onnx} missing: run bench/run_bench.py --work {a.work} first")
        inputs = [f"0={os.path.join(mdir, f)}" for f in ("input.npy", "x.npy") if os.path.exists(os.path.join(mdir, f))][:1]
        files = {}
        for tag, kiln in (("old", a.old), ("new", a.new)):
            files[tag] = os.path.join(mdir, f"compare_{tag}.kiln")
            compile_model(kiln, onnx, files[tag])
        t = {"old": [], "new": []}
        for r in range(a.rounds):
            # ABBA order: whichever runs second in a round tends to run a
            # little faster (measured: ~2% with the same binary twice), so the
            # order alternates between rounds.
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for tag in order:
                kiln = a.old if tag == "old" else a.new
                t[tag].append(bench(kiln, files[tag], inputs, a.threads, a.runs, a.warmup, "" if tag == "old" else a.device))
        old, new = statistics.median(t["old"]), statistics.median(t["new"])
        ratios.append(new / old)
        rows.append((m, old, new, new / old))
        print(f"{m}: old {old:.3f} ms new {new:.3f} ms ratio {new / old:.3f}", file=sys.stderr)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"| model | threads | old median ms | new median ms | new/old |")
    print(f"|---|---:|---:|---:|---:|")
    for m, o, n, r in rows:
        print(f"| {m} | {a.threads} | {o:.3f} | {n:.3f} | {r:.3f} |")
    print(f"| **geometric mean** | | | | **{geo:.3f}** |")
    print(f"\nworst: {max(ratios):.3f}; rounds {a.rounds} x {a.runs} runs (+{a.warmup} warm-up), interleaved old/new, order alternating")


if __name__ == "__main__":
    main()
