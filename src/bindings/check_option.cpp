#include "check_option.h"

#include "../core/checks.h"
#include "../core/errors.h"

namespace py = pybind11;

namespace mk {
namespace {

constexpr const char* kNames = "True, False, \"all\", or names from bounds, barriers, races, uninit, lockstep and warn "
                               "(\"races,uninit\" or a list of them)";

uint32_t one(const std::string& where, std::string name) {
  while (!name.empty() && name.front() == ' ') name.erase(name.begin());
  while (!name.empty() && name.back() == ' ') name.pop_back();
  if (name == "bounds") return kCheckBounds;
  if (name == "barriers") return kCheckBarriers;
  if (name == "races") return kCheckRaces;
  if (name == "uninit") return kCheckUninit;
  if (name == "lockstep") return kCheckLockstep;
  if (name == "warn") return kCheckWarn;
  if (name == "all") return kCheckBounds | kCheckBarriers | kCheckHazards;
  if (name == "1" || name == "true" || name == "True") return kCheckBounds | kCheckBarriers;
  if (name == "0" || name.empty()) return 0;
  throw ArgumentError(where + "names an unknown check '" + name + "'; it takes " + kNames);
}

}  // namespace

uint32_t parse_checks(const std::string& where, const std::string& text) {
  uint32_t out = 0;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    out |= one(where, text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

uint32_t parse_checks(const std::string& kernel, py::handle value) {
  const std::string where = kernel_prefix(kernel) + "check= ";
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True ? kCheckBounds | kCheckBarriers : 0;
  if (py::isinstance<py::str>(value)) return parse_checks(where, value.cast<std::string>());
  uint32_t out = 0;
  try {
    for (py::handle item : py::iter(value)) {
      if (!py::isinstance<py::str>(item)) throw ArgumentError(where + "takes " + kNames);
      out |= one(where, item.cast<std::string>());
    }
  } catch (py::error_already_set&) {  // not iterable
    throw ArgumentError(where + "takes " + kNames + ", got " + std::string(py::str(py::type::of(value).attr("__name__"))));
  }
  return out;
}

}  // namespace mk
