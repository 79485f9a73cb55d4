"""A parser for the statements and expressions of function bodies, over the front end's tokens.

It builds just enough structure for the SIMT transform: statements with their
control flow, declarations with their declarators, and expressions as trees
whose leaves are token ranges (names, literals, types). Anything it cannot read
raises ``Unsupported`` with the offending token; the transform then leaves the
function to the fiber fallback and says why.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..tokens import Token
from . import scan
from .names import BUILTIN_TYPES, DECL_SPECIFIERS, Names
from .unsupported import Unsupported


# ---------------------------------------------------------------- expressions
@dataclass(eq=False)
class Expr:
    a: int  # first token
    b: int  # last token (inclusive)

    def children(self) -> list["Expr"]:
        return []

    def walk(self):
        yield self
        for c in self.children():
            if c is not None:
                yield from c.walk()


@dataclass(eq=False)
class Name(Expr):
    """An id-expression: `x`, `a::b`, `f<T>` (template arguments are opaque), `this`."""
    last: int = 0             # token of the final identifier
    qualified: bool = False   # has `::`
    var: object = None        # the local variable it names (set by analysis)
    inner: list = field(default_factory=list)  # names in its qualifier: x of `decltype(x)::y`

    def children(self):
        return list(self.inner)


@dataclass(eq=False)
class Opaque(Expr):
    """Literals, types, sizeof(type), lambdas kept as they are: no names of locals inside are
    rewritten unless listed in `names`."""
    names: list = field(default_factory=list)  # Name nodes found inside (e.g. in decltype(x))

    def children(self):
        return list(self.names)


@dataclass(eq=False)
class Call(Expr):
    callee: Expr = None
    args: list = field(default_factory=list)
    lparen: int = 0

    def children(self):
        return [self.callee, *self.args]


@dataclass(eq=False)
class Member(Expr):
    obj: Expr = None
    name: int = 0     # token of the member name
    arrow: bool = False

    def children(self):
        return [self.obj]


@dataclass(eq=False)
class Index(Expr):
    obj: Expr = None
    idx: Expr = None

    def children(self):
        return [self.obj, self.idx]


@dataclass(eq=False)
class Unary(Expr):
    op: str = ""
    operand: Expr = None
    postfix: bool = False

    def children(self):
        return [self.operand]


@dataclass(eq=False)
class Binary(Expr):
    op: str = ""
    lhs: Expr = None
    rhs: Expr = None

    def children(self):
        return [self.lhs, self.rhs]


@dataclass(eq=False)
class Assign(Binary):
    pass


@dataclass(eq=False)
class Cond(Expr):
    cond: Expr = None
    then: Expr = None
    els: Expr = None

    def children(self):
        return [self.cond, self.then, self.els]


@dataclass(eq=False)
class Cast(Expr):
    """(T)e, static_cast<T>(e), T(e...) or T{e...} with T a type: `type` is the type's token range."""
    type: tuple = (0, -1)
    args: list = field(default_factory=list)

    def children(self):
        return list(self.args)


@dataclass(eq=False)
class InitList(Expr):
    items: list = field(default_factory=list)

    def children(self):
        return list(self.items)


@dataclass(eq=False)
class Paren(Expr):
    inner: Expr = None

    def children(self):
        return [self.inner]


# ---------------------------------------------------------------- statements
@dataclass(eq=False)
class Stmt:
    a: int
    b: int

    def children(self) -> list["Stmt"]:
        """Its sub-statements, in source order."""
        return []

    def heads(self) -> list[Expr]:
        """The expressions a control structure evaluates itself (not those of its sub-statements)."""
        return []

    def walk(self):
        """It and every statement inside it."""
        yield self
        for c in self.children():
            yield from c.walk()


@dataclass(eq=False)
class Block(Stmt):
    stmts: list = field(default_factory=list)

    def children(self):
        return list(self.stmts)


@dataclass(eq=False)
class ExprStmt(Stmt):
    expr: Expr = None


@dataclass(eq=False)
class Declarator:
    name: int                     # token of the declared name
    a: int                        # first token of the declarator (after the shared type)
    b: int                        # last token (before ',' or ';')
    ptr: tuple = (0, -1)          # token range of `*`/`&`/`const` before the name
    dims: tuple = (0, -1)         # token range of `[N]...` after the name
    init: Expr = None             # the initializer expression, or InitList, or None
    init_kind: str = ""           # "=", "()", "{}", ""
    ctor_args: list = field(default_factory=list)  # for "()": the arguments
    var: object = None


@dataclass(eq=False)
class Decl(Stmt):
    type: tuple = (0, -1)         # token range of the shared type (with specifiers)
    declarators: list = field(default_factory=list)
    specs: set = field(default_factory=set)  # const, static, threadgroup, ...


@dataclass(eq=False)
class If(Stmt):
    cond: Expr = None
    then: Stmt = None
    els: Stmt = None
    constexpr: bool = False

    def children(self):
        return [self.then] + ([self.els] if self.els is not None else [])

    def heads(self):
        return [self.cond]


@dataclass(eq=False)
class While(Stmt):
    cond: Expr = None
    body: Stmt = None

    def children(self):
        return [self.body]

    def heads(self):
        return [self.cond]


@dataclass(eq=False)
class DoWhile(Stmt):
    body: Stmt = None
    cond: Expr = None

    def children(self):
        return [self.body]

    def heads(self):
        return [self.cond]


@dataclass(eq=False)
class For(Stmt):
    init: Stmt = None             # Decl, ExprStmt or None
    cond: Expr = None
    inc: Expr = None
    body: Stmt = None
    rparen: int = 0

    def children(self):
        return ([self.init] if self.init is not None else []) + [self.body]

    def heads(self):
        return [e for e in (self.cond, self.inc) if e is not None]


@dataclass(eq=False)
class Switch(Stmt):
    cond: Expr = None
    body: Stmt = None

    def children(self):
        return [self.body]

    def heads(self):
        return [self.cond]


@dataclass(eq=False)
class Case(Stmt):
    """`case X:` or `default:` (a label inside a switch body)."""
    value: Expr = None


@dataclass(eq=False)
class Return(Stmt):
    value: Expr = None


@dataclass(eq=False)
class Jump(Stmt):
    kind: str = ""                # break | continue


@dataclass(eq=False)
class Other(Stmt):
    """typedef / using / static_assert / an empty statement: kept as written."""
    names: list = field(default_factory=list)  # x of each `decltype(x)`: its per-lane type is named


_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
_BINARY = [
    {"||"}, {"&&"}, {"|"}, {"^"}, {"&"}, {"==", "!="}, {"<", ">", "<=", ">=", "<=>"}, {"<<", ">>"},
    {"+", "-"}, {"*", "/", "%"}, {".*", "->*"},
]
_PREC = {op: i for i, ops in enumerate(_BINARY) for op in ops}
_CXX_CASTS = {"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "as_type"}


class Parser:
    def __init__(self, toks: list[Token], names: Names, attr_at: dict, end: int, params=(),
                 statements: dict[int, str] | None = None):
        self.toks = toks
        self.names = names
        self.statements = statements or {}  # clang's word on a statement: first token -> "decl" / "expr"
        self.attr_at = attr_at   # attribute blocks to skip ('[' index -> (']' index, attrs))
        self.end = end           # one past the last token this parser may read
        self.local_types: list[set[str]] = [set()]
        self.local_vars: list[set[str]] = [set(params)]  # a local's name hides a type of that name

    # ---- tokens
    def t(self, i: int) -> str:
        return self.toks[i].text if i < self.end else ""

    def kind(self, i: int) -> str:
        return self.toks[i].kind if i < self.end else ""

    def expect(self, i: int, text: str) -> int:
        if self.t(i) != text:
            raise Unsupported(min(i, self.end - 1), f"expected '{text}'")
        return i + 1

    def skip_attrs(self, i: int) -> int:
        """Past the attributes at i: [[...]] blocks and GNU __attribute__((...))."""
        while True:
            if i in self.attr_at:
                i = self.attr_at[i][0] + 1
            elif self.t(i) == "__attribute__" and self.t(i + 1) == "(":
                i = self.close(i + 1) + 1
            else:
                return i

    def close(self, i: int) -> int:
        return scan.close(self.toks, i, self.end)

    def close_angle(self, i: int) -> int:
        return scan.close_angle(self.toks, i, self.end)

    def is_type_name(self, w: str) -> bool:
        if any(w in s for s in self.local_vars):
            return False
        return self.names.is_type(w) or any(w in s for s in self.local_types)

    # ---- statements
    def block(self, i: int) -> Block:
        a = i
        i = self.expect(i, "{")
        stmts = []
        self.local_types.append(set())
        self.local_vars.append(set())
        while self.t(i) != "}":
            if i >= self.end:
                raise Unsupported(a, "unterminated block")
            s = self.stmt(i)
            stmts.append(s)
            i = s.b + 1
        self.local_types.pop()
        self.local_vars.pop()
        return Block(a, i, stmts)

    def stmt(self, i: int) -> Stmt:
        i = self.skip_attrs(i)
        w = self.t(i)
        if w == "{":
            return self.block(i)
        if w == ";":
            return Other(i, i)
        if w == "if":
            a = i
            i += 1
            constexpr = self.t(i) == "constexpr"
            if constexpr:
                i += 1
            rp = self.close(i)
            cond = self.cond_expr(i + 1, rp)
            then = self.stmt(rp + 1)
            els = None
            j = then.b + 1
            if self.t(j) == "else":
                els = self.stmt(j + 1)
                j = els.b + 1
            return If(a, j - 1, cond, then, els, constexpr)
        if w == "while":
            rp = self.close(i + 1)
            cond = self.cond_expr(i + 2, rp)
            body = self.stmt(rp + 1)
            return While(i, body.b, cond, body)
        if w == "do":
            body = self.stmt(i + 1)
            j = self.expect(body.b + 1, "while")
            rp = self.close(j)
            cond = self.expr(j + 1, rp)
            self.expect(rp + 1, ";")
            return DoWhile(i, rp + 1, body, cond)
        if w == "for":
            return self.for_stmt(i)
        if w == "switch":
            rp = self.close(i + 1)
            cond = self.cond_expr(i + 2, rp)
            body = self.stmt(rp + 1)
            return Switch(i, body.b, cond, body)
        if w in ("case", "default"):
            j = next(iter(scan.top_level(self.toks, i + 1, self.end, (":",))), self.end)
            value = self.expr(i + 1, j) if w == "case" else None
            return Case(i, j, value)
        if w == "return":
            semi = self.find_semi(i + 1)
            return Return(i, semi, self.expr(i + 1, semi) if semi > i + 1 else None)
        if w in ("break", "continue"):
            self.expect(i + 1, ";")
            return Jump(i, i + 1, w)
        if w in ("goto", "asm", "__asm__", "try", "throw"):
            raise Unsupported(i, f"'{w}' statements")
        if self.kind(i) == "id" and self.t(i + 1) == ":" and w not in ("public", "private", "protected"):
            raise Unsupported(i, "labels")
        if w in ("typedef", "static_assert", "using"):
            semi = self.find_semi(i)
            if w != "static_assert":
                for k in range(i, semi):
                    if self.kind(k) == "id" and self.t(k + 1) in (";", "=") and (w == "typedef" or k == i + 1):
                        self.local_types[-1].add(self.t(k))
            names = [n for k in range(i, semi - 1) if self.t(k) == "decltype" and self.t(k + 1) == "("
                     for n in self.names_in(k + 2, self.close(k + 1))]
            return Other(i, semi, names)
        if w in ("struct", "class", "union", "enum") and self.kind(i + 1) == "id" and self.t(i + 2) in ("{", ":"):
            raise Unsupported(i, "a class defined inside a function")
        said = self.statements.get(i)
        d = self.try_decl(i) if said != "expr" else None
        if d is not None:
            return d
        if said == "decl":
            raise Unsupported(i, "a declaration this parser cannot read")
        semi = self.find_semi(i)
        return ExprStmt(i, semi, self.expr(i, semi))

    def find_semi(self, i: int) -> int:
        for j, x, depth in scan.levels(self.toks, i, self.end):
            if depth < 0:
                break
            if x == ";" and depth == 0:
                return j
        raise Unsupported(i, "a statement without ';'")

    def for_stmt(self, i: int) -> Stmt:
        rp = self.close(i + 1)
        semis = []
        for j in scan.top_level(self.toks, i + 2, rp, (";", ":")):
            if self.t(j) == ":" and not semis:
                raise Unsupported(i, "range-based for loops")
            semis += [j] if self.t(j) == ";" else []
        if len(semis) != 2:
            raise Unsupported(i, "a for loop header")
        init = None
        if semis[0] > i + 2:
            init = self.try_decl(i + 2)
            if init is None:
                init = ExprStmt(i + 2, semis[0], self.expr(i + 2, semis[0]))
            elif init.b != semis[0]:
                raise Unsupported(i + 2, "a for loop header")
        cond = self.cond_expr(semis[0] + 1, semis[1]) if semis[1] > semis[0] + 1 else None
        inc = self.expr(semis[1] + 1, rp) if rp > semis[1] + 1 else None
        body = self.stmt(rp + 1)
        return For(i, body.b, init, cond, inc, body, rp)

    def cond_expr(self, a: int, b: int) -> Expr:
        head = self.try_decl_head(a)
        if head is not None:
            j = head[1]
            while self.t(j) in ("*", "&", "&&", "const"):
                j += 1
            if self.kind(j) == "id" and self.t(j + 1) in ("=", "{"):
                raise Unsupported(a, "a declaration in a condition")
        return self.expr(a, b)

    # ---- declarations
    def try_decl_head(self, i: int):
        """If a declaration starts at i: (specifiers, index just past its type), else None."""
        specs = set()
        j = i
        strong = False
        while self.t(j) in DECL_SPECIFIERS or self.skip_attrs(j) != j:  # `threadgroup __attribute__((aligned(16))) int`
            if self.t(j) not in DECL_SPECIFIERS:
                j = self.skip_attrs(j)
                continue
            if self.t(j) in ("struct", "class", "union", "enum", "typename"):
                strong = True
            specs.add(self.t(j))
            j += 1
        # The type: builtin words, or a (qualified, templated) name, or decltype(...).
        start = j
        if self.t(j) in ("decltype", "__underlying_type"):
            j = self.close(j + 1) + 1
            strong = True
        elif self.t(j) in BUILTIN_TYPES:
            while self.t(j) in BUILTIN_TYPES or self.t(j) in ("const", "volatile"):
                j += 1
            strong = True
        else:
            if self.t(j) == "::":
                j += 1
            if self.kind(j) != "id":
                return None
            known = self.is_type_name(self.t(j))
            while True:
                if self.kind(j) != "id":
                    return None
                j += 1
                if self.t(j) == "<":
                    if not (self.t(j - 1) in self.names.templates or known or strong):
                        return None
                    j = self.close_angle(j) + 1
                if self.t(j) == "::":
                    j += 1
                    if self.t(j) == "template":
                        j += 1
                    continue
                break
            if not (known or strong):
                # `Name x`, `Name* x`, `Name& x`: a declaration of a type we did not see declared.
                k = j
                while self.t(k) in ("*", "&", "&&", "const", "volatile", "thread", "threadgroup", "device",
                                    "constant", "__restrict", "restrict"):
                    k += 1
                if not (self.kind(k) == "id" and self.t(k + 1) in ("=", ";", ",", "[", "(", "{")):
                    return None
                if self.t(k + 1) == "(" and k == j:
                    return None  # f(x) g(y)? not a declaration we can read
        while self.t(j) in ("const", "volatile", "thread", "threadgroup", "device", "constant"):
            specs.add(self.t(j))
            j += 1
        if j == start:
            return None
        return specs, j

    def try_decl(self, i: int):
        head = self.try_decl_head(i)
        if head is None:
            return None
        specs, j = head
        type_end = j - 1
        decls = []
        while True:
            a = j
            while self.t(j) in ("*", "&", "&&", "const", "volatile", "thread", "threadgroup", "device", "constant",
                                "__restrict", "restrict"):
                j += 1
            ptr = (a, j - 1)
            j = self.skip_attrs(j)
            if self.kind(j) != "id":
                if self.t(j) == "(":
                    raise Unsupported(j, "a declarator in parentheses (function pointer or array reference)")
                return None
            name = j
            j = self.skip_attrs(j + 1)
            da = j
            while self.t(j) == "[":
                j = self.close(j) + 1
            dims = (da, j - 1)
            j = self.skip_attrs(j)
            init, kind, ctor_args = None, "", []
            if self.t(j) == "=":
                e = self.find_decl_end(j + 1)
                init = self.expr(j + 1, e) if self.t(j + 1) != "{" else self.init_list(j + 1, e)
                kind, j = "=", e
            elif self.t(j) == "(":
                rp = self.close(j)
                ctor_args = self.args(j + 1, rp)
                kind, j = "()", rp + 1
            elif self.t(j) == "{":
                rb = self.close(j)
                init = self.init_list(j, rb + 1)
                kind, j = "{}", rb + 1
            decls.append(Declarator(name, a, j - 1, ptr, dims, init, kind, ctor_args))
            self.local_vars[-1].add(self.t(name))
            if self.t(j) == ",":
                j += 1
                continue
            if self.t(j) == ";":
                return Decl(i, j, (i, type_end), decls, specs)
            return None

    def find_decl_end(self, i: int) -> int:
        """End (exclusive) of an initializer: the ',' or ';' at depth 0."""
        j = i
        while j < self.end:
            x = self.t(j)
            if x in scan.CLOSE:
                j = self.close(j)
            elif x in (")", "]", "}"):
                break  # the end of what holds the declaration: no ',' or ';' ends it
            elif x == "<" and self.t(j - 1) in self.names.templates:
                j = self.close_angle(j)
            elif x in (",", ";"):
                return j
            j += 1
        raise Unsupported(i, "an unterminated initializer")

    # ---- expressions
    def expr(self, a: int, b: int) -> Expr:
        """The expression in tokens [a, b)."""
        if a >= b:
            raise Unsupported(a, "an empty expression")
        e, j = self.comma(a, b)
        if j != b:
            raise Unsupported(j, f"unexpected '{self.t(j)}' in an expression")
        return e

    def names_in(self, a: int, b: int) -> list:
        """The names in expression [a, b) of a `decltype`, for the emitter to name lane 0's (or,
        of a local `x` alone, its per-lane) type; none where it does not parse."""
        try:
            return [n for n in self.expr(a, b).walk() if isinstance(n, Name)]
        except Unsupported:
            return []

    def args(self, a: int, b: int) -> list:
        """Comma-separated expressions in [a, b)."""
        out = []
        j = a
        while j < b:
            if self.t(j) == "{":
                rb = self.close(j)
                e = self.init_list(j, rb + 1)
                j = rb + 1
            else:
                e, j = self.assign(j, b)
            out.append(e)
            if j < b:
                if self.t(j) != ",":
                    raise Unsupported(j, f"unexpected '{self.t(j)}' in an argument list")
                j += 1
        return out

    def init_list(self, a: int, b: int) -> InitList:
        rb = self.close(a)
        if rb + 1 != b:
            raise Unsupported(rb, "an initializer")
        items = []
        j = a + 1
        while j < rb:
            if self.t(j) == "." and self.kind(j + 1) == "id" and self.t(j + 2) == "=":
                j += 3  # designated initializer
            elif self.t(j) == "[":
                rs = self.close(j)
                if self.t(rs + 1) != "=":
                    raise Unsupported(j, "an initializer")
                j = rs + 2  # [i] = x, [a ... b] = x
            e = self.init_list(j, self.close(j) + 1) if self.t(j) == "{" else None
            if e is None:
                e, j = self.assign(j, rb)
            else:
                j = e.b + 1
            items.append(e)
            if self.t(j) == ",":
                j += 1
        return InitList(a, rb, items)

    def comma(self, a: int, b: int):
        e, j = self.assign(a, b)
        while j < b and self.t(j) == ",":
            r, j = self.assign(j + 1, b)
            e = Binary(e.a, r.b, ",", e, r)
        return e, j

    def assign(self, a: int, b: int):
        lhs, j = self.cond(a, b)
        if j < b and self.t(j) in _ASSIGN:
            op = self.t(j)
            if self.t(j + 1) == "{":
                rb = self.close(j + 1)
                rhs, k = self.init_list(j + 1, rb + 1), rb + 1
            else:
                rhs, k = self.assign(j + 1, b)
            return Assign(lhs.a, rhs.b, op, lhs, rhs), k
        return lhs, j

    def cond(self, a: int, b: int):
        c, j = self.binary(a, b, 0)
        if j < b and self.t(j) == "?":
            t, k = self.assign(j + 1, b)
            if self.t(k) != ":":
                raise Unsupported(k, "a conditional expression")
            f, k = self.assign(k + 1, b)
            return Cond(c.a, f.b, c, t, f), k
        return c, j

    def binary(self, a: int, b: int, level: int):
        if level == len(_BINARY):
            return self.unary(a, b)
        lhs, j = self.binary(a, b, level + 1)
        while j < b and self.t(j) in _BINARY[level]:
            op = self.t(j)
            rhs, j = self.binary(j + 1, b, level + 1)
            lhs = Binary(lhs.a, rhs.b, op, lhs, rhs)
        return lhs, j

    def unary(self, a: int, b: int):
        w = self.t(a)
        if w in ("++", "--", "!", "~", "-", "+", "*", "&"):
            e, j = self.unary(a + 1, b)
            return Unary(a, e.b, w, e), j
        if w in ("sizeof", "alignof", "__alignof__", "alignof"):
            if self.t(a + 1) == "(":
                rp = self.close(a + 1)
                if self.looks_like_type(a + 2, rp):
                    return Opaque(a, rp), rp + 1
            if w == "sizeof" and self.t(a + 1) == "...":
                rp = self.close(a + 2)
                return Opaque(a, rp), rp + 1
            e, j = self.unary(a + 1, b)
            return Unary(a, e.b, w, e), j
        if w == "(" and self.is_cast(a, b):
            rp = self.close(a)
            e, j = self.unary(rp + 1, b)
            return Cast(a, e.b, (a + 1, rp - 1), [e]), j
        return self.postfix(a, b)

    def looks_like_type(self, a: int, b: int) -> bool:
        """Whether tokens [a, b) read as a type-id."""
        if a >= b:
            return False
        head = self.try_type(a)
        return head is not None and head == b

    def try_type(self, i: int):
        """End (exclusive) of a type-id starting at i, or None."""
        j = i
        seen = False
        typename = False
        while self.t(j) in DECL_SPECIFIERS:
            typename |= self.t(j) == "typename"
            j += 1
        if self.t(j) in ("decltype", "__underlying_type"):
            j = self.close(j + 1) + 1
            seen = True
        elif self.t(j) in BUILTIN_TYPES:
            while self.t(j) in BUILTIN_TYPES or self.t(j) in ("const", "volatile"):
                j += 1
            seen = True
        else:
            if self.t(j) == "::":
                j += 1
            while self.kind(j) == "id":
                if not (seen or self.is_type_name(self.t(j)) or self.t(j + 1) == "::" or self.t(j - 1) == "::"):
                    return None
                seen = seen or self.is_type_name(self.t(j))
                last = j
                j += 1
                if self.t(j) == "<":
                    j = self.close_angle(j) + 1
                if self.t(j) == "::":
                    j += 1
                    if self.t(j) == "template":
                        j += 1
                    continue
                # `Ops<float>::call` names a member of a type, not a type (unless `typename` says so).
                if not (typename or self.is_type_name(self.t(last))):
                    return None
                break
        if not seen:
            return None
        while self.t(j) in ("*", "&", "&&", "const", "volatile", "thread", "threadgroup", "device", "constant"):
            j += 1
        while self.t(j) == "[":
            j = self.close(j) + 1
        return j

    def is_cast(self, a: int, b: int) -> bool:
        rp = self.close(a)
        if rp + 1 >= b or not self.looks_like_type(a + 1, rp):
            return False
        nxt = self.t(rp + 1)
        return self.kind(rp + 1) in ("id", "num", "str") or nxt in ("(", "!", "~", "-", "+", "*", "&", "++", "--", "{")

    def postfix(self, a: int, b: int):
        e, j = self.primary(a, b)
        while j < b:
            w = self.t(j)
            if w == "(":
                rp = self.close(j)
                args = self.args(j + 1, rp)
                e = Call(e.a, rp, e, args, j)
                j = rp + 1
            elif w == "[":
                rb = self.close(j)
                idx = self.expr(j + 1, rb)
                e = Index(e.a, rb, e, idx)
                j = rb + 1
            elif w in (".", "->"):
                k = j + 1
                if self.t(k) == "template":
                    k += 1
                if self.t(k) == "~" or self.kind(k) != "id":
                    raise Unsupported(k, "a member access")
                end = k
                if self.t(k + 1) == "<" and (self.t(j + 1) == "template" or self.t(k) in self.names.templates):
                    end = self.close_angle(k + 1)
                e = Member(e.a, end, e, k, w == "->")
                j = end + 1
            elif w in ("++", "--"):
                e = Unary(e.a, j, w, e, True)
                j += 1
            else:
                break
        return e, j

    def primary(self, a: int, b: int):
        w, k = self.t(a), self.kind(a)
        if k in ("num", "str"):
            j = a + 1
            while self.kind(j) == "str" and k == "str":
                j += 1
            return Opaque(a, j - 1), j
        if w in ("true", "false", "nullptr", "NULL"):
            return Opaque(a, a), a + 1
        if w == "this":
            return Name(a, a, a), a + 1
        if w == "(":
            rp = self.close(a)
            inner = self.expr(a + 1, rp)
            return Paren(a, rp, inner), rp + 1
        if w == "{":
            rb = self.close(a)
            return self.init_list(a, rb + 1), rb + 1
        if w == "[":
            raise Unsupported(a, "lambdas")
        if w in _CXX_CASTS:
            if self.t(a + 1) != "<":
                return self.name(a, b)
            ra = self.close_angle(a + 1)
            rp = self.close(ra + 1)
            inner = self.expr(ra + 2, rp)
            return Cast(a, rp, (a + 2, ra - 1), [inner]), rp + 1
        if w in ("decltype", "__underlying_type"):
            rp = self.close(a + 1)
            inner = self.names_in(a + 2, rp)
            if self.t(rp + 1) == "::":  # decltype(x)::member
                e, j = self.name(a, b, rp + 2)
                e.inner = inner
                return e, j
            return Opaque(a, rp, inner), rp + 1
        if w in BUILTIN_TYPES or (k == "id" and self.is_type_name(w) and self.t(a + 1) != "::") or w == "typename":
            end = self.try_type(a)
            if end is not None and self.t(end) in ("(", "{"):
                # A functional cast / construction: T(args), T{args}.
                if self.t(end) == "(":
                    rp = self.close(end)
                    return Cast(a, rp, (a, end - 1), self.args(end + 1, rp)), rp + 1
                rb = self.close(end)
                return Cast(a, rb, (a, end - 1), self.init_list(end, rb + 1).items), rb + 1
        if k == "id" or w == "::":
            return self.name(a, b)
        raise Unsupported(a, f"unexpected '{w}'")

    def name(self, a: int, b: int, after: int | None = None):
        """The name starting at a; ``after``: where its parts start, past a qualifier such as
        ``decltype(x)::``."""
        j = a if after is None else after
        qualified = after is not None
        if self.t(j) == "::":
            j += 1
            qualified = True
        while True:
            if self.t(j) == "template":
                j += 1
            if self.t(j) == "operator":  # operator(), operator[], operator+ ...: named by `operator`
                k = j + 2 if self.t(j + 1) + self.t(j + 2) in ("()", "[]") else j + 1
                if self.kind(j + 1) != "punct" or self.t(j + 1) in ("(", "[") and k == j + 1:
                    raise Unsupported(j, "a conversion operator's name")
                return Name(a, k, j, qualified), k + 1
            if self.kind(j) != "id":
                raise Unsupported(j, "a name")
            last = j
            j += 1
            if self.t(j) == "<" and (self.t(last) in self.names.templates or self.t(last - 1) == "template"
                                     or self.is_type_name(self.t(last))):
                j = self.close_angle(j) + 1
            if self.t(j) == "::":
                qualified = True
                j += 1
                continue
            break
        end = j - 1
        # A qualified name that is a type followed by ( or { is a construction.
        if self.t(j) in ("(", "{") and qualified and self.is_type_name(self.t(last)):
            if self.t(j) == "(":
                rp = self.close(j)
                return Cast(a, rp, (a, end), self.args(j + 1, rp)), rp + 1
            rb = self.close(j)
            return Cast(a, rb, (a, end), self.init_list(j, rb + 1).items), rb + 1
        return Name(a, end, last, qualified), j
