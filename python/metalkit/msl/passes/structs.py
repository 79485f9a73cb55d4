"""Struct definitions whose layout the compiled module describes (``Kernel.args[i].dtype``).

C++ cannot list a struct's members, so this pass reads, at token level, each struct
defined at namespace scope (or in a non-template class) in the user's files: its
qualified name, template head and data member names. Codegen turns that into a
specialization of ``mk::fields<S>`` (include/metalkit/launch.h) whose table the
*compiler* fills with ``offsetof``, ``sizeof`` and the members' types, so the dtype is
exactly the layout the kernel reads (``alignas``, ``#pragma pack``, templates and
aliases included). Only what this pass is sure of gets a table; anything else
(private members, bit-fields, anonymous unions, references, base classes) leaves
the struct undescribed, and its parameters take any bytes of the right size.
"""
from __future__ import annotations

from ..model import StructDef, Unit
from ..source import match, match_angle

_CLASS_KEYS = ("struct", "class", "union")
_NOT_DATA = {"static", "typedef", "using", "friend", "template", "static_assert", "constexpr", "inline",
             "virtual", "operator", "explicit", "~"}
_ACCESS = {"public", "private", "protected"}
_SPACES = {"device", "constant", "thread", "threadgroup", "threadgroup_imageblock", "ray_data", "object_data"}


def find(unit: Unit) -> None:
    toks = unit.toks
    n = len(toks)
    bodies = {f.body[0]: f.body[1] for f in unit.functions}
    scope: list[str | None] = []  # qualified-name components; None: a scope structs in it cannot be named from
    stmt = 0
    i = 0
    while i < n:
        t = toks[i].text
        if i in bodies:  # function bodies: local structs cannot be kernel parameters
            i = bodies[i] + 1
            stmt = i
            continue
        if t == "namespace":
            j = i + 1
            names = []
            while j < n and toks[j].text not in ("{", ";", "="):
                if toks[j].kind == "id" and toks[j].text != "inline":
                    names.append(toks[j].text)
                j += 1
            if j < n and toks[j].text == "{":
                scope.append("::".join(names))  # "" for an unnamed namespace: its names are found from ::
                i = stmt = j + 1
                continue
        if t == "{":
            head = [x.text for x in toks[stmt:i]]
            end = _close(toks, i)
            if _is_class_head(head):
                sd = _struct(unit, stmt, i, end, scope)
                scope.append(sd.name if sd and sd.ok and not sd.template else None)
            elif "extern" in head and "=" not in head:  # extern "C" { ... }
                scope.append("")
            else:  # enum bodies, initializers: nothing to find inside
                i = stmt = end + 1
                continue
            i = stmt = i + 1
            continue
        if t == "}":
            if scope:
                scope.pop()
            stmt = i + 1
        elif t == ";" or (t == ":" and stmt == i - 1 and toks[i - 1].text in _ACCESS):
            stmt = i + 1
        i += 1


def _close(toks, i: int) -> int:
    try:
        return match(toks, i, "{", "}")
    except IndexError:
        return len(toks) - 1


def _is_class_head(head: list[str]) -> bool:
    """Whether a '{' after these tokens opens a class body (not an initializer, an enum or a function)."""
    depth, key = 0, False
    for x in head:
        depth += (x == "<") - (x == ">") - 2 * (x == ">>")
        if depth == 0:
            if x in ("=", "(", "enum"):
                return False
            key = key or x in _CLASS_KEYS
    return key


def _struct(unit: Unit, a: int, brace: int, end: int, scope) -> StructDef | None:
    """The struct whose head is toks[a:brace] and body toks[brace:end+1]."""
    toks = unit.toks
    k = a
    params: list[str] = []
    template = False
    if toks[k].text == "typedef":
        k += 1
    if toks[k].text == "template":
        template = True
        try:
            close = match_angle(toks, k + 1)
        except IndexError:
            return None
        params = _template_params(toks, k + 2, close)
        if params is None:
            return None
        k = close + 1
    k = unit.skip_attrs(k)
    while k < brace and toks[k].text not in _CLASS_KEYS:
        k += 1
    if k >= brace:
        return None
    key = toks[k].text
    k = unit.skip_attrs(k + 1)
    while k < brace and toks[k].text in ("alignas", "__attribute__"):
        k = _skip_group(toks, k + 1)
    name, spec_args = "", ""
    if k < brace and toks[k].kind == "id":
        name = toks[k].text
        k += 1
        if k < brace and toks[k].text == "<":  # a specialization: S<float>, S<T*>
            close = match_angle(toks, k)
            if any(x.text in _SPACES for x in toks[k:close + 1]):
                return None  # S<device T*>: the overloads pass keeps one of these, rewritten
            spec_args = " ".join(x.text for x in toks[k:close + 1])
            k = close + 1
    bases = any(toks[x].text == ":" for x in range(k, brace))
    if not name and toks[a].text == "typedef":  # typedef struct { ... } Name;
        j = end + 1
        while j < len(toks) and toks[j].text in ("*", "const"):
            j += 1
        if j < len(toks) and toks[j].kind == "id":
            name = toks[j].text
    if not name or any(s is None for s in scope):
        return None
    members, ok = _members(unit, brace, end, key != "class")
    if spec_args and not template:
        return None
    if not spec_args and template:
        spec_args = "<" + ", ".join(p[1] for p in params) + ">"
    qual = "::" + "::".join([s for s in scope if s] + [name])
    sd = StructDef(name=name, qualified=qual + spec_args, params=[p[0] for p in params], members=members,
                   ok=ok and not bases and key != "union", template=template)
    if sd.ok:
        unit.structs.append(sd)
    return sd


def _template_params(toks, a: int, b: int) -> list[tuple[str, str]] | None:
    """(declaration without its default, argument) for each template parameter in toks[a:b]."""
    out = []
    for part in _split(toks, a, b):
        eq = next((x for x in range(len(part)) if part[x].text == "="), len(part))
        decl = part[:eq]
        ids = [x for x in decl if x.kind == "id" and x.text not in ("typename", "class")]
        if not decl or not ids or decl[-1].kind != "id":
            return None  # an unnamed parameter cannot be forwarded
        pack = any(x.text == "..." for x in decl)
        out.append((" ".join(x.text for x in decl), decl[-1].text + ("..." if pack else "")))
    return out


def _split(toks, a: int, b: int) -> list[list]:
    """toks[a:b] split at commas outside brackets."""
    parts, cur, depth = [], [], 0
    for x in toks[a:b]:
        if x.text in ("(", "[", "{", "<"):
            depth += 1
        elif x.text in (")", "]", "}", ">"):
            depth -= 1
        elif x.text == ">>":
            depth -= 2
        if x.text == "," and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(x)
    if cur:
        parts.append(cur)
    return parts


def _skip_group(toks, k: int) -> int:
    """Past the parenthesised group starting at toks[k] (alignas(16), __attribute__((...)))."""
    if k < len(toks) and toks[k].text == "(":
        return match(toks, k, "(", ")") + 1
    return k


def _members(unit: Unit, brace: int, end: int, public: bool) -> tuple[list[str], bool]:
    """Data member names of the class body toks[brace..end], and whether the body is one metalkit can describe."""
    toks = unit.toks
    names: list[str] = []
    decl: list = []
    after_body = 0  # declarators of `struct {...} x;` start after the nested body
    k = brace + 1
    while k < end:
        t = toks[k]
        if t.text == "[" and k + 1 < end and toks[k + 1].text == "[":
            k = match(toks, k, "[", "]") + 1
            continue
        if t.text in ("alignas", "__attribute__", "__declspec"):
            k = _skip_group(toks, k + 1)
            continue
        if t.text in _ACCESS and k + 1 < end and toks[k + 1].text == ":" and not decl:
            public = t.text == "public"
            k += 2
            continue
        if t.text == "{":
            close = match(toks, k, "{", "}")
            texts = [x.text for x in decl]
            before_init = texts[:texts.index("=")] if "=" in texts else texts
            if "(" in before_init:
                decl, after_body = [], 0  # a method (or constructor) body
                k = close + 1
                if k < end and toks[k].text == ";":
                    k += 1
                continue
            if any(x in _CLASS_KEYS or x == "enum" for x in texts):
                after_body = len(decl)  # a nested type: its declarators, if any, follow
            decl.append(t)  # a brace initializer stands for its value
            k = close + 1
            continue
        if t.text == ";":
            got = _declarators(decl, after_body)
            if got is None:
                return names, False
            if got and not public:
                return names, False  # offsetof cannot name a private member from outside
            names.extend(got)
            decl, after_body = [], 0
            k += 1
            continue
        decl.append(t)
        k += 1
    return names, not decl


def _declarators(decl: list, after_body: int) -> list[str] | None:
    """Member names a declaration declares ([] for none: a method, a type); None if metalkit cannot describe it."""
    texts = [x.text for x in decl]
    if not decl or texts[0] in _NOT_DATA:
        return []
    if after_body:
        if after_body == len(decl) - 1:  # a nested type defined without a member of it
            anonymous = texts[after_body - 1] in _CLASS_KEYS
            return None if anonymous else []  # an anonymous union's members belong to the enclosing struct
        decl, texts = decl[after_body + 1:], texts[after_body + 1:]
        if not decl:
            return []
    eq = texts.index("=") if "=" in texts else len(texts)
    if "(" in texts[:eq]:
        return []  # a member function declaration
    if "operator" in texts:
        return []
    if "&" in texts[:eq] or "&&" in texts[:eq]:
        return None  # a reference member
    names = []
    for part in _split(decl, 0, len(decl)):
        ptexts = [x.text for x in part]
        cut = next((x for x, s in enumerate(ptexts) if s in ("=", "[", "{", ":")), len(ptexts))
        if ":" in ptexts:
            return None  # a bit-field has no offset
        if "=" in ptexts and any(s in ("<", ">", ">>") for s in ptexts[ptexts.index("="):]):
            return None  # a comparison in an initializer could have split the declarators wrongly
        if cut == 0 or part[cut - 1].kind != "id":
            return None
        names.append(part[cut - 1].text)
    return names
