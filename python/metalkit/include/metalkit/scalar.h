// MSL scalar types and predefined constants/macros.
#pragma once
#pragma clang system_header
#include "config.h"

// half rounds after every operation thanks to -ffloat16-excess-precision=none.
typedef _Float16 half;
typedef __bf16 bfloat;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong; // MSL long is 64-bit, as on LP64 hosts
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef char int8_t; // MSL char is signed; int8_t and char share vector types
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;

static_assert(sizeof(long) == 8 && (char)-1 < 0, "metalkit needs an LP64 target with signed char");

// Narrowing to bfloat is a libcall on CPUs without bf16 instructions, and some compiler
// runtimes (zig's) lack it. Weak, so a runtime that has them wins; round to nearest even.
extern "C" __attribute__((weak, visibility("hidden"))) __bf16 __truncsfbf2(float f) {
  unsigned u = __builtin_bit_cast(unsigned, f);
  unsigned short r = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u) // quiet NaN
                                                     : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return __builtin_bit_cast(__bf16, r);
}
// double -> float rounded to odd keeps the one rounding to bfloat exact (no double rounding).
extern "C" __attribute__((weak, visibility("hidden"))) __bf16 __truncdfbf2(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    unsigned u = __builtin_bit_cast(unsigned, f);
    if (__builtin_fabs((double)f) > __builtin_fabs(d)) --u; // rounded away from zero: truncate
    f = __builtin_bit_cast(float, u | 1u);
  }
  return __truncsfbf2(f);
}

// MSL half literal suffix (1.0h). (bfloat's "bf" suffix cannot be a C++
// user-defined literal: clang lexes it as a malformed bf16 suffix.)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wuser-defined-literals"
constexpr half operator""h(long double x) { return (half)x; }
constexpr half operator""H(long double x) { return (half)x; }
#pragma clang diagnostic pop

namespace metal {
using ::bfloat;
using ::half;
using ::int16_t;
using ::int32_t;
using ::int64_t;
using ::int8_t;
using ::intptr_t;
using ::ptrdiff_t;
using ::size_t;
using ::uchar;
using ::uint;
using ::uint16_t;
using ::uint32_t;
using ::uint64_t;
using ::uint8_t;
using ::uintptr_t;
using ::ulong;
using ::ushort;
} // namespace metal

#define MAXFLOAT 0x1.fffffep+127f
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_DIG 6
#define FLT_MANT_DIG 24
#define FLT_MAX_10_EXP 38
#define FLT_MAX_EXP 128
#define FLT_MIN_10_EXP (-37)
#define FLT_MIN_EXP (-125)
#define FLT_RADIX 2
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define FLT_EPSILON 0x1p-23f

#define MAXHALF ((half)0x1.ffcp+15f)
#define HUGE_VALH ((half)__builtin_inff())
#define HALF_DIG 3
#define HALF_MANT_DIG 11
#define HALF_MAX_10_EXP 4
#define HALF_MAX_EXP 16
#define HALF_MIN_10_EXP (-4)
#define HALF_MIN_EXP (-13)
#define HALF_RADIX 2
#define HALF_MAX ((half)0x1.ffcp+15f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)

#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f

// Half constants: the nearest half to each value (exact in float).
#define M_E_H ((half)2.71875f)
#define M_LOG2E_H ((half)1.4423828125f)
#define M_LOG10E_H ((half)0.434326171875f)
#define M_LN2_H ((half)0.693359375f)
#define M_LN10_H ((half)2.302734375f)
#define M_PI_H ((half)3.140625f)
#define M_PI_2_H ((half)1.5703125f)
#define M_PI_4_H ((half)0.78515625f)
#define M_1_PI_H ((half)0.318359375f)
#define M_2_PI_H ((half)0.63671875f)
#define M_2_SQRTPI_H ((half)1.1279296875f)
#define M_SQRT2_H ((half)1.4140625f)
#define M_SQRT1_2_H ((half)0.70703125f)

#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define CHAR_MAX SCHAR_MAX
#define CHAR_MIN SCHAR_MIN
#define USHRT_MAX 65535
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define UINT_MAX 0xffffffffU
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define ULONG_MAX 0xffffffffffffffffUL
#define LONG_MAX 0x7fffffffffffffffL
#define LONG_MIN (-0x7fffffffffffffffL - 1)
