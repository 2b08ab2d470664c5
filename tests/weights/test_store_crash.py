#!/usr/bin/python3
"""The external-weight store under kill -9, a full disk and a read-only mount
(issue 9 items 9 and 11).

  - kill -9 loop: compiles in modes 0, 1 and 2 (into a store, and offline
    through tmp_weight_<pid>_<n>) killed at random moments; and pairs of
    concurrent compiles into one store, one of them killed (the other must
    finish). After every kill
    nothing is half-written under a final name (every meta.json entry and
    every weight_<sha> holds the bytes its hash names; the .kiln, when there,
    loads); after the next compile no temporary, append record or
    tmp_weight_* directory is left and combined files end where their last
    recorded weight ends.
  - disk full (a small tmpfs): a failing compile exits 1 saying why
    ("No space left on device"), leaves the store consistent with nothing
    appended, and removes its temporaries; once space is back the same store
    works.
  - read-only store (a read-only bind mount): a compile whose weights are all
    there succeeds and writes nothing; one that needs new weights fails
    naming the directory.

Mounts need root (CAP_SYS_ADMIN); without it those tests are skipped with the
reason. Usage: test_store_crash.py --kiln build/kiln --work DIR [unittest args]
"""
import argparse
import hashlib
import json
import os
import random
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


def kiln(*args, env=None, timeout=120):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout + p.stderr


def sha(b):
    return hashlib.sha256(b).hexdigest()


def read(p, mode="rb"):
    with open(p, mode) as f:
        return f.read()


def make_model(path, seed, n_shared=6, n_own=4, size=96 * 1024):
    """A chain of Adds over float32 vectors: n_shared weights common to every
    variant, n_own that depend on `seed` (so each variant has new weights to
    write). ~1 MB of weights."""
    n = size // 4
    nodes, inits = [], []
    x = "x"
    for i in range(n_shared + n_own):
        rng = np.random.default_rng(1000 + i if i < n_shared else seed * 100 + i)
        w = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Add", [x, f"w{i}"], [f"a{i}"]))
        x = f"a{i}"
    g = helper.make_graph(nodes, f"chain{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def store_problems(wdir, strict):
    """What is wrong with a weight directory. Always: every meta.json entry
    names a regular weight file whose range hashes to the entry's key, and
    every weight_<sha> hashes to its name (nothing half-written under a final
    name). `strict` (after a completed compile): also no temporary, no append
    record, and each combined file ends at its last recorded weight (512-byte
    aligned)."""
    errs = []
    if not os.path.isdir(wdir):
        return errs
    names = os.listdir(wdir)
    meta = {}
    if "meta.json" in names:
        try:
            m = json.loads(read(os.path.join(wdir, "meta.json"), "r"))
            meta = m["weights"]
        except Exception as e:  # noqa: BLE001
            return [f"meta.json unreadable: {e}"]
    ends = {}
    for h, e in meta.items():
        p = os.path.join(wdir, e["file"])
        if not os.path.isfile(p):
            errs.append(f"entry {h[:12]}: {e['file']} missing")
            continue
        with open(p, "rb") as f:
            f.seek(e["offset"])
            b = f.read(e["length"])
        if sha(b) != h:
            errs.append(f"entry {h[:12]}: {e['file']} [{e['offset']}, +{e['length']}) holds other bytes")
        ends[e["file"]] = max(ends.get(e["file"], 0), e["offset"] + e["length"])
    for f in names:
        p = os.path.join(wdir, f)
        if f.startswith("weight_") and ".tmp." not in f and sha(read(p)) != f[7:]:
            errs.append(f"{f} does not hash to its name (half-written under its final name?)")
        if strict and (".tmp." in f or f == "meta.json.append"):
            errs.append(f"left after a completed compile: {f}")
        if strict and f.endswith("_weight_combined") and ".tmp." not in f:
            want = (ends.get(f, 0) + 511) // 512 * 512
            if os.path.getsize(p) != want:
                errs.append(f"{f} is {os.path.getsize(p)} bytes, its last recorded weight ends at {want}")
    return errs


def loads(kiln_path, wdir=None):
    args = ["inspect", kiln_path]
    rc, out = kiln(*args)
    if rc != 0:
        return out
    if wdir is not None:
        rc, out = kiln("run", kiln_path, "--weight-dir", wdir, "--verify-weights")
        if rc != 0:
            return out
    return None


def mount(*args):
    p = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stderr.strip() or f"mount exited {p.returncode}")


def umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


class KillLoop(unittest.TestCase):
    """kill -9 at random moments of compiles, modes 0, 1, 2."""

    def setUp(self):
        self.d = os.path.join(WORK, "kill")
        shutil.rmtree(self.d, ignore_errors=True)
        os.makedirs(self.d)
        self.models = []
        for seed in range(6):
            p = os.path.join(self.d, f"m{seed}.onnx")
            make_model(p, seed, size=512 * 1024)  # 5 MB each
            self.models.append(p)
        # The time a whole compile takes bounds the random kill moment; the
        # moment its first temporary appears starts the window in which a
        # kill interrupts a write (polled, so only roughly). Median of three
        # probes: the first compile runs with cold caches.
        probes = sorted((self.probe(i) for i in range(3)), key=lambda w: w[0])
        whole, first_write = probes[1]
        self.span = max(0.05, whole * 1.2)
        self.write_window = (min(first_write if first_write is not None else whole / 2, whole * 0.9), whole * 0.95)
        print(f"\n  compile {whole * 1e3:.0f} ms, first temporary at {(first_write or 0) * 1e3:.0f} ms", file=sys.stderr)

    def probe(self, i):
        """(seconds a compile takes, seconds until its first temporary)."""
        probe_dir, probe_work = os.path.join(self.d, f"probe{i}"), os.path.join(self.d, f"probe{i}_work")
        os.makedirs(probe_work)
        t0 = time.monotonic()
        p = subprocess.Popen([KILN, "compile", "--model", self.models[i], "--output",
                              os.path.join(self.d, f"probe{i}.kiln"), "--external-weight", "2",
                              "--external-weight-dir", probe_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=dict(os.environ, KILN_WORK_PATH=probe_work))
        first_write = None
        while p.poll() is None:
            if first_write is None and self.leftovers(probe_dir, probe_work, self.d):
                first_write = time.monotonic() - t0
            time.sleep(0.001)
        out = p.communicate()[0]
        self.assertEqual(p.returncode, 0, out)
        return time.monotonic() - t0, first_write

    @staticmethod
    def leftovers(wdir, work, out_dir):
        """Whether a kill left something for the next compile to clean."""
        names = (os.listdir(wdir) if os.path.isdir(wdir) else []) + os.listdir(work) + os.listdir(out_dir)
        return any(".tmp." in f or f == "meta.json.append" or f.startswith("tmp_weight_") for f in names)

    def loop(self, mode, offline, iterations, rnd, min_kills=7):
        tag = f"mode{mode}_{'offline' if offline else 'store'}"
        out_dir = os.path.join(self.d, tag)
        os.makedirs(out_dir, exist_ok=True)
        work = os.path.join(self.d, tag + "_work")
        os.makedirs(work, exist_ok=True)
        wdir = os.path.join(out_dir, "weight")
        out = os.path.join(out_dir, "model.kiln")
        env = dict(os.environ, KILN_WORK_PATH=work)
        killed = 0
        span, window = self.span, self.write_window
        it = 0
        # At least `iterations` compiles, and more (up to three times as many)
        # until `min_kills` of them were cut short: the probe's timing is only
        # an estimate on a loaded machine (parallel tests, a sanitizer build),
        # so a compile that finishes before its kill shortens the next wait.
        while it < iterations or (killed < min_kills and it < 3 * iterations):
            # Every other kill is aimed at the write window: machines differ
            # in how much of a compile is writing, and the loop must hit
            # writes on every one of them.
            aimed = it % 2 == 1
            model = rnd.choice(self.models)
            argv = [KILN, "compile", "--model", model, "--output", out, "--external-weight", str(mode),
                    "--model-name", "m"]
            if mode != 0 and not offline:
                argv += ["--external-weight-dir", wdir]
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            time.sleep(rnd.uniform(*window) if aimed else rnd.uniform(0.2, 1.0) * span)
            if p.poll() is None:
                p.kill()
                killed += 1
            else:
                span *= 0.8
                window = (window[0] * 0.8, window[1] * 0.8)
            p.wait()
            it += 1
            if p.returncode < 0 and self.leftovers(wdir, work, out_dir):
                self.interrupted_writes += 1
            errs = store_problems(wdir, strict=False)
            self.assertEqual(errs, [], f"{tag} iteration {it - 1} (killed={p.returncode < 0})")
            if os.path.exists(out):
                # The .kiln under its final name is whole (its weights may be
                # those of the previous compile when this one was killed).
                rc, o = kiln("inspect", out)
                self.assertEqual(rc, 0, f"{tag} iteration {it - 1}: {o}")
        # One compile to completion cleans up whatever the kills left.
        argv = ["compile", "--model", self.models[0], "--output", out, "--external-weight", mode, "--model-name", "m"]
        if mode != 0 and not offline:
            argv += ["--external-weight-dir", wdir]
        rc, o = kiln(*argv, env={"KILN_WORK_PATH": work})
        self.assertEqual(rc, 0, o)
        self.assertEqual(store_problems(wdir, strict=True), [], tag)
        self.assertEqual(os.listdir(work), [], f"{tag}: left in KILN_WORK_PATH")
        err = loads(out, wdir if mode != 0 else None)
        self.assertIsNone(err, err)
        return killed

    def test_kill_9_one_of_two_concurrent_compiles(self):
        """Two compiles into one store, one killed: the other (waiting for the
        lock, or holding it) finishes, and its temporaries are not taken for
        stale ones."""
        rnd = random.Random(int(os.environ.get("KILN_CRASH_SEED", "9")) + 1)
        for mode in (1, 2):
            wdir = os.path.join(self.d, f"conc{mode}", "weight")
            for it in range(8):
                procs = []
                for j in range(2):
                    argv = [KILN, "compile", "--model", rnd.choice(self.models), "--output",
                            os.path.join(self.d, f"conc{mode}", f"o{j}.kiln"), "--external-weight", str(mode),
                            "--external-weight-dir", wdir, "--model-name", f"m{j}"]
                    procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                victim = rnd.randrange(2)
                time.sleep(rnd.uniform(0.2, 1.0) * self.span)
                procs[victim].kill()
                for j, p in enumerate(procs):
                    out = p.communicate()[0]
                    if j != victim:
                        self.assertEqual(p.returncode, 0, f"mode {mode} iteration {it}: the survivor failed: {out}")
                self.assertEqual(store_problems(wdir, strict=False), [], f"mode {mode} iteration {it}")
                err = loads(os.path.join(self.d, f"conc{mode}", f"o{1 - victim}.kiln"), wdir)
                self.assertIsNone(err, err)
            rc, o = kiln("compile", "--model", self.models[0], "--output", os.path.join(self.d, "final.kiln"),
                         "--external-weight", mode, "--external-weight-dir", wdir, "--model-name", "m0")
            self.assertEqual(rc, 0, o)
            self.assertEqual(store_problems(wdir, strict=True), [], f"mode {mode}")

    def test_kill_9_loop(self):
        rnd = random.Random(int(os.environ.get("KILN_CRASH_SEED", "9")))
        killed = 0
        self.interrupted_writes = 0
        for mode in (0, 1, 2):
            for offline in ((False,) if mode == 0 else (False, True)):
                killed += self.loop(mode, offline, 12, rnd)
        # The test only means something if most compiles were cut short.
        print(f"\n  {killed} compiles killed, {self.interrupted_writes} while writing", file=sys.stderr)
        self.assertGreater(killed, 25, "compiles finished before the kill: the loop tested nothing")
        self.assertGreater(self.interrupted_writes, 3, "no kill hit a write: the loop tested nothing")


class DiskFull(unittest.TestCase):
    """A small tmpfs: compiles that run out of space fail cleanly."""

    def setUp(self):
        self.mnt = os.path.join(WORK, "full")
        os.makedirs(self.mnt, exist_ok=True)
        umount(self.mnt)
        err = mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", self.mnt)
        if err:
            self.skipTest(f"cannot mount a tmpfs ({err})")
        self.src = os.path.join(WORK, "full_models")
        os.makedirs(self.src, exist_ok=True)
        self.small = os.path.join(self.src, "small.onnx")
        self.big = os.path.join(self.src, "big.onnx")
        make_model(self.small, 0, n_shared=2, n_own=1, size=64 * 1024)      # 192 KB
        make_model(self.big, 1, n_shared=2, n_own=40, size=96 * 1024)       # ~4 MB: does not fit

    def tearDown(self):
        umount(self.mnt)

    def filler(self, mb):
        with open(os.path.join(self.mnt, "filler"), "wb") as f:
            f.write(b"\0" * (mb << 20))

    def test_disk_full(self):
        for mode in (1, 2):
            with self.subTest(mode=mode):
                for f in os.listdir(self.mnt):
                    p = os.path.join(self.mnt, f)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
                wdir = os.path.join(self.mnt, "weight")
                out = os.path.join(self.mnt, "m.kiln")
                common = ["--external-weight", mode, "--external-weight-dir", wdir, "--model-name", "m"]
                rc, o = kiln("compile", "--model", self.small, "--output", out, *common)
                self.assertEqual(rc, 0, o)
                before = {f: read(os.path.join(wdir, f)) for f in os.listdir(wdir)
                          if f != "meta.json.lock"}
                rc, o = kiln("compile", "--model", self.big, "--output", out, *common)
                self.assertEqual(rc, 1, o)
                self.assertIn("No space left on device", o)
                self.assertEqual(store_problems(wdir, strict=True), [])
                if mode == 2:
                    # The failed append was truncated back; meta.json unchanged.
                    for f in ("m_weight_combined", "meta.json"):
                        self.assertEqual(read(os.path.join(wdir, f)), before[f], f)
                self.assertEqual(loads(out, wdir), None)  # the previous .kiln still loads
                # Space back: the same store works.
                for f in os.listdir(self.mnt):
                    if f not in ("weight",):
                        os.remove(os.path.join(self.mnt, f))
                for f in os.listdir(wdir):
                    if f.startswith("weight_"):
                        os.remove(os.path.join(wdir, f))  # orphans of the failed compile go too
                rc, o = kiln("compile", "--model", self.small, "--output", out, *common)
                self.assertEqual(rc, 0, o)
                self.assertEqual(store_problems(wdir, strict=True), [])
                self.assertIsNone(loads(out, wdir))

    def test_disk_full_offline_temp_dir(self):
        # tmp_weight_<pid>_<n> on the full disk: removed when the compile fails.
        work = os.path.join(self.mnt, "work")
        os.makedirs(work)
        out_dir = os.path.join(WORK, "full_out")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        for mode in (1, 2):
            rc, o = kiln("compile", "--model", self.big, "--output", os.path.join(out_dir, "m.kiln"),
                         "--external-weight", mode, env={"KILN_WORK_PATH": work})
            self.assertEqual(rc, 1, o)
            self.assertIn("No space left on device", o)
            self.assertEqual(os.listdir(work), [], f"mode {mode}: temporary weight directory left")
            self.assertFalse(os.path.exists(os.path.join(out_dir, "m.kiln")))

    def test_disk_full_filled_store_meta_write(self):
        # The weights fit but meta.json does not: nothing new is referenced,
        # the append is undone.
        wdir = os.path.join(self.mnt, "weight")
        common = ["--external-weight", 2, "--external-weight-dir", wdir, "--model-name", "m"]
        rc, o = kiln("compile", "--model", self.small, "--output", os.path.join(WORK, "fm.kiln"), *common)
        self.assertEqual(rc, 0, o)
        combined = os.path.join(wdir, "m_weight_combined")
        size = os.path.getsize(combined)
        st = os.statvfs(self.mnt)
        free = st.f_bavail * st.f_frsize
        # Leave room for less than a second model's new weights.
        with open(os.path.join(self.mnt, "filler"), "wb") as f:
            f.write(b"\0" * max(0, free - 150 * 1024))
        other = os.path.join(self.src, "other.onnx")
        make_model(other, 7, n_shared=0, n_own=3, size=64 * 1024)  # 192 KB new
        rc, o = kiln("compile", "--model", other, "--output", os.path.join(WORK, "fm2.kiln"), *common)
        self.assertEqual(rc, 1, o)
        self.assertIn("No space left on device", o)
        self.assertEqual(os.path.getsize(combined), size)
        self.assertEqual(store_problems(wdir, strict=True), [])


class ReadOnlyStore(unittest.TestCase):
    """A store on a read-only bind mount."""

    def setUp(self):
        self.d = os.path.join(WORK, "ro")
        self.ro = os.path.join(self.d, "ro")
        umount(self.ro)
        shutil.rmtree(self.d, ignore_errors=True)
        os.makedirs(self.ro)
        self.m1, self.m2 = os.path.join(self.d, "a.onnx"), os.path.join(self.d, "b.onnx")
        make_model(self.m1, 0, n_own=2)
        make_model(self.m2, 1, n_own=2)

    def tearDown(self):
        umount(self.ro)

    def mount_ro(self, src):
        err = mount("--bind", src, self.ro) or mount("-o", "remount,bind,ro", self.ro)
        if err:
            umount(self.ro)
            self.skipTest(f"cannot make a read-only bind mount ({err})")

    def snapshot(self, d):
        return {f: (os.stat(os.path.join(d, f)).st_mtime_ns, os.path.getsize(os.path.join(d, f)))
                for f in os.listdir(d)}

    def test_compile_into_read_only_store(self):
        for mode in (1, 2):
            for drop_lock in (False, True):
                with self.subTest(mode=mode, drop_lock=drop_lock):
                    umount(self.ro)
                    src = os.path.join(self.d, f"store{mode}{int(drop_lock)}")
                    shutil.rmtree(src, ignore_errors=True)
                    common = ["--external-weight", mode, "--model-name", "m"]
                    rc, o = kiln("compile", "--model", self.m1, "--output", os.path.join(self.d, "w.kiln"),
                                 "--external-weight-dir", src, *common)
                    self.assertEqual(rc, 0, o)
                    if drop_lock:
                        os.remove(os.path.join(src, "meta.json.lock"))
                    self.mount_ro(src)
                    snap = self.snapshot(src)
                    k = os.path.join(self.d, "ro.kiln")
                    rc, o = kiln("compile", "--model", self.m1, "--output", k, "--external-weight-dir", self.ro,
                                 *common)
                    self.assertEqual(rc, 0, o)
                    self.assertIn("0 written", o)
                    self.assertIsNone(loads(k, self.ro))
                    # New weights cannot go in: a clear error naming the directory.
                    rc, o = kiln("compile", "--model", self.m2, "--output", os.path.join(self.d, "ro2.kiln"),
                                 "--external-weight-dir", self.ro, *common)
                    self.assertEqual(rc, 1, o)
                    self.assertIn(self.ro, o)
                    self.assertIn("read-only", o)
                    self.assertEqual(self.snapshot(src), snap, "the read-only store changed")
                    umount(self.ro)


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
