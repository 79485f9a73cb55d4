#include "struct_args.h"

#include <pybind11/numpy.h>

#include "../core/errors.h"
#include "convert.h"
#include "py_attr.h"

namespace py = pybind11;

namespace mk {
namespace {

// metalkit._structs.dtype's input: (size, align, fields), nested layouts the same way.
py::tuple layout_tuple(const StructLayout& l) {
  py::list fields;
  for (const FieldLayout& f : l.fields) {
    py::tuple dims(f.dims.size());
    for (size_t i = 0; i < f.dims.size(); ++i) dims[i] = py::int_(f.dims[i]);
    py::object nested = f.layout ? py::object(layout_tuple(*f.layout)) : py::object(py::none());
    fields.append(py::make_tuple(f.name, f.offset, numpy_type_name(f.type), f.vec_width, f.elem_size, dims, nested));
  }
  return py::make_tuple(l.size, l.align, fields);
}

bool is_void_scalar(py::handle v) {
  py::object& void_ = MK_PY_ATTR("numpy", "void");
  return py::isinstance(v, void_);
}

}  // namespace

py::object struct_dtype(const ArgSpec& s) {
  if (s.type != MK_T_STRUCT || !s.layout) return py::none();
  py::object& make = MK_PY_ATTR("metalkit._structs", "dtype");
  return make(layout_tuple(*s.layout));
}

void check_struct_dtype(const std::string& kernel, const ArgSpec& s, py::handle given, py::handle expected) {
  if (expected.is_none() || given.ptr() == expected.ptr()) return;
  auto& api = py::detail::npy_api::get();
  if (api.PyArray_EquivTypes_(given.ptr(), expected.ptr())) return;
  py::object& mismatch = MK_PY_ATTR("metalkit._structs", "mismatch");
  py::object why = mismatch(given, expected);
  if (why.is_none()) return;
  throw ArgumentError(kernel_prefix(kernel) + describe_param(s) + " is a struct whose layout differs from " +
                      "the values passed: " + std::string(py::str(why)) + "; build them with the kernel's dtype, " +
                      "np.zeros(" + (s.kind == ArgKind::Scalar ? "()" : "n") + ", kernel.args[" +
                      std::to_string(s.position) + "].dtype), and set the fields by name");
}

void check_struct_value(const std::string& kernel, const ArgSpec& s, py::handle value, py::handle expected) {
  if (expected.is_none()) return;
  if (is_void_scalar(value) || py::isinstance<py::array>(value)) {
    py::object dt = value.attr("dtype");
    if (dt.attr("names").is_none() && dt.attr("subdtype").is_none()) return;  // raw bytes
    check_struct_dtype(kernel, s, dt, expected);
  }
}

py::object struct_buffer(const std::string& kernel, const ArgSpec& s, py::handle value) {
  if (s.type != MK_T_STRUCT || !is_void_scalar(value)) return py::reinterpret_borrow<py::object>(value);
  if (s.writable)
    throw ArgumentError(kernel_prefix(kernel) + describe_param(s) + " may be written by the kernel, and a " +
                        "numpy.void is a copy of the struct; pass an array holding it, e.g. np.zeros(1, kernel.args[" +
                        std::to_string(s.position) + "].dtype), or arr[i:i+1] for element i of arr");
  py::object& asarray = MK_PY_ATTR("numpy", "asarray");
  return asarray(value);
}

}  // namespace mk
