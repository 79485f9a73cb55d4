"""Messages kernels log with ``<metal_logging>`` (``os_log_default.log(...)`` and friends).

After each call, the messages its kernel logged go to the kernel log handler, one
``KernelMessage`` each: by default they are printed to ``sys.stderr``, one line each. On the CPU
simulator they come in thread order (threadgroups in linear order, x fastest; the threads of a
threadgroup in theirs; a thread's messages as it logged them), each naming its thread; at most
65536 per call are kept (the first in that order), and a ``MetalkitWarning`` says how many more
were dropped. On Metal (macOS 15) they come as the GPU's log buffer is drained, without the thread.

>>> import numpy as np, metalkit as mk
>>> lib = mk.compile('''
... #include <metal_stdlib>
... #include <metal_logging>
... using namespace metal;
... kernel void hello(uint i [[thread_position_in_grid]]) {
...     if (i == 3) os_log_default.log("hello from %u", i);
... }''')
>>> seen = []
>>> previous = mk.set_kernel_log_handler(seen.append)
>>> lib.hello(grid=8)
>>> print(seen[0])
hello (threadgroup (0, 0, 0), thread (3, 0, 0)): hello from 3
>>> seen[0].thread, seen[0].text
((3, 0, 0), 'hello from 3')
>>> _ = mk.set_kernel_log_handler(previous)
"""
from __future__ import annotations

import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from .errors import MetalkitWarning

__all__ = ["KernelMessage", "set_kernel_log_handler"]

# os_log_type's values (MSL's, as Apple's os_log_type_t) -> the level's name.
LEVELS = {0: "default", 1: "info", 2: "debug", 16: "error", 17: "fault"}


@dataclass(frozen=True)
class KernelMessage:
    """One message a kernel logged.

    ``threadgroup`` and ``thread`` are ``threadgroup_position_in_grid`` and
    ``thread_position_in_threadgroup`` of the thread that logged it (None on Metal, which does not
    say). ``level`` is ``"default"``, ``"info"``, ``"debug"``, ``"error"`` or ``"fault"``;
    ``subsystem`` and ``category`` are those of the ``os_log`` it went through ("" for
    ``os_log_default``). ``str()`` of it is the line the default handler prints.

    >>> m = KernelMessage("k", "x = 1", (0, 0, 0), (5, 0, 0), "error", "com.example", "tiles")
    >>> str(m)
    'k (threadgroup (0, 0, 0), thread (5, 0, 0)) [com.example tiles] error: x = 1'
    """
    kernel: str
    text: str
    threadgroup: Optional[tuple[int, int, int]]
    thread: Optional[tuple[int, int, int]]
    level: str
    subsystem: str
    category: str
    lane_known: bool = True  # False: a SIMT kernel's lane was not known (a function called through a
    # pointer); `thread` is then the first thread of its SIMD-group

    def __str__(self) -> str:
        who = self.kernel
        if self.threadgroup is not None and self.thread is not None:
            thread = f"thread {_triple(self.thread)}" if self.lane_known else \
                f"the SIMD-group of thread {_triple(self.thread)}"
            who += f" (threadgroup {_triple(self.threadgroup)}, {thread})"
        if self.subsystem or self.category:
            who += f" [{' '.join(x for x in (self.subsystem, self.category) if x)}]"
        if self.level != "default":
            who += f" {self.level}"
        return f"{who}: {self.text}"


def _triple(v: tuple[int, int, int]) -> str:
    return f"({v[0]}, {v[1]}, {v[2]})"


def _print(message: KernelMessage) -> None:
    print(message, file=sys.stderr)  # sys.stderr as it is now (a test's capture, a notebook's)


_lock = threading.Lock()
_handler: Callable[[KernelMessage], None] = _print


def set_kernel_log_handler(handler: Optional[Callable[[KernelMessage], None]]) -> Callable[[KernelMessage], None]:
    """Send the messages kernels log to ``handler`` (None: print them to ``sys.stderr``, the
    default); returns the handler it replaces. The handler is called on the thread that made the
    kernel call, after the call, once per message; what it raises propagates from the call.

    >>> import logging, metalkit as mk
    >>> to_logging = lambda m: logging.getLogger("metalkit.kernels").info("%s", m)
    >>> previous = mk.set_kernel_log_handler(to_logging)
    >>> mk.set_kernel_log_handler(previous) is to_logging
    True
    """
    global _handler
    with _lock:
        old, _handler = _handler, handler if handler is not None else _print
    return old


def deliver(records: list, dropped_kernel: str, dropped: int, limit: int) -> None:
    """Called by the compiled core after a call with what it logged: ``records`` are tuples
    (kernel, threadgroup or None, thread or None, lane_known, type, subsystem, category, text)."""
    handler = _handler
    for kernel, group, thread, lane_known, kind, subsystem, category, text in records:
        handler(KernelMessage(kernel, text, group, thread, LEVELS.get(kind, str(kind)), subsystem, category,
                              lane_known))
    if dropped:
        warnings.warn(f"kernel '{dropped_kernel}' logged {dropped} more messages than the {limit} one call keeps; "
                      "they were dropped (log from fewer threads)", MetalkitWarning, stacklevel=2)
