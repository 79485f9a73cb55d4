"""Stopping a running kernel: Ctrl-C raises KeyboardInterrupt at the call within a second,
whatever the kernel does (a plain loop, SIMT lockstep, fibers, a loop that never ends, a grid
that would run for hours), a time limit (timeout=, METALKIT_TIMEOUT) raises KernelFault saying
how far the kernel got, and the process, the thread pool and later calls carry on. Every stop
happens in a child process, so a kernel that cannot be stopped fails its test instead of
hanging the run."""
from __future__ import annotations

import math
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import metalkit as mk
from metalkit import _core
from conftest import HEADER, child_env

# Kernels that never end (they wait for x[0] == 12345, which nothing writes) in every
# execution model, one whose 2^40 threads would take hours, and one that adds arrays.
SRC = HEADER + """
kernel void spin(device uint* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    uint k = 0;
    while (x[0] != 12345u) { k += 1; x[i + 1] = k; }
}

// No side effect in the loop: C++ would let the compiler assume it ends and delete it; a GPU spins.
kernel void spin_empty(device const uint* x [[buffer(0)]], device uint* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    while (x[0] != 12345u) {}
    out[i] = 1u;
}

kernel void spin_simt(device uint* x [[buffer(0)]], threadgroup uint* t [[threadgroup(0)]],
                      uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
    t[l] = i;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint k = t[(l + 1) % 64];
    while (x[0] != 12345u) { k += 1; x[i + 1] = k; }
}

kernel void spin_barrier(device uint* x [[buffer(0)]], threadgroup uint* t [[threadgroup(0)]],
                         uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
    uint k = 0;
    while (x[0] != 12345u) {
        t[l] = k;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        k += t[(l + 1) % 64];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        x[i + 1] = k;
    }
}

kernel void spin_fibers(device uint* x [[buffer(0)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_position_in_threadgroup]]) {
    uint k = l < 16 ? simd_sum(1u) : 0u;  // a SIMD-group function in a branch of ?: runs on fibers
    threadgroup_barrier(mem_flags::mem_device);
    while (x[0] != 12345u) { k += 1; x[i + 1] = k; }
}

kernel void diagonal(device uint* x [[buffer(0)]], uint2 p [[thread_position_in_grid]]) {
    if (p.x == p.y) x[1 + (p.x & 1023u)] = p.y;
}

kernel void add(device const float* a [[buffer(0)]], device float* b [[buffer(1)]],
                uint i [[thread_position_in_grid]]) {
    b[i] += a[i];
}
"""

# Every child starts with this: the library, a flag the spinning kernels never see set,
# and a check that the kernel after a stop is right (random data, edge sizes, and enough
# threadgroups that every worker of the pool takes part).
PRELUDE = f"""
import math, os, signal, sys, threading, time
import numpy as np
import metalkit as mk
lib = mk.compile({SRC!r}, filename="stuck.metal")
rng = np.random.default_rng()
flag = np.zeros((1 << 16) + 1, np.uint32)

def say(*words):
    print(*words, flush=True)

def check_add():
    for n in (0, 1, 255, 257, 1 << 20):
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        want = a + b
        lib.add(a, b)
        assert np.array_equal(b, want), n
    return "ok"
"""

# (kernel, call keywords, execution model) of each kind of kernel that never ends
ENDLESS = {
    "one thread": ("spin", "grid=1", "loop"),
    "every worker": ("spin", "grid=1 << 16", "loop"),
    "an empty loop": ("spin_empty", "flag, grid=1 << 16", "loop"),
    "simt": ("spin_simt", "grid=256, threadgroup=64, threadgroup_memory={0: 256}", "simt"),
    "simt, barriers in the loop": ("spin_barrier", "grid=256, threadgroup=64, threadgroup_memory={0: 256}", "simt"),
    "fibers": ("spin_fibers", "grid=256, threadgroup=64", "fibers"),
    "2^40 threads": ("diagonal", "grid=(1 << 20, 1 << 20)", "loop"),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One kernel cache for the module's children: the library compiles once."""
    return tmp_path_factory.mktemp("cache")


class Child:
    """A child process running PRELUDE + body. Each time it prints "ready", SIGINT is sent
    0.3 s later (its kernel is running by then); the line it prints next is timed."""

    def __init__(self, cache, body: str, **env):
        self.proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                                     env=child_env(cache, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, limit: float = 120) -> tuple[list[str], list[float]]:
        """Its output lines and the seconds from each SIGINT to the next line; fails if it
        does not finish within `limit` seconds or exits with an error."""
        out, latencies, sent = [], [], None
        deadline = time.monotonic() + limit
        try:
            while True:
                try:
                    line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    pytest.fail(f"the child did not finish within {limit} s; it printed {out}")
                if line is None:
                    break
                if sent is not None:
                    latencies.append(time.monotonic() - sent)
                    sent = None
                out.append(line)
                if line == "ready":
                    time.sleep(0.3)
                    sent = time.monotonic()
                    self.proc.send_signal(signal.SIGINT)
            rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        assert rc == 0, f"child exited with {rc}: {self.proc.stderr.read()[-3000:]}"
        return out, latencies


@pytest.mark.parametrize("kind", list(ENDLESS))
def test_ctrl_c_stops_a_kernel_that_never_ends(cache, kind):
    name, call, model = ENDLESS[kind]
    out, latencies = Child(cache, f"""
        say(lib.{name}.execution.split(":")[0])
        for attempt in range(2):   # Ctrl-C works again after the first
            say("ready")
            try:
                lib.{name}(flag, {call})
                say("returned")
            except KeyboardInterrupt:
                say("KeyboardInterrupt")
            say(check_add())
        """).run()
    assert out == [model] + ["ready", "KeyboardInterrupt", "ok"] * 2
    assert max(latencies) < 1.0, latencies


def test_a_handler_that_does_not_raise_gets_a_kernel_fault_and_its_own_exception_passes(cache):
    out, latencies = Child(cache, """
        signal.signal(signal.SIGINT, lambda *_: say("handler ran"))
        say("ready")
        try:
            lib.spin(flag, grid=1)
        except mk.KernelFault as e:
            say(str(e))

        class Stop(Exception):
            pass
        def stop(*_):
            raise Stop()
        signal.signal(signal.SIGINT, stop)
        say("ready")
        try:
            lib.spin_barrier(flag, grid=256, threadgroup=64, threadgroup_memory={0: 256})
        except Stop:
            say("Stop")
        say(check_add())
        """).run()
    assert out[:2] == ["ready", "handler ran"]
    assert re.fullmatch(r"kernel 'spin' \(stuck\.metal:\d+\): interrupted \(SIGINT\) after [\d.]+ s with 0 of 1 "
                        r"threadgroups completed; the arrays it writes are partly written", out[2]), out[2]
    assert out[3:] == ["ready", "Stop", "ok"]
    assert max(latencies) < 1.0, latencies


def test_an_ignored_ctrl_c_stays_ignored(cache):
    out, _ = Child(cache, """
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        say("ready")
        try:
            lib.diagonal(flag, grid=(1 << 20, 1 << 20), timeout=1.5)
        except mk.KernelFault as e:
            say(str(e))
        say(check_add())
        """).run()
    assert out[0] == "ready" and "stopped at its time limit of 1.5 s (timeout=1.5)" in out[1], out
    assert out[2] == "ok"


@pytest.mark.parametrize("kind", ["one thread", "every worker", "an empty loop", "simt, barriers in the loop",
                                  "fibers"])
def test_timeout_stops_a_kernel_that_never_ends(cache, kind):
    name, call, _ = ENDLESS[kind]
    out, _ = Child(cache, f"""
        start = time.monotonic()
        try:
            lib.{name}(flag, {call}, timeout=0.2)
            say("returned")
        except mk.KernelFault as e:
            say(f"{{time.monotonic() - start:.2f}}")
            say(str(e))
        say(check_add())
        """).run()
    seconds, message, after = out
    assert 0.2 <= float(seconds) < 1.5
    groups = {"one thread": 1, "every worker": 256, "an empty loop": 256, "simt, barriers in the loop": 4,
              "fibers": 4}[kind]
    assert re.fullmatch(rf"kernel '{name}' \(stuck\.metal:\d+\): stopped at its time limit of 0\.2 s \(timeout=0\.2\) "
                        rf"with 0 of {groups} threadgroups completed; the arrays it writes are partly written\. "
                        r"Raise the limit if the kernel is only slow, or check that its loops end", message), message
    assert after == "ok"


def test_timeout_of_a_long_kernel_says_how_far_it_got(cache):
    out, _ = Child(cache, """
        try:
            lib.diagonal(flag, grid=(1 << 20, 1 << 20), timeout=0.5)
        except mk.KernelFault as e:
            say(str(e))
        say(check_add())
        """).run()
    done = re.search(r"time limit of 0\.5 s \(timeout=0\.5\) with (\d+) of 4294967296 threadgroups completed", out[0])
    assert done, out[0]
    assert 0 < int(done.group(1)) < 1 << 32
    assert out[1] == "ok"


def test_metalkit_timeout_is_the_default_limit(cache):
    out, _ = Child(cache, """
        try:
            lib.spin(flag, grid=1 << 16)
        except mk.KernelFault as e:
            say(str(e))
        b = np.zeros(1000, np.float32)
        lib.spin(flag, grid=0)                      # nothing to run, nothing to stop
        a = rng.standard_normal(1000).astype(np.float32)
        lib.add(a, b, timeout=math.inf)             # the call's own limit (none) wins
        say(np.array_equal(a, b))
        say(check_add())
        """, METALKIT_TIMEOUT="0.2").run()
    assert "stopped at its time limit of 0.2 s (METALKIT_TIMEOUT=0.2) with 0 of 256 threadgroups completed" in out[0]
    assert out[1:] == ["True", "ok"]


def test_a_metalkit_timeout_that_is_not_a_number_is_named(cache):
    out, _ = Child(cache, """
        try:
            lib.add(np.zeros(4, np.float32), np.zeros(4, np.float32))
        except mk.ArgumentError as e:
            say(str(e))
        """, METALKIT_TIMEOUT="soon").run()
    assert out == ["kernel 'add': METALKIT_TIMEOUT must be a number of seconds (0: no limit), got 'soon'"]


def test_a_timeout_in_a_batch_is_its_fault_and_later_calls_do_not_run(cache):
    out, _ = Child(cache, """
        a = rng.standard_normal(100).astype(np.float32)
        b = np.zeros(100, np.float32)
        try:
            with mk.batch():
                lib.spin(flag, grid=1, timeout=0.2)
                lib.add(a, b)
        except mk.KernelFault as e:
            say(str(e).split(":")[0])
        say(not b.any())
        say(check_add())
        """).run()
    assert out == ["kernel 'spin' (stuck.metal", "True", "ok"]


def test_a_timeout_on_another_thread(cache):
    out, _ = Child(cache, """
        faults = []
        def work():
            try:
                lib.spin_simt(flag, grid=256, threadgroup=64, threadgroup_memory={0: 256}, timeout=0.2)
            except mk.KernelFault as e:
                faults.append(str(e))
        t = threading.Thread(target=work)
        t.start()
        t.join(30)
        say(len(faults), "time limit of 0.2 s" in faults[0])
        say(check_add())
        """).run()
    assert out == ["1 True", "ok"]


def test_a_forked_child_stops_its_kernels_too(cache):
    # The child of a fork has no watchdog thread: its first watched call starts one.
    out, latencies = Child(cache, """
        lib.add(np.zeros(4, np.float32), np.zeros(4, np.float32))   # the parent's watchdog runs
        pid = os.fork()
        if pid == 0:
            try:
                lib.spin(flag, grid=1 << 16, timeout=0.2)
            except mk.KernelFault as e:
                say(str(e).split(": ")[1])
            say(check_add())
            os._exit(0)
        say(os.waitpid(pid, 0)[1])
        """).run()
    assert out == ["stopped at its time limit of 0.2 s (timeout=0.2) with 0 of 256 threadgroups completed; the "
                   "arrays it writes are partly written. Raise the limit if the kernel is only slow, or check that "
                   "its loops end", "ok", "0"]


@pytest.mark.parametrize("n", [0, 1, 7, 255, 257, 100_003])
def test_a_kernel_within_a_generous_limit_gives_the_right_answer(cache, n):
    lib = mk.compile(SRC, filename="stuck.metal")
    rng = np.random.default_rng()
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    want = a + b
    lib.add(a, b, timeout=30)
    np.testing.assert_array_equal(b, want)
    out = np.empty_like(a)
    mk.run("add_arrays", a, want, out, timeout=30.0)
    np.testing.assert_array_equal(out, a + want)


@pytest.mark.parametrize("value,match", [
    (0, r"timeout= takes a positive number of seconds, got 0 \(None: METALKIT_TIMEOUT or no limit\)"),
    (-1.5, "timeout= takes a positive number of seconds, got -1.5"),
    (math.nan, "timeout= takes a positive number of seconds, got nan"),
    ("1", r"timeout= takes a number of seconds \(or None for METALKIT_TIMEOUT\), got '1'"),
    (True, "timeout= takes a number of seconds"),
])
def test_a_bad_timeout_is_refused_before_anything_runs(value, match):
    lib = mk.compile(SRC, filename="stuck.metal")
    b = np.arange(5, dtype=np.float32)
    with pytest.raises(mk.ArgumentError, match="kernel 'add': " + match):
        lib.add(np.ones(5, np.float32), b, timeout=value)
    assert b.tolist() == [0, 1, 2, 3, 4]


def test_metal_limits_bound_the_wait():
    # A committed command buffer cannot be stopped, but the wait for it can: timeout= and
    # Ctrl-C (from the main thread) end the wait, and the GPU goes on (Completion).
    # METALKIT_TIMEOUT stays the CPU simulator's default.
    assert _core.metal_rules.run_limits("k", 1.0, True, True) == (1.0, False, True)
    assert _core.metal_rules.run_limits("k", None, True, True) == (0.0, False, True)
    assert _core.metal_rules.run_limits("k", None, True, False) == (0.0, False, False)
    assert _core.metal_rules.run_limits("k", 2.5, False, True) == (2.5, False, True)
    assert _core.metal_rules.run_limits("k", math.inf, False, False) == (0.0, False, False)
