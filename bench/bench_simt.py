"""Kernels with barriers and SIMD-group functions, side by side in one process: metalkit,
two CPU OpenCL runtimes through pyopencl (PoCL and Intel's) and numpy, on the same work.

    python bench/bench_simt.py                  # every workload
    python bench/bench_simt.py reduce matmul    # some of them; --reps, --calls: see --help

The kernels are in workloads.metal and workloads.cl beside this file. Every result is checked
against numpy in float64 after the warm-up call and again after the timed calls.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

import metalkit as mk
from metalkit._bench import ratio as bench_ratio
from cpu_opencl import RUNTIMES, CpuOpenCL, open_devices

HERE = Path(__file__).resolve().parent
N = 1 << 24          # elements of the reductions and of add_arrays
GROUP = 256          # threads per threadgroup of the reductions
MATMUL_N = 512
SAMPLE_SECONDS = 0.05  # a sample repeats a call for this long, so short calls are timed too
# metalkit's sides: the execution= each compiles with. "threads" is the reference model, a fiber
# per thread running the code as written, which the SIMT transform is checked against.
MODELS = {"metalkit": "auto", "metalkit threads": "threads"}
SIDES = (*MODELS, *RUNTIMES, "numpy")
PLAIN = "metalkit, stored in place"  # row 4's extra side, given in a note
Libraries = dict[str, mk.Library]  # metalkit side -> the library compiled for it
OpenCL = dict[str, Union[CpuOpenCL, str]]  # runtime -> its device, or why there is none


@dataclass
class Timing:
    """Seconds per call: the median sample and the spread of the samples; `cpu`, the least CPU
    time of this process (every thread of it: metalkit's pool, the OpenCL runtimes' workers,
    numpy) per call over the samples, which other processes on the machine inflate less."""
    median: float
    low: float
    high: float
    cpu: float = math.nan

    def __str__(self) -> str:
        spread = (self.high - self.low) / 2 / self.median * 100
        return f"{seconds(self.median)} ±{spread:.0f}%"


class Row:
    """One workload: its sides, timed in turns so that a change in the machine's load falls on
    every side alike, and what was noted on the way."""

    def __init__(self, key: str, label: str) -> None:
        self.key, self.label = key, label
        self.cells: dict[str, Union[Timing, str]] = {}   # side -> time, or why there is none
        self.execution: dict[str, str] = {}              # metalkit side -> kernel and its model
        self.kernels: dict[str, mk.Kernel] = {}          # metalkit side -> its kernel
        self.notes: list[str] = []
        self._sides: dict[str, tuple[Callable[[], object], Callable[[], None]]] = {}

    def add(self, side: str, run: Callable[[], object], check: Callable[[], None]) -> None:
        self._sides[side] = (run, check)

    def add_metalkit(self, side: str, kernel: mk.Kernel, run: Callable[[], object],
                     check: Callable[[], None]) -> None:
        self.execution[side] = f"{kernel.name} {kernel.execution}"
        self.kernels[side] = kernel
        self.add(side, run, check)

    def measure(self, reps: int) -> None:
        """Per side: a warm-up call (which also compiles), the check, then `reps` samples taken
        in turns with the other sides, then the check again. A wrong result or a metalkit error
        fills the side's cell instead of a time."""
        calls, samples, cpu = {}, {}, {}
        for side, (run, check) in self._sides.items():
            if self._try(side, run, check):
                t = time.perf_counter()
                run()
                calls[side] = max(1, math.ceil(SAMPLE_SECONDS / (time.perf_counter() - t)))
                samples[side] = []
                cpu[side] = math.inf
        for _ in range(reps):
            for side in list(samples):
                run, n = self._sides[side][0], calls[side]
                t, c = time.perf_counter(), time.process_time()
                if self._try(side, lambda: repeat(run, n)):
                    samples[side].append((time.perf_counter() - t) / n)
                    cpu[side] = min(cpu[side], (time.process_time() - c) / n)
                else:
                    del samples[side]
        for side, got in samples.items():
            if self._try(side, self._sides[side][1]):
                self.cells[side] = Timing(statistics.median(got), min(got), max(got), cpu[side])
        self._sides.clear()  # frees the workload's arrays before the next row allocates its own

    def _try(self, side: str, *steps: Callable[[], object]) -> bool:
        try:
            for step in steps:
                step()
            return True
        except (AssertionError, mk.MetalkitError) as e:
            self.cells[side] = "FAILED"
            self.notes.append(f"{side}: {type(e).__name__}: {e}")
            return False


def repeat(run: Callable[[], object], n: int) -> None:
    for _ in range(n):
        run()


def seconds(t: float) -> str:
    scale, unit = (1.0, "s") if t >= 1 else (1e-3, "ms") if t >= 1e-3 else (1e-6, "us")
    v = t / scale
    return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"


def expect(got: np.ndarray, want: np.ndarray, rtol: float) -> Callable[[], None]:
    """A check that `got` (filled with NaN until a run writes it) matches the float64 `want`."""
    got.fill(np.nan)

    def check() -> None:
        bad = ~np.isclose(got, want, rtol=rtol, atol=0)
        if bad.any():
            i = np.flatnonzero(bad)[0]
            raise AssertionError(f"wrong result: {bad.sum()} of {bad.size} values differ from "
                                 f"numpy's, e.g. [{i}] = {float(got.flat[i])!r} instead of "
                                 f"{float(want.flat[i])!r}")
    return check


def rng_floats(*shape: int, seed: int = 0) -> np.ndarray:
    # Values in [0, 1): sums of positive terms have a relative error below terms * 2^-24.
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


# ---------------------------------------------------------------------------- the workloads

def group_sums(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace, row: Row, kernel: str,
               group: int) -> Row:
    """A kernel that writes the sum of every `group` consecutive values of 2^24 floats, in
    threadgroups of GROUP; OpenCL runs the kernel of the same name where workloads.cl has one."""
    x = rng_floats(N)
    want = x.astype(np.float64).reshape(-1, group).sum(axis=1)
    out = {s: np.empty(N // group, np.float32) for s in SIDES}
    for side, lib in libs.items():
        k, o = lib[kernel], out[side]
        row.add_metalkit(side, k, lambda k=k, o=o: k(x, o, grid=N, threadgroup=GROUP),
                         expect(o, want, 1e-4))
    add_opencl(row, ocl, kernel, (N,), (GROUP,), lambda o: [x, o], out, want, 1e-4)
    row.add("numpy", lambda: x.reshape(-1, group).sum(axis=1, out=out["numpy"]),
            expect(out["numpy"], want, 1e-4))
    row.measure(opts.reps)
    return row


def add_opencl(row: Row, ocl: OpenCL, kernel: str, global_size: tuple[int, ...],
               local_size: Optional[tuple[int, ...]],
               args: Callable[[np.ndarray], list[Union[np.ndarray, np.generic]]],
               out: dict[str, np.ndarray], want: np.ndarray, rtol: float) -> None:
    """A side per OpenCL runtime with a device: `kernel` on args(its output), checked as
    expect(out[runtime], want, rtol) checks it. A device without the kernel shows n/a and why."""
    for name, dev in ocl.items():
        if not isinstance(dev, CpuOpenCL):
            continue
        if dev.has_kernel(kernel):
            row.add(name, dev.launcher(kernel, global_size, local_size, args(out[name]),
                                       [out[name]]), expect(out[name], want, rtol))
            continue
        row.cells[name] = "n/a"
        if dev.has_subgroups:
            row.notes.append(f"{name}: n/a: workloads.cl builds no {kernel} for the device "
                             f"(see the conditions there)")
        else:
            row.notes.append(f"{name}: n/a: the device's OpenCL C has no sub-groups "
                             f"(cl_khr_subgroups, __opencl_c_subgroups)")


def tree_reduction(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    row = Row("1", f"tree reduction 2^24 f32, groups of {GROUP}, 9 barriers")
    return group_sums(libs, ocl, opts, row, "tree_reduce", GROUP)


def simd_partials(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    row = Row("3a", "simd_sum per SIMD-group 2^24 f32, no barrier")
    return group_sums(libs, ocl, opts, row, "simd_partials", mk.device().simd_width)


def simd_reduction(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    row = Row("3b", f"simd_sum two-level 2^24 f32, groups of {GROUP}, 1 barrier")
    return group_sums(libs, ocl, opts, row, "simd_reduce", GROUP)


def tiled_matmul(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    n = MATMUL_N
    row = Row("2", f"tiled matmul {n}x{n} f32, 16x16 tiles, 2 barriers a tile")
    a, b = rng_floats(n, n, seed=1), rng_floats(n, n, seed=2)
    want = a.astype(np.float64) @ b.astype(np.float64)
    c = {s: np.empty((n, n), np.float32) for s in SIDES}
    for side, lib in libs.items():
        k, o = lib.matmul_tiled, c[side]
        row.add_metalkit(side, k, lambda k=k, o=o: k(a, b, o, n, grid=(n, n), threadgroup=(16, 16)),
                         expect(o, want, 1e-4))
    add_opencl(row, ocl, "matmul_tiled", (n, n), (16, 16), lambda o: [a, b, o, np.uint32(n)],
               c, want, 1e-4)
    row.add("numpy", lambda: np.matmul(a, b, out=c["numpy"]), expect(c["numpy"], want, 1e-4))
    row.measure(opts.reps)
    return row


def add_arrays(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    row = Row("4", "add_arrays 2^24 f32, no barrier")
    a, b = rng_floats(N, seed=1), rng_floats(N, seed=2)
    want = a.astype(np.float64) + b.astype(np.float64)
    out = {s: np.empty(N, np.float32) for s in SIDES}
    out[PLAIN] = np.empty(N, np.float32)
    for side, lib in libraries(HERE.parent / "kernels" / "add_arrays.metal").items():  # bundled
        k, o = lib.add_arrays, out[side]
        row.add_metalkit(side, k, lambda k=k, o=o: k(a, b, o), expect(o, want, 1e-7))
    add_opencl(row, ocl, "add_arrays", (N,), None, lambda o: [a, b, o], out, want, 1e-7)
    row.add("numpy", lambda: np.add(a, b, out=out["numpy"]), expect(out["numpy"], want, 1e-7))
    # The metalkit side's kernel storing its output in place, timed in turns with the rest: what
    # storing it past the cache gains (a dispatch streams from METALKIT_STREAM_BYTES written).
    k = row.kernels["metalkit"]
    row.add(PLAIN, lambda: with_env("METALKIT_STREAM_BYTES", str(1 << 62), lambda: k(a, b, out[PLAIN])),
            expect(out[PLAIN], want, 1e-7))
    row.measure(opts.reps)
    plain = row.cells.pop(PLAIN, None)
    if isinstance(plain, Timing) and isinstance(row.cells.get("metalkit"), Timing):
        row.notes.append(f"metalkit storing in place (not past the cache): {plain}; "
                         f"{bench_ratio(row.cells['metalkit'].median, plain.median, 'metalkit / that')}")
    return row


def with_env(name: str, value: str, run: Callable[[], object]) -> None:
    """run() with the environment variable `name` set to `value`, then as it was."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        run()
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def libraries(path: Path) -> Libraries:
    return {side: mk.load(path, execution=model) for side, model in MODELS.items()}


def rss() -> Optional[int]:
    """Resident set size in bytes, where /proc tells it."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def barrier_call(libs: Libraries, ocl: OpenCL, opts: argparse.Namespace) -> Row:
    row = Row("5", "reverse64: 1 group of 64, 1 barrier, per call")
    x = rng_floats(64)
    want = x[::-1].astype(np.float64)
    out = {s: np.empty(64, np.float32) for s in SIDES}
    runs = {}
    for side, lib in libs.items():
        k, o = lib.reverse64, out[side]
        runs[side] = lambda k=k, o=o: k(x, o, grid=64, threadgroup=64)
        row.add_metalkit(side, k, runs[side], expect(o, want, 0))
    add_opencl(row, ocl, "reverse64", (64,), (64,), lambda o: [x, o], out, want, 0)
    row.add("numpy", lambda: np.copyto(out["numpy"], x[::-1]), expect(out["numpy"], want, 0))
    row.measure(opts.reps)
    if isinstance(row.cells["metalkit"], Timing):
        row.notes.append(memory_over(runs["metalkit"], opts.calls))
    return row


def memory_over(run: Callable[[], None], calls: int) -> str:
    """RSS before and after `calls` calls of run: a call that leaks shows as growth."""
    gc.collect()
    before = rss()
    t = time.perf_counter()
    repeat(run, calls)
    each = seconds((time.perf_counter() - t) / calls)
    gc.collect()
    after = rss()
    if before is None or after is None:
        return f"memory: not measured (no /proc/self/statm); {calls} calls took {each} each"
    return (f"memory: metalkit RSS {before / 2**20:.1f} MiB before {calls} calls of reverse64, "
            f"{after / 2**20:.1f} MiB after ({(after - before) / 2**20:+.2f} MiB, "
            f"{(after - before) / calls:+.1f} bytes a call); those calls took {each} each")


WORKLOADS = {  # name on the command line -> the rows it measures
    "reduce": (tree_reduction,),
    "matmul": (tiled_matmul,),
    "simd": (simd_partials, simd_reduction),
    "add": (add_arrays,),
    "call": (barrier_call,),
}


# ---------------------------------------------------------------------------- the report

def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else ""


def header(ocl: OpenCL, reps: int) -> None:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"cores: {os.cpu_count()} ({usable} usable by this process); {load()}")
    commit = subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    print(f"metalkit {mk.__version__}{f' at commit {commit}' if commit else ''}: "
          f"{mk.device().name} [{mk.device().backend}]")
    for name, dev in ocl.items():
        print(f"{name}: {dev.name}" if isinstance(dev, CpuOpenCL) else
              f"{name}: column skipped: {dev}")
    print(f"numpy {np.__version__}; python {sys.version.split()[0]}")
    print(f"times: median of {reps} samples, the sides of a row sampled in turns, after a warm-up "
          f"call (which also compiles); a sample repeats the call for at least {SAMPLE_SECONDS} s; "
          f"± is half the spread of the samples")
    print()


def ratio(mine: object, other: object, what: str) -> Optional[str]:
    if isinstance(mine, Timing) and isinstance(other, Timing):
        return bench_ratio(mine.median, other.median, what)
    return None


def table(rows: list[Row]) -> None:
    width = max(len(r.label) for r in rows) + 4
    print(f"{'':{width}}" + "".join(f"{s:>18}" for s in SIDES))
    for r in rows:
        cells = "".join(f"{str(r.cells.get(s, '-')):>18}" for s in SIDES)
        print(f"{r.key:<4}{r.label:{width - 4}}{cells}")
    print()
    print("CPU time per call (least over the samples; all threads of this process): a loaded "
          "machine inflates it less than wall time")
    for r in rows:
        cells = "".join(f"{seconds(c.cpu) if isinstance(c, Timing) else str(c):>18}"
                        for c in (r.cells.get(s, "-") for s in SIDES))
        print(f"{r.key:<4}{r.label:{width - 4}}{cells}")
    print()
    print("ratios: metalkit's time divided by metalkit threads', the faster OpenCL runtime's "
          "and numpy's")
    tree = next((r.cells.get("metalkit") for r in rows if r.key == "1"), None)
    for r in rows:
        mine = r.cells.get("metalkit")
        opencl = {s: r.cells[s] for s in RUNTIMES if isinstance(r.cells.get(s), Timing)}
        best = min(opencl, key=lambda s: opencl[s].median, default=None)
        parts = [ratio(mine, r.cells.get("metalkit threads"), "metalkit / metalkit threads"),
                 ratio(mine, opencl.get(best), f"metalkit / {best}"),
                 ratio(mine, r.cells.get("numpy"), "metalkit / numpy")]
        if r.key.startswith("3"):  # the SIMD-group reductions against the barrier one
            parts.append(ratio(mine, tree, f"metalkit {r.key} / metalkit 1"))
        print(f"{r.key:<4}" + ("   ".join(p for p in parts if p) or "no ratio: a side is missing"))
    print()
    for r in rows:
        models = "; ".join(f"{side} {m}" for side, m in r.execution.items())
        print(f"{r.key:<4}execution model: {models}")
        for note in r.notes:
            print(f"{'':4}{note}")
    print(f"\nafter the run: {load()}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="*", metavar="workload",
                   help=f"run only these, of {', '.join(WORKLOADS)} (default: all)")
    p.add_argument("--reps", type=int, default=5, help="timed samples per measurement (default 5)")
    p.add_argument("--calls", type=int, default=100_000,
                   help="calls of reverse64 between the two memory readings (default 100000)")
    opts = p.parse_args()
    unknown = set(opts.workloads) - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workload {', '.join(sorted(unknown))}; "
                f"choose from {', '.join(WORKLOADS)}")

    ocl = open_devices()
    header(ocl, opts.reps)
    libs = libraries(HERE / "workloads.metal")
    rows = [fn(libs, ocl, opts) for name, fns in WORKLOADS.items()
            if not opts.workloads or name in opts.workloads for fn in fns]
    table(rows)
    return 1 if any(c == "FAILED" for r in rows for c in r.cells.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
