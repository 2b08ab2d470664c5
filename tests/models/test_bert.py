#!/usr/bin/python3
"""End-to-end accuracy test: a small BERT-style encoder -> ONNX (opset 13) -> kiln vs PyTorch.

  /usr/bin/python3 tests/models/test_bert.py --kiln build/kiln --work DIR

The model (random weights, fixed seed) is written out by hand in torch: embeddings (word +
position, LayerNorm), then per layer multi-head self-attention (Linear q/k/v, view/transpose
into heads, q @ k^T / sqrt(d), attention mask, softmax, @ v, merge heads, output Linear,
residual + LayerNorm) and a feed-forward block (Linear, GELU via erf, Linear, residual
+ LayerNorm); a pooler (tanh(Linear(first token))) gives a second output. Inputs: token ids
(int64 [batch, seq]) and an attention mask (int64 0/1 [batch, seq]), some positions of which are
padding. Even layers apply the mask BERT-style as an additive (1 - mask) * -1e4 term; odd layers
fill masked scores with -inf (masked_fill -> Where), so both forms are covered.

It is exported with torch.onnx.export (opset 13, static shapes) into DIR/bert/, compiled with
`kiln compile`, checked with `kiln inspect --json` (inputs input_ids / attention_mask int64
[batch, seq], outputs float32, no unresolved dims), run with `kiln run --input NAME=FILE`
(inputs by name), and both outputs are compared with PyTorch's
(|out - expected| <= atol + rtol * |expected|). Prints one PASS/FAIL line with the largest
errors per output; exits 0 on pass, 1 on failure.

With --dynamic, the export has dynamic axes (batch and seq on both inputs), the model is compiled
once with no --input-shape (batch and seq stay symbolic: `kiln inspect --json` must say so), and
that one .kiln runs at every (batch, seq) of --shapes, each compared with PyTorch at that shape.
With --ranges SPEC as well, a second .kiln compiled with `--input-shape SPEC` (ranges, gears)
must report those ranges, run at every --shapes shape the same way, and refuse a shape outside
its ranges with a message naming the input, dim, symbol and range.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torchvision_models import (TestError, check_inspect, compare, load_output,  # noqa: E402
                                     prepare_run_dirs, run)

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("last_hidden_state", "pooler_output")
# What the export must contain for the test to cover what it claims to.
REQUIRED_ONNX_OPS = ("Gather", "MatMul", "Softmax", "Erf", "Transpose", "Reshape", "Tanh",
                     "ReduceMean", "Sqrt", "Where")


def build_model(args):
    import torch
    from torch import nn
    import torch.nn.functional as F

    class SelfAttention(nn.Module):
        def __init__(self, hidden, heads, fill_inf):
            super().__init__()
            self.heads, self.head_dim, self.fill_inf = heads, hidden // heads, fill_inf
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, hidden)

        def split_heads(self, x):  # [B, S, H] -> [B, heads, S, head_dim]
            b, s, _ = x.size()
            return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        def forward(self, x, mask_add):
            q = self.split_heads(self.query(x))
            k = self.split_heads(self.key(x))
            v = self.split_heads(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            if self.fill_inf:  # -inf where masked (no row is fully masked: no NaN)
                scores = scores.masked_fill(mask_add < -1.0, float("-inf"))
            else:
                scores = scores + mask_add
            probs = torch.softmax(scores, dim=-1)
            ctx = torch.matmul(probs, v).transpose(1, 2).contiguous()
            b, s = ctx.size(0), ctx.size(1)
            return self.out(ctx.view(b, s, self.heads * self.head_dim))

    class Layer(nn.Module):
        def __init__(self, hidden, heads, ffn, fill_inf):
            super().__init__()
            self.attn = SelfAttention(hidden, heads, fill_inf)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.fc1 = nn.Linear(hidden, ffn)
            self.fc2 = nn.Linear(ffn, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask_add):
            x = self.ln1(x + self.attn(x, mask_add))
            return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))  # exact GELU: exported via Erf

    class Encoder(nn.Module):
        def __init__(self, vocab, hidden, layers, heads, ffn, max_pos):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(max_pos, hidden)
            self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0))
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer(hidden, heads, ffn, fill_inf=i % 2 == 1)
                                        for i in range(layers))
            self.pool = nn.Linear(hidden, hidden)

        def forward(self, input_ids, attention_mask):
            seq = input_ids.size(1)
            x = self.ln(self.word(input_ids) + self.pos(self.position_ids[:, :seq]))
            # [B, S] 0/1 -> [B, 1, 1, S] additive mask: 0 where attended, -1e4 where padding.
            mask_add = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask_add)
            return x, torch.tanh(self.pool(x[:, 0]))

    torch.manual_seed(args.seed)
    model = Encoder(args.vocab, args.hidden, args.layers, args.heads, 4 * args.hidden,
                    max_pos=max(64, args.seq, args.max_pos))
    with torch.no_grad():  # LayerNorm affine params off their identity defaults
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape) * 0.1)
    return model.eval()


def make_inputs(args, batch, seq, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, args.vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    for b in range(1, batch):  # later batch rows end in padding, more for each row
        pad = min(seq - 1, 3 * b + 2)
        mask[b, seq - pad:] = 0
        ids[b, seq - pad:] = 0
    return ids, mask


def export(mdir, args):
    """Writes model.onnx, input_ids.npy, attention_mask.npy and expected_<i>.npy into mdir."""
    import onnx
    import torch

    model = build_model(args)
    ids, mask = make_inputs(args, args.batch, args.seq, args.seed)
    dynamic_axes = None
    if args.dynamic:
        dynamic_axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                        "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}
    with torch.no_grad():
        expected = model(torch.from_numpy(ids), torch.from_numpy(mask))
        onnx_path = os.path.join(mdir, "model.onnx")
        torch.onnx.export(model, (torch.from_numpy(ids), torch.from_numpy(mask)), onnx_path,
                          opset_version=args.opset, input_names=list(INPUT_NAMES),
                          output_names=list(OUTPUT_NAMES), do_constant_folding=True,
                          dynamic_axes=dynamic_axes)
    ops = {n.op_type for n in onnx.load(onnx_path).graph.node}
    missing = [op for op in REQUIRED_ONNX_OPS if op not in ops]
    if missing:
        raise TestError(f"the ONNX export lacks {missing} (has {sorted(ops)}): the test would not "
                        "cover what it claims")
    np.save(os.path.join(mdir, "input_ids.npy"), ids)
    np.save(os.path.join(mdir, "attention_mask.npy"), mask)
    for i, t in enumerate(expected):
        np.save(os.path.join(mdir, f"expected_{i}.npy"), t.numpy().astype(np.float32))
    return [t.shape for t in expected], sorted(ops), model


def run_dynamic(kiln, kiln_file, mdir, model, shapes_list, args, ranges=None, device=None):
    """Runs the symbolic .kiln at every (batch, seq), each against PyTorch; returns (ok, message).
    `ranges`: {symbol: (min, max)} the file must report (else 1..unbounded). `device`: run there."""
    import json
    import torch

    info = json.loads(run([kiln, "inspect", "--json", kiln_file], "kiln inspect", args.timeout, echo=False))
    for t in info["inputs"]:
        kinds = [(d["symbol"], d["kind"]) for d in t["dims"]]
        if kinds != [("batch", "symbolic"), ("seq", "symbolic")]:
            raise TestError(f"kiln inspect: input {t['name']!r} dims {kinds}, expected batch and seq symbolic")
        for d in t["dims"]:
            want = (ranges or {}).get(d["symbol"], (1, -1))
            if (d["min"], d["max"]) != want:
                raise TestError(f"kiln inspect: input {t['name']!r} dim {d['symbol']!r} has range "
                                f"{d['min']}..{d['max']}, expected {want[0]}..{want[1]}")
    ok, worst = True, [0.0, 0.0]
    for k, (batch, seq) in enumerate(shapes_list):
        ids, mask = make_inputs(args, batch, seq, args.seed + 1 + k)
        with torch.no_grad():
            expected = [t.numpy() for t in model(torch.from_numpy(ids), torch.from_numpy(mask))]
        cmd = [kiln, "run", kiln_file] + (["--device", device] if device else [])
        for name, arr in zip(INPUT_NAMES, (ids, mask)):
            path = os.path.join(mdir, f"{name}_{batch}x{seq}.npy")
            np.save(path, arr)
            cmd += ["--input", f"{name}={path}"]
        out_dir = os.path.join(mdir, f"out_{os.path.basename(kiln_file)}_{batch}x{seq}")
        run(cmd + ["--output-dir", out_dir], f"kiln run at {batch}x{seq}", args.timeout, echo=False)
        for i, name in enumerate(OUTPUT_NAMES):
            out = load_output(out_dir, i)
            good, msg = compare(out, expected[i], args.rtol, args.atol)
            if good:
                worst[i] = max(worst[i], float(np.abs(out.astype(np.float64) - expected[i]).max()))
            print(f"  {batch}x{seq} {name}: {msg}", flush=True)
            ok &= good
    return ok, f"max |err| {worst[0]:.3g} / {worst[1]:.3g} over {len(shapes_list)} shapes"


def run_ranged(kiln, mdir, model, shapes_list, args):
    """Compiles with --input-shape args.ranges, checks the ranges it reports, runs at every shape
    and checks that a shape past the ranges is refused; returns (ok, message)."""
    import subprocess

    ranged = os.path.join(mdir, "model_ranged.kiln")
    run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", ranged,
         "--input-shape", args.ranges], "kiln compile --input-shape (ranges)", args.timeout)
    # The symbols' ranges: the intersection of every input's (the grammar's first range per input).
    ranges = {}
    for item in args.ranges.split(";"):
        _, alts = item.rsplit(":", 1)
        for alt in alts.split("|"):
            if ".." not in alt:
                continue
            for sym, dim in zip(("batch", "seq"), alt.split(",")):
                if dim == "?":
                    lo, hi = "1", ""
                else:
                    lo, _, hi = dim.partition("..") if ".." in dim else (dim, "", dim)
                old = ranges.get(sym, (0, 1 << 62))
                ranges[sym] = (max(old[0], int(lo)), min(old[1], int(hi) if hi else 1 << 62))
    ranges = {k: (lo, -1 if hi == 1 << 62 else hi) for k, (lo, hi) in ranges.items()}
    if ranges.get("seq", (0, -1))[1] < 0:
        raise TestError(f"--ranges {args.ranges!r} must bound seq (the test runs past its max)")
    ok, msg = run_dynamic(kiln, ranged, mdir, model, shapes_list, args, ranges)
    # Past the largest seq: refused, naming input, dim, symbol and range.
    batch, seq = 1, ranges["seq"][1] + 1
    ids, mask = make_inputs(args, batch, seq, args.seed)
    cmd = [kiln, "run", ranged]
    for name, arr in zip(INPUT_NAMES, (ids, mask)):
        path = os.path.join(mdir, f"{name}_past.npy")
        np.save(path, arr)
        cmd += ["--input", f"{name}={path}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    want = (f"input 0 'input_ids' dim 1 (symbol 'seq') is {seq}, outside its range "
            f"{ranges['seq'][0]}..{ranges['seq'][1]}")
    if p.returncode != 1 or want not in p.stderr:
        raise TestError(f"kiln run at 1x{seq} (past the range): exit {p.returncode}, expected 1 with {want!r}; "
                        f"stderr: {p.stderr[-500:]}")
    return ok, msg + f", {batch}x{seq} refused"


def main():
    ap = argparse.ArgumentParser(description="Kiln vs PyTorch accuracy test for a BERT-style encoder")
    ap.add_argument("--kiln", required=True, help="path to the kiln binary (e.g. build/kiln)")
    ap.add_argument("--work", required=True, help="work directory for the export and outputs")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per step")
    ap.add_argument("--dynamic", action="store_true", help="symbolic batch and seq: one .kiln at every --shapes")
    ap.add_argument("--shapes", default="1x8,2x16,4x33,2x77,1x128,4x8,3x200",
                    help="with --dynamic: BATCHxSEQ list to run at")
    ap.add_argument("--ranges", default="",
                    help="with --dynamic: also compile with this --input-shape (ranges, gears) and test that")
    ap.add_argument("--placed-target", default="",
                    help="with --dynamic: also compile for this target (e.g. sim:lack=Concat) and run there")
    ap.add_argument("--max-pos", type=int, default=0, help="position table size (default max(64, seq, shapes))")
    args = ap.parse_args()
    shapes_list = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.dynamic else []
    args.max_pos = max([args.max_pos] + [s for _, s in shapes_list])

    kiln = os.path.abspath(args.kiln)
    mdir = os.path.abspath(os.path.join(args.work, "bert_dynamic" if args.dynamic else "bert"))
    kiln_file = os.path.join(mdir, "model.kiln")
    out_dir = os.path.join(mdir, "kiln_out")
    try:
        if args.hidden % args.heads:
            raise TestError(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
        prepare_run_dirs(kiln, kiln_file, out_dir)
        shapes, ops, model = export(mdir, args)
        print(f"exported {os.path.join(mdir, 'model.onnx')}: ops {', '.join(ops)}", flush=True)
        run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", kiln_file],
            "kiln compile", args.timeout)
        if not os.path.exists(kiln_file):
            raise TestError(f"kiln compile exited 0 but wrote no {kiln_file}")
        if args.dynamic:
            ok, msg = run_dynamic(kiln, kiln_file, mdir, model, shapes_list, args)
            if args.ranges:
                ok2, msg2 = run_ranged(kiln, mdir, model, shapes_list, args)
                ok, msg = ok and ok2, f"{msg}; with --input-shape {args.ranges!r}: {msg2}"
            if args.placed_target:
                # Compiled for a device lacking some shape ops: they run on the CPU and the
                # values that decide shapes cross between memories through copies.
                placed = os.path.join(mdir, "model_placed.kiln")
                run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", placed,
                     "--target", args.placed_target], f"kiln compile --target {args.placed_target}", args.timeout)
                inspect = run([kiln, "inspect", placed], "kiln inspect", args.timeout, echo=False)
                if "on the CPU" not in inspect:
                    raise TestError(f"--target {args.placed_target}: no node was placed on the CPU; the check "
                                    "would not cover copies")
                ok3, msg3 = run_dynamic(kiln, placed, mdir, model, shapes_list, args, device=args.placed_target)
                ok, msg = ok and ok3, f"{msg}; compiled for {args.placed_target!r}: {msg3}"
            print(f"{'PASS' if ok else 'FAIL'} bert dynamic ({args.layers} layers, hidden {args.hidden}, "
                  f"{args.heads} heads, one .kiln at batch x seq {args.shapes}): {msg}", flush=True)
            return 0 if ok else 1
        bs = (args.batch, args.seq)
        check_inspect(kiln, kiln_file, [(n, "int64", bs) for n in INPUT_NAMES],
                      [(n, "float32", s) for n, s in zip(OUTPUT_NAMES, shapes)], args.timeout)
        # Inputs by name, given in the reverse of the model's order.
        cmd = [kiln, "run", kiln_file]
        for name in reversed(INPUT_NAMES):
            cmd += ["--input", f"{name}={os.path.join(mdir, name + '.npy')}"]
        run(cmd + ["--output-dir", out_dir], "kiln run", args.timeout)
        ok, parts = True, []
        for i, name in enumerate(OUTPUT_NAMES):
            good, msg = compare(load_output(out_dir, i), np.load(os.path.join(mdir, f"expected_{i}.npy")),
                                args.rtol, args.atol)
            ok &= good
            parts.append(f"{name}: {msg}")
        msg = "; ".join(parts)
    except TestError as e:
        ok, msg = False, str(e)
    print(f"{'PASS' if ok else 'FAIL'} bert ({args.layers} layers, hidden {args.hidden}, "
          f"{args.heads} heads, seq {args.seq}, batch {args.batch}): {msg}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
