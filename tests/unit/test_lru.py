"""metalkit._lru.Lru: the one least-recently-used rule of the in-memory caches."""
import threading

import numpy as np

from metalkit._lru import Lru


def test_keeps_the_most_recently_used_entries(rng):
    size = int(rng.integers(1, 20))
    cache: Lru[int] = Lru(lambda: size)
    order: list[int] = []  # the reference: least recently used first
    for k in rng.integers(0, 40, 2000).tolist():
        if rng.random() < 0.5:
            got = cache.get(k)
            assert got == (k * 3 if k in order else None)
            if k in order:
                order.remove(k)
                order.append(k)
        else:
            cache.put(k, k * 3)
            if k in order:
                order.remove(k)
            order.append(k)
            del order[:-size]
    assert [k for k in range(40) if cache.get(k) is not None] == sorted(order)


def test_the_size_is_read_at_each_insertion():
    size = 4
    cache: Lru[str] = Lru(lambda: size)
    for k in range(4):
        cache.put(k, str(k))
    size = 2
    cache.put(4, "4")
    assert [k for k in range(5) if cache.get(k) is not None] == [3, 4]
    cache.clear()
    assert [k for k in range(5) if cache.get(k) is not None] == []


def test_get_or_make_makes_once_for_threads_asking_at_once():
    made = []
    cache: Lru[object] = Lru(lambda: 8)
    start = threading.Barrier(8)

    def ask(out):
        start.wait()
        out.append(cache.get_or_make("k", lambda: made.append(1) or object()))

    got: list[object] = []
    threads = [threading.Thread(target=ask, args=(got,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len({id(g) for g in got}) == 1 and np.size(got) == 8
