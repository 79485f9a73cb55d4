"""The package as a library for other tools: quiet import, CLI, threads."""
import os
import re
import subprocess
import sys
import threading

import numpy as np

import metalkit as mk
from conftest import HEADER, build


def test_import_is_quick_and_silent():
    code = ("import sys, time; t = time.perf_counter(); import metalkit; dt = time.perf_counter() - t; "
            "assert 'metalkit._core' not in sys.modules, 'core loaded at import'; "
            "assert dt < 1.0, dt")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr == ""


def test_device_info():
    d = mk.device()
    assert d.backend in ("cpu", "metal") and d.simd_width == 32 and d.max_threadgroup_memory == 32768
    assert d.name


def test_bench_ratios_read_as_times():
    from metalkit._bench import ratio
    assert ratio(1.11, 1.0) == "metalkit / numpy: 1.11x the time"
    assert ratio(0.53, 1.0) == "metalkit / numpy: 0.53x the time (1.9x faster)"
    assert ratio(2e-3, 1.0, "metalkit / PoCL") == "metalkit / PoCL: 0.002x the time (500x faster)"
    assert ratio(37.0, 2.0) == "metalkit / numpy: 18.5x the time"


def test_cli_bench_prints_ratios_as_times():
    p = subprocess.run([sys.executable, "-m", "metalkit", "bench", "-n", "1001"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(line.startswith("add_arrays, 1001 float32: metalkit ") for line in lines), p.stdout
    ratios = [line for line in lines if " / " in line]
    assert len(ratios) == 1 and "ratio" not in p.stdout, p.stdout
    assert re.fullmatch(r"add_arrays, metalkit / numpy: [0-9.]+x the time( \([0-9.]+x faster\))?", ratios[0])


def test_use_rejects_unknown_devices():
    import pytest
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        mk.use("gpu")


def test_cli_info_and_check(tmp_path):
    p = subprocess.run([sys.executable, "-m", "metalkit", "info"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "backend:" in p.stdout and "device:" in p.stdout
    good = tmp_path / "good.metal"
    good.write_text(HEADER + "kernel void k(device float* x [[buffer(0)]], constant int& n [[buffer(1)]], "
                             "uint i [[thread_position_in_grid]]) { x[i] = n; }\n")
    p = subprocess.run([sys.executable, "-m", "metalkit", "check", str(good)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "k(device float* x [[buffer(0)]], constant int& n [[buffer(1)]])"
    bad = tmp_path / "bad.metal"
    bad.write_text(HEADER + "kernel void k(device float* x [[buffer(0)]]) { x[0] = nope; }\n")
    p = subprocess.run([sys.executable, "-m", "metalkit", "check", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1
    assert f"{bad}:3:" in p.stderr and "nope" in p.stderr


def test_cli_check_takes_include_dirs_and_defines(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("#define SCALE(x) ((x) * FACTOR)\n")
    src = tmp_path / "uses.metal"
    src.write_text(HEADER + '#include "scale.h"\n'
                   "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                   "{ x[i] = SCALE(x[i]); }\n")
    cmd = [sys.executable, "-m", "metalkit", "check", str(src)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 1 and "scale.h" in p.stderr, p.stderr  # not found without -I
    p = subprocess.run(cmd + ["-I", str(inc)], capture_output=True, text=True)
    assert p.returncode == 1 and "FACTOR" in p.stderr, p.stderr   # found; FACTOR undefined
    p = subprocess.run(cmd + ["-I", str(inc), "-D", "FACTOR=2.0f"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "k(device float* x [[buffer(0)]])"


def test_cli_output_to_a_reader_that_went_away_is_not_a_traceback(tmp_path):
    src = tmp_path / "many.metal"
    src.write_text(HEADER + "".join(f"kernel void k{i}(device float* x [[buffer(0)]], uint j "
                                    f"[[thread_position_in_grid]]) {{ x[j] = {i}; }}\n" for i in range(8)))
    # `metalkit check many.metal | head -1`, made certain: the pipe's reader is gone before the
    # first line is written.
    p = subprocess.Popen([sys.executable, "-m", "metalkit", "check", str(src)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait() == 1 and err == "", err


def test_cli_usage_names_the_command_as_it_was_run():
    p = subprocess.run([sys.executable, "-m", "metalkit", "nonsense"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("usage: python -m metalkit "), p.stderr
    script = os.path.join(os.path.dirname(sys.executable), "metalkit")  # installed by pip with the package
    p = subprocess.run([script, "nonsense"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("usage: metalkit "), p.stderr


def test_kernels_from_many_python_threads(device):
    lib = build("""
    kernel void fill(device int* x [[buffer(0)]], constant int& v [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { x[i] = v + int(i); }""")
    results, errors = {}, []

    def work(t):
        try:
            for rep in range(30):
                n = 1000 + 97 * t + rep
                x = np.zeros(n, np.int32)
                lib.fill(x, t * 1000 + rep)
                if not np.array_equal(x, np.arange(n) + t * 1000 + rep):
                    errors.append((t, rep))
            results[t] = True
        except Exception as e:  # surfaced by the assertion below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(results) == 6


def test_error_leaves_state_usable(device):
    import pytest
    z = np.zeros(4, np.float32)
    for _ in range(3):
        with pytest.raises(mk.ArgumentError):
            mk.run("add_arrays", z, z)
    a = np.arange(4, dtype=np.float32)
    mk.run("add_arrays", a, a, z)
    assert z.tolist() == [0, 2, 4, 6]


def test_kernel_repr_and_properties(device):
    k = build("kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1; }").k
    assert k.name == "k" and "device float* x" in repr(k)
    x = np.zeros(10, np.float32)
    k(x)
    assert k.last_gpu_time > 0 and k.uses_barriers is False
    assert os.path.basename(k.location[0]) == "<source>"


def test_the_front_ends_modules_import_on_their_own_and_build_is_a_module():
    # cache.py needs only where the headers are (msl/paths.py), not the toolchain that uses it:
    # no import circle. metalkit.msl.build is the module; its functions are build.build & co.
    code = ("import sys, types; import metalkit.msl.cache; "
            "assert 'metalkit.msl.toolchain' not in sys.modules, 'cache imports the toolchain'; "
            "import metalkit.msl, metalkit.msl.build as b; "
            "assert isinstance(metalkit.msl.build, types.ModuleType) and metalkit.msl.build is b; "
            "assert callable(b.build) and callable(b.plan) and callable(b.build_all)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
