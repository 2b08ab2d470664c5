#!/usr/bin/python3
"""Plan cost of a new signature when most of a model is static (issue 13: "static parts of a
partly dynamic model keep their compile-time kernels").

  /usr/bin/python3 bench/static_part_bench.py --onnx MODEL.onnx --input IMAGE.npy --work DIR
      [--python build/python] [--sizes 1,2,3,4,5,6] [--width 512]

MODEL.onnx is a static image classifier (the suite's resnet18, from bench/suite_export.py);
the script adds a second input x [N, WIDTH] (N symbolic) added to the output of the model's
last Flatten/Reshape (its pooled features), so the whole backbone keeps its shapes and only that
Add varies with N. It compiles the result, then runs it at each N in --sizes (each a new plan)
and prints, per N, the first run's time and PlanStats: the plan's time, its executor's time,
and the static part's kernels made and shared. --python selects the build whose `kiln` package
is measured (to compare two builds, run the script once with each).
"""
import argparse
import os
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--input", required=True, help="the image, .npy")
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=os.path.join(os.path.dirname(__file__), "..", "build", "python"))
    ap.add_argument("--sizes", default="1,2,3,4,5,6")
    ap.add_argument("--width", type=int, default=512)
    a = ap.parse_args()
    sys.path.insert(0, a.python)
    import kiln
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(a.onnx)
    g = m.graph
    flat = [n for n in g.node if n.op_type in ("Flatten", "Reshape")]
    if not flat:
        sys.exit("no Flatten or Reshape in the model: nothing to attach the symbolic input to")
    feat = flat[-1].output[0]
    g.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", a.width]))
    g.node.append(helper.make_node("Add", ["x", feat], ["xf"]))
    g.output.append(helper.make_tensor_value_info("xf", TensorProto.FLOAT, ["N", a.width]))
    os.makedirs(a.work, exist_ok=True)
    onnx_path = os.path.join(a.work, "static_part.onnx")
    kiln_path = os.path.join(a.work, "static_part.kiln")
    onnx.save(m, onnx_path)
    kiln.compile(onnx_path, kiln_path)
    model = kiln.load(kiln_path)
    img = np.load(a.input)
    name0 = model.inputs[0].name
    for n in (int(v) for v in a.sizes.split(",")):
        t = time.perf_counter()
        model.run({name0: img, "x": np.zeros((n, a.width), np.float32)})
        dt = (time.perf_counter() - t) * 1e3
        s = model.plan_stats()
        extra = ""
        if "static_kernels_made" in s:
            extra = f" static kernels made {s['static_kernels_made']} shared {s['static_kernels_shared']}"
        print(f"N={n} first run {dt:.2f} ms plan {s['last_plan_us'] / 1e3:.2f} ms "
              f"executor {s['last_executor_us'] / 1e3:.2f} ms{extra}")


if __name__ == "__main__":
    main()
