"""Inlining #include "..." for Metal's compiler, and mapping its diagnostics back to the user's files."""
from __future__ import annotations

from pathlib import Path

import pytest

from metalkit.msl.diagnostics import compile_error
from metalkit.msl.includes import inline_includes, locate, relocate_log


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def origin(text: str, needle: str) -> tuple[str | None, int]:
    """Where the line of the inlined text that contains `needle` came from."""
    lines = text.split("\n")
    return locate(text, next(i for i, l in enumerate(lines, 1) if needle in l))


def test_splices_headers_between_line_markers(tmp_path):
    write(tmp_path / "common.h", "// common\ninline float twice(float x) { return 2 * x; }\n")
    main = write(tmp_path / "main.metal",
                 '#include <metal_stdlib>\n#include "common.h"\nkernel void k(device float* x [[buffer(0)]]) {}\n')
    text = inline_includes(main.read_text(), str(main))
    assert "#include <metal_stdlib>" in text                     # system includes stay for Metal
    assert '#include "common.h"' not in text
    assert origin(text, "inline float twice") == (str(tmp_path / "common.h"), 2)
    assert origin(text, "kernel void k") == (str(main), 3)      # numbering resumes after the header
    assert origin(text, "metal_stdlib") == (str(main), 1)


def test_the_including_files_folder_comes_before_include_dirs(tmp_path):
    write(tmp_path / "lib" / "util.h", "int from_lib_folder;\n")
    write(tmp_path / "lib" / "api.h", '#include "util.h"\n')
    write(tmp_path / "dirs" / "util.h", "int from_include_dirs;\n")
    write(tmp_path / "dirs" / "only_here.h", "int only_in_include_dirs;\n")
    source = '#include "lib/api.h"\n#include "only_here.h"\n'
    text = inline_includes(source, "<source>", [str(tmp_path), str(tmp_path / "dirs")])
    assert "from_lib_folder" in text and "from_include_dirs" not in text
    assert "only_in_include_dirs" in text
    assert origin(text, "only_in_include_dirs") == (str(tmp_path / "dirs" / "only_here.h"), 1)


def test_a_missing_header_is_left_for_the_compiler_at_its_own_line(tmp_path):
    main = write(tmp_path / "main.metal", 'int a;\n#include "nowhere.h"\nint b;\n')
    text = inline_includes(main.read_text(), str(main))
    assert origin(text, '#include "nowhere.h"') == (str(main), 2)
    assert origin(text, "int b;") == (str(main), 3)


def test_pragma_once_splices_a_header_once(tmp_path):
    write(tmp_path / "once.h", "#pragma once\nstruct Once {};\n")
    write(tmp_path / "sub" / "again.h", '#include "../once.h"\n')
    main = write(tmp_path / "main.metal", '#include "once.h"\n#include "sub/again.h"\n#include "once.h"\nint after;\n')
    text = inline_includes(main.read_text(), str(main))
    assert text.count("struct Once {};") == 1
    assert "#pragma once" not in text
    assert origin(text, "int after;") == (str(main), 4)


def test_a_header_without_pragma_once_is_spliced_each_time(tmp_path):
    # An include guard (or an X-macro file) decides for itself; the compiler evaluates it.
    write(tmp_path / "guarded.h", "#ifndef GUARDED\n#define GUARDED\nstruct G {};\n#endif\n")
    main = write(tmp_path / "main.metal", '#include "guarded.h"\n#include "guarded.h"\n')
    assert inline_includes(main.read_text(), str(main)).count("struct G {};") == 2


def test_an_include_cycle_ends(tmp_path):
    write(tmp_path / "a.h", '#ifndef A\n#define A\n#include "b.h"\nstruct A_ {};\n#endif\n')
    write(tmp_path / "b.h", '#ifndef B\n#define B\n#include "a.h"\nstruct B_ {};\n#endif\n')
    main = write(tmp_path / "main.metal", '#include "a.h"\n')
    text = inline_includes(main.read_text(), str(main))
    assert text.count("struct A_ {};") == 1 and text.count("struct B_ {};") == 1
    assert origin(text, "struct A_") == (str(tmp_path / "a.h"), 4)


def test_a_file_that_includes_itself_is_not_spliced_into_itself(tmp_path):
    main = write(tmp_path / "main.metal", '#include "main.metal"\nint once;\n')
    assert inline_includes(main.read_text(), str(main)).count("int once;") == 1


def test_includes_in_comments_and_strings_stay(tmp_path):
    write(tmp_path / "real.h", "int real;\n")
    source = '/* disabled:\n#include "real.h"\n*/\nconst char* s = "/*";\n#include "real.h"\n'
    text = inline_includes(source, "<source>", [str(tmp_path)])
    assert text.count("int real;") == 1
    assert origin(text, "int real;") == (str(tmp_path / "real.h"), 1)


APPLE_LOG = """Compilation failed: \n\nprogram_source:{line}:37: error: use of undeclared identifier 'y'
inline float twice(float x) {{ return y * x; }}
                                    ^
"""


def test_program_source_lines_in_metals_log_become_the_users_files(tmp_path):
    header = write(tmp_path / "common.h", "// helpers\ninline float twice(float x) { return y * x; }\n")
    main = write(tmp_path / "main.metal", '#include "common.h"\nkernel void k() {}\n')
    source = main.read_text()
    text = inline_includes(source, str(main))
    physical = next(i for i, l in enumerate(text.split("\n"), 1) if "return y * x" in l)
    log = relocate_log(APPLE_LOG.format(line=physical), text, str(main))
    assert f"{header}:2:37: error: use of undeclared identifier 'y'" in log
    err = compile_error(log, source, str(main))
    assert (err.filename, err.lineno, err.offset) == (str(header), 2, 37)
    assert err.msg == "use of undeclared identifier 'y'"
    assert err.text == "inline float twice(float x) { return y * x; }"


def test_an_error_in_the_main_source_points_at_the_users_line(tmp_path):
    source = "#include <metal_stdlib>\nkernel void k() { undefined(); }\n"
    text = inline_includes(source, "<source>")
    physical = next(i for i, l in enumerate(text.split("\n"), 1) if "undefined()" in l)
    log = relocate_log(f"program_source:{physical}:19: error: use of undeclared identifier 'undefined'\n", text,
                       "<source>")
    err = compile_error(log, source, "<source>")
    assert (err.filename, err.lineno, err.offset) == ("<source>", 2, 19)
    assert err.text == "kernel void k() { undefined(); }"


def test_locations_metal_already_gave_by_line_markers_stay():
    log = "/src/kernels/add.metal:4:5: error: expected ';'\n"
    assert relocate_log(log, '#line 1 "/src/kernels/add.metal"\nx\n', "/src/kernels/add.metal") == log


@pytest.mark.parametrize("clang", [True, False])
def test_signatures_where_a_name_is_declared_in_both_branches_of_an_if(clang, monkeypatch):
    from metalkit.msl import signatures
    from metalkit.msl.includes import inline_includes
    from metalkit.msl.signatures import kernel_signatures
    if not clang:  # read unexpanded: both branches are seen, so the name gets no signature
        monkeypatch.setattr(signatures, "_clang_preprocessed", lambda text: None)
    text = """#include <metal_stdlib>
using namespace metal;
#if USE_HALF
kernel void k(device half* x [[buffer(0)]], constant half& s [[buffer(1)]]) {}
#else
kernel void k(device float* x [[buffer(0)]], constant float& s [[buffer(1)]]) {}
#endif
kernel void other(device float* x [[buffer(0)]], constant int& n [[buffer(1)]]) {}
"""
    sigs = kernel_signatures(inline_includes(text, "both.metal", []))
    assert sorted(sigs) == (["k", "other"] if clang else ["other"])
    if clang:  # preprocessed: the #else branch is the one that exists
        assert [p[3] for p in sigs["k"][2]] == ["device float* x", "constant float& s"]
    assert [p[0] for p in sigs["other"][2]] == ["buffer", "scalar"]


def test_signatures_of_kernels_that_macros_produce():
    from metalkit.msl.includes import inline_includes
    from metalkit.msl.signatures import kernel_signatures
    text = """#include <metal_stdlib>
using namespace metal;
#define SCALE_KERNEL(NAME, T) \\
    kernel void NAME(device T* x [[buffer(0)]], constant T& s [[buffer(1)]], uint i [[thread_position_in_grid]]) { x[i] *= s; }
SCALE_KERNEL(scale_f, float)
SCALE_KERNEL(scale_h, half)
"""
    sigs = kernel_signatures(inline_includes(text, "macros.metal", []))
    assert sorted(sigs) == ["scale_f", "scale_h"]
    assert [(p[0], p[1], p[2]) for p in sigs["scale_h"][2]] == [("buffer", 0, "x"), ("scalar", 1, "s")]
