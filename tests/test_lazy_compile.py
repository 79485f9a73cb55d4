"""A large file on the CPU backend is compiled a kernel at a time, on first use: compile()/load()
run only the front end and list the kernels; Library.build() and `python -m metalkit build`
compile everything ahead of time."""
from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import metalkit as mk
from metalkit._progress import Progress
from conftest import child_env

from metalkit.msl import build as build_module

N = build_module.EAGER_KERNELS + 4  # more than a file compiled whole


def big_source(extra: str = "") -> str:
    """N plain kernels k0.. (y = x * (i + 1) + i), a template with two host_name instantiations,
    one kernel scaled by a function constant and one by a macro; unique, so nothing is cached."""
    parts = [f"// {uuid.uuid4().hex}", "#include <metal_stdlib>", "using namespace metal;",
             "constant float gain [[function_constant(0)]];"]
    for i in range(N):
        parts.append(f"kernel void k{i}(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],"
                     f" uint i [[thread_position_in_grid]]) {{ y[i] = x[i] * {i + 1}.0f + {i}.0f; }}")
    parts.append("template <typename T> kernel void neg(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],"
                 " uint i [[thread_position_in_grid]]) { y[i] = -x[i]; }")
    parts.append('template [[host_name("neg_f")]] kernel void neg<float>(device const float*, device float*, uint);')
    parts.append('template [[host_name("neg_i")]] kernel void neg<int>(device const int*, device int*, uint);')
    parts.append("kernel void amp(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                 "{ x[i] *= gain; }")
    parts.append("kernel void scaled(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                 "{ x[i] *= SCALE; }")
    return "\n".join(parts) + "\n" + extra


NAMES = [f"k{i}" for i in range(N)] + ["amp", "scaled", "neg_f", "neg_i"]  # definitions, then instantiations
OPTS = {"constants": {"gain": 2.0}, "defines": {"SCALE": 7}}


@pytest.fixture
def compiles(monkeypatch):
    """The kernel sets each compiler run of this process builds (None: the whole file)."""
    runs: list = []
    real = build_module._compile

    def counting(tc, opts, key, kernels):
        runs.append(kernels)
        return real(tc, opts, key, kernels)
    monkeypatch.setattr(build_module, "_compile", counting)
    return runs


def check_kernel(lib, i: int, rng) -> None:
    for n in (1, 31, 1000):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full_like(x, np.nan)
        lib[f"k{i}"](x, y)
        # float64 reference: the compiler may fuse the multiply-add (one rounding), as Metal's does
        np.testing.assert_allclose(y, x.astype(np.float64) * (i + 1) + i, rtol=1e-6, atol=1e-6)


def test_load_lists_every_kernel_and_compiles_none(compiles, tmp_path):
    f = tmp_path / "big.metal"
    f.write_text(big_source())
    lib = mk.load(f, **OPTS)
    assert lib.kernels == NAMES
    assert "k3" in lib and "nope" not in lib and "neg_i" in dir(lib)
    assert compiles == []
    with pytest.raises(mk.KernelNotFound, match="no kernel named 'nope'"):
        lib["nope"]
    assert compiles == []


def test_each_kernel_is_compiled_alone_on_first_use_and_kept(compiles, rng):
    src = big_source()
    lib = mk.compile(src, **OPTS)
    check_kernel(lib, 3, rng)
    assert compiles == [["k3"]]
    assert lib.k3 is lib["k3"]
    check_kernel(lib, 3, rng)
    assert compiles == [["k3"]]
    x = rng.integers(-1000, 1000, 77).astype(np.int32)
    y = np.zeros_like(x)
    lib.neg_i(x, y)
    np.testing.assert_array_equal(y, -x)
    assert compiles == [["k3"], ["neg_i"]]
    assert [a.name for a in lib.neg_i.args] == ["x", "y", "i"]
    x = rng.standard_normal(45).astype(np.float32)
    ref = x * np.float32(2.0)
    lib.amp(x)
    np.testing.assert_array_equal(x, ref)
    x = rng.standard_normal(45).astype(np.float32)
    ref = x * np.float32(7)
    lib.scaled(x)
    np.testing.assert_array_equal(x, ref)
    # The same source and options again: the same library, nothing compiled.
    assert mk.compile(src, **OPTS) is lib
    assert compiles == [["k3"], ["neg_i"], ["amp"], ["scaled"]]


def test_specialize_on_a_lazy_library(rng):
    lib = mk.compile(big_source(), **OPTS)
    x = rng.standard_normal(9).astype(np.float32)
    ref = x * np.float32(5.0) * np.float32(2.0)
    lib.specialize("amp", {"gain": 5.0})(x)
    lib.amp(x)
    np.testing.assert_array_equal(x, ref)


def test_errors_the_front_end_sees_are_raised_by_compile(compiles):
    with pytest.raises(mk.CompileError, match="'missing.h' file not found"):
        mk.compile(big_source('#include "missing.h"\n'))
    with pytest.raises(mk.CompileError, match="two kernels are named 'k1'"):
        mk.compile(big_source("kernel void k1(device float* x [[buffer(0)]]) {}\n"))
    assert compiles == []


def test_a_kernel_that_does_not_compile_fails_on_first_use_naming_it(compiles, rng):
    bad = ("template <typename T> kernel void pick(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]])"
           " { x[i] = T::nope; }\n"
           'template [[host_name("pick_f")]] kernel void pick<float>(device float*, uint);\n')
    src = big_source(bad)
    lib = mk.compile(src, **OPTS)
    assert "pick_f" in lib.kernels
    with pytest.raises(mk.CompileError) as e:
        lib.pick_f
    assert e.value.msg.startswith("kernel 'pick_f': ") and "'float' cannot be used prior to '::'" in e.value.msg
    assert e.value.lineno == next(n for n, line in enumerate(src.splitlines(), 1) if "T::nope" in line)
    check_kernel(lib, 0, rng)  # the others still work


def test_build_compiles_everything_in_groups_and_names_the_kernels_that_fail(compiles, rng, capsys):
    bad = ("kernel void broken(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]])"
           " { x[i] = undefined_name; }\n")
    src = big_source(bad)
    lib = mk.compile(src, **OPTS)
    with pytest.raises(mk.CompileError, match=r"1 of \d+ kernels do not compile \(broken\).*undefined_name"):
        lib.build(jobs=2)
    built = len(compiles)
    assert 1 < built < len(NAMES)  # in groups, and the failing group split until the kernel is found
    assert capsys.readouterr().err == ""  # no progress bar: stderr is not a terminal
    again = mk.compile(src, **OPTS)
    for i in range(N):
        check_kernel(again, i, rng)
    x = rng.standard_normal(300).astype(np.float32)
    y = np.zeros_like(x)
    again.neg_f(x, y)
    np.testing.assert_array_equal(y, -x)
    assert len(compiles) == built  # every kernel came from the build


def test_build_of_a_small_file_is_the_whole_file_compiled_at_once(compiles):
    src = f"// {uuid.uuid4().hex}\n#include <metal_stdlib>\nusing namespace metal;\n" + "".join(
        f"kernel void s{i}(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{ x[i] += {i}; }}\n"
        for i in range(3))
    lib = mk.compile(src)
    assert compiles == [None]
    assert lib.build() is lib and compiles == [None]


def test_an_edited_header_makes_new_kernels(tmp_path, rng):
    (tmp_path / "gain.h").write_text("#define GAIN 3.0f\n")
    f = tmp_path / "big.metal"
    f.write_text(big_source('#include "gain.h"\nkernel void g(device float* x [[buffer(0)]], '
                            'uint i [[thread_position_in_grid]]) { x[i] *= GAIN; }\n'))
    x = rng.standard_normal(20).astype(np.float32)
    ref = x * np.float32(3)
    mk.load(f, **OPTS).g(x)
    np.testing.assert_array_equal(x, ref)
    (tmp_path / "gain.h").write_text("#define GAIN 5.0f  // edited\n")
    ref = x * np.float32(5)
    mk.load(f, **OPTS).g(x)
    np.testing.assert_array_equal(x, ref)


def test_progress_bar_on_a_terminal_only():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(12, "big.metal", stream=stream)
        bar.advance(5)
        bar.advance(7)
        bar.close(1.5)
    assert "\r" in tty.getvalue() and "12/12 kernels" in tty.getvalue() and tty.getvalue().endswith("(1.5 s)\n")
    assert pipe.getvalue() == ""


# Loads argv[1] with the function constants argv[4] (JSON) and runs kernel argv[2] against numpy;
# with argv[3] == "forbid" nothing may be compiled.
CHILD = textwrap.dedent("""
    import json, sys, numpy as np, metalkit as mk
    from metalkit.msl import build
    if sys.argv[3] == "forbid":
        def refuse(*a, **k):
            raise SystemExit("compiled although the cache should have served it")
        build._compile = build._scan = refuse
    lib = mk.load(sys.argv[1], defines={"SCALE": 7}, constants=json.loads(sys.argv[4]))
    i = int(sys.argv[2][1:])
    rng = np.random.default_rng()
    for n in (1, 33, 4097):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full_like(x, np.nan)
        lib[sys.argv[2]](x, y)
        np.testing.assert_allclose(y, x.astype(np.float64) * (i + 1) + i, rtol=1e-6, atol=1e-6)
    print("ok")
""")


def child(f, kernel: str, cache, mode: str = "build", constants: str = '{"gain": 2.0}') -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(f), kernel, mode, constants], env=child_env(cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(p: subprocess.Popen) -> None:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and out.strip().endswith("ok"), f"exit {p.returncode}\n{out}\n{err}"


def test_two_processes_building_one_kernel_at_once_both_succeed_and_a_third_compiles_nothing(tmp_path):
    f = tmp_path / "big.metal"
    f.write_text(big_source())
    cache = tmp_path / "cache"
    first, second = child(f, "k4", cache), child(f, "k4", cache)
    finished(first)
    finished(second)
    finished(child(f, "k4", cache, "forbid"))


def test_python_m_metalkit_build_fills_the_cache(tmp_path):
    f = tmp_path / "big.metal"
    f.write_text(big_source())
    cache = tmp_path / "cache"
    p = subprocess.run([sys.executable, "-m", "metalkit", "build", str(f), "-D", "SCALE=7", "-j", "2"],
                       env=child_env(cache), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{f}: {len(NAMES)} kernels ready in ") and "\r" not in p.stderr
    finished(child(f, "k2", cache, "forbid", "{}"))
    finished(child(f, "k9", cache, "forbid", "{}"))
