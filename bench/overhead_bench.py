#!/usr/bin/python3
"""The executor's per-node cost (issue 12's target: a graph of 1000 tiny elementwise ops costs
< 300 ns per node above the kernels' own work), with ONNX Runtime on the same model.

  /usr/bin/python3 bench/overhead_bench.py --kiln build/kiln --work DIR [--nodes 1000]
      [--elements 16] [--runs 2000] [--rounds 5] [--threads 1]

The model: x [1, elements] through `nodes` elementwise nodes cycling Add(c), Relu, Mul(c),
Neg, Sub(c), Abs (no fusion or folding applies: every node runs). For each round, interleaved:
  * `kiln bench --json`: the median time of a whole run (T);
  * `kiln bench --profile`: the sum over tasks of each task's median time, i.e. the kernels'
    own work as the per-task timer sees it (K; the timer's own cost, tens of ns per task,
    lands in K, so the overhead below is if anything underestimated);
  * bench/ort_bench.js: ONNX Runtime's median for the same model.
Overhead per node = (T - K) / nodes (it can come out below zero: the timer's cost is in K), and
T / nodes, the whole cost per node, kernels included: an upper bound of the overhead that no
timer biases. Reported: the median over rounds of each figure.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model(path, nodes, elements):
    inits = [numpy_helper.from_array(np.array([0.5], np.float32), "c_add"),
             numpy_helper.from_array(np.array([0.75], np.float32), "c_mul"),
             numpy_helper.from_array(np.array([0.25], np.float32), "c_sub")]
    cycle = [("Add", ["c_add"]), ("Relu", []), ("Mul", ["c_mul"]), ("Neg", []), ("Sub", ["c_sub"]), ("Abs", [])]
    ns, cur = [], "x"
    for i in range(nodes):
        op, extra = cycle[i % len(cycle)]
        out = "y" if i == nodes - 1 else f"t{i}"
        ns.append(helper.make_node(op, [cur] + extra, [out], name=f"n{i}"))
        cur = out
    g = helper.make_graph(ns, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, elements])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, elements])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"no JSON in {text[-500:]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--elements", type=int, default=16)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--node", default="node")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    onnx_path = os.path.join(a.work, f"chain{a.nodes}_{a.elements}.onnx")
    kiln_path = onnx_path[:-5] + ".kiln"
    make_model(onnx_path, a.nodes, a.elements)
    run([a.kiln, "compile", "--model", onnx_path, "--output", kiln_path])
    x = os.path.join(a.work, "x.npy")
    np.save(x, ((np.arange(a.elements, dtype=np.float32) - a.elements / 2) / 4).reshape(1, a.elements))
    common = ["--input", f"0={x}", "--runs", str(a.runs), "--warmup", "100", "--threads", str(a.threads)]
    totals, kernels, orts = [], [], []
    for r in range(a.rounds):
        t = last_json(run([a.kiln, "bench", kiln_path, "--json"] + common))["median_ms"] * 1e3
        prof = run([a.kiln, "bench", kiln_path, "--profile", os.path.join(a.work, "p.json")] + common)
        m = re.search(r"^\s*total\s+(\d+)\s+([0-9.]+)", prof, re.M)
        if not m:
            sys.exit(f"no per-op total in kiln bench --profile output:\n{prof[-1500:]}")
        k = float(m.group(2)) * 1e3
        o = last_json(run([a.node, os.path.join(REPO, "bench", "ort_bench.js"), onnx_path, "--input", f"0={x}",
                           "--runs", str(a.runs), "--warmup", "100", "--threads", str(a.threads)]))["median_ms"] * 1e3
        totals.append(t)
        kernels.append(k)
        orts.append(o)
        print(f"round {r + 1}: kiln {t:.1f} us (kernels {k:.1f} us, {int(m.group(1))} tasks), ort {o:.1f} us",
              file=sys.stderr)
    t, k, o = statistics.median(totals), statistics.median(kernels), statistics.median(orts)
    out = {"nodes": a.nodes, "elements": a.elements, "threads": a.threads, "kiln_us": round(t, 1),
           "kiln_kernels_us": round(k, 1), "overhead_ns_per_node": round((t - k) * 1e3 / a.nodes, 1),
           "kiln_ns_per_node": round(t * 1e3 / a.nodes, 1), "ort_us": round(o, 1),
           "ort_ns_per_node": round(o * 1e3 / a.nodes, 1), "rounds": a.rounds, "runs": a.runs}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
