#!/bin/sh
# `kiln compile --target cuda` works on any machine (the module describes
# the target without a GPU): a model of Add, Round, Relu and Softmax places
# Round (no CUDA kernel) on the CPU with copies around it, the rest on the
# GPU. `kiln run --device cuda` then exits 1 with the CUDA driver's reason
# where there is no usable GPU; where there is one, it runs and matches
# NumPy's softmax(relu(round(a + b))).
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
    [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Round", ["s"], ["t"]),
     helper.make_node("Relu", ["t"], ["r"]), helper.make_node("Softmax", ["r"], ["c"], axis=-1)], "g",
    [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "m.onnx")
np.save("a.npy", np.array([[1, -2, 3], [4, -50, 6]], np.float32))
np.save("b.npy", np.array([[10.4, 1, 30], [40, 5.6, 60]], np.float32))
PYEOF
"$KILN" compile --model m.onnx --output cuda.kiln --target cuda >/dev/null || { echo "FAIL: compile --target cuda"; exit 1; }
"$KILN" inspect cuda.kiln > inspect.txt || { echo "FAIL: inspect"; exit 1; }
cat inspect.txt
grep -q "compiled for cuda" inspect.txt || { echo "FAIL: not compiled for cuda"; exit 1; }
grep -q "cpu   Round" inspect.txt || { echo "FAIL: Round (no CUDA kernel) should be placed on the CPU"; exit 1; }
grep -q "2 copies inserted" inspect.txt || { echo "FAIL: expected a copy to and from the host around Round"; exit 1; }
if grep -q "cpu   Add\|cpu   Relu\|cpu   Softmax" inspect.txt; then echo "FAIL: Add, Relu and Softmax have CUDA kernels"; exit 1; fi
out=$("$KILN" run cuda.kiln --device cuda --input a=a.npy --input b=b.npy --output-dir out 2>&1)
rc=$?
echo "$out"
if echo "$out" | grep -q "device 'cuda' is unavailable"; then
  [ "$rc" -eq 1 ] || { echo "FAIL: expected exit status 1, got $rc"; exit 1; }
  echo "$out" | grep -q "cudaError" || { echo "FAIL: the message does not carry CUDA's error"; exit 1; }
  echo "OK: compiled for cuda here; no usable GPU, so run refused with the driver's reason, exit status 1"
  exit 0
fi
[ "$rc" -eq 0 ] || { echo "FAIL: run"; exit 1; }
"$PY" -c "
import numpy as np, sys
c = np.load('out/output_0.npy')
r = np.maximum(np.round(np.load('a.npy').astype(np.float64) + np.load('b.npy')), 0)
want = np.exp(r - r.max(-1, keepdims=True))
want /= want.sum(-1, keepdims=True)
sys.exit(0 if c.shape == want.shape and np.allclose(c, want, rtol=1e-5, atol=1e-7) else 'FAIL: got %r, want %r' % (c, want))
" || exit 1
echo "OK: ran on the GPU device"
