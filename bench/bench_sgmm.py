"""Matrix kernels on simdgroup_matrix, side by side in one process: metalkit's CPU simulator,
numpy's BLAS and Intel's CPU OpenCL (a 16x16 tiled kernel, through pyopencl), on one shape.

    python bench/bench_sgmm.py            # every row at 512 x 512 x 512, float32 where it can be
    python bench/bench_sgmm.py --n 256    # another size (a multiple of 64); --reps: see --help

Rows: a minimal simdgroup_matrix kernel (one SIMD-group per 8x8 tile of C, loads, a
multiply_accumulate per 8 of K and a store, all from device memory), a naive per-thread loop,
tinygrad's matmul through metalkit.tinygrad with its tensor-core path (simdgroup_matrix) and
without (TC=0), llama.cpp's kernel_mul_mm_f16_f32 and _q4_0_f32 (half or 4-bit weights, float
activations), and MLX's steel_gemm_fused (float32, 64 x 64 tiles), each launched as its host code
does. llama.cpp's and MLX's kernels come from the corpus (tests/corpus.py says where); without it
their rows say so. Every result is checked against numpy in float64 first.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import metalkit as mk
from cpu_opencl import CpuOpenCL, open_devices
from metalkit._bench import timed

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the corpus recipes' launch helpers

MINIMAL = """
#include <metal_stdlib>
using namespace metal;
kernel void sgmm(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                 device float* C [[buffer(2)]], constant uint& n [[buffer(3)]],
                 uint2 tg [[threadgroup_position_in_grid]]) {
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k = 0; k < n; k += 8) {
        simdgroup_float8x8 a, b;
        simdgroup_load(a, A, n, ulong2(k, tg.y * 8));
        simdgroup_load(b, B, n, ulong2(tg.x * 8, k));
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    simdgroup_store(acc, C, n, ulong2(tg.x * 8, tg.y * 8));
}
kernel void naive(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                  device float* C [[buffer(2)]], constant uint& n [[buffer(3)]],
                  uint2 p [[thread_position_in_grid]]) {
    float acc = 0.0f;
    for (uint k = 0; k < n; ++k) acc += A[p.y * n + k] * B[k * n + p.x];
    C[p.y * n + p.x] = acc;
}
"""


class Row:
    def __init__(self, label: str, flops: float) -> None:
        self.label, self.flops = label, flops
        self.seconds: Optional[float] = None
        self.cpu: Optional[float] = None
        self.note = ""


Setup = Callable[[], tuple[Callable[[], object], Callable[[], None]]]


def measure(row: Row, setup: Setup, reps: int) -> Row:
    """setup() gives (run, check); check runs after the warm-up call (which also compiles). A
    failure fills the note."""
    try:
        run, check = setup()
        run()
        check()
        row.seconds, row.cpu = timed(run, reps)
    except (AssertionError, mk.MetalkitError, ImportError, OSError) as e:
        row.note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return row


def close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> Callable[[], None]:
    def check() -> None:
        err = np.abs(got.astype(np.float64) - want) / (np.abs(want).max() + 1e-30)
        assert np.all(err <= rtol), f"{what}: relative error {err.max():.3g} above {rtol}"
    return check


# ---- the rows -----------------------------------------------------------------------------------

def minimal(n: int, a: np.ndarray, b: np.ndarray, want: np.ndarray, kernel: str):
    k = getattr(mk.compile(MINIMAL, filename="bench_sgmm.metal"), kernel)
    c = np.full((n, n), np.nan, np.float32)
    launch = dict(threadgroups=(n // 8, n // 8), threadgroup=32) if kernel == "sgmm" else \
        dict(grid=(n, n), threadgroup=(16, 16))
    return (lambda: k(a, b, c, np.uint32(n), **launch)), close(c, want, 1e-5, kernel)


def tinygrad(n: int, a: np.ndarray, b: np.ndarray, want: np.ndarray, tc: int):
    import metalkit.tinygrad  # noqa: F401 (registers the METALKIT device)
    from tinygrad import Context, Tensor
    ta, tb = Tensor(a, device="METALKIT").realize(), Tensor(b, device="METALKIT").realize()
    out = {}

    def run() -> None:
        with Context(TC=tc):
            out["c"] = (ta @ tb).realize()

    def check() -> None:
        close(out["c"].numpy(), want, 1e-5, f"tinygrad TC={tc}")()
    return run, check


def ggml(n: int, type_name: str):
    import test_corpus_ggml as g
    name = f"kernel_mul_mm_{type_name}_f32"
    a, a64, b, out, fields = g._mul_mat_problem(name, type_name, n, n, n, ne02=1, ne12=1)
    k = g.library("auto").specialize(name, {g.FC_MUL_MM + 0: False, g.FC_MUL_MM + 1: False,
                                            g.FC_MUL_MM + 2: 1, g.FC_MUL_MM + 3: 1,
                                            g.FC_MUL_MM + 4: 1, g.FC_MUL_MM + 5: 1})
    args = (g.kargs(k, fields), g.src(a), g.src(b), g.dst(out))
    run = lambda: k(*args, threadgroups=(n // 32, n // 64, 1), threadgroup=(32, 4, 1),  # noqa: E731
                    threadgroup_memory={0: 4096 + 2048})
    # the kernel stages both operands as half
    want = g._mul_mat_ref(a64.astype(np.float16).astype(np.float64), b.astype(np.float16))
    return run, close(out, want, 1e-3, name)


def mlx(n: int, a: np.ndarray, b: np.ndarray, want: np.ndarray):
    from corpus import CORPUS
    import test_corpus_mlx as t
    bm, bn, bk, wm, wn = 64, 64, 16, 2, 2
    name = f"steel_gemm_fused_nn_float32_float32_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
    path = CORPUS / t.MLX_KERNELS / "steel/gemm/kernels/steel_gemm_fused.metal"
    if not path.exists():
        raise OSError(f"no corpus at {path}")
    lib = mk.load(path, include_dirs=[str(CORPUS / "mlx")])
    k = lib.specialize(name, {"has_batch": False, "use_out_source": False, "do_axpby": False,
                              "align_M": True, "align_N": True, "align_K": True})
    d = np.full((1, n, n), np.nan, np.float32)
    tiles = n // bn, n // bm
    params = t.struct(k, "params", M=n, N=n, K=n, lda=n, ldb=n, ldd=n, tiles_n=tiles[0],
                      tiles_m=tiles[1], batch_stride_a=n * n, batch_stride_b=n * n,
                      batch_stride_d=n * n, swizzle_log=0, gemm_k_iterations_aligned=n // bk,
                      batch_ndim=1)

    def run() -> None:
        k(A=a, B=b, D=d, params=params, threadgroups=(*tiles, 1), threadgroup=(32, wn, wm))
    return run, close(d[0], want, 1e-5, name)


def opencl(n: int, a: np.ndarray, b: np.ndarray, want: np.ndarray, dev: CpuOpenCL):
    c = np.full((n, n), np.nan, np.float32)
    run = dev.launcher("matmul_tiled", (n, n), (16, 16), [a, b, c, np.uint32(n)], [c])
    return run, close(c, want, 1e-5, "OpenCL matmul_tiled")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=512, help="M = N = K (a multiple of 64; default 512)")
    p.add_argument("--reps", type=int, default=7, help="timed calls per row (default 7)")
    opts = p.parse_args()
    n, reps = opts.n, opts.reps
    assert n % 64 == 0, "--n must be a multiple of 64"
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    flops = 2.0 * n ** 3

    ocl = open_devices()
    print(f"cores: {os.cpu_count()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"metalkit {mk.__version__}: {mk.device().name}; numpy {np.__version__}")
    for name, dev in ocl.items():
        print(f"{name}: {dev.name}" if isinstance(dev, CpuOpenCL) else f"{name}: skipped: {dev}")
    print(f"{n} x {n} x {n} ({flops / 1e6:.0f} MFLOP); time: median of {reps} calls after a "
          f"warm-up call; CPU time: the least of one of them, all threads\n")

    c = np.empty((n, n), np.float32)
    numpy_run = (lambda: np.matmul(a, b, out=c)), close(c, want, 1e-5, "numpy")
    anchors = [measure(Row("numpy A @ B (BLAS)", flops), lambda: numpy_run, reps)]
    for name, dev in ocl.items():
        if isinstance(dev, CpuOpenCL):
            anchors.append(measure(Row(f"{name} OpenCL, 16x16 tiled kernel", flops),
                                   lambda dev=dev: opencl(n, a, b, want, dev), reps))
    setups: list[tuple[str, Setup]] = [
        ("minimal simdgroup_matrix kernel", lambda: minimal(n, a, b, want, "sgmm")),
        ("naive per-thread loop", lambda: minimal(n, a, b, want, "naive")),
        ("tinygrad matmul, tensor cores", lambda: tinygrad(n, a, b, want, 1)),
        ("tinygrad matmul, TC=0", lambda: tinygrad(n, a, b, want, 0)),
        ("llama.cpp kernel_mul_mm_f16_f32", lambda: ggml(n, "f16")),
        ("llama.cpp kernel_mul_mm_q4_0_f32", lambda: ggml(n, "q4_0")),
        ("MLX steel_gemm_fused nn float32 64x64x16", lambda: mlx(n, a, b, want)),
    ]
    rows = [measure(Row(label, flops), setup, reps) for label, setup in setups]
    numpy_s = anchors[0].seconds
    intel = next((r.seconds for r in anchors if r.label.startswith("Intel")), None)
    width = max(len(r.label) for r in anchors + rows) + 2
    print(f"{'':{width}}{'time':>11}{'GFLOP/s':>9}{'/ numpy':>9}{'/ Intel':>9}{'CPU time':>11}")
    for r in anchors + rows:
        if r.seconds is None:
            print(f"{r.label:{width}}{'-':>11}   {r.note}")
            continue
        cells = [f"{r.seconds * 1e3:.2f} ms", f"{r.flops / r.seconds / 1e9:.1f}",
                 f"{r.seconds / numpy_s:.1f}x" if numpy_s else "-",
                 f"{r.seconds / intel:.2f}x" if intel else "-", f"{r.cpu * 1e3:.2f} ms"]
        print(f"{r.label:{width}}" + "".join(f"{x:>{w}}" for x, w in zip(cells, (11, 9, 9, 9, 11))))
    print(f"\nafter the run: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if any(r.seconds is None and "corpus" not in r.note for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
