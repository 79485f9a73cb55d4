"""A precompiled header of metalkit's ``<metal_stdlib>``, so a small kernel's compile does not parse it.

``clang -E`` output (build.py) begins with the headers, expanded, before the user's first line.
That prefix is the same for every source given the compiler and metalkit's headers, and the
pre-pass leaves it untouched, so it is compiled once into a precompiled header and each module
is compiled as ``-include-pch`` plus the rest of the text. Being the preprocessed text (no
``#define`` left in it), the header carries no macros: the user's already-expanded text is read
as it was.

The header lives in ``<cache>/cpu/pch``: ``<key>.h`` (the prefix), ``<key>.pch`` and
``<key>.json`` (the sha256 of the ``.pch``). The key covers the prefix itself, the compiler
binary, the flags (metalkit's own code) and the CPU. A header is used only once its record
reads back and its bytes hash to it; anything else is rebuilt over it. Each part is written
under a temporary name and renamed into place (the ``.h`` is only ever created, never
replaced, as a ``.pch`` already built from it would no longer match), so two processes that
build it at once leave one whole header. Building it costs about the compile of a whole
small module, once; a compiler that cannot build or use it (checked per process) compiles
the full text as before, as does any compile that fails with it, so error messages are
unchanged.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

from . import cache, toolchain
from .tokens import c_escape

# False: the pipeline as it was before this module, for bench/bench_small_compile.py to compare (every module
# compiled from its whole text, the pre-pass reading the headers each time).
ENABLED = True
_lock = threading.Lock()
_verified: dict[str, tuple] = {}  # pch path -> (inode, mtime, size) of it and its source, found right
_refused: set[str] = set()  # keys whose header failed to build in this process


def head(text: str, src_name: str) -> int:
    """The length of the headers forced by ``-include`` at the start of ``clang -E`` output whose
    first line names ``src_name``, up to the marker of the return to that file; 0 if the text is
    not laid out so."""
    at = text.find(f'\n# 1 "{c_escape(src_name)}" 2\n')
    return at + 1 if text.startswith("# 1 ") and at >= 0 else 0


def split(text: str, src_name: str) -> tuple[str, str] | None:
    """``(prefix, rest)``: the headers (``head``) without the first line, and the text after them,
    its return marker made a plain one. None if the text is not laid out so."""
    n = head(text, src_name)
    if not n:
        return None
    marker = f'# 1 "{c_escape(src_name)}"'
    return text[text.index("\n") + 1:n], marker + "\n" + text[n + len(marker) + 3:]




def _key(tc: toolchain.Toolchain, fast_math: bool, prefix: str, checked: bool) -> str:
    parts = [cache.FORMAT, tc.identity, fast_math, cache.digest(prefix), cache._metalkit_version(),
             cache._cpu_fingerprint()] + (["checked"] if checked else [])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def header(tc: toolchain.Toolchain, fast_math: bool, prefix: str, checked: bool = False) -> Path | None:
    """The precompiled header for ``prefix``, built now if it is missing or damaged; None if it
    cannot be had (the compiler refused it, the cache does not take writes). ``checked``: for
    checked modules (toolchain.compile's flags must match)."""
    k = _key(tc, fast_math, prefix, checked)
    if k in _refused:
        return None
    folder = cache.cache_dir() / "pch"
    pch, source = folder / f"{k}.pch", folder / f"{k}.h"
    with _lock:  # threads of one build_all share a header: built once
        try:
            if _intact(pch, source, prefix):
                return pch
            folder.mkdir(parents=True, exist_ok=True)
            _source(source, prefix)
            return _build(tc, fast_math, source, pch, checked)
        except OSError:
            return None


def refuse(tc: toolchain.Toolchain, fast_math: bool, prefix: str, checked: bool = False) -> None:
    """The header of ``prefix`` did not serve a compile that then succeeded without it: remove it and use none
    in this process (the next process builds it again)."""
    k = _key(tc, fast_math, prefix, checked)
    _refused.add(k)
    with _lock:
        for suffix in (".json", ".pch"):
            with contextlib.suppress(OSError):
                (cache.cache_dir() / "pch" / f"{k}{suffix}").unlink()
        _verified.pop(str(cache.cache_dir() / "pch" / f"{k}.pch"), None)


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _intact(pch: Path, source: Path, prefix: str) -> bool:
    """The header's bytes hash to its record and its source holds ``prefix`` (clang quotes it in
    diagnostics); checked once per process while neither file changes."""
    try:
        stamp = (_stamp(pch), _stamp(source))
        if _verified.get(str(pch)) == stamp:
            return True
        record = json.loads(pch.with_suffix(".json").read_bytes())
        if not (isinstance(record, dict) and record.get("sha256") == cache.file_digest(pch)
                and source.read_bytes() == prefix.encode()):
            return False
    except (OSError, ValueError):
        return False
    _verified[str(pch)] = stamp
    return True


def _source(path: Path, prefix: str) -> Path:
    """``path`` holding ``prefix``: created if missing, recreated if its bytes differ (damaged)."""
    data = prefix.encode()
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return path
        path.unlink()  # damaged: its header is rebuilt below
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="write-", suffix=".h")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with contextlib.suppress(FileExistsError):  # another process made it: same bytes
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return path


def _build(tc: toolchain.Toolchain, fast_math: bool, source: Path, pch: Path, checked: bool) -> Path | None:
    fd, tmp = tempfile.mkstemp(dir=pch.parent, prefix="build-", suffix=".pch")
    os.close(fd)
    try:
        proc = toolchain.run(tc.precompile(str(source), tmp, fast_math, checked))
        if proc.returncode != 0:
            _refused.add(pch.stem)
            return None
        record = pch.with_suffix(".json")
        staged = record.with_name(Path(tmp).stem + ".json")
        staged.write_text(json.dumps({"sha256": cache.file_digest(tmp)}))
        os.replace(tmp, pch)
        os.replace(staged, record)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _verified[str(pch)] = (_stamp(pch), _stamp(source))
    return pch
