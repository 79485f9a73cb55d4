"""Compiled modules are unloaded once nothing refers to them: a process that compiles and drops
thousands of kernels keeps flat memory and mappings, and what it still holds keeps working.
Each run is a child process, measuring its own /proc/self."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import child_env

# argv[1] kernels, each its own module: one is compiled, the others are copies of it stored
# in the cache under their own sources' keys (a distinct file each, so a distinct dlopen
# handle and mappings, without a compiler run apiece). Each is compiled (a cache hit),
# checked against numpy on random data, and dropped.
SCRIPT = textwrap.dedent("""
    import re, shutil, sys, numpy as np, metalkit as mk
    from metalkit import library
    from metalkit.msl import cache, toolchain
    from metalkit.msl import build
    N = int(sys.argv[1])
    # Threadgroup storage (a thread_local in the module) and a barrier (the runtime's table):
    # what must be safe to unload.
    SRC = ("#include <metal_stdlib>\\nusing namespace metal;\\n"
           "kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\\n"
           "              uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {\\n"
           "  threadgroup float s[256];\\n"
           "  s[l] = x[i] * 3.0f;\\n"
           "  threadgroup_barrier(mem_flags::mem_threadgroup);\\n"
           "  y[i] = s[l] + 1.0f;\\n"
           "}\\n// ")
    rng = np.random.default_rng()

    def check(kernel, n):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full_like(x, np.nan)
        kernel(x, y, grid=n)
        np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1))

    first = mk.compile(SRC + "0")
    kept = first.k  # a kernel held after its library is gone
    module = build.build(SRC + "0")
    tc = toolchain.find()
    for i in range(1, N):
        with cache.workspace() as tmp:
            shutil.copy(module, tmp / "module.so")
            cache.store(build.Options.of(SRC + str(i)).key(tc, None), tmp / "module.so", {}, ["k"])
    del first

    def mappings():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    def rss_kib():
        with open("/proc/self/status") as f:
            return int(re.search(r"VmRSS:\\s+(\\d+)", f.read()).group(1))

    modules = lambda: sum(1 for line in open("/proc/self/maps") if "/cpu/" in line and ".so" in line)
    warm = 300  # past the first LIBRARY_CACHE (64) libraries, so the cache is full and turning over
    for i in range(1, N):
        check(mk.compile(SRC + str(i)).k, (1, 31, 1000)[i % 3])
        if i == warm:
            base_maps, base_rss = mappings(), rss_kib()
    # Measured before the kept kernel's call: its 4097 threads are two chunks, and a pool worker
    # that first takes one then maps its fiber stacks (when it wakes in time is the scheduler's).
    maps, rss = mappings(), rss_kib()
    check(kept, 4097)
    print("maps", base_maps, maps, "rss", base_rss, rss, "modules", modules())
    assert maps <= base_maps + 8, (base_maps, maps)
    assert rss <= base_rss + 4096, (base_rss, rss)
    # The library cache holds LIBRARY_CACHE libraries, each one module (4 mappings or so).
    assert modules() <= 8 * (library.LIBRARY_CACHE + 2), modules()
    print("ok")
""")


def test_two_thousand_kernels_compiled_and_dropped_keep_mappings_and_memory_flat(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, "2000"], env=child_env(tmp_path / "cache"),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


# A queued call keeps its kernel's module loaded after every Python reference is gone and the
# library has left the in-memory cache; it runs correctly at the end of the batch.
QUEUED = textwrap.dedent("""
    import gc, numpy as np, metalkit as mk
    from metalkit import _core, library
    SRC = ("#include <metal_stdlib>\\nusing namespace metal;\\n"
           "kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\\n"
           "              uint i [[thread_position_in_grid]]) { y[i] = x[i] - 2.5f; }\\n")
    _core._emulate_gpu_batches(True)
    rng = np.random.default_rng()
    x = rng.standard_normal(1001).astype(np.float32)
    y = np.zeros_like(x)
    with mk.batch():
        mk.compile(SRC).k(x, y)
        library._libraries.clear()
        gc.collect()
        assert [l for l in open("/proc/self/maps") if "/cpu/" in l and ".so" in l], "unloaded while queued"
        np.testing.assert_array_equal(y, 0)  # queued, not run yet
    np.testing.assert_array_equal(y, x - np.float32(2.5))
    gc.collect()
    assert not [l for l in open("/proc/self/maps") if "/cpu/" in l and ".so" in l], "module still mapped"
    print("ok")
""")


def test_a_queued_call_keeps_its_module_until_the_batch_ends(tmp_path):
    p = subprocess.run([sys.executable, "-c", QUEUED], env=child_env(tmp_path / "cache"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
