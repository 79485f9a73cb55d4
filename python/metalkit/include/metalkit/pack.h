// MSL pack/unpack functions (<metal_pack>) for normalized integer formats.
// Declared as templates with a defaulted parameter only so that vec types
// are instantiated when a function is used, not on every include.
#pragma once
#pragma clang system_header
#include "vec.h"

namespace metal {
namespace __mk {
// unorm/snorm <-> float following MSL's normalized conversion rules
// (round to nearest even when packing; snorm clamps -2^(n-1) to -1).
__MK_F float unorm_f(uint v, int bits) { return (float)v / (float)((1u << bits) - 1); }
__MK_F float snorm_f(uint v, int bits) {
  int s = (int)(v << (32 - bits)) >> (32 - bits);
  return __builtin_fmaxf(-1.0f, (float)s / (float)((1 << (bits - 1)) - 1));
}
__MK_F uint f_unorm(float f, int bits) {
  f = __builtin_fminf(__builtin_fmaxf(f, 0.0f), 1.0f); // NaN -> 0
  return (uint)__builtin_roundevenf(f * (float)((1u << bits) - 1));
}
__MK_F uint f_snorm(float f, int bits) {
  f = __builtin_fminf(__builtin_fmaxf(f, -1.0f), 1.0f);
  int s = (int)__builtin_roundevenf(f * (float)((1 << (bits - 1)) - 1));
  return (uint)s & ((1u << bits) - 1);
}
__MK_F float srgb_to_linear(float c) {
  return c <= 0.04045f ? c / 12.92f : __builtin_powf((c + 0.055f) / 1.055f, 2.4f);
}
__MK_F float linear_to_srgb(float c) {
  c = __builtin_fminf(__builtin_fmaxf(c, 0.0f), 1.0f);
  return c <= 0.0031308f ? 12.92f * c : 1.055f * __builtin_powf(c, 1.0f / 2.4f) - 0.055f;
}
template <class T> __MK_F vec<T, 4> un4x8(uint x, bool snorm, bool srgb) {
  vec<float, 4> r;
  for (int i = 0; i < 4; ++i) {
    uint b = (x >> (8 * i)) & 0xffu;
    r[i] = snorm ? snorm_f(b, 8) : unorm_f(b, 8);
    if (srgb && i < 3) r[i] = srgb_to_linear(r[i]);
  }
  return vec<T, 4>(r);
}
template <class V> __MK_F uint pk4x8(const V &v, bool snorm, bool srgb) {
  uint r = 0;
  for (int i = 0; i < 4; ++i) {
    float f = (float)v[i];
    if (srgb && i < 3) f = linear_to_srgb(f);
    r |= (snorm ? f_snorm(f, 8) : f_unorm(f, 8)) << (8 * i);
  }
  return r;
}
template <class T> __MK_F vec<T, 2> un2x16(uint x, bool snorm) {
  uint lo = x & 0xffffu, hi = x >> 16;
  return vec<T, 2>(vec<float, 2>(snorm ? snorm_f(lo, 16) : unorm_f(lo, 16), snorm ? snorm_f(hi, 16) : unorm_f(hi, 16)));
}
template <class V> __MK_F uint pk2x16(const V &v, bool snorm) {
  float a = (float)v[0], b = (float)v[1];
  return snorm ? (f_snorm(a, 16) | f_snorm(b, 16) << 16) : (f_unorm(a, 16) | f_unorm(b, 16) << 16);
}
template <class T> __MK_F vec<T, 4> un10a2(uint x) {
  return vec<T, 4>(vec<float, 4>(unorm_f(x & 0x3ffu, 10), unorm_f((x >> 10) & 0x3ffu, 10),
                                 unorm_f((x >> 20) & 0x3ffu, 10), unorm_f(x >> 30, 2)));
}
template <class V> __MK_F uint pk10a2(const V &v) {
  return f_unorm((float)v[0], 10) | f_unorm((float)v[1], 10) << 10 | f_unorm((float)v[2], 10) << 20 |
         f_unorm((float)v[3], 2) << 30;
}
template <class T> __MK_F vec<T, 3> un565(ushort x) {
  return vec<T, 3>(vec<float, 3>(unorm_f(x & 0x1fu, 5), unorm_f((x >> 5) & 0x3fu, 6), unorm_f((uint)x >> 11, 5)));
}
template <class V> __MK_F ushort pk565(const V &v) {
  return (ushort)(f_unorm((float)v[0], 5) | f_unorm((float)v[1], 6) << 5 | f_unorm((float)v[2], 5) << 11);
}
} // namespace __mk

#define __MK_UNPACK(T, TN, sfx)                                                \
  template <int = 0> __MK_F TN unpack_unorm4x8_to_##sfx(uint x) { return __mk::un4x8<T>(x, false, false); } \
  template <int = 0> __MK_F TN unpack_snorm4x8_to_##sfx(uint x) { return __mk::un4x8<T>(x, true, false); } \
  template <int = 0> __MK_F TN unpack_unorm4x8_srgb_to_##sfx(uint x) { return __mk::un4x8<T>(x, false, true); } \
  template <int = 0> __MK_F vec<T, 2> unpack_unorm2x16_to_##sfx(uint x) { return __mk::un2x16<T>(x, false); } \
  template <int = 0> __MK_F vec<T, 2> unpack_snorm2x16_to_##sfx(uint x) { return __mk::un2x16<T>(x, true); } \
  template <int = 0> __MK_F TN unpack_unorm10a2_to_##sfx(uint x) { return __mk::un10a2<T>(x); } \
  template <int = 0> __MK_F vec<T, 3> unpack_unorm565_to_##sfx(ushort x) { return __mk::un565<T>(x); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_unorm4x8(TN x) { return __mk::pk4x8(x, false, false); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_snorm4x8(TN x) { return __mk::pk4x8(x, true, false); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_srgb_unorm4x8(TN x) { return __mk::pk4x8(x, false, true); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_unorm2x16(vec<T, 2> x) { return __mk::pk2x16(x, false); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_snorm2x16(vec<T, 2> x) { return __mk::pk2x16(x, true); } \
  template <int = 0> __MK_F uint pack_##sfx##_to_unorm10a2(TN x) { return __mk::pk10a2(x); } \
  template <int = 0> __MK_F ushort pack_##sfx##_to_unorm565(vec<T, 3> x) { return __mk::pk565(x); }
__MK_UNPACK(float, float4, float)
__MK_UNPACK(half, half4, half)
#undef __MK_UNPACK
} // namespace metal
