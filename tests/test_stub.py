"""python/metalkit/_core.pyi declares exactly what the compiled module has: its names, classes,
methods (with their parameters) and properties."""
from __future__ import annotations

import ast
import inspect
import re
import sys
import types
from pathlib import Path

import pytest

import metalkit
from metalkit import _core

STUB = Path(metalkit.__file__).parent / "_core.pyi"
# Dunder methods a stub must declare when the class defines them: the ones that change how
# the class is used. pybind11 gives every class __init__ (a slot that refuses construction
# unless the binding defines one, which is then a method), __repr__, __module__, __doc__.
USED_DUNDERS = {"__call__", "__enter__", "__exit__", "__getitem__", "__contains__", "__len__", "__iter__"}


def stub_names() -> dict[str, ast.AST]:
    """Top-level declarations of the stub, with `if sys.platform == ...:` blocks taken as on this platform;
    private type aliases (`_Dims = ...`) are the stub's own and left out."""
    out: dict[str, ast.AST] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = ast.unparse(node.test)
                assert re.fullmatch(r"sys\.platform == '\w+'", test), f"stub: unexpected condition {test}"
                visit(node.body if eval(test, {"sys": sys}) else node.orelse)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out[node.name] = node
            elif isinstance(node, ast.AnnAssign):
                out[node.target.id] = node
            elif isinstance(node, ast.Assign):
                assert all(t.id.startswith("_") for t in node.targets), \
                    f"stub: {ast.unparse(node)} declares a public name by assignment; annotate it"
    visit(ast.parse(STUB.read_text()).body)
    return out


def runtime_names() -> list[str]:
    return sorted(n for n in dir(_core) if not n.startswith("__"))


def stub_params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    return [n for n in names if n != "self"]


def runtime_params(fn: object) -> list[str]:
    """Parameter names of a compiled function: its text signature, else pybind11's signature line."""
    try:
        sig = inspect.signature(fn)
    except ValueError:
        first = (fn.__doc__ or "").splitlines()[0]
        m = re.fullmatch(r"\w+\((.*)\) -> .*", first)
        assert m, f"no signature line in the docstring of {fn!r}: {first!r}"
        depth, part, parts = 0, "", []
        for ch in m.group(1):  # split at top-level commas: annotations hold [a, b]
            depth += 1 if ch in "[(" else -1 if ch in "])" else 0
            if ch == "," and depth == 0:
                parts.append(part)
                part = ""
            else:
                part += ch
        names = [p.split(":")[0].split("=")[0].strip() for p in parts + [part] if p.strip()]
        return [n for n in names if n != "self"]
    return [("*" if p.kind is p.VAR_POSITIONAL else "") + p.name for p in sig.parameters.values() if p.name != "self"]


def test_module_names_match():
    stub = stub_names()
    assert sorted(stub) == runtime_names()


def test_kinds_and_functions_match():
    for name, node in stub_names().items():
        obj = getattr(_core, name)
        if isinstance(node, ast.ClassDef):
            assert inspect.isclass(obj), name
        elif isinstance(node, ast.FunctionDef):
            assert callable(obj) and not inspect.isclass(obj), name
            assert stub_params(node) == runtime_params(obj), name
        else:
            assert isinstance(obj, types.ModuleType) and ast.unparse(node.annotation) == "ModuleType", name


def class_members(cls: type) -> dict[str, object]:
    out = {}
    for name, value in vars(cls).items():
        if name == "__init__" and type(value).__name__ != "instancemethod":
            continue  # pybind11's refusing slot: the class has no constructor
        if not name.startswith("_") or name in USED_DUNDERS or name == "__init__":
            out[name] = value
    return out


@pytest.mark.parametrize("cls", [n for n in runtime_names() if inspect.isclass(getattr(_core, n))])
def test_class_members_match(cls):
    node = stub_names()[cls]
    runtime = class_members(getattr(_core, cls))
    declared = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    assert sorted(declared) == sorted(runtime)
    for name, fn in declared.items():
        is_property = any(ast.unparse(d) == "property" for d in fn.decorator_list)
        assert is_property == isinstance(runtime[name], property), f"{cls}.{name}"
        if not is_property:
            assert stub_params(fn) == runtime_params(getattr(getattr(_core, cls), name)), f"{cls}.{name}"


def test_parameters_are_read_from_both_sides():
    # The readers the comparisons rely on, on a known function of each kind.
    assert runtime_params(_core.allocate_guarded) == ["nbytes", "align"]  # pybind11's signature line
    assert runtime_params(_core.Kernel.__call__)[:2] == ["*args", "grid"]  # the text signature
    assert stub_params(stub_names()["allocate_guarded"]) == ["nbytes", "align"]
