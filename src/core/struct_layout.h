// A struct parameter's layout as the kernel reads it: each field's name, offset,
// element type and array extents. The CPU backend takes it from the module's
// offsetof/sizeof tables (the compiler laid the struct out); the bindings turn it
// into the numpy structured dtype of Kernel.args.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mk {

struct StructLayout;

struct FieldLayout {
  std::string name;
  uint64_t offset = 0;
  int type = 0;                 // mk_type of the scalar element; MK_T_STRUCT: nested (layout) or opaque bytes
  int vec_width = 1;            // lanes of a vector element (a matrix's column), else 1
  uint64_t elem_size = 0;       // bytes of one element (a float3: 16, a packed_float3: 12)
  std::vector<int> dims;        // array extents, outermost first (a matrix: its columns)
  std::shared_ptr<const StructLayout> layout;  // a nested struct's
};

struct StructLayout {
  uint64_t size = 0, align = 1;
  std::vector<FieldLayout> fields;
};

}  // namespace mk
