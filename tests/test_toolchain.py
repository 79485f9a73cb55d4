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


FIRST_RUN = textwrap.dedent("""
    import os, resource, sys, numpy as np, metalkit as mk
    from pathlib import Path
    rng = np.random.default_rng(int(sys.argv[1]))
    runtime = lambda: len(list(Path(os.environ["ZIG_GLOBAL_CACHE_DIR"]).rglob("libcompiler_rt.a")))
    def cpu():  # this process's and its compilers' CPU seconds: what a busy machine stretches least
        return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                             resource.RUSAGE_CHILDREN)))
    start = cpu()
    lib = mk.compile('''
    #include <metal_stdlib>
    using namespace metal;
    kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { y[i] = 3.0f * x[i]; }
    ''')
    print(f"{cpu() - start:.2f}", runtime())
    x, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    want = np.float32(3) * x
    lib.axpy(x, y)
    assert np.array_equal(y, want)
    sys.stdout.flush()
    # 128-bit division is a function of the compiler runtime: this module links with it.
    wide = mk.compile('''
    #include <metal_stdlib>
    using namespace metal;
    kernel void div_wide(device const long* a [[buffer(0)]], device long* q [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
        __int128 n = (__int128)a[2 * i] * (__int128)a[2 * i + 1];
        q[i] = (long)(n / (__int128)(a[2 * i + 1] | 1));
    }
    ''')
    a = rng.integers(-2**31, 2**31, 2000).astype(np.int64)
    q = np.zeros(1000, np.int64)
    wide.div_wide(a, q, grid=1000)
    n, d = a[0::2].tolist(), (a[1::2] | 1).tolist()
    want = [int(abs(x * y) // abs(z)) * (1 if (x * y) * z >= 0 else -1) for x, y, z in zip(n, a[1::2].tolist(), d)]
    assert q.tolist() == want
    print(runtime())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zig's runtime is linked only when needed on Linux")
def test_a_first_compile_on_a_new_machine_does_not_wait_for_zigs_runtime(tmp_path, zig, rng):
    # A new machine: an empty kernel cache and an empty zig cache, the ziglang wheel's clang.
    zig_cache = tmp_path / "zig"
    env = child_env(tmp_path / "cache", ZIG_GLOBAL_CACHE_DIR=zig_cache, ZIG_LOCAL_CACHE_DIR=zig_cache,
                    PATH=os.path.dirname(sys.executable))
    p = subprocess.run([sys.executable, "-c", FIRST_RUN, str(int(rng.integers(2**31)))], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    first, runtime_before, runtime_after = p.stdout.split()
    assert (runtime_before, runtime_after) == ("0", "1")  # built for the module that needs it, not before
    # What the first compile costs without it, in CPU time (zig's runtime alone took 4 s).
    assert float(first) < 3.0, first
