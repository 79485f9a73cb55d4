"""Explicit conversions between half and bfloat, which MSL allows and clang refuses.

clang has no conversion between ``_Float16`` and ``__bf16`` at all, so the
operand of each explicit conversion in the user's code is wrapped in
``metal::__mk::cast_arg<T>(e)``, which goes through float for exactly that pair
and passes anything else on unchanged (include/metalkit/vec.h):

- ``static_cast<T>(e)`` for every non-pointer, non-reference T (T may be a
  template parameter);
- ``(T)e`` and ``T(e)`` where T is a name for half or bfloat (the builtin names
  or a typedef/alias of them), e a primary expression with its postfix
  operators (C-style), or the single argument (functional).
"""
from __future__ import annotations

import functools

import re

from ..model import Unit
from ..source import match, match_angle

FP16 = {"half", "bfloat", "_Float16", "__bf16"}
_NOT_VALUE = {"*", "&", "&&", "device", "constant", "thread", "threadgroup", "threadgroup_imageblock"}
_ALIAS = re.compile(r"\btypedef\s+(?:metal::)?(\w+)\s+(\w+)\s*;|\busing\s+(\w+)\s*=\s*(?:metal::)?(\w+)\s*;")
_WRAP = "::metal::__mk::cast_arg<{}>("


def fp16_names(text: str, head: int = 0) -> set[str]:
    """half, bfloat and the typedef / alias names that resolve to one of them (``head``: see prepass)."""
    names = set(FP16)
    pairs = _aliases(text[text.find("\n") + 1:head] if head else "") + _aliases_in(text[head:])
    changed = True
    while changed:
        changed = False
        for new, old in pairs:
            if old in names and new not in names:
                names.add(new)
                changed = True
    return names


@functools.lru_cache(maxsize=4)
def _aliases(text: str) -> list[tuple[str, str]]:
    return _aliases_in(text)


def _aliases_in(text: str) -> list[tuple[str, str]]:
    """(new name, old name) of every typedef and alias declaration."""
    return [(m.group(2), m.group(1)) if m.group(1) else (m.group(3), m.group(4)) for m in _ALIAS.finditer(text)]


def rewrite(unit: Unit, text: str, head: int = 0) -> None:
    toks, src = unit.toks, unit.src
    fp16 = fp16_names(text, head)
    n = len(toks)
    for i, t in enumerate(toks):
        if i in unit.dropped or t.kind != "id":
            continue
        try:
            if t.text == "static_cast" and i + 1 < n and toks[i + 1].text == "<":
                close = match_angle(toks, i + 1)
                if close + 1 >= n or toks[close + 1].text != "(":
                    continue
                target = toks[i + 2:close]
                if not target or any(x.text in _NOT_VALUE for x in target):
                    continue
                _wrap(src, " ".join(x.text for x in target), close + 1, match(toks, close + 1, "(", ")"))
            elif t.text in fp16 and i + 1 < n:
                prev = toks[i - 1].text if i else ""
                if prev == "(" and toks[i + 1].text == ")" and i + 2 < n:  # (T)e
                    end = _operand_end(toks, i + 2)
                    if end is not None and end + 1 < n and not (i >= 2 and toks[i - 2].kind == "id" and toks[i - 2].text not in (
                            "return", "case")):  # f(T) is a call or declaration, not a cast
                        # On punctuation, which the SIMT pass never substitutes (it does rewrite names).
                        src.insert_after(i + 1, _WRAP.format(t.text))
                        src.insert_before(end + 1, ")")
                elif toks[i + 1].text == "(" and prev not in (".", "->", "::", "~") and not (
                        prev and toks[i - 1].kind == "id" and prev not in ("return", "case")):  # T(e)
                    close = match(toks, i + 1, "(", ")")
                    if close > i + 2 and not _has_comma(toks, i + 2, close):
                        _wrap(src, t.text, i + 1, close)
        except IndexError:
            continue


def _wrap(src, target: str, open_: int, close: int) -> None:
    if close == open_ + 1:
        return  # T(): no operand
    src.insert_after(open_, _WRAP.format(target))
    src.insert_before(close, ")")


def _has_comma(toks, a: int, b: int) -> bool:
    depth = 0
    for k in range(a, b):
        x = toks[k].text
        depth += x in "([{"
        depth -= x in ")]}"
        if depth == 0 and x == ",":
            return True
    return False


def _operand_end(toks, k: int) -> int | None:
    """Last token of the primary expression at toks[k] with its postfix operators, or None if it is not one."""
    n = len(toks)
    t = toks[k]
    if t.text == "(":
        k = match(toks, k, "(", ")")
    elif t.kind in ("id", "num"):
        while k + 2 < n and toks[k + 1].text == "::" and toks[k + 2].kind == "id":
            k += 2
    else:
        return None
    while k + 1 < n:
        x = toks[k + 1].text
        if x in ("(", "["):
            k = match(toks, k + 1, x, ")" if x == "(" else "]")
        elif x in (".", "->") and k + 2 < n and toks[k + 2].kind == "id":
            k += 2
        else:
            break
    return k
