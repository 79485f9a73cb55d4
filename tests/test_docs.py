"""The public API is documented: every public name and member has a docstring, every public
function and method a runnable example, and the examples run and give what they show."""
import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest

import metalkit

# Every module a public object's docstring lives in (the test below checks it stays so).
MODULES = ["metalkit", "metalkit.library", "metalkit.bundled", "metalkit.arrays", "metalkit._device",
           "metalkit._argspec", "metalkit._core", "metalkit.custom_kernel", "metalkit.execution",
           "metalkit.errors", "metalkit.kernel_log", "metalkit.tracing", "metalkit.llm",
           "metalkit.llm.linear", "metalkit.llm.layers", "metalkit.llm.attention",
           "metalkit.llm.sampling", "metalkit.llm.quant"]
CALL_KEYWORDS = ["grid", "threadgroups", "threadgroup", "threadgroup_memory", "check", "shuffle", "timeout"]
ENV_DEFAULTS = {"check": "METALKIT_CHECK", "shuffle": "METALKIT_SHUFFLE", "timeout": "METALKIT_TIMEOUT"}
# Dunders documented like public members: how the class is used.
USED_DUNDERS = {"__call__", "__enter__", "__exit__"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    backend = metalkit.device().backend  # examples of the CPU simulator's options select it
    try:
        result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    finally:
        metalkit.use(backend)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def public_api():
    """(qualified name, object, owner class or None) for every public name and member."""
    for name in metalkit.__all__:
        obj = getattr(metalkit, name)
        yield f"metalkit.{name}", obj, None
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if not attr.startswith("_") or attr in USED_DUNDERS:
                    yield f"metalkit.{name}.{attr}", value, obj


def is_error(cls) -> bool:
    return inspect.isclass(cls) and issubclass(cls, (Exception, Warning))


def test_every_public_name_and_member_has_a_docstring():
    missing = [q for q, obj, _ in public_api() if not (getattr(obj, "__doc__", None) or "").strip()]
    assert missing == []
    # A class's own docstring, not one it inherits.
    inherited = [q for q, obj, owner in public_api() if inspect.isclass(obj) and owner is None
                 and not (vars(obj).get("__doc__") or "").strip()]
    assert inherited == []


def test_every_public_function_method_and_class_has_an_example():
    need = [(q, obj) for q, obj, _ in public_api()
            if (inspect.isroutine(obj) and not q.endswith(("__enter__", "__exit__")))
            or (inspect.isclass(obj) and not is_error(obj))]
    assert len(need) > 15  # the walk finds them
    missing = [q for q, obj in need if ">>>" not in (obj.__doc__ or "")]
    assert missing == []


def test_examples_are_in_modules_the_doctests_run():
    homes = {getattr(obj, "__module__", None) or owner.__module__ for _, obj, owner in public_api()
             if ">>>" in (getattr(obj, "__doc__", None) or "")}
    assert homes - set(MODULES) == set()


def test_call_keywords_are_documented():
    call = metalkit.Kernel.__call__
    params = list(inspect.signature(call).parameters)
    assert params == ["args"] + CALL_KEYWORDS + ["params"]  # what help() shows; params: parameters by name
    assert [p for p in inspect.signature(metalkit.run).parameters if p not in ("name", "args")] == CALL_KEYWORDS
    for kw in CALL_KEYWORDS:
        assert f"``{kw}``:" in call.__doc__, kw                 # its own entry in __call__
        assert f"``{kw}" in metalkit.Kernel.__doc__, kw          # the class summary
        assert f"``{kw}``" in metalkit.run.__doc__, kw
    for kw, env in ENV_DEFAULTS.items():
        entry = call.__doc__.split(f"``{kw}``:", 1)[1].split("\n``", 1)[0]
        assert f"Default: ``{env}``" in entry and "CPU simulator only" in entry, kw
        assert env in metalkit.run.__doc__ and env in metalkit.Batch.__doc__, kw
    order = "(x, y, z) = (width, height, depth), the reverse of\nnumpy's shape order"
    assert order in call.__doc__
    for doc in (metalkit.Kernel.__doc__, metalkit.run.__doc__):
        assert "(x, y, z) = (width, height, depth), the reverse of numpy's" in " ".join(doc.split())


def readme_section(title: str) -> str:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_calling_a_kernel():
    section = readme_section("Calling a kernel")
    for kw in CALL_KEYWORDS:
        assert f"| `{kw}` |" in section, kw
    for env in ENV_DEFAULTS.values():
        assert env in section, env
    assert "(x, y, z) = (width, height, depth), the reverse of\nnumpy's shape order" in section
    assert "```python" in section  # its example runs in tests/test_readme.py


def test_architecture_opens_with_a_one_page_map_and_keeps_its_lines_short():
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "architecture.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Map", "## Layers"]
    page = text.split("\n## Map\n", 1)[1].split("\n## Layers\n", 1)[0]
    assert len(page.splitlines()) <= 80  # a page
    # Every file the map names exists.
    named = set(re.findall(r"[\w/]+\.(?:py|cpp|h)\b", page))
    where = [root / "python" / "metalkit", root / "python" / "metalkit" / "msl", root / "src", root]
    missing = [n for n in named if not any((w / n).exists() or list(w.rglob(n)) for w in where)]
    assert len(named) > 15 and missing == [], missing
    long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 100 and not line.startswith("|")]
    assert long == []
