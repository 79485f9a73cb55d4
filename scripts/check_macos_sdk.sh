#!/usr/bin/env bash
# Builds the compiled module for macOS against a macOS SDK, from any OS.
#
#   scripts/check_macos_sdk.sh SDK_DIR
#
# Every source CMakeLists.txt puts into the module (the Objective-C++ Metal
# backend included) is compiled for arm64 and x86_64 by the clang of the
# ziglang wheel, at the deployment target pyproject.toml sets, with the
# warnings that catch APIs too new for it (-Wunguarded-availability) or
# deprecated in it. Each architecture's objects are then linked, against the
# SDK's .tbd stubs of the frameworks CMakeLists.txt links, into a Mach-O
# module (zig's linker makes a shared library where CMake makes a bundle; the
# symbols resolve alike). Only the Python C API may stay unresolved (the
# interpreter provides it: -undefined dynamic_lookup), and, where llvm-nm is
# installed, the module may export no symbol but PyInit__core (and the weak C++
# type_info that pybind11 and libc++ make default-visible on purpose).
# Prints each diagnostic and a summary; exits 1 on any error, warning or link problem.
#
# SDK_DIR is a MacOSX.sdk (System/Library/Frameworks, usr/include, usr/lib) or
# the same content laid out as Frameworks/, include/, lib/ (as the
# hexops/xcode-frameworks repository has it; docs/architecture.md tells how to
# get one). $PYTHON (default python3) must have ziglang and pybind11; its own
# headers stand in for the Mac Python's. $JOBS compilers run at once (default 2).
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 SDK_DIR  (a macOS SDK directory; see docs/architecture.md)" >&2
  exit 2
fi
SDK=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}

if ! "$PYTHON" -c "import ziglang, pybind11" 2>/dev/null; then
  echo "error: $PYTHON lacks ziglang or pybind11: $PYTHON -m pip install ziglang pybind11" >&2
  exit 2
fi
ZIG_DIR=$("$PYTHON" -c "import os, ziglang; print(os.path.dirname(ziglang.__file__))")
ZIG="$ZIG_DIR/zig"
PY_INCLUDE=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
PYBIND11_INCLUDE=$("$PYTHON" -c "import pybind11; print(pybind11.get_include())")

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SYSROOT=$("$ROOT/scripts/macos_sysroot.sh" "$SDK" "$WORK")

TARGET=$(sed -n 's/^ *CMAKE_OSX_DEPLOYMENT_TARGET *= *"\([0-9.]*\)".*/\1/p' "$ROOT/pyproject.toml")
if [ -z "$TARGET" ]; then
  echo "error: pyproject.toml sets no CMAKE_OSX_DEPLOYMENT_TARGET" >&2
  exit 2
fi
SOURCES=$(grep -oE 'src/[A-Za-z0-9_/]+\.(cpp|mm)' "$ROOT/CMakeLists.txt")
FRAMEWORKS=$(grep -oE '"-framework [A-Za-z]+"' "$ROOT/CMakeLists.txt" | tr -d '"')

SDK_VERSION=$(printf '#include <Availability.h>\nMK_SDK __MAC_OS_X_VERSION_MAX_ALLOWED\n' |
  "$ZIG" clang -target arm64-apple-macos11.0 -isysroot "$SYSROOT" -resource-dir "$ZIG_DIR/lib" -E -P -x c - |
  sed -n 's/^MK_SDK //p')
echo "SDK $SDK (__MAC_OS_X_VERSION_MAX_ALLOWED $SDK_VERSION); deployment target macOS $TARGET"
echo "compiler: $("$ZIG" clang --version | head -1) (ziglang $("$ZIG" version))"

# What CMake passes (CMakeLists.txt, pybind11_add_module, Release), plus the warnings.
CXXFLAGS=(-isysroot "$SYSROOT" -resource-dir "$ZIG_DIR/lib" -std=gnu++17 -O2 -DNDEBUG
  -fvisibility=hidden -fvisibility-inlines-hidden -DMETALKIT_HAVE_METAL
  -I"$ROOT/src" -I"$ROOT/python/metalkit/include" -isystem "$PY_INCLUDE" -isystem "$PYBIND11_INCLUDE"
  -Wall -Wextra -Wunguarded-availability -Wunguarded-availability-new -Wdeprecated-declarations)
export ZIG ROOT WORK TARGET
export CXXFLAGS_LINE
CXXFLAGS_LINE=$(printf '%q ' "${CXXFLAGS[@]}")

# One compile: arch and source in, object and log (the compiler's output) out.
compile_one() {
  local arch=$1 src=$2 lang flags
  local out="$WORK/$arch/$(echo "$src" | tr / _)"
  case $src in
    *.mm) lang=(-x objective-c++ -fobjc-arc) ;;
    *) lang=(-x c++) ;;
  esac
  eval "flags=($CXXFLAGS_LINE)"
  "$ZIG" clang -target "$arch-apple-macos$TARGET" "${lang[@]}" "${flags[@]}" \
    -c "$ROOT/$src" -o "$out.o" >"$out.log" 2>&1 || touch "$out.failed"
}
export -f compile_one

total_errors=0 total_warnings=0 link_problems=0
for arch in arm64 x86_64; do
  mkdir -p "$WORK/$arch"
  for src in $SOURCES; do echo "$arch $src"; done | xargs -P "$JOBS" -n 2 bash -c 'compile_one "$0" "$1"'
  errors=0 warnings=0 files=0
  for src in $SOURCES; do
    log="$WORK/$arch/$(echo "$src" | tr / _).log"
    files=$((files + 1))
    if [ -s "$log" ]; then
      echo "== $arch $src"
      sed "s|$ROOT/||g" "$log"
    fi
    found=$(grep -cE '(^|: )(fatal )?error:' "$log" || true)
    # A compiler that failed without saying why still counts as one error.
    [ "$found" -gt 0 ] || [ ! -e "${log%.log}.failed" ] || found=1
    errors=$((errors + found))
    warnings=$((warnings + $(grep -c ': warning:' "$log" || true)))
  done
  echo "compile $arch: $files files, $errors errors, $warnings warnings"
  total_errors=$((total_errors + errors)) total_warnings=$((total_warnings + warnings))
  if [ "$errors" -gt 0 ]; then
    echo "link $arch: not tried (compile errors)"
    link_problems=$((link_problems + 1))
    continue
  fi

  # Link. zig's triples name arm64 aarch64, and it links arm64 for macOS 11 at the least.
  link_target="${arch/arm64/aarch64}-macos.$TARGET"
  [ "$arch" = arm64 ] && link_target="aarch64-macos.$(printf '%s\n' "$TARGET" 11.0 | sort -V | tail -1)"
  LINK=(-target "$link_target" -shared -O2 "$WORK/$arch"/*.o
    -F"$SYSROOT/System/Library/Frameworks" $FRAMEWORKS -L"$SYSROOT/usr/lib" -lobjc)
  if [ -e "$SYSROOT/usr/lib/libc++.tbd" ]; then
    LINK+=(-nostdlib++ -lc++)
  else
    echo "note: the SDK has no usr/lib/libc++.tbd: C++ runtime symbols resolve against zig's libc++"
  fi
  # First without dynamic lookup, so the linker names every unresolved symbol.
  "$ZIG" c++ "${LINK[@]}" -o "$WORK/$arch/unresolved.so" >"$WORK/$arch/link.log" 2>&1 || true
  python_api=$(grep -cE '^error: undefined symbol: __?Py' "$WORK/$arch/link.log" || true)
  others=$(grep -E '^error: ' "$WORK/$arch/link.log" | grep -vE '^error: undefined symbol: __?Py' || true)
  if [ -n "$others" ]; then
    echo "== link $arch"
    echo "$others"
    link_problems=$((link_problems + 1))
  fi
  module="$WORK/$arch/_core.so"
  if "$ZIG" c++ "${LINK[@]}" -Wl,-undefined,dynamic_lookup -o "$module" >"$WORK/$arch/link2.log" 2>&1 && [ -s "$module" ]; then
    echo "link $arch: Mach-O module of $(wc -c <"$module") bytes; unresolved: $python_api Python C API" \
      "symbols (dynamic lookup), $(printf '%s' "$others" | grep -c . || true) others"
  else
    echo "== link $arch"
    cat "$WORK/$arch/link2.log"
    echo "link $arch: failed"
    link_problems=$((link_problems + 1))
    continue
  fi
  if command -v llvm-nm >/dev/null; then
    # A Python module exports only its init function. ___dso_handle and __mh_*_header are
    # the linker's own; operator new and delete (__Znw*, __Zna*, __Zdl*, __Zda*) come from
    # zig's libc++, linked in statically when the SDK has no libc++.tbd (a Mac's build takes
    # them from libc++.dylib). Weak C++ type_info (__ZTI*, __ZTS*) of types that are
    # default-visible by design stays too (pybind11's exceptions, which must be caught across
    # modules, and libc++ templates; x86_64 only: the arm64 ABI keeps such type_info hidden),
    # unless it names a metalkit type (mk::). Anything else is a symbol that escaped
    # -fvisibility=hidden.
    allowed='^___dso_handle$|^__mh_[a-z]+_header$|^__ZT[IS]'
    [ -e "$SYSROOT/usr/lib/libc++.tbd" ] || allowed="$allowed|^__Z(nw|na|dl|da)"
    llvm-nm -g --defined-only -j "$module" >"$WORK/$arch/exports.txt"
    exported=$( (grep -vE "$allowed" "$WORK/$arch/exports.txt"; grep -E '^__ZT[IS]' "$WORK/$arch/exports.txt" |
      grep -E '[^0-9]2mk[0-9]' || true) | tr '\n' ' ')
    rtti=$(grep -cE '^__ZT[IS]' "$WORK/$arch/exports.txt" || true)
    if [ "$exported" = "_PyInit__core " ]; then
      echo "exports $arch: _PyInit__core only, and $rtti weak type_info symbols of pybind11 and libc++ types"
    else
      echo "exports $arch: $exported(only _PyInit__core may be exported)"
      link_problems=$((link_problems + 1))
    fi
  else
    echo "exports $arch: not checked (no llvm-nm on the PATH)"
  fi
done
echo "summary: $total_errors errors, $total_warnings warnings, $link_problems link problems (arm64 and x86_64)"
[ $((total_errors + total_warnings + link_problems)) -eq 0 ]
