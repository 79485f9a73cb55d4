// Memory surrounded by inaccessible address space, so an out-of-bounds access
// faults instead of reaching other memory, and the fault can be attributed.
//
// Checked mode (check=True) stages every array into a GuardedAllocation with
// check_guard() bytes on each side whose bytes end right at the upper guard, and
// places each [[threadgroup(i)]] slot the same way (checked_threadgroup_arena); checked builds
// place kernel-scope threadgroup variables so too (checked_threadgroup_variable).
// Default-mode device memory (metalkit.empty/zeros/asarray) gets kHostGuard on
// each side. Reserving address space costs no memory: the guards are PROT_NONE.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/backend.h"

namespace mk {

// Checked mode's guard on each side: 64 GiB, which every 32-bit index, signed or
// unsigned, into elements of up to 16 bytes (float4, long2) stays within. Where the
// address space is limited (ulimit -v), the largest of 4 GiB, 256 MiB, 16 MiB, 1 MiB
// of which four fit; chosen once per process.
size_t check_guard();
// Default mode: smaller, so tens of thousands of live arrays fit in the address space.
constexpr size_t kHostGuard = size_t(4) << 30;

class GuardedAllocation : public Allocation {
 public:
  // nbytes between two guards of `guard` bytes. at_end: the bytes end right at
  // the upper guard (start aligned down to `align`); else they start page-aligned
  // at the lower one. Throws std::bad_alloc if the address space is not there.
  GuardedAllocation(size_t nbytes, size_t align, size_t guard, bool at_end);
  ~GuardedAllocation() override;
  GuardedAllocation(const GuardedAllocation&) = delete;
  GuardedAllocation& operator=(const GuardedAllocation&) = delete;

 private:
  char* base_;
  size_t total_;
};

// The live guarded allocation whose reservation (guards included) holds addr:
// its data and size, and whether metalkit.empty made it (fresh: not a staged copy).
// False if none does.
bool guarded_extent(uintptr_t addr, uintptr_t* data, size_t* size, bool* fresh = nullptr);

// Checked mode's threadgroup memory: slot k (the k-th [[threadgroup(i)]]
// parameter, `sizes[k]` bytes aligned to `aligns[k]`) ends right below
// check_guard() inaccessible bytes and starts above more. The offsets the
// launcher adds to the arena base, the same for every thread.
std::vector<uint64_t> checked_threadgroup_offsets(const std::vector<size_t>& sizes, const std::vector<size_t>& aligns);

// This thread's checked arena, laid out for those slots (reserved on first use,
// kept for the thread's life). Throws std::bad_alloc without the address space.
char* checked_threadgroup_arena(const std::vector<size_t>& sizes, const std::vector<uint64_t>& offsets);

// Which slot of this thread's checked arena (as last laid out) an address strays
// from, and its byte offset from the slot's start (negative before it). False if
// addr is not in the arena.
bool checked_threadgroup_slot(uintptr_t addr, int* slot, int64_t* offset);

// Checked builds' kernel-scope threadgroup variables (`threadgroup float s[64];` in a kernel):
// this OS thread's storage for the variable whose thread-local is `key`, `size` bytes aligned to
// `align` ending right at check_guard() inaccessible bytes, with the pages below the one holding
// its first byte inaccessible too. A variable keeps its cell until the next chunk of a dispatch
// (forget_threadgroup_variables), so every thread of the groups this OS thread runs shares it.
// Without the address space, the thread-local itself (unguarded).
void* checked_threadgroup_variable(const void* key, uint64_t size, uint64_t align, uint64_t elem_size, const char* name);
void forget_threadgroup_variables();

// The variable of this thread's cells an address strays from: its name, element size and size
// in bytes, and the byte offset from its start. False if addr is in none of them.
bool checked_threadgroup_variable_at(uintptr_t addr, std::string* name, uint64_t* elem_size, uint64_t* size,
                                     int64_t* offset);

}  // namespace mk
