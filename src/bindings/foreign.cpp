#include "foreign.h"

#include "../core/errors.h"
#include "convert.h"
#include "py_attr.h"

namespace py = pybind11;

namespace mk {

py::handle foreign_array(const std::string& kernel, const ArgSpec& s, py::handle dtype, py::handle obj,
                         std::vector<py::object>& keep) {
  const auto type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  if (!PyObject_CheckBuffer(obj.ptr()) && !PyObject_HasAttrString(type, "__dlpack__")) return obj;
  py::object& view = MK_PY_ATTR("metalkit._interop", "for_parameter");
  keep.push_back(view(obj, kernel_prefix(kernel) + describe_param(s), dtype, s.writable));
  return keep.back();
}

}  // namespace mk
