"""Where a fault is: a KernelFault names the statement's own line (from the module's line
tables), the threadgroup and, where known, the thread. Each fault runs in a child process,
so a failure cannot take the test run down."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from conftest import HEADER, child_env

TAG = uuid.uuid4().hex  # sources no earlier run has compiled

# Each kernel faults in one chosen thread only (`bad`, a linear thread id in the grid).
KERNELS = HEADER + f"// {TAG}\n" + """
static void bump(device atomic_uint* c, uint j) {
    atomic_fetch_add_explicit(&c[j], 1u, memory_order_relaxed);   // LINE helper
}
kernel void loop1d(device float* x [[buffer(0)]], constant uint& bad [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
    float v = x[i] * 2.0f;
    x[i] = v;
    if (i == bad)
        x[i + 0x40000000u] = v;                                      // LINE loop1d
}
kernel void loop2d(device float* x [[buffer(0)]], constant uint& bad [[buffer(1)]],
                   uint2 p [[thread_position_in_grid]], uint2 n [[threads_per_grid]]) {
    uint i = p.y * n.x + p.x;
    x[i] += 1.0f;
    if (i == bad) x[i + 4096u] = 0.0f;                               // LINE loop2d
}
kernel void atomics(device atomic_uint* c [[buffer(0)]], constant uint& bad [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    bump(c, i == bad ? i + 0x40000000u : i);                         // LINE atomics
}
kernel void simt(device float* x [[buffer(0)]], constant uint& bad [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    float s = simd_sum(x[i]);
    if (i == bad)
        x[i + 0x40000000u] = s;                                      // LINE simt
}
kernel void deep(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    float big[4000000];                                              // 16 MB of locals: more than any stack
    for (uint k = 0; k < 4000000; ++k) big[k] = x[i] + float(k);
    x[i] = big[(i * 7919u) % 4000000u];
}
"""

# Runs one kernel in a child and prints what it raised, and the array afterwards.
CHILD = textwrap.dedent("""
    import json, sys, numpy as np, metalkit as mk
    src, name, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    lib = mk.load(src)
    x = np.load(sys.argv[4])
    args = [x] + kw.pop("scalars", [])
    if "tg2" in kw:
        kw["threadgroup"] = tuple(kw.pop("tg2"))
        kw["grid"] = tuple(kw.pop("grid2"))
    try:
        getattr(lib, name)(*args, **kw)
        print(json.dumps({"raised": None}))
    except mk.MetalkitError as e:
        print(json.dumps({"raised": type(e).__name__, "message": str(e)}))
""")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    src = d / "faults.metal"
    src.write_text(KERNELS)
    return src, d / "cache"


def line_of(marker: str) -> int:
    return next(n for n, text in enumerate(KERNELS.splitlines(), 1) if text.endswith(f"// LINE {marker}"))


def fault(kernels, tmp_path, name, x, **kw) -> str:
    src, cache = kernels
    np.save(tmp_path / "x.npy", x)
    p = subprocess.run([sys.executable, "-c", CHILD, str(src), name, json.dumps(kw), str(tmp_path / "x.npy")],
                       env=child_env(cache), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["raised"] == "KernelFault", out
    return out["message"]


@pytest.mark.parametrize("check", [False, True])
def test_a_loop_kernel_names_the_statement_the_group_and_the_thread(kernels, tmp_path, rng, check):
    n, tg = 1000, 64
    bad = int(rng.integers(0, n))
    msg = fault(kernels, tmp_path, "loop1d", rng.random(n, dtype=np.float32), scalars=[bad], threadgroup=tg,
                check=check)
    src = str(kernels[0])
    assert msg.startswith(f"kernel 'loop1d' ({src}:{line_of('loop1d') - 5}): invalid memory access at address ")
    assert f", in threadgroup ({bad // tg}, 0, 0), thread {bad % tg} at ({bad % tg}, 0, 0) in its threadgroup, " \
           f"at {src}:{line_of('loop1d')}; " in msg, msg


def test_a_2d_grid_names_the_thread_by_its_position(kernels, tmp_path, rng):
    w, h, tg = 37, 23, (8, 4)
    x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
    msg = fault(kernels, tmp_path, "loop2d", rng.random(w * h, dtype=np.float32), scalars=[y * w + x],
                tg2=list(tg), grid2=[w, h], check=True)
    lx, ly = x % tg[0], y % tg[1]
    # The last threadgroup of a row is narrower: a thread's index counts in its group's real width.
    width = min(tg[0], w - x // tg[0] * tg[0])
    assert f"past the end of parameter 'x' [[buffer(0)]] of {w * h} elements (element {y * w + x + 4096}), " \
           f"in threadgroup ({x // tg[0]}, {y // tg[1]}, 0), thread {ly * width + lx} at ({lx}, {ly}, 0) in its " \
           f"threadgroup, at {kernels[0]}:{line_of('loop2d')}; check the kernel's bounds" in msg, msg


def test_a_fault_in_a_user_helper_names_the_helpers_line(kernels, tmp_path, rng):
    # The faulting instruction is metalkit's atomic (a header), inlined into the user's helper.
    bad = int(rng.integers(0, 300))
    msg = fault(kernels, tmp_path, "atomics", np.zeros(300, np.uint32), scalars=[bad], threadgroup=32)
    assert f"in threadgroup ({bad // 32}, 0, 0), thread {bad % 32} at ({bad % 32}, 0, 0) in its threadgroup, " \
           f"at {kernels[0]}:{line_of('helper')}; " in msg, msg


def test_a_simt_kernel_names_the_statement_and_the_simdgroup(kernels, tmp_path, rng):
    bad = int(rng.integers(0, 256))
    msg = fault(kernels, tmp_path, "simt", rng.random(256, dtype=np.float32), scalars=[bad], threadgroup=128)
    sg = (bad % 128) // 32
    assert f"in threadgroup ({bad // 128}, 0, 0), SIMD-group {sg} (threads {sg * 32}-{sg * 32 + 31}), " \
           f"at {kernels[0]}:{line_of('simt')}; " in msg, msg


@pytest.mark.parametrize("n", [5, 4000])  # one group on the calling thread; many on the pool's workers too
def test_a_stack_overflow_in_a_loop_kernel_is_named_as_such(kernels, tmp_path, rng, n):
    msg = fault(kernels, tmp_path, "deep", rng.random(n, dtype=np.float32), threadgroup=1)
    assert "stack overflow in threadgroup (" in msg and "as its first thread started (the thread's local variables " \
           "do not fit on the stack); use smaller per-thread arrays" in msg, msg
    assert "out of bounds" not in msg


def test_a_fault_in_an_included_header_names_the_header(tmp_path, rng):
    inc = tmp_path / "scale.h"
    inc.write_text("inline void scale(device float* x, uint i) {\n    x[i * 4096u] *= 2.0f;\n}\n")
    src = tmp_path / "uses_header.metal"
    src.write_text(HEADER + f'// {TAG}\n#include "scale.h"\n'
                   "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
                   "    scale(x, i);\n}\n")
    np.save(tmp_path / "x.npy", rng.random(64, dtype=np.float32))
    p = subprocess.run([sys.executable, "-c", CHILD, str(src), "k", json.dumps({"check": True}),
                        str(tmp_path / "x.npy")], env=child_env(tmp_path / "cache"), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    msg = json.loads(p.stdout.strip().splitlines()[-1])["message"]
    assert f"thread 1 at (1, 0, 0) in its threadgroup, at {inc}:2; " in msg, msg


def test_the_locator_knows_no_line_outside_a_module_with_line_tables(tmp_path):
    from metalkit.msl import symbols
    junk = tmp_path / "not_elf.so"
    junk.write_bytes(b"\x7fELF garbage" * 10)
    assert symbols.source_line(str(junk), 0x1000) == ""
    assert symbols.source_line(str(tmp_path / "missing.so"), 0) == ""
