"""SIMD-group and quad-group functions, atomics and SIMD-group matrices, against
numpy references.

SIMD-groups are 32 lanes (lane = thread_index_in_threadgroup % 32); threadgroups
of 40 and 38 threads end with a short SIMD-group (8 and 6 lanes, the last quad of
the latter half full), and random lanes return early. Reductions and prefix
operations cover the active lanes: reductions in a pairwise tree over lane positions,
prefix operations in lane order. Where the GPU leaves a result
undefined (a read from an inactive or missing lane), metalkit returns the
caller's own value: those lanes are checked on the CPU backend only.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import build
from simd_order import tree_fold

import ml_dtypes  # a dependency of metalkit's

BF16 = ml_dtypes.bfloat16

# MSL type name -> (numpy element dtype, components in memory, components used)
TYPES = {
    "float": (np.float32, 1, 1), "half": (np.float16, 1, 1), "bfloat": (BF16, 1, 1),
    "int": (np.int32, 1, 1), "uint": (np.uint32, 1, 1), "short": (np.int16, 1, 1),
    "ushort": (np.uint16, 1, 1), "char": (np.int8, 1, 1), "uchar": (np.uint8, 1, 1),
    "long": (np.int64, 1, 1), "ulong": (np.uint64, 1, 1),
    "float4": (np.float32, 4, 4), "float3": (np.float32, 4, 3), "int2": (np.int32, 2, 2),
    "half2": (np.float16, 2, 2), "uchar4": (np.uint8, 4, 4), "long2": (np.int64, 2, 2),
}
SCALAR_TYPES = ["float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong"]
VECTOR_TYPES = ["float4", "float3", "int2", "half2", "uchar4", "long2"]
ALL_TYPES = SCALAR_TYPES + VECTOR_TYPES

# (grid, threadgroup, fraction of lanes that return early)
CONFIGS = [(80, 40, 0.25), (76, 38, 0.3), (64, 64, 0.0), (8, 8, 0.0)]


def is_float(t):
    dt = TYPES[t][0]
    return dt is BF16 or np.issubdtype(dt, np.floating)


def simd_groups(n, tg):
    """Global thread indices of each SIMD-group, lane order."""
    for g0 in range(0, n, tg):
        size = min(tg, n - g0)
        for s0 in range(0, size, 32):
            yield list(range(g0 + s0, g0 + min(size, s0 + 32)))


# ---- reference semantics ----------------------------------------------------

def fold(vals, dtype, op):
    acc = vals[0].copy()
    for v in vals[1:]:
        acc = op(acc, v).astype(dtype)
    return acc


OPS = {
    "sum": lambda a, b: a + b,
    "product": lambda a, b: a * b,
    "min": np.minimum,
    "max": np.maximum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}


def scope_of(lane, quad):
    return (lane & ~3, 4) if quad else (0, 32)


def ref_reduce(kind, a, live, n, tg, quad):
    """simd_/quad_ reductions and prefix operations."""
    shape = a.shape
    a = a.reshape(len(a), -1)  # rows: numpy arrays wrap integers without warnings
    out = a.copy()
    prefix = kind.startswith("prefix_")
    op = OPS[kind.split("_")[-1]]
    for grp in simd_groups(n, tg):
        for lane, g in enumerate(grp):
            if not live[g]:
                continue
            base, width = scope_of(lane, quad)
            lanes = [l for l in range(base, min(base + width, len(grp))) if live[grp[l]]]
            if prefix:
                lanes = [l for l in lanes if (l <= lane if "inclusive" in kind else l < lane)]
            if lanes and not prefix:  # reductions: a pairwise tree over the scope's positions
                vals = [a[grp[l]] if l in lanes else None for l in range(base, base + width)]
                out[g] = tree_fold(vals, op, lambda v: v.astype(a.dtype))
            elif lanes:
                out[g] = fold([a[grp[l]] for l in lanes], a.dtype, op)
            else:  # exclusive prefix in the first active lane
                out[g] = 0 if "sum" in kind else 1
    return out.reshape(shape)


def move_src(kind, lane, arg, width):
    """Position in the scope the lane reads, or None for 'keeps its own value (defined)'."""
    p = lane % width
    if kind in ("shuffle", "broadcast"):
        return arg
    if kind == "shuffle_xor":
        return p ^ arg
    if kind == "shuffle_up":
        return p - arg if arg <= p else None
    if kind == "shuffle_down":
        return p + arg if p + arg < width else None
    if kind == "shuffle_rotate_up":
        return (p - arg) % width
    if kind == "shuffle_rotate_down":
        return (p + arg) % width
    raise AssertionError(kind)


def ref_move(kind, a, live, n, tg, quad, args):
    """Returns (expected, defined): defined is False where the GPU result is undefined."""
    out, defined = a.copy(), np.ones(len(a), bool)
    for grp in simd_groups(n, tg):
        for lane, g in enumerate(grp):
            if not live[g]:
                continue
            base, width = scope_of(lane, quad)
            if kind == "broadcast_first":
                src = min(l for l in range(base, min(base + width, len(grp))) if live[grp[l]])
                out[g] = a[grp[src]]
                continue
            pos = move_src(kind, lane, int(args[g]), width)
            if pos is None:
                continue
            src = base + pos
            if pos < width and src < len(grp) and live[grp[src]]:
                out[g] = a[grp[src]]
            else:
                defined[g] = False
    return out, defined


def ref_fill(up, a, f, live, n, tg, quad, delta, modulo):
    out, defined = a.copy(), np.ones(len(a), bool)
    for grp in simd_groups(n, tg):
        for lane, g in enumerate(grp):
            if not live[g]:
                continue
            base, width = scope_of(lane, quad)
            m = modulo or width
            j = (lane - base) % m
            vbase = lane - j
            if up:
                from_fill, src = j < delta, (j - delta) % m
            else:
                from_fill, src = j + delta >= m, (j + delta) % m
            s = vbase + src
            if s < len(grp) and live[grp[s]]:
                out[g] = (f if from_fill else a)[grp[s]]
            else:
                defined[g] = False
    return out, defined


# ---- kernels ----------------------------------------------------------------

REDUCTIONS = ["sum", "product", "min", "max", "and", "or", "xor"]
PREFIXES = ["prefix_inclusive_sum", "prefix_inclusive_product", "prefix_exclusive_sum", "prefix_exclusive_product"]
MOVES = ["shuffle", "broadcast", "shuffle_xor", "shuffle_up", "shuffle_down", "shuffle_rotate_up",
         "shuffle_rotate_down", "broadcast_first"]


def kernel_src(t):
    integral = not is_float(t)
    out = []
    for scope in ("simd", "quad"):
        for kind in REDUCTIONS + PREFIXES + ["broadcast_first"]:
            if kind in ("and", "or", "xor") and not integral:
                continue
            out.append(f"""
kernel void {scope}_{kind}(device const {t}* a [[buffer(0)]], device {t}* o [[buffer(1)]],
                 device const uint* live [[buffer(2)]], uint i [[thread_position_in_grid]]) {{
    if (live[i] == 0) return;
    o[i] = {scope}_{kind}(a[i]);
}}""")
        for kind in MOVES[:-1]:
            out.append(f"""
kernel void {scope}_{kind}(device const {t}* a [[buffer(0)]], device {t}* o [[buffer(1)]],
                 device const uint* live [[buffer(2)]], device const ushort* arg [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) {{
    if (live[i] == 0) return;
    o[i] = {scope}_{kind}(a[i], arg[i]);
}}""")
        for d in ("up", "down"):
            out.append(f"""
kernel void {scope}_fill_{d}(device const {t}* a [[buffer(0)]], device const {t}* f [[buffer(1)]],
                 device {t}* o [[buffer(2)]], device const uint* live [[buffer(3)]],
                 constant ushort& delta [[buffer(4)]], constant ushort& modulo [[buffer(5)]],
                 uint i [[thread_position_in_grid]]) {{
    if (live[i] == 0) return;
    o[i] = modulo == 0 ? {scope}_shuffle_and_fill_{d}(a[i], f[i], delta)
                       : {scope}_shuffle_and_fill_{d}(a[i], f[i], delta, modulo);
}}""")
    return "\n".join(out)


@functools.lru_cache(maxsize=None)
def lib_for(t, device):
    return build(kernel_src(t))


def random_data(t, n, rng, kind=""):
    dt, comps, _ = TYPES[t]
    shape = (n, comps) if comps > 1 else (n,)
    if is_float(t):
        # products stay in range: values near 1 (32 of them multiply to within e^+-7)
        x = rng.uniform(0.8, 1.25, shape) if "product" in kind else rng.uniform(-4, 4, shape)
        if t in ("half", "half2", "bfloat"):
            x = np.round(x * 8) / 8 if "product" not in kind else x
        return x.astype(np.float32).astype(dt)
    info = np.iinfo(dt)
    if "product" in kind:
        return rng.integers(-3 if info.min < 0 else 0, 4, shape).astype(dt)
    return rng.integers(info.min, int(info.max) + 1, shape, dtype=dt)


def live_mask(n, frac, rng):
    return (rng.random(n) >= frac).astype(np.uint32)


def check(device, t, got, want, live, defined=None, kind=""):
    mask = live.astype(bool)
    if defined is not None and device != "cpu":
        mask &= defined
    comps_used = TYPES[t][2]
    if TYPES[t][1] > 1:
        got, want = got[:, :comps_used], want[:, :comps_used]
    got, want = got[mask], want[mask]
    if is_float(t):
        g, w = got.astype(np.float64), want.astype(np.float64)
        if device == "cpu":  # same lane order and element type: bit-exact
            np.testing.assert_array_equal(g, w, err_msg=kind)
        else:  # the GPU may sum in another order
            tol = 1e-5 if TYPES[t][0] == np.float32 else 2e-2
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * 32, err_msg=kind)
    else:
        np.testing.assert_array_equal(got, want, err_msg=kind)


# ---- SIMD-group and quad-group tests -------------------------------------

@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("quad", [False, True], ids=["simd", "quad"])
def test_reductions_and_prefix(device, rng, t, quad):
    lib = lib_for(t, device)
    scope = "quad" if quad else "simd"
    for kind in REDUCTIONS + PREFIXES:
        if kind in ("and", "or", "xor") and is_float(t):
            continue
        for n, tg, frac in CONFIGS:
            a = random_data(t, n, rng, kind)
            live = live_mask(n, frac, rng)
            o = np.zeros_like(a)
            lib[f"{scope}_{kind}"](a, o, live, grid=n, threadgroup=tg)
            check(device, t, o, ref_reduce(kind, a, live, n, tg, quad), live, kind=f"{scope}_{kind} tg={tg}")


MOVE_ARGS = {
    "shuffle": None,  # per-lane random
    "broadcast": [0, 5, 31],
    "shuffle_xor": [1, 3, 16, 31],
    "shuffle_up": [0, 1, 5, 16],
    "shuffle_down": [1, 3, 16, 31],
    "shuffle_rotate_up": [1, 7, 31],
    "shuffle_rotate_down": [1, 9, 30],
}
QUAD_MOVE_ARGS = {
    "shuffle": None, "broadcast": [0, 2, 3], "shuffle_xor": [1, 2, 3], "shuffle_up": [0, 1, 3],
    "shuffle_down": [1, 2, 3], "shuffle_rotate_up": [1, 3], "shuffle_rotate_down": [1, 2],
}


@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("quad", [False, True], ids=["simd", "quad"])
def test_shuffles_and_broadcasts(device, rng, t, quad):
    lib = lib_for(t, device)
    scope, width = ("quad", 4) if quad else ("simd", 32)
    table = QUAD_MOVE_ARGS if quad else MOVE_ARGS
    for kind in MOVES:
        for n, tg, frac in CONFIGS:
            a = random_data(t, n, rng)
            live = live_mask(n, frac, rng)
            o = np.zeros_like(a)
            if kind == "broadcast_first":
                lib[f"{scope}_{kind}"](a, o, live, grid=n, threadgroup=tg)
                want, defined = ref_move(kind, a, live, n, tg, quad, None)
                check(device, t, o, want, live, defined, kind=f"{scope}_{kind}")
                continue
            values = table[kind]
            for v in values if values is not None else [None]:
                args = (rng.integers(0, width, n) if v is None else np.full(n, v)).astype(np.uint16)
                lib[f"{scope}_{kind}"](a, o, live, args, grid=n, threadgroup=tg)
                want, defined = ref_move(kind, a, live, n, tg, quad, args)
                check(device, t, o, want, live, defined, kind=f"{scope}_{kind}({v}) tg={tg}")


@pytest.mark.parametrize("t", ["float", "int", "half", "uchar", "float4", "long2", "bfloat"])
@pytest.mark.parametrize("quad", [False, True], ids=["simd", "quad"])
def test_shuffle_and_fill(device, rng, t, quad):
    lib = lib_for(t, device)
    scope = "quad" if quad else "simd"
    cases = ([(1, 0), (3, 0), (1, 2), (1, 4), (3, 4), (2, 0)] if quad
             else [(1, 0), (5, 0), (31, 0), (1, 4), (3, 8), (5, 16), (1, 2), (7, 32)])
    for up in (True, False):
        for delta, modulo in cases:
            for n, tg, frac in CONFIGS:
                a = random_data(t, n, rng)
                f = random_data(t, n, rng)
                live = live_mask(n, frac, rng)
                o = np.zeros_like(a)
                lib[f"{scope}_fill_{'up' if up else 'down'}"](a, f, o, live, delta, modulo, grid=n, threadgroup=tg)
                want, defined = ref_fill(up, a, f, live, n, tg, quad, delta, modulo)
                check(device, t, o, want, live, defined,
                      kind=f"{scope}_shuffle_and_fill_{'up' if up else 'down'}({delta}, {modulo}) tg={tg}")


def test_shuffle_down_reduction_idiom(device, rng):
    """The classic tree reduction: lane 0 ends with the SIMD-group's sum."""
    lib = build("""
    kernel void k(device const float* a [[buffer(0)]], device float* o [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                  uint nsg [[simdgroups_per_threadgroup]]) {
        float v = a[i];
        for (ushort d = 16; d > 0; d /= 2) v += simd_shuffle_down(v, d);
        if (lane == 0) o[g * nsg + sg] = v;
    }""")
    a = rng.integers(-50, 50, 4096).astype(np.float32)
    o = np.zeros(4096 // 32, np.float32)
    lib.k(a, o, grid=4096, threadgroup=256)
    np.testing.assert_array_equal(o, a.reshape(-1, 32).sum(1))


VOTES = """
kernel void votes(device const uint* a [[buffer(0)]], device uint* o [[buffer(1)]],
                  device const uint* live [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (live[i] == 0) return;
    bool p = a[i] != 0;
    simd_vote v = simd_ballot(p);
    simd_vote::vote_t bits = static_cast<simd_vote::vote_t>(v);
    quad_vote q = quad_ballot(p);
    device uint* r = o + i * 12;
    r[0] = uint(bits);
    r[1] = uint(bits >> 32);
    r[2] = simd_all(p);
    r[3] = simd_any(p);
    r[4] = uint(static_cast<simd_vote::vote_t>(simd_active_threads_mask()));
    r[5] = simd_is_first();
    r[6] = uint(static_cast<quad_vote::vote_t>(q));
    r[7] = quad_all(p) | (quad_any(p) << 1) | (quad_is_first() << 2);
    r[8] = uint(static_cast<quad_vote::vote_t>(quad_active_threads_mask()));
    r[9] = v.all() | (v.any() << 1) | (q.all() << 2) | (q.any() << 3);
    r[10] = simd_is_helper_thread() | quad_is_helper_thread();
    ushort u = p;
    r[11] = uint(simd_shuffle(u, ushort(i * 7 % 32))) | (uint(simd_broadcast_first(u)) << 1) | (uint(quad_shuffle(u, 2)) << 2);
}
"""


@pytest.mark.parametrize("n,tg,frac", CONFIGS + [(96, 96, 0.9)])
def test_votes(device, rng, n, tg, frac):
    lib = build(VOTES)
    a = (rng.random(n) < 0.5).astype(np.uint32)
    live = live_mask(n, frac, rng)
    if frac == 0.0:
        a[:32] = 1  # a SIMD-group where every lane votes true
    o = np.zeros(n * 12, np.uint32)
    lib.votes(a, o, live, grid=n, threadgroup=tg)
    o = o.reshape(n, 12)
    for grp in simd_groups(n, tg):
        act = [l for l, g in enumerate(grp) if live[g]]
        if not act:
            continue
        ballot = sum(1 << l for l in act if a[grp[l]])
        amask = sum(1 << l for l in act)
        for lane in act:
            g = grp[lane]
            r = o[g]
            qb = lane & ~3
            qact = [l for l in act if qb <= l < qb + 4]
            qbits = sum(1 << (l - qb) for l in qact if a[grp[l]])
            qmask = sum(1 << (l - qb) for l in qact)
            p_all, p_any = ballot == amask, ballot != 0
            q_all, q_any = qbits == qmask, qbits != 0
            assert r[0] == ballot and r[1] == 0, (g, r[0], ballot)
            assert r[2] == p_all and r[3] == p_any
            assert r[4] == amask
            assert r[5] == (lane == act[0])
            assert r[6] == qbits
            assert r[7] == q_all | (q_any << 1) | ((lane == qact[0]) << 2)
            assert r[8] == qmask
            if device == "cpu" or len(act) == len(grp) == 32:
                assert r[9] == p_all | (p_any << 1) | (q_all << 2) | (q_any << 3)
            assert r[10] == 0
            src = g * 7 % 32
            sh = a[grp[src]] if src < len(grp) and live[grp[src]] else a[g]
            qs = qb + 2
            qsh = a[grp[qs]] if qs < len(grp) and live[grp[qs]] else a[g]
            want11 = int(sh != 0) | (int(a[grp[act[0]]] != 0) << 1) | (int(qsh != 0) << 2)
            if device == "cpu":
                assert r[11] == want11
            else:
                assert (r[11] & 2) == (want11 & 2)


def test_bool_shuffles_are_refused_as_in_msl(device):
    import metalkit as mk
    with pytest.raises(mk.CompileError, match="no bool form" if device == "cpu" else ""):
        build("""
        kernel void k(device uint* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
            o[i] = simd_shuffle(i % 2 == 0, ushort(1));
        }""")


def test_simd_vote_conversions(device):
    lib = build("""
    kernel void k(device ulong* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        simd_vote v(0xF0F0ul);
        o[0] = static_cast<simd_vote::vote_t>(v);
        o[1] = v.any();
        o[2] = simd_vote(0xFFFFFFFFul).all();
        o[3] = simd_vote().any();
        quad_vote q(ushort(5));
        o[4] = static_cast<quad_vote::vote_t>(q);
        o[5] = q.all() | (quad_vote(ushort(15)).all() << 1);
    }""")
    o = np.zeros(6, np.uint64)
    lib.k(o, grid=1)
    assert o.tolist() == [0xF0F0, 1, 1, 0, 5, 2]


def test_simd_functions_in_a_loop_and_helper(device, rng):
    """Calls reached through a helper function and a loop: each call site meets on its own."""
    lib = build("""
    float warp_sum(float x) { return simd_sum(x); }
    kernel void k(device const float* a [[buffer(0)]], device float* o [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
        float acc = 0;
        for (int r = 0; r < 4; ++r) acc += warp_sum(a[i] * float(r + 1));
        float m = simd_max(a[i]);
        o[i] = acc + m + simd_prefix_exclusive_sum(1.0f) * 1000.0f;
    }""")
    a = rng.integers(-20, 20, 256).astype(np.float32)
    o = np.zeros_like(a)
    lib.k(a, o, grid=256, threadgroup=128)
    s = a.reshape(-1, 32)
    want = (s.sum(1, keepdims=True) * 10 + s.max(1, keepdims=True) + np.arange(32) * 1000.0).reshape(-1)
    np.testing.assert_array_equal(o, want.astype(np.float32))


def test_divergent_branches_meet_separately(device, rng):
    """Each branch's simd_sum covers the lanes that took that branch."""
    lib = build("""
    kernel void k(device const float* a [[buffer(0)]], device float* o [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
        float x;
        if (lane % 3 == 0) x = simd_sum(a[i]);
        else x = simd_sum(a[i] * 100.0f) + float(simd_prefix_exclusive_sum(1u));
        o[i] = x;
    }""")
    a = rng.integers(-10, 10, 64).astype(np.float32)
    o = np.zeros_like(a)
    lib.k(a, o, grid=64, threadgroup=64)
    lane = np.arange(64) % 32
    first = lane % 3 == 0
    want = np.empty_like(a)
    for s0 in (0, 32):
        sl = slice(s0, s0 + 32)
        f = first[sl]
        want[sl][f] = a[sl][f].sum()
        want[sl][~f] = (a[sl][~f] * 100).sum() + np.arange((~f).sum())
    np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # the GPU's summation order may differ
def test_half_sum_rounds_in_half(device):
    """simd_sum(half) adds in half, rounding after every addition: 2048 plus 31 ones gives 2078
    in metalkit's tree (2048 + 1 rounds back to 2048), where a float32 sum rounds to 2080."""
    lib = build("""
    kernel void k(device const half* a [[buffer(0)]], device half* o [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        o[i] = simd_sum(a[i]);
    }""")
    a = np.ones(32, np.float16)
    a[0] = 2048
    o = np.zeros_like(a)
    lib.k(a, o, grid=32, threadgroup=32)
    want = tree_fold(list(a), lambda x, y: x + y, np.float16)
    assert want == np.float16(2078) and np.float16(a.astype(np.float32).sum()) == np.float16(2080)
    assert (o == want).all()


# ---- atomics --------------------------------------------------------------

def test_histogram_device_atomics(device, rng):
    lib = build("""
    kernel void hist(device const uint* a [[buffer(0)]], device atomic_uint* h [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
        atomic_fetch_add_explicit(&h[a[i]], 1u, memory_order_relaxed);
    }""")
    a = rng.integers(0, 37, 1 << 17).astype(np.uint32)
    h = np.zeros(37, np.uint32)
    lib.hist(a, h, grid=a.size, threadgroup=256)
    np.testing.assert_array_equal(h, np.bincount(a, minlength=37))


def test_histogram_threadgroup_atomics(device, rng):
    lib = build("""
    kernel void hist_param(device const uint* a [[buffer(0)]], device atomic_uint* h [[buffer(1)]],
                           threadgroup atomic_uint* local [[threadgroup(0)]],
                           uint i [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]]) {
        if (l < 64) atomic_store_explicit(&local[l], 0u, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        atomic_fetch_add_explicit(&local[a[i]], 1u, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l < 64) atomic_fetch_add_explicit(&h[l], atomic_load_explicit(&local[l], memory_order_relaxed),
                                              memory_order_relaxed);
    }
    kernel void hist_decl(device const uint* a [[buffer(0)]], device atomic_int* h [[buffer(1)]],
                          uint i [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]]) {
        threadgroup atomic_int local[64];
        if (l < 64) atomic_store_explicit(&local[l], 0, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        atomic_fetch_add_explicit(&local[a[i]], 1, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l < 64) atomic_fetch_add_explicit(&h[l], atomic_load_explicit(&local[l], memory_order_relaxed),
                                              memory_order_relaxed);
    }""")
    a = rng.integers(0, 64, 1 << 16).astype(np.uint32)
    h = np.zeros(64, np.uint32)
    lib.hist_param(a, h, grid=a.size, threadgroup=128, threadgroup_memory={0: 64 * 4})
    np.testing.assert_array_equal(h, np.bincount(a, minlength=64))
    h2 = np.zeros(64, np.int32)
    lib.hist_decl(a, h2, grid=a.size, threadgroup=256)
    np.testing.assert_array_equal(h2, np.bincount(a, minlength=64))


def test_atomic_float_add_and_cas_max(device, rng):
    lib = build("""
    kernel void fadd(device const float* a [[buffer(0)]], device atomic_float* s [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
        atomic_fetch_add_explicit(&s[0], a[i], memory_order_relaxed);
        atomic_fetch_sub_explicit(&s[1], a[i], memory_order_relaxed);
    }
    kernel void fmax_cas(device const float* a [[buffer(0)]], device atomic_float* m [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
        float x = a[i];
        float cur = atomic_load_explicit(m, memory_order_relaxed);
        while (x > cur && !atomic_compare_exchange_weak_explicit(m, &cur, x, memory_order_relaxed,
                                                                 memory_order_relaxed)) {}
    }""")
    # small integers: every summation order gives the exact sum
    a = rng.integers(0, 8, 1 << 16).astype(np.float32)
    s = np.array([0.0, 100.0], np.float32)
    lib.fadd(a, s, grid=a.size, threadgroup=64)
    assert s[0] == a.sum() and s[1] == 100.0 - a.sum()
    b = rng.standard_normal(1 << 16).astype(np.float32)
    m = np.array([-np.inf], np.float32)
    lib.fmax_cas(b, m, grid=b.size, threadgroup=128)
    assert m[0] == b.max()


def test_integer_atomic_functions(device, rng):
    lib = build("""
    kernel void k(device const int* a [[buffer(0)]], device atomic_int* r [[buffer(1)]],
                  device atomic_uint* u [[buffer(2)]], device int* old [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
        int x = a[i];
        atomic_fetch_max_explicit(&r[0], x, memory_order_relaxed);
        atomic_fetch_min_explicit(&r[1], x, memory_order_relaxed);
        atomic_fetch_sub_explicit(&r[2], x, memory_order_relaxed);
        atomic_fetch_and_explicit(&u[0], uint(x) | 0xFFFF0000u, memory_order_relaxed);
        atomic_fetch_or_explicit(&u[1], 1u << (uint(x) & 31u), memory_order_relaxed);
        atomic_fetch_xor_explicit(&u[2], uint(x), memory_order_relaxed);
        old[i] = atomic_exchange_explicit(&r[3], int(i) + 1, memory_order_relaxed);
        atomic_fetch_max_explicit(&u[3], uint(x), memory_order_relaxed);
    }""")
    n = 1 << 14
    a = rng.integers(-(1 << 20), 1 << 20, n).astype(np.int32)
    r = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max, 7, 0], np.int32)
    u = np.array([0xFFFFFFFF, 0, 0, 0], np.uint32)
    old = np.zeros(n, np.int32)
    lib.k(a, r, u, old, grid=n, threadgroup=64)
    au = a.view(np.uint32)
    assert r[0] == a.max() and r[1] == a.min()
    assert r[2] == np.array(7 - a.astype(np.int64).sum()).astype(np.int32)
    assert u[0] == np.bitwise_and.reduce(au | np.uint32(0xFFFF0000))
    assert u[1] == np.bitwise_or.reduce(np.uint32(1) << (au & np.uint32(31)))
    assert u[2] == np.bitwise_xor.reduce(au)
    assert u[3] == au.max()
    # exchange: the old values and the final one are 0 and every i + 1, each once
    assert sorted(old.tolist() + [int(r[3])]) == list(range(n + 1))


def test_compare_exchange_claims_each_slot_once(device, rng):
    lib = build("""
    kernel void claim(device const uint* target [[buffer(0)]], device atomic_uint* slots [[buffer(1)]],
                      device uint* won [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        uint expected = 0;
        bool ok = false;
        while (true) {
            ok = atomic_compare_exchange_weak_explicit(&slots[target[i]], &expected, i + 1,
                                                       memory_order_relaxed, memory_order_relaxed);
            if (ok || expected != 0) break;   // a weak exchange may fail spuriously
        }
        won[i] = ok;
    }""")
    n = 1 << 15
    target = rng.integers(0, 1000, n).astype(np.uint32)
    slots = np.zeros(1000, np.uint32)
    won = np.zeros(n, np.uint32)
    lib.claim(target, slots, won, grid=n, threadgroup=256)
    used = np.unique(target)
    assert won.sum() == used.size
    winners = np.nonzero(won)[0]
    np.testing.assert_array_equal(np.sort(target[winners]), used)
    np.testing.assert_array_equal(slots[target[winners]], winners + 1)
    assert (slots[np.setdiff1d(np.arange(1000), used)] == 0).all()


def test_atomic_fence_and_types(device):
    lib = build("""
    kernel void k(device atomic_uint* c [[buffer(0)]], device uint* o [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
        atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
        atomic_thread_fence(mem_flags::mem_threadgroup, memory_order_relaxed);
        uint v = atomic_fetch_add_explicit(c, 2u, memory_order_relaxed);
        o[i] = v % 2;
    }""")
    c = np.zeros(1, np.uint32)
    o = np.ones(100, np.uint32)
    lib.k(c, o, grid=100, threadgroup=10)
    assert c[0] == 200 and (o == 0).all()


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # 64-bit atomics need specific Apple GPU families
def test_atomic_ulong_and_bool(device):
    lib = build("""
    kernel void k(device atomic_ulong* m [[buffer(0)]], device const ulong* a [[buffer(1)]],
                  device uint* flag [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        atomic_max_explicit(&m[0], a[i], memory_order_relaxed);
        atomic_min_explicit(&m[1], a[i], memory_order_relaxed);
        threadgroup atomic_bool seen;
        if (i == 0) atomic_store_explicit(&seen, true, memory_order_relaxed);
        flag[0] = 1;
        if (i == 0) flag[1] = atomic_exchange_explicit(&seen, false, memory_order_relaxed) &&
                              !atomic_load_explicit(&seen, memory_order_relaxed);
    }""")
    a = (np.arange(1000, dtype=np.uint64) * np.uint64(0x100000001)) ^ np.uint64(0xABCDEF)
    m = np.array([0, np.iinfo(np.uint64).max], np.uint64)
    flag = np.zeros(2, np.uint32)
    lib.k(m, a, flag, grid=a.size, threadgroup=50)
    assert m[0] == a.max() and m[1] == a.min() and flag.tolist() == [1, 1]


# ---- SIMD-group matrices ----------------------------------------------------

def layout():
    l = np.arange(32)
    row = (l // 16) * 4 + (l // 2) % 4
    col = ((l // 8) % 2) * 4 + (l % 2) * 2
    return row, col


MATRIX_DTYPES = {"float": np.float32, "half": np.float16, "bfloat": BF16}


@pytest.mark.parametrize("t", ["float", "half", "bfloat"])
def test_simdgroup_multiply_8x8(device, rng, t):
    dt = MATRIX_DTYPES[t]
    lib = build(f"""
    kernel void mma(device const {t}* a [[buffer(0)]], device const {t}* b [[buffer(1)]],
                    device const {t}* c [[buffer(2)]], device {t}* d [[buffer(3)]], device {t}* e [[buffer(4)]]) {{
        simdgroup_matrix<{t}, 8, 8> A, B, C, D;
        simdgroup_load(A, a);
        simdgroup_load(B, b);
        simdgroup_load(C, c);
        simdgroup_multiply_accumulate(D, A, B, C);
        simdgroup_store(D, d);
        simdgroup_multiply(D, A, B);
        simdgroup_store(D, e);
    }}""")
    # values on a coarse grid: products and sums of 8 are exact in every type
    a, b, c = (rng.integers(-4, 5, (8, 8)).astype(np.float32) / 4 for _ in range(3))
    d = np.zeros((8, 8), dt)
    e = np.zeros((8, 8), dt)
    lib.mma(a.astype(dt), b.astype(dt), c.astype(dt), d, e, grid=32, threadgroup=32)
    np.testing.assert_array_equal(d.astype(np.float32), a @ b + c)
    np.testing.assert_array_equal(e.astype(np.float32), a @ b)


def test_simdgroup_load_store_options(device, rng):
    lib = build("""
    kernel void k(device const float* src [[buffer(0)]], device float* dst [[buffer(1)]],
                  device float* dst_t [[buffer(2)]]) {
        simdgroup_float8x8 m;
        simdgroup_load(m, src, 20, ulong2(3, 5), false);   // rows 5..12, columns 3..10 of a 20-wide array
        simdgroup_store(m, dst, 16, ulong2(8, 2));          // rows 2..9, columns 8..15 of a 16-wide array
        simdgroup_float8x8 t;
        simdgroup_load(t, src, 20, ulong2(3, 5), true);
        simdgroup_store(t, dst_t, 8);
    }""")
    src = rng.standard_normal((16, 20)).astype(np.float32)
    dst = np.zeros((12, 16), np.float32)
    dst_t = np.zeros((8, 8), np.float32)
    lib.k(src, dst, dst_t, grid=32, threadgroup=32)
    want = np.zeros_like(dst)
    want[2:10, 8:16] = src[5:13, 3:11]
    np.testing.assert_array_equal(dst, want)
    np.testing.assert_array_equal(dst_t, src[5:13, 3:11].T)


def test_simdgroup_tiled_16x16_product(device, rng):
    """Four SIMD-groups each own an 8x8 tile of C = A @ B, loading tiles from threadgroup memory."""
    lib = build("""
    kernel void matmul(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                       device float* C [[buffer(2)]], uint l [[thread_index_in_threadgroup]],
                       uint sg [[simdgroup_index_in_threadgroup]]) {
        threadgroup float ta[256];
        threadgroup float tb[256];
        for (uint k = l; k < 256; k += 128) { ta[k] = A[k]; tb[k] = B[k]; }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint tr = sg / 2, tc = sg % 2;
        simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        for (uint kt = 0; kt < 2; ++kt) {
            simdgroup_float8x8 a, b;
            simdgroup_load(a, ta, 16, ulong2(kt * 8, tr * 8));
            simdgroup_load(b, tb, 16, ulong2(tc * 8, kt * 8));
            simdgroup_multiply_accumulate(acc, a, b, acc);
        }
        simdgroup_store(acc, C, 16, ulong2(tc * 8, tr * 8));
    }""")
    a = rng.integers(-8, 9, (16, 16)).astype(np.float32)
    b = rng.integers(-8, 9, (16, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    lib.matmul(a, b, c, grid=128, threadgroup=128)
    np.testing.assert_array_equal(c, a @ b)


def test_simdgroup_mixed_precision(device, rng):
    """A half matrix times a float one, accumulated into float (as llama.cpp does)."""
    lib = build("""
    kernel void k(device const half* a [[buffer(0)]], device const float* b [[buffer(1)]],
                  device float* c [[buffer(2)]]) {
        simdgroup_half8x8 A;
        simdgroup_float8x8 B;
        simdgroup_float8x8 C = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
        simdgroup_load(A, a);
        simdgroup_load(B, b);
        simdgroup_multiply_accumulate(C, B, A, C);
        simdgroup_store(C, c);
    }""")
    a = rng.integers(-4, 5, (8, 8)).astype(np.float16)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.zeros((8, 8), np.float32)
    lib.k(a, b, c, grid=32, threadgroup=32)
    np.testing.assert_allclose(c, b.astype(np.float64) @ a.astype(np.float64) + 1, rtol=1e-5, atol=1e-5)


def test_simdgroup_thread_elements_layout(device, rng):
    lib = build("""
    kernel void read_layout(device const float* m [[buffer(0)]], device float* o [[buffer(1)]],
                            uint lane [[thread_index_in_simdgroup]]) {
        simdgroup_float8x8 M;
        simdgroup_load(M, m);
        float2 e = M.thread_elements();
        o[lane * 2] = e[0];
        o[lane * 2 + 1] = e[1];
    }
    kernel void write_layout(device float* o [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
        simdgroup_float8x8 M = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        M.thread_elements()[0] = float(lane * 2);
        M.thread_elements()[1] = float(lane * 2 + 1);
        simdgroup_store(M, o);
    }
    // Fragments set through thread_elements (as MLX does), then multiplied.
    kernel void frag_mma(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                         device float* o [[buffer(2)]], uint lane [[thread_index_in_simdgroup]]) {
        uint r = (lane / 16) * 4 + (lane / 2) % 4, c = ((lane / 8) % 2) * 4 + (lane % 2) * 2;
        simdgroup_float8x8 A, B, D;
        A.thread_elements() = float2(a[r * 8 + c], a[r * 8 + c + 1]);
        reinterpret_cast<thread float2&>(B.thread_elements()) = float2(b[r * 8 + c], b[r * 8 + c + 1]);
        simdgroup_multiply(D, A, B);
        float2 d = D.thread_elements();
        o[r * 8 + c] = d[0];
        o[r * 8 + c + 1] = d[1];
    }
    kernel void diag(device float* o [[buffer(0)]]) {
        simdgroup_float8x8 I(2.0f);
        simdgroup_store(I, o);
    }""")
    row, col = layout()
    m = np.arange(64, dtype=np.float32).reshape(8, 8)
    o = np.zeros(64, np.float32)
    lib.read_layout(m, o, grid=32, threadgroup=32)
    o = o.reshape(32, 2)
    np.testing.assert_array_equal(o[:, 0], m[row, col])
    np.testing.assert_array_equal(o[:, 1], m[row, col + 1])

    w = np.full((8, 8), -1, np.float32)
    lib.write_layout(w, grid=32, threadgroup=32)
    want = np.zeros((8, 8), np.float32)
    want[row, col] = np.arange(32) * 2
    want[row, col + 1] = np.arange(32) * 2 + 1
    np.testing.assert_array_equal(w, want)

    a = rng.integers(-4, 5, (8, 8)).astype(np.float32)
    b = rng.integers(-4, 5, (8, 8)).astype(np.float32)
    o = np.zeros((8, 8), np.float32)
    lib.frag_mma(a, b, o, grid=32, threadgroup=32)
    np.testing.assert_array_equal(o, a @ b)

    o = np.full((8, 8), 5, np.float32)
    lib.diag(o, grid=32, threadgroup=32)
    np.testing.assert_array_equal(o, np.eye(8, dtype=np.float32) * 2)


def test_simdgroup_matrix_in_several_simdgroups(device, rng):
    """Each SIMD-group of a 96-thread group multiplies its own pair of matrices."""
    lib = build("""
    kernel void k(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                  device float* c [[buffer(2)]], uint sg [[simdgroup_index_in_threadgroup]],
                  uint g [[threadgroup_position_in_grid]], uint nsg [[simdgroups_per_threadgroup]]) {
        uint m = g * nsg + sg;
        simdgroup_float8x8 A, B, C;
        simdgroup_load(A, a + m * 64);
        simdgroup_load(B, b + m * 64);
        simdgroup_multiply(C, A, B);
        simdgroup_store(C, c + m * 64);
    }""")
    k = 12
    a = rng.integers(-4, 5, (k, 8, 8)).astype(np.float32)
    b = rng.integers(-4, 5, (k, 8, 8)).astype(np.float32)
    c = np.zeros((k, 8, 8), np.float32)
    lib.k(a, b, c, grid=k * 32, threadgroup=96)
    np.testing.assert_array_equal(c, a @ b)


def test_simdgroup_matrix_product_operator(device, rng):
    # `a * b` on two SIMD-group matrices is their matrix product, like simdgroup_multiply
    lib = build("""
    kernel void chain(device const float* x [[buffer(0)]], device const float* y [[buffer(1)]],
                      device float* out [[buffer(2)]]) {
        simdgroup_float8x8 X, Y;
        simdgroup_load(X, x);
        simdgroup_load(Y, y);
        simdgroup_float8x8 Z = (X * Y) * X;
        simdgroup_store(Z, out);
    }""")
    x, y = (rng.integers(-3, 4, (8, 8)).astype(np.float32) / 2 for _ in range(2))
    out = np.zeros((8, 8), np.float32)
    lib.chain(x, y, out, grid=32, threadgroup=32)
    np.testing.assert_array_equal(out, (x @ y) @ x)


def test_calls_on_one_line_in_divergent_branches_meet_separately(device):
    lib = build("""
    kernel void k(device float* x [[buffer(0)]], uint lane [[thread_index_in_simdgroup]], uint i [[thread_position_in_grid]]) {
        float v = float(lane);
        x[i] = lane < 16 ? simd_sum(v) : simd_max(v);
    }""")
    x = np.zeros(32, np.float32)
    lib.k(x, threadgroup=32)
    assert x[:16].tolist() == [float(sum(range(16)))] * 16  # the low half sums only itself
    assert x[16:].tolist() == [31.0] * 16
