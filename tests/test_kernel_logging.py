"""Kernels print with <metal_logging>: os_log_default.log(...) and a constant os_log's functions.

Each message names its thread and comes in thread order (threadgroups in linear order, their
threads in theirs, a thread's messages as it logged them), under every execution model; the
formats are checked against Python's printf-style formatting of the same values.
"""
import warnings

import numpy as np
import pytest

import metalkit as mk
from metalkit.kernel_log import KernelMessage

HEAD = "#include <metal_stdlib>\n#include <metal_logging>\nusing namespace metal;\n"


@pytest.fixture
def messages():
    """The messages logged while the test runs, as KernelMessages."""
    seen: list[KernelMessage] = []
    previous = mk.set_kernel_log_handler(seen.append)
    try:
        yield seen
    finally:
        mk.set_kernel_log_handler(previous)


def lines(seen):
    return [str(m) for m in seen]


# (MSL format, MSL argument, Python format, Python value): C's printf and Python's % agree on these.
FORMATS = [
    ("%d", "int(-42)", "%d", -42),
    ("%5d|%-5d|%05d", "7, 7, 7", "%5d|%-5d|%05d", (7, 7, 7)),
    ("%+d", "int(3)", "%+d", 3),
    ("%u", "uint(4000000000u)", "%u", 4000000000),
    ("%x %X %o", "uint(48879), uint(48879), uint(8)", "%x %X %o", (48879, 48879, 8)),
    ("%#x", "uint(255)", "%#x", 255),
    ("%x", "int(-1)", "%x", 0xFFFFFFFF),              # an int's 32 bits
    ("%hhx", "int(-1)", "%x", 0xFF),                  # hh: a char's
    ("%hd", "int(65537)", "%d", 1),                   # h: a short's
    ("%ld", "long(-5000000000)", "%d", -5000000000),
    ("%lu", "ulong(18446744073709551615ul)", "%d", 18446744073709551615),
    ("%d", "short(-3)", "%d", -3),                    # promoted to int
    ("%u", "ushort(65535)", "%u", 65535),
    ("%d", "char(-7)", "%d", -7),
    ("%u", "uchar(200)", "%u", 200),
    ("%d", "true", "%d", 1),
    ("%c", "65", "%c", "A"),
    ("%f", "1.5f", "%f", 1.5),
    ("%.3f", "3.14159f", "%.3f", float(np.float32(3.14159))),
    ("%8.2f|", "-2.5f", "%8.2f|", -2.5),
    ("%e", "12345.678f", "%e", float(np.float32(12345.678))),
    ("%g %g", "0.0001f, 1e20f", "%g %g", (float(np.float32(0.0001)), float(np.float32(1e20)))),
    ("%G", "1e-10f", "%G", float(np.float32(1e-10))),
    ("%f", "half(0.333h)", "%f", float(np.float16(0.333))),   # half as double, like float
    ("%f", "bfloat(1.5f)", "%f", 1.5),
    ("%s", '"text"', "%s", "text"),
    ("%.2s", '"text"', "%.2s", "te"),
    ("100%%", "", "100%%", ()),
    ("%*d", "6, 42", "%*d", (6, 42)),
    ("%.*f", "2, 3.14159f", "%.*f", (2, float(np.float32(3.14159)))),
    ("%{public}d", "int(9)", "%d", 9),                # os_log's privacy annotation
]


def test_formats_match_pythons(messages):
    body = "\n".join(f'    os_log_default.log("{f}"{", " + a if a else ""});' for f, a, _, _ in FORMATS)
    lib = mk.compile(HEAD + "kernel void fmt(uint i [[thread_position_in_grid]]) {\n" + body + "\n}")
    lib.fmt(grid=1)
    assert [m.text for m in messages] == [pf % pv for _, _, pf, pv in FORMATS]


def test_wrong_or_missing_arguments_are_shown_in_place(messages):
    lib = mk.compile(HEAD + '''kernel void bad(uint i [[thread_position_in_grid]]) {
        os_log_default.log("a %d b %f c %s d %d", 1.5f, 3, 2);
    }''')
    lib.bad(grid=1)
    assert [m.text for m in messages] == ["a <%d: float argument> b <%f: int argument> c <%s: int argument> "
                                          "d <%d: no argument>"]


def test_vectors_are_refused_at_compile_time():
    with pytest.raises(mk.CompileError, match="pass a vector's components one by one"):
        mk.compile(HEAD + 'kernel void v(uint i [[thread_position_in_grid]]) { '
                   'os_log_default.log("%f", float2(1.0f)); }')


def test_a_branch_taken_by_one_thread_logs_once_from_it(messages, capsys):
    previous = mk.set_kernel_log_handler(None)  # the default: printed to sys.stderr
    try:
        lib = mk.compile(HEAD + '''kernel void one(device uint* out [[buffer(0)]],
                                                   uint tid [[thread_position_in_grid]]) {
            out[tid] = tid;
            if (tid == 3) os_log_default.log("thread %u of the grid", tid);
        }''')
        lib.one(np.zeros(64, np.uint32), grid=64, threadgroup=16)
    finally:
        mk.set_kernel_log_handler(previous)
    assert lib.one.execution == "loop"
    assert capsys.readouterr().err == "one (threadgroup (0, 0, 0), thread (3, 0, 0)): thread 3 of the grid\n"


def test_levels_subsystem_and_category(messages):
    lib = mk.compile(HEAD + '''constant os_log logger("com.example.kernels", "tiles");
    kernel void levels(uint i [[thread_position_in_grid]]) {
        logger.log("a");
        logger.log_info("b");
        logger.log_debug("c");
        logger.log_error("d");
        logger.log_fault("e");
        os_log_default.log_with_type(os_log_type_error, "f %d", 6);
        metal::os_log_default.log_info("g");
    }''')
    lib.levels(grid=1)
    assert [(m.level, m.subsystem, m.category, m.text) for m in messages] == [
        ("default", "com.example.kernels", "tiles", "a"), ("info", "com.example.kernels", "tiles", "b"),
        ("debug", "com.example.kernels", "tiles", "c"), ("error", "com.example.kernels", "tiles", "d"),
        ("fault", "com.example.kernels", "tiles", "e"), ("error", "", "", "f 6"), ("info", "", "", "g")]
    assert str(messages[3]) == "levels (threadgroup (0, 0, 0), thread (0, 0, 0)) [com.example.kernels tiles] error: d"


LOOP_2D = HEAD + '''kernel void grid2d(device uint* out [[buffer(0)]], uint2 p [[thread_position_in_grid]],
                                  uint2 tg [[threadgroup_position_in_grid]], uint2 t [[thread_position_in_threadgroup]]) {
    if ((p.x + p.y) % 5 == 0) {
        os_log_default.log("first %u,%u", p.x, p.y);
        os_log_default.log("second %u", tg.x + 10 * tg.y);
    }
}'''


def expected_2d(grid=(8, 6), tg=(4, 3)):
    """The messages of LOOP_2D in thread order, as lines."""
    out = []
    for gy in range(grid[1] // tg[1]):
        for gx in range(grid[0] // tg[0]):
            for ty in range(tg[1]):
                for tx in range(tg[0]):
                    x, y = gx * tg[0] + tx, gy * tg[1] + ty
                    if (x + y) % 5 == 0:
                        who = f"grid2d (threadgroup ({gx}, {gy}, 0), thread ({tx}, {ty}, 0))"
                        out += [f"{who}: first {x},{y}", f"{who}: second {gx + 10 * gy}"]
    return out


@pytest.mark.parametrize("shuffle", [0, 7])
def test_several_threadgroups_in_thread_order(messages, shuffle):
    lib = mk.compile(LOOP_2D)
    lib.grid2d(np.zeros(1, np.uint32), grid=(8, 6), threadgroup=(4, 3), shuffle=shuffle)
    assert lib.grid2d.execution == "loop"
    assert lines(messages) == expected_2d()


def test_order_does_not_depend_on_the_workers():
    """Many threadgroups over the thread pool: the same lines, in the same order, every time."""
    lib = mk.compile(LOOP_2D)
    runs = []
    for _ in range(3):
        seen = []
        previous = mk.set_kernel_log_handler(seen.append)
        try:
            lib.grid2d(np.zeros(1, np.uint32), grid=(512, 60), threadgroup=(4, 3))
        finally:
            mk.set_kernel_log_handler(previous)
        runs.append(lines(seen))
    assert runs[0] == runs[1] == runs[2] == expected_2d((512, 60), (4, 3))


REDUCE = HEAD + '''kernel void reduce(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]],
                   uint g [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float part[2];
    float s = simd_sum(x[i]);
    if (lane == 0) part[l / 32] = s;
    if (l == 40) os_log_default.log("before the barrier: lane %u of SIMD-group %u", lane, l / 32);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        out[g] = part[0] + part[1];
        os_log_default.log_info("group %u: %.1f", g, part[0] + part[1]);
    }
    if (lane == 5) os_log_default.log("lane 5 of %u", l / 32);
}'''


@pytest.mark.parametrize("execution", ["auto", "fibers", "threads"])
def test_simt_fibers_and_threads_agree(messages, execution):
    lib = mk.compile(REDUCE, execution=execution)
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(2, np.float32)
    lib.reduce(x, out, grid=128, threadgroup=64)
    assert lib.reduce.execution == {"auto": "simt", "fibers": "fibers", "threads": "threads"}[execution]
    np.testing.assert_array_equal(out, [x[:64].sum(), x[64:].sum()])
    t = "reduce (threadgroup ({g}, 0, 0), thread ({l}, 0, 0))"
    assert lines(messages) == [
        f"{t.format(g=0, l=0)} info: group 0: 2016.0", f"{t.format(g=0, l=5)}: lane 5 of 0",
        f"{t.format(g=0, l=37)}: lane 5 of 1", f"{t.format(g=0, l=40)}: before the barrier: lane 8 of SIMD-group 1",
        f"{t.format(g=1, l=0)} info: group 1: 6112.0", f"{t.format(g=1, l=5)}: lane 5 of 0",
        f"{t.format(g=1, l=37)}: lane 5 of 1", f"{t.format(g=1, l=40)}: before the barrier: lane 8 of SIMD-group 1"]


def test_simt_log_calls_in_helpers_and_methods_name_their_thread(messages):
    """A helper that logs is called lane by lane, each call told its lane (simt.h invoke_logging)."""
    lib = mk.compile(HEAD + '''void inner(uint l) { os_log_default.log("inner %u", l); }
    float outer(uint l) { inner(l); return 2.0f; }
    struct Tracer { void note(uint l) const { os_log_default.log_debug("method %u", l); } };
    kernel void h(device float* out [[buffer(0)]], uint l [[thread_index_in_threadgroup]]) {
        out[l] = simd_sum(float(l));
        if (l == 35) out[l] += outer(l);
        Tracer t;
        if (l == 3 || l == 60) t.note(l);
    }''')
    out = np.zeros(64, np.float32)
    lib.h(out, grid=64, threadgroup=64)
    assert lib.h.execution == "simt"
    assert out[35] == sum(range(32, 64)) + 2  # its SIMD-group's sum, plus what outer() returned
    assert lines(messages) == ["h (threadgroup (0, 0, 0), thread (3, 0, 0)) debug: method 3",
                               "h (threadgroup (0, 0, 0), thread (35, 0, 0)): inner 35",
                               "h (threadgroup (0, 0, 0), thread (60, 0, 0)) debug: method 60"]
    assert all(m.lane_known for m in messages)


def test_messages_before_a_fault_are_delivered(messages):
    lib = mk.compile(HEAD + '''kernel void crash(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        if (i == 2) os_log_default.log("about to write %u", i);
        if (i == 2) out[1u << 30] = 1.0f;
    }''')
    with pytest.raises(mk.KernelFault):
        lib.crash(mk.zeros(4, np.float32), grid=4, check=True)
    assert lines(messages) == ["crash (threadgroup (0, 0, 0), thread (2, 0, 0)): about to write 2"]


def test_a_full_log_keeps_the_first_messages_and_warns(messages):
    lib = mk.compile(HEAD + 'kernel void many(uint i [[thread_position_in_grid]]) { '
                     'os_log_default.log("%u", i); os_log_default.log("again %u", i); }')
    with pytest.warns(mk.MetalkitWarning, match=r"kernel 'many' logged 8 more messages than the 65536 one call keeps") \
            as record:
        lib.many(grid=32772, threadgroup=4)
    assert record[0].filename == __file__  # the warning points at the call
    assert len(messages) == 65536
    assert [m.text for m in messages[:3]] == ["0", "again 0", "1"]
    assert [m.text for m in messages[-2:]] == ["32767", "again 32767"]


def test_no_messages_no_warning(messages):
    lib = mk.compile(HEAD + 'kernel void quiet(uint i [[thread_position_in_grid]]) { '
                     'if (i == 1000) os_log_default.log("never"); }')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lib.quiet(grid=16)
    assert messages == []


def test_metal_kernel_bodies_log(messages):
    k = mk.metal_kernel("logged", ["a"], ["out"], '''
        uint i = thread_position_in_grid.x;
        out[i] = a[i];
        if (i == 1) os_log_default.log("a[1] = %.1f", a[i]);''')
    (out,) = k(inputs=[np.array([1, 2, 3], np.float32)], output_shapes=[(3,)], output_dtypes=[np.float32],
               grid=(3, 1, 1), threadgroup=(3, 1, 1))
    assert [m.text for m in messages] == ["a[1] = 2.0"] and messages[0].thread == (1, 0, 0)


def test_readme_example_prints_what_the_readme_shows(capsys):
    from pathlib import Path
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("\n## Printing from kernels\n", 1)[1].split("\n## ", 1)[0]
    source = section.split("```metal\n", 1)[1].split("```", 1)[0]
    shown = section.split("one line each:\n\n```\n", 1)[1].split("```", 1)[0]
    x = np.zeros(512, np.float32)
    x[3], x[260] = 1.5, np.nan
    mk.compile(source).reduce(x, threadgroup=256)
    assert capsys.readouterr().err == shown


def test_metal_compiles_with_logging_only_a_source_that_logs():
    from metalkit._metal import uses_logging
    assert uses_logging(HEAD + 'kernel void k() { os_log_default.log("x"); }')
    assert uses_logging('constant os_log logger("a", "b");')
    assert not uses_logging("kernel void k(device float* x) { x[0] = log(x[0]); }")
    assert not uses_logging("float my_os_logger;")


def test_calls_queued_in_a_batch_deliver_when_it_completes(messages):
    from metalkit import _core
    lib = mk.compile(HEAD + 'kernel void b(uint i [[thread_position_in_grid]]) { os_log_default.log("b %u", i); }')
    _core._emulate_gpu_batches(True)
    try:
        with mk.batch():
            lib.b(grid=1)
            lib.b(grid=2)
            assert messages == []  # queued: they run when the batch completes
    finally:
        _core._emulate_gpu_batches(False)
    assert [m.text for m in messages] == ["b 0", "b 0", "b 1"]


def test_loop_and_simt_kernels_of_one_module_each_name_their_threads(messages):
    """A loop launcher points log calls at its thread's ids; every other launcher clears that per group."""
    lib = mk.compile(HEAD + '''
    kernel void looped(uint i [[thread_position_in_grid]]) { if (i == 6) os_log_default.log("loop %u", i); }
    kernel void simt(device float* out [[buffer(0)]], uint l [[thread_index_in_threadgroup]]) {
        out[l] = simd_sum(float(l));
        if (l == 40) os_log_default.log("simt %u", l);
    }''')
    lib.looped(grid=8, threadgroup=4)
    lib.simt(np.zeros(64, np.float32), grid=64, threadgroup=64)
    lib.looped(grid=8, threadgroup=4)
    assert (lib.looped.execution, lib.simt.execution) == ("loop", "simt")
    assert lines(messages) == ["looped (threadgroup (1, 0, 0), thread (2, 0, 0)): loop 6",
                               "simt (threadgroup (0, 0, 0), thread (40, 0, 0)): simt 40",
                               "looped (threadgroup (1, 0, 0), thread (2, 0, 0)): loop 6"]


@pytest.mark.parametrize("check", [True, "races", "all"])
def test_checked_calls_log_too(messages, check):
    """check= runs guarded copies, or the instrumented build where every thread is a fiber."""
    lib = mk.compile(HEAD + '''kernel void k(device float* out [[buffer(0)]], uint l [[thread_index_in_threadgroup]]) {
        threadgroup float s[64];
        s[l] = l;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[l] = s[63 - l];
        if (l == 7) os_log_default.log("%u read %.0f", l, out[l]);
    }''')
    lib.k(np.zeros(64, np.float32), grid=64, threadgroup=64, check=check)
    assert lines(messages) == ["k (threadgroup (0, 0, 0), thread (7, 0, 0)): 7 read 56"]
