"""add_arrays against numpy (and PyOpenCL on a CPU OpenCL runtime, where one is
installed), plus the per-call cost of a 1-thread kernel and of metalkit.run.

    python bench/bench_add.py            # 2^24 float32
"""
from __future__ import annotations

import argparse

import numpy as np

import metalkit as mk
from metalkit._bench import measure, per_call

OPENCL_SRC = """
__kernel void add_arrays(__global const float* a, __global const float* b, __global float* out) {
    size_t i = get_global_id(0); out[i] = a[i] + b[i];
}
__kernel void touch(__global float* x) { x[get_global_id(0)] += 1.0f; }
"""


def opencl(n: int) -> dict:
    """The same work through PyOpenCL on a CPU OpenCL platform, or {"error": why not}."""
    try:
        import pyopencl as cl
    except ImportError:
        return {"error": "pyopencl is not installed (pip install .[bench])"}
    try:
        ctx = cl.Context(dev_type=cl.device_type.CPU)
        prg = cl.Program(ctx, OPENCL_SRC).build()
    except Exception as e:  # reported in the output: the comparison is then missing, not faked
        lines = str(e).strip().splitlines()
        why = next((ln for ln in lines if "error:" in ln), lines[-1] if lines else type(e).__name__)
        return {"error": f"no usable CPU OpenCL runtime: {why.strip()}"}
    q = cl.CommandQueue(ctx)
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.empty_like(a)
    mf = cl.mem_flags
    da = cl.Buffer(ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=a)
    db = cl.Buffer(ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=b)
    do = cl.Buffer(ctx, mf.WRITE_ONLY | mf.USE_HOST_PTR, hostbuf=out)
    add = prg.add_arrays
    touch = prg.touch
    x = np.zeros(1, np.float32)
    dx = cl.Buffer(ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=x)

    def run_add():
        add(q, (n,), None, da, db, do)
        cl.enqueue_copy(q, out, do)  # results visible to the host, as metalkit's are

    def run_touch():
        touch(q, (1,), None, dx).wait()

    res = {"add_arrays": per_call(run_add), "one_thread_call": per_call(run_touch),
           "device": ctx.devices[0].name.strip()}
    assert np.allclose(out, a + b)
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
    print(f"numpy time / metalkit time for add_arrays: {r['numpy_add'] / r['add_arrays']:.2f}")
    print(f"OpenCL device: {ocl['device']}" if ok else f"OpenCL: {ocl['error']}")


if __name__ == "__main__":
    main()
