"""The Metal backend names only real Metal and Foundation APIs, none too new for it.

src/metal can only be compiled on a Mac or against a macOS SDK
(scripts/check_macos_sdk.sh), so this lint is what checks it on every
platform, in two parts.

Selectors: each message send ``[receiver sel:arg sel2:arg]`` (nested ones too),
each dot-syntax property of an Objective-C object (``options.mathMode = ...`` is
the setter ``setMathMode:``) and each class that receives a message is looked
up in Apple's lists (tests/data/metal-api, names from metal-cpp) plus the few
Foundation selectors those lists lack (foundation-extra-selectors.txt, each
checked against Apple's documentation). Which names are Objective-C objects is
read from declarations (``id<MTLDevice> device``, ``NSString* name``,
``MTLAutoreleased... x``); a C++ member access (``spec.name``) is not a property
unless it follows one.

Availability: each MTL*/MTL4*/NS* identifier (type, protocol, class, function,
enum constant) and each selector must be in availability.txt /
availability-selectors.txt (generated from the macOS 14.2 SDK's headers by
scripts/metal_availability.py) or availability-newer-sdks.txt. A selector's
version is the oldest any class declaring it has (the lint cannot tell the
receiver's class; the class's own name is checked where it is written). One
that the oldest SDK the backend builds with (metal_internal.h) lacks must sit
in an ``#if __MAC_OS_X_VERSION_MAX_ALLOWED >= ...`` block; one newer than the
deployment target (pyproject.toml) in the body of an
``if (@available(macOS N, *))`` / ``__builtin_available`` or of a function
marked ``API_AVAILABLE(macos(N))``, or be a ``case`` label (clang exempts those
too); a call of such a function needs the same guard. Any other condition
(``#else`` of a ``<`` test, ``defined(__MAC_15_0)``, ``@unavailable``) guards
nothing here: the lint errs on the side of flagging. A name in a ``#define``
body counts where the ``#define`` stands, for the SDK check only (where it
expands is not followed); names made by token pasting are not seen.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli to older Pythons
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "metal-api"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from metal_availability import listed_names  # noqa: E402  (the one reader of the lists)
METAL_SOURCES = ROOT / "src" / "metal"

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>@?"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?\d[\w.]*)
  | (?P<id>@?[A-Za-z_]\w*)
  | (?P<punct>::|->|==|!=|<=|>=|&&|\|\||[-+*/%&|^=<>!~?:;,.(){}\[\]#@^])
""", re.X)
_API_NAME = re.compile(r"(?:MTL|NS)[A-Z0-9]\w*")  # MTL4...: Metal 4's names
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)]*\))?(?P<body>(?:[^\n]*\\\n)*[^\n]*)", re.M)
_API_NAME_IN_TEXT = re.compile(r"(?<![\w.>:])(?:MTL|NS)[A-Z0-9]\w*")  # not after '.', '->' or '::'
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
    tok: int = -1  # index of its (first) token in tokenize()'s list

    def selectors(self) -> list[str]:
        """The selectors this use may send: a property's setter, or its getter under either name."""
        cap = self.name[:1].upper() + self.name[1:]
        if self.kind == "setter":
            return [f"set{cap}:"]
        if self.kind == "getter":
            return [self.name, f"is{cap}"]
        return [self.name]


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
        if k == 1 and ident(atoms[0]) and _API_NAME.fullmatch(toks[atoms[0][0]].text):
            uses.append(Use(toks[atoms[0][0]].text, "class", toks[atoms[0][0]].line, atoms[0][0]))
        name = toks[atoms[k][0]].text
        if k + 1 == len(atoms):
            return uses + [Use(name, "send", toks[atoms[k][0]].line, atoms[k][0])]
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
        return uses + [Use("".join(p + ":" for p in parts), "send", toks[atoms[k][0]].line, atoms[k][0])]
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
                out.append(Use(prop.text, "setter" if setter else "getter", prop.line, j + 2))
            on_object = on_object or prop.text in objc
            j += 2
    return out


def uses_in(text: str, toks: list[Tok] | None = None) -> list[Use]:
    toks = toks if toks is not None else tokenize(text)
    uses = property_uses(toks, objc_names(text))
    for i, t in enumerate(toks):
        if t.text == "[":
            uses += message_send(toks, i, _close(toks, i))
    return uses


SELECTORS = listed_names("metal-selectors.txt", "foundation-selectors.txt", "foundation-extra-selectors.txt")
CLASSES = listed_names("classes.txt")


def unknown(uses: list[Use]) -> list[Use]:
    def known(u: Use) -> bool:
        if u.kind == "class":
            return u.name in CLASSES
        return any(s in SELECTORS for s in u.selectors())
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


# ---- Availability ----------------------------------------------------------

Version = tuple  # (major, minor[, patch])
_SDK_IF = re.compile(r"\s*\(?\s*__MAC_OS_X_VERSION_MAX_ALLOWED\s*>=\s*(\d+)\s*\)?\s*")


def _version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def _sdk_macro_version(n: int) -> Version:
    """140200 -> (14, 2), as __MAC_OS_X_VERSION_MAX_ALLOWED spells versions."""
    return (n // 10000, n // 100 % 100)


def _dotted(v: Version) -> str:
    return ".".join(map(str, v))


@dataclass
class Availability:
    macos: Version | None  # the macOS that introduced it; None: no annotation
    sdk: Version            # the first SDK that declares it
    unavailable: bool = False


def _availability() -> dict[str, Availability]:
    out = {}
    for f in ("availability.txt", "availability-selectors.txt", "availability-newer-sdks.txt"):
        for line in (DATA / f).read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            name, macos, *rest = fields
            assert name not in out, f"{name} is listed twice in tests/data/metal-api"
            unavailable = macos == "unavailable"
            version = None if macos in ("-", "unavailable") else _version(macos)
            sdk = next((_version(r[4:]) for r in rest if r.startswith("sdk=")), version or (0,))
            out[name] = Availability(version, sdk, unavailable)
    return out


def _deployment_target() -> Version:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return _version(settings["tool"]["scikit-build"]["cmake"]["define"]["CMAKE_OSX_DEPLOYMENT_TARGET"])


def _oldest_sdk() -> Version:
    m = re.search(r"#if __MAC_OS_X_VERSION_MAX_ALLOWED < (\d+)\s*\n#error", (METAL_SOURCES / "metal_internal.h").read_text())
    assert m, "metal_internal.h no longer states the oldest SDK the backend builds with"
    return _sdk_macro_version(int(m.group(1)))


AVAILABILITY = _availability()
DEPLOYMENT_TARGET = _deployment_target()
OLDEST_SDK = _oldest_sdk()


def sdk_guards(text: str) -> list[tuple[int, int, Version]]:
    """Line ranges (first, last) inside ``#if __MAC_OS_X_VERSION_MAX_ALLOWED >= N`` blocks, with N."""
    out, stack = [], []  # stack: [version or None, first line of the branch]
    lines = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text).splitlines()
    for n, line in enumerate(lines, 1):
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if not m:
            continue
        directive, condition = m.groups()
        if directive in ("elif", "else", "endif") and stack:
            version, first = stack.pop()
            if version:
                out.append((first, n - 1, version))
        if directive in ("if", "elif"):
            sdk = _SDK_IF.fullmatch(condition)
            stack.append([_sdk_macro_version(int(sdk.group(1))) if sdk else None, n + 1])
        elif directive in ("ifdef", "ifndef", "else"):
            stack.append([None, n + 1])
    return out


def _statement_end(toks: list[Tok], i: int) -> int:
    """Index of the last token of the statement starting at i (a block, or up to its ';')."""
    if toks[i].text == "{":
        return _close(toks, i)
    while toks[i].text != ";":
        i = _close(toks, i) if toks[i].text in "([{" else i
        i += 1
    return i


def runtime_guards(toks: list[Tok]) -> tuple[list[tuple[int, int, Version]], dict[str, Version]]:
    """Token ranges that run only on a macOS of at least some version, with that version:
    the body of ``if (@available(macOS N, *))`` and of a function marked API_AVAILABLE(macos(N));
    and those functions' names, with N (a call of one needs a guard, as a Metal API does)."""
    out, functions = [], {}
    for i, t in enumerate(toks):
        if t.text in ("@available", "__builtin_available") and toks[i - 1].text == "(" and toks[i - 2].text == "if":
            args = toks[i + 2:_close(toks, i + 1)]
            versions = [args[k + 1].text for k in range(len(args) - 1) if args[k].text in ("macOS", "macos")]
            if versions:
                body = _close(toks, i - 1) + 1
                out.append((body, _statement_end(toks, body), _version(versions[0])))
        elif t.text == "API_AVAILABLE" and toks[i + 1].text == "(":
            args = toks[i + 2:_close(toks, i + 1)]
            versions = [args[k + 2].text for k in range(len(args) - 2) if args[k].text == "macos"]
            if not versions:
                continue
            first = i
            while first > 0 and toks[first - 1].text not in (";", "{", "}"):
                first -= 1
            last = _close(toks, i + 1) + 1
            while toks[last].text not in ("{", ";"):
                last = _close(toks, last) + 1 if toks[last].text in "([" else last + 1
            out.append((first, _statement_end(toks, last), _version(versions[0])))
            # The declared name: the last identifier before a '(' at the declaration's top level.
            names = [toks[k].text for k in range(first, i) if toks[k].kind == "id" and toks[k + 1].text == "("]
            if names:
                functions[names[-1]] = _version(versions[0])
    return out, functions


@dataclass
class NameUse:
    name: str
    line: int
    problem: str  # "" when the use is fine
    kind: str = "name"  # "name" (an MTL*/NS* identifier), "selector", or "function" (one marked API_AVAILABLE)


def _problem(a: Availability | None, line: int, tok: int, sdk_ranges, os_ranges, what: str, case: bool = False) -> str:
    """What is wrong with using an API of availability `a` at this line and token, or "".
    A case label needs no runtime guard (clang exempts those too), but its SDK must declare it."""
    if a is None:
        return (f"not in tests/data/metal-api/availability*.txt: add the {what} with the macOS that introduced it "
                "(scripts/metal_availability.py SDK_DIR, or by hand for a newer SDK's)")
    if a.unavailable:
        return "unavailable on macOS"
    if a.sdk > OLDEST_SDK and not any(lo <= line <= hi and v >= a.sdk for lo, hi, v in sdk_ranges):
        return (f"declared only from the macOS {_dotted(a.sdk)} SDK, and the backend builds with the "
                f"{_dotted(OLDEST_SDK)} SDK: use it inside #if __MAC_OS_X_VERSION_MAX_ALLOWED >= "
                f"{a.sdk[0] * 10000 + a.sdk[1] * 100}")
    if a.macos and a.macos > DEPLOYMENT_TARGET and not case and not any(lo <= tok <= hi and v >= a.macos for lo, hi, v in os_ranges):
        return (f"introduced in macOS {_dotted(a.macos)}, after the deployment target "
                f"{_dotted(DEPLOYMENT_TARGET)}: use it inside if (@available(macOS {_dotted(a.macos)}, *)) "
                f"or a function marked API_AVAILABLE(macos({_dotted(a.macos)}))")
    return ""


def availability_uses(text: str) -> list[NameUse]:
    """Every MTL*/NS* identifier, selector and call of a function marked API_AVAILABLE in
    Objective-C++ source, with what is wrong with its use, if anything."""
    toks = tokenize(text)
    (os_ranges, functions), sdk_ranges = runtime_guards(toks), sdk_guards(text)
    out = []
    for i, t in enumerate(toks):
        if t.kind != "id" or (i and toks[i - 1].text in (".", "->", "::")):
            continue
        if _API_NAME.fullmatch(t.text):
            problem = _problem(AVAILABILITY.get(t.text), t.line, i, sdk_ranges, os_ranges, "name",
                               case=toks[i - 1].text == "case")
            out.append(NameUse(t.text, t.line, problem))
        elif t.text in functions and toks[i + 1].text == "(":
            a = Availability(functions[t.text], (0,))
            out.append(NameUse(t.text, t.line, _problem(a, t.line, i, sdk_ranges, os_ranges, "function"), "function"))
    # A macro's body is not tokenized with the code: its names count where the #define stands
    # (an SDK #if around it guards them; where it expands, so whether @available does, is unknown).
    code = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    for m in _DEFINE.finditer(code):
        for name in _API_NAME_IN_TEXT.finditer(m.group("body")):
            line = code.count("\n", 0, m.start("body") + name.start()) + 1
            problem = _problem(AVAILABILITY.get(name.group()), line, -1, sdk_ranges, [], "name", case=True)
            out.append(NameUse(name.group(), line, problem))
    for u in uses_in(text, toks):
        if u.kind == "class":
            continue  # the identifier pass has it
        # A getter may be declared under either name; the lint cannot tell which class receives
        # the message, so the data holds the oldest macOS any class declaring the selector has.
        selector = next((s for s in u.selectors() if s in AVAILABILITY), u.selectors()[0])
        problem = _problem(AVAILABILITY.get(selector), u.line, u.tok, sdk_ranges, os_ranges, "selector")
        out.append(NameUse(selector, u.line, problem, "selector"))
    return out


@pytest.mark.parametrize("path", _metal_files(), ids=lambda p: p.name)
def test_every_name_is_known_and_guarded(path: Path):
    bad = [u for u in availability_uses(path.read_text()) if u.problem]
    assert not bad, "\n".join(f"  {path.name}:{u.line}: {u.name}: {u.problem}" for u in bad)


def test_the_backend_guards_its_newer_names():
    """The lint sees the names and selectors the backend has to guard (one that saw none would pass anything)."""
    uses = [u for p in _metal_files() for u in availability_uses(p.read_text())]
    names = {u.name for u in uses if u.kind != "function"}
    newer_sdk = {n for n in names if AVAILABILITY[n].sdk > OLDEST_SDK}
    newer_os = {n for n in names if (AVAILABILITY[n].macos or (0,)) > DEPLOYMENT_TARGET}
    assert {"MTLPipelineOptionBindingInfo", "MTLMathModeFast", "MTLMathModeSafe", "setMathMode:",
            "setMathFloatingPointFunctions:", "MTLMathFloatingPointFunctionsPrecise"} <= newer_sdk
    assert {"MTLBinding", "MTLBufferBinding", "MTLLanguageVersion3_1", "bindings", "setMathMode:"} <= newer_os
    assert {u.name for u in uses if u.kind == "function"} == {"from_bindings", "enable_logging"}
    assert {"MTLLogStateDescriptor", "MTLLogState", "addLogHandler:", "setLogState:", "setEnableLogging:",
            "MTLLanguageVersion3_2"} <= newer_sdk & newer_os
    assert (10, 9) < DEPLOYMENT_TARGET <= OLDEST_SDK


PLANTED = """
static id<MTLComputePipelineState> build(id<MTLDevice> device, id<MTLFunction> f, MTLDataType t) {
  MTLAutoreleasedComputePipelineReflection reflection = nil;
  bool wide = t == MTLDataTypeBFloat;
  switch (t) { case MTLDataTypeBFloat2: wide = true; break; default: break; }
  if (@available(macOS 13.0, *)) wide = t == MTLDataTypeBFloat3;
  if (@available(macOS 14.0, *)) {
    wide = t == MTLDataTypeBFloat4;
  } else {
    wide = t == MTLDataTypeBFloat;
  }
  return [device newComputePipelineStateWithFunction:f
                                             options:MTLPipelineOptionBindingInfo | MTLPipelineOptionBufferTypeInfo
                                          reflection:&reflection
                                               error:nil];
}
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
constexpr MTLPipelineOption kNew = MTLPipelineOptionBindingInfo;
#else
constexpr MTLPipelineOption kNew = MTLPipelineOptionBindingInfo;
#endif
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 140000
constexpr MTLPipelineOption kTooOld = MTLPipelineOptionBindingInfo;
#endif
static bool bfloat(MTLDataType t) API_AVAILABLE(macos(14.0)) { return t == MTLDataTypeBFloat; }
static const char* spelt(MTLBindingType t) { return t == MTLBindingTypeTextur ? "texture" : "other"; }
static void compile(MTLCompileOptions* options, MTLAutoreleasedComputePipelineReflection reflection) {
  options.mathMode = MTLMathModeFast;
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
  options.mathMode = MTLMathModeSafe;
  if (@available(macOS 15.0, *)) options.mathMode = MTLMathModeSafe;
#endif
  id b = reflection.bindings;
  if (@available(macOS 13.0, *)) b = reflection.bindings;
  bool same = bfloat(MTLDataTypeFloat);
  if (@available(macOS 14.0, *)) same = bfloat(MTLDataTypeFloat);
  id<MTL4CommandQueue> queue = nil;
  [options setFastMathEnabled:YES];
}
#define REFLECT_ALL MTLPipelineOptionBindingInfo | \\
                    MTLPipelineOptionBufferTypeInfo
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
#define REFLECT MTLPipelineOptionBindingInfo
#endif
"""


def test_lint_catches_unguarded_newer_names():
    """A name only newer SDKs declare, or only newer macOS has, is caught unless guarded."""
    bad = {(u.line, u.name, u.problem.split(":")[0].split(",")[0]) for u in availability_uses(PLANTED) if u.problem}
    assert bad == {
        (4, "MTLDataTypeBFloat", "introduced in macOS 14.0"),       # unguarded
        (6, "MTLDataTypeBFloat3", "introduced in macOS 14.0"),      # guarded by too old a version
        (10, "MTLDataTypeBFloat", "introduced in macOS 14.0"),      # the else branch
        (13, "MTLPipelineOptionBindingInfo", "declared only from the macOS 15.0 SDK"),  # the bug, planted
        (20, "MTLPipelineOptionBindingInfo", "declared only from the macOS 15.0 SDK"),  # the #else branch
        (23, "MTLPipelineOptionBindingInfo", "declared only from the macOS 15.0 SDK"),  # too old an SDK
        (26, "MTLBindingType", "introduced in macOS 11.0"),         # a function without API_AVAILABLE
        (26, "MTLBindingTypeTextur", "not in tests/data/metal-api/availability*.txt"),  # misspelt
        (28, "setMathMode:", "declared only from the macOS 15.0 SDK"),    # a newer SDK's property
        (28, "MTLMathModeFast", "declared only from the macOS 15.0 SDK"),
        (30, "setMathMode:", "introduced in macOS 15.0"),                 # SDK-guarded only
        (33, "bindings", "introduced in macOS 13.0"),                     # a newer macOS's property
        (35, "bfloat", "introduced in macOS 14.0"),                       # calls an API_AVAILABLE function
        (37, "MTL4CommandQueue", "not in tests/data/metal-api/availability*.txt"),  # Metal 4's names count
        (40, "MTLPipelineOptionBindingInfo", "declared only from the macOS 15.0 SDK"),  # in a macro's body
    }


# Each: a guard taken out of the real backend (in memory), and the uses the lint must then flag.
_UNGUARDED = [
    ("metal_kernel.mm", "#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000\nconstexpr", "#if 1\nconstexpr",
     {"MTLPipelineOptionBindingInfo"}),
    ("metal_kernel.mm", "} else if (@available(macOS 13.0, *)) {", "} else if (true) {",
     {"from_bindings", "bindings"}),
    ("metal_kernel.mm", " API_AVAILABLE(macos(13.0)) {", " {",
     {"MTLBinding", "MTLBufferBinding", "MTLThreadgroupBinding", "MTLBindingTypeBuffer",
      "MTLBindingTypeThreadgroupMemory", "MTLBindingTypeTexture", "MTLBindingTypeSampler"}),
    ("metal_library.mm", "if (@available(macOS 14.0, *)) options.languageVersion", "options.languageVersion",
     {"MTLLanguageVersion3_1"}),
    ("metal_library.mm", "if (@available(macOS 15.0, *)) {", "if (true) {",
     {"setMathMode:", "setMathFloatingPointFunctions:"}),
    ("metal_library.mm", "if (@available(macOS 15.0, *)) enable_logging", "if (true) enable_logging",
     {"enable_logging"}),
    ("metal_library.mm", ") API_AVAILABLE(macos(15.0)) {", ") {", {"MTLLanguageVersion3_2", "setEnableLogging:"}),
    ("metal_device.mm", "if (@available(macOS 15.0, *)) {", "if (true) {",
     {"MTLLogStateDescriptor", "MTLLogLevelDebug", "MTLLogState", "MTLLogLevel", "setBufferSize:",
      "newLogStateWithDescriptor:error:", "addLogHandler:"}),
    ("metal_dispatch.mm", "if (@available(macOS 15.0, *)) {", "if (true) {",
     {"setLogState:", "MTLCommandBufferDescriptor", "commandBufferWithDescriptor:", "setRetainedReferences:"}),
]


@pytest.mark.parametrize("name, guarded, unguarded, flagged", _UNGUARDED, ids=lambda v: str(v)[:24])
def test_lint_catches_a_guard_taken_out_of_the_backend(name: str, guarded: str, unguarded: str, flagged: set):
    text = (METAL_SOURCES / name).read_text()
    assert text.count(guarded) == 1, f"{name} no longer has {guarded!r}: update this test"
    assert not [u for u in availability_uses(text) if u.problem]
    bad = {u.name for u in availability_uses(text.replace(guarded, unguarded)) if u.problem}
    assert bad == flagged


# ---- What the backend asks Metal for -----------------------------------------
# Settings whose absence compiles, links and runs, but gives other results: only
# a reading of the source can catch them where there is no Mac.


def _code(name: str) -> str:
    """A backend source with comments blanked (lines kept)."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), (METAL_SOURCES / name).read_text())


def _sdk_branches(text: str, start: str) -> tuple[str, str]:
    """The two branches of the ``#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000`` block holding ``start``."""
    m = re.search(r"#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000\n(?P<new>.*?)#else\n(?P<old>.*?)#endif",
                  text[text.index(start) - 200:], re.S)
    assert m, f"no SDK-version #if/#else around {start!r}"
    return m.group("new"), m.group("old")


def test_pipelines_reflect_buffer_types_with_every_sdk():
    """Without MTLPipelineOptionBufferTypeInfo, bufferStructType is nil: no struct parameter has a dtype."""
    text = _code("metal_kernel.mm")
    new, old = _sdk_branches(text, "constexpr MTLPipelineOption kReflectBindings")
    for branch, binding in ((new, "MTLPipelineOptionBindingInfo"), (old, "MTLPipelineOptionArgumentInfo")):
        flags = re.search(r"kReflectBindings\s*=\s*([^;]*);", branch).group(1)
        assert {f.strip() for f in flags.split("|")} == {binding, "MTLPipelineOptionBufferTypeInfo"}
    assert re.search(r"newComputePipelineStateWithFunction:\s*\w+\s*options:\s*kReflectBindings\b", text)


def test_ieee_math_sets_both_math_properties_with_the_macos_15_sdk():
    """mathMode alone leaves mathFloatingPointFunctions at its default, the fast functions."""
    text = _code("metal_library.mm")
    m = re.search(r"#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000\n\s*if \(@available\(macOS 15\.0, \*\)\) \{"
                  r"(?P<body>[^}]*)\} else\s*\n#endif", text)
    assert m, "the macOS 15 path is no longer an SDK-guarded @available block with an else"
    body = m.group("body")
    assert re.search(r"options\.mathMode\s*=\s*fast_math\s*\?\s*MTLMathModeFast\s*:\s*MTLMathModeSafe;", body)
    assert re.search(r"options\.mathFloatingPointFunctions\s*=\s*fast_math\s*\?\s*MTLMathFloatingPointFunctionsFast"
                     r"\s*:\s*MTLMathFloatingPointFunctionsPrecise;", body)
    fallback = text[text.index("} else", text.index("options.mathFloatingPointFunctions")):]
    assert re.match(r"} else\s*#endif\s*\{\s*options\.fastMathEnabled\s*=\s*fast_math;", fallback)
