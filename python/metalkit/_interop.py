"""Arrays of other libraries as numpy views of the same memory, never copies: objects
exporting ``__dlpack__`` (torch and JAX CPU tensors, ...) and buffer-protocol objects
(memoryview, array.array, bytearray, bytes). A kernel's array arguments that are not numpy
arrays come here, so what a kernel writes lands in the caller's object; numpy arrays keep
the call's fast path and never do. ``metalkit.asarray`` reads them through here too."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .errors import ArgumentError

# numpy 2.1 takes copy=False: an exporter that could only hand over a copy is an error,
# not a view whose writes never reach the caller's object.
_NO_COPY = {"copy": False} if np.lib.NumpyVersion(np.__version__) >= "2.1.0" else {}
# DLPack device types whose memory the host reads directly (CPU; CUDA/ROCm pinned; CUDA managed).
_HOST_DEVICES = {1, 3, 11, 13}
_BYTE_FORMATS = {"B", "b", "c"}


def _kind(obj: Any) -> str:
    """How ``obj`` is named in messages: "a torch Tensor", "a bytearray", ..."""
    t = type(obj)
    lib = t.__module__.split(".")[0]
    name = {"builtins": t.__name__, "array": "array.array"}.get(lib, f"{lib} {t.__name__}")
    name = "bytes object" if name == "bytes" else name
    return ("an " if name[0] in "aeiou" else "a ") + name


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


def _off_host(obj: Any) -> str:
    """The device holding a DLPack exporter's memory if the host cannot read it, else ""."""
    if _is_torch(obj):  # torch's "meta" device has no DLPack device type at all
        return "" if obj.device.type == "cpu" else str(obj.device)
    kind, index = obj.__dlpack_device__()
    return "" if int(kind) in _HOST_DEVICES else f"DLPack device {int(kind)}:{int(index)}"


def _from_dlpack(obj: Any, who: str) -> np.ndarray:
    if _is_torch(obj):
        if obj.requires_grad:
            raise ArgumentError(f"{who} got a torch Tensor that requires grad; metalkit does not record "
                                "gradients: pass x.detach() (it shares the memory)")
        import torch
        if obj.dtype == torch.bfloat16:  # numpy's DLPack import has no bfloat16: reinterpret the bits
            try:
                from ml_dtypes import bfloat16
            except ImportError:
                raise ArgumentError(f"{who} got a torch bfloat16 Tensor; numpy's bfloat16 comes from "
                                    "ml_dtypes: pip install ml_dtypes") from None
            return _from_dlpack(obj.view(torch.int16), who).view(bfloat16)
    try:
        where = _off_host(obj)
        if not where:
            return np.from_dlpack(obj, **_NO_COPY)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        dtype = getattr(obj, "dtype", "")
        raise ArgumentError(f"{who} got {_kind(obj)}{f' of dtype {dtype}' if dtype else ''} that numpy cannot view "
                            f"through DLPack ({e}); pass one whose dtype numpy has (for raw bytes, torch: "
                            "x.view(torch.uint8))") from None
    raise ArgumentError(f"{who} got {_kind(obj)} on device {where}; metalkit kernels use host memory: pass a "
                        "CPU copy (torch: x.cpu()) and, for a parameter the kernel writes, copy the result back")


def as_numpy(obj: Any, who: str) -> Optional[np.ndarray]:
    """A numpy view of ``obj``'s memory, or None if it exports neither DLPack nor a buffer.
    ``who`` starts error messages ("kernel 'k': parameter 'x' (...)").

    >>> import array, metalkit._interop as interop
    >>> a = array.array("f", [1.0, 2.0])
    >>> v = interop.as_numpy(a, "example"); v[0] = 5.0
    >>> a[0], interop.as_numpy([1, 2], "example")
    (5.0, None)
    """
    if hasattr(type(obj), "__dlpack__"):
        return _from_dlpack(obj, who)
    try:
        view = memoryview(obj)
    except TypeError:
        return None
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{who} got {_kind(obj)} whose buffer format {view.format!r} numpy cannot read ({e}); "
                            "pass a numpy array") from None


def for_parameter(obj: Any, who: str, dtype: Optional[np.dtype], writable: bool) -> Optional[np.ndarray]:
    """``obj`` as a numpy view for an array parameter described by ``who``, checked against
    the element ``dtype`` (None: a struct, checked by the caller) and, if the kernel writes
    it, writability; None if ``obj`` exports no memory at all.

    >>> import numpy as np, metalkit._interop as interop
    >>> interop.for_parameter(bytearray(8), "p", np.dtype(np.float32), True)
    Traceback (most recent call last):
    ...
    metalkit.errors.ArgumentError: p takes elements of dtype float32, got a bytearray of bytes; view its memory as float32 with np.frombuffer(x, np.float32) (no copy)
    """
    arr = as_numpy(obj, who)
    if arr is None:
        return None
    if dtype is not None and arr.dtype != dtype:
        if isinstance(obj, (bytes, bytearray)) or (isinstance(obj, memoryview) and obj.format in _BYTE_FORMATS):
            fix = f"view its memory as {dtype} with np.frombuffer(x, np.{dtype}) (no copy)"
            got = "of bytes"
        elif _is_torch(obj):
            fix = f"convert it first (x.to(torch.{dtype})), metalkit never converts silently"
            got = f"of dtype {obj.dtype}"
        else:
            fix = "convert it first, metalkit never converts silently"
            got = f"of dtype {arr.dtype}"
        raise ArgumentError(f"{who} takes elements of dtype {dtype}, got {_kind(obj)} {got}; {fix}")
    if writable and not arr.flags.writeable:
        fix = "a bytearray" if isinstance(obj, bytes) else "a writable copy (np.array(x)) and read the result from it"
        raise ArgumentError(f"{who} is written by the kernel but {_kind(obj)} is read-only; pass {fix}")
    return arr
