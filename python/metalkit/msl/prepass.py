"""Token pre-pass: makes preprocessed MSL compile as C++ and finds its kernels.

Works on the output of ``clang -E`` so that kernels produced by macros (as in
real libraries) are seen. Only lines that came from the user's files are
touched; metalkit's own headers pass through. Rewrites keep every other token
in its column, so clang's diagnostics still point at the user's source:

- MSL attributes ``[[buffer(0)]]``, ``[[thread_position_in_grid]]`` ... are
  recorded and blanked; standard C++ attributes stay.
- ``device``/``thread``/``kernel`` are blanked, ``constant`` becomes ``const``;
  ``threadgroup`` storage declared in a function body becomes per-threadgroup
  storage (one OS thread runs a whole threadgroup, so ``thread_local`` is
  exactly per-group).
- ``template [[host_name("x")]] kernel ...;`` stays an explicit instantiation
  and also declares a pointer to the instantiation for the launcher.
- ``[[function_constant(i)]]`` declarations get the value bound at compile time.

Kernel signatures are read here, at token level; types are described by the
compiled module itself (see ``metalkit/launch.h``), so nothing else is needed
to reflect a kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .tokens import Token, parse_marker, tokenize_line

STD_ATTRS = {
    "maybe_unused", "likely", "unlikely", "fallthrough", "nodiscard", "noreturn",
    "deprecated", "carries_dependency", "no_unique_address", "assume",
}
BUILTINS = {
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "dispatch_threads_per_threadgroup", "threadgroups_per_grid",
    "threads_per_grid", "grid_size", "grid_origin", "thread_index_in_threadgroup",
    "thread_execution_width", "threads_per_simdgroup", "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup", "thread_index_in_quadgroup",
    "quadgroup_index_in_threadgroup", "quadgroups_per_threadgroup",
}
SPACES = {"device": 1, "constant": 2, "threadgroup": 3, "thread": 4}
# Functions that make the threads of a group depend on one another.
SYNC_FUNCTIONS = ("threadgroup_barrier", "simdgroup_", "simd_", "quad_", "make_filled_simdgroup_matrix")
UNSUPPORTED_PARAM_ATTRS = {"stage_in", "texture", "sampler", "payload", "imageblock_data",
                           "color", "raster_order_group", "indirect_buffer"}


class MslError(Exception):
    """A problem found in the source, with its location."""

    def __init__(self, file: str, line: int, col: int, msg: str):
        super().__init__(f"{file}:{line}:{col}: error: {msg}")
        self.file, self.line, self.col, self.msg = file, line, col, msg


@dataclass
class Attr:
    name: str
    args: str  # raw text inside the parentheses, "" if none


@dataclass
class Param:
    name: str
    decl: str
    space: int
    kind: str          # buffer | scalar | threadgroup | builtin
    index: int         # buffer/threadgroup index, -1 for builtins
    builtin: str = ""
    when: str = ""     # [[function_constant(when)]]: the parameter exists only if that constant is true
    present: bool = True  # False: `when` is false or unset here; the launcher passes a null/zero value


@dataclass
class Kernel:
    host_name: str
    pointer: str                 # C++ constant expression: a pointer to the function
    params: list[Param]
    file: str
    line: int
    max_threads: int = 1024
    needs_sync: str = ""       # first barrier/SIMD-group function it reaches, if any
    function: str = ""           # the C++ function (template) name


@dataclass
class Result:
    text: str
    kernels: list[Kernel]
    files: list[str] = field(default_factory=list)  # user files seen (dependencies)


@dataclass
class _FnDef:
    name: str
    params: list[Param]
    body: tuple[int, int]       # token range of the body
    is_kernel: bool
    is_template: bool
    attrs: list[Attr]
    scope: str
    tok: Token
    head: int = 0               # first token of the declaration


class _Source:
    """Tokens of the user's lines plus the edits to apply to them."""

    def __init__(self, text: str, is_user):
        self.lines = text.split("\n")
        self.loc: dict[int, tuple[str, int]] = {}
        self.toks: list[Token] = []
        self.files: list[str] = []
        self.edits: dict[int, list[tuple[int, int, str]]] = {}
        self.loop_hints: list[int] = []   # user lines holding #pragma unroll / clang loop
        cur_file, cur_line, user = "<unknown>", 1, False
        for i, line in enumerate(self.lines):
            if line.startswith("#"):
                m = parse_marker(line)
                if m:
                    cur_line, cur_file = m
                    user = is_user(cur_file)
                    if user and cur_file not in self.files:
                        self.files.append(cur_file)
                    continue
                if user and _LOOP_HINT.match(line):
                    self.loop_hints.append(i)
                cur_line += 1
                continue
            if user:
                self.loc[i] = (cur_file, cur_line)
                self.toks.extend(tokenize_line(line, i))
            cur_line += 1

    def where(self, tok: Token) -> tuple[str, int, int]:
        f, ln = self.loc.get(tok.line, ("<unknown>", 0))
        return f, ln, tok.col + 1

    def error(self, tok: Token, msg: str) -> MslError:
        return MslError(*self.where(tok), msg)

    def replace(self, first: int, last: int, text: str) -> None:
        """Replace tokens [first, last] by text, padded to keep later columns."""
        a, b = self.toks[first], self.toks[last]
        if a.line == b.line:
            width = b.col + len(b.text) - a.col
            self.edits.setdefault(a.line, []).append((a.col, a.col + width, text.ljust(width)))
            return
        for t in self.toks[first + 1:last + 1]:
            self.edits.setdefault(t.line, []).append((t.col, t.col + len(t.text), " " * len(t.text)))
        self.edits.setdefault(a.line, []).append((a.col, a.col + len(a.text), text.ljust(len(a.text))))

    def blank(self, first: int, last: int) -> None:
        self.replace(first, last, "")

    def render(self) -> str:
        lines = list(self.lines)
        for i, edits in self.edits.items():
            s = lines[i]
            for a, b, text in sorted(edits, reverse=True):
                s = s[:a] + text + s[b:]
            lines[i] = s
        return "\n".join(lines)


_LOOP_HINT = re.compile(r"#\s*pragma\s+(?:unroll|nounroll|clang\s+loop)\b")
_LOOP_HINT_WORDS = {"pragma", "unroll", "nounroll", "clang", "loop", "unroll_count", "vectorize", "vectorize_width",
                    "interleave", "interleave_count", "distribute", "pipeline", "pipeline_initiation_interval",
                    "full", "enable", "disable", "assume_safety", "scalable", "fixed"}


def _drop_unexpanded_loop_hints(src: "_Source") -> None:
    """Blank loop hints whose argument names a macro.

    ``clang -E`` prints ``#pragma unroll(MIN(a, b))`` without expanding its
    macros, and the preprocessed text no longer defines them; a name found
    nowhere else in that text is such a macro. The hint only tunes speed, so
    the loop keeps its meaning without it.
    """
    if not src.loop_hints:
        return
    known = set()
    for line in src.lines:
        if not line.startswith("#"):
            known.update(_IDENT.findall(line))
    for i in src.loop_hints:
        line = src.lines[i]
        names = set(_IDENT.findall(line)) - _LOOP_HINT_WORDS
        if names - known:
            src.edits.setdefault(i, []).append((0, len(line), ""))


_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")


def _match(toks: list[Token], i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    raise IndexError


def _match_angle(toks: list[Token], i: int) -> int:
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t in "([{":
            depth += 100
        elif t in ")]}":
            depth -= 100
        elif t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
        elif t == ">>":
            depth -= 2
        if depth <= 0 and t in (">", ">>"):
            return j
    raise IndexError


def _parse_attrs(toks: list[Token], a: int, b: int) -> list[Attr]:
    """Attributes in the block toks[a] == '[' ... toks[b] == ']'."""
    inner = toks[a + 2:b - 1]
    out, cur, depth = [], [], 0
    for t in inner + [Token(",", "punct", 0, 0)]:
        if t.text == "," and depth == 0:
            if cur:
                name = cur[0].text
                k = 1
                while k + 1 < len(cur) and cur[k].text == "::":
                    name += "::" + cur[k + 1].text
                    k += 2
                args = " ".join(x.text for x in cur[k + 1:-1]) if k < len(cur) and cur[k].text == "(" else ""
                out.append(Attr(name, args))
            cur = []
            continue
        depth += t.text in "([{"
        depth -= t.text in ")]}"
        cur.append(t)
    return out


def _int_arg(src: _Source, attr: Attr, tok: Token) -> int:
    try:
        return _const_int(attr.args)
    except ValueError:
        raise src.error(tok, f"[[{attr.name}({attr.args})]] needs an integer constant expression "
                             "(literals and arithmetic)") from None


# C operators by precedence (higher binds tighter), for attribute arguments such
# as [[function_constant(BASE + 1)]], which are macro-expanded before they reach us.
_BINARY = {
    "*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, "<=": 7, ">": 7, ">=": 7,
    "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1,
}


def _const_int(text: str) -> int:
    """Value of an integer constant expression made of literals (ValueError otherwise)."""
    toks = [t.text for t in tokenize_line(text, 0)]
    pos = 0

    def peek() -> str:
        return toks[pos] if pos < len(toks) else ""

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise ValueError(text)
        pos += 1
        return toks[pos - 1]

    def primary() -> int:
        t = take()
        if t == "(":
            v = expr(0)
            if take() != ")":
                raise ValueError(text)
            return v
        if t in ("-", "+", "~", "!"):
            v = primary()
            return {"-": -v, "+": v, "~": ~v, "!": int(not v)}[t]
        if t in ("true", "false"):
            return int(t == "true")
        lit = t.replace("'", "").rstrip("uUlL")
        if re.fullmatch(r"0[0-7]+", lit):
            return int(lit, 8)
        return int(lit, 0)  # decimal, 0x.., 0b..; anything else raises ValueError

    def binary(op: str, a: int, b: int) -> int:
        if op in ("/", "%"):
            if b == 0:
                raise ValueError(text)
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C truncates toward zero
            return q if op == "/" else a - q * b
        return int({"*": lambda: a * b, "+": lambda: a + b, "-": lambda: a - b, "<<": lambda: a << b,
                    ">>": lambda: a >> b, "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b,
                    ">=": lambda: a >= b, "==": lambda: a == b, "!=": lambda: a != b, "&": lambda: a & b,
                    "^": lambda: a ^ b, "|": lambda: a | b, "&&": lambda: bool(a and b),
                    "||": lambda: bool(a or b)}[op]())

    def expr(min_prec: int) -> int:
        v = primary()
        while True:
            op = peek()
            if op == "?" and min_prec == 0:
                take()
                a = expr(0)
                if take() != ":":
                    raise ValueError(text)
                b = expr(0)
                v = a if v else b
                continue
            prec = _BINARY.get(op)
            if prec is None or prec <= min_prec:
                return v
            take()
            v = binary(op, v, expr(prec))

    value = expr(0)
    if pos != len(toks):
        raise ValueError(text)
    return value


def _literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}ll" if value < 2**63 else f"{value}ull"
    if isinstance(value, float):
        return value.hex() if value == value and abs(value) != float("inf") else (
            "__builtin_nanf(\"\")" if value != value else ("__builtin_inff()" if value > 0 else "-__builtin_inff()"))
    raise TypeError(f"function constant values must be bool, int or float, not {type(value).__name__}")


def prepass(text: str, is_user, constants: dict | None = None, only=None, duplicates: str = "error") -> Result:
    """Pre-passed text and its kernels.

    ``duplicates="drop"``: kernels sharing a host name are left out instead of
    being an error (text read without preprocessing holds both branches of an ``#if``).

    ``only``: host names of the kernels to build (None: all). The other template
    instantiations are dropped and other kernel functions become ``inline``, so
    the compiler emits no code for them: a large library builds one kernel fast.
    """
    src = _Source(text, is_user)
    _drop_unexpanded_loop_hints(src)
    toks = src.toks
    n = len(toks)
    constants = dict(constants or {})
    used_constants: set = set()

    # 1. Attribute blocks.
    attr_at: dict[int, tuple[int, list[Attr]]] = {}
    i = 0
    while i < n - 1:
        if toks[i].text == "[" and toks[i + 1].text == "[":
            try:
                j = _match(toks, i, "[", "]")
            except IndexError:
                raise src.error(toks[i], "unterminated attribute") from None
            attrs = _parse_attrs(toks, i, j)
            if not all(a.name in STD_ATTRS or "::" in a.name for a in attrs):
                attr_at[i] = (j, attrs)
            i = j + 1
            continue
        i += 1

    attr_end = {e: s for s, (e, _) in attr_at.items()}
    consumed: set[int] = set()

    def skip_attrs(k: int) -> int:
        while k in attr_at:
            k = attr_at[k][0] + 1
        return k

    def attrs_between(a: int, b: int) -> list[Attr]:
        return [x for k, (_, al) in attr_at.items() if a <= k < b for x in al]

    # 2. Scopes (namespaces) and function definitions at namespace scope.
    fndefs: list[_FnDef] = []
    instantiations: list[tuple[int, int]] = []
    kernel_marks = {i for i, t in enumerate(toks) if t.text == "kernel" and t.kind == "id"}
    kernel_marks |= {k for k, (_, al) in attr_at.items() if any(a.name == "kernel" for a in al)}
    for k in kernel_marks:
        t = toks[k]
        if t.text in ("vertex", "fragment"):
            raise src.error(t, "vertex and fragment functions cannot run on the CPU backend")
    for i, t in enumerate(toks):
        if t.text in ("vertex", "fragment") and t.kind == "id" and i + 1 < n and toks[i + 1].kind == "id":
            raise src.error(t, f"{t.text} functions cannot run on metalkit's CPU backend; only kernel functions can")

    scope: list[str] = []      # namespace names ("" for other braces)
    stmt_start = 0
    i = 0
    while i < n:
        t = toks[i]
        if i in attr_at:
            i = attr_at[i][0] + 1
            continue
        if t.text == "namespace":
            j = i + 1
            names = []
            while j < n and toks[j].text not in ("{", ";", "="):
                if toks[j].kind == "id":
                    names.append(toks[j].text)
                j += 1
            if j < n and toks[j].text == "{":
                scope.append("::".join(names) or "<anon>")
                i = j + 1
                stmt_start = i
                continue
        if t.text == "template" and i + 1 < n and skip_attrs(i + 1) < n and toks[skip_attrs(i + 1)].text != "<":
            j = i
            while j < n and toks[j].text != ";":
                j += 1
            instantiations.append((i, j))
            i = j + 1
            stmt_start = i
            continue
        if t.text == "(" and all(s != "" for s in scope):
            # A function definition at namespace or class scope: name ( params ) ... {
            # (methods count for the barrier/SIMD call graph, by name)
            try:
                close = _match(toks, i, "(", ")")
            except IndexError:
                raise src.error(t, "unbalanced parentheses") from None
            k = skip_attrs(close + 1)
            while k < n and toks[k].text in ("const", "noexcept", "override", "->", "thread", "device", "constant",
                                             "threadgroup") or (
                    k < n and toks[k].kind == "id" and toks[k - 1].text == "->"):
                k = skip_attrs(k + 1)
            prev = i - 1
            while prev in attr_end:
                prev = attr_end[prev] - 1
            if k < n and toks[k].text == "{" and prev >= stmt_start and toks[prev].kind == "id":
                body_end = _match(toks, k, "{", "}")
                head = range(stmt_start, i)
                is_kernel = any(h in kernel_marks for h in head)
                if is_kernel and not any(toks[h].text == "void" for h in head):
                    raise src.error(toks[prev], f"kernel function '{toks[prev].text}' must return void")
                is_template = toks[stmt_start].text == "template"
                params = _parse_params(src, i, close, attr_at) if is_kernel else []
                fndefs.append(_FnDef(toks[prev].text, params, (k, body_end), is_kernel, is_template,
                                     attrs_between(stmt_start, i),
                                     "::".join(s for s in scope if not s.startswith("<")),
                                     toks[prev], stmt_start))
                _rewrite_threadgroup_storage(src, k, body_end)
                i = body_end + 1
                stmt_start = i
                continue
            i = close + 1
            continue
        if t.text == "{":
            # A class body holds methods (scanned like functions); other braces hold statements.
            head = {x.text for x in toks[stmt_start:i]}
            scope.append("<class>" if head & {"struct", "class", "union"} and "enum" not in head
                         and "=" not in head else "")
        elif t.text == "}":
            if scope:
                scope.pop()
            stmt_start = i + 1
        elif t.text == ";":
            stmt_start = i + 1
        i += 1

    # 3. Function constants.
    defined_checks: dict[str, list[int]] = {}  # name -> token index of each is_function_constant_defined(name)
    for j in range(n - 3):
        if (toks[j].text == "is_function_constant_defined" and toks[j + 1].text == "("
                and toks[j + 3].text == ")"):
            defined_checks.setdefault(toks[j + 2].text, []).append(j)
    fc_values: dict[str, object] = {}  # function constant -> its value here (None: not set)
    for k, (end, attrs) in list(attr_at.items()):
        fc = [a for a in attrs if a.name == "function_constant"]
        if not fc or (end + 1 < n and toks[end + 1].text in (",", ")")):
            continue  # [[function_constant(name)]] on a kernel parameter: read with the parameters
        consumed.add(k)
        try:
            idx = _const_int(fc[0].args)
        except ValueError:
            idx = None  # e.g. a constexpr variable: the constant can still be bound by name
        name_tok = toks[k - 1]
        semi = end + 1
        if semi >= n or toks[semi].text != ";" or name_tok.kind != "id":
            raise src.error(toks[k], "a function constant is declared as `constant T name [[function_constant(i)]];`")
        # Given by name and by index (a library's value and a per-kernel override):
        # the later entry wins.
        keys = [c for c in constants
                if c == name_tok.text or (idx is not None and c == idx and not isinstance(c, bool))]
        key = keys[-1] if keys else None
        if key is not None:
            used_constants.update(keys)
            src.replace(k, end, f"= {_literal(constants[key])}")
        else:
            src.replace(k, end, "{}")
        defined = key is not None
        fc_values[name_tok.text] = constants[key] if defined else None
        for j in defined_checks.get(name_tok.text, ()):
            src.replace(j, j + 3, "true" if defined else "false")
    unknown = [k for k in constants if k not in used_constants]
    if unknown:
        raise MslError("<constants>", 0, 0, f"no function constant named or numbered {unknown[0]!r} in the source; "
                       "declare it as `constant T name [[function_constant(i)]];` or drop it from constants=")

    # A parameter declared [[function_constant(c)]] exists only when c is true.
    for f in fndefs:
        for p in f.params:
            if p.when:
                p.present = _param_present(src, f, p, fc_values)

    # 4. Kernels: plain definitions and host_name instantiations of templates.
    kernels: list[Kernel] = []
    by_name = {}
    for f in fndefs:
        by_name.setdefault(f.name, f)
    dropped: set[int] = set()  # tokens of kernels left out by `only`, already rewritten
    for f in fndefs:
        if f.is_kernel and not f.is_template:
            host = next((_host_name(a) for a in f.attrs if a.name == "host_name"), f.name)
            qual = f"::{f.scope}::{f.name}" if f.scope else f"::{f.name}"
            kernels.append(Kernel(host, "&" + qual, f.params, *src.where(f.tok)[:2], _max_threads(src, f),
                                  function=f.name))
            if only is not None and host not in only:
                for h in range(f.head, f.body[0]):
                    if toks[h].text == "kernel" and toks[h].kind == "id":
                        src.replace(h, h, "inline")  # no launcher refers to it: not emitted
                        dropped.add(h)
    for a, b in instantiations:
        if not any(k in kernel_marks for k in range(a, b)) and not any(
                x.name == "host_name" for k, (_, al) in attr_at.items() if a <= k < b for x in al):
            continue  # an explicit instantiation of a helper function or class
        kernel, decl = _instantiation(src, a, b, attr_at, kernel_marks, by_name, fndefs, len(kernels))
        kernels.append(kernel)
        if only is not None and kernel.host_name not in only:
            src.blank(a, b)  # no explicit instantiation: no code for it
            dropped.update(range(a, b + 1))
            consumed.update(k for k in attr_at if a <= k <= b)
        else:
            src.edits.setdefault(decl[0], []).append(decl[1])
    names: dict[str, Kernel] = {}
    twice: set[str] = set()
    for k in kernels:
        if k.host_name in names:
            if duplicates != "drop":
                raise MslError(k.file, k.line, 1, f"two kernels are named {k.host_name!r}; give each a distinct name")
            twice.add(k.host_name)
        names[k.host_name] = k
    kernels = [k for k in kernels if k.host_name not in twice]
    _mark_sync(kernels, fndefs, by_name, toks)
    if only is not None:
        kernels = [k for k in kernels if k.host_name in only]

    dropped.update(_drop_address_space_overloads(src))

    # 5. Keywords, last, so they never hide a kernel or an attribute from the scans above.
    for k, (end, _) in attr_at.items():
        if k not in consumed:
            src.blank(k, end)
    for i, t in enumerate(toks):
        if i in dropped:
            continue
        if t.kind == "num":
            _float_literal(src, t)
            continue
        if t.kind != "id":
            continue
        if t.text in ("device", "thread", "kernel"):
            src.blank(i, i)
        elif t.text == "constant":
            src.replace(i, i, "const")
        elif t.text == "threadgroup" and not any(a == t.col for a, _, _ in src.edits.get(t.line, [])):
            src.blank(i, i)
    return Result(src.render(), kernels, src.files)


_UNSUFFIXED_FLOAT = re.compile(r"(?:[0-9]*\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0[xX][0-9a-fA-F.]*[pP][+-]?[0-9]+)")


def _float_literal(src: _Source, t: Token) -> None:
    """MSL has no double: an unsuffixed floating literal is a float."""
    if not _UNSUFFIXED_FLOAT.fullmatch(t.text.replace("'", "")):
        return
    line = src.lines[t.line]
    end = t.col + len(t.text)
    # Take the space after the literal if there is one, so later columns stay put.
    width = len(t.text) + (1 if end < len(line) and line[end] == " " else 0)
    src.edits.setdefault(t.line, []).append((t.col, t.col + width, t.text + "f"))


def _rewrite_threadgroup_storage(src: _Source, a: int, b: int) -> None:
    """`threadgroup T x[N];` in a function body: per-threadgroup storage.

    Metal refuses a kernel whose threadgroup declarations pass 32 KiB; so does
    a static_assert after each one, on the running total of those declared at
    the body's top level (template kernels are checked per instantiation).
    """
    toks = src.toks
    total = ""          # C++ expression: bytes declared so far at the top level
    serial = 0
    depth_at = 0        # brace depth within the body
    for i in range(a, b):
        t = toks[i].text
        depth_at += (t == "{") - (t == "}")
        if t != "threadgroup" or toks[i - 1].text not in ("{", ";", "}", ":"):
            continue
        j = i + 1
        depth = 0
        pointer = False
        while j < b and not (depth == 0 and toks[j].text in (";", "=", "[", ",")):
            depth += toks[j].text in "(<"
            depth -= toks[j].text in ")>"
            pointer |= depth == 0 and toks[j].text in ("*", "&", "&&")
            j += 1
        if pointer:
            continue
        m, depth, names = j, 0, [toks[j - 1].text]
        while m < b and not (depth == 0 and toks[m].text == ";"):
            if depth == 0 and toks[m].text in ("=", "{"):
                raise src.error(toks[m], "a threadgroup variable cannot have an initializer; assign it in the "
                                         "kernel (then threadgroup_barrier) instead")
            if depth == 0 and toks[m].text == "," and m + 1 < b and toks[m + 1].kind == "id":
                names.append(toks[m + 1].text)
            depth += toks[m].text in "([{"
            depth -= toks[m].text in ")]}"
            m += 1
        src.replace(i, i, "static thread_local")
        size = " + ".join(f"sizeof({name})" for name in names)
        check = ('static_assert({} <= 32768, "threadgroup memory declared in this kernel passes the 32 KiB '
                 'Metal allows per threadgroup; use smaller tiles");')
        if depth_at == 1:  # the body's top level: keep a running total
            serial += 1
            var = f"__mk_tg_bytes_{serial}"
            total = f"{total} + {size}" if total else size
            insert = f" constexpr unsigned long long {var} = {total}; {check.format(var)}"
            total = var
        else:
            insert = " " + check.format(size)
        end = toks[m]
        src.edits.setdefault(end.line, []).append((end.col + 1, end.col + 1, insert))


def _parse_params(src: _Source, open_: int, close: int, attr_at) -> list[Param]:
    toks = src.toks
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
        ids = [w for w in words if w.kind == "id" and w.text not in ("const", "volatile", "restrict", "__restrict")]
        if len(ids) < 2:
            raise src.error(words[0] if words else toks[open_], "every kernel parameter needs a name")
        name = ids[-1].text
        decl = " ".join(w.text for w in words).replace(" *", "*").replace(" &", "&")
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
            idx = _int_arg(src, tg[0], ids[-1]) if tg else 0
            params.append(Param(name, decl, space, "threadgroup", idx, when=when))
            continue
        buf = [a for a in attrs if a.name == "buffer"]
        idx = _int_arg(src, buf[0], ids[-1]) if buf else next_buffer
        next_buffer = idx + 1
        if pointer or (ref and space == SPACES["device"]):
            kind = "buffer"
        else:
            kind = "scalar"
        params.append(Param(name, decl, space, kind, idx, when=when))
    seen = {}
    for p in params:
        if p.kind in ("buffer", "scalar") and not p.when:
            if p.index in seen:
                raise src.error(toks[open_], f"parameters '{seen[p.index]}' and '{p.name}' both use [[buffer({p.index})]]")
            seen[p.index] = p.name
    return params


_ACCESS = ("public", "private", "protected")


def _drop_address_space_overloads(src: _Source) -> set[int]:
    """Functions overloaded only on address spaces (``f() thread`` / ``f() device``, ``g(thread T&)`` /
    ``g(device T&)``).

    MSL may declare one such function per address space; on the CPU there is one
    address space, so once the keywords are blanked they would redeclare each other.
    Per scope and signature the one naming no address space but ``thread`` is kept
    (else the first) and the others are blanked. Returns the blanked tokens.
    """
    toks = src.toks
    n = len(toks)
    encl, stack = [-1] * n, []
    for i, t in enumerate(toks):
        if t.text == "}" and stack:
            stack.pop()
        encl[i] = stack[-1] if stack else -1
        if t.text == "{":
            stack.append(i)
    groups: dict[tuple, list[tuple[bool, int, int]]] = {}
    fixed: set[int] = set()
    i = 0
    while i < n:
        if toks[i].text in ("struct", "class", "union") and i + 2 < n and toks[i + 2].text == "<":
            # A partial specialization per address space: template <class T> struct S<device T*> {...};
            try:
                close = _match_angle(toks, i + 2)
            except IndexError:
                close = n
            body = close + 1
            while body < n and toks[body].text not in ("{", ";"):
                body += 1
            spaces = [t.text for t in toks[i + 2:close] if t.kind == "id" and t.text in ("thread", "threadgroup",
                                                                                         "device")]
            if body < n and toks[body].text == "{" and spaces:
                start = i
                while start > 0 and encl[start - 1] == encl[i] and toks[start - 1].text not in (";", "{", "}"):
                    start -= 1
                key = (encl[i], " ".join(t.text for t in toks[start:body]
                                         if not (t.kind == "id" and t.text in ("thread", "threadgroup", "device"))))
                groups.setdefault(key, []).append((all(sp == "thread" for sp in spaces), start,
                                                   _match(toks, body, "{", "}")))
            i += 1
            continue
        if toks[i].text != ")":
            i += 1
            continue
        e = i + 1  # past trailing qualifiers to the body, a constructor's initializers, or `;`
        while e < n and (toks[e].text in _TRAILING or toks[e].text in SPACES):
            e += 1
        if e >= n or toks[e].text not in ("{", ":", ";"):
            i += 1
            continue
        k, depth = i, 0
        while k > 0:  # the matching "("
            depth += (toks[k].text == ")") - (toks[k].text == "(")
            if depth == 0:
                break
            k -= 1
        if k == 0 or toks[k - 1].text in _NOT_A_FUNCTION or not (
                toks[k - 1].kind == "id" or toks[k - 2].text == "operator" or toks[k - 1].text == ">"):
            i += 1
            continue
        start = k
        while start > 0 and encl[start - 1] == encl[i] and toks[start - 1].text not in (";", "{", "}") and not (
                toks[start - 1].text == ":" and toks[start - 2].text in _ACCESS):
            start -= 1
        body = e
        while body < n and toks[body].text not in ("{", ";"):
            body = _match(toks, body, "(", ")") + 1 if toks[body].text == "(" else body + 1
        if body >= n:
            break
        end = _match(toks, body, "{", "}") if toks[body].text == "{" else body
        head = toks[start:e]
        for j in range(i + 1, e):  # `constant` after a constructor or a `const`: C++ has no word for it
            if toks[j].text == "constant" and (toks[j - 1].text == "const" or toks[j + 1].text == "const"
                                               or toks[k - 1].text == _class_name(toks, encl[i])):
                src.blank(j, j)
                fixed.add(j)
        spaces = [t.text for t in head if t.kind == "id" and t.text in SPACES]
        if spaces:
            # `f() constant` (this in constant memory) is an overload like `f() device`.
            words = [("const" if t.text == "constant" else t.text) for j, t in enumerate(head, start)
                     if not (t.kind == "id" and (t.text in ("thread", "threadgroup", "device") or
                                                 (t.text == "constant" and j > i)))]
            key = (encl[i], " ".join(w for j, w in enumerate(words) if not (w == "const" and j and words[j - 1] == w)))
            groups.setdefault(key, []).append((all(sp == "thread" for sp in spaces), start, end))
        i = end + 1
    dropped: set[int] = set()
    for variants in groups.values():
        if len(variants) < 2:
            continue
        keep = next((v for v in variants if v[0]), variants[0])
        for v in variants:
            if v is not keep:
                src.blank(v[1], v[2])
                dropped.update(range(v[1], v[2] + 1))
    return dropped | fixed


def _class_name(toks: list[Token], brace: int) -> str:
    """Name of the class whose body opens at toks[brace] ("" if it is not a class)."""
    k = brace - 1
    while k >= 0 and brace - k < 64 and toks[k].text not in (";", "{", "}"):
        if toks[k].text in ("struct", "class", "union") and toks[k + 1].kind == "id":
            return toks[k + 1].text
        k -= 1
    return ""


_TRAILING = {"const", "volatile", "&", "&&", "noexcept", "override", "final"}
_NOT_A_FUNCTION = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "catch", "static_assert",
                   "alignas", "__attribute__", "noexcept"}


def _param_present(src: _Source, f: _FnDef, p: Param, fc_values: dict) -> bool:
    """Value of the condition in a parameter's [[function_constant(...)]] (an unset constant is false)."""
    text = " ".join("1" if t.text in fc_values and fc_values[t.text] else "0" if t.text in fc_values else t.text
                    for t in tokenize_line(p.when, 0))
    try:
        present = bool(_const_int(text))
    except ValueError:
        raise src.error(f.tok, f"[[function_constant({p.when})]] on parameter '{p.name}' must name a "
                               "function constant declared as `constant bool c [[function_constant(i)]];`") from None
    if present and p.kind in ("buffer", "scalar"):
        for q in f.params:
            if q is not p and q.present and q.kind in ("buffer", "scalar") and q.index == p.index and (
                    not q.when or f.params.index(q) < f.params.index(p)):
                raise src.error(f.tok, f"parameters '{q.name}' and '{p.name}' both use [[buffer({p.index})]]")
    return present


def _max_threads(src: _Source, f: _FnDef) -> int:
    for a in f.attrs:
        if a.name == "max_total_threads_per_threadgroup":
            if f.is_template:
                try:  # WM * WN * 32: a value per instantiation, which the pre-pass does not compute
                    return _const_int(a.args)
                except ValueError:
                    return 1024
            return _int_arg(src, a, f.tok)
    return 1024


def _instantiation(src: _Source, a: int, b: int, attr_at, kernel_marks, by_name, fndefs, serial):
    """`template [[host_name("x")]] kernel DECL;` -> a Kernel, and the edit declaring its pointer."""
    toks = src.toks
    attrs = [x for k, (_, al) in attr_at.items() if a <= k < b for x in al]
    host = next((_host_name(x) for x in attrs if x.name == "host_name"), None)
    # The declarator-id: the last name at paren depth 0 followed by <...>, ( or ;.
    name_i, targs_end, depth = None, None, 0
    k = a + 1
    while k < b:
        if k in attr_at:
            k = attr_at[k][0] + 1
            continue
        t = toks[k]
        if t.text in ("decltype", "sizeof", "alignof", "noexcept") and k + 1 < b and toks[k + 1].text == "(":
            k = _match(toks, k + 1, "(", ")") + 1
            continue
        if t.text == "(":
            if depth == 0 and name_i is not None and targs_end == k - 1:
                break
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif depth == 0 and t.kind == "id" and t.text not in ("kernel", "device", "constant", "thread", "threadgroup"):
            nxt = k + 1
            if nxt < b and toks[nxt].text == "<":
                try:
                    nxt = _match_angle(toks, nxt) + 1
                except IndexError:
                    nxt = b
            if nxt == b or toks[nxt].text == "(":
                name_i, targs_end = k, nxt - 1
                if nxt == b:
                    break
                k = nxt
                continue
        k += 1
    if name_i is None:
        raise src.error(toks[a], "cannot read this template instantiation; write it as "
                                 "`template [[host_name(\"name\")]] kernel void f<T>(params...);`")
    fname = toks[name_i].text
    if host is None:
        host = fname
    tmpl = by_name.get(fname)
    if tmpl is None or not tmpl.is_kernel:
        raise src.error(toks[name_i], f"'{fname}' is instantiated as a kernel but no kernel template of that name "
                                      "is defined before it")
    ref = "&" + " ".join(t.text for t in toks[name_i:targs_end + 1])
    ptr = f"__mk_fp_{serial}"
    words = []
    k = a + 1
    while k < b:
        if k in attr_at:
            k = attr_at[k][0] + 1
            continue
        t = toks[k].text
        if k == name_i:
            words.append(f"(*{ptr})")
            k = targs_end + 1
            continue
        if t not in ("kernel",):
            words.append("const" if t == "constant" else "" if t in ("device", "thread", "threadgroup") else t)
        k += 1
    # Declared in place (same scope as the instantiation), on the same line.
    decl = f" static constexpr {' '.join(w for w in words if w)} = {ref};"
    last = toks[b]
    qual = f"::{tmpl.scope}::{ptr}" if tmpl.scope else f"::{ptr}"
    return (Kernel(host, qual, tmpl.params, *src.where(toks[name_i])[:2], _max_threads(src, tmpl), function=fname),
            (last.line, (last.col + 1, last.col + 1, decl)))


_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _host_name(attr: Attr) -> str:
    """The name in [[host_name("...")]]; adjacent literals ("a" "b", as macros make them) are joined."""
    parts = _STRING.findall(attr.args)
    if parts and _STRING.sub("", attr.args).strip() == "":
        return "".join(parts)
    return attr.args.strip('" ')


def _mark_sync(kernels: list[Kernel], fndefs: list[_FnDef], by_name, toks: list[Token]) -> None:
    """Which barrier or SIMD-group function each kernel reaches, through the functions it calls."""
    direct: dict[str, str] = {}
    calls: dict[str, set[str]] = {}
    for f in fndefs:
        a, b = f.body
        ids = [t.text for t in toks[a:b] if t.kind == "id"]
        direct[f.name] = direct.get(f.name) or next((x for x in ids if x.startswith(SYNC_FUNCTIONS)), "")
        calls.setdefault(f.name, set()).update(x for x in ids if x in by_name and x != f.name)

    memo: dict[str, str] = {}

    def reaches(name: str, stack: tuple = ()) -> str:
        if name in memo:
            return memo[name]
        if name in stack:
            return ""
        r = direct.get(name, "") or next((x for c in sorted(calls.get(name, ())) if (x := reaches(c, stack + (name,)))), "")
        memo[name] = r
        return r

    for k in kernels:
        k.needs_sync = reaches(k.function)
