"""What the front end learns from clang's AST rather than from tokens (msl/clang_facts.py).

Each kernel here is a C++ pattern real libraries use (MLX's block sort, its attention kernels,
functor-based reductions) that a by-name or by-token reading gets wrong. Each runs under the
default model and the reference model, against numpy, and the two must agree bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from simd_order import tree_fold
from conftest import build
from metalkit.msl import clang_facts

pytestmark = pytest.mark.parametrize("device", ["cpu"], indirect=True)  # facts of the CPU front end

# A kernel named like the static member of a class template it calls through a type alias; the
# member reaches the barrier. A second helper of the same name reaches none.
SAME_NAME = """
template <typename T> struct Lane { static void sort(thread T& a, thread T& b) { if (b < a) { T t = a; a = b; b = t; } } };

template <typename T, int N> struct Block {
    using lane_t = Lane<T>;
    static void sort(threadgroup T* s, uint t) {
        for (uint k = 1; k < N; k *= 2) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (t % (2 * k) == 0 && t + k < N) { T a = s[t], b = s[t + k]; lane_t::sort(a, b); s[t] = a + b; }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
};

template <typename T, int N>
[[kernel]] void sort(device const T* x [[buffer(0)]], device T* out [[buffer(1)]],
                     uint t [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    using block_t = Block<T, N>;
    threadgroup T s[N];
    s[t] = x[g * N + t];
    block_t::sort(s, t);
    if (t == 0) out[g] = s[0];
}
template [[host_name("sort_float_64")]] [[kernel]] void sort<float, 64>(device const float*, device float*, uint, uint);
"""

# A parameter named like a namespace-scope function constant given no value: the parameter is
# what the kernel reads (Apple's compiler takes it).
SHADOW = """
constant int blocks [[function_constant(0)]];
kernel void total(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  constant int& blocks [[buffer(2)]], uint l [[thread_index_in_simdgroup]]) {
    float s = 0.0f;
    for (int b = 0; b < blocks; ++b) s += x[b * 32 + l];
    out[l] = simd_sum(s);
}
"""

# A functor whose operator() is a SIMD-group function: no name in the kernel says so.
FUNCTOR = """
struct SimdAdd { float operator()(float v) const { return simd_sum(v); } };
template <typename Op> float reduce(Op op, float v) { return op(v); }
kernel void functor(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    out[i] = reduce(SimdAdd(), x[i]);
}
"""


def run_both(src, name, *arrays, **call):
    outs = []
    for execution in ["auto", "threads"]:
        args = [a.copy() for a in arrays]
        kernel = build(src, execution=execution)[name]
        kernel(*args, **call)
        outs.append((kernel, args))
    (simt, a), (threads, b) = outs
    assert threads.execution == "threads"
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    return simt, a


@pytest.mark.parametrize("groups", [1, 3])
def test_a_static_member_through_an_alias_reaches_its_barrier(device, rng, groups):
    x = rng.standard_normal(groups * 64).astype(np.float32)
    kernel, (_, out) = run_both(SAME_NAME, "sort_float_64", x, np.zeros(groups, np.float32),
                                threadgroups=groups, threadgroup=64)
    assert kernel.execution == "simt", kernel.execution_reason
    np.testing.assert_allclose(out, x.reshape(groups, 64).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", [1, 4])
def test_a_parameter_shadows_a_function_constant(device, rng, blocks):
    x = rng.standard_normal(blocks * 32).astype(np.float32)
    kernel, (_, out, _) = run_both(SHADOW, "total", x, np.zeros(32, np.float32), np.int32(blocks),
                                   grid=32, threadgroup=32)
    assert kernel.execution == "simt", kernel.execution_reason
    # A float32 sum's error scales with the sum of magnitudes, not with a total that may cancel.
    np.testing.assert_allclose(out, np.full(32, x.sum(dtype=np.float64)), rtol=1e-5, atol=1e-6 * np.abs(x).sum())


def test_a_function_constant_read_without_a_value_is_still_refused(device):
    with pytest.raises(mk.CompileError, match="function constant 'blocks'"):
        build(SHADOW.replace("b < blocks", "b < ::blocks"))["total"]


@pytest.mark.parametrize("n", [32, 100])
def test_a_functor_calling_a_simd_function_is_seen(device, rng, n):
    # No name in the kernel or its helper says so; clang does. The SIMT pass leaves a call through
    # a callable object to the fallback, which keeps lockstep.
    x = rng.standard_normal(n).astype(np.float32)
    kernel, (_, out) = run_both(FUNCTOR, "functor", x, np.zeros(n, np.float32), grid=n, threadgroup=64)
    assert kernel.execution == "fibers"
    assert kernel.execution_reason == "a SIMD-group function called through a callable object (<source>:5)"
    # simd_sum adds its lanes in float32 in metalkit's documented order (a pairwise tree): exact.
    # A float64 sum with a tolerance failed on draws whose lanes nearly cancel.
    def tree_sum(c):
        return tree_fold([np.float32(v) for v in c] + [None] * (32 - len(c)), lambda a, b: a + b, np.float32)
    want = np.concatenate([np.full(len(c), tree_sum(c), np.float32) for c in np.split(x, range(32, n, 32))])
    np.testing.assert_array_equal(out, want)


def test_facts_name_definitions_calls_and_statements(device):
    # read() on a hand-made dump of `void f() { g(); int x = y; }` in a file of one line.
    text = "void g() {} int y; void f() { g(); int x = y; }"
    at = {w: text.index(w) for w in ("g()", "y;", "f()", "g();", "int x", "y; }")}
    loc = lambda o: {"offset": o, "col": o + 1, "tokLen": 1}
    dump = {"kind": "TranslationUnitDecl", "id": "0x1", "inner": [
        {"kind": "FunctionDecl", "id": "0x2", "name": "g", "loc": loc(at["g()"]),
         "inner": [{"kind": "CompoundStmt", "id": "0x3"}]},
        {"kind": "VarDecl", "id": "0x4", "name": "y", "loc": loc(at["y;"])},
        {"kind": "FunctionDecl", "id": "0x5", "name": "f", "loc": loc(at["f()"]), "inner": [
            {"kind": "CompoundStmt", "id": "0x6", "inner": [
                {"kind": "CallExpr", "id": "0x7", "range": {"begin": loc(at["g();"]), "end": loc(at["g();"] + 2)},
                 "inner": [{"kind": "DeclRefExpr", "id": "0x8",
                            "range": {"begin": loc(at["g();"]), "end": loc(at["g();"])},
                            "referencedDecl": {"id": "0x2", "kind": "FunctionDecl", "name": "g"}}]},
                {"kind": "DeclStmt", "id": "0x9", "range": {"begin": loc(at["int x"]), "end": loc(at["y; }"])},
                 "inner": [{"kind": "DeclRefExpr", "id": "0xa",
                            "range": {"begin": loc(at["y; }"]), "end": loc(at["y; }"])},
                            "referencedDecl": {"id": "0x4", "kind": "VarDecl", "name": "y"}}]}]}]}]}
    facts = clang_facts.read(dump, text, 7)
    g, f, y = (7, at["g()"]), (7, at["f()"]), (7, at["y;"])
    assert facts.calls == {g: set(), f: {g}}
    assert facts.var_refs == {y: {((7, at["y; }"]), (7, at["y; }"]), "y")}}
    assert facts.statements == {(7, at["g();"]): "expr", (7, at["int x"]): "decl"}
    assert facts.sites == {((7, at["g();"]), (7, at["g();"]), "g"): {g}}
