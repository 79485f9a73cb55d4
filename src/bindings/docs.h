// Docstrings of metalkit._core's Kernel and module functions: what help() shows.
// The examples run as doctests (tests/test_docs.py); keep them runnable.
#pragma once

namespace mk::docs {

// The call's keywords, in one place: the text signature of Kernel.__call__ and
// the summary in the class docstring list them in this order.
#define MK_CALL_KEYWORDS                                                                        \
  "grid=None, threadgroups=None, threadgroup=None, threadgroup_memory=None, check=None, " \
  "shuffle=None, timeout=None"

inline constexpr const char* kKernel = R"doc(A compiled compute kernel: ``lib["name"]`` or ``lib.name`` of a Library.

Calling it runs the kernel and waits (inside ``metalkit.batch()``, it checks the
arguments and queues the call)::

    kernel(*args, )doc" MK_CALL_KEYWORDS R"doc(, **params)

Positional arguments bind to the kernel's buffer and scalar parameters in
``[[buffer(n)]]`` order (builtins and ``[[threadgroup(n)]]`` parameters are not
passed), then keyword arguments by parameter name (``kernel(x, out=y)``);
``kernel.signature`` lists them. The keywords, in short (see
``help(metalkit.Kernel.__call__)`` for each in full):

- ``grid=(x, y, z)``: threads to run (default: one per element of the
  arrays, when they all hold as many and the kernel's position is 1-D); or
  ``threadgroups=(x, y, z)``: threadgroups to run, with ``threadgroup=``
  giving their size.
- ``threadgroup=(x, y, z)``: threads per threadgroup (default: up to 256 along x).
- ``threadgroup_memory={index: nbytes}``: sizes of ``[[threadgroup(index)]]`` buffers.
- ``check=``, ``shuffle=``: the CPU simulator's checks (``True``: bounds and
  barriers; ``"all"``: also races, uninitialised reads and reliance on lockstep)
  and shuffled thread order (defaults: ``METALKIT_CHECK``, ``METALKIT_SHUFFLE``).
- ``timeout=``: a time limit (default on the CPU simulator: ``METALKIT_TIMEOUT``;
  on Metal it ends the wait, and the GPU finishes the work).

Geometry tuples are (x, y, z) = (width, height, depth), the reverse of numpy's
shape order: an array of shape (rows, columns) is covered by
``grid=(columns, rows)``. An int is (x, 1, 1).

Properties: ``name``, ``args``, ``signature``, ``location``, ``execution``,
``max_threads_per_threadgroup``, ``simd_width``, ``uses_barriers``,
``last_gpu_time``.

>>> import numpy as np, metalkit as mk
>>> lib = mk.compile('''
... #include <metal_stdlib>
... using namespace metal;
... kernel void add_x(device float* m [[buffer(0)]], constant uint& width [[buffer(1)]],
...                   uint2 p [[thread_position_in_grid]]) { m[p.y * width + p.x] += p.x; }
... ''')
>>> m = np.zeros((2, 3), np.float32)   # numpy shape (rows, columns) = (height, width)
>>> lib.add_x(m, 3, grid=(3, 2))       # grid (x, y) = (width, height)
>>> m.tolist()
[[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
>>> lib.add_x.signature
'add_x(device float* m [[buffer(0)]], constant uint& width [[buffer(1)]])'
)doc";

inline constexpr const char* kCall = R"doc(__call__($self, /, *args, )doc" MK_CALL_KEYWORDS R"doc(, **params)
--

Run the kernel on ``args`` and wait for it; returns None.

Inside ``metalkit.batch()`` the arguments are checked at once and the call is
queued (the CPU simulator runs it at once); results are ready when the block ends.

Positional arguments, one per buffer or scalar parameter, in ``[[buffer(n)]]``
order (``kernel.signature`` lists them; ``kernel.args`` describes every
parameter):

- ``device``/``constant`` pointers take numpy arrays whose dtype is exactly the
  pointee type (no silent conversion; a ``float4*`` takes float32 arrays, four
  values an element). Arrays in device-shared memory (``metalkit.empty``,
  ``zeros``, ``asarray``) and, on the CPU, any aligned C-contiguous array are
  used in place; others are copied, and written parameters copied back.
  Raw memory (``device void*``, ``uchar*``) takes any array's bytes as
  ``x.view(np.uint8)``.
  Objects exporting ``__dlpack__`` or the buffer protocol (torch CPU tensors,
  JAX arrays, memoryview, array.array, bytearray) are viewed as numpy arrays of
  their memory, with no copy: the kernel's writes land in them. A torch tensor
  that requires grad or lives on another device, or a read-only export for a
  written parameter, raises ``ArgumentError`` saying what to pass instead.
- ``constant T&`` takes a Python or numpy scalar (range-checked), a vector
  type a tuple, a ``constant T x[N]`` array exactly N values.
- A struct (``constant S&``, ``constant S*``, ``device S*``) takes values of
  ``kernel.args[i].dtype``, a structured dtype with the layout the kernel reads:
  ``np.zeros((), dtype)`` for one value (a ``numpy.void`` works for both
  ``constant`` forms), ``np.zeros(n, dtype)`` for an array. Another dtype is
  taken only if its numbers sit at the same offsets with the same types.
- ``None`` stands for a buffer the kernel does not read (unbound, as host code
  leaves buffers under function constants); a read through it is a
  ``KernelFault`` naming the parameter. A scalar cannot be None.

Parameters can be passed by name too (``**params``), after the positional ones,
as Python matches them. The keywords below are the call's own and win over a
parameter of the same name: pass such a parameter positionally.

Keywords (None, the default of each, means "use the default" below):

``grid``: int, or tuple of 1 to 3 ints (x, y, z)
    Threads to run per dimension (Metal's ``dispatchThreads``: the last
    threadgroup of a dimension may be partial, so the kernel need not guard
    against a grid that is not a multiple of the threadgroup). 0 in any
    dimension runs nothing. Default (neither ``grid`` nor ``threadgroups``):
    one thread per element of the arrays along x, counted in each
    parameter's element type (a ``device float4*`` over 64 floats is 16
    threads), only when that is unambiguous: the kernel's position builtins
    are scalars (a ``uint2`` position is a 2-D grid the arrays cannot
    shape), one of them tells threads apart, every array argument holds as
    many elements (a reduction's shorter output would make the grid a
    guess), and a kernel reading its threadgroup's geometry
    (``thread_position_in_threadgroup``, ``[[threadgroup(i)]]`` memory, ...)
    is given ``threadgroup=``. Otherwise ``DispatchError`` names the kernel
    and the reason. All backends.
``threadgroups``: int, or tuple of 1 to 3 ints (x, y, z)
    Threadgroups to run per dimension (Metal's ``dispatchThreadgroups``), the
    alternative to ``grid=`` that host code ported from Metal passes; needs
    ``threadgroup=`` (a count of groups means nothing without their size),
    and giving ``grid=`` too is a ``DispatchError``. Every threadgroup is
    then full: the grid is ``threadgroups * threadgroup`` threads per
    dimension. All backends.
``threadgroup``: int, or tuple of 1 to 3 ints (x, y, z)
    Threads per threadgroup; their product is at most
    ``kernel.max_threads_per_threadgroup``. Default: ``min(grid x, 256,
    max_threads_per_threadgroup)`` along x. All backends.
``threadgroup_memory``: dict ``{index: nbytes}``
    The size in bytes of each ``threadgroup T* p [[threadgroup(index)]]``
    parameter; every such parameter needs one. Each size is rounded up to 16
    bytes and the total is at most 32768 (Metal's limit). Default: none (a
    kernel without such parameters). All backends.
``check``: bool, str or list of str
    CPU simulator only. ``True`` runs the cheap checks: every array on a
    copy ending right below an inaccessible page, so an index past its end
    raises ``KernelFault`` naming the parameter, the element and the thread
    (the caller's arrays are left untouched), and a barrier not reached by
    every thread at one site is a divergent barrier. ``"all"`` adds the
    access checks, which run the kernel's checked build (compiled on first
    use; every thread its own fiber, every memory access recorded): data
    races in threadgroup memory, reads of threadgroup memory no thread of the
    threadgroup wrote (and of ``metalkit.empty`` memory nothing wrote), and
    hazards between lanes of one SIMD-group that only lockstep orders. Checks can be named one by one, as a list or a string
    split by commas: ``bounds``, ``barriers``, ``races``, ``uninit``,
    ``lockstep``; ``warn`` makes the access checks' findings
    ``metalkit.CheckWarning`` warnings instead of one ``KernelFault``. Each
    finding is reported once per pair of lines, with the threads, the memory
    and how often it happened; reliance on lockstep is always a warning.
    Default: ``METALKIT_CHECK`` (the same words; ``1``: ``True``), read at
    the first call. On Metal a check raises ``DispatchError``: use
    ``METALKIT_VALIDATE=1`` for Apple's shader validation there.
``shuffle``: int seed
    CPU simulator only: run the threads (and SIMD-groups) of each threadgroup
    in an order shuffled by the seed, to expose a missing barrier or an
    order-dependent atomic; in every execution model (a kernel run as a loop
    runs its threads one at a time then); 0 runs them in index order. Default: ``METALKIT_SHUFFLE`` (a seed; unset or 0: index
    order), read at the first call. On Metal a seed raises ``DispatchError``.
``timeout``: float seconds
    Stop a kernel still running after that long with a ``KernelFault`` naming
    the kernel, the limit and (CPU simulator) how many threadgroups completed
    (``math.inf``: no limit). Default: ``METALKIT_TIMEOUT`` (seconds; unset or
    0: no limit), read at the first call, on the CPU simulator only. On Metal
    a committed command buffer cannot be stopped: the call stops waiting and
    raises, the GPU finishes the work, and the arrays it writes may change
    until then (metalkit keeps them alive); in ``metalkit.batch()`` it raises
    ``DispatchError``.

Geometry tuples are (x, y, z) = (width, height, depth), the reverse of
numpy's shape order: for an array of shape (rows, columns), x indexes columns.

Ctrl-C stops a kernel called from the main thread within a few tens of
milliseconds and raises KeyboardInterrupt at the call (or whatever the SIGINT
handler raises; if it raises nothing, a KernelFault); on Metal it waits for the
GPU. After a timeout or an interrupt the arrays the kernel writes are partly
written (staged copies are not copied back); later calls are unaffected.

Errors: ``ArgumentError`` (argument count, dtype, size, writability, a value
out of range), ``DispatchError`` (geometry or threadgroup memory the kernel
cannot take), ``KernelFault`` (a fault while it ran); each names the kernel.

>>> import math, numpy as np, metalkit as mk
>>> lib = mk.compile('''
... #include <metal_stdlib>
... using namespace metal;
... kernel void scale(device float* x [[buffer(0)]], constant float& s [[buffer(1)]],
...                   uint i [[thread_position_in_grid]]) { x[i] *= s; }
... kernel void reverse_groups(device float* x [[buffer(0)]], threadgroup float* t [[threadgroup(0)]],
...                            uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
...                            uint n [[threads_per_threadgroup]]) {
...     t[l] = x[i];
...     threadgroup_barrier(mem_flags::mem_threadgroup);
...     x[i] = t[n - 1 - l];
... }
... ''')
>>> x = np.arange(8, dtype=np.float32)
>>> lib.scale(x, 2.0)                      # grid: 8 threads, one per element of x
>>> lib.scale(x, 0.5, grid=4)              # the first 4 elements only
>>> x.tolist()
[0.0, 1.0, 2.0, 3.0, 8.0, 10.0, 12.0, 14.0]
>>> x = np.arange(8, dtype=np.float32)     # 2 threadgroups of 4 threads, 16 bytes each
>>> lib.reverse_groups(x, grid=8, threadgroup=4, threadgroup_memory={0: 4 * x.itemsize})
>>> x.tolist()
[3.0, 2.0, 1.0, 0.0, 7.0, 6.0, 5.0, 4.0]
>>> lib.reverse_groups(x, threadgroups=4, threadgroup=2, threadgroup_memory={0: 8})  # 4 groups of 2
>>> x.tolist()
[2.0, 3.0, 0.0, 1.0, 6.0, 7.0, 4.0, 5.0]
>>> lib.reverse_groups(x, threadgroup_memory={0: 16})  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
metalkit.errors.DispatchError: kernel 'reverse_groups': no default grid, because 'threadgroup float* t' depends on the threadgroup size, ...

The CPU simulator's debug options (``metalkit.use("cpu")`` selects it on a Mac):

>>> mk.use("cpu")
>>> lib = mk.compile('''
... #include <metal_stdlib>
... using namespace metal;
... kernel void scale(device float* x [[buffer(0)]], constant float& s [[buffer(1)]],
...                   uint i [[thread_position_in_grid]]) { x[i] *= s; }
... kernel void spin(device uint* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
...     uint k = 0;
...     while (x[0] != 1u) { k += 1; x[i + 1] = k; }   // never ends: x[0] stays 0
... }
... ''', filename="demo.metal")
>>> x = np.ones(4, np.float32)
>>> lib.scale(x, 2.0, grid=5, check=True)  # one thread too many # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
metalkit.errors.KernelFault: kernel 'scale' (demo.metal:4): ... past the end of parameter 'x' [[buffer(0)]] of 4 elements (element 4)...
>>> x.tolist()                             # checked calls run on copies: x is untouched
[1.0, 1.0, 1.0, 1.0]
>>> lib.scale(x, 2.0, shuffle=7); x.tolist()
[2.0, 2.0, 2.0, 2.0]
>>> lib.spin(np.zeros(2, np.uint32), grid=1, timeout=0.2)  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
metalkit.errors.KernelFault: kernel 'spin' (demo.metal:6): stopped at its time limit of 0.2 s (timeout=0.2) ...
>>> lib.scale(x, 2.0, timeout=math.inf); x.tolist()
[4.0, 4.0, 4.0, 4.0]
)doc";

inline constexpr const char* kName = "The kernel's name (str): its function name, or the ``host_name`` of a template instantiation.";
inline constexpr const char* kArgs =
    "Every parameter, in declaration order (list of metalkit.ArgSpec): name, [[buffer(n)]] index, kind "
    "(\"buffer\", \"scalar\", \"threadgroup\" or \"builtin\"), numpy dtype, MSL type, writability and the "
    "declaration as written.\n\n"
    ">>> import metalkit as mk\n"
    ">>> k = mk.compile('''\n"
    "... #include <metal_stdlib>\n"
    "... using namespace metal;\n"
    "... kernel void fill(device int* out [[buffer(0)]], constant int& v [[buffer(1)]],\n"
    "...                  uint i [[thread_position_in_grid]]) { out[i] = v; }\n"
    "... ''').fill\n"
    ">>> [(a.name, a.index, a.kind, a.writable) for a in k.args]\n"
    "[('out', 0, 'buffer', True), ('v', 1, 'scalar', False), ('i', -1, 'builtin', False)]\n";
inline constexpr const char* kMaxThreads =
    "The most threads a threadgroup of this kernel may have (int): the device's limit, 1024, or less if the "
    "kernel declares ``[[max_total_threads_per_threadgroup(n)]]``. ``threadgroup=`` beyond it is a "
    "DispatchError.";
inline constexpr const char* kSimdWidth =
    "Threads per SIMD-group (int): on Metal the pipeline's threadExecutionWidth (32 on Apple GPUs; Intel and AMD "
    "GPUs in Macs may differ), 32 on the CPU simulator.";
inline constexpr const char* kUsesBarriers =
    "CPU simulator: whether the kernel reaches a ``threadgroup_barrier`` or a SIMD-group function (bool); "
    "such kernels run SIMT or as fibers (see ``execution``). Always False on Metal, which does not say.";
inline constexpr const char* kExecution =
    "How the kernel runs (metalkit.Execution, a str): GPU on Metal; on the CPU simulator LOOP (no barrier or "
    "SIMD-group function: a plain loop over threads), SIMT (each SIMD-group's 32 lanes in lockstep), FIBERS (a "
    "fiber per thread with its SIMD-group's lanes in lockstep: code the SIMT transform does not cover, or "
    "execution=\"fibers\") or THREADS (the reference model, execution=\"threads\": a fiber per thread running "
    "the code as written). ``execution_reason`` says why, for FIBERS and THREADS.";
inline constexpr const char* kExecutionReason =
    "Why the kernel runs as ``execution`` says (str): for FIBERS, the construct the SIMT transform does not cover "
    "and where (file:line), or that execution= asked for it; for THREADS, that execution= asked for it; else \"\".";
inline constexpr const char* kLastGpuTime =
    "Seconds of GPU time the kernel's last call took (float; the CPU simulator: the wall time of the call). "
    "A call queued in metalkit.batch() on the GPU reports the time of the batch's whole command buffer. "
    "Safe to read from any thread.";
inline constexpr const char* kSignature =
    "The parameters a call takes, in order (str): ``name(decl [[buffer(n)]], ...)``, as the declarations "
    "are written.";
inline constexpr const char* kLocation = "Where the kernel is defined: (filename, line) of the user's source.";

inline constexpr const char* kBatch = R"doc(What ``metalkit.batch()`` returns: a context manager that queues the kernel
calls made in its block and waits for them once, at its end. Nested blocks of
one thread share one batch. See ``help(metalkit.batch)``.

Calls in a batch take the same keywords as outside one (``help(metalkit.Kernel.__call__)``):
``grid``, ``threadgroups``, ``threadgroup`` and ``threadgroup_memory`` as usual,
checked at the call. On the CPU simulator each call runs at once, with its own
``check``, ``shuffle`` and ``timeout`` (defaults ``METALKIT_CHECK``,
``METALKIT_SHUFFLE``, ``METALKIT_TIMEOUT``); a fault or timeout is raised as a
``KernelFault`` when the block exits. On Metal ``check=True``, a ``shuffle``
seed and ``timeout=`` raise ``DispatchError``. At most 32 batches hold queued
GPU work at once (a Metal command queue takes 64 unfinished command buffers);
the calls of any further batch run at once.

>>> import numpy as np, metalkit as mk
>>> x = np.arange(4, dtype=np.float32); y = np.empty_like(x)
>>> with mk.batch() as b:
...     mk.run("add_arrays", x, x, y, grid=4, threadgroup=2)
...     mk.run("add_arrays", y, x, y)
>>> y.tolist(), b.calls, b.gpu_time >= 0
([0.0, 3.0, 6.0, 9.0], 2, True)
)doc";
inline constexpr const char* kBatchGpuTime =
    "Seconds of GPU time the batch's calls took (float; the CPU simulator: their wall time); complete once "
    "the block has ended.";
inline constexpr const char* kBatchCalls = "Number of kernel calls the batch queued or ran (int).";

}  // namespace mk::docs
