"""Functions and class partial specializations overloaded only on address spaces.

MSL may declare one such function per address space (``f() thread`` /
``f() device``, ``g(device T&)`` / ``g(thread T&)``, ``S<device T*>`` /
``S<thread T*>``); on the CPU there is one address space, so once the keywords
are blank they would redeclare each other.
"""
from __future__ import annotations

from ..model import Unit
from ..source import match, match_angle
from ..tokens import Token

_SPACES = ("device", "constant", "threadgroup", "thread")
_ACCESS = ("public", "private", "protected")


def drop(unit: Unit) -> None:
    """Functions overloaded only on address spaces (``f() thread`` / ``f() device``, ``g(thread T&)`` /
    ``g(device T&)``).

    MSL may declare one such function per address space; on the CPU there is one
    address space, so once the keywords are blanked they would redeclare each other.
    Per scope and signature the one naming no address space but ``thread`` is kept
    (else the first) and the others are blanked.
    """
    src, toks = unit.src, unit.toks
    n = len(toks)
    encl, stack = [-1] * n, []
    for i, t in enumerate(toks):
        if t.text == "}" and stack:
            stack.pop()
        encl[i] = stack[-1] if stack else -1
        if t.text == "{":
            stack.append(i)
    groups: dict[tuple, list[tuple[bool, int, int]]] = {}
    fixed: set[int] = set()
    i = 0
    while i < n:
        if toks[i].text in ("struct", "class", "union") and i + 2 < n and toks[i + 2].text == "<":
            # A partial specialization per address space: template <class T> struct S<device T*> {...};
            try:
                close = match_angle(toks, i + 2)
            except IndexError:
                close = n
            body = close + 1
            while body < n and toks[body].text not in ("{", ";"):
                body += 1
            spaces = [t.text for t in toks[i + 2:close] if t.kind == "id" and t.text in ("thread", "threadgroup",
                                                                                         "device")]
            if body < n and toks[body].text == "{" and spaces:
                start = i
                while start > 0 and encl[start - 1] == encl[i] and toks[start - 1].text not in (";", "{", "}"):
                    start -= 1
                key = (encl[i], " ".join(t.text for t in toks[start:body]
                                         if not (t.kind == "id" and t.text in ("thread", "threadgroup", "device"))))
                groups.setdefault(key, []).append((all(sp == "thread" for sp in spaces), start,
                                                   match(toks, body, "{", "}")))
            i += 1
            continue
        if toks[i].text != ")":
            i += 1
            continue
        e = i + 1  # past trailing qualifiers to the body, a constructor's initializers, or `;`
        while e < n and (toks[e].text in _TRAILING or toks[e].text in _SPACES):
            e += 1
        if e >= n or toks[e].text not in ("{", ":", ";"):
            i += 1
            continue
        k, depth = i, 0
        while k > 0:  # the matching "("
            depth += (toks[k].text == ")") - (toks[k].text == "(")
            if depth == 0:
                break
            k -= 1
        if k == 0 or toks[k - 1].text in _NOT_A_FUNCTION or not (
                toks[k - 1].kind == "id" or toks[k - 2].text == "operator" or toks[k - 1].text == ">"):
            i += 1
            continue
        start = k
        while start > 0 and encl[start - 1] == encl[i] and toks[start - 1].text not in (";", "{", "}") and not (
                toks[start - 1].text == ":" and toks[start - 2].text in _ACCESS):
            start -= 1
        body = e
        while body < n and toks[body].text not in ("{", ";"):
            body = match(toks, body, "(", ")") + 1 if toks[body].text == "(" else body + 1
        if body >= n:
            break
        end = match(toks, body, "{", "}") if toks[body].text == "{" else body
        head = toks[start:e]
        for j in range(i + 1, e):  # `constant` after a constructor or a `const`: C++ has no word for it
            if toks[j].text == "constant" and (toks[j - 1].text == "const" or toks[j + 1].text == "const"
                                               or toks[k - 1].text == _class_name(toks, encl[i])):
                src.blank(j, j)
                fixed.add(j)
        spaces = [t.text for t in head if t.kind == "id" and t.text in _SPACES]
        if spaces:
            # `f() constant` (this in constant memory) is an overload like `f() device`.
            words = [("const" if t.text == "constant" else t.text) for j, t in enumerate(head, start)
                     if not (t.kind == "id" and (t.text in ("thread", "threadgroup", "device") or
                                                 (t.text == "constant" and j > i)))]
            key = (encl[i], " ".join(w for j, w in enumerate(words) if not (w == "const" and j and words[j - 1] == w)))
            groups.setdefault(key, []).append((all(sp == "thread" for sp in spaces), start, end))
        i = end + 1
    dropped: set[int] = set()
    for variants in groups.values():
        if len(variants) < 2:
            continue
        keep = next((v for v in variants if v[0]), variants[0])
        for v in variants:
            if v is not keep:
                src.blank(v[1], v[2])
                dropped.update(range(v[1], v[2] + 1))
    unit.dropped |= dropped | fixed


def _class_name(toks: list[Token], brace: int) -> str:
    """Name of the class whose body opens at toks[brace] ("" if it is not a class)."""
    k = brace - 1
    while k >= 0 and brace - k < 64 and toks[k].text not in (";", "{", "}"):
        if toks[k].text in ("struct", "class", "union") and toks[k + 1].kind == "id":
            return toks[k + 1].text
        k -= 1
    return ""


_TRAILING = {"const", "volatile", "&", "&&", "noexcept", "override", "final"}
_NOT_A_FUNCTION = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "catch", "static_assert",
                   "alignas", "__attribute__", "noexcept"}
