"""Generate text with the metalkit inference engine.

    python examples/llm/generate.py                      # a tiny random model, made on first use
    python examples/llm/generate.py --model llama.gguf --prompt "Once upon a time" -n 64
    python examples/llm/generate.py --requests 4 --top-p 0.9 --temperature 0.8

Several --requests are served together with continuous batching, each with its own prompt
length (the prompt cut to a different length for each)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiny_model  # noqa: E402
import weights  # noqa: E402
from engine import Engine, Request  # noqa: E402
from model import Llama  # noqa: E402
from vocab import Vocab  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="a llama GGUF file (F32, Q8_0 or Q4_0); default: tiny random")
    p.add_argument("--prompt", default="Hello, metal", help="the text to continue")
    p.add_argument("-n", "--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--requests", type=int, default=1, help="requests served together")
    a = p.parse_args(argv)

    path = a.model or tiny_model.default_path()
    config, w, tokens = weights.load(path)
    vocab = Vocab(tokens)
    engine = Engine(Llama(config, w), max_batch=max(a.requests, 1))
    prompt = vocab.encode(a.prompt)
    print(f"model {Path(path).name}: {config.n_layers} layers, dim {config.dim}, "
          f"vocab {config.vocab_size}; prompt {len(prompt)} tokens")
    for i in range(a.requests):
        engine.submit(Request(prompt[:max(1, len(prompt) - i)], a.max_new_tokens,
                              a.temperature, a.top_k, a.top_p, seed=a.seed + i))
    start = time.perf_counter()
    out = engine.run()
    seconds = time.perf_counter() - start
    for i, toks in out.items():
        print(f"[{i}] tokens {toks}")
        print(f"[{i}] text {vocab.decode(toks)!r}")
    n = sum(len(t) for t in out.values())
    print(f"{n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s, prefill included)")


if __name__ == "__main__":
    main()
