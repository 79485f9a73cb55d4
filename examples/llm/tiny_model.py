"""The model ``generate.py`` runs when given none: a small llama with random weights from a
fixed seed, written to GGUF once and then read back like any model file. Its vocabulary is the
256 bytes, so any text can be encoded and every token printed."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

import weights as W

TINY = W.Config(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=176,
                context_length=256)


def byte_tokens() -> list[str]:
    """The vocabulary: printable ASCII as itself, every other byte as <0xNN>."""
    return [chr(b) if 32 < b < 127 else f"<0x{b:02X}>" for b in range(256)]


def random_weights(config: W.Config, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights by GGUF name, scaled so activations stay near unit size."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    c, kv = config, config.n_kv_heads * config.head_dim
    out = {"token_embd.weight": rng.standard_normal((c.vocab_size, c.dim)).astype(np.float32)}
    for i in range(c.n_layers):
        n = W.layer_names(i)
        out |= {n["attn_norm"]: norm(c.dim), n["wq"]: mat(c.dim, c.dim), n["wk"]: mat(kv, c.dim),
                n["wv"]: mat(kv, c.dim), n["wo"]: mat(c.dim, c.dim), n["ffn_norm"]: norm(c.dim),
                n["w_gate"]: mat(c.hidden_dim, c.dim), n["w_up"]: mat(c.hidden_dim, c.dim),
                n["w_down"]: mat(c.dim, c.hidden_dim)}
    out |= {"output_norm.weight": norm(c.dim), "output.weight": mat(c.vocab_size, c.dim)}
    return out


def write(path: str | Path, config: W.Config = TINY, seed: int = 0, quantise: str = "f32",
          tokens: list[str] | None = None) -> Path:
    """A random model of ``config`` written to ``path``."""
    toks = tokens or (byte_tokens() if config.vocab_size == 256 else
                      [f"<{i}>" for i in range(config.vocab_size)])
    W.save(path, config, random_weights(config, seed), toks, quantise)
    return Path(path)


def default_path() -> Path:
    """The tiny model's file, written on first use into the temporary directory."""
    path = Path(tempfile.gettempdir()) / "metalkit-llm-tiny-seed0.gguf"
    if not path.exists():
        part = path.with_suffix(f".{os.getpid()}.part")
        write(part)
        part.replace(path)  # whole or absent, if two processes race
    return path
