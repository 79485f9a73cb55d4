// Error types of the core. The bindings turn each into the Python exception of
// the same name (metalkit.errors); messages name the kernel, the parameter and
// the fix, and are written here, once.
#pragma once
#include <stdexcept>
#include <string>

namespace mk {

struct ArgumentError : std::runtime_error { using std::runtime_error::runtime_error; };
struct DispatchError : std::runtime_error { using std::runtime_error::runtime_error; };
struct KernelFault : std::runtime_error { using std::runtime_error::runtime_error; };
// A backend-level compile failure (Metal); carries the compiler's text.
struct CompileFailure : std::runtime_error { using std::runtime_error::runtime_error; };

// How every message names its kernel: "kernel 'name'", and "kernel 'name': " before what
// follows.
inline std::string kernel_label(const std::string& name) { return "kernel '" + name + "'"; }
inline std::string kernel_prefix(const std::string& name) { return kernel_label(name) + ": "; }

}  // namespace mk
