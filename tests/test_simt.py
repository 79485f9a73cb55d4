"""The execution model of kernels with barriers and SIMD-group functions, against numpy.

On Apple GPUs the 32 threads of a SIMD-group run in lockstep: each statement for
every active lane before the next, every lane's reads of a statement before any
lane's store, lanes that took a branch waiting for the others to reconverge.
SIMD-groups of a threadgroup are not synchronised with each other between
threadgroup_barriers. Threads that returned no longer take part in a barrier.
Kernels here rely on exactly that (no simdgroup_barrier would save them on a
simulator that lets a lane run ahead), and each checks `Kernel.execution`.
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from conftest import build

# ---- lockstep reads and writes of threadgroup memory -------------------------------------------

LOCKSTEP = """
// Lane 0 overwrites what every lane of its SIMD-group just read: on the GPU all lanes read first.
kernel void minimal(device float* out [[buffer(0)]], uint l [[thread_index_in_simdgroup]]) {
    threadgroup float sh[32];
    sh[l] = 1.0f;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    float x = sh[0];
    if (l == 0) sh[0] = 100.0f;
    out[l] = x;
}

// The same per SIMD-group, on random data, repeated `reps` times.
kernel void first_of_simdgroup(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                               constant uint& reps [[buffer(2)]],
                               uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                               uint l [[thread_index_in_simdgroup]], uint s [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sh[128];
    float acc = 0.0f;
    for (uint r = 0; r < reps; ++r) {
        sh[t] = in[i] + float(r);
        simdgroup_barrier(mem_flags::mem_threadgroup);
        float x = sh[s * 32];
        if (l == 0) sh[s * 32] = -1000.0f;
        acc += x;
    }
    out[i] = acc;
}

// a[l+1] = a[l] and friends: every lane's right-hand side before any lane's store.
kernel void shifts(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& op [[buffer(2)]],
                   uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                   uint l [[thread_index_in_simdgroup]], uint width [[threads_per_simdgroup]]) {
    threadgroup float sh[128 + 1];
    sh[t] = in[i];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (op == 0) {
        if (l + 1 < width) sh[t + 1] = sh[t];
    } else if (op == 1) {
        if (l + 1 < width) sh[t + 1] += sh[t];
    } else if (op == 2) {
        sh[t ^ 1] = sh[t];
    } else {
        float mine = sh[t];
        sh[t] = sh[t ^ 1];
        sh[t ^ 1] = mine;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = sh[t];
}
"""


def lockstep_lib():
    return build(LOCKSTEP, filename="lockstep.metal")


def simd_slices(n, tg):
    """(start, stop) of each SIMD-group of a 1-D grid of n threads in groups of tg."""
    for g0 in range(0, n, tg):
        size = min(tg, n - g0)
        for s0 in range(0, size, 32):
            yield g0 + s0, g0 + min(size, s0 + 32)


def test_the_minimal_lockstep_case(device):
    lib = lockstep_lib()
    assert lib.minimal.execution == "simt"
    out = np.zeros(32, np.float32)
    lib.minimal(out, grid=32, threadgroup=32)
    assert out.tolist() == [1.0] * 32


@pytest.mark.parametrize("n,tg,reps", [(32, 32, 1), (128, 64, 1), (200, 40, 1), (77, 64, 1), (1, 1, 1),
                                       (192, 96, 5), (100, 32, 3)])
def test_lanes_read_before_lane_zero_overwrites(device, rng, n, tg, reps):
    lib = lockstep_lib()
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.first_of_simdgroup(x, out, reps, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        acc = np.float32(0)
        for r in range(reps):
            acc = np.float32(acc + np.float32(x[a] + np.float32(r)))
        want[a:b] = acc
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op", [0, 1, 2, 3])
@pytest.mark.parametrize("n,tg", [(128, 64), (90, 45), (32, 32)])
def test_statements_read_every_lane_before_storing(device, rng, op, n, tg):
    lib = lockstep_lib()
    assert lib.shifts.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.shifts(x, out, op, threadgroup=tg)
    want = x.copy()
    for a, b in simd_slices(n, tg):
        seg = x[a:b]
        if op == 0:
            want[a + 1:b] = seg[:-1]
        elif op == 1:
            want[a + 1:b] = seg[1:] + seg[:-1]
        else:
            # A swap of neighbours; a lane whose partner does not exist reads its slot as left
            # by the previous SIMD-group's or this group's own writes: only full pairs are checked.
            pairs = (b - a) // 2 * 2
            want[a:a + pairs] = seg[:pairs].reshape(-1, 2)[:, ::-1].ravel()
            want[a + pairs:b] = out[a + pairs:b]
    np.testing.assert_array_equal(out, want)


# ---- the warp-synchronous tail of a tree reduction --------------------------------------------

REDUCE = """
// As CUDA tutorials write it: barriers down to 64 elements, then the last 32 lanes without any.
kernel void reduce_ws(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                      constant uint& n [[buffer(2)]],
                      uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                      uint size [[threads_per_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    threadgroup float s[256];
    s[t] = i < n ? in[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = size / 2; k > 32; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t < 32) {
        volatile threadgroup float* v = s;
        v[t] += v[t + 32];
        v[t] += v[t + 16];
        v[t] += v[t + 8];
        v[t] += v[t + 4];
        v[t] += v[t + 2];
        v[t] += v[t + 1];
    }
    if (t == 0) out[g] = s[0];
}
"""


@pytest.mark.parametrize("n,tg", [(256, 256), (100000, 256), (1000, 128), (4097, 64)])
def test_warp_synchronous_reduction_tail(device, rng, n, tg):
    lib = build(REDUCE, filename="reduce.metal")
    assert lib.reduce_ws.execution == "simt"
    # Small integers: every order of summation gives the exact sum.
    x = rng.integers(0, 1000, n).astype(np.float32)
    groups = -(-n // tg)
    out = np.zeros(groups, np.float32)
    lib.reduce_ws(x, out, n, grid=groups * tg, threadgroup=tg)
    want = np.zeros(groups * tg, np.float32)
    want[:n] = x
    np.testing.assert_array_equal(out, want.reshape(groups, tg).sum(axis=1))
    assert out.astype(np.float64).sum() == x.astype(np.float64).sum()


# ---- threads that return before a barrier the others reach ------------------------------------

RETURNS = """
kernel void return_first(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]],
                         uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[128];
    if (i >= n) return;
    s[t] = in[i] * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = s[t] + s[0];
}

// Returns inside a loop whose body holds barriers; thread 0 of a group is the last to leave.
kernel void return_in_loop(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                           constant uint& n [[buffer(2)]],
                           uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                           uint size [[threads_per_threadgroup]]) {
    threadgroup float s[128];
    float acc = i < n ? in[i] : 0.0f;
    for (uint r = 0; r < 4; ++r) {
        if (i >= n || t >= size - r * (size / 4)) {
            out[i] = acc;
            return;
        }
        s[t] = acc;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc += s[0];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[i] = acc;
}
"""


def ret_lib():
    return build(RETURNS, filename="returns.metal")


@pytest.mark.parametrize("n,tg", [(100, 64), (1, 32), (33, 64), (250, 96), (96, 96), (65, 96)])
def test_out_of_range_threads_return_before_a_barrier(device, rng, n, tg):
    lib = ret_lib()
    assert lib.return_first.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    groups = -(-n // tg)
    out = np.full(groups * tg, -1.0, np.float32)
    lib.return_first(x, out, n, grid=groups * tg, threadgroup=tg)  # whole SIMD-groups return when n % tg < tg - 32
    first = np.repeat(x[::tg] * 2, tg)[:n]
    np.testing.assert_array_equal(out[:n], x * 2 + first)
    np.testing.assert_array_equal(out[n:], -1.0)
    out2 = np.full(n, -1.0, np.float32)
    lib.return_first(x, out2, n, threadgroup=tg)  # the same with a grid of n threads: a short last group
    np.testing.assert_array_equal(out2, out[:n])


@pytest.mark.parametrize("n,tg", [(100, 64), (256, 128), (70, 32), (5, 96)])
def test_threads_return_from_inside_a_loop_with_barriers(device, rng, n, tg):
    lib = ret_lib()
    assert lib.return_in_loop.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    groups = -(-n // tg)
    out = np.zeros(groups * tg, np.float32)
    lib.return_in_loop(x, out, n, grid=groups * tg, threadgroup=tg)
    acc = np.zeros(groups * tg, np.float32)
    acc[:n] = x
    want = np.zeros(groups * tg, np.float32)
    done = np.zeros(groups * tg, bool)
    t = np.arange(groups * tg) % tg
    i = np.arange(groups * tg)
    for r in range(4):
        leaving = ~done & ((i >= n) | (t >= tg - r * (tg // 4)))
        want[leaving] = acc[leaving]
        done |= leaving
        acc = np.where(done, acc, acc + np.repeat(acc[::tg], tg)).astype(np.float32)
    want[~done] = acc[~done]
    np.testing.assert_array_equal(out, want)


# ---- divergence and reconvergence, SIMD-group functions under masks ---------------------------

DIVERGE = """
kernel void nested_if(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    float r;
    if (l % 2 == 0) {
        if (l % 4 == 0) r = simd_sum(v);
        else r = simd_max(v);
        r += 1.0f;
    } else {
        r = simd_min(v);
    }
    out[i] = r + simd_sum(1.0f) * 1000.0f;  // reconverged: every lane counts
}

kernel void fallthrough(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    float r = 0.0f;
    switch (l % 4) {
    case 0:
        r += simd_sum(v);
    case 1:
        r += simd_sum(1.0f) * 10.0f;
        break;
    case 2:
        r = simd_max(v);
        break;
    default:
        r = -simd_min(v);
    }
    out[i] = r;
}

kernel void lane_loops(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                       constant uint& kind [[buffer(2)]],
                       uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    float acc = 0.0f;
    if (kind == 0) {
        for (uint k = 0; k < l % 5 + 1; ++k) acc += simd_sum(v + float(k));
    } else if (kind == 1) {
        uint k = 0;
        while (true) {
            if (k > l % 7) break;
            if (k % 2 == 1) { ++k; continue; }
            acc += simd_sum(v * float(k + 1));
            ++k;
        }
    } else {
        uint k = 0;
        do {
            acc += simd_max(v + float(k));
            ++k;
        } while (k < l % 3 + 1);
    }
    out[i] = acc + simd_sum(1.0f) * 1000.0f;
}

static float sum_unless(float v, uint l) {
    if (l % 3 == 0) return v;
    float s = simd_sum(v);
    return s;
}

kernel void helper_returns(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                           uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    out[i] = sum_unless(in[i], l) + simd_sum(1.0f) * 1000.0f;
}

kernel void ternary_effects(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                            device int* count [[buffer(2)]],
                            uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    int c = 0;
    float v = in[i];
    float r = (l & 1) ? (c += 2, count[i] += 1, v) : (c -= 1, -v);
    out[i] = simd_sum(r) + float(c);
}

kernel void short_circuit_store(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                device float* seen [[buffer(2)]],
                                uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    bool a = l % 3 == 0 && (seen[i] = v) > 0.5f;
    bool b = l % 2 == 0 || (seen[i] = -v) < -0.5f;
    out[i] = simd_sum(a ? 1.0f : 0.0f) + (b ? 100.0f : 0.0f);
}

kernel void ballots(device const float* in [[buffer(0)]], device uint* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    uint r = 0;
    if (v > 0.3f) {
        r = uint(uint64_t(simd_ballot(v > 0.6f)));
        if (simd_all(v > 0.5f)) r |= 1u << 31;
        if (simd_any(v > 0.9f)) r |= 1u << 30;
    }
    out[i] = r;
}

kernel void shuffles(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float v = in[i];
    float r = -1.0f;
    if (l >= 8) {
        r = simd_shuffle(v, 8 + (l + 3) % 24);   // lanes below 8 are inactive here
        r += simd_shuffle_xor(v, 1u);
    }
    float w = simd_shuffle(r, (l + 5) % 32); // reads lanes that diverged, after reconvergence
    out[i] = w;
}
"""


def diverge_lib():
    return build(DIVERGE, filename="diverge.metal")


def per_simdgroup(n, tg, fn):
    """fn(lanes, slice) for each SIMD-group of a 1-D grid; lanes: the lane indices that exist."""
    for a, b in simd_slices(n, tg):
        fn(np.arange(b - a), slice(a, b))


N_TG = [(64, 64), (100, 40), (45, 45), (96, 32)]


@pytest.mark.parametrize("n,tg", N_TG)
def test_nested_branches_on_lane_values(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.nested_if.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.nested_if(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        v, w = x[s], np.zeros(len(lanes), np.float32)
        m4, m2, odd = lanes % 4 == 0, lanes % 4 == 2, lanes % 2 == 1
        w[m4] = v[m4].sum(dtype=np.float32) + 1
        w[m2] = v[m2].max() + 1 if m2.any() else 0
        w[odd] = v[odd].min() if odd.any() else 0
        want[s] = w + len(lanes) * 1000
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("n,tg", N_TG)
def test_switch_with_fallthrough_on_lane_values(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.fallthrough.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.fallthrough(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        v, q, w = x[s], lanes % 4, np.zeros(len(lanes), np.float32)
        w[q == 0] = v[q == 0].sum(dtype=np.float32)
        w[q <= 1] += np.count_nonzero(q <= 1) * 10
        if (q == 2).any():
            w[q == 2] = v[q == 2].max()
        if (q == 3).any():
            w[q == 3] = -v[q == 3].min()
        want[s] = w
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("kind", [0, 1, 2])
@pytest.mark.parametrize("n,tg", N_TG)
def test_loops_with_per_lane_trip_counts(device, rng, kind, n, tg):
    lib = diverge_lib()
    assert lib.lane_loops.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.lane_loops(x, out, kind, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        v, acc = x[s], np.zeros(len(lanes), np.float32)
        if kind == 0:
            trips = lanes % 5 + 1
            for k in range(trips.max()):
                m = trips > k
                acc[m] += (v[m] + np.float32(k)).sum(dtype=np.float32)
        elif kind == 1:
            last = lanes % 7  # lane runs k = 0..last; even k only do work
            for k in range(0, last.max() + 1, 2):
                m = last >= k
                acc[m] += (v[m] * np.float32(k + 1)).sum(dtype=np.float32)
        else:
            trips = lanes % 3 + 1
            for k in range(trips.max()):
                m = trips > k
                acc[m] += (v[m] + np.float32(k)).max()
        want[s] = acc + len(lanes) * 1000
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", N_TG)
def test_early_return_inside_a_helper(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.helper_returns.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.helper_returns(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        v, keep = x[s], lanes % 3 == 0
        want[s] = np.where(keep, v, v[~keep].sum(dtype=np.float32)) + len(lanes) * 1000
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("n,tg", N_TG)
def test_ternaries_with_side_effects(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.ternary_effects.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    count = rng.integers(0, 100, n).astype(np.int32)
    before = count.copy()
    out = np.zeros(n, np.float32)
    lib.ternary_effects(x, out, count, threadgroup=tg)
    want = np.zeros(n, np.float32)
    odd = np.arange(n) % tg % 32 % 2 == 1

    def ref(lanes, s):
        v = x[s]
        r = np.where(lanes & 1, v, -v).astype(np.float32)
        want[s] = r.sum(dtype=np.float32) + np.where(lanes & 1, 2, -1)
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(count, before + odd)


@pytest.mark.parametrize("n,tg", N_TG)
def test_short_circuit_operators_with_stores(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.short_circuit_store.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    seen = rng.random(n, dtype=np.float32) + 5
    before = seen.copy()
    out = np.zeros(n, np.float32)
    lib.short_circuit_store(x, out, seen, threadgroup=tg)
    lane = np.arange(n) % tg % 32
    a = (lane % 3 == 0) & (x > 0.5)
    b = (lane % 2 == 0) | (-x < -0.5)
    want_seen = np.where(lane % 3 == 0, x, before)
    want_seen = np.where(lane % 2 == 1, -x, want_seen)
    want = np.zeros(n, np.float32)
    per_simdgroup(n, tg, lambda lanes, s: want.__setitem__(s, np.count_nonzero(a[s]) + np.where(b[s], 100, 0)))
    np.testing.assert_array_equal(seen, want_seen)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("n,tg", N_TG)
def test_ballot_and_votes_exclude_inactive_lanes(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.ballots.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.uint32)
    lib.ballots(x, out, threadgroup=tg)
    want = np.zeros(n, np.uint32)

    def ref(lanes, s):
        v = x[s]
        act = v > 0.3
        if not act.any():
            return
        bits = int(sum(1 << int(k) for k in lanes[act & (v > 0.6)]))
        r = bits | (1 << 31 if (v[act] > 0.5).all() else 0) | (1 << 30 if (v[act] > 0.9).any() else 0)
        want[s] = np.where(act, r, 0)
    per_simdgroup(n, tg, ref)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("n,tg", [(64, 64), (96, 32), (256, 128)])
def test_shuffles_read_lanes_that_diverged(device, rng, n, tg):
    lib = diverge_lib()
    assert lib.shuffles.execution == "simt"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.shuffles(x, out, threadgroup=tg)
    lanes = np.arange(32)
    v = x.reshape(-1, 32)
    src = np.where(lanes >= 8, 8 + (lanes + 3) % 24, 0)
    r = np.where(lanes >= 8, v[:, src] + v[:, lanes ^ 1], -1.0).astype(np.float32)
    want = r[:, (lanes + 5) % 32].ravel()
    np.testing.assert_array_equal(out, want)


# ---- helpers that reach barriers and SIMD-group functions -------------------------------------

HELPERS = """
template <typename T, int STRIDE = 1>
T neighbour_sum(threadgroup T* s, uint t, T v) {
    s[t] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    T r = s[t] + s[t ^ STRIDE];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

struct Acc {
    float total;
    void add_group(float v) { total += simd_sum(v); }
    float lane_max(float v) const { return simd_max(v) + total; }
};

template <typename T>
struct Ops {
    static T pair(threadgroup T* s, uint t, T v) { return neighbour_sum<T, 2>(s, t, v); }
    static T prefix(T v) { return simd_prefix_inclusive_sum(v); }
};

// A helper and a kernel of the same name: the kernel is found, the helper's barrier too.
static float scaled(threadgroup float* s, uint t, float v) {
    s[t] = v * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return s[t ^ 3];
}

static float group_sum(float v) { return simd_sum(v); }

kernel void templates(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    out[i] = neighbour_sum(s, t, in[i]) + 10.0f * Ops<float>::pair(s, t, in[i]);
}

kernel void methods(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    Acc a = {1.0f};
    a.add_group(in[i]);
    out[i] = a.lane_max(in[i]) + Ops<float>::prefix(in[i]) * 100.0f;
}

kernel void two_branches(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float r;
    if (l < 10) r = group_sum(in[i]);
    else r = group_sum(in[i] * 2.0f) + 0.5f;
    out[i] = r;
}

namespace k {
kernel void scaled(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    out[i] = ::scaled(s, t, in[i]);
}
}
"""


def helper_lib():
    return build(HELPERS, filename="helpers.metal")


def test_barriers_reached_through_helpers_are_detected(device):
    lib = helper_lib()
    for name in ("templates", "methods", "two_branches", "scaled"):
        assert getattr(lib, name).execution == "simt", name


@pytest.mark.parametrize("n,tg", [(128, 64), (64, 32), (8, 8)])
def test_template_helpers_with_default_arguments(device, rng, n, tg):
    lib = helper_lib()
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.templates(x, out, threadgroup=tg)
    g = x.reshape(-1, tg)
    t = np.arange(tg)
    want = (g + g[:, t ^ 1]) + 10 * (g + g[:, t ^ 2])
    np.testing.assert_allclose(out, want.ravel(), rtol=1e-6)


@pytest.mark.parametrize("n,tg", [(64, 64), (100, 50), (7, 7)])
def test_methods_and_static_members_of_class_templates(device, rng, n, tg):
    lib = helper_lib()
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.methods(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        v = x[a:b]
        want[a:b] = v.max() + 1 + v.sum(dtype=np.float32) + np.cumsum(v, dtype=np.float32) * 100
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", [(64, 64), (40, 40), (96, 96)])
def test_one_helper_called_from_two_branches(device, rng, n, tg):
    lib = helper_lib()
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.two_branches(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        v, low = x[a:b], np.arange(b - a) < 10
        want[a:b] = np.where(low, v[low].sum(dtype=np.float32), (v[~low] * 2).sum(dtype=np.float32) + 0.5)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_a_helper_and_a_kernel_sharing_a_name(device, rng):
    lib = helper_lib()
    x = rng.random(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    lib.scaled(x, out, threadgroup=64)
    g = x.reshape(-1, 64)
    np.testing.assert_array_equal(out, (g[:, np.arange(64) ^ 3] * 2).ravel())



# ---- the fiber fallback keeps lockstep ---------------------------------------------------------

FALLBACK = """
// A SIMD-group function on the right of && is left to per-thread fibers.
kernel void fallback(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                     uint l [[thread_index_in_simdgroup]], uint s [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sh[128];
    sh[t] = in[i];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    float x = sh[s * 32];
    if (l == 0) sh[s * 32] = -1.0f;
    bool all = l % 2 == 0 && simd_all(x >= 0.0f);
    for (uint k = 0; k < l % 4; ++k) {
        x += sh[s * 32 + (l + 1) % 32 % (k + 1)];   // lanes in their extra iterations read lane 0's -1
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = all ? x : -x;
}
"""


@pytest.mark.parametrize("n,tg", [(32, 32), (128, 64), (100, 50), (7, 7)])
def test_the_fiber_fallback_says_why_and_keeps_lockstep(device, rng, n, tg):
    lib = build(FALLBACK, filename="fallback.metal")
    assert lib.fallback.execution == "fibers: a SIMD-group function on the right of '&&' (fallback.metal:13)"
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.fallback(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        lanes = np.arange(b - a)
        sh = x[a:b].copy()
        first = sh[0]
        sh[0] = -1.0
        acc = np.full(b - a, first, np.float32)
        for j, lane in enumerate(lanes):
            for k in range(lane % 4):
                acc[j] += sh[(lane + 1) % 32 % (k + 1)]
        want[a:b] = np.where(lanes % 2 == 0, acc, -acc)
    np.testing.assert_array_equal(out, want)


def test_the_minimal_case_under_the_fallback(device):
    lib = build("""
    kernel void minimal_fallback(device float* out [[buffer(0)]], uint l [[thread_index_in_simdgroup]]) {
        threadgroup float sh[32];
        sh[l] = 1.0f;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        float x = sh[0];
        if (l == 0) sh[0] = 100.0f;
        out[l] = x;
        if (l > 64 && simd_any(x > 0.0f)) out[l] = 0.0f;
    }""")
    assert lib.minimal_fallback.execution.startswith("fibers: a SIMD-group function on the right of '&&'")
    out = np.zeros(32, np.float32)
    lib.minimal_fallback(out, grid=32, threadgroup=32)
    assert out.tolist() == [1.0] * 32


def test_a_function_pointer_template_parameter_of_a_helper(device, rng):
    lib = build("""
    static float cube(float v) { return v * v * v; }

    template <float (*f)(float), int N = 2>
    float sum_of(float v) { return simd_sum(f(v)) * float(N); }

    kernel void fn_pointer_param(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                 uint i [[thread_position_in_grid]]) {
        out[i] = sum_of<cube>(in[i]);
    }""")
    assert lib.fn_pointer_param.execution == "simt"
    x = rng.random(50, dtype=np.float32)
    out = np.zeros(50, np.float32)
    lib.fn_pointer_param(x, out, threadgroup=50)
    want = np.concatenate([np.repeat((x[a:b] ** 3).sum(dtype=np.float32) * 2, b - a) for a, b in simd_slices(50, 50)])
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_a_local_written_through_a_function_pointer(device, rng):
    lib = build("""
    static void twice(device const float* p, short k, thread float& out) { out = p[k] * 2.0f; }

    template <short N, void (*load)(device const float*, short, thread float&)>
    void sum_loaded(device const float* in, device float* out, uint i) {
        float v;
        load(in + i, 0, v);                  // v differs between lanes: written through the pointer
        out[i] = simd_sum(v) * float(N);
    }

    kernel void fn_template_arg(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                uint i [[thread_position_in_grid]]) {
        sum_loaded<3, twice>(in, out, i);
    }""")
    assert lib.fn_template_arg.execution == "simt"
    x = rng.random(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    lib.fn_template_arg(x, out, threadgroup=64)
    want = np.concatenate([np.repeat((x[a:b] * 2).sum(dtype=np.float32) * 3, b - a) for a, b in simd_slices(64, 64)])
    np.testing.assert_allclose(out, want, rtol=1e-6)
