"""Execution models of the CPU simulator: what ``Kernel.execution`` reports, what ``execution=`` asks for."""
from __future__ import annotations

import enum
import os

from .errors import ArgumentError

ENV = "METALKIT_EXECUTION"
# What compile()/load() take: metalkit's choice, or one model for every kernel with barriers or
# SIMD-group functions (kernels with neither always run as a loop).
CHOICES = ("auto", "fibers", "threads")


class Execution(str, enum.Enum):
    """How a kernel runs (``Kernel.execution``; why, if not the usual, in ``Kernel.execution_reason``).

    A ``str``, so ``kernel.execution == "simt"`` reads as it should.

    >>> import metalkit
    >>> lib = metalkit.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void total(device float* x [[buffer(0)]], uint l [[thread_index_in_simdgroup]]) {
    ...     x[l] = simd_sum(x[l]);
    ... }
    ... ''', execution="threads")
    >>> lib.total.execution, lib.total.execution_reason
    (<Execution.THREADS: 'threads'>, "execution='threads' was asked for")
    """

    LOOP = "loop"        # no barrier, no SIMD-group function: a plain loop over the threads
    SIMT = "simt"        # each SIMD-group's 32 lanes in lockstep, statement by statement
    FIBERS = "fibers"    # a fiber per thread, the lanes of a SIMD-group meeting before each statement
    THREADS = "threads"  # the reference: a fiber per thread running the code as written
    GPU = "gpu"          # Metal: the Apple GPU

    def __str__(self) -> str:
        return self.value


def choose(execution: str | None) -> str:
    """The model asked for: ``execution``, else ``METALKIT_EXECUTION``, else "auto"; checked."""
    where = "execution="
    if execution is None:
        execution, where = os.environ.get(ENV) or "auto", ENV
    if execution not in CHOICES:
        raise ArgumentError(f"{where}: unknown execution model {execution!r}; use one of "
                            f"{', '.join(repr(c) for c in CHOICES)} (\"threads\": every thread its own fiber, "
                            "the reference model; \"fibers\": the same with SIMD-groups in lockstep)")
    return execution


def parse(described: str) -> tuple[Execution, str]:
    """A module's description ("simt", "fibers: why (file:line)") as (Execution, reason)."""
    kind, _, reason = described.partition(":")
    return Execution(kind), reason.strip()
