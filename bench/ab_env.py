"""Same-process A/B of one environment switch: loads a .kiln twice through the
Python binding (build/python), the first with VAR=off, the second without it,
and times alternated runs. Prints the outputs' largest difference and the
median of the per-pair time ratios (on/off).

Usage: /usr/bin/python3 bench/ab_env.py MODEL.kiln THREADS PAIRS VAR
(e.g. KILN_CONV_WINOGRAD). The variable must be one a kernel reads when it is
created (at load).
"""
import sys, os, time, statistics, numpy as np
if len(sys.argv) != 5 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help") else 2)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build', 'python'))
import kiln
path, threads, n, var = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.environ[var] = 'off'; A = kiln.load(path, threads=threads)
del os.environ[var]; B = kiln.load(path, threads=threads)
inp = {}
for i, t in enumerate(A.inputs):
    inp[t.name] = np.random.default_rng(0).standard_normal(t.shape).astype(np.float32)
ra = A.run(inp); rb = B.run(inp)
for k in (ra if isinstance(ra, dict) else range(len(ra))):
    x, y = np.asarray(ra[k]), np.asarray(rb[k]); print("max diff", float(np.abs(x-y).max()), "max ref", float(np.abs(x).max()))
for _ in range(2): A.run(inp); B.run(inp)
ta, tb, ratios = [], [], []
for i in range(n):
    order = (A, B) if i % 2 == 0 else (B, A)
    res = {}
    for m in order:
        t0 = time.perf_counter(); m.run(inp); res[id(m)] = time.perf_counter() - t0
    ta.append(res[id(A)]); tb.append(res[id(B)]); ratios.append(res[id(B)] / res[id(A)])
print(f"{path} t={threads}: off {statistics.median(ta)*1e3:.2f} ms on {statistics.median(tb)*1e3:.2f} ms  median pair ratio on/off {statistics.median(ratios):.3f}")
