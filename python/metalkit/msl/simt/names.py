"""Which names in a translation unit are types and which are templates.

C++ cannot be parsed without knowing them: ``a < b`` or ``vec<float, 4>``,
``(T)x`` a cast or a parenthesised name, ``T * p;`` a declaration. The whole
preprocessed text is scanned once (metalkit's headers too) for the names that
class, enum, typedef, alias and template declarations introduce.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field

from ..tokens import Token, tokenize_line
from .scan import close, close_angle
from .unsupported import Unsupported

# Type keywords of C++ and MSL that are not declared by any header.
BUILTIN_TYPES = {
    "void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "auto",
    "_Float16", "__bf16", "wchar_t", "char8_t", "char16_t", "char32_t", "decltype", "__underlying_type",
}
# Words that may start a declaration before its type.
DECL_SPECIFIERS = {
    "const", "volatile", "static", "constexpr", "thread_local", "register", "inline", "mutable",
    "thread", "threadgroup", "device", "constant", "typename", "struct", "class", "union", "enum",
    "__restrict", "restrict", "ray_data", "object_data",
}


@dataclass
class Names:
    types: set[str] = field(default_factory=set)
    templates: set[str] = field(default_factory=set)

    def is_type(self, name: str) -> bool:
        return name in self.types or name in BUILTIN_TYPES


def collect(text: str, head: int = 0) -> Names:
    """Type and template names declared anywhere in a preprocessed text. ``text[:head]``: whole
    declarations that recur (metalkit's headers), read once."""
    part, rest = _collect_cached(text[text.find("\n") + 1:head] if head else ""), _collect(text[head:])
    return Names(part.types | rest.types, part.templates | rest.templates)


@functools.lru_cache(maxsize=4)
def _collect_cached(text: str) -> Names:
    return _collect(text)


def _collect(text: str) -> Names:
    toks: list[Token] = []
    for i, line in enumerate(text.split("\n")):
        if not line.startswith("#"):
            toks.extend(tokenize_line(line, i))
    names = Names()
    n = len(toks)
    # Per open brace: is it a function body (whose typedefs are its own) or metalkit's internal
    # namespace (whose names no user code sees)?
    braces: list[bool] = []
    for i, t in enumerate(toks):
        w = t.text
        if w == "{":
            k = i - 1
            while k > 0 and toks[k].text in ("const", "noexcept", "override", "final", "mutable", "volatile"):
                k -= 1
            hidden = k >= 0 and (toks[k].text == ")" or (toks[k].text == "__mk" and toks[k - 1].text == "namespace"))
            braces.append(hidden or bool(braces and braces[-1]))
            continue
        if w == "}":
            if braces:
                braces.pop()
            continue
        if braces and braces[-1]:
            continue  # a function's own type names, or metalkit's internals
        if w in ("struct", "class", "union", "enum") and i + 1 < n:
            j = i + 1
            if toks[j].text in ("class", "struct"):  # enum class
                j += 1
            while j < n and toks[j].text == "[":  # attributes
                j = _past(toks, j)
            if j < n and toks[j].kind == "id":
                names.types.add(toks[j].text)
        elif w == "typedef":
            # The declared name: the last identifier at depth 0 before ';' (or before '(' of a function type).
            j, last = i + 1, None
            while j < n and toks[j].text != ";":
                x = toks[j]
                if x.text == "(" and j + 1 < n and toks[j + 1].text == "*":
                    last = toks[j + 2].text if j + 2 < n else last  # typedef R (*name)(...)
                    break
                if x.text in ("(", "[", "{", "<"):
                    j = _past(toks, j)
                    continue
                if x.kind == "id":
                    last = x.text
                j += 1
            if last:
                names.types.add(last)
        elif w == "using" and i + 2 < n and toks[i + 1].kind == "id" and toks[i + 2].text == "=":
            names.types.add(toks[i + 1].text)
        elif w in ("typename", "class") and i + 1 < n and toks[i + 1].kind == "id" and i > 0 and (
                toks[i - 1].text in ("<", ",") or toks[i - 1].text == "..."):
            names.types.add(toks[i + 1].text)  # a template type parameter
        elif w in ("typename", "class") and i + 2 < n and toks[i + 1].text == "..." and toks[i + 2].kind == "id":
            names.types.add(toks[i + 2].text)
        elif w == "template" and i + 1 < n and toks[i + 1].text == "<":
            _template_name(toks, i + 1, names)
    return names


def _template_name(toks: list[Token], lt: int, names: Names) -> None:
    """The name a ``template <...>`` head declares."""
    n = len(toks)
    j = _past(toks, lt)
    # After the head: `struct|class|union NAME`, `using NAME =`, or a function/variable ending in NAME ( / NAME =
    k, last = j, None
    while k < n and k - j < 200:
        x = toks[k]
        if x.text in ("__attribute__", "__declspec", "alignas") and k + 1 < n and toks[k + 1].text == "(":
            k = _past(toks, k + 1)
            continue
        if x.text in ("struct", "class", "union", "using") and k + 1 < n and toks[k + 1].kind == "id":
            names.templates.add(toks[k + 1].text)
            names.types.add(toks[k + 1].text)
            return
        if x.text in ("(", "=", ";", "{"):
            if last and last != "operator":
                names.templates.add(last)
            return
        if x.text == "<":
            k = _past(toks, k)
            continue
        if x.kind == "id":
            last = x.text
        k += 1


def _past(toks: list[Token], i: int) -> int:
    """Index just past the bracket or template argument list opened at toks[i] (the end of the
    text if it never closes: this scan reads any text, and only collects names)."""
    try:
        return (close_angle(toks, i) if toks[i].text == "<" else close(toks, i)) + 1
    except Unsupported:
        return len(toks)
