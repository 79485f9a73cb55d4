"""Importing metalkit.tinygrad without tinygrad: an ImportError that says what to install.

tinygrad 0.14 needs Python 3.11 or later, so the test extra installs it only there and
conftest.py leaves test_tinygrad.py out of older Pythons' runs; there, this error is what a
user gets, and it is checked directly.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

MESSAGE = "metalkit.tinygrad needs tinygrad 0.14.0"
FIX = "pip install 'metalkit[tinygrad]'"


def test_without_tinygrad_the_import_says_what_to_install():
    if sys.version_info < (3, 11):  # no tinygrad in this environment
        with pytest.raises(ImportError) as e:
            import metalkit.tinygrad  # noqa: F401
        assert MESSAGE in str(e.value) and FIX in str(e.value)
        return
    # A tinygrad that cannot be imported (None in sys.modules blocks it), in a child process.
    code = ("import sys; sys.modules['tinygrad'] = None\n"
            "try:\n    import metalkit.tinygrad\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert MESSAGE in out.stdout and FIX in out.stdout
