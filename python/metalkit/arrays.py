"""numpy arrays whose memory is device-shared: kernels use them with no copy."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
from numpy.typing import DTypeLike


def _allocate(nbytes: int):
    from . import _core, _device
    if _device.current() == "metal" and sys.platform == "darwin":  # the Metal backend is built on macOS only
        return _core.metal_allocate(max(int(nbytes), 1))
    return _core.allocate(max(int(nbytes), 1))


def _on_device(a: np.ndarray) -> bool:
    from . import _core
    base: Any = a.base
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.obj if isinstance(base, memoryview) else base.base
    return isinstance(base, _core.Buffer)


def empty(shape: Any, dtype: DTypeLike = np.float32) -> np.ndarray:
    """An uninitialised array in device-shared memory.

    >>> import metalkit, numpy as np
    >>> a = metalkit.empty((2, 3), np.int32)
    >>> a.shape, a.dtype
    ((2, 3), dtype('int32'))
    """
    dt = np.dtype(dtype)
    dims: Any = (shape,) if np.isscalar(shape) else shape
    shape = tuple(int(s) for s in dims)
    count = int(np.prod(shape, dtype=np.int64))
    buf = _allocate(count * dt.itemsize)
    return np.frombuffer(buf, dtype=dt, count=count).reshape(shape)


def zeros(shape: Any, dtype: DTypeLike = np.float32) -> np.ndarray:
    """A zero-filled array in device-shared memory.

    >>> import metalkit
    >>> metalkit.zeros(3).tolist()
    [0.0, 0.0, 0.0]
    """
    a = empty(shape, dtype)
    a[...] = 0
    return a


def asarray(obj: Any, dtype: DTypeLike | None = None) -> np.ndarray:
    """``obj`` as a C-contiguous array in device-shared memory; copied only if it is not one already.

    ``obj`` is anything numpy takes, or an object exporting ``__dlpack__`` (a torch CPU tensor,
    a JAX array; a torch bfloat16 tensor becomes ``ml_dtypes.bfloat16``) or the buffer
    protocol (memoryview, array.array, bytearray). Unless that memory is device memory
    already, the result is a copy: a kernel's writes to it do not reach ``obj`` (pass
    ``obj`` itself to the kernel for that).

    >>> import array, metalkit
    >>> a = metalkit.asarray([1, 2, 3], dtype="float32")
    >>> a.tolist(), metalkit.asarray(a) is a
    ([1.0, 2.0, 3.0], True)
    >>> metalkit.asarray(array.array("i", [4, 5])).dtype
    dtype('int32')
    """
    if not isinstance(obj, np.ndarray):
        from ._interop import as_numpy
        view = as_numpy(obj, "metalkit.asarray")
        obj = obj if view is None else view
    src = np.asarray(obj, dtype=dtype)
    if src is obj and src.flags.c_contiguous and _on_device(src):
        return src
    out = empty(src.shape, src.dtype)
    np.copyto(out, src)
    return out
