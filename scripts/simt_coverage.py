"""How many kernels of the corpora run under SIMT (and how many of those are split at their
barriers, simt/fission.py), and why the others fall back to fibers; and how many of the kernels
run as loops store their outputs past the cache (passes/streaming.py).

    python scripts/simt_coverage.py            # llama.cpp's and MLX's kernels (about 10 minutes)
    python scripts/simt_coverage.py ggml       # one corpus; "mlx scan" keeps the MLX files named *scan*

Every kernel goes through the front end (with clang's facts, as a build does) and nothing is
compiled. Function constants are set as the sweep sets them (tests/test_corpus_sweep.py).
"""
from __future__ import annotations

import collections
import fnmatch
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import corpus  # noqa: E402
import test_corpus_sweep as sweep  # noqa: E402
from metalkit.msl import cache, toolchain  # noqa: E402

from metalkit.msl import build


def sources(which: str, name_filter: str | None):
    """(path, include dirs, function constants) of each file to read."""
    if which in ("ggml", "all"):
        yield corpus.require("ggml/ggml-metal.metal"), [], sweep.GGML_CONSTANTS
    if which in ("mlx", "all"):
        root = corpus.require("mlx")
        for f in sorted((root / "mlx/backend/metal/kernels").rglob("*.metal")):
            if fnmatch.fnmatch(f.name, sweep.MLX_SKIP) or (name_filter and name_filter not in f.name):
                continue
            declared = sweep._function_constants(f, root)
            yield f, [str(root)], {k: v for k, v in sweep.MLX_CONSTANTS.items() if k in declared}


def main(which: str = "all", name_filter: str | None = None) -> None:
    tc = toolchain.find()
    reasons: collections.Counter = collections.Counter()
    examples: dict[str, list[str]] = {}
    total = sync = split = loops = streamed = 0
    for path, include_dirs, constants in sources(which, name_filter):
        start = time.monotonic()
        opts = build.Options.of(path.read_text(), str(path), [str(path.parent), *include_dirs], constants,
                                False, None, "auto")
        with cache.workspace() as tmp:
            result, _ = build._front(tc, opts, opts.key(tc, None), tmp, None, building=True)
        fallback = 0
        for k in result.kernels:
            total += 1
            if k.execution.partition(":")[0] == "loop":
                loops += 1
                streamed += bool(k.streamed)
                continue
            sync += 1
            split += k.regions > 0
            if k.execution != "simt":  # "fibers: why (file:line)": counted by the construct
                why = re.sub(r"'[^']*'", "...", re.sub(r"\s*\([^()]*\)$", "", k.execution))
                reasons[why] += 1
                fallback += 1
                examples.setdefault(why, []).append(f"{k.host_name}: {k.execution}")
        print(f"{path.name}: {len(result.kernels)} kernels, {fallback} on the fallback, "
              f"{time.monotonic() - start:.0f} s", flush=True)
    share = 100 * sum(reasons.values()) / sync if sync else 0.0
    print(f"\n{total} kernels, {sync} with barriers or SIMD-group functions, {sum(reasons.values())} of them "
          f"on the fallback ({share:.2f}%); {split} split at their barriers; {loops} run as loops, "
          f"{streamed} of them with their outputs streamed")
    for why, count in reasons.most_common():
        print(f"{count:6d}  {why}")
        for e in examples[why][:3]:
            print(f"        {e}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
