#include "function_constants.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "arg_spec.h"
#include "errors.h"
#include "float16.h"

namespace mk {
namespace {

std::string describe(const ConstantDecl& d) {
  return "function constant '" + d.name + "' [[function_constant(" + std::to_string(d.index) + ")]]";
}

bool matches(const ConstantArg& a, const ConstantDecl& d) {
  return a.name.empty() ? a.index == d.index : a.name == d.name;
}

// Writes v as a T into out; false if it is out of T's range.
template <class T>
bool put_int(const ConstantArg& v, uint8_t* out, std::string& limits) {
  using L = std::numeric_limits<T>;
  limits = "[" + std::to_string(+L::min()) + ", " + std::to_string(+L::max()) + "]";
  T x;
  if (v.negative) {
    if (!L::is_signed || v.magnitude - 1 > uint64_t(L::max())) return false;
    x = T(-int64_t(v.magnitude - 1) - 1);
  } else {
    if (v.magnitude > uint64_t(L::max())) return false;
    x = T(v.magnitude);
  }
  std::memcpy(out, &x, sizeof x);
  return true;
}

// Writes v as d's type into out, or returns why it cannot.
std::string put(const ConstantDecl& d, const ConstantArg& v, uint8_t* out) {
  const std::string type = msl_type_name(d.type);
  if (d.vec_width != 1 || d.type == MK_T_STRUCT)
    return "is a " + type + (d.vec_width != 1 ? std::to_string(d.vec_width) : "") +
           "; only scalar function constants can be set from constants=";
  if (d.type == MK_T_BOOL) {
    if (v.kind != ConstantArg::Kind::Bool) return "is a bool; got " + v.text + ", pass True or False";
    out[0] = v.boolean ? 1 : 0;
    return "";
  }
  if (d.type == MK_T_F32 || d.type == MK_T_F16 || d.type == MK_T_BF16) {
    if (v.kind == ConstantArg::Kind::Bool) return "is a " + type + "; got " + v.text + ", pass a number";
    double x = v.kind == ConstantArg::Kind::Float ? v.real : (v.negative ? -double(v.magnitude) : double(v.magnitude));
    double limit = d.type == MK_T_F16 ? 65504.0 : 3.4028234663852886e38;
    if (std::isfinite(x) && std::fabs(x) > limit * (1 + 1e-7)) return "is a " + type + "; got " + v.text + ", out of range";
    float f = float(x);
    if (d.type == MK_T_F32) {
      std::memcpy(out, &f, 4);
    } else {
      uint16_t h = d.type == MK_T_F16 ? float_to_half(f) : float_to_bfloat(f);
      std::memcpy(out, &h, 2);
    }
    return "";
  }
  if (v.kind != ConstantArg::Kind::Int) return "is a " + type + "; got " + v.text + ", pass an int (no silent conversion)";
  std::string limits;
  bool ok;
  switch (d.type) {
    case MK_T_I8: ok = put_int<int8_t>(v, out, limits); break;
    case MK_T_U8: ok = put_int<uint8_t>(v, out, limits); break;
    case MK_T_I16: ok = put_int<int16_t>(v, out, limits); break;
    case MK_T_U16: ok = put_int<uint16_t>(v, out, limits); break;
    case MK_T_I32: ok = put_int<int32_t>(v, out, limits); break;
    case MK_T_U32: ok = put_int<uint32_t>(v, out, limits); break;
    case MK_T_I64: ok = put_int<int64_t>(v, out, limits); break;
    default: ok = put_int<uint64_t>(v, out, limits); break;
  }
  return ok ? "" : "is a " + type + "; got " + v.text + ", out of range " + limits;
}

}  // namespace

std::vector<ConstantValue> resolve_constants(const std::string& kernel, const std::vector<ConstantDecl>& decls,
                                             const std::vector<ConstantArg>& given) {
  std::vector<ConstantValue> out;
  for (size_t i = 0; i < decls.size(); ++i) {
    const ConstantDecl& d = decls[i];
    // A name key wins over an index key for the same constant, as on the CPU backend.
    const ConstantArg* v = nullptr;
    for (const ConstantArg& a : given)
      if (matches(a, d) && (!v || (!a.name.empty() && v->name.empty()))) v = &a;
    if (!v) {
      if (d.required)
        throw CompileFailure(kernel_label(kernel) + " uses " + describe(d) +
                             ", which has no value; pass constants={'" + d.name +
                             "': value}, or test it with is_function_constant_defined(" + d.name + ") in the kernel");
      continue;
    }
    ConstantValue value;
    value.decl = i;
    std::string why = put(d, *v, value.bytes.data());
    if (!why.empty()) throw CompileFailure(kernel_prefix(kernel) + describe(d) + " " + why);
    out.push_back(value);
  }
  return out;
}

void check_constants_declared(const std::vector<ConstantArg>& given, const std::vector<ConstantDecl>& declared) {
  for (const ConstantArg& a : given) {
    bool found = false;
    for (const ConstantDecl& d : declared) found = found || matches(a, d);
    if (!found)
      throw CompileFailure("no function constant named or numbered " +
                           (a.name.empty() ? std::to_string(a.index) : "'" + a.name + "'") +
                           " in the source; declare it as `constant T name [[function_constant(i)]];` or drop it "
                           "from constants=");
  }
}

}  // namespace mk
