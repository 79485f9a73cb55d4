"""The SIMT pass: kernels with barriers or SIMD-group functions run their SIMD-groups in lockstep.

Every kernel that reaches a barrier or SIMD-group function, and every helper it
reaches, is rewritten so that one call runs a whole SIMD-group of 32 lanes
statement by statement (analysis.py decides what each statement needs,
emit.py writes it; include/metalkit/simt.h is what the code runs on):

- the kernel keeps its signature and is called once per SIMD-group; its
  per-thread builtins become per-lane values;
- a helper keeps its declaration with a marker return type
  ``mk::simt::tag<Tag, R>`` (so overload resolution picks it as before) and its
  body moves to ``Tag::call``, which takes per-lane arguments;
- a function the transform cannot handle (see syntax.Unsupported) leaves the
  kernels that reach it to the fiber-per-thread fallback, and says why in
  ``Kernel.execution``.
"""
from __future__ import annotations

from ..model import FnDef, Kernel, Unit
from ..passes.callgraph import Reach
from ..passes.params import BUILTINS
from . import functions, names as names_mod
from .analysis import Function, Var
from .emit import LANES, Emitter
from .syntax import Parser, Unsupported

# Builtins that differ between the lanes of a SIMD-group, as per-lane expressions.
LANE_BUILTINS = {
    "thread_position_in_grid": "__f.pos_in_grid(__l)",
    "thread_position_in_threadgroup": "__f.pos_in_group(__l)",
    "thread_index_in_threadgroup": "__f.index(__l)",
    "thread_index_in_simdgroup": "__l",
    "thread_index_in_quadgroup": "(__l & 3u)",
    "quadgroup_index_in_threadgroup": "(__f.index(__l) / 4u)",
}
assert set(LANE_BUILTINS) <= BUILTINS


class _Failed(Exception):
    pass


def transform(unit: Unit, reach: Reach, text: str) -> None:
    """Rewrites the SIMT functions of `unit` and sets each kernel's `execution`."""
    sync_kernels = [k for k in unit.kernels if k.needs_sync]
    for k in unit.kernels:
        k.execution = "loop"
    if not sync_kernels:
        return
    names = names_mod.collect(text)
    sync_names = {n for n, s in reach.sync.items() if s}
    by_name: dict[str, list[FnDef]] = {}
    for f in unit.functions:
        by_name.setdefault(f.name, []).append(f)

    def reachable(k: Kernel) -> set[str]:
        seen, todo = set(), [k.function]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo.extend(reach.calls.get(n, ()))
        return seen & sync_names | {k.function}

    reached = {k.host_name: reachable(k) for k in sync_kernels}
    kernel_fns = {id(f) for f in unit.functions if f.is_kernel}
    ref_params = _ref_params(unit, by_name)
    plans: dict[int, object] = {}
    failed: dict[str, str] = {}  # function name -> why it cannot be transformed
    for name in sorted(set().union(*reached.values())):
        for f in by_name.get(name, ()):
            try:
                plan = _plan(unit, f, names, sync_names, ref_params, id(f) in kernel_fns)
                plan.prepare()
                plans[id(f)] = plan
            except Unsupported as e:
                file, line, _ = unit.src.where(unit.toks[e.tok])
                failed.setdefault(name, f"{e.why} ({file}:{line})")
    # Kernels that reach an untransformable function run as fibers, and so does every kernel that
    # shares a helper with one of them (a helper is either transformed or not).
    fiber: dict[str, str] = {}
    for k in sync_kernels:
        bad = sorted(n for n in reached[k.host_name] if n in failed)
        if bad:
            fiber[k.host_name] = f"fibers: {failed[bad[0]]}"
    changed = True
    while changed:
        changed = False
        scalar = set().union(*(reached[h] for h in fiber)) if fiber else set()
        for k in sync_kernels:
            if k.host_name not in fiber and reached[k.host_name] & scalar - {k.function}:
                other = next(h for h in fiber if reached[h] & reached[k.host_name])
                fiber[k.host_name] = f"fibers: it shares a helper with kernel '{other}' ({fiber[other][8:]})"
                changed = True
    simt_names: set[str] = set()
    for k in sync_kernels:
        if k.host_name in fiber:
            k.execution = fiber[k.host_name]
        else:
            k.execution = "simt"
            simt_names |= reached[k.host_name]
    done: set[int] = set()
    for name in sorted(simt_names):
        for f in by_name.get(name, ()):
            if id(f) in plans and id(f) not in done:
                done.add(id(f))
                plans[id(f)].apply()


def _plan(unit: Unit, f: FnDef, names, sync_names: set[str], ref_params: dict, is_kernel: bool):
    """Parses and analyses one function; returns a plan whose prepare() writes the code and apply() puts it in."""
    parser = Parser(unit.toks, names, unit.attr_at, f.body[1] + 1)
    body = parser.block(f.body[0])
    if is_kernel:
        return _KernelPlan(unit, f, body, sync_names, ref_params)
    return _HelperPlan(unit, f, body, sync_names, ref_params)


def _ref_params(unit: Unit, by_name: dict) -> dict[str, set[int]]:
    """User function name -> positions where some overload takes a non-const reference (it may write the argument)."""
    out: dict[str, set[int]] = {}
    for name, fs in by_name.items():
        for f in fs:
            try:
                sig_params = functions.parameters(unit, f.name_at + 1, _close(unit, f.name_at + 1)) \
                    if unit.toks[f.name_at + 1].text == "(" else []
            except (Unsupported, IndexError):
                continue
            for i, p in enumerate(sig_params):
                if p.ref and not p.type_text.startswith("const"):
                    out.setdefault(name, set()).add(i)
    return out


def _close(unit: Unit, lparen: int) -> int:
    from ..source import match
    return match(unit.toks, lparen, "(", ")")


class _KernelPlan:
    """A kernel: called once per SIMD-group, its signature unchanged."""

    def __init__(self, unit: Unit, f: FnDef, body, sync_names, ref_params):
        self.unit, self.f = unit, f
        lparen = f.name_at + 1
        self.decls = functions.parameters(unit, lparen, _close(unit, lparen))
        kinds = {p.name: p for p in f.params}
        params = []
        for d in self.decls:
            p = kinds.get(d.name)
            if p is not None and p.kind == "builtin" and p.builtin in LANE_BUILTINS:
                v = Var(d.name, "builtin", d.name_tok, uniform=False)
            else:
                v = Var(d.name, "kparam", d.name_tok, pointer="*" in d.type_text, ref=d.ref)
            v.builtin = p.builtin if p is not None else ""
            v.type_text = d.type_text
            params.append(v)
        self.fn = Function(unit, body, params, sync_names, {}, False, ref_params)
        self.emitter = Emitter(self.fn, True, False)
        self.emitter.sort_and_place()

    def prepare(self) -> None:
        e, f = self.emitter, self.f
        prologue = ["mk::simt::frame& __f = *mk::simt::current_frame; unsigned __m = __f.alive, __rt = 0u; (void)__rt;"]
        for v in self.fn.params:
            if not v.lanes:
                continue
            if v.kind == "builtin":
                value = f"mk::builtin<{v.type_text}>({LANE_BUILTINS[v.builtin]})"
            else:
                value = f"__mk_p_{v.name}"
            prologue.append(f"mk::lanes<{v.type_text}> {v.name}; {LANES} {v.name}.set(__l, {value});")
        a, b = f.body
        e.put(a, "{ " + " ".join(prologue))
        e.emit_pieces()
        e.put(b, "}")

    def apply(self) -> None:
        for v in self.fn.params:
            if v.lanes:
                self.unit.src.replace(v.decl_tok, v.decl_tok, f"__mk_p_{v.name}")
        self.emitter.apply(*self.f.body)


class _HelperPlan:
    """A helper: its declaration gets a marker return type, its body becomes Tag::call."""

    def __init__(self, unit: Unit, f: FnDef, body, sync_names, ref_params):
        self.unit, self.f = unit, f
        self.sig = functions.signature(unit, f)
        members: dict[str, bool] = {}
        self.method = bool(f.cls) and not self.sig.static
        if f.cls:
            members = functions.class_members(unit, f.cls_body)
            for base in functions.base_classes(unit, f.cls_body):
                body_at = _class_body(unit, base)
                if body_at is not None:
                    for n, st in functions.class_members(unit, body_at).items():
                        members.setdefault(n, st)
        params = []
        for d in self.sig.params:
            if not d.name:
                continue
            v = Var(d.name, "param", d.name_tok, uniform=False, ref=d.ref, pointer="*" in d.type_text)
            v.type_text = d.type_text
            params.append(v)
        self.fn = Function(unit, body, params, sync_names, members if self.method else {}, self.method, ref_params)
        self.emitter = Emitter(self.fn, False, True)
        self.emitter.sort_and_place()

    def prepare(self) -> None:
        unit, src, f, sig, e = self.unit, self.unit.src, self.f, self.sig, self.emitter
        tag = f"__mk_simt_{f.name}_{f.name_at}"
        head = struct_head = ""
        tag_ref = tag
        if sig.tparams:
            head = "template <" + ", ".join(p.text for p in sig.tparams) + ">"
            struct_head = head
            tag_ref = tag + "<" + ", ".join(p.name + ("..." if p.pack else "") for p in sig.tparams) + ">"
        ret = src.text_of(sig.ret[0]) if sig.ret[0] == sig.ret[1] else " ".join(
            src.text_of(k) for k in range(sig.ret[0], sig.ret[1] + 1))
        ret = " ".join(w for w in ret.split() if w)
        # The forward declaration of the tag, then the declaration with the marker return type.
        self.declaration = (f"{struct_head} struct {tag};", f"mk::simt::tag<{tag_ref}, {ret}>")
        a, b = f.body
        binds = []
        offset = 1 if self.method else 0
        if self.method:
            cls = f.cls + (" const" if sig.const else "")
            binds.append(f"mk::lanes<{cls}*> __this; {LANES} __this.set(__l, &mk::simt::nth<0>(__a...)(__l));")
        for i, d in enumerate(sig.params):
            if not d.name:
                continue
            take = f"{LANES} {d.name}.set(__l, mk::simt::nth<{offset + i}>(__a...)(__l));"
            if d.default is not None:
                dflt = " ".join(src.text_of(k) for k in range(d.default[0], d.default[1] + 1))
                take = (f"if constexpr (sizeof...(__A) > {offset + i}) {{ {take} }} "
                        f"else {{ {LANES} {d.name}.set(__l, {dflt}); }}")
            binds.append(f"mk::lanes<{d.type_text}> {d.name}; {take}")
        start = (f"; {struct_head} struct {tag} {{ template <class... __A> static void call(mk::simt::frame& __f, "
                 f"unsigned __m, typename mk::simt::ret_lanes<{ret}>::type* __ret, __A&&... __a) {{ "
                 f"unsigned __rt = 0u; (void)__rt; (void)__ret; " + " ".join(binds))
        e.put(a, start)
        e.emit_pieces()
        e.put(b, "} };")

    def apply(self) -> None:
        src, sig = self.unit.src, self.sig
        src.insert_before(self.f.head, self.declaration[0])
        src.replace(sig.ret[0], sig.ret[1], self.declaration[1])
        self.emitter.apply(*self.f.body)


def _class_body(unit: Unit, name: str):
    toks = unit.toks
    for i in range(len(toks) - 2):
        if toks[i].text in ("struct", "class") and toks[i + 1].text == name:
            j = i + 2
            while j < len(toks) and toks[j].text not in ("{", ";"):
                j += 1
            if j < len(toks) and toks[j].text == "{":
                return j
    return None
