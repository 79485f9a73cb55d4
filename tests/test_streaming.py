"""Loop kernels whose outputs are stored past the cache: the same results as stored in place.

A dispatch writing at least METALKIT_STREAM_BYTES through such outputs (default: half the
last-level cache) gathers them in line-sized windows and writes those in non-temporal stores
(launch.h run_groups_streamed). The tests set it to 0, so every size streams, and compare each
run with numpy and, bit for bit, with the same call with streaming off: outputs of every element
size at once, offset from a line by any number of elements, every group size, rows of a 2-D grid
that are not contiguous, an output that is also an input, narrow and signed indices, faults.
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from conftest import build

pytestmark = pytest.mark.parametrize("device", ["cpu"], indirect=True)  # the CPU simulator's stores

SRC = """
#include <metal_logging>
kernel void mix(device const float* a [[buffer(0)]], device const float4* b [[buffer(1)]],
                device float* sum [[buffer(2)]], device half* low [[buffer(3)]], device float4* wide [[buffer(4)]],
                device uchar* sign [[buffer(5)]], constant float& k [[buffer(6)]],
                uint id [[thread_position_in_grid]]) {
    float4 v = b[id];
    float s = (a[id] - v.x) * k;
    sum[id] = s;
    low[id] = half(s);
    wide[id] = v * s;
    sign[id] = uchar(s > 0.0f);
}

kernel void twice(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                  ushort id [[thread_position_in_grid]]) {
    out[id] = a[id] * 2.0f;
}

kernel void logged(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                   uint id [[thread_position_in_grid]]) {
    if (id % 50 == 3) os_log_default.log("thread %u sees %g", id + 0u, a[id]);
    out[id] = a[id] * 3.0f;
}

struct pair { float lo, hi; };
kernel void pairs(device const float* a [[buffer(0)]], device pair* out [[buffer(1)]],
                  uint id [[thread_position_in_grid]]) {
    out[id] = pair{a[id], a[id] * 2.0f};
}

kernel void quotient(device const int* a [[buffer(0)]], device const int* b [[buffer(1)]],
                     device int* out [[buffer(2)]], int id [[thread_position_in_grid]]) {
    out[id] = a[id] / b[id];
}
"""
NO_STREAMING = str(1 << 62)


@pytest.fixture(scope="module")
def lib():
    return build(SRC, filename="streaming.metal")


def aligned(n: int, dtype, offset: int, width: int = 1) -> np.ndarray:
    """n elements of dtype (times width), starting `offset` elements past a 64-byte boundary."""
    item = np.dtype(dtype).itemsize * width
    raw = np.empty((n + offset) * item + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset * item
    out = raw[start:start + n * item].view(dtype)
    return out.reshape(n, width) if width > 1 else out


def run_mix(lib, a, b, k, offset, **kw):
    n = len(a)
    outs = [aligned(n, np.float32, offset), aligned(n, np.float16, offset), aligned(n, np.float32, offset, 4),
            aligned(n, np.uint8, offset)]
    for o in outs:
        o[...] = 7  # stale values a store that went missing would leave
    lib.mix(a, b, *outs, np.float32(k), grid=n, **kw)
    return outs


@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 1000, 4099, 70001])
def test_streamed_outputs_of_every_size_match_numpy_and_plain_stores(device, lib, rng, monkeypatch, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal((n, 4)).astype(np.float32)
    k = np.float32(rng.uniform(0.5, 2))
    s = (a - b[:, 0]) * k
    want = [s, s.astype(np.float16), b * s[:, None], (s > 0).astype(np.uint8)]
    assert "past the cache" in lib.mix.execution_reason
    for group in (1, 7, 64, 100, 1024):
        for offset in (0, 1, 13):
            monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
            streamed = run_mix(lib, a, b, k, offset, threadgroup=group)
            monkeypatch.setenv("METALKIT_STREAM_BYTES", NO_STREAMING)
            stored = run_mix(lib, a, b, k, offset, threadgroup=group)
            for got, plain, ref in zip(streamed, stored, want):
                np.testing.assert_array_equal(got, plain, err_msg=f"group {group}, offset {offset}")
                np.testing.assert_array_equal(got, ref, err_msg=f"group {group}, offset {offset}")


def test_rows_of_a_2d_grid_and_an_output_that_is_an_input(device, lib, rng, monkeypatch):
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, 7, np.float32)
    # Every row of the grid writes the same elements (id is x): windows restart at each row.
    lib.twice(x, out, grid=(1000, 3), threadgroup=(64, 2))
    np.testing.assert_array_equal(out, x * 2)
    y = x.copy()
    lib.twice(y, y, grid=1000, threadgroup=100)  # in place: each thread reads its element before storing
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("grid", [65535, 65536, 65537, 70000])
def test_a_narrow_index_streams_only_where_it_cannot_wrap(device, lib, rng, monkeypatch, grid):
    # A ushort id wraps past 65535: thread 65536 stores what thread 0 does, at the same element.
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
    x = rng.standard_normal(65536).astype(np.float32)
    out = np.full(65536, 7, np.float32)
    lib.twice(x, out, grid=grid, threadgroup=256)
    want = np.where(np.arange(65536) < grid, x * 2, np.float32(7))
    np.testing.assert_array_equal(out, want)


def test_a_fault_in_a_streamed_kernel_names_its_thread(device, lib, rng, monkeypatch):
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
    a = rng.integers(-100, 100, 300).astype(np.int32)
    b = rng.integers(1, 9, 300).astype(np.int32)
    b[211] = 0
    with pytest.raises(mk.KernelFault, match=r"kernel 'quotient' \(streaming.metal:\d+\): integer division by zero"
                                             r".* thread 83\b"):
        lib.quotient(a, b, np.zeros(300, np.int32), threadgroup=128)
    b[211] = 3
    out = np.zeros(300, np.int32)
    lib.quotient(a, b, out, threadgroup=128)
    np.testing.assert_array_equal(out, np.trunc(a / b).astype(np.int32))


def test_a_bad_stream_bytes_value_is_an_error_and_leaves_the_output(device, lib, monkeypatch):
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "lots")
    x = np.arange(10, dtype=np.float32)
    out = np.full(10, 7, np.float32)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'twice': METALKIT_STREAM_BYTES must be a number of bytes"):
        lib.twice(x, out)
    assert (out == 7).all()


def test_outputs_the_compiler_finds_unsuited_are_stored_in_place(device, lib, rng, monkeypatch):
    # A struct's assignment could read what it replaces: the front end's pattern holds, the type does not.
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
    assert lib.pairs.execution == "loop" and lib.pairs.execution_reason == ""
    a = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(1000, lib.pairs.args[1].dtype)
    lib.pairs(a, out)
    np.testing.assert_array_equal(out["lo"], a)
    np.testing.assert_array_equal(out["hi"], a * 2)


def test_a_streamed_kernel_that_logs_names_each_thread(device, lib, rng, monkeypatch):
    monkeypatch.setenv("METALKIT_STREAM_BYTES", "0")
    seen = []
    previous = mk.set_kernel_log_handler(seen.append)
    try:
        a = rng.standard_normal(200).astype(np.float32)
        out = np.zeros(200, np.float32)
        lib.logged(a, out, threadgroup=64)
    finally:
        mk.set_kernel_log_handler(previous)
    assert "past the cache" in lib.logged.execution_reason
    np.testing.assert_array_equal(out, a * 3)
    assert [(m.threadgroup, m.thread, m.text) for m in seen] == [
        ((i // 64, 0, 0), (i % 64, 0, 0), f"thread {i} sees {a[i]:g}") for i in (3, 53, 103, 153)]
