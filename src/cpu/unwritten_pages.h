// check="uninit" on device memory: which bytes of an array metalkit.empty made nothing has
// written yet. Its pages come from the kernel zero-filled on first touch; a page neither the
// host nor a kernel has touched is still absent from the process's page table (Linux's
// /proc/self/pagemap tells, per page, whether it is present or swapped out). A page that was
// only read (the shared zero page is mapped then) counts as written: a miss, never a false
// report; so does a transparent huge page filled in around a written one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mk {

// (offset, length) byte ranges of [p, p + n) on pages never touched, if p is in an allocation
// metalkit.empty made; empty otherwise, and where there is no pagemap (not Linux).
std::vector<std::pair<uint64_t, uint64_t>> never_written(const void* p, size_t n);

}  // namespace mk
