// Device memory as a Python object: the base of every metalkit.empty/zeros/asarray array.
#pragma once
#include <pybind11/pybind11.h>

#include <memory>

#include "../core/backend.h"

namespace mk {

struct PyBuffer {
  std::shared_ptr<Allocation> alloc;
};

// The allocation under a numpy array (following .base), or nullptr for host memory.
const Allocation* find_allocation(pybind11::handle array);

}  // namespace mk
