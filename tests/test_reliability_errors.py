"""Every error metalkit raises is a MetalkitError that is also the builtin exception a
user would catch, and its message names the fix."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import metalkit as mk
from metalkit import _validation
from conftest import HEADER

ERRORS = {"MetalkitError": (Exception,), "CompileError": (SyntaxError,), "ArgumentError": (TypeError,),
          "DispatchError": (ValueError,), "KernelFault": (RuntimeError,),
          "KernelNotFound": (KeyError, AttributeError), "DeviceError": (ValueError,), "CacheError": (OSError,)}


def test_every_error_class_is_exported_derives_from_its_builtin_and_is_documented():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for name, builtins in ERRORS.items():
        cls = getattr(mk, name)
        assert name in mk.__all__ and issubclass(cls, mk.MetalkitError)
        assert all(issubclass(cls, b) for b in builtins), name
        assert f"`mk.{name}`" in readme, f"README's error list lacks {name}"
    assert issubclass(mk.MetalkitWarning, UserWarning) and "`mk.MetalkitWarning`" in readme


@pytest.fixture(scope="module")
def lib():
    return mk.compile(HEADER + f"// {uuid.uuid4().hex}\n"
                      "kernel void alpha(device float* x [[buffer(0)]]) {}\n"
                      "kernel void beta(device float* x [[buffer(0)]]) {}\n", filename="two.metal")


def test_an_unknown_kernel_by_index(lib):
    with pytest.raises(mk.KernelNotFound) as e:
        lib["gamma"]
    assert isinstance(e.value, KeyError) and isinstance(e.value, mk.MetalkitError)
    assert str(e.value) == ("no kernel named 'gamma' in two.metal; it has: alpha, beta; check the name "
                            "(a template kernel is named by its host_name instantiations)")


def test_an_unknown_kernel_by_attribute(lib):
    with pytest.raises(mk.KernelNotFound, match="no kernel named 'gamma' in two.metal; it has: alpha, beta") as e:
        lib.gamma
    assert isinstance(e.value, AttributeError)
    assert not hasattr(lib, "gamma") and getattr(lib, "gamma", None) is None
    assert hasattr(lib, "alpha") and lib.alpha is lib["alpha"]


def test_an_unknown_bundled_kernel():
    with pytest.raises(KeyError) as e:
        mk.run("nope")
    assert isinstance(e.value, mk.KernelNotFound)
    assert re.fullmatch(r"no bundled kernel named 'nope'; bundled kernels: .*add_arrays.*\. Use metalkit\.compile"
                        r"\(source\) or metalkit\.load\(path\) for your own", str(e.value))


def test_specialize_an_unknown_kernel(lib):
    with pytest.raises(mk.KernelNotFound, match="no kernel named 'gamma'"):
        lib.specialize("gamma", {})


@pytest.mark.parametrize("name,message", [
    ("gpu", "metalkit.use: unknown device 'gpu'; use 'cpu' or 'metal'"),
    *([("metal", "metalkit.use: Metal is only available on macOS with an Apple GPU; use 'cpu' here")]
      if sys.platform != "darwin" else []),
])
def test_an_unknown_or_missing_device(name, message):
    with pytest.raises(ValueError) as e:
        mk.use(name)
    assert isinstance(e.value, mk.DeviceError) and str(e.value) == message
    assert mk.device().backend in ("cpu", "metal")  # the choice made before stands


def test_an_unknown_device_in_the_environment():
    code = "import metalkit as mk\ntry:\n    mk.device()\nexcept mk.DeviceError as e:\n    print(e)\n"
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, METALKIT_DEVICE="gpu"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "METALKIT_DEVICE: unknown device 'gpu'; use 'cpu' or 'metal'"


def test_an_unknown_validation_setting():
    with pytest.raises(mk.DeviceError, match=r"METALKIT_VALIDATE='maybe': use 1"):
        _validation.apply({"METALKIT_VALIDATE": "maybe"})


@pytest.mark.parametrize("source,hint", [
    (b"kernel void k() {}", "decode it first (source.decode())"),
    (bytearray(b"kernel void k() {}"), "decode it first (source.decode())"),
    (Path("k.metal"), "use metalkit.load(path) for a file"),
    (None, "use metalkit.load(path) for a file"),
])
def test_compile_takes_text(source, hint):
    with pytest.raises(TypeError) as e:
        mk.compile(source)
    assert isinstance(e.value, mk.ArgumentError)
    assert str(e.value) == (f"metalkit.compile takes MSL source text (str), got {type(source).__name__}; {hint}")


@pytest.mark.parametrize("constants,message", [
    ({"gain": "2"}, "constants=: function constant 'gain' is given a str; pass a bool, int or float"),
    ({"gain": None}, "constants=: function constant 'gain' is given a NoneType; pass a bool, int or float"),
    ({1.5: 2.0}, r"constants=: key 1.5 is a float; name a function constant by its name \(str\)"),
    ({True: 2.0}, r"constants=: key True is a bool; name a function constant by its name \(str\)"),
])
def test_function_constants_of_the_wrong_type(constants, message):
    src = HEADER + "constant float gain [[function_constant(0)]];\nkernel void k(device float* x [[buffer(0)]]) {}\n"
    with pytest.raises(mk.ArgumentError, match=message):
        mk.compile(src, constants=constants)
