#!/usr/bin/python3
"""Export a randomly initialised torchvision model to ONNX, with a reference I/O pair.

Writes DIR/model.onnx, DIR/input.npy (seeded random float32, 1x3x224x224) and
DIR/expected.npy (PyTorch's float32 output on that input). Runs fully offline:
weights are random (weights=None), never downloaded.

Every BatchNorm gets randomised running stats and affine params before export so
that BN folding in the compiler is really exercised (fresh BN is an identity-ish op).
torch's exporter would itself fuse Conv+BN in TrainingMode.EVAL, so by default we
export with TrainingMode.PRESERVE (model in eval mode => inference-mode graph) which
keeps BatchNormalization nodes in the ONNX; pass --fuse-bn to let torch fuse them.

Usage: /usr/bin/python3 tools/export_torchvision.py --model resnet18 --out DIR
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

try:
    import torch
    import torchvision
except ImportError as e:  # pragma: no cover
    sys.exit(f"error: {e}; run this with Debian's /usr/bin/python3 (has torch/torchvision)")


class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation model's "out" map alone (its forward returns a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def build_model(name):
    models = torchvision.models
    if name.startswith("segmentation."):  # e.g. segmentation.lraspp_mobilenet_v3_large
        ctor = getattr(models.segmentation, name.split(".", 1)[1], None)
        if ctor is None or not callable(ctor):
            known = sorted(n for n in dir(models.segmentation) if n[:1].islower() and "_" in n)
            sys.exit(f"error: unknown torchvision segmentation model {name!r}; known: {', '.join(known)}")
        return SegmentationOut(ctor(weights=None, weights_backbone=None))
    def is_model(n):
        return (n[:1].islower() and not n.startswith(("get_", "list_"))
                and callable(getattr(models, n, None)))
    ctor = getattr(models, name, None) if is_model(name) else None
    if ctor is None:
        known = sorted(n for n in dir(models) if is_model(n))
        sys.exit(f"error: unknown torchvision model {name!r}; known: {', '.join(known)}")
    kwargs = {"weights": None}
    # Inception/GoogLeNet: no aux heads (eval ignores them anyway; keeps the graph lean).
    if name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=True)
    try:
        return ctor(**kwargs)
    except TypeError:
        return ctor(pretrained=False)  # very old torchvision


def randomize_batchnorm(model, gen):
    n = 0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                if m.running_mean is not None:
                    m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                    m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)  # U(0.5, 1.5)
                if m.affine:
                    m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)  # U(0.75, 1.25)
                    m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True,
                    help="torchvision.models name, e.g. resnet18, or segmentation.NAME (e.g. "
                         "segmentation.deeplabv3_mobilenet_v3_large: its 'out' map)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fuse-bn", action="store_true",
                    help="let torch fold BatchNorm into Conv at export (default: keep BN nodes)")
    args = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    model = build_model(args.model)
    gen = torch.Generator().manual_seed(args.seed + 1)
    n_bn = randomize_batchnorm(model, gen)
    model.eval()

    x = np.random.default_rng(args.seed).standard_normal((1, 3, 224, 224)).astype(np.float32)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        y = model(xt)
    if isinstance(y, (tuple, list)):
        y = y[0]
    elif not torch.is_tensor(y):  # e.g. InceptionOutputs / dict
        y = y.logits if hasattr(y, "logits") else y["out"]
    y = y.detach().numpy().astype(np.float32)

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, "model.onnx")
    mode = torch.onnx.TrainingMode.EVAL if args.fuse_bn else torch.onnx.TrainingMode.PRESERVE
    with torch.no_grad(), warnings.catch_warnings():
        # PRESERVE + constant folding warns about training-mode exports; we are in eval mode.
        warnings.filterwarnings("ignore", message="It is recommended that constant folding")
        torch.onnx.export(model, xt, onnx_path, opset_version=args.opset, training=mode,
                          input_names=["input"], output_names=["output"],
                          do_constant_folding=True, dynamic_axes=None)
    np.save(os.path.join(args.out, "input.npy"), x)
    np.save(os.path.join(args.out, "expected.npy"), y)

    dt = time.time() - t0
    size_mb = os.path.getsize(onnx_path) / 1e6
    bn_note = ("fused into Conv by torch" if args.fuse_bn else "kept as BatchNormalization") if n_bn else "no BatchNorm"
    print(f"exported {args.model} (opset {args.opset}, seed {args.seed}, {n_bn} BatchNorms randomised, "
          f"{bn_note}) in {dt:.1f}s:")
    print(f"  {onnx_path} ({size_mb:.1f} MB)")
    print(f"  {os.path.join(args.out, 'input.npy')} {x.shape} float32")
    print(f"  {os.path.join(args.out, 'expected.npy')} {y.shape} float32")


if __name__ == "__main__":
    main()
