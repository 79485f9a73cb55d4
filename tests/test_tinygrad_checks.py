"""tinygrad's generated kernels under every check: the tinygrad tests run again, in a child process
with ``METALKIT_CHECK=all`` (the check default is read once per process) and every CheckWarning an
error, so any finding (race, uninitialised read, reliance on lockstep, bounds, divergent barrier)
fails them, and each result is still checked against numpy and tinygrad's CPU device."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import metalkit as mk

pytestmark = [pytest.mark.checks,
              pytest.mark.skipif(mk.device().backend != "cpu", reason="check= is the CPU simulator's"),
              pytest.mark.skipif(sys.version_info < (3, 11), reason="tinygrad needs Python 3.11+")]

HERE = Path(__file__).resolve().parent


def test_tinygrads_kernels_report_nothing_under_every_check(tmp_path):
    env = dict(os.environ, METALKIT_CHECK="all")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                           "error::metalkit.CheckWarning", str(HERE / "test_tinygrad.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " skipped" not in proc.stdout, proc.stdout[-2000:]
