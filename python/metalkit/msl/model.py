"""What the front end's passes find in a source and hand to each other."""
from __future__ import annotations

from dataclasses import dataclass, field

from .source import Source
from .tokens import Token


@dataclass
class Attr:
    name: str
    args: str  # raw text inside the parentheses, "" if none


@dataclass
class Param:
    name: str
    decl: str
    space: int
    kind: str          # buffer | scalar | threadgroup | builtin
    index: int         # buffer/threadgroup index, -1 for builtins
    builtin: str = ""
    when: str = ""     # [[function_constant(when)]]: the parameter exists only if that constant is true
    present: bool = True  # False: `when` is false or unset here; the launcher passes a null/zero value
    array: int = 0     # N for a fixed-length array parameter (`constant T x[N]`), taken by value


@dataclass
class Kernel:
    host_name: str
    pointer: str                 # C++ constant expression: a pointer to the function
    params: list[Param]
    file: str
    line: int
    max_threads: int | str = 1024  # or a C++ constant expression (a template kernel's, per instantiation)
    needs_sync: str = ""         # first barrier/SIMD-group function it reaches, if any
    function: str = ""           # the C++ function (template) name
    uses_barrier: bool = False   # it reaches threadgroup_barrier
    targs: tuple = (0, -1)       # token range of a host_name instantiation's template arguments
    execution: str = "loop"      # "loop", "simt", or "fibers: "/"threads: " and why (metalkit.execution.parse)
    unset_constant: str = ""     # a function constant it uses that was given no value
    threadgroup_variables: bool = False  # its body declares threadgroup variables
    regions: int = 0             # SIMT, split at its barriers into this many regions (simt/fission.py)
    streamed: tuple = ()         # loop: its outputs stored past the cache, as params indices (passes/streaming.py)
    stream_index: int = -1       # loop, streamed: its thread_position_in_grid parameter


@dataclass
class StructDef:
    """A struct whose layout the compiled module describes (passes/structs.py)."""
    name: str
    qualified: str               # the type as named from the global namespace: ::ns::S, ::P<T, N>
    params: list[str]            # template parameters as declared, without defaults ([] if not a template)
    members: list[str]           # data member names, in order
    ok: bool = True              # False: metalkit cannot describe it (private members, bit-fields...)
    template: bool = False


@dataclass
class Result:
    text: str
    kernels: list[Kernel]
    files: list[str] = field(default_factory=list)  # user files seen (dependencies)
    structs: list[StructDef] = field(default_factory=list)  # layouts the module describes
    logs: bool = False  # the user's code names os_log (<metal_logging>): loop launchers tell log calls who runs


@dataclass
class FnDef:
    """A function (or method) defined at namespace or class scope."""
    name: str
    params: list[Param]          # kernels only
    body: tuple[int, int]        # token range of the body: '{' .. '}'
    is_kernel: bool
    is_template: bool
    attrs: list[Attr]
    scope: str
    tok: Token                   # the name
    head: int = 0                # first token of the declaration
    name_at: int = 0             # index of the name token
    cls: str = ""                # the class it is a method of, if defined in a class body
    cls_body: int = -1           # index of that class body's '{'


@dataclass
class Unit:
    """The translation unit as the passes share it."""
    src: Source
    constants: dict
    only: set | None = None
    attr_at: dict[int, tuple[int, list[Attr]]] = field(default_factory=dict)  # '[' of [[...]] -> (']', attrs)
    consumed: set[int] = field(default_factory=set)     # attribute blocks a pass rewrote itself
    kernel_marks: set[int] = field(default_factory=set)  # tokens marking a kernel: `kernel`, [[kernel]]
    functions: list[FnDef] = field(default_factory=list)
    instantiations: list[tuple[int, int]] = field(default_factory=list)  # `template ...;` token ranges
    kernels: list[Kernel] = field(default_factory=list)
    dropped: set[int] = field(default_factory=set)      # tokens already rewritten away (not to be touched)
    fc_values: dict[str, object] = field(default_factory=dict)  # function constant -> value (None: unset)
    fc_at: dict[str, int] = field(default_factory=dict)  # function constant name -> its name token
    statements: dict[int, str] | None = None  # clang's facts: a statement's first token -> "decl" / "expr"
    call_sync: dict[int, bool] | None = None  # clang's facts: a function's name in code -> it reaches a SIMD-group function
    structs: list[StructDef] = field(default_factory=list)
    threadgroup_functions: set[str] = field(default_factory=set)  # functions declaring threadgroup variables
    log_helpers: set[str] = field(default_factory=set)  # SIMT: helpers that log (os_log) and reach no SIMD-group function
    checked: bool = False  # a checked build (check= races, uninit, lockstep): every access is a call
    _attr_tokens: set | None = None

    @property
    def toks(self) -> list[Token]:
        return self.src.toks

    def in_attr(self, k: int) -> bool:
        """Whether token k is inside an MSL attribute block."""
        if self._attr_tokens is None:
            self._attr_tokens = {i for a, (b, _) in self.attr_at.items() for i in range(a, b + 1)}
        return k in self._attr_tokens

    def skip_attrs(self, k: int) -> int:
        while k in self.attr_at:
            k = self.attr_at[k][0] + 1
        return k

    def attrs_between(self, a: int, b: int) -> list[Attr]:
        return [x for k, (_, al) in self.attr_at.items() if a <= k < b for x in al]
