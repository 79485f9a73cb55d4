"""Where the third-party Metal corpus lives: ``shared/corpus`` beside the checkout, or ``$METALKIT_CORPUS``.

The corpus is test data kept outside the project (see its README); tests that need it
call ``require`` and are skipped, saying where it was looked for, when it is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS = Path(os.environ.get("METALKIT_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus")


def require(subpath: str) -> Path:
    """The corpus file or folder ``subpath``; skips the calling test (or module) when it is absent."""
    path = CORPUS / subpath
    if not path.exists():
        pytest.skip(f"corpus file {path} is absent: put the corpus in {CORPUS} "
                    "(beside the checkout) or set METALKIT_CORPUS to its folder", allow_module_level=True)
    return path
