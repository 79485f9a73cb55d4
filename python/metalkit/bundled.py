"""The kernels shipped in metalkit's ``kernels/`` folder, run by name."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from . import _device
from .errors import KernelNotFound
from .library import load

# An installed package holds kernels/; an editable install of a checkout finds them at its root.
_HERE = Path(__file__).resolve().parent
KERNELS_DIR = _HERE / "kernels" if (_HERE / "kernels").is_dir() else _HERE.parents[1] / "kernels"
Dims = Union[int, Sequence[int]]  # grid=, threadgroups=, threadgroup=: x or (x, y, z)
_lock = threading.Lock()
_by_name: dict[tuple[str, str], Any] = {}


def kernels() -> list[str]:
    """Names of the bundled kernels.

    >>> import metalkit
    >>> "add_arrays" in metalkit.kernels()
    True
    """
    names = []
    for f in sorted(KERNELS_DIR.glob("*.metal")):
        names.extend(load(f).kernels)
    return sorted(names)


def _find(name: str):
    backend = _device.current()
    k = _by_name.get((backend, name))
    if k is not None:
        return k
    with _lock:
        for f in sorted(KERNELS_DIR.glob("*.metal")):
            lib = load(f)
            if name in lib.kernels:  # only this kernel: another's first use may cost more
                _by_name[(backend, name)] = lib[name]  # (a struct parameter loads ml_dtypes)
                break
    k = _by_name.get((backend, name))
    if k is None:
        raise KernelNotFound(f"no bundled kernel named {name!r}; bundled kernels: {', '.join(kernels())}. "
                       "Use metalkit.compile(source) or metalkit.load(path) for your own")
    return k


def run(name: str, *args: Any, grid: Dims | None = None, threadgroups: Dims | None = None,
        threadgroup: Dims | None = None, threadgroup_memory: Mapping[int, int] | None = None,
        check: bool | str | Iterable[str] | None = None, shuffle: int | None = None,
        timeout: float | None = None) -> None:
    """Run a bundled kernel by name and wait for it; the arguments are those of ``Kernel.__call__``.

    Positional arguments bind to the kernel's parameters in ``[[buffer(n)]]``
    order; arrays are numpy arrays or objects exporting ``__dlpack__`` or the buffer
    protocol (torch CPU tensors, memoryviews), used in place. Keywords (all default to None; ``help(metalkit.Kernel.__call__)``
    tells each in full):

    - ``grid``: threads per dimension, an int or (x, y, z); default: one per
      element of the arrays, when they all hold as many and the kernel's
      position is 1-D (else DispatchError). All backends.
    - ``threadgroups``: threadgroups per dimension, (x, y, z), instead of
      ``grid``; needs ``threadgroup``. All backends.
    - ``threadgroup``: threads per threadgroup, an int or (x, y, z); default:
      ``min(grid x, 256, the kernel's maximum)`` along x. All backends.
    - ``threadgroup_memory``: ``{index: nbytes}`` for ``[[threadgroup(index)]]``
      parameters. All backends.
    - ``check``: the CPU simulator's checks: ``True`` (bounds and barriers), ``"all"``
      (also races, uninitialised reads, reliance on lockstep) or names (default
      ``METALKIT_CHECK``; see ``Kernel.__call__``). CPU simulator only.
    - ``shuffle``: a seed for shuffled thread order, 0 for index order (default
      ``METALKIT_SHUFFLE``); CPU simulator only.
    - ``timeout``: seconds before a running kernel is stopped with a KernelFault
      (default ``METALKIT_TIMEOUT``, else no limit); CPU simulator only.

    Geometry tuples are (x, y, z) = (width, height, depth), the reverse of numpy's
    shape order.

    The bundled kernels (``metalkit.kernels()``), each documented in its ``kernels/*.metal``
    file; ``metalkit.llm`` wraps the transformer kernels with shape checks and their launch
    geometry:

    - ``add_arrays(const float* a, const float* b, float* out)``: out = a + b
    - ``argmax(const float* logits, int* out, uint V)``: greedy: the largest logit of each row
    - ``attention_prefill(const float* q, const float* k, const float* v, float* out, uint T,
      uint Hq, uint Hkv, uint D, float scale)``: causal attention over a prompt, online softmax
    - ``embedding(const float* table, const int* ids, float* out, uint D)``: row gather
    - ``matmul_simdgroup(const float* A, const float* B, float* C, uint M, uint N, uint K)``:
      C = A @ B^T with simdgroup_matrix
    - ``matmul_tiled(const float* A, const float* B, float* C, uint M, uint N, uint K)``:
      C = A @ B^T, 4x4 register tiles
    - ``matvec(const float* W, const float* x, float* y, uint N, uint K, uint B)``:
      y = x @ W^T for decode
    - ``matvec_q4_0(const block_q4_0* W, const float* x, float* y, uint N, uint K, uint B)``:
      on GGUF Q4_0 blocks
    - ``matvec_q8_0(const block_q8_0* W, const float* x, float* y, uint N, uint K, uint B)``:
      on GGUF Q8_0 blocks
    - ``paged_attention(const float* q, const float* k_cache, const float* v_cache, const int*
      block_tables, const int* context_lens, float* part_acc, float* part_max, float* part_sum,
      uint Hq, uint Hkv, uint D, uint block_size, uint max_blocks, uint partition_size, float
      scale)``: decode attention over a paged KV cache, one split-K partition per thread
    - ``paged_attention_reduce(const float* part_acc, const float* part_max, const float*
      part_sum, float* out, uint P, uint D)``: combines the partitions
    - ``paged_kv_write(const float* k, const float* v, float* k_cache, float* v_cache, const
      int* slots, uint width)``: new keys and values into cache blocks
    - ``rms_norm(const float* x, const float* w, float* out, uint D, float eps)``
    - ``rope(float* x, const int* positions, uint H, uint D, float theta)``: llama layout, in
      place
    - ``sample_top_k_top_p(const float* logits, const float* uniforms, float* probs, int*
      tokens, uint V, float temperature, uint top_k, float top_p)``: top-k/top-p sampling
    - ``softmax(const float* x, float* out, uint C)``: online max and sum
    - ``swiglu(const float* gate, const float* up, float* out)``: silu(gate) * up

    >>> import numpy as np, metalkit
    >>> a = np.full(5, 1.0, np.float32); b = np.full_like(a, 2.0); out = np.zeros_like(a)
    >>> metalkit.run("add_arrays", a, b, out)
    >>> out.tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0]
    >>> out[:] = 0; metalkit.run("add_arrays", a, b, out, grid=3, threadgroup=2)
    >>> out.tolist()
    [3.0, 3.0, 3.0, 0.0, 0.0]
    >>> out[:] = 0; metalkit.run("add_arrays", a, b, out, threadgroups=1, threadgroup=4)  # 1 group of 4
    >>> out.tolist()
    [3.0, 3.0, 3.0, 3.0, 0.0]
    """
    return _find(name)(*args, grid=grid, threadgroups=threadgroups, threadgroup=threadgroup,
                       threadgroup_memory=threadgroup_memory, check=check, shuffle=shuffle, timeout=timeout)
