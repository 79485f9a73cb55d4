"""What a compile says while it runs: a status line on a terminal for a long compile (one plain
line, once, elsewhere), and with METALKIT_VERBOSE=1 the compiler's command lines and the kept input of a
failing build. Verbose runs are child processes (the variable is the user's)."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np

import metalkit as mk
from conftest import child_env
from metalkit import _progress

from metalkit.msl import build as build_mod


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def kernel_source(body: str = "y[i] = x[i] * 2.0f + 1.0f;") -> str:
    return ("#include <metal_stdlib>\nusing namespace metal;\n"
            f"// {uuid.uuid4().hex}\n"
            "kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
            f"                  uint i [[thread_position_in_grid]]) {{ {body} }}\n")


def test_a_long_step_shows_its_status_on_a_terminal_and_erases_it():
    term = FakeTerminal()
    with _progress.Status("compiling k.metal", stream=term, delay=0.05):
        time.sleep(0.5)
    out = term.getvalue()
    shown = re.findall(r"\rcompiling k\.metal\.\.\. (\d+\.\d) s", out)
    assert len(shown) >= 2 and float(shown[-1]) >= 0.3, out  # redrawn with the time so far
    assert out.endswith("\r") and out.rsplit("\r", 2)[-2].strip() == ""  # the last draw is blanked


def test_a_short_step_and_a_pipe_show_nothing():
    term = FakeTerminal()
    with _progress.Status("compiling k.metal", stream=term, delay=5):
        pass
    pipe = io.StringIO()
    with _progress.Status("compiling k.metal", stream=pipe, delay=0):
        time.sleep(0.3)
    assert term.getvalue() == "" and pipe.getvalue() == ""


def test_a_long_step_off_a_terminal_is_said_once(monkeypatch):
    monkeypatch.setattr(_progress, "_noted", type(_progress._noted)())  # as in a new process
    pipe = io.StringIO()
    for _ in range(2):
        with _progress.Status("compiling k.metal", stream=pipe, delay=0, note_after=0.05):
            time.sleep(0.3)
    lines = pipe.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metalkit: compiling k.metal has taken more than 0.05 s ("), lines
    assert "\r" not in pipe.getvalue()
    quiet = io.StringIO()  # a step shorter than that, or one whose caller turned it off, says nothing
    monkeypatch.setattr(_progress, "_noted", type(_progress._noted)())
    with _progress.Status("compiling k.metal", stream=quiet, note_after=5):
        pass
    with _progress.Status("compiling k.metal", stream=quiet, enabled=False, note_after=0):
        time.sleep(0.1)
    assert quiet.getvalue() == ""


def test_a_compile_on_a_terminal_names_the_file_and_kernel(monkeypatch, rng):
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(build_mod, "STATUS_AFTER", 0.0)
    lib = mk.compile(kernel_source(), filename="twice.metal")
    x = rng.standard_normal(777).astype(np.float32)
    y = np.empty_like(x)
    lib.twice(x, y)
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
    out = term.getvalue()
    assert "\rcompiling twice.metal... " in out and out.endswith("\r"), out


def test_a_kernel_compiled_on_first_use_is_named_in_its_status(monkeypatch, rng):
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(build_mod, "STATUS_AFTER", 0.0)
    tag = uuid.uuid4().hex
    src = "#include <metal_stdlib>\nusing namespace metal;\n" + "".join(
        f"kernel void k{n}_{tag}(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{ x[i] += {n}.0f; }}\n"
        for n in range(build_mod.EAGER_KERNELS + 1))
    lib = mk.compile(src, filename="many.metal")
    x = rng.standard_normal(100).astype(np.float32)
    ref = x + np.float32(3)
    lib[f"k3_{tag}"](x)
    np.testing.assert_array_equal(x, ref)
    out = term.getvalue()
    assert "\rreading many.metal... " in out and f"\rcompiling many.metal (k3_{tag})... " in out, out


def test_a_compile_into_a_pipe_prints_nothing(tmp_path):
    # (A compile that takes long is said once even into a pipe: test_a_long_step_off_a_terminal_is_said_once.)
    script = ("import metalkit as mk, metalkit._progress\nmk._progress.NOTE_AFTER = 600\n"
              f"mk.compile({kernel_source()!r})\nprint('ok')\n")
    p = subprocess.run([sys.executable, "-c", script], env=child_env(tmp_path / "cache"), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok" and p.stderr == "", p.stderr


VERBOSE = textwrap.dedent("""
    import sys, numpy as np, metalkit as mk
    try:
        lib = mk.compile(sys.argv[1], filename="user.metal")
    except mk.CompileError as e:
        print("CompileError:", e.msg)
        raise SystemExit(0)
    x = np.arange(5, dtype=np.float32); y = np.empty_like(x)
    lib.twice(x, y)
    assert (y == x * 2 + 1).all()
    print("ok")
""")


def verbose_run(source: str, cache: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", VERBOSE, source], env=child_env(cache, **env), capture_output=True,
                          text=True, timeout=300)


def test_verbose_prints_each_compiler_command_line(tmp_path):
    p = verbose_run(kernel_source(), tmp_path / "cache", METALKIT_VERBOSE="1")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    commands = [line for line in p.stderr.splitlines() if line.startswith("metalkit: ")]
    assert any(" -E " in c for c in commands), p.stderr          # the preprocessor
    assert any(" -shared " in c for c in commands), p.stderr     # the module's compile
    assert any("c++-header" in c for c in commands), p.stderr    # the precompiled header, built in a fresh cache
    quiet = verbose_run(kernel_source(), tmp_path / "cache")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "ok" and quiet.stderr == "", quiet.stderr


def test_verbose_keeps_the_generated_cpp_of_a_failing_build(tmp_path):
    p = verbose_run(kernel_source("y[i] = x[i] * no_such_name;"), tmp_path / "cache", METALKIT_VERBOSE="1")
    assert p.returncode == 0 and p.stdout.startswith("CompileError:"), p.stdout + p.stderr
    m = re.search(r"kept in (\S+\.cpp) \(METALKIT_VERBOSE\)", p.stdout)
    assert m, p.stdout
    kept = Path(m.group(1))
    try:
        assert f"kept in {kept}" in p.stderr
        text = kept.read_text()
        assert "no_such_name" in text and "metalkit_module" in text  # the pre-passed kernel and its launchers
        assert "namespace metal" in text  # the whole text (the headers' too), compilable on its own
    finally:
        kept.unlink()
    quiet = verbose_run(kernel_source("y[i] = x[i] * no_such_name;"), tmp_path / "cache")
    assert "kept in" not in quiet.stdout + quiet.stderr and "no_such_name" in quiet.stdout


def test_verbose_keeps_the_source_of_a_failing_preprocess(tmp_path):
    source = kernel_source().replace("#include <metal_stdlib>", '#include "missing_header.h"')
    p = verbose_run(source, tmp_path / "cache", METALKIT_VERBOSE="1")
    m = re.search(r"kept in (\S+\.metal) \(METALKIT_VERBOSE\)", p.stdout)
    assert m and "missing_header.h" in p.stdout, p.stdout + p.stderr
    kept = Path(m.group(1))
    try:
        assert '#include "missing_header.h"' in kept.read_text()
    finally:
        kept.unlink()
