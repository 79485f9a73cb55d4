"""The text the front end works on: tokens of the user's lines and their rewrites.

Works on the output of ``clang -E``, so kernels produced by macros (as in real
libraries) are seen. Only lines that came from the user's files are tokenized;
metalkit's own headers pass through. Each pass rewrites tokens (``replace``,
``blank``, ``insert_after``); ``render`` puts every token back in its original
column where the rewritten text allows, so clang's diagnostics still point at
the user's source.
"""
from __future__ import annotations

import re

from .tokens import Token, parse_marker, tokenize_line


class MslError(Exception):
    """A problem found in the source, with its location."""

    def __init__(self, file: str, line: int, col: int, msg: str):
        super().__init__(f"{file}:{line}:{col}: error: {msg}")
        self.file, self.line, self.col, self.msg = file, line, col, msg


_LOOP_HINT = re.compile(r"#\s*pragma\s+(?:unroll|nounroll|clang\s+loop)\b")


class Source:
    """Tokens of the user's lines plus the rewrites to apply to them."""

    def __init__(self, text: str, is_user):
        self.lines = text.split("\n")
        self.loc: dict[int, tuple[str, int]] = {}
        self.toks: list[Token] = []
        self.files: list[str] = []
        self.loop_hints: list[int] = []   # user lines holding #pragma unroll / clang loop
        self.out: dict[int, str] = {}     # token index -> its rewritten text
        self.after: dict[int, list[str]] = {}  # token index -> text inserted right after it
        self.before: dict[int, str] = {}       # token index -> text inserted right before it
        self.line_out: dict[int, str] = {}  # whole lines replaced (preprocessor lines only)
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

    # ---- rewrites ----
    def replace(self, first: int, last: int, text: str) -> None:
        """Replace tokens [first, last] by text."""
        self.out[first] = text
        for k in range(first + 1, last + 1):
            self.out[k] = ""

    def blank(self, first: int, last: int) -> None:
        self.replace(first, last, "")

    def insert_after(self, i: int, text: str) -> None:
        self.after.setdefault(i, []).append(text)

    def insert_before(self, i: int, text: str) -> None:
        self.before[i] = text + " " + self.before.get(i, "")

    def is_rewritten(self, i: int) -> bool:
        return i in self.out

    def text_of(self, i: int) -> str:
        """Token i as rewritten so far (with what was inserted after it)."""
        t = self.out.get(i, self.toks[i].text)
        if i in self.before:
            t = self.before[i] + t
        return t + "".join(self.after[i]) if i in self.after else t

    def render(self, positions: dict[tuple[int, int], int] | None = None) -> str:
        """The rewritten text; ``positions``, if given, is filled with (line, column) -> token index
        of every token that has text in it (0-based, where the token's text starts)."""
        lines = list(self.lines)
        by_line: dict[int, list[int]] = {}
        for i in sorted(set(self.out) | set(self.after) | set(self.before)):
            by_line.setdefault(self.toks[i].line, []).append(i)
        first_on_line: dict[int, int] = {}
        for i, t in enumerate(self.toks):
            first_on_line.setdefault(t.line, i)
            if positions is not None and t.line not in by_line:
                positions[(t.line, t.col)] = i
        for ln in by_line:
            lines[ln] = self._render_line(ln, first_on_line[ln], positions)
        for ln, text in self.line_out.items():
            lines[ln] = text
        return "\n".join(lines)

    def _render_line(self, ln: int, first: int, positions: dict | None = None) -> str:
        """A line with its rewritten tokens, each at its original column where the text before it allows."""
        line = self.lines[ln]
        parts: list[str] = []
        cursor = 0
        i = first
        while i < len(self.toks) and self.toks[i].line == ln:
            t = self.toks[i]
            text = self.text_of(i)
            if text:
                if cursor < t.col:
                    gap = line[cursor:t.col]
                    parts.append(gap if gap.isspace() else " " * (t.col - cursor))
                    cursor = t.col
                elif cursor > t.col and parts and _glues(parts[-1], text):
                    parts.append(" ")
                    cursor += 1
                if positions is not None:  # where its text starts, after what was put before it
                    positions[(ln, cursor + len(self.before.get(i, "")))] = i
                parts.append(text)
                cursor += len(text)
            i += 1
        return "".join(parts)


_OPERATOR_CHARS = set("+-*/%<>=!&|^:.#")


def _glues(before: str, after: str) -> bool:
    """Whether ``after`` written right behind ``before`` would read as other tokens (``> =`` as ``>=``)."""
    if not before or not after:
        return False
    a, b = before[-1], after[0]
    word = lambda c: c.isalnum() or c == "_"
    return (word(a) and word(b)) or (a in _OPERATOR_CHARS and b in _OPERATOR_CHARS)


def match(toks: list[Token], i: int, open_: str, close: str, end: int | None = None) -> int:
    """Index of the bracket closing the one at toks[i], before ``end`` (IndexError if none)."""
    depth = 0
    for j in range(i, len(toks) if end is None else end):
        t = toks[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    raise IndexError


def match_angle(toks: list[Token], i: int) -> int:
    """Index of the '>' closing the template argument list opened at toks[i]."""
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
