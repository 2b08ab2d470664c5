#!/bin/sh
# The Python package as a user installs it: a virtual environment that sees
# Debian's python3-* packages, `pip install --no-build-isolation .` from the
# source tree (nothing downloaded; the CMake build in KILN_BUILD_DIR is
# reused), then `import kiln` from elsewhere compiles and runs a model.
# Usage: test_pip_install.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
KILN_BUILD_DIR=$build PIP_NO_INDEX=1 "$work/venv/bin/pip" install -q --no-build-isolation --no-deps "$src" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import kiln
assert "venv" in kiln.__file__, kiln.__file__
w = np.arange(6, dtype=np.float32).reshape(2, 3)
g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "mul",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [numpy_helper.from_array(w, "w")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "mul.onnx")
kiln.compile("mul.onnx", "out/mul.kiln", external_weight=1)
y = kiln.load("out/mul.kiln").run({"x": np.full((2, 3), 2, np.float32)})["y"]
np.testing.assert_array_equal(y, 2 * w)
print("PIP-INSTALL-OK", kiln.__version__, os.path.dirname(kiln.__file__))
PY
