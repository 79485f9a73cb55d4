#!/usr/bin/env bash
# Prints the directory to pass to clang as -isysroot for a macOS SDK.
#
#   scripts/macos_sysroot.sh SDK_DIR SCRATCH_DIR
#
# A MacOSX.sdk (System/Library/Frameworks, usr/include, usr/lib) is its own
# sysroot. The same content laid out flat as Frameworks/, include/, lib/ (the
# hexops/xcode-frameworks repository) is given that shape with symbolic links
# made in SCRATCH_DIR/sysroot.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SDK_DIR SCRATCH_DIR" >&2; exit 2; }
sdk=$(cd "$1" && pwd)
if [ -d "$sdk/System/Library/Frameworks/Metal.framework" ]; then
  echo "$sdk"
elif [ -d "$sdk/Frameworks/Metal.framework" ] && [ -d "$sdk/include" ]; then
  root="$2/sysroot"
  mkdir -p "$root/usr" "$root/System/Library"
  ln -sfn "$sdk/include" "$root/usr/include"
  ln -sfn "$sdk/lib" "$root/usr/lib"
  ln -sfn "$sdk/Frameworks" "$root/System/Library/Frameworks"
  echo "$root"
else
  echo "error: $sdk holds no Metal.framework (under System/Library/Frameworks or Frameworks)" >&2
  exit 2
fi
