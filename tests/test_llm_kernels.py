"""The bundled transformer kernels (kernels/*.metal, through metalkit.llm) against numpy
references, at edge sizes (1, odd, not a multiple of a tile or a threadgroup); their argument
checks; and a small call of each under metalkit's checks, which must report nothing."""
import re
import warnings

import gguf
import numpy as np
import pytest

import metalkit as mk
from metalkit import llm
from metalkit.llm import attention, layers, linear, sampling


def close(got, want, rtol=1e-5):
    """Equal to want (float64) within rtol of want's largest magnitude."""
    want = np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max()), 1e-30) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)


# -- the linear layers -----------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 7, 3), (33, 17, 29), (64, 48, 96), (70, 130, 45)])
def test_matmul_tiled(device, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    close(llm.matmul_tiled(a, b), a.astype(np.float64) @ b.T)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (9, 17, 13), (24, 40, 16), (40, 56, 37)])
def test_matmul_simdgroup(device, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    assert llm.matmul_simdgroup(a, b, out=out) is out
    close(out, a.astype(np.float64) @ b.T)


@pytest.mark.parametrize("n,k,batch", [(1, 1, 1), (7, 13, 1), (101, 37, 3), (288, 288, 2),
                                       (33, 20, 9)])  # batches of 4 vectors a thread, and 1
def test_matvec(device, rng, n, k, batch):
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((batch, k)).astype(np.float32)
    close(llm.matvec(w, x), x.astype(np.float64) @ w.T)
    close(llm.matvec(w, x[0]), w.astype(np.float64) @ x[0])  # one vector: [N]


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
@pytest.mark.parametrize("n,k,batch", [(1, 32, 1), (7, 96, 3), (65, 288, 2), (5, 64, 6)])
def test_quantized_matvec(device, rng, kind, n, k, batch):
    quantize, dequantize = getattr(llm, f"quantize_{kind}"), getattr(llm, f"dequantize_{kind}")
    w = rng.standard_normal((n, k)).astype(np.float32)
    q = quantize(w)
    # the blocks are GGUF's: the gguf package reads them as the same weights
    ref = gguf.quants.dequantize(q, getattr(gguf.GGMLQuantizationType, kind.upper()))
    np.testing.assert_array_equal(dequantize(q), ref)
    step = np.abs(w).reshape(n, -1, 32).max(axis=2, keepdims=True) / (127 if kind == "q8_0" else 8)
    assert (np.abs(ref - w).reshape(n, -1, 32) <= step * 1.01).all()  # quantisation error
    x = rng.standard_normal((batch, k)).astype(np.float32)
    close(getattr(llm, f"matvec_{kind}")(q, x), x.astype(np.float64) @ ref.T.astype(np.float64))


# -- the other layers ------------------------------------------------------------------------

@pytest.mark.parametrize("rows,d", [(1, 1), (3, 7), (2, 288), (1, 1000)])
def test_rms_norm(device, rng, rows, d):
    x = rng.standard_normal((rows, d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5) * w
    close(llm.rms_norm(x, w, eps=1e-5), want)


def rope_ref(x, pos, theta):
    d = x.shape[-1]
    # the angle as float32 computes it: the frequency and the product rounded to float32
    freq = (float(theta) ** (-np.arange(0, d, 2) / d)).astype(np.float32)
    angle = (pos.astype(np.float32)[:, None] * freq).astype(np.float64)[:, None, :]
    x0, x1 = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    out = np.empty(x.shape)
    out[..., 0::2] = x0 * np.cos(angle) - x1 * np.sin(angle)
    out[..., 1::2] = x0 * np.sin(angle) + x1 * np.cos(angle)
    return out


@pytest.mark.parametrize("t,h,d", [(1, 1, 2), (5, 3, 6), (17, 2, 48)])
def test_rope(device, rng, t, h, d):
    x = rng.standard_normal((t, h, d)).astype(np.float32)
    pos = rng.integers(0, 2048, t)
    want = rope_ref(x, pos, 10000.0)
    assert llm.rope(x, pos) is x  # in place
    close(x, want, rtol=1e-4)  # float32 angles: a frequency's last bit times 2047 radians


@pytest.mark.parametrize("rows,c", [(1, 1), (4, 33), (3, 1000), (1, 32000)])
def test_softmax(device, rng, rows, c):
    x = (rng.standard_normal((rows, c)) * 30).astype(np.float32)
    x[0, 0] = 1e4 if c > 1 else x[0, 0]     # exp would overflow without the max
    if c > 3:
        x[:, 1::3] = -np.inf                   # masked entries
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    close(llm.softmax(x), e / e.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("shape", [(1,), (1001,), (3, 77)])
def test_swiglu(device, rng, shape):
    g = (rng.standard_normal(shape) * 4).astype(np.float32)
    u = rng.standard_normal(shape).astype(np.float32)
    g64 = g.astype(np.float64)
    close(llm.swiglu(g, u), g64 / (1 + np.exp(-g64)) * u)


@pytest.mark.parametrize("v,d,t", [(1, 1, 1), (11, 5, 7), (300, 33, 20)])
def test_embedding(device, rng, v, d, t):
    table = rng.standard_normal((v, d)).astype(np.float32)
    ids = rng.integers(0, v, t)
    np.testing.assert_array_equal(llm.embedding(table, ids), table[ids])


# -- attention -------------------------------------------------------------------------------

def attention_ref(q, k, v, causal_from=None):
    """softmax(q k^T / sqrt(D)) v per query head, GQA; with causal_from, query i sees keys up
    to causal_from + i."""
    tq, hq, d = q.shape
    group = hq // k.shape[1]
    out = np.empty(q.shape)
    for h in range(hq):
        s = q[:, h].astype(np.float64) @ k[:, h // group].T.astype(np.float64) / np.sqrt(d)
        if causal_from is not None:
            s[np.arange(k.shape[0])[None, :] > causal_from + np.arange(tq)[:, None]] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, h // group]
    return out


@pytest.mark.parametrize("t,hq,hkv,d", [(1, 1, 1, 4), (7, 6, 2, 12), (33, 4, 4, 32),
                                        (40, 3, 1, 128)])
def test_attention_prefill(device, rng, t, hq, hkv, d):
    q = rng.standard_normal((t, hq, d)).astype(np.float32)
    k = rng.standard_normal((t, hkv, d)).astype(np.float32)
    v = rng.standard_normal((t, hkv, d)).astype(np.float32)
    close(llm.attention_prefill(q, k, v), attention_ref(q, k, v, causal_from=0))


def paged_setup(rng, lens, hkv, d, block_size, spare_blocks=3):
    """Caches holding each sequence's keys and values in shuffled blocks, written with
    paged_kv_write; returns the caches, tables and each sequence's dense k, v."""
    need = [-(-n // block_size) for n in lens]
    nblocks = sum(need) + spare_blocks
    kc = rng.standard_normal((nblocks, block_size, hkv, d)).astype(np.float32)  # stale data
    vc = rng.standard_normal((nblocks, block_size, hkv, d)).astype(np.float32)
    order = rng.permutation(nblocks)
    tables = np.full((len(lens), max(need) + 1), -1, np.int32)
    dense, at = [], 0
    for b, n in enumerate(lens):
        tables[b, :need[b]] = order[at:at + need[b]]
        at += need[b]
        k = rng.standard_normal((n, hkv, d)).astype(np.float32)
        v = rng.standard_normal((n, hkv, d)).astype(np.float32)
        pos = np.arange(n)
        slots = tables[b, pos // block_size] * block_size + pos % block_size
        llm.paged_kv_write(k, v, kc, vc, slots)
        dense.append((k, v))
    return kc, vc, tables, dense


@pytest.mark.parametrize("lens,hq,hkv,d,block_size,part", [
    ([1], 1, 1, 4, 1, 256),
    ([5, 17, 1], 6, 2, 12, 4, 8),       # several partitions, empty ones for short contexts
    ([40, 23], 4, 4, 32, 16, 7),        # partitions that cut blocks
    ([70], 3, 1, 128, 8, 256),
])
def test_paged_attention(device, rng, lens, hq, hkv, d, block_size, part):
    kc, vc, tables, dense = paged_setup(rng, lens, hkv, d, block_size)
    q = rng.standard_normal((len(lens), hq, d)).astype(np.float32)
    out = llm.paged_attention(q, kc, vc, tables, lens, partition_size=part)
    for b, (k, v) in enumerate(dense):
        np.testing.assert_array_equal(kc[tables[b, 0], 0], k[0])   # written where the table says
        close(out[b], attention_ref(q[b:b + 1], k, v)[0])


def test_paged_kv_write_touches_only_its_slots(device, rng):
    kc = rng.standard_normal((5, 3, 2, 4)).astype(np.float32)
    vc = rng.standard_normal((5, 3, 2, 4)).astype(np.float32)
    k0, v0 = kc.copy(), vc.copy()
    k = rng.standard_normal((4, 2, 4)).astype(np.float32)
    v = rng.standard_normal((4, 2, 4)).astype(np.float32)
    slots = np.array([14, 0, 7, 8])
    llm.paged_kv_write(k, v, kc, vc, slots)
    k0.reshape(15, 2, 4)[slots], v0.reshape(15, 2, 4)[slots] = k, v
    np.testing.assert_array_equal(kc, k0)
    np.testing.assert_array_equal(vc, v0)


# -- sampling --------------------------------------------------------------------------------

@pytest.mark.parametrize("b,v", [(1, 1), (3, 7), (2, 32000)])
def test_argmax(device, rng, b, v):
    x = rng.standard_normal((b, v)).astype(np.float32)
    if v > 3:
        x[0, 2] = x[0, 5 % v] = 50.0            # a tie goes to the lower index
    if b > 1:
        x[1] = -np.inf
    np.testing.assert_array_equal(llm.argmax(x), np.argmax(x, axis=1))


def sample_ref(logits, u, temperature, top_k, top_p, slack=0.0):
    """The token sample_top_k_top_p draws, by sorting; the distance from the target to the
    nearest boundary of the running sum (rounding may pick a neighbour when it is tiny); and the
    tokens kept, asking (1 + slack) times the top-p mass (float32 sums differ from these)."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    v = len(p)
    cut = np.sort(p)[::-1][top_k - 1] if 0 < top_k < v else 0.0
    kept = p >= cut
    if top_p < 1:
        need = top_p * p[kept].sum() * (1 + slack)
        for t in np.unique(p[kept])[::-1]:       # the largest threshold keeping enough mass
            if p[p >= t].sum() >= need:
                kept = p >= t
                break
    run = np.cumsum(np.where(kept, p, 0))
    target = u * run[-1]
    return int(np.searchsorted(run, target, side="right")), float(np.abs(run - target).min()), kept


@pytest.mark.parametrize("v,temperature,top_k,top_p", [
    (1, 1.0, 0, 1.0), (7, 0.7, 3, 1.0), (1000, 1.0, 0, 0.9), (1000, 1.3, 50, 0.5),
    (1000, 1.0, 1, 1.0), (32000, 0.8, 40, 0.95)])
def test_sample_top_k_top_p(device, rng, v, temperature, top_k, top_p):
    b = 5
    logits = (rng.standard_normal((b, v)) * 3).astype(np.float32)
    u = rng.random(b).astype(np.float32)
    probs = np.full((b, v), np.nan, np.float32)
    got = llm.sample_top_k_top_p(logits, u, temperature, top_k, top_p, probs=probs)
    z = logits.astype(np.float64) / temperature
    e = np.exp(z - z.max(axis=1, keepdims=True))
    close(probs, e / e.sum(axis=1, keepdims=True))
    for r in range(b):
        want, margin, kept = sample_ref(logits[r], u[r], temperature, top_k, top_p)
        fewest = sample_ref(logits[r], u[r], temperature, top_k, top_p, slack=-1e-5)[2]
        most = sample_ref(logits[r], u[r], temperature, top_k, top_p, slack=1e-5)[2]
        assert most[got[r]]
        if margin > 1e-5 and (fewest == most).all():  # no rounding can move the cut or the draw
            assert got[r] == want, (r, got[r], want)


def test_sampling_follows_the_kept_distribution(device, rng):
    n, v = 3000, 6
    logits = np.tile(rng.standard_normal(v).astype(np.float32), (n, 1))
    tokens = llm.sample_top_k_top_p(logits, rng.random(n), top_k=4, top_p=0.8)
    _, _, kept = sample_ref(logits[0], 0.0, 1.0, 4, 0.8)
    p = np.exp(logits[0].astype(np.float64))
    want = np.where(kept, p, 0) / p[kept].sum()
    freq = np.bincount(tokens, minlength=v) / n
    assert (freq[~kept] == 0).all()
    np.testing.assert_allclose(freq, want, atol=0.04)  # 4 standard deviations at n = 3000


# -- argument checks -------------------------------------------------------------------------

def test_bad_arguments_name_the_kernel_and_parameter_and_touch_nothing(rng):
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    before = x.copy()
    with pytest.raises(mk.ArgumentError, match=r"rope: positions holds 2 values for 3 tokens"):
        llm.rope(x, [0, 1])
    np.testing.assert_array_equal(x, before)
    with pytest.raises(mk.ArgumentError, match=r"matvec: w is float64, the kernel reads float32; "
                       r"pass w.astype\(np.float32\)"):
        llm.matvec(np.ones((2, 3)), np.ones(3, np.float32))
    with pytest.raises(mk.ArgumentError, match=r"matmul_tiled: a has K = 3 columns but b has 4"):
        llm.matmul_tiled(np.ones((2, 3), np.float32), np.ones((5, 4), np.float32))
    with pytest.raises(mk.ArgumentError, match=r"embedding: ids holds 9, outside \[0, 4\)"):
        llm.embedding(np.ones((4, 2), np.float32), [1, 9])
    with pytest.raises(mk.ArgumentError, match=r"matvec_q8_0: w must be uint8 blocks"):
        llm.matvec_q8_0(np.ones((2, 33), np.uint8), np.ones(32, np.float32))
    with pytest.raises(mk.ArgumentError, match=r"attention_prefill: 3 query heads cannot share 2"):
        llm.attention_prefill(np.ones((1, 3, 4), np.float32), *[np.ones((1, 2, 4), np.float32)] * 2)
    kc = np.zeros((2, 4, 1, 4), np.float32)
    with pytest.raises(mk.ArgumentError, match=r"paged_attention: block_tables\[0\] lists block 5 "
                       r"for its context of 6 tokens, outside the cache's 2 blocks"):
        llm.paged_attention(np.ones((1, 1, 4), np.float32), kc, kc, [[0, 5]], [6])
    with pytest.raises(mk.ArgumentError, match=r"rope: the head dimension D = 5 must be even"):
        llm.rope(np.ones((1, 1, 5), np.float32), [0])
    with pytest.raises(mk.ArgumentError, match=r"embedding: ids must hold integers, not float64"):
        llm.embedding(np.ones((4, 2), np.float32), [1.0])
    with pytest.raises(mk.ArgumentError, match=r"softmax: x must be one row \[C\] or rows"):
        llm.softmax(np.ones((2, 2, 2), np.float32))
    y = np.full((3, 4), 7, np.float32)
    with pytest.raises(mk.ArgumentError, match=r"matvec: out must be a float32 array of shape "
                       r"\(5,\), not float32 \(3, 4\)"):
        llm.matvec(np.ones((5, 3), np.float32), np.ones(3, np.float32), out=y)
    assert (y == 7).all()
    out = np.full(2, 7, np.int32)
    with pytest.raises(mk.ArgumentError, match=r"sample_top_k_top_p: top_p must be in \(0, 1\]"):
        llm.sample_top_k_top_p(np.ones((2, 3), np.float32), [0.1, 0.2], top_p=0, out=out)
    assert (out == 7).all()


# -- metalkit's checks -----------------------------------------------------------------------

@pytest.fixture
def cpu():
    """The CPU simulator for one test, whatever the backend was."""
    backend = mk.device().backend
    mk.use("cpu")
    yield
    mk.use(backend)


@pytest.mark.parametrize("mode", [True, "all"])
def test_kernels_pass_metalkits_checks(monkeypatch, rng, cpu, mode):
    """Every bundled transformer kernel, called as its wrapper calls it, under check=mode:
    no fault and no warning, and still the right results (the checks are the simulator's)."""
    called = set()

    def checked_run(name, *args, **kw):
        called.add(name)
        return mk.run(name, *args, check=mode, **kw)
    for module in (linear, layers, attention, sampling):
        monkeypatch.setattr(module, "run", checked_run)

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b, w = f(5, 9), f(6, 9), f(3, 64)
        close(llm.matmul_tiled(a, b), a.astype(np.float64) @ b.T)
        close(llm.matmul_simdgroup(a, b), a.astype(np.float64) @ b.T)
        close(llm.matvec(b, a), a.astype(np.float64) @ b.T)
        x = f(2, 64)
        for kind in ("q8_0", "q4_0"):
            q = getattr(llm, f"quantize_{kind}")(w)
            want = x.astype(np.float64) @ getattr(llm, f"dequantize_{kind}")(q).T
            close(getattr(llm, f"matvec_{kind}")(q, x), want)
        close(llm.rms_norm(b, a[0]), b / np.sqrt((b.astype(np.float64)**2).mean(1, keepdims=True)
                                                  + 1e-5) * a[0])
        r = f(3, 2, 6)
        pos = np.array([0, 5, 9])
        want = rope_ref(r, pos, 10000.0)
        close(llm.rope(r, pos), want)
        e = np.exp(b - b.max(axis=1, keepdims=True).astype(np.float64))
        close(llm.softmax(b), e / e.sum(axis=1, keepdims=True))
        close(llm.swiglu(a, a), a / (1 + np.exp(-a.astype(np.float64))) * a)
        np.testing.assert_array_equal(llm.embedding(b, [5, 0, 5]), b[[5, 0, 5]])
        q, k, v = f(5, 4, 8), f(5, 2, 8), f(5, 2, 8)
        close(llm.attention_prefill(q, k, v), attention_ref(q, k, v, causal_from=0))
        kc, vc, tables, dense = paged_setup(rng, [5, 2], 2, 8, 2)
        out = llm.paged_attention(q[:2], kc, vc, tables, [5, 2], partition_size=4)
        for i, (k, v) in enumerate(dense):
            close(out[i], attention_ref(q[i:i + 1], k, v)[0])
        np.testing.assert_array_equal(llm.argmax(b), np.argmax(b, axis=1))
        u = rng.random(6)
        got = llm.sample_top_k_top_p(b, u, 1.0, 4, 0.9)
        for i in range(6):
            assert sample_ref(b[i], u[i], 1.0, 4, 0.9, slack=1e-5)[2][got[i]]
        # rows longer than a threadgroup: several values a thread, a partial float4 run
        r = f(2, 1027) * 3
        np.testing.assert_array_equal(llm.argmax(r), np.argmax(r, axis=1))
        e = np.exp(r - r.max(axis=1, keepdims=True).astype(np.float64))
        close(llm.softmax(r), e / e.sum(axis=1, keepdims=True))
        close(llm.rms_norm(r, r[0]), r / np.sqrt((r.astype(np.float64)**2).mean(1, keepdims=True)
                                                 + 1e-5) * r[0])
        got = llm.sample_top_k_top_p(r, u[:2], 0.8, 50, 0.7)
        for i in range(2):
            assert sample_ref(r[i], u[i], 0.8, 50, 0.7, slack=1e-5)[2][got[i]]
    assert called == set(mk.kernels()) - {"add_arrays"}  # every transformer kernel, checked


# -- the listing -----------------------------------------------------------------------------

def test_help_of_run_and_the_readme_list_every_bundled_kernel_with_its_signature():
    from pathlib import Path
    from metalkit.bundled import _find
    doc = " ".join(mk.run.__doc__.split())
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    for name in mk.kernels():
        params = [re.sub(r"^(device|constant) ", "", a.decl).replace("& ", " ")
                  for a in _find(name).args if not a.builtin and a.kind != "threadgroup"]
        sig = f"{name}({', '.join(params)})"
        assert f"``{sig}``" in doc, sig
        assert f"`{sig}`" in readme, sig
