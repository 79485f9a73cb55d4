#include "geometry.h"

#include <algorithm>
#include <cstdio>

#include "errors.h"

namespace mk {
namespace {

std::string dims_str(const Dims3& d) {
  return "(" + std::to_string(d.v[0]) + ", " + std::to_string(d.v[1]) + ", " + std::to_string(d.v[2]) + ")";
}

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

// Builtins whose values differ between the threads of a grid.
bool tells_threads_apart(const std::string& b) {
  return one_of(b, {"thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
                    "thread_index_in_threadgroup", "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup",
                    "thread_index_in_quadgroup", "quadgroup_index_in_threadgroup"});
}

// Builtins whose values change with the threadgroup size in a 1-D grid.
bool depends_on_threadgroup(const std::string& b) {
  return one_of(b, {"thread_position_in_threadgroup", "threadgroup_position_in_grid", "threads_per_threadgroup",
                    "dispatch_threads_per_threadgroup", "threadgroups_per_grid", "thread_index_in_threadgroup",
                    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
                    "dispatch_simdgroups_per_threadgroup", "quadgroup_index_in_threadgroup",
                    "quadgroups_per_threadgroup"});
}

std::string builtin_decl(const ArgSpec& a) { return "'" + a.decl + " [[" + a.builtin + "]]'"; }

const char* kAskGrid = "; pass grid=(x, y, z) in threads, or threadgroups=(x, y, z) with threadgroup=(x, y, z)";

}  // namespace

Dims3 make_dims(const std::string& kernel, const char* what, const std::vector<int64_t>& dims, bool allow_zero) {
  if (dims.empty() || dims.size() > 3)
    throw DispatchError(kernel_prefix(kernel) + what + " must be an int or a tuple of 1 to 3 ints, got " +
                        std::to_string(dims.size()) + " values");
  Dims3 d;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t x = dims[i];
    if (x < (allow_zero ? 0 : 1) || x > 0xFFFFFFFFll)
      throw DispatchError(kernel_prefix(kernel) + what + " dimension " + std::to_string(i) + " is " +
                          std::to_string(x) + "; it must be " + (allow_zero ? "between 0" : "between 1") +
                          " and 4294967295");
    d.v[i] = uint32_t(x);
  }
  return d;
}

DefaultGridRule default_grid_rule(const KernelSpec& spec) {
  DefaultGridRule r;
  bool apart = false;
  for (const ArgSpec& a : spec.args) {
    if (a.kind == ArgKind::Threadgroup && r.group_input.empty()) r.group_input = "'" + a.decl + "'";
    if (a.kind != ArgKind::Builtin) continue;
    if (a.vec_width != 1 && r.refusal.empty())
      r.refusal = a.vec_width > 1 ? builtin_decl(a) + " makes a " + std::to_string(a.vec_width) +
                                        "-D grid, whose shape the arrays cannot tell"
                                  : "the type of " + builtin_decl(a) + " could not be read";
    apart = apart || tells_threads_apart(a.builtin);
    if (depends_on_threadgroup(a.builtin) && r.group_input.empty()) r.group_input = builtin_decl(a);
  }
  if (!apart && r.refusal.empty())
    r.refusal = "it declares no builtin that tells threads apart (such as thread_position_in_grid), so every "
                "thread of a default grid would do the same work";
  return r;
}

Geometry plan_geometry(const KernelSpec& spec, const GeometryRequest& req, const DefaultGridRule& rule,
                       const ArrayCounts& counts) {
  const std::string& kernel = spec.name;
  Geometry g;
  if (req.grid && req.threadgroups)
    throw DispatchError(kernel_prefix(kernel) + "pass grid= (threads per grid) or threadgroups= (threadgroups "
                        "per grid), not both");
  if (req.threadgroups && !req.threadgroup)
    throw DispatchError(kernel_prefix(kernel) + "threadgroups= counts threadgroups, so it needs threadgroup= "
                        "(threads per threadgroup) too; or pass grid= in threads");
  if (req.grid) {
    g.grid = *req.grid;
  } else if (req.threadgroups) {
    for (int i = 0; i < 3; ++i) {
      const uint64_t n = uint64_t(req.threadgroups->v[i]) * req.threadgroup->v[i];
      if (n > 0xFFFFFFFFull)
        throw DispatchError(kernel_prefix(kernel) + "threadgroups " + dims_str(*req.threadgroups) +
                            " of threadgroup " + dims_str(*req.threadgroup) + " make " + std::to_string(n) +
                            " threads along dimension " + std::to_string(i) + ", over Metal's 2^32-1");
      g.grid.v[i] = uint32_t(n);
    }
  } else {
    auto refuse = [&](const std::string& why, const char* fix) {
      return DispatchError(kernel_prefix(kernel) + "no default grid, because " + why + fix);
    };
    if (!rule.refusal.empty()) throw refuse(rule.refusal, kAskGrid);
    if (counts.arrays == 0) throw refuse("it takes no array argument to size the grid from", kAskGrid);
    if (counts.other >= 0)
      throw refuse("its arrays hold different numbers of elements ('" + spec.args[counts.first].name + "': " +
                       std::to_string(counts.first_count) + ", '" + spec.args[counts.other].name + "': " +
                       std::to_string(counts.other_count) + "), so the grid would be a guess",
                   kAskGrid);
    if (!rule.group_input.empty() && !req.threadgroup)
      throw refuse(rule.group_input + " depends on the threadgroup size, which a default would pick from the "
                                      "array length",
                   "; pass threadgroup= (the grid is then the arrays' length), or grid= or threadgroups= with it");
    if (counts.first_count > 0xFFFFFFFFull)
      throw DispatchError(kernel_prefix(kernel) + "the default grid would be " + std::to_string(counts.first_count) +
                          " threads along x, over Metal's 2^32-1; pass a 2-D or 3-D grid=");
    g.grid.v[0] = uint32_t(counts.first_count);
  }
  if (req.threadgroup) {
    g.tg = *req.threadgroup;
  } else {
    g.tg.v[0] = std::max<uint32_t>(1, std::min<uint32_t>({g.grid.v[0], 256u, spec.max_threads}));
  }
  if (g.tg.product() > spec.max_threads)
    throw DispatchError(kernel_prefix(kernel) + "threadgroup " + dims_str(g.tg) + " has " +
                        std::to_string(g.tg.product()) + " threads but this kernel allows at most " +
                        std::to_string(spec.max_threads) +
                        " per threadgroup (Kernel.max_threads_per_threadgroup); pass a smaller threadgroup=");
  for (int i = 0; i < 3; ++i) g.ngroups.v[i] = g.grid.v[i] == 0 ? 0 : (g.grid.v[i] - 1) / g.tg.v[i] + 1;
  // Products of three 32-bit sizes can pass 2^64: bound the total first.
  const double total = double(g.grid.v[0]) * g.grid.v[1] * g.grid.v[2];
  if (total > double(uint64_t(1) << 48)) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", total);
    throw DispatchError(kernel_prefix(kernel) + "grid " + dims_str(g.grid) + " has " + n +
                        " threads, more than metalkit dispatches at once (2^48); split the work into several calls");
  }
  return g;
}

}  // namespace mk
