"""A zoo of buggy kernels, written the way learners and kernel authors get them wrong (Metal
Puzzles style: map, guard, pooling, dot product, prefix sum, tiled matmul, reductions,
histograms, transposes), each caught by check= with the right class of finding and its source
lines, and each with a fixed twin that check="all" runs silently and that matches numpy.

Every kernel's source is written once: lines tagged `[bug]` are only in the buggy kernel, lines
tagged `[fix]` only in its twin; `<name>` tags mark the lines a finding must name. All buggy
kernels are one source and all fixed twins another, so the normal builds are two compiles (the
checked build is one compile per kernel, made when a kernel first runs under "all").
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import metalkit as mk

pytestmark = pytest.mark.skipif(mk.device().backend != "cpu", reason="check= is the CPU simulator's")

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"
N = 203    # odd, and not a multiple of the threadgroup: the last threadgroup is short
TG = 64


def up(n: int, to: int = TG) -> int:
    """n rounded up to a multiple of `to`: a grid of whole threadgroups."""
    return -(-n // to) * to


def segments(n: int, size: int = TG):
    """(start, stop) of each threadgroup's (or SIMD-group's) run of a 1-D grid of n threads."""
    return [(s, min(s + size, n)) for s in range(0, n, size)]


@dataclass
class Case:
    name: str      # the kernel
    kind: str      # race, lockstep, uninit, bounds or barrier
    src: str       # the kernel, with [bug]/[fix] lines and <marker> tags
    inputs: Callable  # (rng) -> (args, launch keywords)
    reference: Callable  # (args as given) -> {argument index: expected output}
    first: str | None = None   # marker of the line the finding names first (the earlier access, a barrier)
    second: str | None = None  # marker of the other line of the pair
    detail: str = ""           # a regex the finding also matches (memory, element)
    check: object = "all"      # what the bug is caught under
    bug_launch: dict = field(default_factory=dict)  # launch keywords that differ for the buggy run
    bug_xfail: str | None = None  # the checker misses or misreports this bug (see the report)
    fix_xfail: str | None = None  # the checker reports its correct twin

    def variant(self, which: str) -> str:
        other = "[fix]" if which == "bug" else "[bug]"
        return "".join(line + "\n" for line in self.src.strip("\n").splitlines() if other not in line)


CASES: list[Case] = []


def case(**kw) -> None:
    CASES.append(Case(**kw))


def floats(rng, n=N):
    return rng.random(n, dtype=np.float32) * 2 - 1


# ---------------------------------------------------------------------------------------------
# Races on threadgroup memory
# ---------------------------------------------------------------------------------------------

def blur_reference(a):
    x = a[0]
    p = np.concatenate([[0], x, [0]]).astype(np.float32)
    return {1: (p[:-2] + p[1:-1] + p[2:]) / np.float32(3)}


BLUR = """
kernel void NAME(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                 uint l [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {
    threadgroup float t[66];                       // the group's elements and one halo cell each side
    t[l + 1] = x[i];                               // <store>
    if (l == 0) t[0] = i > 0 ? x[i - 1] : 0.0f;                          HALO
    if (l == nt - 1) t[nt + 1] = i + 1 < n ? x[i + 1] : 0.0f;            HALO
    BARRIER                                                              SYNC
    y[i] = (t[l] + t[l + 1] + t[l + 2]) / 3.0f;    // <load>
}
"""
case(name="blur_race", kind="race", first="store", second="load", detail="threadgroup memory 't'",
     src=BLUR.replace("BARRIER", BARRIER).replace("NAME", "blur_race").replace("HALO", "").replace("SYNC", "// [fix]"),
     inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=N, threadgroup=TG)),
     reference=blur_reference)

case(name="pool_race", kind="race", first="store", second="load", detail="threadgroup memory 't'", src=f"""
kernel void pool_race(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                      uint l [[thread_position_in_threadgroup]]) {{
    t[l] = x[i];                                   // <store>
    {BARRIER}                                      // [fix]
    float s = t[l];
    if (l >= 1) s += t[l - 1];                     // <load>
    if (l >= 2) s += t[l - 2];
    y[i] = s;                                      // a window of 3 within the threadgroup
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG,
                                                                     threadgroup_memory={0: TG * 4})),
     reference=lambda a: {1: np.array([sum(a[0][max(i - 2, i // TG * TG):i + 1][::-1], np.float32(0))
                                       for i in range(N)], np.float32)})

case(name="dot_race", kind="race", first="load", second="store", detail="threadgroup memory 'cache'", src=f"""
kernel void dot_race(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                     device float* out [[buffer(2)]], uint i [[thread_position_in_grid]],
                     uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                     uint nt [[threads_per_threadgroup]]) {{
    threadgroup float cache[64];
    cache[l] = a[i] * b[i];                        // <store>
    {BARRIER}                                      // [fix]
    if (l == 0) {{
        float s = 0.0f;
        for (uint k = 0; k < nt; ++k) s += cache[k];   // <load>
        out[g] = s;
    }}
}}
""", inputs=lambda rng: ([floats(rng), floats(rng), np.zeros(4, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {2: np.array([(a[0][s:e] * a[1][s:e]).sum(dtype=np.float64) for s, e in segments(N)],
                                      np.float32)})

case(name="scan_race", kind="race", first="scan", second="scan", detail="threadgroup memory 't'", src=f"""
kernel void scan_race(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                      uint nt [[threads_per_threadgroup]]) {{
    threadgroup float t[64];
    t[l] = x[i];
    {BARRIER}
    for (uint k = 1; k < nt; k *= 2) {{           // Hillis-Steele, in place
        if (l >= k) t[l] += t[l - k];              // <scan> [bug]
        float v = l >= k ? t[l - k] : 0.0f;        // [fix]
        {BARRIER}                                  // [fix]
        t[l] += v;                                 // [fix]
        {BARRIER}
    }}
    y[i] = t[l];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([np.cumsum(a[0][s:e], dtype=np.float64) for s, e in segments(N)])})


MATMUL = """
kernel void NAME(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                 device float* C [[buffer(2)]], constant uint& M [[buffer(3)]], constant uint& K [[buffer(4)]],
                 constant uint& N [[buffer(5)]], uint2 p [[thread_position_in_grid]],
                 uint2 l [[thread_position_in_threadgroup]]) {
    threadgroup float As[8][8];
    threadgroup float Bs[8][8];
    const uint row = p.y, col = p.x;
    float acc = 0.0f;
    for (uint t = 0; t < K; t += 8) {
        LOAD_A
        Bs[l.y][l.x] = col < N && t + l.y < K ? B[(t + l.y) * N + col] : 0.0f;      // <load_b>
        BARRIER                                                          SYNC1
        for (uint k = 0; k < 8; ++k) acc += As[l.y][k] * Bs[k][l.x];   // <use>
        BARRIER                                                          SYNC2
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""
LOAD_A = "As[l.y][l.x] = row < M && t + l.x < K ? A[row * K + t + l.x] : 0.0f;   // <load>"
MM = (13, 21, 11)  # M, K, N: no multiple of the 8x8 tile


def matmul_inputs(rng):
    m, k, n = MM
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    return [a, b, np.zeros((m, n), np.float32), m, k, n], dict(grid=(up(n, 8), up(m, 8)), threadgroup=(8, 8))


def matmul_reference(a):
    return {2: a[0].astype(np.float64) @ a[1]}


def matmul(name, load=LOAD_A, sync1="", sync2=""):
    return (MATMUL.replace("BARRIER", BARRIER).replace("NAME", name).replace("LOAD_A", load).replace("SYNC1", sync1).replace("SYNC2", sync2))


# A row of As is written and read by one SIMD-group (lockstep), a column of Bs by several (a race).
case(name="matmul_load_race", kind="race", first="load_b", second="use", detail="threadgroup memory 'Bs'",
     src=matmul("matmul_load_race", sync1="// [fix]"), inputs=matmul_inputs, reference=matmul_reference)
# The barrier after the product is missing: the next tile's load overwrites a tile others still read.
case(name="matmul_reuse_race", kind="race", first="load_b", second="use", detail="threadgroup memory 'Bs'",
     src=matmul("matmul_reuse_race", sync2="// [fix]"), inputs=matmul_inputs, reference=matmul_reference)


def group_sums(x, n, size=TG):
    return np.array([x[s:e].sum(dtype=np.float64) for s, e in segments(n, size)], np.float32)


# With 128 threads the tree's second step reads what another SIMD-group wrote in its first (with 64,
# only SIMD-group 0 would be left by then: reliance on lockstep, not a race).
case(name="reduce_race", kind="race", first="tree", second="tree", detail="threadgroup memory 't'", src=f"""
kernel void reduce_race(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {{
    threadgroup float t[128];
    t[l] = i < n ? x[i] : 0.0f;
    {BARRIER}
    for (uint s = 64; s > 0; s /= 2) {{
        if (l < s) t[l] += t[l + s];               // <tree>
        {BARRIER}                                  // [fix]
    }}
    {BARRIER}                                      // [bug] once, after the loop
    if (l == 0) out[g] = t[0];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(2, np.float32), N], dict(grid=up(N, 128), threadgroup=128)),
     reference=lambda a: {1: group_sums(a[0], N, 128)})

# WAR in a reduction loop: each thread reads its partner's slot, then writes its own, with no
# barrier between the read and the write: the partner may already have written its slot.
case(name="suffix_war", kind="race", first="read", second="write", detail=r"data race \(a read, then a write\)",
     src=f"""
kernel void suffix_war(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                       uint nt [[threads_per_threadgroup]]) {{
    threadgroup float t[64];
    t[l] = x[i];
    {BARRIER}
    for (uint k = 1; k < nt; k *= 2) {{
        float v = l + k < nt ? t[l + k] : 0.0f;    // <read> the partner's slot
        {BARRIER}                                  // [fix]
        t[l] += v;                                 // <write> its own
        {BARRIER}
    }}
    y[i] = t[l];                                   // the sum from here to the group's end
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([np.cumsum(a[0][s:e][::-1], dtype=np.float64)[::-1]
                                             for s, e in segments(N)])})

TR = (13, 21)  # rows, cols


def transpose_inputs(rng):
    r, c = TR
    return [rng.random((r, c), dtype=np.float32), np.zeros((c, r), np.float32), r, c], \
        dict(grid=(up(c, 8), up(r, 8)), threadgroup=(8, 8))


case(name="transpose_race", kind="race", first="store", second="load", detail="threadgroup memory 'tile'", src=f"""
kernel void transpose_race(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                           constant uint& rows [[buffer(2)]], constant uint& cols [[buffer(3)]],
                           uint2 g [[threadgroup_position_in_grid]], uint2 l [[thread_position_in_threadgroup]]) {{
    threadgroup float tile[8][9];                  // padded against bank conflicts
    const uint r = g.y * 8 + l.y, c = g.x * 8 + l.x;
    if (r < rows && c < cols) tile[l.y][l.x] = a[r * cols + c];        // <store>
    {BARRIER}                                      // [fix]
    const uint orow = g.x * 8 + l.y, ocol = g.y * 8 + l.x;
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = tile[l.x][l.y];   // <load>
}}
""", inputs=transpose_inputs, reference=lambda a: {1: a[0].T})

case(name="center_race", kind="race", first="store", second="load", detail="threadgroup memory 'm'", src=f"""
kernel void center_race(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                        uint nt [[threads_per_threadgroup]]) {{
    threadgroup float m;
    if (l == 0) {{
        float hi = x[i];
        for (uint k = 1; k < nt; ++k) hi = max(hi, x[i + k]);
        m = hi;                                    // <store>
    }}
    {BARRIER}                                      // [fix]
    y[i] = x[i] - m;                               // <load>
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([a[0][s:e] - a[0][s:e].max() for s, e in segments(N)])})

# The barrier is there, but before the store instead of after it.
case(name="rotate_race", kind="race", first="load", second="store", detail="threadgroup memory 't'", src=f"""
kernel void rotate_race(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {{
    {BARRIER}                                      // [bug]
    t[l] = x[i];                                   // <store>
    {BARRIER}                                      // [fix]
    y[i] = t[(l + 1) % nt];                        // <load>
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG,
                                                                     threadgroup_memory={0: TG * 4})),
     reference=lambda a: {1: np.concatenate([np.roll(a[0][s:e], -1) for s, e in segments(N)])})

# A second phase reuses the tile while the first phase's reads may not be done.
case(name="reuse_race", kind="race", first="write", second="read", detail="threadgroup memory 't'", src=f"""
kernel void reuse_race(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                       uint nt [[threads_per_threadgroup]]) {{
    threadgroup float t[64];
    t[l] = x[i];
    {BARRIER}
    const float mirrored = t[nt - 1 - l];          // <read> phase 1
    {BARRIER}                                      // [fix]
    t[l] = mirrored * 2.0f;                        // <write> phase 2 reuses t
    {BARRIER}
    y[i] = t[(l + 1) % nt];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([np.roll(a[0][s:e][::-1] * 2, -1) for s, e in segments(N)])})

# Between threadgroups, on device memory: the first group sums every group's partial, which the
# other groups may not have written yet.
case(name="total_race", kind="race", first="partial", second="sum",
     detail="data race between threadgroups .* on device memory 'partial'", src=f"""
kernel void total_race(device const int* x [[buffer(0)]], device int* partial [[buffer(1)]],
                       device atomic_int* total [[buffer(2)]], constant uint& n [[buffer(3)]],
                       uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                       uint g [[threadgroup_position_in_grid]], uint ng [[threadgroups_per_grid]]) {{
    threadgroup atomic_int s;
    if (l == 0) atomic_store_explicit(&s, 0, memory_order_relaxed);
    {BARRIER}
    if (i < n) atomic_fetch_add_explicit(&s, x[i], memory_order_relaxed);
    {BARRIER}
    if (l == 0) partial[g] = atomic_load_explicit(&s, memory_order_relaxed);     // <partial>
    if (g == 0 && l == 0) {{                                                      // [bug]
        int sum = 0;                                                             // [bug]
        for (uint k = 0; k < ng; ++k) sum += partial[k];                         // <sum> [bug]
        atomic_store_explicit(total, sum, memory_order_relaxed);                 // [bug]
    }}                                                                           // [bug]
    if (l == 0) atomic_fetch_add_explicit(total, partial[g], memory_order_relaxed);   // [fix]
}}
""", inputs=lambda rng: ([rng.integers(-1000, 1000, 4 * 1024 + 3).astype(np.int32), np.zeros(65, np.int32),
                          np.zeros(1, np.int32), 4 * 1024 + 3], dict(grid=up(4 * 1024 + 3), threadgroup=TG)),
     reference=lambda a: {1: np.array([a[0][s:e].sum() for s, e in segments(len(a[0]))], np.int32),
                          2: np.array([a[0].sum()], np.int32)},
)


def spread_inputs(rng):
    pos = np.concatenate([rng.choice(1024, e - s, replace=False) for s, e in segments(N)]).astype(np.uint32)
    return [floats(rng), pos, np.full(4 * 1024, -7.0, np.float32), N], dict(grid=up(N), threadgroup=TG)


def spread_reference(a):
    y = np.zeros((4, 1024), np.float32)
    for s, e in segments(N):
        y[s // TG, a[1][s:e]] = a[0][s:e]
    return {2: y.ravel()}


# A store-only loop with a constant stride (zeroing a row cooperatively): a vectoriser makes
# scatters of it where the processor has them (AVX-512), which instrumentation would not see.
case(name="spread_race", kind="race", first="zero", second="place", detail="threadgroup memory 'row'", src=f"""
kernel void spread_race(device const float* x [[buffer(0)]], device const uint* pos [[buffer(1)]],
                        device float* y [[buffer(2)]], constant uint& n [[buffer(3)]],
                        uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                        uint g [[threadgroup_position_in_grid]]) {{
    threadgroup float row[1024];
    for (uint k = l; k < 1024; k += 64) row[k] = 0.0f;          // <zero> cooperatively
    {BARRIER}                                                   // [fix]
    if (i < n) row[pos[i]] = x[i];                              // <place> (the group's positions differ)
    {BARRIER}
    for (uint k = l; k < 1024; k += 64) y[g * 1024 + k] = row[k];
}}
""", inputs=spread_inputs, reference=spread_reference)


# ---------------------------------------------------------------------------------------------
# Reliance on SIMD-group lockstep (a warning: it holds on Apple GPUs, not elsewhere)
# ---------------------------------------------------------------------------------------------

case(name="warp_tail", kind="lockstep", first="w32", second="w16", detail="threadgroup memory 't'", src=f"""
kernel void warp_tail(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                      uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {{
    threadgroup float t[128];
    t[l] = i < n ? x[i] : 0.0f;
    {BARRIER}
    for (uint s = 64; s > 32; s /= 2) {{           // [bug] the last SIMD-group's steps come below
    for (uint s = 64; s > 0; s /= 2) {{            // [fix]
        if (l < s) t[l] += t[l + s];
        {BARRIER}
    }}
    if (l < 32) {{                                 // [bug] "warp-synchronous": no barriers
        volatile threadgroup float* v = t;         // [bug]
        v[l] += v[l + 32];                         // <w32> [bug]
        v[l] += v[l + 16];                         // <w16> [bug]
        v[l] += v[l + 8];                          // [bug]
        v[l] += v[l + 4];                          // [bug]
        v[l] += v[l + 2];                          // [bug]
        v[l] += v[l + 1];                          // [bug]
    }}                                             // [bug]
    if (l == 0) out[g] = t[0];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(2, np.float32), N], dict(grid=up(N, 128), threadgroup=128)),
     reference=lambda a: {1: group_sums(a[0], N, 128)})

case(name="simd_scan_shared", kind="lockstep", first="write", second="read", detail="threadgroup memory 't'",
     src="""
kernel void simd_scan_shared(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                             uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float t[64];                       // [bug]
    t[l] = x[i];                                   // [bug]
    for (uint k = 1; k < 32; k *= 2) {             // [bug] within one SIMD-group, no barriers
        float v = lane >= k ? t[l - k] : 0.0f;     // <read> [bug]
        t[l] += v;                                 // <write> [bug]
    }                                              // [bug]
    y[i] = t[l];                                   // [bug]
    y[i] = simd_prefix_inclusive_sum(x[i]);        // [fix]
}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([np.cumsum(a[0][s:e], dtype=np.float64) for s, e in segments(N, 32)])})

# Lane 0 hands each lane of its SIMD-group a value through threadgroup memory.
case(name="lane0_broadcast", kind="lockstep", first="store", second="load", detail="threadgroup memory 'first'",
     src="""
kernel void lane0_broadcast(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                            uint i [[thread_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float first[2];
    if (lane == 0) first[sg] = x[i];               // <store>
    simdgroup_barrier(mem_flags::mem_threadgroup); // [fix]
    y[i] = x[i] - first[sg];                       // <load>
}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([a[0][s:e] - a[0][s] for s, e in segments(N, 32)])})

case(name="simd_max_shared", kind="lockstep", first="tree", second="tree", detail="threadgroup memory 't'", src="""
kernel void simd_max_shared(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                            uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float t[64];                       // [bug]
    t[l] = x[i];                                   // [bug]
    for (uint s = 16; s > 0; s /= 2)               // [bug]
        if (lane < s) t[l] = max(t[l], t[l + s]);  // <tree> [bug]
    if (lane == 0) out[i / 32] = t[l];             // [bug]
    const float m = simd_max(x[i]);                // [fix]
    if (lane == 0) out[i / 32] = m;                // [fix]
}
""", inputs=lambda rng: ([floats(rng, 256), np.zeros(8, np.float32)], dict(grid=256, threadgroup=TG)),
     reference=lambda a: {1: a[0].reshape(8, 32).max(axis=1)})


# ---------------------------------------------------------------------------------------------
# Reads of threadgroup memory no thread of the threadgroup wrote
# ---------------------------------------------------------------------------------------------

case(name="matmul_partial_tile", kind="uninit", first="use", detail="threadgroup memory '(As|Bs)'",
     src=matmul("matmul_partial_tile",
                load="if (row < M && t + l.x < K) As[l.y][l.x] = A[row * K + t + l.x];   // [bug] no else\n"
                     f"        {LOAD_A}   // [fix]"), inputs=matmul_inputs, reference=matmul_reference)


HIST = f"""
kernel void NAME(device const uint* x [[buffer(0)]], device atomic_uint* hist [[buffer(1)]],
                 constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                 uint l [[thread_position_in_threadgroup]]) {{
    threadgroup atomic_uint bins[16];
    if (l < 16) atomic_store_explicit(&bins[l], 0u, memory_order_relaxed);            ZERO
    {BARRIER}                                                                          SYNC
    if (i < n) atomic_fetch_add_explicit(&bins[x[i]], 1u, memory_order_relaxed);      // <add>
    {BARRIER}
    if (l < 16) atomic_fetch_add_explicit(&hist[l], atomic_load_explicit(&bins[l], memory_order_relaxed),
                                          memory_order_relaxed);
}}
"""
HN = 1003


def hist_inputs(rng):
    return [rng.integers(0, 16, HN).astype(np.uint32), np.zeros(16, np.uint32), HN], dict(grid=up(HN), threadgroup=TG)


case(name="hist_unzeroed", kind="uninit", first="add", detail="threadgroup memory 'bins'",
     src=HIST.replace("NAME", "hist_unzeroed").replace("ZERO", "// [fix]").replace("SYNC", "// [fix]"),
     inputs=hist_inputs, reference=lambda a: {1: np.bincount(a[0], minlength=16)})
# Zeroed, but with no barrier before the adds: a thread may add to a bin before its zeroing.
case(name="hist_zero_unsynced", kind="uninit", first="add", detail="threadgroup memory 'bins'",
     src=HIST.replace("NAME", "hist_zero_unsynced").replace("ZERO", "").replace("SYNC", "// [fix]"),
     inputs=hist_inputs, reference=lambda a: {1: np.bincount(a[0], minlength=16)})

case(name="reduce_unpadded", kind="uninit", first="tree", detail="threadgroup memory 't'", src=f"""
kernel void reduce_unpadded(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                            constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                            uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {{
    threadgroup float t[64];
    if (i < n) t[l] = x[i];                        // [bug] the last group's tail is never written
    t[l] = i < n ? x[i] : 0.0f;                    // [fix]
    {BARRIER}
    for (uint s = 32; s > 0; s /= 2) {{
        if (l < s) t[l] += t[l + s];               // <tree>
        {BARRIER}
    }}
    if (l == 0) out[g] = t[0];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(4, np.float32), N], dict(grid=up(N), threadgroup=TG)),
     reference=lambda a: {1: group_sums(a[0], N)})

case(name="blur_no_halo", kind="uninit", first="load", detail="threadgroup memory 't'",
     src=BLUR.replace("BARRIER", BARRIER).replace("NAME", "blur_no_halo").replace("HALO", "// [fix]").replace("SYNC", ""),
     inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=N, threadgroup=TG)),
     reference=blur_reference)

case(name="pingpong_scan", kind="uninit", first="step", detail="threadgroup memory 'buf'", src=f"""
kernel void pingpong_scan(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                          threadgroup float* buf [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                          uint l [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {{
    uint src = 0, dst = nt;                        // the two halves of buf
    buf[dst + l] = x[i];                           // [bug] loaded into the half the first step writes
    buf[src + l] = x[i];                           // [fix]
    {BARRIER}
    for (uint k = 1; k < nt; k *= 2) {{
        buf[dst + l] = l >= k ? buf[src + l] + buf[src + l - k] : buf[src + l];   // <step>
        {BARRIER}
        const uint s = src; src = dst; dst = s;
    }}
    y[i] = buf[src + l];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG,
                                                                     threadgroup_memory={0: 2 * TG * 4})),
     reference=lambda a: {1: np.concatenate([np.cumsum(a[0][s:e], dtype=np.float64) for s, e in segments(N)])})

case(name="partials_fixed_loop", kind="uninit", first="sum", detail=r"threadgroup memory 'partial' elements? [123]\b",
     src=f"""
kernel void partials_fixed_loop(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                                constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                                uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                                uint sg [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint nsg [[simdgroups_per_threadgroup]]) {{
    threadgroup float partial[4];                  // room for 128 threads' SIMD-groups
    const float s = simd_sum(x[i]);
    if (lane == 0) partial[sg] = s;
    {BARRIER}
    if (l == 0) {{
        float total = 0.0f;
        for (uint k = 0; k < 4; ++k) total += partial[k];      // <sum> [bug] as if 128 threads
        for (uint k = 0; k < nsg; ++k) total += partial[k];    // [fix]
        out[g] = total;
    }}
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(4, np.float32), N], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: group_sums(a[0], N)})


# ---------------------------------------------------------------------------------------------
# Out of bounds: device, constant and threadgroup memory
# ---------------------------------------------------------------------------------------------

case(name="map_unguarded", kind="bounds", check=True, first="map",
     detail=r"past the end of parameter 'a' \[\[buffer\(0\)\]\] of 203 elements \(element 203\)", src="""
kernel void map_unguarded(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                          constant uint& size [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = a[i] + 10.0f;                         // <map> [bug] no guard
    if (i < size) out[i] = a[i] + 10.0f;           // [fix]
}
""", inputs=lambda rng: ([floats(rng), np.full(up(N), -7.0, np.float32), N], dict(grid=up(N), threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([a[0] + np.float32(10), np.full(up(N) - N, -7.0, np.float32)])})

case(name="reverse_write", kind="bounds", check=True, first="write",
     detail=r"past the end of parameter 'y' \[\[buffer\(1\)\]\] of 203 elements \(element 203\)", src="""
kernel void reverse_write(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                          constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[n - i] = x[i];                               // <write> [bug] off by one
    y[n - 1 - i] = x[i];                           // [fix]
}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: a[0][::-1]})

TAPS = 5
case(name="conv_taps", kind="bounds", check=True, first="tap",
     detail=r"past the end of parameter 'w' \[\[buffer\(1\)\]\] of 5 elements \(element 5\)", src="""
kernel void conv_taps(device const float* x [[buffer(0)]], constant float* w [[buffer(1)]],
                      device float* y [[buffer(2)]], constant uint& n [[buffer(3)]],
                      constant uint& taps [[buffer(4)]], uint i [[thread_position_in_grid]]) {
    float acc = 0.0f;
    for (uint k = 0; k <= taps; ++k) {             // [bug] one tap too many
    for (uint k = 0; k < taps; ++k) {              // [fix]
        if (i + k < n) acc += x[i + k] * w[k];     // <tap>
    }
    y[i] = acc;
}
""", inputs=lambda rng: ([floats(rng), floats(rng, TAPS), np.zeros(N, np.float32), N, TAPS],
                         dict(grid=N, threadgroup=TG)),
     reference=lambda a: {2: np.array([sum(float(a[0][i + k]) * float(a[1][k]) for k in range(TAPS) if i + k < N)
                                       for i in range(N)])})

case(name="scale4", kind="bounds", check=True, first="vec", detail=r"past the end of parameter 'x' \[\[buffer\(0\)\]\]",
     src="""
kernel void scale4(device const float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
                   constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[i] = x[i] * 2.0f;                            // <vec> [bug] n is no multiple of 4
    if (4 * i + 3 < n) y[i] = x[i] * 2.0f;         // [fix]
    else for (uint k = 4 * i; k < n; ++k)          // [fix]
        ((device float*)y)[k] = ((device const float*)x)[k] * 2.0f;   // [fix]
}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=up(N, 4) // 4, threadgroup=32)),
     reference=lambda a: {1: a[0] * 2})

case(name="diff_underflow", kind="bounds", check=True, first="diff",
     detail=r"past the end of parameter 'x' \[\[buffer\(0\)\]\] of 203 elements \(element 4294967295\)", src="""
kernel void diff_underflow(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                           uint i [[thread_position_in_grid]]) {
    y[i] = x[i] - x[i - 1];                        // <diff> [bug] i - 1 wraps at i = 0
    y[i] = i > 0 ? x[i] - x[i - 1] : x[0];         // [fix]
}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([a[0][:1], np.diff(a[0])])})

NB = 16


def unit_floats(rng, n):
    """Values in [0, 1], 1.0 among them: uint(v * bins) is `bins` for those."""
    v = rng.random(n, dtype=np.float32)
    v[rng.choice(n, 5, replace=False)] = 1.0
    return v


def unit_hist(v):
    return np.bincount(np.minimum((v * NB).astype(np.int64), NB - 1), minlength=NB)


case(name="device_hist_overrun", kind="bounds", check=True, first="bin",
     detail=r"past the end of parameter 'hist' \[\[buffer\(1\)\]\] of 16 elements \(element 16\)", src="""
kernel void device_hist_overrun(device const float* v [[buffer(0)]], device atomic_uint* hist [[buffer(1)]],
                                uint i [[thread_position_in_grid]]) {
    const uint b = uint(v[i] * 16.0f);             // [bug] 1.0 gives 16
    const uint b = min(uint(v[i] * 16.0f), 15u);   // [fix]
    atomic_fetch_add_explicit(&hist[b], 1u, memory_order_relaxed);   // <bin>
}
""", inputs=lambda rng: ([unit_floats(rng, N), np.zeros(NB, np.uint32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: unit_hist(a[0])})

case(name="pool_ahead", kind="bounds", check=True, first="ahead",
     detail=r"past the end of threadgroup parameter 't' \[\[threadgroup\(0\)\]\] of 256 bytes \(element 64\)", src=f"""
kernel void pool_ahead(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                       uint l [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {{
    t[l] = x[i];
    {BARRIER}
    float s = t[l];
    s += t[l + 1];                                 // <ahead> [bug] past the last thread's slot
    if (l + 1 < nt) s += t[l + 1];                 // [fix]
    y[i] = s;
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG,
                                                                     threadgroup_memory={0: TG * 4})),
     reference=lambda a: {1: np.concatenate([a[0][s:e] + np.append(a[0][s + 1:e], 0) for s, e in segments(N)])})

# The kernel is right; the call gives threadgroup memory in elements, not bytes.
case(name="tg_bytes", kind="bounds", check=True, first="store",
     detail=r"past the end of threadgroup parameter 't' \[\[threadgroup\(0\)\]\] of 64 bytes \(element 16\)",
     bug_launch=dict(threadgroup_memory={0: TG}), src=f"""
kernel void tg_bytes(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
                     uint l [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {{
    t[l] = x[i];                                   // <store>
    {BARRIER}
    y[i] = t[nt - 1 - l];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG,
                                                                     threadgroup_memory={0: TG * 4})),
     reference=lambda a: {1: np.concatenate([a[0][s:e][::-1] for s, e in segments(N)])})

# Kernel-scope threadgroup arrays are guarded under check=True (the guarded build) and in the
# checked build ("all").
RS = (13, 21)  # rows, cols


def rowsum_inputs(rng):
    r, c = RS
    return [rng.random((r, c), dtype=np.float32), np.zeros((r, up(c, 8) // 8), np.float32), r, c], \
        dict(grid=(up(c, 8), up(r, 8)), threadgroup=(8, 8))


def rowsum_reference(a):
    r, c = RS
    padded = np.zeros((r, up(c, 8)), np.float64)
    padded[:, :c] = a[0]
    return {1: padded.reshape(r, -1, 8).sum(axis=2)}


case(name="tile_rowsum", kind="bounds", check=True, first="row",
     detail=r"past the end of threadgroup variable 'tile' of 64 elements \(element 64\)", src=f"""
kernel void tile_rowsum(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        constant uint& rows [[buffer(2)]], constant uint& cols [[buffer(3)]],
                        uint2 p [[thread_position_in_grid]], uint2 l [[thread_position_in_threadgroup]]) {{
    threadgroup float tile[8][8];
    tile[l.y][l.x] = p.y < rows && p.x < cols ? x[p.y * cols + p.x] : 0.0f;
    {BARRIER}
    if (l.x == 0 && p.y < rows) {{
        float s = 0.0f;
        for (uint k = 0; k <= 8; ++k) s += tile[l.y][k];   // <row> [bug] one column too many
        for (uint k = 0; k < 8; ++k) s += tile[l.y][k];    // [fix]
        y[p.y * ((cols + 7) / 8) + p.x / 8] = s;
    }}
}}
""", inputs=rowsum_inputs, reference=rowsum_reference)

case(name="tg_hist_overrun", kind="bounds", first="bin",
     detail=r"past the end of threadgroup variable 'bins' of 16 elements \(element 16\)", src=f"""
kernel void tg_hist_overrun(device const float* v [[buffer(0)]], device atomic_uint* hist [[buffer(1)]],
                            constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                            uint l [[thread_position_in_threadgroup]]) {{
    threadgroup atomic_uint bins[16];
    if (l < 16) atomic_store_explicit(&bins[l], 0u, memory_order_relaxed);
    {BARRIER}
    const uint b = i < n ? uint(v[i] * 16.0f) : 0u;              // [bug] 1.0 gives 16
    const uint b = i < n ? min(uint(v[i] * 16.0f), 15u) : 0u;    // [fix]
    if (i < n) atomic_fetch_add_explicit(&bins[b], 1u, memory_order_relaxed);   // <bin>
    {BARRIER}
    if (l < 16) atomic_fetch_add_explicit(&hist[l], atomic_load_explicit(&bins[l], memory_order_relaxed),
                                          memory_order_relaxed);
}}
""", inputs=lambda rng: ([unit_floats(rng, HN), np.zeros(NB, np.uint32), HN], dict(grid=up(HN), threadgroup=TG)),
     reference=lambda a: {1: unit_hist(a[0])})


# ---------------------------------------------------------------------------------------------
# Divergent barriers (check=True)
# ---------------------------------------------------------------------------------------------

def pair_swap(x, n):
    y = np.zeros(n, np.float32)
    for i in range(n):
        y[i] = x[i ^ 1] if (i ^ 1) < n else 0.0
    return y


case(name="guarded_block", kind="barrier", check=True, first="barrier", detail=r"threads 11-31 of SIMD-group 0",
     src=f"""
kernel void guarded_block(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                          constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                          uint l [[thread_position_in_threadgroup]]) {{
    threadgroup float t[64];
    if (i < n) {{                                  // [bug]
        t[l] = x[i];                               // [bug]
        {BARRIER}                                  // <barrier> [bug] only the threads with an element
        y[i] = t[l ^ 1];                           // [bug]
    }}                                             // [bug]
    t[l] = i < n ? x[i] : 0.0f;                    // [fix]
    {BARRIER}                                      // [fix]
    if (i < n) y[i] = t[l ^ 1];                    // [fix]
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=up(N), threadgroup=TG)),
     reference=lambda a: {1: pair_swap(a[0], N)})

# `if (lid < k)` around a barrier, where the threads left out are a whole SIMD-group.
case(name="first_k_sum", kind="barrier", check=True, first="barrier", detail="", src=f"""
kernel void first_k_sum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        constant uint& k [[buffer(2)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {{
    threadgroup float t[64];
    if (l < k) {{                                  // [bug] only the first k threads take part
        t[l] = x[i];                               // [bug]
        {BARRIER}                                  // <barrier> [bug]
        if (l == 0) {{                             // [bug]
            float s = 0.0f;                        // [bug]
            for (uint j = 0; j < k; ++j) s += t[j];  // [bug]
            out[g] = s;                            // [bug]
        }}                                         // [bug]
    }}                                             // [bug]
    if (l < k) t[l] = x[i];                        // [fix]
    {BARRIER}                                      // [fix]
    if (l == 0) {{                                 // [fix]
        float s = 0.0f;                            // [fix]
        for (uint j = 0; j < k; ++j) s += t[j];    // [fix]
        out[g] = s;                                // [fix]
    }}                                             // [fix]
}}
""", inputs=lambda rng: ([floats(rng, 5 * TG), np.zeros(5, np.float32), 32], dict(grid=5 * TG, threadgroup=TG)),
     reference=lambda a: {1: a[0].reshape(5, TG)[:, :32].sum(axis=1, dtype=np.float64)},
     bug_xfail="by design, as on Apple GPUs: threads that skip a barrier's branch and then return count as "
               "arrived (here SIMD-group 1 of each threadgroup), so no divergent barrier is reported")

case(name="early_exit", kind="barrier", check=True, first="barrier", detail="", src=f"""
kernel void early_exit(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                       uint l [[thread_position_in_threadgroup]]) {{
    threadgroup float t[64];
    if (i >= n) return;                            // [bug] before the barrier
    t[l] = x[i];                                   // [bug]
    t[l] = i < n ? x[i] : 0.0f;                    // [fix]
    {BARRIER}                                      // <barrier>
    if (i < n) y[i] = t[l ^ 1];
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32), N], dict(grid=up(N), threadgroup=TG)),
     reference=lambda a: {1: pair_swap(a[0], N)},
     bug_xfail="by design, as on Apple GPUs: a thread that returns before a barrier the others reach counts as "
               "arrived, so an early return before a barrier (threads 11-63 of the last threadgroup) is not reported")

case(name="odd_even", kind="barrier", first="even", second="odd", detail="threads wait at different", src=f"""
kernel void odd_even(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                     uint nt [[threads_per_threadgroup]]) {{
    threadgroup float t[64];
    t[l] = x[i];
    {BARRIER}                                      // [fix]
    if (l % 2 == 0) {{
        {BARRIER}                                  // <even> [bug]
        y[i] = l + 1 < nt ? t[l] + t[l + 1] : t[l];
    }} else {{
        {BARRIER}                                  // <odd> [bug]
        y[i] = t[l] - t[l - 1];
    }}
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: np.concatenate([odd_even_ref(a[0][s:e]) for s, e in segments(N)])})


def odd_even_ref(x):
    y = np.empty_like(x)
    for l in range(len(x)):
        y[l] = (x[l] + x[l + 1] if l + 1 < len(x) else x[l]) if l % 2 == 0 else x[l] - x[l - 1]
    return y


def rounds_ref(x):
    y = np.zeros(N, np.float64)
    for s, e in segments(N):
        seg = x[s:e]
        for l in range(e - s):
            nb = seg[(l + 1) % (e - s)]
            y[s + l] = sum(float(nb) * (r + 1) for r in range(l // 8 + 1))
    return y


# Each thread runs as many rounds as it needs, with a barrier in each.
case(name="rounds", kind="barrier", check=True, first="barrier", detail=r"threads 0-7 of SIMD-group 0", src=f"""
kernel void rounds(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                   uint nt [[threads_per_threadgroup]]) {{
    threadgroup float t[64];
    float acc = 0.0f;
    for (uint r = 0; r <= l / 8; ++r) {{           // [bug] the trip count is the thread's own
    for (uint r = 0; r <= (nt - 1) / 8; ++r) {{    // [fix] every thread runs the group's rounds
        t[l] = x[i] * float(r + 1);
        {BARRIER}                                  // <barrier>
        if (r <= l / 8) acc += t[(l + 1) % nt];
        {BARRIER}
    }}
    y[i] = acc;
}}
""", inputs=lambda rng: ([floats(rng), np.zeros(N, np.float32)], dict(grid=N, threadgroup=TG)),
     reference=lambda a: {1: rounds_ref(a[0])})


# ---------------------------------------------------------------------------------------------

def sources(which: str) -> tuple[str, dict[str, int]]:
    """Every case's `which` kernel in one source, and the line each case's text starts after."""
    text, starts = HEAD, {}
    for c in CASES:
        starts[c.name] = text.count("\n")
        text += c.variant(which) + "\n"
    return text, starts


BUGS, BUG_AT = sources("bug")
FIXES, FIX_AT = sources("fix")


def line_of(c: Case, marker: str) -> int:
    """The 1-based line of the buggy source holding case c's `<marker>`."""
    lines = c.variant("bug").splitlines()
    hits = [k for k, l in enumerate(lines) if f"<{marker}>" in l]
    assert len(hits) == 1, (c.name, marker)
    return BUG_AT[c.name] + hits[0] + 1


@pytest.fixture(scope="module")
def libs():
    return mk.compile(BUGS, filename="zoo_bug.metal"), mk.compile(FIXES, filename="zoo_fix.metal")


def run(lib, c: Case, args, launch, check):
    """The call's KernelFault text (None if none) and its CheckWarnings."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            getattr(lib, c.name)(*args, check=check, **launch)
            fault = None
        except mk.KernelFault as e:
            fault = str(e)
    return fault, [str(x.message) for x in w if issubclass(x.category, mk.CheckWarning)]


def findings(fault: str | None, warned: list[str]) -> list[str]:
    """One text per finding: a fault lists several after '- ' lines."""
    out = list(warned)
    if fault is not None:
        out += fault.split("\n- ")[1:] if "problems found:" in fault else [fault]
    return out


CLASS = {"race": r"data race (between threadgroups )?\(", "lockstep": r"relies on SIMD-group lockstep \(",
         "uninit": r"uninitialised read of threadgroup memory", "barrier": r"divergent barrier",
         "bounds": r"invalid memory access at address 0x[0-9a-f]+, (past the end|before the start) of"}


def marks(reason):
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name, marks=marks(c.bug_xfail)) for c in CASES])
def test_the_bug_is_found_with_its_class_and_lines(libs, c):
    args, launch = c.inputs(np.random.default_rng(7))
    fault, warned = run(libs[0], c, args, {**launch, **c.bug_launch}, c.check)
    found = findings(fault, warned)
    lines = [f"zoo_bug.metal:{line_of(c, m)}" for m in (c.first, c.second) if m]
    # Lockstep is a warning and nothing else; every other class stops the call.
    assert (fault is None) == (c.kind == "lockstep"), (fault, warned)
    ok = [f for f in found if re.search(CLASS[c.kind], f) and re.search(c.detail, f)
          and all(re.search(rf"\b{re.escape(l)}\b", f) for l in lines)]
    assert ok, f"no {c.kind} finding naming {lines} and {c.detail!r} among:\n" + "\n".join(found)




@pytest.mark.parametrize("c", [pytest.param(c, id=c.name) for c in CASES if c.kind in ("race", "lockstep", "uninit")])
def test_each_bug_is_reported_once_per_kind_and_pair_of_lines(libs, c):
    args, launch = c.inputs(np.random.default_rng(7))
    found = findings(*run(libs[0], c, args, {**launch, **c.bug_launch}, c.check))
    keys = [(re.match(r"(data race( between threadgroups)?|relies on SIMD-group lockstep|uninitialised read)"
                      r"( \([^)]*\))?", body(f))[0],
             tuple(re.findall(r"zoo_bug\.metal:\d+", body(f)))) for f in found]
    assert found and len(keys) == len(set(keys)), "\n".join(found)


def body(finding: str) -> str:
    """A finding without the "kernel 'k' (file:line): " a fault's or warning's text begins with."""
    return re.sub(r"^kernel '[^']*' \([^)]*\): (\d+ problems found:\n- )?", "", finding)


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name, marks=marks(c.fix_xfail)) for c in CASES])
def test_the_fixed_twin_is_silent_and_right(libs, c):
    args, launch = c.inputs(np.random.default_rng(11))
    fault, warned = run(libs[1], c, args, launch, "all")
    assert fault is None and warned == [], (fault, warned)
    for k, want in c.reference(args).items():
        got = args[k]
        if np.issubdtype(got.dtype, np.integer):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_a_check_true_divergence_between_two_barriers_names_the_first(libs):
    """check=True runs odd_even as SIMT: the lanes left out are named, at the barrier that waits."""
    c = next(c for c in CASES if c.name == "odd_even")
    args, launch = c.inputs(np.random.default_rng(3))
    fault, _ = run(libs[0], c, args, launch, True)
    assert fault and re.search(rf"divergent barrier in threadgroup \(0, 0, 0\): threads 1, 3, 5, .* of SIMD-group 0 "
                               rf".* at zoo_bug.metal:{line_of(c, 'even')}\b", fault), fault


def test_the_zoo_covers_every_class_and_kind_of_memory():
    kinds = {k: sum(c.kind == k for c in CASES) for k in CLASS}
    assert len(CASES) >= 30 and all(n >= 3 for n in kinds.values()), kinds
    bounds = " ".join(c.detail for c in CASES if c.kind == "bounds")
    for memory in ("parameter 'a'", "parameter 'y'", "parameter 'w'", "threadgroup parameter", "threadgroup variable"):
        assert memory in bounds
