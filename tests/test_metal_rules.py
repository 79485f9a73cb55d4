"""The Metal backend's decisions, tested where Metal cannot run.

The Objective-C++ backend only carries out what src/core and metalkit's Python
decide; those decisions are exercised here through `_core.metal_rules` and the
Python modules the Metal path uses.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

import metalkit
from metalkit import _core, _metal, _validation
from metalkit.errors import CompileError, DispatchError
from metalkit.msl.includes import inline_includes
from metalkit.msl import signatures
from metalkit.msl.signatures import kernel_signatures

rules = _core.metal_rules
PAGE = 16384
DEVICE, CONSTANT = 1, 2


# ---- how each argument reaches the GPU ----

@pytest.mark.parametrize("kind, writable, space, in_buffer, address, nbytes, offset, route", [
    ("buffer", True, DEVICE, True, 4096, 1 << 20, 64, "bound"),      # a metalkit array: bound in place
    ("buffer", False, CONSTANT, True, 4096, 1 << 20, 256, "bound"),
    ("buffer", False, CONSTANT, True, 4100, 64, 4, "bytes"),        # constant space needs 256-byte offsets
    ("buffer", True, 0, True, 4100, 1 << 20, 4, "stage"),           # address space unknown: same caution
    ("scalar", False, CONSTANT, False, 123, 4, 0, "bytes"),
    ("buffer", False, DEVICE, False, 123, 4095, 0, "bytes"),        # small read-only arrays are copied inline
    ("buffer", False, DEVICE, False, 123, 4096, 0, "stage"),        # setBytes is for data under 4 KB
    ("buffer", True, DEVICE, False, 123, 64, 0, "stage"),           # written: needs a real buffer
    ("buffer", True, DEVICE, False, PAGE * 3, PAGE * 2, 0, "wrap"),  # page-aligned whole pages: no copy
    ("buffer", True, DEVICE, False, PAGE * 3, PAGE * 2 + 4, 0, "stage"),
    ("buffer", True, DEVICE, False, PAGE + 64, PAGE * 2, 0, "stage"),
    # No bytes (an empty array, or None: address 0): never nil, which API validation stops at.
    ("buffer", False, DEVICE, False, 4096, 0, 0, "empty"),          # read-only: zeros by setBytes
    ("scalar", False, CONSTANT, False, 0, 0, 0, "empty"),
    ("buffer", False, DEVICE, False, 0, 0, 0, "empty"),
    ("buffer", True, DEVICE, False, 4096, 0, 0, "zeroed"),          # written: a zeroed buffer, not bytes
    ("buffer", True, DEVICE, False, 0, 0, 0, "zeroed"),
])
def test_route_buffer(kind, writable, space, in_buffer, address, nbytes, offset, route):
    assert rules.route_buffer(kind, writable, space, in_buffer, address, nbytes, offset, PAGE) == route


def test_none_gets_a_placeholder_as_large_as_the_parameters_type():
    """API validation checks that a binding holds the argument's type; reads through it give zeros."""
    assert [rules.placeholder_bytes(n) for n in (1, 4, 16, 17, 48)] == [16, 16, 16, 32, 48]
    assert rules.placeholder_bytes(12, 3) == 48  # constant T x[3]
    # A large read-only struct cannot go by setBytes (under 4 KB): a zeroed buffer instead.
    assert rules.route_buffer("buffer", False, CONSTANT, False, 0, 0, 0, PAGE, elem_size=4096) == "zeroed"
    assert rules.route_buffer("buffer", False, CONSTANT, False, 0, 0, 0, PAGE, elem_size=4080) == "empty"


def test_staging_buffers_come_in_few_sizes_and_the_pool_is_bounded():
    assert rules.staging_capacity(1, PAGE) == PAGE
    assert rules.staging_capacity(PAGE + 1, PAGE) == 2 * PAGE
    assert rules.staging_capacity(3 * PAGE, PAGE) == 4 * PAGE
    assert rules.staging_capacity(1 << 20, PAGE) == 1 << 20


def test_large_staging_buffers_are_whole_pages_not_powers_of_two():
    """A power of two could double a large copy and pass the device's maxBufferLength."""
    mib = 1 << 20
    assert rules.staging_capacity(mib + 1, PAGE) == mib + PAGE
    assert rules.staging_capacity(300 * mib + 5, PAGE) == 300 * mib + PAGE
    assert rules.staging_capacity(3 * 1024 * mib, 4096) == 3 * 1024 * mib  # not 4 GiB
    for n in (mib + 1, 5 * mib - 1, 1 << 33):
        c = rules.staging_capacity(n, PAGE)
        assert c % PAGE == 0 and n <= c < n + PAGE
    assert rules.keep_staging(PAGE, 0)
    assert not rules.keep_staging(PAGE, (256 << 20) - PAGE + 1)


def test_threadgroup_lengths_are_multiples_of_16():
    assert [rules.threadgroup_length(n) for n in (0, 1, 16, 17, 4000)] == [0, 16, 16, 32, 4000]


def test_uniform_dispatch_runs_whole_threadgroups_only():
    assert rules.uniform_threadgroups("k", [1024, 6], [256, 2]) == (4, 3, 1)
    with pytest.raises(DispatchError, match=r"kernel 'k'.*grid dimension 0 \(1000 threads\).*multiple of the "
                                            r"threadgroup's 256.*grid= rounded up"):
        rules.uniform_threadgroups("k", [1000], [256])


def test_threadgroup_memory_counts_the_kernels_own():
    rules.check_threadgroup_memory("k", 16384, 16384, 32768)
    with pytest.raises(DispatchError, match=r"kernel 'k': it declares 20000 bytes.*asks for 16384 more.*32768"):
        rules.check_threadgroup_memory("k", 16384, 20000, 32768)


def test_gpu_faults_say_what_happened_and_how_to_learn_more():
    msg = rules.gpu_fault_message("k", "Caused GPU Address Fault Error", False)
    assert "kernel 'k'" in msg and "Caused GPU Address Fault Error" in msg and "METALKIT_VALIDATE=1" in msg
    assert "METALKIT_VALIDATE" not in rules.gpu_fault_message("k", "fault", True)


# ---- function constants ----

DECLS = [("n", 0, "uint", 1, True), ("scale", 1, "half", 1, False), ("flag", 2, "bool", 1, False),
         ("bias", 3, "float", 1, False), ("shift", 4, "char", 1, False)]


def test_constants_match_by_name_then_index_with_exact_bytes():
    got = rules.resolve_constants("k", DECLS, {"n": 7, 1: 1.5, "flag": True, 3: -2, "shift": -128})
    assert got[0][:4] == struct.pack("<I", 7)
    assert got[1][:2] == np.float16(1.5).tobytes()
    assert got[2][:1] == b"\x01"
    assert got[3][:4] == struct.pack("<f", -2.0)
    assert got[4][:1] == struct.pack("<b", -128)
    # Given by name and by index: the name wins, as on the CPU backend.
    assert rules.resolve_constants("k", DECLS, {0: 1, "n": 2})[0][:4] == struct.pack("<I", 2)


def test_optional_constants_may_be_left_out():
    assert set(rules.resolve_constants("k", DECLS, {"n": 1})) == {0}


def test_a_required_constant_without_a_value_is_named():
    with pytest.raises(CompileError, match=r"kernel 'k' uses function constant 'n' \[\[function_constant\(0\)\]\]"
                                           r".*constants=\{'n': value\}"):
        rules.resolve_constants("k", DECLS, {})


@pytest.mark.parametrize("value, message", [
    (-1, r"'n' \[\[function_constant\(0\)\]\] is a uint; got -1, out of range \[0, 4294967295\]"),
    (2**32, r"is a uint; got 4294967296, out of range"),
    (2.5, r"is a uint; got 2.5, pass an int"),
    (True, r"is a uint; got True, pass an int"),
])
def test_constant_values_must_fit_their_type(value, message):
    with pytest.raises(CompileError, match=message):
        rules.resolve_constants("k", DECLS, {"n": value})


def test_bool_and_float_constants_are_strict_too():
    with pytest.raises(CompileError, match=r"'flag'.*is a bool; got 1, pass True or False"):
        rules.resolve_constants("k", DECLS, {"n": 1, "flag": 1})
    with pytest.raises(CompileError, match=r"'scale'.*is a half; got 70000.0, out of range"):
        rules.resolve_constants("k", DECLS, {"n": 1, "scale": 70000.0})
    with pytest.raises(TypeError, match="function constant values must be bool, int or float, not str"):
        rules.resolve_constants("k", DECLS, {"n": "1"})


def test_vector_constants_are_refused_by_name():
    with pytest.raises(CompileError, match=r"'v'.*is a float4; only scalar function constants"):
        rules.resolve_constants("k", [("v", 0, "float", 4, False)], {"v": 1.0})


def test_an_unknown_constant_is_reported_as_on_the_cpu_backend():
    rules.check_constants_declared({"n": 1, 2: True}, DECLS)
    with pytest.raises(CompileError, match=r"no function constant named or numbered 'm' in the source"):
        rules.check_constants_declared({"m": 1}, DECLS)
    with pytest.raises(CompileError, match=r"no function constant named or numbered 9 in the source"):
        rules.check_constants_declared({9: 1}, DECLS)


# ---- reflection + the declared signature -> ArgSpecs ----

SOURCE = """
#include <metal_stdlib>
using namespace metal;
// kernel void commented_out(device int* nope [[buffer(0)]]) {}
struct Params { float a; int b; };
kernel void scale(device float* out [[buffer(0)]],
                  constant float& s [[buffer(2)]],
                  device const float4* in [[buffer(1)]],
                  constant Params& p [[buffer(3)]],
                  device atomic_uint& counter [[buffer(4)]],
                  threadgroup float* tile [[threadgroup(0)]],
                  constant int64_t strides[3] [[buffer(5)]],
                  uint i [[thread_position_in_grid]]) {}
template <typename T>
kernel void fill(device T* x [[buffer(0)]], constant T& v [[buffer(1)]], uint i [[thread_position_in_grid]]) {}
template [[host_name("fill_f")]] kernel void fill<float>(device float*, constant float&, uint);
#define MAKE(name) kernel void name(device int* y [[buffer(0)]]) {}
MAKE(from_macro)
"""


@pytest.mark.parametrize("clang", [True, False])
def test_signatures_come_from_the_source_as_the_cpu_backend_reads_them(clang, monkeypatch):
    if not clang:  # a Mac without a clang: the text is read unexpanded
        monkeypatch.setattr(signatures, "_clang_preprocessed", lambda text: None)
    sigs = kernel_signatures(inline_includes(SOURCE, "k.metal"))
    # Comments are never read; kernels that macros produce are seen once the text is preprocessed.
    assert set(sigs) == ({"scale", "fill_f", "from_macro"} if clang else {"scale", "fill_f"})
    file, line, params, builtins = sigs["scale"]
    assert (file, line) == ("k.metal", 6)
    assert builtins == [("i", "thread_position_in_grid", "uint i", 1)]
    assert params == [("buffer", 0, "out", "device float* out", DEVICE, 0),
                      ("scalar", 2, "s", "constant float& s", CONSTANT, 0),
                      ("buffer", 1, "in", "device const float4* in", DEVICE, 0),
                      ("scalar", 3, "p", "constant Params& p", CONSTANT, 0),
                      ("buffer", 4, "counter", "device atomic_uint& counter", DEVICE, 0),
                      ("threadgroup", 0, "tile", "threadgroup float* tile", 3, 0),
                      ("scalar", 5, "strides", "constant int64_t strides[3]", CONSTANT, 3)]
    assert [p[0] for p in sigs["fill_f"][2]] == ["buffer", "scalar"]


@pytest.mark.parametrize("source", ["vertex float4 v() { return 0; }", "kernel void k() {"])
def test_source_the_scan_cannot_read_gives_no_signatures(source):
    assert kernel_signatures(inline_includes(source, "x.metal")) == {}


def test_reflection_and_signature_make_the_kernels_arguments():
    sigs = kernel_signatures(inline_includes(SOURCE, "k.metal"))
    bindings = [  # as Metal reflects `scale`, in its own order
        ("buffer", 2, "s", "float", 1, 4, 4, False),
        ("threadgroup", 0, "tile", "struct", 1, 0, 16, True),
        ("buffer", 0, "out", "float", 1, 4, 4, True),
        ("buffer", 1, "in", "float", 4, 16, 16, False),
        ("buffer", 3, "p", "struct", 1, 8, 4, False),
        ("buffer", 4, "counter", "struct", 1, 4, 4, True),
        ("buffer", 5, "strides", "long", 1, 24, 8, False),  # an array: reflection may size all of it
    ]
    file, line, args = rules.spec_from_reflection("scale", bindings, sigs, "k.metal")
    assert (file, line) == ("k.metal", 6)
    assert [(a[0], a[1], a[2]) for a in args] == [("buffer", 0, "out"), ("buffer", 1, "in"), ("scalar", 2, "s"),
                                                  ("scalar", 3, "p"), ("buffer", 4, "counter"),
                                                  ("scalar", 5, "strides"), ("threadgroup", 0, "tile"),
                                                  ("builtin", -1, "i")]
    s = args[2]
    assert s[3] == "constant float& s" and s[4] == "float" and s[6] == "constant" and s[7] is False
    assert args[1][4:6] == ("float", 4) and args[1][8] == 16
    assert args[5][3] == "constant int64_t strides[3]" and args[5][8:] == (8, 3)  # 3 elements of 8 bytes


def test_without_a_signature_every_buffer_takes_an_array():
    file, line, args = rules.spec_from_reflection(
        "k", [("buffer", 1, "s", "float", 1, 4, 4, False), ("buffer", 0, "x", "half", 2, 4, 4, True)], {}, "lib.metallib")
    assert (file, line) == ("lib.metallib", 0)
    assert [(a[0], a[3], a[6]) for a in args] == [("buffer", "device half2* x", "none"),
                                                  ("buffer", "device const float* s", "none")]


RAW = """#include <metal_stdlib>
using namespace metal;
kernel void copy(device void* dst [[buffer(0)]], const device void *src [[buffer(1)]],
                 constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {}
"""


@pytest.mark.parametrize("reflected", [
    ("struct", 1, 0, 1),   # no type and no bytes, as reflection may report `void`
    ("char", 1, 1, 1),     # or bytes
    ("struct", 1, 16, 16),  # or anything else: the declaration says raw memory
])
@pytest.mark.parametrize("declared", [True, False])
def test_raw_memory_takes_bytes_whatever_reflection_says(reflected, declared):
    """`device void*` takes any array's bytes (as uint8), as on the CPU simulator."""
    sigs = kernel_signatures(inline_includes(RAW, "raw.metal")) if declared else {}
    if not declared and reflected[2] != 0:
        pytest.skip("without a signature only an element of no type and no bytes says raw memory")
    bindings = [("buffer", 0, "dst", *reflected, True), ("buffer", 1, "src", *reflected, False),
                ("buffer", 2, "n", "uint", 1, 4, 4, False)]
    _, _, args = rules.spec_from_reflection("copy", bindings, sigs, "raw.metal")
    assert [(a[2], a[4], a[5], a[8]) for a in args[:2]] == [("dst", "uchar", 1, 1), ("src", "uchar", 1, 1)]
    assert args[2][4] == "uint"


def test_parameters_metalkit_cannot_pass_are_refused_by_name():
    with pytest.raises(CompileError, match=r"kernel 'k' takes a texture parameter 'img'; metalkit passes only"):
        rules.spec_from_reflection("k", [("texture", 0, "img", "struct", 1, 0, 1, False)], {}, "k.metal")


# ---- the Python around metal_compile ----

def test_metal_errors_point_at_the_users_header(tmp_path, monkeypatch):
    header = tmp_path / "common.h"
    header.write_text("// helpers\ninline float twice(float x) { return y * x; }\n")
    source = '#include "common.h"\nkernel void k() {}\n'
    text = inline_includes(source, "<source>", [str(tmp_path)])
    physical = next(i for i, l in enumerate(text.split("\n"), 1) if "return y" in l)
    seen = {}

    def metal_compile(text_, filename, constants, fast_math, kernels, logging):
        seen.update(text=text_, constants=constants, kernels=kernels)
        raise CompileError(f"Compilation failed: \n\nprogram_source:{physical}:37: error: use of undeclared identifier 'y'")

    monkeypatch.setattr(_core, "metal_compile", metal_compile, raising=False)
    with pytest.raises(CompileError) as info:
        _metal.compile_source(text, source, "<source>", {"n": 3}, False)
    assert (info.value.filename, info.value.lineno, info.value.offset) == (str(header), 2, 37)
    assert info.value.text == "inline float twice(float x) { return y * x; }"
    assert seen["text"] == text and seen["constants"] == {"n": 3}
    assert seen["kernels"] == {"k": ("<source>", 2, [], [])}


def test_metalkits_own_compile_messages_pass_through(monkeypatch):
    def metal_compile(*args):
        raise CompileError("no function constant named or numbered 'm' in the source; declare it ...")

    monkeypatch.setattr(_core, "metal_compile", metal_compile, raising=False)
    with pytest.raises(CompileError, match=r"^no function constant named or numbered 'm'"):
        _metal.compile_source("kernel void k() {}", "kernel void k() {}", "<source>", {"m": 1}, False)


def test_a_metallib_needs_the_metal_backend(tmp_path):
    metalkit.use("cpu")
    with pytest.raises(CompileError, match=r"k\.metallib is compiled GPU code, which only the Metal backend runs"):
        metalkit.load(tmp_path / "k.metallib")


# ---- METALKIT_VALIDATE ----

def test_validate_turns_on_both_of_metals_layers():
    env = {"METALKIT_VALIDATE": "1"}
    assert _validation.apply(env)
    assert env["MTL_DEBUG_LAYER"] == "1" and env["MTL_SHADER_VALIDATION"] == "1"


def test_validate_keeps_what_the_user_set_for_metal_and_is_off_by_default():
    env = {"METALKIT_VALIDATE": "on", "MTL_SHADER_VALIDATION": "0"}
    assert _validation.apply(env) and env["MTL_SHADER_VALIDATION"] == "0"
    for off in ({}, {"METALKIT_VALIDATE": "0"}, {"METALKIT_VALIDATE": " "}):
        assert not _validation.apply(off) and "MTL_SHADER_VALIDATION" not in off


def test_validate_refuses_values_it_does_not_know():
    with pytest.raises(ValueError, match=r"METALKIT_VALIDATE='maybe': use 1"):
        _validation.apply({"METALKIT_VALIDATE": "maybe"})


# ---- waiting for the GPU ----

def test_a_gpu_wait_ends_when_the_work_does():
    why, waited, ran = rules.wait_for_completion(0.05, 0.0, False)
    assert why == "none" and 0.04 < waited < 5 and ran


def test_timeout_ends_the_wait_and_the_work_goes_on():
    why, waited, ran = rules.wait_for_completion(0.6, 0.1, False)
    assert why == "timeout" and 0.09 < waited < 0.5
    assert ran  # what then() kept ran once the work was done, after the wait had ended


def test_ctrl_c_ends_an_interruptible_wait():
    import os
    import signal
    import threading
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *a: seen.append(a[0]))
    try:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        why, waited, _ = rules.wait_for_completion(None, 10.0, True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert why == "interrupt" and waited < 5 and seen == [signal.SIGINT]


def test_pipelines_are_built_once_however_many_threads_ask():
    builds, same = rules.kernel_cache_builds(8, ["a", "b", "c"], 20)
    assert builds == 3 and same
