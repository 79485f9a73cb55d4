"""Faults the CPU simulator reports as KernelFault, naming the kernel, the threadgroup, the thread
and the statement's own line (from the module's line tables); the process survives and later calls
work. Faults whose place is checked run in child processes, so a failure cannot take the test
run down."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, child_env
from conftest import build

CPU_ONLY = pytest.mark.parametrize("device", ["cpu"], indirect=True)  # faults a GPU cannot name

SRC = """
static void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }

kernel void early_return(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    if (i % 2) return;
    sync_all();
    x[i] = 1;
}

kernel void two_barriers(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
    if (l < 3) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[l] = 2;
}

kernel void split_by_simdgroup(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
    if (l < 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[l] = 3;
}

kernel void wild_write(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i + 0x40000000u] = 1;
}

kernel void divide(device const int* a [[buffer(0)]], device const int* b [[buffer(1)]], device int* q [[buffer(2)]],
                   uint i [[thread_position_in_grid]]) {
    q[i] = a[i] / b[i];
}

kernel void divide_then_sum(device const int* a [[buffer(0)]], device const int* b [[buffer(1)]],
                            device int* q [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const int v = a[i] % b[i];
    q[i] = simd_sum(v);
}

kernel void deep_stack(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]],
                       uint l [[thread_position_in_threadgroup]]) {
    float big[200000];
    for (uint k = 0; k < 200000; ++k) big[k] = x[i] + k;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[i] = big[(i * 7919) % 200000];
}
"""


@CPU_ONLY
def test_threads_that_returned_count_as_arrived_at_a_barrier(device):
    # As on Apple GPUs: threads that returned take no further part, the others pass the barrier.
    lib = build(SRC, filename="faults.metal")
    x = np.zeros(64, np.float32)
    lib.early_return(x, threadgroup=32)
    assert x.tolist() == [1.0, 0.0] * 32


@CPU_ONLY
def test_barriers_count_simdgroups_as_on_the_gpu(device):
    # A SIMD-group arrives when any of its live threads reaches a barrier, at any site.
    lib = build(SRC, filename="faults.metal")
    x = np.zeros(8, np.float32)
    lib.two_barriers(x, threadgroup=8)
    assert x.tolist() == [2.0] * 8
    y = np.zeros(48, np.float32)
    lib.split_by_simdgroup(y, threadgroup=48)
    assert y.tolist() == [3.0] * 48


@CPU_ONLY
def test_checked_threads_of_a_simdgroup_at_different_barriers(device):
    lib = build(SRC, filename="faults.metal")
    with pytest.raises(mk.KernelFault) as e:
        lib.two_barriers(np.zeros(8, np.float32), threadgroup=8, check=True)
    msg = str(e.value)
    assert "kernel 'two_barriers'" in msg and "divergent barrier in threadgroup (0, 0, 0)" in msg
    assert "threads 3-7 of SIMD-group 0 did not reach this threadgroup_barrier" in msg
    assert msg.endswith("at faults.metal:14")


@CPU_ONLY
def test_checked_simdgroups_at_different_barriers(device):
    lib = build(SRC, filename="faults.metal")
    with pytest.raises(mk.KernelFault, match=r"threads wait at different threadgroup_barrier calls, "
                                             r"faults.metal:\d+ \(threads 0-31\) and faults.metal:\d+ \(threads 32-47\)"):
        lib.split_by_simdgroup(np.zeros(48, np.float32), threadgroup=48, check=True)


@CPU_ONLY
def test_wild_write_is_a_fault_and_the_process_survives(device):
    lib = build(SRC)
    x = np.zeros(16, np.float32)
    with pytest.raises(mk.KernelFault, match=r"kernel 'wild_write' \(<source>:\d+\): invalid memory access at "
                                             r"address 0x[0-9a-f]+, in threadgroup"):
        lib.wild_write(x)
    a = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    mk.run("add_arrays", a, a, out)  # everything still works
    assert out.tolist() == [0, 2, 4, 6, 8]


@CPU_ONLY
@pytest.mark.parametrize("name,execution", [("divide", "auto"), ("divide_then_sum", "threads"),
                                            ("divide_then_sum", "fibers")])
def test_integer_division_by_zero_is_a_fault_and_the_next_launch_runs(device, rng, name, execution):
    # x86 traps where a GPU gives an undefined value: a thread that really divides by 0 is reported.
    lib = build(SRC, filename="faults.metal", execution=execution)
    a = rng.integers(-100, 100, 70).astype(np.int32)
    b = rng.integers(1, 9, 70).astype(np.int32)
    b[37] = 0
    q = np.zeros(70, np.int32)
    with pytest.raises(mk.KernelFault, match=rf"kernel '{name}' \(faults.metal:\d+\): integer division by zero "
                                             r"\(or of the most negative value by -1\) in threadgroup \(0, 0, 0\)") as e:
        getattr(lib, name)(a, b, q, threadgroup=64)
    if name == "divide":  # a plain kernel's thread is found, and its line
        assert "thread 37 at (37, 0, 0) in its threadgroup, at faults.metal:36" in str(e.value)
    b[37] = 3
    getattr(lib, name)(a, b, q, threadgroup=64)
    quotient = np.fix(a / b).astype(np.int32)
    if name == "divide":
        want = quotient
    else:
        rem = a - quotient * b
        want = np.concatenate([np.full(hi - lo, rem[lo:hi].sum()) for lo, hi in ((0, 32), (32, 64), (64, 70))])
    np.testing.assert_array_equal(q, want)


@CPU_ONLY
def test_fiber_stack_overflow(device):
    lib = build(SRC)
    x = np.zeros(4, np.float32)
    with pytest.raises(mk.KernelFault, match=r"stack overflow in threadgroup \(0, 0, 0\), SIMD-group 0 \(threads 0-3\)"):
        lib.deep_stack(x, grid=4)
    with pytest.raises(mk.KernelFault, match="stack overflow"):  # and again: the guard pages still work
        lib.deep_stack(x, grid=4)


@CPU_ONLY
def test_faults_in_many_groups_report_one(device, rng):
    lib = build(SRC)
    x = np.zeros(4096, np.float32)
    with pytest.raises(mk.KernelFault, match="divergent barrier"):
        lib.two_barriers(x, threadgroup=64, check=True)
    y = rng.random(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    mk.run("add_arrays", y, y, out)
    np.testing.assert_array_equal(out, y + y)


CHECKED = """
kernel void off_by_one(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = a[i] + a[i + 1];          // reads one past the end in the last thread
}
kernel void write_past(device float* out [[buffer(0)]], constant uint& n [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = 1.0f;
    if (i == n - 1) out[n + 3] = 2.0f;  // writes past the end
}
kernel void missing_barrier(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                            threadgroup float* tmp [[threadgroup(0)]],
                            uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                            uint n [[threads_per_threadgroup]]) {
    tmp[l] = x[i];
    // a threadgroup_barrier belongs here
    float right = tmp[(l + 1) % n];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = right;
}
"""


@CPU_ONLY
def test_checked_mode_names_the_parameter_and_leaves_arrays_untouched(device, rng):
    lib = build(CHECKED)
    a = rng.random(1000, dtype=np.float32)
    out = rng.random(1000, dtype=np.float32)
    before = out.copy()
    with pytest.raises(mk.KernelFault, match=r"kernel 'off_by_one' .*past the end of parameter 'a' \[\[buffer\(0\)\]\] "
                                             r"of 1000 elements \(element 1000\)"):
        lib.off_by_one(a, out, check=True)
    np.testing.assert_array_equal(out, before)  # nothing copied back from a faulted run
    with pytest.raises(mk.KernelFault, match=r"past the end of parameter 'out' .* \(element 1003\)"):
        lib.write_past(out, 1000, check=True)
    np.testing.assert_array_equal(out, before)
    lib.off_by_one(a, out, grid=999, check=True)  # in bounds: runs, and results come back
    np.testing.assert_allclose(out[:999], a[:-1] + a[1:], rtol=1e-6)
    np.testing.assert_array_equal(out[999:], before[999:])


@CPU_ONLY
def test_shuffled_order_exposes_a_missing_barrier(device, rng):
    lib = build(CHECKED)
    x = rng.random(1024, dtype=np.float32)
    want = np.roll(x.reshape(16, 64), -1, axis=1).ravel()
    outs = []
    for seed in [0, 1, 2, 3]:
        out = np.zeros_like(x)
        lib.missing_barrier(x, out, threadgroup=64, threadgroup_memory={0: 256}, shuffle=seed)
        outs.append(out)
    # A SIMD-group's lanes run in lockstep, so only a read of the other SIMD-group's slot
    # races. In index order SIMD-group 0 reads slot 32 before SIMD-group 1 writes it; a
    # shuffled order of SIMD-groups lets some groups read the new value: the race shows as
    # results that change with the seed, and the same seed repeats its result.
    assert not np.array_equal(outs[0], want)
    assert len({o.tobytes() for o in outs}) >= 3
    again = np.zeros_like(x)
    lib.missing_barrier(x, again, threadgroup=64, threadgroup_memory={0: 256}, shuffle=3)
    np.testing.assert_array_equal(again, outs[3])
    with pytest.raises(mk.ArgumentError, match="shuffle= takes an int seed"):
        lib.missing_barrier(x, x, threadgroup_memory={0: 256}, shuffle="yes")


TAKE = """
kernel void take(device atomic_uint* next [[buffer(0)]], device uint* order [[buffer(1)]],
                 uint3 p [[thread_position_in_grid]], uint3 size [[threads_per_grid]]) {
    order[atomic_fetch_add_explicit(next, 1u, memory_order_relaxed)] = p.x + size.x * p.y;
}
"""


@CPU_ONLY
@pytest.mark.parametrize("grid, tg", [((64, 1), (32, 1)), ((50, 3), (16, 2)), ((7, 1), (7, 1))])
def test_shuffle_reorders_the_threads_of_a_kernel_run_as_a_loop(device, rng, grid, tg):
    # An atomic counter hands out slots in the order the threads run: in index order
    # without a seed, a seeded permutation of each threadgroup's threads with one.
    lib = build(TAKE)
    assert lib.take.execution == "loop"
    n = grid[0] * grid[1]

    def order(seed):
        nxt, out = np.zeros(1, np.uint32), np.zeros(n, np.uint32)
        lib.take(nxt, out, grid=grid, threadgroup=tg, shuffle=seed)
        assert nxt[0] == n
        return out

    in_order = order(0)
    seeds = [int(s) for s in rng.integers(1, 2**31, 3)]
    shuffled = [order(s) for s in seeds]
    for o in shuffled:
        assert sorted(o) == list(range(n))             # every thread ran once
        assert not np.array_equal(o, in_order)       # ... not in index order
    assert len({o.tobytes() for o in shuffled}) == 3  # each seed its own order
    np.testing.assert_array_equal(order(seeds[0]), shuffled[0])  # and the same one again
    # Threadgroups still run one after another, each its own threads only.
    x, y = in_order % grid[0], in_order // grid[0]
    groups = (x // tg[0]) + (grid[0] + tg[0] - 1) // tg[0] * (y // tg[1])
    sx, sy = shuffled[0] % grid[0], shuffled[0] // grid[0]
    np.testing.assert_array_equal((sx // tg[0]) + (grid[0] + tg[0] - 1) // tg[0] * (sy // tg[1]), groups)


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
// Its loop's statements are one region, written once per lane shape and mask (simt/emit.py).
kernel void region(device float* x [[buffer(0)]], constant uint& bad [[buffer(1)]],
                   constant uint& gone [[buffer(2)]],
                   uint2 p [[thread_position_in_grid]], uint2 n [[threads_per_grid]]) {
    const uint i = p.y * n.x + p.x;
    if (i == gone) return;
    float s = simd_sum(x[i]);
    for (uint k = 0; k < 2; ++k) {
        s += x[i];
        if (i == bad) x[i + 0x40000000u] = s;                        // LINE region
        x[i] = s * 0.5f;
    }
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


@pytest.mark.parametrize("tg", [(32, 1), (16, 4), (8, 8), (12, 4)])  # rows of 32, 16, 8; any layout
@pytest.mark.parametrize("returned", [False, True])                  # full mask; a lane returned
def test_every_copy_of_a_simt_region_names_its_own_line(kernels, tmp_path, rng, tg, returned):
    w, h = 48, 8
    bad = int(rng.integers(0, w * h))
    gone = (bad ^ 1) if returned else w * h
    msg = fault(kernels, tmp_path, "region", rng.random(w * h, dtype=np.float32), scalars=[bad, gone],
                tg2=list(tg), grid2=[w, h])
    assert f"at {kernels[0]}:{line_of('region')}; " in msg, msg


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
