"""Function definitions at namespace and class scope, and explicit instantiations.

Finds every ``name(params) ... { body }`` outside function bodies (methods
count too: the barrier/SIMD call graph follows them by name), which of them are
kernels (``kernel`` or ``[[kernel]]`` in the declaration), and every
``template ...;`` without a parameter list (an explicit instantiation).
"""
from __future__ import annotations

from ..model import FnDef, Unit
from ..source import match, match_angle
from . import params as params_pass

_TRAILING = ("const", "noexcept", "override", "->", "thread", "device", "constant", "threadgroup")


def find(unit: Unit) -> None:
    toks, src = unit.toks, unit.src
    n = len(toks)
    attr_at = unit.attr_at
    unit.kernel_marks = {i for i, t in enumerate(toks) if t.text == "kernel" and t.kind == "id"}
    unit.kernel_marks |= {k for k, (_, al) in attr_at.items() if any(a.name == "kernel" for a in al)}
    for i, t in enumerate(toks):
        if t.text in ("vertex", "fragment") and t.kind == "id" and i + 1 < n and toks[i + 1].kind == "id":
            raise src.error(t, f"{t.text} functions cannot run on metalkit's CPU backend; only kernel functions can")
    attr_end = {e: s for s, (e, _) in attr_at.items()}

    scope: list[str] = []      # namespace names ("" for other braces)
    classes: list[tuple[str, int]] = []  # (name, '{' index) of each open scope that is a class body
    stmt_start = 0
    i = 0
    while i < n:
        t = toks[i]
        if i in attr_at:
            i = attr_at[i][0] + 1
            continue
        if t.text == "namespace":
            j = i + 1
            names = []
            while j < n and toks[j].text not in ("{", ";", "="):
                if toks[j].kind == "id":
                    names.append(toks[j].text)
                j += 1
            if j < n and toks[j].text == "{":
                scope.append("::".join(names) or "<anon>")
                i = j + 1
                stmt_start = i
                continue
        if t.text == "template" and i + 1 < n and unit.skip_attrs(i + 1) < n and toks[unit.skip_attrs(i + 1)].text != "<":
            j = i
            while j < n and toks[j].text != ";":
                j += 1
            unit.instantiations.append((i, j))
            i = j + 1
            stmt_start = i
            continue
        if t.text == "(" and all(s != "" for s in scope):
            # A function definition at namespace or class scope: name ( params ) ... {
            try:
                close = match(toks, i, "(", ")")
            except IndexError:
                raise src.error(t, "unbalanced parentheses") from None
            k = unit.skip_attrs(close + 1)
            while k < n and toks[k].text in _TRAILING or (k < n and toks[k].kind == "id" and toks[k - 1].text == "->"):
                k = unit.skip_attrs(k + 1)
            prev = i - 1
            while prev in attr_end:
                prev = attr_end[prev] - 1
            if k < n and toks[k].text == "{" and prev >= stmt_start and toks[prev].kind == "id":
                body_end = match(toks, k, "{", "}")
                head = range(stmt_start, i)
                is_kernel = any(h in unit.kernel_marks for h in head)
                if is_kernel and not any(toks[h].text == "void" for h in head):
                    raise src.error(toks[prev], f"kernel function '{toks[prev].text}' must return void")
                params = params_pass.parse(unit, i, close) if is_kernel else []
                cls, cls_body = classes[-1] if scope and scope[-1] == "<class>" else ("", -1)
                unit.functions.append(FnDef(toks[prev].text, params, (k, body_end), is_kernel,
                                            toks[stmt_start].text == "template", unit.attrs_between(stmt_start, i),
                                            "::".join(s for s in scope if not s.startswith("<")),
                                            toks[prev], stmt_start, prev, cls, cls_body))
                i = body_end + 1
                stmt_start = i
                continue
            i = close + 1
            continue
        if t.text == "{":
            # A class body holds methods (scanned like functions); other braces hold statements.
            # A template head's default arguments (`class Op = Less<T>`) are not an initializer.
            start = stmt_start
            while start < i and toks[start].text == "template" and toks[start + 1].text == "<":
                try:
                    start = match_angle(toks, start + 1) + 1
                except IndexError:
                    break
            head = {x.text for x in toks[start:i]}
            is_class = bool(head & {"struct", "class", "union"}) and "enum" not in head and "=" not in head
            scope.append("<class>" if is_class else "")
            if is_class:
                classes.append((_class_name(toks, stmt_start, i), i))
            stmt_start = i + 1
        elif t.text == "}":
            if scope and scope.pop() == "<class>":
                classes.pop()
            stmt_start = i + 1
        elif t.text == ";":
            stmt_start = i + 1
        i += 1


def _class_name(toks, a: int, b: int) -> str:
    """The name a class head toks[a:b] declares (`template <class T> struct S : B`)."""
    depth = 0
    for k in range(a, b - 1):
        x = toks[k].text
        depth += (x == "<") - (x == ">") - 2 * (x == ">>")
        if depth == 0 and x in ("struct", "class", "union") and toks[k + 1].kind == "id":
            return toks[k + 1].text
    return ""
