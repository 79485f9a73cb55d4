"""metalkit.trace on GPU puzzle kernels: which elements each thread read and wrote, against what
numpy says the kernel should touch, and the pictures Trace.draw makes of it."""
import re
import sys

import numpy as np
import pytest

import metalkit as mk
from conftest import build
from test_puzzles import DOT, GUARD, MATMUL_TILED, POOL, pool_ref


@pytest.fixture(autouse=True)
def cpu():
    mk.use("cpu")


def pairs(*cols):
    """Sorted distinct (element, thread) rows, as Trace.reads/writes give them."""
    return np.unique(np.array(list(zip(*cols)), np.int64).reshape(-1, 2), axis=0)


def same(got, want):
    np.testing.assert_array_equal(got, pairs(*want.T) if len(want) else got[:0])


def draws(t, path, **kw):
    """Draw t to path (png or svg) and check the file is one."""
    pytest.importorskip("matplotlib")
    t.draw(str(path), **kw)
    head = path.read_bytes()[:200]
    assert head.startswith(b"\x89PNG\r\n\x1a\n") if path.suffix == ".png" else b"<svg" in head


def test_map_with_guard(rng, tmp_path):
    """Threads past the guard touch nothing; each of the others reads and writes its own element."""
    lib = build(GUARD)
    size = int(rng.integers(3, 12))
    a = rng.standard_normal(size).astype(np.float32)
    out = np.zeros(size + 4, np.float32)
    t = mk.trace(lib.guard, a, out, size, grid=16, threadgroup=4)
    np.testing.assert_array_equal(out[:size], a + np.float32(10))
    assert t.fault is None and set(t.memories) == {"a", "out"}  # the scalar is not a buffer
    assert t.memories["out"].length == size + 4 and not t.memories["a"].threadgroup
    own = np.stack([np.arange(size)] * 2, axis=1)
    same(t.reads("a"), own)
    same(t.writes("out"), own)
    assert len(t.reads("out")) == 0 and len(t.writes("a")) == 0
    acc = t.accesses("a")
    np.testing.assert_array_equal(acc["group"], acc["thread"] // 4)
    np.testing.assert_array_equal(acc["local"], acc["thread"] % 4)
    draws(t, tmp_path / "guard.png")
    draws(t, tmp_path / "guard.svg", color_by="threadgroup")


def test_pooling_window(rng, tmp_path):
    """The pooling puzzle stages a in threadgroup memory; thread i then reads the window i-2..i."""
    lib = build(POOL)
    size = int(rng.integers(4, 10))
    a = rng.standard_normal(size).astype(np.float32)
    out = np.zeros(size, np.float32)
    t = mk.trace(lib.pool, a, out, size, grid=12, threadgroup=12, threadgroup_memory={0: 4 * 12})
    np.testing.assert_allclose(out, pool_ref(a), rtol=1e-6)
    i = np.arange(size)
    same(t.reads("a"), np.stack([i, i], axis=1))
    same(t.writes("cache"), np.stack([i, i], axis=1))
    window = np.array([(j - k, j) for j in i for k in range(3) if j - k >= 0])
    same(t.reads("cache"), window)
    assert t.memories["cache"].threadgroup and t.memories["cache"].length == 12
    draws(t, tmp_path / "pool.png")


POOL_PAST = """
// A window sum that reads ahead, out[i] = a[i] + a[i+1] + a[i+2], with no guard on the window.
kernel void pool_ahead(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                       constant uint& size [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < size) out[i] = a[i] + a[i + 1] + a[i + 2];
}
"""


def test_pooling_reads_past_its_window(rng, tmp_path):
    """The first thread whose window passes the array's end reads element `size`, which the trace
    records before the access faults: that is the trace's last record for it, and no later thread runs."""
    lib = build(POOL_PAST)
    size = int(rng.integers(4, 10))
    a = rng.standard_normal(size).astype(np.float32)
    out = np.zeros(size, np.float32)
    t = mk.trace(lib.pool_ahead, a, out, size, grid=size, threadgroup=size)
    assert "past the end of parameter 'a'" in t.fault
    assert (out == 0).all()  # nothing is copied back after a fault
    bad = size - 2  # reads a[size - 2], a[size - 1], then a[size]
    want = np.array([(j + k, j) for j in range(bad + 1) for k in range(3)])
    same(t.reads("a"), want)
    same(t.writes("out"), np.stack([np.arange(bad)] * 2, axis=1))
    acc = t.accesses("a")
    assert acc["element"].max() == size and acc[acc["element"] >= size]["thread"].tolist() == [bad]
    draws(t, tmp_path / "pool_ahead.png")


@pytest.mark.parametrize("tile", [3, 4])
def test_matmul_tiles_loaded_once(rng, tmp_path, tile):
    """Each threadgroup loads every element of its rows of A and its columns of B once per tile (one
    thread each), and writes each cell of its tiles once per step along k."""
    lib = build(MATMUL_TILED)
    n, k, m = (int(x) for x in rng.integers(2, 9, 3))
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    gx, gy = -(-m // tile) * tile, -(-n // tile) * tile
    nb = 4 * tile * tile
    t = mk.trace(lib.matmul_tiled, a, b, c, n, k, m, grid=(gx, gy), threadgroup=(tile, tile),
                 threadgroup_memory={0: nb, 1: nb})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert t.memories["A"].shape == (n, k) and t.memories["C"].shape == (n, m)

    def thread(col, row):
        return col + gx * row

    # A[r, j] is read by the thread in row r whose column in its tile is j % tile, in every tile column.
    same(t.reads("A"), np.array([(r * k + j, thread(g + j % tile, r))
                                 for r in range(n) for j in range(k) for g in range(0, gx, tile)]))
    same(t.reads("B"), np.array([(j * m + col, thread(col, g + j % tile))
                                 for j in range(k) for col in range(m) for g in range(0, gy, tile)]))
    same(t.writes("C"), np.array([(r * m + col, thread(col, r)) for r in range(n) for col in range(m)]))
    for name in ("A", "B"):  # once per threadgroup
        acc = t.accesses(name)
        _, count = np.unique(np.stack([acc["group"], acc["element"]], axis=1), axis=0, return_counts=True)
        assert (count == 1).all()
    steps = -(-k // tile)
    for name in ("ta", "tb"):
        w = t.accesses(name)
        w = w[w["write"]]
        _, count = np.unique(np.stack([w["group"], w["element"]], axis=1), axis=0, return_counts=True)
        assert len(count) == (gx // tile) * (gy // tile) * tile * tile and (count == steps).all()
        assert (w["element"] == w["local"]).all()  # thread (x, y) stages cell y * tile + x
    draws(t, tmp_path / f"matmul_{tile}.png", groups=2)


def test_dot_product_kernel_scope_memory(rng, tmp_path):
    """A threadgroup array declared in the kernel is traced too: each thread writes its product,
    then thread 0 of each threadgroup reads them all."""
    lib = build(DOT)
    size = int(rng.integers(9, 16))
    a = rng.standard_normal(size).astype(np.float32)
    b = rng.standard_normal(size).astype(np.float32)
    out = np.zeros(1, np.float32)
    t = mk.trace(lib.dot_product, a, b, out, size, grid=16, threadgroup=8)
    tid = np.arange(16)
    same(t.writes("products"), np.stack([tid % 8, tid], axis=1))
    same(t.reads("products"), np.array([(e, g) for g in (0, 8) for e in range(8)]))
    same(t.writes("out"), np.array([(0, 0), (0, 8)]))
    same(t.reads("b"), np.stack([np.arange(size)] * 2, axis=1))
    draws(t, tmp_path / "dot.svg")


def test_notebook_and_errors(rng, monkeypatch):
    lib = build(GUARD)
    a = rng.standard_normal(4).astype(np.float32)
    t = mk.trace(lib.guard, a, np.zeros(4, np.float32), 4)
    with pytest.raises(KeyError, match="has no traced buffer or threadgroup memory 'size'"):
        t.reads("size")
    with pytest.raises(mk.DispatchError, match="ran no threads"):
        mk.trace(lib.guard, a, np.zeros(4, np.float32), 4, grid=0)
    with pytest.raises(mk.DispatchError, match="CPU simulator"):
        mk.trace(print, a)
    with pytest.raises(mk.KernelFault, match=r"kernel 'guard' .*keeps at most 3 accesses .*trace a smaller grid"):
        mk.trace(lib.guard, a, np.zeros(4, np.float32), 4, max_accesses=3)  # 8 accesses
    assert len(mk.trace(lib.guard, a, np.zeros(4, np.float32), 4, max_accesses=8).accesses("a")) == 4
    big = np.zeros(1 << 15, np.float32)  # two chunks of threadgroups, each log under the cap, together over it
    with pytest.raises(mk.KernelFault, match="keeps at most 40000 accesses"):
        mk.trace(lib.guard, big, big.copy(), big.size, threadgroup=1024, max_accesses=40000)
    with mk.batch(), pytest.raises(mk.DispatchError, match=r"outside metalkit.batch\(\)"):
        mk.trace(lib.guard, a, np.zeros(4, np.float32), 4)
    lib.guard(a, np.zeros(4, np.float32), 4)  # the trace was asked for one call: this one keeps none
    assert mk._core._take_trace() is None
    pytest.importorskip("matplotlib")
    assert t._repr_png_().startswith(b"\x89PNG") and "<svg" in t._repr_svg_()
    with pytest.raises(ValueError, match="color_by"):
        t.draw(color_by="lane")
    wide = mk.trace(lib.guard, np.zeros(5000, np.float32), np.zeros(4, np.float32), 4, grid=4)
    with pytest.raises(ValueError, match="'guard': a .* has 5000 cells, too many to draw"):
        wide.draw()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"metalkit\[draw\]"):
        t.draw()
    assert t._repr_png_() is None


RAMP = """
kernel void ramp(device float* img [[buffer(0)]], constant uint& width [[buffer(1)]],
                 uint2 p [[thread_position_in_grid]]) { img[p.y * width + p.x] = p.x; }
"""


def test_partial_threadgroups_name_the_right_threads(rng, tmp_path):
    """At the grid's edge a threadgroup is partial, and its threads' indices count across its own
    width: each element of img is written by the thread at its position all the same."""
    lib = build(RAMP)
    h, w = (int(x) for x in rng.integers(3, 9, 2))
    img = np.zeros((h, w), np.float32)
    t = mk.trace(lib.ramp, img, w, grid=(w, h), threadgroup=(4, 2))
    np.testing.assert_array_equal(img, np.broadcast_to(np.arange(w, dtype=np.float32), (h, w)))
    e = np.arange(h * w)
    same(t.writes("img"), np.stack([e, e], axis=1))
    np.testing.assert_array_equal(t.thread_positions(e)[:, :2], np.stack([e % w, e // w], axis=1))
    assert t.memories["img"].shape == (h, w)
    draws(t, tmp_path / "ramp.png", color_by="threadgroup")


def test_readme_example_runs(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from test_docs import readme_section
    section = readme_section("The CPU backend and its compiler").split("### Pictures of who touched what", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "pool.png").read_bytes().startswith(b"\x89PNG")


COUNT = """
// Counts the positive elements with an atomic, and sums each SIMD-group's 32 with simd_sum.
kernel void count(device atomic_uint* n [[buffer(0)]], device const float* x [[buffer(1)]],
                  device float* s [[buffer(2)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    if (x[i] > 0) atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
    float v = simd_sum(x[i]);
    if (l == 0) s[i / 32] = v;
}
"""


def test_atomics_and_simd_groups(rng):
    """An atomic update is one access that reads and writes, marked atomic; a SIMD-group's lanes
    are each named, so the lane that writes the SIMD-group's sum is."""
    lib = build(COUNT)
    x = rng.standard_normal(128).astype(np.float32)
    n, s = np.zeros(1, np.uint32), np.zeros(4, np.float32)
    t = mk.trace(lib.count, n, x, s, grid=128, threadgroup=64)
    assert n[0] == (x > 0).sum()
    np.testing.assert_allclose(s, x.reshape(4, 32).sum(axis=1), rtol=1e-4, atol=1e-5)
    acc = t.accesses("n")
    np.testing.assert_array_equal(np.sort(acc["thread"]), np.flatnonzero(x > 0))
    assert acc["atomic"].all() and acc["read"].all() and acc["write"].all()
    same(t.writes("s"), np.array([(k, 32 * k) for k in range(4)]))
    assert not t.accesses("x")["atomic"].any()
