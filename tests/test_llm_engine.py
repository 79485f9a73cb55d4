"""The inference engine of examples/llm against a torch implementation of the same llama model
written here: logits of a prompt and of 32 decode steps to 1e-4 relative, Q8_0 and Q4_0 weights
within their quantisation's own error, continuous batching and paging giving each request the
tokens it gets alone, sampling, and generate.py from a fresh temporary directory."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llm"
sys.path.insert(0, str(EXAMPLE))

import tiny_model  # noqa: E402
import weights  # noqa: E402
from engine import Engine, Request  # noqa: E402
from kv_cache import OutOfBlocks, PagedKVCache  # noqa: E402
from model import Llama  # noqa: E402
from vocab import Vocab  # noqa: E402

from metalkit import llm  # noqa: E402

# GQA (4 query heads on 2 key/value heads), an odd vocabulary, widths in whole Q8_0 blocks
CONFIG = weights.Config(vocab_size=97, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        hidden_dim=96, context_length=64, rope_theta=500.0,
                        norm_eps=float(np.float32(1e-5)))  # as GGUF stores it, a float32


@pytest.fixture
def model_files(tmp_path, rng):
    """The same random model in F32, Q8_0 and Q4_0 GGUF files (from the test's seed)."""
    seed = int(rng.integers(2**31))
    return {q: tiny_model.write(tmp_path / f"m-{q}.gguf", CONFIG, seed, q)
            for q in ("f32", "q8_0", "q4_0")}


def load(path, **kw):
    config, w, tokens = weights.load(path)
    assert config == CONFIG and len(tokens) == CONFIG.vocab_size
    return Llama(config, w, **kw), w


def dense(w):
    """Every weight as float32, quantised ones dequantised."""
    deq = {"f32": lambda d: d, "q8_0": llm.dequantize_q8_0, "q4_0": llm.dequantize_q4_0}
    return {name: deq[x.kind](x.data) for name, x in w.items()}


def torch_logits(w, tokens, c=CONFIG):
    """The reference: the llama forward pass of tokens, all positions, in torch float32."""

    def t(a):  # a copy: the file's arrays are read-only maps
        return torch.from_numpy(np.array(a))
    n, hd = len(tokens), c.head_dim
    x = t(w["token_embd.weight"])[torch.tensor(tokens)]
    freqs = 1.0 / c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    angle = torch.arange(n, dtype=torch.float32)[:, None] * freqs
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]

    def rope(v):  # adjacent pairs (v[2i], v[2i + 1]), as GGUF's llama layout
        out = torch.empty_like(v)
        out[..., 0::2] = v[..., 0::2] * cos - v[..., 1::2] * sin
        out[..., 1::2] = v[..., 0::2] * sin + v[..., 1::2] * cos
        return out

    def norm(v, weight):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + c.norm_eps) * t(weight)

    for i in range(c.n_layers):
        g = {role: t(w[name]) for role, name in weights.layer_names(i).items()}
        h = norm(x, w[f"blk.{i}.attn_norm.weight"])
        q = rope((h @ g["wq"].T).view(n, c.n_heads, hd)).transpose(0, 1)
        k = rope((h @ g["wk"].T).view(n, c.n_kv_heads, hd)).transpose(0, 1)
        v = (h @ g["wv"].T).view(n, c.n_kv_heads, hd).transpose(0, 1)
        rep = c.n_heads // c.n_kv_heads
        a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 0),
                                           v.repeat_interleave(rep, 0), is_causal=True)
        x = x + a.transpose(0, 1).reshape(n, c.dim) @ g["wo"].T
        h = norm(x, w[f"blk.{i}.ffn_norm.weight"])
        x = x + (F.silu(h @ g["w_gate"].T) * (h @ g["w_up"].T)) @ g["w_down"].T
    return (norm(x, w["output_norm.weight"]) @ t(w["output.weight"]).T).numpy()


def rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_prefill_and_32_decode_steps_match_torch(model_files, rng):
    model, w = load(model_files["f32"], partition_size=8)  # split-K: up to 6 partitions
    ref_w = dense(w)
    prompt = rng.integers(0, CONFIG.vocab_size, 11).tolist()
    cache = model.new_cache(num_blocks=12, block_size=4)  # the context spans 11 blocks
    logits = model.prefill(prompt, 0, cache, all_logits=True)
    assert logits.shape == (11, CONFIG.vocab_size)
    assert rel_err(logits, torch_logits(ref_w, prompt)) < 1e-4
    seq = prompt + [int(np.argmax(logits[-1]))]
    for _ in range(32):
        step = model.decode([seq[-1]], [0], cache)[0]
        assert rel_err(step, torch_logits(ref_w, seq)[-1]) < 1e-4
        seq.append(int(np.argmax(step)))
    assert cache.lengths[0] == len(seq) - 1


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_quantised_weights_stay_within_the_quantisation_error(model_files, rng, kind):
    prompt = rng.integers(0, 97, 9).tolist()
    exact = torch_logits(dense(load(model_files["f32"])[1]), prompt)
    model, w = load(model_files[kind])
    assert w["blk.0.attn_q.weight"].kind == kind
    on_quantised = torch_logits(dense(w), prompt)     # the same weights, dequantised, in torch
    got = model.prefill(prompt, 0, model.new_cache(4), all_logits=True)
    assert rel_err(got, on_quantised) < 1e-4          # the kernels add no error of their own
    quant_error = rel_err(on_quantised, exact)
    assert 0 < quant_error < (0.05 if kind == "q8_0" else 0.5)  # seen: 0.011, 0.15 to 0.22
    assert rel_err(got, exact) <= quant_error * 1.01 + 1e-5


def requests(rng):
    """Prompts of different lengths, greedy and sampled, of different output lengths."""
    out = []
    for i, (n, new, temp, k, p) in enumerate([(5, 12, 0.0, 0, 1.0), (13, 7, 0.9, 0, 0.8),
                                              (1, 15, 0.0, 0, 1.0), (8, 9, 1.2, 10, 0.9),
                                              (20, 5, 0.0, 0, 1.0)]):
        out.append(Request(rng.integers(0, 97, n).tolist(), new, temp, k, p, seed=100 + i))
    return out


def test_continuous_batching_gives_each_request_its_tokens_alone(model_files, rng):
    model, _ = load(model_files["f32"])
    reqs = requests(rng)
    alone = []
    for r in reqs:
        e = Engine(model, max_batch=1, block_size=4)
        e.submit(Request(r.prompt, r.max_new_tokens, r.temperature, r.top_k, r.top_p, r.seed))
        alone.append(e.run()[0])
    # together: 3 blocks of 4 tokens short of room for all, 2 at first, the others joining later
    e = Engine(model, max_batch=3, num_blocks=14, block_size=4)
    for r in reqs[:2]:
        e.submit(r)
    sizes, joined = [], 0   # joined: steps where a request came in beside running ones
    for _ in range(3):
        e.step()
        sizes.append(len(e.running))
    for r in reqs[2:]:
        e.submit(r)
    while e.waiting or e.running:
        before = {r.id for r in e.running}
        e.step()
        now = {r.id for r in e.running}
        sizes.append(len(now))
        joined += bool(now - before and now & before)
    got = [e.finished[i].tokens for i in range(len(reqs))]
    assert got == alone
    assert [len(t) for t in got] == [r.max_new_tokens for r in reqs]
    assert max(sizes) == 3 and joined > 0
    assert len(e.cache.free) == 14 and not e.cache.tables   # every block back in the pool


def test_paged_cache_allocates_blocks_as_sequences_grow():
    c = PagedKVCache(n_layers=1, num_blocks=5, block_size=4, n_kv_heads=1, head_dim=4)
    s0 = c.append(0, 6)                       # two blocks
    s1 = c.append(1, 3)                       # one
    assert len(c.free) == 2 and c.tables[0][:1] == [0]
    first, second = c.tables[0]
    assert list(s0) == [first * 4 + i for i in range(4)] + [second * 4, second * 4 + 1]
    assert list(c.append(0, 2)) == [second * 4 + 2, second * 4 + 3]  # the same block
    assert len(c.free) == 2 and len(s1) == 3
    np.testing.assert_array_equal(c.block_tables([1, 0]), [[c.tables[1][0], -1], c.tables[0]])
    with pytest.raises(OutOfBlocks, match="needs 3 blocks, 2 are free"):
        c.append(1, 10)
    c.release(0)
    assert len(c.free) == 4 and 0 not in c.tables


def test_top_p_sampling_is_reproducible_and_varies_with_the_seed(model_files):
    model, _ = load(model_files["f32"])

    def run(seed, p=0.9):
        e = Engine(model, max_batch=2)
        e.submit(Request([1, 2, 3], 12, temperature=1.0, top_p=p, seed=seed))
        return e.run()[0]

    assert run(1) == run(1)
    assert len({tuple(run(s)) for s in range(4)}) > 1
    e = Engine(model)                                   # top_p -> 0 keeps only the likeliest
    e.submit(Request([1, 2, 3], 6, temperature=1.0, top_p=1e-6, seed=5))
    g = Engine(model)
    g.submit(Request([1, 2, 3], 6))
    assert e.run() == g.run()


def test_vocab_round_trip():
    v = Vocab(tiny_model.byte_tokens())
    ids = v.encode("Hi there\n\u00e9")
    assert v.decode(ids) == "Hi there\n\u00e9" and len(ids) == len("Hi there\n\u00e9".encode())
    sp = Vocab(["<unk>", "\u2581the", "\u2581", "t", "h", "e", "<0x21>"])
    assert sp.encode(" the!") == [1, 6] and sp.decode([1, 6]) == " the!"


def test_generate_runs_from_scratch_on_the_default_model(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # no model file yet
    p = subprocess.run([sys.executable, str(EXAMPLE / "generate.py"), "-n", "5"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "tokens [" in p.stdout and "5 tokens in" in p.stdout
    assert (tmp_path / "metalkit-llm-tiny-seed0.gguf").exists()


def test_requests_the_engine_cannot_hold_are_refused(model_files):
    model, _ = load(model_files["f32"])
    e = Engine(model, max_batch=2, num_blocks=2, block_size=4)
    with pytest.raises(ValueError, match="of 11 tokens needs 3 cache blocks; the cache has 2"):
        e.submit(Request([1] * 5, 6))
    with pytest.raises(ValueError, match="at most 64 tokens in all, not 70"):
        e.submit(Request([1] * 60, 10))
    assert not e.waiting


def test_a_model_without_an_output_matrix_ties_it_to_the_embeddings(tmp_path, rng):
    w = tiny_model.random_weights(CONFIG, int(rng.integers(2**31)))
    del w["output.weight"]
    path = tmp_path / "tied.gguf"
    weights.save(path, CONFIG, w, [f"<{i}>" for i in range(CONFIG.vocab_size)])
    model, loaded = load(path)
    assert "output.weight" not in loaded
    prompt = rng.integers(0, CONFIG.vocab_size, 6).tolist()
    got = model.prefill(prompt, 0, model.new_cache(4), all_logits=True)
    assert rel_err(got, torch_logits(dict(w, **{"output.weight": w["token_embd.weight"]}),
                                     prompt)) < 1e-4


def test_a_file_mixing_quantised_and_float_matrices(tmp_path, rng):
    """Rows that are not whole blocks of 32 (an MLP of 72) stay float32 beside Q8_0 ones."""
    config = dataclasses.replace(CONFIG, hidden_dim=72)
    path = tiny_model.write(tmp_path / "mixed.gguf", config, int(rng.integers(2**31)), "q8_0")
    loaded_config, w, _ = weights.load(path)
    assert w["blk.0.ffn_down.weight"].kind == "f32" and w["blk.0.ffn_up.weight"].kind == "q8_0"
    model = Llama(loaded_config, w)
    prompt = rng.integers(0, config.vocab_size, 7).tolist()
    got = model.prefill(prompt, 0, model.new_cache(4), all_logits=True)
    assert rel_err(got, torch_logits(dense(w), prompt, config)) < 1e-4
