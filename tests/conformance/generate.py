#!/usr/bin/python3
"""Generate ONNX backend node test data (models + input/output .pb files).

Uses the generator shipped with the installed onnx package (the code path of
`python -m onnx.backend.test.cmd_tools generate-data`), restricted to node
tests. Output layout: OUT/node/test_*/model.onnx, test_data_set_0/{input,output}_*.pb

Idempotent: OUT/.stamp records the generator version; a matching stamp skips
generation (use --force to regenerate).
"""
import argparse
import os
import shutil
import sys
import time
import warnings

import numpy as np

# The onnx 1.12 cases still use aliases that numpy 1.24 removed.
for _name, _type in (("float", float), ("int", int), ("bool", bool),
                     ("object", object), ("str", str), ("long", int),
                     ("complex", complex), ("unicode", str)):
    if _name not in vars(np):  # don't trigger numpy's deprecation __getattr__
        setattr(np, _name, _type)

import onnx  # noqa: E402

STAMP_FORMAT = 1  # bump when the output of this script changes


def stamp_text():
    return f"kiln-conformance {STAMP_FORMAT} onnx {onnx.__version__} numpy {np.__version__}\n"


def generate(out):
    from onnx.backend.test import cmd_tools
    from onnx.backend.test.case import model as model_cases

    # generate_data also emits "real" model stubs (download URLs); keep node tests only.
    model_cases.collect_testcases = lambda *a, **k: []
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmd_tools.generate_data(argparse.Namespace(output=out, op_type=None))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = ap.parse_args()

    stamp = os.path.join(args.out, ".stamp")
    if not args.force and os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read() == stamp_text():
                print(f"generate.py: {args.out} is up to date ({stamp_text().strip()})")
                return 0

    start = time.monotonic()
    if os.path.exists(stamp):
        os.remove(stamp)
    shutil.rmtree(os.path.join(args.out, "node"), ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    generate(args.out)
    count = len(os.listdir(os.path.join(args.out, "node")))
    with open(stamp, "w") as f:
        f.write(stamp_text())
    print(f"generate.py: {count} node tests in {args.out} ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
