"""Integer constant expressions in attribute arguments, and C++ literals for constant values.

Attribute arguments such as ``[[function_constant(BASE + 1)]]`` or
``[[buffer(N * 2)]]`` are macro-expanded before they reach the front end, so
they are made of literals and operators only.
"""
from __future__ import annotations

import re

from .tokens import tokenize_line

# C operators by precedence (higher binds tighter), for attribute arguments such
# as [[function_constant(BASE + 1)]], which are macro-expanded before they reach us.
_BINARY = {
    "*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, "<=": 7, ">": 7, ">=": 7,
    "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1,
}


def const_int(text: str) -> int:
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


def cpp_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}ll" if value < 2**63 else f"{value}ull"
    if isinstance(value, float):
        return value.hex() if value == value and abs(value) != float("inf") else (
            "__builtin_nanf(\"\")" if value != value else ("__builtin_inff()" if value > 0 else "-__builtin_inff()"))
    raise TypeError(f"function constant values must be bool, int or float, not {type(value).__name__}")
