"""What each statement and expression of a SIMT function does to memory and to locals.

Per statement (and per condition or increment of a control structure): the locals it
reads and writes, the address spaces it reads and writes through pointers (device,
constant, threadgroup, or ? for unknown: memory other lanes may see), whether it
calls something that may do anything (impure), and the calls it must hoist out of a
lane loop because all lanes take part in them: SIMD-group functions, helpers that
reach one, simdgroup_matrix products and diagonals.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..passes.callgraph import LOG_METHODS
from . import syntax as sx
from .resolve import Resolution, space_in
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
# SIMD-group names that are not collective calls.
NOT_COLLECTIVE = {"simd_is_helper_thread", "quad_is_helper_thread", "simdgroup_barrier", "threadgroup_barrier"}
COLLECTIVE_PREFIXES = ("simd_", "quad_", "simdgroup_", "__metal_simd", "__metal_quad",
                       "__metal_get_thread_index_in_simdgroup")  # Apple's builtins (include/metalkit/builtins.h)


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES) and name not in NOT_COLLECTIVE and not name.startswith(
        ("simdgroup_matrix", "simdgroup_float", "simdgroup_half", "simdgroup_bfloat"))




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


class Effects:
    """The effects of one function body's expressions, its names resolved."""

    def __init__(self, unit, names: Resolution, this_var, sync_names: set[str], ref_params: dict[str, set[int]],
                 fn_tparams: frozenset):
        self.toks = unit.toks
        self.call_sync = unit.call_sync       # clang's word: call site -> whether it reaches a SIMD-group function
        self.name_var = names.name_var
        self.member_toks = names.member_toks
        self.this_var = this_var
        self.sync_names = sync_names          # user functions that reach a SIMD-group function or barrier
        self.ref_params = ref_params          # user function -> positions of its non-const reference parameters
                                              # (every user function has one)
        self.fn_tparams = fn_tparams          # its template parameters that are values (a function passed so)
        self.log_helpers = unit.log_helpers   # user functions that log: called lane by lane, told the lane
        self.checked = unit.checked           # a checked build: every access (a temporary's too) is a call

    def callee_name(self, c) -> str:
        """The name a call calls ("" for a construction or an operator)."""
        f = getattr(c, "callee", None)
        if isinstance(f, sx.Name):
            return self.toks[f.last].text
        if isinstance(f, sx.Member):
            return self.toks[f.name].text
        return ""

    def through_tparam(self, c) -> bool:
        """Whether call c calls the function passed as one of this function's template arguments."""
        f = getattr(c, "callee", None)
        return isinstance(f, sx.Name) and not f.qualified and f.last not in self.name_var \
            and self.toks[f.last].text in self.fn_tparams

    def logs(self, c) -> bool:
        """Whether call c calls a user function that logs and reaches no SIMD-group function."""
        f = getattr(c, "callee", None)
        return (isinstance(f, (sx.Name, sx.Member)) and self.callee_name(c) in self.log_helpers
                and not self.through_tparam(c) and not (isinstance(f, sx.Name) and f.last in self.name_var))

    def is_sync_call(self, c: sx.Call) -> bool:
        name = self.callee_name(c)
        f = c.callee
        if isinstance(f, sx.Member) and name in LOG_METHODS:
            return True  # os_log's: called lane by lane with a site, which tells it the lane (logging.h)
        if self.logs(c):
            return True
        at = f.last if isinstance(f, sx.Name) else f.name if isinstance(f, sx.Member) else None
        said = (self.call_sync or {}).get(at)
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
        return any(self.toks[k].text.startswith("simdgroup_") for k in range(rng[0], rng[1] + 1))

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
            words = [self.toks[k].text for k in range(e.type[0], e.type[1] + 1)]
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
            if _shared_row(e):
                return "threadgroup"
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
        v, depth = _array_of(e)
        return v is not None and depth < v.dims and not v.ref and v.kind != "shared"

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
            elif e.last in self.member_toks or self.toks[e.last].text == "this":
                info.reads.add(self.this_var)
                self.touch(info, "?", reading, writing)
            return
        if isinstance(e, sx.Paren):
            self.scan(e.inner, info, mode)
        elif isinstance(e, sx.Index):
            self.scan(e.idx, info, "r")
            if self._private_root(e) is not None:
                self.scan(e.obj, info, mode)
            elif _shared_row(e.obj):  # `t[i][j]`: the row `t[i]` is an address, not a read
                row = _unparen(e.obj)
                while isinstance(row, sx.Index):
                    self.scan(row.idx, info, "r")
                    row = _unparen(row.obj)
                info.reads.add(row.var)
                self.touch(info, "threadgroup", reading, writing)
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

    def _staged(self, e: sx.Assign, rhs: Info) -> bool:
        """Whether `t[i][j] = <reads memory>`, t a threadgroup array of rows, runs in two phases anyway
        (every lane's right-hand side first), though no lane can see another's store: the compiler
        then loads the right-hand sides as whole vectors, where in one phase it gathers them lane by
        lane (a tiled matmul's tile loads: 16.5 ms against 23 at 512x512). Not in a checked build,
        where each staged value is one more call."""
        lhs = _unparen(e.lhs)
        return not self.checked and bool(rhs.mem_r) and isinstance(lhs, sx.Index) and _shared_row(lhs.obj)

    def statements(self, body: sx.Block) -> dict[int, Info]:
        """id(statement or head expression) -> Info, for every statement in body."""
        infos: dict[int, Info] = {}

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
                    info.assign_rw = (conflict(rhs.mem_r, lhs.mem_w) or self._staged(e, rhs)) and not rhs.hoists
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
            elif isinstance(s, (sx.Return, sx.Case)):
                self.scan(s.value, info)
            else:  # a block or control structure: its heads (each its own Info), then its sub-statements
                for h in s.heads():
                    infos[id(h)] = head = Info()
                    self.scan(h, head)
                    info.add(head)
                for c in s.children():
                    info.add(stmt(c))
            infos[id(s)] = info
            return info

        stmt(body)
        return infos


def _unparen(e):
    while isinstance(e, sx.Paren):
        e = e.inner
    return e


def _shared_row(e) -> bool:
    """Whether e is a row of a threadgroup array (`t[i]` of `t[N][M]`): an address, not a value."""
    v, depth = _array_of(e)
    return v is not None and v.kind == "shared" and 0 < depth < v.dims


def _array_of(e):
    """(the array variable e subscripts, or is, and how many subscripts) or (None, 0)."""
    depth = _index_depth(e)
    e = _unparen(e)
    while isinstance(e, sx.Index):
        e = _unparen(e.obj)
    v = e.var if isinstance(e, sx.Name) else None
    return (v, depth) if v is not None and v.array else (None, 0)


def _index_depth(e) -> int:
    """How many subscripts e applies directly to a name (`a[i][j]`: 2), 0 if it does not end at one."""
    n = 0
    e = _unparen(e)
    while isinstance(e, sx.Index):
        n, e = n + 1, _unparen(e.obj)
    return n if isinstance(e, sx.Name) else 0
