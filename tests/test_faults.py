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

kernel void wild_write(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i + 0x40000000u] = 1;
}

kernel void deep_stack(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]],
                       uint l [[thread_position_in_threadgroup]]) {
    float big[200000];
    for (uint k = 0; k < 200000; ++k) big[k] = x[i] + k;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[i] = big[(i * 7919) % 200000];
}
"""


def test_divergent_barrier_after_early_return(device):
    lib = build(SRC, filename="faults.metal")
    x = np.zeros(64, np.float32)
    with pytest.raises(mk.KernelFault) as e:
        lib.early_return(x, threadgroup=32)
    msg = str(e.value)
    assert "kernel 'early_return'" in msg and "divergent barrier in threadgroup (0, 0, 0)" in msg
    assert "wait at threadgroup_barrier at faults.metal:4" in msg and "returned without reaching it" in msg
    assert "threads 0, 2, 4" in msg and "threads 1, 3, 5" in msg


def test_threads_at_different_barriers(device):
    lib = build(SRC, filename="faults.metal")
    with pytest.raises(mk.KernelFault, match=r"threads wait at different threadgroup_barrier calls, "
                                             r"faults.metal:14 and faults.metal:16 \(threads 3-7\)"):
        lib.two_barriers(np.zeros(8, np.float32), threadgroup=8)


def test_wild_write_is_a_fault_and_the_process_survives(device):
    lib = build(SRC)
    x = np.zeros(16, np.float32)
    with pytest.raises(mk.KernelFault, match=r"kernel 'wild_write' \(<source>:\d+\): invalid memory access at "
                                             r"address 0x[0-9a-f]+ in threadgroup"):
        lib.wild_write(x)
    a = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    mk.run("add_arrays", a, a, out)  # everything still works
    assert out.tolist() == [0, 2, 4, 6, 8]


def test_fiber_stack_overflow(device):
    lib = build(SRC)
    x = np.zeros(4, np.float32)
    with pytest.raises(mk.KernelFault, match=r"stack overflow in threadgroup \(0, 0, 0\), thread \d+"):
        lib.deep_stack(x)
    with pytest.raises(mk.KernelFault, match="stack overflow"):  # and again: the guard pages still work
        lib.deep_stack(x)


def test_faults_in_many_groups_report_one(device, rng):
    lib = build(SRC)
    x = np.zeros(4096, np.float32)
    with pytest.raises(mk.KernelFault, match="divergent barrier"):
        lib.early_return(x, threadgroup=64)
    y = rng.random(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    mk.run("add_arrays", y, y, out)
    np.testing.assert_array_equal(out, y + y)
