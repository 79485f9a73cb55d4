"""The Metal backend's Python side: what happens before and after the compiled core runs."""
from __future__ import annotations

from typing import Any, Mapping

from .errors import CompileError
from .msl.diagnostics import compile_error
from .msl.includes import relocate_log
from .msl.signatures import kernel_signatures


def compile_source(text: str, source: str, filename: str, constants: Mapping, fast_math: bool) -> Any:
    """A ``_core.Library`` compiled by Metal from ``text``: ``source`` with its headers inlined
    (metalkit.msl.includes), since Metal's compiler has no include path.

    Metal's diagnostics name the user's files and lines (through ``#line``, or
    mapped back from ``program_source``) and become a CompileError.
    """
    from . import _core
    try:
        return _core.metal_compile(text, filename, dict(constants), fast_math, kernel_signatures(text))
    except CompileError as e:
        located = compile_error(relocate_log(e.log, text, filename), source, filename)
        if located.lineno is None:
            raise  # metalkit's own message (a function constant), already complete
        raise located from None


def load_metallib(path: str, constants: Mapping) -> Any:
    """A ``_core.Library`` from a precompiled ``.metallib``; its kernels take arrays for every buffer."""
    from . import _core
    return _core.metal_load_metallib(path, dict(constants))
