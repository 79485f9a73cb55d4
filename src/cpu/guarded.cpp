#include "guarded.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <new>

namespace mk {
namespace {

size_t page_size() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
#ifdef MADV_HUGEPAGE
constexpr size_t kHugePagesFrom = size_t(4) << 20;  // device memory from this size asks for huge pages
#endif

// PROT_NONE and uncommitted: address space only.
char* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<char*>(p);
}

// Live guarded allocations by reservation start: what a fault address is attributed to.
struct Extent {
  uintptr_t end, data;
  size_t size;
  bool fresh;  // metalkit.empty's (not a staged copy): its pages hold nothing until written
};
std::mutex registry_lock;
std::map<uintptr_t, Extent>& registry() {
  static auto* m = new std::map<uintptr_t, Extent>;  // never destroyed: allocations may outlive statics
  return *m;
}

// Threadgroup slot k's cell in a checked arena: check_guard() inaccessible bytes,
// then a region that holds the largest slot; slot k ends where cell k ends.
size_t tg_region() { return round_up(kMaxThreadgroupMemory, page_size()); }
size_t tg_cell() { return check_guard() + tg_region(); }

struct CheckedArena {
  char* base = nullptr;
  size_t cells = 0;                 // reserved: cells * tg_cell() + check_guard() bytes
  std::vector<size_t> rw_from;      // per cell: where its accessible pages start (offset in the cell)
  std::vector<uint64_t> offsets;    // the layout last used, for fault attribution
  std::vector<size_t> sizes;
  ~CheckedArena() {
    if (base) munmap(base, cells * tg_cell() + check_guard());
  }
};
CheckedArena& this_thread_arena() {
  static thread_local CheckedArena a;
  return a;
}

// Kernel-scope threadgroup variables of checked builds: one reservation per variable (a guard,
// a region that holds the largest, a guard), reused from chunk to chunk.
struct VariableCell {
  char* base = nullptr;
  size_t rw_from = 0;  // where its accessible pages start (offset in the reservation)
  const void* key = nullptr;
  uintptr_t data = 0;
  uint64_t size = 0, elem_size = 1;
  std::string name;
};
struct VariableCells {
  std::vector<VariableCell> cells;
  size_t used = 0;  // cells[0, used) hold the variables reached since the chunk began
  ~VariableCells() {
    for (VariableCell& c : cells) munmap(c.base, 2 * check_guard() + tg_region());
  }
};
VariableCells& this_thread_variables() {
  static thread_local VariableCells v;
  return v;
}

}  // namespace

size_t check_guard() {
  static const size_t guard = [] {
    size_t g = size_t(64) << 30;
    for (; g > (size_t(1) << 20); g /= 16) {
      void* p = mmap(nullptr, 4 * g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        munmap(p, 4 * g);
        break;
      }
    }
    return g;
  }();
  return guard;
}

GuardedAllocation::GuardedAllocation(size_t nbytes, size_t align, size_t guard, bool at_end) {
  const size_t page = page_size();
  const size_t pages = round_up(std::max<size_t>(nbytes, 1), page);
  const size_t slack = at_end ? 0 : round_up(align, page) - page;  // to start at a multiple of align
  total_ = pages + slack + 2 * guard;
  base_ = reserve(total_);
  uintptr_t lo = reinterpret_cast<uintptr_t>(base_) + guard;
  if (!at_end) lo = round_up(lo, align);
  if (mprotect(reinterpret_cast<void*>(lo), pages, PROT_READ | PROT_WRITE) != 0) {
    munmap(base_, total_);
    throw std::bad_alloc();
  }
#ifdef MADV_HUGEPAGE
  // Large arrays on huge pages where the system gives them on request, as numpy asks for its
  // own: a kernel streaming a matrix of tens of MB spends a third more time on 4 KiB pages.
  if (!at_end && nbytes >= kHugePagesFrom) madvise(reinterpret_cast<void*>(lo), pages, MADV_HUGEPAGE);
#endif
  data_ = reinterpret_cast<void*>(at_end ? (lo + pages - nbytes) / align * align : lo);
  size_ = nbytes;
  std::lock_guard<std::mutex> lk(registry_lock);
  registry()[reinterpret_cast<uintptr_t>(base_)] = {reinterpret_cast<uintptr_t>(base_) + total_,
                                                    reinterpret_cast<uintptr_t>(data_), nbytes, !at_end};
}

GuardedAllocation::~GuardedAllocation() {
  {
    std::lock_guard<std::mutex> lk(registry_lock);
    registry().erase(reinterpret_cast<uintptr_t>(base_));
  }
  munmap(base_, total_);
}

bool guarded_extent(uintptr_t addr, uintptr_t* data, size_t* size, bool* fresh) {
  std::lock_guard<std::mutex> lk(registry_lock);
  auto& r = registry();
  auto it = r.upper_bound(addr);
  if (it == r.begin()) return false;
  --it;
  if (addr >= it->second.end) return false;
  *data = it->second.data;
  *size = it->second.size;
  if (fresh) *fresh = it->second.fresh;
  return true;
}

std::vector<uint64_t> checked_threadgroup_offsets(const std::vector<size_t>& sizes, const std::vector<size_t>& aligns) {
  std::vector<uint64_t> out;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint64_t end = uint64_t(k + 1) * tg_cell();
    out.push_back((end - sizes[k]) / std::max<size_t>(aligns[k], 1) * std::max<size_t>(aligns[k], 1));
  }
  return out;
}

char* checked_threadgroup_arena(const std::vector<size_t>& sizes, const std::vector<uint64_t>& offsets) {
  CheckedArena& a = this_thread_arena();
  const size_t page = page_size(), cell = tg_cell();
  if (a.cells < sizes.size()) {
    if (a.base) munmap(a.base, a.cells * cell + check_guard());
    a.base = nullptr;
    a.cells = 0;
    a.rw_from.clear();
    a.base = reserve(sizes.size() * cell + check_guard());
    a.cells = sizes.size();
    a.rw_from.assign(a.cells, cell);  // nothing accessible yet
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    // The pages from the one holding the slot's first byte to the cell's end.
    const size_t from = std::max(check_guard(), size_t(offsets[k] - k * cell) / page * page);
    if (from == a.rw_from[k]) continue;
    char* c = a.base + k * cell;
    if (mprotect(c + check_guard(), cell - check_guard(), PROT_NONE) != 0 ||
        (from < cell && mprotect(c + from, cell - from, PROT_READ | PROT_WRITE) != 0))
      throw std::bad_alloc();
    a.rw_from[k] = from;
  }
  a.offsets = offsets;
  a.sizes = sizes;
  return a.base;
}

bool checked_threadgroup_slot(uintptr_t addr, int* slot, int64_t* offset) {
  CheckedArena& a = this_thread_arena();
  const uintptr_t base = reinterpret_cast<uintptr_t>(a.base);
  if (!a.base || addr < base || addr >= base + a.cells * tg_cell() + check_guard() || a.offsets.empty()) return false;
  // The nearest slot: the one whose bytes are closest to addr.
  uint64_t best = UINT64_MAX;
  for (size_t k = 0; k < a.offsets.size(); ++k) {
    const int64_t off = int64_t(addr - base) - int64_t(a.offsets[k]);
    const uint64_t dist = off < 0 ? uint64_t(-off) : off >= int64_t(a.sizes[k]) ? uint64_t(off) - a.sizes[k] : 0;
    if (dist < best) {
      best = dist;
      *slot = int(k);
      *offset = off;
    }
  }
  return true;
}

void* checked_threadgroup_variable(const void* key, uint64_t size, uint64_t align, uint64_t elem_size,
                                   const char* name) {
  VariableCells& v = this_thread_variables();
  for (size_t k = 0; k < v.used; ++k)
    if (v.cells[k].key == key) return reinterpret_cast<void*>(v.cells[k].data);
  const size_t page = page_size(), guard = check_guard(), end = guard + tg_region();
  if (size > tg_region()) return const_cast<void*>(key);  // a static_assert refuses this at compile time
  try {
    if (v.used == v.cells.size()) {
      VariableCell c;
      c.base = reserve(2 * guard + tg_region());
      c.rw_from = end;  // nothing accessible yet
      v.cells.push_back(std::move(c));
    }
  } catch (const std::bad_alloc&) {
    return const_cast<void*>(key);
  }
  VariableCell& c = v.cells[v.used];
  const uintptr_t base = reinterpret_cast<uintptr_t>(c.base);
  const uintptr_t data = (base + end - size) / std::max<uint64_t>(align, 1) * std::max<uint64_t>(align, 1);
  const size_t from = std::max(guard, size_t(data - base) / page * page);
  if (from != c.rw_from) {
    if (mprotect(c.base + guard, tg_region(), PROT_NONE) != 0 ||
        (from < end && mprotect(c.base + from, end - from, PROT_READ | PROT_WRITE) != 0))
      return const_cast<void*>(key);
    c.rw_from = from;
  }
  ++v.used;
  c.key = key;
  c.data = data;
  c.size = size;
  c.elem_size = std::max<uint64_t>(elem_size, 1);
  c.name = name;
  return reinterpret_cast<void*>(data);
}

void forget_threadgroup_variables() { this_thread_variables().used = 0; }

bool checked_threadgroup_variable_at(uintptr_t addr, std::string* name, uint64_t* elem_size, uint64_t* size,
                                     int64_t* offset) {
  VariableCells& v = this_thread_variables();
  const size_t span = 2 * check_guard() + tg_region();
  for (size_t k = 0; k < v.used; ++k) {
    const VariableCell& c = v.cells[k];
    const uintptr_t base = reinterpret_cast<uintptr_t>(c.base);
    if (addr < base || addr >= base + span) continue;
    *name = c.name;
    *elem_size = c.elem_size;
    *size = c.size;
    *offset = int64_t(addr - c.data);
    return true;
  }
  return false;
}

}  // namespace mk
