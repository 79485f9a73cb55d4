// metalkit._core's Metal entry points (built on Apple only) and, on every
// platform, `_core.metal_rules`: the shared decisions the Metal backend makes,
// exposed so they are tested where Metal cannot run.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>

#include "../core/backend.h"

namespace mk {

// Makes the Python Library object for a backend library (module.cpp owns that class).
using WrapLibrary = std::function<pybind11::object(std::shared_ptr<LibraryImpl>)>;

void register_metal(pybind11::module_& m, WrapLibrary wrap_library);

}  // namespace mk
