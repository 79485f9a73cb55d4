"""The kernel cache: a second process reuses a module and any change rebuilds it; a damaged entry
is rebuilt, never loaded, never a crash, never a lasting failure; a cache directory that cannot
be written is replaced by a private temporary one. Runs that touch the disk are child processes,
so a crash cannot take the tests down."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from conftest import child_env

# A child script's start: it loads the kernel file argv[1]; with argv[2] == "forbid" the cache
# must serve it (compiling is an error).
FORBID_PRELUDE = textwrap.dedent("""
    import sys, numpy as np, metalkit as mk
    from metalkit.msl import build
    if sys.argv[2] == "forbid":
        def refuse(*a, **k):
            raise SystemExit("compiled although the cache should have served it")
        build._compile = refuse
    lib = mk.load(sys.argv[1])
""")

REUSE_SCRIPT = FORBID_PRELUDE + textwrap.dedent("""
    x = np.arange(8, dtype=np.float32)
    lib.k(x)
    print(x.tolist())
""")


def run_reuse(tmp_path, cache, mode):
    env = child_env(cache)
    p = subprocess.run([sys.executable, "-c", REUSE_SCRIPT, str(tmp_path / "k.metal"), mode], env=env,
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
    assert run_reuse(kernel_dir, cache, "build") == str([float(i + 1) for i in range(8)])
    modules = sorted(p.name for p in (cache / "cpu").glob("*.so"))
    assert len(modules) == 1
    assert run_reuse(kernel_dir, cache, "forbid") == str([float(i + 1) for i in range(8)])
    assert sorted(p.name for p in (cache / "cpu").glob("*.so")) == modules


def test_changed_source_or_header_recompiles(kernel_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    run_reuse(kernel_dir, cache, "build")
    src = kernel_dir / "k.metal"
    src.write_text(src.read_text().replace("x[i] += ADD", "x[i] += 2.0f * ADD"))
    assert run_reuse(kernel_dir, cache, "build") == str([float(i + 2) for i in range(8)])
    (kernel_dir / "inc.h").write_text("constant float ADD = 10.0f;\n")
    assert run_reuse(kernel_dir, cache, "build") == str([float(i + 20) for i in range(8)])
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


# Runs the kernel of argv[1] on random data of edge sizes against numpy; with
# argv[2] == "forbid" the cache must serve it (compiling is an error).
SCRIPT = FORBID_PRELUDE + textwrap.dedent("""
    rng = np.random.default_rng()
    for n in (1, 1000, 4097):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.empty_like(x)
        lib.k(x, y)
        np.testing.assert_array_equal(y, x * np.float32(3))
    a = rng.standard_normal(513).astype(np.float32); b = rng.standard_normal(513).astype(np.float32)
    out = np.empty_like(a)
    mk.run("add_arrays", a, b, out)  # a bundled kernel too
    np.testing.assert_array_equal(out, a + b)
    print("ok")
""")

KERNEL = ("#include <metal_stdlib>\nusing namespace metal;\n"
          "kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
          "              uint i [[thread_position_in_grid]]) { y[i] = x[i] * 3.0f; }\n")


def run(kernel: Path, cache: Path, mode: str = "build", script: str = SCRIPT, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, str(kernel), mode], env=child_env(cache, **env),
                          capture_output=True, text=True, timeout=300)


def ok(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("kernel") / "k.metal"
    f.write_text(f"// {uuid.uuid4().hex}\n{KERNEL}")  # a source no other test has compiled
    return f


@pytest.fixture(scope="module")
def built(kernel, tmp_path_factory) -> Path:
    """A cache holding the kernel's entry (and the bundled kernel's), built once for the tests to damage."""
    cache = tmp_path_factory.mktemp("built") / "cache"
    ok(run(kernel, cache))
    return cache


@pytest.fixture
def cache(built, tmp_path) -> Path:
    """A copy of the built cache for one test."""
    return Path(shutil.copytree(built, tmp_path / "cache"))


def entry(cache: Path, kernel: Path) -> tuple[Path, Path]:
    """The manifest and module of the one entry built from ``kernel``."""
    manifests = [m for m in (cache / "cpu").glob("*.json")
                 if json.loads(m.read_text() or "{}").get("kernels") == ["k"]]
    assert len(manifests) == 1, manifests
    return manifests[0], manifests[0].parent / json.loads(manifests[0].read_text())["module"]


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # garbled: the size kept, bytes replaced at the start (the ELF/JSON header) and in the middle
        junk = bytearray(data)
        rnd = os.urandom(len(data))
        for start in (0, len(data) // 2):
            junk[start:start + 64] = rnd[start:start + 64]
        path.write_bytes(bytes(junk))


@pytest.mark.parametrize("how", ["truncated", "garbled", "empty"])
@pytest.mark.parametrize("part", ["module", "manifest"])
def test_a_damaged_entry_is_rebuilt_and_then_served(kernel, cache, part, how):
    manifest, module = entry(cache, kernel)
    good = module.read_bytes()
    damage(module if part == "module" else manifest, how)
    ok(run(kernel, cache))                   # rebuilt: no crash, no error
    manifest, module = entry(cache, kernel)
    assert len(module.read_bytes()) == len(good)
    ok(run(kernel, cache, "forbid"))         # and the repaired entry is served from then on


@pytest.mark.parametrize("bad", [[], {"module": "../../k.so", "sha256": "0" * 64, "deps": {}},
                                 {"module": 7, "sha256": None, "deps": []}, "text"])
def test_a_manifest_of_the_wrong_shape_is_rebuilt(kernel, cache, bad):
    manifest, _ = entry(cache, kernel)
    manifest.write_text(json.dumps(bad))
    ok(run(kernel, cache))
    ok(run(kernel, cache, "forbid"))


def test_a_module_that_verifies_but_does_not_load_is_rebuilt(kernel, cache):
    """A module whose digest matches its manifest, yet dlopen refuses it (built for another system)."""
    manifest, module = entry(cache, kernel)
    module.write_bytes(b"not a shared object\n" * 10)
    record = json.loads(manifest.read_text())
    record["sha256"] = hashlib.sha256(module.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(record))
    ok(run(kernel, cache))
    ok(run(kernel, cache, "forbid"))


# The checks of a read-only directory must hold for root too, who writes anywhere
# unless the capability to override permissions is dropped (Linux).
DROP_OVERRIDE = textwrap.dedent("""
    import ctypes, os
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)        # _LINUX_CAPABILITY_VERSION_3, this process
        caps = (ctypes.c_uint32 * 6)()                       # effective, permitted, inheritable; twice
        assert libc.capget(header, caps) == 0
        caps[0] &= ~(1 << 1); caps[1] &= ~(1 << 1)           # CAP_DAC_OVERRIDE
        assert libc.capset(header, caps) == 0, ctypes.get_errno()
""")


def unwritable(script: str) -> str:
    return DROP_OVERRIDE + script


def warnings_of(p: subprocess.CompletedProcess) -> list[str]:
    return [line for line in p.stderr.splitlines() if "MetalkitWarning" in line]


def cache_variants(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory\n")
    read_only = tmp_path / "read_only"
    (read_only / "cpu").mkdir(parents=True)
    read_only.chmod(0o555)
    (read_only / "cpu").chmod(0o555)
    return {"a file": a_file, "under a file": a_file / "metalkit", "read-only": read_only}


@pytest.mark.skipif(sys.platform != "linux" and os.geteuid() == 0, reason="root bypasses permissions off Linux")
@pytest.mark.parametrize("kind", ["a file", "under a file", "read-only"])
def test_an_unusable_cache_directory_falls_back_to_a_private_one(kernel, tmp_path, kind):
    cache = cache_variants(tmp_path)[kind]
    before = sorted(p.name for p in cache.rglob("*")) if cache.is_dir() else None
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        p = run(kernel, cache, script=unwritable(SCRIPT), TMPDIR=tmp)
    finally:
        for d in (cache, cache / "cpu"):
            if d.is_dir():
                d.chmod(0o755)
    ok(p)
    warned = warnings_of(p)
    assert len(warned) == 1 and str(cache) in warned[0] and "METALKIT_CACHE_DIR" in warned[0], p.stderr
    assert warned[0].startswith("<string>:"), "the warning names the user's call"
    if before is not None:
        assert sorted(q.name for q in cache.rglob("*")) == before  # nothing written where it could not be
    if kind == "a file":
        assert cache.read_text() == "not a directory\n"
    assert list(tmp.iterdir()) == []  # the private cache is removed at exit


@pytest.mark.skipif(sys.platform != "linux" and os.geteuid() == 0, reason="root bypasses permissions off Linux")
def test_a_cache_that_turns_read_only_mid_process_falls_back(kernel, tmp_path):
    script = textwrap.dedent("""
        import os, sys, uuid, numpy as np, metalkit as mk
        from pathlib import Path
        cpu = Path(os.environ["METALKIT_CACHE_DIR"]) / "cpu"
        src = open(sys.argv[1]).read()
        x = np.arange(64, dtype=np.float32); y = np.empty_like(x)
        mk.compile(src).k(x, y)
        assert any(cpu.glob("*.so"))
        cpu.chmod(0o555)
        mk.compile(src.replace("// ", "// another ")).k(x, y)
        np.testing.assert_array_equal(y, x * np.float32(3))
        print("ok")
    """)
    cache = tmp_path / "cache"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        p = run(kernel, cache, script=unwritable(script), TMPDIR=tmp)
    finally:
        (cache / "cpu").chmod(0o755)
    ok(p)
    assert len(warnings_of(p)) == 1, p.stderr
    assert len(list((cache / "cpu").glob("*.so"))) == 1
    assert list(tmp.iterdir()) == []


def test_no_writable_directory_at_all_is_a_cache_error(kernel, tmp_path):
    script = textwrap.dedent("""
        import sys, tempfile, metalkit as mk
        tempfile.tempdir = sys.argv[1] + ".missing/tmp"   # nowhere for the private cache either
        try:
            mk.compile(open(sys.argv[1]).read())
        except mk.CacheError as e:
            assert isinstance(e, mk.MetalkitError) and isinstance(e, OSError)
            print(e)
    """)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    p = run(kernel, a_file, script=script)
    assert p.returncode == 0, p.stderr
    assert str(a_file) in p.stdout and "set METALKIT_CACHE_DIR to a writable directory" in p.stdout
    assert len(warnings_of(p)) == 0


@pytest.mark.skipif(sys.platform != "linux" and os.geteuid() == 0, reason="root bypasses permissions off Linux")
def test_a_private_cache_that_refuses_writes_too_is_a_cache_error(kernel, tmp_path):
    script = textwrap.dedent("""
        import os, sys, metalkit as mk
        from pathlib import Path
        from metalkit.msl import cache
        src = open(sys.argv[1]).read()
        private = cache._private()                      # the fallback, made now, then made read-only
        (private / "cpu").chmod(0o555)
        (Path(os.environ["METALKIT_CACHE_DIR"]) / "cpu").mkdir(parents=True)
        (Path(os.environ["METALKIT_CACHE_DIR"]) / "cpu").chmod(0o555)
        try:
            mk.compile(src)
        except mk.CacheError as e:
            print(e)
        (private / "cpu").chmod(0o755)
    """)
    cache = tmp_path / "cache"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        p = run(kernel, cache, script=unwritable(script), TMPDIR=tmp)
    finally:
        (cache / "cpu").chmod(0o755)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"cannot write compiled kernels to {tmp}") and "METALKIT_CACHE_DIR" in p.stdout, p.stdout
    assert len(warnings_of(p)) == 1  # the fall-back was announced
    assert list(tmp.iterdir()) == []


def test_capability_drop_makes_a_read_only_directory_unwritable(tmp_path):
    """The read-only cases above are real only if the child cannot write there."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        p = subprocess.run([sys.executable, "-c", unwritable(f"open({str(d / 'f')!r}, 'w')")], capture_output=True,
                           text=True, timeout=60)
    finally:
        d.chmod(0o755)
    assert p.returncode != 0 and "PermissionError" in p.stderr
    assert not (d / "f").exists()
