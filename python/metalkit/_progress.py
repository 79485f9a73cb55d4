"""A one-line progress bar for long compiles, drawn only on a terminal."""
from __future__ import annotations

import sys
from typing import TextIO


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


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False
