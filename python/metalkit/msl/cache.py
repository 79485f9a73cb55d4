"""Where compiled CPU modules live, and what their cache keys are made of.

A key covers everything that changes the module: the source, the options, the
compiler binary, metalkit's headers and code generator, and the CPU (modules
are built for the native instruction set). Files the source includes are
checked by content on every disk hit.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from pathlib import Path

from .toolchain import INCLUDE_DIR

FORMAT = 2  # bump when the layout of cache entries changes


def cache_dir() -> Path:
    """``METALKIT_CACHE_DIR``, else the user's cache directory."""
    env = os.environ.get("METALKIT_CACHE_DIR")
    if env:
        base = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "metalkit"
    return base / "cpu"


@functools.lru_cache(maxsize=None)
def _metalkit_version() -> str:
    """Hash of the headers and the generator: a change to either rebuilds."""
    h = hashlib.sha256()
    roots = [Path(INCLUDE_DIR), Path(__file__).parent]
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.suffix != ".pyc":
                h.update(str(p.relative_to(root)).encode())
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
        compiler: str, kernels: list[str] | None = None) -> str:
    parts = [FORMAT, source, filename, include_dirs, sorted((repr(k), repr(v)) for k, v in constants.items()),
             fast_math, compiler, _metalkit_version(), _cpu_fingerprint(), kernels]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
