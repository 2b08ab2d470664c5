"""Every benchmark script under bench/ starts: `--help` exits 0 (a helper
module only has to import). Catches a script whose imports went stale (half_bench.py imported
a helper run_bench.py had dropped, and failed before it parsed its
arguments, unnoticed for two days)."""
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def main():
    failed = []
    scripts = sorted(f for f in os.listdir(BENCH) if f.endswith(".py"))
    for name in scripts:
        p = subprocess.run([sys.executable, os.path.join(BENCH, name), "--help"], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:  # (a helper module such as results_md.py prints nothing)
            failed.append(name)
            print(f"FAIL {name}: exit {p.returncode}\n{p.stderr.strip()[-2000:]}")
        else:
            print(f"ok   {name}")
    if not scripts:
        print(f"no scripts found in {BENCH}")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
