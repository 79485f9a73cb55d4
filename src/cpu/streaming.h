// When a loop kernel's outputs are stored past the cache (launch.h run_groups_streamed).
#pragma once
#include <cstdint>
#include <string>

namespace mk {

// The bytes a dispatch of `kernel` must write through its streamed outputs before they are
// streamed: METALKIT_STREAM_BYTES, read at each call, else half the last-level cache (smaller
// outputs are read again sooner from the cache than from memory). Throws ArgumentError naming
// the variable if it is not a byte count.
uint64_t stream_bytes(const std::string& kernel);

}  // namespace mk
