"""The transformer kernels (metalkit.llm) against numpy and torch (CPU) at the sizes of a
15M-parameter llama (dim 288, 6 layers, 6 heads of 48, MLP 768, vocabulary 32000), and the
examples/llm engine's tokens per second on such a model with random weights.

    python bench/bench_llm.py                  # every row, then the engine
    python bench/bench_llm.py --no-engine      # the kernels only
    python bench/bench_llm.py --blas-threads 1 # numpy's and torch's BLAS on one thread

Each kernel's result is checked against numpy first; a wrong one prints FAILED and the script
exits with status 1. The sides of a row are timed in turns, 5 rounds, each a mean over repeated
calls; the best round counts. On a small shared machine, multithreaded BLAS can be slower than
one thread by orders of magnitude (its threads wait for cores other work holds), hence
--blas-threads (which sets OPENBLAS/OMP/MKL_NUM_THREADS before numpy loads). The same script
runs on a Mac, where metalkit runs the kernels on the GPU."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and "--blas-threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--blas-threads") + 1]
    for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = _n

import numpy as np  # noqa: E402

import metalkit as mk  # noqa: E402
from metalkit import llm  # noqa: E402
from metalkit._bench import ratio  # noqa: E402

try:
    import torch
except ImportError:  # the torch column is then empty
    torch = None

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "llm"))

DIM, HEADS, HEAD_DIM, HIDDEN, VOCAB, CTX, PROMPT = 288, 6, 48, 768, 32000, 256, 128
rng = np.random.default_rng(0)
failed = []


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def attention_np(q, k, v):
    """Causal attention in numpy: [T, H, D] each."""
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[2])
    s += np.triu(np.full((q.shape[0], q.shape[0]), -np.inf, np.float32), 1)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return np.einsum("hts,shd->thd", p / p.sum(axis=2, keepdims=True), v)


def sample_np(logits, u, k, p):
    """Top-k then top-p by sorting, in numpy; the draw in vocabulary order, as the kernel's."""
    e = np.exp(logits - logits.max())
    e /= e.sum()
    top = np.sort(e)[::-1][:k]
    cut = top[min(np.searchsorted(np.cumsum(top), p * top.sum()), k - 1)]
    run = np.cumsum(np.where(e >= cut, e, 0))
    return np.searchsorted(run, u * run[-1], side="right")


def rows():
    """(name, metalkit call, numpy call, torch call or None, check of the metalkit result)."""
    a, w, wh, wd = f32(PROMPT, DIM), f32(DIM, DIM), f32(HIDDEN, DIM), f32(DIM, HIDDEN)
    head = f32(VOCAB, DIM) / 17
    x1, xh = f32(1, DIM), f32(1, HIDDEN)
    q8 = llm.quantize_q8_0(head)
    q4 = llm.quantize_q4_0(head)
    d8, d4 = llm.dequantize_q8_0(q8), llm.dequantize_q4_0(q4)
    blocks8 = q8.reshape(VOCAB, -1, 34)
    scales8 = np.ascontiguousarray(blocks8[..., :2]).view(np.float16).astype(np.float32)
    ints8 = blocks8[..., 2:].view(np.int8)
    t = torch.from_numpy if torch else None

    def product(name, mine, x, y):
        """A row of x @ y.T."""
        return (name, lambda: mine(x, y), lambda: np.matmul(x, y.T),
                torch and (lambda: torch.matmul(t(x), t(y).T)), lambda r: (r, x @ y.T))
    yield product("matmul_tiled 128x288 @ 288x288", llm.matmul_tiled, a, w)
    yield product("matmul_tiled 128x288 @ 288x768", llm.matmul_tiled, a, wh)
    yield product("matmul_simdgroup 128x288 @ 288x288", llm.matmul_simdgroup, a, w)
    yield ("matvec 288 -> 288", lambda: llm.matvec(w, x1), lambda: x1 @ w.T,
           torch and (lambda: t(x1) @ t(w).T), lambda r: (r, x1 @ w.T))
    yield ("matvec 768 -> 288", lambda: llm.matvec(wd, xh), lambda: xh @ wd.T,
           torch and (lambda: t(xh) @ t(wd).T), lambda r: (r, xh @ wd.T))
    yield ("matvec 288 -> 32000 (output head)", lambda: llm.matvec(head, x1), lambda: x1 @ head.T,
           torch and (lambda: t(x1) @ t(head).T), lambda r: (r, x1 @ head.T))
    x4 = f32(4, DIM)
    yield ("matvec 288 -> 32000, batch of 4", lambda: llm.matvec(head, x4), lambda: x4 @ head.T,
           torch and (lambda: t(x4) @ t(head).T), lambda r: (r, x4 @ head.T))
    yield ("matvec_q8_0 288 -> 32000", lambda: llm.matvec_q8_0(q8, x1),
           lambda: ((ints8 * scales8).reshape(VOCAB, DIM) @ x1[0]), None,
           lambda r: (r[0], d8 @ x1[0]))
    yield ("matvec_q4_0 288 -> 32000", lambda: llm.matvec_q4_0(q4, x1),
           lambda: llm.dequantize_q4_0(q4) @ x1[0], None, lambda r: (r[0], d4 @ x1[0]))
    xs = f32(PROMPT, DIM)
    nw = f32(DIM)
    yield ("rms_norm 1x288", lambda: llm.rms_norm(x1, nw),
           lambda: x1 / np.sqrt((x1 * x1).mean(axis=1, keepdims=True) + 1e-5) * nw, None,
           lambda r: (r, x1 / np.sqrt((x1 * x1).mean(axis=1, keepdims=True) + 1e-5) * nw))
    yield ("rms_norm 128x288", lambda: llm.rms_norm(xs, nw),
           lambda: xs / np.sqrt((xs * xs).mean(axis=1, keepdims=True) + 1e-5) * nw, None,
           lambda r: (r, xs / np.sqrt((xs * xs).mean(axis=1, keepdims=True) + 1e-5) * nw))
    qr = f32(PROMPT, HEADS, HEAD_DIM)
    pos = np.arange(PROMPT, dtype=np.int32)
    freq = (10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)).astype(np.float32)
    ang = pos[:, None, None] * freq
    cos, sin = np.cos(ang), np.sin(ang)

    def rope_np(x):
        y = np.empty_like(x)
        y[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        y[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
        return y
    qcopy = qr.copy()
    yield ("rope 128x6x48 (in place)", lambda: llm.rope(qcopy, pos), lambda: rope_np(qr), None,
           lambda r: (llm.rope(qr.copy(), pos), rope_np(qr)))
    lg = f32(1, VOCAB) * 3
    yield ("softmax 1x32000", lambda: llm.softmax(lg),
           lambda: (lambda e: e / e.sum())(np.exp(lg - lg.max())),
           torch and (lambda: torch.softmax(t(lg), 1)),
           lambda r: (r, (lambda e: e / e.sum())(np.exp(lg - lg.max()))))
    g, u = f32(PROMPT, HIDDEN), f32(PROMPT, HIDDEN)
    yield ("swiglu 128x768", lambda: llm.swiglu(g, u), lambda: g / (1 + np.exp(-g)) * u,
           torch and (lambda: torch.nn.functional.silu(t(g)) * t(u)),
           lambda r: (r, g / (1 + np.exp(-g)) * u))
    table = f32(VOCAB, DIM)
    ids = rng.integers(0, VOCAB, PROMPT)
    yield ("embedding 128 of 32000x288", lambda: llm.embedding(table, ids), lambda: table[ids],
           None, lambda r: (r, table[ids]))
    k, v = f32(PROMPT, HEADS, HEAD_DIM), f32(PROMPT, HEADS, HEAD_DIM)
    sdpa = torch and (lambda: torch.nn.functional.scaled_dot_product_attention(
        t(qr).transpose(0, 1), t(k).transpose(0, 1), t(v).transpose(0, 1), is_causal=True))
    yield ("attention_prefill 128 tokens, 6x48", lambda: llm.attention_prefill(qr, k, v),
           lambda: attention_np(qr, k, v), sdpa, lambda r: (r, attention_np(qr, k, v)))
    bs, ctx = 16, CTX
    kc, vc = f32(CTX // bs + 4, bs, HEADS, HEAD_DIM), f32(CTX // bs + 4, bs, HEADS, HEAD_DIM)
    table_ = rng.permutation(CTX // bs + 4)[:CTX // bs].astype(np.int32)[None]
    qd = f32(1, HEADS, HEAD_DIM)

    def paged_np():
        kk = kc[table_[0]].reshape(-1, HEADS, HEAD_DIM)[:ctx]
        vv = vc[table_[0]].reshape(-1, HEADS, HEAD_DIM)[:ctx]
        s = np.einsum("hd,shd->hs", qd[0], kk) / np.sqrt(HEAD_DIM)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        return np.einsum("hs,shd->hd", p / p.sum(axis=1, keepdims=True), vv)
    def paged_torch():
        kk = t(kc)[t(table_[0]).long()].reshape(-1, HEADS, HEAD_DIM)[:ctx].transpose(0, 1)
        vv = t(vc)[t(table_[0]).long()].reshape(-1, HEADS, HEAD_DIM)[:ctx].transpose(0, 1)
        return torch.nn.functional.scaled_dot_product_attention(t(qd)[0][:, None], kk, vv)
    for part in (256, 64):
        yield (f"paged_attention ctx 256, split {part}",
               lambda part=part: llm.paged_attention(qd, kc, vc, table_, [ctx],
                                                     partition_size=part),
               paged_np, torch and paged_torch, lambda r: (r[0], paged_np()))
    yield ("argmax 1x32000", lambda: llm.argmax(lg), lambda: lg.argmax(axis=1),
           torch and (lambda: t(lg).argmax(1)), lambda r: (r, lg.argmax(axis=1)))
    yield ("sample top-k 40 top-p 0.9, 1x32000",
           lambda: llm.sample_top_k_top_p(lg, [0.3], 1.0, 40, 0.9),
           lambda: sample_np(lg[0], 0.3, 40, 0.9), None,
           lambda r: (r[0], sample_np(lg[0].astype(np.float64), 0.3, 40, 0.9)))


def in_turns(*fns, rounds: int = 5, seconds: float = 0.05) -> list[float]:
    """Seconds per call of each fn, timed in turns: the best of ``rounds`` means."""
    counts = []
    for fn in fns:
        fn()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
            n += 1
        counts.append(n)
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, (fn, n) in enumerate(zip(fns, counts)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[i] = min(best[i], (time.perf_counter() - t0) / n)
    return best


def kernels() -> None:
    print(f"{'kernel':40}{'metalkit ms':>12}{'numpy ms':>10}{'torch ms':>10}  ratios")
    for name, mine, ref, tor, check in rows():
        got, want = check(mine())
        if not np.allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                           rtol=1e-3, atol=1e-3 * float(np.abs(want).max() or 1)):
            failed.append(name)
            print(f"{name:40} FAILED: differs from numpy")
            continue
        tm, tn, tt = in_turns(mine, ref, tor) if tor else (*in_turns(mine, ref), float("nan"))
        words = ratio(tm, tn) + (f"; {ratio(tm, tt, 'metalkit / torch')}" if tor else "")
        print(f"{name:40}{tm * 1e3:12.3f}{tn * 1e3:10.3f}{tt * 1e3:10.3f}  {words}", flush=True)


def engine(quantise: str, batch: int) -> None:
    import tiny_model
    import weights
    from engine import Engine, Request
    from model import Llama
    config = weights.Config(VOCAB, DIM, 6, HEADS, HEADS, HIDDEN, CTX)
    with tempfile.TemporaryDirectory() as d:
        path = tiny_model.write(Path(d) / "m.gguf", config, seed=0, quantise=quantise,
                                tokens=[f"<{i}>" for i in range(VOCAB)])
        model = Llama(*weights.load(path)[:2])
        prompt = rng.integers(0, VOCAB, PROMPT).tolist()
        e = Engine(model, max_batch=batch)
        e.submit(Request(prompt[:8], 2))              # a warm-up: first calls, first pages
        e.run()
        for i in range(batch):
            e.submit(Request(prompt, 65))
        t0, c0 = time.perf_counter(), time.process_time()
        e.step()                                      # the prefills, and each first token
        t1, c1 = time.perf_counter(), time.process_time()
        steps = 0
        while e.running:
            e.step()
            steps += 1
        t2, c2 = time.perf_counter(), time.process_time()
    # CPU time counts every thread of the process; other work on the machine inflates it less
    print(f"engine {quantise}, batch {batch}: prefill {batch * PROMPT / (t1 - t0):7.1f} tokens/s "
          f"({batch} x {PROMPT} tokens in {t1 - t0:.2f} s, CPU {c1 - c0:.2f} s); decode "
          f"{batch * steps / (t2 - t1):6.1f} tokens/s ({steps} steps of "
          f"{(t2 - t1) / steps * 1e3:.1f} ms, CPU {(c2 - c1) / steps * 1e3:.1f} ms)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--no-engine", action="store_true")
    p.add_argument("--no-kernels", action="store_true")
    p.add_argument("--blas-threads", help="threads for numpy's and torch's BLAS (read at start)")
    a = p.parse_args()
    d = mk.device()
    print(f"device: {d.name} [{d.backend}]; torch: {torch.__version__ if torch else 'absent'}; "
          f"BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}; "
          f"load average {os.getloadavg()[0]:.1f}")
    if not a.no_kernels:
        kernels()
    if not a.no_engine:
        for quantise, batch in (("f32", 1), ("f32", 4), ("q8_0", 1)):
            engine(quantise, batch)
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
