#!/usr/bin/python3
"""Hostile inputs end to end: crafted ONNX models, .kiln files, .npy inputs
and weight stores, each of which must make `kiln` exit with status 1 and a
message naming the culprit -- never a crash, a hang, a sanitizer report, or
a damaged store.

Each class lives in a `cases_<class>.py` module beside this file with
  CLASS = "<name>"
  def generate(ctx) -> list[Case]
The generator writes its files under ctx.dir(CLASS) and returns the cases.

Usage: run_hostile.py --kiln PATH --work DIR [--only CLASS ...] [-v]
"""
import argparse
import dataclasses
import glob
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, List, Optional

SANITIZER_MARKERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                     "LeakSanitizer", "ThreadSanitizer")


@dataclasses.dataclass
class Case:
    name: str                       # unique within the class
    argv: List[str]                 # arguments after the kiln binary
    needles: List[str]              # substrings the output must contain (the culprit)
    rc: int = 1                     # expected exit status
    timeout: float = 60.0           # a hang is a failure
    env: Optional[dict] = None      # extra environment
    check: Optional[Callable[[str], Optional[str]]] = None  # post-check: returns an error text or None
    before: Optional[Callable[[], None]] = None  # runs right before the command (e.g. make a FIFO)


class Context:
    def __init__(self, kiln, work):
        self.kiln = kiln
        self.work = work

    def dir(self, cls):
        d = os.path.join(self.work, cls)
        os.makedirs(d, exist_ok=True)
        return d

    def run(self, argv, timeout=120, env=None):
        """Runs kiln (for generators that need a good compile first)."""
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.run([self.kiln, *map(str, argv)], capture_output=True, text=True,
                           timeout=timeout, env=e)
        return p.returncode, p.stdout + p.stderr


def load_modules(only):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    mods = []
    for path in sorted(glob.glob(os.path.join(here, "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if only and mod.CLASS not in only:
            continue
        mods.append(mod)
    return mods


def run_case(ctx, case):
    if case.before:
        case.before()
    env = dict(os.environ)
    if case.env:
        env.update(case.env)
    t0 = time.monotonic()
    try:
        p = subprocess.run([ctx.kiln, *map(str, case.argv)], capture_output=True, text=True,
                           errors="replace", timeout=case.timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"hung: no exit within {case.timeout:.0f} s"
    out = p.stdout + p.stderr
    if p.returncode < 0:
        return f"killed by signal {signal.Signals(-p.returncode).name}:\n{out[-3000:]}"
    for m in SANITIZER_MARKERS:
        if m in out:
            return f"sanitizer report ({m}):\n{out[-3000:]}"
    if p.returncode != case.rc:
        return f"exit status {p.returncode}, expected {case.rc}:\n{out[-3000:]}"
    if case.rc == 1 and "error" not in out.lower():
        return f"no error message:\n{out[-3000:]}"
    for n in case.needles:
        if n not in out:
            return f"message does not name {n!r}:\n{out[-3000:]}"
    if case.check:
        err = case.check(out)
        if err:
            return err
    del t0
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    ctx = Context(kiln, os.path.abspath(args.work))
    passed = failed = 0
    for mod in load_modules(set(args.only)):
        cases = mod.generate(ctx)
        names = [c.name for c in cases]
        assert len(names) == len(set(names)), f"{mod.CLASS}: duplicate case names"
        for case in cases:
            err = run_case(ctx, case)
            if err:
                failed += 1
                print(f"FAIL {mod.CLASS}/{case.name}: {err}", flush=True)
            else:
                passed += 1
                if args.v:
                    print(f"ok   {mod.CLASS}/{case.name}", flush=True)
        print(f"class {mod.CLASS}: {len(cases)} cases", flush=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
