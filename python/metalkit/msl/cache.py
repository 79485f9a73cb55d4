"""The disk cache of compiled CPU modules: where it is, what keys are made of, and
which entries can be trusted.

A key covers everything that changes the module: the source, the options, the
compiler binary, metalkit's headers and code generator, and the CPU (modules
are built for the native instruction set).

An entry is ``cpu/<key>.json``, a manifest naming the module file, the sha256
of its bytes, and the user's included files with the sha256 of theirs (several
manifests may name one module: a group of kernels built together is recorded
under each kernel's key). A file compiled on first use also has an index,
``cpu/<key>.kernels.json``: its kernel names and included files. A
module is handed to the loader only if its manifest reads back whole, its bytes
hash to the recorded digest and every included file is unchanged; anything
else (a truncated, garbled or empty file, a missing module) is a miss, and the
entry is rebuilt over it. Everything is written beside the entries and renamed
into place, so a crash or a concurrent writer leaves the old entry or the new
one, never half of one.

A cache directory that cannot be written (a file in its place, read-only, a
parent that cannot be created) is replaced, for this process, by a private
temporary one, removed at exit, with one warning.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Iterator, NamedTuple

from ..errors import CacheError, MetalkitWarning
from .paths import INCLUDE_DIR

FORMAT = 3  # bump when the layout of cache entries changes

_lock = threading.Lock()
_abandoned: set[str] = set()  # configured directories that stopped taking writes in this process


def configured() -> Path:
    """``METALKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/metalkit``, else ``~/.cache/metalkit``."""
    env = os.environ.get("METALKIT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "metalkit"


def root() -> Path:
    """The cache directory in use: the configured one if it takes writes, else a private temporary one."""
    path = configured()
    if str(path) in _abandoned:
        return _private()
    try:
        return _usable(str(path))
    except OSError as e:
        return _fall_back(path, e)


def cache_dir() -> Path:
    """Where compiled modules and their manifests are (``<root>/cpu``)."""
    return root() / "cpu"


@functools.lru_cache(maxsize=None)
def _usable(path: str) -> Path:
    """``path`` once it is known to take writes (an OSError if it does not)."""
    cpu = Path(path) / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    # Writing is the only reliable test: permission bits say nothing to root,
    # nor about read-only mounts or full disks.
    with tempfile.TemporaryFile(dir=cpu, prefix="probe-"):
        pass
    return Path(path)


def abandon(error: OSError) -> None:
    """The cache directory refused a write after it was checked (made read-only,
    full...): use the private temporary cache for the rest of this process."""
    path = configured()
    if str(path) not in _abandoned:
        _fall_back(path, error)


def unwritable(error: OSError) -> CacheError:
    """The error for a write refused by the private cache too."""
    return CacheError(f"cannot write compiled kernels to {cache_dir()} ({error.strerror or error}); free space there "
                      "or set METALKIT_CACHE_DIR to a writable directory")


def _fall_back(path: Path, error: OSError) -> Path:
    with _lock:
        first = str(path) not in _abandoned
        _abandoned.add(str(path))
    private = _private()
    if first:
        reason = error.strerror or str(error)
        warnings.warn(f"cannot write the kernel cache {path} ({reason}); using {private} for this process "
                      "only, so kernels are compiled again next time. Set METALKIT_CACHE_DIR to a writable directory.",
                      MetalkitWarning, stacklevel=_callers_level())
    return private


def _callers_level() -> int:
    """The stacklevel of the first frame outside metalkit: the warning names the user's call."""
    package = str(Path(__file__).parent.parent)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


@functools.lru_cache(maxsize=None)
def _private() -> Path:
    try:
        path = Path(tempfile.mkdtemp(prefix="metalkit-cache-"))  # mode 0700: this user's alone
        (path / "cpu").mkdir()
    except OSError as e:
        raise CacheError(f"cannot write the kernel cache {configured()} nor a temporary directory "
                         f"({e.strerror or e}); set METALKIT_CACHE_DIR to a writable directory") from None
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.lru_cache(maxsize=None)
def _metalkit_version() -> str:
    """Hash of the headers and the generator: a change to either rebuilds."""
    h = hashlib.sha256()
    roots = [Path(INCLUDE_DIR), Path(__file__).parent]
    for root_dir in roots:
        for p in sorted(root_dir.rglob("*")):
            if p.is_file() and p.suffix != ".pyc":
                h.update(str(p.relative_to(root_dir)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _cpu_fingerprint() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = line
                    break
    except OSError:
        pass
    return hashlib.sha256((platform.machine() + platform.processor() + flags).encode()).hexdigest()[:16]


def key(source: str, filename: str, include_dirs: list[str], constants: dict, fast_math: bool,
        compiler: str, kernels: list[str] | None = None, execution: str = "auto") -> str:
    parts = [FORMAT, source, filename, include_dirs, sorted((repr(k), repr(v)) for k, v in constants.items()),
             fast_math, compiler, _metalkit_version(), _cpu_fingerprint(), kernels, execution]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: str | Path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


class Entry(NamedTuple):
    module: Path
    deps: list[str]  # the user's files the module was built from


def lookup(k: str) -> Entry | None:
    """The verified entry for key ``k``, or None if it is missing, damaged or out of date."""
    manifest = cache_dir() / f"{k}.json"
    try:
        entry = json.loads(manifest.read_bytes())
    except (OSError, ValueError):  # missing, unreadable, truncated, garbled, empty
        return None
    if not _well_formed(entry):
        return None
    module = manifest.parent / entry["module"]
    if file_digest(module) != entry["sha256"]:
        return None
    if any(file_digest(p) != d for p, d in entry["deps"].items()):
        return None
    return Entry(module, list(entry["deps"]))


def _well_formed(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    name, sha = entry.get("module"), entry.get("sha256")
    return (isinstance(name, str) and name.endswith(".so") and Path(name).name == name
            and isinstance(sha, str) and _well_formed_deps(entry.get("deps")))


def _well_formed_deps(deps: object) -> bool:
    return isinstance(deps, dict) and all(isinstance(p, str) and (d is None or isinstance(d, str))
                                          for p, d in deps.items())


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A temporary build directory beside the entries (one file system, so ``store`` renames atomically)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)  # recreated if it was removed since
    with tempfile.TemporaryDirectory(dir=folder, prefix="build-") as tmp:
        yield Path(tmp)


def store(k: str, built: Path, deps: dict[str, str | None], kernels: list[str]) -> Entry:
    """Move the module ``built`` (in a ``workspace``) into the cache as key ``k``'s entry."""
    manifest = built.parent.parent / f"{k}.json"
    # Named by what it was built from, included files too: a process that
    # already loaded the previous build gets a new module, not dlopen's old one.
    module = manifest.with_name(f"{k}-{digest(json.dumps(sorted(deps.items())))[:12]}.so")
    record = {"module": module.name, "sha256": file_digest(built), "deps": deps, "kernels": kernels}
    staged = built.with_name("manifest.json")
    staged.write_text(json.dumps(record))
    previous = _previous_module(manifest)
    os.replace(built, module)
    os.replace(staged, manifest)
    if previous is not None and previous != module and previous.name.startswith(f"{k}-"):
        # Housekeeping only (a stale module costs disk space, nothing else); a
        # process that has it loaded keeps its mapping. A module another key
        # built (a group's) is left to that key.
        with contextlib.suppress(OSError):
            previous.unlink()
    return Entry(module, list(deps))


def _previous_module(manifest: Path) -> Path | None:
    try:
        entry = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return None
    return manifest.parent / entry["module"] if _well_formed(entry) else None


def link(keys: list[str], entry: Entry) -> None:
    """Record the module of ``entry`` (already in the cache, built under another key) as each key's."""
    record = {"module": entry.module.name, "sha256": file_digest(entry.module),
              "deps": {p: file_digest(p) for p in entry.deps}}
    for k in keys:
        _write_json(cache_dir() / f"{k}.json", record)


class Index(NamedTuple):
    kernels: list[str]
    deps: list[str]
    tag: str  # changes when an included file does


def lookup_index(k: str) -> Index | None:
    """The kernel names of key ``k``'s file, if recorded and its included files are unchanged."""
    try:
        record = json.loads((cache_dir() / f"{k}.kernels.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and isinstance(record.get("kernels"), list)
            and all(isinstance(n, str) for n in record["kernels"]) and _well_formed_deps(record.get("deps"))):
        return None
    if any(file_digest(p) != d for p, d in record["deps"].items()):
        return None
    return Index(record["kernels"], list(record["deps"]), digest(json.dumps(sorted(record["deps"].items()))))


def store_index(k: str, kernels: list[str], deps: dict[str, str | None]) -> Index:
    """Record the kernel names of key ``k``'s file and the files it included."""
    _write_json(cache_dir() / f"{k}.kernels.json", {"kernels": kernels, "deps": deps})
    return Index(kernels, list(deps), digest(json.dumps(sorted(deps.items()))))


def _write_json(path: Path, record: dict) -> None:
    """Written beside ``path`` and renamed over it: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="write-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise