"""Every test runs on each available device: "cpu" everywhere, "metal" on a Mac."""
from __future__ import annotations

import os

import numpy as np
import pytest

import metalkit as mk
from metalkit import _device

DEVICES = ["cpu"] + (["metal"] if _device.metal_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    mk.use(request.param)
    yield request.param
    mk.use(DEVICES[0])


@pytest.fixture
def rng():
    return np.random.default_rng(int.from_bytes(os.urandom(4), "little"))


HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def build(src: str, **kw):
    """Compile a snippet after the usual MSL prologue."""
    return mk.compile(HEADER + src, **kw)
