// Struct parameters: the numpy structured dtype of Kernel.args, and whether the
// values a call passes mean to the kernel what they mean in numpy.
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "../core/arg_spec.h"

namespace mk {

// The structured dtype with the layout the kernel reads; None if the layout is unknown.
pybind11::object struct_dtype(const ArgSpec& s);

// Throws ArgumentError unless elements of dtype `given` mean what the kernel reads
// (same dtype, or the same numbers at the same offsets: metalkit._structs.mismatch).
// `expected` is struct_dtype(s); `position` its index in Kernel.args, for the message.
void check_struct_dtype(const std::string& kernel, const ArgSpec& s, pybind11::handle given,
                        pybind11::handle expected);

// A struct value (numpy.void, a structured array of one element) passed for a
// `constant S&` parameter: its dtype checked as above. Bytes are taken as they are.
void check_struct_value(const std::string& kernel, const ArgSpec& s, pybind11::handle value,
                        pybind11::handle expected);

// A numpy.void for a read-only struct buffer (`constant S*`): a 0-d array of it,
// which the call keeps alive; other objects are returned as they are.
pybind11::object struct_buffer(const std::string& kernel, const ArgSpec& s, pybind11::handle value);

}  // namespace mk
