// A kernel's KernelSpec from pipeline reflection plus its declared signature.
// Reflection gives each binding's index, name, element type, size and access,
// but not how the parameter is declared: `constant float& s` (a scalar) and
// `constant float* s` (an array) reflect alike. The signature, read from the
// source by metalkit.msl exactly as the CPU backend reads it, settles that, so
// both backends expect the same Python arguments.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "arg_spec.h"

namespace mk {

// One [[buffer(n)]] or [[threadgroup(n)]] parameter as the source declares it.
struct ParamDecl {
  ArgKind kind = ArgKind::Buffer;  // Buffer, Scalar or Threadgroup
  int index = 0;
  std::string name;
  std::string decl;                // as written, for messages
  Space space = Space::None;
  uint32_t array_len = 0;          // N for `constant T x[N]`
};

// A builtin parameter ([[thread_position_in_grid]] ...): reflection does not list
// them, and whether a call may leave its grid out depends on them.
struct BuiltinDecl {
  std::string name;
  std::string builtin;             // the attribute's name
  std::string decl;                // as written
  int vec_width = 1;               // 0: a type the signature reader could not tell
};

// A kernel's signature as the source declares it (host name -> signature).
struct KernelDecl {
  std::string file;
  int line = 0;
  std::vector<ParamDecl> params;
  std::vector<BuiltinDecl> builtins;
};
using KernelDecls = std::map<std::string, KernelDecl>;

// A struct member as reflection reports it (MTLStructMember, MTLArrayType).
struct ReflectedField {
  std::string name;
  uint64_t offset = 0;
  int type = MK_T_STRUCT;          // mk_type of the element; MK_T_STRUCT: a struct (is_struct) or undescribed
  int vec_width = 1;               // lanes of a vector element, or of a matrix's column
  int columns = 0;                 // a matrix element: its columns; 0 otherwise
  bool pointer = false;            // a pointer (a GPU address: 8 bytes)
  bool is_struct = false;          // the element is a struct: its members are `fields`
  std::vector<std::pair<uint64_t, uint64_t>> arrays;  // (length, stride) of each array level, outermost first
  std::vector<ReflectedField> fields;
};

// The layout of a struct of `size` bytes with these members. Reflection gives no size for
// a nested struct: outside arrays (whose stride is one) it is computed from its members
// with MSL's sizes and alignments, bounded by the room its parent gives it.
std::shared_ptr<const StructLayout> layout_from_reflection(const std::vector<ReflectedField>& fields, uint64_t size,
                                                           uint64_t align);

// One binding as reflection reports it.
struct ReflectedBinding {
  enum class Type { Buffer, Threadgroup, Other } type = Type::Buffer;
  int index = 0;
  std::string name;
  int elem_type = MK_T_STRUCT;     // mk_type (Buffer)
  int vec_width = 1;
  uint64_t size = 0;               // element (Buffer) or declared (Threadgroup) size in bytes
  uint64_t align = 1;
  bool writable = false;
  std::string other;               // what an unsupported binding is ("texture", "sampler", ...)
  bool is_struct = false;          // a struct element (Buffer): its members are `fields`
  std::vector<ReflectedField> fields;
};

// Buffers and scalars by index, then threadgroup parameters, then the declared
// builtins (not bound: the geometry rules read them). Without a declared
// signature (a .metallib, a kernel made by a macro) every [[buffer(n)]] takes an
// array; a scalar can then be passed as a 1-element array. Throws
// CompileFailure for parameters metalkit cannot pass (textures, samplers, ...).
KernelSpec spec_from_reflection(const std::string& kernel, const std::vector<ReflectedBinding>& bindings,
                                const KernelDecl* declared, uint32_t max_threads, const std::string& file);

}  // namespace mk
