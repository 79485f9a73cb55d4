// metal::fast:: and metal::precise:: (<metal_math>'s math modes): the same implementations, at
// libm accuracy. Using-declarations, not a using-directive: a library that adds its own overload to
// metal::fast (MLX's bfloat math) would otherwise hide every function of that name from fast::.
#pragma once
#pragma clang system_header
#include "common.h"
#include "geometric.h"
#include "integer.h"
#include "math.h"
#include "relational.h"

#define __MK_MODE_FUNCS(M) \
  M(abs) M(acos) M(acosh) M(asin) M(asinh) M(atan) M(atan2) M(atanh) \
  M(ceil) M(clamp) M(copysign) M(cos) M(cosh) M(cospi) M(divide) M(exp) \
  M(exp10) M(exp2) M(fabs) M(fdim) M(floor) M(fma) M(fmax) M(fmax3) \
  M(fmedian3) M(fmin) M(fmin3) M(fmod) M(fract) M(isfinite) M(isinf) M(isnan) \
  M(isnormal) M(isordered) M(isunordered) M(log) M(log10) M(log2) M(max) M(max3) \
  M(median3) M(min) M(min3) M(mix) M(nextafter) M(pow) M(powr) M(rint) \
  M(round) M(rsqrt) M(saturate) M(sign) M(signbit) M(sin) M(sinh) M(sinpi) \
  M(smoothstep) M(sqrt) M(step) M(tan) M(tanh) M(tanpi) M(trunc) M(cross) \
  M(distance) M(distance_squared) M(dot) M(faceforward) M(frexp) M(ilogb) M(ldexp) M(length) \
  M(length_squared) M(modf) M(normalize) M(reflect) M(refract) M(sincos)
#define __MK_USING(name) using metal::name;
namespace metal {
namespace fast {
__MK_MODE_FUNCS(__MK_USING)
} // namespace fast
namespace precise {
__MK_MODE_FUNCS(__MK_USING)
} // namespace precise
} // namespace metal
#undef __MK_USING
#undef __MK_MODE_FUNCS
