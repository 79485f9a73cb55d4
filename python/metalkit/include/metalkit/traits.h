// Type traits in namespace metal (the subset of <type_traits> that MSL
// provides, plus the MSL vector traits). Implemented with clang builtins.
#pragma once
#pragma clang system_header
#include "config.h"
#include "scalar.h"

namespace metal {
template <typename T, int N> struct vec;
template <typename T, int N> struct packed_vec;

template <class T, T v> struct integral_constant {
  static constexpr T value = v;
  typedef T value_type;
  typedef integral_constant type;
  constexpr operator value_type() const { return value; }
  constexpr value_type operator()() const { return value; }
};
template <bool B> using bool_constant = integral_constant<bool, B>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;

template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;

template <class T, class U> struct is_same : bool_constant<__is_same(T, U)> {};
template <class T, class U> constexpr bool is_same_v = __is_same(T, U);

// No void_t: MSL's <metal_type_traits> has none (libraries define their own metal::void_t).

template <class T> struct remove_const { typedef T type; };
template <class T> struct remove_const<const T> { typedef T type; };
template <class T> struct remove_volatile { typedef T type; };
template <class T> struct remove_volatile<volatile T> { typedef T type; };
template <class T> struct remove_cv { typedef typename remove_volatile<typename remove_const<T>::type>::type type; };
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T &> { typedef T type; };
template <class T> struct remove_reference<T &&> { typedef T type; };
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T *> { typedef T type; };
template <class T> struct remove_pointer<T *const> { typedef T type; };
template <class T> struct remove_pointer<T *volatile> { typedef T type; };
template <class T> struct remove_pointer<T *const volatile> { typedef T type; };
template <class T> struct remove_extent { typedef T type; };
template <class T> struct remove_extent<T[]> { typedef T type; };
template <class T, __SIZE_TYPE__ N> struct remove_extent<T[N]> { typedef T type; };
template <class T> struct add_const { typedef const T type; };
template <class T> struct add_volatile { typedef volatile T type; };
template <class T> struct add_cv { typedef const volatile T type; };
template <class T> struct add_pointer { typedef typename remove_reference<T>::type *type; };
template <class T> struct add_lvalue_reference { typedef T &type; };
template <> struct add_lvalue_reference<void> { typedef void type; };
template <class T> struct add_rvalue_reference { typedef T &&type; };
template <> struct add_rvalue_reference<void> { typedef void type; };
template <class T> using remove_const_t = typename remove_const<T>::type;
template <class T> using remove_volatile_t = typename remove_volatile<T>::type;
template <class T> using remove_cv_t = typename remove_cv<T>::type;
// remove_addrspace: T without its address space. The CPU has one address space
// (device/thread/threadgroup are blank there, constant is const), so T itself.
template <class T> struct remove_addrspace { typedef T type; };
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using remove_pointer_t = typename remove_pointer<T>::type;
template <class T> using remove_extent_t = typename remove_extent<T>::type;
template <class T> using add_const_t = typename add_const<T>::type;
template <class T> using add_pointer_t = typename add_pointer<T>::type;
template <class T> using add_lvalue_reference_t = typename add_lvalue_reference<T>::type;
template <class T> using add_rvalue_reference_t = typename add_rvalue_reference<T>::type;

template <class T> typename add_rvalue_reference<T>::type declval() noexcept;

#define __MK_TRAIT(name, expr)                                                  \
  template <class T> struct name : bool_constant<expr> {};                     \
  template <class T> constexpr bool name##_v = expr;
__MK_TRAIT(is_void, __is_void(T))
__MK_TRAIT(is_integral, __is_integral(T))
// __is_floating_point covers half (_Float16) and bfloat (__bf16).
__MK_TRAIT(is_floating_point, __is_floating_point(T))
__MK_TRAIT(is_arithmetic, __is_arithmetic(T))
__MK_TRAIT(is_fundamental, __is_fundamental(T))
__MK_TRAIT(is_signed, __is_signed(T))
__MK_TRAIT(is_unsigned, __is_unsigned(T))
__MK_TRAIT(is_const, __is_const(T))
__MK_TRAIT(is_volatile, __is_volatile(T))
__MK_TRAIT(is_pointer, __is_pointer(T))
__MK_TRAIT(is_reference, __is_reference(T))
__MK_TRAIT(is_lvalue_reference, __is_lvalue_reference(T))
__MK_TRAIT(is_rvalue_reference, __is_rvalue_reference(T))
__MK_TRAIT(is_array, __is_array(T))
__MK_TRAIT(is_enum, __is_enum(T))
__MK_TRAIT(is_class, __is_class(T))
__MK_TRAIT(is_union, __is_union(T))
__MK_TRAIT(is_function, __is_function(T))
__MK_TRAIT(is_object, __is_object(T))
__MK_TRAIT(is_scalar, __is_scalar(T))
__MK_TRAIT(is_compound, __is_compound(T))
// No is_empty: MSL's <metal_type_traits> has none (libraries define their own metal::is_empty).
__MK_TRAIT(is_pod, __is_pod(T))
__MK_TRAIT(is_trivial, __is_trivial(T))
__MK_TRAIT(is_trivially_copyable, __is_trivially_copyable(T))
__MK_TRAIT(is_standard_layout, __is_standard_layout(T))
__MK_TRAIT(is_trivially_destructible, __is_trivially_destructible(T))
#undef __MK_TRAIT
template <class F, class T> struct is_convertible : bool_constant<__is_convertible_to(F, T)> {};
template <class F, class T> constexpr bool is_convertible_v = __is_convertible_to(F, T);
template <class B, class D> struct is_base_of : bool_constant<__is_base_of(B, D)> {};
template <class B, class D> constexpr bool is_base_of_v = __is_base_of(B, D);
template <class T, class... A> struct is_constructible : bool_constant<__is_constructible(T, A...)> {};
template <class T, class... A> constexpr bool is_constructible_v = __is_constructible(T, A...);
template <class T, class U> struct is_assignable : bool_constant<__is_assignable(T, U)> {};
template <class T, class U> constexpr bool is_assignable_v = __is_assignable(T, U);
template <class T> struct underlying_type { typedef __underlying_type(T) type; };
template <class T> using underlying_type_t = typename underlying_type<T>::type;

template <class...> struct conjunction : true_type {};
template <class B> struct conjunction<B> : B {};
template <class B, class... R> struct conjunction<B, R...> : conditional_t<bool(B::value), conjunction<R...>, B> {};
template <class...> struct disjunction : false_type {};
template <class B> struct disjunction<B> : B {};
template <class B, class... R> struct disjunction<B, R...> : conditional_t<bool(B::value), B, disjunction<R...>> {};
template <class B> struct negation : bool_constant<!bool(B::value)> {};
template <class... B> constexpr bool conjunction_v = conjunction<B...>::value;
template <class... B> constexpr bool disjunction_v = disjunction<B...>::value;
template <class B> constexpr bool negation_v = negation<B>::value;
// The names Apple's headers use for these internally (libraries use them after
// `#pragma METAL internals : enable`).
template <class... B> using _conjunction = conjunction<B...>;
template <class... B> using _disjunction = disjunction<B...>;
template <class B> using _negation = negation<B>;

template <class T> struct decay {
  typedef remove_reference_t<T> U;
  typedef conditional_t<__is_array(U), remove_extent_t<U> *,
                        conditional_t<__is_function(U), U *, remove_cv_t<U>>>
      type;
};
template <class T> using decay_t = typename decay<T>::type;

// make_signed/make_unsigned: MSL integer types only (cv preserved).
namespace __mk {
template <class T> struct sign_pair;
#define __MK_SP(S, U)                                                          \
  template <> struct sign_pair<S> { typedef S s; typedef U u; };               \
  template <> struct sign_pair<U> { typedef S s; typedef U u; };
__MK_SP(short, unsigned short)
__MK_SP(int, unsigned int)
__MK_SP(long, unsigned long)
__MK_SP(long long, unsigned long long)
#undef __MK_SP
// MSL's signed 8-bit type is char, so make_signed<uchar> is char.
template <> struct sign_pair<char> { typedef char s; typedef unsigned char u; };
template <> struct sign_pair<unsigned char> { typedef char s; typedef unsigned char u; };
template <> struct sign_pair<signed char> { typedef signed char s; typedef unsigned char u; };
template <class T, class R> struct copy_cv { typedef R type; };
template <class T, class R> struct copy_cv<const T, R> { typedef const R type; };
template <class T, class R> struct copy_cv<volatile T, R> { typedef volatile R type; };
template <class T, class R> struct copy_cv<const volatile T, R> { typedef const volatile R type; };
} // namespace __mk
template <class T> struct make_signed {
  typedef typename __mk::copy_cv<T, typename __mk::sign_pair<remove_cv_t<T>>::s>::type type;
};
template <class T> struct make_unsigned {
  typedef typename __mk::copy_cv<T, typename __mk::sign_pair<remove_cv_t<T>>::u>::type type;
};
template <class T, int N> struct make_signed<vec<T, N>> { typedef vec<typename make_signed<T>::type, N> type; };
template <class T, int N> struct make_unsigned<vec<T, N>> { typedef vec<typename make_unsigned<T>::type, N> type; };
template <class T> using make_signed_t = typename make_signed<T>::type;
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;

// MSL vector traits: is_vector, vec_elements (1 for scalars), make_vector.
template <class T> struct is_vector : false_type {};
template <class T, int N> struct is_vector<vec<T, N>> : true_type {};
template <class T, int N> struct is_vector<packed_vec<T, N>> : true_type {};
template <class T> struct is_vector<const T> : is_vector<T> {};
template <class T> struct is_vector<volatile T> : is_vector<T> {};
template <class T> struct is_vector<const volatile T> : is_vector<T> {};
template <class T> constexpr bool is_vector_v = is_vector<T>::value;
template <class T> struct vec_elements : integral_constant<int, 1> {};
template <class T, int N> struct vec_elements<vec<T, N>> : integral_constant<int, N> {};
template <class T, int N> struct vec_elements<packed_vec<T, N>> : integral_constant<int, N> {};
template <class T> struct vec_elements<const T> : vec_elements<T> {};
template <class T> constexpr int vec_elements_v = vec_elements<T>::value;
template <class T, int N> struct make_vector { typedef vec<T, N> type; };
template <class T> struct make_vector<T, 1> { typedef T type; };
template <class T, int N> using make_vector_t = typename make_vector<T, N>::type;

namespace __mk {
template <class T> using ident = typename conditional<true, T, void>::type; // non-deduced context
template <bool B> using req = typename enable_if<B, int>::type;
// Element info for scalars, vec and packed_vec (cv-stripped).
template <class T> struct vinfo {
  typedef T elem;
  typedef void type; // not a vector
  static constexpr int n = 1;
  static constexpr bool is_vec = false;
};
template <class T, int N> struct vinfo<vec<T, N>> {
  typedef T elem;
  typedef vec<T, N> type;
  static constexpr int n = N;
  static constexpr bool is_vec = true;
};
template <class T, int N> struct vinfo<packed_vec<T, N>> : vinfo<vec<T, N>> {};
template <class T> struct vinfo<const T> : vinfo<T> {};
template <class T> using elem_t = typename vinfo<T>::elem;
template <class V> using vec_of = typename vinfo<V>::type;
template <class T> constexpr bool is_fp = __is_floating_point(T) && !__is_same(T, double) && !__is_same(T, long double);
template <class T> constexpr bool is_int = __is_integral(T) && !__is_same(T, bool);
template <class V> constexpr bool is_fvec = vinfo<V>::is_vec && is_fp<elem_t<V>>;
template <class V> constexpr bool is_ivec = vinfo<V>::is_vec && is_int<elem_t<V>>;
template <class V> constexpr bool is_bvec = vinfo<V>::is_vec && __is_same(elem_t<V>, bool);
template <class V> constexpr bool is_avec = vinfo<V>::is_vec && !__is_same(elem_t<V>, bool);
// A, B are vec-like with identical vec type (packed args decay to vec).
template <class A, class B, bool = vinfo<A>::is_vec && vinfo<B>::is_vec> constexpr bool same_vec = false;
template <class A, class B> constexpr bool same_vec<A, B, true> = __is_same(vec_of<A>, vec_of<B>);
// Arguments of a component-wise function: each is the call's vector type (the
// first vector among them) or a scalar, which MSL converts to that vector.
template <class... A> struct first_vec { typedef void type; };
template <class H, class... T> struct first_vec<H, T...> {
  typedef typename conditional<vinfo<H>::is_vec, vec_of<H>, typename first_vec<T...>::type>::type type;
};
template <class... A> using vcall_t = typename first_vec<A...>::type;
template <class R, class A, bool = vinfo<A>::is_vec> constexpr bool bcast_arg = __is_arithmetic(A);
template <class R, class A> constexpr bool bcast_arg<R, A, true> = __is_same(vec_of<A>, R);
template <class R, class... A> constexpr bool vcall_of = !__is_same(R, void) && (bcast_arg<R, A> && ...);
template <class... A> constexpr bool fvec_call = vcall_of<vcall_t<A...>, A...> && is_fp<elem_t<vcall_t<A...>>>;
template <class... A> constexpr bool ivec_call = vcall_of<vcall_t<A...>, A...> && is_int<elem_t<vcall_t<A...>>>;
template <class... A> constexpr bool avec_call = vcall_of<vcall_t<A...>, A...> && !__is_same(elem_t<vcall_t<A...>>, bool);
} // namespace __mk
} // namespace metal
