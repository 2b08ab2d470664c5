#!/usr/bin/python3
"""Int8 without VNNI: Kiln's int16-product kernel against the float32 route it replaced and
against Kiln's float32 model (issue 15).

  /usr/bin/python3 bench/int8_int16_bench.py --kiln build/kiln --work DIR [--threads 1,2]
      [--models resnet18,mobilenet_v2,bert] [--formats qdq,qoperator,dynamic] [--runs 12,40,200]
      [--rounds 4] [--isa AVX2] [--out bench/RESULTS.md]

DIR is a work directory bench/int8_bench.py has filled (DIR/int8_bench/<model>/model.kiln,
<format>.kiln, the inputs, and ONNX Runtime's outputs <format>_ort_out/). Every run holds
oneDNN to --isa (ONEDNN_MAX_CPU_ISA), and with it Kiln's own kernels (below AVX512_CORE they
take their AVX2 paths: cpu::Avx512Allowed), so that on a CPU with VNNI the kernels are chosen
as on one without: oneDNN's int8 primitives are then not exact for 8-bit weights and Kiln runs
its int16-product kernel (int16_conv.h: vpmaddwd; Winograd F(2x2, 3x3) in integers for 3x3
stride-1 layers) or, with KILN_INT8_INT16=off, the float32 route (oneDNN's float32 primitives
on converted operands). ONNX Runtime cannot be held to an ISA, so it has no column here (its
MLAS would run VNNI); its outputs (computed with VNNI, exact) are the reference for the
outputs' column.

Per model, form and thread count, each round runs Kiln float32, int8 with the float32 route
and int8 with the int16 kernel (`kiln bench`, 1-thread runs pinned to --pin-cpu);
reported: median over rounds of each round's median, and each ratio as the median over
rounds of that round's ratio. Writes the section between <!-- bench:int8-int16:begin -->
and <!-- bench:int8-int16:end --> in --out.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from results_md import write_section  # noqa: E402
from run_bench import BenchError, int_list, log, machine_info, paired_ratio, parse_json  # noqa: E402

BEGIN, END = "<!-- bench:int8-int16:begin -->", "<!-- bench:int8-int16:end -->"


def inputs(md):
    named = [f for f in ("input_ids", "attention_mask") if os.path.exists(os.path.join(md, f + ".npy"))]
    if named:
        return [a for f in named for a in ("--input", f"{f}={os.path.join(md, f + '.npy')}")]
    return ["--input", "0=" + os.path.join(md, "input.npy")]


def kiln_cmd(args, env_extra, cmd, threads):
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=args.isa, **env_extra)
    pin = ["taskset", "-c", str(args.pin_cpu)] if threads == 1 and args.pin_cpu >= 0 else []
    log("+ " + " ".join(f"{k}={v}" for k, v in env_extra.items()) + " " + " ".join(cmd))
    p = subprocess.run(pin + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed (exit {p.returncode}): {(p.stderr or p.stdout)[-2000:]}")
    return p.stdout


def bench(args, env_extra, model, md, threads, runs):
    out = kiln_cmd(args, env_extra, [args.kiln, "bench", model, *inputs(md), "--runs", str(runs), "--warmup", "5",
                                     "--threads", str(threads), "--json"], threads)
    return parse_json(out, "kiln bench")["median_ms"]


def outputs(args, env_extra, model, md, dest):
    kiln_cmd(args, env_extra, [args.kiln, "run", model, *inputs(md), "--output-dir", dest], 2)
    return [np.load(os.path.join(dest, f)).astype(np.float64) for f in sorted(os.listdir(dest)) if f.endswith(".npy")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    ap.add_argument("--formats", default="qdq,qoperator,dynamic")
    ap.add_argument("--runs", type=int_list, default=None, help="timed runs per model (one per model, or one for all)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--isa", default="AVX2")
    ap.add_argument("--pin-cpu", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    formats = [f for f in args.formats.split(",") if f]
    default_runs = {"resnet18": 12, "mobilenet_v2": 40, "bert": 200}
    runs = args.runs or [default_runs.get(m, 20) for m in models]
    if len(runs) == 1:
        runs = runs * len(models)
    if len(runs) != len(models):
        ap.error("--runs: one value, or one per model")
    start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows, checks = [], []
    for model, nruns in zip(models, runs):
        md = os.path.join(args.work, "int8_bench", model)
        fp32 = os.path.join(md, "model.kiln")
        for fmt in formats:
            q = os.path.join(md, fmt + ".kiln")
            if not os.path.exists(q) or not os.path.exists(fp32):
                raise BenchError(f"{q} or {fp32} missing: run bench/int8_bench.py with --work {args.work} first")
            # Outputs: the int16 kernel's against the float32 route's and ONNX Runtime's.
            a = outputs(args, {"KILN_INT8_INT16": "off"}, q, md, os.path.join(md, fmt + "_i16off_out"))
            b = outputs(args, {}, q, md, os.path.join(md, fmt + "_i16_out"))
            ort_dir = os.path.join(md, fmt + "_ort_out")
            ort = [np.load(os.path.join(ort_dir, f)).astype(np.float64) for f in sorted(os.listdir(ort_dir))
                   if f.endswith(".npy")] if os.path.isdir(ort_dir) else []
            same = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
            vs_ort = (max(float(np.abs(x - o).max() / max(np.abs(o).max(), 1e-30)) for x, o in zip(b, ort))
                      if ort else None)
            checks.append((model, fmt, same, vs_ort))
            for t in args.threads:
                f, off, on = [], [], []
                for _ in range(args.rounds):
                    f.append(bench(args, {}, fp32, md, t, nruns))
                    off.append(bench(args, {"KILN_INT8_INT16": "off"}, q, md, t, nruns))
                    on.append(bench(args, {}, q, md, t, nruns))
                rows.append((model, fmt, t, statistics.median(f), statistics.median(off), statistics.median(on),
                             paired_ratio(on, off), paired_ratio(on, f)))
    cpu, nproc, rev, _ = machine_info()
    flags = open("/proc/cpuinfo").read()
    family = next((l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("cpu family")), "?")
    model_no = next((l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model\t")), "?")
    vnni = ", ".join(f for f in ("avx512_vnni", "avx_vnni") if f in flags) or "no VNNI"
    m = f"{cpu} (family {family} model {model_no}; {vnni}), nproc {nproc}; Kiln commit {rev}"
    lines = [BEGIN, "## Int8 without VNNI: the int16-product kernel (oneDNN held to " + args.isa + "; CPU, batch 1)", "",
             "Written by `bench/int8_int16_bench.py`. Kiln's int8 with oneDNN held to " + args.isa +
             " (`ONEDNN_MAX_CPU_ISA`, which holds Kiln's own kernels to it too), where its int8 primitives are not"
             " exact for 8-bit weights: the int16-product"
             " kernel (`int16_conv.h`: vpmaddwd on widened operands, exact; integer Winograd F(2x2, 3x3) for 3x3"
             " stride-1 layers) against the float32 route it replaced (`KILN_INT8_INT16=off`) and Kiln's float32 model"
             " (also held to " + args.isa + "; its own Winograd F(4x4, 3x3) is AVX2 code). ONNX Runtime cannot be held"
             " to an ISA: no column.", "",
             f"- Machine: {m}; {start}",
             f"- {args.rounds} interleaved rounds; median over rounds of each round's median (ms); ratios: median over"
             " rounds of each round's ratio; 1-thread runs pinned to one CPU.", "",
             "| model | form | threads | Kiln fp32 | int8, float32 route | int8, int16 kernel | int16 / float32 route |"
             " int16 / Kiln fp32 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model, fmt, t, f, off, on, r_off, r_f in rows:
        lines.append(f"| {model} | {fmt} | {t} | {f:.3f} | {off:.3f} | {on:.3f} | {r_off:.3f} | {r_f:.3f} |")
    lines += ["", "Outputs: the int16 kernel's against the float32 route's (both exact integer sums; the float32 route"
              " rounds sums past 2^24) and against ONNX Runtime's (run with VNNI, exact; the differences are float32"
              " rounding in the ops around the quantized ones):", "",
              "| model | form | max abs diff vs float32 route | max abs diff / max abs ORT output |", "|---|---|---:|---:|"]
    for model, fmt, same, vs_ort in checks:
        lines.append(f"| {model} | {fmt} | {same:.3g} | {'n/a' if vs_ort is None else f'{vs_ort:.2e}'} |")
    lines += ["", "Command: `/usr/bin/python3 bench/int8_int16_bench.py " + " ".join(sys.argv[1:]) + "`", END]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_section(args.out, text, BEGIN, END)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
