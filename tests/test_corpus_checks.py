"""Real kernels under every check: llama.cpp's and MLX's launch recipes run with
``METALKIT_CHECK=all,warn`` and report nothing, except reliance on lockstep where a recipe is known
to rely on it; every result still matches numpy.

Each corpus runs in a child process (the check default is read once per process), its recipes one
after another; the child reports per recipe the findings (as CheckWarnings) and any error.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import metalkit as mk
from corpus import require

pytestmark = [pytest.mark.checks,
              pytest.mark.skipif(mk.device().backend != "cpu", reason="check= is the CPU simulator's")]
require("ggml/ggml-metal.metal")
require("mlx")

HERE = Path(__file__).resolve().parent

# Findings in the real code, each explained: recipe name prefix -> (text the finding or error
# holds, why it is upstream's and harmless on Apple GPUs).
KNOWN = {
    "kernel_flash_attn_ext_vec_": ("relies on SIMD-group lockstep",
                                   "llama.cpp's vector flash attention exchanges values between the lanes of a "
                                   "SIMD-group through threadgroup memory with no barrier between (every head size; "
                                   "at 64 the reference model's results agree by the order its threads run in)"),
    "contig_scan[": ("uninitialised read of threadgroup memory 'simdgroup_sums'",
                     "MLX's scan (scan.h:335) has SIMD-group 0 scan all 32 slots of simdgroup_sums, of which only "
                     "one per SIMD-group was written; an exclusive scan's lane depends only on the lanes below it, "
                     "so the unwritten slots reach no result that is used"),
    "gemv[t-": ("divergent barrier",
                "MLX's gemv_t (gemv.h:350) reaches a threadgroup_barrier with only some lanes of a SIMD-group, "
                "which the MSL specification does not allow and Apple GPUs run (a barrier counts SIMD-groups); "
                "check=\"barriers\" is the specification's rule"),
}


def known(name: str, text: str) -> bool:
    return any(name.startswith(prefix) and needle in text for prefix, (needle, _) in KNOWN.items())

CHILD = r"""
import json, sys, traceback, warnings, zlib
import numpy as np
import metalkit as mk
corpus, out = sys.argv[1], sys.argv[2]
results = {}
if corpus == "ggml":
    import test_corpus_ggml as t
    lib = t.library("auto")
    recipes = {name: (lambda name=name: t.RECIPES[name](lib, name)) for name in sorted(t.RECIPES)}
    verify = lambda checks: [c.verify() for c in checks]
    lockstep = set(t.LOCKSTEP)
else:
    import test_corpus_mlx as t
    mlx = t.Mlx("auto")
    recipes = {name: (lambda name=name: t.RECIPES[name](mlx, np.random.default_rng(zlib.crc32(name.encode()))))
               for name in sorted(t.RECIPES)}
    verify = lambda outs: [o.check() for o in outs]
    lockstep = set()
for name, recipe in recipes.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = recipe()
            error = None
            if name not in lockstep:  # the per-thread build is wrong there by design (no lockstep)
                verify(got)
        except Exception:
            error = traceback.format_exc(limit=3)[-2000:]
    found = [str(w.message) for w in caught if issubclass(w.category, mk.CheckWarning)]
    results[name] = {"findings": found, "error": error, "lockstep": name in lockstep}
json.dump(results, open(out, "w"))
"""


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Both corpora's children, started at once (their compiles run side by side on two cores)."""
    tmp = tmp_path_factory.mktemp("corpus_checks")
    env = dict(os.environ, METALKIT_CHECK="all,warn",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    # Output to files: a pipe one child fills while the other is awaited would stop it.
    procs = {c: (subprocess.Popen([sys.executable, "-c", CHILD, c, str(tmp / f"{c}.json")],
                                  stdout=subprocess.DEVNULL, stderr=open(tmp / f"{c}.err", "w"), env=env, cwd=HERE),
                 tmp / f"{c}.json")
             for c in ("ggml", "mlx")}
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()


def _run(children, corpus: str) -> dict:
    proc, out = children[corpus]
    proc.wait(timeout=3600)
    err = out.with_suffix(".err").read_text()
    assert proc.returncode == 0, f"the {corpus} recipes under check='all' stopped:\n{err[-3000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("corpus", ["ggml", "mlx"])
def test_real_kernels_report_nothing_under_every_check(corpus, children):
    results = _run(children, corpus)
    assert results, "no recipe ran"
    problems = []
    for name, r in results.items():
        if r["error"] and not known(name, r["error"]):
            problems.append(f"{name}: {r['error']}")
        unexpected = [f for f in r["findings"]
                      if not (r["lockstep"] and "relies on SIMD-group lockstep" in f) and not known(name, f)]
        problems += [f"{name}: {f}" for f in unexpected]
    assert not problems, f"{len(problems)} problems in {len(results)} recipes:\n" + "\n".join(problems[:20])
    relying = [name for name, r in results.items() if r["lockstep"]]
    for name in relying:  # what lockstep makes safe is reported, quietly
        assert results[name]["findings"], f"{name} relies on lockstep, and check='lockstep' did not say so"
