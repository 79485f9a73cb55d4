"""Kernel signatures read from MSL source, for the Metal backend.

Metal's pipeline reflection names each binding and its element type but not
how the parameter is declared, so ``constant float& s`` (a scalar) and
``constant float* s`` (an array) reflect alike. The CPU front-end's token
pre-pass already reads signatures, so the Metal backend reads them with it
too and both backends sort parameters the same way. The pre-pass expects
preprocessed text: ``clang -E`` gives it where the CPU backend's compiler is
available; otherwise the source is read with comments removed and directives
blanked (line numbers kept), and kernels that only macros spell out are not
seen: they get no signature, and each of their ``[[buffer(n)]]`` parameters
then takes an array (a scalar can be passed as a 1-element array).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError
from . import toolchain
from .prepass import MslError, prepass
from .paths import INCLUDE_DIR
from .tokens import parse_marker

# host name -> (file, line, [(kind, index, name, decl, space, array length), ...],
# [(name, builtin, decl, vector width), ...]) for _core.metal_compile.
Signatures = dict[str, tuple[str, int, list[tuple[str, int, str, str, int, int]], list[tuple[str, str, str, int]]]]

# A builtin's declared type: an integer scalar or vector, as MSL spells them.
_INT = r"(?:metal\s*::\s*)?(?:u?int|u?short|unsigned(?:\s+(?:int|short))?|u?int(?:16|32)_t)"
_BUILTIN_TYPE = re.compile(rf"(?:const\s+)?(?:{_INT}([234])?|(?:metal\s*::\s*)?vec\s*<\s*{_INT}\s*,\s*([234])\s*>)")

_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def kernel_signatures(text: str) -> Signatures:
    """Signatures of the kernels ``text`` (inlined source, see includes.py) declares; {} if it cannot be read.

    Where the CPU backend's clang is available (a Mac with Xcode has clang++), the
    text is preprocessed first, so kernels that macros produce get signatures and
    ``#if`` branches are decided; otherwise it is read as it is.
    """
    try:
        pp = _clang_preprocessed(text)
        if pp is not None:
            kernels = prepass(pp, _user_file, duplicates="drop").kernels
        else:
            # Both branches of an #if are seen here: a name declared twice gets no signature.
            kernels = prepass(_as_preprocessed(text), lambda file: True, duplicates="drop").kernels
    except (MslError, IndexError):  # unreadable here (unbalanced braces...): Metal's compiler reports what is wrong
        return {}
    return {k.host_name: (k.file, k.line, [(p.kind, p.index, p.name, p.decl, p.space, p.array)
                                          for p in k.params if p.kind != "builtin"],
                          [(p.name, p.builtin, p.decl, builtin_width(p.decl, p.name))
                           for p in k.params if p.kind == "builtin"])
            for k in kernels}


def builtin_width(decl: str, name: str) -> int:
    """1, 2 or 3: the vector width of a builtin parameter declared ``decl``; 0 for a type
    this cannot read (a typedef): the CPU backend has the compiler's word for it, Metal
    reflection has none, and a grid is then never guessed from the arrays.

    >>> builtin_width("const uint2 gid", "gid"), builtin_width("metal :: vec < ushort , 3 > t", "t")
    (2, 3)
    """
    m = _BUILTIN_TYPE.fullmatch(decl[:len(decl) - len(name)].strip()) if decl.endswith(name) else None
    return 0 if m is None else int(m.group(1) or m.group(2) or 1)


def _user_file(name: str) -> bool:
    return name not in ("<built-in>", "<command line>", "<scratch space>") and not name.startswith(INCLUDE_DIR)


def _clang_preprocessed(text: str) -> str | None:
    """``clang -E`` of the text against metalkit's headers, or None (no clang, or a
    header only Apple has): the caller then reads the text unexpanded."""
    try:
        tc = toolchain.find()
    except CompileError:
        return None
    with tempfile.TemporaryDirectory(prefix="metalkit-sig-") as tmp:
        src = Path(tmp) / "source.metal"
        src.write_text(text)
        proc = subprocess.run(tc.preprocess(str(src), []), capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def _as_preprocessed(text: str) -> str:
    """Comments out, continued lines joined, directives other than line markers blanked; lines kept."""
    def blank(m: re.Match) -> str:
        s = m.group()
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    lines = _COMMENT_OR_LITERAL.sub(blank, text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line, extra = lines[i], 0
        while line.endswith("\\") and i + extra + 1 < len(lines):
            extra += 1
            line = line[:-1] + lines[i + extra]
        if line.lstrip().startswith("#") and not parse_marker(line):
            line = ""
        out.extend([line] + [""] * extra)
        i += extra + 1
    return "\n".join(out)
