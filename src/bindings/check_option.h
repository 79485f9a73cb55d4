// check= (and METALKIT_CHECK): which of the CPU simulator's checks a call runs.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace mk {

// True: bounds and barriers; False: none; "all": every check; else names, as one string split
// by commas or an iterable of strings: bounds, barriers, races, uninit, lockstep, and warn (the
// findings of the access checks are warnings, not a KernelFault). Throws ArgumentError naming
// the kernel (empty: the environment variable) and the names it takes.
uint32_t parse_checks(const std::string& kernel, pybind11::handle value);
uint32_t parse_checks(const std::string& where, const std::string& text);

}  // namespace mk
