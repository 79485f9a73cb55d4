"""Faults the CPU simulator reports as KernelFault, naming kernel, threadgroup,
thread and line; the process survives and later calls work."""
import numpy as np
import pytest

import metalkit as mk
from conftest import build

pytestmark = pytest.mark.parametrize("device", ["cpu"], indirect=True)  # faults a GPU cannot name

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


def test_threads_that_returned_count_as_arrived_at_a_barrier(device):
    # As on Apple GPUs: threads that returned take no further part, the others pass the barrier.
    lib = build(SRC, filename="faults.metal")
    x = np.zeros(64, np.float32)
    lib.early_return(x, threadgroup=32)
    assert x.tolist() == [1.0, 0.0] * 32


def test_barriers_count_simdgroups_as_on_the_gpu(device):
    # A SIMD-group arrives when any of its live threads reaches a barrier, at any site.
    lib = build(SRC, filename="faults.metal")
    x = np.zeros(8, np.float32)
    lib.two_barriers(x, threadgroup=8)
    assert x.tolist() == [2.0] * 8
    y = np.zeros(48, np.float32)
    lib.split_by_simdgroup(y, threadgroup=48)
    assert y.tolist() == [3.0] * 48


def test_checked_threads_of_a_simdgroup_at_different_barriers(device):
    lib = build(SRC, filename="faults.metal")
    with pytest.raises(mk.KernelFault) as e:
        lib.two_barriers(np.zeros(8, np.float32), threadgroup=8, check=True)
    msg = str(e.value)
    assert "kernel 'two_barriers'" in msg and "divergent barrier in threadgroup (0, 0, 0)" in msg
    assert "threads 3-7 of SIMD-group 0 did not reach this threadgroup_barrier" in msg
    assert msg.endswith("at faults.metal:14")


def test_checked_simdgroups_at_different_barriers(device):
    lib = build(SRC, filename="faults.metal")
    with pytest.raises(mk.KernelFault, match=r"threads wait at different threadgroup_barrier calls, "
                                             r"faults.metal:\d+ \(threads 0-31\) and faults.metal:\d+ \(threads 32-47\)"):
        lib.split_by_simdgroup(np.zeros(48, np.float32), threadgroup=48, check=True)


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


def test_fiber_stack_overflow(device):
    lib = build(SRC)
    x = np.zeros(4, np.float32)
    with pytest.raises(mk.KernelFault, match=r"stack overflow in threadgroup \(0, 0, 0\), SIMD-group 0 \(threads 0-3\)"):
        lib.deep_stack(x, grid=4)
    with pytest.raises(mk.KernelFault, match="stack overflow"):  # and again: the guard pages still work
        lib.deep_stack(x, grid=4)


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
