"""Names in a SIMT function's body: which local, parameter or member each one is.

Scopes follow C++: a block, each branch of an `if` and a loop's body open one; a
`for` header's declarations live around its body. What each local is (array,
pointer, reference, address space, simdgroup_matrix) is read from its declaration
here, once, for the later analyses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import scan, syntax as sx
from .unsupported import Unsupported

SPACE_WORDS = ("device", "constant", "threadgroup", "thread")


def space_in(words) -> str:
    """The address space a declaration's words name (? if none: the pointee may be anywhere)."""
    return next((w for w in words if w in SPACE_WORDS), "?")


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


@dataclass
class Resolution:
    vars: list                                    # parameters, then locals in declaration order
    name_var: dict = field(default_factory=dict)  # token of a name -> the Var it names
    member_toks: set = field(default_factory=set)  # tokens of implicit member names (in a method)


def resolve(toks, body: sx.Block, params: list[Var], members: dict[str, bool], has_this: bool) -> Resolution:
    """Binds every unqualified name in body to its Var (Name.var, Declarator.var). members: a
    method's implicit member names -> static."""
    out = Resolution(list(params))
    scopes: list[dict[str, Var]] = [{p.name: p for p in params if p.name}]

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
                w = toks[n.last].text
                if w == "this":
                    if not has_this:
                        raise Unsupported(n.a, "`this` in a static function")
                    continue
                v = lookup(w)
                if v is not None:
                    out.name_var[n.last] = v
                    n.var = v
                elif (w in members and not members[w] or w == "operator") and has_this:
                    out.member_toks.add(n.last)  # `operator()(x)` in a method: this->operator()(x)

    def declare(d: sx.Decl):
        for dc in d.declarators:
            expr(dc.init)
            for a in dc.ctor_args:
                expr(a)
            name = toks[dc.name].text
            ptr_words = [toks[k].text for k in range(dc.ptr[0], dc.ptr[1] + 1)]
            # `threadgroup T x[N]` is storage of the group; `threadgroup T* p` a pointer to it.
            shared = bool(d.specs & {"threadgroup", "static"}) and not ({"*", "&", "&&"} & set(ptr_words))
            type_words = [toks[k].text for k in range(d.type[0], d.type[1] + 1)]
            v = Var(name, "shared" if shared else "local", dc.name, array=dc.dims[1] >= dc.dims[0],
                    dims=_dims(toks, dc.dims), pointer="*" in ptr_words,
                    ref="&" in ptr_words or "&&" in ptr_words, decl=dc, decl_stmt=d)
            if "auto" in type_words or "decltype" in type_words:
                v.pointer = True  # a deduced type may be a pointer: indexing it is not known to be private
            v.matrix = any(w.startswith("simdgroup_") for w in type_words)
            if v.matrix and dc.init_kind == "()" and len(dc.ctor_args) == 1:
                # `simdgroup_float8x8 m(x)` is `= simdgroup_float8x8(x)`: a diagonal, hoisted as a cast
                dc.init = sx.Cast(dc.ctor_args[0].a - 1, dc.b, d.type, dc.ctor_args)
                dc.init_kind, dc.ctor_args = "=", []
            v.space = "threadgroup" if shared else space_in(type_words + ptr_words)
            dc.var = v
            out.vars.append(v)
            out.name_var[dc.name] = v
            scopes[-1][name] = v

    def stmt(s):
        if isinstance(s, sx.Decl):
            declare(s)
        elif isinstance(s, sx.ExprStmt):
            expr(s.expr)
        elif isinstance(s, (sx.Return, sx.Case)):
            expr(s.value)
        elif isinstance(s, sx.Other):
            for n in s.names:
                expr(n)
        elif isinstance(s, sx.Block):
            scopes.append({})
            for c in s.stmts:
                stmt(c)
            scopes.pop()
        else:  # a control structure: a scope around it (a for header's), and one per branch or body
            scopes.append({})
            if isinstance(s, sx.For) and s.init is not None:
                stmt(s.init)
            if not isinstance(s, sx.DoWhile):
                for h in s.heads():
                    expr(h)
            for c in s.children():
                if c is not getattr(s, "init", None):
                    scopes.append({})
                    stmt(c)
                    scopes.pop()
            if isinstance(s, sx.DoWhile):
                expr(s.cond)
            scopes.pop()

    stmt(body)
    return out


def _dims(toks, rng) -> int:
    """The number of `[N]` in a declarator's token range."""
    return sum(x == "[" and depth == 1 for _, x, depth in scan.levels(toks, rng[0], rng[1] + 1))
