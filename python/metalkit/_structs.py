"""numpy structured dtypes for struct parameters, with the layout the kernel reads.

The compiled core hands over each struct's layout (field names, offsets, element
types, array extents) as the compiler or Metal laid it out; ``dtype`` turns it into
the dtype of ``Kernel.args[i].dtype``. A vector field is a subarray: ``float4 v`` is
``('v', '<f4', (4,))``, ``float3 v`` is ``(3,)`` in its 16 bytes, and in an array or a
matrix a 3-lane vector keeps its padding lane (``float3 v[2]`` is ``(2, 4)``,
``float3x3 m`` is ``(3, 4)``: columns first, as ``m[c][r]`` in MSL).

``mismatch`` decides whether values of another dtype may be passed: the same bytes
must mean the same numbers, whatever the field names.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import ml_dtypes
import numpy as np

_SCALARS = {"bool": np.bool_, "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
            "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
            "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def dtype(layout: tuple) -> np.dtype:
    """The structured dtype of ``layout``: (size, align, fields), each field
    (name, offset, scalar numpy name or "" for bytes, vector width, element size, dims, nested layout or None).

    >>> dtype((32, 16, [("a", 0, "float32", 1, 4, (), None), ("v", 16, "float32", 4, 16, (), None)])).itemsize
    32
    """
    size, _align, fields = layout
    names, formats, offsets = [], [], []
    for name, offset, scalar, width, elem_size, dims, nested in fields:
        dims = tuple(dims)
        if nested is not None:
            base, lanes = dtype(nested), ()
        elif not scalar:
            base, lanes = np.dtype((np.void, elem_size)), ()
        else:
            base = np.dtype(_SCALARS[scalar])
            lanes = () if width == 1 else (width,) if not dims else (elem_size // base.itemsize,)
        shape = dims + lanes
        names.append(name)
        formats.append((base, shape) if shape else base)
        offsets.append(offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def _leaves(dt: np.dtype, at: int, out: list) -> None:
    """(offset, size, scalar dtype) of every number in dt, padding left out; bytes fields have dtype None."""
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        for k in range(int(np.prod(shape))):
            _leaves(base, at + k * base.itemsize, out)
    elif dt.names is not None:
        for name in dt.names:
            sub, off = dt.fields[name][:2]
            _leaves(sub, at + off, out)
    elif dt.type is np.void:
        out.append((at, dt.itemsize, None))
    else:
        out.append((at, dt.itemsize, dt))


def _describe(leaf) -> str:
    at, size, dt = leaf
    return f"{size} bytes" if dt is None else f"{dt.name}{'' if dt.isnative else ' (' + dt.str + ')'}"


@lru_cache(maxsize=256)
def mismatch(given: np.dtype, expected: np.dtype) -> Optional[str]:
    """Why values of dtype ``given`` would not mean, to the kernel, what they mean in numpy (None: they do).

    Same item size; every number the kernel reads must be a number of the same type at the
    same offset in ``given`` (field names do not matter). Bytes fields on either side
    (``V`` dtypes) match anything, and ``given`` may hold numbers where the kernel has padding.

    >>> a = np.dtype([("a", "<f4"), ("n", "<u4")]); b = np.dtype([("x", "<f4"), ("y", "<f4")])
    >>> mismatch(a, a) is None, mismatch(b, a)
    (True, 'the kernel reads uint32 at byte 4, where the dtype given has float32')
    """
    if given.itemsize != expected.itemsize:
        return f"the kernel's struct is {expected.itemsize} bytes, the dtype given {given.itemsize}"
    if given.names is None and given.subdtype is None:
        return None  # plain bytes (np.void): the caller lays them out
    want: list = []
    have: list = []
    _leaves(expected, 0, want)
    _leaves(given, 0, have)
    wild = [(a, a + s) for a, s, d in want + have if d is None]
    have_at = {(a, s): d for a, s, d in have if d is not None}
    for a, s, d in want:
        if d is None or any(lo <= a and a + s <= hi for lo, hi in wild):
            continue
        got = have_at.get((a, s))
        if got is None or got != d:
            other = next((h for h in have if h[0] < a + s and a < h[0] + h[1]), None)
            where = "nothing" if other is None else _describe(other) + (
                "" if other[0] == a else f" at byte {other[0]}")
            return f"the kernel reads {_describe((a, s, d))} at byte {a}, where the dtype given has {where}"
    return None
