"""Compiler output -> CompileError pointing at the user's own file, line and column.

Shared by both backends: clang's and Apple's Metal compiler print diagnostics
in the same ``file:line:col: error: message`` form, and both honour the
``#line`` markers metalkit writes, so the same parse serves both.

On the CPU backend clang compiles the pre-passed text, whose lines differ from
the user's (attributes blanked, ``threadgroup`` turned into ``static
thread_local``, checks appended). Every diagnostic clang quotes is therefore
re-quoted with the user's own line, its column carried over from the
pre-passed line, and the threadgroup-size check metalkit appends is reported as
what it is, at the declaration it concerns.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError
from .paths import INCLUDE_DIR

_HEADER = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<kind>(?:fatal )?error|warning|note|remark): "
                     r"(?P<msg>.*)$")
_QUOTE = re.compile(r"^(?P<gutter>\s*(?P<line>\d+) \| )(?P<text>.*)$")   # clang 16+: "   12 | text"
_MARKS = re.compile(r"^(?P<gutter>\s*\| )(?P<marks>.*)$")                 # "      |    ^~~~"
# The per-kernel threadgroup-size check prepass.py appends after a declaration.
_TG_LIMIT = re.compile(r"static assertion failed(?: due to requirement '.*?')?: "
                       r"threadgroup memory declared in this kernel passes the 32 KiB")
_TG_BYTES = re.compile(r"expression evaluates to '(\d+) <= 32768'")
_TG_KEYWORD = re.compile(r"\bthreadgroup\b")
LAUNCHERS = "<metalkit launchers>"


@dataclass
class _Diagnostic:
    file: str
    line: int
    col: int          # 1-based, in bytes of the line, as compilers count
    kind: str
    msg: str
    quoted: str | None = None   # the line as the compiler quoted it
    gutter: str = ""            # "   12 | " before it
    marks: str | None = None    # the caret line under it, as printed
    moved: bool = False         # the quoted text or column changed: the caret line is drawn again
    hidden: bool = False        # about code metalkit wrote, not the user's: not shown
    rest: tuple[str, ...] = ()  # lines after it that are not part of it (notes' context, summaries)


def compile_error(log: str, source: str, filename: str) -> CompileError:
    """The first error in ``log`` as a CompileError (the whole log, re-quoted, kept in ``.log``)."""
    log = log.strip()
    diags, preamble = _parse(log)
    _relocate(diags, source, filename)
    text = "\n".join(preamble + [line for d in diags for line in _render(d)])
    first = next((d for d in diags if d.kind.endswith("error")), None)
    if first is None:
        return CompileError(f"the compiler failed: {log or 'no output'}", filename=filename, log=log)
    msg = first.msg
    if first.file == LAUNCHERS:
        msg = f"a kernel signature the CPU backend cannot launch: {msg}"
    elif _in_stdlib(first.file):
        # The error is inside metalkit's headers (an instantiation the user's code asked for, a
        # conflict with the user's own declaration): point at the user's code that reached it.
        at = diags.index(first)
        reached = next((n for n in diags[at + 1:] if n.kind == "note" and not _in_stdlib(n.file)
                        and n.file != LAUNCHERS), None)
        if reached is not None:
            msg = f"{msg} (in metalkit's {Path(first.file).name}:{first.line}, reached from this line)"
            first = reached
    user = source_line(first.file, first.line, source, filename)
    return CompileError(msg, filename=first.file, lineno=first.line, offset=_char_col(user, first.col), text=user,
                        log=text)


def _in_stdlib(f: str) -> bool:
    """Whether a diagnostic's file is one of metalkit's own headers."""
    return f.startswith(INCLUDE_DIR)


def source_line(f: str, line: int, source: str, filename: str) -> str | None:
    """Text of line ``line`` of file ``f`` (``source`` if it is the compiled text itself)."""
    try:
        text = source if f == filename else Path(f).read_text()
        return text.splitlines()[line - 1]
    except (OSError, IndexError, ValueError):
        return None


def _parse(log: str) -> tuple[list[_Diagnostic], list[str]]:
    preamble: list[str] = []
    diags: list[_Diagnostic] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        m = _HEADER.match(lines[i])
        i += 1
        if not m:
            if diags:
                diags[-1].rest += (lines[i - 1],)
            else:
                preamble.append(lines[i - 1])
            continue
        d = _Diagnostic(m["file"], int(m["line"]), int(m["col"]), m["kind"], m["msg"])
        q = _QUOTE.match(lines[i]) if i < len(lines) else None
        if q and int(q["line"]) == d.line:
            d.quoted, d.gutter = q["text"], q["gutter"]
            i += 1
            if i < len(lines) and _MARKS.match(lines[i]):
                d.marks = lines[i]
                i += 1
        diags.append(d)
    return diags, preamble


def _relocate(diags: list[_Diagnostic], source: str, filename: str) -> None:
    """Quote the user's lines, move columns onto them, and explain metalkit's own checks."""
    for i, d in enumerate(diags):
        user = source_line(d.file, d.line, source, filename)
        if user is None or d.quoted is None:
            continue
        col = d.col
        if not _same(d.quoted, user):
            d.col = _map_column(d.quoted, user, d.col)
        if _TG_LIMIT.search(d.msg):
            notes = []
            for n in diags[i + 1:]:
                if n.kind != "note":
                    break
                notes.append(n)
            _threadgroup_limit(d, notes, user)
        d.moved = d.quoted != user or d.col != col
        d.quoted = user


def _threadgroup_limit(d: _Diagnostic, notes: list[_Diagnostic], user: str) -> None:
    """The check failed at the code appended after a declaration: point at that declaration."""
    before = user.encode()[:max(d.col - 1, 0)].decode(errors="ignore")
    keywords = list(_TG_KEYWORD.finditer(before))
    if keywords:
        d.col = len(before[:keywords[-1].start()].encode()) + 1
    if d.marks is not None:
        d.marks = _MARKS.match(d.marks)["gutter"] + "^"  # clang's ~~~ spanned metalkit's check
    size = None
    for note in notes:
        m = _TG_BYTES.search(note.msg)
        if m:
            size = int(m[1])
            note.hidden = True  # its expression is metalkit's check
    amount = f"{size} bytes, more" if size is not None else "more"
    d.msg = (f"threadgroup memory declared in this kernel: {amount} than the 32 KiB (32768 bytes) Metal allows per "
             "threadgroup; declare smaller arrays, or pass the size at dispatch through a "
             "`threadgroup T* p [[threadgroup(n)]]` parameter and threadgroup_memory={n: nbytes}")


def _same(quoted: str, user: str) -> bool:
    # clang expands a tab to -ftabstop columns (1 for the CPU backend; Metal's compiler: 8).
    return quoted in (user, user.replace("\t", " "), user.expandtabs(8))


def _map_column(quoted: str, user: str, col: int) -> int:
    """Column ``col`` (bytes, 1-based) of the pre-passed line ``quoted`` on the user's line.

    The pre-pass keeps most columns (it blanks with spaces), so equal lengths map
    one to one; otherwise the two lines are aligned, and a column inside text
    the pre-pass added maps to where it was added.
    """
    a, b = quoted.encode(), user.replace("\t", " ").encode()
    if len(a) == len(b):
        return min(col, len(b) + 1)
    pos = col - 1
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i1 <= pos < i2:
            if tag == "delete":  # text only the pre-pass wrote
                return j1 + 1
            return j1 + min(pos - i1, j2 - j1 - 1) + 1
    return len(b) + 1


def _char_col(user: str | None, col: int) -> int:
    """A byte column as a character column (what Python's SyntaxError.offset counts)."""
    if user is None:
        return col
    return len(user.encode()[:col - 1].decode(errors="ignore")) + 1


def _render(d: _Diagnostic) -> list[str]:
    if d.hidden:
        return list(d.rest)
    lines = [f"{d.file}:{d.line}:{d.col}: {d.kind}: {d.msg}"]
    if d.quoted is not None:
        lines.append(d.gutter + d.quoted)
    if d.marks is not None and not d.moved:
        lines.append(d.marks)
    elif d.marks is not None:
        # Spaces under the text, tabs under tabs, so the caret lines up in a terminal;
        # clang's ^~~~ kept, cut at the end of the line.
        m = _MARKS.match(d.marks)
        lead = d.quoted.encode()[:d.col - 1].decode(errors="ignore")
        mark = m["marks"].strip()[:max(len(d.quoted) - len(lead), 1)]
        lines.append(m["gutter"] + "".join(c if c == "\t" else " " for c in lead) + mark)
    return lines + list(d.rest)
