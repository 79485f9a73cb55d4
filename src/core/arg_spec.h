// The one description of a kernel parameter that every layer above the
// backends uses. Filled from a CPU module's own table or from Metal reflection.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metalkit/abi.h"
#include "struct_layout.h"

namespace mk {

enum class ArgKind { Buffer = MK_ARG_BUFFER, Scalar = MK_ARG_SCALAR, Threadgroup = MK_ARG_THREADGROUP, Builtin = MK_ARG_BUILTIN };
enum class Space { None = MK_SPACE_NONE, Device = MK_SPACE_DEVICE, Constant = MK_SPACE_CONSTANT,
                   Threadgroup = MK_SPACE_THREADGROUP, Thread = MK_SPACE_THREAD };

struct ArgSpec {
  int position = 0;         // parameter position in the signature
  int index = -1;           // [[buffer(n)]] or [[threadgroup(n)]]; -1 for builtins
  std::string name;
  std::string decl;         // as written, for messages
  std::string builtin;      // builtin attribute name, empty otherwise
  ArgKind kind = ArgKind::Buffer;
  int type = MK_T_F32;      // mk_type of the element
  int vec_width = 1;
  Space space = Space::None;
  bool writable = false;
  uint64_t elem_size = 0;
  uint64_t elem_align = 1;
  uint32_t array_len = 0;   // N for a fixed-length array parameter (constant T x[N]), 0 otherwise
  std::shared_ptr<const StructLayout> layout;  // a struct element's fields, if known
  // Bytes of the value a scalar parameter takes (N elements for an array).
  uint64_t value_size() const { return elem_size * (array_len ? array_len : 1); }
};

// Name of an mk_type as MSL spells it ("float", "uchar", ...).
const char* msl_type_name(int type);
// numpy dtype name of an mk_type ("float32", ...); "" for structs.
const char* numpy_type_name(int type);
// Bytes of one scalar of an mk_type (8 for structs: callers size those themselves).
uint64_t element_size(int type);

struct KernelSpec {
  std::string name;
  std::vector<ArgSpec> args;
  uint32_t max_threads = 1024;
  uint32_t simd_width = 32;        // threads per SIMD-group: Metal's threadExecutionWidth of the pipeline
  bool needs_fibers = false;       // runs with barriers or SIMD-group functions (not as a plain loop)
  bool threadgroup_variables = false;  // CPU: declares threadgroup variables in its body
  std::string execution = "gpu";   // CPU: "loop", "simt", or "fibers: " and why
  std::string file;
  int line = 0;
};

}  // namespace mk
