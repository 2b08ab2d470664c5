#!/usr/bin/python3
"""A vision model as TensorFlow converters write it (NHWC input, activations kept NHWC,
each Conv/BatchNorm/pooling between a Transpose to NCHW and one back) -> kiln vs PyTorch.

  /usr/bin/python3 tests/models/test_nhwc.py --kiln build/kiln --work DIR --model nhwc_resnet18

The model is exported by bench/suite_export.py (the benchmark suite's NHWC variants:
nhwc_resnet18, nhwc_mobilenet_v3_large, nhwc_efficientnet_b0), compiled with `kiln compile`
and run with `kiln run`. Passes when
  * the compiled graph holds no more Transposes than the source (`kiln inspect --json`'s
    op_counts against the ONNX graph's nodes): the layout pass absorbs what the model brings
    instead of adding conversions, and
  * the output matches PyTorch's (|out - expected| <= atol + rtol |expected|, atol relative to
    max |expected|).
Prints one PASS/FAIL line; exits 0 on pass, 1 on failure.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torchvision_models import TestError, compare, run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = os.path.join(REPO, "bench", "suite_export.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", default="nhwc_resnet18",
                    choices=["nhwc_resnet18", "nhwc_mobilenet_v3_large", "nhwc_efficientnet_b0"])
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4, help="relative to max |expected|")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    mdir = os.path.abspath(os.path.join(args.work, args.model))
    try:
        run([sys.executable, EXPORT, "--model", args.model, "--out", mdir], "export", args.timeout)
        with open(os.path.join(mdir, "meta.json")) as f:
            meta = json.load(f)
        onnx_file, kfile = os.path.join(mdir, "model.onnx"), os.path.join(mdir, "model.kiln")
        run([args.kiln, "compile", "--model", onnx_file, "--output", kfile], "kiln compile", args.timeout)
        import onnx
        src = sum(n.op_type == "Transpose" for n in onnx.load(onnx_file).graph.node)
        p = subprocess.run([args.kiln, "inspect", kfile, "--json"], stdout=subprocess.PIPE, text=True,
                           timeout=args.timeout)
        if p.returncode != 0:
            raise TestError(f"kiln inspect failed (exit {p.returncode})")
        compiled = int(json.loads(p.stdout).get("op_counts", {}).get("Transpose", 0))
        if src == 0:
            raise TestError("the export holds no Transpose: the test would not cover what it claims")
        out_dir = os.path.join(mdir, "kiln_out")
        os.makedirs(out_dir, exist_ok=True)
        given = [x for i, f in enumerate(meta["inputs"]) for x in ("--input", f"{i}={os.path.join(mdir, f)}")]
        run([args.kiln, "run", kfile, "--output-dir", out_dir] + given, "kiln run", args.timeout)
        expected = np.load(os.path.join(mdir, meta["outputs"][0]))
        got = np.load(os.path.join(out_dir, "output_0.npy"))
        ok, msg = compare(got, expected, args.rtol, args.atol * float(np.max(np.abs(expected))))
        verdict = ok and compiled <= src
        print(f"{'PASS' if verdict else 'FAIL'} {args.model}: Transposes source {src}, compiled {compiled}; "
              f"output vs PyTorch: {msg}")
        return 0 if verdict else 1
    except TestError as e:
        print(f"FAIL {args.model}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
