#!/usr/bin/python3
"""A BERT-style encoder in the form ONNX Runtime's transformer optimizer and quantize_dynamic write
it: Kiln against ONNX Runtime and PyTorch, accuracy and speed.

  /usr/bin/python3 bench/bert_ort_fused.py --kiln build/kiln --work DIR
      [--hidden 256 --layers 4 --heads 4 --seq 128 --batch 1] [--threads 1,2 --rounds 5 --runs 20]
      [--reduce-range] [--out FILE.md]

The model is a Hugging Face-style BERT written in torch (word + token-type + position embeddings,
LayerNorm; per layer query / key / value Linear, scores / sqrt(d) + (1 - mask) * -10000, softmax,
output Linear, residual LayerNorm, GELU feed-forward, residual LayerNorm), random weights, fixed
seed. Three ONNX files come from it:

- original: torch.onnx.export (opset 14, static shapes).
- fused: what `python -m onnxruntime.transformers.optimizer --model_type bert` writes for it, built
  here from the same weights (that optimizer is Python-only, not in the npm package this project
  uses): Cast of the int64 inputs to int32, EmbedLayerNormalization (its mask_index output: the count
  of ones per row), then per layer Attention (packed Q / K / V weights, mask_index), MatMul,
  SkipLayerNormalization (with the output bias), MatMul, BiasGelu, MatMul, SkipLayerNormalization.
- dynamic: the fused file as quantize_dynamic writes it (its default: int8 weights per tensor,
  uint8 activations): QEmbedLayerNormalization (uint8 tables), DynamicQuantizeLinear + QAttention,
  DynamicQuantizeLinear + MatMulInteger -> Cast -> Mul(x_scale * w_scale) for each MatMul.
  --reduce-range keeps the weights in [-64, 64] (what ONNX Runtime's products are exact for on
  CPUs without VNNI).

The padding mask is right-aligned (ones, then zeros), where the optimizer's mask_index is exactly
the model's additive mask. Reported: max |Kiln - PyTorch| and max |ORT - PyTorch| over max
|PyTorch| for the original and fused files; Kiln against ONNX Runtime on the dynamic file; then
`kiln bench` and bench/ort_bench.js on the fused and dynamic files, interleaved rounds, medians of
round medians. Exit status 1 when Kiln's float results leave PyTorch's by more than 1e-4 of the
output's magnitude or a run fails. --no-ort (ctest model_bert_ort_fused, small sizes) runs Kiln
only: the original and fused files within 1e-4 of PyTorch, the dynamic one within --dyn-tol (3%).
"""
import argparse
import os
import shlex
import statistics
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_bench import ORT_BENCH, BenchError, int_list, machine_info, paired_ratio, parse_json, run  # noqa: E402

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def build(args):
    import math

    import torch
    from torch import nn
    import torch.nn.functional as F

    class SelfAttention(nn.Module):
        def __init__(s, h, n):
            super().__init__()
            s.n, s.d = n, h // n
            s.query, s.key, s.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)

        def heads(s, x):
            return x.view(x.size()[:-1] + (s.n, s.d)).permute(0, 2, 1, 3)

        def forward(s, x, m):
            q, k, v = s.heads(s.query(x)), s.heads(s.key(x)), s.heads(s.value(x))
            p = F.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(s.d) + m, dim=-1)
            c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
            return c.view(c.size()[:-2] + (s.n * s.d,))

    class Layer(nn.Module):
        def __init__(s, h, n):
            super().__init__()
            s.attention, s.output = SelfAttention(h, n), nn.Linear(h, h)
            s.ln1, s.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
            s.intermediate, s.ffn_out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(s, x, m):
            a = s.ln1(s.output(s.attention(x, m)) + x)
            return s.ln2(s.ffn_out(F.gelu(s.intermediate(a))) + a)

    class Bert(nn.Module):
        def __init__(s, vocab, h, n, layers, positions):
            super().__init__()
            s.word, s.position, s.token_type = nn.Embedding(vocab, h), nn.Embedding(positions, h), nn.Embedding(2, h)
            s.register_buffer("position_ids", torch.arange(positions).expand((1, -1)))
            s.ln = nn.LayerNorm(h, eps=1e-12)
            s.layers = nn.ModuleList(Layer(h, n) for _ in range(layers))

        def forward(s, input_ids, attention_mask, token_type_ids):
            x = s.word(input_ids) + s.token_type(token_type_ids) + s.position(s.position_ids[:, :input_ids.size(1)])
            x = s.ln(x)
            m = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in s.layers:
                x = layer(x, m)
            return x

    torch.manual_seed(0)
    model = Bert(args.vocab, args.hidden, args.heads, args.layers, max(args.seq, 128)).eval()
    with torch.no_grad():  # LayerNorm parameters off their defaults
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.copy_(torch.rand(mod.weight.shape) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(mod.bias.shape) * 0.1)
    B, S = args.batch, args.seq
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.int64)
    for b in range(B):  # right padding, a different length per row
        mask[b, S - (S // 4) * (b % 2) - 3 * b:] = 0
    tt = torch.zeros(B, S, dtype=torch.int64)
    tt[:, S // 2:] = 1
    with torch.no_grad():
        ref = model(ids, mask, tt).numpy()
    return model, (ids, mask, tt), ref


def export_original(model, inputs, path):
    import torch
    torch.onnx.export(model, inputs, path, opset_version=14, input_names=list(INPUTS),
                      output_names=["last_hidden_state"])


def quant_u8(a):
    """uint8 per tensor over a range holding 0 (quantize_dynamic's activation-style parameters)."""
    lo, hi = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    s = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    z = np.uint8(np.clip(np.rint(-lo / s), 0, 255))
    return np.clip(np.rint(a / s) + z, 0, 255).astype(np.uint8), s, z


def quant_i8(w, reduce_range):
    """int8 symmetric per tensor (quantize_dynamic's weights); [-64, 64] with reduce_range."""
    qmax = 64 if reduce_range else 127
    s = np.float32(max(float(np.abs(w).max()), 1e-8) / qmax)
    return np.clip(np.rint(w / s), -qmax, qmax).astype(np.int8), s


def fused_model(model, args, path, dynamic):
    """The transformer optimizer's form of `model` (dynamic: then quantize_dynamic's)."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    nodes, inits = [], []
    counter = [0]

    def init(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def node(op, ins, outs=None, domain="", **attrs):
        counter[0] += 1
        outs = outs or [f"{op.lower()}_{counter[0]}"]
        nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{counter[0]}", domain=domain, **attrs))
        return outs if len(outs) > 1 else outs[0]

    def dq_act(x):  # DynamicQuantizeLinear of an activation
        counter[0] += 1
        n = counter[0]
        return node("DynamicQuantizeLinear", [x], [f"{x}_q{n}", f"{x}_scale{n}", f"{x}_zp{n}"])

    def matmul(x, w, name):
        if not dynamic:
            return node("MatMul", [x, init(name, w)])
        wq, ws = quant_i8(w, args.reduce_range)
        xq, xs, xz = dq_act(x)
        acc = node("MatMulInteger", [xq, init(name + "_q", wq), xz, init(name + "_zp", np.int8(0))])
        f = node("Cast", [acc], to=TensorProto.FLOAT)
        s = node("Mul", [xs, init(name + "_scale", ws)])
        return node("Mul", [f, s])

    ids = node("Cast", ["input_ids"], to=TensorProto.INT32)
    mask = node("Cast", ["attention_mask"], to=TensorProto.INT32)
    tt = node("Cast", ["token_type_ids"], to=TensorProto.INT32)
    tables = [("word", sd["word.weight"]), ("position", sd["position.weight"]), ("token_type", sd["token_type.weight"]),
              ("ln_gamma", sd["ln.weight"]), ("ln_beta", sd["ln.bias"])]
    if dynamic:
        q = [quant_u8(a) for _, a in tables]
        ins = [ids, tt] + [init(n + "_q", qa) for (n, _), (qa, _, _) in zip(tables, q)] + [mask]
        ins += [init(n + "_scale", s) for (n, _), (_, s, _) in zip(tables, q)]
        ins += [init(n + "_zp", z) for (n, _), (_, _, z) in zip(tables, q)]
        x, mask_index = node("QEmbedLayerNormalization", ins, ["embeddings", "mask_index"], domain="com.microsoft",
                             epsilon=1e-12)
    else:
        ins = [ids, tt] + [init(n, a) for n, a in tables] + [mask]
        x, mask_index = node("EmbedLayerNormalization", ins, ["embeddings", "mask_index"], domain="com.microsoft",
                             epsilon=1e-12)
    for i in range(args.layers):
        p = f"layers.{i}."
        w = np.concatenate([sd[p + f"attention.{k}.weight"].T for k in ("query", "key", "value")], axis=1)
        b = np.concatenate([sd[p + f"attention.{k}.bias"] for k in ("query", "key", "value")])
        if dynamic:
            wq, ws = quant_i8(w, args.reduce_range)
            xq, xs, xz = dq_act(x)
            ctx = node("QAttention", [xq, init(f"l{i}_qkv_q", wq), init(f"l{i}_qkv_bias", b), xs,
                                      init(f"l{i}_qkv_scale", ws), mask_index, xz, init(f"l{i}_qkv_zp", np.int8(0))],
                       domain="com.microsoft", num_heads=args.heads)
        else:
            ctx = node("Attention", [x, init(f"l{i}_qkv", w), init(f"l{i}_qkv_bias", b), mask_index],
                       domain="com.microsoft", num_heads=args.heads)
        o = matmul(ctx, sd[p + "output.weight"].T, f"l{i}_out")
        a = node("SkipLayerNormalization", [o, x, init(f"l{i}_ln1_g", sd[p + "ln1.weight"]),
                                            init(f"l{i}_ln1_b", sd[p + "ln1.bias"]),
                                            init(f"l{i}_out_bias", sd[p + "output.bias"])],
                 domain="com.microsoft", epsilon=1e-12)
        h = matmul(a, sd[p + "intermediate.weight"].T, f"l{i}_ffn1")
        h = node("BiasGelu", [h, init(f"l{i}_ffn1_bias", sd[p + "intermediate.bias"])], domain="com.microsoft")
        h = matmul(h, sd[p + "ffn_out.weight"].T, f"l{i}_ffn2")
        x = node("SkipLayerNormalization", [h, a, init(f"l{i}_ln2_g", sd[p + "ln2.weight"]),
                                            init(f"l{i}_ln2_b", sd[p + "ln2.bias"]),
                                            init(f"l{i}_ffn2_bias", sd[p + "ffn_out.bias"])],
                 ["last_hidden_state" if i == args.layers - 1 else f"layer{i}_out"], domain="com.microsoft",
                 epsilon=1e-12)
    B, S = args.batch, args.seq
    graph = helper.make_graph(nodes, "bert_fused",
                              [helper.make_tensor_value_info(n, TensorProto.INT64, [B, S]) for n in INPUTS],
                              [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                                             [B, S, args.hidden])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14),
                                                       helper.make_opsetid("com.microsoft", 1)]), path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node", default="node")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reduce-range", action="store_true")
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--no-ort", action="store_true",
                    help="Kiln against PyTorch only, no timing (ctest model_bert_ort_fused): the fused file within "
                         "1e-4 of PyTorch's output magnitude, the dynamic one within --dyn-tol")
    ap.add_argument("--dyn-tol", type=float, default=0.03)
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    d = os.path.abspath(args.work)
    os.makedirs(d, exist_ok=True)
    model, inputs, ref = build(args)
    feeds = []
    for i, (n, t) in enumerate(zip(INPUTS, inputs)):
        np.save(os.path.join(d, n + ".npy"), t.numpy())
        feeds += ["--input", f"{i}={os.path.join(d, n + '.npy')}"]
    files = {"original": os.path.join(d, "bert.onnx"), "fused": os.path.join(d, "bert_fused.onnx"),
             "dynamic": os.path.join(d, "bert_fused_dynamic.onnx")}
    export_original(model, inputs, files["original"])
    fused_model(model, args, files["fused"], False)
    fused_model(model, args, files["dynamic"], True)
    outs, bad = {}, 0
    for form, path in files.items():
        kfile = path[:-5] + ".kiln"
        run([kiln, "compile", "--model", path, "--output", kfile], f"kiln compile {form}")
        for eng in ("kiln",) if args.no_ort else ("kiln", "ort"):
            od = os.path.join(d, f"out_{eng}_{form}")
            cmd = ([kiln, "run", kfile, *feeds, "--output-dir", od] if eng == "kiln" else
                   [args.node, ORT_BENCH, path, *feeds, "--runs", "1", "--warmup", "0", "--output-dir", od])
            run(cmd, f"{eng} run {form}")
            outs[(eng, form)] = np.load(os.path.join(od, "output_0.npy"))
    top = float(np.abs(ref).max())

    def rel(a, b):
        return float(np.abs(a.astype(np.float64) - b).max()) / top

    if args.no_ort:
        parts = []
        for form in files:
            r = rel(outs[("kiln", form)], ref)
            ok = r <= (args.dyn_tol if form == "dynamic" else 1e-4)
            bad += not ok
            parts.append(f"{form} {r:.3g}{'' if ok else ' (too far)'}")
        print(("FAIL" if bad else "PASS") + ": max |Kiln - PyTorch| / max |PyTorch|: " + ", ".join(parts))
        sys.exit(1 if bad else 0)
    ops = sorted({f"{n.op_type}" for n in onnx.load(files["dynamic"]).graph.node} |
                 {f"{n.op_type}" for n in onnx.load(files["fused"]).graph.node})
    lines = [f"BERT-style encoder, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, batch "
             f"{args.batch}, seq {args.seq}; {'7-bit' if args.reduce_range else '8-bit'} int8 weights in the "
             f"dynamic file. Ops in the fused files: {', '.join(ops)}.", "",
             "| file | max abs(Kiln - PyTorch) / max abs(PyTorch) | max abs(ORT - PyTorch) / max | "
             "max abs(Kiln - ORT) / max |", "|---|---:|---:|---:|"]
    for form in files:
        k, o = outs[("kiln", form)], outs[("ort", form)]
        lines.append(f"| {form} | {rel(k, ref):.3g} | {rel(o, ref):.3g} | {rel(k, o):.3g} |")
        if form != "dynamic":
            bad += not rel(k, ref) <= 1e-4
    print("\n".join(lines), flush=True)
    rows = []
    for form in ("fused", "dynamic"):
        path = files[form]
        for threads in args.threads:
            per = {"kiln": [], "ort": []}
            for r in range(args.rounds):
                for eng in per:
                    common = [*feeds, "--runs", str(args.runs), "--warmup", str(args.warmup), "--threads", str(threads)]
                    cmd = ([kiln, "bench", path[:-5] + ".kiln", *common, "--json"] if eng == "kiln" else
                           [args.node, ORT_BENCH, path, *common])
                    try:
                        per[eng].append(parse_json(run(cmd, f"{eng} bench {form}"), f"{eng} bench")["median_ms"])
                    except (BenchError, KeyError) as e:
                        print(f"error: {e}", file=sys.stderr)
                        bad += 1
            k, o = per["kiln"], per["ort"]
            r = paired_ratio(k, o)
            rows.append(f"| {form} | {threads} | {statistics.median(k):.3f} | {statistics.median(o):.3f} | "
                        f"{'n/a' if r is None else f'{r:.3f}'} |")
            print(rows[-1], flush=True)
    cpu, nproc, rev, date = machine_info()
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())] + sys.argv[1:])
    md = [f"- Machine: {cpu}, nproc {nproc}; {date}; Kiln commit {rev}", f"- `{cmd}`", "", *lines, "",
          f"{args.rounds} interleaved rounds of {args.runs} runs after {args.warmup} warm-up runs; medians of round "
          "medians in ms; the ratio is the median of per-round ratios.", "",
          "| file | threads | Kiln | ORT | Kiln / ORT |", "|---|---:|---:|---:|---:|", *rows]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(md) + "\n")
    print("FAIL" if bad else "ok")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
