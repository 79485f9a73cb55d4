"""Lockstep for kernels the SIMT transform leaves to per-thread fibers.

Before every statement of such a kernel's body the threads of a SIMD-group meet
(a SIMD rendezvous with no data, at the statement's source position). The
scheduler completes the rendezvous at the earliest source position first
("min-PC"), so lanes advance statement by statement together, lanes that left a
branch or a loop early wait where the others rejoin them, and no lane runs ahead
over a store the others have yet to read before. This works at token level: the
kernels that get here are the ones the statement parser could not read.

Within one statement lanes still run one after another, and helpers the kernel
calls run whole per lane.
"""
from __future__ import annotations

from ..model import FnDef, Unit

# Tokens after which a '{' opens a block of statements (not an initializer or a class body).
_BLOCK_AFTER = {")", "{", "}", ";", ":", "else", "do", "try"}
# Tokens before which no statement may be inserted.
_NO_STEP_BEFORE = {"else", "while", "catch", "}", ";"}


def insert(unit: Unit, f: FnDef) -> None:
    """Puts a SIMD-group rendezvous before each statement of kernel f's body."""
    toks, src = unit.toks, unit.src
    a, b = f.body
    blocks: list[bool] = []  # per open brace: a block of statements?
    paren = 0

    def step(i: int) -> None:
        nxt = i + 1
        if nxt >= b or toks[nxt].text in _NO_STEP_BEFORE:
            return
        file, line, col = src.where(toks[nxt])
        name = file.replace("\\", "\\\\").replace('"', '\\"')
        src.insert_after(i, f' ::metal::__mk::rt->simd_barrier("{name}", {line}, {col});')

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
