#!/usr/bin/env python3
"""Every model the model tests compiled runs on the simulated discrete device
(`kiln run --device sim`) with outputs bit-identical to the CPU's.

The model tests (test_torchvision_models.py, test_lstm.py, test_detection.py,
test_bert.py) leave <work>/<model>/model.kiln and input .npy files; this runs
each on cpu and on sim (with a seeded completion delay, so a missing
synchronise would show) and compares the output files byte for byte. A model
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
            try:
                for dev in ("cpu", a.sim):
                    d = os.path.join(t, dev.split(":")[0])
                    run(a.kiln, kiln_file, inputs, dev, d)
                    outs[dev] = {os.path.basename(f): open(f, "rb").read()
                                 for f in sorted(glob.glob(os.path.join(d, "output_*.npy")))}
            except RuntimeError as e:
                print(f"FAIL {name}: {e}")
                failures += 1
                continue
            cpu, sim = outs["cpu"], outs[a.sim]
            if not cpu or cpu.keys() != sim.keys():
                print(f"FAIL {name}: outputs differ in number: cpu {sorted(cpu)} sim {sorted(sim)}")
                failures += 1
            elif any(cpu[k] != sim[k] for k in cpu):
                bad = [k for k in cpu if cpu[k] != sim[k]]
                print(f"FAIL {name}: {bad} differ between cpu and sim")
                failures += 1
            else:
                print(f"ok   {name}: {len(cpu)} output(s) bit-identical on cpu and {a.sim}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
