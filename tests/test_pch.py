"""The precompiled header of metalkit's <metal_stdlib>: modules built against it compute what
they did without it, a damaged or refused header is rebuilt or done without, never a failure,
and two processes building it at once leave one whole header. Runs that share a cache
directory are child processes."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

import metalkit as mk
from conftest import child_env
from metalkit.msl import cache, pch, stdlib_stubs, toolchain

# Compiles a kernel no other run has compiled and checks it against numpy on edge sizes.
SCRIPT = textwrap.dedent("""
    import sys, uuid, numpy as np, metalkit as mk
    src = ("#include <metal_stdlib>\\nusing namespace metal;\\n"
           f"// {uuid.uuid4().hex}\\n"
           "kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\\n"
           "              uint i [[thread_position_in_grid]]) { y[i] = metal::exp2(x[i]) * 3.0f + 1.0f; }\\n")
    lib = mk.compile(src)
    rng = np.random.default_rng()
    for n in (1, 63, 4097):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.empty_like(x)
        lib.k(x, y)
        np.testing.assert_allclose(y, np.exp2(x) * np.float32(3) + np.float32(1), rtol=2e-6)
    print("ok")
""")


def run(cache_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT], env=child_env(cache_dir), capture_output=True, text=True,
                          timeout=300)


def ok(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


def headers(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "cpu" / "pch").glob("*.pch"))


def intact(pch_file: Path) -> bool:
    record = json.loads(pch_file.with_suffix(".json").read_text())
    return record["sha256"] == cache.file_digest(pch_file) and pch_file.with_suffix(".h").is_file()


def test_a_fresh_cache_builds_the_header_once_and_later_processes_use_it(tmp_path):
    ok(run(tmp_path / "cache"))
    [first] = headers(tmp_path / "cache")
    assert intact(first)
    stamp = first.stat().st_mtime_ns
    ok(run(tmp_path / "cache"))
    assert headers(tmp_path / "cache") == [first] and first.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("damage", ["truncated", "garbled", "empty", "no record", "bad record", "no source",
                                    "changed source"])
def test_a_damaged_header_is_rebuilt(tmp_path, damage):
    ok(run(tmp_path / "cache"))
    [h] = headers(tmp_path / "cache")
    data = h.read_bytes()
    if damage == "truncated":
        h.write_bytes(data[:len(data) // 3])
    elif damage == "garbled":
        h.write_bytes(data[:1000] + bytes(b ^ 0x5A for b in data[1000:5000]) + data[5000:])
    elif damage == "empty":
        h.write_bytes(b"")
    elif damage == "no record":
        h.with_suffix(".json").unlink()
    elif damage == "bad record":
        h.with_suffix(".json").write_text("{not json")
    elif damage == "no source":
        h.with_suffix(".h").unlink()
    else:
        src = h.with_suffix(".h")
        src.write_text(src.read_text().replace("namespace metal", "namespace latem", 1))
    ok(run(tmp_path / "cache"))
    assert headers(tmp_path / "cache") == [h] and intact(h)


@pytest.mark.parametrize("damage", ["macros", "prefix", "stub", "record"])
def test_damaged_stand_ins_are_recorded_again(tmp_path, damage):
    ok(run(tmp_path / "cache"))
    [folder] = (tmp_path / "cache" / "cpu" / "pch").glob("*.pp")
    if damage == "macros":
        (folder / "macros.h").write_text("#define FLT_MAX 0\n")
    elif damage == "prefix":
        (folder / "prefix.ii").write_bytes((folder / "prefix.ii").read_bytes()[:1000])
    elif damage == "stub":
        (folder / "include" / "metal_stdlib").write_text("#error damaged\n")
    else:
        (folder / "record.json").write_text("")
    ok(run(tmp_path / "cache"))
    assert stdlib_stubs._verified(folder) is not None


def test_a_header_clang_rejects_is_done_without_and_removed(tmp_path):
    """A header whose record matches its bytes, but that clang cannot read: the module is built
    from the whole text, and the header is dropped so that the next process builds it again."""
    ok(run(tmp_path / "cache"))
    [h] = headers(tmp_path / "cache")
    h.write_bytes(b"CPCH" + bytes(range(256)) * 64)
    h.with_suffix(".json").write_text(json.dumps({"sha256": cache.file_digest(h)}))
    ok(run(tmp_path / "cache"))
    assert not h.exists()
    ok(run(tmp_path / "cache"))
    assert headers(tmp_path / "cache") == [h] and intact(h)


def test_two_processes_building_the_header_at_once_leave_one_whole(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env=child_env(tmp_path / "cache"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        ok(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    [h] = headers(tmp_path / "cache")
    assert intact(h)
    assert not [f for f in h.parent.iterdir() if f.name.startswith(("build-", "write-"))]


def fresh_kernel_runs(rng, mul: int, add: int, n: int) -> None:
    """Compiles a kernel no run has seen (y = x * mul + add) and checks it on n random values."""
    lib = mk.compile("#include <metal_stdlib>\nusing namespace metal;\n"
                     f"// {uuid.uuid4().hex}\n"
                     "kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
                     f"              uint i [[thread_position_in_grid]]) {{ y[i] = x[i] * {mul}.0f + {add}.0f; }}\n")
    x = rng.standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    lib.k(x, y)
    np.testing.assert_array_equal(y, x * np.float32(mul) + np.float32(add))


def test_a_compiler_that_cannot_precompile_builds_without(monkeypatch, rng):
    key = f"test-{uuid.uuid4().hex}"  # a header no run has built
    monkeypatch.setattr(pch, "_key", lambda tc, fast_math, prefix, checked: key)
    monkeypatch.setattr(toolchain.Toolchain, "precompile",
                        lambda self, header, output, fast_math, checked=False:
                        self._codegen(header, fast_math, checked) +
                        ["-fno-such-flag-anywhere", "-x", "c++-header", header, "-o", output])
    calls = []
    real = pch._build
    monkeypatch.setattr(pch, "_build", lambda *a: calls.append(a) or real(*a))
    for add in (-2, -3):
        fresh_kernel_runs(rng, 4, add, 1001)
    assert len(calls) == 1  # refused once, not tried again for every module
    assert not (cache.cache_dir() / "pch" / f"{key}.pch").exists()
    (cache.cache_dir() / "pch" / f"{key}.h").unlink()


BAD = ("#include <metal_stdlib>\nusing namespace metal;\n"
       "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
       "    float2 v = x[i];\n"
       "    x[i] = v.x + undefined_name;\n"
       "}\n")


def test_errors_read_the_same_with_and_without_the_header(monkeypatch):
    def error(tag: str) -> mk.CompileError:
        with pytest.raises(mk.CompileError) as e:
            mk.compile(f"// {tag} {uuid.uuid4().hex}\n" + BAD, filename="bad.metal")
        return e.value

    with_header = error("a")
    monkeypatch.setattr(pch, "ENABLED", False)
    without = error("a")
    assert (with_header.lineno, with_header.offset, with_header.msg) == (without.lineno, without.offset, without.msg)
    assert with_header.lineno == 6 and "undefined_name" in with_header.msg


def test_split_finds_the_headers_forced_before_the_source():
    text = ('# 1 "/tmp/b/source.metal"\n# 1 "<built-in>" 1\n# 1 "/inc/metal_stdlib" 1\nint h;\n'
            '# 2 "<built-in>" 2\n# 1 "/tmp/b/source.metal" 2\n# 1 "u.metal"\nint u;\n')
    prefix, rest = pch.split(text, "/tmp/b/source.metal")
    assert prefix == '# 1 "<built-in>" 1\n# 1 "/inc/metal_stdlib" 1\nint h;\n# 2 "<built-in>" 2\n'
    assert rest == '# 1 "/tmp/b/source.metal"\n# 1 "u.metal"\nint u;\n'
    assert pch.split(text, "/tmp/other.metal") is None and pch.head(text, "/tmp/other.metal") == 0


TRICKY = """#include <metal_stdlib>
#include <metal_stdlib>
using namespace metal;
#if defined(FLT_MAX) && __METAL_VERSION__ >= 300 && defined(__METALKIT_CPU__)
#define LIMIT FLT_MAX
#endif
#undef M_PI_F
#define M_PI_F 3.0f
#define KERNEL(name, op) kernel void name(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) \\
    { x[i] = x[i] op LIMIT + M_PI_F + INFINITY + HALF_MAX + __LINE__; }
KERNEL(k_add, +)
KERNEL(k_mul, *)
#include "mine.h"
constant int counter = __COUNTER__ + MINE;
"""


def sources(tmp_path: Path) -> list[tuple[str, list[str]]]:
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mine.h").write_text("#pragma once\n#define MINE (FLT_MIN_EXP + 1)\nusing metal::half;\n")
    # The bundled kernels include their folder's headers, as metalkit.load finds them.
    found = [(p.read_text(), [str(root / "kernels")]) for p in sorted((root / "kernels").glob("*.metal"))]
    found += [(p.read_text(), []) for p in sorted((root / "bench").glob("*.metal"))]
    return found + [(TRICKY, [str(tmp_path / "inc")])]


def test_preprocessing_through_the_stand_ins_gives_the_full_text(tmp_path):
    """What clang -E makes of a source through stdlib_stubs is byte for byte what it makes in full."""
    from metalkit.msl import build as build_mod
    tc = toolchain.find()
    stubs = stdlib_stubs.get(tc)
    assert stubs is not None
    for i, (source, dirs) in enumerate(sources(tmp_path)):
        src = tmp_path / f"s{i}.metal"
        src.write_text('#line 1 "user.metal"\n' + source)
        full = toolchain.run(tc.preprocess(str(src), dirs))
        fast = toolchain.run(tc.preprocess(str(src), dirs, stubs))
        assert full.returncode == 0 and fast.returncode == 0, full.stderr + fast.stderr
        assert stubs.restore(fast.stdout, str(src)) == full.stdout, source[:200]
        opts = build_mod.Options.of(source, "user.metal", dirs)
        assert build_mod._preprocess(tc, opts, str(src)) == full.stdout


def test_a_header_the_stand_ins_do_not_cover_is_preprocessed_in_full(tmp_path, rng):
    tc = toolchain.find()
    stubs = stdlib_stubs.get(tc)
    src = tmp_path / "s.metal"
    src.write_text("#include <metal_math>\n#include <metalkit/launch.h>\n")
    fast = toolchain.run(tc.preprocess(str(src), [], stubs))
    assert fast.returncode == 0 and stubs.restore(fast.stdout, str(src)) is None
    lib = mk.compile(f"// {uuid.uuid4().hex}\n#include <metal_math>\n#include <metal_stdlib>\n"
                     "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]])"
                     " { x[i] = metal::fabs(x[i]) + FLT_EPSILON; }\n")
    x = rng.standard_normal(333).astype(np.float32)
    ref = np.abs(x) + np.finfo(np.float32).eps
    lib.k(x)
    np.testing.assert_array_equal(x, ref)


def zig_record(cache_dir: Path) -> Path:
    [record] = (cache_dir / "cpu" / "pch").glob("*.zig.json")
    return record


needs_zig = pytest.mark.skipif(toolchain.find().kind != "zig", reason="the commands are zig's (no zig here)")


@needs_zig
def test_zigs_commands_are_recorded_and_serve_later_processes(tmp_path):
    ok(run(tmp_path / "cache"))
    record = zig_record(tmp_path / "cache")
    found = json.loads(record.read_text())
    assert "-cc1" in found["compile"] and "{source}" in found["compile"] and "{object}" in found["compile"]
    assert "ld.lld" in found["link"] and "{output}" in found["link"] and "{object}" in found["link"]
    stamp = record.stat().st_mtime_ns
    ok(run(tmp_path / "cache"))
    assert record.stat().st_mtime_ns == stamp


@needs_zig
@pytest.mark.parametrize("damage", ["garbled", "failing"])
def test_a_damaged_or_failing_record_of_zigs_commands_is_done_without(tmp_path, damage):
    ok(run(tmp_path / "cache"))
    record = zig_record(tmp_path / "cache")
    if damage == "garbled":
        record.write_text('{"compile": [1, 2')
    else:  # well formed, but its compile fails: the module is built by zig c++, the record dropped
        found = json.loads(record.read_text())
        found["compile"] = found["compile"] + ["-no-such-cc1-option"]
        record.write_text(json.dumps(found))
    ok(run(tmp_path / "cache"))
    if damage == "garbled":  # unreadable: read again from zig c++ -v and rewritten
        assert "{source}" in json.loads(record.read_text())["compile"]
    else:
        assert not record.exists()
        ok(run(tmp_path / "cache"))
        assert "-no-such-cc1-option" not in json.loads(zig_record(tmp_path / "cache").read_text())["compile"]


@needs_zig
def test_commands_that_do_not_reproduce_zigs_output_are_not_kept_nor_read_again(monkeypatch, rng):
    from metalkit.msl import zig_direct
    key = f"test-{uuid.uuid4().hex}"  # a header of its own, with no commands recorded
    monkeypatch.setattr(pch, "_key", lambda tc, fast_math, prefix, checked: key)
    monkeypatch.setattr(zig_direct, "_reproduces", lambda found, source, output: False)
    calls = []
    real = zig_direct.compile_and_record
    monkeypatch.setattr(zig_direct, "compile_and_record", lambda *a: calls.append(a) or real(*a))
    for add in (5, 6):
        fresh_kernel_runs(rng, 8, add, 517)
    assert len(calls) == 1
    assert not (cache.cache_dir() / "pch" / f"{key}.zig.json").exists()
    for suffix in (".pch", ".json", ".h"):
        (cache.cache_dir() / "pch" / f"{key}{suffix}").unlink()
