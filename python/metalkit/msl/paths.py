"""Where metalkit's own files are: the headers clang compiles kernels against."""
from __future__ import annotations

from pathlib import Path

# metal_stdlib and friends (python/metalkit/include), as clang's -I and as the prefix that tells
# metalkit's header lines from the user's in markers, diagnostics and line tables.
INCLUDE_DIR = str(Path(__file__).resolve().parent.parent / "include")
