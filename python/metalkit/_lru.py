"""The in-memory caches' one rule: keep the most recently used entries, drop the oldest."""
from __future__ import annotations

import collections
import threading
from typing import Callable, Generic, Hashable, Optional, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """A thread-safe mapping that keeps its ``size()`` most recently used entries (``size`` is
    read at each insertion, so a module-level setting such as ``library.LIBRARY_CACHE`` can be
    changed while the program runs).

    >>> c = Lru(lambda: 2); c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)
    1
    >>> c.get("b"), c.get("a"), c.get_or_make("b", lambda: 4)
    (None, 1, 4)
    """

    def __init__(self, size: Callable[[], int]):
        self.size = size
        self._d: collections.OrderedDict[Hashable, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[V]:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._put(key, value)

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        """The entry for ``key``; else ``make()``'s value, made under the lock (so two threads
        asking at once make it once) and kept."""
        with self._lock:
            v = self._d.get(key)
            if v is None:
                v = make()
            self._put(key, v)
            return v

    def clear(self) -> None:
        """Drop every entry (what they free goes once nothing else refers to it)."""
        with self._lock:
            self._d.clear()

    def _put(self, key: Hashable, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size():
            self._d.popitem(last=False)
