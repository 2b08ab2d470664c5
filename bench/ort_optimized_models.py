#!/usr/bin/python3
"""Models saved after ONNX Runtime's graph optimizer: Kiln on them against Kiln on the original
files and against ONNX Runtime.

  /usr/bin/python3 bench/ort_optimized_models.py --kiln build/kiln --work DIR
      [--models resnet18,mobilenet_v2,bert] [--formats float,qdq,dynamic]

For each model (bench/int8_bench.py's: the torchvision exports with BatchNorm folded, the test
encoder) and form (float32, or tools/quantize.py's QDQ / dynamic form), ONNX Runtime loads the
file and saves its optimized graph (bench/ort_bench.js --save-optimized: the 'extended' level,
which writes com.microsoft FusedConv, SkipLayerNormalization, Gelu, FusedMatMul, FusedGemm,
QGemm, MatMulIntegerToFloat, ...). Kiln compiles and runs both files on the same inputs.
Reported per pair: the contrib ops in the optimized file, max |Kiln optimized - Kiln original|
and max |Kiln optimized - ONNX Runtime optimized| over max |output| (ONNX Runtime's quantized
products saturate on CPUs without VNNI: its int8 results differ from the exact ones there).
Exit status 1 when a file fails to compile or run, or Kiln's two results differ by more than
1e-5 of the output's magnitude.
"""
import argparse
import collections
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from int8_bench import input_args, model_pair  # noqa: E402
from run_bench import ORT_BENCH, BenchError, run  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    ap.add_argument("--formats", default="float,qdq,dynamic")
    ap.add_argument("--node", default="node")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    d = os.path.abspath(os.path.join(args.work, "int8_bench"))
    os.makedirs(d, exist_ok=True)
    bad = 0
    print(f"{'model':28s} {'Kiln opt vs Kiln orig':>22s} {'Kiln opt vs ORT opt':>20s}  contrib ops in the optimized file")
    for model in args.models.split(","):
        for fmt in args.formats.split(","):
            name = f"{model} ({fmt})"
            try:
                paths = model_pair(kiln, model, d, "qdq" if fmt == "float" else fmt)
                orig = paths["float32" if fmt == "float" else "int8"]
                feeds = input_args(orig)
                opt = orig[:-5] + "_ort_opt.onnx"
                if not os.path.exists(orig[:-5] + ".npy") and "0=" in " ".join(feeds):
                    raise BenchError("no input file")
                run([args.node, ORT_BENCH, orig, *feeds, "--runs", "1", "--warmup", "0", "--save-optimized", opt],
                    f"ONNX Runtime optimize {name}")
                ops = collections.Counter(f"{n.op_type}" for n in onnx.load(opt).graph.node
                                          if n.domain == "com.microsoft" or
                                          (n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx")))
                outs = {}
                for tag, path in (("orig", orig), ("opt", opt)):
                    kfile = path[:-5] + ".kiln"
                    run([kiln, "compile", "--model", path, "--output", kfile], f"kiln compile {name} {tag}")
                    od = path[:-5] + "_kiln_out"
                    run([kiln, "run", kfile, *feeds, "--output-dir", od], f"kiln run {name} {tag}")
                    outs[tag] = np.load(os.path.join(od, "output_0.npy")).astype(np.float64)
                od = opt[:-5] + "_ort_out"
                run([args.node, ORT_BENCH, opt, *feeds, "--runs", "1", "--warmup", "0", "--output-dir", od],
                    f"ONNX Runtime run {name}")
                ort = np.load(os.path.join(od, "output_0.npy")).astype(np.float64)
            except BenchError as e:
                print(f"{name:28s} FAILED: {e}")
                bad += 1
                continue
            top = max(float(np.abs(ort).max()), 1e-30)
            k = float(np.abs(outs["opt"] - outs["orig"]).max()) / top
            o = float(np.abs(outs["opt"] - ort).max()) / top
            bad += not k <= 1e-5
            print(f"{name:28s} {k:22.3g} {o:20.3g}  {dict(sorted(ops.items()))}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
