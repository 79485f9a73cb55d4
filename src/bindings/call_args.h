// A call's arguments matched to the kernel's parameters: positional ones in
// buffer-index order, then keywords by parameter name, as Python matches them.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../core/arg_spec.h"

namespace mk {

using NamedArgs = std::vector<std::pair<std::string, pybind11::handle>>;

// The argument for each slot (slot_params[i]: the parameter slot i takes). Throws
// ArgumentError for too many arguments, a parameter given twice, a keyword naming no
// parameter (with the closest name, among parameters and the call's own keywords, listed
// in call_keywords as "grid=, threadgroup=, ..."), and missing arguments.
std::vector<pybind11::handle> match_arguments(const KernelSpec& spec, const std::vector<int>& slot_params,
                                              const pybind11::args& args, const NamedArgs& named,
                                              const std::function<std::string()>& signature,
                                              const char* call_keywords);

// None for a scalar parameter: ArgumentError (only a buffer may be left unbound).
[[noreturn]] void none_for_scalar(const std::string& kernel, const ArgSpec& s);

}  // namespace mk
