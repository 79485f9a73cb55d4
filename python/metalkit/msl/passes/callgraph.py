"""Which functions reach a barrier or a SIMD-group function, through the functions they call.

The call graph is by name (overloads, templates and methods of the same name are
one node), so it errs on the side of "reaches": a kernel that reaches a barrier
never runs on the plain-loop path.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Unit

# Functions that make the threads of a group depend on one another.
SYNC_FUNCTIONS = ("threadgroup_barrier", "simdgroup_", "simd_", "quad_", "make_filled_simdgroup_matrix",
                  "__metal_simd", "__metal_quad", "__metal_get_thread_index_in_simdgroup")


@dataclass
class Reach:
    sync: dict[str, str]      # function name -> the first barrier / SIMD-group name it reaches ("" if none)
    barrier: dict[str, bool]  # function name -> it reaches threadgroup_barrier
    calls: dict[str, set[str]]  # function name -> names of the user functions it calls


def reach(unit: Unit) -> Reach:
    toks = unit.toks
    defined = {f.name for f in unit.functions}
    direct: dict[str, str] = {}
    barrier: dict[str, bool] = {}
    calls: dict[str, set[str]] = {}
    for f in unit.functions:
        a, b = f.body
        ids = [t.text for t in toks[a:b] if t.kind == "id"]
        direct[f.name] = direct.get(f.name) or next((x for x in ids if x.startswith(SYNC_FUNCTIONS)), "")
        barrier[f.name] = barrier.get(f.name, False) or "threadgroup_barrier" in ids
        calls.setdefault(f.name, set()).update(x for x in ids if x in defined and x != f.name)
    sync = dict(direct)
    changed = True
    while changed:  # propagate along calls until nothing changes (cycles included)
        changed = False
        for name, callees in calls.items():
            for c in sorted(callees):
                if sync.get(c) and not sync.get(name):
                    sync[name] = sync[c]
                    changed = True
                if barrier.get(c) and not barrier.get(name):
                    barrier[name] = True
                    changed = True
    return Reach(sync, barrier, calls)


def mark(unit: Unit) -> Reach:
    """Sets each kernel's needs_sync (the first barrier or SIMD-group function it reaches) and
    uses_barrier; returns the whole graph for later passes."""
    r = reach(unit)
    for k in unit.kernels:
        k.needs_sync = r.sync.get(k.function, "")
        k.uses_barrier = r.barrier.get(k.function, False)
        # Functions passed as template arguments are called through the parameter.
        for t in unit.toks[k.targs[0]:k.targs[1] + 1]:
            if t.kind == "id" and r.sync.get(t.text):
                k.needs_sync = k.needs_sync or r.sync[t.text]
                k.uses_barrier = k.uses_barrier or r.barrier.get(t.text, False)
    return r
