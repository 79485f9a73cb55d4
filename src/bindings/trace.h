// metalkit.trace's entry points in the compiled module (_trace_call, _take_trace).
#pragma once
#include <pybind11/pybind11.h>

namespace mk {

void bind_trace(pybind11::module_& m);

}  // namespace mk
