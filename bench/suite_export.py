#!/usr/bin/python3
"""Exports the benchmark suite's models that torchvision does not give as they are.

  /usr/bin/python3 bench/suite_export.py --model NAME --out DIR [--seed 0]

Writes DIR/model.onnx, DIR/in_<i>.npy (seeded inputs, in the model's input order),
DIR/ref_<j>.npy (PyTorch's float32 outputs on those inputs) and DIR/meta.json
({"inputs": [...], "outputs": [...], "description": ...}). Random weights (seeded), BatchNorm
statistics and LayerNorm affine parameters randomised off their defaults; offline.

Models (SUITE below):
  bert_base      BERT-base encoder: vocab 30522, hidden 768, 12 layers, 12 heads, FFN 3072;
                 batch 1, seq 128 (token ids + attention mask with padding)
  bert_small     small BERT-style encoder: hidden 256, 4 layers, 4 heads; batch 2, seq 32
  gpt2           GPT-2-style decoder stack: vocab 50257, hidden 768, 12 pre-norm layers,
                 12 heads, causal mask, tanh GELU; batch 1, seq 128, final LayerNorm
                 (hidden states out, no LM head)
  db_fpn         DB-style text detector: ResNet-18 trunk, FPN (lateral 1x1, nearest
                 upsampling + add, 3x3 smoothing), levels upsampled to 1/4 and concatenated,
                 head conv-BN-ReLU then two stride-2 ConvTransposes and a Sigmoid; 1x3x640x640
  unet           U-Net-style encoder-decoder: 4 levels of double conv3x3-BN-ReLU with MaxPool
                 (16..256 channels), ConvTranspose 2x2 upsampling, skip Concats; 1x3x1024x1024
  nhwc_<m>       torchvision model <m> (resnet18, mobilenet_v3_large, efficientnet_b0) as
                 TensorFlow converters write it: NHWC input [1,224,224,3], activations kept
                 NHWC, each layout-sensitive op (Conv, BatchNorm, pooling) between a Transpose
                 to NCHW and one back
  matmul1024     Y = X @ W, X [1024,1024] input, W [1024,1024] constant
  mlp_b1/mlp_b64 Linear(1024,4096)-ReLU-Linear(4096,4096)-ReLU-Linear(4096,1000) at batch 1 / 64
"""
import argparse
import json
import math
import os
import sys
import types
import warnings

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    sys.exit(f"error: {e}; run this with Debian's /usr/bin/python3 (has torch/torchvision)")


def randomize_norms(model, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)


# ---- encoders -----------------------------------------------------------------------------

def bert(cfg, seed):
    sys.path.insert(0, os.path.join(REPO, "tests", "models"))
    import test_bert  # the model tests' encoder, at the width asked for
    a = types.SimpleNamespace(seed=seed, vocab=cfg["vocab"], hidden=cfg["hidden"], layers=cfg["layers"],
                              heads=cfg["heads"], seq=cfg["seq"], max_pos=max(512, cfg["seq"]))
    model = test_bert.build_model(a)
    ids, mask = test_bert.make_inputs(a, cfg["batch"], cfg["seq"], seed)
    return model, [("input_ids", ids), ("attention_mask", mask)], ["last_hidden_state", "pooler_output"]


class GPTBlock(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.out = nn.Linear(4 * hidden, hidden)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool))[None, None])

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, self.hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(~self.causal[:, :, :s, :s], float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, s, h)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(GPTBlock(hidden, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1])[None])
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x)


def gpt2(seed):
    model = GPT(50257, 768, 12, 12, 128)
    ids = np.random.default_rng(seed).integers(0, 50257, size=(1, 128), dtype=np.int64)
    return model, [("input_ids", ids)], ["hidden_states"]


# ---- vision -------------------------------------------------------------------------------

def conv_bn_relu(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DBNet(nn.Module):
    def __init__(self):
        super().__init__()
        import torchvision
        r = torchvision.models.resnet18(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.stages = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        self.lateral = nn.ModuleList(nn.Conv2d(c, 128, 1) for c in (64, 128, 256, 512))
        self.smooth = nn.ModuleList(nn.Conv2d(128, 32, 3, padding=1) for _ in range(4))
        self.head = nn.Sequential(conv_bn_relu(128, 32),
                                  nn.ConvTranspose2d(32, 32, 2, 2), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                                  nn.ConvTranspose2d(32, 1, 2, 2), nn.Sigmoid())

    def forward(self, x):
        x = self.stem(x)
        feats = []
        for st in self.stages:
            x = st(x)
            feats.append(x)
        lat = [l(f) for l, f in zip(self.lateral, feats)]
        for i in range(3, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], scale_factor=2.0, mode="nearest")
        outs = [s(l) for s, l in zip(self.smooth, lat)]
        outs = [outs[0]] + [F.interpolate(o, scale_factor=float(2 ** i), mode="nearest")
                            for i, o in enumerate(outs[1:], 1)]
        return self.head(torch.cat(outs, dim=1))


class UNet(nn.Module):
    def __init__(self, chans=(16, 32, 64, 128, 256)):
        super().__init__()
        def double(ci, co):
            return nn.Sequential(conv_bn_relu(ci, co), conv_bn_relu(co, co))
        self.down = nn.ModuleList()
        ci = 3
        for c in chans:
            self.down.append(double(ci, c))
            ci = c
        self.up = nn.ModuleList(nn.ConvTranspose2d(c, c // 2, 2, 2) for c in chans[:0:-1])
        self.dec = nn.ModuleList(double(c, c // 2) for c in chans[:0:-1])
        self.final = nn.Conv2d(chans[0], 2, 1)

    def forward(self, x):
        skips = []
        for i, blk in enumerate(self.down):
            x = blk(x)
            if i + 1 < len(self.down):
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, dec in zip(self.up, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.final(x)


class NHWC(nn.Module):
    """A layout-sensitive module run on NHWC activations, as TF converters write it."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


def to_nhwc(module):
    layout = (nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)
    for name, child in list(module.named_children()):
        if isinstance(child, layout):
            setattr(module, name, NHWC(child))
        else:
            to_nhwc(child)
    return module


class NhwcModel(nn.Module):
    def __init__(self, name):
        super().__init__()
        import torchvision
        self.m = to_nhwc(getattr(torchvision.models, name)(weights=None))

    def forward(self, x):  # x: NHWC
        return self.m(x)


def vision(model, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return model, [("input", x)], ["output"]


# ---- micro-models --------------------------------------------------------------------------

class MatMul(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / math.sqrt(n))

    def forward(self, x):
        return x @ self.w


def mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000))


def build(name, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if name == "bert_base":
        return bert(dict(vocab=30522, hidden=768, layers=12, heads=12, seq=128, batch=1), seed)
    if name == "bert_small":
        return bert(dict(vocab=1000, hidden=256, layers=4, heads=4, seq=32, batch=2), seed)
    if name == "gpt2":
        return gpt2(seed)
    if name == "db_fpn":
        return vision(DBNet(), (1, 3, 640, 640), seed)
    if name == "unet":
        return vision(UNet(), (1, 3, 1024, 1024), seed)
    if name.startswith("nhwc_") and name[5:] in ("resnet18", "mobilenet_v3_large", "efficientnet_b0"):
        return vision(NhwcModel(name[5:]), (1, 224, 224, 3), seed)
    if name == "matmul1024":
        return MatMul(1024), [("x", rng.standard_normal((1024, 1024)).astype(np.float32))], ["y"]
    if name in ("mlp_b1", "mlp_b64"):
        b = 1 if name == "mlp_b1" else 64
        return mlp(), [("x", rng.standard_normal((b, 1024)).astype(np.float32))], ["y"]
    raise SystemExit(f"error: unknown suite model {name!r}")


SUITE = ("bert_base", "bert_small", "gpt2", "db_fpn", "unet", "nhwc_resnet18", "nhwc_mobilenet_v3_large",
         "nhwc_efficientnet_b0", "matmul1024", "mlp_b1", "mlp_b64")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help=", ".join(SUITE))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=13)
    args = ap.parse_args()
    model, inputs, out_names = build(args.model, args.seed)
    randomize_norms(model, torch.Generator().manual_seed(args.seed + 1))
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    tensors = tuple(torch.from_numpy(v) for _, v in inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model(*tensors)
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        torch.onnx.export(model, tensors, os.path.join(args.out, "model.onnx"), opset_version=args.opset,
                          input_names=[n for n, _ in inputs], output_names=out_names,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    files = []
    for i, (_, v) in enumerate(inputs):
        files.append(f"in_{i}.npy")
        np.save(os.path.join(args.out, files[-1]), v)
    for j, r in enumerate(ref):
        np.save(os.path.join(args.out, f"ref_{j}.npy"), r.numpy().astype(np.float32))
    meta = {"model": args.model, "inputs": files, "input_names": [n for n, _ in inputs],
            "outputs": [f"ref_{j}.npy" for j in range(len(ref))], "seed": args.seed}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"exported {args.model} to {args.out}: inputs {[v.shape for _, v in inputs]}, "
          f"outputs {[tuple(r.shape) for r in ref]}")


if __name__ == "__main__":
    main()
