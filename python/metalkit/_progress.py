"""One-line progress for long compiles (a bar for a whole build, a status for one compile), drawn only on a
terminal; elsewhere (a notebook, a CI log) a long compile is said once, in one plain line."""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

# Off a terminal, a compile still running after this many seconds is said once per process.
NOTE_AFTER = 3.0
_noted = threading.Event()


class Progress:
    """``advance(n)`` as work is done; ``close()`` at the end. Silent unless ``stream`` is a tty
    (or ``enabled`` says so), so logs and pipes get no control characters.

    >>> p = Progress(10, "file.metal", enabled=False); p.advance(10); p.close(1.0); p.done
    10
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool | None = None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_tty(self.stream) if enabled is None else enabled
        self._drawn = False

    def advance(self, n: int) -> None:
        self.done += n
        if self.enabled and n:
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(f"\r{self.label}: [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} kernels")
            self.stream.flush()
            self._drawn = True

    def close(self, seconds: float) -> None:
        if self._drawn:
            self.stream.write(f" ({seconds:.1f} s)\n")
            self.stream.flush()


class Status:
    """A one-line status for one long step (``with Status("compiling x.metal"): ...``): drawn once
    the step has taken ``delay`` seconds, with the time so far, and erased when it ends, if
    ``stream`` is a tty (or ``enabled`` says so). On another stream (unless ``enabled`` is False)
    a step still running after ``note_after`` seconds is said in one line, once per process: a
    first compile on a new machine is not silent in a notebook or a CI log.

    >>> with Status("compiling x.metal", enabled=False): pass
    """

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None, delay: float = 1.0,
                 note_after: float | None = None):
        self.label, self.delay = label, delay
        self.note_after = NOTE_AFTER if note_after is None else note_after
        self.stream = stream if stream is not None else sys.stderr
        tty = _is_tty(self.stream)
        self.enabled = tty if enabled is None else enabled
        self._note = enabled is None and not tty
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Status":
        target = self._draw if self.enabled else self._say_once if self._note and not _noted.is_set() else None
        if target is not None:
            self._thread = threading.Thread(target=target, name="metalkit-status", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._done.set()
            self._thread.join()

    def _say_once(self) -> None:
        if self._done.wait(self.note_after) or _noted.is_set():
            return
        _noted.set()
        self.stream.write(f"metalkit: {self.label} has taken more than {self.note_after:g} s (a first compile on a "
                          "machine also prepares the compiler; compiled kernels are cached, so a later run loads "
                          "them at once)\n")
        self.stream.flush()

    def _draw(self) -> None:
        start, drawn = time.monotonic(), 0
        if self._done.wait(self.delay):
            return
        while True:
            line = f"\r{self.label}... {time.monotonic() - start:.1f} s"
            self.stream.write(line)
            self.stream.flush()
            drawn = len(line) - 1
            if self._done.wait(0.2):
                break
        self.stream.write("\r" + " " * drawn + "\r")
        self.stream.flush()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False
