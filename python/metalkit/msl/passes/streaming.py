"""Loop kernels whose outputs can be stored past the cache.

A kernel run as a loop whose body ends in stores of its outputs at the thread's position in the
grid, ``out[id] = v;``, lets the launcher gather a block of threads' stores on the stack and write
them to memory in whole lines that skip the cache (launch.h ``run_groups_streamed``): a large
output is then not read in before it is overwritten. That is only the same program if each such
store is the thread's last act on that output, so the pattern is read strictly, from tokens:

- the stores are the last statements of the body, at its top level (run by every thread that
  gets there, and no ``return``, ``goto`` or ``throw`` anywhere lets one skip them);
- each output is a ``device`` pointer without ``const``, named nowhere else in the body (no
  alias, no read, no second store);
- the index is the kernel's scalar ``thread_position_in_grid`` parameter, and everywhere in the
  body only read: never assigned, incremented, addressed, bound to a reference, passed whole to
  anything but a conversion or one of metal's functions of numbers, or redeclared.

Anything else runs as before. Types (a power-of-two element of 64 bytes or less, an integer
index wide enough for the grid) are the compiler's to check, in the launcher.
"""
from __future__ import annotations

import re

from ..model import FnDef, Kernel, Unit

_JUMPS = {"return", "goto", "throw", "asm", "__asm", "__asm__", "co_return", "longjmp", "setjmp"}
_BINARY = {"+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}
_COMPOUND = {"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
_UNARY = {"!", "~", "-", "+"}
# Calls that take their arguments by value: the index passed whole to anything else could be
# bound to a reference and changed.
_BY_VALUE = {"min", "max", "clamp", "abs", "select", "static_cast", "as_type", "mad", "fma", "mulhi", "popcount",
             "clz", "ctz", "absdiff", "fmin", "fmax"}
_TYPE = re.compile(r"(u?(char|short|int|long)|unsigned|signed|half|float|bfloat|bool|size_t|ptrdiff_t|u?int\d+_t)[234]?")
REASON = "stores {} past the cache when a call writes half the last-level cache or more through {}"


def find(unit: Unit) -> None:
    """Sets ``streamed`` and ``stream_index`` of each loop kernel whose outputs can be streamed."""
    defs: dict[str, list[FnDef]] = {}
    for f in unit.functions:
        if f.is_kernel:
            defs.setdefault(f.name, []).append(f)
    for k in unit.kernels:
        if k.execution == "loop" and len(defs.get(k.function, ())) == 1:
            _find(unit, k, defs[k.function][0])


def _find(unit: Unit, k: Kernel, f: FnDef) -> None:
    toks = unit.toks
    body = [i for i in range(f.body[0] + 1, f.body[1]) if not unit.in_attr(i)]
    text = [toks[i].text for i in body]
    index = [n for n, p in enumerate(k.params) if p.kind == "builtin" and p.builtin == "thread_position_in_grid"]
    if not index or not text or text[-1] != ";" or _JUMPS & set(text):
        return
    name = k.params[index[0]].name
    outputs = {p.name: n for n, p in enumerate(k.params)
               if p.kind == "buffer" and p.present and p.space == 1 and "const" not in p.decl.split() and "*" in p.decl}
    # Top-level statement ends, and structured bindings (`auto [a, id] = ...` would redeclare it).
    ends, depth = [-1], 0
    for j, t in enumerate(text):
        if t in ("(", "[", "{"):
            if t == "[" and j and text[j - 1] in ("auto", "&", "&&"):
                return
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
            if depth == 0 and t == "}":
                ends.append(j)
        elif t == ";" and depth == 0:
            ends.append(j)
    streamed: list[int] = []
    for a, b in zip(reversed(ends[:-1]), reversed(ends[1:])):  # the last statements, from the end
        s = text[a + 1:b + 1]
        if len(s) < 7 or s[0] not in outputs or s[1:5] != ["[", name, "]", "="] or text.count(s[0]) != 1:
            break
        streamed.append(outputs[s[0]])
    if not streamed or len(set(streamed)) != len(streamed):
        return
    users = {f.name for f in unit.functions}
    if any(t == name and not _only_read(text, j, users) for j, t in enumerate(text)):
        return
    k.streamed = tuple(reversed(streamed))
    k.stream_index = index[0]
    names = ", ".join(k.params[n].name for n in k.streamed)
    k.execution = f"loop: {REASON.format(names, 'them' if len(k.streamed) > 1 else 'it')}"


def _only_read(text: list[str], j: int, users: set[str]) -> bool:
    """Whether the index at text[j] is only read there: an operand, a subscript, a value copied or
    passed by value. Never where it could be assigned, addressed, bound to a reference or
    redeclared."""
    prev, nxt = text[j - 1] if j else "", text[j + 1] if j + 1 < len(text) else ""
    if nxt not in _BINARY | {";", ",", ")", "]"}:
        return False  # assigned, incremented, called, initialised as a new declaration
    if nxt in _BINARY and prev not in ("&", "++", "--", ">", ".", "->", "::") and not _is_name(prev):
        return True   # an operand
    if prev in _BINARY - {"&", ">"} or prev in _UNARY or prev in _COMPOUND:
        return True   # an operand, or what a compound assignment adds
    if prev == "[":
        return nxt == "]"  # a subscript
    if prev == "=":
        return j < 3 or text[j - 3] not in ("&", "&&")  # copied, not bound to a reference
    if prev in ("(", ",") and nxt in (")", ","):
        depth = 0
        for o in range(j - 1, -1, -1):  # the call it is an argument of
            if text[o] in (")", "]", "}"):
                depth += 1
            elif text[o] in ("(", "[", "{"):
                if depth == 0:
                    return text[o] == "(" and _by_value(text, o, users)
                depth -= 1
    return False


def _by_value(text: list[str], o: int, users: set[str]) -> bool:
    """Whether the call whose '(' is text[o] takes its arguments by value: a conversion to a
    built-in type, or one of metal's functions of numbers that no user function overloads."""
    callee = text[o - 1] if o else ""
    if callee == ">":  # static_cast<T>(x), as_type<T>(x)
        depth = 0
        for c in range(o - 1, -1, -1):
            depth += text[c] == ">"
            depth -= text[c] == "<"
            if depth == 0:
                callee = text[c - 1] if c else ""
                break
    return callee not in users and (callee in _BY_VALUE or bool(_TYPE.fullmatch(callee)))


def _is_name(t: str) -> bool:
    return t[:1].isalpha() or t[:1] == "_"
