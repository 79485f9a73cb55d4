#include "kernel_log.h"

#include <pybind11/pybind11.h>

#include "../core/kernel_log.h"
#include "py_attr.h"

namespace py = pybind11;

namespace mk {

void deliver_kernel_log() {
  KernelLog& log = kernel_log();
  if (log.messages.empty() && !log.dropped) return;
  KernelLog taken;
  std::swap(taken, log);  // a handler that calls a kernel starts a log of its own
  py::list records;
  for (const KernelLogRecord& r : taken.messages) {
    py::object group = py::none(), thread = py::none();
    if (r.thread_known) {
      group = py::make_tuple(r.group[0], r.group[1], r.group[2]);
      thread = py::make_tuple(r.thread[0], r.thread[1], r.thread[2]);
    }
    records.append(py::make_tuple(r.kernel, group, thread, r.lane_known, r.type, r.subsystem, r.category,
                                  py::str(PyUnicode_DecodeUTF8(r.text.data(), Py_ssize_t(r.text.size()), "replace"))));
  }
  py::object& deliver = MK_PY_ATTR("metalkit.kernel_log", "deliver");
  deliver(records, taken.dropped_kernel, taken.dropped, taken.limit);
}

}  // namespace mk
