"""The clang and linker commands ``zig c++`` runs for a module, run without zig's driver.

Of a small module's compile against the precompiled header, ``zig c++`` spends about a third
in its own driver (the clang driver, zig's cache of the object, its own bookkeeping) around
the ``clang -cc1`` and ``ld.lld`` it runs. Both commands are read from ``zig c++ -v`` the first
time a header is used (that compile builds the module as before), with the module's file names
made placeholders, and then run directly. They are kept only if, run on that same module,
they make the same bytes zig did; recorded beside the header as ``<key>.zig.json``. A module
they fail to build is built through ``zig c++`` as before (build.py), and if that succeeds the
record is dropped.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import tempfile
import threading
from pathlib import Path

from . import toolchain

_lock = threading.Lock()
_known: dict[str, "dict | None"] = {}  # record path -> its commands (None: none for this header)
_tried: set[str] = set()  # headers whose commands this process has tried to record (once each)
_FIELDS = ("compile", "link")


def commands(header: Path, source: str, obj: str, output: str) -> tuple[list[str], list[str]] | None:
    """The compile and link commands of ``source`` against ``header``, if recorded."""
    record = _record_path(header)
    with _lock:
        if str(record) not in _known:
            _known[str(record)] = _read(record)
        found = _known[str(record)]
    if found is None:
        return None
    values = {"{source}": source, "{object}": obj, "{output}": output, "{dir}": os.path.dirname(source)}
    return tuple([_fill(a, values) for a in found[f]] for f in _FIELDS)


def may_record(header: Path) -> bool:
    """True the first time this process asks for ``header``: its commands are read then only (a
    zig whose commands do not reproduce its output is not asked again for every module)."""
    with _lock:
        first = str(header) not in _tried
        _tried.add(str(header))
    return first


def compile_and_record(tc: toolchain.Toolchain, header: Path, source: str, output: str, fast_math: bool,
                       checked: bool = False) -> subprocess.CompletedProcess:
    """``zig c++`` of ``source`` against ``header`` into ``output``, reading and checking its
    commands on the way."""
    proc = toolchain.run(tc.compile(source, output, fast_math, str(header), checked) + ["-v"])
    if proc.returncode != 0:
        return proc
    with contextlib.suppress(OSError):
        found = _parse(proc.stderr, source, output, tc.path)
        if found is not None and _reproduces(found, source, output):
            record = _record_path(header)
            fd, tmp = tempfile.mkstemp(dir=record.parent, prefix="write-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(found))
            os.replace(tmp, record)
            with _lock:
                _known[str(record)] = found
    return proc


def drop(header: Path) -> None:
    """The recorded commands failed where ``zig c++`` did not: forget them."""
    record = _record_path(header)
    with _lock:
        _known[str(record)] = None
    with contextlib.suppress(OSError):
        record.unlink()


def _record_path(header: Path) -> Path:
    return header.with_name(header.stem + ".zig.json")


def _read(record: Path) -> dict | None:
    try:
        found = json.loads(record.read_bytes())
    except (OSError, ValueError):
        return None
    ok = isinstance(found, dict) and all(isinstance(found.get(f), list) and found[f]
                                         and all(isinstance(a, str) for a in found[f]) for f in _FIELDS)
    return found if ok else None


def _fill(arg: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        arg = arg.replace(k, v)
    return arg


def _parse(log: str, source: str, output: str, zig: str) -> dict | None:
    """The ``-cc1`` and ``ld.lld`` lines of ``zig c++ -v``, the module's names made placeholders;
    None unless each name is found where expected."""
    lines = [line.strip() for line in log.splitlines()]
    cc1 = [shlex.split(line) for line in lines if line.startswith('"') and " -cc1 " in line]
    lld = [shlex.split(line) for line in lines if line.startswith("ld.lld ")]
    if len(cc1) != 1 or len(lld) != 1 or cc1[0][-1] != source or "-o" not in cc1[0]:
        return None
    compile_, link = cc1[0], lld[0]
    compile_[compile_.index("-o") + 1] = "{object}"
    compile_[-1] = "{source}"
    for flag in ("-dependency-file", "-MT"):  # zig's own bookkeeping of the object
        if flag in compile_:
            i = compile_.index(flag)
            del compile_[i:i + 2]
    folder = os.path.dirname(source)
    compile_ = [a.replace(f"={folder}=", "={dir}=") for a in compile_ if a not in ("-sys-header-deps", "-MV", "-v")]
    obj = Path(source).stem + ".o"  # zig's copy of the object, in its cache
    objs = [i for i, a in enumerate(link) if os.path.basename(a) == obj]
    if link.count(output) != 1 or len(objs) != 1:
        return None
    link[link.index(output)] = "{output}"
    link[objs[0]] = "{object}"
    if any(folder in a for a in compile_ + link):
        return None
    return {"compile": compile_, "link": [zig] + link}


def _reproduces(found: dict, source: str, output: str) -> bool:
    """The commands, run on the module zig just built, make the same bytes."""
    folder = os.path.dirname(source)
    obj, again = os.path.join(folder, "direct.o"), os.path.join(folder, "direct.so")
    values = {"{source}": source, "{object}": obj, "{output}": again, "{dir}": folder}
    for f in _FIELDS:
        if toolchain.run([_fill(a, values) for a in found[f]]).returncode != 0:
            return False
    same = Path(again).read_bytes() == Path(output).read_bytes()
    for path in (obj, again):
        os.unlink(path)
    return same
