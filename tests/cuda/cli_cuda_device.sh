#!/bin/sh
# `kiln run --device cuda`: where there is no usable GPU it exits 1 with the
# CUDA driver's reason; where there is one, a model compiled for the cuda
# target runs and its output matches the hand-derived sum.
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
    [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])], "g",
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
# A GPU: compile for it (every node is placed on the CPU until the CUDA
# kernels exist) and check the result: relu(a + b).
"$KILN" compile --model add.onnx --output cuda.kiln --target cuda || { echo "FAIL: compile --target cuda"; exit 1; }
out=$("$KILN" run cuda.kiln --device cuda --input a=a.npy --input b=b.npy --output-dir out 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ] && echo "$out" | grep -q "has no kernel for kiln.Memcpy"; then
  # Known gap (issue 11): the copies placement puts around CPU nodes need
  # CUDA kernels, which do not exist yet. Reported as skipped, not passed.
  echo "SKIP: the CUDA copy kernels do not exist yet"
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: run"; exit 1; }
"$PY" -c "
import numpy as np, sys
c = np.load('out/output_0.npy')
want = np.array([[11, 0, 33], [44, 0, 66]], np.float32)
sys.exit(0 if c.shape == want.shape and (c == want).all() else 'FAIL: got %r' % (c,))
" || exit 1
echo "OK: ran on the GPU device"
