"""SIMT against the reference model on real code: llama.cpp's and MLX's kernels, bit for bit.

Every kernel with barriers or SIMD-group functions that a generic launch can drive runs under
the default model ("auto": SIMT, or the lockstep fallback) and under "threads" (every thread
its own fiber, the code as written) on identical random inputs, and every buffer it may write
must come out with the same bytes. A kernel that relies on the lanes of a SIMD-group running in
lockstep (Apple GPUs guarantee it) may differ: those are listed in LOCKSTEP, each with the
pattern and its line, and reported instead of failing. Differences seen and not yet explained
are listed in KNOWN with what is known, and reported on every run. Any other difference fails,
naming the kernel, the buffer, the first differing element and both values.

The generic launch (``_launch_inputs``) knows nothing of a kernel but ``kernel.args``: buffers of
a fixed size filled with random bytes suited to their type, scalars and struct fields small and
positive (llama.cpp's ``ne*``/``nb*`` sizes and byte strides made consistent), two by two
threadgroups of the first size in THREADS whose result the launch defines (or its host's geometry,
HOST_LAUNCH, where another races). A launch that faults, is refused, times out, does not
compile or has no such size under both models is "not drivable": counted by kind, not failed. A
fault under one model only is a failure.

Launches run in child processes (this file run as a script), so a kernel that kills its
process is a failure naming it, not the end of the test run. ``METALKIT_SWEEP_LIMIT=N`` runs
at most N kernels per corpus (spread over the corpus), for a quick run; ``-m "not sweep"``
leaves the sweep out.
"""
from __future__ import annotations

import collections
import concurrent.futures
import fnmatch
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import corpus

pytestmark = pytest.mark.sweep

BUFFER_BYTES = 1 << 20   # every buffer: large enough for what the sizes below make kernels address
THREADGROUPS = (2, 2, 1)
# Threads per threadgroup, tried in turn: kernels are written for one size (their host's), and
# under another they may read threadgroup memory no thread wrote (it keeps what earlier
# threadgroups left there), or race between SIMD-groups where their host runs one. A size is
# taken once two runs under "auto" give the same bytes, each after a launch on other inputs
# (which leaves other values behind), the second with its SIMD-groups in a shuffled order:
# the launch then defines the result.
THREADS = (64, 128, 256, 32)
SHUFFLE = 7  # a seed that reverses two SIMD-groups in 3 of the 4 threadgroups
TG_MEMORY = 32 << 10     # per [[threadgroup(i)]] parameter: what an Apple GPU has in all
TIMEOUT = 20.0           # seconds per launch: garbage sizes can make a kernel loop for ever
JOBS = 2                 # child processes at once (each compiles on one core, launches on all)

# llama.cpp's kargs: tensor t's sizes ne{t}{d} (dst: ne{d}) and byte strides nb{t}{d}. Every
# tensor gets this shape (a row of 256 holds whole blocks of every quantisation) and strides of
# contiguous 4-byte elements, the widest a row needs.
GGML_NE = (256, 4, 2, 2)
GGML_NB = tuple(4 * int(np.prod(GGML_NE[:d])) for d in range(4))

# Function constants as llama.cpp's host code (ggml-metal-device.cpp) sets them, for the shapes
# above and two SIMD-groups per threadgroup (nsg = 2).
GGML_CONSTANTS = {
    "FC_unary_op": 0, "FC_unary_cnt": False,
    "FC_bin_op": 0, "FC_bin_f": 1, "FC_bin_rb": False, "FC_bin_cb": False,
    "FC_sum_rows_op": 0,
    "FC_ssm_conv_bs": 64,
    "FC_gated_delta_net_ne20": 64, "FC_gated_delta_net_ne30": 64, "FC_gated_delta_net_K": 1,
    "FC_solve_tri_nsg": 2, "FC_solve_tri_n": 4, "FC_solve_tri_k": 4,
    "FC_mul_mv_nsg": 2, "FC_mul_mv_nxpsg": 8, "FC_mul_mv_ne12": GGML_NE[2], "FC_mul_mv_r2": 1, "FC_mul_mv_r3": 1,
    "FC_rope_is_imrope": False, "FC_rope_is_back": False,
    "FC_upscale_aa": False,
    "FC_flash_attn_ext_pad_has_mask": True, "FC_flash_attn_ext_pad_ncpsg": 64,
    "FC_flash_attn_ext_blk_nqptg": 8, "FC_flash_attn_ext_blk_ncpsg": 64,
    "FC_flash_attn_ext_has_mask": True, "FC_flash_attn_ext_has_sinks": False, "FC_flash_attn_ext_has_bias": False,
    "FC_flash_attn_ext_has_scap": False, "FC_flash_attn_ext_has_kvpad": False, "FC_flash_attn_ext_bc_mask": True,
    "FC_flash_attn_ext_ns10": GGML_NE[0], "FC_flash_attn_ext_ns20": GGML_NE[0], "FC_flash_attn_ext_nsg": 2,
    "FC_flash_attn_ext_vec_has_mask": True, "FC_flash_attn_ext_vec_has_sinks": False,
    "FC_flash_attn_ext_vec_has_bias": False, "FC_flash_attn_ext_vec_has_scap": False,
    "FC_flash_attn_ext_vec_has_kvpad": False,
    "FC_flash_attn_ext_vec_ns10": GGML_NE[0], "FC_flash_attn_ext_vec_ns20": GGML_NE[0],
    "FC_flash_attn_ext_vec_nsg": 2, "FC_flash_attn_ext_vec_nwg": 2,
    "FC_flash_attn_ext_vec_reduce_DV": 128, "FC_flash_attn_ext_vec_reduce_NWG": 2,
    "FC_mul_mm_bc_inp": False, "FC_mul_mm_bc_out": True, "FC_mul_mm_ne12": GGML_NE[2], "FC_mul_mm_ne13": GGML_NE[3],
    "FC_mul_mm_r2": 1, "FC_mul_mm_r3": 1,
    "FC_count_equal_nsg": 2,
}

# MLX: the files (MLX's *_nax.metal need Apple's MetalPerformancePrimitives, which has no
# simulator), and per file at most this many kernel families, spread over the file.
MLX_SKIP = "*_nax.metal"
MLX_FAMILIES_PER_FILE = 12
# A kernel's family is its name without the dtypes, the functor or reduction op, transposes,
# alignment and sizes: one template, instantiated many times.
MLX_DTYPE = r"bool_?|u?int(?:8|16|32|64)|b?float(?:16|32|64)?(?:_t)?|half|complex64(?:_t)?"
MLX_FAMILY = [(MLX_DTYPE, "T"), (r"[A-Z][a-z][A-Za-z]*", "Op"),
              (r"(?<=_)(?:and|or|sum|prod|min|max|logaddexp)(?=_|T|$)", "op"), (r"(?<=_)[nt][nt](?=_)", "xx"),
              (r"[tn]aligned", "aligned"), (r"\d+", "#")]

# Function constants by name, for every file (MLX's host code sets them per launch): the plain
# path (no mask, batch, bias or transposed input; aligned tiles), a 256-point FFT in radix 4.
MLX_CONSTANTS = {
    "align_M": True, "align_N": True, "align_K": True, "align_Q": True, "align_C": True,
    "has_batch": False, "use_out_source": False, "do_axpby": False, "segments_contiguous": True,
    "gemv_wide_has_batch": False, "gemv_wide_do_axpby": False,
    "has_mask": False, "has_sinks": False, "bool_mask": False, "float_mask": False, "do_causal": False,
    "query_transposed": False, "blocks": 2,
    "has_w": True, "forward": True, "traditional": False, "hs_transpose": False,
    "do_flip": False, "ker_h": 3, "ker_w": 3, "str_h": 1, "str_w": 1, "tgp_h": 8, "tgp_w": 8,
    "inv_": False, "is_power_of_2_": True, "use_bluestein_twiddle_table_": False, "elems_per_thread_": 4,
    "rader_m_": 1, "radix_4_steps_": 4,
    **{f"radix_{r}_steps_": 0 for r in (2, 3, 5, 6, 7, 8, 11, 13)},
    **{f"rader_{r}_steps_": 0 for r in (2, 3, 4, 5, 6, 7, 8, 11, 13)},
}

STRIDED_SCAN = ("one threadgroup: the kernel ignores its x position, and of y and z its sizes must be consistent "
                "(stride_blocks = ceil(stride / 32)), which random ones are not, or two threadgroups write the same "
                "rows; of 32 / N_READS SIMD-groups, as MLX launches it, which read its threadgroup array by that "
                "many rows")

# Kernels launched with their host's geometry only, where another races: fnmatch pattern ->
# (threadgroups, threads per threadgroup, why). The first pattern that matches counts.
HOST_LAUNCH: dict[str, tuple[tuple[int, int, int], int, str]] = {
    "kernel_group_norm_f32": (THREADGROUPS, 32, "llama.cpp launches 32 threads (its wider launch is commented out): with more, "
                                  "SIMD-group 0 zeroes `buf` for the variance while the others may still read the "
                                  "mean's sums from it, with no barrier between (ggml-metal.metal:3348, read, and 3364, "
                                  "store; a barrier there makes both models agree)"),
    **{f"strided_scan_*_{t}": ((1, 1, 1), 512, STRIDED_SCAN + " (N_READS is 2 for 8-byte elements)")
       for t in ("int64", "uint64", "float64", "complex64")},
    "strided_scan_*": ((1, 1, 1), 256, STRIDED_SCAN + " (N_READS is 4 below 8-byte elements)"),
    "steel_attention_*_wm4_wn1_*": (THREADGROUPS, 128, "MLX launches wm * wn = 4 SIMD-groups, which load its "
                                                       "tiles between them; with fewer, part of them is stale"),
    "winograd_conv_2d_output_transform_*": (THREADGROUPS, 128, "MLX launches 4 SIMD-groups, which fill its threadgroup array "
                                                 "between them; with fewer, part of it is never written"),
}

# Kernels that rely on lockstep: fnmatch pattern -> the pattern and where it is.
LOCKSTEP: dict[str, str] = {
    "kernel_flash_attn_ext_vec_*_dk[125]*": "every lane reads ss[0..31] (P*V of the last KV block, "
                                           "ggml-metal.metal:7691), then lane 0 stores S and M into ss[0..1] "
                                           "(7773-7776) with no barrier between when each lane holds one head "
                                           "element (dk 128, 256, 512); test_corpus_ggml.py shows threads wrong "
                                           "and auto right against numpy",
}

# Differences seen and not yet explained or fixed: fnmatch pattern -> what is known. Each is
# reported on every run, never counted as a match; any other difference fails. Remove an entry
# once it is explained (LOCKSTEP) or fixed.
KNOWN: dict[str, str] = {
    "gemv_t_outmask_*": "random sizes with out_vec_size below TN make out_col negative (gemv_masked.h:496), and "
                        "the kernel reads before `mat`: whether that faults depends on what memory lies there",
    "bluestein_fft_mem_256_complex32_t_complex32_t": "at times one element is NaN under both models with other "
                                                     "bits (its complex32_t output is raw bytes here, so NaN for NaN "
                                                     "is not recognised)",
    "kernel_ssm_scan_f32": "random sizes (n_group > n_head) make a thread divide by zero: threads reports it "
                           "as a KernelFault, SIMT's division gives 0 (it divides for lanes the C++ would not)",
    **dict.fromkeys(("layer_normfloat32", "layer_normbfloat16", "vjp_layer_normfloat32", "vjp_layer_normbfloat16"),
                    "MLX's single-row layer norm indexes its per-thread array below 0 for lanes past the row: the "
                    "reference model faults there, SIMT reads on"),
}

# Launch errors that make a kernel not drivable when both models raise them.
EXPECTED = ("KernelFault", "DispatchError", "ArgumentError", "CompileError")


# ---------------------------------------------------------------------------------------------
# The child: compile a chunk of kernels under both models, launch, compare; a JSON line each.

def _emit(**record) -> None:
    print(json.dumps(record), flush=True)


def _value(name: str, dtype: np.dtype, shape: tuple, rng: np.random.Generator, buffer: bool) -> np.ndarray:
    """Random values for a buffer's elements, or a scalar or struct field named ``name``."""
    if dtype.names:  # a struct: each field by its own name
        out = np.zeros(shape, dtype)
        for field in dtype.names:
            sub = dtype.fields[field][0]
            out[field] = _value(field, sub.base, shape + sub.shape, rng, buffer)
        return out
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind == "f" or dtype.name == "bfloat16":  # ml_dtypes' bfloat16 is kind "V"
        low = -2.0 if buffer else 0.5
        return rng.uniform(low, 2.0, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(dtype)
    if buffer and dtype.itemsize == 1:
        # Raw memory (llama.cpp's char* tensors, quantised blocks): bytes whose half, bfloat and
        # float readings are all finite and of moderate size.
        return rng.integers(0x38, 0x42, shape).astype(dtype)
    if buffer:
        return rng.integers(1, 5, shape).astype(dtype)  # small and positive: indices, sizes and divisors
    return np.full(shape, _int_field(name, rng), dtype)


def _int_field(name: str, rng: np.random.Generator) -> int:
    """An integer scalar or struct field: llama.cpp's sizes and strides by name, else small."""
    m = re.fullmatch(r"(ne|nb)\w*?(\d)", name)  # ne01, nb1, ne_12_2, nb_x0, nbq1: the last digit is the dim
    if m:
        return (GGML_NE if m.group(1) == "ne" else GGML_NB)[int(m.group(2))]
    if re.fullmatch(r"ns\d0", name):  # a row stride in elements
        return GGML_NE[0]
    if name in ("r2", "r3"):  # broadcast ratios ne12/ne02, ne13/ne03
        return 1
    if "off" in name:  # byte offsets into a buffer
        return 0
    return int(rng.integers(1, 17))


def _launch_inputs(kernel, rng: np.random.Generator) -> tuple[list, dict]:
    """Host arrays for the buffers and values for the scalars, in buffer-index order, and the
    threadgroup memory sizes."""
    args, tg_memory = [], {}
    for a in sorted(kernel.args, key=lambda a: a.index):
        if a.kind == "buffer" and a.dtype is None:  # a struct metalkit cannot read: raw bytes of its size
            raw = _value(a.name, np.dtype(np.uint8), (BUFFER_BYTES,), rng, buffer=True)
            args.append(raw[:BUFFER_BYTES // a.elem_size * a.elem_size].view(np.dtype((np.void, a.elem_size))))
        elif a.kind == "buffer":
            per_elem = a.elem_size if a.dtype.names else a.dtype.itemsize
            args.append(_value(a.name, a.dtype, (BUFFER_BYTES // per_elem,), rng, buffer=True))
        elif a.kind == "scalar":
            if a.dtype.names:
                args.append(_value(a.name, a.dtype, (), rng, buffer=False)[()])
            else:
                count = a.length or a.vec_width
                v = _value(a.name, a.dtype, (count,), rng, buffer=False)
                args.append(v.tolist() if a.length else tuple(v.tolist()) if a.vec_width > 1 else v[0].item())
        elif a.kind == "threadgroup":
            tg_memory[a.index] = TG_MEMORY
    return args, tg_memory


def _run(kernel, host_args: list, tg_memory: dict, threads: int, groups: tuple = THREADGROUPS,
         shuffle: int = 0) -> list:
    """One launch on fresh device copies of the inputs; returns the arrays after it."""
    import metalkit as mk
    args = [mk.asarray(x) if isinstance(x, np.ndarray) and x.ndim else x for x in host_args]
    kernel(*args, threadgroups=groups, threadgroup=threads, threadgroup_memory=tg_memory, shuffle=shuffle,
           timeout=TIMEOUT)
    return args


def _error(e: BaseException) -> dict:
    kind = type(e).__name__
    if kind == "KernelFault" and "time limit" in str(e):
        kind = "timeout"
    return {"kind": kind, "message": str(e).splitlines()[0][:300]}


def _show(x: np.ndarray, i: int) -> str:
    """Element i; of raw memory (llama.cpp's char* tensors), the aligned 4 bytes and their float."""
    if x.dtype.itemsize == 1 and x.dtype.kind != "b":
        word = x[i // 4 * 4:i // 4 * 4 + 4]
        return f"bytes {word.tobytes().hex()} = {word.view(np.float32)[0].item()!r} as float"
    return repr(x[i].item())


def _both_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per element, whether both are NaN (of a float or complex type): which NaN an operation on
    NaNs returns follows its operands' order, which compilers may swap."""
    if x.dtype.kind not in "fc" and x.dtype.name != "bfloat16":
        return np.zeros(len(x), bool)
    parts = lambda a: a.view(a.real.dtype).reshape(len(a), -1) if a.dtype.kind == "c" else \
        a.astype(np.float32).reshape(len(a), -1)
    return (np.isnan(parts(x)) & np.isnan(parts(y))).any(axis=1)


def _first_difference(kernel, ours: list, ref: list) -> dict | None:
    """The first writable buffer whose bytes differ (NaN for NaN aside), its first differing element
    and both values."""
    positional = [a for a in sorted(kernel.args, key=lambda a: a.index) if a.kind in ("buffer", "scalar")]
    for a, x, y in zip(positional, ours, ref):
        if a.kind != "buffer" or not a.writable:
            continue
        xb, yb = x.view(np.uint8).reshape(len(x), -1), y.view(np.uint8).reshape(len(y), -1)
        rows = np.flatnonzero((xb != yb).any(axis=1) & ~_both_nan(x, y))
        if rows.size:
            i = int(rows[0])
            return {"buffer": a.name, "element": i, "count": int(rows.size), "auto": _show(x, i), "threads": _show(y, i)}
    return None


def _library(spec: dict, names: list[str], execution: str) -> dict:
    """name -> Kernel, or the CompileError's record: the chunk as one module, else one by one."""
    import metalkit as mk

    def load(only):
        lib = mk.load(spec["path"], include_dirs=spec["include_dirs"], constants=spec["constants"],
                      kernels=only, execution=execution)
        return {n: lib[n] for n in only}
    if not names:
        return {}
    try:
        return load(names)
    except mk.CompileError:  # one kernel that does not compile: find it
        out = {}
        for n in names:
            try:
                out.update(load([n]))
            except mk.CompileError as e:
                if f"'{n}'" not in str(e):  # the file's own error (say, constants it does not declare): a failure
                    raise
                out[n] = _error(e)
        return out


def _sizes(k, name: str) -> list[tuple]:
    """(threadgroups, threads per threadgroup) to try in turn."""
    host = next((v for pattern, v in HOST_LAUNCH.items() if fnmatch.fnmatchcase(name, pattern)), None)
    if host:
        return [host[:2]]
    return [(THREADGROUPS, t) for t in dict.fromkeys(min(t, k.max_threads_per_threadgroup) for t in THREADS)]


def _attempt(n: str, kernel, *launch, shuffle: int = 0, after: list | None = None) -> tuple[list | None, dict | None]:
    """(the arrays after a launch, None), or (None, the error's record); ``after``: inputs of a
    launch to run first."""
    _emit(kernel=n, event="start", model=str(kernel.execution))
    try:
        if after is not None:
            _run(kernel, after, *launch[1:])
        return _run(kernel, *launch, shuffle=shuffle), None
    except Exception as e:  # recorded by kind; any kind outside EXPECTED fails the sweep
        return None, _error(e)


def _others(host: list, seed: int) -> list:
    """The same launch with the buffers' elements shuffled: the same kinds of values, elsewhere."""
    rng = np.random.default_rng(seed)
    return [x[rng.permutation(len(x))] if isinstance(x, np.ndarray) and x.ndim else x for x in host]


def _compare(n: str, k, r) -> dict:
    """Launches kernel ``n`` under both models (k: "auto", r: "threads") at the first threadgroup
    size (THREADS) that defines its result; the record to emit."""
    host, tg_memory = _launch_inputs(k, np.random.default_rng(zlib.crc32(n.encode())))
    first = None  # why the first size did not do
    for groups, threads in _sizes(k, n):
        launch = (host, tg_memory, threads, groups)
        ours, error = _attempt(n, k, *launch, after=_others(host, 1))
        ref, ref_error = _attempt(n, r, *launch)
        if error or ref_error:
            if not (error and ref_error) or {error["kind"], ref_error["kind"]} - set(EXPECTED):
                return {"status": "one-sided", "errors": [error, ref_error], "threads": threads}
            first = first or [error, ref_error]
            if error["kind"] == "timeout":  # garbage sizes, whatever the geometry
                break
            continue
        # Is the result defined? Another launch first and SIMD-groups in another order under
        # "auto", threads under "threads": if both change it, the kernel reads what no thread
        # wrote, or races.
        again, error = _attempt(n, k, *launch, shuffle=SHUFFLE, after=_others(host, 2))
        if not error and not _first_difference(k, ours, again):
            return _verdict(k, ours, ref, threads)
        ref, ref_error = _attempt(n, r, *launch, after=_others(host, 1))
        again, again_error = _attempt(n, r, *launch, shuffle=SHUFFLE, after=_others(host, 2))
        if not (ref_error or again_error or _first_difference(k, ref, again)):
            return _verdict(k, ours, ref, threads)  # defined, yet "auto" depends on the order: a SIMT bug
        first = first or [{"kind": "order-dependent", "message": f"{threads} threads: the order of threads or "
                                                                 "an earlier launch changes the result"}] * 2
    return {"status": "not drivable", "errors": first}


def _verdict(k, ours: list, ref: list, threads: int) -> dict:
    diff = _first_difference(k, ours, ref)
    return {"status": "differ" if diff else "match", "diff": diff, "threads": threads}


def _child(spec: dict) -> None:
    names = spec["kernels"]
    auto = _library(spec, names, "auto")
    sync = [n for n in names if isinstance(auto[n], dict) or auto[n].execution != "loop"]
    ref = _library(spec, sync, "threads")
    for n in names:
        if n not in sync:
            _emit(kernel=n, status="loop")
    for n in sync:
        k, r = auto[n], ref[n]
        if isinstance(k, dict) or isinstance(r, dict):
            errors = [k if isinstance(k, dict) else None, r if isinstance(r, dict) else None]
            _emit(kernel=n, status="not drivable" if all(errors) else "one-sided", errors=errors)
        else:
            _emit(kernel=n, execution=str(k.execution), reason=k.execution_reason, **_compare(n, k, r))


# ---------------------------------------------------------------------------------------------
# The parent: chunks of kernels through child processes, a crash made a failure naming its kernel.

def _run_chunk(spec: dict) -> list[dict]:
    env = dict(os.environ, METALKIT_DEVICE="cpu")  # the simulator's models: on a Mac too
    remaining, results = list(spec["kernels"]), []
    while remaining:
        proc = subprocess.run([sys.executable, __file__, json.dumps({**spec, "kernels": remaining})],
                              capture_output=True, text=True, env=env)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        done = [r for r in lines if "status" in r]
        results += done
        finished = {r["kernel"] for r in done}
        remaining = [n for n in remaining if n not in finished]
        if proc.returncode == 0 and not remaining:
            break
        started = [r for r in lines if r.get("event") == "start" and r["kernel"] not in finished]
        tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
        where = f"running under {started[-1]['model']}" if started else f"compiling {len(remaining)} kernels"
        culprit = started[-1]["kernel"] if started else Path(spec["path"]).name
        results.append({"kernel": culprit, "status": "crash",
                        "detail": f"the process ended with status {proc.returncode} {where} {tail}".rstrip()})
        if not started:
            break
        remaining.remove(culprit)
    return results


def _sweep(specs: list[dict]) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        return [r for chunk in pool.map(_run_chunk, specs) for r in chunk]


def _limit(names: list[str]) -> list[str]:
    """At most METALKIT_SWEEP_LIMIT names, spread evenly over the list."""
    n = int(os.environ.get("METALKIT_SWEEP_LIMIT") or 0)
    if not n or n >= len(names):
        return names
    return [names[i * len(names) // n] for i in range(n)]


def _chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[i:i + size] for i in range(0, len(names), size)]


def _mlx_family(name: str) -> str:
    for pattern, by in MLX_FAMILY:
        name = re.sub(pattern, by, name)
    return name


def _mlx_sample(names: list[str]) -> list[str]:
    """Per family the first kernel and one of another dtype, for at most MLX_FAMILIES_PER_FILE
    families spread over the file."""
    families = collections.defaultdict(list)
    for n in names:
        families[_mlx_family(n)].append(n)
    chosen = list(families.values())
    if len(chosen) > MLX_FAMILIES_PER_FILE:
        chosen = [chosen[i * len(chosen) // MLX_FAMILIES_PER_FILE] for i in range(MLX_FAMILIES_PER_FILE)]
    sample = []
    for members in chosen:
        dtypes = lambda n: re.findall(MLX_DTYPE, n)
        others = [m for m in members if dtypes(m) != dtypes(members[0])]
        sample += [members[0]] + others[len(others) // 2:][:1]
    return sample


def _function_constants(path: Path, root: Path, seen: set | None = None) -> set[str]:
    """Names of the function constants a file and the files it includes declare (compile() refuses
    values for others)."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    text = path.read_text()
    names = set(re.findall(r"(?:constant|STEEL_CONST)\s+\w+\s+(\w+)\s*\[\[function_constant\(", text))
    for inc in re.findall(r'#include\s+"([^"]+)"', text):
        found = [base / inc for base in (path.parent, root) if (base / inc).exists()]
        names |= _function_constants(found[0].resolve(), root, seen) if found else set()
    return names


def _known(name: str) -> str | None:
    return next((why for pattern, why in KNOWN.items() if fnmatch.fnmatchcase(name, pattern)), None)


def _lockstep_reason(name: str) -> str | None:
    return next((why for pattern, why in LOCKSTEP.items() if fnmatch.fnmatchcase(name, pattern)), None)


def _report(label: str, kernels_in_files: int, results: list[dict], seconds: float, capsys) -> list[str]:
    """Prints the corpus's summary and lockstep findings; returns the failures, one line each."""
    by = collections.defaultdict(list)
    for r in results:
        status = r["status"]
        if status == "differ" and _lockstep_reason(r["kernel"]):
            status = "lockstep"
        elif status in ("differ", "one-sided", "crash") and _known(r["kernel"]):
            status = "known"
        by[status].append(r)
    sync = [r for r in results if r["status"] != "loop"]
    launched = by["match"] + by["differ"] + by["lockstep"] + [r for r in by["known"] if r["status"] == "differ"]
    undrivable = collections.Counter(
        "/".join(sorted({e["kind"] for e in r["errors"] if e})) for r in by["not drivable"])
    fibers = collections.Counter(re.sub(r"'[^']*'", "...", re.sub(r"\s*\([^()]*\)$", "", r["reason"]))
                                 for r in sync if r.get("execution") == "fibers")  # the construct, not its names
    failures = [f"{r['kernel']}: {r['diff']['buffer']}[{r['diff']['element']}] differs "
                f"(auto {r['diff']['auto']}, threads {r['diff']['threads']}; {r['diff']['count']} elements differ; "
                f"{r['threads']} threads per threadgroup)" for r in by["differ"]]
    failures += [f"{r['kernel']}: only one model raised: auto {r['errors'][0]}, threads {r['errors'][1]}"
                 for r in by["one-sided"]]
    failures += [f"{r['kernel']}: {r['detail']}" for r in by["crash"]]
    with capsys.disabled():
        print(f"\n{label}: {kernels_in_files} kernels in the files, {len(results)} swept, {len(sync)} need SIMT, "
              f"{len(launched)} launched, {len(by['match'])} bit for bit, {len(by['lockstep'])} rely on lockstep, "
              f"{len(by['known'])} known differences, {len(failures)} failed; not drivable: {len(by['not drivable'])} {dict(undrivable)}; "
              f"on the fallback (fibers): {sum(fibers.values())} {dict(fibers)}; {seconds:.0f} s")
        for label, status, why in (("relies on lockstep", "lockstep", _lockstep_reason),
                                   ("known difference", "known", _known)):
            grouped = collections.defaultdict(list)
            for r in by[status]:
                grouped[why(r["kernel"])].append(r["kernel"])
            for reason, names in grouped.items():
                print(f"  {label} ({len(names)}: {', '.join(names)}): {reason}")
    return failures


def test_ggml_kernels_match_the_reference(capsys):
    import metalkit as mk
    path = corpus.require("ggml/ggml-metal.metal")
    start = time.monotonic()
    names = _limit(mk.load(path, constants=GGML_CONSTANTS).kernels)
    spec = {"path": str(path), "include_dirs": [], "constants": GGML_CONSTANTS}
    results = _sweep([{**spec, "kernels": chunk} for chunk in _chunks(names, 80)])
    failures = _report("ggml", len(mk.load(path).kernels), results, time.monotonic() - start, capsys)
    assert not failures, "SIMT differs from the reference model:\n" + "\n".join(failures)


def test_mlx_kernels_match_the_reference(capsys):
    import metalkit as mk
    root = corpus.require("mlx")
    start = time.monotonic()
    files = [f for f in sorted((root / "mlx/backend/metal/kernels").rglob("*.metal"))
             if not fnmatch.fnmatch(f.name, MLX_SKIP)]
    specs, total = [], 0
    for f in files:
        names = mk.load(f, include_dirs=[root]).kernels
        total += len(names)
        declared = _function_constants(f, root)
        specs.append({"path": str(f), "include_dirs": [str(root)], "kernels": _mlx_sample(names),
                      "constants": {k: v for k, v in MLX_CONSTANTS.items() if k in declared}})
    limited = set(_limit([n for s in specs for n in s["kernels"]]))
    specs = [{**s, "kernels": [n for n in s["kernels"] if n in limited]} for s in specs]
    with capsys.disabled():
        for s in specs:
            print(f"\n{Path(s['path']).name}: {', '.join(s['kernels'])}", end="")
    results = _sweep([s for s in specs if s["kernels"]])
    failures = _report(f"mlx ({len(files)} files)", total, results, time.monotonic() - start, capsys)
    assert not failures, "SIMT differs from the reference model:\n" + "\n".join(failures)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
