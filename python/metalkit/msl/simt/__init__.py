"""The SIMT pass: kernels with barriers or SIMD-group functions run their SIMD-groups in lockstep.

Every kernel that reaches a barrier or SIMD-group function, and every helper it
reaches, is rewritten so that one call runs a whole SIMD-group of 32 lanes
statement by statement (analysis.py analyses each body, regions.py sorts its
statements into pieces, emit.py writes them; include/metalkit/simt.h is what the
code runs on):

- the kernel keeps its signature and is called once per SIMD-group; its
  per-thread builtins become per-lane values; its body is replaced;
- a helper keeps its definition (kernels that run as fibers, and calls through
  function pointers, use it) and gains a twin: ``__mk_simt_<name>``, declared
  with the same parameters and the marker return type ``mk::simt::tag<Tag, R>``,
  so overload resolution finds the twin of the overload the call would pick,
  and ``Tag::call``, the helper's body as SIMT code taking per-lane arguments;
- a kernel the transform cannot handle (see syntax.Unsupported), or one that
  calls SIMD-group functions through a function passed as a template argument,
  runs a fiber per thread, and ``Kernel.execution`` says why; its lanes still
  advance statement by statement together (steps.py).
"""
from __future__ import annotations

from ..model import FnDef, Kernel, Unit
from ..tokens import Token
from ..passes.callgraph import LOG_METHODS, Reach
from ..passes.params import BUILTINS
from . import fission, functions, names as names_mod, regions, scan, steps
from .analysis import Function
from .emit import LANE_LOOP, LANES, Emitter
from .resolve import Var
from .syntax import Parser
from .unsupported import Unsupported

# Builtins whose value is base + lane: always, or when the threadgroup's rows hold whole SIMD-groups.
AFFINE = {
    "thread_index_in_simdgroup": ("always", "0u"),
    "thread_index_in_threadgroup": ("always", "__f.sg * 32u"),
    "thread_position_in_threadgroup": ("maybe", "__f.pos[0].x"),
    "thread_position_in_grid": ("maybe", "__f.base.x + __f.pos[0].x"),
}
SCALAR_TYPES = {"uint", "ushort", "int", "short", "uint32_t", "uint16_t", "int32_t", "int16_t", "ulong", "long",
                "size_t"}
# Vector positions: x is the scalar's base + lane (or tile column), y and z the SIMD-group's first lane's.
VECTOR_TYPES = {"uint2": 2, "uint3": 3, "ushort2": 2, "ushort3": 3}
POSITION_BASES = {"thread_position_in_threadgroup": "__f.pos[0].{c}",
                  "thread_position_in_grid": "__f.base.{c} + __f.pos[0].{c}"}
# A position within a threadgroup plus a lane does not wrap (a threadgroup has far fewer than 2^32
# threads): told so, the compiler indexes by it with contiguous vector loads instead of gathers.
IN_THREADGROUP = {"thread_position_in_threadgroup", "thread_index_in_threadgroup"}
NO_WRAP = "0xffffffffu - 32u"
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


def transform(unit: Unit, reach: Reach, text: str, head: int = 0, split: bool = False) -> None:
    """Rewrites the SIMT functions of `unit` and sets each kernel's `execution`. ``split``: kernels
    whose barriers allow it run as regions (fission.py; builds that run SIMT kernels without fibers)."""
    for k in unit.kernels:
        k.execution = "loop"
    sync_kernels = [k for k in unit.kernels if k.needs_sync]
    if not sync_kernels:
        return
    names = names_mod.collect(text, head)
    sync_names = {n for n, s in reach.sync.items() if s}
    unit.log_helpers = _log_helpers(unit, reach) - sync_names
    by_name: dict[str, list[FnDef]] = {}
    for f in unit.functions:
        by_name.setdefault(f.name, []).append(f)
    ref_params = _ref_params(unit, by_name)

    def reachable(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(reach.calls.get(n, ()))
        return seen & sync_names

    def where(e: Unsupported) -> str:
        file, line, _ = unit.src.where(unit.toks[e.tok])
        return f"{e.why} ({file}:{line})"

    # Helpers: a SIMT twin for each one a kernel reaches.
    helpers: dict[int, _HelperPlan] = {}
    failed: dict[str, str] = {}  # helper name -> why (one of its overloads) cannot be transformed
    for name in sorted(set().union(*(reachable(k.function) for k in sync_kernels))):
        for f in by_name.get(name, ()):
            if f.is_kernel or not reach.defs.get(id(f)):
                continue  # a definition that reaches no SIMD-group function keeps per-lane calls
            try:
                plan = _HelperPlan(unit, f, _body(unit, f, names), sync_names, ref_params)
                plan.prepare()
                helpers[id(f)] = plan
            except Unsupported as e:
                failed.setdefault(name, where(e))
    # Kernels: SIMT unless something they reach cannot be. A SIMT function passed as a template
    # argument is called through a pointer: its twin is found through __mk_fn_twin (simt.h).
    why: dict[str, str] = {}
    twins_of_args: dict[str, int] = {}  # a specialisation of __mk_fn_twin -> the token it goes before
    for k in sync_kernels:
        passed = sorted({t.text for t in unit.toks[k.targs[0]:k.targs[1] + 1] if t.text in sync_names})
        bad = sorted(n for n in reachable(k.function) if n in failed)
        if passed and (unit.call_sync is None or k.pointer.count("::") > 1):
            # Without clang's facts a call through the pointer is not known to be one; in a
            # namespace the specialisation cannot be declared where the instantiation is.
            why[k.host_name] = (f"fibers: it calls '{passed[0]}', passed as a template argument, through a "
                                "function pointer")
        elif passed and not bad:  # (with a helper failed, no twins are written: see below)
            at = _statement_start(unit, k.targs[0])
            for text in _fn_twins(unit, k.targs, sync_names):
                twins_of_args.setdefault(text, at)
        elif bad:
            why[k.host_name] = f"fibers: {failed[bad[0]]}"
    kernels_of: dict[str, list[Kernel]] = {}
    for k in sync_kernels:
        kernels_of.setdefault(k.function, []).append(k)
    for fname, ks in kernels_of.items():
        fns = [f for f in by_name.get(fname, ()) if f.is_kernel]
        reason = next((why[k.host_name] for k in ks if k.host_name in why), None)
        plans = []
        # Split at its barriers: one definition, none of them reached through a helper or a
        # function passed as a template argument.
        splits = split and len(fns) == 1 and not any(reach.barrier.get(c) for c in reach.calls.get(fname, ())) \
            and not any(t.text in sync_names for k in ks for t in unit.toks[k.targs[0]:k.targs[1] + 1])
        if reason is None:
            try:
                for f in fns:
                    plan = _KernelPlan(unit, f, _body(unit, f, names), sync_names, ref_params, splits)
                    plan.prepare()
                    plans.append(plan)
            except Unsupported as e:
                reason = f"fibers: {where(e)}"
        for k in ks:
            # One body serves every instantiation of a kernel template: all run one way.
            k.execution = why.get(k.host_name) or reason or "simt"
            k.regions = plans[0].regions if k.execution == "simt" and len(plans) == 1 else 0
            if k.execution != "simt" and k.host_name not in why and reason is not None and reason != why.get(k.host_name):
                k.execution = reason
        if reason is None:
            for plan in plans:
                plan.apply()
        else:
            for f in fns:
                steps.insert(unit, f)
    for plan in helpers.values():
        plan.apply()
    for text, at in twins_of_args.items():
        unit.src.insert_before(at, text + " ")


def _statement_start(unit: Unit, i: int) -> int:
    """The first token of the declaration holding token i."""
    while i > 0 and unit.toks[i - 1].text not in (";", "}", "{"):
        i -= 1
    return i


def _log_helpers(unit: Unit, reach: Reach) -> set[str]:
    """Names of the user functions that call an os_log method (<metal_logging>), themselves or
    through the functions they call. A SIMT kernel calls them lane by lane telling each its lane
    (simt.h invoke_logging), so their messages name the thread."""
    toks = unit.toks
    out = set()
    for f in unit.functions:
        a, b = f.body
        if not f.is_kernel and any(toks[i].text in LOG_METHODS and toks[i - 1].text in (".", "->")
                                   and toks[i + 1].text == "(" for i in range(a + 1, b)):
            out.add(f.name)
    kernels = {f.name for f in unit.functions if f.is_kernel}
    changed = True
    while changed:
        changed = False
        for name, callees in reach.calls.items():
            if name not in out and name not in kernels and callees & out:
                out.add(name)
                changed = True
    return out


def _fn_twins(unit: Unit, targs: tuple[int, int], sync_names: set[str]) -> list[str]:
    """Partial specialisations of __mk_fn_twin (simt.h) for the SIMT functions among a kernel
    instantiation's template arguments (and theirs): `f<A>` gets `call`, declared as its twin
    `__mk_simt_f<A>`."""
    toks: list[Token] = []
    for t in unit.toks[targs[0]:targs[1] + 1]:  # `f<g<int>>`: each template-id closes alone
        toks += [Token(">", "punct", t.line, t.col)] * 2 if t.text == ">>" else [t]
    words = [t.text for t in toks]
    out = []
    for j, w in enumerate(words):
        if w not in sync_names or (j + 1 < len(words) and words[j + 1] == "("):
            continue
        start = j
        while start >= 2 and words[start - 1] == "::":
            start -= 2
        end = scan.close_angle(toks, j + 1) if j + 1 < len(words) and words[j + 1] == "<" else j
        head, tail = " ".join(words[start:j]), " ".join(words[j + 1:end + 1])
        fn = f"{head} {w} {tail}".strip()
        twin = f"{head} __mk_simt_{w} {tail}".strip()
        out.append(f"template <auto __F> struct __mk_fn_twin<__F, typename __mk_when<__F == "
                   f"static_cast<decltype(__F)>(&{fn})>::type> {{ template <class... __X> static auto "
                   f"call(__X&&... __x) -> decltype({twin}(static_cast<__X&&>(__x)...)); }};")
    return out


def _body(unit: Unit, f: FnDef, names):
    params = [p.name for p in functions.parameters_of(unit, f)]
    return Parser(unit.toks, names, unit.attr_at, f.body[1] + 1, params, unit.statements).block(f.body[0])


def _ref_params(unit: Unit, by_name: dict) -> dict[str, set[int]]:
    """User function name -> positions where some overload takes a non-const reference (it may write the argument);
    every user function has an entry (a callee without one may write any argument it can)."""
    out: dict[str, set[int]] = {}
    for name, fs in by_name.items():
        out.setdefault(name, set())
        for f in fs:
            try:
                params = functions.parameters_of(unit, f)
            except Unsupported:
                continue
            for i, p in enumerate(params):
                if functions.writable_ref(p):
                    out.setdefault(name, set()).add(i)
    return out


class _KernelPlan:
    """A kernel: called once per SIMD-group, its signature unchanged, its body replaced."""

    def __init__(self, unit: Unit, f: FnDef, body, sync_names, ref_params, splits: bool = False):
        self.unit, self.f = unit, f
        self.decls = functions.parameters_of(unit, f)
        kinds = {p.name: p for p in f.params}
        params = []
        for d in self.decls:
            p = kinds.get(d.name)
            builtin = p.builtin if p is not None and p.kind == "builtin" else ""
            if builtin in LANE_BUILTINS:
                v = Var(d.name, "builtin", d.name_tok, uniform=False, builtin=builtin, type_text=d.type_text)
            else:
                v = Var(d.name, "kparam", d.name_tok, pointer="*" in d.type_text, ref=d.ref, type_text=d.type_text,
                        space=d.space)
            params.append(v)
        self.fn = Function(unit, body, params, sync_names, {}, False, ref_params,
                           functions.value_template_params(unit, f))
        written = set().union(*(i.writes for i in self.fn.info.values()))
        for v in params:
            words = v.type_text.replace("const", "").split()
            if v.builtin in AFFINE and v not in written and len(words) == 1 and words[0] in SCALAR_TYPES:
                v.affine, v.affine_base = AFFINE[v.builtin]
            elif v.builtin in POSITION_BASES and v not in written and len(words) == 1 and words[0] in VECTOR_TYPES:
                v.affine, v.vector = "maybe", VECTOR_TYPES[words[0]]
        self.emitter = Emitter(self.fn, True, False)
        self.pieces = regions.form(self.fn)
        self.split = None
        if splits and any(p.kind == "B" for p in self.pieces):
            tparams = {p.name for p in functions.signature(unit, f).tparams if p.name} if f.is_template else set()
            self.split = fission.split(self.fn, self.pieces, tparams)
        self.regions = len(self.split.regions) if self.split else 0

    def prepare(self) -> None:
        e, f = self.emitter, self.f
        prologue = ["mk::simt::frame& __f = *mk::simt::current_frame; unsigned __m = __f.alive, __rt = 0u; (void)__rt;",
                    _partial_decl(False)]
        if any(v.lanes and v.builtin.startswith("thread_position") for v in self.fn.params):
            prologue.append("const bool __affine = __f.affine; (void)__affine; "
                            "const unsigned __rows = __f.rows; (void)__rows;")
        for v in self.fn.params:
            if v.vector:
                for c in "xyz"[:v.vector]:
                    base = POSITION_BASES[v.builtin].format(c=c)
                    prologue.append(f"const unsigned __b_{v.name}_{c} = {base}; (void)__b_{v.name}_{c};")
                    if v.builtin in IN_THREADGROUP:
                        prologue.append(f"__builtin_assume(__b_{v.name}_{c} <= {NO_WRAP});")
            elif v.affine:
                prologue.append(f"const unsigned __b_{v.name} = {v.affine_base}; (void)__b_{v.name};")
                if v.builtin in IN_THREADGROUP:
                    prologue.append(f"__builtin_assume(__b_{v.name} <= {NO_WRAP});")
        for v in self.fn.params:
            if not v.lanes or v.affine == "always":
                continue
            value = f"mk::builtin<{v.type_text}>({LANE_BUILTINS[v.builtin]})" if v.kind == "builtin" \
                else f"__mk_p_{v.name}"
            prologue.append(f"mk::lanes<{v.type_text}> {v.name}; {LANES} {v.name}.set(__l, {value});")
        a, b = f.body
        e.put(a, "{ " + " ".join(prologue))
        if self.split:
            e.emit_split(self.pieces, self.split)
        else:
            e.emit_list(self.pieces, False)
        e.put(b, "}")

    def apply(self) -> None:
        for v in self.fn.params:
            if v.lanes:
                self.unit.src.replace(v.decl_tok, v.decl_tok, f"__mk_p_{v.name}")
        self.emitter.apply(*self.f.body)


SMALL_HELPER = 16  # statements of a helper whose twin gets a version for a full mask


def _partial_decl(partial: bool) -> str:
    """The declaration telling a body's twin calls whether its mask never holds every lane."""
    return f"constexpr bool __mk_partial = {'true' if partial else 'false'};"


class _HelperPlan:
    """A helper: its SIMT twin, appended after its definition (which stays as it is)."""

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
        params = [Var(d.name, "param", d.name_tok, uniform=False, ref=d.ref, pointer="*" in d.type_text,
                      type_text=d.type_text, space=d.space) for d in self.sig.params if d.name]
        self.fn = Function(unit, body, params, sync_names, members if self.method else {}, self.method, ref_params,
                           functions.value_template_params(unit, f))
        void = [unit.toks[k].text for k in range(self.sig.ret[0], self.sig.ret[1] + 1)] == ["void"]
        # A small helper (a simdgroup_matrix fragment wrapper, say) is written twice, once for a full
        # mask: its per-lane statements then run without lane tests, which the compiler vectorises.
        self.full_twin = sum(1 for _ in body.walk()) <= SMALL_HELPER
        self.emitter = Emitter(self.fn, False, not void)
        self.pieces = regions.form(self.fn)

    def prepare(self) -> None:
        src, f, sig, e = self.unit.src, self.f, self.sig, self.emitter
        text = lambda a, b: " ".join(t for t in (src.text_of(k) for k in range(a, b + 1)) if t)
        tag = f"__mk_simt_{f.name}_{f.name_at}"
        head = struct_head = ""
        tag_ref = tag
        if sig.tparams:
            head = text(*sig.template)
            struct_head = "template <" + ", ".join(p.text for p in sig.tparams) + ">"
            tag_ref = tag + "<" + ", ".join(p.name + ("..." if p.pack else "") for p in sig.tparams) + ">"
        ret = text(*sig.ret)
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
                take = (f"if constexpr (sizeof...(__A) > {offset + i}) {{ {take} }} "
                        f"else {{ {LANES} {d.name}.set(__l, {text(*d.default)}); }}")
            binds.append(f"mk::lanes<{d.type_text}> {d.name}; {take}")
        a, b = f.body
        e.put(a, f"{{ unsigned __rt = 0u; (void)__rt; (void)__ret; " + " ".join(binds))
        e.emit_list(self.pieces, False)
        e.put(b, "}")
        twin = (f"{struct_head} struct {tag}; {head} {'static ' if sig.static else ''}mk::simt::tag<{tag_ref}, {ret}> "
                f"__mk_simt_{f.name}({text(sig.lparen + 1, sig.rparen - 1)}){' const' if sig.const else ''};")
        params = f"mk::simt::frame& __f, unsigned __m, mk::simt::ret_lanes_t<{ret}>* __ret, __A&&... __a"
        if not self.full_twin:
            self.code = (f" {twin} {struct_head} struct {tag} {{ "
                         f"template <class... __A> static void call({params}) {{ {_partial_decl(False)} {e.text()} }} }};")
            return
        # The partial-mask version (never every lane) marks the mask it passes to twins, whose
        # simdgroup_matrix operations then run rolled loops (mk::simt::twin_mask).
        # The full-mask version is inlined into its caller with its lane loops unrolled: every
        # lane's value then has a constant index and a reference parameter a known target, so the
        # compiler keeps them in registers (a fragment goes from the caller's per-lane values into
        # the matrix and back without passing through memory or arrays of pointers).
        body = e.text()
        full = body.replace(LANE_LOOP, f'_Pragma("clang loop unroll(full)") {LANE_LOOP}')
        args = "__f, __m, __ret, static_cast<__A&&>(__a)..."
        inline = "__attribute__((always_inline))"
        self.code = (f" {twin} {struct_head} struct {tag} {{ "
                     f"template <class... __A> {inline} static void __mk_full({params}) {{ "
                     f"__m = ~0u; {_partial_decl(False)} {full} }} "
                     f"template <class... __A> static void __mk_any({params}) {{ {_partial_decl(True)} {body} }} "
                     f"template <class... __A> {inline} static void call({params}) {{ "
                     f"if (__m == ~0u) __mk_full({args}); else __mk_any({args}); }} }};")

    def apply(self) -> None:
        self.unit.src.insert_after(self.f.body[1], self.code)


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
