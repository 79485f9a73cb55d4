"""add_arrays against numpy (and PoCL, the CPU OpenCL implementation, through pyopencl where
it is installed), plus the per-call cost of a 1-thread kernel and of metalkit.run.

    python bench/bench_add.py            # 2^24 float32
"""
from __future__ import annotations

import argparse

import numpy as np

import metalkit as mk
from metalkit._bench import measure, per_call, ratio

from cpu_opencl import open_device


def opencl(n: int) -> dict:
    """The same work through PyOpenCL on a CPU OpenCL device, or {"error": why not}."""
    dev = open_device()
    if isinstance(dev, str):  # reported in the output: the comparison is then missing, not faked
        return {"error": dev}
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.empty_like(a)
    x = np.zeros(1, np.float32)
    res = {"add_arrays": per_call(dev.launcher("add_arrays", (n,), None, [a, b, out], [out])),
           "one_thread_call": per_call(dev.launcher("touch", (1,), None, [x], [x])),
           "device": dev.name}
    assert np.array_equal(out, a + b)
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1 << 24)
    args = p.parse_args()
    r = measure(args.n)
    ocl = opencl(args.n)
    ok = "error" not in ocl
    print(f"device: {mk.device().name} [{mk.device().backend}]")
    print(f"{'':34}{'metalkit':>12}{'numpy':>12}{'OpenCL':>12}")
    print(f"{'add_arrays 2^%d float32 (ms)' % (args.n.bit_length() - 1):34}{r['add_arrays'] * 1e3:12.3f}"
          f"{r['numpy_add'] * 1e3:12.3f}{(ocl['add_arrays'] * 1e3 if ok else float('nan')):12.3f}")
    print(f"{'1-thread kernel call (us)':34}{r['one_thread_call'] * 1e6:12.2f}{'':>12}"
          f"{(ocl['one_thread_call'] * 1e6 if ok else float('nan')):12.2f}")
    print(f"{'metalkit.run by name (us)':34}{r['run_by_name'] * 1e6:12.2f}")
    print(f"add_arrays, {ratio(r['add_arrays'], r['numpy_add'])}")
    if ok:
        print(f"add_arrays, {ratio(r['add_arrays'], ocl['add_arrays'], 'metalkit / OpenCL')}")
        print(f"1-thread kernel call, {ratio(r['one_thread_call'], ocl['one_thread_call'], 'metalkit / OpenCL')}")
    print(f"OpenCL device: {ocl['device']}" if ok else f"OpenCL: {ocl['error']}")


if __name__ == "__main__":
    main()
