"""Where the real Metal code the tests run lives: third-party corpora kept beside the checkout.

``CORPUS`` is ``../shared/corpus`` next to the repository (``METALKIT_CORPUS`` overrides it);
``require("ggml/ggml-metal.metal")`` gives a path in it, or skips the test saying which folder
is missing.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS = Path(os.environ.get("METALKIT_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus")


def require(subpath: str) -> Path:
    """``CORPUS / subpath``, or a skip naming the folder expected to hold it."""
    path = CORPUS / subpath
    if not path.exists():
        pytest.skip(f"corpus not found: expected {path} (put the corpus in {CORPUS} or set METALKIT_CORPUS)")
    return path
