"""What compiling costs a tinygrad program on metalkit (the METALKIT device).

    python bench/bench_tinygrad.py [--steps N]

A small training loop (a two-layer MLP: forward, gradients, an SGD step, N times) runs in a
child process with an empty kernel cache ("cold": every kernel tinygrad generates is compiled)
and again in a second process with that cache ("warm": every kernel is loaded from disk); zig's
runtime libraries are shared, so they are not rebuilt. Both runs are checked against numpy.
tinygrad compiles in its own process here (PARALLEL=0; by default it spreads compiles over a
pool of worker processes), so the compile calls can be timed. Printed per run: kernels compiled,
the time spent compiling them with the median per kernel, and the loop's wall time; then cold / warm.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
import metalkit.tinygrad as mtg
from tinygrad import Tensor

times = []
compile_ = mtg.MetalkitCompiler.compile
def timed(self, src):
    t = time.perf_counter()
    try:
        return compile_(self, src)
    finally:
        times.append(time.perf_counter() - t)
mtg.MetalkitCompiler.compile = timed

steps, lr = int(sys.argv[1]), np.float32(0.05)
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 96)).astype(np.float32)
w1 = (rng.standard_normal((96, 128)) * 0.1).astype(np.float32)
w2 = (rng.standard_normal((128, 10)) * 0.1).astype(np.float32)

def reference(w1, w2):  # the same step in numpy
    pre = x @ w1; h = np.maximum(pre, 0); out = h @ w2
    d = 2 * out / out.size
    g2 = h.T @ d
    g1 = x.T @ (d @ w2.T * (pre > 0))
    return w1 - lr * g1, w2 - lr * g2

t0 = time.perf_counter()
X, W1, W2 = (Tensor(a, device="METALKIT") for a in (x, w1, w2))
for _ in range(steps):
    loss = ((X @ W1).relu() @ W2).square().mean()
    g1, g2 = loss.gradient(W1, W2)
    W1, W2 = (W1 - float(lr) * g1).realize(), (W2 - float(lr) * g2).realize()
got1, got2 = W1.numpy(), W2.numpy()
wall = time.perf_counter() - t0
for _ in range(steps):
    w1, w2 = reference(w1, w2)
np.testing.assert_allclose(got1, w1, rtol=1e-3, atol=1e-5)
np.testing.assert_allclose(got2, w2, rtol=1e-3, atol=1e-5)
print(json.dumps({"wall": wall, "compiles": times}))
"""


def run(cache: Path, steps: int) -> dict:
    from metalkit.msl import cache as mk_cache
    zig = str(mk_cache.root() / "zig")
    env = dict(os.environ, METALKIT_CACHE_DIR=str(cache), ZIG_GLOBAL_CACHE_DIR=zig, ZIG_LOCAL_CACHE_DIR=zig,
               CACHELEVEL="0", PARALLEL="0")
    p = subprocess.run([sys.executable, "-c", CHILD, str(steps)], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    import metalkit
    from metalkit._bench import ratio
    print(f"metalkit device: {metalkit.device().name} ({metalkit.device().backend}); {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as d:
        rows = {name: run(Path(d), args.steps) for name in ("cold", "warm")}
    for name, r in rows.items():
        c = r["compiles"]
        print(f"{name}: {len(c)} kernels, compiling {sum(c):.2f} s (median {statistics.median(c) * 1000:.0f} ms a kernel), "
              f"loop {r['wall']:.2f} s wall")
    cold, warm = rows["cold"]["wall"], rows["warm"]["wall"]
    print(f"{ratio(cold, warm, 'cold / warm')}; compiling is {sum(rows['cold']['compiles']) / cold:.0%} of the cold run")


if __name__ == "__main__":
    main()
