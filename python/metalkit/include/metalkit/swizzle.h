// Preprocessor generation of the 2-, 3- and 4-component swizzle properties
// (xy, zyx, rgba, ...). __MK_SWIZZLES(D) calls D(K, xyzw_name, rgba_name)
// once per component combination (4^2 + 4^3 + 4^4 = 336 calls); the class
// template defines a getter/setter pair per call and exposes both spellings
// as __declspec(property) members sharing those functions.
// Single components (x, r, ...) are real union members, not properties.
#pragma once
#pragma clang system_header
#include "config.h"

#define __MK_X_0 x
#define __MK_X_1 y
#define __MK_X_2 z
#define __MK_X_3 w
#define __MK_C_0 r
#define __MK_C_1 g
#define __MK_C_2 b
#define __MK_C_3 a

// Arguments are macro-expanded before D sees them (D pastes with ##).
#define __MK_SW_CALL(D, ...) D(__VA_ARGS__)
#define __MK_SW_N2(P, a, b) __MK_CAT(P##_##a, P##_##b)
#define __MK_SW_N3(P, a, b, c) __MK_CAT(__MK_SW_N2(P, a, b), P##_##c)
#define __MK_SW_N4(P, a, b, c, d) __MK_CAT(__MK_SW_N3(P, a, b, c), P##_##d)
#define __MK_SW_2(D, a, b) __MK_SW_CALL(D, 2, __MK_SW_N2(__MK_X, a, b), __MK_SW_N2(__MK_C, a, b))
#define __MK_SW_3(D, a, b, c) __MK_SW_CALL(D, 3, __MK_SW_N3(__MK_X, a, b, c), __MK_SW_N3(__MK_C, a, b, c))
#define __MK_SW_4(D, a, b, c, d) __MK_SW_CALL(D, 4, __MK_SW_N4(__MK_X, a, b, c, d), __MK_SW_N4(__MK_C, a, b, c, d))

// One loop macro per nesting level (a macro cannot expand inside itself).
#define __MK_SW_LA(M, ...) M(__VA_ARGS__, 0) M(__VA_ARGS__, 1) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3)
#define __MK_SW_LB(M, ...) M(__VA_ARGS__, 0) M(__VA_ARGS__, 1) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3)
#define __MK_SW_LC(M, ...) M(__VA_ARGS__, 0) M(__VA_ARGS__, 1) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3)
#define __MK_SW_LD(M, ...) M(__VA_ARGS__, 0) M(__VA_ARGS__, 1) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3)

#define __MK_SW2_A(D, a) __MK_SW_LB(__MK_SW_2, D, a)
#define __MK_SW3_B(D, a, b) __MK_SW_LC(__MK_SW_3, D, a, b)
#define __MK_SW3_A(D, a) __MK_SW_LB(__MK_SW3_B, D, a)
#define __MK_SW4_C(D, a, b, c) __MK_SW_LD(__MK_SW_4, D, a, b, c)
#define __MK_SW4_B(D, a, b) __MK_SW_LC(__MK_SW4_C, D, a, b)
#define __MK_SW4_A(D, a) __MK_SW_LB(__MK_SW4_B, D, a)

#define __MK_SWIZZLES(D)                                                       \
  __MK_SW_LA(__MK_SW2_A, D) __MK_SW_LA(__MK_SW3_A, D) __MK_SW_LA(__MK_SW4_A, D)
