#!/usr/bin/python3
"""Half-precision latency: float16 and bfloat16 models vs their float32 originals,
Kiln and ONNX Runtime side by side (issue 15: float16 within 10% of float32).

  /usr/bin/python3 bench/half_bench.py --kiln build/kiln --work DIR
      [--models resnet18,mobilenet_v2,bert_base] [--threads 1,2] [--runs 50] [--warmup 5] [--rounds 3]
      [--out bench/RESULTS.md]

Each model is exported in float32 as bench/run_bench.py does (torchvision models and the
suite's, bert_base included; cached in DIR/<model>/) and converted with
tools/convert_half.py (float32 inputs become the half type; token ids stay). For each thread count the variants run
interleaved, round by round: Kiln float32, Kiln float16, Kiln bfloat16, ONNX Runtime
float32, ONNX Runtime float16 (ONNX Runtime has no bfloat16 Conv on the CPU). Reported:
the median over rounds of each round's median, and each ratio as the median over
rounds of that round's ratio. Writes the section between
<!-- bench:half:begin --> and <!-- bench:half:end --> in --out.
"""
import argparse
import os
import shlex
import statistics
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import convert_half  # noqa: E402
from results_md import write_section  # noqa: E402
from run_bench import (ORT_BENCH, BenchError, int_list, log, machine_info, paired_ratio,  # noqa: E402
                       parse_json, run)
from run_bench import prepare as export_model  # noqa: E402

BEGIN, END = "<!-- bench:half:begin -->", "<!-- bench:half:end -->"
VARIANTS = [("kiln", "float32"), ("kiln", "float16"), ("kiln", "bfloat16"), ("ort", "float32"), ("ort", "float16")]


def prepare(kiln, model, work):
    # The suite's export (cached), as run_bench.py makes it; float32 inputs
    # become the half type, others (token ids, masks) stay.
    mdir, inputs, _ = export_model(model, os.path.abspath(work))
    src = os.path.join(mdir, "model.onnx")
    files = {"float32": (src, inputs)}
    m = onnx.load(src)
    for dt in ("float16", "bfloat16"):
        hdir = os.path.join(mdir, "bench_" + dt)
        os.makedirs(hdir, exist_ok=True)
        onnx.save(convert_half.convert(m, dt), os.path.join(hdir, "model.onnx"))
        half_inputs = []
        for i, path in enumerate(inputs):
            x = np.load(path)
            if x.dtype == np.float32:
                x = x.astype(np.float16) if dt == "float16" else convert_half.to_bf16_bits(x)
            half_inputs.append(os.path.join(hdir, f"input_{i}.npy"))
            np.save(half_inputs[-1], x)
        files[dt] = (os.path.join(hdir, "model.onnx"), half_inputs)
    kfiles = {}
    for dt, (onnx_file, _) in files.items():
        kfiles[dt] = onnx_file[:-5] + ".kiln"
        run([kiln, "compile", "--model", onnx_file, "--output", kfiles[dt]], f"kiln compile {model} {dt}")
    return files, kfiles


def native_bf16(bench_json):
    """Whether `kiln bench --json` says the CPU's kernels took bfloat16 operands."""
    if not bench_json or "cpu_bf16_dot" not in bench_json:
        return "unknown"
    return "yes" if bench_json["cpu_bf16_dot"] else "no"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert_base")
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "bench", "RESULTS.md"))
    ap.add_argument("--node", default="node")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    rows, errors = [], []
    ort_version = "unknown"
    kiln_json = None
    t0 = time.time()
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        try:
            files, kfiles = prepare(kiln, model, args.work)
        except BenchError as e:
            errors.append(f"{model}: {e}")
            continue
        for threads in args.threads:
            res = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for eng, dt in VARIANTS:
                    if res[(eng, dt)] is None:
                        continue
                    onnx_file, inps = files[dt]
                    common = [a for i, p in enumerate(inps) for a in ("--input", f"{i}={p}")]
                    common += ["--runs", str(args.runs), "--warmup", str(args.warmup), "--threads", str(threads)]
                    cmd = ([kiln, "bench", kfiles[dt]] + common + ["--json"] if eng == "kiln"
                           else [args.node, ORT_BENCH, onnx_file] + common)
                    what = f"{eng} {model} {dt} threads={threads} round {r + 1}"
                    try:
                        j = parse_json(run(cmd, what), what)
                        res[(eng, dt)].append(j["median_ms"])
                        if eng == "ort":
                            ort_version = j.get("ort_version", ort_version)
                        else:
                            kiln_json = j
                        log(f"  {what}: median {j['median_ms']:.3f} ms")
                    except (BenchError, KeyError) as e:
                        errors.append(f"{what}: {e}")
                        res[(eng, dt)] = None
            med = {v: (statistics.median(x) if x else None) for v, x in res.items()}
            rows.append((model, threads, med, res))
    cpu, nproc, rev, date = machine_info()
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())]
                   + sys.argv[1:])

    def f(x, nd=2):
        return "n/a" if x is None else f"{x:.{nd}f}"

    def ratio(a, b):
        return f(paired_ratio(a, b), 3)

    out = [BEGIN, "## Half precision: float16 / bfloat16 models vs float32 (CPU, batch 1)", "",
           f"- Machine: {cpu}, nproc {nproc}; {date}; Kiln commit {rev}; ONNX Runtime {ort_version}",
           "- Models: the float32 exports bench/run_bench.py makes (tools/export_torchvision.py; the suite's bert_base, 12 layers, sequence 128) converted by tools/convert_half.py "
           "(weights, float inputs and outputs in the half type). Kiln computes half graphs in float32 on the "
           "CPU (half-in-float32 pass: one Cast at each half input and output), except that where the CPU "
           f"multiplies bfloat16 natively (here: {native_bf16(kiln_json)}) a bfloat16 model's convolutions and "
           "matrix products with constant weights take bfloat16 operands (kiln.bf16). ONNX Runtime runs the "
           "float16 model as its CPU provider does (it has no bfloat16 Conv on the CPU).",
           f"- {args.rounds} interleaved rounds of all five variants, each {args.runs} timed runs after "
           f"{args.warmup} warm-up runs; median over rounds of each round's median, in ms; ratios: the median "
           "over rounds of each round's ratio.", "",
           "| model | threads | Kiln fp32 | Kiln fp16 | Kiln bf16 | Kiln fp16/fp32 | Kiln bf16/fp32 "
           "| ORT fp32 | ORT fp16 | Kiln fp16 / ORT fp16 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model, threads, m, per in rows:
        k32, k16, kb, o32, o16 = (m[v] for v in VARIANTS)
        r32, r16, rb, q32, q16 = (per[v] for v in VARIANTS)
        out.append(f"| {model} | {threads} | {f(k32)} | {f(k16)} | {f(kb)} | {ratio(r16, r32)} | {ratio(rb, r32)} "
                   f"| {f(o32)} | {f(o16)} | {ratio(r16, q16)} |")
    if errors:
        out += ["", "Errors:", ""] + [f"- {e[:300]}" for e in errors]
    out += ["", f"Command: `{cmd}`", END]
    section = "\n".join(out) + "\n"
    write_section(args.out, section, BEGIN, END)
    print(section)
    log(f"wrote the half section to {args.out} in {time.time() - t0:.0f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
