"""Serving: continuous batching of requests over one model and one paged KV cache.

Each ``step()`` first runs one decode step for every running request together (one batch, one
token each), then admits waiting requests while the batch and the cache have room, running each
one's prompt (prefill) and sampling its first token. A request that has its tokens leaves the
batch at once and its cache blocks go back to the pool, so requests join and leave between
steps and the batch stays full while there is work."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from metalkit import llm

from model import Llama


@dataclass
class Request:
    """A prompt to continue. temperature 0 is greedy decoding; otherwise top-k/top-p sampling,
    its random numbers from ``seed``, so a request draws the same tokens in any batch."""
    prompt: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    id: int = -1                                      # given by Engine.submit
    tokens: list[int] = field(default_factory=list)   # generated so far
    rng: np.random.Generator | None = None

    @property
    def done(self) -> bool:
        return len(self.tokens) >= self.max_new_tokens


class Engine:
    """Serves requests on ``model``: at most ``max_batch`` running together, their keys and
    values in a cache of ``num_blocks`` blocks of ``block_size`` tokens (by default, room for
    every running request's whole context)."""

    def __init__(self, model: Llama, max_batch: int = 8, num_blocks: int | None = None,
                 block_size: int = 16):
        blocks_per_seq = -(-model.config.context_length // block_size)
        self.model = model
        self.max_batch = max_batch
        self.total_blocks = num_blocks or max_batch * blocks_per_seq
        self.cache = model.new_cache(self.total_blocks, block_size)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: dict[int, Request] = {}
        self._next_id = 0
        self._reserved = 0   # blocks the running requests may still grow into

    def submit(self, request: Request) -> int:
        """Queues a request; returns its id."""
        total = len(request.prompt) + request.max_new_tokens
        if not request.prompt or total > self.model.config.context_length:
            raise ValueError(f"a request needs a prompt and at most "
                             f"{self.model.config.context_length} tokens in all, not {total}")
        if self._blocks(request) > self.total_blocks:
            raise ValueError(f"a request of {total} tokens needs {self._blocks(request)} cache "
                             f"blocks; the cache has {self.total_blocks}")
        request.id, self._next_id = self._next_id, self._next_id + 1
        request.rng = np.random.default_rng(request.seed)
        self.waiting.append(request)
        return request.id

    def _blocks(self, r: Request) -> int:
        """The most blocks r can take: its whole prompt and output."""
        return -(-(len(r.prompt) + r.max_new_tokens) // self.cache.block_size)

    def step(self) -> list[tuple[int, int]]:
        """One scheduling step; returns the (request id, token) pairs it produced."""
        events = []
        if self.running:  # decode: one token for every running request, in one batch
            batch = list(self.running)
            logits = self.model.decode([r.tokens[-1] for r in batch], [r.id for r in batch],
                                       self.cache)
            events += self._emit(batch, logits)
        while self.waiting and len(self.running) < self.max_batch:  # admit and prefill
            r = self.waiting[0]
            if self._reserved + self._blocks(r) > self.total_blocks:
                break  # wait until running requests leave
            self.waiting.popleft()
            self._reserved += self._blocks(r)
            self.running.append(r)
            logits = self.model.prefill(r.prompt, r.id, self.cache)
            events += self._emit([r], logits[None])
        return events

    def _emit(self, batch: list[Request], logits: np.ndarray) -> list[tuple[int, int]]:
        """Samples a token for each request of batch from its row of logits; retires those
        that are done."""
        tokens = sample(batch, logits)
        for r, t in zip(batch, tokens):
            r.tokens.append(int(t))
            if r.done:
                self.running.remove(r)
                self.cache.release(r.id)
                self._reserved -= self._blocks(r)
                self.finished[r.id] = r
        return [(r.id, int(t)) for r, t in zip(batch, tokens)]

    def run(self) -> dict[int, list[int]]:
        """Steps until every submitted request is finished: their tokens by id."""
        while self.waiting or self.running:
            self.step()
        return {i: r.tokens for i, r in sorted(self.finished.items())}


def sample(batch: list[Request], logits: np.ndarray) -> np.ndarray:
    """The next token of each request from its row of logits [B, V]: argmax for greedy ones;
    the others in groups of equal settings, each row with the next number of its own stream."""
    out = np.empty(len(batch), np.int32)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(batch):
        key = ("greedy",) if r.temperature == 0 else (r.temperature, r.top_k, r.top_p)
        groups.setdefault(key, []).append(i)
    for key, rows in groups.items():
        x = np.ascontiguousarray(logits[rows])
        if key == ("greedy",):
            out[rows] = llm.argmax(x)
        else:
            u = np.array([batch[i].rng.random() for i in rows], np.float32)
            u = np.minimum(u, np.float32(1 - 2**-24))  # float32 rounding must not reach 1
            out[rows] = llm.sample_top_k_top_p(x, u, *key)
    return out
