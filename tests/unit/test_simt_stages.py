"""Each stage of the SIMT transform on small kernels, against golden outputs.

Every case is a few statements run through the front end. What each stage of the
transform made of it is printed (the parse tree, the names resolved, each
statement's effects, uniform and per-lane locals, the pieces, the emitted body) and
compared with tests/unit/golden/<case>.txt. After an intended change of output,
regenerate the goldens and review their diff:

    METALKIT_UPDATE_GOLDENS=1 python -m pytest tests/unit
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from metalkit.msl import cache, simt, toolchain
from metalkit.msl.build import Options
from metalkit.msl.simt import syntax as sx

GOLDEN = Path(__file__).parent / "golden"
HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"

CASES = {
    "uniform_and_per_lane_locals": """
kernel void k(device float* out, constant uint& n, uint tid [[thread_position_in_grid]],
              uint lane [[thread_index_in_simdgroup]]) {
    uint half_n = n / 2;
    float x = out[tid] * 2.0f;
    out[tid] = x + float(half_n) + simd_shuffle(x, lane ^ 1);
}""",
    "hoisted_simd_sum": """
kernel void k(device float* out, uint tid [[thread_position_in_grid]]) {
    float v = out[tid];
    float total = simd_sum(v);
    float one = simd_sum(1.0f);
    out[tid] = total / one;
}""",
    "masked_if_and_loop": """
kernel void k(device float* out, uint tid [[thread_position_in_grid]]) {
    float acc = 0.0f;
    if (tid % 2 == 0) {
        acc = simd_sum(1.0f);
    }
    for (uint i = 0; i < tid % 4; ++i) {
        acc += simd_max(acc);
    }
    out[tid] = acc;
}""",
    "barrier": """
kernel void k(device float* out, threadgroup float* tmp, uint tid [[thread_position_in_grid]],
              uint l [[thread_position_in_threadgroup]]) {
    tmp[l] = out[tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = tmp[l ^ 1];
}""",
    "split_at_barriers": """
kernel void k(device float* out, constant uint& n, uint tid [[thread_position_in_grid]],
              uint l [[thread_index_in_threadgroup]]) {
    threadgroup float t[64];
    uint half_n = n / 2;
    float x = out[tid];
    if (tid >= n) return;
    t[l] = x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x += t[l ^ 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = x + float(half_n);
}""",
    "helper_twin": """
float total(float v, float scale) {
    float s = simd_sum(v);
    return s * scale;
}
kernel void k(device float* out, uint tid [[thread_position_in_grid]]) {
    out[tid] = total(out[tid], 0.5f);
}""",
    "return_in_a_loop": """
kernel void k(device float* out, uint tid [[thread_position_in_grid]]) {
    for (uint i = 0; i < 4; ++i) {
        if (out[tid] > 1.0f) {
            return;
        }
        out[tid] = simd_sum(out[tid]) + float(i);
    }
}""",
    "uniform_loop_of_lane_statements": """
kernel void k(device float* out, uint2 gid [[thread_position_in_grid]], uint2 tid [[thread_position_in_threadgroup]]) {
    threadgroup float tile[16][16];
    tile[tid.y][tid.x] = out[gid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float acc = 0.0f;
    for (uint k = 0; k < 16; ++k) {
        acc += tile[tid.y][k] * tile[k][tid.x];
    }
    out[gid.x] = acc;
}""",
    "threadgroup_read_write": """
kernel void k(device float* out, uint tid [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]]) {
    threadgroup float buf[64];
    buf[l] = out[tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    buf[l + 1] = buf[l];
    out[tid] = buf[l];
}""",
    "one_lane_if": """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_position_in_threadgroup]],
              uint g [[threadgroup_position_in_grid]]) {
    tmp[l] = out[g];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) out[g] = tmp[0];
}""",
    "masked_one_lane_if": """
kernel void k(device const float* x, device float* out, uint i [[thread_position_in_grid]],
              uint g [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
              uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float part[32];
    float s = simd_sum(x[i]);
    if (lane == 0) part[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        s = simd_sum(part[lane]);
        if (lane == 0) out[g] = s;
    }
}""",
}


def _run(src: str):
    """The front end over src; returns the unit and the SIMT plans it made (kernels, helpers)."""
    plans = []

    def recording(cls):
        class Recording(cls):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                plans.append(self)
        return Recording

    from metalkit.msl import build
    tc = toolchain.find()
    opts = Options.of(HEADER + src, "case.metal")
    mp = pytest.MonkeyPatch()
    mp.setattr(simt, "_KernelPlan", recording(simt._KernelPlan))
    mp.setattr(simt, "_HelperPlan", recording(simt._HelperPlan))
    try:
        with cache.workspace() as tmp:
            result, _ = build._front(tc, opts, opts.key(tc, None), tmp, None, building=True)
    finally:
        mp.undo()
    return result, plans


def _text(toks, a, b, limit=70) -> str:
    t = " ".join(toks[k].text for k in range(a, b + 1))
    return t if len(t) <= limit else t[:limit - 3] + "..."


def _tree(toks, s, depth=0) -> list[str]:
    pad = "  " * depth
    heads = "".join(f" [{_text(toks, h.a, h.b)}]" for h in s.heads())
    if isinstance(s, sx.Block):
        out = [f"{pad}Block"]
    elif s.children():
        out = [f"{pad}{type(s).__name__}{heads}"]
    else:
        out = [f"{pad}{type(s).__name__}: {_text(toks, s.a, s.b)}"]
    for c in s.children():
        out += _tree(toks, c, depth + 1)
    return out


def _vars(vs) -> str:
    return ", ".join(sorted(v.name for v in vs)) or "-"


def _report(result, plans) -> str:
    out = []
    for plan in plans:
        fn, toks = plan.fn, plan.unit.toks
        out.append(f"==== {plan.f.name} ({'kernel' if plan.f.is_kernel else 'helper'})")
        out.append("-- parse tree")
        out += _tree(toks, fn.body)
        out.append("-- names")
        for i in sorted(fn.name_var):
            v = fn.name_var[i]
            out.append(f"{toks[i].line - toks[fn.body.a].line}:{toks[i].col} {toks[i].text} -> {v.kind} {v.name}"
                       f"{' array' if v.array else ''}{' pointer' if v.pointer else ''} space {v.space}")
        out.append("-- effects")
        for s in fn.body.walk():
            if s is fn.body:
                continue
            inf = fn.info[id(s)]
            flags = [f for f in ("impure", "barrier", "simd_barrier", "assign_rw") if getattr(inf, f)]
            hoists = [_text(toks, h.a, h.b, 40) for h in inf.hoists]
            out.append(f"{_text(toks, s.a, s.b, 50)}\n    reads {_vars(inf.reads)}; writes {_vars(inf.writes)}; "
                       f"memory r {sorted(inf.mem_r)} w {sorted(inf.mem_w)}"
                       f"{'; hoists ' + ' | '.join(hoists) if hoists else ''}{'; ' + ' '.join(flags) if flags else ''}")
        out.append("-- uniformity")
        for v in fn.vars:
            out.append(f"{v.name}: {'uniform' if v.uniform else 'per lane'}{', mk::lanes' if v.lanes else ''}")
        loops = [s for s in fn.body.walk() if id(s) in fn.loop_varying]
        out += [f"loop varies per lane: {_text(toks, s.a, s.a + 1)}" for s in loops]
        out.append("-- regions")
        out += _pieces(toks, plan.pieces, 0)
        out.append("-- emitted")
        out.append(plan.emitter.text().replace("; ", ";\n"))
    out.append("==== executions")
    out += [f"{k.host_name}: {k.execution}{f' in {k.regions} regions' if k.regions else ''}" for k in result.kernels]
    return "\n".join(out) + "\n"


def _pieces(toks, pieces, depth) -> list[str]:
    out = []
    for p in pieces:
        s = p.stmts[0]
        what = _text(toks, s.a, s.b, 50) if p.kind not in ("S", "M") else _text(toks, s.a, s.a + 1)
        out.append(f"{'  ' * depth}{p.kind}{' retires' if p.retires else ''}: {what}"
                   f"{f' (+{len(p.stmts) - 1})' if len(p.stmts) > 1 else ''}")
        for body in p.bodies:
            out += _pieces(toks, body, depth + 1)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_stages_match_their_goldens(case):
    result, plans = _run(CASES[case])
    assert plans, "the transform made no plan: the kernel does not run as SIMT"
    got = _report(result, plans)
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("METALKIT_UPDATE_GOLDENS"):
        path.write_text(got)
    assert path.exists(), f"no golden for {case}: run with METALKIT_UPDATE_GOLDENS=1"
    assert got == path.read_text(), f"{case} differs from {path}; if intended, regenerate (see the module docstring)"


# Kernels split at their barriers (simt/fission.py), and kernels that must stay on fibers: the
# number of regions, 0 for none.
SPLITS = {
    "carried locals of every allowed kind": (2, """
template <typename T>
kernel void k(device T* out, threadgroup T* tmp, constant uint& n, uint l [[thread_index_in_threadgroup]],
              uint g [[threadgroup_position_in_grid]]) {
    constexpr uint W = 3;
    uint base = g * n;
    device T* row = out + base;
    threadgroup T* mine = tmp + l;
    float4 v = float4(row[l]);
    float w[W] = {v.x, 2.0f, 3.0f};
    *mine = T(v.x * w[l % W]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    row[l] = *mine + T(base) + T(w[0]) + T(v.y);
}
template [[host_name("k_float")]] kernel void k<float>(device float*, threadgroup float*, constant uint&, uint, uint);
"""),
    "a barrier in a loop": (0, """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    for (uint i = 0; i < 4; ++i) {
        tmp[l] = out[l] + float(i);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[l] = tmp[l ^ 1];
    }
}"""),
    "a barrier in a helper": (0, """
void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    tmp[l] = out[l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    sync_all();
    out[l] = tmp[l ^ 1];
}"""),
    "an auto local carried over": (0, """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    auto x = out[l] * 2.0f;
    tmp[l] = x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[l ^ 1] + x;
}"""),
    "a pointer to a local carried over": (0, """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    float acc[2] = {out[l], 1.0f};
    thread float* p = acc;
    tmp[l] = p[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[l ^ 1] + p[1];
}"""),
    "a struct local carried over": (0, """
struct Pair { float a, b; };
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    Pair q = {out[l], 2.0f};
    tmp[l] = q.a;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[l ^ 1] * q.b;
}"""),
    "threadgroup memory declared after a statement": (0, """
kernel void k(device float* out, uint l [[thread_index_in_threadgroup]]) {
    float x = out[l];
    threadgroup float t[64];
    t[l] = x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = t[l ^ 1];
}"""),
    "a parameter moved before a barrier": (0, """
kernel void k(device const float* x, device float* out, threadgroup float* tmp,
              uint l [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    x += g * 64;
    tmp[l] = x[l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[g * 64 + l] = tmp[l ^ 1] + x[l];
}"""),
    "a parameter moved after the last barrier": (2, """
kernel void k(device const float* x, device float* out, threadgroup float* tmp,
              uint l [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    tmp[l] = x[g * 64 + l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out += g * 64;
    out[l] = tmp[l ^ 1];
}"""),
    "a per-lane array too large to carry": (0, """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    float big[1024];
    for (uint k = 0; k < 1024; ++k) big[k] = out[l] + float(k);
    tmp[l] = big[3];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[l ^ 1] + big[l % 1024];
}"""),
    "two barriers, nothing carried, ending at a barrier": (2, """
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {
    tmp[l] = out[l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[l ^ 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
}"""),
}


@pytest.mark.parametrize("case", sorted(SPLITS))
def test_which_kernels_split_at_their_barriers(case):
    regions, src = SPLITS[case]
    result, _ = _run(src)
    assert [k.execution for k in result.kernels] == ["simt"]
    assert [k.regions for k in result.kernels] == [regions]


# Carried locals that a region overwrites before reading (fission._overwritten): the regions where
# nothing is restored, per local. Three regions: the body's statements between two barriers each.
OVERWRITTEN = {
    "assigned first": ({"v": [1]}, "v = tmp[l ^ 1];", "out[l] = v;"),
    "assigned first in every later region": ({"v": [1, 2]}, "v = tmp[l ^ 1];", "v = tmp[l];\n    out[l] = v;"),
    "read first": ({"v": []}, "out[l] = v;\n    v = 1.0f;", "out[l] += v;"),
    "read on the right": ({"v": []}, "v = v + tmp[l];", "out[l] = v;"),
    "a compound assignment": ({"v": []}, "v += tmp[l];", "out[l] = v;"),
    "an element": ({"w": []}, "w[0] = tmp[l];", "out[l] = w[0] + w[1];"),
    "a branch of the last region": ({"v": [2]}, "out[l] = 0.0f;", "if (l % 3 == 0) {\n        v = tmp[l];\n"
                                                                    "        out[l] = v;\n    }"),
    "a branch then a read": ({"v": []}, "out[l] = 0.0f;", "if (l % 3 == 0) v = tmp[l];\n    out[l] = v;"),
    "a branch of a region before the last": ({"v": []}, "if (l % 3 == 0) v = tmp[l];", "out[l] = v;"),
    "a branch with an else": ({"v": []}, "out[l] = 0.0f;", "if (l % 3 == 0) v = tmp[l]; else out[l] = 1.0f;"),
    "a shadowing declaration": ({"v": []}, "{ float v = tmp[l]; out[l] = v; }", "out[l] += v;"),
    "addressed in an earlier region": ({"v": []}, "v = tmp[l];", "out[l] = v;"),
}


@pytest.mark.parametrize("case", sorted(OVERWRITTEN))
def test_which_regions_overwrite_a_carried_local_first(case):
    want, second, third = OVERWRITTEN[case]
    local = "w" if "w" in want else "v"
    decl = "float w[2] = {tmp[l], 2.0f};" if local == "w" else "float v = tmp[l] * 2.0f;"
    if case.startswith("addressed"):  # taken and used in the first region: kept as if it could alias
        decl += " { thread float* p = &v; *p += 1.0f; }"
    src = f"""
kernel void k(device float* out, threadgroup float* tmp, uint l [[thread_index_in_threadgroup]]) {{
    tmp[l] = out[l];
    {decl}
    threadgroup_barrier(mem_flags::mem_threadgroup);
    {second}
    threadgroup_barrier(mem_flags::mem_threadgroup);
    {third}
}}"""
    _, plans = _run(src)
    [plan] = [p for p in plans if getattr(p, "split", None)]
    assert {c.var.name: sorted(c.dead) for c in plan.split.carried} == want
