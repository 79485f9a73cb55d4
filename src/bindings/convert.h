// Python values -> the bytes a kernel parameter expects.
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "../core/arg_spec.h"

namespace mk {

// Writes `value` converted to spec's type into dst (spec.elem_size bytes),
// with a range check. Throws ArgumentError naming kernel and parameter.
void convert_scalar(const std::string& kernel, const ArgSpec& spec, pybind11::handle value, void* dst);

// "parameter 'a' (device const float* a)" for messages.
std::string describe_param(const ArgSpec& spec);

}  // namespace mk
