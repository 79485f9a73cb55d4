"""Every Objective-C message the Metal backend sends names a real Metal or Foundation selector.

src/metal cannot be compiled off a Mac, so this lint is what checks, on every
platform, that no selector or class name there is misspelt or invented. Each
message send ``[receiver sel:arg sel2:arg]`` (nested ones too), each dot-syntax
property of an Objective-C object (``options.mathMode = ...`` is the setter
``setMathMode:``) and each class that receives a message is looked up in
Apple's lists (tests/data/metal-api, names from metal-cpp) plus the few
Foundation selectors those lists lack (foundation-extra-selectors.txt, each
checked against Apple's documentation).

Which names are Objective-C objects is read from declarations
(``id<MTLDevice> device``, ``NSString* name``, ``MTLAutoreleased... x``); a
C++ member access (``spec.name``) is not a property unless it follows one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "metal-api"
METAL_SOURCES = ROOT / "src" / "metal"

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>@?"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?\d[\w.]*)
  | (?P<id>@?[A-Za-z_]\w*)
  | (?P<punct>::|->|==|!=|<=|>=|&&|\|\||[-+*/%&|^=<>!~?:;,.(){}\[\]#@^])
""", re.X)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_OBJC_DECL = [
    re.compile(r"\bid\s*<\s*\w+\s*>\s*(?:const\s+)?(\w+)"),                  # id<MTLDevice> device
    re.compile(r"\b(?:MTL|NS)\w*\s*<[^;]*?>\s*\*\s*(?:const\s+)?(\w+)"),    # NSArray<id<MTLDevice>>* all
    re.compile(r"\b(?:MTL|NS)\w*\s*\*\s*(?:const\s+)?(\w+)"),               # NSString* name
    re.compile(r"\bMTLAutoreleased\w*\s+(\w+)"),                            # MTLAutoreleased... reflection
]
_EXPR_END = {"id", "num", "str", ")", "]"}
_NOT_OPERANDS = {"return", "case", "new", "delete", "sizeof", "throw", "else", "do", "@autoreleasepool"}


@dataclass
class Tok:
    text: str
    kind: str  # id, num, str, punct
    line: int


@dataclass
class Use:
    name: str  # selector, or class name when kind == "class"
    kind: str  # "send", "getter", "setter" or "class"
    line: int


def tokenize(text: str) -> list[Tok]:
    """Tokens of Objective-C++ with comments and preprocessor lines blanked (line numbers kept)."""
    keep_lines = lambda m: re.sub(r"[^\n]", " ", m.group())
    text = _DIRECTIVE.sub(keep_lines, _COMMENT.sub(keep_lines, text))
    toks, line = [], 1
    for m in _TOKEN.finditer(text):
        if m.lastgroup != "ws":
            toks.append(Tok(m.group(), m.lastgroup, line))
        line += m.group().count("\n")
    return toks


def objc_names(text: str) -> set[str]:
    """Names declared with an Objective-C object type."""
    return {m.group(1) for pattern in _OBJC_DECL for m in pattern.finditer(_COMMENT.sub(" ", text))}


def _close(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at i."""
    pairs, depth = {"(": ")", "[": "]", "{": "}"}, []
    for j in range(i, len(toks)):
        t = toks[j].text
        if t in pairs:
            depth.append(pairs[t])
        elif depth and t == depth[-1]:
            depth.pop()
            if not depth:
                return j
    raise ValueError(f"unbalanced {toks[i].text!r} at line {toks[i].line}")


def _atoms(toks: list[Tok], first: int, last: int) -> list[tuple[int, int]]:
    """Token ranges [a, b] between first and last, a bracketed group being one atom."""
    out, i = [], first
    while i < last:
        j = _close(toks, i) if toks[i].text in "([{" else i
        out.append((i, j))
        i = j + 1
    return out


def _ends_expression(toks: list[Tok], atom: tuple[int, int]) -> bool:
    t = toks[atom[1]]
    return (t.kind in _EXPR_END or t.text in _EXPR_END) and t.text not in _NOT_OPERANDS


def message_send(toks: list[Tok], open_: int, close: int) -> list[Use]:
    """The selector (and class receiver) of ``[...]`` at open_, or [] if it is not a message send."""
    atoms = _atoms(toks, open_ + 1, close)
    ident = lambda a: a[0] == a[1] and toks[a[0]].kind == "id"
    colon = lambda a: toks[a[0]].text == ":"
    for k in range(1, len(atoms)):
        if not (ident(atoms[k]) and _ends_expression(toks, atoms[k - 1])):
            continue
        uses = []
        if k == 1 and ident(atoms[0]) and re.match(r"(?:MTL|NS)[A-Z]", toks[atoms[0][0]].text):
            uses.append(Use(toks[atoms[0][0]].text, "class", toks[atoms[0][0]].line))
        name = toks[atoms[k][0]].text
        if k + 1 == len(atoms):
            return uses + [Use(name, "send", toks[atoms[k][0]].line)]
        if not colon(atoms[k + 1]):
            return []
        parts, pending_ternary = [name], 0
        for j in range(k + 2, len(atoms) - 1):
            a = atoms[j]
            if toks[a[0]].text == "?":
                pending_ternary += 1
            elif colon(a) and pending_ternary:
                pending_ternary -= 1
            elif ident(a) and colon(atoms[j + 1]) and _ends_expression(toks, atoms[j - 1]) and not pending_ternary:
                parts.append(toks[a[0]].text)
        return uses + [Use("".join(p + ":" for p in parts), "send", toks[atoms[k][0]].line)]
    return []


def property_uses(toks: list[Tok], objc: set[str]) -> list[Use]:
    """Dot-syntax properties read or set on Objective-C objects."""
    out = []
    for i, t in enumerate(toks):
        # Start of a chain a.b.c: an identifier not itself after '.', '->' or '::'.
        if t.kind != "id" or (i and toks[i - 1].text in (".", "->", "::")):
            continue
        on_object = t.text in objc
        j = i
        while j + 2 < len(toks) and toks[j + 1].text in (".", "->") and toks[j + 2].kind == "id":
            prop = toks[j + 2]
            if on_object and toks[j + 1].text == ".":
                setter = j + 3 < len(toks) and toks[j + 3].text == "="
                out.append(Use(prop.text, "setter" if setter else "getter", prop.line))
            on_object = on_object or prop.text in objc
            j += 2
    return out


def uses_in(text: str) -> list[Use]:
    toks = tokenize(text)
    uses = property_uses(toks, objc_names(text))
    for i, t in enumerate(toks):
        if t.text == "[":
            uses += message_send(toks, i, _close(toks, i))
    return uses


def _names(*files: str) -> set[str]:
    out = set()
    for f in files:
        for line in (DATA / f).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out.add(line)
    return out


SELECTORS = _names("metal-selectors.txt", "foundation-selectors.txt", "foundation-extra-selectors.txt")
CLASSES = _names("classes.txt")


def unknown(uses: list[Use]) -> list[Use]:
    def known(u: Use) -> bool:
        cap = u.name[:1].upper() + u.name[1:]
        if u.kind == "class":
            return u.name in CLASSES
        if u.kind == "setter":
            return f"set{cap}:" in SELECTORS
        if u.kind == "getter":
            return u.name in SELECTORS or f"is{cap}" in SELECTORS
        return u.name in SELECTORS
    return [u for u in uses if not known(u)]


def _metal_files() -> list[Path]:
    return sorted(METAL_SOURCES.glob("*.mm")) + sorted(METAL_SOURCES.glob("*.h"))


def test_the_metal_backend_exists():
    assert sorted(METAL_SOURCES.glob("*.mm")), f"no .mm files in {METAL_SOURCES}: the lint would pass vacuously"


@pytest.mark.parametrize("path", _metal_files(), ids=lambda p: p.name)
def test_every_selector_is_apples(path: Path):
    bad = unknown(uses_in(path.read_text()))
    assert not bad, "not in Apple's Metal/Foundation API lists (tests/data/metal-api):\n" + "\n".join(
        f"  {path.name}:{u.line}: {'class' if u.kind == 'class' else 'selector'} "
        f"{u.name if u.kind != 'setter' else 'set' + u.name[:1].upper() + u.name[1:] + ':'}" for u in bad)


def test_the_backend_sends_messages():
    """The lint reads real sends in the backend (a parser that found none would pass anything)."""
    found = {u.name for p in _metal_files() for u in uses_in(p.read_text())}
    assert {"newCommandQueue", "setBuffer:offset:atIndex:", "dispatchThreads:threadsPerThreadgroup:"} <= found


SAMPLE = """
// [comment notASelector:1] is ignored, and so is "a string [x fake]".
#define SQUARE(x) [x fake]
static void sample(id<MTLDevice> device, const std::vector<int>& values, size_t i, bool fast) {
  MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
  options.fastMathEnabld = NO;
  options.languageVersion = MTLLanguageVersion3_1;
  id<MTLBuffer> b = [device newBufferWithLenght:16 options:MTLResourceStorageModeShared];
  [encoder setBytes:&values[0] length:fast ? 4 : 8 atIndex:i];
  [[MTLFakeThing alloc] init];
  int x = values[i + 1] + values[(size_t)0];
  auto f = [&](int v) { return v + x; };
  NSUInteger n = b.length + device.name.length;
  [[nodiscard]] int unused = f(x);
}
"""


def test_lint_reads_sends_properties_and_classes():
    uses = uses_in(SAMPLE)
    assert sorted((u.kind, u.name) for u in uses) == sorted([
        ("class", "MTLCompileOptions"), ("send", "alloc"), ("send", "init"),
        ("setter", "fastMathEnabld"), ("setter", "languageVersion"),
        ("send", "newBufferWithLenght:options:"),
        ("send", "setBytes:length:atIndex:"),
        ("class", "MTLFakeThing"), ("send", "alloc"), ("send", "init"),
        ("getter", "length"), ("getter", "name"), ("getter", "length"),
    ])


def test_lint_catches_fake_selectors_and_classes():
    bad = {(u.kind, u.name) for u in unknown(uses_in(SAMPLE))}
    assert bad == {("setter", "fastMathEnabld"), ("send", "newBufferWithLenght:options:"), ("class", "MTLFakeThing")}
