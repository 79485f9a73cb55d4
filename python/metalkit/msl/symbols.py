"""Where a faulting instruction of a compiled module is in the user's source.

Modules are built with line tables (``-gline-tables-only``): for every
instruction, the file and line it came from. The pre-pass keeps the user's file
names and line numbers (``#line`` markers), and metalkit's header functions are
``nodebug``, so their inlined code (an atomic, a SIMD-group function) counts as
the user's line that called them. An instruction of the launchers (a loop
kernel's frame set up before its first thread) has no user line. Read only
when a fault is reported, with pyelftools; ELF modules only (elsewhere no line
is given).
"""
from __future__ import annotations

import functools
import io
import mmap
import os

from .diagnostics import LAUNCHERS
from .paths import INCLUDE_DIR

_NOT_USER = (LAUNCHERS, "<built-in>", "<command line>", "<scratch space>")


def source_line(module: str, offset: int) -> str:
    """``"file.metal:12"`` for the instruction at ``offset`` from the start of ``module``'s
    mapping (as ``dladdr`` reports it), or ``""`` if no line of the user's is known.

    >>> source_line("/nonexistent.so", 0)
    ''
    """
    info = _module(module)
    if info is None:
        return ""
    dwarf, first_vaddr = info
    address = first_vaddr + offset
    for cu in dwarf.iter_CUs():
        found = _in_cu(dwarf, cu, address)
        if found is not None:
            return found
    return ""


@functools.lru_cache(maxsize=8)
def _module(path: str):
    """(DWARF info, the lowest loaded address) of an ELF module with line tables, or None."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError:  # the dependency is missing: no lines, the fault is still reported
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        elf = ELFFile(io.BytesIO(data))
        if not elf.has_dwarf_info():
            return None
        loads = [s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        if not loads:
            return None
        # The dynamic loader maps the first segment from the start of its page.
        return elf.get_dwarf_info(), min(loads) // mmap.PAGESIZE * mmap.PAGESIZE
    except (ELFError, ValueError, KeyError):
        return None


def _in_cu(dwarf, cu, address: int) -> str | None:
    """The user's line for `address` if this compile unit holds it, else None."""
    prog = dwarf.line_program_for_CU(cu)
    if prog is None:
        return None
    row = _row(prog, address)
    if row is None:
        return None
    delta = 1 if prog.header.version < 5 else 0  # file and directory numbers start at 1 before DWARF 5
    files, dirs = prog.header.file_entry, prog.header.include_directory

    entry = files[row.file - delta]
    file = entry.name.decode(errors="replace")
    if entry.dir_index and not os.path.isabs(file):  # directory 0 is the compile's own: the name is as written
        file = os.path.join(dirs[entry.dir_index - delta].decode(errors="replace"), file)
    if row.line and file not in _NOT_USER and not file.startswith(INCLUDE_DIR):
        return f"{file}:{row.line}"
    return ""


def _row(prog, address: int):
    """The line-table row whose range holds `address`, or None."""
    prev = None
    for entry in prog.get_entries():
        state = entry.state
        if state is None:
            continue
        if prev is not None and prev.address <= address < state.address:
            return prev
        prev = None if state.end_sequence else state
    return None
