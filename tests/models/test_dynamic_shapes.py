#!/usr/bin/python3
"""One .kiln of a vision model exported with dynamic batch, height and width runs at many shapes.

  /usr/bin/python3 tests/models/test_dynamic_shapes.py --kiln build/kiln --work DIR

Exports two PyTorch models (random weights, fixed seed) with dynamic_axes {0: batch, 2: height,
3: width}: torchvision's ResNet-18 and a small FPN-style encoder-decoder (strided convolutions,
BatchNorm, max pooling, nearest 2x upsampling, skip additions, a concatenation and a 1x1 head,
as text detectors are built). Each is compiled once with `kiln compile` and no --input-shape;
`kiln inspect --json` must report the input dims as symbols (kind "symbolic"). Then `kiln run`
runs it at five or more input shapes, sizes not divisible by 32 included, and every output is
compared with PyTorch's at that shape (|out - expected| <= atol + rtol * |expected|).
Prints one PASS/FAIL line per model; exits 0 on pass, 1 on failure.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torchvision_models import TestError, compare, run  # noqa: E402


def fpn_model():
    import torch
    from torch import nn
    import torch.nn.functional as F

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class Fpn(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = block(3, 8, 2)
            self.c2 = block(8, 16, 2)
            self.c3 = block(16, 32, 2)
            self.l3 = nn.Conv2d(32, 16, 1)
            self.l2 = nn.Conv2d(16, 16, 1)
            self.head = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            s = F.max_pool2d(self.stem(x), 3, 1, 1)
            c2 = self.c2(s)
            c3 = self.c3(c2)
            p3 = self.l3(c3)
            p2 = self.l2(c2) + F.interpolate(p3, scale_factor=2.0, mode="nearest")
            up = F.interpolate(p3, scale_factor=2.0, mode="nearest")
            return torch.sigmoid(self.head(torch.cat([p2, up], 1)))

    return Fpn()


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None)


# Input shapes (N, 3, H, W): the export shape is the first; divisible by 32 or not.
SHAPES = {
    # (the FPN adds a 1/4 map to a 1/8 map upsampled: H and W multiples of 8)
    "fpn": [(1, 3, 64, 64), (2, 3, 40, 56), (1, 3, 104, 40), (3, 3, 8, 200), (1, 3, 128, 96), (2, 3, 72, 24)],
    "resnet18": [(1, 3, 64, 64), (2, 3, 97, 65), (1, 3, 224, 224), (3, 3, 33, 47), (1, 3, 160, 96)],
}


def test_model(name, make, kiln, work, args):
    import torch

    mdir = os.path.join(work, name)
    os.makedirs(mdir, exist_ok=True)
    torch.manual_seed(args.seed)
    model = make()
    model.eval()
    shapes = SHAPES[name]
    onnx_path = os.path.join(mdir, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(*shapes[0]),), onnx_path, opset_version=args.opset,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"}, "output": {0: "batch"}})
    kiln_file = os.path.join(mdir, "model.kiln")
    run([kiln, "compile", "--model", onnx_path, "--output", kiln_file], f"{name}: kiln compile", args.timeout)
    info = json.loads(run([kiln, "inspect", "--json", kiln_file], f"{name}: kiln inspect", args.timeout, echo=False))
    dims = info["inputs"][0]["dims"]
    kinds = [(d["symbol"], d["kind"]) for d in dims]
    if kinds != [("batch", "symbolic"), ("", "static"), ("height", "symbolic"), ("width", "symbolic")]:
        raise TestError(f"{name}: kiln inspect reports input dims {kinds}, expected batch/height/width symbolic")
    worst = 0.0
    for i, shape in enumerate(shapes):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(args.seed + i))
        with torch.no_grad():
            expected = model(x).numpy()
        x_path = os.path.join(mdir, f"x{i}.npy")
        np.save(x_path, x.numpy())
        out_dir = os.path.join(mdir, f"out{i}")
        run([kiln, "run", kiln_file, "--input", f"input={x_path}", "--output-dir", out_dir],
            f"{name}: kiln run at {shape}", args.timeout, echo=False)
        out = np.load(os.path.join(out_dir, "output_0.npy"))
        if out.shape != expected.shape:
            raise TestError(f"{name} at {shape}: output shape {out.shape}, PyTorch's {expected.shape}")
        ok, msg = compare(out, expected, args.rtol, args.atol)
        worst = max(worst, float(np.abs(out.astype(np.float64) - expected).max()))
        print(f"  {name} {shape}: output {out.shape}, {msg}")
        if not ok:
            raise TestError(f"{name} at {shape}: {msg}")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--model", action="append", choices=["fpn", "resnet18"])
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    work = os.path.abspath(args.work)
    ok = True
    for name in args.model or ["fpn", "resnet18"]:
        try:
            worst = test_model(name, {"fpn": fpn_model, "resnet18": resnet18}[name], kiln, work, args)
            print(f"PASS dynamic {name}: {len(SHAPES[name])} shapes from one .kiln, max |err| {worst:.3g}")
        except TestError as e:
            print(f"FAIL dynamic {name}: {e}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
