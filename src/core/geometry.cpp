#include "geometry.h"

#include <algorithm>
#include <cstdio>

#include "errors.h"

namespace mk {

static std::string dims_str(const Dims3& d) {
  return "(" + std::to_string(d.v[0]) + ", " + std::to_string(d.v[1]) + ", " + std::to_string(d.v[2]) + ")";
}

Dims3 make_dims(const std::string& kernel, const char* what, const std::vector<int64_t>& dims, bool allow_zero) {
  if (dims.empty() || dims.size() > 3)
    throw DispatchError("kernel '" + kernel + "': " + what + " must be an int or a tuple of 1 to 3 ints, got " +
                        std::to_string(dims.size()) + " values");
  Dims3 d;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t x = dims[i];
    if (x < (allow_zero ? 0 : 1) || x > 0xFFFFFFFFll)
      throw DispatchError("kernel '" + kernel + "': " + what + " dimension " + std::to_string(i) + " is " +
                          std::to_string(x) + "; it must be " + (allow_zero ? "between 0" : "between 1") +
                          " and 4294967295");
    d.v[i] = uint32_t(x);
  }
  return d;
}

Geometry plan_geometry(const std::string& kernel, std::optional<Dims3> grid, std::optional<Dims3> threadgroup,
                       std::optional<uint64_t> default_count, uint32_t max_threads) {
  Geometry g;
  if (grid) {
    g.grid = *grid;
  } else {
    if (!default_count)
      throw DispatchError("kernel '" + kernel + "': no array argument to size the grid from; pass grid=<threads> "
                          "(an int or a tuple of up to 3 ints)");
    if (*default_count > 0xFFFFFFFFull)
      throw DispatchError("kernel '" + kernel + "': the default grid would be " + std::to_string(*default_count) +
                          " threads along x, over Metal's 2^32-1; pass a 2-D or 3-D grid=");
    g.grid.v[0] = uint32_t(*default_count);
  }
  if (threadgroup) {
    g.tg = *threadgroup;
  } else {
    g.tg.v[0] = std::max<uint32_t>(1, std::min<uint32_t>({g.grid.v[0], 256u, max_threads}));
  }
  if (g.tg.product() > max_threads)
    throw DispatchError("kernel '" + kernel + "': threadgroup " + dims_str(g.tg) + " has " +
                        std::to_string(g.tg.product()) + " threads but this kernel allows at most " +
                        std::to_string(max_threads) +
                        " per threadgroup (Kernel.max_threads_per_threadgroup); pass a smaller threadgroup=");
  for (int i = 0; i < 3; ++i) g.ngroups.v[i] = g.grid.v[i] == 0 ? 0 : (g.grid.v[i] - 1) / g.tg.v[i] + 1;
  // Products of three 32-bit sizes can pass 2^64: bound the total first.
  const double total = double(g.grid.v[0]) * g.grid.v[1] * g.grid.v[2];
  if (total > double(uint64_t(1) << 48)) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", total);
    throw DispatchError("kernel '" + kernel + "': grid " + dims_str(g.grid) + " has " + n +
                        " threads, more than metalkit dispatches at once (2^48); split the work into several calls");
  }
  return g;
}

}  // namespace mk
