"""The execution model of kernels with barriers and SIMD-group functions, against numpy.

On Apple GPUs the 32 threads of a SIMD-group run in lockstep: each statement for
every active lane before the next, every lane's reads of a statement before any
lane's store, lanes that took a branch waiting for the others to reconverge.
SIMD-groups of a threadgroup are not synchronised with each other between
threadgroup_barriers. Threads that returned no longer take part in a barrier.
Kernels here rely on exactly that (no simdgroup_barrier would save them on a
simulator that lets a lane run ahead). Each runs under the SIMT model and under
the per-thread fiber fallback (execution="fibers"), and checks `Kernel.execution` says which.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import metalkit as mk
from conftest import build

# Every kernel runs under both lockstep models: SIMT, and a fiber per thread with lanes meeting
# before each statement (the fallback for code the SIMT transform does not cover).
MODELS = ["simt", "fibers"]


def build_as(src: str, filename: str, model: str):
    """src's kernels under one execution model."""
    return build(src, filename=filename, execution="auto" if model == "simt" else model)


def check_model(kernel, model):
    assert kernel.execution == model, (kernel.execution, kernel.execution_reason)

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

// Each SIMD-group keeps a running max and sum of exp over its chunks; every lane reads the whole
// chunk from threadgroup memory, then lane 0 overwrites it (the next chunk, and at the end the
// SIMD-group's sum and max for the combine) with no barrier in between, as attention kernels
// for LLM decoding do.
kernel void logsumexp(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      constant uint& n [[buffer(2)]],
                      uint l [[thread_index_in_simdgroup]], uint s [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[32 * 32];
    threadgroup float* row = scratch + 32 * s;
    float M = -INFINITY, S = 0.0f;
    for (uint c = s * 32; c < n; c += nsg * 32) {
        const float v = c + l < n ? x[c + l] : -INFINITY;
        row[l] = v;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        const float m = max(M, simd_max(v));
        float e = 0.0f;
        for (uint k = 0; k < 32; ++k) e += exp(row[k] - m);
        S = S * exp(M - m) + e;
        M = m;
    }
    if (l == 0) {
        row[0] = S;
        row[1] = M;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (s == 0 && l == 0) {
        float top = -INFINITY;
        for (uint j = 0; j < nsg; ++j) top = max(top, scratch[32 * j + 1]);
        float total = 0.0f;
        for (uint j = 0; j < nsg; ++j) total += scratch[32 * j] * exp(scratch[32 * j + 1] - top);
        out[0] = top + log(total);
    }
}
"""


def lockstep_lib(model):
    return build_as(LOCKSTEP, "lockstep.metal", model)


def simd_slices(n, tg):
    """(start, stop) of each SIMD-group of a 1-D grid of n threads in groups of tg."""
    for g0 in range(0, n, tg):
        size = min(tg, n - g0)
        for s0 in range(0, size, 32):
            yield g0 + s0, g0 + min(size, s0 + 32)


@pytest.mark.parametrize("model", MODELS)
def test_the_minimal_lockstep_case(device, model):
    lib = lockstep_lib(model)
    check_model(lib.minimal, model)
    out = np.zeros(32, np.float32)
    lib.minimal(out, grid=32, threadgroup=32)
    assert out.tolist() == [1.0] * 32


@pytest.mark.parametrize("n,tg,reps", [(32, 32, 1), (128, 64, 1), (200, 40, 1), (77, 64, 1), (1, 1, 1),
                                       (192, 96, 5), (100, 32, 3)])
@pytest.mark.parametrize("model", MODELS)
def test_lanes_read_before_lane_zero_overwrites(device, model, rng, n, tg, reps):
    lib = lockstep_lib(model)
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
@pytest.mark.parametrize("model", MODELS)
def test_statements_read_every_lane_before_storing(device, model, rng, op, n, tg):
    lib = lockstep_lib(model)
    check_model(lib.shifts, model)
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


@pytest.mark.parametrize("n,tg", [(1, 32), (31, 64), (1000, 256), (5000, 96), (64, 1024)])
@pytest.mark.parametrize("model", MODELS)
def test_lanes_read_a_chunk_before_lane_zero_overwrites_it(device, model, rng, n, tg):
    lib = lockstep_lib(model)
    check_model(lib.logsumexp, model)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    out = np.zeros(1, np.float32)
    lib.logsumexp(x, out, n, grid=tg, threadgroup=tg)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out[0], x64.max() + np.log(np.exp(x64 - x64.max()).sum()), rtol=1e-5)


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
@pytest.mark.parametrize("model", MODELS)
def test_warp_synchronous_reduction_tail(device, model, rng, n, tg):
    lib = build_as(REDUCE, "reduce.metal", model)
    check_model(lib.reduce_ws, model)
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


def ret_lib(model):
    return build_as(RETURNS, "returns.metal", model)


@pytest.mark.parametrize("n,tg", [(100, 64), (1, 32), (33, 64), (250, 96), (96, 96), (65, 96)])
@pytest.mark.parametrize("model", MODELS)
def test_out_of_range_threads_return_before_a_barrier(device, model, rng, n, tg):
    lib = ret_lib(model)
    check_model(lib.return_first, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_threads_return_from_inside_a_loop_with_barriers(device, model, rng, n, tg):
    lib = ret_lib(model)
    check_model(lib.return_in_loop, model)
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


# ---- kernels split at their barriers -------------------------------------------------------------

# Every barrier at the body's top level: SIMT runs each region for every SIMD-group before the next
# (simt/fission.py), carrying over the locals later regions use: a uniform value, device and
# threadgroup pointers, a per-lane vector, per-lane arrays sized by a constant (one stored element
# by element across the lanes), a SIMD-group sum;
# threads past n return before the first barrier.
SPLIT = """
template <typename T>
kernel void carry(device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],
                  threadgroup T* tmp [[threadgroup(0)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]],
                  uint g [[threadgroup_position_in_grid]], uint tg [[dispatch_threads_per_threadgroup]],
                  uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
    constexpr uint W = 3;
    threadgroup float sums[32];
    uint base = g * tg;
    device T* row = out + base;
    threadgroup T* mine = tmp + l;
    float4 v = float4(float(in[min(i, n - 1)]), float(l), 1.0f, 0.5f);
    float w[W] = {v.x, 2.0f * v.x, 3.0f};
    float acc[W];
    for (uint k = 0; k < W; ++k) acc[k] = v.x + float(k);
    if (i >= n) return;
    *mine = T(v.x);
    float s = simd_sum(v.x);
    if (lane == 0) sums[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    T nxt = base + l + 1 < n && l + 1 < tg ? tmp[l + 1] : *mine;
    w[1] += float(nxt);
    s += sums[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    *mine = nxt;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    T other = (l ^ 1u) < tg && base + (l ^ 1u) < n ? tmp[l ^ 1u] : T(0);
    row[l] = T(w[0] + w[1] + w[2] + s + v.y + v.w + acc[2]) + other;
}
#define CARRY(T) template [[host_name("carry_" #T)]] kernel void carry<T>(device const T*, device T*, \\
    constant uint&, threadgroup T*, uint, uint, uint, uint, uint, uint);
CARRY(float)
CARRY(int)
"""


def carried_reference(x, n, tg):
    """What `carry` writes, in float64 (its float32 sums differ from it by rounding only)."""
    x = x.astype(np.float64)
    out = np.zeros(n)
    for base in range(0, n, tg):
        idx = np.arange(base, min(base + tg, n))
        l = idx - base
        sg_sums = {sg: x[idx[l // 32 == sg]].sum() for sg in set(l // 32)}
        nxt = np.where((l + 1 < tg) & (idx + 1 < n), x[np.minimum(idx + 1, n - 1)], x[idx])
        partner = l ^ 1
        ok = (partner < tg) & (base + partner < n)
        other = np.where(ok, nxt[np.minimum(partner, len(idx) - 1)], 0.0)
        s = np.array([sg_sums[k] for k in l // 32]) + sg_sums[0]
        out[idx] = x[idx] + 2 * x[idx] + nxt + 3.0 + s + l + 0.5 + (x[idx] + 2) + other
    return out


@pytest.mark.parametrize("n,tg", [(1, 32), (31, 64), (100, 64), (1000, 256), (5000, 96), (2049, 1024), (7, 7)])
def test_a_kernel_split_at_its_barriers_carries_its_locals_over(device, rng, n, tg):
    results = {}
    for model in ("simt", "fibers", "threads"):
        lib = build_as(SPLIT, "split.metal", model)
        check_model(lib.carry_float, model)
        x = (rng.random(n, dtype=np.float32) * 100).astype(np.float32)
        x = results.setdefault("x", x)
        out = np.full(n, np.nan, np.float32)
        lib.carry_float(x, out, n, threadgroup=tg, threadgroup_memory={0: tg * 4})
        results[model] = out
        xi = (x * 10).astype(np.int32)
        outi = np.zeros(n, np.int32)
        lib.carry_int(xi, outi, n, threadgroup=tg, threadgroup_memory={0: tg * 4})
        np.testing.assert_array_equal(outi, carried_reference(xi, n, tg).astype(np.int32))
    np.testing.assert_allclose(results["simt"], carried_reference(results["x"], n, tg), rtol=1e-5)
    # The same SIMD-group sums in the same order: every model writes the same bits.
    np.testing.assert_array_equal(results["simt"], results["threads"])
    np.testing.assert_array_equal(results["fibers"], results["threads"])


OVERWRITE = """
// v crosses two barriers. Each kernel differs in how the later regions use it: overwritten before
// any read (nothing is restored), or read by some lanes after others overwrote it (restored).
kernel void overwritten(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tmp [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    float v = x[i] * 2.0f;
    tmp[l] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v = tmp[(l + 1) % n] + 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l % 3 == 0) {
        v = v * 3.0f + tmp[l];
        out[i] = v;
    }
}

kernel void partly(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   threadgroup float* tmp [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                   uint l [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    float v = x[i] * 2.0f;
    tmp[l] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l % 3 == 0) v = tmp[(l + 1) % n];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = v + simd_sum(v);
}
"""


@pytest.mark.parametrize("n,tg", [(1, 32), (100, 64), (1000, 96), (2048, 1024)])
def test_a_local_overwritten_after_a_barrier_is_the_same_under_every_model(device, rng, n, tg):
    x = rng.standard_normal(n).astype(np.float32)
    got = {}
    for model in ("simt", "threads"):
        lib = build_as(OVERWRITE, "overwrite.metal", model)
        for name in ("overwritten", "partly"):
            check_model(lib[name], model)
            out = np.full(n, -7.0, np.float32)
            lib[name](x, out, threadgroup=tg, threadgroup_memory={0: tg * 4})
            got[model, name] = out
    l, g = np.arange(n) % tg, np.arange(n) // tg
    size = np.minimum(tg, n - g * tg)  # threads in each thread's group
    after = x[g * tg + (l + 1) % size] * 2 + 1  # v after the first barrier: the next thread's, plus 1
    np.testing.assert_allclose(got["simt", "overwritten"],
                               np.where(l % 3 == 0, after * 3 + x * 2, -7.0), rtol=1e-5, atol=1e-5)
    v = np.where(l % 3 == 0, x[g * tg + (l + 1) % size] * 2, x * 2).astype(np.float64)
    key = g * 64 + l // 32  # each thread's SIMD-group
    sums = np.bincount(key, weights=v, minlength=key.max() + 1)[key]
    np.testing.assert_allclose(got["simt", "partly"], v + sums, rtol=1e-5, atol=1e-4)
    for name in ("overwritten", "partly"):
        np.testing.assert_array_equal(got["simt", name], got["threads", name])


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


def diverge_lib(model):
    return build_as(DIVERGE, "diverge.metal", model)


def per_simdgroup(n, tg, fn):
    """fn(lanes, slice) for each SIMD-group of a 1-D grid; lanes: the lane indices that exist."""
    for a, b in simd_slices(n, tg):
        fn(np.arange(b - a), slice(a, b))


N_TG = [(64, 64), (100, 40), (45, 45), (96, 32)]


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS)
def test_nested_branches_on_lane_values(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.nested_if, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_switch_with_fallthrough_on_lane_values(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.fallthrough, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_loops_with_per_lane_trip_counts(device, model, rng, kind, n, tg):
    lib = diverge_lib(model)
    check_model(lib.lane_loops, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_early_return_inside_a_helper(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.helper_returns, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_ternaries_with_side_effects(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.ternary_effects, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_short_circuit_operators_with_stores(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.short_circuit_store, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_ballot_and_votes_exclude_inactive_lanes(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.ballots, model)
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
@pytest.mark.parametrize("model", MODELS)
def test_shuffles_read_lanes_that_diverged(device, model, rng, n, tg):
    lib = diverge_lib(model)
    check_model(lib.shuffles, model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.shuffles(x, out, threadgroup=tg)
    lanes = np.arange(32)
    v = x.reshape(-1, 32)
    src = np.where(lanes >= 8, 8 + (lanes + 3) % 24, 0)
    r = np.where(lanes >= 8, v[:, src] + v[:, lanes ^ 1], -1.0).astype(np.float32)
    want = r[:, (lanes + 5) % 32].ravel()
    np.testing.assert_array_equal(out, want)


# ---- local arrays through pointer arithmetic; uniform SIMD-group results --------------------

PRIVATE = """
// Each lane's own array, written and read as *(a + i), *(i + a), *a and a row of a 2-D array, as
// generated code (tinygrad's accumulators) does: a per-lane array, not one the SIMD-group shares.
kernel void deref_array(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    float buf[3];
    float rows[2][2];
    *(buf + 0) = in[i];
    *(1 + buf) = 2.0f * in[i];
    *buf += 1.0f;
    *(rows[1] + 1) = in[i] * in[i];
    const float total = simd_sum(*(buf + 0));
    out[i] = total + *(buf + 1) + buf[0] + rows[1][1];
}

// An array named only as a[i] and *(a + i), with an index that differs between lanes and a write
// under a mask: SIMT code stores it element-major (each element's lanes side by side).
kernel void lane_indexed_array(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                               uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float acc[4];
    for (uint k = 0; k < 4; ++k) *(acc + k) = in[i] + float(k);
    if (l % 3 == 0) acc[l % 4] *= 2.0f;
    const float total = simd_sum(acc[(l + 1) % 4]);
    out[i] = total + acc[0] + *(acc + 1) + 3.0f * acc[2] + acc[3];
}

// simd_sum of a value every lane has: one value for the SIMD-group, used by later statements.
kernel void uniform_simd_result(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                uint i [[thread_position_in_grid]]) {
    if (in[i] < 0.25f) return;
    const float one = 1.0f;
    float active = simd_sum(one), most = simd_max(one);
    if (active > 1.0f) out[i] = active + most + in[i];
    else out[i] = -in[i];
}
"""


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS)
def test_local_arrays_through_pointer_arithmetic_are_per_lane(device, model, rng, n, tg):
    lib = build_as(PRIVATE, "private.metal", model)
    check_model(lib.deref_array, model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.deref_array(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        want[s] = (x[s] + 1).sum() + 2 * x[s] + (x[s] + 1) + x[s] * x[s]
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS + ["threads"])
def test_a_local_array_indexed_per_lane(device, model, rng, n, tg):
    lib = build_as(PRIVATE, "private.metal", model)
    check_model(lib.lane_indexed_array, model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.lane_indexed_array(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        acc = x[s, None] + np.arange(4, dtype=np.float32)
        doubled = lanes % 3 == 0
        acc[doubled, lanes[doubled] % 4] *= 2
        total = acc[lanes, (lanes + 1) % 4].sum()
        want[s] = total + acc[:, 0] + acc[:, 1] + 3 * acc[:, 2] + acc[:, 3]
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    if model == "simt":  # the same bits as the reference model
        ref_out = np.zeros(n, np.float32)
        build_as(PRIVATE, "private.metal", "threads").lane_indexed_array(x, ref_out, threadgroup=tg)
        np.testing.assert_array_equal(out, ref_out)


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS)
def test_a_simd_sum_of_a_uniform_value_is_one_value_for_later_statements(device, model, rng, n, tg):
    lib = build_as(PRIVATE, "private.metal", model)
    check_model(lib.uniform_simd_result, model)
    x = rng.random(n, dtype=np.float32)
    out = np.full(n, 7.0, np.float32)
    lib.uniform_simd_result(x, out, threadgroup=tg)
    want = np.full(n, 7.0, np.float32)

    def ref(lanes, s):
        act = x[s] >= 0.25
        count = act.sum()
        want[s] = np.where(act, count + 1 + x[s] if count > 1 else -x[s], 7.0)
    per_simdgroup(n, tg, ref)
    np.testing.assert_array_equal(out, want)


HELPER_FILLS = """
// A helper fills the lane's own arrays through the pointers they decay to (MLX's gemv and
// quantized mat-vec load each lane's tile so): the arrays are per lane, the call per lane.
template <typename U = float, int N = 4>
static void load(const device float* src, thread U dst[N], const int off = 0) {
    for (int k = 0; k < N; k++) dst[k] = static_cast<U>(src[off + k]);
}
kernel void helper_fills(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
    float v[4];
    float rows[2][4];
    load<float>(in, v, int(i) * 4);
    load(in, rows[1], int(i) * 4);
    load(in, rows[0], int(i) * 4 + 2);
    float s = v[0] + v[1] + v[2] + v[3] + rows[1][3] - rows[0][0];
    out[i] = simd_sum(s) + s;
}
"""


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS + ["threads"])
def test_arrays_a_helper_fills_through_a_pointer_are_per_lane(device, model, rng, n, tg):
    lib = build_as(HELPER_FILLS, "fills.metal", model)
    check_model(lib.helper_fills, model)
    x = rng.random(n * 4 + 2, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.helper_fills(x, out, grid=n, threadgroup=tg)
    quads = x[:n * 4].reshape(n, 4)
    own = quads.sum(axis=1) + quads[:, 3] - x[2:n * 4 + 2:4]
    want = np.zeros(n, np.float32)

    def ref(lanes, s):
        want[s] = own[s].sum() + own[s]
    per_simdgroup(n, tg, ref)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


ALIGNED = """
// Generated code (tinygrad's reductions) declares threadgroup arrays with a GNU alignment attribute.
kernel void aligned_sums(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                         uint g [[threadgroup_position_in_grid]], uint size [[threads_per_threadgroup]]) {
    threadgroup __attribute__((aligned(16))) float s[64];
    s[t] = in[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
        float acc = 0.0f;
        for (uint k = 0; k < size; ++k) acc += s[k];
        out[g] = acc;
    }
}
"""


@pytest.mark.parametrize("n,tg", [(320, 64), (120, 40), (7, 7)])
@pytest.mark.parametrize("model", MODELS)
def test_threadgroup_arrays_with_a_gnu_alignment_attribute(device, model, rng, n, tg):
    lib = build_as(ALIGNED, "aligned.metal", model)
    check_model(lib.aligned_sums, model)
    x = rng.integers(-100, 100, n).astype(np.float32)  # small integers: exact in any order
    out = np.zeros(n // tg, np.float32)
    lib.aligned_sums(x, out, grid=n, threadgroup=tg)
    np.testing.assert_array_equal(out, x.reshape(-1, tg).sum(axis=1))


MATRICES = """
// C = A B (M x K times K x N, all multiples of 16), a 16x16 tile of C per threadgroup: its threads
// stage 16-wide slices of K through threadgroup memory, then each SIMD-group multiplies an 8x8 tile
// with simdgroup_matrix arrays declared without an initializer (as llama.cpp's mul_mm does).
kernel void tiled_matmul(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                         device float* c [[buffer(2)]], constant uint& K [[buffer(3)]],
                         constant uint& N [[buffer(4)]], uint2 tile [[threadgroup_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]], uint s [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sa[16 * 16], sb[16 * 16];
    simdgroup_float8x8 ma[2], mb[2];
    simdgroup_float8x8 mc = make_filled_simdgroup_matrix<float, 8>(0.0f);
    const uint row = 8 * (s / 2), col = 8 * (s % 2), r0 = 16 * tile.y, c0 = 16 * tile.x;
    for (uint k0 = 0; k0 < K; k0 += 16) {
        for (uint e = t; e < 256; e += 128) {
            sa[e] = a[(r0 + e / 16) * K + k0 + e % 16];
            sb[e] = b[(k0 + e / 16) * N + c0 + e % 16];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (short i = 0; i < 2; i++) {
            simdgroup_load(ma[i], sa + row * 16 + 8 * i, 16);
            simdgroup_load(mb[i], sb + 8 * i * 16 + col, 16);
        }
        for (short i = 0; i < 2; i++) simdgroup_multiply_accumulate(mc, ma[i], mb[i], mc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    simdgroup_store(mc, c + (r0 + row) * N + c0 + col, N);
}
"""


@pytest.mark.parametrize("m,k,n", [(16, 16, 16), (32, 48, 64), (48, 80, 16)])
@pytest.mark.parametrize("model", MODELS)
def test_simdgroup_matrix_arrays_declared_without_an_initializer(device, model, rng, m, k, n):
    # Matrices in per-lane storage are left uninitialised (their cached lane id is for per-thread
    # code): loads into such arrays must still give each lane its own elements.
    lib = build_as(MATRICES, "matrices.metal", model)
    check_model(lib.tiled_matmul, model)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    lib.tiled_matmul(a, b, c, np.uint32(k), np.uint32(n), threadgroups=(n // 16, m // 16), threadgroup=128)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)

NESTED = """
// A SIMD-group function returning nothing, called on the result of another: nothing is left of
// the statement once both are hoisted.
kernel void nested(device float* out [[buffer(0)]]) {
    simdgroup_store(make_filled_simdgroup_matrix<float, 8, 8>(1.5f), out);
}
"""


@pytest.mark.parametrize("model", MODELS)
def test_a_void_simdgroup_call_on_the_result_of_another(device, model):
    lib = build_as(NESTED, "nested.metal", model)
    check_model(lib.nested, model)
    out = np.zeros(64, np.float32)
    lib.nested(out, grid=32, threadgroup=32)
    np.testing.assert_array_equal(out, np.full(64, 1.5, np.float32))

POINTER_ARRAYS = """
// Each lane keeps pointers into its rows in a local array (as llama.cpp's mul_mv_ext does): the
// array's elements are the lane's own; what they point to is device memory.
kernel void pointer_rows(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         constant uint& stride [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    device const float* rows[3];
    for (int r = 0; r < 3; ++r) rows[r] = in + r * stride + i;
    *(rows + 2) = in + i;
    float acc = 0.0f;
    for (int r = 0; r < 3; ++r) {
        acc += *rows[r] * float(r + 1);
        rows[r] += 1;
    }
    for (int r = 0; r < 3; ++r) acc += rows[r][0];
    out[i] = simd_sum(acc) * 1000.0f + acc;
}
"""


@pytest.mark.parametrize("n,tg", N_TG)
@pytest.mark.parametrize("model", MODELS)
def test_a_local_array_of_pointers_is_per_lane(device, model, rng, n, tg):
    lib = build_as(POINTER_ARRAYS, "pointer_arrays.metal", model)
    check_model(lib.pointer_rows, model)
    x = rng.integers(-8, 8, (3, n + 1)).astype(np.float32)  # small integers: sums exact in any order
    out = np.zeros(n, np.float32)
    lib.pointer_rows(x, out, np.uint32(n + 1), grid=n, threadgroup=tg)
    acc = 4 * x[0, :n] + 2 * x[1, :n] + 2 * x[0, 1:] + x[1, 1:]
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        want[a:b] = acc[a:b].sum() * 1000 + acc[a:b]
    np.testing.assert_array_equal(out, want)

QUOTIENTS = """
#include <metal_stdlib>
using namespace metal;
// Every lane divides by its own divisor, 0 on some lanes: MSL leaves those results undefined (a
// GPU does not trap), and the kernel uses them only where the divisor is not 0.
kernel void quotients(device const int* x [[buffer(0)]], device const int* d [[buffer(1)]],
                      device int* out [[buffer(2)]], uint i [[thread_position_in_grid]],
                      uint l [[thread_index_in_simdgroup]]) {
    threadgroup int sh[32];
    const int q = x[i] / d[i], r = x[i] % d[i];
    int t = x[i] + 5;
    t /= d[i];
    sh[l] = x[i];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    sh[l] %= d[i ^ 1] + sh[l ^ 1] - x[i ^ 1];  // every lane reads before any stores
    const int used = simd_sum(d[i] != 0 ? 1 : 0);
    out[5 * i] = q;
    out[5 * i + 1] = r;
    out[5 * i + 2] = t;
    out[5 * i + 3] = sh[l];
    out[5 * i + 4] = used;
}
"""


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # a GPU never traps
def test_integer_division_by_zero_does_not_trap(device, rng, tmp_path):
    # x86 traps on x / 0 and INT_MIN / -1; SIMT code must not, since it runs divisions that the
    # per-thread code's compiler drops as dead (llama.cpp's attention indexes its mask's heads
    # modulo a dimension that is 0 without a mask). Run in a child: a trap would kill pytest.
    n = 96
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    d = rng.integers(-4, 5, n).astype(np.int32)
    x[0], d[0] = np.iinfo(np.int32).min, -1
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "d.npy", d)
    code = f"""
import numpy as np, metalkit as mk
lib = mk.compile({QUOTIENTS!r})
assert lib.quotients.execution == "simt", lib.quotients.execution
x, d = np.load({str(tmp_path / "x.npy")!r}), np.load({str(tmp_path / "d.npy")!r})
out = np.zeros(5 * len(x), np.int32)
lib.quotients(x, d, out, grid=len(x), threadgroup=32)
np.save({str(tmp_path / "out.npy")!r}, out)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, METALKIT_DEVICE="cpu"))
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    out = np.load(tmp_path / "out.npy").reshape(n, 5)

    def c_div(a, b):  # C's division truncates
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    on = d != 0
    xs, ds = x.astype(np.int64), np.where(on, d, 1).astype(np.int64)
    q = c_div(xs, ds)
    np.testing.assert_array_equal(out[on, 0], q.astype(np.int32)[on])  # INT_MIN / -1 wraps
    np.testing.assert_array_equal(out[on, 1], (xs - q * ds)[on])
    np.testing.assert_array_equal(out[on, 2], c_div(xs + 5, ds)[on])
    partner = np.arange(n) ^ 1
    on_p, dp = on[partner], ds[partner]
    np.testing.assert_array_equal(out[on_p, 3], (xs - c_div(xs, dp) * dp)[on_p])
    np.testing.assert_array_equal(out[:, 4], np.repeat(on.reshape(-1, 32).sum(axis=1), 32))

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
    static T across(threadgroup T* s, uint t, T v) { return neighbour_sum<T, 32>(s, t, v); }
    static T prefix(T v) { return simd_prefix_inclusive_sum(v); }
};

// Functions passed as template arguments to helpers that reach SIMD-group functions.
static float cube(float v) { return v * v * v; }

template <float (*f)(float), int N = 2>
float sum_of(float v) { return simd_sum(f(v)) * float(N); }

kernel void fn_pointer_param(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
    out[i] = sum_of<cube>(in[i]);
}

static void twice(device const float* p, short k, thread float& out) { out = p[k] * 2.0f; }

template <short N, void (*load)(device const float*, short, thread float&)>
void sum_loaded(device const float* in, device float* out, uint i) {
    float v;
    load(in + i, 0, v);
    out[i] = simd_sum(v) * float(N);
}

kernel void fn_template_arg(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                            uint i [[thread_position_in_grid]]) {
    sum_loaded<3, twice>(in, out, i);
}

// A helper and a kernel of the same name: the kernel is found, the helper's barrier too.
static float scaled(threadgroup float* s, uint t, float v) {
    s[t] = v * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return s[t ^ 3];
}

static float group_sum(float v) { return simd_sum(v); }

kernel void templates(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[128];
    out[i] = neighbour_sum(s, t, in[i]) + 10.0f * Ops<float>::across(s, t, in[i]);
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


def helper_lib(model):
    return build_as(HELPERS, "helpers.metal", model)


@pytest.mark.parametrize("model", MODELS)
def test_barriers_reached_through_helpers_are_detected(device, model):
    lib = helper_lib(model)
    for name in ("templates", "methods", "two_branches", "scaled", "fn_pointer_param", "fn_template_arg"):
        check_model(getattr(lib, name), model)


@pytest.mark.parametrize("n,tg", [(128, 64), (256, 128), (64, 64)])
@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("model", MODELS)
def test_template_helpers_with_default_arguments(device, model, rng, n, tg, seed):
    # Lanes read the other SIMD-group's slots: right only if the helpers' barriers hold.
    lib = helper_lib(model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.templates(x, out, threadgroup=tg, shuffle=seed)
    g = x.reshape(-1, tg)
    t = np.arange(tg)
    want = (g + g[:, t ^ 1]) + 10 * (g + g[:, t ^ 32])
    np.testing.assert_allclose(out, want.ravel(), rtol=1e-6)


@pytest.mark.parametrize("n,tg", [(64, 64), (100, 50), (7, 7)])
@pytest.mark.parametrize("model", MODELS)
def test_methods_and_static_members_of_class_templates(device, model, rng, n, tg):
    lib = helper_lib(model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.methods(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        v = x[a:b]
        want[a:b] = v.max() + 1 + v.sum(dtype=np.float32) + np.cumsum(v, dtype=np.float32) * 100
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", [(64, 64), (40, 40), (96, 96)])
@pytest.mark.parametrize("model", MODELS)
def test_one_helper_called_from_two_branches(device, model, rng, n, tg):
    lib = helper_lib(model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.two_branches(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        v, low = x[a:b], np.arange(b - a) < 10
        want[a:b] = np.where(low, v[low].sum(dtype=np.float32), (v[~low] * 2).sum(dtype=np.float32) + 0.5)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_a_helper_and_a_kernel_sharing_a_name(device, model, rng):
    lib = helper_lib(model)
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
    bool all = l % 2 == 0 && simd_all(in[i] > 0.02f);    // over the even lanes only
    bool any = l % 3 == 0 || simd_any(in[i] > 0.9f);     // over the lanes l % 3 != 0 only
    for (uint k = 0; k < l % 4; ++k) {
        x += sh[s * 32 + (l + 1) % 32 % (k + 1)];   // lanes in their extra iterations read lane 0's -1
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = (all ? x : -x) + (any ? 1000.0f : 0.0f);
}
"""


@pytest.mark.parametrize("n,tg", [(32, 32), (128, 64), (100, 50), (7, 7)])
def test_the_fiber_fallback_says_why_and_keeps_lockstep(device, rng, n, tg):
    lib = build(FALLBACK, filename="fallback.metal")
    assert lib.fallback.execution == mk.Execution.FIBERS
    assert lib.fallback.execution_reason == "a SIMD-group function on the right of '&&' (fallback.metal:13)"
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
        v = x[a:b]
        even, rest = lanes % 2 == 0, lanes % 3 != 0
        all_ = even & (v[even] > 0.02).all()
        any_ = ~rest | (v[rest] > 0.9).any()
        want[a:b] = np.where(all_, acc, -acc) + np.where(any_, 1000, 0)
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
    assert lib.minimal_fallback.execution == "fibers"
    assert lib.minimal_fallback.execution_reason.startswith("a SIMD-group function on the right of '&&'")
    out = np.zeros(32, np.float32)
    lib.minimal_fallback(out, grid=32, threadgroup=32)
    assert out.tolist() == [1.0] * 32


@pytest.mark.parametrize("n,tg", [(64, 64), (50, 50)])
@pytest.mark.parametrize("model", MODELS)
def test_a_function_pointer_template_parameter_of_a_helper(device, model, rng, n, tg):
    lib = helper_lib(model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.fn_pointer_param(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        want[a:b] = (x[a:b] ** 3).sum(dtype=np.float32) * 2
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", [(64, 64), (50, 50)])
@pytest.mark.parametrize("model", MODELS)
def test_a_local_written_through_a_function_pointer(device, model, rng, n, tg):
    lib = helper_lib(model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.fn_template_arg(x, out, threadgroup=tg)
    want = np.zeros(n, np.float32)
    for a, b in simd_slices(n, tg):
        want[a:b] = (x[a:b] * 2).sum(dtype=np.float32) * 3
    np.testing.assert_allclose(out, want, rtol=1e-6)


# ---- C++ that real libraries write around SIMD-group functions ---------------------------------

CONSTRUCTS = """
template <typename T>
struct Tile {
    static constant constexpr short kElems = 2;
    T v[2];
    template <typename U>
    U lane_max() const thread { return U(simd_max(v[0])); }
};

template <typename U>
struct Sum {
    // `sizeof(T) < 8` compares inside a template head; the unnamed parameter's `> =` must stay apart.
    template <typename T, metal::enable_if_t<sizeof(T) < 8, bool> = true>
    T scan(T val) thread { return simd_prefix_inclusive_sum(val); }
    template <typename T, metal::enable_if_t<sizeof(T) == 8, bool> = true>
    T scan(T val) thread { return operator()(val, T(0)); }
    U operator()(U a, U b) thread { return a + b; }
    U total(U x) thread { return operator()(simd_sum(x), U(0)); }  // an operator called by its name
};

struct Holder {
    Tile<float> tile;
    float sum() thread {
        float r = 0.0f;
        for (short k = 0; k < decltype(tile)::kElems; ++k) r += tile.v[k];  // a member's type
        return simd_sum(r);
    }
};

template <typename T>
T row_max(thread Tile<T>& t) { return t.template lane_max<T>(); }  // a dependent template member

static void store(device float* out, uint i, float v) { out[i] = simd_broadcast_first(v) + v; }

kernel void constructs(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    Tile<float> t;
    t.v[0] = in[i];
    t.v[1] = 2.0f * in[i];
    float acc = 0.0f;
    for (short k = 0; k < decltype(t)::kElems; ++k) acc += t.v[k];  // a local's type
    using tile_t = decltype(t);
    acc *= float(tile_t::kElems) / 2.0f;
    Sum<float> s;
    Holder h = {t};
    float v = s.scan(acc) + 1000.0f * s.total(acc) + 10.0f * h.sum() + 100.0f * row_max(t);
    v *= float(decltype(h.tile)::kElems) / 2.0f;  // a member of a local's type
    return store(out, i, v);  // a void result returned from a kernel
}

// SIMD-group functions passed as template arguments, to an overloaded helper template and through
// it to a kernel template, as llama.cpp's mat-vec kernels for mixtures of experts are built.
typedef float (reduce_fn_t)(float);
typedef float (reduce2_fn_t)(float, float);
static float group_total(float v) { return simd_sum(v); }
static float group_top(float v) { return simd_max(v); }
template <reduce_fn_t f> float twice_of(float v) { return 2.0f * f(v); }
template <reduce2_fn_t f> float twice_of(float v) { return 2.0f * f(v, v); }
typedef decltype(twice_of<group_total>) twice_t;

template <twice_t op>
kernel void reduce_with(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    out[i] = op(in[i]) + 1.0f;
}
template [[host_name("reduce_total")]] kernel void reduce_with<twice_of<group_total>>(device const float*,
                                                                                     device float*, uint);
template [[host_name("reduce_top")]] kernel void reduce_with<twice_of<group_top>>(device const float*,
                                                                                 device float*, uint);

// A helper that moves pointer parameters through references: `const device T*&` is writable.
static void advance(const device float*& p, device float*& q, uint k) { p += k; q += k; }

kernel void moved_pointers(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                           uint3 group [[threadgroup_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    advance(in, out, group.x * 32);
    out[l] = simd_sum(in[l]);
}
"""


@pytest.mark.parametrize("n,tg", [(64, 64), (100, 50), (7, 7)])
@pytest.mark.parametrize("model", MODELS)
def test_constructs_of_real_libraries(device, model, rng, n, tg):
    lib = build_as(CONSTRUCTS, "constructs.metal", model)
    check_model(lib.constructs, model)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    lib.constructs(x, out, threadgroup=tg)
    want = np.zeros(n, np.float64)
    for a, b in simd_slices(n, tg):
        acc = 3.0 * x[a:b].astype(np.float64)
        v = np.cumsum(acc) + 1000.0 * acc.sum() + 10.0 * acc.sum() + 100.0 * x[a:b].max()
        want[a:b] = v + v[0]
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n,tg", [(64, 64), (100, 50), (7, 7)])
@pytest.mark.parametrize("model", MODELS)
def test_simd_functions_passed_as_template_arguments(device, model, rng, n, tg):
    lib = build_as(CONSTRUCTS, "constructs.metal", model)
    x = rng.random(n, dtype=np.float32)
    for name, reduce in (("reduce_total", np.sum), ("reduce_top", np.max)):
        kernel = getattr(lib, name)
        check_model(kernel, model)
        out = np.zeros(n, np.float32)
        kernel(x, out, threadgroup=tg)
        want = np.zeros(n, np.float32)
        for a, b in simd_slices(n, tg):
            want[a:b] = 2.0 * reduce(x[a:b].astype(np.float64)) + 1.0
        np.testing.assert_allclose(out, want, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("model", MODELS)
def test_pointers_moved_through_reference_parameters(device, model, rng, groups):
    lib = build_as(CONSTRUCTS, "constructs.metal", model)
    check_model(lib.moved_pointers, model)
    x = rng.random(32 * groups, dtype=np.float32)
    out = np.zeros_like(x)
    lib.moved_pointers(x, out, grid=(32 * groups, 1, 1), threadgroup=32)
    want = np.repeat(x.reshape(groups, 32).sum(axis=1, dtype=np.float32), 32)
    np.testing.assert_allclose(out, want, rtol=1e-5)


# ---- faults under every execution model --------------------------------------------------------

FAULTS = """
kernel void sites_by_simdgroup(device float* x [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
    if (t < 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[t] = 1.0f;
}

kernel void divergent_sites(device float* x [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
    if (t < 40) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[t] = 1.0f;
}

kernel void divergent_in_simdgroup(device float* x [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
    if (t % 2 == 0) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[t] = 2.0f;
}

kernel void out_of_bounds(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                          uint i [[thread_position_in_grid]], uint l [[thread_index_in_simdgroup]]) {
    float s = simd_sum(a[i]);
    out[i] = s + a[i + 1];          // the last thread reads one past the end
}

kernel void out_of_bounds_loop(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
    out[i] = a[i] * 2.0f + a[i + 1];
}

kernel void missing_barrier(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                            threadgroup float* tmp [[threadgroup(0)]],
                            uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]]) {
    tmp[t] = x[i];
    // a threadgroup_barrier belongs here: the next SIMD-group's slot may not be written yet
    float right = tmp[(t + 32) % n];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = right;
}
"""
def fault_lib(model):
    return build_as(FAULTS, "faults.metal", model)


# As on Apple GPUs, a barrier counts SIMD-groups: one arrives when any of its live lanes reaches a
# barrier, at any site. So these kernels run by default; check=True reports the divergence.
@pytest.mark.parametrize("model", MODELS + ["threads"])
@pytest.mark.parametrize("name,n", [("sites_by_simdgroup", 48), ("divergent_sites", 64),
                                    ("divergent_in_simdgroup", 64)])
def test_barriers_reached_by_part_of_a_simdgroup_or_at_other_sites_complete(device, model, name, n):
    lib = fault_lib(model)
    x = np.zeros(n, np.float32)
    lib[name](x, threadgroup=n)
    assert x.tolist() == [2.0 if name == "divergent_in_simdgroup" else 1.0] * n


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # faults a GPU cannot name
@pytest.mark.parametrize("model", MODELS + ["threads"])
def test_checked_simdgroups_waiting_at_different_barriers_fault(device, model):
    lib = fault_lib(model)
    check_model(lib.sites_by_simdgroup, model)
    x = np.zeros(48, np.float32)
    with pytest.raises(mk.KernelFault) as e:
        lib.sites_by_simdgroup(x, threadgroup=48, check=True)
    assert str(e.value) == ("kernel 'sites_by_simdgroup' (faults.metal:4): divergent barrier in threadgroup (0, 0, 0): "
                            "threads wait at different threadgroup_barrier calls, faults.metal:6 (threads 0-31) and "
                            "faults.metal:8 (threads 32-47); every thread of a threadgroup must reach the same barrier")
    assert not x.any()


@pytest.mark.parametrize("device", ["cpu"], indirect=True)
@pytest.mark.parametrize("model", MODELS)
def test_checked_threads_waiting_at_different_barriers_fault(device, model):
    lib = fault_lib(model)
    check_model(lib.divergent_sites, model)
    x = np.zeros(64, np.float32)
    with pytest.raises(mk.KernelFault) as e:
        lib.divergent_sites(x, threadgroup=64, check=True)
    # Both models name the same threads and line: threads 40-63 took the other branch while the
    # rest of their SIMD-group waits at the first barrier.
    assert str(e.value) == ("kernel 'divergent_sites' (faults.metal:13): divergent barrier in threadgroup (0, 0, 0): "
                            "threads 40-63 of SIMD-group 1 did not reach this threadgroup_barrier with the rest of "
                            "their SIMD-group (they took another branch); every thread of a threadgroup must reach it "
                            "at faults.metal:15")
    assert not x.any()


@pytest.mark.parametrize("device", ["cpu"], indirect=True)
@pytest.mark.parametrize("model", MODELS)
def test_checked_barrier_in_divergent_control_flow_faults(device, model):
    lib = fault_lib(model)
    check_model(lib.divergent_in_simdgroup, model)
    with pytest.raises(mk.KernelFault, match=r"kernel 'divergent_in_simdgroup' .*divergent barrier in threadgroup "
                                             r"\(0, 0, 0\): threads 1, 3, 5, 7, 9, 11, ... of SIMD-group 0 did not "
                                             r"reach this threadgroup_barrier .* at faults.metal:24$"):
        lib.divergent_in_simdgroup(np.zeros(64, np.float32), threadgroup=64, check=True)


@pytest.mark.parametrize("device", ["cpu"], indirect=True)
@pytest.mark.parametrize("model", ["loop"] + MODELS)
def test_checked_mode_catches_out_of_bounds(device, rng, model):
    lib = fault_lib("simt" if model == "loop" else model)
    name = "out_of_bounds_loop" if model == "loop" else "out_of_bounds"
    kernel = lib[name]
    check_model(kernel, model)
    a = rng.random(100, dtype=np.float32)
    out = rng.random(100, dtype=np.float32)
    before = out.copy()
    with pytest.raises(mk.KernelFault, match=rf"kernel '{name}' .*past the end of parameter 'a' \[\[buffer\(0\)\]\] "
                                             r"of 100 elements \(element 100\)"):
        kernel(a, out, check=True, threadgroup=64)
    np.testing.assert_array_equal(out, before)
    kernel(a, out, grid=99, threadgroup=64, check=True)
    if model == "loop":
        want = a[:-1] * 2 + a[1:]
    else:
        want = np.concatenate([a[s:e].sum(dtype=np.float32).repeat(e - s) for s, e in simd_slices(99, 64)]) + a[1:]
    np.testing.assert_allclose(out[:99], want, rtol=1e-5)
    np.testing.assert_array_equal(out[99:], before[99:])


@pytest.mark.parametrize("device", ["cpu"], indirect=True)
@pytest.mark.parametrize("model", MODELS)
def test_shuffle_exposes_a_missing_barrier_between_simdgroups(device, rng, model):
    lib = fault_lib(model)
    check_model(lib.missing_barrier, model)
    tg = 128
    x = rng.random(tg * 16, dtype=np.float32)
    want = np.roll(x.reshape(-1, tg), -32, axis=1).ravel()
    outs = []
    for seed in [0, 1, 2, 3, 4]:
        out = np.zeros_like(x)
        lib.missing_barrier(x, out, threadgroup=tg, threadgroup_memory={0: tg * 4}, shuffle=seed)
        outs.append(out)
    # SIMD-group s reads SIMD-group s+1's slots: in index order they are not written yet; in a
    # shuffled order some are. Results change with the seed, and a seed repeats its result.
    assert not np.array_equal(outs[0], want)
    assert len({o.tobytes() for o in outs}) >= 3
    again = np.zeros_like(x)
    lib.missing_barrier(x, again, threadgroup=tg, threadgroup_memory={0: tg * 4}, shuffle=3)
    np.testing.assert_array_equal(again, outs[3])


# ---- one lane picked by `position == value` ------------------------------------------------------

ONE_LANE = """
// Each `if` picks at most one thread of the group: the SIMT code runs that lane alone, found from
// the value, where the value is an integer; a float value keeps the test of every lane.
kernel void pick(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 constant uint& cu [[buffer(2)]], constant int& ci [[buffer(3)]],
                 constant long& cl [[buffer(4)]], constant float& cf [[buffer(5)]],
                 uint t [[thread_position_in_threadgroup]], uint i [[thread_position_in_grid]],
                 uint g [[threadgroup_position_in_grid]]) {
    threadgroup float sh[256];
    sh[t] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int s = ci;
    if (t == cu) out[6 * g + 0] = sh[t] + 1.0f;
    if (s == t) out[6 * g + 1] = sh[t] + 2.0f;
    if (t == cl) out[6 * g + 2] = sh[t] + 3.0f;
    if (t == cf) out[6 * g + 3] = sh[t] + 4.0f;
    if (t == 0) out[6 * g + 4] = sh[t] + 5.0f;
    if (t == 37u) out[6 * g + 5] = sh[t] + 6.0f;
}
"""


@pytest.mark.parametrize("tg", [32, 100, 256])
@pytest.mark.parametrize("value", [0, 1, 31, 32, 37, 99, 100, 255, 256, -1, 2 ** 32 + 3])
@pytest.mark.parametrize("model", MODELS + ["threads"])
def test_an_if_on_position_equals_a_value_runs_the_one_lane(device, model, rng, tg, value):
    lib = build_as(ONE_LANE, "one_lane.metal", model)
    check_model(lib.pick, model)
    groups = 3
    n = groups * tg
    x = rng.random(n, dtype=np.float32)
    out = rng.random(6 * groups, dtype=np.float32)
    want = out.copy()
    u = value % 2 ** 32
    as_int = value if -2 ** 31 <= value < 2 ** 31 else None
    lib.pick(x, out, np.uint32(u), np.int32(as_int if as_int is not None else 7), np.int64(value),
             np.float32(value), grid=n, threadgroup=tg)
    for g in range(groups):
        row = x[g * tg:(g + 1) * tg]
        picks = [u, (as_int if as_int is not None else 7) % 2 ** 32, value, value, 0, 37]
        for k, p in enumerate(picks):
            if 0 <= p < tg:
                want[6 * g + k] = row[p] + (k + 1)
    np.testing.assert_array_equal(out, want)


COMPARE = """
// Conditions `position < value` (and <=, >, >=, ==, either side) mask a masked statement; the
// SIMT code finds their lanes in closed form where the value is an integer.
kernel void compare(device uint* out [[buffer(0)]], constant uint& cu [[buffer(1)]],
                    constant int& ci [[buffer(2)]], constant long& cl [[buffer(3)]],
                    constant ulong& cul [[buffer(4)]], constant float& cf [[buffer(5)]],
                    uint t [[thread_position_in_threadgroup]], uint i [[thread_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
    threadgroup uint f[256];
    f[t] = 0u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < cu) f[t] |= 1u;
    if (cu > t) f[t] |= 2u;
    if (t <= ci) f[t] |= 4u;
    if (t >= cl) f[t] |= 8u;
    if (t > cul) f[t] |= 16u;
    if (t < cf) f[t] |= 32u;
    if (ci >= t) f[t] |= 64u;
    if (t < 37) f[t] |= 128u;
    if (t == cu) f[t] |= 256u;
    if (ci == t) f[t] |= 512u;
    if (t == cl) f[t] |= 1024u;
    if (cul == t) f[t] |= 2048u;
    if (t == cf) f[t] |= 4096u;
    if (t == 37) f[t] |= 8192u;
    if (lane == cu) f[t] |= 16384u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = f[t];
}
"""


@pytest.mark.parametrize("tg", [32, 100, 256])
@pytest.mark.parametrize("value", [0, 1, 31, 32, 33, 99, 100, 255, 256, -1, -40, 2 ** 32 + 3, 2 ** 64 - 5])
@pytest.mark.parametrize("model", MODELS + ["threads"])
def test_conditions_comparing_a_position_with_a_value(device, model, tg, value):
    lib = build_as(COMPARE, "compare.metal", model)
    check_model(lib.compare, model)
    groups = 3
    n = groups * tg
    out = np.zeros(n, np.uint32)
    cu = value % 2 ** 32
    ci = value if -2 ** 31 <= value < 2 ** 31 else -7
    cl = value if -2 ** 63 <= value < 2 ** 63 else -2 ** 40
    cul = value % 2 ** 64
    cf = np.float32(value)
    lib.compare(out, np.uint32(cu), np.int32(ci), np.int64(cl), np.uint64(cul), cf, grid=n, threadgroup=tg)
    t = np.tile(np.arange(tg, dtype=np.int64), groups)
    ci_u = ci % 2 ** 32  # uint <= int compares as uint
    want = ((t < cu) * 1 | (cu > t) * 2 | (t <= ci_u) * 4 | (t >= cl) * 8 | (t > cul) * 16
            | (t.astype(np.float32) < cf) * 32 | (ci_u >= t) * 64 | (t < 37) * 128
            | (t == cu) * 256 | (ci_u == t) * 512 | (t == cl) * 1024 | (cul == t) * 2048
            | (t.astype(np.float32) == cf) * 4096 | (t == 37) * 8192 | (t % 32 == cu) * 16384)
    np.testing.assert_array_equal(out, want.astype(np.uint32))
