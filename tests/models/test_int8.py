#!/usr/bin/python3
"""Int8 (QDQ) torchvision models: tools/quantize.py's output runs on Kiln's int8 kernels.

  /usr/bin/python3 tests/models/test_int8.py --kiln build/kiln --work DIR [--models resnet18]

For each model: the float32 export with BatchNorm folded (tools/export_torchvision.py
--fuse-bn) is quantized by tools/quantize.py (uint8 activations calibrated on seeded data,
int8 per-channel weights, int32 biases: ONNX Runtime's default QDQ form) and compiled twice:
as it is, where fuse-qdq turns every DequantizeLinear -> Conv -> QuantizeLinear into a
QLinearConv (checked: no float Conv left), and with --disable-pass fuse-qdq, where each op
runs as the graph says (DequantizeLinear, float32 Conv, QuantizeLinear; every one of them
checked against ONNX's reference outputs by the conformance tests). The int32 path must
agree with that op-by-op QDQ semantics within 1% of the output's magnitude (float32 and
exact int32 sums round differently, and a one-step difference in one layer carries on),
and both must keep PyTorch's float32 top-1 class. ONNX Runtime on the same file is
compared in bench/int8_bench.py.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from test_torchvision_models import TestError, run  # noqa: E402

EXPORT = os.path.join(REPO, "tools", "export_torchvision.py")
QUANTIZE = os.path.join(REPO, "tools", "quantize.py")


def count_ops(kiln, path, timeout):
    import json
    j = json.loads(run([kiln, "inspect", path, "--json"], "inspect", timeout, echo=False))
    return j.get("op_counts") or {}


def check(kiln, work, model, timeout):
    d = os.path.join(work, model + "_int8")
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(d, "model.onnx")) or \
            os.path.getmtime(os.path.join(d, "model.onnx")) < os.path.getmtime(EXPORT):
        run([sys.executable, EXPORT, "--model", model, "--out", d, "--fuse-bn"], "export", timeout)
    qdq = os.path.join(d, "qdq.onnx")
    run([sys.executable, QUANTIZE, os.path.join(d, "model.onnx"), qdq, "--kiln", kiln], "quantize", timeout)
    outs = {}
    for tag, extra in (("fused", []), ("plain", ["--disable-pass", "fuse-qdq"])):
        k = os.path.join(d, tag + ".kiln")
        run([kiln, "compile", "--model", qdq, "--output", k] + extra, f"compile {tag}", timeout)
        ops = count_ops(kiln, k, timeout)
        if tag == "fused" and (ops.get("Conv", 0) != 0 or ops.get("QLinearConv", 0) == 0):
            raise TestError(f"{model}: fuse-qdq left float Convs: {ops}")
        if tag == "plain" and ops.get("QLinearConv", 0) != 0:
            raise TestError(f"{model}: --disable-pass fuse-qdq still fused: {ops}")
        od = os.path.join(d, "out_" + tag)
        run([kiln, "run", k, "--input", "input=" + os.path.join(d, "input.npy"), "--output-dir", od],
            f"run {tag}", timeout, echo=False)
        outs[tag] = np.load(os.path.join(od, "output_0.npy")).astype(np.float64)
        print(f"{model} {tag}: {ops}", flush=True)
    ref = np.load(os.path.join(d, "expected.npy")).astype(np.float64)
    diff = float(np.abs(outs["fused"] - outs["plain"]).max())
    bound = 0.01 * float(np.abs(outs["plain"]).max())
    print(f"{model}: int32 path vs op-by-op QDQ max|diff| {diff:.4g} (bound {bound:.4g}); vs float32 PyTorch "
          f"{float(np.abs(outs['fused'] - ref).max()):.4g} (max|ref| {float(np.abs(ref).max()):.4g}); top-1 "
          f"{int(outs['fused'].argmax())} / {int(outs['plain'].argmax())} / PyTorch {int(ref.argmax())}", flush=True)
    fails = []
    if not diff <= bound:
        fails.append(f"{model}: fused vs op-by-op max|diff| {diff:.4g} > {bound:.4g}")
    for tag in outs:
        if int(outs[tag].argmax()) != int(ref.argmax()):
            fails.append(f"{model} {tag}: top-1 {int(outs[tag].argmax())}, PyTorch's {int(ref.argmax())}")
    return fails


def main():
    ap = argparse.ArgumentParser(description="Kiln int8 QDQ models")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    fails = []
    try:
        for m in args.models.split(","):
            fails += check(os.path.abspath(args.kiln), os.path.abspath(args.work), m, args.timeout)
    except (TestError, subprocess.CalledProcessError) as e:
        fails.append(str(e))
    for f in fails:
        print("FAIL " + f)
    print("PASS" if not fails else "FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
