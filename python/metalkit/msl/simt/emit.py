"""SIMT code for one analysed function body, written from the pieces regions.py formed.

The body becomes C++ that runs one SIMD-group: `__m` is the mask of active
lanes, a region of per-lane statements is a loop over them
(`for (__l ...) if (__m >> __l & 1)`), locals that live across regions are
`mk::lanes<T>`, SIMD-group functions go through `mk::simt::invoke`, barriers
through `mk::simt::barrier`, and control flow on per-lane values runs under
masks with the lanes reconverging after it. Code is attached to the tokens it
comes from, so it stays on the user's lines.
"""
from __future__ import annotations

from ..tokens import c_escape, line_directive
from . import scan, syntax as sx
from .analysis import Function
from .effects import Info
from .regions import Piece
from .unsupported import Unsupported

LANE_LOOP = "for (unsigned __l = 0; __l < 32u; ++__l)"
LANES = LANE_LOOP + " if (__m >> __l & 1u)"
# The active lanes one set bit after another: for masks of a lane or few (see emit_masked).
def sparse_lanes(mask: str) -> str:
    """The loop header running its body for each set bit `__l` of mask, one after another."""
    return f"for (unsigned __mm = {mask}, __l; __mm && (__l = unsigned(__builtin_ctz(__mm)), true); __mm &= __mm - 1u)"


SPARSE_LANES = sparse_lanes("__m")
# Lane shapes with loops of their own, and when they hold (simt.h's frame::init_positions):
# 32: lane l's x position is the SIMD-group's first x + l; 16, 8: the SIMD-group covers rows of
# that many threads of a 16- or 8-wide threadgroup, lane l at column l % w of row l / w.
SHAPES = {32: "__affine", 16: "__rows == 16u", 8: "__rows == 8u"}
# metalkit's SIMD-group functions whose twins (include/metalkit/simd.h, simdgroup_matrix.h) run
# the whole SIMD-group at once; the others go through the exchange, a call per lane.
STDLIB_TWINS = {f"{scope}_{op}" for scope in ("simd", "quad")
                for op in ("sum", "product", "min", "max", "and", "or", "xor")} | {
    "simdgroup_load", "simdgroup_store", "simdgroup_multiply", "simdgroup_multiply_accumulate"}


def _expressions(node) -> list:
    """Every expression in a statement, outer ones first."""
    if isinstance(node, sx.Expr):
        return list(node.walk())
    if isinstance(node, list):
        return [e for x in node for e in _expressions(x)]
    if isinstance(node, (sx.Stmt, sx.Declarator)):
        return [e for k, v in vars(node).items() if k != "var" for e in _expressions(v)]
    return []


def _divisions(node) -> list:
    """The `/`, `%`, `/=` and `%=` expressions in a statement, outer ones first."""
    return [e for e in _expressions(node) if isinstance(e, sx.Binary) and e.op in ("/", "%", "/=", "%=")]


class Emitter:
    def __init__(self, fn: Function, is_kernel: bool, has_result: bool):
        self.fn = fn
        self.unit = fn.unit
        self.src = fn.unit.src
        self.toks = fn.unit.toks
        self.is_kernel = is_kernel
        self.full = False  # writing a region's twin for a full mask (region_loops)
        self.fill = False  # writing a region that stores every lane's slot (fills_every_lane)
        self.sparse = False  # writing the branch of an `if (p == v)`: few lanes (emit_masked)
        self.splitting = False  # writing the barriers that end a split kernel's regions (emit_split)
        self.fixed: tuple[int, bool] | None = None  # (shape, full mask) of the loop version being written
        self.has_result = has_result
        # token -> the code put there, each with the token it was written for: a region's second
        # copy (a lane shape, a full mask) goes after the first, so its lines are marked (apply)
        self.frags: dict[int, list[tuple[str, int]]] = {}
        self._columns: dict[int, tuple] | None = None
        self.cursor = fn.body.a
        self.serial = 0
        self.subst: dict[int, tuple[int, object]] = {}  # first token -> (last token, lane -> text)
        # Enclosing loops and switches, innermost last: (kind, id, is_switch); kind S: plain C++,
        # M: run under masks, L: per-lane code inside a region, R: a region's lane loop.
        self.loops: list[tuple[str, int | None, bool]] = []
        self.region_end = ""                            # label ending the current region's lane body
        self.shape = 0                                  # lanes as rows of this width (see SHAPES); 0: any
        self.region_jumps: set[str] = set()             # mask variables a region's jumps set
        # Integer division goes through mk::simt helpers that do not trap (simt.h): token -> texts
        # to put before it (outermost first), instead of it (the operator) and after it.
        self.div_open: dict[int, list[tuple[str, int]]] = {}
        self.div_op: dict[int, int] = {}   # operator token -> first token of its division
        self.div_end: dict[int, int] = {}  # operator token -> last token
        self.div_close: dict[int, list[int]] = {}
        for e in _divisions(fn.body):
            if self.toks[e.lhs.b + 1].text != e.op:
                raise Unsupported(e.lhs.b + 1, f"'{e.op}' where the parser did not expect it")
            helper = {"/": "quot", "%": "rem", "/=": "quot_to", "%=": "rem_to"}[e.op]
            self.div_open.setdefault(e.a, []).append((f"mk::simt::{helper}(", e.b))
            self.div_op[e.lhs.b + 1], self.div_end[e.lhs.b + 1] = e.a, e.b
            self.div_close.setdefault(e.b, []).insert(0, e.a)

    def columns(self) -> dict[int, tuple]:
        """Per-lane arrays stored element-major (`mk::lane_columns`): element i of every lane is
        contiguous, so a statement on `a[i]` is a vector load or store across the lanes (tinygrad's
        accumulators, `*(acc + 3) = ...`), where rows per lane make it a transpose. An array qualifies
        if it is one-dimensional, declared without initializer and named only as `a[i]` or `*(a + i)`
        (nothing sees its layout). The first token of each such use -> (array, i, last token)."""
        if self._columns is not None:
            return self._columns
        uses: dict[int, tuple] = {}  # first token -> (the array's Name, index, last token)
        for e in _expressions(self.fn.body):
            if isinstance(e, sx.Index) and isinstance(e.obj, sx.Name):
                uses[e.a] = (e.obj, e.idx, e.b)
            elif isinstance(e, sx.Unary) and e.op == "*" and not e.postfix and isinstance(e.operand, sx.Paren) \
                    and isinstance(e.operand.inner, sx.Binary) and e.operand.inner.op == "+" \
                    and isinstance(e.operand.inner.lhs, sx.Name):
                uses[e.a] = (e.operand.inner.lhs, e.operand.inner.rhs, e.b)
        ok = {id(v) for v in self.fn.name_var.values()
              if v.lanes and v.array and v.dims == 1 and not v.addressed and v.decl is not None
              and v.decl.init is None and v.decl.init_kind == "" and v.decl.ptr[1] < v.decl.ptr[0]}
        named = {n.a for n, _, _ in uses.values()}
        ok -= {id(v) for t, v in self.fn.name_var.items() if t != v.decl_tok and t not in named}
        self._columns = {k: (n.var, off, end) for k, (n, off, end) in uses.items() if id(n.var) in ok}
        return self._columns

    # ---------------------------------------------------------------- output
    def put(self, tok: int, text: str) -> None:
        at = max(tok, self.cursor)
        self.cursor = at
        self.frags.setdefault(at, []).append((text, tok))

    def new(self) -> int:
        self.serial += 1
        return self.serial

    # ---------------------------------------------------------------- rendering
    def render(self, a: int, b: int, lane) -> str:
        """Tokens [a, b] as C++, locals of lane `lane` (None: no per-lane local may appear)."""
        return " ".join(t for _, t in self.texts_of(a, b, lane))

    def put_tokens(self, a: int, b: int, lane) -> None:
        """Tokens [a, b] rendered each on its own line (diagnostics keep their lines)."""
        for i, text in self.texts_of(a, b, lane):
            self.put(i, text)

    def texts_of(self, a: int, b: int, lane) -> list[tuple[int, str]]:
        out = []
        i = a
        fn = self.fn
        while i <= b:
            end = self.subst[i][0] if i in self.subst else i
            # A division around a substituted call opens before it (one inside it is in its text);
            # only divisions within [a, b] are rendered as calls.
            out += [(i, text) for text, last in self.div_open.get(i, ()) if (last > end or end == i) and last <= b]
            if i in self.subst:
                text = self.subst[i][1]
                if lane is None:
                    raise Unsupported(i, "a SIMD-group function result used where every lane must agree")
                out.append((i, text(lane)))
                out += [(end, ")") for first in self.div_close.get(end, ()) if a <= first < i]
                i = end + 1
                continue
            if i in self.div_op and self.div_op[i] >= a and self.div_end[i] <= b:
                out.append((i, ","))
                i += 1
                continue
            if i in self.columns():
                v, off, end = self.columns()[i]
                if lane is None:
                    raise Unsupported(i, f"'{v.name}' differs between lanes where every lane must agree")
                out += [(i, f"{v.name}.at({lane}, (")] + self.texts_of(off.a, off.b, lane) + [(end, "))")]
                out += [(end, ")") for first in self.div_close.get(end, ()) if first >= a]
                i = end + 1
                continue
            v = fn.name_var.get(i)
            w = self.toks[i].text
            if v is not None and v.affine and (v.affine == "always" or self.shape):
                out.append((i, self.affine_value(v, lane)))
            elif v is not None and v.lanes:
                if lane is None:
                    raise Unsupported(i, f"'{w}' differs between lanes where every lane must agree")
                out.append((i, f"{w}[{lane}]"))
            elif i in fn.member_toks:
                out.append((i, f"__this[{lane}]->{w}"))
            elif w == "this" and fn.has_this and self.toks[i].kind == "id":
                out.append((i, f"__this[{lane}]"))
            elif w == "decltype" and i + 3 <= b and self.toks[i + 1].text == "(" and self.toks[i + 3].text == ")" \
                    and fn.name_var.get(i + 2) is not None and fn.name_var[i + 2].lanes:
                out.append((i, f"mk::simt::unref_t<decltype({self.toks[i + 2].text}[0])>"))
                i += 4
                continue
            elif w == "decltype" and self.toks[i + 1].text == "(":
                # A type is the same for every lane: lane 0's names it.
                rp = scan.close(self.toks, i + 1)
                out += [(i, "decltype")] + self.texts_of(i + 1, rp, "0")
                i = rp + 1
                continue
            else:
                t = self.src.text_of(i)
                if t:
                    out.append((i, t))
            out += [(i, ")") for first in self.div_close.get(i, ()) if first >= a]
            i += 1
        return out

    def expr(self, e, lane) -> str:
        return self.render(e.a, e.b, lane) if e is not None else ""

    def info(self, s) -> Info:
        return self.fn.info[id(s)]

    # ---------------------------------------------------------------- sorting into pieces
    # ---------------------------------------------------------------- pieces
    def emit_list(self, pieces: list[Piece], ctx_v: bool, guard: bool = True) -> None:
        open_guards = 0
        for k, p in enumerate(pieces):
            self.emit_piece(p, ctx_v)
            if p.retires and guard and k + 1 < len(pieces):
                nxt = pieces[k + 1].stmts[0]
                if self.is_kernel:
                    self.put(nxt.a, "if (!__f.alive) return;")
                self.put(nxt.a, "if (__m) {")
                open_guards += 1
        if open_guards:
            self.put(pieces[-1].stmts[-1].b, "}" * open_guards)

    def emit_piece(self, p: Piece, ctx_v: bool) -> None:
        {"U": self.emit_uniform, "R": self.emit_region, "RW": self.emit_rw, "H": self.emit_hoisted,
         "B": self.emit_barrier, "S": self.emit_structure, "M": self.emit_masked,
         "N": lambda p, ctx_v: self.put(p.stmts[0].a, ";")}[p.kind](p, ctx_v)

    def emit_uniform(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        if isinstance(s, sx.Return):
            self.emit_return_all(s)
            return
        if isinstance(s, sx.Jump):
            self.emit_jump_all(s)
            return
        if isinstance(s, sx.Decl):
            self.emit_decl(s, None)
            return
        self.put_tokens(s.a, s.b, None)

    def emit_return_all(self, s: sx.Return) -> None:
        """A return every active lane takes (the context is uniform: no masked structure encloses it)."""
        code = f"{LANES} {self.result(s)} " if s.value is not None else ""
        if self.is_kernel:
            code += "__f.alive &= ~__m; "
        self.put(s.a, "{ " + code + "return; }")

    def result(self, s: sx.Return) -> str:
        """Lane __l's part of `return value;`: a kernel's value is void (`return f();`), evaluated only."""
        if not self.has_result and self.subst.get(s.value.a, (None,))[0] == s.value.b:
            return ""  # a call of a SIMT function, made already for the active lanes
        value = self.expr(s.value, "__l")
        return f"__ret->set(__l, {value});" if self.has_result else f"(void)({value});"

    def emit_jump_all(self, s: sx.Jump) -> None:
        """A break or continue every active lane takes."""
        target = self.jump_target(s.kind)
        if target is None:
            raise Unsupported(s.a, f"'{s.kind}' outside a loop")
        kind, ident = target[1][0], target[1][1]
        if kind == "S":
            self.put(s.a, s.kind + ";")
            return
        var = f"__lx{ident}" if s.kind == "break" else f"__lc{ident}"
        self.put(s.a, f"{{ {var} |= __m; __m = 0u; }}")

    def jump_target(self, kind: str):
        """(position in self.loops, entry) of what a break/continue leaves, regions skipped."""
        for k in range(len(self.loops) - 1, -1, -1):
            tp, ident, is_switch = self.loops[k]
            if tp == "R" or (kind == "continue" and is_switch):
                continue
            return k, self.loops[k]
        return None

    # -- regions
    def emit_region(self, p: Piece, ctx_v: bool) -> None:
        stmts = p.stmts
        if len(stmts) == 1 and isinstance(stmts[0], (sx.Return, sx.Jump)) and (
                isinstance(stmts[0], sx.Jump) or stmts[0].value is None):
            s = stmts[0]
            if isinstance(s, sx.Return):
                code = "__rt |= __m; " + ("__f.alive &= ~__m; " if self.is_kernel else "") + "__m = 0u;"
                self.put(s.a, "{ " + code + " }")
            else:
                self.emit_jump_all(s)
            return
        first = stmts[0]
        decls = [self.lanes_decl(dc, d) for d in stmts if isinstance(d, sx.Decl)
                 for dc in d.declarators if dc.var.lanes]
        self.put(first.a, " ".join(decls))
        jumps: set[str] = set()
        shapes = self.shapes(stmts)
        if self.fixed is not None:
            self.shape = self.fixed[0] if self.fixed[0] in shapes else 0
            jumps = self.region_loop(stmts)
            self.shape = 0
        elif shapes:
            # Positions that are base + lane (or rows of a tile) in most dispatches, so the
            # compiler vectorises accesses indexed by them: a loop per shape, one for the others.
            for j, w in enumerate(shapes):
                self.put(first.a if j == 0 else stmts[-1].b, f"{'} else ' if j else ''}if ({SHAPES[w]}) {{")
                self.shape = w
                jumps = self.region_loops(stmts)
                self.shape = 0
            self.put(stmts[-1].b, "} else {")
            self.region_loops(stmts)
            self.put(stmts[-1].b, "}")
        else:
            jumps = self.region_loops(stmts)
        if jumps:
            after = f" __m &= ~({' | '.join(sorted(jumps))});"
            if self.is_kernel and "__rt" in jumps:
                after += " __f.alive &= ~__rt;"
            self.put(stmts[-1].b, after)

    def shapes(self, stmts) -> list[int]:
        """The lane shapes worth a loop of their own for stmts (see SHAPES): none if they use no
        position builtin, rows of 32 for scalar positions, tiles too for vector ones."""
        used = [v for s in stmts for v in (self.fn.name_var.get(i) for i in range(s.a, s.b + 1))
                if v is not None and v.affine == "maybe"]
        return [] if not used else list(SHAPES) if any(v.vector for v in used) else [32]

    def region_loops(self, stmts) -> set[str]:
        """region_loop(stmts); for a region in or holding a loop, with a twin for a full mask first:
        its lanes need no test, so the compiler vectorises their loads (a tiled matmul's inner
        product) and keeps per-lane values in vector registers."""
        in_loop = any(not is_switch for _, _, is_switch in self.loops)
        if not in_loop and not any(isinstance(n, (sx.For, sx.While, sx.DoWhile)) for st in stmts for n in st.walk()):
            return self.region_loop(stmts)
        self.put(stmts[0].a, "if (__m == ~0u) {")
        self.full = True
        jumps = self.region_loop(stmts)
        self.full = False
        self.put(stmts[-1].b, "} else {")
        jumps |= self.region_loop(stmts)
        self.put(stmts[-1].b, "}")
        return jumps

    def lanes_loop(self, active: bool = True) -> str:
        """The loop header running its body for each active lane `__l` (every lane if not
        `active`, or in a full mask's twin) in the current shape."""
        w = self.shape
        active = active and not self.full
        if w in (0, 32):
            if active and self.sparse:
                return SPARSE_LANES
            return LANES if active else LANE_LOOP
        return (f"for (unsigned __r = 0; __r < {32 // w}u; ++__r) for (unsigned __c = 0; __c < {w}u; ++__c) "
                f"if (const unsigned __l = __r * {w}u + __c; {'__m >> __l & 1u' if active else 'true'})")

    def by_shape(self, stmts, code) -> str:
        """code() for every shape stmts are worth (see shapes), chosen at run time, then for any."""
        if self.fixed is not None:
            self.shape = self.fixed[0] if self.fixed[0] in self.shapes(stmts) else 0
            out = code()
            self.shape = 0
            return out
        out = ""
        for w in self.shapes(stmts):
            self.shape = w
            out += f"if ({SHAPES[w]}) {{ {code()} }} else "
            self.shape = 0
        return f"{out}{{ {code()} }}" if out else code()

    def affine_value(self, v, lane: str) -> str:
        """Builtin v's value for `lane` as base + lane (or + tile column and row in a tile shape)."""
        w = self.shape
        if v.affine == "always" or not v.vector:
            if v.affine == "always" or w in (0, 32):
                return f"{v.type_text}(__b_{v.name} + {lane})"
            col = "__c" if lane == "__l" else f"({lane} % {w}u)"
            return f"{v.type_text}(__b_{v.name} + {col})"
        elem = v.type_text.rstrip("234")
        if w == 32:
            col, row = lane, ""
        else:
            col, row = ("__c", " + __r") if lane == "__l" else (f"({lane} % {w}u)", f" + {lane} / {w}u")
        parts = [f"{elem}(__b_{v.name}_x + {col})", f"{elem}(__b_{v.name}_y{row})"]
        if v.vector == 3:
            parts.append(f"{elem}(__b_{v.name}_z)")
        return f"{v.type_text}({', '.join(parts)})"

    def position_compare(self, cond, ops: tuple, any_shape: bool = False) -> tuple | None:
        """(position, op, value) when cond is `p op v` or `v op p` (op in ops; the op returned reads
        with p first) for a uint position p that is base + lane in rows of 32 (in the current
        shape, unless any_shape) and a uniform value v that is one token (a literal or a name):
        conditions whose lanes are known in closed form."""
        if not isinstance(cond, sx.Binary) or cond.op not in ops:
            return None
        mirror = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "=="}
        for pos, val, op in ((cond.lhs, cond.rhs, cond.op), (cond.rhs, cond.lhs, mirror[cond.op])):
            v = self.fn.name_var.get(pos.a) if isinstance(pos, sx.Name) and pos.a == pos.b else None
            if v is None or not v.affine or v.vector or v.type_text not in ("uint", "unsigned", "unsigned int"):
                continue
            if self.shape != 32 and v.affine != "always" and not any_shape:  # base + lane in rows of 32
                continue
            if val.a != val.b or val.a in self.subst or val.a in self.fn.member_toks:
                continue
            t = self.toks[val.a]
            w = self.fn.name_var.get(val.a)
            if t.kind == "num" or (t.kind == "id" and isinstance(val, sx.Name) and
                                   (w is None or (w.uniform and not w.lanes and not w.affine))):
                return v, op, self.render(val.a, val.b, None)
        return None

    def selects_few(self, cond) -> bool:
        """Whether cond is `p == v` for a position p and a uniform value v (see position_compare):
        one lane passes where the positions are base + lane, a few otherwise."""
        return self.position_compare(cond, ("==",), any_shape=True) is not None

    def one_lane_loop(self, stmts) -> str | None:
        """The lane loop of a region that is one `if (p == v)` (no else; see position_compare): at
        most one lane passes (32 consecutive uints differ), so the loop visits the lanes of
        mk::simt::eq_lanes alone, and the if still tests them. As a loop over all lanes, the
        compiler turns one lane's store into a vector scatter."""
        s = stmts[0]
        if len(stmts) != 1 or not isinstance(s, sx.If) or s.els is not None or s.constexpr:
            return None
        found = self.position_compare(s.cond, ("==",))
        if found is None:
            return None
        v, _, c = found
        lanes = f"mk::simt::eq_lanes(__b_{v.name}, {c})"
        return sparse_lanes(lanes if self.full else f"__m & {lanes}")

    def fills_every_lane(self, stmts) -> bool:
        """Whether the region is one declaration of per-lane locals, each `= value`: then every
        lane's slot is stored (mk::lanes::set_if; the value only for active lanes), since inactive
        lanes never read a local of this scope. Slots stored under a mask stall the vector loads
        that later read them (a simd_sum's result read back for lane 0)."""
        d = stmts[0]
        return len(stmts) == 1 and isinstance(d, sx.Decl) and all(
            dc.var.lanes and not dc.var.array and dc.init_kind == "=" and dc.init is not None
            and not isinstance(dc.init, sx.InitList)
            and not any(self.toks[t].text in ("&", "&&") for t in range(dc.ptr[0], dc.ptr[1] + 1))
            for dc in d.declarators)

    def region_loop(self, stmts) -> set[str]:
        """One lane loop running stmts; returns the mask variables its jumps set."""
        k = self.new()
        outer_end, outer_jumps = self.region_end, self.region_jumps
        self.region_end, self.region_jumps = f"__mk_e{k}", set()
        self.loops.append(("R", None, False))
        self.fill = self.fills_every_lane(stmts)
        header = self.lanes_loop(active=False) if self.fill else self.one_lane_loop(stmts) or self.lanes_loop()
        self.put(stmts[0].a, f"{header} {{ {{")
        for s in stmts:
            self.lane_stmt(s)
        self.fill = False
        self.loops.pop()
        jumps = self.region_jumps
        self.put(stmts[-1].b, f"}} {self.region_end}:; }}" if jumps else "} }")
        self.region_end, self.region_jumps = outer_end, outer_jumps
        return jumps

    def lane_stmt(self, s) -> None:
        """Statement s inside a region's lane loop (lane `__l`)."""
        if isinstance(s, sx.ExprStmt):
            self.put_tokens(s.a, s.b, "__l")
        elif isinstance(s, sx.Decl):
            self.emit_decl(s, "__l")
        elif isinstance(s, sx.Return):
            code = f"{self.result(s)} " if s.value is not None else ""
            self.region_jumps.add("__rt")
            self.put(s.a, f"{{ {code}__rt |= 1u << __l; goto {self.region_end}; }}")
        elif isinstance(s, sx.Jump):
            target = self.jump_target(s.kind)
            region = max(k for k, e in enumerate(self.loops) if e[0] == "R")
            if target is not None and target[0] > region:
                self.put(s.a, s.kind + ";")  # a loop inside the region
            else:
                if target is None or target[1][0] != "M":
                    raise Unsupported(s.a, f"'{s.kind}' out of a loop that every lane runs, taken by some lanes")
                ident = target[1][1]
                var = f"__lx{ident}" if s.kind == "break" else f"__lc{ident}"
                self.region_jumps.add(var)
                self.put(s.a, f"{{ {var} |= 1u << __l; goto {self.region_end}; }}")
        elif isinstance(s, sx.Block):
            self.put(s.a, "{")
            for c in s.stmts:
                self.lane_stmt(c)
            self.put(s.b, "}")
        elif isinstance(s, sx.If):
            self.put(s.a, f"if ({self.expr(s.cond, '__l')})")
            self.lane_branch(s.then)
            if s.els is not None:
                self.put(s.els.a, "else")
                self.lane_branch(s.els)
        elif isinstance(s, sx.While):
            self.put(s.a, f"while ({self.expr(s.cond, '__l')})")
            self.lane_loop_body(s.body)
        elif isinstance(s, sx.DoWhile):
            self.put(s.a, "do")
            self.lane_loop_body(s.body)
            self.put(s.b, f"while ({self.expr(s.cond, '__l')});")
        elif isinstance(s, sx.For):
            init = ""
            if s.init is not None:
                if isinstance(s.init, sx.Decl) and any(dc.var.lanes for dc in s.init.declarators):
                    raise Unsupported(s.a, "a loop variable used outside its loop")
                init = self.render(s.init.a, s.init.b - 1, "__l")
            self.put(s.a, f"for ({init}; {self.expr(s.cond, '__l')}; {self.expr(s.inc, '__l')})")
            self.lane_loop_body(s.body)
        elif isinstance(s, sx.Switch):
            self.put(s.a, f"switch ({self.expr(s.cond, '__l')})")
            self.loops.append(("L", None, True))
            self.lane_branch(s.body)
            self.loops.pop()
        elif isinstance(s, (sx.Case, sx.Other)):
            self.put_tokens(s.a, s.b, "__l")
        else:
            raise Unsupported(s.a, "this statement")

    def lane_branch(self, s) -> None:
        self.put(s.a, "{")
        self.lane_stmt(s)
        self.put(s.b, "}")

    def lane_loop_body(self, s) -> None:
        self.loops.append(("L", None, False))
        self.lane_branch(s)
        self.loops.pop()

    # -- declarations
    def emit_decl(self, d: sx.Decl, lane) -> None:
        """A declaration: plain C++ for plain locals, an initialisation for lane `lane` of per-lane ones
        (those are declared before the region)."""
        if not any(dc.var.lanes for dc in d.declarators):
            self.put_tokens(d.a, d.b, lane)
            return
        if lane is None:
            raise Unsupported(d.a, "a per-lane local declared where every lane must agree")
        type_text = self.render(d.type[0], d.type[1], lane)
        parts = [self.lane_init(dc, d, lane) if dc.var.lanes else f"{type_text} {self.render(dc.a, dc.b, lane)};"
                 for dc in d.declarators]
        self.put(d.a, " ".join(parts))

    def lane_init(self, dc: sx.Declarator, d: sx.Decl, lane: str) -> str:
        name = self.toks[dc.name].text
        if dc.init_kind == "()":
            return f"{name}.set({lane}{''.join(', ' + self.expr(a, lane) for a in dc.ctor_args)});"
        if dc.init is None:
            return f"{name}.init_default({lane});"
        if dc.var.array:
            base = self.render(d.type[0], d.type[1], lane)
            dims = self.render(dc.dims[0], dc.dims[1], lane)
            ptr = self.render(dc.ptr[0], dc.ptr[1], lane) if dc.ptr[1] >= dc.ptr[0] else ""
            return (f"{{ {base} {ptr} __mk_t{dims} = {self.expr(dc.init, lane)}; "
                    f"mk::simt::copy({name}[{lane}], __mk_t); }}")
        if isinstance(dc.init, sx.InitList):
            items = ", ".join(self.expr(x, lane) for x in dc.init.items)
            return f"{name}.set_list({lane}{', ' if items else ''}{items});"
        if self.fill:
            return (f"{name}.set_if({lane}, __m >> {lane} & 1u, [&]() __attribute__((always_inline)) -> "
                    f"decltype(auto) {{ return ({self.expr(dc.init, lane)}); }});")
        return f"{name}.set({lane}, {self.expr(dc.init, lane)});"

    def lanes_decl(self, dc: sx.Declarator, d: sx.Decl) -> str:
        columns = any(v is dc.var for v, _, _ in self.columns().values())
        return f"mk::{'lane_columns' if columns else 'lanes'}<{self.lanes_type(dc, d)}> {self.toks[dc.name].text};"

    def lanes_type(self, dc: sx.Declarator, d: sx.Decl) -> str:
        words = [self.src.text_of(k) for k in range(d.type[0], d.type[1] + 1)
                 if self.toks[k].text not in ("static", "constexpr", "register", "inline", "thread_local")]
        ptr = self.render(dc.ptr[0], dc.ptr[1], "0") if dc.ptr[1] >= dc.ptr[0] else ""
        dims = self.render(dc.dims[0], dc.dims[1], "0") if dc.dims[1] >= dc.dims[0] else ""
        if "auto" in words:
            init = dc.init if dc.init is not None else (dc.ctor_args[0] if len(dc.ctor_args) == 1 else None)
            if init is None or isinstance(init, sx.InitList):
                raise Unsupported(dc.name, "an `auto` local without a plain initializer")
            e0 = self.expr(init, "0")
            if "auto" in words:
                if "&" in ptr or "&&" in ptr:
                    deduced = f"mk::simt::unref_t<decltype(({e0}))>"
                    ptr = ptr.replace("&&", "&")
                else:
                    deduced = f"mk::simt::auto_t<decltype(({e0}))>"
                    ptr = ptr.replace("*", "")
                words = [deduced if w == "auto" else w for w in words]
        base = " ".join(w for w in words if w)
        return f"{base} {ptr}{dims}".strip()

    # -- two-phase statements
    def emit_rw(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        e = s.expr if isinstance(s, sx.ExprStmt) else None
        if isinstance(e, sx.Assign) and self.info(s).assign_rw:
            k = self.new()
            rhs0 = self.expr(e.rhs, "0")

            def phases() -> str:
                lanes = self.lanes_loop()
                lhs = self.expr(e.lhs, '__l')
                store = (f"mk::simt::{'quot_to' if e.op == '/=' else 'rem_to'}({lhs}, __v{k}[__l])"
                         if e.op in ("/=", "%=") else f"{lhs} {e.op} __v{k}[__l]")
                # The reads fill every lane's slot (inactive ones with a zero, where the type has
                # one): the writes' vector loads of them are then served from the stores.
                read = (f"__v{k}.set_if(__l, __m >> __l & 1u, [&]() __attribute__((always_inline)) -> "
                        f"decltype(auto) {{ return ({self.expr(e.rhs, '__l')}); }})")
                return f"{self.lanes_loop(active=False)} {read}; {lanes} {store};"
            code = self.by_shape([s], phases)
            self.put(s.a, f"{{ mk::lanes<mk::simt::auto_t<decltype(({rhs0}))>> __v{k}; {code} }}")
            return
        # Calls that read and write memory (atomics, helpers): one lane after another.
        self.emit_region(Piece("R", [s]), ctx_v)

    # -- SIMD-group functions and SIMT helpers
    def emit_hoisted(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        hoists = self.info(s).hoists
        self.put(s.a, self.hoist(hoists))
        # The statement is the outermost call (its arguments' calls, hoisted before it, are done too).
        whole = isinstance(s, sx.ExprStmt) and _unparen(s.expr) is hoists[-1]
        if not whole:
            inf = self.info(s)
            residual = Piece("R", [s])
            if isinstance(s, sx.Decl) and all(dc.var.uniform and not dc.var.lanes for dc in s.declarators):
                # A uniform local (simd_sum of a uniform value): one plain variable that later pieces see,
                # from the first active lane's result (every active lane has the same).
                self.emit_decl(s, "(__m ? unsigned(__builtin_ctz(__m)) : 0u)")
            elif isinstance(s, (sx.ExprStmt, sx.Decl)) and inf.assign_rw:
                self.emit_rw(Piece("RW", [s]), True)
            else:
                self.emit_region(residual, True)
        for h in hoists:
            del self.subst[h.a]

    def hoist(self, hoists: list) -> str:
        """Code calling each of `hoists` (innermost first) for the active lanes; their results are then
        read as __rK[lane]."""
        code = []
        for h in hoists:
            k = self.new()
            res = f"__r{k}"
            if isinstance(h, sx.Binary):  # a * b on simdgroup matrices
                callee = callee0 = "metal::__mk::sgm_product"
                operands = [h.lhs, h.rhs]
            elif isinstance(h, sx.Cast):  # a diagonal simdgroup_matrix
                callee = self.render(h.type[0], h.type[1], "__l")
                callee0 = self.render(h.type[0], h.type[1], "0")
                operands = h.args
            else:
                callee = self.expr(h.callee, "__l")
                callee0 = self.expr(h.callee, "0")
                operands = h.args
            args0 = [self.expr(a, "0") for a in operands]
            d = f"decltype({callee0}({', '.join(args0)}))"
            if self.fn.effects.logs(h):  # a helper that logs: each lane's call is told its lane
                plain = f"{callee}({', '.join(self.expr(a, '__l') for a in operands)})"
                code.append(f"mk::simt::ret_lanes_t<{d}> {res}; (void){res}; mk::simt::invoke_logging<{d}>(__m, &{res}, "
                            f"[&](unsigned __l) __attribute__((always_inline)) -> decltype(auto) {{ return {plain}; }});")
                self.subst[h.a] = (h.b, lambda lane, r=res: f"{r}[{lane}]")
                continue

            def invoke() -> str:
                args = [self.expr(a, "__l") for a in operands]
                plain = f"{callee}({', '.join(args)})"
                siteful = f"{callee}({', '.join(args + ['__s'])})"
                return (f"mk::simt::invoke<{d}>(__f, __m, &{res}, "
                        f"[&](unsigned __l, auto __s) __attribute__((always_inline)) -> decltype({siteful}) {{ return {siteful}; }}, "
                        f"[&](unsigned __l) __attribute__((always_inline)) -> decltype(auto) {{ return {plain}; }}, "
                        f"{self.twin(h, res, args, operands)});")
            code.append(f"mk::simt::ret_lanes_t<{d}> {res}; (void){res};")
            # Arguments indexed by a scalar position (simd_sum(x[i])): in rows of 32 they are read as
            # base + lane, contiguous loads rather than gathers. Only for the library's functions:
            # a user helper's twin would be compiled twice, and vector positions (a tile shape per
            # call) would multiply the code of matrix kernels.
            if self.fixed is None and self.shapes(operands) == [32] and not self.user_helper(h):
                self.shape = 32
                code.append(f"if ({SHAPES[32]}) {{ {invoke()} }} else {{")
                self.shape = 0
                code.append(f"{invoke()} }}")
            else:
                code.append(invoke())
            self.subst[h.a] = (h.b, lambda lane, r=res: f"{r}[{lane}]")
        return " ".join(code)

    def user_helper(self, h) -> bool:
        """Whether h calls a function of the user's that reaches a SIMD-group function, or one
        passed as a template argument."""
        effects = self.fn.effects
        return effects.callee_name(h) in effects.sync_names or bool(effects.through_tparam(h))

    def twin(self, h, res: str, args: list[str], operands: list) -> str:
        """The lambda calling the SIMT twin of the function h calls: a user function's, one of STDLIB_TWINS
        or a simdgroup_matrix product's (mk::simt::no_twin{} if none can)."""
        f = getattr(h, "callee", None)
        dep = "mk::simt::dep<decltype(__t)>"
        accs = []
        if isinstance(h, sx.Binary):  # a * b on simdgroup matrices
            callee0 = "metal::__mk::__mk_simt_sgm_product"
        elif f is None:
            return "mk::simt::no_twin{}"
        else:
            callee0 = self.twin_callee(h, f, accs)
            if callee0 is None:
                return "mk::simt::no_twin{}"
        accs += [f"[&](unsigned __l) __attribute__((always_inline)) -> decltype(auto) {{ return ({a}); }}" for a in args]
        args0 = [f"{dep}({self.expr(a, '0')})" for a in operands]
        if not args0 and not isinstance(f, sx.Member) and f.last not in self.fn.member_toks:
            call0 = f"{dep}({callee0})()"
        else:
            call0 = f"{callee0}({', '.join(args0)})"
        return (f"[&](auto __t) __attribute__((always_inline)) -> typename mk::simt::twin_of<decltype({call0})>::type "
                f"{{ decltype({call0})::type::call(__f, mk::simt::twin_mask<__mk_partial>(__m), &{res}"
                f"{''.join(', ' + x for x in accs)}); }}")

    def twin_callee(self, h, f, accs: list[str]) -> str | None:
        """The name of the twin of the function h calls (None if it has none); an accessor of the object
        a method is called on goes to accs."""
        name = self.fn.effects.callee_name(h)
        through = self.fn.effects.through_tparam(h)
        if name not in self.fn.effects.sync_names and not through and name not in STDLIB_TWINS:
            return None
        dep = "mk::simt::dep<decltype(__t)>"
        if isinstance(f, sx.Member):
            obj = self.expr(f.obj, "__l")
            obj0 = self.expr(f.obj, "0")
            targs = self.render(f.name + 1, f.b, "0") if f.b > f.name else ""
            # dep<> makes the object dependent: a template member needs `template`.
            callee0 = f"{dep}({obj0}){'->' if f.arrow else '.'}{'template ' if targs else ''}__mk_simt_{name}{targs}"
            accs.append(f"[&](unsigned __l) __attribute__((always_inline)) -> decltype(auto) {{ return ({'*' if f.arrow else ''}({obj})); }}")
        elif through:  # the twin of whatever function the instantiation passed
            callee0 = f"__mk_fn_twin<{name}>::call"
        elif isinstance(f, sx.Name) and f.last in self.fn.member_toks:
            targs = self.render(f.last + 1, f.b, "0") if f.b > f.last else ""
            callee0 = f"{dep}(__this[0])->{'template ' if targs else ''}__mk_simt_{name}{targs}"
            accs.append("[&](unsigned __l) __attribute__((always_inline)) -> decltype(auto) { return (*__this[__l]); }")
        elif isinstance(f, sx.Name):
            head = self.render(f.a, f.last - 1, "0") if f.last > f.a else ""
            targs = self.render(f.last + 1, f.b, "0") if f.b > f.last else ""
            callee0 = f"{head} __mk_simt_{name}{targs}"  # the space: a head may end in `::template`
        else:
            return None
        return callee0

    def emit_barrier(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        f, ln, col = self.src.where(self.toks[s.a])
        ends = ", true" if self.splitting else ""
        self.put(s.a, f'mk::simt::barrier(__f, __m, "{c_escape(f)}", {ln}, {col}{ends});')

    # -- a kernel split at its barriers (fission.py)
    def emit_split(self, pieces: list[Piece], split) -> None:
        """The kernel's leading declarations, then each region as the block that runs when the frame
        names it. Locals a later region uses go into the SIMD-group's slot at the region's end and
        come back at the next one's start, with the mask; lanes that returned stay out (guards)."""
        for p in pieces[:split.prefix]:
            self.emit_piece(p, False)
        members = [f"{self.slot_type(c, True)} {c.var.name};" for c in split.carried if c.slotted]
        self.put(split.regions[0][0].stmts[0].a,
                 f"struct __mk_slots {{ {' '.join(members)} unsigned __m, __rt; }}; "
                 "static thread_local __mk_slots __mk_slot[32]; __mk_slots& __x = __mk_slot[__f.sg];")
        guard = "if (!__f.alive) return; if (__m) {"
        guards = 0
        last = len(split.regions) - 1
        self.splitting = True
        for r, region in enumerate(split.regions):
            head = f"if (__f.region == {r}u) {{" if r < last else "{"
            if r:
                head += " __m = __x.__m; __rt = __x.__rt;" + "".join(  # overwritten first: declared only
                    f" {self.slot_type(c, False)} {c.var.name}{'' if r in c.dead else ' = __x.' + c.var.name};"
                    for c in split.restored_in(r))
            self.put(region[0].stmts[0].a, head + f" {guard}" * guards)
            for k, p in enumerate(region):
                self.emit_piece(p, False)
                if p.retires and k + 1 < len(region):
                    self.put(region[k + 1].stmts[0].a, guard)
                    guards += 1
            end = region[-1].stmts[-1].b
            if r < last:
                saves = "".join(f" __x.{c.var.name} = {c.var.name};" for c in split.saved_after(r))
                self.put(end, f"{saves} {'}' * guards} __x.__m = __m; __x.__rt = __rt; return; }}")
            else:
                self.put(end, "}" * guards + " }")
        self.splitting = False

    def slot_type(self, c, member: bool) -> str:
        """A carried local's type: as declared, or (``member``) as its slot holds it, unqualified."""
        if c.var.lanes:
            return self.lanes_decl(c.dc, c.decl).rsplit(" ", 1)[0]
        t = self.render(c.decl.type[0], c.decl.type[1], None)
        if c.dc.ptr[1] >= c.dc.ptr[0]:
            t += " " + self.render(c.dc.ptr[0], c.dc.ptr[1], None)
        return f"mk::simt::auto_t<{t}>" if member else t

    # -- control structures
    def emit_structure(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        if isinstance(s, sx.Block):
            self.put(s.a, "{")
            self.emit_list(p.bodies[0], ctx_v)
            self.put(s.b, "}")
        elif isinstance(s, sx.If):
            self.put(s.a, f"if ({self.expr(s.cond, None)}) {{")
            self.emit_list(p.bodies[0], ctx_v)
            self.put(s.then.b, "}")
            if s.els is not None:
                self.put(s.els.a, "else {")
                self.emit_list(p.bodies[1], ctx_v)
                self.put(s.els.b, "}")
        elif isinstance(s, (sx.While, sx.For, sx.DoWhile)):
            if self.fixed is None and self.lane_only(p.bodies[-1]):
                self.emit_loop_versions(p, ctx_v)
            else:
                self.emit_loop(p, ctx_v)
        elif isinstance(s, sx.Switch):
            k = self.new()
            self.loops.append(("S", k, True))
            self.put(s.a, f"switch ({self.expr(s.cond, None)}) {{")
            self.emit_list(p.bodies[0], ctx_v, guard=False)
            self.loops.pop()
            self.put(s.b, "}")

    def emit_loop(self, p: Piece, ctx_v: bool) -> None:
        """A loop on a uniform condition: plain C++."""
        s = p.stmts[0]
        k = self.new()
        self.loops.append(("S", k, False))
        stop = "if (!__m) break;" if any(q.retires for q in p.bodies[-1]) else ""
        if isinstance(s, sx.While):
            self.put(s.a, f"while ({self.expr(s.cond, None)}) {{ {stop}")
        elif isinstance(s, sx.DoWhile):
            self.put(s.a, f"do {{ {stop}")
        else:
            init = self.render(s.init.a, s.init.b - 1, None) if s.init is not None else ""
            self.put(s.a, f"for ({init}; {self.expr(s.cond, None)}; {self.expr(s.inc, None)}) {{ {stop}")
        self.emit_list(p.bodies[-1], ctx_v)
        self.loops.pop()
        self.put(s.b, "}" if not isinstance(s, sx.DoWhile) else f"}} while ({self.expr(s.cond, None)});")

    def lane_only(self, body: list[Piece]) -> bool:
        """Whether a uniform loop's body is per-lane statements (and uniform ones) that leave the
        mask as it is: no structure, SIMD-group call, barrier, return or jump."""
        return any(q.kind in ("R", "RW") for q in body) and all(
            q.kind in ("U", "R", "RW", "N") and not any(isinstance(n, (sx.Return, sx.Jump)) for st in q.stmts
                                                        for n in st.walk()) for q in body)

    def emit_loop_versions(self, p: Piece, ctx_v: bool) -> None:
        """A uniform loop of per-lane statements, written once per lane shape its regions are worth
        and for a full mask or not, chosen before the loop: within a version every region has one
        lane loop, so the compiler keeps per-lane values in vector registers across iterations (a
        tiled matmul's accumulators), which a choice made in every iteration prevents."""
        s = p.stmts[0]
        shapes = [w for w in SHAPES if any(w in self.shapes(q.stmts) for q in p.bodies[-1])]
        for j, w in enumerate(shapes + [0]):
            self.put(s.a if j == 0 else s.b, ("else " if j else "") + (f"if ({SHAPES[w]}) {{" if w else "{"))
            for full in (True, False):
                self.put(s.a if j == 0 and full else s.b, "if (__m == ~0u) {" if full else "} else {")
                self.fixed, self.full = (w, full), full
                self.emit_loop(p, ctx_v)
                self.fixed, self.full = None, False
            self.put(s.b, "} }")

    def mask_of(self, cond, var: str) -> str:
        """Code setting `var` to the mask of active lanes for which cond holds."""
        inf = self.info(cond)
        pre = self.hoist(inf.hoists) if inf.hoists else ""
        # A flag for every lane (cond evaluated for the active ones), then one pack: OR-ing bits
        # lane by lane vectorises into a slow horizontal OR.
        def packed() -> str:
            loop = (f"{self.lanes_loop(active=False)} __b{var}[__l] = (__m >> __l & 1u) && "
                    f"({self.expr(cond, '__l')}); {var} = mk::simt::pack(__b{var});")
            found = self.position_compare(cond, ("<", "<=", ">", ">=", "=="))
            if found is None:
                return loop
            # p < v for p = base + lane: a run of lanes from the first, or to the last for >, >=;
            # p == v: one lane.
            v, op, c = found
            runs = f"mk::simt::lanes_below(__b_{v.name}, {c}, {'true' if op in ('<=', '>') else 'false'})"
            if op == "==":
                runs = f"mk::simt::lanes_equal(__b_{v.name}, {c})"
            closed = f"__m & {'~' if op in ('>', '>=') else ''}{runs}"
            return f"if constexpr (mk::simt::exact_compare<decltype({c})>) {var} = {closed}; else {{ {loop} }}"
        code = f"{pre} unsigned {var}; {{ bool __b{var}[32]; (void)__b{var}; {self.by_shape([cond], packed)} }}"
        for h in inf.hoists:
            del self.subst[h.a]
        return code

    def emit_masked(self, p: Piece, ctx_v: bool) -> None:
        s = p.stmts[0]
        k = self.new()
        if isinstance(s, sx.Switch):
            self.emit_masked_switch(p, k)
            return
        if isinstance(s, sx.If):
            self.put(s.a, f"{{ {self.mask_of(s.cond, f'__c{k}')} const unsigned __s{k} = __m; "
                          f"__m = __s{k} & __c{k}; if (__m) {{")
            # Under `if (lane == 0)` and the like, at most a lane or a few pass: their loops visit
            # the set bits, where a loop over 32 lanes made one lane's store a vector scatter.
            outer, self.sparse = self.sparse, self.sparse or self.selects_few(s.cond)
            self.emit_list(p.bodies[0], True)
            self.sparse = outer
            self.put(s.then.b, f"}} const unsigned __t{k} = __m; __m = __s{k} & ~__c{k}; if (__m) {{")
            if s.els is not None:
                self.emit_list(p.bodies[1], True)
            self.put(s.b, f"}} __m |= __t{k}; }}")
            return
        self.loops.append(("M", k, False))
        head = f"{{ unsigned __lx{k} = 0u, __lc{k} = 0u; (void)__lc{k};"
        if isinstance(s, sx.For):
            self.put(s.a, head)
            if s.init is not None:
                self.emit_list(p.bodies[0], ctx_v)
        else:
            self.put(s.a, head)
        cond = ""
        if s.cond is not None:
            cond = (f"{self.mask_of(s.cond, f'__c{k}')} __lx{k} |= __m & ~__c{k}; __m &= __c{k}; ")
        if isinstance(s, sx.DoWhile):
            self.put(s.a, f"for (;;) {{ __lc{k} = 0u; {{")
            self.emit_list(p.bodies[-1], True)
            self.loops.pop()
            self.put(s.b, f"}} __m |= __lc{k}; {cond} if (!__m) break; }} __m = __lx{k}; }}")
            return
        body = s.body
        self.put(body.a, f"for (;;) {{ {cond}if (!__m) break; __lc{k} = 0u; {{")
        self.emit_list(p.bodies[-1], True)
        self.loops.pop()
        inc = ""
        if isinstance(s, sx.For) and s.inc is not None:
            inf = self.info(s.inc)
            inc = self.hoist(inf.hoists) if inf.hoists else ""
            inc += f" {LANES} {{ {self.expr(s.inc, '__l')}; }}"
            for h in inf.hoists:
                del self.subst[h.a]
        self.put(s.b, f"}} __m |= __lc{k}; {inc} }} __m = __lx{k}; }}")

    def emit_masked_switch(self, p: Piece, k: int) -> None:
        """A switch on a per-lane value: no lane runs until its case label; lanes join at their label
        (the others fall through), a break leaves for the end."""
        s = p.stmts[0]
        inf = self.info(s.cond)
        pre = self.hoist(inf.hoists) if inf.hoists else ""
        cond = self.expr(s.cond, "__l")
        cond0 = self.expr(s.cond, "0")
        for h in inf.hoists:
            del self.subst[h.a]
        cases = [q.stmts[0] for q in p.bodies[0] if isinstance(q.stmts[0], sx.Case)]
        each = f"for (unsigned __l = 0; __l < 32u; ++__l) if (__s{k} >> __l & 1u)"
        matched = " || ".join(f"__v{k}[__l] == ({self.expr(c.value, '__l')})" for c in cases if c.value is not None)
        self.put(s.a, f"{{ {pre} const unsigned __s{k} = __m; unsigned __lx{k} = 0u; "
                      f"mk::lanes<mk::simt::auto_t<decltype(({cond0}))>> __v{k}; {LANES} __v{k}.set(__l, {cond}); "
                      f"unsigned __d{k} = 0u; {each} {{ if (!({matched or 'false'})) __d{k} |= 1u << __l; }} __m = 0u;")
        self.loops.append(("M", k, True))
        for q in p.bodies[0]:
            c = q.stmts[0]
            if isinstance(c, sx.Case):
                if c.value is None:
                    self.put(c.a, f"__m |= __d{k};")
                else:
                    self.put(c.a, f"{each} {{ if (__v{k}[__l] == ({self.expr(c.value, '__l')})) __m |= 1u << __l; }}")
                continue
            self.emit_piece(q, True)
        self.loops.pop()
        self.put(s.b, f"__m |= __lx{k}; }}")

    # ---------------------------------------------------------------- entry
    def text(self) -> str:
        """The emitted code as one string (in token order)."""
        return " ".join(t for i in sorted(self.frags) for t, _ in self.frags[i])

    def apply(self, a: int, b: int) -> None:
        """Replaces tokens [a, b] by the emitted code. Loop hints in between go: the loops they
        annotated may now be elsewhere (they only tune speed)."""
        for i in range(a, b + 1):
            self.src.out[i] = self.marked(i)
            self.src.after.pop(i, None)
            self.src.before.pop(i, None)
        for ln in range(self.toks[a].line, self.toks[b].line):
            if self.src.lines[ln].lstrip().startswith("#pragma"):
                self.src.line_out[ln] = ""

    def marked(self, at: int) -> str:
        """The code put at token `at`, with `#line` markers around code written for a token of
        another line, so that a fault or a diagnostic in a region's later copies names the user's
        line as in its first."""
        home = self.src.loc.get(self.toks[at].line)
        out, now = [], home
        for text, tok in self.frags.get(at, []):
            where = self.src.loc.get(self.toks[tok].line)
            if where is not None and where != now:
                out.append(_line_marker(where))
                now = where
            out.append(text)
        if now != home and home is not None:
            out.append(_line_marker(home))
        return " ".join(out)


def _line_marker(where: tuple[str, int]) -> str:
    return f"\n{line_directive(where[1], where[0])}\n"


def _unparen(e):
    while isinstance(e, sx.Paren):
        e = e.inner
    return e
