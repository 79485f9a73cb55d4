"""add_arrays against numpy (and the CPU OpenCL runtimes PoCL and Intel's, through pyopencl,
where they are installed), plus the per-call cost of a 1-thread kernel and of metalkit.run.

    python bench/bench_add.py            # 2^24 float32
"""
from __future__ import annotations

import argparse

import numpy as np

import metalkit as mk
from metalkit._bench import measure, per_call, ratio

from cpu_opencl import open_devices


def opencl(n: int) -> dict[str, dict]:
    """Per CPU OpenCL runtime, the same work through pyopencl, or {"error": why not}."""
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    res = {}
    for name, dev in open_devices().items():
        if isinstance(dev, str):  # printed: the comparison is then missing, not faked
            res[name] = {"error": dev}
            continue
        out = np.empty_like(a)
        x = np.zeros(1, np.float32)
        add = dev.launcher("add_arrays", (n,), None, [a, b, out], [out])
        touch = dev.launcher("touch", (1,), None, [x], [x])
        res[name] = {"add_arrays": per_call(add), "one_thread_call": per_call(touch),
                     "device": dev.name}
        assert np.array_equal(out, a + b), f"{name}: add_arrays gave a wrong result"
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1 << 24)
    args = p.parse_args()
    r = measure(args.n)
    ocl = opencl(args.n)
    ms = {name: res.get("add_arrays", float("nan")) * 1e3 for name, res in ocl.items()}
    us = {name: res.get("one_thread_call", float("nan")) * 1e6 for name, res in ocl.items()}
    print(f"device: {mk.device().name} [{mk.device().backend}]")
    print(f"{'':34}{'metalkit':>12}{'numpy':>12}" + "".join(f"{name:>12}" for name in ocl))
    print(f"{'add_arrays 2^%d float32 (ms)' % (args.n.bit_length() - 1):34}{r['add_arrays'] * 1e3:12.3f}"
          f"{r['numpy_add'] * 1e3:12.3f}" + "".join(f"{t:12.3f}" for t in ms.values()))
    print(f"{'1-thread kernel call (us)':34}{r['one_thread_call'] * 1e6:12.2f}{'':>12}"
          + "".join(f"{t:12.2f}" for t in us.values()))
    print(f"{'metalkit.run by name (us)':34}{r['run_by_name'] * 1e6:12.2f}")
    print(f"add_arrays, {ratio(r['add_arrays'], r['numpy_add'])}")
    for name, res in ocl.items():
        if "error" in res:
            print(f"{name}: {res['error']}")
            continue
        print(f"add_arrays, {ratio(r['add_arrays'], res['add_arrays'], f'metalkit / {name}')}")
        print(f"1-thread kernel call, "
              f"{ratio(r['one_thread_call'], res['one_thread_call'], f'metalkit / {name}')}")
        print(f"{name} device: {res['device']}")


if __name__ == "__main__":
    main()
