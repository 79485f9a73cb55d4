// A kernel as Python sees it: the argument plan made once, the call path.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <vector>

#include "../core/backend.h"

namespace mk {

// Called once when the module loads: notes Python's main thread (its calls
// are interrupted by Ctrl-C) and installs metalkit's SIGINT handler.
void init_call_path();

// The CPU simulator's debug options when a call does not give them:
// METALKIT_CHECK (check_option.h) and METALKIT_SHUFFLE=<seed>, read once.
struct DebugDefaults {
  uint32_t checks = 0;
  uint32_t shuffle = 0;
};
DebugDefaults& debug_defaults();

class PyKernel {
 public:
  explicit PyKernel(std::shared_ptr<KernelImpl> impl);  // impl keeps its module alive
  pybind11::object call(pybind11::args args, pybind11::kwargs kwargs);
  const KernelSpec& spec() const { return impl_->spec(); }
  // Of the build that ran the last call (a check= call runs another build of the kernel).
  double last_gpu_time() const { return last_run_.load(std::memory_order_relaxed)->last_gpu_time(); }
  pybind11::list arg_specs() const;
  std::string signature() const;
  // Other builds of the kernel for check=: `factory(build)` returns one as a Kernel, built on
  // first use (metalkit.library sets it). check="races"/"uninit" run build "checked" (every
  // access recorded), "lockstep" build "checked-threads" (every thread a fiber as well), and
  // check=True build "guarded" if the kernel declares threadgroup variables (their storage
  // guarded, as threadgroup parameters' is).
  pybind11::object checked_factory = pybind11::none();

 private:
  // One positional argument of the Python call.
  struct Slot {
    int param;                 // position in the kernel's parameter list
    pybind11::object dtype;    // expected numpy dtype of array elements (None: a struct of unknown layout)
    uint64_t scalar_offset;    // where a scalar's bytes go in the call's scratch
  };
  // Checks an array argument's dtype and writability; whether it must be staged
  // (an aligned C-contiguous copy) because it cannot be used in place.
  bool check_array(const ArgSpec& s, const Slot& slot, pybind11::handle obj) const;

  // The steps of a call (kernel.cpp, in this order).
  struct Options;
  struct Call;
  Options read_keywords(pybind11::kwargs kwargs) const;
  void bind_arguments(const std::vector<pybind11::handle>& values, bool bounds, unsigned char* scratch, Call& c) const;
  void size_threadgroup_memory(pybind11::handle tgmem, Launch& launch) const;
  bool join_batch(Call& c) const;
  void stage_arrays(Call& c) const;
  void run_now(Call& c) const;
  void enqueue(Call& c) const;

  // The build of the kernel that runs a call with these checks (checked_factory's, made on first
  // use), or the kernel itself.
  std::shared_ptr<KernelImpl> build_for(uint32_t checks);

  std::shared_ptr<KernelImpl> impl_;
  std::shared_ptr<KernelImpl> builds_[3];  // checked_factory's: checked, checked-threads, guarded
  std::atomic<KernelImpl*> last_run_;      // impl_ or one of builds_
  std::vector<pybind11::object> dtypes_;  // per parameter: numpy dtype of its elements (None: builtins, unknown structs)
  DefaultGridRule default_grid_;  // whether a call may leave the grid out
  std::vector<Slot> slots_;    // ordered by buffer index
  std::vector<int> slot_params_;  // each slot's parameter, for matching arguments
  std::vector<int> threadgroup_params_;
  uint64_t scratch_bytes_ = 0;
  uint64_t scratch_align_ = 16;  // the largest scalar alignment
};

}  // namespace mk
