"""Compile on first use, measured: a large .metal file on the CPU backend.

    python bench/bench_compile.py [FILE.metal] [-I DIR]... [--kernel NAME] [--jobs N] [--no-build]

Without FILE, a synthetic file of 256 kernels (templates instantiated by host_name, plain
kernels, threadgroup reductions) is generated. Each figure comes from a child process with its
own empty kernel cache (zig's runtime libraries are shared, so they are not rebuilt):

  cold      load() of the file, then the first use of one kernel (compiled alone), and a call
            (the synthetic file's kernel is checked against numpy; a FILE's kernel is only made
            ready, as its arguments are unknown here)
  warm      a second process, same cache: import, load() and the first use, and the whole
            process's wall time (interpreter start included)
  build     Library.build() of the whole file, one compiler per core, into an empty cache
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, metalkit as mk
t_import = time.perf_counter() - t0
path, name, mode, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
dirs = json.loads(sys.argv[5])
t = time.perf_counter()
lib = mk.load(path, include_dirs=dirs)
t_load = time.perf_counter() - t
out = {"import": t_import, "load": t_load, "kernels": len(lib.kernels)}
if mode == "build":
    t = time.perf_counter()
    try:
        lib.build(jobs=jobs, progress=False)
    except mk.CompileError as e:  # the rest is built; say which do not compile
        out["failed"] = e.msg.split("; the first:")[0]
    out["build"] = time.perf_counter() - t
else:
    t = time.perf_counter()
    k = lib[name]
    if name.startswith("axpy_f32_"):  # the synthetic file's: y = a * x + y, N times over
        n = int(name.rsplit("_", 1)[1])
        rng = np.random.default_rng(1)
        x = rng.standard_normal(1000).astype(np.float32); y = rng.standard_normal(1000).astype(np.float32)
        ref = y.copy()
        for _ in range(n):
            ref = np.float32(0.5) * x + ref
        k(x, y, np.float32(0.5))
        np.testing.assert_allclose(y, ref, rtol=1e-5)
    out["first"] = time.perf_counter() - t
out["total"] = time.perf_counter() - t0
print(json.dumps(out))
"""

TYPES = {"f32": "float", "f16": "half", "i32": "int", "u32": "uint"}


def synthetic() -> str:
    """256 kernels: 4 templates x 4 types x 8 sizes as host_name instantiations, 128 plain kernels."""
    lines = ["#include <metal_stdlib>", "using namespace metal;"]
    lines.append("""
template <typename T, int N>
kernel void axpy(device const T* x [[buffer(0)]], device T* y [[buffer(1)]], constant T& a [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    T acc = y[i];
    for (int k = 0; k < N; ++k) acc = a * x[i] + acc;
    y[i] = acc;
}
template <typename T, int N>
kernel void stencil(device const T* x [[buffer(0)]], device T* y [[buffer(1)]], constant uint& n [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
    T s = T(0);
    for (int k = -N; k <= N; ++k) { int j = clamp(int(i) + k, 0, int(n) - 1); s += x[j]; }
    y[i] = s;
}
template <typename T, int N>
kernel void reduce(device const T* x [[buffer(0)]], device T* out [[buffer(1)]],
                   threadgroup T* tmp [[threadgroup(0)]], uint lid [[thread_position_in_threadgroup]],
                   uint gid [[thread_position_in_grid]], uint tg [[threads_per_threadgroup]],
                   uint group [[threadgroup_position_in_grid]]) {
    tmp[lid] = x[gid] * T(N);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = tg / 2; s > 0; s >>= 1) {
        if (lid < s) tmp[lid] += tmp[lid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) out[group] = tmp[0];
}
template <typename T, int N>
kernel void simd_scan(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    T v = x[i];
    for (int k = 0; k < N; ++k) v = simd_prefix_inclusive_sum(v);
    y[i] = v;
}""")
    for tmpl in ("axpy", "stencil", "reduce", "simd_scan"):
        for short, t in TYPES.items():
            for n in range(1, 9):
                lines.append(f'template [[host_name("{tmpl}_{short}_{n}")]] kernel void {tmpl}<{t}, {n}>('
                             + {"axpy": f"device const {t}*, device {t}*, constant {t}&, uint",
                                "stencil": f"device const {t}*, device {t}*, constant uint&, uint",
                                "reduce": f"device const {t}*, device {t}*, threadgroup {t}*, uint, uint, uint, uint",
                                "simd_scan": f"device const {t}*, device {t}*, uint"}[tmpl] + ");")
    for i in range(128):
        lines.append(f"kernel void plain_{i}(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                     f"{{ float v = x[i]; for (int k = 0; k < {i % 7 + 1}; ++k) v = fma(v, {i}.5f, sin(v)); "
                     "x[i] = v; }")
    return "\n".join(lines) + "\n"


def run(path: str, name: str, mode: str, cache: Path, dirs: list[str], jobs: int) -> dict:
    from metalkit.msl import cache as mk_cache
    zig = str(mk_cache.root() / "zig")
    # zig's global cache (its runtime libraries) is shared; its local one (compiled objects, which
    # would make a second "cold" compile of the same module a cache hit) is the run's own.
    env = dict(os.environ, METALKIT_CACHE_DIR=str(cache), METALKIT_DEVICE="cpu", ZIG_GLOBAL_CACHE_DIR=zig,
               ZIG_LOCAL_CACHE_DIR=str(cache / "zig-local"))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, path, name, mode, str(jobs), json.dumps(dirs)], env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{mode} run failed:\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="a large .metal file (default: a synthetic one)")
    ap.add_argument("-I", dest="dirs", action="append", default=[], help="include directory")
    ap.add_argument("--kernel", help="the kernel to use first (default: one from the middle of the file)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compilers at a time for build()")
    ap.add_argument("--no-build", action="store_true", help="measure first use only (a whole build takes minutes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        tmp = Path(tmp)
        if args.file:
            path = str(Path(args.file).resolve())
        else:
            path = str(tmp / "synthetic.metal")
            Path(path).write_text(synthetic())
        name = args.kernel or ("axpy_f32_5" if not args.file else "")
        if not name:  # a kernel from the middle of the file, by the front end's listing
            import metalkit as mk
            names = mk.load(path, include_dirs=args.dirs).kernels
            name = names[len(names) // 2]
        cold = run(path, name, "first", tmp / "cache-a", args.dirs, args.jobs)
        warm = run(path, name, "first", tmp / "cache-a", args.dirs, args.jobs)
        built = None if args.no_build else run(path, name, "build", tmp / "cache-b", args.dirs, args.jobs)
    print(f"file: {path} ({cold['kernels']} kernels), first kernel: {name}")
    print(f"cold   load() {cold['load']:.2f} s + first use {cold['first']:.2f} s = "
          f"{cold['load'] + cold['first']:.2f} s (goal < 10 s)")
    print(f"warm   import {warm['import']:.2f} s + load() {warm['load']:.3f} s + first use {warm['first']:.3f} s = "
          f"{warm['total']:.2f} s in process, {warm['wall']:.2f} s wall with interpreter start (goal < 0.5 s)")
    if built is None:
        return
    print(f"build  whole file {built['build']:.1f} s with {args.jobs} compilers on {os.cpu_count()} cores"
          + (f" ({built['failed']})" if "failed" in built else ""))


if __name__ == "__main__":
    main()
