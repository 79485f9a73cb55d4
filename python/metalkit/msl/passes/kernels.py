"""The kernels of a source: plain kernel definitions and ``host_name`` instantiations of kernel templates.

``template [[host_name("x")]] kernel ...;`` stays an explicit instantiation and
gains, on the same line and in the same namespace, a constexpr pointer to the
instantiation for the launcher. With ``only`` (the host names to build), other
instantiations are dropped and other kernel functions become ``inline``, so the
compiler emits no code for them and one kernel of a large library builds fast.
"""
from __future__ import annotations

from ..consteval import const_int
from ..model import FnDef, Kernel, Unit
from ..source import MslError, Source, match, match_angle
from .attributes import host_name, int_arg


def collect(unit: Unit, duplicates: str) -> None:
    """Fills unit.kernels. ``duplicates="drop"``: kernels sharing a host name are left out instead
    of being an error (text read without preprocessing holds both branches of an ``#if``)."""
    src, toks, only = unit.src, unit.toks, unit.only
    kernels: list[Kernel] = []
    by_name: dict[str, FnDef] = {}  # a kernel's name: its kernel definition (a helper may share the name)
    for f in sorted(unit.functions, key=lambda f: not f.is_kernel):
        by_name.setdefault(f.name, f)
    for f in unit.functions:
        if f.is_kernel and not f.is_template:
            host = next((host_name(a) for a in f.attrs if a.name == "host_name"), f.name)
            qual = f"::{f.scope}::{f.name}" if f.scope else f"::{f.name}"
            kernels.append(Kernel(host, "&" + qual, f.params, *src.where(f.tok)[:2], _max_threads(src, f),
                                  function=f.name))
            if only is not None and host not in only:
                for h in range(f.head, f.body[0]):
                    if toks[h].text == "kernel" and toks[h].kind == "id":
                        src.replace(h, h, "inline")  # no launcher refers to it: not emitted
                        unit.dropped.add(h)
    for a, b in unit.instantiations:
        if not any(k in unit.kernel_marks for k in range(a, b)) and not any(
                x.name == "host_name" for x in unit.attrs_between(a, b)):
            continue  # an explicit instantiation of a helper function or class
        kernel, decl = _instantiation(unit, a, b, by_name, len(kernels))
        kernels.append(kernel)
        if only is not None and kernel.host_name not in only:
            src.blank(a, b)  # no explicit instantiation: no code for it
            unit.dropped.update(range(a, b + 1))
            unit.consumed.update(k for k in unit.attr_at if a <= k <= b)
        else:
            src.insert_after(b, decl)
    made: dict = {}
    for k in kernels:
        if k.targs[1] >= k.targs[0] and (only is None or k.host_name in only):
            k.max_threads = _max_threads_of(unit, by_name[k.function], k.targs, made)
    names: dict[str, Kernel] = {}
    twice: set[str] = set()
    for k in kernels:
        if k.host_name in names:
            if duplicates != "drop":
                raise MslError(k.file, k.line, 1, f"two kernels are named {k.host_name!r}; give each a distinct name")
            twice.add(k.host_name)
        names[k.host_name] = k
    unit.kernels = [k for k in kernels if k.host_name not in twice]


def _max_threads(src: Source, f: FnDef) -> int:
    for a in f.attrs:
        if a.name == "max_total_threads_per_threadgroup":
            if f.is_template:
                try:
                    return const_int(a.args)
                except ValueError:
                    return 1024  # WM * WN * 32: per instantiation (_max_threads_of)
            return int_arg(src, a, f.tok)
    return 1024


def _max_threads_of(unit: Unit, tmpl: FnDef, targs: tuple[int, int], made: dict) -> int | str:
    """A template kernel's max_total_threads_per_threadgroup for one instantiation: the attribute's
    expression as a C++ constant expression of the instantiation's template arguments. A function
    template with the kernel's own template head, defined before it, evaluates it; an instantiation
    whose arguments are all deduced (no <...>) keeps the 1024 Metal allows."""
    attr = next((a for a in tmpl.attrs if a.name == "max_total_threads_per_threadgroup"), None)
    if attr is None or not tmpl.is_template:
        return _max_threads(unit.src, tmpl)
    try:
        return const_int(attr.args)
    except ValueError:
        pass
    toks = unit.toks
    if targs[1] < targs[0]:
        return 1024
    if id(tmpl) not in made:
        close = match_angle(toks, tmpl.head + 1)
        head = " ".join(t.text for t in toks[tmpl.head:close + 1])
        name = f"max_threads_{len(made)}"
        # Before the kernel template (its body may be rewritten whole by the SIMT pass).
        unit.src.insert_before(tmpl.head, f"{head} constexpr unsigned __mk_{name}() {{ return ({attr.args}); }}")
        made[id(tmpl)] = ("::" + tmpl.scope + "::" if tmpl.scope else "::") + "__mk_" + name
    return made[id(tmpl)] + " ".join(t.text for t in toks[targs[0]:targs[1] + 1]) + "()"


def _instantiation(unit: Unit, a: int, b: int, by_name: dict, serial: int):
    """`template [[host_name("x")]] kernel DECL;` -> a Kernel, and the declaration of its pointer
    (inserted after the instantiation: same scope, same line)."""
    src, toks, attr_at = unit.src, unit.toks, unit.attr_at
    attrs = [x for k, (_, al) in attr_at.items() if a <= k < b for x in al]
    host = next((host_name(x) for x in attrs if x.name == "host_name"), None)
    # The declarator-id: the last name at paren depth 0 followed by <...>, ( or ;.
    name_i, targs_end, depth = None, None, 0
    k = a + 1
    while k < b:
        if k in attr_at:
            k = attr_at[k][0] + 1
            continue
        t = toks[k]
        if t.text in ("decltype", "sizeof", "alignof", "noexcept") and k + 1 < b and toks[k + 1].text == "(":
            k = match(toks, k + 1, "(", ")") + 1
            continue
        if t.text == "(":
            if depth == 0 and name_i is not None and targs_end == k - 1:
                break
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif depth == 0 and t.kind == "id" and t.text not in ("kernel", "device", "constant", "thread", "threadgroup"):
            nxt = k + 1
            if nxt < b and toks[nxt].text == "<":
                try:
                    nxt = match_angle(toks, nxt) + 1
                except IndexError:
                    nxt = b
            if nxt == b or toks[nxt].text == "(":
                name_i, targs_end = k, nxt - 1
                if nxt == b:
                    break
                k = nxt
                continue
        k += 1
    if name_i is None:
        raise src.error(toks[a], "cannot read this template instantiation; write it as "
                                 "`template [[host_name(\"name\")]] kernel void f<T>(params...);`")
    fname = toks[name_i].text
    if host is None:
        host = fname
    tmpl = by_name.get(fname)
    if tmpl is None or not tmpl.is_kernel:
        raise src.error(toks[name_i], f"'{fname}' is instantiated as a kernel but no kernel template of that name "
                                      "is defined before it")
    ref = "&" + " ".join(t.text for t in toks[name_i:targs_end + 1])
    ptr = f"__mk_fp_{serial}"
    words = []
    k = a + 1
    while k < b:
        if k in attr_at:
            k = attr_at[k][0] + 1
            continue
        t = toks[k].text
        if k == name_i:
            words.append(f"(*{ptr})")
            k = targs_end + 1
            continue
        if t not in ("kernel",):
            words.append("const" if t == "constant" else "" if t in ("device", "thread", "threadgroup") else t)
        k += 1
    # Declared in place (same scope as the instantiation), on the same line.
    decl = f" static constexpr {' '.join(w for w in words if w)} = {ref};"
    qual = f"::{tmpl.scope}::{ptr}" if tmpl.scope else f"::{ptr}"
    return Kernel(host, qual, tmpl.params, *src.where(toks[name_i])[:2], _max_threads(src, tmpl), function=fname,
                  targs=(name_i + 1, targs_end)), decl


def blank_unbuilt(unit: Unit) -> None:
    """With ``only``, the bodies of kernel functions that no built kernel uses become ``{}``: nothing
    compiles them, and nothing in them needs rewriting."""
    built = {k.function for k in unit.kernels}
    src = unit.src
    for f in unit.functions:
        if f.is_kernel and f.name not in built:
            a, b = f.body
            if b > a + 1:
                src.blank(a + 1, b - 1)
                for i in range(a + 1, b):
                    src.after.pop(i, None)
                    src.before.pop(i, None)
                unit.dropped.update(range(a + 1, b))
                for ln in range(unit.toks[a].line, unit.toks[b].line):  # loop hints with no loop left
                    if src.lines[ln].lstrip().startswith("#pragma"):
                        src.line_out[ln] = ""
