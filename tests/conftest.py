"""Every test runs on each available device: "cpu" everywhere, "metal" on a Mac."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import metalkit as mk
from metalkit import _device

# tinygrad 0.14 needs Python 3.11+, so the test extra installs it only there
# (test_tinygrad_import.py checks what an older Python's user gets instead).
collect_ignore = ["test_tinygrad.py"] if sys.version_info < (3, 11) else []

DEVICES = ["cpu"] + (["metal"] if _device.metal_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    mk.use(request.param)
    yield request.param
    mk.use(DEVICES[0])


@pytest.fixture
def rng(request):
    """A generator seeded at random (METALKIT_TEST_SEED=N: with N); a failing test prints its seed."""
    seed = int(os.environ.get("METALKIT_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    request.node.rng_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    seed = getattr(item, "rng_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("random seed", f"rng seed {seed}: METALKIT_TEST_SEED={seed} runs it again"))


HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def build(src: str, **kw):
    """Compile a snippet after the usual MSL prologue."""
    return mk.compile(HEADER + src, **kw)


def child_env(cache, **extra) -> dict:
    """Environment for a child process that runs kernels on the CPU with its own kernel cache.

    zig's own cache (its compiled runtime, ~50 MB and seconds to build) is shared
    with this process's, so a fresh kernel cache does not rebuild it.
    """
    from metalkit.msl import cache as mk_cache
    zig = str(mk_cache.root() / "zig")
    env = dict(os.environ, METALKIT_CACHE_DIR=str(cache), METALKIT_DEVICE="cpu", ZIG_GLOBAL_CACHE_DIR=zig,
               ZIG_LOCAL_CACHE_DIR=zig)
    env.pop("METALKIT_CXX", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env
