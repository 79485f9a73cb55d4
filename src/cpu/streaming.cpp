#include "streaming.h"

#include <cstdlib>
#include <fstream>
#include <string>
#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

#include "../core/errors.h"

namespace mk {
namespace {

// "32768K", "1M" or bytes, as sysfs writes a cache's size; 0 if unreadable.
uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return 0;
  if (*end == 'K') return v << 10;
  if (*end == 'M') return v << 20;
  if (*end == 'G') return v << 30;
  return v;
}

// The largest cache of the highest level the first CPU reports, 32 MiB if none.
uint64_t last_level_cache() {
  uint64_t best = 0;
#ifdef __APPLE__
  for (const char* name : {"hw.l3cachesize", "hw.l2cachesize"}) {
    uint64_t v = 0;
    size_t len = sizeof v;
    if (sysctlbyname(name, &v, &len, nullptr, 0) == 0 && v) return v;
  }
#else
  int top = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int l = 0;
    std::string s;
    if (!(level >> l) || !(size >> s)) continue;
    const uint64_t bytes = parse_size(s);
    if (bytes && (l > top || (l == top && bytes > best))) top = l, best = bytes;
  }
#endif
  return best ? best : uint64_t(32) << 20;
}

}  // namespace

uint64_t stream_bytes(const std::string& kernel) {
  static const uint64_t half_cache = last_level_cache() / 2;
  const char* v = std::getenv("METALKIT_STREAM_BYTES");
  if (!v || !*v) return half_cache;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v == '-' || *end)
    throw ArgumentError(kernel_prefix(kernel) + "METALKIT_STREAM_BYTES must be a number of bytes (0: stream "
                        "every dispatch; unset: half the last-level cache), got '" + v + "'");
  return n;
}

}  // namespace mk
