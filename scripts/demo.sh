#!/usr/bin/env bash
# Kiln end to end on the built-in sample: build the ONNX model, compile it to
# .kiln, inspect it, run it (checking against an independent NumPy
# reference), and time it.
set -euo pipefail
BUILD="${1:-build}"
KILN="$BUILD/kiln"
OUT="$BUILD/demo"
mkdir -p "$OUT"
echo "== 1. sample model (small residual CNN, seeded random weights)"
/usr/bin/python3 examples/sample/make_sample.py "$OUT"
echo "== 2. kiln compile"
"$KILN" compile --model "$OUT/sample.onnx" --output "$OUT/sample.kiln" -v
echo "== 3. kiln inspect"
"$KILN" inspect "$OUT/sample.kiln"
echo "== 4. kiln run"
"$KILN" run "$OUT/sample.kiln" --input x="$OUT/input.npy" --output-dir "$OUT/out"
/usr/bin/python3 - "$OUT" <<'PY'
import sys, numpy as np
d = sys.argv[1]
got, want = np.load(f"{d}/out/output_0.npy"), np.load(f"{d}/expected.npy")
err = float(np.abs(got - want).max())
print(f"probabilities: {np.array2string(got[0], precision=4)}")
print(f"max |kiln - numpy reference| = {err:.2e}  ->  {'OK' if np.allclose(got, want, rtol=1e-3, atol=1e-5) else 'MISMATCH'}")
sys.exit(0 if np.allclose(got, want, rtol=1e-3, atol=1e-5) else 1)
PY
echo "== 5. kiln bench"
"$KILN" bench "$OUT/sample.kiln" --input x="$OUT/input.npy" --runs 200 --warmup 20
