"""Compiler output -> CompileError pointing at the user's own file and line.

Shared by both backends: clang's and Apple's Metal compiler print diagnostics
in the same ``file:line:col: error: message`` form, and both honour the
``#line`` markers metalkit writes, so the same parse serves both.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import CompileError

_DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?:fatal )?error: (?P<msg>.*)$", re.M)
LAUNCHERS = "<metalkit launchers>"


def compile_error(log: str, source: str, filename: str) -> CompileError:
    """The first error in ``log`` as a CompileError (the whole log kept in ``.log``)."""
    log = log.strip()
    m = _DIAG.search(log)
    if not m:
        return CompileError(f"the compiler failed: {log or 'no output'}", filename=filename, log=log)
    f, line, col, msg = m["file"], int(m["line"]), int(m["col"]), m["msg"]
    if f == LAUNCHERS:
        msg = f"a kernel signature the CPU backend cannot launch: {msg}"
    return CompileError(msg, filename=f, lineno=line, offset=col, text=source_line(f, line, source, filename), log=log)


def source_line(f: str, line: int, source: str, filename: str) -> str | None:
    """Text of line ``line`` of file ``f`` (``source`` if it is the compiled text itself)."""
    try:
        text = source if f == filename else Path(f).read_text()
        return text.splitlines()[line - 1]
    except (OSError, IndexError, ValueError):
        return None
