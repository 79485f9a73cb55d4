"""Dispatch geometry: threadgroups= (whole groups), (x, y, z) = (width, height, depth) order,
and the default grid, which is taken only when the arrays make it unambiguous."""
import numpy as np
import pytest

import metalkit as mk
from metalkit import _core
from metalkit.msl.signatures import builtin_width, kernel_signatures
from conftest import build

ASK = r"pass grid=\(x, y, z\) in threads, or threadgroups=\(x, y, z\) with threadgroup=\(x, y, z\)"


@pytest.fixture(scope="module")
def lib():
    return build("""
// Each thread writes where it is: x + 1000 y + 1000000 z, at out[z][y][x].
kernel void where3(device uint* out [[buffer(0)]], uint3 gid [[thread_position_in_grid]],
                   uint3 size [[threads_per_grid]]) {
    out[(gid.z * size.y + gid.y) * size.x + gid.x] = gid.x + 1000 * gid.y + 1000000 * gid.z;
}
kernel void where2(device uint* out [[buffer(0)]], constant uint& cols [[buffer(1)]],
                   ushort2 gid [[thread_position_in_grid]]) {
    out[gid.y * cols + gid.x] = gid.x + 1000 * gid.y;
}
// Which group and lane each thread is: the threadgroup's geometry decides the result.
kernel void groups(device uint* group [[buffer(0)]], device uint* lane [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint g [[threadgroup_position_in_grid]],
                   uint l [[thread_position_in_threadgroup]]) {
    group[i] = g;
    lane[i] = l;
}
// One sum per threadgroup: out is shorter than in.
kernel void group_sums(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                       constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                       uint g [[threadgroup_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                       uint size [[threads_per_threadgroup]]) {
    threadgroup float part[256];
    part[l] = i < n ? in[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        float s = 0.0f;
        for (uint k = 0; k < size; ++k) s += part[k];
        out[g] = s;
    }
}
kernel void scaled(device const float* x [[buffer(0)]], device float4* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { out[i] = float4(x[i]) * float4(1, 2, 3, 4); }
kernel void fill(device uint* out [[buffer(0)]]) { out[0] = 7; }
kernel void tile(device float* out [[buffer(0)]], threadgroup float* t [[threadgroup(0)]],
                 uint i [[thread_position_in_grid]]) { out[i] = 1.0f; }
""")


# ---- threadgroups= ----

@pytest.mark.parametrize("groups,tg", [((3,), (4,)), ((1,), (1,)), ((5, 2), (3, 4)), ((2, 3, 2), (4, 2, 3)),
                                       ((7, 1, 1), (32, 1, 1))])
def test_threadgroups_run_whole_groups(device, lib, groups, tg):
    dims = [(list(groups) + [1, 1])[i] * (list(tg) + [1, 1])[i] for i in range(3)]  # (x, y, z)
    out = np.full(dims[::-1], 0xFFFFFFFF, np.uint32)  # numpy's shape is (z, y, x)
    lib.where3(out, threadgroups=groups, threadgroup=tg)
    z, y, x = np.indices(out.shape)
    np.testing.assert_array_equal(out, x + 1000 * y + 1000000 * z)


def test_threadgroups_and_grid_give_the_same_dispatch(device, lib, rng):
    n = int(rng.integers(1, 40)) * 16
    g1, l1 = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    g2, l2 = np.ones(n, np.uint32), np.ones(n, np.uint32)
    lib.groups(g1, l1, threadgroups=n // 16, threadgroup=16)
    lib.groups(g2, l2, grid=n, threadgroup=16)
    np.testing.assert_array_equal(g1, np.arange(n) // 16)
    np.testing.assert_array_equal(l1, np.arange(n) % 16)
    np.testing.assert_array_equal(g2, g1)
    np.testing.assert_array_equal(l2, l1)


def test_a_reduction_ported_with_threadgroup_counts(device, lib, rng):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(4, np.nan, np.float32)
    lib.group_sums(x, out, n, threadgroups=4, threadgroup=256)  # 1024 threads, the last 24 past the data
    want = np.add.reduceat(x.astype(np.float64), [0, 256, 512, 768])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_zero_threadgroups_run_nothing(device, lib):
    out = np.full(4, 5, np.uint32)
    lib.where3(out, threadgroups=(0, 1, 1), threadgroup=4)
    assert out.tolist() == [5, 5, 5, 5]


def test_threadgroups_errors(lib):
    out = np.zeros(16, np.uint32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'where3': pass grid= \(threads per grid\) or threadgroups= "
                                               r"\(threadgroups per grid\), not both"):
        lib.where3(out, grid=16, threadgroups=4, threadgroup=4)
    with pytest.raises(mk.DispatchError, match=r"kernel 'where3': threadgroups= counts threadgroups, so it needs "
                                               r"threadgroup= \(threads per threadgroup\) too"):
        lib.where3(out, threadgroups=4)
    with pytest.raises(mk.DispatchError, match=r"kernel 'where3': threadgroups \(4294967295, 1, 1\) of threadgroup "
                                               r"\(2, 1, 1\) make 8589934590 threads along dimension 0, over Metal's"):
        lib.where3(out, threadgroups=2**32 - 1, threadgroup=2)
    with pytest.raises(mk.DispatchError, match=r"threadgroups dimension 1 is -1"):
        lib.where3(out, threadgroups=(1, -1), threadgroup=1)
    with pytest.raises(mk.DispatchError, match=r"threadgroup \(64, 32, 1\) has 2048 threads"):
        lib.where3(out, threadgroups=1, threadgroup=(64, 32))
    assert not out.any()


def test_run_takes_threadgroups(device, rng):
    a = rng.standard_normal(24).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    out = np.zeros(24, np.float32)
    mk.run("add_arrays", a, b, out, threadgroups=3, threadgroup=8)
    np.testing.assert_array_equal(out, a + b)


# ---- (x, y, z) is (width, height, depth) ----

@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 5), (17, 2), (64, 33)])
def test_a_2d_grid_is_width_then_height(device, lib, rows, cols):
    out = np.full((rows, cols), 0xFFFFFFFF, np.uint32)
    lib.where2(out, cols, grid=(cols, rows), threadgroup=(8, 4))
    r, c = np.indices((rows, cols))
    np.testing.assert_array_equal(out, c + 1000 * r)


# ---- the default grid ----

@pytest.mark.parametrize("n", [0, 1, 7, 255, 257, 4099])
def test_equal_arrays_and_a_scalar_position_default_to_their_length(device, lib, rng, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    mk.run("add_arrays", a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_arrays_are_counted_in_their_parameters_element_type(device, lib, rng):
    x = rng.standard_normal(33).astype(np.float32)
    out = np.zeros((33, 4), np.float32)  # 33 float4
    lib.scaled(x, out)
    np.testing.assert_array_equal(out, x[:, None] * np.array([1, 2, 3, 4], np.float32))


def test_a_shorter_output_has_no_default_grid(lib, rng):
    x = rng.standard_normal(1024).astype(np.float32)
    out = np.zeros(4, np.float32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'group_sums': no default grid, because its arrays hold "
                                               r"different numbers of elements \('in': 1024, 'out': 4\), so the "
                                               r"grid would be a guess; " + ASK):
        lib.group_sums(x, out, 1024, threadgroup=256)
    assert not out.any()
    lib.group_sums(x, out, 1024, grid=1024, threadgroup=256)
    np.testing.assert_allclose(out, x.astype(np.float64).reshape(4, 256).sum(1), rtol=1e-4, atol=1e-4)


def test_a_vector_position_has_no_default_grid(lib):
    out = np.zeros((4, 4), np.uint32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'where2': no default grid, because 'ushort2 gid "
                                               r"\[\[thread_position_in_grid\]\]' makes a 2-D grid, whose shape the "
                                               r"arrays cannot tell; " + ASK):
        lib.where2(out, 4)
    with pytest.raises(mk.DispatchError, match=r"kernel 'where3': no default grid, because 'uint3 gid .* makes a "
                                               r"3-D grid"):
        lib.where3(out, threadgroup=(4, 4))
    assert not out.any()


def test_a_kernel_reading_its_threadgroup_geometry_needs_threadgroup(device, lib, rng):
    n = int(rng.integers(300, 900))
    group, lane = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'groups': no default grid, because 'uint g "
                                               r"\[\[threadgroup_position_in_grid\]\]' depends on the threadgroup size"
                                               r", which a default would pick from the array length; pass "
                                               r"threadgroup="):
        lib.groups(group, lane)
    lib.groups(group, lane, threadgroup=64)  # the grid is then the arrays' length
    np.testing.assert_array_equal(group, np.arange(n) // 64)
    np.testing.assert_array_equal(lane, np.arange(n) % 64)


def test_threadgroup_memory_parameters_need_threadgroup(lib):
    out = np.zeros(8, np.float32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'tile': no default grid, because 'threadgroup float\* t' "
                                               r"depends on the threadgroup size"):
        lib.tile(out, threadgroup_memory={0: 64})
    lib.tile(out, threadgroup=8, threadgroup_memory={0: 32})
    assert out.tolist() == [1.0] * 8


def test_a_kernel_that_cannot_tell_threads_apart_has_no_default_grid(lib):
    out = np.zeros(5, np.uint32)
    with pytest.raises(mk.DispatchError, match=r"kernel 'fill': no default grid, because it declares no builtin "
                                               r"that tells threads apart \(such as thread_position_in_grid\), so "
                                               r"every thread of a default grid would do the same work; " + ASK):
        lib.fill(out)
    lib.fill(out, grid=1)
    assert out.tolist() == [7, 0, 0, 0, 0]


def test_a_kernel_without_arrays_has_no_default_grid():
    k = build("kernel void nothing(constant uint& n [[buffer(0)]], uint i [[thread_position_in_grid]]) {}").nothing
    with pytest.raises(mk.DispatchError, match=r"kernel 'nothing': no default grid, because it takes no array "
                                               r"argument to size the grid from; " + ASK):
        k(3)
    k(3, grid=3)


def test_builtins_are_listed_with_their_vector_width(lib):
    assert [(a.name, a.builtin, a.vec_width) for a in lib.where2.args if a.kind == "builtin"] == [
        ("gid", "thread_position_in_grid", 2)]


# ---- the Metal backend reads builtins from the signature ----

def test_builtin_widths_from_declarations():
    assert [builtin_width(d, n) for d, n in [
        ("uint i", "i"), ("const uint2 gid", "gid"), ("ushort3 t", "t"), ("metal :: vec < ushort , 3 > t", "t"),
        ("unsigned int k", "k"), ("uint32_t k", "k"), ("metal :: uint2 p", "p"), ("pos_t p", "p")]] == [
        1, 2, 3, 3, 1, 1, 2, 0]


METAL_SOURCE = """#include <metal_stdlib>
using namespace metal;
typedef uint2 pos_t;
kernel void flat(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 0; }
kernel void plane(device float* x [[buffer(0)]], uint2 p [[thread_position_in_grid]]) { x[p.x] = 0; }
kernel void named(device float* x [[buffer(0)]], pos_t p [[thread_position_in_grid]]) { x[p.x] = 0; }
kernel void grouped(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]],
                    ushort l [[thread_index_in_threadgroup]]) { x[i] = l; }
"""


def test_metal_kernels_get_the_same_default_grid_rule():
    sigs = kernel_signatures(METAL_SOURCE)
    binding = [("buffer", 0, "x", "float", 1, 4, 4, True)]
    rule = lambda k: _core.metal_rules.default_grid_rule(k, binding, sigs, "k.metal")
    assert rule("flat") == ("", "")
    assert rule("plane") == ("'uint2 p [[thread_position_in_grid]]' makes a 2-D grid, whose shape the arrays "
                             "cannot tell", "")
    assert rule("named") == ("the type of 'pos_t p [[thread_position_in_grid]]' could not be read", "")
    assert rule("grouped") == ("", "'ushort l [[thread_index_in_threadgroup]]'")
    # A .metallib without signatures: no builtin is known, so the grid is never guessed.
    refusal, _ = _core.metal_rules.default_grid_rule("flat", binding, {}, "k.metallib")
    assert "no builtin that tells threads apart" in refusal
    _, _, args = _core.metal_rules.spec_from_reflection("plane", binding, sigs, "k.metal")
    assert [(a[0], a[2], a[3], a[5]) for a in args] == [("buffer", "x", "device float* x", 1),
                                                        ("builtin", "p", "uint2 p", 2)]
