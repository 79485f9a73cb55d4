"""Measurements shared by ``python -m metalkit bench`` and ``bench/``."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

ONE_THREAD_SRC = """
#include <metal_stdlib>
using namespace metal;
kernel void touch(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += 1.0f; }
"""


def timed(run: Callable[[], object], reps: int) -> tuple[float, float]:
    """Median wall seconds of ``reps`` calls, and the least CPU seconds of one (all threads of this
    process: other processes on the machine inflate it less)."""
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), min(cpu)


def times(r: float) -> str:
    """A factor as a ratio is printed: ``1.11x``, ``12.3x``, ``150x``, ``0.053x``."""
    if r >= 100:
        return f"{r:.0f}x"
    if r >= 10:
        return f"{r:.1f}x"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def ratio(mine: float, other: float, what: str = "metalkit / numpy") -> str:
    """One side's time against another's, as every benchmark prints it: ``metalkit / numpy: 1.11x the
    time``, or ``metalkit / numpy: 0.53x the time (1.9x faster)`` when the first takes less time."""
    r = mine / other
    text = f"{what}: {times(r)} the time"
    if r < 1:
        faster = 1 / r
        text += f" ({faster:.1f}x faster)" if faster < 100 else f" ({faster:.0f}x faster)"
    return text


def per_call(fn: Callable[[], object], seconds: float = 0.5) -> float:
    """Best-of-5 mean seconds per call of fn."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds / 10:
        fn()
        n += 1
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def measure(n: int = 1 << 24) -> dict[str, float]:
    """Seconds per call: add_arrays on n float32 (metalkit and numpy), a 1-thread kernel, run by name."""
    import metalkit as mk
    rng = np.random.default_rng(0)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    out = np.empty_like(a)
    res = {
        "add_arrays": per_call(lambda: mk.run("add_arrays", a, b, out)),
        "numpy_add": per_call(lambda: np.add(a, b, out=out)),
    }
    if not np.array_equal(out, a + b):
        raise AssertionError("add_arrays gave a wrong result")
    touch = mk.compile(ONE_THREAD_SRC).touch
    x = np.zeros(1, np.float32)
    res["one_thread_call"] = per_call(lambda: touch(x))
    one = np.ones(1, np.float32)
    res["run_by_name"] = per_call(lambda: mk.run("add_arrays", one, one, x))
    res["bytes"] = 3 * a.nbytes
    return res


def report(n: int = 1 << 24) -> None:
    """Prints ``measure(n)``: times, bandwidths and metalkit's time against numpy's."""
    import metalkit as mk
    r = measure(n)
    print(f"device: {mk.device().name} [{mk.device().backend}]")
    print(f"add_arrays, {n} float32: metalkit {r['add_arrays'] * 1e3:8.3f} ms "
          f"({r['bytes'] / r['add_arrays'] / 1e9:6.1f} GB/s), numpy {r['numpy_add'] * 1e3:8.3f} ms "
          f"({r['bytes'] / r['numpy_add'] / 1e9:6.1f} GB/s)")
    print(f"add_arrays, {ratio(r['add_arrays'], r['numpy_add'])}")
    print(f"1-thread kernel call: {r['one_thread_call'] * 1e6:6.2f} us")
    print(f"metalkit.run by name: {r['run_by_name'] * 1e6:6.2f} us")
