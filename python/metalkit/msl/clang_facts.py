"""Facts about the user's C++ from clang's own AST, not from tokens.

The pre-passed text (MSL made C++, before the SIMT pass) is parsed by clang
against the precompiled headers with ``-ast-dump=json``; only the user's part is
dumped, so a small kernel costs tens of milliseconds. From the dump:

- ``calls``: for every function definition, the user functions it may call:
  direct calls, methods and static members (through type aliases of class
  templates too), operators, functions named without a call (pointers, template
  arguments), and everything a lambda or local class defined in it calls.
  Template instantiations are dumped under their template, at the template's
  own source position, so what any instantiation calls is merged into the one
  definition the source has (a function reaches a barrier if any instantiation
  does). Calls into metalkit's headers are kept by name (``external``).
- ``var_refs``: for every variable declaration, where it is named: the uses of a
  function constant, resolved by scope (a parameter of the same name shadows it).
- ``sites``: what the function named at each position is, per instantiation
  merged: the definitions, or the names of functions in metalkit's headers.
- ``statements``: where each statement of a function body starts, and whether it
  is a declaration or an expression (``T::f(x);`` calls f even where T is a type).

Positions are (line, column) of the pre-passed text, both 0-based: the column
where the rendered text has the token (``Source.render(positions=...)``).
Not seen: constructors and destructors run implicitly.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from . import pch, toolchain, zig_direct

Pos = tuple[int, int]
FUNCTIONS = {"FunctionDecl", "CXXMethodDecl", "CXXConstructorDecl", "CXXDestructorDecl", "CXXConversionDecl"}
_BODIES = {"CompoundStmt", "CXXTryStmt"}


@dataclass
class Facts:
    calls: dict[Pos, set[Pos]] = field(default_factory=dict)     # definition -> definitions it may call
    external: dict[Pos, set[str]] = field(default_factory=dict)  # definition -> names called outside user code
    var_refs: dict[Pos, set[tuple]] = field(default_factory=dict)  # variable declaration -> where it is named (spans)
    statements: dict[Pos, str] = field(default_factory=dict)     # a statement's start -> "decl" or "expr"
    # A function named in code, as (start, end, name) of the expression naming it -> the
    # definitions it is, or names in metalkit's headers.
    sites: dict[tuple[Pos, Pos, str], set] = field(default_factory=dict)


def read(dump: dict, text: str, first_line: int) -> Facts:
    """Facts from clang's JSON ``dump`` of ``text`` (the file clang was given), whose line i is line
    ``first_line + i`` of the pre-passed text."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)

    def pos(loc: dict) -> Pos | None:
        loc = loc.get("spellingLoc", loc)
        off = loc.get("offset")  # in the one file clang was given, whatever its line markers say
        if off is None:
            return None
        ln = bisect.bisect_right(starts, off) - 1
        return first_line + ln, off - starts[ln]

    def span(node: dict, name: str) -> tuple | None:
        r = node.get("range", {})
        a, b = pos(r.get("begin", {})), pos(r.get("end", {}))
        return None if a is None or b is None else (a, b, name)

    decl_pos: dict[int, Pos] = {}          # function or variable declaration id -> position of its name
    previous: dict[int, int] = {}          # redeclaration id -> the declaration before it
    bodies: set[int] = set()               # ids of function declarations with a body
    edges: list[tuple[tuple[Pos, ...], dict, tuple | None]] = []  # (enclosing definitions, declaration, where)
    var_uses: list[tuple[int, tuple]] = []
    statements: dict[Pos, str] = {}
    stack: list[tuple[object, tuple[Pos, ...]]] = [(dump, ())]
    while stack:
        node, owners = stack.pop()
        if isinstance(node, list):
            stack.extend((n, owners) for n in reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("kind")
        if kind in FUNCTIONS or kind == "VarDecl":
            at = pos(node.get("loc", {}))
            nid = int(node["id"], 16)
            if at is not None:
                decl_pos[nid] = at
            if "previousDecl" in node:
                previous[nid] = int(node["previousDecl"], 16)
            if kind in FUNCTIONS and at is not None and any(
                    isinstance(c, dict) and c.get("kind") in _BODIES for c in node.get("inner", ())):
                bodies.add(nid)
                owners = owners + (at,)
        elif kind == "DeclRefExpr":
            ref = node.get("referencedDecl", {})
            if ref.get("kind") in FUNCTIONS:
                edges.append((owners, ref, span(node, ref.get("name", ""))))
            elif ref.get("kind") == "VarDecl":
                at = span(node, ref.get("name", ""))
                if at is not None:
                    var_uses.append((int(ref["id"], 16), at))
        elif kind == "MemberExpr" and "referencedMemberDecl" in node:
            edges.append((owners, {"id": node["referencedMemberDecl"], "name": node.get("name", "")},
                          span(node, node.get("name", ""))))
        elif kind == "CXXOperatorCallExpr":
            # `op(v)` with a callable object: the object names what is called.
            args = node.get("inner", [])
            callee, obj = (_unwrap(args[0]), _unwrap(args[1])) if len(args) > 1 else (None, None)
            ref = (callee or {}).get("referencedDecl", {})
            if ref.get("name") == "operator()" and obj is not None and obj.get("kind") == "DeclRefExpr":
                at = span(obj, obj.get("referencedDecl", {}).get("name", ""))
                if at is not None:
                    edges.append(((), ref, at))
        elif kind in _HOLDS_STATEMENTS:  # a block's statements, and the unbraced body of if, for ...
            for child in node.get("inner", ()):
                ck = child.get("kind", "")
                at = pos(child.get("range", {}).get("begin", {}))
                if at is not None and (ck == "DeclStmt" or not ck.endswith("Stmt")):
                    statements.setdefault(at, "decl" if ck == "DeclStmt" else "expr")
        inner = node.get("inner")
        if inner:
            stack.append((inner, owners))

    # Every declaration of a function stands for its definitions (a call may name a prototype).
    def root(i: int) -> int:
        seen = set()
        while i in previous and i not in seen:
            seen.add(i)
            i = previous[i]
        return i
    defs_of: dict[int, set[Pos]] = {}
    for i in bodies:
        defs_of.setdefault(root(i), set()).add(decl_pos[i])
    facts = Facts(statements=statements)
    for i in bodies:
        facts.calls.setdefault(decl_pos[i], set())
        facts.external.setdefault(decl_pos[i], set())
    for owners, ref, at in edges:
        targets = defs_of.get(root(int(ref["id"], 16)))
        outside = not targets and int(ref["id"], 16) not in decl_pos  # in metalkit's headers (the precompiled part)
        if at is not None:
            facts.sites.setdefault(at, set()).update(targets or ({ref.get("name", "")} if outside else ()))
        for owner in owners:
            if targets:
                facts.calls[owner] |= targets
            elif outside:
                facts.external[owner].add(ref.get("name", ""))
    for vid, at in var_uses:
        if vid in decl_pos:
            facts.var_refs.setdefault(decl_pos[root(vid)], set()).add(at)
    return facts


def _unwrap(node: dict) -> dict:
    """An expression without the implicit casts around it."""
    while node.get("kind") == "ImplicitCastExpr" and node.get("inner"):
        node = node["inner"][0]
    return node


def name_token(span: tuple, positions: dict[Pos, int], toks) -> int | None:
    """The token of the name in an expression's span (start, end, name): `A::f` starts at A,
    `f<T>` ends at '>'."""
    begin, end, name = span
    a, i = positions.get(begin), positions.get(end)
    if a is None or i is None:
        return None
    while i > a and toks[i].text != name:
        i -= 1
    return i if toks[i].text == name else None


# Nodes whose children include statements (an if's condition is among them, where no statement
# of the source starts).
_HOLDS_STATEMENTS = {"CompoundStmt", "IfStmt", "ForStmt", "WhileStmt", "DoStmt", "SwitchStmt", "CaseStmt",
                     "DefaultStmt"}


def gather(tc: toolchain.Toolchain, text: str, src_name: str, fast_math: bool, tmp: Path) -> Facts | None:
    """Facts of the pre-passed ``text`` (clang -E output of ``src_name``, rewritten), or None if
    clang cannot parse it against the precompiled headers (the build then reports why)."""
    parts = pch.split(text, src_name) if pch.ENABLED else None
    header = pch.header(tc, fast_math, parts[0]) if parts else None
    if header is None:
        return None
    source = tmp / "facts.cpp"
    source.write_text(parts[1])
    cmd, driver = _command(tc, header, source, fast_math)
    proc = toolchain.run(cmd)
    if not proc.stdout or (proc.returncode != 0 and not _complete_despite(proc.stderr, driver)):
        return None
    try:
        dump = json.loads(proc.stdout)
    except ValueError:
        return None
    # The user's part starts with a marker line standing for the line that returns from the headers.
    first = text[:pch.head(text, src_name)].count("\n")
    return read(dump, parts[1], first)


def _command(tc: toolchain.Toolchain, header: Path, source: Path, fast_math: bool) -> tuple[list[str], bool]:
    """clang's parse of ``source`` against ``header``, dumping the AST as JSON to stdout: the
    module's own ``-cc1`` line where zig_direct.py recorded one, else the driver's (and True)."""
    direct = zig_direct.commands(header, str(source), str(source.with_suffix(".o")), str(source.with_suffix(".so"))) \
        if tc.kind == "zig" else None
    if direct is not None:
        cmd = list(direct[0])
        at = cmd.index("-emit-obj")
        cmd[at:at + 1] = ["-fsyntax-only", "-ast-dump=json"]
        out = cmd.index("-o")
        del cmd[out:out + 2]
        return cmd, False
    cmd = tc.compile(str(source), str(source.with_suffix(".so")), fast_math, str(header))
    return cmd[:cmd.index("-shared")] + ["-fsyntax-only", "-Xclang", "-ast-dump=json", str(source)], True


def _complete_despite(stderr: str, driver: bool) -> bool:
    """Whether the AST is whole although clang failed: its only errors are failed static assertions
    (an instantiation too large for threadgroup memory, say: its own build reports it) or, from
    zig's driver, the move of the object -fsyntax-only never made."""
    errors = [line for line in stderr.splitlines() if "error:" in line]
    return bool(errors) and all("static assertion failed" in line or (driver and "failed to rename" in line)
                                for line in errors)

