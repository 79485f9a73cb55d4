#include "convert.h"

#include <pybind11/numpy.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../core/errors.h"
#include "py_attr.h"
#include "../core/float16.h"

namespace py = pybind11;

namespace mk {
namespace {

[[noreturn]] void fail(const std::string& kernel, const ArgSpec& s, const std::string& what) {
  throw ArgumentError(kernel_prefix(kernel) + describe_param(s) + " " + what);
}

bool is_integer(py::handle v) {
  if (PyBool_Check(v.ptr())) return false;
  if (PyLong_Check(v.ptr())) return true;
  py::object& integer = MK_PY_ATTR("numpy", "integer");
  return py::isinstance(v, integer);
}

bool is_number(py::handle v) {
  if (PyFloat_Check(v.ptr()) || is_integer(v)) return true;
  py::object& floating = MK_PY_ATTR("numpy", "floating");
  return py::isinstance(v, floating);
}

bool is_bool(py::handle v) {
  if (PyBool_Check(v.ptr())) return true;
  py::object& bool_ = MK_PY_ATTR("numpy", "bool_");
  return py::isinstance(v, bool_);
}

template <class T>
void put_int(const std::string& k, const ArgSpec& s, py::handle v, void* dst) {
  if (!is_integer(v)) fail(k, s, "takes an integer, got " + std::string(py::str(py::type::of(v).attr("__name__"))) +
                                  "; pass an int (no silent conversion)");
  py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
  int overflow = 0;
  long long sv = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  bool ok;
  T out;
  if (overflow > 0 || (overflow == 0 && sv >= 0 && std::is_unsigned<T>::value)) {
    unsigned long long uv = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      ok = false;
    } else {
      ok = uv <= (unsigned long long)std::numeric_limits<T>::max();
    }
    out = T(uv);
  } else {
    ok = overflow == 0 && sv >= (long long)std::numeric_limits<T>::min() &&
         (sv < 0 || (unsigned long long)sv <= (unsigned long long)std::numeric_limits<T>::max());
    out = T(sv);
  }
  if (!ok)
    fail(k, s, "got " + std::string(py::str(v)) + ", out of range for " + msl_type_name(s.type) + " [" +
                   std::to_string(+std::numeric_limits<T>::min()) + ", " + std::to_string(+std::numeric_limits<T>::max()) + "]");
  std::memcpy(dst, &out, sizeof(T));
}

void put_float(const std::string& k, const ArgSpec& s, py::handle v, void* dst) {
  if (!is_number(v)) fail(k, s, "takes a number, got " + std::string(py::str(py::type::of(v).attr("__name__"))));
  double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    fail(k, s, "got a value that does not convert to float");
  }
  // Out of range is a finite value that rounds to infinity in the parameter's type.
  const bool finite = std::isfinite(d);
  float f = std::fabs(d) > 3.5e38 && finite ? INFINITY : float(d);
  uint16_t h = 0;
  bool inf = std::isinf(f);
  if (s.type != MK_T_F32) {
    h = s.type == MK_T_F16 ? float_to_half(f) : float_to_bfloat(f);
    inf = (h & 0x7FFFu) == (s.type == MK_T_F16 ? 0x7C00u : 0x7F80u);
  }
  if (finite && inf) fail(k, s, "got " + std::string(py::str(v)) + ", out of range for " + msl_type_name(s.type));
  if (s.type == MK_T_F32)
    std::memcpy(dst, &f, 4);
  else
    std::memcpy(dst, &h, 2);
}

void put_element(const std::string& k, const ArgSpec& s, py::handle v, void* dst) {
  switch (s.type) {
    case MK_T_BOOL:
      if (!is_bool(v)) fail(k, s, "takes a bool, got " + std::string(py::str(py::type::of(v).attr("__name__"))));
      *static_cast<unsigned char*>(dst) = PyObject_IsTrue(v.ptr()) ? 1 : 0;
      return;
    case MK_T_I8: return put_int<int8_t>(k, s, v, dst);
    case MK_T_U8: return put_int<uint8_t>(k, s, v, dst);
    case MK_T_I16: return put_int<int16_t>(k, s, v, dst);
    case MK_T_U16: return put_int<uint16_t>(k, s, v, dst);
    case MK_T_I32: return put_int<int32_t>(k, s, v, dst);
    case MK_T_U32: return put_int<uint32_t>(k, s, v, dst);
    case MK_T_I64: return put_int<int64_t>(k, s, v, dst);
    case MK_T_U64: return put_int<uint64_t>(k, s, v, dst);
    default: return put_float(k, s, v, dst);
  }
}

// Raw bytes of a bytes-like / numpy value, if it has exactly `n` bytes.
bool put_bytes(py::handle v, size_t n, void* dst, size_t* got) {
  Py_buffer view;
  if (PyObject_GetBuffer(v.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    *got = size_t(-1);
    return false;
  }
  *got = size_t(view.len);
  bool ok = size_t(view.len) == n;
  if (ok) std::memcpy(dst, view.buf, n);
  PyBuffer_Release(&view);
  return ok;
}

}  // namespace

std::string describe_param(const ArgSpec& s) {
  std::string where = s.kind == ArgKind::Threadgroup ? "[[threadgroup(" + std::to_string(s.index) + ")]]"
                                                      : "[[buffer(" + std::to_string(s.index) + ")]]";
  return "parameter '" + s.name + "' (" + s.decl + " " + where + ")";
}

void convert_scalar(const std::string& k, const ArgSpec& s, py::handle v, void* dst) {
  if (s.array_len) {  // constant T x[N]: exactly N values, each converted as a T
    py::object items;
    if (py::isinstance<py::array>(v)) {
      auto a = py::reinterpret_borrow<py::array>(v);
      if (a.ndim() == 0) fail(k, s, "is an array of " + std::to_string(s.array_len) + "; pass a sequence or numpy array of " + std::to_string(s.array_len) + " values");
      items = a.attr("tolist")();
    } else if (PySequence_Check(v.ptr()) && !PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr())) {
      items = py::reinterpret_borrow<py::object>(v);
    } else {
      fail(k, s, "is an array of " + std::to_string(s.array_len) + " values; pass a sequence or numpy array of " +
                     std::to_string(s.array_len) + ", got " + std::string(py::str(py::type::of(v).attr("__name__"))));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(items);
    if (size_t(py::len(seq)) != s.array_len)
      fail(k, s, "is an array of " + std::to_string(s.array_len) + " values, got " + std::to_string(py::len(seq)));
    ArgSpec one = s;
    one.array_len = 0;
    for (uint32_t i = 0; i < s.array_len; ++i) convert_scalar(k, one, seq[i], static_cast<char*>(dst) + i * s.elem_size);
    return;
  }
  if (s.type == MK_T_STRUCT) {
    size_t got;
    if (py::isinstance<py::array>(v) && !(py::reinterpret_borrow<py::array>(v).flags() & py::array::c_style))
      fail(k, s, "needs C-contiguous bytes for its struct");
    if (!put_bytes(v, s.elem_size, dst, &got)) {
      const std::string make = "np.zeros((), kernel.args[" + std::to_string(s.position) + "].dtype)";
      if (got == size_t(-1))
        fail(k, s, "is a struct of " + std::to_string(s.elem_size) + " bytes; pass a struct value built with " + make +
                       " (fields set by name), or bytes of that size");
      fail(k, s, "is a struct of " + std::to_string(s.elem_size) + " bytes but got " + std::to_string(got) +
                     " bytes; build it with " + make + ", which has the kernel's layout");
    }
    return;
  }
  if (s.vec_width == 1) {
    if (py::isinstance<py::array>(v)) {
      auto a = py::reinterpret_borrow<py::array>(v);
      if (a.size() != 1) fail(k, s, "takes one value, got an array of " + std::to_string(a.size()));
      v = a.attr("reshape")(py::int_(-1))[py::int_(0)];
      return convert_scalar(k, s, v, dst);
    }
    return put_element(k, s, v, dst);
  }
  // A vector value: a sequence of vec_width numbers.
  py::sequence seq;
  if (py::isinstance<py::array>(v)) {
    seq = py::reinterpret_borrow<py::array>(v).attr("reshape")(py::int_(-1)).attr("tolist")();
  } else if (PySequence_Check(v.ptr()) && !PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr())) {
    seq = py::reinterpret_borrow<py::sequence>(v);
  } else {
    fail(k, s, "takes " + std::to_string(s.vec_width) + " values (" + msl_type_name(s.type) +
                   std::to_string(s.vec_width) + "); pass a tuple or numpy array of " + std::to_string(s.vec_width));
  }
  if (size_t(py::len(seq)) != size_t(s.vec_width))
    fail(k, s, "takes " + std::to_string(s.vec_width) + " values, got " + std::to_string(py::len(seq)));
  std::memset(dst, 0, s.elem_size);
  size_t eb = element_size(s.type);
  for (int i = 0; i < s.vec_width; ++i) put_element(k, s, seq[i], static_cast<char*>(dst) + i * eb);
}

}  // namespace mk
