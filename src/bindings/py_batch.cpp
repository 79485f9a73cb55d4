#include "py_batch.h"

#include <pybind11/stl.h>

#include <atomic>
#include <optional>

#include "../core/errors.h"
#include "docs.h"
#include "py_attr.h"
#include "kernel_log.h"

namespace py = pybind11;

namespace mk {
namespace {

// weak: the Python Batch objects own the state; a thread that exits with a
// batch open (its __exit__ never ran) holds nothing.
thread_local std::weak_ptr<PyBatch> t_current;
std::atomic<bool> g_emulate{false};

// What `metalkit.batch()` returns. Nested blocks share the outermost one's state.
struct BatchScope {
  std::shared_ptr<PyBatch> state;
};

void check_owner(const PyBatch& b) {
  if (b.owner != std::this_thread::get_id())
    throw std::runtime_error("metalkit.batch(): a batch is exited by the thread that entered it");
}

}  // namespace

PyBatch::~PyBatch() {
  // Never exited (the block was abandoned): drop the queued GPU work unrun
  // before letting go of the arrays it would have used.
  encoding.reset();
}

void PyBatch::settle() {
  const bool ran = pending();
  if (ran) {
    py::gil_scoped_release nogil;
    complete();
  }
  if (fault().empty()) {
    py::object& copyto = MK_PY_ATTR("numpy", "copyto");
    for (Staged& s : staged)
      if (s.copy_back) copyto(s.original, s.copy);
  }
  staged.clear();
  keep_alive.clear();
  if (ran) deliver_kernel_log();  // what the queued calls logged (an emulated queue's, Metal's)
}

std::shared_ptr<PyBatch> current_batch() { return t_current.lock(); }

bool emulating_gpu_batches() { return g_emulate.load(std::memory_order_relaxed); }

void register_batch(py::module_& m) {
  py::class_<BatchScope>(m, "Batch", docs::kBatch)
      .def(py::init<>())
      .def("__enter__", [](py::object self) {
        auto& scope = self.cast<BatchScope&>();
        std::shared_ptr<PyBatch> open = t_current.lock();
        if (!open) {  // the outermost block of this thread starts a batch; inner ones join it
          open = std::make_shared<PyBatch>();
          open->owner = std::this_thread::get_id();
          t_current = open;
        }
        scope.state = open;
        ++open->depth;
        return self;
      }, "Opens the batch (or joins the thread's open one); returns it.")
      .def("__exit__", [](BatchScope& scope, py::handle exc_type, py::handle exc, py::handle) {
        if (!scope.state || scope.state->depth == 0)
          throw std::runtime_error("metalkit.batch(): __exit__ without __enter__");
        PyBatch& b = *scope.state;
        check_owner(b);
        if (--b.depth > 0) return false;  // an inner block: the outermost one waits
        t_current.reset();
        // Even when the block raised, the calls made before it ran as they would
        // have outside a batch: finish them, so nothing is left using the arrays.
        b.settle();
        if (!b.fault().empty()) {
          if (exc_type.is_none()) throw KernelFault(b.fault());
          if (py::hasattr(exc, "add_note"))  // Python 3.11+: keep the user's exception, mention the fault
            exc.attr("add_note")("metalkit.batch(): a kernel call in the block also faulted: " + b.fault());
        }
        return false;
      }, py::arg("exc_type"), py::arg("exc"), py::arg("tb"),
         "Waits for the queued calls; raises the KernelFault of a call that faulted.")
      .def_property_readonly("gpu_time", [](const BatchScope& s) { return s.state ? s.state->gpu_time() : 0.0; },
                             docs::kBatchGpuTime)
      .def_property_readonly("calls", [](const BatchScope& s) { return s.state ? s.state->calls() : uint64_t(0); },
                             docs::kBatchCalls);

  m.def("_emulate_gpu_batches", [](bool on) { g_emulate = on; }, py::arg("on"),
        "Tests only: CPU calls in a batch are queued and run at its end, as on a GPU.");
  m.def("_open_batches", [](std::optional<uint32_t> limit) {
    if (limit) set_open_batch_limit(*limit);
    return py::make_tuple(open_batches(), open_batch_limit());
  }, py::arg("limit") = py::none(),
        "Tests only: (batches holding queued GPU work, how many may); limit= sets the latter.");
}

}  // namespace mk
