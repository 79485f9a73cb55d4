"""A small kernel's cold compile on the CPU backend, as a kernel compiler's JIT meets it.

    python bench/bench_small_compile.py [--reps N]

Each sample is `metalkit.compile()` of a source never compiled before (a fresh comment makes
it new, so no cache serves it) in a process that has already imported metalkit and compiled
once. Five kinds of small kernel: the README's saxpy, an add/scale, an elementwise kernel of
the kind tinygrad renders (a few `metal::` calls), a half-precision vector kernel, and a
threadgroup reduction with barriers (the SIMT path). Each kind is compiled both ways in turns,
so a change in the machine's load falls on both:

  before  the pipeline without the precompiled header (`metalkit.msl.pch.ENABLED = False`):
          every module compiled from its whole preprocessed text, the pre-pass reading the
          headers each time
  now     against the precompiled header of <metal_stdlib>

Times are wall time and, in brackets, the CPU time of the process and its compilers (which a
loaded machine inflates less). Every compiled kernel is run once and checked against numpy. The kernel cache is a temporary
directory; zig's runtime libraries are shared with the usual cache (they are not what is
measured). Also printed: the first compile into an empty cache, which builds the header once.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

import metalkit as mk
from metalkit._bench import ratio, times as factor
from metalkit.msl import cache, pch, toolchain

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"
PARAMS = np.dtype([("scale", "f4"), ("n", "u4")], align=True)

KERNELS = {
    "saxpy": ("""
struct Params { float scale; uint n; };
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant Params& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < p.n) y[i] = p.scale * x[i] + y[i];
}""", lambda lib, rng: _check_saxpy(lib, rng)),
    "add_scale": ("""
kernel void add_scale(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                      device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = 2.0f * (a[i] + b[i]);
}""", lambda lib, rng: _check_binary(lib.add_scale, rng, lambda a, b: np.float32(2) * (a + b))),
    "elementwise": ("""
kernel void E_4_32(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]],
                   device const float* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]],
                   uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; int lidx0 = lid.x;
  int alu0 = ((gidx0 * 32) + lidx0);
  float val0 = *(data1 + alu0);
  float val1 = *(data2 + alu0);
  float alu1 = metal::max(val0, 0.0f);
  *(data0 + alu0) = (metal::exp2(val1 * 1.442695f) * alu1 + metal::precise::sqrt(metal::fabs(val0)));
}""", lambda lib, rng: _check_binary(
        lambda a, b, out: lib.E_4_32(out, a, b, grid=128, threadgroup=32), rng,
        lambda a, b: np.exp2(b * np.float32(1.442695)) * np.maximum(a, 0) + np.sqrt(np.abs(a)), n=128, rtol=2e-6)),
    "half4": ("""
kernel void mix_h(device const half4* a [[buffer(0)]], device half4* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    out[i] = metal::clamp(a[i] * half(0.5) + half4(1.0h), half(0.0), half(2.0));
}""", lambda lib, rng: _check_half(lib, rng)),
    "reduce": ("""
kernel void r_256(device float* out [[buffer(0)]], device const float* x [[buffer(1)]],
                  uint gid [[threadgroup_position_in_grid]], uint lid [[thread_position_in_threadgroup]]) {
  threadgroup float tmp[64];
  tmp[lid] = x[gid * 64 + lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 32; s > 0; s >>= 1) {
    if (lid < s) tmp[lid] += tmp[lid + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lid == 0) out[gid] = tmp[0];
}""", lambda lib, rng: _check_reduce(lib, rng)),
}


def _check_saxpy(lib, rng) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    ref = np.float32(2) * x + y
    lib.saxpy(x, y, np.array((2.0, 1000), PARAMS)[()])
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def _check_binary(kernel, rng, ref, n: int = 1001, rtol: float = 1e-6) -> None:
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(a)
    kernel(a, b, out)
    np.testing.assert_allclose(out, ref(a, b), rtol=rtol)


def _check_half(lib, rng) -> None:
    a = rng.standard_normal((257, 4)).astype(np.float16)
    out = np.empty_like(a)
    lib.mix_h(a, out)
    ref = np.clip(a * np.float16(0.5) + np.float16(1), np.float16(0), np.float16(2))
    np.testing.assert_array_equal(out, ref)


def _check_reduce(lib, rng) -> None:
    x = rng.standard_normal(64 * 9).astype(np.float32)
    out = np.empty(9, np.float32)
    lib.r_256(out, x, grid=64 * 9, threadgroup=64)
    np.testing.assert_allclose(out, x.reshape(9, 64).sum(axis=1), rtol=1e-5, atol=1e-5)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the compilers) so far."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def compile_once(kind: str, rng) -> tuple[float, float]:
    """Wall and CPU seconds of one cold compile of ``kind``."""
    body, check = KERNELS[kind]
    src = f"{HEADER}// {uuid.uuid4().hex}\n{body}\n"
    c, t = _cpu(), time.perf_counter()
    lib = mk.compile(src, filename=f"{kind}.metal")
    seconds, cpu = time.perf_counter() - t, _cpu() - c
    check(lib, rng)
    return seconds, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="compiles of each kernel each way (default 7)")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    tmp = tempfile.TemporaryDirectory(prefix="bench-small-compile-")
    zig = os.environ.get("ZIG_GLOBAL_CACHE_DIR") or str(cache.root() / "zig")  # before the cache moves
    os.environ.update(METALKIT_CACHE_DIR=str(Path(tmp.name) / "cache"), METALKIT_DEVICE="cpu",
                      ZIG_GLOBAL_CACHE_DIR=zig, ZIG_LOCAL_CACHE_DIR=str(Path(tmp.name) / "zig-local"))
    mk.use("cpu")
    tc = toolchain.find()
    first = compile_once("add_scale", rng)[0]  # into the empty cache: imports the front end, builds the header
    pch.ENABLED = False
    first_before = compile_once("add_scale", rng)[0]
    times = {kind: {False: [], True: []} for kind in KERNELS}
    for rep in range(args.reps):
        for kind in KERNELS:
            for enabled in ((False, True) if rep % 2 else (True, False)):
                pch.ENABLED = enabled
                times[kind][enabled].append(compile_once(kind, rng))
    pch.ENABLED = True
    print(f"compiler: {tc.kind} {tc.path} ({tc.version()}); {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; median of {args.reps} cold compiles each way, wall time (CPU time)")
    print(f"{'kernel':<12} {'before':>16} {'now':>16}")
    rows = list(times.items())
    rows.append(("all", {e: [x for t in times.values() for x in t[e]] for e in (False, True)}))
    for kind, t in rows:
        (before, before_cpu), (now, now_cpu) = ([statistics.median(x[i] for x in t[e]) for i in (0, 1)]
                                                for e in (False, True))
        print(f"{kind:<12} {before * 1e3:5.0f} ({before_cpu * 1e3:3.0f}) ms {now * 1e3:5.0f} ({now_cpu * 1e3:3.0f}) ms"
              f"   {ratio(now, before, 'now / before')}; CPU {factor(now_cpu / before_cpu)} the time"
              + ("  (goal: now < 100 ms)" if kind == "all" else ""))
    headers = list((cache.cache_dir() / "pch").glob("*.pch"))
    print(f"first compile into an empty cache (imports the front end, builds the precompiled header once): "
          f"{first * 1e3:.0f} ms; the next, before: {first_before * 1e3:.0f} ms; "
          f"header {sum(h.stat().st_size for h in headers) / 2**20:.1f} MiB")
    tmp.cleanup()


if __name__ == "__main__":
    main()
