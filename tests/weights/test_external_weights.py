#!/usr/bin/python3
"""External weights end to end through the kiln CLI, in real processes:

  - modes 0, 1 and 2 (and map / copy / verified loads) give bit-identical outputs
    on a real model (torchvision mobilenet_v2, exported offline) and on a small
    ONNX model built here;
  - several `kiln compile` processes writing into one --external-weight-dir at
    once (mode 1, mode 2, and both mixed) all succeed, write every distinct weight
    exactly once, and leave a consistent meta.json;
  - offline compiles (no --external-weight-dir) go through a tmp_weight_* directory
    under $KILN_WORK_PATH, end up in <output dir>/weight, and leave no temporary;
  - missing, truncated and tampered weight files fail `kiln run` with exit 1 and
    the file named (tampering needs --verify-weights);
  - --external-weight 3 is refused.

  /usr/bin/python3 tests/weights/test_external_weights.py --kiln build/kiln --work DIR
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kiln(*args, env=None, cwd=None):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120,
                       env=env, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def written_count(out):
    m = re.search(r"(\d+) written", out)
    assert m, f"no 'N written' line in:\n{out}"
    return int(m.group(1))


def mlp_model(path, weights, relu_after=None, batch=2):
    """x [batch, K] -> for each (W, b): MatMul, Add (and Relu, except where
    relu_after excludes it). Returns nothing; weights are initializers."""
    nodes, inits = [], []
    cur = "x"
    for i, (w, b) in enumerate(weights):
        wn, bn = f"w{i}", f"b{i}"
        inits += [numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)]
        nodes += [helper.make_node("MatMul", [cur, wn], [f"mm{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"mm{i}", bn], [f"add{i}"], name=f"add{i}")]
        cur = f"add{i}"
        if relu_after is None or i in relu_after:
            nodes.append(helper.make_node("Relu", [cur], [f"relu{i}"], name=f"relu{i}"))
            cur = f"relu{i}"
    k, n = weights[0][0].shape[0], weights[-1][0].shape[1]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, k])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [batch, n])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def mlp_reference(x, weights, relu_after=None):
    y = x.astype(np.float64)
    for i, (w, b) in enumerate(weights):
        y = y @ w + b
        if relu_after is None or i in relu_after:
            y = np.maximum(y, 0)
    return y


def conv_model(path):
    """A small CNN with the ops real models use (Conv, BN, Relu, MaxPool, Reshape
    with a constant shape, Gemm), so shape-carrying constants go external too."""
    rng = np.random.default_rng(7)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (f(8, 3, 3, 3) * 0.3, "cw"), (f(8), "cb"), (np.abs(f(8)) + 0.5, "s"), (f(8), "sh"), (f(8) * 0.1, "mean"),
        (np.abs(f(8)) + 0.5, "var"), (f(8 * 4 * 4, 10) * 0.1, "gw"), (f(10), "gb"),
        (np.array([1, -1], np.int64), "shape")]]
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "sh", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["flat"]),
             helper.make_node("Gemm", ["flat", "gw", "gb"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def check_weight_dir(testcase, wdir):
    """meta.json is well formed, every entry's file exists, covers its range and
    holds bytes with that SHA-256; mode-2 offsets are 512-aligned. Returns meta."""
    meta = json.loads(read(os.path.join(wdir, "meta.json")))
    testcase.assertEqual(meta["format"], "kiln-weights")
    for h, e in meta["weights"].items():
        path = os.path.join(wdir, e["file"])
        testcase.assertTrue(os.path.isfile(path), f"{h}: {e['file']} missing")
        with open(path, "rb") as f:
            f.seek(e["offset"])
            data = f.read(e["length"])
        testcase.assertEqual(len(data), e["length"], f"{e['file']} too short for {h}")
        testcase.assertEqual(sha256(data), h, f"{e['file']} @{e['offset']} does not hold {h}")
        if e["file"].startswith("weight_"):
            testcase.assertEqual(e["file"], "weight_" + h)
            testcase.assertEqual(e["offset"], 0)
        else:
            testcase.assertTrue(e["file"].endswith("_weight_combined"), e["file"])
            testcase.assertEqual(e["offset"] % 512, 0, e)
    leftovers = [f for f in os.listdir(wdir) if ".tmp" in f]
    testcase.assertEqual(leftovers, [], "temporary files left in the weight directory")
    return meta


def run_model(testcase, kfile, x_path, out_dir, *extra):
    rc, out = kiln("run", kfile, "--input", "0=" + x_path, "--output-dir", out_dir, *extra)
    testcase.assertEqual(rc, 0, out)
    return np.load(os.path.join(out_dir, "output_0.npy"))


class ExternalWeights(unittest.TestCase):
    def assertCleanError(self, rc, out, *needles):
        self.assertEqual(rc, 1, f"expected exit 1 (clean error), got {rc}:\n{out}")
        self.assertIn("error", out)
        for n in needles:
            self.assertIn(n, out)

    def compile_modes(self, onnx_path, name, extra=()):
        """Compiles onnx_path in modes 0, 1, 2 into WORK/name/m<mode>/model.kiln."""
        base = fresh(name)
        out = {}
        for mode in (0, 1, 2):
            d = os.path.join(base, f"m{mode}")
            os.makedirs(d)
            k = os.path.join(d, "model.kiln")
            rc, log = kiln("compile", "--model", onnx_path, "--output", k, "--external-weight", mode, *extra)
            self.assertEqual(rc, 0, log)
            out[mode] = k
            if mode:
                meta = check_weight_dir(self, os.path.join(d, "weight"))
                rc, js = kiln("inspect", k, "--json")
                self.assertEqual(rc, 0, js)
                ext = json.loads(js)["external_weights"]
                self.assertGreater(len(ext), 0)
                for w in ext:
                    self.assertFalse(os.path.isabs(w["path"]), w)
                    self.assertIn(w["id"], meta["weights"])
                    self.assertEqual(meta["weights"][w["id"]]["file"], w["path"])
                    self.assertEqual(meta["weights"][w["id"]]["offset"], w["offset"])
                files = {w["path"] for w in ext}
                if mode == 2:
                    self.assertEqual(files, {"model_weight_combined"})
                else:
                    self.assertTrue(all(f.startswith("weight_") for f in files), files)
                # The .kiln file no longer carries the weights.
                self.assertLess(os.path.getsize(k), os.path.getsize(out[0]))
        return out

    def assert_modes_identical(self, kfiles, x_path, name):
        outs = {}
        for mode, k in kfiles.items():
            variants = [()] if mode == 0 else [(), ("--weight-load", "map"), ("--weight-load", "copy"),
                                                ("--weight-load", "copy", "--weight-chunk-mib", "0.01"),
                                                ("--weight-load", "staged"),
                                                ("--weight-load", "staged", "--weight-chunk-mib", "0.01"),
                                                ("--verify-weights",)]
            for i, extra in enumerate(variants):
                outs[(mode, extra)] = run_model(self, k, x_path, os.path.join(WORK, name, f"out_{mode}_{i}"), *extra)
        ref = outs[(0, ())]
        for key, y in outs.items():
            self.assertTrue(np.array_equal(y, ref), f"mode {key[0]} {' '.join(key[1])} differs from mode 0: "
                                                    f"max |diff| {np.abs(y - ref).max()}")
        return ref

    def test_modes_identical_on_mobilenet_v2(self):
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
        except ImportError as e:
            self.skipTest(f"torch/torchvision unavailable: {e}")
        src = os.path.join(WORK, "mobilenet_v2_export")
        if not os.path.exists(os.path.join(src, "expected.npy")):
            p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_torchvision.py"),
                                "--model", "mobilenet_v2", "--out", src], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        kfiles = self.compile_modes(os.path.join(src, "model.onnx"), "mnv2")
        y = self.assert_modes_identical(kfiles, os.path.join(src, "input.npy"), "mnv2")
        np.testing.assert_allclose(y, np.load(os.path.join(src, "expected.npy")), rtol=1e-3, atol=1e-4)

    def test_modes_identical_on_small_cnn(self):
        d = fresh("cnn_src")
        onnx_path = os.path.join(d, "cnn.onnx")
        conv_model(onnx_path)
        x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        kfiles = self.compile_modes(onnx_path, "cnn")
        self.assert_modes_identical(kfiles, os.path.join(d, "x.npy"), "cnn")

    def test_onnx_external_data_to_external_weights(self):
        """An ONNX model whose initializers are ONNX external data compiles to
        modes 1 and 2 with the same results."""
        d = fresh("onnx_ext")
        rng = np.random.default_rng(3)
        weights = [(rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32))]
        model_path = os.path.join(d, "m.onnx")
        mlp_model(model_path, weights)
        m = onnx.load(model_path)
        onnx.save_model(m, model_path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="m.data", size_threshold=0)
        x = rng.standard_normal((2, 64)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        outs = []
        for mode in (0, 1, 2):
            os.makedirs(os.path.join(d, f"out{mode}"))
            k = os.path.join(d, f"out{mode}", "m.kiln")
            rc, log = kiln("compile", "--model", model_path, "--output", k, "--external-weight", mode)
            self.assertEqual(rc, 0, log)
            outs.append(run_model(self, k, os.path.join(d, "x.npy"), os.path.join(d, f"o{mode}")))
        for y in outs[1:]:
            self.assertTrue(np.array_equal(y, outs[0]))
        np.testing.assert_allclose(outs[0], mlp_reference(x, weights), rtol=1e-4, atol=1e-4)

    # ---- concurrent compiles -------------------------------------------------------

    def concurrent(self, name, modes):
        """len(modes) processes compile models sharing weights into one directory at once."""
        d = fresh(name)
        wdir = os.path.join(d, "weights")
        rng = np.random.default_rng(11)
        K = 256
        mk = lambda: (rng.standard_normal((K, K)).astype(np.float32) * 0.06, rng.standard_normal(K).astype(np.float32))
        shared = [mk() for _ in range(4)]  # in every model
        pair = [mk() for _ in range(2)]    # in models 0 and 1 only
        models, distinct = [], set()
        for i in range(len(modes)):
            own = [mk() for _ in range(3)]
            ws = shared[:2] + own[:2] + (pair if i < 2 else []) + shared[2:] + own[2:]
            path = os.path.join(d, f"model{i}.onnx")
            mlp_model(path, ws)
            models.append((path, ws))
            for w, b in ws:
                distinct.add(sha256(w.tobytes()))
                distinct.add(sha256(b.tobytes()))
        procs = []
        for i, ((path, _), mode) in enumerate(zip(models, modes)):
            cmd = [KILN, "compile", "--model", path, "--output", os.path.join(d, f"model{i}.kiln"),
                   "--external-weight", str(mode), "--external-weight-dir", wdir, "--weight-writer-threads", "2"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=120)[0] for p in procs]
        for p, out in zip(procs, outs):
            self.assertEqual(p.returncode, 0, out)
        meta = check_weight_dir(self, wdir)
        self.assertEqual(set(meta["weights"]), distinct)
        total_written = sum(written_count(o) for o in outs)
        self.assertEqual(total_written, len(distinct),
                         "each distinct weight must be written exactly once:\n" + "\n".join(outs))
        # Mode-1 weight files: one per distinct weight written by a mode-1 compile.
        for f in os.listdir(wdir):
            if f.startswith("weight_") and ".tmp" not in f:
                self.assertEqual(sha256(read(os.path.join(wdir, f))), f[len("weight_"):])
        x = rng.standard_normal((2, K)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        for i, (path, ws) in enumerate(models):
            y = run_model(self, os.path.join(d, f"model{i}.kiln"), os.path.join(d, "x.npy"),
                          os.path.join(d, f"out{i}"), "--weight-dir", wdir, "--verify-weights")
            np.testing.assert_allclose(y, mlp_reference(x, ws), rtol=1e-4, atol=1e-3)
        return meta

    def test_concurrent_compiles_mode1(self):
        self.concurrent("conc1", [1, 1, 1, 1])

    def test_concurrent_compiles_mode2(self):
        meta = self.concurrent("conc2", [2, 2, 2, 2])
        self.assertTrue(all(e["file"].endswith("_weight_combined") for e in meta["weights"].values()))

    def test_concurrent_compiles_modes_mixed(self):
        meta = self.concurrent("conc_mixed", [1, 2, 1, 2])
        kinds = {e["file"].startswith("weight_") for e in meta["weights"].values()}
        self.assertEqual(kinds, {True, False})

    def test_sequential_mixing_and_reuse(self):
        """Mode 1 then mode 2 into one directory: the second writes nothing it
        shares; a deleted weight file is written again by the next compile."""
        d = fresh("mix_seq")
        wdir = os.path.join(d, "w")
        rng = np.random.default_rng(5)
        ws = [(rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32))
              for _ in range(3)]
        mlp_model(os.path.join(d, "a.onnx"), ws)
        mlp_model(os.path.join(d, "b.onnx"), ws, relu_after={0})
        rc, out = kiln("compile", "--model", os.path.join(d, "a.onnx"), "--output", os.path.join(d, "a.kiln"),
                       "--external-weight", 1, "--external-weight-dir", wdir)
        self.assertEqual(rc, 0, out)
        self.assertEqual(written_count(out), 6)
        rc, out = kiln("compile", "--model", os.path.join(d, "b.onnx"), "--output", os.path.join(d, "b.kiln"),
                       "--external-weight", 2, "--external-weight-dir", wdir)
        self.assertEqual(rc, 0, out)
        self.assertEqual(written_count(out), 0, out)
        self.assertFalse(os.path.exists(os.path.join(wdir, "b_weight_combined")))
        victim = os.path.join(wdir, "weight_" + sha256(ws[1][0].tobytes()))
        os.remove(victim)
        rc, out = kiln("compile", "--model", os.path.join(d, "b.onnx"), "--output", os.path.join(d, "b.kiln"),
                       "--external-weight", 2, "--external-weight-dir", wdir)
        self.assertEqual(rc, 0, out)
        self.assertEqual(written_count(out), 1, out)
        self.assertTrue(os.path.exists(os.path.join(wdir, "b_weight_combined")))
        # a.kiln still names the deleted file; compiled again it finds the weight
        # in b's combined file and writes nothing.
        rc, out = kiln("compile", "--model", os.path.join(d, "a.onnx"), "--output", os.path.join(d, "a.kiln"),
                       "--external-weight", 1, "--external-weight-dir", wdir)
        self.assertEqual(rc, 0, out)
        self.assertEqual(written_count(out), 0, out)
        self.assertFalse(os.path.exists(victim))
        check_weight_dir(self, wdir)
        x = rng.standard_normal((2, 32)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        for name, ra in (("a", None), ("b", {0})):
            y = run_model(self, os.path.join(d, name + ".kiln"), os.path.join(d, "x.npy"), os.path.join(d, "o" + name),
                          "--weight-dir", wdir)
            np.testing.assert_allclose(y, mlp_reference(x, ws, ra), rtol=1e-4, atol=1e-4)

    # ---- offline compiles: temporary directory and migration -------------------------

    def test_temp_dir_migration(self):
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d = fresh(f"migrate{mode}")
                work_path = os.path.join(d, "kiln_work")
                os.makedirs(work_path)
                cwd = os.path.join(d, "cwd")
                os.makedirs(cwd)
                rng = np.random.default_rng(mode)
                ws = [(rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32))
                      for _ in range(2)]
                onnx_path = os.path.join(d, "m.onnx")
                mlp_model(onnx_path, ws)
                out_dir = os.path.join(d, "out")
                env = dict(os.environ, KILN_WORK_PATH=work_path)
                rc, out = kiln("compile", "--model", onnx_path, "--output", os.path.join(out_dir, "m.kiln"),
                               "--external-weight", mode, env=env, cwd=cwd)
                self.assertEqual(rc, 0, out)
                wdir = os.path.join(out_dir, "weight")
                self.assertIn(wdir, out)
                meta = check_weight_dir(self, wdir)
                self.assertEqual(len(meta["weights"]), 4)
                self.assertEqual(glob.glob(os.path.join(work_path, "*")), [], "temporary weight dir left behind")
                self.assertEqual(os.listdir(cwd), [])
                # Locations are relative: the output directory can move.
                moved = os.path.join(d, "moved")
                shutil.move(out_dir, moved)
                x = rng.standard_normal((2, 16)).astype(np.float32)
                np.save(os.path.join(d, "x.npy"), x)
                y = run_model(self, os.path.join(moved, "m.kiln"), os.path.join(d, "x.npy"), os.path.join(d, "o"))
                np.testing.assert_allclose(y, mlp_reference(x, ws), rtol=1e-4, atol=1e-4)
                # Without KILN_WORK_PATH the temporary goes under the working directory.
                rc, out = kiln("compile", "--model", onnx_path, "--output", os.path.join(out_dir, "m.kiln"),
                               "--external-weight", mode, cwd=cwd)
                self.assertEqual(rc, 0, out)
                self.assertEqual(os.listdir(cwd), [])
                check_weight_dir(self, wdir)

    def test_offline_recompile_of_changed_model(self):
        """Compiling a changed model to the same output (same model name) again:
        the weight directory already holds the old model's files."""
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d = fresh(f"recompile{mode}")
                env = dict(os.environ, KILN_WORK_PATH=d)
                k = os.path.join(d, "out", "m.kiln")
                x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
                np.save(os.path.join(d, "x.npy"), x)
                for version in range(3):
                    rng = np.random.default_rng(100 + version)
                    ws = [(rng.standard_normal((16, 16)).astype(np.float32),
                           rng.standard_normal(16).astype(np.float32)) for _ in range(2 + version)]
                    onnx_path = os.path.join(d, f"v{version}.onnx")
                    mlp_model(onnx_path, ws)
                    rc, out = kiln("compile", "--model", onnx_path, "--output", k, "--external-weight", mode, env=env)
                    self.assertEqual(rc, 0, f"version {version}: {out}")
                    check_weight_dir(self, os.path.join(d, "out", "weight"))
                    y = run_model(self, k, os.path.join(d, "x.npy"), os.path.join(d, f"o{version}"), "--verify-weights")
                    np.testing.assert_allclose(y, mlp_reference(x, ws), rtol=1e-4, atol=1e-4)
                self.assertEqual(glob.glob(os.path.join(d, "tmp_weight_*")), [])

    # ---- damaged weight files ----------------------------------------------------------

    def damaged_setup(self, name, mode):
        d = fresh(name)
        rng = np.random.default_rng(9)
        ws = [(rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32))]
        mlp_model(os.path.join(d, "m.onnx"), ws)
        k = os.path.join(d, "m.kiln")
        rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k, "--external-weight", mode)
        self.assertEqual(rc, 0, out)
        np.save(os.path.join(d, "x.npy"), rng.standard_normal((2, 64)).astype(np.float32))
        rc, js = kiln("inspect", k, "--json")
        w = next(e for e in json.loads(js)["external_weights"] if e["size"] == 64 * 64 * 4)
        return d, k, os.path.join(d, "weight", w["path"]), w

    def test_missing_weight_file(self):
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d, k, f, w = self.damaged_setup(f"missing{mode}", mode)
                os.remove(f)
                for load in ("map", "copy"):
                    rc, out = kiln("run", k, "--input", "0=" + os.path.join(d, "x.npy"), "--weight-load", load)
                    self.assertCleanError(rc, out, os.path.basename(f), w["node"])

    def test_missing_weight_directory(self):
        d, k, f, w = self.damaged_setup("missing_dir", 1)
        rc, out = kiln("run", k, "--input", "0=" + os.path.join(d, "x.npy"), "--weight-dir", os.path.join(d, "nope"))
        self.assertCleanError(rc, out, "nope")

    def test_truncated_weight_file(self):
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d, k, f, w = self.damaged_setup(f"trunc{mode}", mode)
                with open(f, "r+b") as fh:
                    fh.truncate(w["offset"] + w["size"] - 4)
                for load in ("map", "copy"):
                    rc, out = kiln("run", k, "--input", "0=" + os.path.join(d, "x.npy"), "--weight-load", load)
                    self.assertCleanError(rc, out, os.path.basename(f), w["node"])

    def test_tampered_weight_file(self):
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d, k, f, w = self.damaged_setup(f"tamper{mode}", mode)
                data = bytearray(read(f))
                data[w["offset"] + 100] ^= 0x40
                write(f, bytes(data))
                x = os.path.join(d, "x.npy")
                for load in ("map", "copy"):
                    rc, out = kiln("run", k, "--input", "0=" + x, "--weight-load", load, "--verify-weights")
                    self.assertCleanError(rc, out, os.path.basename(f), "SHA-256")
                    # Not verified: the modified bytes are used as they are.
                    rc, out = kiln("run", k, "--input", "0=" + x, "--weight-load", load)
                    self.assertEqual(rc, 0, out)

    def test_recompile_repairs_tampered_weight_file(self):
        """Issue 9 item 8: a flipped byte used to survive every recompile ("0
        written, N already present"). The offline recompile (temporary
        directory + migration) hashes what it reuses and repairs it."""
        for mode in (1, 2):
            with self.subTest(mode=mode):
                d, k, f, w = self.damaged_setup(f"repair{mode}", mode)
                data = bytearray(read(f))
                data[w["offset"] + 100] ^= 0x40
                write(f, bytes(data))
                env = dict(os.environ, KILN_WORK_PATH=d)
                rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k,
                               "--external-weight", mode, env=env)
                self.assertEqual(rc, 0, out)
                self.assertIn("warning", out)
                self.assertIn(os.path.basename(f), out)
                check_weight_dir(self, os.path.join(d, "weight"))
                if mode == 1:
                    self.assertEqual(sha256(read(f)), w["id"])
                rc, out = kiln("run", k, "--input", "0=" + os.path.join(d, "x.npy"), "--verify-weights")
                self.assertEqual(rc, 0, out)
                self.assertEqual(glob.glob(os.path.join(d, "tmp_weight_*")), [])

    def test_model_name_outside_the_directory_is_refused(self):
        """Issue 9 item 7: --model-name ../x wrote ../x_weight_combined and left
        a meta.json that broke every later compile."""
        d = fresh("model_name")
        mlp_model(os.path.join(d, "m.onnx"), [(np.ones((4, 4), np.float32), np.ones(4, np.float32))])
        wdir = os.path.join(d, "store", "weight")
        for name in ("../x", "a/b", "..", "x\x01"):
            rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", os.path.join(d, "m.kiln"),
                           "--external-weight", 2, "--external-weight-dir", wdir, "--model-name", name)
            self.assertEqual(rc, 1, out)
            self.assertIn("invalid model name", out)
            self.assertFalse(os.path.exists(os.path.join(d, "store")), name)
            self.assertFalse(os.path.exists(os.path.join(d, "m.kiln")), name)
        rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", os.path.join(d, "m.kiln"),
                       "--external-weight", 2, "--external-weight-dir", wdir, "--model-name", "x")
        self.assertEqual(rc, 0, out)
        check_weight_dir(self, wdir)

    # ---- the weight directory the .kiln records (issue 14) --------------------------------

    def test_recorded_weight_dir(self):
        """A model compiled with --external-weight-dir runs without flags; the
        pair moves together; a directory outside the model's own is refused
        unless trusted or given; inspect shows what is recorded."""
        d = fresh("recorded")
        rng = np.random.default_rng(3)
        ws = [(rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32))]
        mlp_model(os.path.join(d, "m.onnx"), ws)
        x = rng.standard_normal((2, 8)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        want = mlp_reference(x, ws)
        for mode in (1, 2):
            with self.subTest(mode=mode):
                base = os.path.join(d, f"m{mode}")
                os.makedirs(os.path.join(base, "models"))
                store = os.path.join(base, "store")
                near = os.path.join(base, "near.kiln")
                far = os.path.join(base, "models", "far.kiln")
                for k in (near, far):
                    rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k,
                                   "--external-weight", mode, "--external-weight-dir", store)
                    self.assertEqual(rc, 0, out)
                rc, js = kiln("inspect", near, "--json")
                self.assertEqual(json.loads(js)["weight_dir"], "store")
                rc, js = kiln("inspect", far, "--json")
                self.assertEqual(json.loads(js)["weight_dir"], "../store")
                rc, txt = kiln("inspect", far)
                self.assertIn("recorded: '../store'", txt)
                # Inside the model's directory: no flag needed.
                y = run_model(self, near, os.path.join(d, "x.npy"), os.path.join(base, "o1"))
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
                # Outside: refused, naming the directory and both ways out.
                rc, out = kiln("run", far, "--input", "0=" + os.path.join(d, "x.npy"))
                self.assertCleanError(rc, out, "'../store'", "outside the model's own directory",
                                      "--trust-weight-dir", "--weight-dir")
                y = run_model(self, far, os.path.join(d, "x.npy"), os.path.join(base, "o2"), "--trust-weight-dir")
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
                y = run_model(self, far, os.path.join(d, "x.npy"), os.path.join(base, "o3"), "--weight-dir", store)
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
                # Model and store moved together: still found.
                moved = os.path.join(d, f"moved{mode}")
                shutil.copytree(base, moved)
                shutil.rmtree(store)
                y = run_model(self, os.path.join(moved, "near.kiln"), os.path.join(d, "x.npy"),
                              os.path.join(base, "o4"))
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
                # An offline compile records the weight directory next to it.
                off = os.path.join(base, "offline.kiln")
                rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", off,
                               "--external-weight", mode)
                self.assertEqual(rc, 0, out)
                rc, js = kiln("inspect", off, "--json")
                self.assertEqual(json.loads(js)["weight_dir"], "weight")

    def test_offline_statistics_say_what_reached_the_directory(self):
        """After migration from the temporary directory, the compile's
        statistics count what the final directory received: a second offline
        compile (either mode) writes nothing and says so (issue 14)."""
        d = fresh("offline_stats")
        rng = np.random.default_rng(4)
        ws = [(rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32))]
        mlp_model(os.path.join(d, "m.onnx"), ws)
        said = []
        for mode in (1, 1, 2, 2):
            rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output",
                           os.path.join(d, f"m{mode}.kiln"), "--external-weight", mode)
            self.assertEqual(rc, 0, out)
            said.append(next(l for l in out.splitlines() if l.startswith("external weights")))
        self.assertIn("2 written (288 B), 0 already present", said[0])
        for line in said[1:]:
            self.assertIn("0 written (0 B), 2 already present", line)

    def test_if_branch_constants_follow_the_mode(self):
        """Constants inside If branches go to the weight store like the main
        graph's (issue 14): the .kiln holds none of their bytes, inspect lists
        them, and both branches compute what NumPy does."""
        d = fresh("if_branches")
        rng = np.random.default_rng(5)
        wt = rng.standard_normal((16, 16)).astype(np.float32)
        we = rng.standard_normal((16, 16)).astype(np.float32)
        w_main = rng.standard_normal(16).astype(np.float32)

        def branch(name, w):
            return helper.make_graph([helper.make_node("MatMul", ["xin", f"{name}_w"], [f"{name}_y"])], name, [],
                                     [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [4, 16])],
                                     [numpy_helper.from_array(w, f"{name}_w")])
        nodes = [helper.make_node("Add", ["x", "w_main"], ["xin"]),
                 helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", wt), else_branch=branch("else", we))]
        g = helper.make_graph(nodes, "ifw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16]),
                                             helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              [numpy_helper.from_array(w_main, "w_main")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(d, "m.onnx"))
        x = rng.standard_normal((4, 16)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        k0 = os.path.join(d, "m0.kiln")
        rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k0)
        self.assertEqual(rc, 0, out)
        for mode in (1, 2):
            with self.subTest(mode=mode):
                k = os.path.join(d, f"m{mode}.kiln")
                rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k, "--external-weight", mode)
                self.assertEqual(rc, 0, out)
                rc, js = kiln("inspect", k, "--json")
                info = json.loads(js)
                sizes = sorted(w["size"] for w in info["external_weights"])
                self.assertEqual(sizes, [64, 1024, 1024], info["external_weights"])
                self.assertEqual(info["memory"]["weights_bytes"], 0)
                # The two 1 KiB branch matrices left the file (embedded, they
                # take at least their bytes).
                self.assertLessEqual(os.path.getsize(k) + 2048, os.path.getsize(k0), "branch weights still embedded")
                for c, w in ((True, wt), (False, we)):
                    np.save(os.path.join(d, "c.npy"), np.array(c))
                    rc, out = kiln("run", k, "--input", "x=" + os.path.join(d, "x.npy"), "--input",
                                   "cond=" + os.path.join(d, "c.npy"), "--output-dir", os.path.join(d, f"o{mode}{c}"),
                                   "--verify-weights")
                    self.assertEqual(rc, 0, out)
                    y = np.load(os.path.join(d, f"o{mode}{c}", "output_0.npy"))
                    np.testing.assert_allclose(y, (x + w_main) @ w, rtol=1e-4, atol=1e-4)

    # ---- flags -------------------------------------------------------------------------

    def test_external_weight_3_rejected(self):
        d = fresh("flag3")
        mlp_model(os.path.join(d, "m.onnx"), [(np.ones((4, 4), np.float32), np.ones(4, np.float32))])
        k = os.path.join(d, "m.kiln")
        for bad in ("3", "-1", "x"):
            rc, out = kiln("compile", "--model", os.path.join(d, "m.onnx"), "--output", k, "--external-weight", bad)
            self.assertNotEqual(rc, 0, out)
            self.assertIn("--external-weight", out)
            self.assertFalse(os.path.exists(k))
            self.assertFalse(os.path.exists(os.path.join(d, "weight")))


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
