"""Kernels with barriers: a per-threadgroup tree reduction (256 threads, 9
barriers each) on metalkit's CPU simulator, against numpy and the other
simulator that runs GPU kernels with barriers on a CPU, numba's CUDA simulator
(when numba is installed: pip install .[bench]).

    python bench/bench_barriers.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

import metalkit as mk

MSL = """
#include <metal_stdlib>
using namespace metal;
kernel void reduce(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                   uint g [[threadgroup_position_in_grid]]) {
    threadgroup float tmp[256];
    tmp[l] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (l < s) tmp[l] += tmp[l + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) out[g] = tmp[0];
}
"""

# Run in a child process: the simulator must be switched on before numba loads.
NUMBA = """
import os, sys, time
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import numpy as np
from numba import cuda, float32

@cuda.jit
def reduce(x, out):
    tmp = cuda.shared.array(256, float32)
    l = cuda.threadIdx.x
    tmp[l] = x[cuda.grid(1)]
    cuda.syncthreads()
    s = 128
    while s > 0:
        if l < s:
            tmp[l] += tmp[l + s]
        cuda.syncthreads()
        s //= 2
    if l == 0:
        out[cuda.blockIdx.x] = tmp[0]

n = int(sys.argv[1])
x = np.random.default_rng(0).random(n, dtype=np.float32)
out = np.zeros(n // 256, np.float32)
t = time.perf_counter()
reduce[n // 256, 256](x, out)
dt = time.perf_counter() - t
assert np.allclose(out, x.reshape(-1, 256).sum(1), rtol=1e-4)
print(dt)
"""


def best(fn, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def numba_sim(n: int) -> float | str:
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed (pip install .[bench])"
    p = subprocess.run([sys.executable, "-c", NUMBA, str(n)], capture_output=True, text=True,
                       env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"))
    if p.returncode != 0:
        return f"numba failed: {p.stderr.strip().splitlines()[-1]}"
    return float(p.stdout)


def main() -> None:
    k = mk.compile(MSL).reduce
    print(f"device: {mk.device().name} [{mk.device().backend}]")
    print(f"{'tree reduction, groups of 256':34}{'metalkit':>12}{'numpy':>12}{'numba sim':>12}")
    for n in (1 << 14, 1 << 20):
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        out = np.zeros(n // 256, np.float32)
        t_mk = best(lambda: k(x, out, grid=n, threadgroup=256))
        assert np.allclose(out, x.reshape(-1, 256).sum(1), rtol=1e-4)
        t_np = best(lambda: x.reshape(-1, 256).sum(1))
        sim = numba_sim(n) if n <= 1 << 14 else "(too slow)"
        sim_s = f"{sim * 1e3:12.1f}" if isinstance(sim, float) else f"{'-':>12}"
        print(f"{'n = 2^%d (ms)' % (n.bit_length() - 1):34}{t_mk * 1e3:12.2f}{t_np * 1e3:12.3f}{sim_s}")
        if isinstance(sim, float):
            print(f"  numba simulator time / metalkit time: {sim / t_mk:.0f}")
        elif n <= 1 << 14:
            print(f"  numba: {sim}")
        print(f"  metalkit: {t_mk / n * 1e9:.1f} ns per thread (9 barriers each)")


if __name__ == "__main__":
    main()
