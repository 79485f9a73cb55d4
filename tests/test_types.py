"""The public modules type-check: mypy, configured in pyproject.toml ([tool.mypy]), finds
nothing in them, _core.pyi standing for the compiled module."""
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_nothing_in_the_public_modules():
    p = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("Success: no issues found in 16 source files"), p.stdout
