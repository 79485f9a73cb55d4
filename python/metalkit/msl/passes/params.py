"""Kernel parameter lists, read at token level.

Each parameter's name, address space and kind: a buffer (``device``/``constant``
pointer or ``device T&``), a scalar (``constant T&`` or by value), threadgroup
memory (``[[threadgroup(i)]]``), or a builtin (``[[thread_position_in_grid]]``
...). A buffer without ``[[buffer(n)]]`` takes the previous index + 1, as Metal
does. Types are described later by the compiled module itself.
"""
from __future__ import annotations

from ..consteval import const_int
from ..model import Param, Unit
from .attributes import int_arg

BUILTINS = {
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "dispatch_threads_per_threadgroup", "threadgroups_per_grid",
    "threads_per_grid", "grid_size", "grid_origin", "thread_index_in_threadgroup",
    "thread_execution_width", "threads_per_simdgroup", "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup", "thread_index_in_quadgroup",
    "quadgroup_index_in_threadgroup", "quadgroups_per_threadgroup", "dispatch_quadgroups_per_threadgroup",
}
SPACES = {"device": 1, "constant": 2, "threadgroup": 3, "thread": 4}
UNSUPPORTED_PARAM_ATTRS = {"stage_in", "texture", "sampler", "payload", "imageblock_data",
                           "color", "raster_order_group", "indirect_buffer"}


def parse(unit: Unit, open_: int, close: int) -> list[Param]:
    """The parameters of the kernel whose parameter list is toks[open_] '(' .. toks[close] ')'."""
    src, toks, attr_at = unit.src, unit.toks, unit.attr_at
    groups, cur, depth = [], [], 0
    k = open_ + 1
    while k < close:
        if k in attr_at:
            cur.append(("attr", k))
            k = attr_at[k][0] + 1
            continue
        t = toks[k].text
        if t == "," and depth == 0:
            groups.append(cur)
            cur = []
        else:
            depth += t in "([{" or t == "<"
            depth -= t in ")]}" or t == ">"
            depth -= 2 * (t == ">>")
            cur.append(("tok", k))
        k += 1
    if cur:
        groups.append(cur)
    params = []
    next_buffer = 0
    for g in groups:
        words = [toks[k] for kind, k in g if kind == "tok"]
        if len(words) == 1 and words[0].text == "void":
            continue
        attrs = [a for kind, k in g if kind == "attr" for a in attr_at[k][1]]
        head = next((i for i, w in enumerate(words) if w.text == "["), len(words))  # before an array's [N]
        ids = [w for w in words[:head] if w.kind == "id" and w.text not in ("const", "volatile", "restrict", "__restrict")]
        if len(ids) < 2:
            raise src.error(words[0] if words else toks[open_], "every kernel parameter needs a name")
        name = ids[-1].text
        decl = " ".join(w.text for w in words).replace(" *", "*").replace(" &", "&").replace(" [ ", "[").replace(" ]", "]")
        array = _array_length(src, words, ids[-1])
        space = next((SPACES[w.text] for w in words if w.text in SPACES), 0)
        pointer = any(w.text == "*" for w in words)
        ref = any(w.text in ("&", "&&") for w in words)
        builtin = [a for a in attrs if a.name in BUILTINS]
        when = next((a.args for a in attrs if a.name == "function_constant"), "")
        bad = [a for a in attrs if a.name in UNSUPPORTED_PARAM_ATTRS]
        if bad:
            raise src.error(ids[-1], f"[[{bad[0].name}]] parameters (textures, samplers, stage_in) are not supported "
                                     "by the CPU backend; pass data as device buffers")
        unknown = [a for a in attrs
                   if a.name not in BUILTINS and a.name not in ("buffer", "threadgroup", "id", "function_constant")]
        if unknown:
            raise src.error(ids[-1], f"unknown parameter attribute [[{unknown[0].name}]] on '{name}'")
        if builtin:
            params.append(Param(name, decl, space, "builtin", -1, builtin[0].name))
            continue
        tg = [a for a in attrs if a.name == "threadgroup"]
        if tg or space == SPACES["threadgroup"]:
            idx = int_arg(src, tg[0], ids[-1]) if tg else 0
            params.append(Param(name, decl, space, "threadgroup", idx, when=when))
            continue
        buf = [a for a in attrs if a.name == "buffer"]
        idx = int_arg(src, buf[0], ids[-1]) if buf else next_buffer
        next_buffer = idx + 1
        if array and (pointer or ref or space != SPACES["constant"]):
            raise src.error(ids[-1], f"array parameter '{name}' must be `constant T {name}[N]` (a value "
                                     "passed like a scalar); pass a buffer as a pointer")
        if pointer or (ref and space == SPACES["device"]):
            kind = "buffer"
        else:
            kind = "scalar"
            if ref:
                # A `constant T&` is bound to metalkit's own copy of the caller's value, which
                # nothing else can reach: __restrict lets the compiler read it once, not again
                # after every store the kernel makes (a loop bound, a kargs struct's fields).
                src.insert_after(next(k for kind_, k in g if kind_ == "tok" and toks[k].text == "&"), "__restrict")
        params.append(Param(name, decl, space, kind, idx, when=when, array=array))
    seen = {}
    for p in params:
        if p.kind in ("buffer", "scalar") and not p.when:
            if p.index in seen:
                raise src.error(toks[open_], f"parameters '{seen[p.index]}' and '{p.name}' both use [[buffer({p.index})]]")
            seen[p.index] = p.name
    return params


def _array_length(src, words, name_tok) -> int:
    """N of a parameter declared `T name[N]` (0 if it is not an array)."""
    k = next(i for i, w in enumerate(words) if w is name_tok)
    if k + 1 >= len(words) or words[k + 1].text != "[":
        return 0
    dims = [w.text for w in words[k + 1:]]
    if dims.count("[") > 1:
        raise src.error(name_tok, f"array parameter '{name_tok.text}' has more than one dimension; "
                                  "declare it with one (constant T x[N * M])")
    try:
        n = const_int(" ".join(dims[1:-1]))
    except ValueError:
        n = 0
    if n <= 0:
        raise src.error(name_tok, f"the length of array parameter '{name_tok.text}' must be a positive integer "
                                  "constant the front end can evaluate (a literal or an expression of literals)")
    return n
