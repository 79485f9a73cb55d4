"""tinygrad on metalkit (metalkit.tinygrad): tinygrad's Metal kernels against its own CPU device and numpy.

tinygrad renders each kernel with its MetalRenderer, as for a Mac; metalkit compiles
and runs it on its current backend. Every op here runs on random data on both the
METALKIT device and tinygrad's CPU device, and both are checked against numpy. Each
realised kernel is one compile, so the ops are few and small.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metalkit as mk
import metalkit.tinygrad as mtg
from tinygrad import Context, Device, Tensor, Variable, dtypes
from tinygrad.device import CompileError, TinyELF
from tinygrad.engine import worker
from tinygrad.helpers import getenv


@pytest.fixture(scope="module", autouse=True)
def cpu_device(tmp_path_factory):
    """tinygrad's CPU device compiles C with `clang` (or $CC). Where there is none, the clang
    inside the ziglang wheel (a metalkit dependency) stands in. tinygrad's own disk cache is off.

    tinygrad reads $CC through a cached getenv, in this process and in its pool of compile
    workers, which another test may have started already: both start afresh with $CC set."""
    with pytest.MonkeyPatch.context() as mp:
        if shutil.which(os.environ.get("CC", "clang")) is None:
            import ziglang
            wrapper = tmp_path_factory.mktemp("cc") / "clang"
            wrapper.write_text(f'#!/bin/sh\nexec "{Path(ziglang.__file__).parent / "zig"}" clang "$@"\n')
            wrapper.chmod(0o755)
            mp.setenv("CC", str(wrapper))
            getenv.cache_clear()
            worker.terminate_worker_pool()
        with Context(CACHELEVEL=0):
            yield
    getenv.cache_clear()
    worker.terminate_worker_pool()  # its workers' $CC is gone with this module


def on_both(fn, *arrays):
    """fn's result on METALKIT and on tinygrad's CPU device, as numpy arrays."""
    return [fn(*[Tensor(a, device=dev) for a in arrays]).numpy() for dev in ("METALKIT", "CPU")]


def check(fn, ref, *arrays, rtol=1e-5, atol=1e-6):
    got, cpu = on_both(fn, *arrays)
    want = np.asarray(ref(*arrays))
    assert got.dtype == cpu.dtype and got.shape == cpu.shape == want.shape, (got.dtype, cpu.dtype, got.shape, want.shape)
    np.testing.assert_allclose(got, cpu, rtol=rtol, atol=atol)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


@pytest.fixture
def sources(monkeypatch):
    """The MSL of every kernel METALKIT compiles while the test runs."""
    seen = []
    compile_ = mtg.MetalkitCompiler.compile
    monkeypatch.setattr(mtg.MetalkitCompiler, "compile", lambda self, src: (seen.append(src), compile_(self, src))[1])
    return seen


def test_the_device_is_metalkit_with_tinygrads_metal_renderer():
    from tinygrad.renderer.cstyle import MetalRenderer
    dev = Device["METALKIT"]
    assert isinstance(dev, mtg.MetalkitDevice)
    assert isinstance(dev.renderer, MetalRenderer) and dev.renderer.tensor_cores


@pytest.mark.parametrize("n", [1, 37, 1000])
def test_elementwise(rng, n):
    a, b = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32) + 0.5
    check(lambda x, y: (x * y + 1.5).exp() / y.sqrt() - x.maximum(0.25), lambda x, y: np.exp(x * y + 1.5) / np.sqrt(y) -
          np.maximum(x, 0.25), a, b, rtol=1e-5)


def test_where_and_comparisons_on_a_2d_grid(rng):
    a, b = rng.standard_normal((29, 45)).astype(np.float32), rng.standard_normal((29, 45)).astype(np.float32)
    check(lambda x, y: (x > y).where(x.sin(), y.abs().log2()), lambda x, y: np.where(x > y, np.sin(x), np.log2(abs(y))), a, b,
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_sum_and_max_along_axes(rng, axis):
    a = rng.standard_normal((33, 65)).astype(np.float32)
    check(lambda x: x.sum(axis=axis), lambda x: x.sum(axis=axis), a, rtol=1e-4, atol=1e-4)
    check(lambda x: x.max(axis=axis), lambda x: x.max(axis=axis), a)


def test_a_long_sum_runs_in_threadgroups(rng):
    a = rng.random(100_003).astype(np.float32)
    check(lambda x: x.sum(), lambda x: x.astype(np.float64).sum(), a, rtol=1e-4)


def test_matmul_runs_on_simdgroup_matrices(rng, sources):
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    check(lambda x, y: x @ y, lambda x, y: x @ y, a, b, rtol=1e-4, atol=1e-4)
    assert any("simdgroup_multiply_accumulate" in s for s in sources)


def test_half_matmul_runs_on_simdgroup_matrices(rng, sources):
    a, b = rng.standard_normal((32, 48)).astype(np.float16), rng.standard_normal((48, 16)).astype(np.float16)
    ref = lambda x, y: (x.astype(np.float32) @ y.astype(np.float32)).astype(np.float16)
    check(lambda x, y: x @ y, ref, a, b, rtol=1e-2, atol=2e-2)
    assert any("simdgroup_half8x8" in s for s in sources)


def test_matmul_without_tensor_cores_and_of_odd_sizes(rng, sources):
    a, b = rng.standard_normal((37, 53)).astype(np.float32), rng.standard_normal((53, 29)).astype(np.float32)
    with Context(TC=0):
        check(lambda x, y: x @ y, lambda x, y: x @ y, a, b, rtol=1e-4, atol=1e-4)
    assert sources and not any("simdgroup_multiply_accumulate" in s for s in sources)


def test_conv2d(rng):
    import numpy.lib.stride_tricks as st
    x, w = rng.standard_normal((2, 3, 11, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)

    def ref(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = st.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n, c, h, w, kh, kw
        return np.einsum("nchwij,ocij->nohw", win, w)
    check(lambda x, w: x.conv2d(w, padding=1), ref, x, w, rtol=1e-4, atol=1e-4)


def test_softmax(rng):
    a = (rng.standard_normal((7, 129)) * 4).astype(np.float32)

    def ref(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    check(lambda x: x.softmax(), ref, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 300])
def test_cumsum(rng, n):
    a = rng.integers(-50, 50, n).astype(np.float32)  # small integers: exact in every summation order
    check(lambda x: x.cumsum(), np.cumsum, a, rtol=0, atol=0)


def test_casts(rng):
    a = (rng.standard_normal(101) * 1000).astype(np.float32)
    check(lambda x: x.cast(dtypes.float16), lambda x: x.astype(np.float16), a, rtol=0, atol=0)
    check(lambda x: x.cast(dtypes.int32), lambda x: x.astype(np.int32), a, rtol=0, atol=0)
    check(lambda x: (x.cast(dtypes.int32) % 7).cast(dtypes.uint8), lambda x: np.mod(x.astype(np.int32), 7).astype(np.uint8),
          a, rtol=0, atol=0)  # tinygrad's % is Python's
    i = rng.integers(-2**31, 2**31 - 1, 64, dtype=np.int64).astype(np.int32)
    check(lambda x: x.cast(dtypes.float32) * 0.5, lambda x: x.astype(np.float32) * np.float32(0.5), i, rtol=0, atol=0)


def test_half_arithmetic(rng):
    a, b = rng.standard_normal(77).astype(np.float16), rng.standard_normal(77).astype(np.float16)
    check(lambda x, y: x * y + x, lambda x, y: x * y + x, a, b, rtol=1e-3, atol=1e-3)


def test_symbolic_sizes_are_scalar_arguments(rng, sources):
    a = rng.standard_normal((3, 10)).astype(np.float32)
    t = Tensor(a, device="METALKIT").realize()
    for i in (1, 4, 10):
        got = t[:, :Variable("i", 1, 10).bind(i)].sum(axis=1).numpy()
        np.testing.assert_allclose(got, a[:, :i].sum(axis=1), rtol=1e-5, atol=1e-6)
    assert len(sources) == 1, "one kernel for every value of i, which it takes as a scalar"


def test_tensors_are_metalkit_arrays_read_and_written_in_place(rng):
    a = rng.standard_normal(100).astype(np.float32)
    t = (Tensor(a, device="METALKIT") * 2).realize()
    buf = t.uop.buffer
    view = np.frombuffer(buf.as_memoryview(allow_zero_copy=True), np.float32)
    np.testing.assert_array_equal(view, a * 2)
    view[:] = a  # written in place, seen by the next kernel
    np.testing.assert_array_equal((t + 1).numpy(), a + 1)
    from metalkit.arrays import _on_device
    assert _on_device(buf._buf)


def test_from_blob_runs_on_the_callers_memory(rng):
    a = rng.standard_normal(50).astype(np.float32)
    want = a * 3
    t = Tensor.from_blob(a.ctypes.data, (50,), dtype=dtypes.float32, device="METALKIT")
    t.assign(t * 3).realize()
    np.testing.assert_array_equal(a, want)


TG_STYLE = """#include <metal_stdlib>
using namespace metal;
kernel void ids(device int* data0, constant int& n, uint3 gid [[threadgroup_position_in_grid]],
                uint3 lid [[thread_position_in_threadgroup]]) {
  data0[((gid.z * 2 + gid.y) * 3 + gid.x) * 4 + lid.x] = n * 10000 + gid.z * 1000 + gid.y * 100 + gid.x * 10 + lid.x;
}
"""


def test_global_size_counts_threadgroups_and_vals_are_scalars():
    dev = Device["METALKIT"]
    prg = dev.runtime(TinyELF(TG_STYLE.encode(), "ids", dev.renderer.target, ()))
    out = dev.allocator.alloc(3 * 2 * 5 * 4 * 4)
    t = prg(out, global_size=(3, 2, 5), local_size=(4, 1, 1), vals=(7,), wait=True)
    z, y, x, l = np.meshgrid(range(5), range(2), range(3), range(4), indexing="ij")
    np.testing.assert_array_equal(out.view(np.int32), (70000 + z * 1000 + y * 100 + x * 10 + l).ravel())
    assert t == prg.kernel.last_gpu_time and t > 0
    assert prg(out, global_size=(1, 1, 1), local_size=(4, 1, 1), vals=(1,)) is None  # no wait, no time


def test_a_compile_error_is_tinygrads_with_metalkits_message():
    with pytest.raises(CompileError, match="undeclared identifier 'nope'") as e:
        Device["METALKIT"].compiler.compile(TG_STYLE.replace("n * 10000", "nope"))
    assert isinstance(e.value.__cause__, mk.CompileError)


def test_DEV_METALKIT_selects_the_device(tmp_path):
    code = ("import metalkit.tinygrad\nfrom tinygrad import Device, Tensor\n"
            "print(Device.DEFAULT, (Tensor([1.0, 2.0]) * 3).tolist())")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEV": "METALKIT", "CACHELEVEL": "0"}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "METALKIT [3.0, 6.0]"


def test_the_module_docstring_example_runs():
    import doctest
    result = doctest.testmod(mtg, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_a_global_size_that_is_not_whole_threadgroups_is_refused():
    dev = Device["METALKIT"]
    prg = dev.runtime(TinyELF(TG_STYLE.encode(), "ids", dev.renderer.target, ()))
    out = dev.allocator.alloc(64)
    out[:] = 3
    with pytest.raises(ValueError, match="kernel 'ids': global size .* not a whole number of threadgroups"):
        prg(out, global_size=(2.5, 1, 1), local_size=(4, 1, 1), vals=(1,))
    assert (out == 3).all()

