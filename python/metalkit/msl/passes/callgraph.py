"""Which kernels reach a barrier or a SIMD-group function, through the functions they call.

The call graph is by name (overloads, templates and methods of the same name are
one node), so it errs on the side of "reaches": a kernel that reaches a barrier
never runs on the plain-loop path.
"""
from __future__ import annotations

from ..model import Unit

# Functions that make the threads of a group depend on one another.
SYNC_FUNCTIONS = ("threadgroup_barrier", "simdgroup_", "simd_", "quad_", "make_filled_simdgroup_matrix")


def mark(unit: Unit) -> None:
    """Sets each kernel's needs_sync: the first barrier or SIMD-group function it reaches, through the
    functions it calls."""
    toks = unit.toks
    by_name = {f.name for f in unit.functions}
    direct: dict[str, str] = {}
    calls: dict[str, set[str]] = {}
    for f in unit.functions:
        a, b = f.body
        ids = [t.text for t in toks[a:b] if t.kind == "id"]
        direct[f.name] = direct.get(f.name) or next((x for x in ids if x.startswith(SYNC_FUNCTIONS)), "")
        calls.setdefault(f.name, set()).update(x for x in ids if x in by_name and x != f.name)

    memo: dict[str, str] = {}

    def reaches(name: str, stack: tuple = ()) -> str:
        if name in memo:
            return memo[name]
        if name in stack:
            return ""
        r = direct.get(name, "") or next((x for c in sorted(calls.get(name, ())) if (x := reaches(c, stack + (name,)))), "")
        memo[name] = r
        return r

    for k in unit.kernels:
        k.needs_sync = reaches(k.function)
