"""Choosing the CPU backend's compiler: a clang++ on the PATH is used only if it
compiles what the headers need; otherwise the ziglang wheel's clang."""
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import child_env
from metalkit.msl import toolchain

SCRIPT = textwrap.dedent("""
    import numpy as np, metalkit as mk
    from metalkit.msl import toolchain
    tc = toolchain.find()
    lib = mk.compile('''
    #include <metal_stdlib>
    using namespace metal;
    kernel void k(device half* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = x[i] * 2.0h + 1.0h; }
    ''')
    x = np.arange(4, dtype=np.float16)
    lib.k(x)
    print(tc.kind, x.tolist())
""")


def shim(folder: Path, body: str) -> Path:
    exe = folder / "clang++"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def run_with_path(folder: Path, cache: Path) -> subprocess.CompletedProcess:
    env = child_env(cache, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)


@pytest.fixture
def zig() -> str:
    z = toolchain._zig()
    assert z, "the ziglang wheel is a dependency of metalkit"
    return z


def test_a_clang_too_old_for_the_headers_is_passed_over(tmp_path, zig):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim(bin_dir, 'if [ "$1" = --version ]; then echo "clang version 14.0.6"; exit 0; fi\n'
                  'echo "error: unknown argument: -fbfloat16-excess-precision=none" >&2; exit 1')
    p = run_with_path(bin_dir, tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "zig" and p.stdout.strip().endswith("[1.0, 3.0, 5.0, 7.0]")
    record = json.loads((tmp_path / "cache" / "compilers.json").read_text())
    assert list(record.values()) == ["clang version 14.0.6 is too old (a test compile failed: "
                                     "error: unknown argument: -fbfloat16-excess-precision=none)"]


def test_a_capable_clang_on_the_path_is_used(tmp_path, zig):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim(bin_dir, f'exec "{zig}" clang "$@"')  # a stand-in system clang++, with its own linker
    p = run_with_path(bin_dir, tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "clang" and p.stdout.strip().endswith("[1.0, 3.0, 5.0, 7.0]")
