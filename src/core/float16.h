// float -> half / bfloat bit patterns, rounding to nearest even: how scalar
// arguments and function constants reach a kernel's 16-bit float types.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mk {

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) return uint16_t(sign | 0x7C00u | (mag > 0x7F800000u ? 0x200u : 0u));
  if (mag >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds past 65504
  if (mag < 0x38800000u) {                                  // subnormal or zero in half
    float a;
    std::memcpy(&a, &mag, 4);
    return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));  // a / 2^-24, ties to even
  }
  uint32_t r = mag + 0xC8000FFFu + ((mag >> 13) & 1u);  // rebias and round to nearest even
  return uint16_t(sign | (r >> 13));
}

inline uint16_t float_to_bfloat(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

}  // namespace mk
