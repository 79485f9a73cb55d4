// metal::array (<metal_array>) and metal::uniform (<metal_uniform>), from the
// MSL specification's sections on arrays and on the uniform type.
#pragma once
#pragma clang system_header
#include "config.h"
#include "scalar.h"

namespace metal {
// A fixed-size array that is a value (copied, returned, compared as a whole
// object); an aggregate, so `array<int, 3> a = {1, 2, 3};` works.
template <typename T, size_t N> struct array {
  typedef T value_type;
  typedef size_t size_type;
  typedef ptrdiff_t difference_type;
  typedef T &reference;
  typedef const T &const_reference;
  T __elems[N ? N : 1];

  __MK_CF size_t size() const { return N; }
  __MK_CF size_t max_size() const { return N; }
  __MK_CF bool empty() const { return N == 0; }
  __MK_CF T &operator[](size_t i) { return __elems[i]; }
  __MK_CF const T &operator[](size_t i) const { return __elems[i]; }
};

// uniform<T>: a value the compiler may assume is the same in every thread.
// It is made with make_uniform; arithmetic between uniforms stays uniform,
// arithmetic with a plain T gives a plain T (through the conversion to T).
template <typename T> struct uniform {
  typedef T value_type;
  T __v;
  uniform() = default;
  __MK_CF operator T() const { return __v; }
};
template <typename T> __MK_CF uniform<T> make_uniform(T v) {
  uniform<T> u{};
  u.__v = v;
  return u;
}
#define __MK_UNIFORM_OP(op)                                                    \
  template <typename T> __MK_CF auto operator op(uniform<T> a, uniform<T> b)  \
      -> uniform<decltype(a.__v op b.__v)> {                                   \
    return make_uniform(a.__v op b.__v);                                       \
  }
__MK_UNIFORM_OP(+) __MK_UNIFORM_OP(-) __MK_UNIFORM_OP(*) __MK_UNIFORM_OP(/) __MK_UNIFORM_OP(%)
__MK_UNIFORM_OP(&) __MK_UNIFORM_OP(|) __MK_UNIFORM_OP(^) __MK_UNIFORM_OP(<<) __MK_UNIFORM_OP(>>)
__MK_UNIFORM_OP(&&) __MK_UNIFORM_OP(||) __MK_UNIFORM_OP(==) __MK_UNIFORM_OP(!=)
__MK_UNIFORM_OP(<) __MK_UNIFORM_OP(<=) __MK_UNIFORM_OP(>) __MK_UNIFORM_OP(>=)
#undef __MK_UNIFORM_OP
#define __MK_UNIFORM_UNARY(op)                                                 \
  template <typename T> __MK_CF auto operator op(uniform<T> a)->uniform<decltype(op a.__v)> { \
    return make_uniform(op a.__v);                                             \
  }
__MK_UNIFORM_UNARY(-) __MK_UNIFORM_UNARY(+) __MK_UNIFORM_UNARY(!) __MK_UNIFORM_UNARY(~)
#undef __MK_UNIFORM_UNARY
} // namespace metal
