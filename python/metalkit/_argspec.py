"""The Python face of a kernel parameter (``Kernel.args``)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


class ArgSpec(NamedTuple):
    """One kernel parameter, an entry of ``Kernel.args``.

    >>> import metalkit as mk
    >>> k = mk.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void scale(device float4* x [[buffer(0)]], constant float& s [[buffer(1)]],
    ...                   uint i [[thread_position_in_grid]]) { x[i] *= s; }
    ... ''').scale
    >>> x = k.args[0]
    >>> x.name, x.index, x.kind, x.dtype, x.msl_type, x.vec_width, x.elem_size, x.writable
    ('x', 0, 'buffer', dtype('float32'), 'float', 4, 16, True)
    >>> k.args[2].kind, k.args[2].builtin
    ('builtin', 'thread_position_in_grid')
    """
    name: str
    index: int  # type: ignore[assignment]  # the [[buffer(n)]] index, over tuple.index
    kind: str
    dtype: Optional[np.dtype]
    msl_type: str
    vec_width: int
    writable: bool
    builtin: str
    elem_size: int
    decl: str
    length: int = 0


_FIELDS = {
    "name": "The parameter's name in the source (str).",
    "index": "Its ``[[buffer(n)]]`` or ``[[threadgroup(n)]]`` index n (int); -1 for builtins.",
    "kind": 'What the call passes (str): "buffer" (an array), "scalar" (a value: scalar, vector, struct or '
            'fixed-length array), "threadgroup" (sized by threadgroup_memory=) or "builtin" (not passed).',
    "dtype": "The numpy dtype of one element's scalars (numpy.dtype); None for structs and builtins.",
    "msl_type": 'The element\'s scalar type as MSL spells it (str): "float", "uint", "half"...',
    "vec_width": "Scalars per element (int): 2, 3 or 4 for vector types, else 1.",
    "writable": "Whether the kernel may write it (bool): a buffer not declared const.",
    "builtin": 'The builtin attribute of a builtin parameter (str), such as "thread_position_in_grid"; "" otherwise.',
    "elem_size": "Bytes per element (int), as the compiler lays it out (a float3 is 16).",
    "decl": 'The declaration as written (str), such as "device const float* x".',
    "length": "N for a fixed-length array parameter ``constant T x[N]``, which takes N values (int); else 0.",
}
for _name, _doc in _FIELDS.items():
    getattr(ArgSpec, _name).__doc__ = _doc
del _name, _doc
