"""Hostile weight stores (issue 9 items 6, 7, 8, 9): crafted external-weight
directories that a compile into them must survive.

Groups (each with at least five crafted stores or files):
  nonreg_*    a FIFO / directory / symlink / device planted as a weight file,
              meta.json or its lock: refused (exit 1) naming the file, no hang;
  name_*      --model-name values that would leave the directory or are not
              names: refused (exit 1) naming the value, nothing written;
  flip_*      flipped / swapped / truncated bytes in weight_<sha> or combined
              files: the compile repairs (exit 0), the store is consistent
              and the new .kiln reads the right bytes (--verify-weights);
  nometa_*    meta.json deleted and files tampered: nothing adopted by name
              and size alone;
  meta_*      edited meta.json entries (offset, length, "file": "meta.json",
              absolute path, ../, huge offset, bad key, a leftover of an old
              bad compile): dropped with a warning, never used; a meta.json
              that is not an index at all is refused without being clobbered;
  stale_*     temporaries of dead processes, an interrupted mode-2 append,
              a tmp_weight_<pid>_<n> of a dead compile: cleaned by the next
              compile; a live process's temporary is left alone.

Post-conditions (`check`) hash every file of the store independently of Kiln.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from run_hostile import Case

CLASS = "weights"


# ---- an independent store checker ----------------------------------------------

def sha(b):
    return hashlib.sha256(b).hexdigest()


def is_hex64(s):
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def store_problems(wdir, allow_tmp=()):
    """Everything wrong with a weight directory, as text (empty when consistent):
    meta.json is a kiln-weights index whose every entry names an allowed file
    that is a regular file holding, in range, bytes of that SHA-256; every
    weight_<sha> hashes to its name; no temporary or append record is left."""
    errs = []
    try:
        meta = json.load(open(os.path.join(wdir, "meta.json")))
    except Exception as e:  # noqa: BLE001
        return [f"meta.json unreadable: {e}"]
    if meta.get("format") != "kiln-weights" or meta.get("version") != 1:
        errs.append("meta.json: bad format/version")
    for h, e in meta.get("weights", {}).items():
        f = e.get("file", "")
        if not is_hex64(h):
            errs.append(f"entry key {h!r}")
            continue
        if not (f == "weight_" + h or (f.endswith("_weight_combined") and "/" not in f and ".." not in f)):
            errs.append(f"entry {h[:12]} file {f!r}")
            continue
        p = os.path.join(wdir, f)
        if not os.path.isfile(p) or os.path.islink(p):
            errs.append(f"entry {h[:12]}: {f} is not a regular file")
            continue
        off, n = e.get("offset"), e.get("length")
        with open(p, "rb") as fh:
            fh.seek(off)
            b = fh.read(n)
        if len(b) != n or sha(b) != h:
            errs.append(f"entry {h[:12]}: {f} [{off}, +{n}) holds other bytes")
    for f in os.listdir(wdir):
        p = os.path.join(wdir, f)
        if ".tmp." in f and f not in allow_tmp:
            errs.append(f"temporary left: {f}")
        elif f == "meta.json.append":
            errs.append("append record left")
        elif f.startswith("weight_") and is_hex64(f[7:]):
            if not os.path.isfile(p) or sha(open(p, "rb").read()) != f[7:]:
                errs.append(f"{f} does not hash to its name")
    return errs


# ---- the model ------------------------------------------------------------------

def make_model(path):
    """y = relu(x @ w0 + b0) @ w1 + b1, plus a second bias with the same shape
    as b1 (so weight files of equal size exist). Six weights, 0.1-70 KB."""
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal((32, 128)).astype(np.float32)
    b0 = rng.standard_normal((128,)).astype(np.float32)
    w1 = rng.standard_normal((128, 128)).astype(np.float32)
    b1 = rng.standard_normal((128,)).astype(np.float32)
    b2 = rng.standard_normal((128,)).astype(np.float32)
    w2 = rng.standard_normal((128, 16)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w0, "w0"), (b0, "b0"), (w1, "w1"), (b1, "b1"), (b2, "b2"), (w2, "w2"))]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["r0"]), helper.make_node("MatMul", ["r0", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]), helper.make_node("Add", ["a1", "b2"], ["a2"]),
             helper.make_node("MatMul", ["a2", "w2"], ["y"])]
    g = helper.make_graph(nodes, "hostile_weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def generate(ctx):
    d = ctx.dir(CLASS)
    cases = []
    onnx_path = os.path.join(d, "model.onnx")
    make_model(onnx_path)
    x_npy = os.path.join(d, "x.npy")
    np.save(x_npy, np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32))

    # Pristine stores, one per mode, and each weight's bytes.
    pristine = {}
    for mode in (1, 2):
        wdir = os.path.join(d, f"pristine{mode}")
        rc, out = ctx.run(["compile", "--model", onnx_path, "--output", os.path.join(d, f"pristine{mode}.kiln"),
                           "--external-weight", mode, "--external-weight-dir", wdir, "--model-name", "m"])
        assert rc == 0, out
        pristine[mode] = wdir
    meta1 = json.load(open(os.path.join(pristine[1], "meta.json")))["weights"]
    meta2 = json.load(open(os.path.join(pristine[2], "meta.json")))["weights"]
    hashes = sorted(meta1, key=lambda h: meta1[h]["length"])
    big = hashes[-1]                       # the largest weight
    same = [h for h in hashes if meta1[h]["length"] == 512]  # 128 floats: b0, b1, b2
    assert len(same) >= 2, meta1
    combined = "m_weight_combined"

    def case_dir(name):
        return os.path.join(d, name)

    def fresh(name, mode):
        """before(): the case's store = a copy of the pristine one."""
        def setup():
            cd = case_dir(name)
            shutil.rmtree(cd, ignore_errors=True)
            os.makedirs(cd)
            shutil.copytree(pristine[mode], os.path.join(cd, "w"))
            return os.path.join(cd, "w")
        return setup

    def compile_argv(name, mode, model_name="m"):
        return ["compile", "--model", onnx_path, "--output", os.path.join(case_dir(name), "out.kiln"),
                "--external-weight", str(mode), "--external-weight-dir", os.path.join(case_dir(name), "w"),
                "--model-name", model_name]

    def consistent(name, extra=None, allow_tmp=()):
        """check(): store consistent, the new .kiln loads with every weight
        verified and gives the pristine model's output."""
        def check(out):
            wdir = os.path.join(case_dir(name), "w")
            errs = store_problems(wdir, allow_tmp)
            if errs:
                return "store inconsistent after the compile: " + "; ".join(errs)
            rc, o = ctx.run(["run", os.path.join(case_dir(name), "out.kiln"), "--weight-dir", wdir,
                             "--verify-weights", "--input", "x=" + x_npy])
            if rc != 0:
                return "compiled model does not load with --verify-weights:\n" + o[-2000:]
            if extra:
                return extra(wdir, out)
            return None
        return check

    def add(name, mode, tamper, needles=(), rc=0, check=None, compile_mode=None, model_name="m", env=None,
            allow_tmp=()):
        setup = fresh(name, mode)

        def before():
            tamper(setup())
        cases.append(Case(name, compile_argv(name, compile_mode or mode, model_name), list(needles), rc=rc,
                          before=before, timeout=30, env=env,
                          check=check if check is not None else (consistent(name, allow_tmp=allow_tmp) if rc == 0 else None)))

    def flip(path, offset):
        with open(path, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x5a]))

    def edit_meta(fn):
        def t(w):
            p = os.path.join(w, "meta.json")
            m = json.load(open(p))
            fn(m)
            with open(p, "w") as f:
                json.dump(m, f)
        return t

    # ---- nonreg: non-regular files planted in the store ----------------------
    def plant(rel, kind):
        def t(w):
            p = os.path.join(w, rel)
            if os.path.lexists(p):
                os.remove(p)
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "dir":
                os.makedirs(os.path.join(p, "sub"))
            elif kind == "symlink":
                os.symlink("/etc/passwd", p)
            elif kind == "chardev":
                try:
                    os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
                except OSError:
                    os.symlink("/dev/zero", p)  # no CAP_MKNOD: still not a regular file
        return t

    single_big = "weight_" + big
    add("nonreg_fifo_weight_mode1", 1, plant(single_big, "fifo"), [single_big, "FIFO"], rc=1)
    add("nonreg_dir_weight_mode1", 1, plant(single_big, "dir"), [single_big, "directory"], rc=1)
    add("nonreg_symlink_weight_mode1", 1, plant(single_big, "symlink"), [single_big, "symbolic link"], rc=1)
    add("nonreg_chardev_weight_mode1", 1, plant(single_big, "chardev"), [single_big, "not a regular file"], rc=1)
    add("nonreg_fifo_combined_mode2", 2, plant(combined, "fifo"), [combined, "FIFO"], rc=1)
    add("nonreg_dir_combined_mode2", 2, plant(combined, "dir"), [combined, "directory"], rc=1)

    def fifo_nometa(w):
        os.remove(os.path.join(w, "meta.json"))
        plant(single_big, "fifo")(w)
    add("nonreg_fifo_weight_no_meta", 1, fifo_nometa, [single_big, "FIFO"], rc=1)
    add("nonreg_fifo_meta_json", 1, plant("meta.json", "fifo"), ["meta.json", "FIFO"], rc=1)
    add("nonreg_fifo_lock_file", 1, plant("meta.json.lock", "fifo"), ["meta.json.lock", "not a regular file"], rc=1)

    # A combined file that is a hard link to a file outside the store: an
    # append would write into that file too. Refused; the outside file is
    # untouched.
    def hardlinked(w):
        outside = os.path.join(os.path.dirname(w), "outside_file")
        p = os.path.join(w, combined)
        shutil.copyfile(p, outside)
        os.remove(p)
        os.link(outside, p)
        edit_meta(lambda m: m["weights"].pop(big))(w)  # so that the compile must append

    def outside_untouched(out):
        outside = os.path.join(case_dir("nonreg_hardlinked_combined"), "outside_file")
        with open(outside, "rb") as f, open(os.path.join(pristine[2], combined), "rb") as g:
            return None if f.read() == g.read() else "the file outside the store was modified"
    add("nonreg_hardlinked_combined", 2, hardlinked, [combined, "hard links"], rc=1, check=outside_untouched)

    # ---- name: bad model names ------------------------------------------------
    def nothing_written(name):
        def check(out):
            cd = case_dir(name)
            if os.path.exists(os.path.join(cd, "w")):
                return "the weight directory was created"
            left = [f for f in os.listdir(cd) if f != "w"] + [f for f in os.listdir(d) if "weight_combined" in f]
            if left:
                return f"files written: {left}"
            return None
        return check

    bad_names = [("dotdot_slash", "../x", "../x"), ("slash", "a/b", "a/b"), ("dotdot", "..", "'..'"),
                 ("dotdot_inside", "a..b", "a..b"), ("control", "x\x01y", "x\\x01y"), ("newline", "x\ny", "x\\x0ay"),
                 ("overlong", "n" * 300, "300 bytes"), ("backslash", "a\\b", "a\\b"),
                 ("bad_utf8", "x\udcffy", "UTF-8"), ("absolute", "/tmp/x", "/tmp/x")]
    for tag, value, needle in bad_names:
        for mode in (1, 2):
            name = f"name_{tag}_mode{mode}"

            def before(name=name):
                cd = case_dir(name)
                shutil.rmtree(cd, ignore_errors=True)
                os.makedirs(cd)
            cases.append(Case(name, compile_argv(name, mode, value), [needle, "model name"], rc=1, before=before,
                              check=nothing_written(name)))

    # ---- flip: damaged bytes are repaired ----------------------------------
    def flipped_single(h, at):
        return lambda w: flip(os.path.join(w, "weight_" + h), at)

    def flipped_combined(h, at):
        return lambda w: flip(os.path.join(w, combined), meta2[h]["offset"] + at)

    def repaired_single(h):
        def extra(wdir, out):
            return None if "weight_" + h in out else f"no warning names weight_{h}"
        return extra

    for mode in (1, 2):
        add(f"flip_single_first_byte_compile_mode{mode}", 1, flipped_single(big, 0), ["weight_" + big],
            compile_mode=mode)
        add(f"flip_single_last_byte_compile_mode{mode}", 1, flipped_single(hashes[0], meta1[hashes[0]]["length"] - 1),
            ["weight_" + hashes[0]], compile_mode=mode)
        add(f"flip_combined_compile_mode{mode}", 2, flipped_combined(big, 100), [combined, "do not match"],
            compile_mode=mode)

    def swap(w):  # two weights of the same size exchange bytes
        a, b = os.path.join(w, "weight_" + same[0]), os.path.join(w, "weight_" + same[1])
        ba, bb = open(a, "rb").read(), open(b, "rb").read()
        open(a, "wb").write(bb)
        open(b, "wb").write(ba)
    add("flip_swapped_same_size_files", 1, swap, ["weight_" + same[0], "weight_" + same[1]])

    def grown(w):
        with open(os.path.join(w, "weight_" + big), "ab") as f:
            f.write(b"\0" * 16)
    add("flip_single_grown", 1, grown, ["weight_" + big])

    def flip_padding(w):  # bytes no entry covers: nothing to repair
        with open(os.path.join(w, combined), "ab") as f:
            f.write(b"\x01" * 7)

    def no_warning(wdir, out):
        return "unexpected warning:\n" + out if "warning" in out else None
    add("flip_combined_tail_garbage", 2, flip_padding, [], check=consistent("flip_combined_tail_garbage", no_warning))

    # ---- nometa: meta.json deleted, files tampered --------------------------
    def nometa(*more):
        def t(w):
            os.remove(os.path.join(w, "meta.json"))
            for m in more:
                m(w)
        return t

    for mode in (1, 2):
        add(f"nometa_flipped_single_compile_mode{mode}", 1, nometa(flipped_single(big, 7)), [], compile_mode=mode)
    add("nometa_swapped_same_size", 1, nometa(swap), ["weight_" + same[0]])
    add("nometa_truncated_single", 1,
        nometa(lambda w: os.truncate(os.path.join(w, "weight_" + big), meta1[big]["length"] - 1)), [])
    add("nometa_combined_flipped", 2, nometa(flipped_combined(big, 3)), [])
    add("nometa_combined_compile_mode1", 2, nometa(), [], compile_mode=1)

    def forged_verified(w):  # a lying cache entry alone (no meta.json) adopts nothing
        p = os.path.join(w, "weight_" + big)
        flip(p, 11)
        st = os.stat(p)
        with open(os.path.join(w, "meta.json"), "w") as f:
            json.dump({"format": "kiln-weights", "version": 1, "weights": {}, "verified": {
                "weight_" + hashes[0]: {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                                        "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}}}, f)
    add("nometa_cache_of_another_file", 1, forged_verified, ["weight_" + big])

    # ---- meta: edited entries are dropped, never used -------------------------
    def set_entry(h, **kv):
        def fn(m):
            m["weights"][h].update(kv)  # the "verified" cache is kept as it was
        return fn

    other = next(h for h in sorted(meta2, key=lambda h: meta2[h]["offset"]) if h != big)

    def expect_warning(*needles):
        def extra(wdir, out):
            for n in needles:
                if n not in out:
                    return f"output does not name {n!r}:\n{out}"
            return None
        return extra

    def meta_case(name, mode, fn, needles, compile_mode=None):
        cases_needles = list(needles)
        add(name, mode, edit_meta(fn), cases_needles, compile_mode=compile_mode,
            check=consistent(name, expect_warning(*cases_needles)))

    # Offset moved onto another weight's bytes (aligned): must not be used or
    # patched (the other weight's bytes stay intact: consistent() hashes them).
    meta_case("meta_offset_onto_other_weight", 2, set_entry(big, offset=meta2[other]["offset"]), ["do not match"])
    meta_case("meta_offset_unaligned", 2, set_entry(big, offset=meta2[big]["offset"] + 4), ["not a multiple of 512"])
    meta_case("meta_offset_huge", 2, set_entry(big, offset=2 ** 63 + 512), ["overflows"])
    meta_case("meta_offset_past_end", 2, set_entry(big, offset=1 << 40), [])
    meta_case("meta_length_edited", 2, set_entry(big, length=meta2[big]["length"] - 4), ["length"])
    meta_case("meta_file_meta_json", 1, set_entry(big, file="meta.json"), ["meta.json", "ignoring entry"])
    meta_case("meta_file_absolute", 1, set_entry(big, file="/etc/passwd"), ["/etc/passwd", "ignoring entry"])
    meta_case("meta_file_dotdot", 2, set_entry(big, file="../x_weight_combined"), ["../x_weight_combined"])
    meta_case("meta_file_other_single", 1, set_entry(big, file="weight_" + hashes[0]), ["weight_" + hashes[0]])
    meta_case("meta_file_lock", 1, set_entry(big, file="meta.json.lock"), ["meta.json.lock"])
    meta_case("meta_offset_negative", 2, set_entry(big, offset=-512), ["non-negative"])
    meta_case("meta_offset_float", 2, set_entry(big, offset=512.5), ["non-negative"])
    meta_case("meta_file_not_string", 1, set_entry(big, file=7), ["\"file\""])

    def bad_key(m):
        m["weights"]["NOTHEX"] = dict(m["weights"][big])
    meta_case("meta_key_not_hex", 1, bad_key, ["NOTHEX"])

    def leftover_of_bad_compile(m):  # what `--model-name ../x` used to leave behind
        m["weights"]["0" * 64] = {"file": "../x_weight_combined", "offset": 0, "length": 4}
    meta_case("meta_leftover_of_bad_model_name", 2, leftover_of_bad_compile, ["../x_weight_combined"])

    # meta.json that is not an index at all: refused, not clobbered.
    for tag, text in (("not_json", "{not json"), ("other_format", '{"format": "x", "version": 1, "weights": {}}'),
                      ("newer_version", '{"format": "kiln-weights", "version": 2, "weights": {}}'),
                      ("weights_not_object", '{"format": "kiln-weights", "version": 1, "weights": []}'),
                      ("json_array", "[1, 2]")):
        name = f"meta_unusable_{tag}"

        def t(w, text=text):
            open(os.path.join(w, "meta.json"), "w").write(text)

        def unchanged(out, name=name, text=text):
            got = open(os.path.join(case_dir(name), "w", "meta.json")).read()
            return None if got == text else "meta.json was rewritten"
        add(name, 1, t, ["meta.json", "malformed"], rc=1, check=unchanged)

    # ---- stale: leftovers of dead processes ------------------------------------
    def leftovers(*names, content=b"partial"):
        def t(w):
            for n in names:
                with open(os.path.join(w, n.format(pid=dead_pid())), "wb") as f:
                    f.write(content)
        return t

    add("stale_single_tmp", 1, leftovers("weight_" + big + ".tmp.{pid}.0"), ["stale temporary"])
    add("stale_meta_tmp", 1, leftovers("meta.json.tmp.{pid}.3"), ["stale temporary"])
    add("stale_combined_tmp", 2, leftovers(combined + ".tmp.{pid}.1"), ["stale temporary"])
    add("stale_old_format_tmp", 1, leftovers("weight_" + hashes[0] + ".tmp.{pid}.139912345678.2"), ["stale temporary"])
    add("stale_many_tmp", 2, leftovers("meta.json.tmp.{pid}.0", "meta.json.append.tmp.{pid}.0",
                                       combined + ".tmp.{pid}.0", "weight_" + big + ".tmp.{pid}.9"), [])
    live = f"weight_{big}.tmp.{os.getpid()}.0"  # the runner is alive: its temporary is not touched
    add("stale_live_pid_kept", 1, leftovers(live), [], allow_tmp=(live,),
        check=consistent("stale_live_pid_kept", lambda w, out: None if os.path.exists(os.path.join(w, live))
                         else "a live process's temporary was removed", allow_tmp=(live,)))

    def interrupted_append(w, length_field=None):
        p = os.path.join(w, combined)
        n = os.path.getsize(p)
        with open(p, "ab") as f:
            f.write(b"\xee" * 3000)
        with open(os.path.join(w, "meta.json.append"), "w") as f:
            json.dump({"file": combined, "length": n if length_field is None else length_field}, f)

    def truncated_back(wdir, out):
        n = os.path.getsize(os.path.join(pristine[2], combined))
        got = os.path.getsize(os.path.join(wdir, combined))
        return None if got == n else f"combined file is {got} bytes, expected {n} (interrupted append not undone)"
    add("stale_interrupted_append", 2, interrupted_append, ["interrupted append"],
        check=consistent("stale_interrupted_append", truncated_back))

    def bogus_intent(w):
        with open(os.path.join(w, "meta.json.append"), "w") as f:
            json.dump({"file": "../x_weight_combined", "length": 0}, f)
    add("stale_append_record_escaping", 2, bogus_intent, [])

    def intent_below_recorded(w):  # a record older than meta.json: must not truncate recorded bytes
        with open(os.path.join(w, "meta.json.append"), "w") as f:
            json.dump({"file": combined, "length": 0}, f)
    add("stale_append_record_below_recorded_data", 2, intent_below_recorded, [])

    # A tmp_weight_<pid>_<n> of a dead compile in KILN_WORK_PATH is removed by
    # the next offline compile (no --external-weight-dir).
    work = os.path.join(d, "workpath")
    dead_dir = f"tmp_weight_{dead_pid()}_0"

    def before_tmpdir():
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(os.path.join(work, dead_dir, "x"))
        open(os.path.join(work, dead_dir, "x", "weight_partial.tmp.1.0"), "w").write("x")
        os.makedirs(os.path.join(work, "out"))

    def tmpdir_gone(out):
        left = os.listdir(work)
        return None if left == ["out"] else f"left in the work path: {left}"
    cases.append(Case("stale_tmp_weight_dir", ["compile", "--model", onnx_path, "--output",
                                               os.path.join(work, "out", "o.kiln"), "--external-weight", "1"],
                      [], rc=0, env={"KILN_WORK_PATH": work}, before=before_tmpdir, check=tmpdir_gone))
    return cases
