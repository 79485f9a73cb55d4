"""Out-of-bounds access: it faults before it can reach other memory (check=True: any array;
by default: metalkit's own arrays), the fault names the parameter and element however far
away, and the caller's other arrays stay byte for byte as they were. Vectors are read and
written at their element's alignment, as a GPU does, in both modes. Faults run in child
processes, so a failure cannot take the test run down."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, build, child_env


@pytest.fixture(autouse=True)
def cpu():
    """Guards, checked copies and their faults are the CPU simulator's."""
    mk.use("cpu")


WILD = HEADER + """
kernel void poke(device float* x [[buffer(0)]], constant long& at [[buffer(1)]], constant float& v [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    if (i == 0) x[at] = v;                      // a scalar store, anywhere
}
kernel void fill(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = float(i); }
kernel void tg_overrun(device float* out [[buffer(0)]], threadgroup float* t [[threadgroup(0)]],
                       constant int& first [[buffer(1)]], constant int& count [[buffer(2)]],
                       uint l [[thread_position_in_threadgroup]]) {
    if (l == 0)
        for (int k = first; k < first + count; ++k) t[k] = float(k);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = t[count - 1 - l];
}
"""

PAGE, KIB400, GIB = 4096, 400 * 1024, 1 << 30

# Runs in a child: neighbours around the target, one wild store per case, then digests.
CHILD = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import metalkit as mk
    mode, src, cases = sys.argv[1], sys.stdin.read(), json.loads(sys.argv[2])
    check = mode == "check"
    lib = mk.compile(src)
    rng = np.random.default_rng(7)
    n = 1000
    out = []
    for distance, direction in cases:
        # Neighbours of every size class the allocator uses, before and after the target.
        before = [rng.random(k, dtype=np.float32) for k in (7, 1000, 30000, 300000)]
        before_mk = mk.asarray(rng.random(5000, dtype=np.float32))
        # Checked mode guards any array; by default, metalkit's own arrays are guarded.
        x = rng.random(n, dtype=np.float32) if check else mk.asarray(rng.random(n, dtype=np.float32))
        after = [rng.random(k, dtype=np.float32) for k in (7, 1000, 30000, 300000)]
        after_mk = mk.asarray(rng.random(5000, dtype=np.float32))
        neighbours = before + [before_mk] + after + [after_mk]
        digests = [hashlib.sha256(a.tobytes()).hexdigest() for a in neighbours]
        x_digest = hashlib.sha256(x.tobytes()).hexdigest()
        at = n - 1 + distance // 4 if direction > 0 else -(distance // 4)
        try:
            lib.poke(x, at, 12345.0, grid=1, check=check)
            fault = None
        except mk.KernelFault as e:
            fault = str(e)
        y = np.zeros(33, np.float32)
        lib.fill(y)                     # the process carries on
        out.append({"at": at, "fault": fault,
                    "neighbours_intact": digests == [hashlib.sha256(a.tobytes()).hexdigest() for a in neighbours],
                    "x_intact": x_digest == hashlib.sha256(x.tobytes()).hexdigest(),
                    "later_call": y.tolist() == list(range(33))})
    print(json.dumps(out))
""")


def run_child(tmp_path, mode: str, cases: list) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, json.dumps(cases)], input=WILD, capture_output=True,
                          text=True, env=child_env(tmp_path / "cache"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = [[d, s] for d in (PAGE, KIB400, GIB) for s in (1, -1)]


@pytest.mark.parametrize("mode", ["check", "default"])
def test_wild_writes_fault_and_leave_neighbours_intact(tmp_path, mode):
    for case, r in zip(CASES, run_child(tmp_path, mode, CASES)):
        assert r["fault"] is not None, (case, r)
        side = "past the end of" if r["at"] > 0 else "before the start of"
        assert f"{side} parameter 'x' [[buffer(0)]] of 1000 elements (element {r['at']})" in r["fault"], r["fault"]
        assert r["fault"].startswith("kernel 'poke' (")
        assert r["neighbours_intact"], case
        assert r["later_call"]
        if mode == "check":
            assert r["x_intact"], case  # nothing is copied back from a faulted run


def test_off_by_one_faults_in_checked_mode_at_every_size(tmp_path):
    # The copy ends right at the guard, whatever the size: element n is already out.
    child = textwrap.dedent("""
        import sys, numpy as np, metalkit as mk
        lib = mk.compile(sys.stdin.read())
        for n in (1, 3, 9, 1000, 1025):
            x = np.ones(n, np.float32)
            try:
                lib.poke(x, n, 5.0, grid=1, check=True)
                print(n, "no fault")
            except mk.KernelFault as e:
                print(n, "past the end of parameter 'x'" in str(e) and f"(element {n})" in str(e))
    """)
    proc = subprocess.run([sys.executable, "-c", child], input=WILD, capture_output=True, text=True,
                          env=child_env(tmp_path / "cache"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "True", "3", "True", "9", "True", "1000", "True", "1025", "True"]


def test_far_scalar_store_is_not_called_misaligned(tmp_path):
    # 2^50 bytes away: beyond x86's 47-bit address space (reported with no address at all)
    # and arm64's 48 bits, below the top byte arm64 ignores.
    child = textwrap.dedent("""
        import sys, numpy as np, metalkit as mk
        lib = mk.compile(sys.stdin.read())
        for check in (True, False):
            try:
                lib.poke(np.zeros(8, np.float32), 1 << 48, 1.0, grid=1, check=check)
                print("no fault")
            except mk.KernelFault as e:
                print(str(e))
    """)
    proc = subprocess.run([sys.executable, "-c", child], input=WILD, capture_output=True, text=True,
                          env=child_env(tmp_path / "cache"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2
    for msg in lines:
        assert msg.startswith("kernel 'poke'") and "misaligned" not in msg and "out of bounds" in msg, msg


def test_threadgroup_memory_overrun_faults_in_checked_mode(tmp_path):
    child = textwrap.dedent("""
        import sys, numpy as np, metalkit as mk
        lib = mk.compile(sys.stdin.read())
        out = np.zeros(4, np.float32)
        for first, count, nbytes in ((0, 256, 4), (0, 1025, 4096), (-1025, 1, 4), (-300000, 1, 64)):
            try:
                lib.tg_overrun(out, first, count, threadgroup=4, threadgroup_memory={0: nbytes}, check=True)
                print("no fault")
            except mk.KernelFault as e:
                print(str(e))
        lib.tg_overrun(out, 0, 256, threadgroup=4, threadgroup_memory={0: 1024}, check=True)  # in bounds
        print(out.tolist())
    """)
    proc = subprocess.run([sys.executable, "-c", child], input=WILD, capture_output=True, text=True,
                          env=child_env(tmp_path / "cache"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert "past the end of threadgroup parameter 't' [[threadgroup(0)]] of 4 bytes (element 1)" in lines[0], lines[0]
    assert "past the end of threadgroup parameter 't' [[threadgroup(0)]] of 4096 bytes (element 1024)" in lines[1]
    assert "before the start of threadgroup parameter 't' [[threadgroup(0)]] of 4 bytes (element -1025)" in lines[2]
    assert "before the start of threadgroup parameter 't' [[threadgroup(0)]] of 64 bytes (element -300000)" in lines[3]
    assert lines[4] == "[255.0, 254.0, 253.0, 252.0]"


VECTORS = """
// Vectors through pointers that are only element-aligned: shift elements past an aligned start.
template <typename T, typename V>
void shifted_copy(device const T* a, device T* out, uint shift, uint i) {
    device const V* s = (device const V*)(a + shift);
    device V* d = (device V*)(out + shift);
    d[i] = s[i] * T(2) + V(1, 2, 3, 4);
}
kernel void f4_device(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                      constant uint& shift [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    shifted_copy<float, float4>(a, out, shift, i);
}
kernel void h4_device(device const half* a [[buffer(0)]], device half* out [[buffer(1)]],
                      constant uint& shift [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    shifted_copy<half, half4>(a, out, shift, i);
}
// Through threadgroup memory, a slot and a kernel-scope array, both at element offsets.
template <typename T, typename V>
void via_threadgroup(device const T* a, device T* out, threadgroup T* slot, threadgroup T* tile,
                     uint shift, uint l, uint n, uint g) {
    threadgroup V* sv = (threadgroup V*)(slot + shift);
    threadgroup V* tv = (threadgroup V*)(tile + shift);
    device const V* av = (device const V*)(a + shift) + g * n;
    sv[l] = av[l];
    tv[l] = av[l] * T(2);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    device V* ov = (device V*)(out + shift) + g * n;
    ov[l] = sv[(l + 1) % n] + tv[(l + 1) % n];
}
kernel void f4_threadgroup(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                           constant uint& shift [[buffer(2)]], threadgroup float* slot [[threadgroup(0)]],
                           uint l [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]],
                           uint g [[threadgroup_position_in_grid]]) {
    threadgroup float tile[4 * 64 + 4];
    via_threadgroup<float, float4>(a, out, slot, tile, shift, l, n, g);
}
kernel void h4_threadgroup(device const half* a [[buffer(0)]], device half* out [[buffer(1)]],
                           constant uint& shift [[buffer(2)]], threadgroup half* slot [[threadgroup(0)]],
                           uint l [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]],
                           uint g [[threadgroup_position_in_grid]]) {
    threadgroup half tile[4 * 64 + 4];
    via_threadgroup<half, half4>(a, out, slot, tile, shift, l, n, g);
}
// A 9-element array read as two float4s and a float: fine on a GPU, and in both modes here.
kernel void nine(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    device const float4* v = (device const float4*)a;
    out[i] = v[0][i % 4] + v[1][i % 4] * 10.0f + a[8] * 100.0f;
}
"""


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shift", [1, 2, 3])
@pytest.mark.parametrize("vectors", [1, 5, 64])
def test_vectors_at_element_alignment_in_device_memory(rng, check, dtype, shift, vectors):
    lib = build(VECTORS)
    kernel = lib.f4_device if dtype == np.float32 else lib.h4_device
    n = shift + 4 * vectors
    for a, out in ((rng.random(n).astype(dtype), rng.random(n).astype(dtype)),
                   (mk.asarray(rng.random(n).astype(dtype)), mk.asarray(rng.random(n).astype(dtype)))):
        want = out.copy()
        want[shift:] = (a[shift:].reshape(-1, 4) * dtype(2) + np.array([1, 2, 3, 4], dtype)).ravel()
        kernel(a, out, shift, grid=vectors, check=check)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shift", [1, 3])
@pytest.mark.parametrize("tg,groups", [(1, 1), (7, 3), (64, 2)])
def test_vectors_at_element_alignment_in_threadgroup_memory(rng, check, dtype, shift, tg, groups):
    lib = build(VECTORS)
    kernel = lib.f4_threadgroup if dtype == np.float32 else lib.h4_threadgroup
    n = shift + 4 * tg * groups
    a, out = rng.random(n).astype(dtype), rng.random(n).astype(dtype)
    want = out.copy()
    v = a[shift:].reshape(groups, tg, 4)
    want[shift:] = (np.roll(v, -1, axis=1) + np.roll(v, -1, axis=1) * dtype(2)).ravel()
    size = (4 * tg + shift) * np.dtype(dtype).itemsize
    kernel(a, out, shift, grid=tg * groups, threadgroup=tg, threadgroup_memory={0: (size + 15) // 16 * 16},
           check=check)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("check", [False, True])
def test_nine_floats_read_as_float4(rng, check):
    lib = build(VECTORS)
    a = rng.random(9, dtype=np.float32)
    out = np.zeros(4, np.float32)
    lib.nine(a, out, grid=4, check=check)
    np.testing.assert_allclose(out, a[0:4] + a[4:8] * 10 + a[8] * 100, rtol=1e-6)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_guards_shrink_to_a_limited_address_space(tmp_path):
    # Under ulimit -v, 64 GiB (checked) and 4 GiB (metalkit arrays) guards cannot be reserved:
    # smaller ones are, and a stray write 400 KiB away is still caught and attributed.
    child = textwrap.dedent("""
        import re, resource, sys, numpy as np, metalkit as mk
        lib = mk.compile(sys.stdin.read())
        vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.RLIM_INFINITY))
        for check, x in ((True, np.zeros(1000, np.float32)), (False, mk.zeros(1000))):
            try:
                lib.poke(x, 999 + 102400, 1.0, grid=1, check=check)
                print("no fault")
            except mk.KernelFault as e:
                print("past the end of parameter 'x'" in str(e) and "(element 103399)" in str(e))
    """)
    proc = subprocess.run([sys.executable, "-c", child], input=WILD, capture_output=True, text=True,
                          env=child_env(tmp_path / "cache"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "True"]
