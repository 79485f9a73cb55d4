"""Lockstep for kernels the SIMT transform leaves to per-thread fibers.

The threads of a SIMD-group meet (a SIMD rendezvous with no data, tagged with a
source position) before every statement of such a kernel's body, and the
scheduler completes the rendezvous at the earliest position first ("min-PC"),
so lanes advance statement by statement together and no lane runs ahead over a
store the others have yet to read before. Two more meeting points keep that
order true where source order is not program order:

- a loop's condition meets at the loop's end (its closing '}' or ';'), so lanes
  that finish an iteration, or `continue`, wait for those still in it instead
  of starting the next one ahead of them;
- an `if` condition meets at its '(' when true and at its ')' when false, so the
  lanes of each side go on apart even where a side is a single statement
  calling the same helper as the other.

- an assignment `x = e;` (or a declaration with one) meets between e and the
  store, so every lane reads before any lane stores, as in `a[l + 1] = a[l]`.

This works at token level: the kernels that get here are the ones the statement
parser could not read. Other expressions run lane after lane, and helpers the
kernel calls run whole per lane.
"""
from __future__ import annotations

from ..model import FnDef, Unit
from ..tokens import c_escape
from . import scan

# Tokens after which a '{' opens a block of statements (not an initializer or a class body).
_BLOCK_AFTER = {")", "{", "}", ";", ":", "else", "do", "try"}
# Tokens before which no statement may be inserted.
_NO_STEP_BEFORE = {"else", "while", "catch", "}", ";"}


def insert(unit: Unit, f: FnDef) -> None:
    """Puts the SIMD-group meeting points into kernel f's body."""
    toks, src = unit.toks, unit.src
    a, b = f.body

    def at(tok: int) -> str:
        """The source position of tok as C++ arguments: file, line, column."""
        file, line, col = src.where(toks[tok])
        return f'"{c_escape(file)}", {line}, {col}'

    def meet(tok: int) -> str:
        return f"::metal::__mk::rt->simd_barrier({at(tok)})"

    def step(i: int) -> None:
        nxt = i + 1
        if nxt < b and toks[nxt].text not in _NO_STEP_BEFORE:
            src.insert_after(i, f" {meet(nxt)};")
            _assignment(unit, nxt, b, at)

    blocks: list[bool] = []  # per open brace: a block of statements?
    paren = 0
    for i in range(a, b + 1):
        w = toks[i].text
        if w in ("(", "["):
            paren += 1
        elif w in (")", "]"):
            paren -= 1
        elif w == "{":
            block = paren == 0 and (i == a or toks[i - 1].text in _BLOCK_AFTER)
            blocks.append(block)
            if block and i != b:
                step(i)
        elif w == "}":
            block = blocks.pop() if blocks else False
            if block and blocks and blocks[-1] and i != b:
                step(i)
        elif w == ";" and paren == 0 and blocks and blocks[-1]:
            step(i)
        elif w in ("if", "while", "for") and paren == 0 and toks[i + 1].text == "(":
            _condition(unit, i, b, meet, at)
        elif w == "else" and toks[i + 1].text not in ("{", "if"):
            _assignment(unit, i + 1, b, at)


_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
# Statements whose first word says they are not a plain assignment or declaration with one.
_NOT_PLAIN = {"if", "for", "while", "do", "switch", "case", "default", "return", "break", "continue", "goto",
              "else", "typedef", "using", "static_assert", "template", "static", "constexpr", "asm", "__asm__"}


def _assignment(unit: Unit, i: int, b: int, at) -> None:
    """`x = e;` (or `T x = e;`, `x += e;`) at statement i: the lanes meet after e, at the '='."""
    toks, src = unit.toks, unit.src
    if toks[i].text in _NOT_PLAIN or toks[i].kind != "id":
        return
    eq = None
    for j, x, depth in scan.levels(toks, i, b):
        if x in ("{", "}", "constexpr") or (x in (",", ":") and depth == 0):
            return  # a block, an initializer list, several declarators, a label
        if depth == 0 and x == ";":
            break
        if depth == 0 and eq is None and x in ("&", "&&"):
            return  # a reference declared: it binds, it does not copy
        if depth == 0 and x in _ASSIGN and eq is None:
            eq = j
    else:
        return
    if eq is None or eq + 1 >= j:
        return
    src.insert_before(eq + 1, "::metal::__mk::meet((")
    src.insert_after(j - 1, f"), {at(eq)})")


def _condition(unit: Unit, kw: int, b: int, meet, at) -> None:
    toks, src = unit.toks, unit.src
    lp = kw + 1
    rp = scan.close(toks, lp)
    parts, start = [], lp + 1
    for j in scan.top_level(toks, lp + 1, rp, (";", ":")):
        if toks[j].text == ":":
            return  # a range-based for
        parts.append((start, j - 1))
        start = j + 1
    parts.append((start, rp - 1))
    if toks[kw].text == "for":
        if len(parts) != 3:
            return
        cond = parts[1]
    elif len(parts) != 1:
        return  # an if or while with an init-statement
    else:
        cond = parts[0]
    c0, c1 = cond
    top = [toks[j].text for j in range(c0, c1 + 1)]
    if "=" in top or "{" in top:
        return  # a declaration: it must stay where it is
    if toks[rp + 1].text not in ("{", ";"):
        _assignment(unit, rp + 1, b, at)  # a body that is one statement
    if toks[kw].text == "if":
        src.insert_before(c0, "((")
        src.insert_after(c1, f") ? ({meet(lp)}, true) : ({meet(rp)}, false))")
        return
    # A loop's lanes meet at its end before each test of its condition.
    end = rp + 1
    if toks[end].text == "{":
        end = scan.close(toks, end)
    else:
        end = next(iter(scan.top_level(toks, end, b, (";",))), b)
    if c1 < c0:  # for (init; ; inc)
        src.insert_after(c1, f" ({meet(end)}, true)")
    else:
        src.insert_before(c0, f"({meet(end)}, (")
        src.insert_after(c1, "))")
