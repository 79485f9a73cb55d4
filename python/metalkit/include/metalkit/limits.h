// metal::numeric_limits for MSL scalar types.
#pragma once
#pragma clang system_header
#include "config.h"
#include "scalar.h"

namespace metal {
enum float_round_style {
  round_indeterminate = -1,
  round_toward_zero = 0,
  round_to_nearest = 1,
  round_toward_infinity = 2,
  round_toward_neg_infinity = 3
};
enum float_denorm_style { denorm_indeterminate = -1, denorm_absent = 0, denorm_present = 1 };

template <class T> struct numeric_limits {
  static constexpr bool is_specialized = false;
  static constexpr T min() { return T(); }
  static constexpr T max() { return T(); }
  static constexpr T lowest() { return T(); }
  static constexpr T epsilon() { return T(); }
  static constexpr T round_error() { return T(); }
  static constexpr T infinity() { return T(); }
  static constexpr T quiet_NaN() { return T(); }
  static constexpr T signaling_NaN() { return T(); }
  static constexpr T denorm_min() { return T(); }
  static constexpr int digits = 0, digits10 = 0, max_digits10 = 0, radix = 0;
  static constexpr int min_exponent = 0, min_exponent10 = 0, max_exponent = 0, max_exponent10 = 0;
  static constexpr bool is_signed = false, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = false, has_quiet_NaN = false, has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_absent;
  static constexpr bool has_denorm_loss = false, is_iec559 = false, is_bounded = false, is_modulo = false;
  static constexpr bool traps = false, tinyness_before = false;
  static constexpr float_round_style round_style = round_toward_zero;
};
template <class T> struct numeric_limits<const T> : numeric_limits<T> {};
template <class T> struct numeric_limits<volatile T> : numeric_limits<T> {};
template <class T> struct numeric_limits<const volatile T> : numeric_limits<T> {};

namespace __mk {
template <class T, T Lo, T Hi, int Digits, int Digits10> struct int_limits {
  static constexpr bool is_specialized = true;
  static constexpr T min() { return Lo; }
  static constexpr T max() { return Hi; }
  static constexpr T lowest() { return Lo; }
  static constexpr T epsilon() { return 0; }
  static constexpr T round_error() { return 0; }
  static constexpr T infinity() { return 0; }
  static constexpr T quiet_NaN() { return 0; }
  static constexpr T signaling_NaN() { return 0; }
  static constexpr T denorm_min() { return 0; }
  static constexpr int digits = Digits, digits10 = Digits10, max_digits10 = 0, radix = 2;
  static constexpr int min_exponent = 0, min_exponent10 = 0, max_exponent = 0, max_exponent10 = 0;
  static constexpr bool is_signed = Lo != 0, is_integer = true, is_exact = true;
  static constexpr bool has_infinity = false, has_quiet_NaN = false, has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_absent;
  static constexpr bool has_denorm_loss = false, is_iec559 = false, is_bounded = true;
  static constexpr bool is_modulo = !is_signed && !__is_same(T, bool);
  static constexpr bool traps = false, tinyness_before = false;
  static constexpr float_round_style round_style = round_toward_zero;
};
// Exact power of two, usable in constant expressions (ldexp is not).
__MK_CF float pow2(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}
// Floating limits computed in float (exact for half/bfloat).
template <class T, int Dig, int Dig10, int MaxDig10, int MinExp, int MinExp10, int MaxExp, int MaxExp10>
struct fp_limits {
  static constexpr bool is_specialized = true;
  static constexpr int digits = Dig, digits10 = Dig10, max_digits10 = MaxDig10, radix = 2;
  static constexpr int min_exponent = MinExp, min_exponent10 = MinExp10;
  static constexpr int max_exponent = MaxExp, max_exponent10 = MaxExp10;
  static constexpr bool is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = true, has_quiet_NaN = true, has_signaling_NaN = true;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false, is_iec559 = true, is_bounded = true, is_modulo = false;
  static constexpr bool traps = false, tinyness_before = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr T min() { return (T)pow2(MinExp - 1); }
  static constexpr T lowest() { return -max(); }
  static constexpr T max() { return (T)((2.0f - pow2(1 - Dig)) * pow2(MaxExp - 1)); }
  static constexpr T epsilon() { return (T)pow2(1 - Dig); }
  static constexpr T round_error() { return (T)0.5f; }
  static constexpr T infinity() { return (T)__builtin_inff(); }
  static constexpr T quiet_NaN() { return (T)__builtin_nanf(""); }
  static constexpr T signaling_NaN() { return __builtin_bit_cast(T, snan_bits()); }
  static constexpr T denorm_min() { return (T)pow2(MinExp - Dig); }

private:
  // Exponent all ones, top mantissa bit clear, lowest bit set.
  static constexpr auto snan_bits() {
    if constexpr (sizeof(T) == 4) return 0x7fa00000u;
    else if constexpr (Dig == 11) return (unsigned short)0x7d00;
    else return (unsigned short)0x7fa0;
  }
};
} // namespace __mk

#define __MK_IL(T, lo, hi, d, d10)                                             \
  template <> struct numeric_limits<T> : __mk::int_limits<T, lo, hi, d, d10> {};
__MK_IL(bool, false, true, 1, 0)
__MK_IL(char, -128, 127, 7, 2)
__MK_IL(signed char, -128, 127, 7, 2)
__MK_IL(unsigned char, 0, 255, 8, 2)
__MK_IL(short, -32768, 32767, 15, 4)
__MK_IL(unsigned short, 0, 65535, 16, 4)
__MK_IL(int, -2147483647 - 1, 2147483647, 31, 9)
__MK_IL(unsigned int, 0, 0xffffffffu, 32, 9)
__MK_IL(long, -0x7fffffffffffffffL - 1, 0x7fffffffffffffffL, 63, 18)
__MK_IL(unsigned long, 0, 0xffffffffffffffffUL, 64, 19)
__MK_IL(long long, -0x7fffffffffffffffLL - 1, 0x7fffffffffffffffLL, 63, 18)
__MK_IL(unsigned long long, 0, 0xffffffffffffffffULL, 64, 19)
#undef __MK_IL
template <> struct numeric_limits<float> : __mk::fp_limits<float, 24, 6, 9, -125, -37, 128, 38> {};
template <> struct numeric_limits<half> : __mk::fp_limits<half, 11, 3, 5, -13, -4, 16, 4> {};
template <> struct numeric_limits<bfloat> : __mk::fp_limits<bfloat, 8, 2, 4, -125, -37, 128, 38> {};
} // namespace metal
