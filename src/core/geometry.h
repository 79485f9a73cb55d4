// Dispatch geometry: defaults and validation, shared by every backend.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arg_spec.h"

namespace mk {

// Sizes are (x, y, z) = (width, height, depth), as Metal counts them.
struct Dims3 {
  uint32_t v[3] = {1, 1, 1};
  uint64_t product() const { return uint64_t(v[0]) * v[1] * v[2]; }
};

struct Geometry {
  Dims3 grid;      // threads per grid (the last group in a dimension may be partial)
  Dims3 tg;        // threads per threadgroup
  Dims3 ngroups;   // threadgroups per grid
  bool empty() const { return grid.product() == 0; }
};

// Metal's limits that hold on every Apple GPU; the CPU simulator enforces them too.
constexpr uint64_t kMaxThreadgroupMemory = 32768;
constexpr uint32_t kSimdWidth = 32;

// What a call asked for; nullopt where it did not say.
struct GeometryRequest {
  std::optional<Dims3> grid;          // threads per grid (Metal's dispatchThreads)
  std::optional<Dims3> threadgroups;  // threadgroups per grid (dispatchThreadgroups): whole groups
  std::optional<Dims3> threadgroup;   // threads per threadgroup
};

// Whether a call of this kernel may leave the grid out, from its declared builtins; made once per kernel.
struct DefaultGridRule {
  std::string refusal;      // why no call may ("" if a call may, given the conditions below)
  std::string group_input;  // the builtin or parameter that depends on the threadgroup size: a call
                            // leaving the grid out must then give threadgroup= ("" if none)
};
DefaultGridRule default_grid_rule(const KernelSpec& spec);

// A call's array arguments, each counted in elements of its parameter's type.
struct ArrayCounts {
  int arrays = 0;
  int first = -1, other = -1;  // parameter positions: the first array, the first whose count differs
  uint64_t first_count = 0, other_count = 0;
  void add(int param, uint64_t count) {
    if (arrays++ == 0) {
      first = param;
      first_count = count;
    } else if (other < 0 && count != first_count) {
      other = param;
      other_count = count;
    }
  }
};

// The geometry of a call. Without grid= or threadgroups=, the grid is the arrays' common
// element count along x, if default_grid_rule and the counts allow (else DispatchError
// asking for grid=). threadgroup: nullopt gives min(grid.x, 256, max_threads) along x;
// threadgroups= needs it. Throws DispatchError naming the kernel and the fix.
Geometry plan_geometry(const KernelSpec& spec, const GeometryRequest& request, const DefaultGridRule& rule,
                       const ArrayCounts& counts);

// Parses 1..3 dimensions from a list of integers, for `what` ("grid", "threadgroups" or "threadgroup").
Dims3 make_dims(const std::string& kernel, const char* what, const std::vector<int64_t>& dims, bool allow_zero);

}  // namespace mk
