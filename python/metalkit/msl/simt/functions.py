"""The functions the SIMT transform rewrites, and what their declarations say.

A function is SIMT when it reaches a barrier or a SIMD-group function (the call
graph in passes/callgraph.py). For each one the transform needs its template
head, return type, parameters and, for a method, its class's members.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import FnDef, Unit
from .resolve import space_in
from .scan import close, close_angle, split
from .unsupported import Unsupported

@dataclass
class ParamDecl:
    name: str              # "" if unnamed
    name_tok: int          # -1 if unnamed
    type_text: str         # C++ type (address spaces gone; an array parameter is a pointer)
    ref: bool              # a reference parameter
    default: tuple | None  # token range [a, b] of its default argument
    toks: tuple = (0, -1)  # token range of the whole parameter
    space: str = "?"       # the address space it points or refers into


@dataclass
class TParam:
    first: int             # its first token
    end: int               # one past its last token before a default
    name: str              # "" if unnamed
    pack: bool
    value: bool            # a value, not a type (`template <F f, typename T>`: f)
    template: bool         # a template template parameter
    text: str = ""         # the parameter without its default (set by signature)


@dataclass
class Signature:
    template: tuple | None          # token range of `template < ... >`
    tparams: list[TParam]
    ret: tuple                      # token range of the return type
    lparen: int
    rparen: int
    params: list[ParamDecl]
    static: bool = False
    const: bool = False             # a const method


@dataclass
class Method:
    cls: str
    members: dict[str, bool] = field(default_factory=dict)  # member name -> is static


_SPECIFIERS = {"inline", "static", "constexpr", "extern", "virtual", "explicit", "friend", "__inline", "kernel",
               "METAL_FUNC"}


def signature(unit: Unit, f: FnDef) -> Signature:
    toks, src = unit.toks, unit.src
    name = f.name_at
    lparen = name + 1
    if toks[lparen].text == "<":  # an explicit specialization's name<args>
        raise Unsupported(name, "an explicit specialization of a function template that uses SIMD-group functions")
    if toks[lparen].text != "(":
        raise Unsupported(name, "this function declaration")
    rparen = close(toks, lparen)
    i = f.head
    template = None
    head = template_head(unit, f)
    tparams: list[TParam] = head[1] if head else []
    if head:
        template = (i, head[0])
        if head[0] == i + 2:
            raise Unsupported(i, "an explicit specialization of a function template that uses SIMD-group functions")
        for p in tparams:
            if p.template:
                raise Unsupported(p.first, "a template template parameter on a function that uses SIMD-group functions")
            if not p.name and toks[p.end - 1].text in (">", ">>"):
                # unnamed (`enable_if_t<C, bool> = true`): named here, so the twin can pass it on
                p.name = f"__mk_tp_{p.first}"
                src.insert_after(p.end - 1, f" {p.name}")
            elif not p.name:
                raise Unsupported(p.first, "an unnamed template parameter on a function that uses SIMD-group functions")
            p.text = " ".join(src.text_of(j) for j in range(p.first, p.end))
        i = head[0] + 1
    # Specifiers, attributes, then the return type.
    static = False
    ret_start = None
    while i < name:
        if i in unit.attr_at:
            i = unit.attr_at[i][0] + 1
            continue
        w = toks[i].text
        if w == "__attribute__" and toks[i + 1].text == "(":
            i = close(toks, i + 1) + 1
            continue
        if w in _SPECIFIERS and ret_start is None:
            static |= w == "static"
            if w == "friend":
                raise Unsupported(i, "a friend function that uses SIMD-group functions")
            i += 1
            continue
        if ret_start is None:
            ret_start = i
        i += 1
    if ret_start is None:
        raise Unsupported(name, "a constructor, destructor or conversion that uses SIMD-group functions")
    ret = (ret_start, name - 1)
    ret_words = [toks[k].text for k in range(ret[0], ret[1] + 1)]
    if "auto" in ret_words or "decltype" in ret_words:
        raise Unsupported(ret_start, "a deduced return type on a function that uses SIMD-group functions; "
                                     "write the return type")
    if toks[name - 1].text in ("::", "~", "operator") or (f.cls and f.name == f.cls):
        raise Unsupported(name, "an operator, constructor or out-of-class method that uses SIMD-group functions")
    quals = [toks[k].text for k in range(rparen + 1, f.body[0])]
    if "->" in quals:
        raise Unsupported(rparen, "a trailing return type on a function that uses SIMD-group functions")
    params = parameters(unit, lparen, rparen)
    return Signature(template, tparams, ret, lparen, rparen, params, static, "const" in quals)


def value_template_params(unit: Unit, f: FnDef) -> frozenset:
    """Names of the template parameters of f that are values, not types (`template <F f, typename T>`: f)."""
    head = template_head(unit, f)
    return frozenset(p.name for p in head[1] if p.value) if head else frozenset()


def template_head(unit: Unit, f: FnDef) -> tuple[int, list[TParam]] | None:
    """f's `template <...>`: the index of its '>' and its parameters, or None."""
    toks = unit.toks
    if toks[f.head].text != "template" or toks[f.head + 1].text != "<":
        return None
    rangle = close_angle(toks, f.head + 1, after_name=True)
    out = []
    for s, e in split(toks, f.head + 2, rangle):
        eq = next((j for j in range(s, e) if toks[j].text == "="), e)
        words = [toks[j] for j in range(s, eq)]
        ids = [t.text for t in words if t.kind == "id" and t.text not in ("typename", "class")]
        fptr = next((toks[j + 2].text for j in range(s, eq - 2) if toks[j].text == "(" and toks[j + 1].text == "*"
                     and toks[j + 2].kind == "id"), None)
        if fptr is not None:  # a function pointer, `void (*f)(args)`: named inside the parentheses
            name = fptr
        elif toks[eq - 1].text in (">", ">>"):
            name = ""  # `enable_if_t<C, bool> = true`
        else:
            name = ids[-1] if ids else ""
        value = bool(words) and words[0].text not in ("typename", "class", "template") and words[-1].kind == "id"
        out.append(TParam(s, eq, name, any(t.text == "..." for t in words), value,
                          any(t.text == "template" for t in words)))
    return rangle, out


def parameters_of(unit: Unit, f: FnDef) -> list[ParamDecl]:
    """f's function parameters ([] where its name is not followed by a parameter list)."""
    lparen = f.name_at + 1
    return parameters(unit, lparen, close(unit.toks, lparen)) if unit.toks[lparen].text == "(" else []


def parameters(unit: Unit, lparen: int, rparen: int) -> list[ParamDecl]:
    toks, src = unit.toks, unit.src
    out = []
    for s, e in split(toks, lparen + 1, rparen):
        eq = next((j for j in range(s, e) if toks[j].text == "="), e)
        words = [j for j in range(s, eq) if not unit.in_attr(j)]
        if [toks[j].text for j in words] == ["void"]:
            continue
        if any(toks[j].text == "..." for j in words):
            raise Unsupported(s, "a parameter pack on a function that uses SIMD-group functions")
        if any(toks[j].text == "(" for j in words):
            raise Unsupported(s, "a function-pointer or array-reference parameter on a function that uses "
                                 "SIMD-group functions")
        dims = next((j for j in words if toks[j].text == "["), None)
        end = dims if dims is not None else eq
        ids = [j for j in words if j < end and toks[j].kind == "id"]
        name_tok = ids[-1] if len(ids) >= 2 and toks[ids[-1]].text not in _TYPE_TAIL else -1
        type_toks = [j for j in words if j < end and j != name_tok]
        type_text = " ".join(t for t in (src.text_of(j) for j in type_toks) if t)
        if dims is not None:
            type_text += "*"  # an array parameter is a pointer
        ref = any(toks[j].text in ("&", "&&") for j in type_toks)
        default = (eq + 1, e - 1) if eq < e else None
        space = space_in(toks[j].text for j in type_toks)
        out.append(ParamDecl(toks[name_tok].text if name_tok >= 0 else "", name_tok, type_text, ref, default, (s, e - 1),
                             space))
    return out


def writable_ref(p: ParamDecl) -> bool:
    """Whether a parameter is a reference through which its callee may write the argument: not a
    reference to const (`const T*&` refers to a pointer the callee may move; `T* const&` does not)."""
    if not p.ref:
        return False
    words = p.type_text.replace("*", " * ").replace("&", " & ").split()
    referred = words[:words.index("&")]
    stars = [k for k, w in enumerate(referred) if w == "*"]
    return "const" not in referred[stars[-1] + 1:] if stars else "const" not in referred


_TYPE_TAIL = {"const", "volatile", "int", "float", "half", "short", "long", "char", "unsigned", "bool", "uint",
              "ushort", "uchar", "ulong", "bfloat", "restrict", "__restrict"}


def class_members(unit: Unit, body: int) -> dict[str, bool]:
    """Names declared at the top level of the class body opened at toks[body]: name -> is static."""
    toks = unit.toks
    end = close(toks, body)
    out: dict[str, bool] = {}
    j = body + 1
    stmt_static = False
    stmt_type = False  # typedef / using / nested type: not a member
    while j < end:
        x = toks[j]
        if x.text == "{":
            j = close(toks, j) + 1
            if toks[j - 2].text != "=" and toks[j - 2].text != ",":  # a function body ends its declaration
                stmt_static = stmt_type = False
            continue
        if x.text in ("(",):
            j = close(toks, j) + 1
            continue
        if x.text == ";" or (x.text == ":" and toks[j - 1].text in ("public", "private", "protected")):
            stmt_static = stmt_type = False
        elif x.text == "static":
            stmt_static = True
        elif x.text in ("typedef", "using", "struct", "class", "union", "enum", "template", "friend"):
            stmt_type = stmt_type or x.text in ("typedef", "using", "struct", "class", "union", "enum")
        elif x.kind == "id" and not stmt_type and j + 1 < end and toks[j + 1].text in ("(", ";", "=", "[", ",", "{"):
            if x.text not in ("operator",):
                out.setdefault(x.text, stmt_static)
        j += 1
    return out


def base_classes(unit: Unit, body: int) -> list[str]:
    """Names of the base classes in the head of the class body opened at toks[body]."""
    toks = unit.toks
    k = body - 1
    while k > 0 and toks[k].text not in (";", "}", "{"):
        k -= 1
    colon = next((j for j in range(k + 1, body) if toks[j].text == ":"), None)
    if colon is None:
        return []
    names = []
    j = colon + 1
    while j < body:
        w = toks[j].text
        if w == "<":
            j = close_angle(toks, j, body) + 1
            continue
        if w not in ("public", "private", "protected", "virtual", ",", "::") and (
                j + 1 == body or toks[j + 1].text in (",", "<")):
            names.append(w)
        j += 1
    return names
