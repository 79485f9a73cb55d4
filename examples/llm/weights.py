"""Model files: a llama-architecture model's hyperparameters, weights and vocabulary, read from
and written to GGUF with the ``gguf`` package. Tensor names and metadata keys are GGUF's own
for llama, so a GGUF file of a llama model in F32, Q8_0 or Q4_0 loads as one of ours does."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError as e:  # say how to get it, not just that it is missing
    raise SystemExit('examples/llm reads models with the gguf package: pip install gguf '
                     '(or metalkit\'s extra: pip install ".[llm]")') from e

Q = gguf.GGMLQuantizationType
QUANTISED = {Q.Q8_0: "q8_0", Q.Q4_0: "q4_0"}   # the kernels' block formats


@dataclass(frozen=True)
class Config:
    """The shape of a llama-architecture model."""
    vocab_size: int
    dim: int              # embedding width
    n_layers: int
    n_heads: int          # query heads
    n_kv_heads: int       # key/value heads (grouped-query attention when fewer)
    hidden_dim: int       # SwiGLU MLP width
    context_length: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass
class Weight:
    """A matrix [rows, cols]: float32 ``data`` of that shape, or (``kind`` "q8_0"/"q4_0") the
    GGUF blocks of its rows as uint8 [rows, bytes per row]."""
    data: np.ndarray
    kind: str = "f32"


def layer_names(i: int) -> dict[str, str]:
    """GGUF's names of layer i's tensors, by the role they play."""
    return {role: f"blk.{i}.{name}.weight" for role, name in [
        ("attn_norm", "attn_norm"), ("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"),
        ("wo", "attn_output"), ("ffn_norm", "ffn_norm"), ("w_gate", "ffn_gate"),
        ("w_up", "ffn_up"), ("w_down", "ffn_down")]}


def load(path: str | Path) -> tuple[Config, dict[str, Weight], list[str]]:
    """Reads a llama GGUF file: its config, its weights by GGUF name, its vocabulary."""
    r = gguf.GGUFReader(str(path))

    def meta(key: str, default=None):
        field = r.fields.get(key)
        if field is None:
            if default is None:
                raise ValueError(f"{path}: no {key!r} in the file; is it a llama model?")
            return default
        return _value(field)

    arch = meta("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: a {arch!r} model; this engine runs the llama architecture")
    tokens = list(meta("tokenizer.ggml.tokens"))
    weights = {}
    for t in r.tensors:
        if t.tensor_type in QUANTISED:
            weights[t.name] = Weight(np.asarray(t.data), QUANTISED[t.tensor_type])
        else:  # F32 and F16 as float32; another quantisation, dequantised by gguf
            data = gguf.quants.dequantize(t.data, t.tensor_type) if t.tensor_type not in (
                Q.F32, Q.F16) else t.data
            weights[t.name] = Weight(np.ascontiguousarray(data, dtype=np.float32))
    n_heads = meta("llama.attention.head_count")
    config = Config(
        vocab_size=len(tokens), dim=meta("llama.embedding_length"),
        n_layers=meta("llama.block_count"), n_heads=n_heads,
        n_kv_heads=meta("llama.attention.head_count_kv", n_heads),
        hidden_dim=meta("llama.feed_forward_length"),
        context_length=meta("llama.context_length"),
        rope_theta=float(meta("llama.rope.freq_base", 10000.0)),
        norm_eps=float(meta("llama.attention.layer_norm_rms_epsilon", 1e-5)))
    return config, weights, tokens


def _value(field) -> object:
    """A metadata field of a GGUFReader: a number, a string, or a list of them."""
    def one(part: int) -> object:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return bytes(field.parts[part]).decode()
        return field.parts[part].tolist()[0]
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        return [one(i) for i in field.data]
    return one(field.data[0])


def save(path: str | Path, config: Config, weights: dict[str, np.ndarray], tokens: list[str],
         quantise: str = "f32") -> None:
    """Writes a llama GGUF file from float32 weights by GGUF name; with ``quantise`` "q8_0" or
    "q4_0", the matrices of the layers and the output head are stored in those blocks, those
    whose rows are whole blocks of 32 (the others, the norms and the embedding table stay
    float32)."""
    from metalkit.llm import quantize_q4_0, quantize_q8_0
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(config.context_length)
    w.add_embedding_length(config.dim)
    w.add_block_count(config.n_layers)
    w.add_feed_forward_length(config.hidden_dim)
    w.add_head_count(config.n_heads)
    w.add_head_count_kv(config.n_kv_heads)
    w.add_rope_freq_base(config.rope_theta)
    w.add_layer_norm_rms_eps(config.norm_eps)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    pack = {"q8_0": (quantize_q8_0, Q.Q8_0), "q4_0": (quantize_q4_0, Q.Q4_0)}.get(quantise)
    for name, data in weights.items():
        if pack and data.ndim == 2 and data.shape[1] % 32 == 0 and name != "token_embd.weight":
            w.add_tensor(name, pack[0](data), raw_dtype=pack[1])
        else:
            w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
