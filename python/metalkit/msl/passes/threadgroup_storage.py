"""``threadgroup T x[N];`` declared in a function body becomes per-threadgroup storage.

One OS thread runs a whole threadgroup, so ``static thread_local`` is exactly
per-group storage. Left uninitialised, as on Metal, unless the declaration has an
initializer (``threadgroup float s[32] = {0};``, which Apple's compiler accepts):
then the storage holds that value when each threadgroup starts. The first thread
of a group to reach the declaration copies it in, once (``mk::group_serial``
counts the groups an OS thread has started), so no thread's stores made before
another thread reaches the declaration are lost. In a checked build (check= races, uninit,
lockstep), and in the guarded build check=True runs, the name is bound instead to storage the
runtime gives out, which ends right at an inaccessible guard (so ``s[64]`` faults and is named,
src/cpu/guarded.h), and each thread reaching the declaration names that storage to the runtime,
which then knows its bytes for threadgroup memory (checked builds only).
"""
from __future__ import annotations

from ..model import Unit
from . import keywords


def rewrite(unit: Unit, checked: bool = False) -> None:
    """``checked``: bound to guarded storage (a checked or guarded build)."""
    for f in unit.functions:
        if _rewrite_body(unit, *f.body, checked):
            unit.threadgroup_functions.add(f.name)


def _rewrite_body(unit: Unit, a: int, b: int, checked: bool) -> bool:
    """`threadgroup T x[N];` in a function body: per-threadgroup storage.

    Metal refuses a kernel whose threadgroup declarations pass 32 KiB; so does
    a static_assert after each one, on the running total of those declared at
    the body's top level (template kernels are checked per instantiation).
    Whether the body declares any.
    """
    src = unit.src
    toks = src.toks
    total = ""          # C++ expression: bytes declared so far at the top level
    serial = 0
    depth_at = 0        # brace depth within the body
    found = False
    for i in range(a, b):
        t = toks[i].text
        depth_at += (t == "{") - (t == "}")
        if t != "threadgroup" or toks[i - 1].text not in ("{", ";", "}", ":"):
            continue
        j = i + 1
        depth = 0
        pointer = False
        while j < b and not (depth == 0 and toks[j].text in (";", "=", "[", ",")):
            depth += toks[j].text in "(<"
            depth -= toks[j].text in ")>"
            pointer |= depth == 0 and toks[j].text in ("*", "&", "&&")
            j += 1
        if pointer:
            continue
        m, depth, names, init = j, 0, [j - 1], None
        while m < b and not (depth == 0 and toks[m].text == ";"):
            if depth == 0 and toks[m].text in ("=", "{") and init is None:
                init = m
            if depth == 0 and toks[m].text == "," and m + 1 < b and toks[m + 1].kind == "id":
                names.append(m + 1)
            depth += toks[m].text in "([{"
            depth -= toks[m].text in ")]}"
            m += 1
        if init is not None and len(names) > 1:
            raise src.error(toks[init], "a threadgroup declaration with an initializer declares one variable; "
                                        "declare each on its own")
        src.replace(i, i, "static thread_local")
        # Code refers to the storage through a reference bound once per call: a thread-local's
        # address costs a runtime call each time it is looked up.
        for k in names:
            src.replace(k, k, f"__mk_tg_{toks[k].text}")
        if not checked:
            refs = " ".join(f"auto& {toks[k].text} = __mk_tg_{toks[k].text};" for k in names)
            if init is not None:
                refs = _initialise(unit, i, names[0], init, m, f"__mk_tg_{toks[names[0]].text}") + " " + refs
        else:
            # Bound to guarded storage; the thread-local only tells variables apart. The
            # initializer's copy comes before the thread names the variable to the runtime,
            # which then counts its bytes as written by the group, not by the thread that copied.
            refs = " ".join(f'auto& {toks[k].text} = ::metal::__mk::checked_threadgroup_storage('
                            f'__mk_tg_{toks[k].text}, "{toks[k].text}");' for k in names)
            if init is not None:
                refs += " " + _initialise(unit, i, names[0], init, m, toks[names[0]].text)
            refs += " " + " ".join(f'::metal::__mk::checked_threadgroup({toks[k].text}, '
                                   f'"{toks[k].text}", {int(init is not None)});' for k in names)
        names = [toks[k].text for k in names]
        size = " + ".join(f"sizeof({name})" for name in names)
        check = ('static_assert({} <= 32768, "threadgroup memory declared in this kernel passes the 32 KiB '
                 'Metal allows per threadgroup; use smaller tiles");')
        if depth_at == 1:  # the body's top level: keep a running total
            serial += 1
            var = f"__mk_tg_bytes_{serial}"
            total = f"{total} + {size}" if total else size
            insert = f" {refs} constexpr unsigned long long {var} = {total}; {check.format(var)}"
            total = var
        else:
            insert = f" {refs} " + check.format(size)
        src.insert_after(m, insert)
        found = True
    return found


def _initialise(unit: Unit, decl: int, name: int, init: int, semi: int, storage: str) -> str:
    """The code that gives `threadgroup T x[N] = init;` its value once per threadgroup: the
    initializer moves to a local `const T __mk_tgi_x[N] = init;` copied into `storage` by the
    group's first thread."""
    src, toks = unit.src, unit.toks
    x = toks[name].text
    words = lambda first, last: " ".join(keywords.literal_text(t) for t in toks[first:last])
    src.blank(init, semi - 1)
    unit.dropped.update(range(init, semi))
    return (f"const {words(decl + 1, name)} __mk_tgi_{x} {words(name + 1, init)} {words(init, semi)}; "
            f"static thread_local unsigned long long __mk_tgg_{x} = 0; if (__mk_tgg_{x} != ::mk::group_serial) "
            f"{{ __builtin_memcpy((void*)&{storage}, (const void*)&__mk_tgi_{x}, sizeof({storage})); "
            f"__mk_tgg_{x} = ::mk::group_serial; }}")
