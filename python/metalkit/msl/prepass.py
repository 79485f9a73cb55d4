"""The front end: preprocessed MSL -> C++ that clang compiles, and the kernels in it.

A pipeline of passes over one ``Unit`` (msl/model.py), each in its own file in
``msl/passes``; the order matters where noted:

1. loop_hints           drop ``#pragma unroll(MACRO)`` hints clang -E left unexpanded
2. attributes.find      record every MSL ``[[...]]`` block (blanked in the last pass)
3. functions            function definitions, kernels and their parameters, explicit instantiations
   structs              struct definitions whose layout the module describes (Kernel.args dtypes)
4. threadgroup_storage  ``threadgroup T x[N];`` in a body -> per-threadgroup storage
5. function_constants   bind ``[[function_constant(i)]]`` values; parameters that exist only if one is true
6. kernels              kernels from definitions and ``host_name`` instantiations; ``only`` drops the others
7. callgraph            which kernels reach a barrier or SIMD-group function
8. overloads            functions overloaded only on address spaces: one kept
9. fp16_casts           explicit half <-> bfloat conversions go through float
10. keywords            address-space keywords, unused attributes, float literals
11. simt (msl/simt)     on the rewritten tokens: kernels with barriers or SIMD-group functions
                        and their helpers run each SIMD-group's lanes in lockstep
12. streaming           kernels run as loops whose outputs can be stored past the cache

Kernel signatures are read at token level; types are described by the compiled
module itself (see ``metalkit/launch.h``).
"""
from __future__ import annotations

from . import clang_facts, simt
from .model import Kernel, Param, Result, Unit
from .passes import (attributes, callgraph, fp16_casts, function_constants, functions, kernels, keywords, loop_hints,
                     overloads, streaming, structs, threadgroup_storage)
from .source import MslError, Source

__all__ = ["prepass", "MslError", "Kernel", "Param", "Result"]


def prepass(text: str, is_user, constants: dict | None = None, only=None, duplicates: str = "error",
            execution: str = "auto", head: int = 0, facts=None) -> Result:
    """Pre-passed text and its kernels.

    ``is_user(file)``: whether a file's lines are the user's (others pass through).
    ``constants``: function constant values by name or index.
    ``only``: host names of the kernels to build (None: all).
    ``duplicates="drop"``: kernels sharing a host name are left out instead of being an error.
    ``execution``: "auto" (SIMT where the transform applies, else "fibers"), or one model for every
    kernel with barriers or SIMD-group functions: "fibers" (a fiber per thread, lanes meeting before
    each statement) or "threads" (a fiber per thread running the code as written: the reference);
    "checked" is "auto" with the kernels that would run as a loop run as "threads", and
    "checked-threads" is "threads" for every kernel, barriers or not: the builds for check=
    races and uninit, and for lockstep (codegen.launchers, toolchain's flags); "guarded" is
    "auto" with kernel-scope threadgroup variables in guarded storage: check=True's build of a
    kernel that declares them.
    ``head``: the length of a leading part of ``text`` that is metalkit's headers, whole declarations
    that recur in every text after its first line (a marker naming the file): the names they
    declare are read once (msl/pch.py finds it).
    ``facts``: if given, called with the text made C++ (before the SIMT pass); what it returns
    (msl/clang_facts.Facts, or None) decides, as clang resolves calls and names, which kernels
    reach a barrier or SIMD-group function (passes/callgraph.py), which read a function constant
    given no value, and how the SIMT pass reads statements and calls.
    """
    unit = Unit(Source(text, is_user), dict(constants or {}), only, checked=execution.startswith("checked"))
    loop_hints.drop_unexpanded(unit)
    attributes.find(unit)
    functions.find(unit)
    structs.find(unit)
    threadgroup_storage.rewrite(unit, checked=execution.startswith("checked") or execution == "guarded")
    function_constants.bind(unit)
    kernels.collect(unit, duplicates)
    for k in unit.kernels:
        k.threadgroup_variables = k.function in unit.threadgroup_functions
    reach = callgraph.mark(unit)
    function_constants.find_unset_uses(unit, reach)
    if only is not None:
        unit.kernels = [k for k in unit.kernels if k.host_name in only]
        kernels.blank_unbuilt(unit)
    overloads.drop(unit)
    fp16_casts.rewrite(unit, text, head)
    keywords.rewrite(unit)
    # Only code that names a barrier or SIMD-group function can reach one (all of metalkit's are
    # named so), and only a constant given no value can be misread: otherwise clang has nothing
    # to add, and a small kernel's compile is spared the parse.
    named = any(t.kind == "id" and t.text.startswith(callgraph.SYNC_FUNCTIONS) for t in unit.toks)
    if facts is not None and unit.kernels and (named or any(v is None for v in unit.fc_values.values())):
        positions: dict = {}
        found = facts(unit.src.render(positions))
        if found is not None:
            reach = callgraph.mark(unit, found, positions)
            function_constants.find_unset_uses(unit, reach, found, positions)
            unit.statements = _statements(unit, found, positions)
            unit.call_sync = _call_sync(unit, found, positions, reach)
    if execution in ("auto", "checked", "guarded"):
        simt.transform(unit, reach, text, head, split=execution == "auto")
        if execution == "checked":  # loops too run a fiber per thread, so each access names its thread
            for k in unit.kernels:
                if k.execution == "loop":
                    k.execution = "threads: check= records every memory access"
    elif execution == "checked-threads":  # check= lockstep: every thread a fiber, as the reference model
        for k in unit.kernels:
            k.execution = "threads: check= records every memory access"
    else:
        for k in unit.kernels:
            k.execution = f"{execution}: execution={execution!r} was asked for" if k.needs_sync else "loop"
        if execution == "fibers":
            for f in unit.functions:
                if f.is_kernel and any(k.function == f.name and k.needs_sync for k in unit.kernels):
                    simt.steps.insert(unit, f)
    streaming.find(unit)
    logs = any(t.kind == "id" and t.text in callgraph.LOG_NAMES for t in unit.toks)
    return Result(unit.src.render(), unit.kernels, unit.src.files, unit.structs, logs)


def _call_sync(unit: Unit, found, positions: dict, reach) -> dict[int, bool]:
    """Whether what each function name in code refers to reaches a barrier or SIMD-group function,
    as clang resolves it (per instantiation, merged)."""
    out: dict[int, bool] = {}
    for span, targets in found.sites.items():
        i = clang_facts.name_token(span, positions, unit.toks)
        if i is None:
            continue
        hit = any(t.startswith(callgraph.SYNC_FUNCTIONS) if isinstance(t, str) else bool(reach.at.get(t))
                  for t in targets)
        out[i] = out.get(i, False) or hit
    return out


def _statements(unit: Unit, found, positions: dict) -> dict[int, str]:
    """clang's statement kinds by first token; a statement whose first tokens the pre-pass blanked
    (``device``, an attribute) starts at the first of them."""
    out: dict[int, str] = {}
    placed = set(positions.values())
    for at, kind in found.statements.items():
        i = positions.get(at)
        if i is None:
            continue
        out[i] = kind
        while i > 0 and i - 1 not in placed:
            i -= 1
            out[i] = kind
    return out
