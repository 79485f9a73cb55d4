"""Each error type, with a message that names the kernel, the parameter or line, and the fix;
every error metalkit raises is a MetalkitError that is also the builtin exception a user
would catch."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, build
from metalkit import _validation

def test_error_hierarchy():
    assert issubclass(mk.CompileError, mk.MetalkitError) and issubclass(mk.CompileError, SyntaxError)
    assert issubclass(mk.ArgumentError, mk.MetalkitError) and issubclass(mk.ArgumentError, TypeError)
    assert issubclass(mk.DispatchError, mk.MetalkitError) and issubclass(mk.DispatchError, ValueError)
    assert issubclass(mk.KernelFault, mk.MetalkitError) and issubclass(mk.KernelFault, RuntimeError)


def test_compile_error_points_at_the_users_line(device):
    src = HEADER + "kernel void bad(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n" \
                   "    x[i] = undefined_thing + 1;\n}\n"
    with pytest.raises(mk.CompileError) as e:
        mk.compile(src, filename="bad.metal")
    err = e.value
    assert err.filename == "bad.metal" and err.lineno == 4 and err.offset == 12
    assert "undefined_thing" in err.msg and "undefined_thing" in err.text
    assert "bad.metal:4:12" in str(err)


def test_compile_error_in_an_included_header(device, tmp_path):
    (tmp_path / "helpers.h").write_text("inline float f(float x) {\n  return x +;\n}\n")
    (tmp_path / "main.metal").write_text(HEADER + '#include "helpers.h"\n'
                                         "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = f(x[i]); }\n")
    with pytest.raises(mk.CompileError) as e:
        mk.load(tmp_path / "main.metal")
    assert e.value.filename.endswith("helpers.h") and e.value.lineno == 2


def test_load_missing_file():
    with pytest.raises(mk.CompileError, match="cannot read"):
        mk.load("/nonexistent/nothing.metal")


@pytest.mark.parametrize("snippet,match", [
    ("kernel void k(texture2d<float> t [[texture(0)]]) {}", r"textures, samplers"),
    ("kernel void k(device float* x [[buffer(0)]], uint i [[bogus_attr]]) {}", r"unknown parameter attribute \[\[bogus_attr\]\]"),
    ("kernel void k(device float* a [[buffer(0)]], device float* b [[buffer(0)]]) {}", r"both use \[\[buffer\(0\)\]\]"),
])
def test_unsupported_or_invalid_signatures(device, snippet, match):
    with pytest.raises(mk.CompileError, match=match) as e:
        build(snippet, filename="sig.metal")
    assert e.value.filename == "sig.metal" and e.value.lineno == 3


def test_argument_count_names_the_signature(device):
    with pytest.raises(mk.ArgumentError, match=r"kernel 'add_arrays' is missing an argument for parameter 'out' .*"
                                               r"add_arrays\(device const float\* a \[\[buffer\(0\)\]\]"):
        mk.run("add_arrays", np.zeros(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(mk.ArgumentError, match=r"kernel 'add_arrays' takes 3 arguments but 4 were given: "
                                               r"add_arrays\(device const float\* a \[\[buffer\(0\)\]\]"):
        mk.run("add_arrays", *[np.zeros(3, np.float32)] * 4)


def test_dtype_mismatch_is_never_converted(device):
    a = np.zeros(3, np.float64)
    out = np.zeros(3, np.float32)
    with pytest.raises(mk.ArgumentError, match=r"parameter 'a' .* takes elements of dtype float32, got an array of "
                                               r"dtype float64; convert it first \(x.astype\(np.float32\)\)"):
        mk.run("add_arrays", a, out, out)
    with pytest.raises(mk.ArgumentError, match="takes a numpy array .*got list"):
        mk.run("add_arrays", [1.0, 2.0], out, out)
    k = build("kernel void k(device float* x [[buffer(0)]]) {}").k
    with pytest.raises(mk.ArgumentError, match=r"kernel 'k' has no parameter named 'grd' \(did you mean 'grid'\?\); .* the call's own keywords are grid="):
        k(out, grd=3)


def test_dispatch_errors(device):
    z = np.zeros(8, np.float32)
    with pytest.raises(mk.DispatchError, match=r"threadgroup \(64, 32, 1\) has 2048 threads but this kernel allows at "
                                               r"most \d+ per threadgroup"):
        mk.run("add_arrays", z, z, z, threadgroup=(64, 32))
    with pytest.raises(mk.DispatchError, match="threadgroup dimension 0 is 0"):
        mk.run("add_arrays", z, z, z, threadgroup=0)
    with pytest.raises(mk.DispatchError, match="grid dimension 1 is -1"):
        mk.run("add_arrays", z, z, z, grid=(4, -1))
    with pytest.raises(mk.DispatchError, match="tuple of 1 to 3 ints"):
        mk.run("add_arrays", z, z, z, grid=(1, 2, 3, 4))
    with pytest.raises(mk.DispatchError, match="must be an int or a tuple"):
        mk.run("add_arrays", z, z, z, grid=2.5)


def test_threadgroup_memory_checks(device):
    lib = build("""
    kernel void k(device float* x [[buffer(0)]], threadgroup float* tmp [[threadgroup(0)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
        tmp[l] = x[i] * 2.0f;
        x[i] = tmp[l];
    }""")
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(mk.DispatchError, match=r"parameter 'tmp' .* needs a size; pass threadgroup_memory=\{0: nbytes\}"):
        lib.k(x)
    with pytest.raises(mk.DispatchError, match=r"threadgroup_memory\[0\] must be a number of bytes from 0 to 32768"):
        lib.k(x, threadgroup_memory={0: 40000})
    with pytest.raises(mk.DispatchError, match=r"threadgroup_memory\[3\] must be a number of bytes from 0 to 32768"):
        lib.k(x, threadgroup_memory={0: 256, 3: -1})
    lib.k(x, threadgroup=16, threadgroup_memory={0: 16 * 4})
    assert x.tolist() == [2.0 * i for i in range(64)]
    # A size for an index the kernel has no parameter at is ignored, as on Metal (llama.cpp's host
    # code sets index 0 for every kernel).
    lib.k(x, threadgroup=16, threadgroup_memory={0: 16 * 4, 3: 16})
    assert x.tolist() == [4.0 * i for i in range(64)]


def test_no_array_to_size_the_grid(device):
    lib = build("kernel void k(constant float& s [[buffer(0)]]) {}")
    with pytest.raises(mk.DispatchError, match="pass grid="):
        lib.k(1.0)
    lib.k(1.0, grid=1)


def test_missing_kernel_name(device):
    lib = build("kernel void only(device float* x [[buffer(0)]]) {}")
    with pytest.raises(KeyError, match="no kernel named 'other'.*it has: only"):
        lib["other"]
    with pytest.raises(AttributeError, match="no kernel named 'other'"):
        lib.other


def test_keyword_values_of_the_wrong_kind_are_named_errors(device):
    lib = build("""
    kernel void k(device float* x [[buffer(0)]], threadgroup float* a [[threadgroup(0)]],
                  threadgroup float* b [[threadgroup(1)]], uint i [[thread_position_in_grid]]) { x[i] += 1.0f; }""")
    x = np.zeros(8, np.float32)
    tgm = {0: 16, 1: 16}
    lib.k(x, grid=np.array([8]), threadgroup=np.int64(4), threadgroup_memory=tgm)  # numpy ints are ints
    assert x.tolist() == [1.0] * 8
    for bad in (np.array(4.0), np.array([[1, 2]]), 2**70, 2.5, True):
        with pytest.raises(mk.DispatchError, match="kernel 'k': grid must be an int or a tuple of up to 3 ints"):
            lib.k(x, grid=bad, threadgroup_memory=tgm)
    with pytest.raises(mk.ArgumentError, match="check= takes True, False, \"all\", or names from bounds"):
        lib.k(x, check=np.array([1, 2]), threadgroup_memory=tgm)
    with pytest.raises(mk.ArgumentError, match="shuffle= takes an int seed"):
        lib.k(x, shuffle=np.array([1, 2]), threadgroup_memory=tgm)
    with pytest.raises(mk.DispatchError, match=r"threadgroup_memory\[0\] must be a number of bytes from 0 to 32768"):
        lib.k(x, threadgroup_memory={0: 2**63 - 1, 1: 2**63 - 1})
    with pytest.raises(mk.DispatchError, match=r"threadgroup_memory keys are \[\[threadgroup\(i\)\]\] indices"):
        lib.k(x, threadgroup_memory={0: 16, 1: 16, "a": 1})
    with pytest.raises(mk.DispatchError, match=r"more than metalkit dispatches at once \(2\^48\)"):
        lib.k(x, grid=(2**31, 2**31, 2**31), threadgroup_memory=tgm)
    assert x.tolist() == [1.0] * 8  # no failed call ran the kernel


def test_the_core_names_kernels_in_messages_through_one_helper():
    # "kernel 'name': ..." is written by kernel_label/kernel_prefix (src/core/errors.h) alone,
    # so every message names its kernel the same way.
    from pathlib import Path
    src = Path(__file__).resolve().parent.parent / "src"
    spelled = [f"{p.relative_to(src)}:{n}" for p in sorted(src.rglob("*")) if p.suffix in (".cpp", ".h", ".mm")
               for n, line in enumerate(p.read_text().splitlines(), 1) if "\"kernel '\"" in line]
    assert [s.split(":")[0] for s in spelled] == ["core/errors.h"], spelled


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
