#!/usr/bin/env python3
"""Every model the model tests compiled runs on the simulated discrete device
(`kiln run --device sim`) with outputs bit-identical to the CPU's.

The model tests (test_torchvision_models.py, test_lstm.py, test_detection.py,
test_bert.py) leave <work>/<model>/model.kiln and input .npy files; this runs
each on cpu and on sim (with a seeded completion delay, so a missing
synchronise would show) and compares the output files byte for byte. Then
each model's ONNX file is compiled again for a target that lacks common ops
(--target sim:lack=...): the placement pass puts those nodes on the CPU with
copies around them, and that file, run on the lacking device, must give the
same bytes as well (the same CPU kernels run; only where they run and the
copies differ). A model
directory without a .kiln file fails the test (the model tests must run
first: ctest DEPENDS).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def run(kiln, kiln_file, inputs, device, out_dir):
    cmd = [kiln, "run", kiln_file, "--device", device, "--output-dir", out_dir]
    for spec in inputs:
        cmd += ["--input", spec]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True, help="the model tests' work directory")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--sim", default="sim:seed=7,delay_us=200")
    ap.add_argument("--lack", default="Add+Concat+MaxPool+Transpose+Sigmoid+Gather+Softmax+Mul",
                    help="ops the placement target lacks")
    a = ap.parse_args()
    failures = 0
    for name in a.models:
        mdir = os.path.join(a.work, name)
        kiln_files = sorted(glob.glob(os.path.join(mdir, "*.kiln")))
        if not kiln_files:
            print(f"FAIL {name}: no .kiln in {mdir} (run the model tests first)")
            failures += 1
            continue
        kiln_file = kiln_files[0]
        # Inputs by name (<name>.npy), or input.npy for a single input.
        info = json.loads(subprocess.run([a.kiln, "inspect", "--json", kiln_file], capture_output=True,
                                         text=True, check=True, timeout=120).stdout)
        names = [i["name"] for i in info["inputs"]]
        inputs, missing = [], []
        for i, n in enumerate(names):
            f = os.path.join(mdir, n + ".npy")
            if not os.path.exists(f) and len(names) == 1:
                f = os.path.join(mdir, "input.npy")
            if os.path.exists(f):
                inputs.append(f"{i}={f}")
            else:
                missing.append(n)
        if missing:
            print(f"FAIL {name}: no .npy for input(s) {missing} in {mdir}")
            failures += 1
            continue
        with tempfile.TemporaryDirectory() as t:
            outs = {}
            lacking = f"sim:lack={a.lack},seed=5,delay_us=100"
            placed = os.path.join(t, "placed.kiln")
            onnx_file = os.path.join(mdir, "model.onnx")
            runs = [("cpu", kiln_file, "cpu"), ("sim", kiln_file, a.sim)]
            if os.path.exists(onnx_file):
                runs.append(("placed", placed, lacking))
            try:
                for label, f, dev in runs:
                    if label == "placed":
                        p = subprocess.run([a.kiln, "compile", "--model", onnx_file, "--output", placed,
                                            "--target", f"sim:lack={a.lack}"], capture_output=True, text=True,
                                           timeout=600)
                        if p.returncode != 0:
                            raise RuntimeError(f"compile for sim:lack={a.lack} failed:\n{p.stdout}{p.stderr}")
                    d = os.path.join(t, label)
                    run(a.kiln, f, inputs, dev, d)
                    outs[label] = {os.path.basename(o): open(o, "rb").read()
                                   for o in sorted(glob.glob(os.path.join(d, "output_*.npy")))}
            except RuntimeError as e:
                print(f"FAIL {name}: {e}")
                failures += 1
                continue
            cpu = outs["cpu"]
            for label, _, dev in runs[1:]:
                other = outs[label]
                if not cpu or cpu.keys() != other.keys():
                    print(f"FAIL {name}: outputs differ in number: cpu {sorted(cpu)} {dev} {sorted(other)}")
                    failures += 1
                elif any(cpu[k] != other[k] for k in cpu):
                    bad = [k for k in cpu if cpu[k] != other[k]]
                    print(f"FAIL {name}: {bad} differ between cpu and {dev}" +
                          (" (file compiled with CPU placement)" if label == "placed" else ""))
                    failures += 1
                else:
                    print(f"ok   {name}: {len(cpu)} output(s) bit-identical on cpu and {dev}" +
                          (" (compiled for it: lacking ops placed on the CPU)" if label == "placed" else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
