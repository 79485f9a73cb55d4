"""Arrays of other libraries as kernel arguments: torch tensors (DLPack) and buffer-protocol
objects (memoryview, array.array, bytearray, bytes), used in place, written results visible
in the caller's object; and what is refused, with what error."""
import array
import doctest

import ml_dtypes
import numpy as np
import pytest
import torch

import metalkit as mk
import metalkit._interop
from conftest import build

SIZES = [0, 1, 7, 256, 1027]


@pytest.fixture(scope="module")
def lib():
    return build("""
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[i] = a * x[i] + y[i];
}
kernel void square(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { out[i] = x[i] * x[i]; }
kernel void bump(device uchar* b [[buffer(0)]], uint i [[thread_position_in_grid]]) { b[i] = b[i] * 3 + 1; }
kernel void shift(device int* v [[buffer(0)]], uint i [[thread_position_in_grid]]) { v[i] = v[i] * 2 - 7; }
kernel void halve_bf(device const bfloat* x [[buffer(0)]], device bfloat* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { out[i] = x[i] * bfloat(0.5f); }
kernel void sum(device const float* x [[buffer(0)]], device atomic_float* total [[buffer(1)]],
                uint i [[thread_position_in_grid]]) { atomic_fetch_add_explicit(total, x[i], memory_order_relaxed); }
""")


def test_interop_docstring_examples():
    result = doctest.testmod(metalkit._interop, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ---- torch ----

@pytest.mark.parametrize("n", SIZES)
def test_torch_tensors_in_and_out(device, lib, rng, n):
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    want = 1.5 * x.numpy().astype(np.float64) + y.numpy()
    lib.axpy(x, y, 1.5)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)


def test_a_torch_output_is_written_in_place(device, lib, rng):
    x = torch.tensor(rng.standard_normal(300), dtype=torch.float32)
    out = torch.full((300,), float("nan"))
    storage = out.data_ptr()
    lib.square(x, out)
    assert out.data_ptr() == storage
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 2)


def test_torch_and_numpy_arguments_mix(device, lib, rng):
    x = rng.standard_normal(99).astype(np.float32)
    y = torch.tensor(rng.standard_normal(99), dtype=torch.float32)
    want = -2.0 * x.astype(np.float64) + y.numpy()
    lib.axpy(x, y, -2.0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("view", ["every other column", "transposed", "offset slice"])
def test_a_strided_torch_output_is_copied_back_into_the_tensor(device, lib, rng, view):
    base = torch.tensor(rng.standard_normal((9, 14)), dtype=torch.float32)
    before = base.clone()
    out = {"every other column": lambda t: t[:, ::2], "transposed": lambda t: t.T,
           "offset slice": lambda t: t[2:7, 3:11]}[view](base)
    x = torch.tensor(rng.standard_normal(tuple(out.shape)), dtype=torch.float32)
    assert not out.is_contiguous()
    lib.square(x, out)
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 2)
    mask = torch.ones_like(base, dtype=torch.bool)
    {"every other column": lambda m: m[:, ::2], "transposed": lambda m: m.T,
     "offset slice": lambda m: m[2:7, 3:11]}[view](mask).fill_(False)
    assert torch.equal(base[mask], before[mask])  # only the view's elements changed


def test_a_strided_torch_input_is_read_as_its_elements(device, lib, rng):
    base = torch.tensor(rng.standard_normal((6, 10)), dtype=torch.float32)
    x = base[:, 1::3]
    out = torch.empty(x.shape)
    lib.square(x, out)
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 2)


def test_torch_tensors_in_a_batch(device, lib, rng):
    mk._core._emulate_gpu_batches(True)
    try:
        x = torch.tensor(rng.standard_normal(500), dtype=torch.float32)
        y = torch.tensor(rng.standard_normal(500), dtype=torch.float32)
        strided = torch.zeros(1000)[::2]
        want = 3.0 * x.numpy().astype(np.float64) + y.numpy()
        with mk.batch():
            lib.axpy(x, y, 3.0)
            lib.square(x, strided)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(strided.numpy(), x.numpy() ** 2)
    finally:
        mk._core._emulate_gpu_batches(False)


def test_torch_tensors_in_checked_mode(lib, rng):
    mk.use("cpu")
    x = torch.tensor(rng.standard_normal(77), dtype=torch.float32)
    out = torch.zeros(77)
    lib.square(x, out, check=True)
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 2)


def test_a_torch_tensor_over_metalkit_memory(device, lib, rng):
    out = torch.from_dlpack(mk.zeros(64))
    x = torch.tensor(rng.standard_normal(64), dtype=torch.float32)
    lib.square(x, out)
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 2)


def test_a_torch_bfloat16_tensor_is_viewed_as_ml_dtypes_bfloat16(device, lib, rng):
    x = torch.tensor(rng.standard_normal(129), dtype=torch.bfloat16)
    out = torch.full((129,), 7.0, dtype=torch.bfloat16)
    lib.halve_bf(x, out)
    np.testing.assert_array_equal(out.float().numpy(), x.float().numpy() * 0.5)  # halving is exact


def test_an_atomic_output_tensor(device, lib, rng):
    x = torch.tensor(rng.integers(-50, 50, 1000), dtype=torch.float32)  # integers: any order sums exactly
    total = torch.zeros(1)
    lib.sum(x, total, grid=1000)
    assert total.item() == float(x.numpy().astype(np.float64).sum())


def test_torch_refusals_name_the_kernel_the_parameter_and_the_fix(lib):
    x, out = torch.ones(4), torch.zeros(4)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'square': parameter 'x' .* requires grad.*x\.detach\(\)"):
        lib.square(torch.ones(4, requires_grad=True), out)
    with pytest.raises(mk.ArgumentError, match=r"parameter 'out' .*torch Tensor on device meta; .*x\.cpu\(\)"):
        lib.square(x, torch.empty(4, device="meta"))
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .*takes elements of dtype float32, got a torch Tensor "
                                               r"of dtype torch\.float64; convert it first \(x\.to\(torch\.float32\)\)"):
        lib.square(torch.ones(4, dtype=torch.float64), out)
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .*torch\.float8_e4m3fn that numpy cannot view.*"
                                               r"x\.view\(torch\.uint8\)"):
        lib.square(torch.zeros(4, dtype=torch.float8_e4m3fn), out)
    assert torch.equal(out, torch.zeros(4))  # refused calls leave the caller's data as it was


def test_the_readme_torch_example(device):
    lib = mk.compile("""
#include <metal_stdlib>
using namespace metal;
struct Params { float scale; uint n; };
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant Params& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < p.n) y[i] = p.scale * x[i] + y[i];
}
""")
    params = np.array((2.0, 1000), dtype=np.dtype([("scale", "f4"), ("n", "u4")], align=True))[()]
    x = torch.randn(1000); y = torch.zeros(1000)
    lib.saxpy(x, y, params)
    assert torch.equal(y, 2 * x)


# ---- DLPack from other libraries ----

class Exporter:
    """Another library's array: only the DLPack protocol, over a numpy array's memory."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_a_dlpack_exporter_is_used_in_place(device, lib, rng):
    x = rng.standard_normal(33).astype(np.float32)
    y = rng.standard_normal(33).astype(np.float32)
    want = 0.25 * x.astype(np.float64) + y
    lib.axpy(Exporter(x), Exporter(y), 0.25)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_a_read_only_dlpack_export(device, lib, rng):
    x = rng.standard_normal(20).astype(np.float32)
    x.flags.writeable = False
    kept = x.copy()
    out = np.zeros(20, np.float32)
    lib.square(Exporter(x), out)  # read only: fine
    np.testing.assert_array_equal(out, x ** 2)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'square': parameter 'out' .*written by the kernel but an? "
                                               r".*Exporter is read-only"):
        lib.square(out, Exporter(x))
    np.testing.assert_array_equal(x, kept)


def test_a_dlpack_export_off_the_host_is_refused(lib):
    class OnGpu(Exporter):
        def __dlpack_device__(self):
            return (2, 1)  # kDLCUDA, device 1

    out = np.zeros(4, np.float32)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'square': parameter 'x' .* on device DLPack device 2:1; "
                                               r"metalkit kernels use host memory"):
        lib.square(OnGpu(np.ones(4, np.float32)), out)
    assert not out.any()


# ---- the buffer protocol ----

@pytest.mark.parametrize("n", SIZES)
def test_array_array_in_and_out(device, lib, rng, n):
    xs = rng.standard_normal(n).astype(np.float32)
    x = array.array("f", xs.tolist())
    out = array.array("f", [np.nan] * n)
    lib.square(x, out)
    np.testing.assert_array_equal(np.array(out, np.float32), xs ** 2)


def test_array_array_of_ints(device, lib, rng):
    vals = rng.integers(-1000, 1000, 101)
    v = array.array("i", vals.tolist())
    lib.shift(v)
    assert list(v) == (vals * 2 - 7).tolist()


def test_bytearray_and_memoryviews_of_bytes(device, lib, rng):
    raw = rng.integers(0, 256, 300).astype(np.uint8)
    b = bytearray(raw.tobytes())
    lib.bump(b)
    np.testing.assert_array_equal(np.frombuffer(b, np.uint8), raw * np.uint8(3) + np.uint8(1))
    mv = memoryview(b)[10:90]
    before = bytes(b)
    lib.bump(mv)
    want = np.frombuffer(before, np.uint8).copy()
    want[10:90] = want[10:90] * np.uint8(3) + np.uint8(1)
    np.testing.assert_array_equal(np.frombuffer(b, np.uint8), want)


def test_a_memoryview_cast_to_floats(device, lib, rng):
    xs = rng.standard_normal(64).astype(np.float32)
    buf = bytearray(xs.tobytes())
    out = bytearray(64 * 4)
    lib.square(memoryview(buf).cast("f"), memoryview(out).cast("f"))
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), xs ** 2)


def test_a_strided_memoryview_is_copied_back(device, lib, rng):
    vals = rng.integers(-99, 99, 40)
    store = array.array("i", vals.tolist())
    lib.shift(memoryview(store)[1::3])
    want = vals.copy()
    want[1::3] = want[1::3] * 2 - 7
    assert list(store) == want.tolist()


def test_bytes_are_read_only(device, lib, rng):
    xs = rng.standard_normal(16).astype(np.float32)
    out = np.zeros(16, np.float32)
    lib.square(memoryview(xs.tobytes()).cast("f"), out)  # a read-only parameter reads bytes in place
    np.testing.assert_array_equal(out, xs ** 2)
    data = bytes(range(8))
    with pytest.raises(mk.ArgumentError, match=r"kernel 'bump': parameter 'b' .*written by the kernel but a bytes object "
                                               r"is read-only; pass a bytearray"):
        lib.bump(data)
    ro = memoryview(bytearray(8)).toreadonly()
    with pytest.raises(mk.ArgumentError, match=r"parameter 'b' .*a memoryview is read-only"):
        lib.bump(ro)
    assert data == bytes(range(8)) and bytes(ro) == bytes(8)


def test_raw_bytes_for_a_typed_parameter_suggest_a_view(lib):
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .*takes elements of dtype float32, got a bytearray of "
                                               r"bytes; view its memory as float32 with np\.frombuffer\(x, np\.float32\)"):
        lib.square(bytearray(16), np.zeros(4, np.float32))
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .*takes elements of dtype float32, got an array\.array "
                                               r"of dtype float64"):
        lib.square(array.array("d", [1.0]), np.zeros(1, np.float32))


def test_objects_without_memory_are_still_refused(lib):
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .*takes a numpy array \(or an object exporting "
                                               r"__dlpack__ or the buffer protocol.*got list"):
        lib.square([1.0, 2.0], np.zeros(2, np.float32))


# ---- metalkit.asarray ----

def test_asarray_takes_tensors_and_buffers(rng):
    t = torch.tensor(rng.standard_normal((3, 5)), dtype=torch.float32)
    a = mk.asarray(t)
    assert a.shape == (3, 5) and a.dtype == np.float32 and mk.arrays._on_device(a)
    np.testing.assert_array_equal(a, t.numpy())
    b = mk.asarray(torch.tensor([1.5, -2.25], dtype=torch.bfloat16))
    assert b.dtype == ml_dtypes.bfloat16 and b.astype(np.float32).tolist() == [1.5, -2.25]
    c = mk.asarray(array.array("h", [3, -4]))
    assert c.dtype == np.int16 and c.tolist() == [3, -4]
    d = mk.asarray(memoryview(b"\x01\x02"), dtype=np.float32)
    assert d.tolist() == [1.0, 2.0]
    with pytest.raises(mk.ArgumentError, match=r"metalkit\.asarray got a torch Tensor that requires grad"):
        mk.asarray(torch.ones(2, requires_grad=True))
