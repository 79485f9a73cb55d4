"""A failing test that used the rng fixture prints its seed, and METALKIT_TEST_SEED replays it."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

FAILING = '''
def test_draws(rng):
    print("drew", rng.integers(0, 2**62, 4).tolist())
    assert False
'''


def run(folder: Path, **env) -> str:
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
                       capture_output=True, text=True, env=dict(os.environ, **env), timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr  # the one test fails
    return p.stdout


def test_a_failing_test_prints_its_seed_and_the_seed_replays_it(tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_fails.py").write_text(FAILING)
    out = run(tmp_path)
    seed = re.search(r"rng seed (\d+): METALKIT_TEST_SEED=\1 runs it again", out)
    assert seed, out
    drew = re.search(r"drew \[.*\]", out).group(0)
    again = run(tmp_path, METALKIT_TEST_SEED=seed.group(1))
    assert re.search(r"drew \[.*\]", again).group(0) == drew
