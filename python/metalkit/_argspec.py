"""The Python face of a kernel parameter (``Kernel.args``)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


class ArgSpec(NamedTuple):
    """One kernel parameter: ``kind`` is "buffer", "scalar", "threadgroup" or "builtin"."""
    name: str
    index: int            # [[buffer(n)]] / [[threadgroup(n)]], -1 for builtins
    kind: str
    dtype: Optional[np.dtype]   # element dtype; a struct's structured dtype with the kernel's layout
                                # (np.zeros((), dtype) builds a value); None for builtins and for a
                                # struct metalkit cannot describe (it takes bytes of elem_size)
    msl_type: str         # element scalar type as MSL spells it
    vec_width: int        # 2/3/4 for vector elements
    writable: bool
    builtin: str          # builtin attribute name, "" otherwise
    elem_size: int        # bytes per element
    decl: str             # the declaration as written
    length: int = 0       # N for a fixed-length array parameter (constant T x[N]): takes N values
