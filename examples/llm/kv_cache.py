"""The paged KV cache: keys and values of every running sequence in one pool of fixed-size
blocks per layer, [num_blocks, block_size, n_kv_heads, head_dim], as the paged_attention
kernels read it. A sequence holds a list of blocks (its block table) and takes a new block
only when its last one is full, so memory follows the tokens actually cached, and a finished
sequence's blocks go straight back to the pool for the next request."""
from __future__ import annotations

import numpy as np

import metalkit as mk


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


class PagedKVCache:
    """The block pool of every layer, and each sequence's block table and length."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, n_kv_heads: int,
                 head_dim: int):
        shape = (num_blocks, block_size, n_kv_heads, head_dim)
        # on a Mac, device memory, which the GPU uses where it is (not copied at every call)
        zeros = mk.zeros if mk.device().backend == "metal" else np.zeros
        self.k = [zeros(shape, np.float32) for _ in range(n_layers)]
        self.v = [zeros(shape, np.float32) for _ in range(n_layers)]
        self.block_size = block_size
        self.free = list(range(num_blocks))[::-1]      # a stack: pop() takes the lowest
        self.tables: dict[int, list[int]] = {}         # sequence id -> its blocks, in order
        self.lengths: dict[int, int] = {}              # sequence id -> tokens cached

    def blocks_needed(self, seq: int, n: int) -> int:
        """New blocks that appending n tokens to seq would take."""
        have = len(self.tables.get(seq, ()))
        return max(0, -(-(self.lengths.get(seq, 0) + n) // self.block_size) - have)

    def append(self, seq: int, n: int) -> np.ndarray:
        """Room for n more tokens of seq (a new seq starts empty): their slots, block *
        block_size + offset, for paged_kv_write."""
        if self.blocks_needed(seq, n) > len(self.free):
            raise OutOfBlocks(f"sequence {seq} needs {self.blocks_needed(seq, n)} blocks, "
                              f"{len(self.free)} are free")
        table = self.tables.setdefault(seq, [])
        start = self.lengths.get(seq, 0)
        for _ in range(self.blocks_needed(seq, n)):
            table.append(self.free.pop())
        self.lengths[seq] = start + n
        pos = np.arange(start, start + n)
        blocks = np.array(table, np.int64)[pos // self.block_size]
        return blocks * self.block_size + pos % self.block_size

    def block_tables(self, seqs: list[int]) -> np.ndarray:
        """The block tables of seqs as one int32 array [len(seqs), most blocks], -1 padded."""
        width = max(len(self.tables[s]) for s in seqs)
        out = np.full((len(seqs), width), -1, np.int32)
        for i, s in enumerate(seqs):
            out[i, :len(self.tables[s])] = self.tables[s]
        return out

    def release(self, seq: int) -> None:
        """Returns seq's blocks to the pool."""
        self.free.extend(reversed(self.tables.pop(seq, [])))
        self.lengths.pop(seq, None)
