"""Which functions reach a barrier or a SIMD-group function, through the functions they call.

With clang's facts (msl/clang_facts.py) the graph is exact per definition: a
kernel reaches what its own body and the definitions it calls reach, through
templates, static members, operators, function pointers and lambdas. Without
them (the front end of a whole large file, or text clang cannot parse) and for a
definition clang's positions do not name, it is by name (overloads, templates
and methods of one name are one node), which errs on the side of "reaches".

What later passes read is by name (``Reach``): a name reaches a barrier if any
definition of it does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import FnDef, Unit

# Functions that make the threads of a group depend on one another.
SYNC_FUNCTIONS = ("threadgroup_barrier", "simdgroup_", "simd_", "quad_", "make_filled_simdgroup_matrix",
                  "__metal_simd", "__metal_quad", "__metal_get_thread_index_in_simdgroup")
# <metal_logging>: every log call goes through an os_log (os_log_default or one of the user's).
LOG_NAMES = ("os_log", "os_log_default")
# os_log's methods. In SIMT code a call of one runs lane by lane like a SIMD-group function
# (simt/effects.py), so it is handed the lane that calls it; it does not make a kernel SIMT.
LOG_METHODS = ("log", "log_debug", "log_info", "log_error", "log_fault", "log_with_type")


@dataclass
class Reach:
    sync: dict[str, str]      # function name -> the first barrier / SIMD-group name it reaches ("" if none)
    barrier: dict[str, bool]  # function name -> it reaches threadgroup_barrier
    calls: dict[str, set[str]]  # function name -> names of the user functions it calls
    defs: dict[int, str]      # id(FnDef) -> the first barrier / SIMD-group name that definition reaches
    def_barrier: dict[int, bool]  # id(FnDef) -> it reaches threadgroup_barrier
    at: dict = field(default_factory=dict)  # clang's definitions (their positions) -> what they reach


def _closure(calls: dict, direct: dict, barrier: dict) -> None:
    """Propagates ``direct`` (node -> first sync name) and ``barrier`` along ``calls`` (node ->
    nodes), in place, until nothing changes (cycles included)."""
    changed = True
    while changed:
        changed = False
        for node, callees in calls.items():
            for c in callees:
                if direct.get(c) and not direct.get(node):
                    direct[node] = direct[c]
                    changed = True
                if barrier.get(c) and not barrier.get(node):
                    barrier[node] = True
                    changed = True


def reach(unit: Unit, facts=None, positions: dict | None = None) -> Reach:
    """The graph by definition (``facts``: clang_facts.Facts, ``positions``: the rendered text's
    (line, column) -> token index), by name where facts say nothing."""
    toks = unit.toks
    by_name: dict[str, list[FnDef]] = {}
    for f in unit.functions:
        by_name.setdefault(f.name, []).append(f)
    # clang's definitions, operators and lambdas included, reach what they reach.
    fsync: dict = {}
    fbarrier: dict = {}
    if facts is not None and positions is not None:
        for key in facts.calls:
            names = sorted(facts.external.get(key, ()))
            fsync[key] = next((x for x in names if x.startswith(SYNC_FUNCTIONS)), "")
            fbarrier[key] = "threadgroup_barrier" in names
        _closure(facts.calls, fsync, fbarrier)
    where = {i: p for p, i in (positions or {}).items()}
    at: dict[int, FnDef] = {f.name_at: f for f in unit.functions}
    direct: dict[int, str] = {}
    barrier: dict[int, bool] = {}
    callees: dict[int, list[FnDef]] = {}
    for f in unit.functions:
        key = where.get(f.name_at)
        if key in fsync:
            direct[id(f)], barrier[id(f)] = fsync[key], fbarrier[key]
            callees[id(f)] = [g for g in (at.get(positions.get(t, -1)) for t in sorted(facts.calls[key]))
                              if g is not None]
            continue
        a, b = f.body
        ids = [t.text for t in toks[a:b] if t.kind == "id"]
        direct[id(f)] = next((x for x in ids if x.startswith(SYNC_FUNCTIONS)), "")
        barrier[id(f)] = "threadgroup_barrier" in ids
        callees[id(f)] = [g for x in dict.fromkeys(ids) for g in by_name.get(x, ())]
    _closure({id(f): [id(g) for g in callees[id(f)]] for f in unit.functions}, direct, barrier)
    out = Reach({}, {}, {}, direct, barrier, fsync)
    for name, fs in by_name.items():
        out.sync[name] = next((direct[id(f)] for f in fs if direct[id(f)]), "")
        out.barrier[name] = any(barrier[id(f)] for f in fs)
        out.calls[name] = {g.name for f in fs for g in callees[id(f)]}
    return out


def mark(unit: Unit, facts=None, positions: dict | None = None) -> Reach:
    """Sets each kernel's needs_sync (the first barrier or SIMD-group function it reaches) and
    uses_barrier; returns the whole graph for later passes."""
    r = reach(unit, facts, positions)
    kernel_defs: dict[str, list[FnDef]] = {}
    for f in unit.functions:
        if f.is_kernel:
            kernel_defs.setdefault(f.name, []).append(f)
    for k in unit.kernels:
        fs = kernel_defs.get(k.function, [])
        if fs:
            k.needs_sync = next((r.defs[id(f)] for f in fs if r.defs[id(f)]), "")
            k.uses_barrier = any(r.def_barrier[id(f)] for f in fs)
        else:
            k.needs_sync = r.sync.get(k.function, "")
            k.uses_barrier = r.barrier.get(k.function, False)
        # Functions passed as template arguments are called through the parameter.
        for t in unit.toks[k.targs[0]:k.targs[1] + 1]:
            if t.kind == "id" and r.sync.get(t.text):
                k.needs_sync = k.needs_sync or r.sync[t.text]
                k.uses_barrier = k.uses_barrier or r.barrier.get(t.text, False)
    return r
