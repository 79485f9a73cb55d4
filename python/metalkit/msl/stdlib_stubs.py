"""``clang -E`` of a source without preprocessing metalkit's headers again.

Every ``clang -E`` (build.py) begins with ``<metal_stdlib>``, forced by ``-include``: half a
megabyte of text, the same for every source, and most of the preprocessor's time. Once per
compiler and headers its effect is recorded: the text it produces (the prefix, as
``pch.split`` cuts it), the macros it leaves defined (those ``-dM`` lists beyond the
compiler's own) and the files it includes. A source is then preprocessed with a forced
include of those macros and of an empty stand-in (``#pragma once``) for each of those files,
found first on the include path, so the source's own ``#include <metal_stdlib>`` is skipped
as before; the recorded prefix is put back in front. The source's part of the output is what
it was: the same macros at its first line, the same files already included. Checked when
recorded (an empty source must come out exactly as in full); a source that reaches one of
metalkit's headers the stand-ins do not cover, or that fails, is preprocessed in full, as
before, so errors read as they did.

Kept in ``<cache>/cpu/pch/<key>.pp/``: ``include/`` (the stand-ins), ``macros.h``,
``prefix.ii`` and ``record.json`` (their sha256s), built in a temporary folder and renamed into
place, verified once per process, and built again if damaged.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import cache, pch, toolchain
from .paths import INCLUDE_DIR

STUB = "#pragma once\n"
_MARKER = re.compile(r'^# \d+ "(.*)" 1', re.M)
_lock = threading.Lock()
_known: dict[str, "Stubs | None"] = {}  # key -> verified stubs (None: this compiler cannot have them)


@dataclass(frozen=True)
class Stubs:
    include: str   # the folder of stand-ins, first on the include path
    macros: str    # forced by -include
    prefix: str    # the headers' text, put back in front

    def restore(self, text: str, src_name: str) -> str | None:
        """The full ``clang -E`` output for ``text``, preprocessed against the stand-ins; None if
        it reached a header of metalkit's they do not cover."""
        n = pch.head(text, src_name)
        rest = text[n:]
        if not n or f'"{INCLUDE_DIR}{os.sep}' in rest:
            return None
        return text[:text.index("\n") + 1] + self.prefix + rest


def get(tc: toolchain.Toolchain) -> Stubs | None:
    """The stand-ins for ``tc``, recorded now if missing or damaged; None if they cannot be had."""
    k = hashlib.sha256(json.dumps([cache.FORMAT, tc.identity, cache._metalkit_version(),
                                   toolchain.LANGUAGE_FLAGS]).encode()).hexdigest()[:32]
    with _lock:
        if k in _known:
            return _known[k]
        folder = cache.cache_dir() / "pch" / f"{k}.pp"
        try:
            stubs = _verified(folder)
            if stubs is None:
                with contextlib.suppress(OSError):
                    shutil.rmtree(folder)
                stubs = _record(tc, folder)
        except OSError:
            return None  # an unwritable cache: tried again next time
        _known[k] = stubs
        return stubs


def _verified(folder: Path) -> Stubs | None:
    try:
        record = json.loads((folder / "record.json").read_bytes())
        prefix = (folder / "prefix.ii").read_bytes()
        macros = (folder / "macros.h").read_bytes()
        ok = (isinstance(record, dict) and record.get("prefix") == hashlib.sha256(prefix).hexdigest()
              and record.get("macros") == hashlib.sha256(macros).hexdigest()
              and isinstance(record.get("stubs"), list) and record["stubs"]
              and all(isinstance(s, str) and (folder / "include" / s).read_text() == STUB for s in record["stubs"]))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return Stubs(str(folder / "include"), str(folder / "macros.h"), prefix.decode()) if ok else None


def _record(tc: toolchain.Toolchain, folder: Path) -> Stubs | None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix="build-", suffix=".pp"))
    try:
        empty = tmp / "empty.metal"
        empty.write_text("")
        full = toolchain.run(tc.preprocess(str(empty), []))
        everything = toolchain.run(tc.preprocess(str(empty), [])[:-1] + ["-dM", str(empty)])
        own = toolchain.run(tc._clang() + toolchain.LANGUAGE_FLAGS + ["-E", "-dM", str(empty)])
        parts = pch.split(full.stdout, str(empty)) if full.returncode == 0 else None
        if parts is None or everything.returncode or own.returncode:
            return None
        prefix = parts[0]
        base = os.path.join(INCLUDE_DIR, "")
        files = sorted({os.path.relpath(f, INCLUDE_DIR) for f in _MARKER.findall(prefix)
                        if f.startswith(base)})
        for rel in files:
            (tmp / "include" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "include" / rel).write_text(STUB)
        (tmp / "macros.h").write_text("".join(f"#include <{rel}>\n" for rel in files)
                                      + _macro_lines(everything.stdout, own.stdout))
        (tmp / "prefix.ii").write_text(prefix)
        stubs = Stubs(str(folder / "include"), str(folder / "macros.h"), prefix)
        # The check: an empty source through the stand-ins comes out as it does in full.
        trial = Stubs(str(tmp / "include"), str(tmp / "macros.h"), prefix)
        fast = toolchain.run(tc.preprocess(str(empty), [], trial))
        if fast.returncode or trial.restore(fast.stdout, str(empty)) != full.stdout:
            return None
        (tmp / "record.json").write_text(json.dumps({
            "prefix": hashlib.sha256(prefix.encode()).hexdigest(),
            "macros": hashlib.sha256((tmp / "macros.h").read_bytes()).hexdigest(), "stubs": files}))
        empty.unlink()
        try:
            os.rename(tmp, folder)
        except OSError:  # another process recorded them first
            stubs = _verified(folder)
        return stubs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _macro_lines(everything: str, own: str) -> str:
    """``#define``/``#undef`` lines that take the compiler's own macros to the headers' set."""
    def table(text: str) -> dict[str, str]:
        out = {}
        for line in text.splitlines():
            if line.startswith("#define "):
                name = re.match(r"#define (\w+)", line).group(1)
                out[name] = line
        return out
    mine, theirs = table(everything), table(own)
    lines = [f"#undef {n}" for n in theirs if n not in mine]
    for n, line in mine.items():
        if theirs.get(n) != line:
            lines += ([f"#undef {n}"] if n in theirs else []) + [line]
    return "\n".join(lines) + "\n"
