"""The examples in the public API's docstrings run and give what they show."""
import doctest
import importlib

import pytest

MODULES = ["metalkit", "metalkit.library", "metalkit.bundled", "metalkit.arrays", "metalkit._device", "metalkit._structs"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_every_public_function_has_an_example():
    import metalkit
    missing = [n for n in ["compile", "load", "run", "kernels", "empty", "zeros", "asarray", "device", "use", "batch"]
               if ">>>" not in (getattr(metalkit, n).__doc__ or "")]
    assert missing == []
