// metalkit.batch() as Python sees it: the thread's open batch plus what only
// the bindings can hold until its work completes (the arrays of queued calls,
// staged copies of strided arrays and their copy-backs). All of it is touched
// with the GIL held, by the thread that opened the batch.
#pragma once
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../core/batch.h"

namespace mk {

struct PyBatch : Batch {
  ~PyBatch() override;

  // The Python side of one staged (strided or misaligned) array: shared by every
  // queued call passing the same view, copied back when the batch completes.
  struct Staged {
    std::string layout;  // HostUse::layout of the view
    pybind11::object original, copy;
    bool copy_back;
  };

  int depth = 0;                          // nested `with metalkit.batch()` blocks
  std::thread::id owner;
  std::vector<pybind11::object> keep_alive;  // every array a queued call uses
  std::vector<Staged> staged;

  // Runs the queued work (GIL released while waiting), then copies staged arrays
  // back if it completed without a fault and lets go of what the calls held.
  void settle();
};

// The calling thread's open batch, or null.
std::shared_ptr<PyBatch> current_batch();

// Tests: queue CPU calls in a batch (core HostQueue) as a GPU would, so the
// deferred path is exercised where there is no GPU.
bool emulating_gpu_batches();

void register_batch(pybind11::module_& m);

}  // namespace mk
