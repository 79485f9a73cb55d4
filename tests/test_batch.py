"""metalkit.batch(): calls queued in a block, waited for once at its end.

Each test runs on every device and, on the CPU, also in "queued" mode, where
the CPU's calls in a batch are queued and run at the block's end as a GPU's
are (core HostQueue): that exercises the deferred path (keep-alives, shared
staged copies, hazard flushes, faults at exit) where there is no GPU.
"""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import metalkit as mk
from metalkit import _core

from conftest import build

SRC = """
kernel void axpb(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], constant float& b [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) { y[i] = a * x[i] + b; }
kernel void add(device const float* x [[buffer(0)]], device const float* y [[buffer(1)]],
                device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) { out[i] = x[i] + y[i]; }
kernel void scale_inplace(device float* x [[buffer(0)]], constant float& s [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) { x[i] *= s; }
kernel void wild(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i + 400000000u] = 1.0f;   // far out of bounds
}
"""


@pytest.fixture(params=["immediate", "queued"])
def mode(request, device):
    """How a batch runs calls: as the device does, or (CPU only) queued like a GPU."""
    if request.param == "queued" and device == "cpu":  # a GPU queues batched calls by itself
        _core._emulate_gpu_batches(True)
    yield request.param
    _core._emulate_gpu_batches(False)


@pytest.fixture
def lib(device):
    return build(SRC)


def chain(lib, x, outs, coeffs):
    """outs[0] = a0*x + b0, outs[k] = ak*outs[k-1] + bk."""
    src = x
    for out, (a, b) in zip(outs, coeffs):
        lib.axpb(src, out, a, b)
        src = out


def chain_ref(x, coeffs):
    y = x.astype(np.float32)
    for a, b in coeffs:
        y = np.float32(a) * y + np.float32(b)
    return y


def test_dependent_chain_matches_unbatched(lib, mode, rng):
    n = 10_000
    x = rng.standard_normal(n).astype(np.float32)
    coeffs = [(float(rng.uniform(-2, 2)), float(rng.uniform(-1, 1))) for _ in range(6)]
    plain = [np.empty_like(x) for _ in coeffs]
    chain(lib, x, plain, coeffs)
    batched = [np.full_like(x, np.nan) for _ in coeffs]
    with mk.batch() as b:
        chain(lib, x, batched, coeffs)
    for p, q in zip(plain, batched):
        np.testing.assert_array_equal(p, q)
    np.testing.assert_allclose(batched[-1], chain_ref(x, coeffs), rtol=1e-5, atol=1e-5)
    assert b.calls == len(coeffs) and b.gpu_time > 0


def test_chain_through_device_arrays_and_in_place(lib, mode, rng):
    x = mk.asarray(rng.standard_normal(4096).astype(np.float32))
    y = mk.zeros(4096, np.float32)
    with mk.batch():
        lib.axpb(x, y, 2.0, 1.0)
        for s in (0.5, 3.0, -1.0):           # scalars are copied at each call
            lib.scale_inplace(y, s)
        lib.add(y, x, y)                      # reads and writes y
    ref = (np.float32(2) * np.asarray(x) + 1) * np.float32(0.5) * 3 * -1 + np.asarray(x)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_staged_outputs_are_right_after_the_block(lib, mode, rng):
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    big = np.zeros(2 * n, np.float32)
    view = big[::2]                           # strided: staged, copied back
    other = np.zeros((n, 2), np.float32)[:, 1]
    with mk.batch():
        lib.axpb(x, view, 3.0, 0.5)           # writes the staged view
        lib.axpb(view, other, -1.0, 2.0)      # reads it back: sees the write above
        lib.scale_inplace(view, 2.0)          # and writes it again, in place
    np.testing.assert_allclose(view, (np.float32(3) * x + np.float32(0.5)) * 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(other, -(np.float32(3) * x + np.float32(0.5)) + 2, rtol=1e-5, atol=1e-5)
    assert np.all(big[1::2] == 0)


def test_staged_view_then_whole_array(lib, mode, rng):
    """A write through a staged view, then a read of the whole array in place: the queued
    work must complete (and copy back) before the second call can see it."""
    x = rng.standard_normal(4096).astype(np.float32)
    whole = np.zeros(4096, np.float32)
    out = np.zeros(4096, np.float32)
    with mk.batch():
        lib.axpb(x[::2], whole[::2], 1.0, 1.0)
        lib.axpb(whole, out, 2.0, 0.0)
    expect = np.zeros(4096, np.float32)
    expect[::2] = x[::2] + 1
    np.testing.assert_allclose(out, 2 * expect, rtol=1e-5, atol=1e-5)


def test_arrays_are_kept_alive(lib, mode, rng):
    x = rng.standard_normal(3000).astype(np.float32)
    out = np.empty_like(x)
    with mk.batch():
        lib.axpb(x.copy(), out, 1.0, 0.0)         # a temporary: only the batch holds it
        lib.axpb(x[::-1].copy()[::-1], out[::1], 1.0, 1.0)  # a staged temporary (negative stride)
        gc.collect()
        np.ones(3000 * 8, np.float32)             # reuse freed memory, if any was freed
    np.testing.assert_allclose(out, x + 1, rtol=1e-5, atol=1e-5)


def test_argument_error_at_the_call_and_the_batch_goes_on(lib, mode, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    y = np.empty_like(x)
    z = np.empty_like(x)
    with mk.batch() as b:
        lib.axpb(x, y, 2.0, 0.0)
        with pytest.raises(mk.ArgumentError, match="axpb"):
            lib.axpb(x.astype(np.float64), y, 2.0, 0.0)
        with pytest.raises(mk.ArgumentError, match="read-only"):
            ro = np.empty_like(x)
            ro.flags.writeable = False
            lib.axpb(x, ro, 2.0, 0.0)
        with pytest.raises(mk.ArgumentError):
            lib.add(x, y)                         # wrong count
        with pytest.raises(mk.DispatchError):
            lib.add(x, y, z, threadgroup=4096)
        lib.add(y, x, z)
    np.testing.assert_allclose(z, 3 * x, rtol=1e-5, atol=1e-5)
    assert b.calls == 2


def test_nested_batches_join_the_outer_one(lib, mode, rng):
    x = rng.standard_normal(2048).astype(np.float32)
    y, z, w = (np.empty_like(x) for _ in range(3))
    with mk.batch() as outer:
        lib.axpb(x, y, 2.0, 0.0)
        with mk.batch() as inner:
            lib.axpb(y, z, 1.0, 1.0)
        # the inner block's calls complete with the outer block
        lib.add(z, y, w)
        assert inner.calls == outer.calls == 3
    np.testing.assert_allclose(w, 4 * x + 1, rtol=1e-5, atol=1e-6)


def test_each_thread_has_its_own_batch(lib, mode, rng):
    n_threads = 4
    data = [rng.standard_normal(8192).astype(np.float32) for _ in range(n_threads)]
    results: list = [None] * n_threads
    counts: list = [None] * n_threads
    errors: list = []
    start = threading.Barrier(n_threads)

    def work(t):
        try:
            outs = [np.empty_like(data[t]) for _ in range(t + 2)]
            start.wait()
            with mk.batch() as b:
                chain(lib, data[t], outs, [(1.0, float(t))] * len(outs))
            results[t] = outs[-1]
            counts[t] = b.calls
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t in range(n_threads):
        np.testing.assert_allclose(results[t], data[t] + t * (t + 2), rtol=1e-5, atol=1e-5)
        assert counts[t] == t + 2


def test_a_batch_does_not_cross_threads(lib, mode):
    x = np.ones(64, np.float32)
    y = np.zeros_like(x)
    done = threading.Event()
    with mk.batch() as b:
        th = threading.Thread(target=lambda: (lib.axpb(x, y, 5.0, 0.0), done.set()))
        th.start()
        th.join()
        assert done.is_set()
        np.testing.assert_array_equal(y, 5)  # the other thread ran outside any batch
    assert b.calls == 0


def test_user_exception_propagates_after_the_work_completes(lib, mode, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    y = np.empty_like(x)
    view = np.zeros(2000, np.float32)[::2]
    with pytest.raises(KeyError, match="boom"):
        with mk.batch():
            lib.axpb(x, y, 2.0, 0.0)
            lib.axpb(x, view, 3.0, 0.0)
            raise KeyError("boom")
    np.testing.assert_allclose(y, 2 * x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(view, 3 * x, rtol=1e-5, atol=1e-5)
    with mk.batch() as b:                    # no batch is left open on this thread
        lib.axpb(x, y, 1.0, 0.0)
    assert b.calls == 1


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # an out-of-bounds write need not stop a GPU
def test_kernel_fault_is_raised_at_exit(lib, mode, device):
    x = np.ones(64, np.float32)
    y = np.zeros_like(x)
    reached = False
    with pytest.raises(mk.KernelFault, match="wild"):
        with mk.batch() as b:
            lib.wild(x)
            lib.axpb(x, y, 7.0, 0.0)         # after the fault: checked, not run
            with pytest.raises(mk.ArgumentError):
                lib.axpb(x, y)
            reached = True
    # counted when run (the CPU) or queued (a GPU finds the fault only at the end)
    assert reached and b.calls == (0 if mode == "immediate" else 2) and np.all(y == 0)
    lib.axpb(x, y, 7.0, 0.0)                 # nothing is left broken
    assert np.all(y == 7)


def test_last_gpu_time(lib, mode, device, rng):
    x = rng.standard_normal(1 << 16).astype(np.float32)
    y = np.empty_like(x)
    lib.axpb(x, y, 1.0, 0.0)
    assert lib.axpb.last_gpu_time > 0
    with mk.batch() as b:
        lib.axpb(x, y, 1.0, 0.0)
        lib.add(x, y, y)
    assert lib.axpb.last_gpu_time > 0 and lib.add.last_gpu_time > 0
    assert b.gpu_time > 0
    assert not hasattr(lib.axpb, "last_time")   # one name


def test_empty_grid_and_empty_batch(lib, mode):
    with mk.batch() as b:
        lib.axpb(np.zeros(0, np.float32), np.zeros(0, np.float32), 1.0, 0.0)
    assert b.calls == 0 and b.gpu_time == 0


def test_batch_is_exported():
    assert "batch" in mk.__all__ and "Batch" in mk.__all__
    assert isinstance(mk.batch(), mk.Batch)


# ---- the rules that decide when queued work must complete first ----

rules = _core.metal_rules


def use(lo, hi, access="direct", writes=False, layout=""):
    return (lo, hi, access, writes, layout)


@pytest.mark.parametrize("pending, nxt, must", [
    (use(0, 100, writes=True), use(0, 100), False),                       # GPU orders direct uses
    (use(0, 100, writes=True), use(0, 100, "copyin"), True),              # setBytes now would miss the write
    (use(0, 100, writes=True), use(50, 60, "mapped"), True),              # so would a staging copy
    (use(0, 100, "mapped", True), use(0, 100, "mapped", False), False),   # one shared copy
    (use(0, 100, "mapped", True, "a"), use(0, 100, "mapped", False, "b")
     , True),                                                             # two views of the same bytes
    (use(0, 100, "mapped", True), use(0, 100), True),                     # the write lands at completion
    (use(0, 100, "mapped", True), use(0, 100, writes=True), True),        # ... and would overwrite this
    (use(0, 100, "mapped"), use(0, 100, writes=True), False),             # a read copy was taken already
    (use(0, 100, "copyin"), use(0, 100, "mapped", True), False),
    (use(0, 100, writes=True), use(100, 200, "copyin"), False),           # no overlap
    (use(0, 0, writes=True), use(0, 10, "copyin"), False),                # empty
])
def test_must_complete_first(pending, nxt, must):
    assert rules.must_complete_first(pending, nxt) is must


def test_batch_flushes_only_at_hazards():
    a, b, c = (i * 1000 for i in range(3))
    calls = [
        [use(a, a + 100), use(b, b + 100, writes=True)],                   # direct chain: no flushes
        [use(b, b + 100), use(c, c + 100, writes=True)],
        [use(c, c + 100, "mapped", True)],                                 # a staged write
        [use(c, c + 100, "mapped")],                                       # same copy: fine
        [use(c, c + 50, "copyin")],                                        # small read of it: flush
        [use(c, c + 100, "mapped")],
    ]
    assert rules.batch_flushes(calls) == [2, 4]


def test_scalars_are_copied_never_wrapped():
    """A scalar lives in the call's scratch, gone before a queued call runs."""
    page, constant = 16384, 2
    assert rules.route_buffer("scalar", False, constant, False, page * 3, page * 2, 0, page) == "stage"
    assert rules.route_buffer("scalar", False, constant, False, page * 3, 64, 0, page) == "bytes"
    assert rules.route_buffer("buffer", False, constant, False, page * 3, page * 2, 0, page) == "wrap"


@pytest.mark.parametrize("route, access", [
    ("bound", "direct"), ("empty", "direct"), ("bytes", "copyin"), ("wrap", "mapped"), ("stage", "mapped")])
def test_route_access(route, access):
    assert rules.route_access(route) == access


def test_batch_fault_message_names_the_kernels():
    one = rules.batch_fault_message(["k"], "boom", True)
    assert one == rules.gpu_fault_message("k", "boom", True)
    assert "ran 3 times" in rules.batch_fault_message(["k", "k", "k"], "boom", True)
    many = rules.batch_fault_message(["a", "b", "a", "c"], "boom", False)
    assert "kernel 'a', 'b' or 'c'" in many and "4 calls" in many and "boom" in many
    assert "METALKIT_VALIDATE=1" in many


# ---- open batches and the command queue ----

@pytest.fixture
def queued_on_cpu():
    before = mk.device().backend
    mk.use("cpu")
    _core._emulate_gpu_batches(True)
    yield
    _core._emulate_gpu_batches(False)
    mk.use(before)


def test_batches_past_the_open_batch_limit_run_their_calls_at_once(queued_on_cpu):
    """Each open batch with queued work holds a command buffer; past the limit, calls run at once
    instead of waiting forever for the queue (batch.h, kMaxOpenBatches)."""
    lib = build(SRC)
    assert _core._open_batches() == (0, 32)
    x = np.arange(8, dtype=np.float32)
    y1, y2 = np.zeros_like(x), np.zeros_like(x)
    queued, release = threading.Event(), threading.Event()

    def other_thread():
        with mk.batch():
            lib.axpb(x, y1, 2.0, 1.0)
            queued.set()
            release.wait(10)

    try:
        _core._open_batches(1)
        t = threading.Thread(target=other_thread)
        t.start()
        assert queued.wait(10)
        assert _core._open_batches() == (1, 1)
        assert not y1.any()                          # queued in its batch
        with mk.batch():
            lib.axpb(x, y2, 3.0, 0.0)
            np.testing.assert_array_equal(y2, 3 * x)  # no slot left: it ran at once
        release.set()
        t.join(10)
        np.testing.assert_array_equal(y1, 2 * x + 1)
        assert _core._open_batches() == (0, 1)
        with mk.batch():                             # a slot is free again: queued
            lib.axpb(x, y2, 5.0, 0.0)
            np.testing.assert_array_equal(y2, 3 * x)
        np.testing.assert_array_equal(y2, 5 * x)
    finally:
        release.set()
        _core._open_batches(32)
    assert _core._open_batches() == (0, 32)


def test_an_abandoned_batch_gives_its_slot_back(queued_on_cpu):
    lib = build(SRC)
    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)

    def abandon():
        b = mk.batch()
        b.__enter__()
        lib.axpb(x, y, 2.0, 1.0)
        assert _core._open_batches()[0] == 1

    t = threading.Thread(target=abandon)
    t.start()
    t.join(10)
    gc.collect()
    assert _core._open_batches()[0] == 0 and not y.any()  # discarded unrun
