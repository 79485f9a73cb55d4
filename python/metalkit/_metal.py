"""The Metal backend's Python side: what happens before and after the compiled core runs."""
from __future__ import annotations

import re
from typing import Any, Mapping

from .errors import CompileError
from .msl.diagnostics import compile_error
from .msl.includes import relocate_log
from .msl.signatures import kernel_signatures


# os_log's names (<metal_logging>): a source that names one logs.
_LOGS = re.compile(r"\bos_log(?:_default)?\b")


def uses_logging(text: str) -> bool:
    """Whether Metal must compile ``text`` with shader logging on (MSL 3.2, macOS 15): it names
    ``os_log`` or ``os_log_default``. Logging costs even when nothing is printed, so others stay off.

    >>> uses_logging('os_log_default.log("x");'), uses_logging("float x = log(y);")
    (True, False)
    """
    return _LOGS.search(text) is not None


def compile_source(text: str, source: str, filename: str, constants: Mapping, fast_math: bool) -> Any:
    """A ``_core.Library`` compiled by Metal from ``text``: ``source`` with its headers inlined
    (metalkit.msl.includes), since Metal's compiler has no include path.

    Metal's diagnostics name the user's files and lines (through ``#line``, or
    mapped back from ``program_source``) and become a CompileError.
    """
    from . import _core
    try:
        return _core.metal_compile(text, filename, dict(constants), fast_math, kernel_signatures(text),
                                   uses_logging(text))
    except CompileError as e:
        located = compile_error(relocate_log(e.log, text, filename), source, filename)
        if located.lineno is None:
            raise  # metalkit's own message (a function constant), already complete
        raise located from None


def load_metallib(path: str, constants: Mapping) -> Any:
    """A ``_core.Library`` from a precompiled ``.metallib``; its kernels take arrays for every buffer."""
    from . import _core
    return _core.metal_load_metallib(path, dict(constants))
