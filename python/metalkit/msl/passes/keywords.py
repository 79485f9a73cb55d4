"""Last pass: MSL keywords and literals become C++.

Runs after every other pass, so it never hides a kernel or an attribute from
their scans. ``device``/``thread``/``kernel`` are blanked, ``constant`` becomes
``const``, ``threadgroup`` is blanked where no pass rewrote it, and unsuffixed
floating literals gain an ``f`` (MSL has no double). Unused MSL attribute blocks
are blanked.
"""
from __future__ import annotations

import re

from ..model import Unit
from ..source import Source
from . import attributes


def rewrite(unit: Unit) -> None:
    attributes.blank_unused(unit)
    src = unit.src
    for i, t in enumerate(unit.toks):
        if i in unit.dropped:
            continue
        if t.kind == "num":
            _float_literal(src, i)
            continue
        if t.kind != "id":
            continue
        if t.text in ("device", "thread", "kernel"):
            src.blank(i, i)
        elif t.text == "constant":
            src.replace(i, i, "const")
        elif t.text == "threadgroup" and not src.is_rewritten(i):
            src.blank(i, i)


_UNSUFFIXED_FLOAT = re.compile(r"(?:[0-9]*\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0[xX][0-9a-fA-F.]*[pP][+-]?[0-9]+)")


def _float_literal(src: Source, i: int) -> None:
    """MSL has no double: an unsuffixed floating literal is a float."""
    t = src.toks[i]
    if not _UNSUFFIXED_FLOAT.fullmatch(t.text.replace("'", "")):
        return
    src.replace(i, i, t.text + "f")
