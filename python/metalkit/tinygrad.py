"""A tinygrad device, ``METALKIT``, that runs tinygrad's Metal kernels with metalkit.

Importing this module registers the device. tinygrad renders each kernel with its
own ``MetalRenderer`` (the MSL it sends to Apple's compiler on a Mac); metalkit
compiles that source and runs it on its current backend: the GPU on a Mac, the
CPU simulator elsewhere. Select it per tensor (``device="METALKIT"``) or for the
whole program with tinygrad's ``DEV=METALKIT``, after ``import metalkit.tinygrad``.

>>> import metalkit.tinygrad
>>> from tinygrad import Tensor
>>> (Tensor([1.0, 2.0, 3.0], device="METALKIT") * 2).tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

try:
    from tinygrad.codegen.opt import tc
    from tinygrad.device import Compiled, CompileError, Compiler, LRUAllocator, TinyELF
    from tinygrad.renderer.cstyle import MetalRenderer
    from tinygrad.schedule import rangeify
    from tinygrad.helpers import Target
except ImportError as e:  # not installed, or a tinygrad whose layout this device was not written for
    raise ImportError(f"metalkit.tinygrad needs tinygrad 0.14.0 ({e}); install it with "
                      "pip install 'metalkit[tinygrad]'") from e

import metalkit

__all__ = ["MetalkitDevice", "MetalkitRenderer", "MetalkitCompiler", "MetalkitProgram", "MetalkitAllocator"]

# The GPU family tinygrad plans for. Every Apple-silicon Mac is Apple7 or later, and
# tinygrad's Metal renderer turns on bfloat16 from Apple6 and simdgroup_matrix
# tensor cores from Apple7; the simulator has both. DEV=METALKIT::AppleN overrides it.
ARCH = "Apple7"


class MetalkitCompiler(Compiler):
    """Compiles tinygrad's MSL with ``metalkit.compile``; the "binary" is the source itself.

    metalkit caches compiled kernels in memory and on disk by source, so tinygrad's own
    cache of binaries is not used (``cachekey=None``) and loading the program is a lookup.
    """

    def __init__(self) -> None:
        super().__init__(cachekey=None)

    def compile(self, src: str) -> bytes:
        _library(src)
        return src.encode()


def _library(src: str) -> metalkit.Library:
    try:
        return metalkit.compile(src, filename="tinygrad.metal")
    except metalkit.CompileError as e:
        raise CompileError(str(e)) from e


class MetalkitRenderer(MetalRenderer):
    """tinygrad's MetalRenderer, unchanged, with metalkit as its compiler."""

    def __init__(self, target: Target) -> None:
        # MetalRenderer.__init__ would load Apple's MTLCompiler, which exists only on a Mac.
        super(MetalRenderer, self).__init__(target)
        self.compiler = MetalkitCompiler()
        family = int(target.arch[5:]) if target.arch.startswith("Apple") and target.arch[5:].isdigit() else 0
        self.tensor_cores = tc.metal if family >= 7 else []


class MetalkitProgram:
    """One tinygrad kernel as a metalkit Kernel: buffers are byte arrays viewed as the
    kernel's element types, ``vals`` are its scalar parameters."""

    def __init__(self, dev: MetalkitDevice, obj: TinyELF) -> None:
        self.name = obj.name
        self.kernel = _library(obj.lib.decode())[obj.name]
        self.buffer_dtypes = [a.dtype for a in self.kernel.args if a.kind == "buffer"]

    def __call__(self, *bufs: np.ndarray, global_size: tuple[int, int, int] = (1, 1, 1),
                 local_size: tuple[int, int, int] = (1, 1, 1), vals: tuple[int, ...] = (), wait: bool = False,
                 **kw: Any) -> float | None:
        if any(g != int(g) for g in global_size):  # tinygrad's local-size search tries some
            raise ValueError(f"kernel '{self.name}': global size {global_size} is not a whole number of threadgroups; "
                             "pass a count of threadgroups (ints) per dimension")
        args = [b.view(dt) for b, dt in zip(bufs, self.buffer_dtypes)]
        # tinygrad's global size counts threadgroups, as Metal's dispatchThreadgroups does.
        self.kernel(*args, *vals, threadgroups=tuple(int(g) for g in global_size),
                    threadgroup=tuple(int(l) for l in local_size))
        return self.kernel.last_gpu_time if wait else None


class MetalkitAllocator(LRUAllocator["MetalkitDevice"]):
    """Buffers are byte arrays in metalkit's device-shared memory: tinygrad reads and
    writes them through numpy views, with no copy to or from the device."""

    def _alloc(self, size: int, options: Any) -> np.ndarray:
        if options.external_ptr:
            return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(options.external_ptr))
        return metalkit.empty(size, np.uint8)

    def _as_buffer(self, src: np.ndarray) -> memoryview:
        return memoryview(src)

    def _copyin(self, dest: np.ndarray, src: memoryview) -> None:
        dest[:] = np.frombuffer(src, np.uint8)

    def _copyout(self, dest: memoryview, src: np.ndarray) -> None:
        np.frombuffer(dest, np.uint8)[:] = src

    def _offset(self, buf: np.ndarray, size: int, offset: int) -> np.ndarray:
        return buf[offset:offset + size]


class MetalkitDevice(Compiled):
    """The ``METALKIT`` device: tinygrad's Metal kernels on metalkit's current backend."""

    def __init__(self, device: str) -> None:
        super().__init__(device, MetalkitAllocator(self), [MetalkitRenderer], MetalkitProgram, arch=ARCH)


# tinygrad finds a device's class in the module tinygrad.runtime.ops_<name>.
sys.modules["tinygrad.runtime.ops_metalkit"] = sys.modules[__name__]
# Kernels are split to fit Metal's 31 buffer bindings, as for tinygrad's own Metal device.
rangeify.DEVICE_MAX_BUFS.setdefault("METALKIT", rangeify.DEVICE_MAX_BUFS["METAL"])
