// Shared macros for metalkit's MSL standard library emulation.
// These headers are compiled as C++17 by clang (no libc/libstdc++), so every
// facility is written with compiler builtins.
#pragma once
#pragma clang system_header

// Apple's headers expose METAL_FUNC and user kernels use it for helpers.
#ifndef METAL_FUNC
#define METAL_FUNC inline __attribute__((__always_inline__))
#endif

// Internal: force-inline so -O2 sees through the thin wrappers cheaply.
#define __MK_F inline __attribute__((__always_inline__, __nodebug__))
// Same, usable in constant expressions.
#define __MK_CF constexpr __attribute__((__always_inline__, __nodebug__))

#define __MK_CAT_(a, b) a##b
#define __MK_CAT(a, b) __MK_CAT_(a, b)
