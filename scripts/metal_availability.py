"""Writes the macOS availability of the Metal and Foundation APIs, for the selector lint.

    python scripts/metal_availability.py SDK_DIR

clang (the ziglang wheel's) parses the SDK's Metal.h and Foundation.h and
dumps the declarations; each one's version is the macOS its API_AVAILABLE
annotation gives. Two files in tests/data/metal-api are written:

- availability.txt: every MTL*/NS* identifier in src/metal and every constant
  of the enums among them (so the lint knows the neighbours of what the
  backend uses), an enum constant without an annotation taking its enum's.
- availability-selectors.txt: every selector of the lint's lists
  (metal-selectors.txt, foundation*-selectors.txt) that the SDK declares, with
  the oldest macOS any Metal or Foundation class or protocol declaring it has
  it on (a method without an annotation takes its class's or protocol's): the
  lint cannot tell which class receives a message, so it flags a selector
  only when every declaration of it is newer than the deployment target.

A name the backend uses that the SDK lacks is reported on stderr (a selector,
by the lint): it belongs in availability-newer-sdks.txt, by hand, from a newer
SDK or Apple's documentation.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"\b(?:MTL|NS)[A-Z0-9]\w*")  # MTL4...: Metal 4's names
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|@?"(?:\\.|[^"\\\n])*"', re.S)
# "AvailabilityAttr 0x... <range> [Inherited] macos 10.11 13.0 0 [Unavailable] ..."
_AVAILABILITY = re.compile(r"AvailabilityAttr 0x\w+ <[^>]*> (?:Inherited )?macos ([\d.]+) [\d.]+ [\d.]+( Unavailable)?")
_CONSTANT = re.compile(r"EnumConstantDecl 0x\w+ .* (\w+) '[^']*'(?::'[^']*')?$")
# "|-ObjCMethodDecl 0x... <...> col:37 implicit - GPUStartTime 'CFTimeInterval':'double'"
_METHOD = re.compile(r"ObjCMethodDecl 0x\w+ .*? [-+] (\S+) '")
_CONTAINER = ("ObjCInterfaceDecl", "ObjCProtocolDecl", "ObjCCategoryDecl")
DATA = ROOT / "tests" / "data" / "metal-api"


def names_used() -> set[str]:
    out = set()
    for path in sorted((ROOT / "src" / "metal").iterdir()):
        if path.suffix in (".mm", ".h"):
            out |= set(_NAME.findall(_COMMENT_OR_STRING.sub(" ", path.read_text())))
    return out


def ast_dump(zig: Path, sysroot: str, name_filter: str) -> str:
    """clang's AST dump of the declarations whose name contains name_filter."""
    source = "#import <Foundation/Foundation.h>\n#import <Metal/Metal.h>\n"
    cmd = [str(zig), "clang", "-target", "arm64-apple-macos11.0", "-isysroot", sysroot,
           "-resource-dir", str(zig.parent / "lib"), "-x", "objective-c++", "-fobjc-arc", "-fsyntax-only",
           "-Xclang", "-ast-dump", "-Xclang", "-ast-dump-filter", "-Xclang", name_filter, "-"]
    run = subprocess.run(cmd, input=source, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"clang failed on the SDK's headers:\n{run.stderr}")
    return run.stdout


def _depth(line: str) -> int:
    """Tree depth of an AST dump line: 0 for the declaration, 1 for its children, ..."""
    m = re.match(r"[| `]*?[|`]-", line)
    return (m.end() // 2) if m else 0


def _member_availability(lines: list[str], i: int) -> list:
    """The availability attributes on the lines continuing the member declared at lines[i]."""
    attrs = []
    for child in lines[i + 1:]:
        if _depth(child) <= 1:
            break
        if _depth(child) == 2 and _AVAILABILITY.search(child):
            attrs.append(_AVAILABILITY.search(child))
    return attrs


def parse(dump: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(name -> macOS version or "-" or "unavailable", enum -> its constants) from an AST dump."""
    versions: dict[str, str] = {}
    enums: dict[str, list[str]] = {}

    def record(name: str, attrs: list[re.Match]) -> None:
        for m in attrs:
            versions[name] = "unavailable" if m.group(2) else m.group(1)
        versions.setdefault(name, "-")

    for block in dump.split("Dumping ")[1:]:
        header, *lines = block.splitlines()
        name, decl = header.rstrip(":"), lines[0].split(" ", 1)[0] if lines else ""
        own = [m for line in lines if _depth(line) == 1 for m in [_AVAILABILITY.search(line)] if m]
        if versions.get(name, "-") == "-":  # a forward declaration carries no annotation
            record(name, own)
        if decl != "EnumDecl":
            continue
        inherited = versions[name]
        for i, line in enumerate(lines):
            m = _CONSTANT.search(line) if _depth(line) == 1 else None
            if not m:
                continue
            constant = m.group(1)
            enums.setdefault(name, [])
            if constant not in enums[name]:
                enums[name].append(constant)
            record(constant, _member_availability(lines, i))
            if versions[constant] == "-":
                versions[constant] = inherited
    return versions, enums


def selector_versions(dumps: list[str], containers: dict[str, str]) -> dict[str, str]:
    """selector -> the oldest macOS any declaration of it in the dumps has ("-": no annotation).

    A method's own annotation counts, else its class's or protocol's (its block's
    own, else containers: name -> version, from parse()); declarations
    unavailable on macOS are left out, and a selector that only has those is
    "unavailable"."""
    def version(attrs: list[re.Match], fallback: str) -> str:
        return ("unavailable" if attrs[-1].group(2) else attrs[-1].group(1)) if attrs else fallback

    found: dict[str, list[str]] = {}
    for block in (b for dump in dumps for b in dump.split("Dumping ")[1:]):
        header, *lines = block.splitlines()
        decl = lines[0].split(" ", 1)[0] if lines else ""
        if decl == "ObjCMethodDecl" and "::" in header:  # a member dumped on its own
            container, selector = header[:-1].split("::", 1)  # "Dumping MTLDevice::newCommandQueue:"
            own = [m for line in lines if _depth(line) == 1 for m in [_AVAILABILITY.search(line)] if m]
            found.setdefault(selector, []).append(version(own, containers.get(container, "-")))
        elif decl in _CONTAINER:  # its methods (properties' getters and setters among them) are its children
            own = [m for line in lines if _depth(line) == 1 for m in [_AVAILABILITY.search(line)] if m]
            outer = version(own, containers.get(header[:-1], "-"))
            for i, line in enumerate(lines):
                m = _METHOD.search(line) if _depth(line) == 1 else None
                if not m:
                    continue
                found.setdefault(m.group(1), []).append(version(_member_availability(lines, i), outer))
    out = {}
    for selector, versions in found.items():
        available = [v for v in versions if v != "unavailable"]
        if not available:
            out[selector] = "unavailable"
        elif "-" in available:
            out[selector] = "-"
        else:
            out[selector] = min(available, key=lambda v: tuple(int(p) for p in v.split(".")))
    return out


def listed_names(*files: str) -> set[str]:
    """The names tests/data/metal-api/FILES list, one a line ("#" starts a comment); the selector
    lint in the tests reads the lists through this too."""
    out = set()
    for f in files:
        for line in (DATA / f).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out.add(line)
    return out


def sdk_version(zig: Path, sysroot: str) -> str:
    source = "#include <Availability.h>\nMK_SDK __MAC_OS_X_VERSION_MAX_ALLOWED\n"
    run = subprocess.run([str(zig), "clang", "-target", "arm64-apple-macos11.0", "-isysroot", sysroot,
                          "-resource-dir", str(zig.parent / "lib"), "-E", "-P", "-x", "c", "-"],
                         input=source, capture_output=True, text=True, check=True)
    n = int(re.search(r"MK_SDK (\d+)", run.stdout).group(1))
    return f"{n // 10000}.{n // 100 % 100}" + (f".{n % 100}" if n % 100 else "")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import ziglang

    zig = Path(ziglang.__file__).parent / ("zig.exe" if os.name == "nt" else "zig")
    with tempfile.TemporaryDirectory() as scratch:
        sysroot = subprocess.run([str(ROOT / "scripts" / "macos_sysroot.sh"), sys.argv[1], scratch],
                                 capture_output=True, text=True, check=True).stdout.strip()
        used = names_used()
        metal = ast_dump(zig, sysroot, "MTL")
        versions, enums = parse(metal)
        foundation = ast_dump(zig, sysroot, "NS")  # all of Foundation, NSObject's alloc and init too
        for name in sorted(n for n in used if n.startswith("NS")):
            found, _ = parse(ast_dump(zig, sysroot, name))
            if name in found:
                versions[name] = found[name]
        containers = {**parse(foundation)[0], **versions}
        selectors = selector_versions([metal, foundation], containers)
        version = sdk_version(zig, sysroot)

    wanted = set(used)
    for enum, constants in enums.items():
        if enum in used or used & set(constants):
            wanted |= {enum, *constants}
    missing = sorted(n for n in wanted if n not in versions)
    if missing:
        print(f"not in this SDK (add them to availability-newer-sdks.txt): {' '.join(missing)}", file=sys.stderr)
    header = f"# Generated by scripts/metal_availability.py from the macOS {version} SDK's headers.\n"
    (DATA / "availability.txt").write_text(
        header + "# name, and the macOS that introduced it (- : no availability annotation, as old as its framework)\n"
        + "".join(f"{name} {versions[name]}\n" for name in sorted(n for n in wanted if n in versions and _NAME.fullmatch(n))))
    listed = listed_names("metal-selectors.txt", "foundation-selectors.txt", "foundation-extra-selectors.txt")
    (DATA / "availability-selectors.txt").write_text(
        header + "# selector, and the oldest macOS a Metal or Foundation class or protocol declaring it has it on\n"
        "# (- : no annotation on the method nor its class, as old as its framework)\n"
        + "".join(f"{sel} {selectors[sel]}\n" for sel in sorted(listed & selectors.keys())))


if __name__ == "__main__":
    main()
