"""The disk cache: a second process reuses the module; any change rebuilds."""
import subprocess
import sys
import textwrap
import uuid

import pytest

from conftest import child_env

SCRIPT = textwrap.dedent("""
    import sys, numpy as np, metalkit as mk
    from metalkit.msl import build
    if sys.argv[2] == "forbid":
        def refuse(*a, **k):
            raise SystemExit("compiled although the cache should have served it")
        build._compile = refuse
    lib = mk.load(sys.argv[1])
    x = np.arange(8, dtype=np.float32)
    lib.k(x)
    print(x.tolist())
""")


def run(tmp_path, cache, mode):
    env = child_env(cache)
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "k.metal"), mode], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr + p.stdout
    return p.stdout.strip()


@pytest.fixture
def kernel_dir(tmp_path):
    tag = uuid.uuid4().hex  # a source no other test has compiled
    (tmp_path / "inc.h").write_text("constant float ADD = 1.0f;\n")
    (tmp_path / "k.metal").write_text(
        f"// {tag}\n#include <metal_stdlib>\nusing namespace metal;\n#include \"inc.h\"\n"
        "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += ADD; }\n")
    return tmp_path


def test_second_process_does_not_compile(kernel_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    assert run(kernel_dir, cache, "build") == str([float(i + 1) for i in range(8)])
    modules = sorted(p.name for p in (cache / "cpu").glob("*.so"))
    assert len(modules) == 1
    assert run(kernel_dir, cache, "forbid") == str([float(i + 1) for i in range(8)])
    assert sorted(p.name for p in (cache / "cpu").glob("*.so")) == modules


def test_changed_source_or_header_recompiles(kernel_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    run(kernel_dir, cache, "build")
    src = kernel_dir / "k.metal"
    src.write_text(src.read_text().replace("x[i] += ADD", "x[i] += 2.0f * ADD"))
    assert run(kernel_dir, cache, "build") == str([float(i + 2) for i in range(8)])
    (kernel_dir / "inc.h").write_text("constant float ADD = 10.0f;\n")
    assert run(kernel_dir, cache, "build") == str([float(i + 20) for i in range(8)])
    assert len(list((cache / "cpu").glob("*.so"))) == 2  # the header edit replaced that key's module


def test_in_process_cache_returns_the_same_library():
    import metalkit as mk
    src = f"// {uuid.uuid4().hex}\n#include <metal_stdlib>\nkernel void k(device float* x [[buffer(0)]]) {{}}\n"
    assert mk.compile(src) is mk.compile(src)
    assert mk.compile(src) is not mk.compile(src + "\n")


def test_header_edit_in_the_same_process_gives_a_new_library(tmp_path):
    import numpy as np
    import metalkit as mk
    (tmp_path / "v.h").write_text("constant float V = 1.0f;\n")
    src = (f"// {uuid.uuid4().hex}\n#include <metal_stdlib>\nusing namespace metal;\n#include \"v.h\"\n"
           "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = V; }\n")
    x = np.zeros(2, np.float32)
    mk.compile(src, include_dirs=[tmp_path]).k(x)
    assert x.tolist() == [1.0, 1.0]
    (tmp_path / "v.h").write_text("constant float V = 2.0f;\n")
    mk.compile(src, include_dirs=[tmp_path]).k(x)
    assert x.tolist() == [2.0, 2.0]
