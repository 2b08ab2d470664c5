"""Kiln from Python: compile an ONNX model with external weights, load it,
run it, look at it. Usage: quickstart.py MODEL.onnx OUT_DIR
(docs/python.md; the `python_quickstart` test runs it on a small CNN)."""
import os
import sys

import numpy as np

import kiln

model, out_dir = sys.argv[1], sys.argv[2]
summary = kiln.compile(model, os.path.join(out_dir, "model.kiln"), external_weight=2)
print(f"compiled: {summary.num_nodes} nodes, {len(summary.external_weights)} external weights in "
      f"{summary.weight_dir}")

m = kiln.load(os.path.join(out_dir, "model.kiln"), threads=2)
print("inputs:", m.inputs)
print("outputs:", m.outputs)
feeds = {t.name: np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype) for t in m.inputs}
result = m.run(feeds)
for name, y in result.items():
    print(f"{name}: {y.dtype}{list(y.shape)} mean {float(y.mean()):.6f}")

# Reusing output buffers: Kiln writes straight into them.
outs = {t.name: np.empty(t.shape, t.dtype) for t in m.outputs}
again = m.run(feeds, outputs=outs)
assert all(again[k] is outs[k] for k in outs)
try:
    kiln.load(os.path.join(out_dir, "missing.kiln"))
except kiln.NotFound as e:
    print("error as expected:", e)
