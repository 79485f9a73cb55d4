"""The order metalkit's SIMD-group and quad-group reductions combine their lanes in, as a
reference for the tests: a pairwise tree over lane positions, adjacent lanes first (the lower
lane on the left), then pairs of pairs; a lane that is absent passes its partner's value up."""
from __future__ import annotations

from typing import Callable, Optional, Sequence


def tree_fold(values: Sequence[Optional[object]], op: Callable, cast: Callable = lambda v: v):
    """values: one entry per lane position of the scope (32, or 4 for a quad), None where the
    lane is absent (inactive, or past a short SIMD-group's end); at least one is present.
    `cast` rounds each result to the element type (op on numpy scalars may widen)."""
    level = list(values)
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            nxt.append(b if a is None else a if b is None else cast(op(a, b)))
        level = nxt
    assert level[0] is not None, "no lane present"
    return level[0]
