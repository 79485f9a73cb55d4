"""Which locals hold the same value in every lane of a SIMD-group, and which loops run a
different number of times per lane.

A uniform local stays a plain C++ variable and control flow it decides stays plain
C++. A local is per lane once a statement that may differ between lanes writes it,
or once it is written where only some lanes run (under a per-lane condition, or in
a loop that some lanes leave early); the marking runs until nothing changes, since
a loop's later iterations see what its body made per lane.
"""
from __future__ import annotations

from . import syntax as sx
from .effects import Info

# SIMD-group functions whose result is the same in every active lane.
UNIFORM_RESULT = {
    "simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor", "simd_all", "simd_any",
    "simd_ballot", "simd_broadcast", "simd_broadcast_first", "simd_active_threads_mask",
}


def varying(fn, info: Info) -> bool:
    """Whether an expression or statement of fn may differ between lanes."""
    if info.impure or info.mem_w:
        return True
    if any(not v.uniform for v in info.reads):
        return True
    return any(fn.effects.callee_name(h) not in UNIFORM_RESULT for h in info.hoists)


def per_lane(fn, info: Info) -> bool:
    """Whether a statement must run lane by lane: its value varies, or it writes a per-lane local."""
    return varying(fn, info) or any(not v.uniform for v in info.writes if v.kind != "shared")


def mark(fn) -> set[int]:
    """Sets Var.uniform for fn's parameters and locals; returns the ids of its loops whose trip
    count differs between lanes."""
    loop_varying: set[int] = set()
    for p in fn.params:
        p.uniform = p.kind in ("shared", "kparam")
    changed = True

    def set_varying(vs):
        nonlocal changed
        for v in vs:
            if v is not None and v.uniform and v.kind != "shared":
                v.uniform = False
                changed = True

    def walk(s, ctx_v: bool, loop_id):
        """ctx_v: some lanes may be inactive here while others will run later code."""
        nonlocal changed
        info = fn.info[id(s)]
        if isinstance(s, (sx.ExprStmt, sx.Decl, sx.Return)):
            if ctx_v or varying(fn, info):
                constant = isinstance(s, sx.Decl) and "constexpr" in s.specs and not varying(fn, info)
                if not constant:  # a constexpr local has the same value in every lane wherever it is
                    set_varying(info.writes)
        elif isinstance(s, sx.Jump):
            if ctx_v and loop_id is not None and loop_id not in loop_varying:
                loop_varying.add(loop_id)
                changed = True
        elif isinstance(s, sx.Block):
            for c in s.stmts:
                walk(c, ctx_v, loop_id)
        elif isinstance(s, sx.If):
            v = ctx_v or varying(fn, fn.info[id(s.cond)])
            for c in s.children():
                walk(c, v, loop_id)
        elif isinstance(s, sx.Switch):
            v = ctx_v or varying(fn, fn.info[id(s.cond)])
            walk(s.body, v, id(s) if v else loop_id)  # `break` leaves the switch
        elif isinstance(s, (sx.While, sx.DoWhile, sx.For)):
            v = ctx_v or id(s) in loop_varying or any(varying(fn, fn.info[id(p)]) for p in s.heads())
            if isinstance(s, sx.For) and s.init is not None:
                walk(s.init, ctx_v, loop_id)
                if varying(fn, fn.info[id(s.init)]):
                    v = True
            if v and id(s) not in loop_varying:
                loop_varying.add(id(s))
                changed = True
            walk(s.body, v, id(s))
            if v and isinstance(s, sx.For) and s.inc is not None:
                set_varying(fn.info[id(s.inc)].writes)

    while changed:
        changed = False
        walk(fn.body, False, None)
    return loop_varying
