#!/usr/bin/python3
"""`kiln weights list` and `kiln weights gc` through the CLI, in real processes:

  - list: every meta.json entry with its byte size (that of the numpy array it
    came from) and which of the given models use it (two models sharing one
    store: one shared weight, one exclusive weight each);
  - gc mode 1: keeping model A removes B's exclusive weight_<sha> files and
    their meta.json entries; A still computes x @ W + b_A (numpy reference);
  - gc mode 2: two models in one combined file; keeping A compacts the file
    into <name>.gc1_weight_combined (B's range dropped, 512-byte alignment
    kept), rewrites a.kiln, removes the old file; A still runs;
  - --dry-run changes nothing (byte-identical directory);
  - a kept model whose weight is missing fails naming the model and weight,
    with nothing changed; gc without --keep is refused;
  - kill -9 at random moments of gc: the kept models always run correctly and
    a final gc leaves nothing unreferenced.

  /usr/bin/python3 tests/weights/test_weights_gc.py --kiln build/kiln --work DIR
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None
K, N = 13, 20  # W: 13 x 20 float32 = 1040 bytes (not a multiple of 512); b: 80 bytes


def kiln(*args, timeout=120):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def sha(b):
    return hashlib.sha256(b).hexdigest()


def align(n):
    return (n + 511) // 512 * 512


def affine_model(path, w, b):
    """y = x @ w + b, x: [2, K]."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"), helper.make_node("Add", ["mm", "b"], ["y"], name="add")],
        "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, w.shape[1]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def snapshot(d):
    """Every file under d (names, sizes, bytes): what 'unchanged' means."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = read(p)
    return out


def meta_of(wdir):
    with open(os.path.join(wdir, "meta.json")) as f:
        return json.load(f)["weights"]


class Store:
    """Models a, b (and more) of y = x @ W + b_i compiled into one store."""

    def __init__(self, tc, name, mode, weights, model_name=None, shared_w=None):
        self.tc = tc
        self.d = fresh(name)
        self.wdir = os.path.join(self.d, "store")
        self.w = weights  # name -> (W, b)
        for m, (w, b) in weights.items():
            onnx_path = os.path.join(self.d, m + ".onnx")
            affine_model(onnx_path, w, b)
            argv = ["compile", "--model", onnx_path, "--output", self.kiln(m), "--external-weight", mode,
                    "--external-weight-dir", self.wdir]
            if model_name:
                argv += ["--model-name", model_name]
            rc, out = kiln(*argv)
            tc.assertEqual(rc, 0, out)
        self.x = np.random.default_rng(3).standard_normal((2, K)).astype(np.float32)
        np.save(os.path.join(self.d, "x.npy"), self.x)

    def kiln(self, m):
        return os.path.join(self.d, m + ".kiln")

    def check_runs(self, m, msg=""):
        out_dir = os.path.join(self.d, "out_" + m)
        shutil.rmtree(out_dir, ignore_errors=True)
        rc, out = kiln("run", self.kiln(m), "--input", "0=" + os.path.join(self.d, "x.npy"), "--output-dir", out_dir,
                       "--verify-weights")
        self.tc.assertEqual(rc, 0, f"{msg}: {out}")
        w, b = self.w[m]
        ref = self.x.astype(np.float64) @ w.astype(np.float64) + b
        np.testing.assert_allclose(np.load(os.path.join(out_dir, "output_0.npy")), ref, rtol=1e-4, atol=1e-4,
                                   err_msg=msg)


def weights_ab(seed=0, k=K, n=N):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((k, n)).astype(np.float32)
    return {"a": (shared, rng.standard_normal(n).astype(np.float32)),
            "b": (shared, rng.standard_normal(n).astype(np.float32))}


class WeightsGc(unittest.TestCase):
    def test_list_shows_entries_sizes_and_users(self):
        s = Store(self, "list", 1, weights_ab())
        (w, ba), (_, bb) = s.w["a"], s.w["b"]
        rc, out = kiln("weights", "list", s.wdir, "--model", s.kiln("a"), "--model", s.kiln("b"))
        self.assertEqual(rc, 0, out)
        want = {sha(w.tobytes()): (w.nbytes, {s.kiln("a"), s.kiln("b")}),
                sha(ba.tobytes()): (ba.nbytes, {s.kiln("a")}),
                sha(bb.tobytes()): (bb.nbytes, {s.kiln("b")})}
        self.assertEqual(set(meta_of(s.wdir)), set(want), "meta.json holds exactly the three constants")
        rows = {}
        for line in out.splitlines()[1:]:
            m = re.match(r"([0-9a-f]{16})  (\S+)\s+(\d+)  (\d+) B(?: \([^)]*\))?\s+(.*)$", line)
            if m:
                rows[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)), set(m.group(5).split()))
        self.assertEqual(len(rows), 3, out)
        for h, (size, users) in want.items():
            self.assertIn(h[:16], rows, out)
            f, off, length, used = rows[h[:16]]
            self.assertEqual((f, off, length, used), ("weight_" + h, 0, size, users), out)
        self.assertRegex(out, r"total: 3 entries", out)
        # Only a: b's bias is unused.
        rc, out = kiln("weights", "list", s.wdir, "--model", s.kiln("a"))
        self.assertEqual(rc, 0, out)
        line = [l for l in out.splitlines() if l.startswith(sha(bb.tobytes())[:16])]
        self.assertEqual(len(line), 1, out)
        self.assertTrue(line[0].rstrip().endswith("unused"), line[0])

    def test_gc_mode1_keeps_only_what_a_uses(self):
        s = Store(self, "gc1", 1, weights_ab(1))
        (w, ba), (_, bb) = s.w["a"], s.w["b"]
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"))
        self.assertEqual(rc, 0, out)
        self.assertIn("1 file removed", out)
        self.assertIn(f"{bb.nbytes} B freed", out)
        files = sorted(f for f in os.listdir(s.wdir) if f.startswith("weight_"))
        self.assertEqual(files, sorted(["weight_" + sha(w.tobytes()), "weight_" + sha(ba.tobytes())]))
        self.assertEqual(set(meta_of(s.wdir)), {sha(w.tobytes()), sha(ba.tobytes())})
        s.check_runs("a", "after gc")
        # Nothing more to do.
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"))
        self.assertEqual(rc, 0, out)
        self.assertIn("0 files removed, 0 combined files rewritten, 0 .kiln files rewritten", out)

    def test_gc_mode2_compacts_the_combined_file(self):
        s = Store(self, "gc2", 2, weights_ab(2), model_name="shared")
        (w, ba), (_, bb) = s.w["a"], s.w["b"]
        old = os.path.join(s.wdir, "shared_weight_combined")
        self.assertEqual(sorted(os.listdir(s.wdir)), ["meta.json", "meta.json.lock", "shared_weight_combined"])
        self.assertEqual(os.path.getsize(old), align(w.nbytes) + align(ba.nbytes) + align(bb.nbytes))
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"))
        self.assertEqual(rc, 0, out)
        self.assertIn("1 combined file rewritten, 1 .kiln file rewritten", out)
        new = os.path.join(s.wdir, "shared.gc1_weight_combined")
        self.assertFalse(os.path.exists(old), "old combined file still there")
        self.assertEqual(os.path.getsize(new), align(w.nbytes) + align(ba.nbytes), "dropped range not freed")
        meta = meta_of(s.wdir)
        self.assertEqual(set(meta), {sha(w.tobytes()), sha(ba.tobytes())})
        data = read(new)
        for h, e in meta.items():
            self.assertEqual(e["file"], "shared.gc1_weight_combined")
            self.assertEqual(e["offset"] % 512, 0)
            self.assertEqual(sha(data[e["offset"]:e["offset"] + e["length"]]), h)
        s.check_runs("a", "after compaction")
        # b.kiln was not kept: its weight is gone, and it says so.
        rc, out = kiln("run", s.kiln("b"), "--input", "0=" + os.path.join(s.d, "x.npy"))
        self.assertEqual(rc, 1, out)
        # A second compaction names the next file.
        s2 = Store(self, "gc2b", 2, {**weights_ab(3), "c": weights_ab(4)["a"]}, model_name="m")
        rc, out = kiln("weights", "gc", s2.wdir, "--keep", s2.kiln("a"), "--keep", s2.kiln("c"))
        self.assertEqual(rc, 0, out)
        self.assertTrue(os.path.exists(os.path.join(s2.wdir, "m.gc1_weight_combined")), os.listdir(s2.wdir))
        rc, out = kiln("weights", "gc", s2.wdir, "--keep", s2.kiln("c"))
        self.assertEqual(rc, 0, out)
        self.assertEqual(sorted(f for f in os.listdir(s2.wdir) if f.endswith("_weight_combined")),
                         ["m.gc2_weight_combined"])
        s2.check_runs("c", "after two compactions")

    def test_rerun_after_a_crash_between_models_and_meta(self):
        """The state a kill -9 leaves in step (b): the new combined file
        written, a.kiln rewritten to it, b.kiln and meta.json not yet. Both
        models run; gc run again ends with one combined file."""
        rng = np.random.default_rng(12)
        shared = rng.standard_normal((K, N)).astype(np.float32)
        ws = {"c": (rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)),
              "a": (shared, rng.standard_normal(N).astype(np.float32)),
              "b": (shared, rng.standard_normal(N).astype(np.float32))}
        s = Store(self, "resume", 2, ws, model_name="m")
        old = {f: read(os.path.join(s.wdir, f)) for f in ("meta.json", "m_weight_combined")}
        old_b = read(s.kiln("b"))
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"), "--keep", s.kiln("b"))
        self.assertEqual(rc, 0, out)
        self.assertIn("2 .kiln files rewritten", out)
        for f, data in old.items():
            with open(os.path.join(s.wdir, f), "wb") as fh:
                fh.write(data)
        with open(s.kiln("b"), "wb") as fh:
            fh.write(old_b)
        for m in "ab":
            s.check_runs(m, "in the interrupted state")
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"), "--keep", s.kiln("b"))
        self.assertEqual(rc, 0, out)
        combined = [f for f in os.listdir(s.wdir) if f.endswith("_weight_combined")]
        self.assertEqual(len(combined), 1, combined)
        want = {sha(a.tobytes()) for a in (shared, ws["a"][1], ws["b"][1])}
        meta = meta_of(s.wdir)
        self.assertEqual(set(meta), want)
        self.assertEqual({e["file"] for e in meta.values()}, set(combined))
        self.assertEqual(os.path.getsize(os.path.join(s.wdir, combined[0])), align(shared.nbytes) + 2 * align(N * 4))
        for m in "ab":
            s.check_runs(m, "after the second gc")

    def test_dry_run_changes_nothing(self):
        for mode in (1, 2):
            s = Store(self, f"dry{mode}", mode, weights_ab(5), model_name="shared")
            before = snapshot(s.d)
            rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"), "--dry-run")
            self.assertEqual(rc, 0, out)
            self.assertIn("dry run, nothing changed:", out)
            self.assertIn("would ", out)
            self.assertEqual(snapshot(s.d), before, f"mode {mode}: --dry-run changed something")

    def test_kept_model_with_missing_weight_fails_and_changes_nothing(self):
        s = Store(self, "missing", 1, weights_ab(6))
        _, ba = s.w["a"]
        h = sha(ba.tobytes())
        os.remove(os.path.join(s.wdir, "weight_" + h))
        before = snapshot(s.d)
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"), "--keep", s.kiln("b"))
        self.assertEqual(rc, 1, out)
        self.assertIn("kiln: error:", out)
        self.assertIn(s.kiln("a"), out)
        self.assertIn(h, out)
        self.assertEqual(snapshot(s.d), before, "a failed gc changed the directory")
        # The same when meta.json does not record it.
        s = Store(self, "unrecorded", 1, weights_ab(7))
        mp = os.path.join(s.wdir, "meta.json")
        with open(mp) as f:
            m = json.load(f)
        h = sha(s.w["b"][1].tobytes())
        del m["weights"][h]
        with open(mp, "w") as f:
            json.dump(m, f)
        before = snapshot(s.d)
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("b"))
        self.assertEqual(rc, 1, out)
        self.assertIn(s.kiln("b"), out)
        self.assertIn(h, out)
        self.assertIn("does not record", out)
        self.assertEqual(snapshot(s.d), before)

    def test_gc_without_keep_is_refused(self):
        s = Store(self, "nokeep", 1, weights_ab(8))
        before = snapshot(s.d)
        rc, out = kiln("weights", "gc", s.wdir)
        self.assertEqual(rc, 1, out)
        self.assertIn("--keep", out)
        self.assertIn("refusing", out)
        self.assertEqual(snapshot(s.d), before)

    def test_non_regular_weight_file_is_refused(self):
        s = Store(self, "fifo", 1, weights_ab(9))
        os.mkfifo(os.path.join(s.wdir, "weight_" + "0" * 64))
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"))
        self.assertEqual(rc, 1, out)
        self.assertIn("FIFO", out)
        self.assertEqual(len([f for f in os.listdir(s.wdir) if f.startswith("weight_")]), 4)
        # Other files are never touched.
        os.remove(os.path.join(s.wdir, "weight_" + "0" * 64))
        with open(os.path.join(s.wdir, "notes.txt"), "w") as f:
            f.write("mine")
        rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"))
        self.assertEqual(rc, 0, out)
        self.assertTrue(os.path.exists(os.path.join(s.wdir, "notes.txt")))


class GcKillLoop(unittest.TestCase):
    """kill -9 at random moments of gc (mode 2 compaction of a few MB plus
    mode 1 removals): the kept models always run; a final gc completes."""

    def test_kill_9_loop(self):
        rng = np.random.default_rng(11)
        k, n = 512, 512  # 1 MiB matrices
        mat = lambda: rng.standard_normal((k, n)).astype(np.float32)  # noqa: E731
        vec = lambda: rng.standard_normal(n).astype(np.float32)  # noqa: E731
        shared = mat()
        # Compiled in this order into m_weight_combined: c (not kept) first,
        # so that dropping its own ranges moves those of a and b.
        ws = {"c": (mat(), vec()), "a": (shared, vec()), "b": (shared, vec())}
        template = Store(self, "kill_template", 2, ws, model_name="m")
        # d (mode 1) is not kept: its files go.
        onnx_d = os.path.join(template.d, "d.onnx")
        affine_model(onnx_d, rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32))
        rc, out = kiln("compile", "--model", onnx_d, "--output", os.path.join(template.d, "d.kiln"),
                       "--external-weight", 1, "--external-weight-dir", template.wdir)
        self.assertEqual(rc, 0, out)
        template.x = np.random.default_rng(3).standard_normal((2, k)).astype(np.float32)
        np.save(os.path.join(template.d, "x.npy"), template.x)
        work = os.path.join(WORK, "kill")

        def setup():
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(template.d, work)
            s = Store.__new__(Store)
            s.tc, s.d, s.wdir, s.w, s.x = self, work, os.path.join(work, "store"), ws, template.x
            return s

        def argv(s):
            return [KILN, "weights", "gc", s.wdir, "--keep", s.kiln("a"), "--keep", s.kiln("b")]

        durations = []
        for _ in range(3):
            s = setup()
            t0 = time.monotonic()
            p = subprocess.run(argv(s), capture_output=True, text=True)
            durations.append(time.monotonic() - t0)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        span = sorted(durations)[1]
        print(f"\n  gc takes {span * 1e3:.1f} ms", file=sys.stderr)
        rnd = random.Random(int(os.environ.get("KILN_CRASH_SEED", "9")))
        killed = mid_write = 0
        deadline = time.monotonic() + 40
        it = 0
        # The kill lands at a random point of a typical gc's time; on a loaded machine gc's time
        # wanders, so the window follows it: earlier after a gc that finished first, later
        # after one killed before it began writing.
        factor = 1.0
        while it < 30 and time.monotonic() < deadline:
            s = setup()
            p = subprocess.Popen(argv(s), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0.4, 1.05) * span * factor)
            was_killed = p.poll() is None
            if was_killed:
                p.kill()
                killed += 1
            p.wait()
            began = any(".gc" in f or ".tmp." in f for f in os.listdir(s.wdir))
            if p.returncode < 0 and began:
                mid_write += 1  # killed once it had begun writing
            if not was_killed:
                factor = max(factor * 0.8, 0.1)
            elif not began:
                factor = min(factor * 1.1, 2.0)
            for m in "ab":
                s.check_runs(m, f"iteration {it} (killed={p.returncode < 0})")
            rc, out = kiln("weights", "gc", s.wdir, "--keep", s.kiln("a"), "--keep", s.kiln("b"))
            self.assertEqual(rc, 0, f"iteration {it}: {out}")
            self.check_clean(s, f"iteration {it}")
            for m in "ab":
                s.check_runs(m, f"iteration {it} after the final gc")
            it += 1
        print(f"  {killed} of {it} gc runs killed, {mid_write} after they began writing", file=sys.stderr)
        self.assertGreater(killed, it // 3, "gc finished before the kill: the loop tested little")
        self.assertGreater(mid_write, 2, "no kill hit gc while it wrote: the loop tested little")

    def check_clean(self, s, msg):
        (wa, ba), (wb, bb) = s.w["a"], s.w["b"]
        kept = {sha(a.tobytes()): a.nbytes for a in (wa, ba, wb, bb)}  # (a and b share their matrix)
        want = set(kept)
        meta = meta_of(s.wdir)
        self.assertEqual(set(meta), want, msg)
        files = sorted(f for f in os.listdir(s.wdir) if f not in ("meta.json", "meta.json.lock"))
        self.assertEqual(len(files), 1, f"{msg}: {files}")
        self.assertTrue(files[0].endswith("_weight_combined"), f"{msg}: {files}")
        self.assertEqual({e["file"] for e in meta.values()}, {files[0]}, msg)
        self.assertEqual(os.path.getsize(os.path.join(s.wdir, files[0])),
                         sum(align(v) for v in kept.values()), msg)
        data = read(os.path.join(s.wdir, files[0]))
        for h, e in meta.items():
            self.assertEqual(sha(data[e["offset"]:e["offset"] + e["length"]]), h, msg)
        for m in "ab":
            rc, out = kiln("inspect", s.kiln(m), "--json")
            self.assertEqual(rc, 0, out)
            for ext in json.loads(out)["external_weights"]:
                self.assertEqual(ext["path"], files[0], f"{msg}: {m}.kiln")


def main():
    global KILN, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args, rest = ap.parse_known_args()
    KILN, WORK = os.path.abspath(args.kiln), os.path.abspath(args.work)
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
