#include "kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "../core/errors.h"
#include "../core/watchdog.h"
#include "../cpu/unwritten_pages.h"
#include "py_attr.h"
#include "buffer.h"
#include "call_args.h"
#include "check_option.h"
#include "convert.h"
#include "foreign.h"
#include "kernel_log.h"
#include "py_batch.h"
#include "struct_args.h"

namespace py = pybind11;

namespace mk {
namespace {

// numpy dtype of a parameter's elements: a struct's structured dtype (None if its
// layout is unknown), bfloat16 from ml_dtypes.
py::object dtype_for(const ArgSpec& s) {
  if (s.type == MK_T_STRUCT) return struct_dtype(s);
  if (s.type == MK_T_BF16) return py::dtype::from_args(MK_PY_ATTR("ml_dtypes", "bfloat16"));
  return py::dtype(numpy_type_name(s.type));
}

// The call's own keywords, for messages.
constexpr const char* kCallKeywords = "grid=, threadgroups=, threadgroup=, threadgroup_memory=, check=, shuffle= and timeout=";

// "device const float* a" for a parameter declared "device float* a".
std::string const_decl(const ArgSpec& s) {
  const std::string& d = s.decl;
  for (const char* space : {"device ", "threadgroup "})
    if (d.rfind(space, 0) == 0 && d.compare(std::strlen(space), 6, "const ") != 0)
      return std::string(space) + "const " + d.substr(std::strlen(space));
  return "const " + d;
}

// An int from a Python int or numpy integer, or nullopt (a bool, an array, a
// float, or a value outside int64 is not one).
std::optional<int64_t> as_int(py::handle x) {
  if (PyBool_Check(x.ptr()) || !PyIndex_Check(x.ptr())) return std::nullopt;
  PyObject* i = PyNumber_Index(x.ptr());  // fails for arrays of more than one element
  if (!i) {
    PyErr_Clear();
    return std::nullopt;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return int64_t(v);
}

std::vector<int64_t> int_list(const std::string& kernel, const char* what, py::handle v) {
  std::vector<int64_t> out;
  auto one = [&](py::handle x) {
    std::optional<int64_t> i = as_int(x);
    if (!i)
      throw DispatchError(kernel_prefix(kernel) + what + " must be an int or a tuple of up to 3 ints, got " +
                          std::string(py::str(py::repr(x))).substr(0, 60));
    out.push_back(*i);
  };
  if (PyTuple_Check(v.ptr()) || PyList_Check(v.ptr())) {
    for (auto x : py::reinterpret_borrow<py::sequence>(v)) one(x);
  } else if (py::detail::npy_api::get().PyArray_Check_(v.ptr()) &&
             py::reinterpret_borrow<py::array>(v).ndim() == 1) {
    for (auto x : py::reinterpret_borrow<py::array>(v).attr("tolist")()) one(x);  // grid=np.array(shape)
  } else {
    one(v);
  }
  return out;
}

std::optional<double> timeout_seconds(const std::string& kernel, py::handle v) {
  if (v.is_none()) return std::nullopt;  // the METALKIT_TIMEOUT default
  const double s = PyBool_Check(v.ptr()) ? 0.0 : PyFloat_AsDouble(v.ptr());  // Python and numpy numbers
  const bool number = !PyBool_Check(v.ptr()) && !PyErr_Occurred();
  PyErr_Clear();
  if (!number)
    throw ArgumentError(kernel_prefix(kernel) + "timeout= takes a number of seconds (or None for METALKIT_TIMEOUT), got " +
                        std::string(py::str(py::repr(v))).substr(0, 40));
  return s;
}

unsigned long g_main_thread = 0;  // Python's main thread, where Ctrl-C raises KeyboardInterrupt

// GPU work whose wait a call gave up (Ctrl-C, timeout=) goes on: the Python objects it
// uses (arrays it reads and writes, staged copies) are kept here until it is done, then
// let go of by a later call. Touched with the GIL held; never destroyed (at exit the
// process ends with the GPU).
struct Parked {
  std::shared_ptr<Completion> running;
  std::vector<py::object> keep;
};
std::vector<Parked>& parked() {
  static auto* p = new std::vector<Parked>;
  return *p;
}

void let_go_of_finished_work() {
  auto& p = parked();
  p.erase(std::remove_if(p.begin(), p.end(), [](const Parked& w) { return w.running->is_done(); }), p.end());
}

void park_until_done(std::shared_ptr<Completion> running, std::vector<py::object> keep) {
  let_go_of_finished_work();
  if (!running->is_done()) parked().push_back({std::move(running), std::move(keep)});
}

uint32_t shuffle_seed(const std::string& kernel, py::handle v) {
  std::optional<int64_t> x = as_int(v);
  if (!x) throw ArgumentError(kernel_prefix(kernel) + "shuffle= takes an int seed (0 runs threads in index order)");
  return *x == 0 ? 0u : (uint32_t(*x) ? uint32_t(*x) : 1u);
}

// What the call's checks found that is a warning, not a fault (check_warnings()), as CheckWarning.
void warn_findings() {
  std::vector<std::string> found;
  found.swap(check_warnings());
  if (found.empty()) return;
  py::object& category = MK_PY_ATTR("metalkit.errors", "CheckWarning");
  for (const std::string& w : found)
    if (PyErr_WarnEx(category.ptr(), w.c_str(), 1) != 0) throw py::error_already_set();
}

}  // namespace

void init_call_path() {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  watch_interrupts();
}

DebugDefaults& debug_defaults() {
  static DebugDefaults d = [] {
    DebugDefaults out;
    const char* c = std::getenv("METALKIT_CHECK");
    out.checks = c ? parse_checks("METALKIT_CHECK ", std::string(c)) : 0;
    const char* s = std::getenv("METALKIT_SHUFFLE");
    if (s && *s && std::string(s) != "0") out.shuffle = uint32_t(std::strtoul(s, nullptr, 10)) ?: 1u;
    return out;
  }();
  return d;
}

PyKernel::PyKernel(std::shared_ptr<KernelImpl> impl)
    : impl_(std::move(impl)), last_run_(impl_.get()), default_grid_(default_grid_rule(impl_->spec())) {
  const auto& args = impl_->spec().args;
  for (const ArgSpec& a : args) dtypes_.push_back(a.kind == ArgKind::Builtin ? py::none() : dtype_for(a));
  std::vector<int> order;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == ArgKind::Buffer || args[i].kind == ArgKind::Scalar) order.push_back(int(i));
    if (args[i].kind == ArgKind::Threadgroup) threadgroup_params_.push_back(int(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return args[a].index < args[b].index; });
  for (int p : order) {
    Slot s{p, dtypes_[p], 0};
    if (args[p].kind == ArgKind::Scalar) {
      // Each scalar at its own alignment (clang uses aligned vector moves for a long4 or an alignas(32) struct).
      const uint64_t align = std::max<uint64_t>(16, args[p].elem_align);
      scratch_bytes_ = (scratch_bytes_ + align - 1) / align * align;
      scratch_align_ = std::max(scratch_align_, align);
      s.scalar_offset = scratch_bytes_;
      scratch_bytes_ += std::max<uint64_t>(args[p].value_size(), 16);
    }
    slot_params_.push_back(p);
    slots_.push_back(std::move(s));
  }
}

std::string PyKernel::signature() const {
  std::string out = spec().name + "(";
  bool first = true;
  for (const Slot& s : slots_) {
    const ArgSpec& a = spec().args[s.param];
    out += (first ? "" : ", ") + a.decl + " [[buffer(" + std::to_string(a.index) + ")]]";
    first = false;
  }
  return out + ")";
}

namespace {

// The message for an array of the wrong element type. Raw memory (`device void*`,
// `char*`, `uchar*`) takes any array's bytes through .view(), which keeps the data;
// .astype() converts values, right only where numbers of another type are meant.
std::string dtype_mismatch(const std::string& kname, const ArgSpec& s, py::handle want, py::handle got) {
  const std::string head = kernel_prefix(kname) + describe_param(s) + " takes elements of dtype ";
  const std::string given = ", got an array of dtype " + std::string(py::str(got));
  if (s.type == MK_T_STRUCT) {
    const std::string layout = want.is_none() ? "a struct of " + std::to_string(s.elem_size) + " bytes"
                                              : std::string(py::str(want));
    return head + layout + given + "; build it with np.zeros(n, kernel.args[" + std::to_string(s.position) +
           "].dtype) and set its fields by name" + (want.is_none() ? " (or view bytes of that size as np.void)" : "");
  }
  const bool bytes = (s.type == MK_T_U8 || s.type == MK_T_I8) && s.vec_width == 1;
  const std::string name = std::string(py::str(want));
  if (bytes)
    return head + name + given + "; pass its bytes with x.view(np." + name +
           ") (x.astype would convert each value and lose the data)";
  return head + name + given + "; convert it first (x.astype(np." + name + ")), metalkit never converts silently";
}

}  // namespace

bool PyKernel::check_array(const ArgSpec& s, const Slot& slot, py::handle obj) const {
  const std::string& kname = spec().name;
  auto& api = py::detail::npy_api::get();
  if (!api.PyArray_Check_(obj.ptr()))
    throw ArgumentError(kernel_prefix(kname) + describe_param(s) +
                        " takes a numpy array (or an object exporting __dlpack__ or the buffer protocol: a torch "
                        "tensor, a memoryview), got " +
                        std::string(py::str(py::type::of(obj).attr("__name__"))) + "; pass " +
                        (s.type == MK_T_STRUCT ? "np.zeros(n, kernel.args[" + std::to_string(s.position) + "].dtype)"
                                               : "np.asarray(x, dtype=np." + std::string(numpy_type_name(s.type)) + ")") +
                        " or an array from metalkit.empty/zeros/asarray");
  auto* a = py::detail::array_proxy(obj.ptr());
  // Element type: exact match, no silent conversion.
  bool ok;
  if (s.type == MK_T_STRUCT) {
    py::dtype dt = py::reinterpret_borrow<py::dtype>(reinterpret_cast<PyObject*>(a->descr));
    if (dt.attr("hasobject").cast<bool>())
      throw ArgumentError(kernel_prefix(kname) + describe_param(s) +
                          " cannot take an array holding Python objects; use a dtype of plain numbers");
    const auto* typeobj = reinterpret_cast<PyObject*>(py::detail::array_descriptor_proxy(a->descr)->typeobj);
    ok = dt.kind() == 'V' && typeobj != MK_PY_ATTR("ml_dtypes", "bfloat16").ptr() &&  // bfloat16's kind is V too
         uint64_t(dt.itemsize()) == s.elem_size;
    if (ok) check_struct_dtype(kname, s, dt, slot.dtype);
  } else {
    ok = a->descr == slot.dtype.ptr() || api.PyArray_EquivTypes_(a->descr, slot.dtype.ptr());
  }
  if (!ok) throw ArgumentError(dtype_mismatch(kname, s, slot.dtype, py::reinterpret_borrow<py::object>(a->descr)));
  const bool writable_array = (a->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_) != 0;
  if (s.writable && !writable_array)
    throw ArgumentError(kernel_prefix(kname) + describe_param(s) +
                        " is not declared const, so the kernel may write it, but the array is read-only; pass a "
                        "writable copy (x.copy()), or declare it `" + const_decl(s) +
                        "` if the kernel does not write it");
  const bool contiguous = (a->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(a->data) % s.elem_align) == 0;
  return !(contiguous && aligned);
}

namespace {

// One array argument of a call, once checked.
struct ArrayArg {
  int param;
  py::handle obj;
  bool stage;   // staged through metalkit._staging (strided or misaligned)
  HostUse use;  // the host memory it spans (layout set for staged views); only when
                // staged or queued in a batch
};

// The bytes an array spans, from its lowest to its highest element; a staged
// view also gets a layout key (address, item size, shape, strides): calls
// passing the same view share one staged copy.
HostUse memory_of(py::handle obj, bool staged, bool writes) {
  auto* a = py::detail::array_proxy(obj.ptr());
  const auto base = reinterpret_cast<uintptr_t>(a->data);
  const auto itemsize = intptr_t(py::reinterpret_borrow<py::dtype>(a->descr).itemsize());
  HostUse u;
  u.writes = writes;
  u.lo = u.hi = base;
  bool empty = false;
  intptr_t lo = 0, hi = 0;
  for (int d = 0; d < a->nd; ++d) {
    if (a->dimensions[d] == 0) empty = true;
    const intptr_t span = intptr_t(a->dimensions[d] - 1) * intptr_t(a->strides[d]);
    (span < 0 ? lo : hi) += span;
  }
  if (!empty) {
    u.lo = base + lo;
    u.hi = base + hi + itemsize;
  }
  if (staged) {
    u.access = HostAccess::Mapped;
    auto put = [&](intptr_t v) { u.layout.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(intptr_t(base));
    put(itemsize);
    put(a->nd);
    for (int d = 0; d < a->nd; ++d) {
      put(intptr_t(a->dimensions[d]));
      put(intptr_t(a->strides[d]));
    }
  }
  return u;
}

void set_allocation(BoundArg& b, py::handle array) {
  if ((b.alloc = find_allocation(array)))
    b.offset = size_t(static_cast<char*>(b.data) - static_cast<char*>(b.alloc->data()));
}

}  // namespace

std::shared_ptr<KernelImpl> PyKernel::build_for(uint32_t checks) {
  const bool accesses = checks & kCheckAccesses;
  // check=True alone: the kernel as it is, unless threadgroup variables need guarding.
  if (!accesses && !((checks & kCheckBounds) && spec().threadgroup_variables)) return impl_;
  const int which = !accesses ? 2 : (checks & kCheckPerThread) ? 1 : 0;
  std::shared_ptr<KernelImpl>& slot = builds_[which];
  if (slot) return slot;
  if (!checked_factory || checked_factory.is_none()) {
    if (!accesses) return impl_;  // no source to build from: its threadgroup variables go unguarded
    throw DispatchError(kernel_prefix(spec().name) + "check= races, uninit and lockstep need the kernel's source to "
                        "build it checked; get the kernel from metalkit.compile or metalkit.load");
  }
  static const char* const names[] = {"checked", "checked-threads", "guarded"};
  py::object k = checked_factory(names[which]);
  slot = k.cast<PyKernel&>().impl_;
  return slot;
}

// The call's own keywords, read; everything else is a parameter by name.
struct PyKernel::Options {
  GeometryRequest geometry;
  py::handle tgmem;
  uint32_t checks = debug_defaults().checks;
  uint32_t shuffle = debug_defaults().shuffle;
  std::optional<double> timeout;
  NamedArgs named;
};

// One call's state, from its checked arguments to the launch.
struct PyKernel::Call {
  Launch launch;
  std::shared_ptr<KernelImpl> run;  // what runs it: the kernel, or its checked build (check= accesses)
  std::vector<ArrayArg> arrays;
  std::vector<py::object> made;     // arrays this call made from its arguments (a numpy.void, a checked None)
  std::vector<py::object> foreign;  // numpy views of the call's non-numpy arrays (torch tensors, memoryviews)
  ArrayCounts counts;               // for a default grid
  std::shared_ptr<PyBatch> batch;   // the thread's metalkit.batch(), if any
  bool emulate = false;             // a CPU batch that queues calls as a GPU's would (tests)
  bool defer = false;               // queued in the batch, not run now
  std::vector<HostUse> uses;        // host memory of a queued call's arrays
  std::vector<PyBatch::Staged> fresh;  // staged copies made by this call
  std::vector<size_t> shared;          // batch->staged entries this call writes through
};

PyKernel::Options PyKernel::read_keywords(py::kwargs kwargs) const {
  const std::string& name = spec().name;
  Options o;
  for (auto item : kwargs) {
    std::string key = py::str(item.first);
    if (key == "grid" || key == "threadgroups" || key == "threadgroup") {
      if (!item.second.is_none()) {
        std::optional<Dims3>& d = key == "grid" ? o.geometry.grid : key == "threadgroups" ? o.geometry.threadgroups
                                                                                          : o.geometry.threadgroup;
        d = make_dims(name, key.c_str(), int_list(name, key.c_str(), item.second), key != "threadgroup");
      }
    } else if (key == "threadgroup_memory") {
      o.tgmem = item.second;
    } else if (key == "check") {  // None: the METALKIT_CHECK default
      if (!item.second.is_none()) o.checks = parse_checks(name, item.second);
    } else if (key == "shuffle") {  // None: the METALKIT_SHUFFLE default; 0: in order
      if (!item.second.is_none()) o.shuffle = shuffle_seed(name, item.second);
    } else if (key == "timeout") {
      o.timeout = timeout_seconds(name, item.second);
    } else {
      o.named.emplace_back(std::move(key), item.second);  // a parameter by name
    }
  }
  return o;
}

// 1. Every argument checked and bound (scalars converted into `scratch`). Nothing is
// copied, queued or run before all pass. `bounds`: check= bounds (guarded copies).
void PyKernel::bind_arguments(const std::vector<py::handle>& values, bool bounds, unsigned char* scratch,
                              Call& c) const {
  const KernelSpec& sp = spec();
  c.launch.args.resize(sp.args.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    const ArgSpec& s = sp.args[slot.param];
    BoundArg& b = c.launch.args[slot.param];
    py::handle arg = values[i];
    if (arg.is_none() && s.kind == ArgKind::Scalar) none_for_scalar(sp.name, s);
    if (s.kind == ArgKind::Scalar) {
      void* dst = scratch + slot.scalar_offset;
      if (s.type == MK_T_STRUCT) check_struct_value(sp.name, s, arg, slot.dtype);
      convert_scalar(sp.name, s, arg, dst);
      b.data = dst;
      b.nbytes = s.value_size();
    } else if (arg.is_none()) {
      // A buffer the kernel does not read: unbound (a null pointer; nil on Metal). Checked
      // mode gives it no bytes between guards, so a read names the parameter.
      b.none = true;
      if (bounds) {
        c.made.push_back(MK_PY_ATTR("numpy", "empty")(0, "uint8"));
        c.arrays.push_back({slot.param, c.made.back(), true, {}});
      }
    } else {
      if (s.type == MK_T_STRUCT && !py::isinstance<py::array>(arg)) {
        c.made.push_back(struct_buffer(sp.name, s, arg));  // constant S* given a numpy.void
        arg = c.made.back();
      }
      if (!py::detail::npy_api::get().PyArray_Check_(arg.ptr()))
        arg = foreign_array(sp.name, s, slot.dtype, arg, c.foreign);
      const bool stage = check_array(s, slot, arg);
      auto* a = py::detail::array_proxy(arg.ptr());
      b.data = a->data;
      b.nbytes = size_t(py::reinterpret_borrow<py::array>(arg).nbytes());
      c.arrays.push_back({slot.param, arg, stage, {}});
      c.counts.add(slot.param, b.nbytes / s.elem_size);
    }
  }
}

// Threadgroup memory: every [[threadgroup(i)]] parameter needs a size.
void PyKernel::size_threadgroup_memory(py::handle tgmem, Launch& launch) const {
  const KernelSpec& sp = spec();
  uint64_t tg_total = 0;
  py::dict sizes;
  if (tgmem && !tgmem.is_none()) {
    if (!PyDict_Check(tgmem.ptr()))
      throw ArgumentError(kernel_prefix(sp.name) + "threadgroup_memory must be a dict {index: nbytes}");
    sizes = py::reinterpret_borrow<py::dict>(tgmem);
  }
  for (int p : threadgroup_params_) {
    const ArgSpec& s = sp.args[p];
    py::int_ key(s.index);
    if (!sizes.contains(key))
      throw DispatchError(kernel_prefix(sp.name) + describe_param(s) +
                          " needs a size; pass threadgroup_memory={" + std::to_string(s.index) + ": nbytes}");
    std::optional<int64_t> n = as_int(sizes[key]);
    if (!n || *n < 0 || uint64_t(*n) > kMaxThreadgroupMemory)
      throw DispatchError(kernel_prefix(sp.name) + "threadgroup_memory[" + std::to_string(s.index) +
                          "] must be a number of bytes from 0 to 32768, got " +
                          std::string(py::str(py::repr(sizes[key]))).substr(0, 40));
    launch.args[p].tg_offset = uint32_t(tg_total);
    launch.args[p].nbytes = size_t(*n);
    tg_total += (uint64_t(*n) + 15) / 16 * 16;  // Metal rounds each length up to 16 bytes
  }
  for (auto item : sizes) {
    std::optional<int64_t> key = as_int(item.first);
    if (!key)
      throw DispatchError(kernel_prefix(sp.name) + "threadgroup_memory keys are [[threadgroup(i)]] indices (ints), got " +
                          std::string(py::str(py::repr(item.first))).substr(0, 40));
    // A size for an index the kernel has no parameter at is ignored, as Metal does (llama.cpp's
    // host code sets index 0 for every kernel); it must still be a size Metal would take.
    std::optional<int64_t> n = as_int(item.second);
    if (!n || *n < 0 || uint64_t(*n) > kMaxThreadgroupMemory)
      throw DispatchError(kernel_prefix(sp.name) + "threadgroup_memory[" + std::to_string(*key) +
                          "] must be a number of bytes from 0 to 32768, got " +
                          std::string(py::str(py::repr(item.second))).substr(0, 40));
  }
  if (tg_total > kMaxThreadgroupMemory)
    throw DispatchError(kernel_prefix(sp.name) + "threadgroup memory of " + std::to_string(tg_total) +
                        " bytes exceeds the 32768 bytes Metal allows per threadgroup; use smaller tiles");
  launch.tg_bytes = tg_total;
}

// 2. Inside metalkit.batch(), a backend that defers queues the call; others run it now,
// after whatever the batch has queued. False: the batch has a fault, so the call is checked
// but not run (the fault is raised when the block exits).
bool PyKernel::join_batch(Call& c) const {
  c.batch = current_batch();
  std::shared_ptr<PyBatch>& batch = c.batch;
  if (batch && !batch->fault().empty()) return false;
  c.emulate = batch && !impl_->defers() && emulating_gpu_batches();
  c.defer = batch && (impl_->defers() || c.emulate);
  if (batch && batch->pending()) {
    const bool host_queue = dynamic_cast<HostQueue*>(batch->encoding.get()) != nullptr;
    if (!c.defer || host_queue != c.emulate) {
      batch->settle();
      if (!batch->fault().empty()) return false;
    }
  }
  // Too many batches hold queued GPU work (batch.h, kMaxOpenBatches): this one runs its calls at once.
  if (c.defer && !batch->hold_slot()) c.defer = false;
  const bool wants_alloc = impl_->wants_allocations();
  for (ArrayArg& x : c.arrays) {
    if (!x.stage && wants_alloc) set_allocation(c.launch.args[x.param], x.obj);
    if (x.stage || c.defer) x.use = memory_of(x.obj, x.stage, spec().args[x.param].writable);
  }
  if (c.defer) {
    for (ArrayArg& x : c.arrays) {
      if (!x.stage && !c.emulate) x.use.access = impl_->host_access(spec().args[x.param], c.launch.args[x.param]);
      c.uses.push_back(x.use);
    }
    // Memory a queued call writes and this one reads or writes in a way the
    // queue cannot order: run the queued calls first.
    if (batch->pending() && batch->memory.conflicts(c.uses)) {
      batch->settle();
      if (!batch->fault().empty()) return false;
    }
  }
  return true;
}

// 3. Staged arrays: an aligned contiguous copy (page-aligned, so any element alignment
// holds), copied back only if the kernel may write it. In a batch, calls passing the same
// view share one copy, copied back when the batch completes.
void PyKernel::stage_arrays(Call& c) const {
  const bool wants_alloc = impl_->wants_allocations();
  for (ArrayArg& x : c.arrays) {
    if (!x.stage) continue;
    const ArgSpec& s = spec().args[x.param];
    py::object copy;
    for (auto& f : c.fresh)
      if (f.layout == x.use.layout) {
        copy = f.copy;
        f.copy_back = f.copy_back || s.writable;
      }
    if (!copy && c.defer)
      for (size_t k = 0; k < c.batch->staged.size() && !copy; ++k)
        if (c.batch->staged[k].layout == x.use.layout) {
          copy = c.batch->staged[k].copy;
          if (s.writable) c.shared.push_back(k);
        }
    if (!copy) {
      py::object& stage = MK_PY_ATTR("metalkit._staging", "stage");
      copy = stage(py::reinterpret_borrow<py::array>(x.obj), c.launch.checks & kCheckBounds ? s.elem_align : 0);
      c.fresh.push_back({x.use.layout, py::reinterpret_borrow<py::object>(x.obj), copy, s.writable});
    }
    BoundArg& b = c.launch.args[x.param];
    b.data = py::detail::array_proxy(copy.ptr())->data;
    if (wants_alloc) set_allocation(b, copy);
  }
}

// 4a. Run now and wait; staged results are copied back.
void PyKernel::run_now(Call& c) const {
  Launch& launch = c.launch;
  if (launch.limits.interruptible) {
    // A Ctrl-C from here on stops the kernel; one that came before is raised now, before it runs.
    launch.limits.interrupts = interrupts_seen();
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  // A GPU's wait looks for Ctrl-C itself (Completion::wait): metalkit's handler must be the one installed.
  if (launch.limits.interruptible && impl_->defers()) watch_interrupts();
  // What the GPU may still use after a wait this call gave up: kept alive until it is done.
  auto keep_running = [&](const std::shared_ptr<Completion>& running) {
    if (!running) return;
    std::vector<py::object> keep;
    for (ArrayArg& x : c.arrays) keep.push_back(py::reinterpret_borrow<py::object>(x.obj));
    for (auto& st : c.fresh) keep.push_back(st.copy);
    keep.insert(keep.end(), c.made.begin(), c.made.end());
    keep.insert(keep.end(), c.foreign.begin(), c.foreign.end());
    park_until_done(running, std::move(keep));
  };
  try {
    py::gil_scoped_release nogil;
    c.run->dispatch(launch);
  } catch (const Interrupted& e) {
    keep_running(e.running);
    // Python's SIGINT handler runs now, at the call (KeyboardInterrupt by default). One
    // that does not raise leaves the KernelFault saying how far the kernel got.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!c.batch) throw;
    c.batch->fail(e.what());
    return;
  } catch (const GpuTimeout& e) {
    keep_running(e.running);
    if (!c.batch) throw;
    c.batch->fail(e.what());
    return;
  } catch (const KernelFault& e) {
    deliver_kernel_log();  // what the kernel logged before it faulted
    warn_findings();       // what the checks found that is a warning, beside the fault
    if (!c.batch) throw;
    c.batch->fail(e.what());
    return;
  }
  deliver_kernel_log();
  if (!c.fresh.empty()) {
    py::object& copyto = MK_PY_ATTR("numpy", "copyto");
    for (auto& st : c.fresh)
      if (st.copy_back) copyto(st.original, st.copy);
  }
  if (c.batch) c.batch->ran(*c.run);
  warn_findings();
}

// 4b. Queued in the batch: what it uses stays alive, and staged results come back, when
// the batch completes.
void PyKernel::enqueue(Call& c) const {
  Launch& launch = c.launch;
  PyBatch& batch = *c.batch;
  if (launch.limits.timeout > 0 && !c.emulate && !launch.limits.from_env)
    throw DispatchError(kernel_prefix(spec().name) + "timeout= bounds the wait of a call that runs at once; inside "
                        "metalkit.batch() this call runs when the batch completes: call it outside the batch");
  launch.limits.interruptible = false;  // it runs when the batch completes, not at this call
  {
    py::gil_scoped_release nogil;
    if (c.emulate) {
      if (!batch.encoding) batch.encoding = std::make_unique<HostQueue>();
      static_cast<HostQueue&>(*batch.encoding).add(c.run, launch);
    } else {
      c.run->enqueue(launch, batch);
    }
  }
  batch.queued(c.run, c.uses);
  for (ArrayArg& x : c.arrays) batch.keep_alive.push_back(py::reinterpret_borrow<py::object>(x.obj));
  for (size_t k : c.shared) batch.staged[k].copy_back = true;
  for (auto& f : c.fresh) batch.staged.push_back(std::move(f));
}

py::object PyKernel::call(py::args args, py::kwargs kwargs) {
  if (!parked().empty()) let_go_of_finished_work();
  const KernelSpec& sp = spec();
  Options o = read_keywords(kwargs);
  o.checks |= std::exchange(trace_request(), 0u);  // metalkit.trace asks for this one call
  const std::vector<py::handle> values =
      match_arguments(sp, slot_params_, args, o.named, [this] { return signature(); }, kCallKeywords);

  // Scalars' bytes: on the stack unless they are many or aligned past 64 bytes.
  alignas(64) unsigned char local[1024];
  std::vector<unsigned char> heap;
  unsigned char* scratch = local;
  if (scratch_bytes_ > sizeof(local) || scratch_align_ > 64) {
    heap.resize(scratch_bytes_ + scratch_align_);
    const uintptr_t a = scratch_align_;
    scratch = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(heap.data()) + a - 1) / a * a);
  }
  Call c;
  bind_arguments(values, o.checks & kCheckBounds, scratch, c);
  size_threadgroup_memory(o.tgmem, c.launch);
  c.launch.geometry = plan_geometry(sp, o.geometry, default_grid_, c.counts);
  c.launch.limits = plan_run_limits(sp.name, o.timeout, impl_->defers(), PyThread_get_thread_ident() == g_main_thread);
  if (c.launch.geometry.empty()) return py::none();
  if ((o.checks || o.shuffle) && impl_->defers())
    throw DispatchError(kernel_prefix(sp.name) + "check= and shuffle= are CPU simulator options; on Metal use "
                        "METALKIT_VALIDATE=1 for Apple's shader validation");
  c.launch.shuffle_seed = o.shuffle;
  c.launch.checks = o.checks;
  // The access checks run the kernel's checked build, every access recorded; lockstep (and metalkit.trace)
  // needs the one where every thread is a fiber (elsewhere the runtime knows an access's SIMD-group, not its lane).
  c.run = build_for(o.checks);
  last_run_.store(c.run.get(), std::memory_order_relaxed);
  check_warnings().clear();
  // check="uninit": what of each array used as it lies nothing has written yet, found before a
  // staged copy reads it.
  if (o.checks & kCheckUninit)
    for (ArrayArg& x : c.arrays) {
      BoundArg& b = c.launch.args[x.param];
      if (!x.stage) b.unwritten = never_written(b.data, b.nbytes);
    }
  // Checked mode: every array runs on a copy between inaccessible pages, so an
  // out-of-bounds index faults at once and the caller's arrays stay untouched.
  if (o.checks & kCheckBounds)
    for (ArrayArg& x : c.arrays) x.stage = true;

  if (!join_batch(c)) return py::none();
  // A queued call runs after the calls queued before it, which may write what nothing had written
  // yet: its unwritten bytes are not known now.
  if (c.defer)
    for (ArrayArg& x : c.arrays) c.launch.args[x.param].unwritten.clear();
  stage_arrays(c);
  if (c.defer)
    enqueue(c);
  else
    run_now(c);
  return py::none();
}

py::list PyKernel::arg_specs() const {
  py::object& make = MK_PY_ATTR("metalkit._argspec", "ArgSpec");
  py::list out;
  for (const ArgSpec& a : spec().args) {
    const char* kinds[] = {"buffer", "scalar", "threadgroup", "builtin"};
    py::object dt = dtypes_[a.position];
    out.append(make(a.name, a.index, kinds[int(a.kind)], dt, msl_type_name(a.type), a.vec_width, a.writable,
                    a.builtin, a.elem_size, a.decl, a.array_len));
  }
  return out;
}

}  // namespace mk
