"""Whether a SIMT kernel can be split at its barriers, and what each split carries over.

A kernel whose threadgroup barriers are all statements of its body's top level (none in a loop,
a branch or a helper) runs as regions: the code before the first barrier, between two, after the
last. Without fibers, the launcher runs a region for every SIMD-group of the threadgroup before
it starts the next (launch.h run_groups_simt_regions), which is the order a barrier imposes, so no
SIMD-group waits in a fiber. A region is one call of the kernel; the locals that a later region
uses are copied into per-SIMD-group slots at its end and back at the next one's start.

Copies are only made where they are exact: a carried local's type must be nameable before the
regions (built-in types, the kernel's template parameters) and be a value, or a pointer into
device, constant or threadgroup memory, never into another local. Anything else keeps the kernel
on fibers, which is slower but the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..consteval import const_int
from . import syntax as sx
from .regions import Piece

# Bytes of a scalar type's value; a vector's is its count times this, rounded to a power of two.
_SIZES = {"bool": 1, "char": 1, "uchar": 1, "int8_t": 1, "uint8_t": 1, "short": 2, "ushort": 2, "half": 2,
          "bfloat": 2, "int16_t": 2, "uint16_t": 2, "int": 4, "uint": 4, "float": 4, "int32_t": 4,
          "uint32_t": 4, "long": 8, "ulong": 8, "size_t": 8, "ptrdiff_t": 8, "int64_t": 8, "uint64_t": 8}
_SCALARS = "|".join(_SIZES)
# Identifiers a carried local's type may be made of: MSL's scalar, vector and matrix types, and
# what qualifies them (a pointer's address space).
_TYPE_WORD = re.compile(rf"(?:packed_)?(?:{_SCALARS})[234]?|(?:half|float|bfloat)[234]x[234]|"
                        r"simdgroup_(?:half|float|bfloat)8x8|"
                        r"const|volatile|unsigned|signed|device|constant|threadgroup|metal|vec|matrix")
_SAFE_SPACES = ("device", "constant", "threadgroup")
# A SIMD-group's carried locals, at most: every SIMD-group of a threadgroup has a slot of them in
# each OS thread (32 of them), and the launcher's frame holds a copy while a region runs.
SLOT_BYTES = 16 << 10


@dataclass
class Carried:
    """A top-level local that a later region uses."""
    var: object
    decl: sx.Decl
    dc: sx.Declarator
    first: int  # the region that declares it
    last: int   # the last region that uses it
    dead: set = field(default_factory=set)  # regions that overwrite it before any read: nothing restored

    @property
    def slotted(self) -> bool:
        """Whether a region restores it: else it needs no slot."""
        return any(r not in self.dead for r in range(self.first + 1, self.last + 1))


@dataclass
class Split:
    prefix: int                      # leading pieces run by every region (threadgroup, constexpr)
    regions: list[list[Piece]]       # the rest, each but the last ending with its barrier piece
    carried: list[Carried] = field(default_factory=list)

    def saved_after(self, r: int) -> list[Carried]:
        return [c for c in self.carried if c.first <= r < c.last and r + 1 not in c.dead]

    def restored_in(self, r: int) -> list[Carried]:
        return [c for c in self.carried if c.first < r <= c.last]


def split(fn, pieces: list[Piece], tparams: set[str]) -> Split | None:
    """The kernel body's regions, or None where it cannot be split exactly."""
    toks = fn.unit.toks
    body = fn.body
    if any(toks[i].text == "goto" for i in range(body.a, body.b + 1)):
        return None
    prefix = 0
    while prefix < len(pieces) and _leading(pieces[prefix]):
        prefix += 1
    regions: list[list[Piece]] = [[]]
    for p in pieces[prefix:]:
        if p.kind == "B":
            regions[-1].append(p)
            regions.append([])
            continue
        if any(fn.info[id(t)].barrier for s in p.stmts for t in s.walk()):
            return None  # a barrier inside a structure
        if any(isinstance(s, sx.Decl) and _leading(Piece("U", [s])) for s in p.stmts):
            return None  # a threadgroup or constexpr declaration after other statements
        regions[-1].append(p)
    if len(regions) == 1:
        return None
    if not regions[-1]:
        regions.pop()
    # Every region's call starts with the kernel's parameters as passed: one written (or reachable
    # through its address) before the last region would lose its new value.
    params = {id(v) for v in fn.params}
    if any(v.addressed for v in fn.params) or any(
            id(v) in params for region in regions[:-1] for p in region for s in p.stmts for t in s.walk()
            for v in fn.info[id(t)].writes):
        return None
    constants = {toks[dc.name].text: _literal(toks, dc) for p in pieces[:prefix] for s in p.stmts
                 for dc in s.declarators}
    names = tparams | set(constants)
    out = Split(prefix, regions)
    spans = [(r[0].stmts[0].a, r[-1].stmts[-1].b) for r in regions]
    for r, region in enumerate(regions):
        for p in region:
            for s in p.stmts:
                if not isinstance(s, sx.Decl):
                    continue
                for dc in s.declarators:
                    word = toks[dc.name].text
                    last = max((k for k in range(r + 1, len(regions))
                                if any(toks[i].text == word for i in range(spans[k][0], spans[k][1] + 1))),
                               default=r)
                    if last == r:
                        continue
                    if not _exact_copy(fn, s, dc, names):
                        return None
                    c = Carried(dc.var, s, dc, r, last)
                    if not c.var.addressed:
                        c.dead = {k for k in range(r + 1, last + 1)
                                  if _overwritten(toks, [t for p in regions[k] for t in p.stmts], word, k == last)}
                    out.carried.append(c)
    sizes = [_bytes(toks, c, constants) for c in out.carried]
    if None in sizes or sum(sizes) > SLOT_BYTES:
        return None
    return out


def _leading(p: Piece) -> bool:
    """A declaration that every region may run again: threadgroup storage, or a constant."""
    if p.kind != "U" or not isinstance(p.stmts[0], sx.Decl):
        return False
    d = p.stmts[0]
    return all(dc.var is not None and dc.var.kind == "shared" for dc in d.declarators) or (
        "constexpr" in d.specs and all(dc.var is not None and not dc.var.lanes for dc in d.declarators))


def _exact_copy(fn, d: sx.Decl, dc: sx.Declarator, names: set[str]) -> bool:
    """Whether a copy of this local, made in a slot declared before the regions, is the local."""
    v, toks = dc.var, fn.unit.toks
    if v is None or v.kind != "local" or v.ref or d.specs & {"static", "constexpr", "thread_local", "typedef"}:
        return False
    if v.pointer and v.space not in _SAFE_SPACES:
        return False
    if v.array and not v.lanes:
        return False  # an array is not assigned whole; per-lane ones are wrapped in mk::lanes
    words = [toks[k] for k in range(d.type[0], d.type[1] + 1)]
    words += [toks[k] for k in range(dc.ptr[0], dc.ptr[1] + 1)]
    words += [toks[k] for k in range(dc.dims[0], dc.dims[1] + 1)]
    for t in words:
        if t.text in ("&", "&&"):
            return False
        if t.kind == "id" and not (_TYPE_WORD.fullmatch(t.text) or t.text in names):
            return False
    return True


def _overwritten(toks, stmts: list, word: str, last: bool) -> bool:
    """Whether statements of a region assign the local named `word` before anything reads it: the
    first that names it is `word = e;` without it in e. In the last region that uses it, also an
    `if` (no else) whose condition does not name it, whose branch overwrites it first, and after
    which nothing names it: lanes that skip the branch never read it again. Names are matched by
    text, so a shadowing declaration, or any other first use, says no."""
    def names(a: int, b: int) -> bool:
        return any(toks[i].text == word for i in range(a, b + 1))
    for k, s in enumerate(stmts):
        if not names(s.a, s.b):
            continue
        e = s.expr if isinstance(s, sx.ExprStmt) else None
        if isinstance(e, sx.Assign) and e.op == "=" and isinstance(e.lhs, sx.Name) and not e.lhs.qualified \
                and e.lhs.a == e.lhs.b and toks[e.lhs.a].text == word:
            return not names(e.rhs.a, e.rhs.b)
        if last and isinstance(s, sx.If) and s.els is None and not s.constexpr and not names(s.cond.a, s.cond.b) \
                and not any(names(t.a, t.b) for t in stmts[k + 1:]):
            return _overwritten(toks, s.then.stmts if isinstance(s.then, sx.Block) else [s.then], word, True)
        return False
    return False


def _literal(toks, dc: sx.Declarator) -> int | None:
    """A declarator's initializer as an integer, if it is a literal one (`constexpr uint N = 8;`)."""
    init = dc.init
    if init is None or init.a != init.b or toks[init.a].kind != "num":
        return None
    return _literal_text(toks[init.a].text)


def _bytes(toks, c: Carried, constants: dict) -> int | None:
    """A carried local's bytes for a SIMD-group (32 lanes' worth if per lane), or None if unknown."""
    d, dc = c.decl, c.dc
    if dc.ptr[1] >= dc.ptr[0] and any(toks[k].text == "*" for k in range(dc.ptr[0], dc.ptr[1] + 1)):
        size = 8
    else:
        size = 16  # a template parameter: a scalar or vector at most, by _exact_copy's rules
        for k in range(d.type[0], d.type[1] + 1):
            m = re.fullmatch(rf"(?:packed_)?({_SCALARS})([234])?", toks[k].text)
            if m:
                n = int(m.group(2) or 1)
                size = _SIZES[m.group(1)] * (4 if n == 3 and not toks[k].text.startswith("packed_") else n)
            elif re.fullmatch(r"simdgroup_\w+8x8", toks[k].text):
                size = 64 * 4
            elif re.fullmatch(r"(?:half|float|bfloat)[234]x[234]", toks[k].text):
                size = 16 * 4
    for k in range(dc.dims[0], dc.dims[1] + 1):
        t = toks[k]
        if t.text in ("[", "]"):
            continue
        n = constants.get(t.text) if t.kind == "id" else _literal_text(t.text)
        if n is None:
            return None
        size *= n
    return size * (32 if c.var.lanes else 1)


def _literal_text(text: str) -> int | None:
    """An integer literal's value (`8`, `0x10u`), or None."""
    try:
        return const_int(text)
    except ValueError:
        return None
