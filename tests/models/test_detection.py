#!/usr/bin/python3
"""End-to-end test: an SSD-style detector with TopK / NonZero / NonMaxSuppression post-processing
-> ONNX (opset 13) -> kiln vs PyTorch.

  /usr/bin/python3 tests/models/test_detection.py --kiln build/kiln --work DIR

The model (random weights, fixed seed): a 4-stage Conv-BN-ReLU backbone (128x128 -> 8x8), class
and box heads over 3 anchors per cell (192 boxes, 4 classes), box decoding against constant
anchors, per-box best class (ReduceMax / ArgMax), TopK of the best scores, a score threshold
(boolean-mask indexing: Greater -> NonZero -> GatherND), class-aware NMS (--nms offset: torchvision.ops.nms on
class-offset boxes -> NonMaxSuppression; --nms batched: torchvision.ops.batched_nms, exported as an If
on the candidates' element count around the NonMaxSuppression) and Gathers of the kept boxes, scores and labels.

Checks:
  * `kiln inspect --json`: static input; the head outputs (boxes, scores) static; the three
    detection outputs marked data-dependent in dim 0 with upper bound K.
  * head outputs vs PyTorch (|out - expected| <= atol + rtol * |expected|);
  * the score threshold is placed in the widest gap of the TopK scores between their 50th and
    70th percentile (a test parameter, baked into the export);
  * detections: the same count (shape) as PyTorch, identical labels, boxes and scores within
    the tolerance. This is deterministic only if no decision is on a knife's edge, so the
    script first proves that from PyTorch's own intermediates: distinct best scores around the
    TopK cut, every kept candidate's score away from the threshold, and every same-class IoU
    away from the NMS threshold (margins far above the float32 error of the head). A seed that
    fails that proof fails the test (choose another seed) instead of comparing a coin toss.
Prints one PASS/FAIL line; exits 0 on pass, 1 on failure.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torchvision_models import (TestError, check_inspect, compare, load_output,  # noqa: E402
                                     prepare_run_dirs, run)

NUM_CLASSES, ANCHORS, GRID, K = 4, 3, 8, 48
IOU_THR, CLASS_OFFSET = 0.45, 4.0
MARGIN_SCORE, MARGIN_IOU = 1e-5, 1e-3


def build_model(score_thr, nms="offset"):
    import torch
    from torch import nn
    import torchvision

    def stage(cin, cout):
        return [nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.score_thr = score_thr
            self.backbone = nn.Sequential(*stage(3, 16), *stage(16, 32), *stage(32, 64), *stage(64, 64))
            self.cls = nn.Conv2d(64, ANCHORS * NUM_CLASSES, 3, padding=1)
            self.reg = nn.Conv2d(64, ANCHORS * 4, 3, padding=1)
            ys, xs = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
            cx = ((xs + 0.5) / GRID).reshape(-1, 1).repeat(1, ANCHORS).reshape(-1)
            cy = ((ys + 0.5) / GRID).reshape(-1, 1).repeat(1, ANCHORS).reshape(-1)
            wh = torch.tensor([0.3, 0.45, 0.6]).repeat(GRID * GRID)
            self.register_buffer("anchors", torch.stack([cx, cy, wh, wh], 1))

        def head(self, x):
            f = self.backbone(x)
            cls = self.cls(f).permute(0, 2, 3, 1).reshape(-1, NUM_CLASSES)
            reg = self.reg(f).permute(0, 2, 3, 1).reshape(-1, 4)
            a = self.anchors
            cxcy = a[:, :2] + reg[:, :2] * 0.1 * a[:, 2:]
            wh = a[:, 2:] * torch.exp(reg[:, 2:] * 0.2)
            boxes = torch.cat([cxcy - wh / 2, cxcy + wh / 2], 1)
            return boxes, torch.sigmoid(cls * 40.0)

        def candidates(self, boxes, scores):
            best, labels = scores.max(dim=1)
            ts, ti = best.topk(K)
            tb, tl = boxes[ti], labels[ti]
            keep = ts > self.score_thr
            return best, ts, tb[keep], ts[keep], tl[keep]

        def forward(self, x):
            boxes, scores = self.head(x)
            _, _, cb, cs, cl = self.candidates(boxes, scores)
            if nms == "batched":  # exports an If (empty input?) around the NMS
                keep = torchvision.ops.batched_nms(cb, cs, cl, IOU_THR)
            else:
                off = cl.to(cb.dtype) * CLASS_OFFSET  # class-aware NMS: classes never overlap
                keep = torchvision.ops.nms(cb + off[:, None], cs, IOU_THR)
            return boxes, scores, cb[keep], cs[keep], cl[keep]

    return Detector()


def iou_matrix(b):
    x0, y0, x1, y1 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    area = (x1 - x0) * (y1 - y0)
    ix = np.clip(np.minimum(x1[:, None], x1[None]) - np.maximum(x0[:, None], x0[None]), 0, None)
    iy = np.clip(np.minimum(y1[:, None], y1[None]) - np.maximum(y0[:, None], y0[None]), 0, None)
    inter = ix * iy
    return inter / (area[:, None] + area[None] - inter)


def prove_deterministic(model, x):
    """Raises TestError unless every discrete decision has a clear margin; returns a summary."""
    import torch

    with torch.no_grad():
        boxes, scores = model.head(x)
        best, ts, cb, cs, cl = model.candidates(boxes, scores)
    best = np.sort(best.numpy().astype(np.float64))[::-1]
    if best[K - 1] - best[K] < MARGIN_SCORE:
        raise TestError(f"seed gives a TopK near-tie: {best[K - 1]!r} vs {best[K]!r}")
    top = best[:K]
    if np.min(np.abs(top - model.score_thr)) < MARGIN_SCORE:
        raise TestError("seed gives a score within the margin of the threshold")
    gaps = np.diff(np.sort(cs.numpy().astype(np.float64)))
    if gaps.size and gaps.min() < MARGIN_SCORE:
        raise TestError(f"seed gives near-equal candidate scores (gap {gaps.min():.3g})")
    ious = iou_matrix(cb.numpy().astype(np.float64))
    same = cl.numpy()[:, None] == cl.numpy()[None]
    np.fill_diagonal(same, False)
    d = np.abs(ious[same] - IOU_THR)
    if d.size and d.min() < MARGIN_IOU:
        raise TestError(f"seed gives an IoU within {MARGIN_IOU} of the NMS threshold ({d.min():.3g})")
    overlapping = int(np.count_nonzero(ious[same] > IOU_THR) // 2)
    return len(cs), overlapping


def onnx_ops(path):
    """Op types of an ONNX model, subgraphs included."""
    import onnx

    found, graphs = set(), [onnx.load(path).graph]
    while graphs:
        for n in graphs.pop().node:
            found.add(n.op_type)
            graphs.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    return found


def export(mdir, args):
    import torch

    torch.manual_seed(args.seed)
    model = build_model(0.0, args.nms).eval()
    x = torch.rand(1, 3, GRID * 16, GRID * 16)
    # The score threshold sits in the widest gap between the 50th and 70th percentile of the
    # TopK scores, so the NonZero filter drops about a third of them, with a clear margin.
    with torch.no_grad():
        top = np.sort(model.head(x)[1].max(dim=1)[0].numpy())[::-1][:K]
    lo, hi = K // 2, K * 7 // 10
    i = lo + int(np.argmax(top[lo - 1:hi - 1] - top[lo:hi]))
    model.score_thr = float((top[i - 1] + top[i]) / 2)
    with torch.no_grad():
        outs = model(x)
    candidates, overlapping = prove_deterministic(model, x)
    torch.onnx.export(model, (x,), os.path.join(mdir, "model.onnx"), opset_version=args.opset,
                      input_names=["x"],
                      output_names=["boxes", "scores", "det_boxes", "det_scores", "det_labels"])
    np.save(os.path.join(mdir, "x.npy"), x.numpy())
    for i, t in enumerate(outs):
        np.save(os.path.join(mdir, f"expected_{i}.npy"), t.numpy())
    return candidates, overlapping


def main():
    ap = argparse.ArgumentParser(description="Kiln vs PyTorch test for a detector with NMS post-processing")
    ap.add_argument("--kiln", help="path to the kiln binary (e.g. build/kiln); not needed with --export-only")
    ap.add_argument("--work", required=True, help="work directory for the export and outputs")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=2,
                    help="torch seed (the default passes the determinism proof with 32 candidates, 15 kept)")
    ap.add_argument("--nms", choices=("offset", "batched"), default="offset",
                    help="offset: torchvision.ops.nms on class-offset boxes; batched: "
                         "torchvision.ops.batched_nms, whose export wraps the NMS in an If on the "
                         "candidates' element count (data-dependent values into a branch)")
    ap.add_argument("--export-only", action="store_true",
                    help="only write DIR/detection_<nms>/model.onnx and x.npy (for bench/run_bench.py)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per step")
    args = ap.parse_args()

    if not args.kiln and not args.export_only:
        ap.error("--kiln is required (unless --export-only)")
    kiln = os.path.abspath(args.kiln or "kiln")
    mdir = os.path.abspath(os.path.join(args.work, "detection_" + args.nms))
    kiln_file = os.path.join(mdir, "model.kiln")
    out_dir = os.path.join(mdir, "kiln_out")
    names = ("boxes", "scores", "det_boxes", "det_scores", "det_labels")
    try:
        if args.export_only:
            os.makedirs(mdir, exist_ok=True)
            export(mdir, args)
            print(f"exported {os.path.join(mdir, 'model.onnx')} and x.npy", flush=True)
            return 0
        prepare_run_dirs(kiln, kiln_file, out_dir)
        candidates, overlapping = export(mdir, args)
        run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", kiln_file],
            "kiln compile", args.timeout)
        refs = [np.load(os.path.join(mdir, f"expected_{i}.npy")) for i in range(len(names))]
        n_boxes = GRID * GRID * ANCHORS
        j = check_inspect(kiln, kiln_file, [("x", "float32", (1, 3, GRID * 16, GRID * 16))],
                          [("boxes", "float32", (n_boxes, 4)), ("scores", "float32", (n_boxes, NUM_CLASSES)),
                           ("det_boxes", "float32", (K, 4)), ("det_scores", "float32", (K,)),
                           ("det_labels", "int64", (K,))], args.timeout)
        want_dyn = [[], [], [0], [0], [0]]
        got_dyn = [o.get("dynamic_dims") for o in j["outputs"]]
        if got_dyn != want_dyn:
            raise TestError(f"kiln inspect --json: dynamic_dims {got_dyn}, expected {want_dyn} "
                            "(head outputs static, detections data-dependent in dim 0)")
        ops = j.get("op_counts", {})
        # batched: the NonMaxSuppression sits in the If's else branch (inspect counts top level).
        want_ops = ("TopK", "NonZero") + (("If",) if args.nms == "batched" else ("NonMaxSuppression",))
        for op in want_ops:
            if not ops.get(op):
                raise TestError(f"the compiled model has no {op} node (op counts {json.dumps(ops)})")
        if args.nms == "batched" and "NonMaxSuppression" not in onnx_ops(os.path.join(mdir, "model.onnx")):
            raise TestError("the exported model has no NonMaxSuppression inside its If")
        run([kiln, "run", kiln_file, "--input", "x=" + os.path.join(mdir, "x.npy"),
             "--output-dir", out_dir], "kiln run", args.timeout)
        ok, parts = True, []
        for i, name in enumerate(names):
            out, ref = load_output(out_dir, i), refs[i]
            if out.shape != ref.shape:
                raise TestError(f"{name}: shape mismatch: kiln {out.shape} vs PyTorch {ref.shape}")
            if ref.dtype.kind in "iu":
                good = np.array_equal(out, ref)
                m = f"mismatches={int(np.count_nonzero(out != ref))}"
            else:
                good, m = compare(out, ref, args.rtol, args.atol)
            ok &= good
            parts.append(f"{name} {list(out.shape)} {m}")
        if refs[2].shape[0] in (0, candidates):
            raise TestError(f"degenerate case: NMS kept {refs[2].shape[0]} of {candidates} candidates "
                            "(the test needs both kept and suppressed boxes)")
        msg = (f"{candidates} candidates after TopK {K} + threshold, {overlapping} same-class pairs "
               f"above IoU {IOU_THR}, {refs[2].shape[0]} kept; " + ", ".join(parts)
               + f" (rtol={args.rtol:g}, atol={args.atol:g})")
    except TestError as e:
        ok, msg = False, str(e)
    print(f"{'PASS' if ok else 'FAIL'} detection (SSD-style, TopK/NonZero/NonMaxSuppression, "
          f"{args.nms} NMS): {msg}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
