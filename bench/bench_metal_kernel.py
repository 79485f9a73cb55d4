"""What metal_kernel adds to a call: the same body run through metalkit.metal_kernel and as an
ordinary Kernel (the source metal_kernel generated, compiled once, called on an output allocated
beforehand), side by side, at 1 element (the fixed cost) and at 2^20 (the cost next to real work).
metal_kernel allocates its outputs each call (metalkit.empty: fresh pages, which the kernel's
first writes fault in), so the Kernel is also timed writing a fresh metalkit.empty array each call.

    python bench/bench_metal_kernel.py
"""
from __future__ import annotations

import numpy as np

import metalkit as mk
from metalkit._bench import per_call, ratio

BODY = "uint i = thread_position_in_grid.x; if (i < a_shape[0]) out[i] = a[i] * 2 + 1;"


def main() -> None:
    k = mk.metal_kernel("bench_axpb", ["a"], ["out"], BODY)
    print(f"device: {mk.device().name} [{mk.device().backend}]")
    print(f"{'elements':>10}{'metal_kernel (us)':>20}{'Kernel (us)':>14}{'Kernel+empty (us)':>20}   ratios")
    for n in (1, 1 << 20):
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        call = dict(inputs=[a], output_shapes=[(n,)], output_dtypes=[np.float32], grid=(n, 1, 1),
                    threadgroup=(256, 1, 1))
        out, = k(**call)  # compiles
        assert np.array_equal(out, a * 2 + 1), "metal_kernel gave a wrong result"
        kernel = next(iter(k._compiled.values()))
        pre = mk.empty(n)
        shape = np.array([n], np.int32)
        tg = (min(256, n), 1, 1)
        direct = lambda: kernel(a, shape, pre, grid=(n, 1, 1), threadgroup=tg)
        direct()
        assert np.array_equal(pre, a * 2 + 1), "the Kernel call gave a wrong result"
        fresh = lambda: kernel(a, shape, mk.empty(n), grid=(n, 1, 1), threadgroup=tg)
        t_mk, t_k, t_f = per_call(lambda: k(**call)), per_call(direct), per_call(fresh)
        print(f"{n:>10}{t_mk * 1e6:>20.1f}{t_k * 1e6:>14.1f}{t_f * 1e6:>20.1f}   "
              f"{ratio(t_mk, t_k, 'metal_kernel / Kernel')}; {ratio(t_mk, t_f, 'metal_kernel / Kernel+empty')}")


if __name__ == "__main__":
    main()
