"""Which loop kernels store their outputs past the cache (msl/passes/streaming.py).

Streaming defers each output's store to the end of a window of threads, so it is only the same
program when that store is the thread's last act on the output and lands at the thread's own
position. Each case is a kernel and the outputs that must stream, () for none.
"""
from __future__ import annotations

import pytest

from metalkit.msl import build, cache, toolchain
from metalkit.msl.build import Options

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"
SIG = "device const float* a, device float* out, device uint* idx, constant uint& n, uint id [[thread_position_in_grid]]"

CASES = {
    # Streamed.
    "the last statement": (("out",), "out[id] = a[id] + 1.0f;"),
    "two outputs, in order": (("out", "idx"), "float v = a[id];\n out[id] = v * 2.0f;\n idx[id] = uint(v);"),
    "the index copied and used in arithmetic": (("out",), "uint i = id;\n out[id] = a[min(i, n - 1)] * float(id % 3u);"),
    "after loops and branches": (("out",), "float s = 0;\n for (uint k = 0; k < 4; ++k) { if (k < n) s += a[k]; }\n"
                                           " out[id] = s - -float(id);"),
    "the index passed by value": (("out",), "out[id] = float(static_cast<int>(id)) + clamp(a[id], 0.0f, 1.0f);"),
    # Not streamed: the store might not happen, or not last, or not at the thread's own position.
    "a conditional store": ((), "if (id < n) out[id] = a[id];"),
    "a return before it": ((), "if (id >= n) return;\n out[id] = a[id];"),
    "a statement after it": ((), "out[id] = a[id];\n idx[id] = 1u;\n out[0] = 0.0f;"),
    "an output read": ((), "out[id] = out[id] + a[id];"),
    "a compound assignment": ((), "out[id] += a[id];"),
    "another index": ((), "out[id + 1u] = a[id];"),
    "an output named twice": ((), "device float* o = out;\n out[id] = o[0];"),
    "the index assigned": ((), "id = id * 2u;\n out[id] = a[id];"),
    "the index incremented": ((), "uint j = id++;\n out[id] = a[j];"),
    "the index addressed": ((), "thread uint* p = &id;\n out[id] = a[*p];"),
    "the index bound to a reference": ((), "thread uint& r = id;\n r = 0;\n out[id] = a[id];"),
    "the index passed to a user function": ((), "bump(id);\n out[id] = a[id];"),
    "the index redeclared": ((), "{ uint id = 0; out[0] = float(id); }\n out[id] = a[id];"),
    "a conditional index": ((), "uint j = n > 0 ? id : 0u;\n out[id] = a[j];"),
}


def _front(src: str):
    tc = toolchain.find()
    opts = Options.of(HEADER + src, "case.metal")
    with cache.workspace() as tmp:
        result, _ = build._front(tc, opts, opts.key(tc, None), tmp, None, building=True)
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_kernels_stream_their_outputs(case):
    want, body = CASES[case]
    helper = "void bump(thread uint& x) { x += 1; }\n" if "bump" in body else ""
    [k] = _front(f"{helper}kernel void k({SIG}) {{\n {body}\n}}\n").kernels
    assert k.execution.startswith("loop")
    assert tuple(k.params[i].name for i in k.streamed) == want
    assert ("past the cache" in k.execution) == bool(want)


def test_other_index_types_and_kernels_that_are_not_loops():
    src = """
kernel void by_vector(device float* out, uint2 id [[thread_position_in_grid]]) { out[id.x] = 1.0f; }
kernel void by_group_index(device float* out, uint id [[thread_index_in_threadgroup]]) { out[id] = 1.0f; }
kernel void read_only(device const float* out, device float* o, uint id [[thread_position_in_grid]]) { o[id] = out[id]; }
kernel void simt(device float* out, uint id [[thread_position_in_grid]]) { out[id] = simd_sum(1.0f); }
template <typename T>
kernel void templated(device T* out, device const T* a, uint id [[thread_position_in_grid]]) { out[id] = a[id]; }
template [[host_name("templated_half")]] kernel void templated<half>(device half*, device const half*, uint);
"""
    got = {k.host_name: tuple(k.params[i].name for i in k.streamed) for k in _front(src).kernels}
    assert got == {"by_vector": (), "by_group_index": (), "read_only": ("o",), "simt": (), "templated_half": ("out",)}
