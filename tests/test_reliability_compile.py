"""Compiling reliably: Ctrl-C ends the whole compiler, the compiler's caches stay in
metalkit's cache directory, diagnostics quote and point into the user's own lines, and a
wrong compiler is named with what is needed instead."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, child_env


@pytest.fixture(autouse=True)
def cpu():
    """The pre-pass, its diagnostics and the compiler are the CPU backend's."""
    mk.use("cpu")

# ------------------------------------------------------------------ Ctrl-C

# Each of the A*B instantiations calls two others: seconds of -O2 per few dozen.
SLOW = """
#include <metal_stdlib>
using namespace metal;
template <int A, int B> struct S { static float f(float x) { return S<A - 1, B>::f(x) * 0.75f + S<A, B - 1>::f(x + 1.0f); } };
template <int B> struct S<0, B> { static float f(float x) { return x; } };
template <int A> struct S<A, 0> { static float f(float x) { return x * 0.5f; } };
template <> struct S<0, 0> { static float f(float x) { return x; } };
kernel void slow(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = S<200, 200>::f(x[i]); }
"""


def processes() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (parent pid, process group, state, command line), for every process."""
    out = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,ppid=,pgid=,stat=,args="], capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        pid, ppid, pgid, state, *args = line.split(None, 4)
        table[int(pid)] = (int(ppid), int(pgid), state, args[0] if args else "")
    return table


def descendants(root: int, table: dict) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, *_) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int], table: dict) -> set[int]:
    return {p for p in pids if p in table and not table[p][2].startswith("Z")}  # zombies are dead


def test_ctrl_c_during_a_compile_ends_every_compiler_process(tmp_path):
    (tmp_path / "slow.metal").write_text(f"// {uuid.uuid4().hex}\n{SLOW}")
    script = "import sys, metalkit as mk\nmk.load(sys.argv[1])\nprint('finished')\n"
    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "slow.metal")], env=child_env(cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until the optimising compile runs, with its own child process (zig c++ -> zig clang,
        # clang++ -> clang -cc1): the one that used to outlive an interrupt. Not the precompiled
        # header's build before it (c++-header), which is over in a moment.
        deadline = time.monotonic() + 120
        while True:
            table = processes()
            compiling = [p for p in descendants(child.pid, table)
                         if "-O2" in table[p][3] and "c++-header" not in table[p][3]]
            leader = next((p for p in compiling if table[p][0] == child.pid), None)
            if leader is not None and descendants(leader, table):
                break
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the compile never started"
            time.sleep(0.1)
        time.sleep(0.5)
        table = processes()
        compiler = {leader} | descendants(leader, table)
        assert table[leader][1] == leader, "the compiler runs in a process group of its own"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    deadline = time.monotonic() + 5
    while True:  # SIGKILL is not instant
        table = processes()
        survivors = alive(compiler, table) | alive({p for p, row in table.items() if row[1] == leader}, table)
        if not survivors or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in survivors:  # don't leave them running if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not survivors, {p: table[p][3][:120] for p in survivors}
    assert not list((cache / "cpu").glob("build-*")), "the interrupted build's files are removed"


# ------------------------------------------------------------------ toolchain caches

def test_a_compile_writes_nothing_outside_the_cache_directory(tmp_path):
    home, tmp, cache = tmp_path / "home", tmp_path / "tmp", tmp_path / "cache"
    home.mkdir()
    tmp.mkdir()
    env = child_env(cache, HOME=home, TMPDIR=tmp)
    for var in ("XDG_CACHE_HOME", "ZIG_GLOBAL_CACHE_DIR", "ZIG_LOCAL_CACHE_DIR"):
        env.pop(var, None)  # a fresh user: nothing says where caches go
    script = textwrap.dedent(f"""
        import numpy as np, metalkit as mk
        from metalkit.msl import toolchain
        lib = mk.compile('''// {uuid.uuid4().hex}
        #include <metal_stdlib>
        kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{ x[i] = x[i] * 2.0f; }}
        ''')
        x = np.random.default_rng().standard_normal(1000).astype(np.float32); y = x.copy()
        lib.k(y)
        np.testing.assert_array_equal(y, x * np.float32(2))
        print(toolchain.find().kind)
    """)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert list(home.rglob("*")) == []
    if sys.platform == "linux":  # (macOS's xcrun, which runs Apple's clang, keeps a lookup cache in TMPDIR)
        assert list(tmp.rglob("*")) == []
    assert any((cache / "cpu").glob("*.so"))
    if p.stdout.split()[-1] == "zig":
        assert any((cache / "zig").rglob("*")), "zig's cache is kept in metalkit's"


# ------------------------------------------------------------------ diagnostics

def compile_error(src: str) -> mk.CompileError:
    with pytest.raises(mk.CompileError) as e:
        mk.compile(f"// {uuid.uuid4().hex}\n" + src, filename="user.metal")
    return e.value


def quoted(err: mk.CompileError) -> list[str]:
    return [line.split("| ", 1)[1] for line in err.log.splitlines() if line.strip()[:1].isdigit() and "| " in line]


def caret(err: mk.CompileError) -> int:
    """Where the first caret points, as an index into the quoted line (tabs under tabs)."""
    line = next(ln for ln in err.log.splitlines() if ln.strip().startswith("| "))
    under = line.split("| ", 1)[1]
    assert set(under[:under.index("^")]) <= {" ", "\t"}
    return under.index("^")


def test_an_error_on_a_line_with_attributes_quotes_the_users_line():
    line = "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = nope_x; }"
    err = compile_error(HEADER + line + "\n")
    assert (err.lineno, err.text) == (4, line)
    assert err.offset == line.index("nope_x") + 1
    assert quoted(err) == [line]
    assert caret(err) == line.index("nope_x")


@pytest.mark.parametrize("line,culprit", [
    # the pre-pass writes `static thread_local` and a size check into this line
    ("    threadgroup float t[4]; t[l] = nope_t;", "nope_t"),
    # an `f` added to an unsuffixed literal, with a tab before it
    ("\tx[l] = fma(1.5, x[l], nope_f);", "nope_f"),
])
def test_an_error_on_a_rewritten_line_points_into_the_users_line(line, culprit):
    src = HEADER + ("kernel void k(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {\n"
                    f"{line}\n}}\n")
    err = compile_error(src)
    assert (err.lineno, err.text) == (5, line)
    assert err.offset == line.index(culprit) + 1
    assert quoted(err) == [line] and caret(err) == line.index(culprit)


@pytest.mark.parametrize("decl,size", [
    ("    threadgroup float tile[9000];", 36000),
    ("    threadgroup float a[4000]; threadgroup float4 b[1100];", 33600),
    ("    if (l == 0) { threadgroup float c[8200]; c[l] = 1; x[l] = c[l]; }", 32800),
])
def test_the_threadgroup_memory_limit_points_at_the_declaration(decl, size):
    src = HEADER + ("kernel void big(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {\n"
                    f"{decl}\n    x[l] = 0;\n}}\n")
    err = compile_error(src)
    assert (err.lineno, err.text) == (5, decl)
    assert err.offset == decl.rindex("threadgroup") + 1 and err.offset <= len(decl)
    assert f"threadgroup memory declared in this kernel: {size} bytes, more than the 32 KiB" in err.msg
    assert "threadgroup_memory=" in err.msg  # what to do instead
    assert "__mk_" not in err.log and "thread_local" not in err.log and "static_assert" not in err.log
    assert quoted(err) == [decl] and caret(err) == decl.rindex("threadgroup")


def test_the_threadgroup_memory_limit_of_a_template_instantiation():
    src = HEADER + textwrap.dedent("""\
        template <typename T>
        kernel void tk(device T* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
            threadgroup T tile[9000];
            tile[l] = x[l];
            x[l] = tile[0];
        }
        template [[host_name("tk_half")]] kernel void tk<half>(device half*, uint);
        template [[host_name("tk_float")]] kernel void tk<float>(device float*, uint);
        """)
    err = compile_error(src)
    assert (err.lineno, err.offset, err.text) == (6, 5, "    threadgroup T tile[9000];")
    assert "36000 bytes" in err.msg and "__mk_" not in err.log
    assert "in instantiation of function template specialization 'tk<float>'" in err.log


def test_an_error_in_an_included_header_quotes_the_header(tmp_path):
    (tmp_path / "h.h").write_text("inline float helper(float v) {\n\treturn v + nope_h;\n}\n")
    src = HEADER + '#include "h.h"\n' + \
        "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = helper(x[i]); }\n"
    with pytest.raises(mk.CompileError) as e:
        mk.compile(f"// {uuid.uuid4().hex}\n" + src, include_dirs=[tmp_path])
    line = "\treturn v + nope_h;"
    assert e.value.filename.endswith("h.h") and (e.value.lineno, e.value.offset) == (2, line.index("nope_h") + 1)
    assert quoted(e.value) == [line]


# ------------------------------------------------------------------ a wrong compiler

def shim(folder: Path, name: str, version: str, error: str) -> Path:
    """A stand-in compiler: prints ``version`` for --version, else fails with ``error``."""
    exe = folder / name
    exe.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{version}"; exit 0; fi\n'
                   f'for i in 1 2 3 4 5 6 7 8; do echo "{error}" >&2; done\nexit 1\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


WRONG = {
    "gcc": (("g++", "g++ (GCC) 12.2.0", "g++: error: unrecognized command-line option '-fdeclspec'"),
            "it is not clang (its --version says 'g++ (GCC) 12.2.0')"),
    "old clang": (("clang++", "clang version 14.0.6", "error: unknown argument: '-fbfloat16-excess-precision=none'"),
                  "clang version 14.0.6 is too old (a test compile failed: error: unknown argument: "
                  "'-fbfloat16-excess-precision=none')"),
}


@pytest.mark.parametrize("which", sorted(WRONG))
def test_a_wrong_compiler_is_named_with_what_is_needed(tmp_path, monkeypatch, which):
    (name, version, error), problem = WRONG[which]
    exe = shim(tmp_path, name, version, error)
    monkeypatch.setenv("METALKIT_CXX", str(exe))
    with pytest.raises(mk.CompileError) as e:
        mk.compile(HEADER + "kernel void k(device float* x [[buffer(0)]]) {}\n")
    msg = str(e.value)
    assert msg == (f"METALKIT_CXX={str(exe)!r} ({exe}) cannot build metalkit kernels: {problem}. metalkit needs "
                   "clang 17 or newer: set METALKIT_CXX to such a clang++, or unset it to use the clang of the ziglang "
                   "wheel (pip install ziglang)")


@pytest.mark.parametrize("cxx", [c for c in ("g++", "/bin/false", "/bin/true") if shutil.which(c)])
def test_real_programs_that_are_not_clang_are_refused(monkeypatch, tmp_path, cxx):
    monkeypatch.setenv("METALKIT_CXX", cxx)
    monkeypatch.setenv("METALKIT_CACHE_DIR", str(tmp_path))  # no verdict remembered from an earlier run
    with pytest.raises(mk.CompileError, match=r"cannot build metalkit kernels: it is not clang .*clang 17 or newer.*"
                                              r"ziglang") as e:
        mk.compile(HEADER + "kernel void k(device float* x [[buffer(0)]]) {}\n")
    assert "\n" not in str(e.value) and repr(cxx) in str(e.value)


@pytest.mark.parametrize("cxx", ["g++", "/bin/false"])
def test_metalkit_info_with_a_wrong_compiler_prints_one_line(tmp_path, cxx):
    exe = shim(tmp_path, cxx, "g++ (GCC) 12.2.0", "g++: error: unrecognized option") if cxx == "g++" else cxx
    p = subprocess.run([sys.executable, "-m", "metalkit", "info"], env=child_env(tmp_path / "cache", METALKIT_CXX=exe),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("python -m metalkit info: METALKIT_CXX=") and "clang 17 or newer" in p.stderr
    assert "backend:  cpu" in p.stdout


def test_a_working_compile_after_a_wrong_compiler(monkeypatch, tmp_path):
    """The error leaves nothing behind: unsetting METALKIT_CXX compiles again."""
    monkeypatch.setenv("METALKIT_CXX", str(shim(tmp_path, "g++", "g++ (GCC) 12.2.0", "error")))
    src = HEADER + (f"// {uuid.uuid4().hex}\n"
                    "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += 1.0f; }\n")
    with pytest.raises(mk.CompileError):
        mk.compile(src)
    monkeypatch.delenv("METALKIT_CXX")
    x = np.random.default_rng().standard_normal(257).astype(np.float32)
    y = x.copy()
    mk.compile(src).k(y)
    np.testing.assert_array_equal(y, x + np.float32(1))
