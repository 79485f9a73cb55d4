"""execution=: the simulator's models, and the reference model every other one is checked against.

"threads" runs every thread as its own fiber through the code as written: barriers and
SIMD-group functions are its only meeting points. It gives what any correct model must give
for a kernel that does not rely on the lanes of a SIMD-group running in lockstep, so SIMT
("auto") must match it bit for bit on such kernels; the corpus tests check that on real code.
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from conftest import build
from test_simt import LOCKSTEP  # its `minimal`: lane 0 overwrites what its SIMD-group just read

pytestmark = pytest.mark.parametrize("device", ["cpu"], indirect=True)  # Metal runs the GPU whatever it says

SRC = """
kernel void scale(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] *= 2.0f; }

// A tree reduction, then a SIMD-group sum of the per-group results: barriers and SIMD functions.
kernel void reduce(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   threadgroup float* s [[threadgroup(0)]], constant uint& n [[buffer(2)]],
                   uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                   uint tg [[threads_per_threadgroup]], uint g [[threadgroup_position_in_grid]],
                   uint l [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
    s[t] = i < n ? x[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = tg / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    float mine = sg == 0 && l < 4 ? s[0] * float(l + 1) : 0.0f;
    float total = simd_sum(mine);
    if (t == 0) out[g] = total;
}

"""


def test_each_model_is_reported_with_its_reason(device):
    for execution, model, reason in [("auto", "simt", ""), ("fibers", "fibers", "execution='fibers' was asked for"),
                                     ("threads", "threads", "execution='threads' was asked for")]:
        lib = build(SRC, execution=execution)
        assert lib.reduce.execution == model and isinstance(lib.reduce.execution, mk.Execution)
        assert lib.reduce.execution_reason == reason
        assert lib.scale.execution is mk.Execution.LOOP and lib.scale.execution_reason == ""  # no barrier: a loop


@pytest.mark.parametrize("n,tg", [(1, 32), (37, 32), (1000, 64), (4099, 256), (300, 128)])
def test_every_model_agrees_bit_for_bit_on_a_kernel_without_lockstep(device, rng, n, tg):
    x = rng.standard_normal(n).astype(np.float32)
    groups = -(-n // tg)
    outs = {}
    for execution in ["auto", "fibers", "threads"]:
        out = np.full(groups, np.nan, np.float32)
        build(SRC, execution=execution).reduce(x, out, n, threadgroups=groups, threadgroup=tg,
                                               threadgroup_memory={0: tg * 4})
        outs[execution] = out
    assert outs["auto"].tobytes() == outs["threads"].tobytes() == outs["fibers"].tobytes()
    sums = np.add.reduce(np.pad(x, (0, groups * tg - n)).reshape(groups, tg), axis=1, dtype=np.float64)
    np.testing.assert_allclose(outs["threads"], sums * 10, rtol=1e-4, atol=1e-4)


def test_the_reference_model_shows_reliance_on_lockstep(device):
    # On the GPU (and under SIMT and fibers) every lane reads before lane 0 stores; run as
    # independent threads, the lanes after lane 0 read its store: this kernel relies on lockstep.
    outs = {}
    for execution in ["auto", "fibers", "threads"]:
        out = np.zeros(32, np.float32)
        build(LOCKSTEP, execution=execution).minimal(out, grid=32, threadgroup=32)
        outs[execution] = out.tolist()
    assert outs["auto"] == outs["fibers"] == [1.0] * 32
    assert outs["threads"] == [1.0] + [100.0] * 31


def test_the_environment_variable_picks_the_model(device, monkeypatch, rng):
    monkeypatch.setenv("METALKIT_EXECUTION", "threads")
    assert build(SRC).reduce.execution == "threads"
    assert build(SRC, execution="auto").reduce.execution == "simt"  # the argument wins
    monkeypatch.setenv("METALKIT_EXECUTION", "lockstep")
    with pytest.raises(mk.ArgumentError, match=r"METALKIT_EXECUTION: unknown execution model 'lockstep'; use one of "
                                               r"'auto', 'fibers', 'threads'"):
        build(SRC)


def test_an_unknown_model_is_refused(device):
    with pytest.raises(mk.ArgumentError, match=r"execution=: unknown execution model 'simd'"):
        build(SRC, execution="simd")


def test_load_and_specialize_keep_the_model(device, tmp_path):
    path = tmp_path / "k.metal"
    path.write_text("#include <metal_stdlib>\nusing namespace metal;\n"
                    "constant float gain [[function_constant(0)]];\n" + SRC.replace("*= 2.0f", "*= gain"))
    lib = mk.load(path, constants={"gain": 2.0}, execution="threads")
    assert lib.reduce.execution == "threads"
    assert lib.specialize("reduce", {"gain": 3.0}).execution == "threads"
    x = np.arange(4, dtype=np.float32)
    lib.specialize("scale", {"gain": 3.0})(x)
    assert x.tolist() == [0.0, 3.0, 6.0, 9.0]
