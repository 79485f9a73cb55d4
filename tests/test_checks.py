"""check= races, uninit and lockstep: each bug found with its class and lines, its fix silent."""
import mmap
import re
import sys
import warnings

import numpy as np
import pytest

import metalkit as mk

pytestmark = pytest.mark.skipif(mk.device().backend != "cpu", reason="check= is the CPU simulator's")

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def line_of(src: str, marker: str) -> int:
    """The 1-based line of `src` (after HEAD) holding `marker`."""
    lines = (HEAD + src).splitlines()
    return next(i + 1 for i, l in enumerate(lines) if marker in l)


def run_checked(src: str, name: str, *args, check="all", **kw):
    lib = mk.compile(HEAD + src, filename=f"{name}.metal")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        getattr(lib, name)(*args, check=check, **kw)
    return [str(x.message) for x in w if issubclass(x.category, mk.CheckWarning)]


REVERSE = """
kernel void reverse(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                    uint l [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    t[l] = x[i];                                   // store
    BARRIER
    y[i] = t[n - 1 - l];                           // load
}
"""


def test_a_missing_barrier_is_a_race_naming_both_lines_and_the_fix_passes():
    rng = np.random.default_rng(1)
    x = rng.random(200).astype(np.float32)  # not a multiple of the threadgroup: the last group is short
    src = REVERSE.replace("BARRIER", "")
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "reverse", x, np.zeros_like(x), grid=200, threadgroup=64, threadgroup_memory={0: 256})
    msg = str(e.value)
    store, load = line_of(src, "// store"), line_of(src, "// load")
    assert re.search(rf"data race \(a write, then a read\) on threadgroup memory 't' elements \d+ to \d+: "
                     rf"written at reverse.metal:{store} by thread \d+ \(SIMD-group \d, lane \d+\), "
                     rf"read at reverse.metal:{load} by thread", msg), msg
    assert f"read at reverse.metal:{load}" in msg and "uninitialised read of threadgroup memory 't'" in msg

    fixed = REVERSE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);")
    y = np.zeros_like(x)
    assert run_checked(fixed, "reverse", x, y, grid=200, threadgroup=64, threadgroup_memory={0: 256}) == []
    want = np.concatenate([x[k:k + 64][::-1] for k in range(0, 192, 64)] + [x[192:][::-1]])
    np.testing.assert_array_equal(y, want)


HALF = """
kernel void half_written(device float* y [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
    threadgroup float s[64];
    if (l < LIMIT) s[l] = float(l) * 0.5f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[l] = s[63 - l];                              // load
}
"""


def test_a_read_of_threadgroup_memory_half_the_threads_wrote_is_uninitialised():
    src = HALF.replace("LIMIT", "32")
    load = line_of(src, "// load")
    # "uninit" alone runs the SIMT kernel as it is: the runtime knows the SIMD-group of an access.
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "half_written", np.zeros(64, np.float32), grid=64, threadgroup=64, check="uninit")
    assert (f"uninitialised read of threadgroup memory 's' elements 32 to 63 at half_written.metal:{load}, by "
            "SIMD-group 0 of threadgroup (0, 0, 0): no thread of the threadgroup wrote it before (32 times) "
            '(check="all" runs each thread on its own and names them)') in str(e.value)
    # "all" runs every thread on its own: the thread is named.
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "half_written", np.zeros(64, np.float32), grid=64, threadgroup=64, check="all")
    assert (f"uninitialised read of threadgroup memory 's' elements 32 to 63 at half_written.metal:{load}, by "
            "thread 0 (SIMD-group 0, lane 0) of threadgroup (0, 0, 0): no thread of the threadgroup wrote it before "
            "(32 times)") in str(e.value)
    y = np.zeros(64, np.float32)
    assert run_checked(HALF.replace("LIMIT", "64"), "half_written", y, grid=64, threadgroup=64) == []
    np.testing.assert_array_equal(y, (63 - np.arange(64)) * 0.5)


def test_findings_become_warnings_under_warn_and_the_call_completes():
    src = HALF.replace("LIMIT", "32")
    found = run_checked(src, "half_written", np.zeros(64, np.float32), grid=64, threadgroup=64, check="uninit,warn")
    assert len(found) == 1 and "uninitialised read of threadgroup memory 's'" in found[0]


LOCKSTEP = """
kernel void warp_sum(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint l [[thread_position_in_threadgroup]]) {
    threadgroup float s[32];
    s[l] = x[l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = 16; k > 0; k /= 2) {
        if (l < k) s[l] += s[l + k];               // lanes of one SIMD-group
        SYNC
    }
    if (l == 0) y[0] = s[0];
}
"""


def test_a_simd_group_relying_on_lockstep_is_a_warning_not_a_fault():
    x = np.random.default_rng(2).random(32).astype(np.float32)
    found = run_checked(LOCKSTEP.replace("SYNC", ""), "warp_sum", x, np.zeros(1, np.float32), grid=32, threadgroup=32)
    line = line_of(LOCKSTEP, "// lanes of one SIMD-group")
    assert found and all("relies on SIMD-group lockstep" in f for f in found), found
    assert all(f"warp_sum.metal:{line}" in f for f in found)
    y = np.zeros(1, np.float32)
    assert run_checked(LOCKSTEP.replace("SYNC", "threadgroup_barrier(mem_flags::mem_threadgroup);"), "warp_sum",
                       x, y, grid=32, threadgroup=32) == []
    assert y[0] == pytest.approx(x.sum(dtype=np.float64), rel=1e-5)


COUNTER = """
kernel void count(device const int* x [[buffer(0)]], device int* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                  uint g [[threadgroup_position_in_grid]]) {
    threadgroup atomic_int n;
    INIT
    if (x[i] > 0) atomic_fetch_add_explicit(&n, 1, memory_order_relaxed);   // add
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) y[g] = atomic_load_explicit(&n, memory_order_relaxed);
}
"""


def test_atomics_do_not_race_but_an_unset_counter_is_uninitialised():
    x = np.random.default_rng(3).integers(-5, 5, 96).astype(np.int32)
    src = COUNTER.replace("INIT", "")
    with pytest.raises(mk.KernelFault, match=rf"uninitialised read of threadgroup memory 'n' element 0 at "
                                             rf"count.metal:{line_of(src, '// add')}"):
        run_checked(src, "count", x, np.zeros(3, np.int32), grid=96, threadgroup=32)
    y = np.zeros(3, np.int32)
    fixed = COUNTER.replace("INIT", "if (l == 0) atomic_store_explicit(&n, 0, memory_order_relaxed);\n"
                                    "    threadgroup_barrier(mem_flags::mem_threadgroup);")
    assert run_checked(fixed, "count", x, y, grid=96, threadgroup=32) == []
    np.testing.assert_array_equal(y, (x.reshape(3, 32) > 0).sum(axis=1))


def test_an_initialised_threadgroup_array_holds_its_value_before_any_thread_runs():
    src = """
kernel void table(device float* y [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
    threadgroup float t[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    y[l] = t[3 - l % 4];
}
"""
    y = np.zeros(7, np.float32)
    assert run_checked(src, "table", y, grid=7, threadgroup=7) == []
    np.testing.assert_array_equal(y, [4, 3, 2, 1, 4, 3, 2])


@pytest.mark.parametrize("bad", ["race", "all,nothing", ["races", 3], 2.5])
def test_unknown_checks_are_named(bad):
    lib = mk.compile(HEAD + "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                     "{ x[i] = 1; }")
    x = np.zeros(4, np.float32)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'k': check= (names an unknown check|takes True, False)"):
        lib.k(x, check=bad)
    assert not x.any()


def test_check_names_can_be_given_as_a_list_and_the_cheap_checks_still_work():
    lib = mk.compile(HEAD + "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                     "{ x[i] = 1; }", filename="k.metal")
    x = np.zeros(4, np.float32)
    with pytest.raises(mk.KernelFault, match="past the end of parameter 'x'"):
        lib.k(x, grid=5, check=["bounds", "races"])
    assert not x.any()
    lib.k(x, grid=4, check=("races", "uninit"))
    assert x.tolist() == [1.0] * 4


SHIFT = """
kernel void shift(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint n [[threads_per_grid]]) {
    float v = SOURCE[(i + 1) % n];                 // neighbour
    y[i] = v * 2.0f;                               // mine
}
"""


def test_threadgroups_touching_one_device_element_race_and_reading_a_copy_does_not():
    rng = np.random.default_rng(4)
    x = rng.random(100).astype(np.float32)
    src = SHIFT.replace("SOURCE", "y")
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "shift", x.copy(), x, grid=100, threadgroup=32, check="races")
    msg = str(e.value)
    read, write = line_of(src, "// neighbour"), line_of(src, "// mine")
    assert re.search(rf"data race between threadgroups \(a read, then a write\) on device memory 'y' elements "
                     rf"32 to 96: read at shift.metal:{read} by threadgroup \(\d, 0, 0\), written at "
                     rf"shift.metal:{write} by threadgroup \(\d, 0, 0\) \(3 times\)", msg), msg
    y = np.zeros_like(x)
    assert run_checked(SHIFT.replace("SOURCE", "x"), "shift", y, x, grid=100, threadgroup=32) == []
    np.testing.assert_array_equal(y, np.roll(x, -1) * 2)


def test_simd_groups_of_one_threadgroup_touching_one_device_element_race():
    x = np.random.default_rng(5).random(64).astype(np.float32)
    src = SHIFT.replace("SOURCE", "y")
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "shift", x.copy(), x, grid=64, threadgroup=64, check="races")
    msg = str(e.value)
    read, write = line_of(src, "// neighbour"), line_of(src, "// mine")
    assert (f"data race (a read, then a write) on device memory 'y' element 32: read at shift.metal:{read} by "
            f"thread 31 (SIMD-group 0, lane 31), written at shift.metal:{write} by thread 32 (SIMD-group 1, lane 0) "
            "of threadgroup (0, 0, 0)") in msg, msg
    # Within a SIMD-group the same pattern holds only by lockstep: a warning under "all".
    found = run_checked(src, "shift", x.copy(), x, grid=64, threadgroup=64, check="lockstep")
    assert found and all("relies on SIMD-group lockstep" in f and "device memory 'y'" in f for f in found)


EDGE = """
kernel void edge_blocks(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint g [[threadgroup_position_in_grid]],
                        uint l [[thread_position_in_threadgroup]]) {
    uint start = min(g * 32u, n - 32u);            // the last block overlaps the one before it
    y[start + l] = VALUE;                          // store
}
"""


def test_two_writes_of_the_same_value_do_not_race_and_of_different_values_do():
    x = np.random.default_rng(6).random(100).astype(np.float32)
    y = np.zeros_like(x)
    assert run_checked(EDGE.replace("VALUE", "x[start + l] * 3.0f"), "edge_blocks", y, x, np.uint32(100),
                       threadgroups=4, threadgroup=32, check="races") == []
    np.testing.assert_array_equal(y, x * 3)
    src = EDGE.replace("VALUE", "float(g)")
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "edge_blocks", y, x, np.uint32(100), threadgroups=4, threadgroup=32, check="races")
    store = line_of(src, "// store")
    assert (f"data race between threadgroups (two writes) on device memory 'y' elements 68 to 95: written at "
            f"edge_blocks.metal:{store} by threadgroup (2, 0, 0), written at edge_blocks.metal:{store} by "
            "threadgroup (3, 0, 0) (28 times)") in str(e.value), str(e.value)


@pytest.mark.parametrize("buffers", [8, 9])
def test_a_race_on_the_last_of_many_written_buffers_is_found(buffers):
    # A checked module calls the runtime only for accesses in the ranges it watches, eight at
    # most: the last of eight written buffers is one of them; with nine, every access goes.
    params = ", ".join(f"device float* b{k} [[buffer({k})]]" for k in range(buffers))
    copies = "".join(f"    b{k}[i] = x[i];\n" for k in range(buffers - 1))
    src = (f"kernel void many({params}, device const float* x [[buffer({buffers})]],\n"
           "                 uint i [[thread_position_in_grid]], uint g [[threadgroup_position_in_grid]]) {\n"
           f"{copies}    b{buffers - 1}[0] = x[g];                        // last\n}}\n")
    x = np.random.default_rng(7).random(64).astype(np.float32)
    outs = [np.zeros(64, np.float32) for _ in range(buffers)]
    with pytest.raises(mk.KernelFault) as e:
        run_checked(src, "many", *outs, x, grid=64, threadgroup=32, check="races")
    last = line_of(src, "// last")
    assert re.search(rf"data race between threadgroups \(two writes\) on device memory 'b{buffers - 1}' element 0: "
                     rf"written at many.metal:{last} by threadgroup \(\d, 0, 0\), written at many.metal:{last}",
                     str(e.value)), str(e.value)


BROADCAST = """
kernel void broadcast(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float first[2];
    if (lane == 0) first[sg] = x[i];               // lane 0
    SYNC
    y[i] = x[i] - first[sg];                       // every lane
}
"""


def test_a_simdgroup_barrier_orders_its_lanes_and_without_it_they_rely_on_lockstep():
    x = np.random.default_rng(7).random(64).astype(np.float32)
    found = run_checked(BROADCAST.replace("SYNC", ""), "broadcast", x, np.zeros_like(x), grid=64, threadgroup=64)
    assert found and all("relies on SIMD-group lockstep (a write, then a read)" in f for f in found), found
    y = np.zeros_like(x)
    assert run_checked(BROADCAST.replace("SYNC", "simdgroup_barrier(mem_flags::mem_threadgroup);"), "broadcast",
                       x, y, grid=64, threadgroup=64) == []
    np.testing.assert_array_equal(y, x - np.repeat(x[::32], 32))


TG_SHIFT = """
kernel void shift(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
    threadgroup float s[64];
    threadgroup float w[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    s[l] = x[i] * w[l % 4];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = s[NEXT];                                // load
}
"""


def test_a_kernel_scope_threadgroup_array_is_guarded_in_the_checked_build():
    x = np.random.default_rng(4).random(128).astype(np.float32)
    src = TG_SHIFT.replace("NEXT", "l + 1")
    with pytest.raises(mk.KernelFault, match=rf"past the end of threadgroup variable 's' of 64 elements \(element 64\), "
                                             rf"in threadgroup \(\d, 0, 0\), thread 63 .* at shift.metal:"
                                             rf"{line_of(src, '// load')}"):
        run_checked(src, "shift", x, np.zeros_like(x), grid=128, threadgroup=64)
    y = np.zeros_like(x)
    assert run_checked(TG_SHIFT.replace("NEXT", "(l + 1) % 64"), "shift", x, y, grid=128, threadgroup=64) == []
    w = np.tile(np.float32([1, 2, 3, 4]), 32)
    np.testing.assert_array_equal(y, np.roll((x * w).reshape(2, 64), -1, axis=1).ravel())


def test_a_kernel_scope_array_is_guarded_at_its_own_end_after_a_larger_one_used_the_storage():
    big = """
kernel void big(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                uint l [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    threadgroup float s[4096];
    for (uint k = l; k < 4096; k += n) s[k] = x[k];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = l; k < 4096; k += n) y[k] = s[4095 - k];
}
"""
    x = np.random.default_rng(5).random(4096).astype(np.float32)
    y = np.zeros_like(x)
    assert run_checked(big, "big", x, y, grid=64, threadgroup=64) == []
    np.testing.assert_array_equal(y, x[::-1])
    test_a_kernel_scope_threadgroup_array_is_guarded_in_the_checked_build()


SCRATCH = """
kernel void scratch(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
    threadgroup float slot[SIZE];                  // no barrier: the kernel runs as a loop
    slot[l] = x[i] * 2.0f;                         // store
    y[i] = slot[l] + 1.0f;
}
"""


def test_check_true_guards_a_threadgroup_variable_of_a_loop_kernel():
    x = np.random.default_rng(7).random(100, dtype=np.float32)
    lib = mk.compile(HEAD + SCRATCH.replace("SIZE", "32"), filename="scratch.metal")
    assert lib.scratch.execution == "loop"
    with pytest.raises(mk.KernelFault, match=r"past the end of threadgroup variable 'slot' of 32 elements "
                                             rf"\(element 32\).*scratch\.metal:{line_of(SCRATCH, '// store')}"):
        lib.scratch(x, np.zeros_like(x), grid=100, threadgroup=64, check=True)
    y = np.zeros_like(x)
    mk.compile(HEAD + SCRATCH.replace("SIZE", "64"), filename="scratch.metal").scratch(
        x, y, grid=100, threadgroup=64, check=True)
    np.testing.assert_array_equal(y, x * 2 + 1)


EMPTY = """
kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    y[i] = x[i] * 2.0f;                            // read
}
kernel void accumulate(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    y[i] += x[i];                                  // update
}
kernel void neighbour(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    threadgroup_barrier(mem_flags::mem_none);      // SIMD-groups in lockstep (not a loop)
    if (i % 2 == 1) y[i] = x[i];                   // odd lanes write
    if (i % 2 == 0) y[i] = y[i + 1] * 3.0f;        // even lanes read what their neighbour wrote
}
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unwritten pages are told by Linux's pagemap")
@pytest.mark.parametrize("check", ["uninit", "all"])
def test_a_read_of_metalkit_empty_memory_nothing_wrote_is_found(check):
    lib = mk.compile(HEAD + EMPTY, filename="empty.metal")
    page = mmap.PAGESIZE // 4
    n = 3 * page + 7
    x = mk.empty(n)
    x[:page + 5] = np.random.default_rng(3).random(page + 5, dtype=np.float32)  # the first two pages
    with pytest.raises(mk.KernelFault, match=rf"uninitialised read of device memory 'x' elements {2 * page} to "
                                             rf"{n - 1} at empty\.metal:{line_of(EMPTY, '// read')}.*"
                                             rf"metalkit\.empty.*\({n - 2 * page} times\)"):
        lib.scale(x, mk.empty(n), check=check)
    y = mk.empty(n)
    with pytest.raises(mk.KernelFault, match=rf"device memory 'y' elements 0 to {n - 1} at empty\.metal:"
                                             rf"{line_of(EMPTY, '// update')}"):
        lib.accumulate(y, np.ones(n, np.float32), check=check)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unwritten pages are told by Linux's pagemap")
def test_metalkit_empty_memory_written_first_reads_silently():
    lib = mk.compile(HEAD + EMPTY, filename="empty.metal")
    rng = np.random.default_rng(4)
    n = 5000
    x, ones = rng.random(n, dtype=np.float32), np.ones(n, np.float32)
    y = mk.empty(n)
    lib.scale(x, y, check="all")                   # a kernel writes it: then it may be read
    lib.accumulate(y, ones, check="all")
    np.testing.assert_array_equal(y, x * 2 + 1)
    z = mk.zeros(n)                                # the host wrote zeros
    lib.accumulate(z, x, check="all")
    np.testing.assert_array_equal(z, x)
    w = mk.empty(64)                               # each even lane reads its odd neighbour's write,
    lib.neighbour(x[:64], w, grid=64, threadgroup=64, check="uninit")  # made first in lockstep
    np.testing.assert_array_equal(w[1::2], x[1:64:2])
    np.testing.assert_array_equal(w[0::2], x[1:64:2] * 3)
    # Each thread on its own (lockstep checked), the even lane reads first: that is the finding,
    # as a warning, and not an uninitialised read.
    found = run_checked(EMPTY, "neighbour", x[:64], mk.empty(64), grid=64, threadgroup=64, check="all")
    assert len(found) == 1 and "relies on SIMD-group lockstep" in found[0], found


def test_last_gpu_time_is_the_checked_calls():
    lib = mk.compile(HEAD + REVERSE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                     filename="reverse.metal")
    x = np.random.default_rng(5).random(256, dtype=np.float32)
    for check in ("races", True, False):
        y = np.zeros_like(x)
        lib.reverse(x, y, threadgroup=64, threadgroup_memory={0: 256}, check=check)
        np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())
        assert lib.reverse.last_gpu_time > 0, check


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unwritten pages are told by Linux's pagemap")
def test_a_queued_call_reads_what_a_call_queued_before_it_wrote():
    from metalkit import _core
    lib = mk.compile(HEAD + EMPTY, filename="empty.metal")
    x = np.random.default_rng(6).random(3000, dtype=np.float32)
    y = mk.empty(3000)
    _core._emulate_gpu_batches(True)  # calls queue, as on Metal, and run when the block ends
    try:
        with mk.batch():
            lib.scale(x, y, check="uninit")
            lib.accumulate(y, x, check="uninit")  # y is written by then
    finally:
        _core._emulate_gpu_batches(False)
    np.testing.assert_array_equal(y, x * 2 + x)
