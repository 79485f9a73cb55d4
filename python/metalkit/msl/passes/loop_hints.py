"""Loop hints (``#pragma unroll(...)``, ``#pragma clang loop``) whose argument names a macro."""
from __future__ import annotations

import re

from ..model import Unit

_LOOP_HINT_WORDS = {"pragma", "unroll", "nounroll", "clang", "loop", "unroll_count", "vectorize", "vectorize_width",
                    "interleave", "interleave_count", "distribute", "pipeline", "pipeline_initiation_interval",
                    "full", "enable", "disable", "assume_safety", "scalable", "fixed"}


def drop_unexpanded(unit: Unit) -> None:
    """Blank loop hints whose argument names a macro.

    ``clang -E`` prints ``#pragma unroll(MIN(a, b))`` without expanding its
    macros, and the preprocessed text no longer defines them; a name found
    nowhere else in that text is such a macro. The hint only tunes speed, so
    the loop keeps its meaning without it.
    """
    src = unit.src
    if not src.loop_hints:
        return
    known = set()
    for line in src.lines:
        if not line.startswith("#"):
            known.update(_IDENT.findall(line))
    for i in src.loop_hints:
        line = src.lines[i]
        names = set(_IDENT.findall(line)) - _LOOP_HINT_WORDS
        if names - known:
            src.line_out[i] = ""


_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")
