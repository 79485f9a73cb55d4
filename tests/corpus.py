"""Where the third-party Metal sources the corpus tests run live (test data, not project code).

The corpus sits beside the checkout in ``shared/corpus`` (``$METALKIT_CORPUS`` overrides it);
tests that need a part of it skip, saying what is missing, where it is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS = Path(os.environ.get("METALKIT_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus")


def require(subpath: str) -> Path:
    """The corpus path ``subpath``, or a skip naming it when it is absent."""
    p = CORPUS / subpath
    if not p.exists():
        pytest.skip(f"third-party corpus file {p} is absent (set METALKIT_CORPUS to the corpus folder)")
    return p
