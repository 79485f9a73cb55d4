"""``#include "..."`` spliced into the source, for Metal's compiler, which has no include path.

Metal compiles a single string (``newLibraryWithSource:``), so the user's own
headers are inlined before it sees the source, each between ``#line`` markers
that keep every diagnostic on the header's own file and line. ``<...>``
includes (``<metal_stdlib>``) are left to the compiler. A header is searched in
the including file's folder, then in ``include_dirs``. One that cannot be found
is left as it is, for the compiler to report at the right line (it may sit in
an ``#if 0`` branch the compiler skips). A header with ``#pragma once`` is
spliced once; a header already being spliced (an include cycle) is not spliced
again, which is what its include guard would do.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Optional

from .tokens import line_directive, parse_marker

_INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')
_PRAGMA_ONCE = re.compile(r"\s*#\s*pragma\s+once\b")
_DIAG_LOCATION = re.compile(r"^(?P<file>program_source):(?P<line>\d+):", re.M)


def inline_includes(source: str, filename: str, include_dirs: Iterable[str] = ()) -> str:
    """``source`` with its ``#include "..."`` files spliced in, between ``#line`` markers."""
    dirs = [os.fspath(d) for d in include_dirs]
    once: set[str] = set()
    out: list[str] = []

    def splice(text: str, name: str, stack: tuple[str, ...]) -> None:
        out.append(line_directive(1, name))
        here = os.path.dirname(os.path.abspath(name)) if os.path.isfile(name) else None
        in_comment = False
        for number, line in enumerate(text.split("\n"), 1):
            directive = not in_comment
            in_comment = _ends_in_comment(line, in_comment)
            if directive and _PRAGMA_ONCE.match(line):
                out.append("")  # spliced once already; keeps the line count
                continue
            m = _INCLUDE.match(line) if directive else None
            path = _find(m.group(1), here, dirs) if m else None
            if path is None:
                out.append(line)
                continue
            key = os.path.realpath(path)
            if key not in stack and key not in once:
                with open(path, encoding="utf-8") as f:
                    header = f.read()
                if any(_PRAGMA_ONCE.match(h) for h in header.split("\n")):
                    once.add(key)
                splice(header, path, stack + (key,))
            out.append(line_directive(number + 1, name))

    top = (os.path.realpath(filename),) if os.path.isfile(filename) else ()
    splice(source, filename, top)
    return "\n".join(out)


def locate(text: str, line: int) -> tuple[Optional[str], int]:
    """The file and line that line ``line`` of ``text`` came from, by its ``#line`` markers."""
    file, number = None, line
    for i, t in enumerate(text.split("\n")[: line - 1], 1):
        marker = parse_marker(t) if t.lstrip().startswith("#") else None
        if marker:
            number, file = marker[0] + (line - i - 1), marker[1]
    return file, number


def relocate_log(log: str, text: str, filename: str) -> str:
    """Metal's log with each ``program_source:LINE:`` (the compiled string) put back in its file."""
    def repl(m: re.Match) -> str:
        file, number = locate(text, int(m["line"]))
        return f"{file or filename}:{number}:"
    return _DIAG_LOCATION.sub(repl, log)


def _find(name: str, here: Optional[str], dirs: list[str]) -> Optional[str]:
    if os.path.isabs(name):
        return name if os.path.isfile(name) else None
    for d in ([here] if here else []) + dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None


def _ends_in_comment(line: str, inside: bool) -> bool:
    """Whether a /* comment is still open at the end of ``line``."""
    i, n = 0, len(line)
    while i < n:
        if inside:
            end = line.find("*/", i)
            if end < 0:
                return True
            inside, i = False, end + 2
        elif line[i] in "\"'":
            quote, i = line[i], i + 1
            while i < n and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
        elif line.startswith("//", i):
            return False
        elif line.startswith("/*", i):
            inside, i = True, i + 2
        else:
            i += 1
    return inside
