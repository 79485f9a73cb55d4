// Dispatch geometry: defaults and validation, shared by every backend.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mk {

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

// grid: threads per dimension (nullopt: default_count along x, if known).
// threadgroup: threads per group (nullopt: min(grid.x, 256, max_threads) along x).
// Throws DispatchError naming the kernel and the fix.
Geometry plan_geometry(const std::string& kernel, std::optional<Dims3> grid, std::optional<Dims3> threadgroup,
                       std::optional<uint64_t> default_count, uint32_t max_threads);

// Parses 1..3 dimensions from a list of integers, for `what` ("grid" or "threadgroup").
Dims3 make_dims(const std::string& kernel, const char* what, const std::vector<int64_t>& dims, bool allow_zero);

}  // namespace mk
