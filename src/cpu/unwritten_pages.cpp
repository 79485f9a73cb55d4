#include "unwritten_pages.h"

#include <algorithm>

#include "guarded.h"

#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

namespace mk {

std::vector<std::pair<uint64_t, uint64_t>> never_written(const void* p, size_t n) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
#ifdef __linux__
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  uintptr_t data = 0;
  size_t size = 0;
  bool fresh = false;
  if (!n || !guarded_extent(lo, &data, &size, &fresh) || !fresh || hi > data + size) return out;
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uint64_t entries[512];  // one 64-bit entry per page: bit 63 present, bit 62 swapped
  for (uintptr_t first = lo / page, last = (hi - 1) / page; first <= last;) {
    const size_t want = std::min<uintptr_t>(512, last - first + 1);
    const ssize_t got = pread(fd, entries, want * 8, off_t(first * 8));
    if (got != ssize_t(want * 8)) {  // unreadable: nothing is reported
      out.clear();
      break;
    }
    for (size_t k = 0; k < want; ++k) {
      if (entries[k] >> 62) continue;  // present or swapped: written
      const uintptr_t a = std::max(lo, (first + k) * page), b = std::min(hi, (first + k + 1) * page);
      if (!out.empty() && out.back().first + out.back().second == a - lo)
        out.back().second += b - a;
      else
        out.push_back({a - lo, b - a});
    }
    first += want;
  }
  close(fd);
#else
  (void)p;
  (void)n;
#endif
  return out;
}

}  // namespace mk
