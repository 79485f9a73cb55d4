"""Bracket matching over tokens: the one place simt/ finds where a bracket, a template argument
list or a statement ends.

`(`, `[` and `{` nest by pair. `<` is only a template bracket where the caller knows one opens
(C++ cannot tell `a < b` from `vec<float, 4>` without knowing which names are templates); inside
template arguments, `>>` closes two lists, and brackets are skipped whole so `(a > b)` compares.
"""
from __future__ import annotations

from typing import Iterator

from ..source import match
from .unsupported import Unsupported

CLOSE = {"(": ")", "[": "]", "{": "}"}


def close(toks, i: int, end: int | None = None) -> int:
    """Index of the bracket closing the one at toks[i] (only its own kind counts)."""
    open_ = toks[i].text if i < len(toks) else ""
    if open_ not in CLOSE:
        raise Unsupported(min(i, len(toks) - 1), f"expected a bracket, not '{open_}'")
    try:
        return match(toks, i, open_, CLOSE[open_], end)
    except IndexError:
        raise Unsupported(i, f"unbalanced '{open_}'") from None


def close_angle(toks, i: int, end: int | None = None, after_name: bool = False) -> int:
    """Index of the '>' (or '>>') closing the template argument list opened at toks[i].
    after_name: a nested '<' opens a list only after a name (`sizeof(T) < 8` compares)."""
    depth = 0
    j = i
    stop = len(toks) if end is None else end
    while j < stop:
        x = toks[j].text
        if x in CLOSE:
            j = close(toks, j, end) + 1
            continue
        if x == "<" and (not after_name or j == i or toks[j - 1].kind == "id"):
            depth += 1
        elif x == ">":
            depth -= 1
        elif x == ">>":
            depth -= 2
        elif x == ";":
            break
        if depth <= 0 and x in (">", ">>"):
            return j
        j += 1
    raise Unsupported(i, "unbalanced '<'")


def levels(toks, a: int, b: int) -> Iterator[tuple[int, str, int]]:
    """(index, text, bracket depth after it) for tokens [a, b): a token at depth 0 that is not a
    bracket is at the top level of the range; depth goes below 0 past an unopened closer."""
    depth = 0
    for j in range(a, b):
        x = toks[j].text
        if x in CLOSE:
            depth += 1
        elif x in (")", "]", "}"):
            depth -= 1
        yield j, x, depth


def top_level(toks, a: int, b: int, texts) -> list[int]:
    """Indices of the tokens in [a, b) at bracket depth 0 whose text is one of texts."""
    return [j for j, x, depth in levels(toks, a, b) if depth == 0 and x in texts]


def split(toks, a: int, b: int) -> list[tuple[int, int]]:
    """Comma-separated pieces of [a, b) as ranges [start, end), brackets and template arguments
    (a '<' after a name) kept whole."""
    out, start, j = [], a, a
    while j < b:
        x = toks[j].text
        if x in CLOSE:
            j = close(toks, j, b)
        elif x == "<" and j > a and toks[j - 1].kind == "id":
            try:
                j = close_angle(toks, j, b, after_name=True)
            except Unsupported:
                pass  # a '<' no '>' closes compares (`i < n`): read on past it
        elif x == ",":
            out.append((start, j))
            start = j + 1
        j += 1
    if start < b:
        out.append((start, b))
    return out
