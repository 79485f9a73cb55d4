"""MSL attributes: ``[[buffer(0)]]``, ``[[thread_position_in_grid]]``, ``[[host_name("x")]]`` ...

Found first, so later passes read them; blanked last (``blank_unused``) unless a
pass rewrote the block itself. Standard C++ attributes stay.
"""
from __future__ import annotations

import re

from ..consteval import const_int
from ..model import Attr, Unit
from ..source import Source, match
from ..tokens import Token

STD_ATTRS = {
    "maybe_unused", "likely", "unlikely", "fallthrough", "nodiscard", "noreturn",
    "deprecated", "carries_dependency", "no_unique_address", "assume",
}


def find(unit: Unit) -> None:
    toks = unit.toks
    n = len(toks)
    i = 0
    while i < n - 1:
        if toks[i].text == "[" and toks[i + 1].text == "[":
            try:
                j = match(toks, i, "[", "]")
            except IndexError:
                raise unit.src.error(toks[i], "unterminated attribute") from None
            attrs = parse(toks, i, j)
            if not all(a.name in STD_ATTRS or "::" in a.name for a in attrs):
                unit.attr_at[i] = (j, attrs)
            i = j + 1
            continue
        i += 1


def blank_unused(unit: Unit) -> None:
    for k, (end, _) in unit.attr_at.items():
        if k not in unit.consumed:
            unit.src.blank(k, end)


def parse(toks: list[Token], a: int, b: int) -> list[Attr]:
    """Attributes in the block toks[a] == '[' ... toks[b] == ']'."""
    inner = toks[a + 2:b - 1]
    out, cur, depth = [], [], 0
    for t in inner + [Token(",", "punct", 0, 0)]:
        if t.text == "," and depth == 0:
            if cur:
                name = cur[0].text
                k = 1
                while k + 1 < len(cur) and cur[k].text == "::":
                    name += "::" + cur[k + 1].text
                    k += 2
                args = " ".join(x.text for x in cur[k + 1:-1]) if k < len(cur) and cur[k].text == "(" else ""
                out.append(Attr(name, args))
            cur = []
            continue
        depth += t.text in "([{"
        depth -= t.text in ")]}"
        cur.append(t)
    return out


def int_arg(src: Source, attr: Attr, tok: Token) -> int:
    """An attribute's integer argument (an integer constant expression)."""
    try:
        return const_int(attr.args)
    except ValueError:
        raise src.error(tok, f"[[{attr.name}({attr.args})]] needs an integer constant expression "
                             "(literals and arithmetic)") from None


_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def host_name(attr: Attr) -> str:
    """The name in [[host_name("...")]]; adjacent literals ("a" "b", as macros make them) are joined."""
    parts = _STRING.findall(attr.args)
    if parts and _STRING.sub("", attr.args).strip() == "":
        return "".join(parts)
    return attr.args.strip('" ')

