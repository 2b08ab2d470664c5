#!/usr/bin/python3
"""Float16 and bfloat16 torchvision models vs a float64 PyTorch reference.

  /usr/bin/python3 tests/models/test_half.py --kiln build/kiln --work DIR [--models resnet18,...]
                                            [--dtypes float16,bfloat16]

For each model: the float32 export (tools/export_torchvision.py, shared with
test_torchvision_models.py) is converted to the half type with
tools/convert_half.py (every weight, input and output in that type), compiled
and run with `kiln run` on the input rounded to the half type.

The reference is independent of Kiln: PyTorch rebuilds the same model (same
seeds; checked against the export's expected.npy), rounds every parameter and
buffer to the half type as the converted file holds them, and runs in float64
on the rounded input. Accuracy rule of issue 15, per element:
|kiln - ref| <= 1e-3 * max|ref| + u * |ref|, u the half type's rounding of the
output (2^-11 float16, 2^-8 bfloat16), which any engine returning that type
incurs.

Also checked: the compiled graph computes in float32 with conversions only at
its edges (as many nodes as the float32 compile plus one Cast per half input
and output), and inspect reports the half types at the inputs and outputs.
"""
import argparse
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))
from test_torchvision_models import TestError, check_inspect, ensure_export, run  # noqa: E402
import convert_half  # noqa: E402

ROUNDING = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def torch_reference(model_name, seed, x, dtype):
    """float64 output of the model with weights and input rounded to `dtype`;
    also the float32 output (to check the rebuild matches the export)."""
    import torch
    import export_torchvision as ex
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = ex.build_model(model_name)
    ex.randomize_batchnorm(model, torch.Generator().manual_seed(seed + 1))
    model.eval()
    with torch.no_grad():
        y32 = model(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        tdt = torch.float16 if dtype == "float16" else torch.bfloat16
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(tdt).to(torch.float32))
        model.double()
        xr = torch.from_numpy(convert_half.round_half(x, dtype)).double()
        y64 = model(xr).numpy()
    return y32, y64


def half_npy(a, dtype):
    """What `kiln run` reads for a half input: float16, or bfloat16's raw bits as uint16."""
    return a.astype(np.float16) if dtype == "float16" else convert_half.to_bf16_bits(a)


def from_half_npy(a, dtype):
    if dtype == "float16":
        if a.dtype != np.float16:
            raise TestError(f"output dtype {a.dtype}, expected float16")
        return a.astype(np.float64)
    if a.dtype != np.uint16:
        raise TestError(f"output dtype {a.dtype}, expected bfloat16 bits (uint16)")
    return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def check_one(kiln, work, model_name, dtypes, timeout):
    mdir = os.path.join(work, model_name)
    os.makedirs(mdir, exist_ok=True)
    ensure_export(model_name, mdir, 13, 0, timeout)
    x = np.load(os.path.join(mdir, "input.npy"))
    expected = np.load(os.path.join(mdir, "expected.npy"))
    f32_kiln = os.path.join(mdir, "half_ref_f32.kiln")
    run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", f32_kiln], "compile float32",
        timeout, echo=False)
    n32 = check_inspect(kiln, f32_kiln, [("input", "float32", x.shape)], [("output", "float32", expected.shape)],
                        timeout)["num_nodes"]
    src = onnx.load(os.path.join(mdir, "model.onnx"))
    failures = []
    for dtype in dtypes:
        y32, ref = torch_reference(model_name, 0, x, dtype)
        if not np.allclose(y32, expected, rtol=1e-4, atol=1e-5):
            raise TestError(f"{model_name}: the rebuilt PyTorch model does not match the export's expected.npy "
                            f"(max diff {np.abs(y32 - expected).max():.3g}); the reference would be meaningless")
        hdir = os.path.join(mdir, dtype)
        os.makedirs(hdir, exist_ok=True)
        onnx_path, kiln_path = os.path.join(hdir, "model.onnx"), os.path.join(hdir, "model.kiln")
        onnx.save(convert_half.convert(src, dtype), onnx_path)
        np.save(os.path.join(hdir, "input.npy"), half_npy(x, dtype))
        for f in (kiln_path, os.path.join(hdir, "output_0.npy")):
            if os.path.exists(f):
                os.remove(f)
        run([kiln, "compile", "--model", onnx_path, "--output", kiln_path], f"compile {dtype}", timeout)
        j = check_inspect(kiln, kiln_path, [("input", dtype, x.shape)], [("output", dtype, expected.shape)], timeout)
        if j["num_nodes"] != n32 + 2:
            failures.append(f"{model_name} {dtype}: {j['num_nodes']} nodes, expected the float32 compile's {n32} "
                            f"plus 2 Casts at the edges (op counts {j.get('op_counts')})")
        run([kiln, "run", kiln_path, "--input", "input=" + os.path.join(hdir, "input.npy"), "--output-dir", hdir],
            f"run {dtype}", timeout)
        got = from_half_npy(np.load(os.path.join(hdir, "output_0.npy")), dtype)
        if got.shape != ref.shape:
            raise TestError(f"{model_name} {dtype}: output shape {got.shape}, expected {ref.shape}")
        err = np.abs(got - ref)
        bound = 1e-3 * np.abs(ref).max() + ROUNDING[dtype] * np.abs(ref)
        bad = ~(err <= bound)
        worst = float((err / bound).max())
        print(f"{model_name} {dtype}: max|err| {err.max():.3g}, max|ref| {np.abs(ref).max():.3g}, "
              f"worst err/bound {worst:.3f}, {int(bad.sum())} of {ref.size} outside", flush=True)
        if bad.any():
            failures.append(f"{model_name} {dtype}: {int(bad.sum())} elements outside the bound (worst err/bound "
                            f"{worst:.3f})")
    return failures


def main():
    ap = argparse.ArgumentParser(description="Kiln float16/bfloat16 models vs a float64 PyTorch reference")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    failures = []
    try:
        for m in args.models.split(","):
            failures += check_one(kiln, os.path.abspath(args.work), m, args.dtypes.split(","), args.timeout)
    except TestError as e:
        failures.append(str(e))
    for f in failures:
        print("FAIL " + f)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
