// metalkit._core: buffers, libraries and kernels for Python.
#include <pybind11/numpy.h>
#include <pybind11/options.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../core/errors.h"
#include "py_attr.h"
#include "../cpu/cpu_backend.h"
#include "buffer.h"
#include "docs.h"
#include "kernel.h"
#include "metal_module.h"
#include "py_batch.h"
#include "trace.h"

namespace py = pybind11;
using namespace mk;

namespace {

// A loaded library; kernels are created once per name and shared.
struct PyLibrary {
  std::shared_ptr<LibraryImpl> impl;
  std::map<std::string, std::shared_ptr<PyKernel>> kernels;
};

void raise_as(const char* cls, const std::exception& e) {
  py::object& errors = MK_PY_ATTR("metalkit", "errors");  // the metalkit.errors module
  PyErr_SetString(errors.attr(cls).ptr(), e.what());
}

// A CPU fault's line in the user's source, from the module's line tables; asked only
// when a fault is reported, from the thread that made the call.
std::string locate_in_source(const std::string& module, uint64_t offset) {
  py::gil_scoped_acquire gil;
  try {
    return py::module_::import("metalkit.msl.symbols").attr("source_line")(module, offset).cast<std::string>();
  } catch (py::error_already_set& e) {  // printed as unraisable: the fault is still reported, without its line
    e.discard_as_unraisable("metalkit, finding the source line of a kernel fault");
    return "";
  }
}

// Kernel.execution (i = 0) and execution_reason (1): the module's description, read by metalkit.execution.
py::object execution_part(const PyKernel& k, size_t i) {
  py::object parsed = MK_PY_ATTR("metalkit.execution", "parse")(k.spec().execution);
  return py::reinterpret_borrow<py::object>(PyTuple_GetItem(parsed.ptr(), Py_ssize_t(i)));
}

}  // namespace

const Allocation* mk::find_allocation(py::handle array) {
  // numpy views chain through .base to the exporting object; ours is a PyBuffer.
  py::handle base = array;
  for (int depth = 0; depth < 64 && base && !base.is_none(); ++depth) {
    if (py::isinstance<PyBuffer>(base)) return base.cast<PyBuffer&>().alloc.get();
    if (!py::detail::npy_api::get().PyArray_Check_(base.ptr())) {
      // A memoryview over our buffer (np.frombuffer) holds it as .obj.
      if (PyMemoryView_Check(base.ptr())) {
        base = PyMemoryView_GET_BUFFER(base.ptr())->obj;
        continue;
      }
      return nullptr;
    }
    base = py::detail::array_proxy(base.ptr())->base;
  }
  return nullptr;
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "metalkit's compiled core (use the metalkit package, not this module).";
  init_call_path();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ArgumentError& e) {
      raise_as("ArgumentError", e);
    } catch (const DispatchError& e) {
      raise_as("DispatchError", e);
    } catch (const KernelFault& e) {
      raise_as("KernelFault", e);
    } catch (const CompileFailure& e) {
      raise_as("CompileError", e);
    }
  });

  py::class_<PyBuffer>(m, "Buffer", py::buffer_protocol(), "Device memory (shared with the host).")
      .def_property_readonly("nbytes", [](const PyBuffer& b) { return b.alloc->size(); }, "Size in bytes (int).")
      .def_buffer([](PyBuffer& b) {
        return py::buffer_info(b.alloc->data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {py::ssize_t(b.alloc->size())}, {py::ssize_t(1)});
      });

  source_locator() = locate_in_source;

  bind_trace(m);
  m.def("allocate_guarded", [](size_t nbytes, size_t align) { return PyBuffer{cpu_allocate_guarded(nbytes, align)}; },
        py::arg("nbytes"), py::arg("align"), "Checked mode: nbytes ending right at 64 GiB of inaccessible address space, above as much.");
  m.def("allocate", [](size_t nbytes) { return PyBuffer{cpu_allocate(nbytes)}; }, py::arg("nbytes"),
        "Page-aligned device memory of nbytes bytes (between 4 GiB guards on the CPU).");

  py::class_<PyKernel, std::shared_ptr<PyKernel>> kernel(m, "Kernel", docs::kKernel);
  {
    py::options own_signature;  // kCall starts with the text signature help() shows; pybind's is (*args, **kwargs)
    own_signature.disable_function_signatures();
    kernel.def("__call__", &PyKernel::call, docs::kCall);
  }
  kernel.def_property_readonly("name", [](const PyKernel& k) { return k.spec().name; }, docs::kName)
      .def_property_readonly("args", &PyKernel::arg_specs, docs::kArgs)
      .def_property_readonly("max_threads_per_threadgroup", [](const PyKernel& k) { return k.spec().max_threads; },
                             docs::kMaxThreads)
      .def_property_readonly("simd_width", [](const PyKernel& k) { return k.spec().simd_width; }, docs::kSimdWidth)
      .def_property_readonly("uses_barriers", [](const PyKernel& k) { return k.spec().needs_fibers; },
                             docs::kUsesBarriers)
      .def_property_readonly("execution", [](const PyKernel& k) { return execution_part(k, 0); }, docs::kExecution)
      .def_property_readonly("execution_reason", [](const PyKernel& k) { return execution_part(k, 1); },
                             docs::kExecutionReason)
      .def_property_readonly("last_gpu_time", &PyKernel::last_gpu_time, docs::kLastGpuTime)
      .def_property_readonly("signature", &PyKernel::signature, docs::kSignature)
      .def_property_readonly("location", [](const PyKernel& k) { return py::make_tuple(k.spec().file, k.spec().line); },
                             docs::kLocation)
      .def_readwrite("_checked_factory", &PyKernel::checked_factory,
                     "Builds this kernel checked (every access recorded) for check= races, uninit, lockstep.")
      .def("__repr__", [](const PyKernel& k) { return "<metalkit.Kernel " + k.signature() + ">"; });

  py::class_<PyLibrary, std::shared_ptr<PyLibrary>>(m, "Library",
                                                     "A loaded module's kernels (metalkit.Library wraps it).")
      .def_property_readonly("kernel_names", [](const PyLibrary& l) { return l.impl->kernel_names(); },
                             "Names of the kernels in the module (list of str).")
      .def("kernel", [](py::object self, const std::string& name) -> py::object {
        auto& lib = self.cast<PyLibrary&>();
        auto it = lib.kernels.find(name);
        if (it != lib.kernels.end()) return py::cast(it->second);
        std::shared_ptr<LibraryImpl> keep = lib.impl;
        std::shared_ptr<KernelImpl> impl;
        if (keep->concurrent_kernels()) {  // a GPU pipeline build: other Python threads run meanwhile
          py::gil_scoped_release nogil;
          impl = keep->kernel(name);
        } else {
          impl = keep->kernel(name);
        }
        if (!impl) return py::none();
        it = lib.kernels.find(name);  // another thread may have asked for it meanwhile
        if (it != lib.kernels.end()) return py::cast(it->second);
        auto k = std::make_shared<PyKernel>(impl);
        lib.kernels[name] = k;
        return py::cast(k);
      }, py::arg("name"), "The kernel of that name, created once and shared, or None if there is none.");

  register_batch(m);

  register_metal(m, [](std::shared_ptr<LibraryImpl> impl) {
    return py::cast(std::make_shared<PyLibrary>(PyLibrary{std::move(impl), {}}));
  });

  m.def("load_cpu_library", [](const std::string& path) { return std::make_shared<PyLibrary>(PyLibrary{load_cpu_library(path), {}}); },
        py::arg("path"), "Loads a module compiled by metalkit.msl.");
}
