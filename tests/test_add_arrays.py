import numpy as np
import pytest

import metalkit as mk


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 2**20])
def test_add_arrays_matches_numpy(device, rng, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    mk.run("add_arrays", a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_add_arrays_on_device_arrays(device, rng):
    n = 4099
    a = mk.asarray(rng.random(n, dtype=np.float32))
    b = mk.asarray(rng.random(n, dtype=np.float32))
    out = mk.empty(n)
    mk.run("add_arrays", a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_readme_example(device):
    a = np.full(1_000_000, 1.0, np.float32)
    b = np.full_like(a, 2.0)
    out = np.empty_like(a)
    mk.run("add_arrays", a, b, out)
    assert out[0] == 3.0 and out[-1] == 3.0 and np.all(out == 3.0)


def test_explicit_grid_covers_a_prefix(device, rng):
    a = rng.random(100, dtype=np.float32)
    b = rng.random(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    mk.run("add_arrays", a, b, out, grid=37, threadgroup=8)
    np.testing.assert_array_equal(out[:37], a[:37] + b[:37])
    assert np.all(out[37:] == 0)


def test_bundled_kernel_listing():
    assert "add_arrays" in mk.kernels()
    with pytest.raises(KeyError, match="no bundled kernel named 'nope'"):
        mk.run("nope")


def test_add_arrays_large(device, rng):
    n = 2**26 + 3  # 256 MiB per array; not a multiple of the threadgroup
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    out = np.empty_like(a)
    mk.run("add_arrays", a, b, out)
    np.testing.assert_array_equal(out, a + b)
