"""How the package builds: the CMake build is kept per wheel tag, in a folder git ignores, so a
`pip install --no-build-isolation` after an edit rebuilds only what changed."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_cmake_build_is_kept_per_wheel_tag_where_git_ignores_it():
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[tool.scikit-build]", 1)[1].split("\n[", 1)[0]
    build_dir = re.search(r'^build-dir = "([^"]+)"$', section, re.M)
    assert build_dir and "{wheel_tag}" in build_dir.group(1), section
    example = build_dir.group(1).replace("{wheel_tag}", "cp311-cp311-linux_x86_64") + "/CMakeCache.txt"
    p = subprocess.run(["git", "check-ignore", "-q", example], cwd=ROOT)
    assert p.returncode == 0, f"{example} is not ignored by .gitignore"
