"""What a SIMT function's statements do, lane by lane.

For one function body (parsed by syntax.py) this resolves every name to its local
variable, finds which statements read or write memory shared between lanes
(device and threadgroup memory, through pointers) and which call SIMD-group
functions, decides which locals hold the same value in every lane ("uniform":
kept as plain C++ variables, and the control flow they decide stays plain C++),
and sorts the statements into the units the emitter turns into code:

- U   uniform: runs once for the SIMD-group;
- L   per lane: a run of such statements becomes one loop over the active lanes
      ("region"), as long as that cannot change what any lane sees: a region
      either only reads shared memory or holds its one write to it;
- RW  a statement that reads shared memory and writes it: every lane's right-hand
      side is evaluated before any lane stores (two loops);
- H   calls a SIMD-group function or a SIMT helper (hoisted out, see emit.py);
- B   threadgroup_barrier;
- S   a control structure whose condition is uniform: plain C++, its body sorted again;
- M   a control structure with a per-lane condition around H/B/RW statements: run
      under execution masks, lanes reconverging after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import scan, syntax as sx
from .unsupported import Unsupported

# Standard-library functions whose result depends on their arguments only.
PURE = {
    "abs", "fabs", "min", "max", "fmin", "fmax", "clamp", "saturate", "sign", "mix", "step", "smoothstep", "fma",
    "sqrt", "rsqrt", "cbrt", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "powr", "pown",
    "rootn", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "sinpi", "cospi", "tanpi", "floor", "ceil", "round", "rint", "trunc", "fmod", "remainder", "copysign", "fdim",
    "hypot", "ldexp", "ilogb", "logb", "nextafter", "erf", "erfc", "tgamma", "lgamma", "isnan", "isinf", "isfinite",
    "isnormal", "signbit", "all", "any", "select", "dot", "cross", "length", "length_squared", "distance",
    "normalize", "reflect", "refract", "faceforward", "popcount", "clz", "ctz", "extract_bits", "insert_bits",
    "reverse_bits", "rotate", "mad", "mad24", "mul24", "mulhi", "madhi", "madsat", "addsat", "subsat", "absdiff",
    "hadd", "rhadd", "as_type", "divide", "precise", "fast", "metal", "transpose", "determinant", "pack_float_to_unorm4x8",
    "unpack_unorm4x8_to_float", "pack_float_to_snorm4x8", "unpack_snorm4x8_to_float", "pack_half_to_unorm2x16",
    "convert", "isordered", "isunordered", "fract", "median3", "min3", "max3", "fmin3", "fmax3", "fmedian3",
    "bit_cast", "numeric_limits", "static_cast", "make_filled_simdgroup_matrix",
}
# Standard-library functions that write through a reference argument.
OUT_PARAMS = {"modf", "frexp", "sincos", "remquo", "fract", "lgamma_r"}
# SIMD-group matrix functions that write their first argument.
MATRIX_OUT = {"simdgroup_load", "simdgroup_multiply", "simdgroup_multiply_accumulate"}
# SIMD-group functions whose result is the same in every active lane.
UNIFORM_RESULT = {
    "simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor", "simd_all", "simd_any",
    "simd_ballot", "simd_broadcast", "simd_broadcast_first", "simd_active_threads_mask",
}
# SIMD-group names that are not collective calls.
NOT_COLLECTIVE = {"simd_is_helper_thread", "quad_is_helper_thread", "simdgroup_barrier", "threadgroup_barrier"}
COLLECTIVE_PREFIXES = ("simd_", "quad_", "simdgroup_", "__metal_simd", "__metal_quad",
                       "__metal_get_thread_index_in_simdgroup")  # Apple's builtins (include/metalkit/builtins.h)


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES) and name not in NOT_COLLECTIVE and not name.startswith(
        ("simdgroup_matrix", "simdgroup_float", "simdgroup_half", "simdgroup_bfloat"))


@dataclass(eq=False)
class Var:
    name: str
    kind: str                 # local | param (of a helper) | kparam (of a kernel) | builtin | shared | this
    decl_tok: int = -1        # the name's token in its declaration
    array: bool = False       # declared with [N]
    dims: int = 0             # how many [N]: indexing deeper goes into the element (through it, if a pointer)
    pointer: bool = False
    ref: bool = False
    uniform: bool = True
    addressed: bool = False   # its address is taken
    units: set = field(default_factory=set)   # emission units that use it (filled by the sorter)
    lanes: bool = False       # stored as mk::lanes<T> (decided by the sorter)
    decl: object = None       # its Declarator, if declared in the body
    decl_stmt: object = None  # its Decl statement
    type_text: str = ""       # a parameter's C++ type
    affine: str = ""          # a builtin whose lane l value is affine_base + l: "always", or "maybe" (when
    affine_base: str = ""     # the frame says so; else read from its per-lane table)
    vector: int = 0           # an affine position builtin's components (2, 3), or 0 for a scalar's x
    matrix: bool = False      # a simdgroup_matrix: `*` on it is a SIMD-group function
    space: str = "?"          # what a pointer or reference points into (device, constant, threadgroup,
                              # thread), or where shared storage is (threadgroup)
    builtin: str = ""         # a kernel parameter's builtin attribute


def conflict(a: set, b: set) -> bool:
    """Whether accesses to spaces a and b may touch the same memory (? is any space)."""
    return bool(a & b) or bool(a and "?" in b) or bool(b and "?" in a)


@dataclass
class Info:
    """What an expression or a statement does."""
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)
    mem_r: set = field(default_factory=set)   # address spaces read: device, constant, threadgroup, ? (unknown)
    mem_w: set = field(default_factory=set)   # address spaces written
    impure: bool = False
    hoists: list = field(default_factory=list)   # calls of SIMD-group functions / SIMT helpers, innermost first
    barrier: bool = False
    simd_barrier: bool = False  # simdgroup_barrier: nothing to do for lanes in lockstep
    assign_rw: bool = False    # `lhs op= rhs` with lhs in shared memory and rhs reading it

    def rw(self) -> bool:
        """Whether it reads memory it (or another lane) may also write."""
        return conflict(self.mem_r, self.mem_w)

    def add(self, o: "Info") -> None:
        self.reads |= o.reads
        self.writes |= o.writes
        self.mem_r = self.mem_r | o.mem_r
        self.mem_w = self.mem_w | o.mem_w
        self.impure |= o.impure
        self.hoists += o.hoists
        self.barrier |= o.barrier


class Function:
    """One SIMT function's body, analysed."""

    def __init__(self, unit, body: sx.Block, params: list[Var], sync_names: set[str], members: dict[str, bool],
                 has_this: bool, ref_params: dict[str, set[int]], fn_tparams: frozenset = frozenset()):
        self.unit = unit
        self.fn_tparams = fn_tparams      # its template parameters that are values (a function passed so)
        self.body = body
        self.params = params
        self.sync_names = sync_names      # user functions that reach a SIMD-group function or barrier
        self.members = members            # implicit member names (in a method): name -> static
        self.has_this = has_this
        self.ref_params = ref_params      # user function -> positions of its non-const reference parameters
                                          # (every user function has one)
        self.vars: list[Var] = list(params)
        self.name_var: dict[int, Var] = {}  # token of a name -> the local it names
        self.member_toks: set[int] = set()  # tokens of implicit member names (in a method)
        self.this_var = Var("this", "this", uniform=False) if has_this else None
        self.info: dict[int, Info] = {}     # id(statement or expression) -> Info
        self.loop_varying: set[int] = set()  # ids of loops whose trip count differs between lanes
        self.has_return_value = False
        self._resolve()
        self._scan_all()
        self._variance()

    # ---------------------------------------------------------------- names
    def _resolve(self) -> None:
        scopes: list[dict[str, Var]] = [{p.name: p for p in self.params if p.name}]

        def lookup(name: str):
            for s in reversed(scopes):
                if name in s:
                    return s[name]
            return None

        def expr(e):
            if e is None:
                return
            for n in e.walk():
                if isinstance(n, sx.Name) and not n.qualified:
                    w = self.unit.toks[n.last].text
                    if w == "this":
                        if not self.has_this:
                            raise Unsupported(n.a, "`this` in a static function")
                        continue
                    v = lookup(w)
                    if v is not None:
                        self.name_var[n.last] = v
                        n.var = v
                    elif (w in self.members and not self.members[w] or w == "operator") and self.has_this:
                        self.member_toks.add(n.last)  # `operator()(x)` in a method: this->operator()(x)

        def declare(d: sx.Decl):
            for dc in d.declarators:
                expr(dc.init)
                for a in dc.ctor_args:
                    expr(a)
                name = self.unit.toks[dc.name].text
                ptr_words = [self.unit.toks[k].text for k in range(dc.ptr[0], dc.ptr[1] + 1)]
                # `threadgroup T x[N]` is storage of the group; `threadgroup T* p` a pointer to it.
                shared = bool(d.specs & {"threadgroup", "static"}) and not ({"*", "&", "&&"} & set(ptr_words))
                type_words = [self.unit.toks[k].text for k in range(d.type[0], d.type[1] + 1)]
                v = Var(name, "shared" if shared else "local", dc.name, array=dc.dims[1] >= dc.dims[0],
                        dims=self._dims(dc.dims), pointer="*" in ptr_words,
                        ref="&" in ptr_words or "&&" in ptr_words, decl=dc, decl_stmt=d)
                if "auto" in type_words or "decltype" in type_words:
                    v.pointer = True  # a deduced type may be a pointer: indexing it is not known to be private
                v.matrix = any(w.startswith("simdgroup_") for w in type_words)
                if v.matrix and dc.init_kind == "()" and len(dc.ctor_args) == 1:
                    dc.init = sx.Cast(dc.ctor_args[0].a - 1, dc.b, d.type, dc.ctor_args)
                    dc.init_kind, dc.ctor_args = "=", []
                v.space = "threadgroup" if shared else space_in(type_words + ptr_words)
                dc.var = v
                self.vars.append(v)
                self.name_var[dc.name] = v
                scopes[-1][name] = v

        def stmt(s):
            if isinstance(s, sx.Block):
                scopes.append({})
                for c in s.stmts:
                    stmt(c)
                scopes.pop()
            elif isinstance(s, sx.Decl):
                declare(s)
            elif isinstance(s, (sx.ExprStmt,)):
                expr(s.expr)
            elif isinstance(s, sx.Return):
                expr(s.value)
                self.has_return_value |= s.value is not None
            elif isinstance(s, sx.Case):
                expr(s.value)
            elif isinstance(s, sx.Other):
                for n in s.names:
                    expr(n)
            elif isinstance(s, sx.If):
                expr(s.cond)
                scopes.append({})
                stmt(s.then)
                scopes.pop()
                if s.els is not None:
                    scopes.append({})
                    stmt(s.els)
                    scopes.pop()
            elif isinstance(s, (sx.While, sx.Switch)):
                expr(s.cond)
                scopes.append({})
                stmt(s.body)
                scopes.pop()
            elif isinstance(s, sx.DoWhile):
                scopes.append({})
                stmt(s.body)
                scopes.pop()
                expr(s.cond)
            elif isinstance(s, sx.For):
                scopes.append({})
                if s.init is not None:
                    stmt(s.init)
                expr(s.cond)
                expr(s.inc)
                scopes.append({})
                stmt(s.body)
                scopes.pop()
                scopes.pop()

        stmt(self.body)

    def _dims(self, rng) -> int:
        """The number of `[N]` in a declarator's token range."""
        return sum(x == "[" and depth == 1 for _, x, depth in scan.levels(self.unit.toks, rng[0], rng[1] + 1))

    # ---------------------------------------------------------------- effects
    def callee_name(self, c) -> str:
        """The name a call calls ("" for a construction or an operator)."""
        f = getattr(c, "callee", None)
        if isinstance(f, sx.Name):
            return self.unit.toks[f.last].text
        if isinstance(f, sx.Member):
            return self.unit.toks[f.name].text
        return ""

    def through_tparam(self, c) -> bool:
        """Whether call c calls the function passed as one of this function's template arguments."""
        f = getattr(c, "callee", None)
        return isinstance(f, sx.Name) and not f.qualified and f.last not in self.name_var \
            and self.unit.toks[f.last].text in self.fn_tparams

    def is_sync_call(self, c: sx.Call) -> bool:
        name = self.callee_name(c)
        f = c.callee
        at = f.last if isinstance(f, sx.Name) else f.name if isinstance(f, sx.Member) else None
        said = (self.unit.call_sync or {}).get(at)
        if self.through_tparam(c):
            # clang places such a call at the template argument, not here: go through the twin
            # (simt.h's __mk_fn_twin), which is a plain call where the function passed has none.
            if not c.args:
                raise Unsupported(c.a, "a call without arguments through a function template parameter")
            return True
        if said is not None:  # clang resolved what this name calls
            if said and isinstance(f, sx.Name) and f.last in self.name_var:
                raise Unsupported(f.a, "a SIMD-group function called through a callable object")
            return said
        if isinstance(c.callee, sx.Member):
            return name in self.sync_names
        if isinstance(c.callee, sx.Name) and c.callee.last in self.name_var:
            return False  # a local callable
        return is_collective(name) or name in self.sync_names

    def is_matrix_type(self, rng) -> bool:
        return any(self.unit.toks[k].text.startswith("simdgroup_") for k in range(rng[0], rng[1] + 1))

    def is_matrix(self, e) -> bool:
        """Whether e is known to be a simdgroup_matrix."""
        e = _unparen(e)
        if isinstance(e, sx.Name):
            return e.var is not None and e.var.matrix
        if isinstance(e, sx.Binary) and e.op == "*":
            return self.is_matrix(e.lhs) or self.is_matrix(e.rhs)
        if isinstance(e, sx.Cast):
            return self.is_matrix_type(e.type)
        return False

    @staticmethod
    def touch(info: Info, space: str, reading: bool, writing: bool) -> None:
        if space == "thread":
            return  # a lane's own memory: no other lane sees it
        if reading:
            info.mem_r = info.mem_r | {space}
        if writing:
            info.mem_w = info.mem_w | {space}

    def space_of(self, e) -> str:
        """The address space a pointer-valued expression points into (? if unknown)."""
        e = _unparen(e)
        if isinstance(e, sx.Name):
            return e.var.space if e.var is not None else "?"
        if isinstance(e, sx.Cast):
            words = [self.unit.toks[k].text for k in range(e.type[0], e.type[1] + 1)]
            sp = space_in(words)
            return sp if sp != "?" or not e.args else self.space_of(e.args[0])
        if isinstance(e, sx.Binary) and e.op in ("+", "-"):
            sp = self.space_of(e.lhs)
            return sp if sp != "?" else self.space_of(e.rhs)
        if isinstance(e, sx.Unary) and e.op == "&":
            root = self._private_root(e.operand)
            if root is not None:
                return "thread"
            inner = _unparen(e.operand)
            if isinstance(inner, sx.Index):
                return self.space_of(inner.obj)
            if isinstance(inner, sx.Name) and inner.var is not None and inner.var.kind == "shared":
                return "threadgroup"
            return "?"
        if isinstance(e, sx.Index):
            root = self._private_root(e.obj) if isinstance(_unparen(e.obj), sx.Name) else None
            return root.space if root is not None else "?"  # an element of a local array of pointers
        return "?"

    def _private_root(self, e):
        """The local a private lvalue lives in (`x`, `x.f`, `x[i]` with x an array), else None."""
        while True:
            if isinstance(e, sx.Paren):
                e = e.inner
            elif isinstance(e, sx.Member) and not e.arrow:
                e = e.obj
            elif isinstance(e, sx.Index):
                root = self._private_root(e.obj)
                if root is None or (root.pointer and _index_depth(e) == root.dims + 1):
                    return None  # through a pointer (past an array of pointers' own elements): shared
                return root      # memory, as far as anyone can tell
            elif isinstance(e, sx.Name):
                v = e.var
                return v if v is not None and v.kind != "shared" and not v.ref else None
            else:
                return None

    def _array_element(self, e):
        """For `*(a + i)`, `*(i + a)`, `*(a - i)` or `*a` with `a` a local array (or a row of one):
        (a, [i]), else None."""
        e = _unparen(e)
        offsets = []
        if isinstance(e, sx.Binary) and e.op in ("+", "-"):
            base, off = (e.rhs, e.lhs) if e.op == "+" and self._local_array(e.rhs) else (e.lhs, e.rhs)
            e, offsets = _unparen(base), [off]
        return (e, offsets) if self._local_array(e) else None

    @staticmethod
    def _local_array(e) -> bool:
        """Whether e is a local array, or a row of one (`*` on it then selects a lane's own element)."""
        depth = _index_depth(e)
        e = _unparen(e)
        while isinstance(e, sx.Index):
            e = _unparen(e.obj)
        v = e.var if isinstance(e, sx.Name) else None
        return v is not None and v.array and depth < v.dims and not v.ref and v.kind != "shared"

    def scan(self, e, info: Info, mode: str = "r") -> None:
        """Adds what e does to info; mode: how e is used (r, w, rw, addr)."""
        if e is None:
            return
        reading = mode in ("r", "rw")
        writing = mode in ("w", "rw")
        if isinstance(e, sx.Name):
            v = e.var
            if v is not None:
                if mode in ("r", "rw", "addr"):
                    info.reads.add(v)
                if mode in ("w", "rw", "addr"):
                    info.writes.add(v)
                if mode == "addr":
                    v.addressed = True
                if v.kind == "shared" or v.ref:
                    self.touch(info, v.space, reading, writing)
            elif e.last in self.member_toks or self.unit.toks[e.last].text == "this":
                info.reads.add(self.this_var)
                self.touch(info, "?", reading, writing)
            return
        if isinstance(e, sx.Paren):
            self.scan(e.inner, info, mode)
        elif isinstance(e, sx.Index):
            self.scan(e.idx, info, "r")
            if self._private_root(e) is not None:
                self.scan(e.obj, info, mode)
            else:
                self.scan(e.obj, info, "r")
                self.touch(info, self.space_of(e.obj), reading, writing)
        elif isinstance(e, sx.Member):
            if e.arrow:
                self.scan(e.obj, info, "r")
                self.touch(info, self.space_of(e.obj), reading, writing)
            else:
                self.scan(e.obj, info, mode)
        elif isinstance(e, sx.Unary):
            element = self._array_element(e.operand) if e.op == "*" else None
            if element is not None:  # `*(a + i)` of a local array `a` is `a[i]`: the lane's own element
                array, offsets = element
                for off in offsets:
                    self.scan(off, info, "r")
                self.scan(array, info, mode)
            elif e.op == "*":
                self.scan(e.operand, info, "r")
                self.touch(info, self.space_of(e.operand), reading, writing)
            elif e.op == "&":
                self.scan(e.operand, info, "addr")
            elif e.op in ("++", "--"):
                self.scan(e.operand, info, "rw")
            else:
                self.scan(e.operand, info, "r")
        elif isinstance(e, sx.Assign):
            self.scan(e.rhs, info, "r")
            lhs = Info()
            self.scan(e.lhs, lhs, "w" if e.op == "=" else "rw")
            info.add(lhs)
        elif isinstance(e, sx.Binary):
            self.scan(e.lhs, info, "r")
            rhs = Info()
            self.scan(e.rhs, rhs, "r")
            if rhs.hoists and e.op in ("&&", "||"):
                raise Unsupported(e.rhs.a, f"a SIMD-group function on the right of '{e.op}'")
            info.add(rhs)
            if e.op == "*" and (self.is_matrix(e.lhs) or self.is_matrix(e.rhs)):
                info.hoists.append(e)  # a simdgroup_matrix product
        elif isinstance(e, sx.Cond):
            self.scan(e.cond, info, "r")
            branches = Info()
            self.scan(e.then, branches, mode)
            self.scan(e.els, branches, mode)
            if branches.hoists:
                raise Unsupported(e.then.a, "a SIMD-group function in a branch of '?:'")
            info.add(branches)
        elif isinstance(e, sx.Call):
            self._scan_call(e, info)
        elif isinstance(e, (sx.Cast, sx.InitList)):
            for c in e.children():
                self.scan(c, info, "r")
            if isinstance(e, sx.Cast) and self.is_matrix_type(e.type) and len(e.args) == 1:
                info.hoists.append(e)  # a diagonal simdgroup_matrix: its lanes' elements depend on their ids
        elif isinstance(e, sx.Opaque):
            pass

    def _scan_call(self, c: sx.Call, info: Info) -> None:
        name = self.callee_name(c)
        if name == "threadgroup_barrier":
            info.barrier = True
            return
        if name == "simdgroup_barrier":
            info.simd_barrier = True
            return
        sync = self.is_sync_call(c)
        pure = not sync and name in PURE
        refs = self.ref_params.get(name)
        if refs is None:
            # Not a user function (a function pointer, a template parameter, a library call): it may
            # take any argument by reference and write it, unless it is known not to.
            refs = set() if pure or sync else set(range(len(c.args)))
        if name in OUT_PARAMS:
            refs = set(range(1, len(c.args)))
        elif name in MATRIX_OUT:
            refs = {0}
        if isinstance(c.callee, sx.Member):
            self.scan(c.callee.obj, info, "rw" if not c.callee.arrow else "r")
            if c.callee.arrow:
                self.touch(info, "?", True, True)
        elif isinstance(c.callee, sx.Name) and c.callee.var is not None:
            info.reads.add(c.callee.var)
        elif isinstance(c.callee, sx.Name) and c.callee.last in self.member_toks:
            info.reads.add(self.this_var)
            self.touch(info, "?", True, True)
        for i, a in enumerate(c.args):
            if not pure and self._local_array(a):
                self.scan(a, info, "addr")  # a local array decays to a pointer the callee may write through
            else:
                self.scan(a, info, "rw" if i in refs and self._private_root(a) is not None else "r")
        if sync:
            info.hoists.append(c)
        elif not pure:
            info.impure = True
            self.touch(info, "?", True, True)

    def _scan_all(self) -> None:
        def stmt(s):
            info = Info()
            if isinstance(s, sx.ExprStmt):
                self.scan(s.expr, info)
                e = s.expr
                if isinstance(e, sx.Assign) and info.mem_w and not info.impure:
                    rhs = Info()
                    self.scan(e.rhs, rhs)
                    lhs = Info()
                    self.scan(e.lhs, lhs, "w")
                    info.assign_rw = conflict(rhs.mem_r, lhs.mem_w) and not rhs.hoists
            elif isinstance(s, sx.Decl):
                for dc in s.declarators:
                    if dc.init is not None:
                        self.scan(dc.init, info)
                    for a in dc.ctor_args:
                        self.scan(a, info)
                    if dc.var.kind != "shared":
                        info.writes.add(dc.var)
                if "constexpr" in s.specs:  # evaluated by the compiler: no effects, one value in every lane
                    info.impure = False
                    info.hoists = []
                    info.mem_r, info.mem_w = set(), set()
            elif isinstance(s, sx.Return):
                self.scan(s.value, info)
            elif isinstance(s, sx.Case):
                self.scan(s.value, info)
            elif isinstance(s, sx.Block):
                for c in s.stmts:
                    info.add(stmt(c))
            elif isinstance(s, sx.If):
                self.scan(s.cond, info)
                self.info[id(s.cond)] = cond = Info()
                self.scan(s.cond, cond)
                info.add(stmt(s.then))
                if s.els is not None:
                    info.add(stmt(s.els))
            elif isinstance(s, (sx.While, sx.Switch, sx.DoWhile)):
                self.info[id(s.cond)] = cond = Info()
                self.scan(s.cond, cond)
                info.add(cond)
                info.add(stmt(s.body))
            elif isinstance(s, sx.For):
                if s.init is not None:
                    info.add(stmt(s.init))
                for part in (s.cond, s.inc):
                    if part is not None:
                        self.info[id(part)] = p = Info()
                        self.scan(part, p)
                        info.add(p)
                info.add(stmt(s.body))
            self.info[id(s)] = info
            return info

        stmt(self.body)

    # ---------------------------------------------------------------- variance
    def per_lane(self, info: Info) -> bool:
        """Whether a statement must run lane by lane: its value varies, or it writes a per-lane local."""
        return self.varying(info) or any(not v.uniform for v in info.writes if v.kind != "shared")

    def varying(self, info: Info) -> bool:
        """Whether an expression or statement may differ between lanes."""
        if info.impure or info.mem_w:
            return True
        if any(not v.uniform for v in info.reads):
            return True
        return any(self.callee_name(h) not in UNIFORM_RESULT for h in info.hoists)

    def _variance(self) -> None:
        for p in self.params:
            p.uniform = p.kind in ("shared", "kparam")
        changed = True

        def set_varying(vs):
            nonlocal changed
            for v in vs:
                if v is not None and v.uniform and v.kind != "shared":
                    v.uniform = False
                    changed = True

        def walk(s, ctx_v: bool, loop_id):
            """ctx_v: some lanes may be inactive here while others will run later code."""
            nonlocal changed
            info = self.info[id(s)]
            if isinstance(s, (sx.ExprStmt, sx.Decl, sx.Return)):
                if ctx_v or self.varying(info):
                    constant = isinstance(s, sx.Decl) and "constexpr" in s.specs and not self.varying(info)
                    if not constant:  # a constexpr local has the same value in every lane wherever it is
                        set_varying(info.writes)
            elif isinstance(s, sx.Jump):
                if ctx_v and loop_id is not None and loop_id not in self.loop_varying:
                    self.loop_varying.add(loop_id)
                    changed = True
            elif isinstance(s, sx.Block):
                for c in s.stmts:
                    walk(c, ctx_v, loop_id)
            elif isinstance(s, sx.If):
                v = ctx_v or self.varying(self.info[id(s.cond)])
                walk(s.then, v, loop_id)
                if s.els is not None:
                    walk(s.els, v, loop_id)
            elif isinstance(s, sx.Switch):
                v = ctx_v or self.varying(self.info[id(s.cond)])
                walk(s.body, v, id(s) if v else loop_id)  # `break` leaves the switch
            elif isinstance(s, (sx.While, sx.DoWhile, sx.For)):
                parts = [s.cond] + ([s.inc] if isinstance(s, sx.For) else [])
                v = ctx_v or id(s) in self.loop_varying or any(
                    p is not None and self.varying(self.info[id(p)]) for p in parts)
                if isinstance(s, sx.For) and s.init is not None:
                    walk(s.init, ctx_v, loop_id)
                    if self.varying(self.info[id(s.init)]):
                        v = True
                if v and id(s) not in self.loop_varying:
                    self.loop_varying.add(id(s))
                    changed = True
                walk(s.body, v, id(s))
                if v and isinstance(s, sx.For) and s.inc is not None:
                    set_varying(self.info[id(s.inc)].writes)

        while changed:
            changed = False
            walk(self.body, False, None)


def _unparen(e):
    while isinstance(e, sx.Paren):
        e = e.inner
    return e


def _index_depth(e) -> int:
    """How many subscripts e applies directly to a name (`a[i][j]`: 2), 0 if it does not end at one."""
    n = 0
    e = _unparen(e)
    while isinstance(e, sx.Index):
        n, e = n + 1, _unparen(e.obj)
    return n if isinstance(e, sx.Name) else 0


SPACE_WORDS = ("device", "constant", "threadgroup", "thread")


def space_in(words) -> str:
    """The address space a declaration's words name (? if none: the pointee may be anywhere)."""
    return next((w for w in words if w in SPACE_WORDS), "?")
