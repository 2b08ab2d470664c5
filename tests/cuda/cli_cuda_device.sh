#!/bin/sh
# `kiln run --device cuda`: where there is no usable GPU it exits 1 with the
# CUDA driver's reason; where there is one, a model compiled for the cuda
# target (Add and Relu on the GPU, Softmax placed on the CPU with copies
# around it) runs and matches NumPy's softmax(relu(a + b)).
#   cli_cuda_device.sh KILN WORKDIR [PYTHON]
set -u
KILN=$1
WORK=$2
PY=${3:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
"$PY" - <<'PYEOF' || exit 1
import numpy as np
from onnx import helper, TensorProto, save
g = helper.make_graph(
    [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
     helper.make_node("Softmax", ["r"], ["c"], axis=-1)], "g",
    [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "add.onnx")
np.save("a.npy", np.array([[1, -2, 3], [4, -50, 6]], np.float32))
np.save("b.npy", np.array([[10, 1, 30], [40, 5, 60]], np.float32))
PYEOF
"$KILN" compile --model add.onnx --output add.kiln >/dev/null || { echo "compile failed"; exit 1; }
out=$("$KILN" run add.kiln --device cuda --input a=a.npy --input b=b.npy --output-dir out 2>&1)
rc=$?
echo "$out"
if echo "$out" | grep -q "device 'cuda' is unavailable"; then
  [ "$rc" -eq 1 ] || { echo "FAIL: expected exit status 1, got $rc"; exit 1; }
  echo "$out" | grep -q "cudaError" || { echo "FAIL: the message does not carry CUDA's error"; exit 1; }
  echo "OK: no usable GPU; refused with the driver's reason, exit status 1"
  exit 0
fi
# A GPU: compile for it and check the placement, then the result.
"$KILN" compile --model add.onnx --output cuda.kiln --target cuda || { echo "FAIL: compile --target cuda"; exit 1; }
"$KILN" inspect cuda.kiln | tee inspect.txt
grep -q "cpu   Softmax" inspect.txt || { echo "FAIL: Softmax should be placed on the CPU"; exit 1; }
if grep -q "cpu   Add\|cpu   Relu" inspect.txt; then echo "FAIL: Add and Relu have CUDA kernels"; exit 1; fi
out=$("$KILN" run cuda.kiln --device cuda --input a=a.npy --input b=b.npy --output-dir out 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: run"; exit 1; }
"$PY" -c "
import numpy as np, sys
c = np.load('out/output_0.npy')
r = np.maximum(np.load('a.npy').astype(np.float64) + np.load('b.npy'), 0)
want = np.exp(r - r.max(-1, keepdims=True))
want /= want.sum(-1, keepdims=True)
sys.exit(0 if c.shape == want.shape and np.allclose(c, want, rtol=1e-5, atol=1e-7) else 'FAIL: got %r, want %r' % (c, want))
" || exit 1
echo "OK: ran on the GPU device"
