#include "metal_module.h"

#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "../core/batch.h"
#include "../core/errors.h"
#include "../core/function_constants.h"
#include "../core/gpu_dispatch.h"
#include "../core/kernel_cache.h"
#include "../core/reflection.h"
#include "../core/run_limits.h"
#include "../core/watchdog.h"
#include "buffer.h"
#include "struct_args.h"
#ifdef METALKIT_HAVE_METAL
#include "../metal/metal_backend.h"
#endif

namespace py = pybind11;

namespace mk {
namespace {

std::string type_name(py::handle x) { return py::str(py::type::of(x).attr("__name__")); }

// constants= as the core takes them: {name or index: bool | int | float}.
std::vector<ConstantArg> constant_args(py::handle constants) {
  std::vector<ConstantArg> out;
  if (constants.is_none()) return out;
  static py::object np_bool = py::module_::import("numpy").attr("bool_");
  static py::object np_floating = py::module_::import("numpy").attr("floating");
  for (auto item : py::reinterpret_borrow<py::dict>(constants)) {
    ConstantArg a;
    py::handle key = item.first, value = item.second;
    if (PyUnicode_Check(key.ptr())) {
      a.name = key.cast<std::string>();
    } else if (!PyBool_Check(key.ptr()) && PyIndex_Check(key.ptr())) {
      a.index = py::reinterpret_steal<py::int_>(PyNumber_Index(key.ptr())).cast<int64_t>();
    } else {
      throw py::type_error("constants= keys are function constant names (str) or indices (int), got " +
                           type_name(key));
    }
    a.text = py::repr(value);
    if (PyBool_Check(value.ptr()) || py::isinstance(value, np_bool)) {
      a.kind = ConstantArg::Kind::Bool;
      a.boolean = PyObject_IsTrue(value.ptr()) == 1;
    } else if (PyIndex_Check(value.ptr())) {
      py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
      a.kind = ConstantArg::Kind::Int;
      a.negative = i < py::int_(0);
      py::int_ mag = py::reinterpret_steal<py::int_>(PyNumber_Absolute(i.ptr()));
      a.magnitude = PyLong_AsUnsignedLongLong(mag.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw py::value_error("function constant value " + a.text + " is out of range for every integer type");
      }
    } else if (PyFloat_Check(value.ptr()) || py::isinstance(value, np_floating)) {
      a.kind = ConstantArg::Kind::Float;
      a.real = py::cast<double>(value);
    } else {
      throw py::type_error("function constant values must be bool, int or float, not " + type_name(value));
    }
    out.push_back(std::move(a));
  }
  return out;
}

ArgKind kind_named(const std::string& s) {
  if (s == "buffer") return ArgKind::Buffer;
  if (s == "scalar") return ArgKind::Scalar;
  if (s == "threadgroup") return ArgKind::Threadgroup;
  throw py::value_error("unknown parameter kind '" + s + "'");
}

const char* kind_name(ArgKind k) {
  const char* names[] = {"buffer", "scalar", "threadgroup", "builtin"};
  return names[int(k)];
}

const char* space_name(Space s) {
  const char* names[] = {"none", "device", "constant", "threadgroup", "thread"};
  return names[int(s)];
}

// Signatures from metalkit.msl.signatures: {host name: (file, line, [(kind, index, name, decl, space, array
// length), ...], [(name, builtin, decl, vector width), ...])}.
KernelDecls kernel_decls(py::handle kernels) {
  KernelDecls out;
  if (kernels.is_none()) return out;
  for (auto item : py::reinterpret_borrow<py::dict>(kernels)) {
    auto t = item.second.cast<py::tuple>();
    KernelDecl k;
    k.file = t[0].cast<std::string>();
    k.line = t[1].cast<int>();
    for (auto p : t[2]) {
      auto q = p.cast<py::tuple>();
      k.params.push_back({kind_named(q[0].cast<std::string>()), q[1].cast<int>(), q[2].cast<std::string>(),
                          q[3].cast<std::string>(), Space(q[4].cast<int>()),
                          q.size() > 5 ? q[5].cast<uint32_t>() : 0u});
    }
    if (t.size() > 3)
      for (auto b : t[3]) {
        auto q = b.cast<py::tuple>();
        k.builtins.push_back({q[0].cast<std::string>(), q[1].cast<std::string>(), q[2].cast<std::string>(),
                              q[3].cast<int>()});
      }
    out[item.first.cast<std::string>()] = std::move(k);
  }
  return out;
}

int type_named(const std::string& name) {
  for (int t = 0; t < MK_T_COUNT; ++t)
    if (name == msl_type_name(t)) return t;
  throw py::value_error("unknown element type '" + name + "'");
}

std::vector<ConstantDecl> constant_decls(const std::vector<py::tuple>& decls) {
  std::vector<ConstantDecl> out;
  for (const py::tuple& d : decls)
    out.push_back({d[0].cast<std::string>(), d[1].cast<int>(), type_named(d[2].cast<std::string>()),
                   d[3].cast<int>(), d[4].cast<bool>()});
  return out;
}

// Reflected struct members from Python: (name, offset, MSL type name ("struct" for a struct
// or something undescribed), vector width, matrix columns, pointer, [(length, stride)...],
// members of a struct element or None).
std::vector<ReflectedField> reflected_fields(const py::list& members) {
  std::vector<ReflectedField> out;
  for (py::handle item : members) {
    auto t = item.cast<py::tuple>();
    ReflectedField f;
    f.name = t[0].cast<std::string>();
    f.offset = t[1].cast<uint64_t>();
    f.type = type_named(t[2].cast<std::string>());
    f.vec_width = t[3].cast<int>();
    f.columns = t[4].cast<int>();
    f.pointer = t[5].cast<bool>();
    for (py::handle a : t[6].cast<py::list>()) {
      auto pair = a.cast<py::tuple>();
      f.arrays.push_back({pair[0].cast<uint64_t>(), pair[1].cast<uint64_t>()});
    }
    if (!t[7].is_none()) {
      f.is_struct = true;
      f.fields = reflected_fields(t[7].cast<py::list>());
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The KernelSpec Metal would make from reflected bindings (see spec_from_reflection below) and signatures.
KernelSpec reflected_spec(const std::string& kernel, const std::vector<py::tuple>& bindings, py::object kernels,
                          const std::string& file) {
  std::vector<ReflectedBinding> refl;
  for (const py::tuple& b : bindings) {
    ReflectedBinding x;
    auto what = b[0].cast<std::string>();
    x.type = what == "buffer" ? ReflectedBinding::Type::Buffer
             : what == "threadgroup" ? ReflectedBinding::Type::Threadgroup : ReflectedBinding::Type::Other;
    x.other = what;
    x.index = b[1].cast<int>();
    x.name = b[2].cast<std::string>();
    x.elem_type = type_named(b[3].cast<std::string>());
    x.vec_width = b[4].cast<int>();
    x.size = b[5].cast<uint64_t>();
    x.align = b[6].cast<uint64_t>();
    x.writable = b[7].cast<bool>();
    refl.push_back(std::move(x));
  }
  KernelDecls decls = kernel_decls(kernels);
  auto it = decls.find(kernel);
  return spec_from_reflection(kernel, refl, it == decls.end() ? nullptr : &it->second, 1024, file);
}

void register_rules(py::module_& m) {
  auto r = m.def_submodule("metal_rules", "Decisions the Metal backend makes, callable on every platform for tests.");
  r.def("route_buffer", [](const std::string& kind, bool writable, int space, bool in_device_buffer, uintptr_t address,
                           uint64_t nbytes, uint64_t offset, uint64_t page, uint64_t elem_size) {
    ArgSpec s;
    s.kind = kind_named(kind);
    s.writable = writable;
    s.space = Space(space);
    s.elem_size = elem_size;
    const char* names[] = {"bound", "bytes", "wrap", "stage", "empty", "zeroed"};
    return names[int(route_buffer(s, in_device_buffer, address, nbytes, offset, page))];
  }, py::arg("kind"), py::arg("writable"), py::arg("space"), py::arg("in_device_buffer"), py::arg("address"),
     py::arg("nbytes"), py::arg("offset"), py::arg("page"), py::arg("elem_size") = 4);
  // Bytes of the zeroed placeholder a parameter of this element size (N elements for an array) gets for None.
  r.def("placeholder_bytes", [](uint64_t elem_size, uint32_t array_len) {
    ArgSpec s;
    s.elem_size = elem_size;
    s.array_len = array_len;
    return placeholder_bytes(s);
  }, py::arg("elem_size"), py::arg("array_len") = 0);
  // The Kernel.args dtype of a struct parameter as Metal's reflection of it gives.
  r.def("struct_dtype", [](const py::list& members, uint64_t size, uint64_t align) {
    ArgSpec s;
    s.type = MK_T_STRUCT;
    s.layout = layout_from_reflection(reflected_fields(members), size, align);
    return struct_dtype(s);
  });
  r.def("staging_capacity", &staging_capacity);
  r.def("keep_staging", &keep_staging);
  r.def("uniform_threadgroups", [](const std::string& kernel, const std::vector<int64_t>& grid,
                                   const std::vector<int64_t>& tg) {
    KernelSpec spec;
    spec.name = kernel;
    spec.max_threads = 0xFFFFFFFFu;
    GeometryRequest req{make_dims(kernel, "grid", grid, true), std::nullopt, make_dims(kernel, "threadgroup", tg, false)};
    Geometry g = plan_geometry(spec, req, {}, {});
    Dims3 n = uniform_threadgroups(kernel, g);
    return py::make_tuple(n.v[0], n.v[1], n.v[2]);
  });
  r.def("threadgroup_length", &threadgroup_length);
  // KernelCache from `threads` threads at once, each asking for every name of `names` (a build
  // takes `build_ms`); returns how many builds ran and whether every thread got the same kernel.
  r.def("kernel_cache_builds", [](int threads, const std::vector<std::string>& names, int build_ms) {
    struct Stub : KernelImpl {
      void dispatch(const Launch&) override {}
    };
    KernelCache cache;
    std::atomic<int> builds{0};
    std::vector<std::vector<std::shared_ptr<KernelImpl>>> got(threads > 0 ? size_t(threads) : 0);
    {
      py::gil_scoped_release nogil;
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          for (const std::string& n : names)
            got[size_t(t)].push_back(cache.get(n, [&] {
              ++builds;
              std::this_thread::sleep_for(std::chrono::milliseconds(build_ms));
              return std::make_shared<Stub>();
            }));
        });
      for (auto& th : pool) th.join();
    }
    bool same = true;
    for (const auto& g : got) same = same && g == got[0];
    return py::make_tuple(builds.load(), same);
  });
  r.def("check_threadgroup_memory", &check_threadgroup_memory);
  r.def("gpu_fault_message", &gpu_fault_message);
  // metalkit.batch(): a use is (lo, hi, "direct" | "mapped" | "copyin", writes, layout).
  auto host_use = [](const py::tuple& t) {
    HostUse u;
    u.lo = t[0].cast<uintptr_t>();
    u.hi = t[1].cast<uintptr_t>();
    const auto access = t[2].cast<std::string>();
    if (access == "direct") u.access = HostAccess::Direct;
    else if (access == "mapped") u.access = HostAccess::Mapped;
    else if (access == "copyin") u.access = HostAccess::CopyIn;
    else throw py::value_error("unknown host access '" + access + "'");
    u.writes = t[3].cast<bool>();
    u.layout = t[4].cast<std::string>();
    return u;
  };
  r.def("must_complete_first", [host_use](const py::tuple& pending, const py::tuple& next) {
    return must_complete_first(host_use(pending), host_use(next));
  });
  // calls: [[use, ...], ...] queued in order; returns the indices of the calls a flush came before.
  r.def("batch_flushes", [host_use](const std::vector<std::vector<py::tuple>>& calls) {
    BatchMemory memory;
    std::vector<size_t> flushes;
    for (size_t i = 0; i < calls.size(); ++i) {
      std::vector<HostUse> uses;
      for (const py::tuple& t : calls[i]) uses.push_back(host_use(t));
      if (memory.conflicts(uses)) {
        flushes.push_back(i);
        memory.clear();
      }
      memory.add(uses);
    }
    return flushes;
  });
  r.def("route_access", [](const std::string& route) {
    const char* routes[] = {"bound", "bytes", "wrap", "stage", "empty", "zeroed"};
    const char* names[] = {"direct", "mapped", "copyin"};
    for (int i = 0; i < 6; ++i)
      if (route == routes[i]) return std::string(names[int(host_access_for(BufferRoute(i)))]);
    throw py::value_error("unknown route '" + route + "'");
  });
  r.def("batch_fault_message", &batch_fault_message);
  // A wait for GPU work (Completion) that another thread ends after done_after seconds (None:
  // never), under these limits; returns why it returned ("none", "interrupt", "timeout"), the
  // seconds it waited, and whether then() work ran by the time the work was done.
  r.def("wait_for_completion", [](std::optional<double> done_after, double timeout, bool interruptible) {
    auto completion = std::make_shared<Completion>();
    std::atomic<bool> ran{false};
    completion->then([&ran] { ran = true; });
    RunLimits limits;
    limits.timeout = timeout;
    limits.interruptible = interruptible;
    if (interruptible) {
      watch_interrupts();
      limits.interrupts = interrupts_seen();
    }
    StopReason why;
    double waited;
    {
      py::gil_scoped_release nogil;
      const auto start = Completion::Clock::now();
      std::thread finisher;
      if (done_after)
        finisher = std::thread([completion, d = *done_after] {
          std::this_thread::sleep_for(std::chrono::duration<double>(d));
          completion->done();
        });
      why = completion->wait(limits, start);
      waited = std::chrono::duration<double>(Completion::Clock::now() - start).count();
      if (finisher.joinable()) finisher.join();
    }
    const char* names[] = {"none", "interrupt", "timeout"};
    return py::make_tuple(names[int(why)], waited, ran.load());
  }, py::arg("done_after"), py::arg("timeout"), py::arg("interruptible"));
  // A call's limits on a backend that defers (Metal) or not: (seconds, from METALKIT_TIMEOUT, interruptible).
  r.def("run_limits", [](const std::string& kernel, std::optional<double> timeout, bool defers, bool main_thread) {
    RunLimits l = plan_run_limits(kernel, timeout, defers, main_thread);
    return py::make_tuple(l.timeout, l.from_env, l.interruptible);
  });
  // decls: [(name, index, msl type name, vector width, required)]; returns {index: 8 value bytes}.
  r.def("resolve_constants", [](const std::string& kernel, const std::vector<py::tuple>& decls, py::dict constants) {
    auto d = constant_decls(decls);
    py::dict out;
    for (const ConstantValue& v : resolve_constants(kernel, d, constant_args(constants)))
      out[py::int_(d[v.decl].index)] = py::bytes(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
    return out;
  });
  r.def("check_constants_declared", [](py::dict constants, const std::vector<py::tuple>& decls) {
    check_constants_declared(constant_args(constants), constant_decls(decls));
  });
  // bindings: [("buffer" | "threadgroup" | other, index, name, msl type name, vector width, size, align, writable)].
  r.def("spec_from_reflection", [](const std::string& kernel, const std::vector<py::tuple>& bindings,
                                   py::object kernels, const std::string& file) {
    KernelSpec spec = reflected_spec(kernel, bindings, kernels, file);
    py::list out;
    for (const ArgSpec& a : spec.args)
      out.append(py::make_tuple(kind_name(a.kind), a.index, a.name, a.decl, msl_type_name(a.type), a.vec_width,
                                space_name(a.space), a.writable, a.elem_size, a.array_len));
    return py::make_tuple(spec.file, spec.line, out);
  });
  // Whether a call of the kernel may leave its grid out: (refusal, group_input), as plan_geometry reads them.
  r.def("default_grid_rule", [](const std::string& kernel, const std::vector<py::tuple>& bindings,
                                py::object kernels, const std::string& file) {
    DefaultGridRule rule = default_grid_rule(reflected_spec(kernel, bindings, kernels, file));
    return py::make_tuple(rule.refusal, rule.group_input);
  });
}

}  // namespace

void register_metal(py::module_& m, WrapLibrary wrap_library) {
  register_rules(m);
#ifdef METALKIT_HAVE_METAL
  m.def("metal_device", [] {
    MetalDeviceInfo info;
    {
      py::gil_scoped_release nogil;
      info = metal_device_info();
    }
    py::dict d;
    d["name"] = info.name;
    d["max_threads_per_threadgroup"] = info.max_threads_per_threadgroup;
    d["max_threadgroup_memory"] = info.max_threadgroup_memory;
    d["unified_memory"] = info.unified_memory;
    d["recommended_working_set"] = info.recommended_working_set;
    return d;
  }, "The Metal GPU in use, as a dict.");
  m.def("metal_compile", [wrap_library](const std::string& source, const std::string& filename, py::object constants,
                                        bool fast_math, py::object kernels, bool logging) {
    auto args = constant_args(constants);
    auto decls = kernel_decls(kernels);
    std::shared_ptr<LibraryImpl> lib;
    {
      py::gil_scoped_release nogil;
      lib = metal_compile(source, filename, args, fast_math, decls, logging);
    }
    return wrap_library(std::move(lib));
  }, py::arg("source"), py::arg("filename"), py::arg("constants"), py::arg("fast_math"), py::arg("kernels"),
     py::arg("logging") = false,
     "Compiles MSL source (its #include \"...\" files inlined) for the GPU; logging: the source logs "
     "(<metal_logging>), so shader logging is on where the OS has it.");
  m.def("metal_load_metallib", [wrap_library](const std::string& path, py::object constants) {
    auto args = constant_args(constants);
    std::shared_ptr<LibraryImpl> lib;
    {
      py::gil_scoped_release nogil;
      lib = metal_load_metallib(path, args);
    }
    return wrap_library(std::move(lib));
  }, py::arg("path"), py::arg("constants"), "Loads a precompiled .metallib.");
  m.def("metal_allocate", [](size_t nbytes) { return PyBuffer{metal_allocate(nbytes)}; }, py::arg("nbytes"),
        "GPU-shared memory of nbytes bytes.");
#endif
}

}  // namespace mk
