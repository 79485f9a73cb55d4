"""The README's code runs as written: every ```python block, in order, in one namespace (the
tour's blocks build on each other), and every command a ```sh block names exists."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import metalkit as mk

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# ```python blocks at any indentation (the tour's list items hold some), with their indentation removed.
BLOCKS = [re.sub(rf"(?m)^{m.group(1)}", "", m.group(2))
          for m in re.finditer(r"(?m)^( *)```python\n(.*?)^\1```", README, re.S)]


def test_the_blocks_are_found():
    assert len(BLOCKS) == 9 and README.count("```python") == len(BLOCKS)


def test_every_python_block_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the files the blocks write (a trace's picture) land here
    backend = mk.device().backend
    namespace: dict = {}
    printed = io.StringIO()
    try:
        for i, code in enumerate(BLOCKS):
            if "from tinygrad import" in code:
                if sys.version_info < (3, 11):  # the test extra installs tinygrad on Python 3.11+ only
                    continue
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"README.md block {i + 1}", "exec"), namespace)  # their asserts hold
    finally:
        mk.use(backend)
    out = printed.getvalue().splitlines()
    # The tour prints the signature's parameters; tinygrad's block a number (a sum of squares: positive).
    assert out[0].startswith("[ArgSpec(name='x', index=0, kind='buffer'"), out[0]
    if sys.version_info >= (3, 11):
        assert float(out[-1]) > 0, out[-1]
    assert (tmp_path / "pool.png").read_bytes().startswith(b"\x89PNG")


def test_the_commands_of_the_shell_blocks_exist():
    for block in re.findall(r"(?m)^```sh\n(.*?)^```", README, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            for i, w in enumerate(words):
                if words[i - 1:i] == ["python"] and w.endswith(".py"):
                    assert (ROOT / w).is_file(), line


def test_ci_runs_the_set_up_blocks_commands():
    setup = README.split("\n## Set up\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    for line in setup.splitlines():
        if line.strip() and not line.startswith("#"):
            assert f"\n{line}\n" in ci, line
