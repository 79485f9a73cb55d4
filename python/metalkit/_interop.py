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


def _is_torch_tensor(obj: Any) -> bool:
    if type(obj).__module__.split(".")[0] != "torch":
        return False
    import torch  # imported already: obj came from it
    return isinstance(obj, torch.Tensor)


def _from_torch(t: Any, who: str) -> np.ndarray:
    """A torch tensor's numpy view: Tensor.numpy() shares the memory and costs a fifth of DLPack's exchange."""
    import torch
    if t.requires_grad:
        raise ArgumentError(f"{who} got a torch Tensor that requires grad; metalkit does not record "
                            "gradients: pass x.detach() (it shares the memory)")
    if t.device.type != "cpu":
        raise _off_host_error(t, who, str(t.device))
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16 of its own: the bits, viewed as ml_dtypes'
        try:
            from ml_dtypes import bfloat16
        except ImportError:
            raise ArgumentError(f"{who} got a torch bfloat16 Tensor; numpy's bfloat16 comes from "
                                "ml_dtypes: pip install ml_dtypes") from None
        return t.view(torch.int16).numpy().view(bfloat16)
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as e:
        raise _unreadable_error(t, who, e) from None


def _from_dlpack(obj: Any, who: str) -> np.ndarray:
    try:
        kind, index = obj.__dlpack_device__()
    except (AttributeError, BufferError, RuntimeError, TypeError, ValueError) as e:
        raise _unreadable_error(obj, who, e) from None
    if int(kind) not in _HOST_DEVICES:
        raise _off_host_error(obj, who, f"DLPack device {int(kind)}:{int(index)}")
    try:
        return np.from_dlpack(obj, **_NO_COPY)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise _unreadable_error(obj, who, e) from None


def _off_host_error(obj: Any, who: str, where: str) -> ArgumentError:
    return ArgumentError(f"{who} got {_kind(obj)} on device {where}; metalkit kernels use host memory: pass a "
                         "CPU copy (torch: x.cpu()) and, for a parameter the kernel writes, copy the result back")


def _unreadable_error(obj: Any, who: str, e: Exception) -> ArgumentError:
    dtype = getattr(obj, "dtype", "")
    return ArgumentError(f"{who} got {_kind(obj)}{f' of dtype {dtype}' if dtype else ''} that numpy cannot view "
                         f"({e}); pass one whose dtype numpy has (for raw bytes, torch: x.view(torch.uint8))")


def as_numpy(obj: Any, who: str) -> Optional[np.ndarray]:
    """A numpy view of ``obj``'s memory, or None if it exports neither DLPack nor a buffer.
    ``who`` starts error messages ("kernel 'k': parameter 'x' (...)").

    >>> import array, metalkit._interop as interop
    >>> a = array.array("f", [1.0, 2.0])
    >>> v = interop.as_numpy(a, "example"); v[0] = 5.0
    >>> a[0], interop.as_numpy([1, 2], "example")
    (5.0, None)
    """
    if _is_torch_tensor(obj):
        return _from_torch(obj, who)
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
        elif _is_torch_tensor(obj):
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
