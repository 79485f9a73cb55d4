// Function constants ([[function_constant(i)]]): which value given to
// compile(constants=...) specializes which constant a kernel declares, and the
// bytes of that value in the declared type. The Metal backend specializes its
// functions with these; the CPU front-end binds the same values at compile time
// and matches them the same way (by name first, then by index).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mk {

// One entry of the Python constants= dict.
struct ConstantArg {
  enum class Kind { Bool, Int, Float };
  std::string name;        // the key when it is a name, else empty
  int64_t index = -1;      // the key when it is an index, else -1
  Kind kind = Kind::Int;
  bool boolean = false;
  bool negative = false;   // Int: sign and magnitude, so every int64 and uint64 value fits
  uint64_t magnitude = 0;
  double real = 0;         // Float
  std::string text;        // the value as the user wrote it (repr), for messages
};

// A function constant as a kernel declares it.
struct ConstantDecl {
  std::string name;
  int index = 0;
  int type = 0;            // mk_type
  int vec_width = 1;
  bool required = false;   // used without is_function_constant_defined()
};

// The value one declared constant is specialized with.
struct ConstantValue {
  size_t decl = 0;         // position in the declarations
  std::array<uint8_t, 8> bytes{};
};

// Values for the declared constants that were given; throws CompileFailure
// naming the kernel and constant when a required one is missing or a value
// does not fit its type (no silent conversion, as for scalar arguments).
std::vector<ConstantValue> resolve_constants(const std::string& kernel, const std::vector<ConstantDecl>& decls,
                                             const std::vector<ConstantArg>& given);

// Throws CompileFailure for a given constant that no declaration in the
// library matches, worded as the CPU backend words it.
void check_constants_declared(const std::vector<ConstantArg>& given, const std::vector<ConstantDecl>& declared);

}  // namespace mk
