#include "call_args.h"

#include <pybind11/stl.h>

#include "../core/errors.h"
#include "convert.h"
#include "py_attr.h"

namespace py = pybind11;

namespace mk {
namespace {

// " (did you mean 'out'?)", or "" when no name is close.
std::string closest(const std::string& key, const std::vector<std::string>& names) {
  py::object& close = MK_PY_ATTR("difflib", "get_close_matches");
  py::list found = close(key, py::cast(names), 1);
  return found.empty() ? "" : " (did you mean '" + std::string(py::str(found[0])) + "'?)";
}

}  // namespace

std::vector<py::handle> match_arguments(const KernelSpec& spec, const std::vector<int>& slot_params,
                                        const py::args& args, const NamedArgs& named,
                                        const std::function<std::string()>& signature, const char* call_keywords) {
  const std::string& k = spec.name;
  const size_t n = slot_params.size();
  if (args.size() > n)
    throw ArgumentError(kernel_label(k) + " takes " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") +
                        " but " + std::to_string(args.size()) + (args.size() == 1 ? " was" : " were") +
                        " given: " + signature());
  std::vector<py::handle> out(n);
  for (size_t i = 0; i < args.size(); ++i) out[i] = args[i];
  for (const auto& [key, value] : named) {
    size_t slot = n;
    for (size_t i = 0; i < n && slot == n; ++i)
      if (spec.args[slot_params[i]].name == key) slot = i;
    if (slot == n) {
      std::vector<std::string> names;
      for (int p : slot_params) names.push_back(spec.args[p].name);
      std::string keywords = call_keywords;
      for (size_t a = 0, b; a < keywords.size(); a = b + 1) {  // "grid=, threadgroup= and timeout=" -> names
        b = keywords.find_first_of(", ", a);
        if (b == std::string::npos) b = keywords.size();
        std::string w = keywords.substr(a, b - a);
        if (!w.empty() && w.back() == '=') names.push_back(w.substr(0, w.size() - 1));
      }
      throw ArgumentError(kernel_label(k) + " has no parameter named '" + key + "'" + closest(key, names) +
                          "; it takes " + signature() + ", and the call's own keywords are " + call_keywords);
    }
    if (out[slot])
      throw ArgumentError(kernel_label(k) + " got two values for " + describe_param(spec.args[slot_params[slot]]) +
                          ": argument " + std::to_string(slot + 1) + " and " + key + "=; pass it once");
    out[slot] = value;
  }
  std::string missing;
  size_t count = 0;
  for (size_t i = 0; i < n; ++i)
    if (!out[i]) {
      missing += (count++ ? ", " : "") + describe_param(spec.args[slot_params[i]]);
    }
  if (count)
    throw ArgumentError(kernel_label(k) + " is missing " + (count == 1 ? "an argument" : std::to_string(count) + " arguments") +
                        " for " + missing + "; pass " + (count == 1 ? "it" : "them") +
                        " in order or by name (None for a buffer the kernel does not read): " + signature());
  return out;
}

void none_for_scalar(const std::string& kernel, const ArgSpec& s) {
  throw ArgumentError(kernel_prefix(kernel) + describe_param(s) +
                      " takes a value, not None; None stands only for a buffer (a pointer parameter) the kernel "
                      "does not read");
}

}  // namespace mk
