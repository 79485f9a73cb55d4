"""The pieces a SIMT function body is sorted into, and which locals need a value per lane.

- U   uniform: runs once for the SIMD-group;
- R   a region: a run of per-lane statements as one loop over the active lanes, as long as
      that cannot change what any lane sees: per address space, the region only reads
      shared memory, or holds its one write to it;
- RW  a statement that reads shared memory and writes it: every lane's right-hand side is
      evaluated before any lane stores (two loops);
- H   calls a SIMD-group function or a SIMT helper (hoisted out of the lane loop);
- B   threadgroup_barrier;
- N   simdgroup_barrier: nothing to do for lanes in lockstep;
- S   a control structure whose condition is uniform: plain C++, its bodies sorted again;
- M   a control structure with a per-lane condition around H/B/RW statements: run under
      execution masks, lanes reconverging after it.

A local used by more than one piece is stored as mk::lanes<T> (place); emit.py writes the code.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import syntax as sx
from .effects import Info, conflict
from .uniformity import per_lane, varying
from .unsupported import Unsupported


@dataclass(eq=False)
class Piece:
    kind: str                   # U, R (region), RW, H, B, S, M, N (simdgroup_barrier: nothing)
    stmts: list                 # the statements (several for a region)
    bodies: list = field(default_factory=list)  # S/M: lists of pieces, one per branch / the body
    retires: bool = False       # lanes may leave the current mask (return / break / continue)


def form(fn) -> list[Piece]:
    """fn's body as pieces, and the storage of every local decided (raises Unsupported early)."""
    pieces = _Sorter(fn).sort(fn.body.stmts, False)
    place(fn, pieces)
    return pieces


class _Sorter:
    def __init__(self, fn):
        self.fn = fn

    def info(self, s) -> Info:
        return self.fn.info[id(s)]

    def is_l(self, s, ctx_v: bool) -> bool:
        """Whether statement s can run inside a region (per lane, with its own control flow)."""
        inf = self.info(s)
        if inf.hoists or inf.barrier or inf.simd_barrier:
            return False
        if isinstance(s, (sx.Return, sx.Jump)):
            return ctx_v or (isinstance(s, sx.Return) and varying(self.fn, inf))
        if isinstance(s, (sx.ExprStmt, sx.Decl)):
            if isinstance(s, sx.Decl) and any(dc.var.kind == "shared" for dc in s.declarators):
                return False
            if isinstance(s, sx.Decl) and "constexpr" in s.specs and not per_lane(self.fn, inf):
                return False  # a compile-time constant: declared where every later piece sees it
            if inf.assign_rw or inf.rw():
                return False
            return ctx_v or per_lane(self.fn, inf)
        if isinstance(s, sx.Other):
            return False
        if isinstance(s, sx.Case):
            return False
        if isinstance(s, (sx.If, sx.Switch)):
            v = ctx_v or varying(self.fn, self.info(s.cond))
        elif isinstance(s, (sx.While, sx.DoWhile, sx.For)):
            v = ctx_v or id(s) in self.fn.loop_varying
        else:  # Block
            v = ctx_v
        return v and self.fusable(self.leaves(s))

    def leaves(self, s) -> list:
        """(mem_r, mem_w) of every statement inside s, or None if s holds something a region cannot."""
        out = []
        for t in s.walk():
            if isinstance(t, sx.Decl) and any(dc.var.kind == "shared" for dc in t.declarators):
                out.append(None)
            elif isinstance(t, _STRUCTURES):
                out += [self.info(h) for h in t.heads()]
            else:
                out.append(self.info(t))
        return out

    @staticmethod
    def fusable(leaves: list) -> bool:
        """Whether statements can run lane after lane as one region without any lane seeing another's
        store early: per address space, any number of statements read it, or one writes it and no
        other statement touches it."""
        if any(x is None or x.hoists or x.barrier or x.rw() or x.assign_rw for x in leaves):
            return False
        for i, x in enumerate(leaves):
            if x.mem_w and any(conflict(x.mem_w, y.mem_r | y.mem_w) for j, y in enumerate(leaves) if j != i):
                return False
        return True

    def sort(self, stmts: list, ctx_v: bool) -> list[Piece]:
        pieces: list[Piece] = []
        region: Piece | None = None
        region_leaves: list = []
        for s in stmts:
            if self.is_l(s, ctx_v):
                lv = self.leaves(s)
                if region is not None and self.fusable(region_leaves + lv):
                    region.stmts.append(s)
                    region_leaves += lv
                    continue
                region = Piece("R", [s])
                region_leaves = lv
                pieces.append(region)
                continue
            region = None
            pieces.append(self.piece(s, ctx_v))
        for p in pieces:
            p.retires = self.retires(p, ctx_v)
        return pieces

    def piece(self, s, ctx_v: bool) -> Piece:
        inf = self.info(s)
        if isinstance(s, (sx.ExprStmt, sx.Decl, sx.Return)) and inf.barrier:
            if not (isinstance(s, sx.ExprStmt) and isinstance(s.expr, sx.Call)):
                raise Unsupported(s.a, "threadgroup_barrier inside an expression")
            return Piece("B", [s])
        if isinstance(s, (sx.ExprStmt, sx.Decl, sx.Return)) and inf.hoists:
            return Piece("H", [s])
        if isinstance(s, sx.ExprStmt) and inf.simd_barrier and isinstance(s.expr, sx.Call):
            return Piece("N", [s])
        if isinstance(s, (sx.ExprStmt, sx.Decl)) and (inf.assign_rw or inf.rw()) and (
                ctx_v or per_lane(self.fn, inf)):
            return Piece("RW", [s])
        if isinstance(s, (sx.ExprStmt, sx.Decl, sx.Return, sx.Jump, sx.Other, sx.Case)):
            return Piece("U", [s])
        if isinstance(s, sx.Block):
            return Piece("S", [s], [self.sort(s.stmts, ctx_v)])
        if isinstance(s, sx.If):
            cv = ctx_v or varying(self.fn, self.info(s.cond)) or bool(self.info(s.cond).hoists)
            bodies = [self.sort(_stmts(s.then), cv)] + ([self.sort(_stmts(s.els), cv)] if s.els is not None else [])
            return Piece("M" if cv else "S", [s], bodies)
        if isinstance(s, (sx.While, sx.DoWhile, sx.For)):
            v = ctx_v or id(s) in self.fn.loop_varying or any(
                self.info(p).hoists for p in s.heads())
            body = self.sort(_stmts(s.body), v)
            bodies = [body]
            if isinstance(s, sx.For) and s.init is not None:
                bodies = [self.sort([s.init], ctx_v), body]
            return Piece("M" if v else "S", [s], bodies)
        if isinstance(s, sx.Switch):
            if ctx_v or varying(self.fn, self.info(s.cond)) or self.info(s.cond).hoists:
                body = _stmts(s.body)
                if any(isinstance(t, sx.Case) for c in body for t in c.walk() if t is not c):
                    raise Unsupported(s.a, "a case label inside a nested statement of a switch on a per-thread value")
                return Piece("M", [s], [self.sort(body, True)])
            return Piece("S", [s], [self.sort(_stmts(s.body), False)])
        raise Unsupported(s.a, "this statement")

    def retires(self, p: Piece, ctx_v: bool) -> bool:
        """Whether lanes may leave the mask in p (a return, break or continue that not all take)."""
        if p.kind in ("U",) and not ctx_v:
            return False

        def has_jump(s, depth):
            if isinstance(s, sx.Return):
                return True
            if isinstance(s, sx.Jump):
                return depth == 0
            inner = depth + isinstance(s, (sx.While, sx.DoWhile, sx.For, sx.Switch))  # what break leaves
            return any(has_jump(c, inner) for c in s.children())
        if p.kind == "S":
            return any(q.retires for body in p.bodies for q in body)
        return any(has_jump(s, 0) for s in p.stmts) and (ctx_v or p.kind != "U")


def place(fn, pieces: list[Piece]) -> None:
    """Which varying locals need per-lane storage: those used by more than one piece."""
    owner: dict[int, int] = {}

    def own(a, b, pid):
        for i in range(a, b + 1):
            v = fn.name_var.get(i)
            if v is not None:
                v.units.add(pid)

    def walk(ps):
        for p in ps:
            pid = id(p)
            if p.kind in ("S", "M"):
                for part in p.stmts[0].heads():
                    own(part.a, part.b, pid)
                for body in p.bodies:
                    walk(body)
            else:
                for s in p.stmts:
                    own(s.a, s.b, pid)
                    for t in s.walk():
                        owner[id(t)] = pid
    walk(pieces)
    for v in fn.vars:
        if v.kind in ("param", "builtin"):
            v.lanes = True
        elif v.kind in ("local", "kparam") and not v.uniform:
            v.lanes = len(v.units) > 1 or v.decl_stmt is None or owner.get(id(v.decl_stmt)) not in v.units
    # An escaping `auto` local is typed from its initializer, outside the region: what that
    # names must be visible there too.
    changed = True
    while changed:
        changed = False
        for v in fn.vars:
            if v.lanes and v.decl is not None and _deduced(fn.unit.toks, v.decl_stmt):
                init = v.decl.init
                for n in (init.walk() if init is not None else ()):
                    if isinstance(n, sx.Name) and n.var is not None and not n.var.uniform and not n.var.lanes:
                        n.var.lanes = changed = True


_STRUCTURES = (sx.Block, sx.If, sx.While, sx.DoWhile, sx.For, sx.Switch)


def _stmts(s) -> list:
    return s.stmts if isinstance(s, sx.Block) else [s]


def _deduced(toks, d) -> bool:
    return any(toks[k].text in ("auto", "decltype") for k in range(d.type[0], d.type[1] + 1))
