"""Last pass: MSL keywords and literals become C++.

Runs after every other pass, so it never hides a kernel or an attribute from
their scans. ``device``/``thread``/``kernel`` are blanked, ``constant`` becomes
``const``, ``threadgroup`` is blanked where no pass rewrote it, the qualifier
``coherent(scope)`` is blanked (one OS thread's memory is coherent), and unsuffixed
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
        elif t.text == "coherent" and i + 3 < len(unit.toks) and unit.toks[i + 1].text == "(" and \
                unit.toks[i + 3].text == ")":
            src.blank(i, i + 3)


_UNSUFFIXED_FLOAT = re.compile(r"(?:[0-9]*\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0[xX][0-9a-fA-F.]*[pP][+-]?[0-9]+)")


def _float_literal(src: Source, i: int) -> None:
    """MSL has no double: an unsuffixed floating literal is a float."""
    text = literal_text(src.toks[i])
    if text != src.toks[i].text:
        src.replace(i, i, text)


def literal_text(t) -> str:
    """A token's text, with an `f` if it is an unsuffixed floating literal."""
    if t.kind == "num" and _UNSUFFIXED_FLOAT.fullmatch(t.text.replace("'", "")):
        return t.text + "f"
    return t.text
