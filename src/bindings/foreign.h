// Array arguments that are not numpy arrays: DLPack exporters (torch, JAX) and
// buffer-protocol objects (memoryview, array.array, bytearray) become numpy views
// of their memory, so a kernel's writes land in the caller's object. Numpy arrays
// never come here: their call path stays as fast as it is.
#pragma once
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "../core/arg_spec.h"

namespace mk {

// A numpy view of `obj` for array parameter `s` (element dtype `dtype`, None for
// a struct), checked by metalkit._interop and held in `keep` for the call; or `obj`
// itself if it exports no memory (the caller's array check then refuses it).
// Throws ArgumentError naming the kernel, the parameter and the fix.
pybind11::handle foreign_array(const std::string& kernel, const ArgSpec& s, pybind11::handle dtype,
                               pybind11::handle obj, std::vector<pybind11::object>& keep);

}  // namespace mk
