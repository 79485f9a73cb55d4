"""What only a Mac's GPU can show: each test runs Metal and is skipped elsewhere.

Everything the Metal backend decides is tested on every platform (test_metal_rules.py,
test_batch.py, test_metal_selectors.py); these tests check what Metal itself does with
those decisions, and run in the macOS workflow (.github/workflows/macos.yml).
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from metalkit import _device

from conftest import build

pytestmark = pytest.mark.skipif(not _device.metal_available(),
                                reason="needs Metal: macOS with a Metal GPU (this runs on the CPU simulator only)")


@pytest.fixture(autouse=True)
def metal():
    before = mk.device().backend
    mk.use("metal")
    yield
    mk.use(before)


def test_struct_parameters_get_their_dtype_from_reflection():
    lib = build("""
struct Params { float scale; uint n; float2 offset; };
kernel void k(constant Params& p [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  if (i < p.n) out[i] = p.scale * float(i) + p.offset.y;
}""")
    dtype = lib.k.args[0].dtype
    assert dtype is not None and dtype.names == ("scale", "n", "offset") and dtype.itemsize == 16
    p = np.zeros((), dtype)
    p["scale"], p["n"], p["offset"] = 2.0, 5, (0.0, 1.0)
    out = np.zeros(8, np.float32)
    lib.k(p, out, grid=8)
    np.testing.assert_array_equal(out, [1, 3, 5, 7, 9, 0, 0, 0])


def test_exp_is_precise_without_fast_math():
    """Within 1 ulp of numpy's float64 exp rounded to float32, as MSL's precise exp promises."""
    lib = build("""
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              uint i [[thread_position_in_grid]]) { y[i] = exp(x[i]); }""")
    x = np.linspace(-80, 80, 1 << 16, dtype=np.float32)
    y = np.empty_like(x)
    lib.k(x, y)
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    ulps = np.abs(y.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, f"exp is {ulps.max()} ulp off at x = {x[ulps.argmax()]}"


def test_none_buffers_bind_zeroed_placeholders_that_api_validation_accepts(tmp_path):
    """None is never bound as nil (API validation stops the process at a missing binding):
    a read-only parameter reads zeros, a written one writes to a buffer that is discarded."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent('''
        import numpy as np, metalkit as mk
        mk.use("metal")
        lib = mk.compile("""#include <metal_stdlib>
        using namespace metal;
        kernel void k(device const float* opt [[buffer(0)]], device float* scratch [[buffer(1)]],
                      device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          scratch[0] = 7.0f;
          out[i] = opt[0] + 1.0f;
        }""")
        out = np.zeros(4, np.float32)
        lib.k(None, None, out)
        assert out.tolist() == [1, 1, 1, 1], out
        print("ok")
    ''')
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "METALKIT_VALIDATE": "1"})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_simd_width_is_the_pipelines_thread_execution_width():
    lib = build("""
kernel void k(device uint* out [[buffer(0)]], uint w [[thread_execution_width]],
              uint i [[thread_position_in_grid]]) { out[i] = w; }""")
    out = np.zeros(64, np.uint32)
    lib.k(out)
    assert lib.k.simd_width == out[0] and set(out.tolist()) == {lib.k.simd_width}
    assert lib.k.simd_width in (8, 16, 32, 64)


SPIN = """
kernel void spin(device atomic_uint* stop [[buffer(0)]], device uint* out [[buffer(1)]],
                 constant uint& most [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  uint k = 0;
  while (atomic_load_explicit(stop, memory_order_relaxed) == 0 && k < most) ++k;
  out[i] = k;
}"""


def test_ctrl_c_ends_the_wait_for_a_long_kernel(tmp_path):
    """The GPU cannot stop a committed command buffer, but Ctrl-C ends the wait for it."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(f'''
        import sys, time, numpy as np, metalkit as mk
        mk.use("metal")
        lib = mk.compile("""#include <metal_stdlib>
        using namespace metal;
        {SPIN}""")
        stop, out = mk.zeros(1, np.uint32), mk.zeros(1024, np.uint32)
        print("running", flush=True)
        start = time.monotonic()
        try:
            lib.spin(stop, out, np.uint32(4_000_000_000))
        except KeyboardInterrupt:
            print(f"interrupted {{time.monotonic() - start:.1f}}", flush=True)
        stop[0] = 1  # the kernel ends: it reads this flag
    ''')
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "running"
    import time
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert out.startswith("interrupted"), err[-2000:]
    assert float(out.split()[1]) < 30


def test_timeout_ends_the_wait_for_a_long_kernel():
    lib = build(SPIN)
    stop, out = mk.zeros(1, np.uint32), mk.zeros(1024, np.uint32)
    try:
        with pytest.raises(mk.KernelFault, match=r"stopped waiting at its time limit of 0\.5 s \(timeout=0\.5\).*"
                                                  r"may still be running"):
            lib.spin(stop, out, np.uint32(4_000_000_000), timeout=0.5)
    finally:
        stop[0] = 1


def _macos() -> tuple[int, ...]:
    import platform
    return tuple(int(x) for x in platform.mac_ver()[0].split(".")[:2] if x)


LOGGING = """
#include <metal_logging>
constant os_log logger("com.example.metalkit", "test");
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  out[i] = float(i);
  if (i == 3) os_log_default.log("thread %u wrote %.1f", i, out[i]);
  if (i == 5) logger.log_error("an error from %d", int(i));
}"""


@pytest.mark.skipif(_macos() < (15, 0), reason="shader logging needs macOS 15 (MTLLogState, MSL 3.2)")
def test_shader_log_messages_reach_the_handler():
    """Compiled with enableLogging, run with the device's MTLLogState: the handler forwards each message.
    Metal drains its log buffer after the command buffer completes and names no thread; a message
    drained after the call returned is delivered with the next call."""
    seen = []
    previous = mk.set_kernel_log_handler(seen.append)
    try:
        lib = build(LOGGING)
        out = np.zeros(8, np.float32)
        lib.k(out, grid=8)
        for _ in range(50):  # the next calls collect what was drained late
            if len(seen) >= 2:
                break
            lib.k(np.zeros(1, np.float32), grid=1)
    finally:
        mk.set_kernel_log_handler(previous)
    got = {(m.kernel, m.level, m.subsystem, m.category, m.text) for m in seen}
    assert ("k", "default", "", "", "thread 3 wrote 3.0") in got
    assert ("k", "error", "com.example.metalkit", "test", "an error from 5") in got
    assert all(m.thread is None and m.threadgroup is None for m in seen)


@pytest.mark.skipif(_macos() >= (15, 0), reason="before macOS 15, Metal has no <metal_logging>")
def test_logging_source_does_not_compile_before_macos_15():
    with pytest.raises(mk.CompileError, match="metal_logging"):
        build(LOGGING)
