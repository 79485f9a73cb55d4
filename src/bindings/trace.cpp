#include "trace.h"

#include "../core/checks.h"
#include "../core/errors.h"
#include "../cpu/access_trace.h"
#include "py_batch.h"

namespace py = pybind11;

namespace mk {

static_assert(sizeof(TraceRecord) == 16, "metalkit/trace.py reads records as 16 bytes");

void bind_trace(py::module_& m) {
  m.def(
      "_trace_call",
      [](py::object kernel, uint64_t max_accesses, py::args args, py::kwargs kwargs) {
        if (current_batch())  // a batch may run the call later, or not at all after a fault
          throw DispatchError("metalkit.trace runs its call at once: call it outside metalkit.batch()");
        // The request holds for the one kernel call below, and ends however it ends.
        struct Request {
          explicit Request(uint64_t cap) {
            taken_trace().reset();
            trace_request() = kCheckTrace | kCheckBounds;
            trace_cap() = cap;
          }
          ~Request() { trace_request() = 0; }
        } request(max_accesses);
        return kernel(*args, **kwargs);
      },
      py::arg("kernel"), py::arg("max_accesses"),
      "Calls kernel(*args, **kwargs) recording who touches each element, at most max_accesses times "
      "(metalkit.trace; CPU simulator).");
  m.def(
      "_take_trace",
      []() -> py::object {
        std::unique_ptr<AccessTrace> t = std::move(taken_trace());
        if (!t) return py::none();
        py::list memories;
        for (const TracedMemory& x : t->memories)
          memories.append(py::make_tuple(x.name, x.size, x.elem_size, x.threadgroup));
        auto dims = [](const unsigned* v) { return py::make_tuple(v[0], v[1], v[2]); };
        py::dict out;
        out["kernel"] = t->kernel;
        out["grid"] = dims(t->grid);
        out["threadgroup"] = dims(t->tg);
        out["threadgroups"] = dims(t->ngroups);
        out["memories"] = memories;
        out["records"] = py::bytes(reinterpret_cast<const char*>(t->records.data()), t->records.size() * sizeof(TraceRecord));
        out["full"] = t->full;
        return std::move(out);
      },
      "The last traced dispatch of this thread, once: kernel, geometry, memories (name, bytes, element "
      "bytes, threadgroup) and records (16 bytes each: element i8, threadgroup u4, thread u2, memory u1, "
      "flags u1: 1 read, 2 write, 4 atomic); None if none.");
}

}  // namespace mk
