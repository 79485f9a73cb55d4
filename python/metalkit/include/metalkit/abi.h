// The contract between a compiled CPU module and the runtime that loads it.
// Included both by generated launchers (compiled by clang at run time) and by
// metalkit's own C++ core, so the two always agree. Plain C layout only.
#ifndef METALKIT_ABI_H
#define METALKIT_ABI_H

// Constants are enumerators, not macros: a module's source is preprocessed
// before its launchers are appended, so macros from here would be gone.
// MK_FIBER_STACK_BYTES: a fiber's stack, with as much unmapped address space above its top, so
// an address within that distance above a frame of a fiber is the fiber's own stack.
// MK_WATCH_RANGES: the ranges an mk_watch holds; MK_WATCH_SLOT: where a stack of the fiber arena
// keeps its mk_watch pointer, this many bytes below its end (above the fiber's first frame).
enum { MK_ABI_VERSION = 15, MK_SIMD_SLOT = 256, MK_FIBER_STACK_BYTES = 1 << 20, MK_WATCH_RANGES = 8,
       MK_WATCH_SLOT = 64 };

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long mk_u64;

enum mk_arg_kind {
  MK_ARG_BUFFER = 0,       // device/constant pointer (or device T&): a numpy array
  MK_ARG_SCALAR = 1,       // constant T& : a Python scalar, vector or struct value
  MK_ARG_THREADGROUP = 2,  // threadgroup T* [[threadgroup(i)]]: sized at dispatch
  MK_ARG_BUILTIN = 3       // [[thread_position_in_grid]] and friends
};

enum mk_type {
  MK_T_BOOL = 0, MK_T_I8, MK_T_U8, MK_T_I16, MK_T_U16, MK_T_I32, MK_T_U32,
  MK_T_I64, MK_T_U64, MK_T_F16, MK_T_BF16, MK_T_F32, MK_T_STRUCT, MK_T_COUNT
};

// Address space as written in the kernel signature.
enum mk_space { MK_SPACE_NONE = 0, MK_SPACE_DEVICE, MK_SPACE_CONSTANT, MK_SPACE_THREADGROUP, MK_SPACE_THREAD };

// A struct's layout as the compiler lays it out (offsetof/sizeof of each field the front end
// names), so Python can build the numpy structured dtype that matches it.
struct mk_struct_info;
typedef struct mk_field_info {
  const char* name;
  mk_u64 offset;         // offsetof
  int type;              // mk_type of the scalar element; MK_T_STRUCT: a nested struct (layout)
                         // or, with no layout, bytes metalkit cannot describe
  int vec_width;         // lanes of a vector element (matrix: of one column), else 1
  mk_u64 elem_size;      // sizeof one element (a float3: 16; a matrix's column)
  int ndims;             // array extents (a matrix's columns count as one), outermost first
  int dims[4];
  const struct mk_struct_info* layout;  // the nested struct's, when type is MK_T_STRUCT
} mk_field_info;

typedef struct mk_struct_info {
  mk_u64 size, align;    // sizeof, alignof
  int nfields;
  const mk_field_info* fields;
} mk_struct_info;

typedef struct mk_arg_info {
  const char* name;      // parameter name in the source
  const char* decl;      // declaration as written, for messages ("device const float* a")
  const char* builtin;   // builtin attribute name, or "" for non-builtins
  int index;             // [[buffer(n)]] / [[threadgroup(n)]] index; -1 for builtins
  int kind;              // mk_arg_kind
  int type;              // mk_type of the element (vector/struct element for buffers)
  int vec_width;         // 1 for scalars, 2/3/4 for vector elements
  int space;             // mk_space
  int writable;          // the kernel may write through it
  mk_u64 elem_size;      // sizeof the pointee / referenced type
  mk_u64 elem_align;     // alignof the same
  int array_len;         // N for a fixed-length array parameter (constant T x[N]), else 0
  const mk_struct_info* layout;  // a struct element's fields, when the front end saw its definition
} mk_arg_info;

// One dispatch as the runtime hands it to a launcher. args[i] follows the
// kernel's parameter order: a data pointer for buffers and scalars, a byte
// offset into the group's threadgroup arena for threadgroup parameters, unused
// for builtins.
typedef struct mk_dispatch {
  unsigned grid[3];      // threads per grid (dispatchThreads semantics)
  unsigned tg[3];        // threads per threadgroup as dispatched
  unsigned ngroups[3];   // threadgroups per grid
  void* const* args;
  // ~0u: every thread of each group runs. Else only this one (linear index in its group) of a
  // kernel run as a loop: after a fault the runtime runs the group's threads one at a time.
  unsigned only;
  // A kernel flagged MK_KERNEL_STREAMS stores its outputs past the cache when the dispatch writes
  // at least this many bytes through them (launch.h run_groups_streamed).
  mk_u64 stream_bytes;
} mk_dispatch;

// Runs threadgroups [first, last) (linear index, x fastest) on the calling
// thread. tg_arena is this worker's threadgroup memory; *group is set to each
// group's index before it runs, so a fault can name its threadgroup.
typedef void (*mk_launch_fn)(const mk_dispatch* d, mk_u64 first, mk_u64 last, char* tg_arena,
                             volatile mk_u64* group);

// How a kernel runs: a plain loop over its threads (no barrier, no SIMD-group function),
// SIMT (each SIMD-group's lanes in lockstep, front end's msl/simt), or a fiber per thread.
// MK_KERNEL_TG_VARIABLES: it declares threadgroup variables in its body (check=True guards
// them in the module built with execution "guarded").
enum mk_kernel_flags {
  MK_KERNEL_NEEDS_FIBERS = 1,
  MK_KERNEL_SIMT = 2,
  MK_KERNEL_BARRIERS = 4,
  MK_KERNEL_TG_VARIABLES = 8,
  MK_KERNEL_STREAMS = 16
};

typedef struct mk_kernel_info {
  const char* name;          // host name
  const mk_arg_info* args;
  int nargs;
  int max_threads;           // maximum threads per threadgroup
  int flags;                 // mk_kernel_flags
  mk_u64 static_tg_bytes;    // kernel-scope threadgroup memory
  mk_launch_fn launch;
  const char* file;          // where the kernel is defined, for messages
  int line;
  const char* execution;     // "loop", "simt", or "fibers: " and why
  const char* unset_constant; // a function constant it uses that has no value ("" if none): creating
                              // the kernel fails, as Metal's specialised function does
} mk_kernel_info;

typedef struct mk_module_info {
  int abi_version;
  int nkernels;
  const mk_kernel_info* kernels;
} mk_module_info;

#define MK_MODULE_SYMBOL "metalkit_module"
typedef const mk_module_info* (*mk_module_fn)(void);

// ---- The runtime services a module calls back into (kernels with fibers) ----

// What a SIMD-group rendezvous hands back to each thread: the values every
// participating lane contributed, indexed by lane.
typedef struct mk_simd_view {
  const unsigned char* values;  // lane i's value at values + i * stride
  unsigned stride;              // bytes per lane slot
  unsigned active;              // bit i set: lane i took part
  unsigned lane;                // the calling thread's lane
  unsigned width;               // threads in this SIMD-group (the last one may be short)
} mk_simd_view;

// One fiber-run threadgroup: the module's per-thread entry, called once per
// thread (linear index within the group) on its own fiber.
typedef void (*mk_thread_fn)(void* ctx, unsigned thread_index);
// Runs SIMD-group `sg` of a SIMT threadgroup; `scheduler` runs it as a fiber and goes to every
// simt_barrier it reaches (null when the SIMD-groups run one after another without fibers).
typedef void (*mk_simt_fn)(void* ctx, unsigned sg, void* scheduler);

// The fiber an OS thread runs, as the access checks see it (kept in step by the scheduler):
// `index`, its first thread; `epoch`, the barrier interval; `group_epoch`, the interval its
// threadgroup began in; `sg_epoch`, simdgroup_barriers its SIMD-group completed in the group.
typedef struct mk_running_fiber {
  unsigned char running;
  unsigned index, lanes;
  unsigned pos[3];
  unsigned epoch, group_epoch, sg_epoch;
} mk_running_fiber;

// One granule of threadgroup memory as the checks record it: its last write and last read
// (epochs 0: never; instructions as offsets from the module's code; `who`: a fiber's index).
typedef struct mk_tg_cell {
  unsigned w_epoch, r_epoch;
  unsigned short w_who, r_who;
  unsigned short r_other;                     // with r_many: a reader other than r_who
  unsigned char w_atomic, r_atomic, r_many;   // r_many: several fibers read it in r_epoch
  unsigned w_pc, r_pc;
  unsigned w_sg, r_sg;                        // the accessing SIMD-group's sg_epoch
} mk_tg_cell;

// A plain read of one cell by fiber f that finds nothing: the cell was written in this
// threadgroup, and not by another fiber in this interval. Records the read (readers of one
// interval after the first make it r_many) and returns 1; else returns 0, the cell untouched, for
// the runtime's whole decision (access_check.cpp, which calls this first too). `pc`: the read's
// instruction as an offset from the module's code. Never instrumented itself.
#define MK_QUIET __attribute__((always_inline, no_sanitize("thread"))) static inline
MK_QUIET int mk_tg_quiet_read(mk_tg_cell* c, const mk_running_fiber* f, unsigned pc) {
  const unsigned short me = (unsigned short)f->index;
  if (c->w_epoch < f->group_epoch || (c->w_epoch == f->epoch && c->w_who != me)) return 0;
  if (c->r_epoch == f->epoch) {
    if (!c->r_many && c->r_who != me) {
      c->r_many = 1;
      c->r_other = me;
    }
  } else {
    c->r_epoch = f->epoch;
    c->r_who = me;
    c->r_many = 0;
    c->r_pc = pc;
    c->r_sg = f->sg_epoch;
  }
  c->r_atomic = 0;
  return 1;
}

// The same for a plain write: no other fiber wrote or read the cell in this interval.
MK_QUIET int mk_tg_quiet_write(mk_tg_cell* c, const mk_running_fiber* f, unsigned pc) {
  const unsigned short me = (unsigned short)f->index;
  if ((c->w_epoch == f->epoch && c->w_who != me) || (c->r_epoch == f->epoch && (c->r_who != me || c->r_many)))
    return 0;
  c->w_epoch = f->epoch;
  c->w_who = me;
  c->w_atomic = 0;
  c->w_pc = pc;
  c->w_sg = f->sg_epoch;
  return 1;
}
#undef MK_QUIET

// Checked modules: the memory whose accesses the runtime needs to see on one OS thread, so the
// module calls it for those alone. `everything`: nonzero, every access (before a dispatch's checks
// are armed, under a trace, with more ranges than fit, or while a finding waits to be settled at
// the next access); else the accesses that start in [lo[i], lo[i] + size[i]) for some i < n.
// `cells[i]`: for threadgroup memory, its cells, a granule of 1 << shift[i] bytes each (else
// null): with `fiber` and the module's `code_base`, a plain read or write that finds nothing is
// recorded there (mk_tg_quiet_read, mk_tg_quiet_write) without a call. `state`: the runtime's,
// for its access callback.
typedef struct mk_watch {
  unsigned everything, n;
  mk_u64 lo[MK_WATCH_RANGES], size[MK_WATCH_RANGES];
  mk_tg_cell* cells[MK_WATCH_RANGES];
  unsigned shift[MK_WATCH_RANGES];
  const mk_running_fiber* fiber;
  mk_u64 code_base;
  void* state;
} mk_watch;

// The address space the runtime takes fibers' stacks from first (size 0 until the first is
// made; they may come from elsewhere too): slots of 2 * MK_FIBER_STACK_BYTES from `lo`, each
// starting with a stack whose mk_watch pointer lies MK_WATCH_SLOT bytes below its end. A frame
// in it finds its OS thread's mk_watch without a thread-local lookup.
typedef struct mk_fiber_arena {
  mk_u64 lo, size;
} mk_fiber_arena;

typedef struct mk_runtime {
  int abi_version;
  // Runs the threads of one threadgroup (at `position`, of `size` threads per
  // dimension) as fibers until all return; fn gets each thread's linear index.
  void (*run_group)(mk_thread_fn fn, void* ctx, const unsigned* position, const unsigned* size);
  // threadgroup_barrier: every thread of the group must reach the same one.
  // Call sites are told apart by file, line and column (two calls on one line are two sites).
  void (*barrier)(const char* file, int line, int column);
  // simdgroup_barrier: the live threads of the caller's SIMD-group meet.
  void (*simd_barrier)(const char* file, int line, int column);
  // Contributes `size` bytes (<= MK_SIMD_SLOT) and waits for the live lanes
  // of the SIMD-group that reach the same call.
  mk_simd_view (*simd_exchange)(const void* value, unsigned size, const char* file, int line, int column);
  // Reports a fault found by the module's own checks; does not return.
  void (*fault)(const char* message, const char* file, int line);
  // Runs the SIMD-groups of one SIMT threadgroup: fn gets each SIMD-group's index, in
  // order or shuffled; as fibers when `fibers` is 1 (the kernel has threadgroup barriers) and
  // the group has more than one SIMD-group, so `barrier` can wait for the others, and always
  // when it is 2 (a checked build: its code runs on fibers' stacks only).
  void (*run_simt_group)(mk_simt_fn fn, void* ctx, const unsigned* position, const unsigned* size,
                         unsigned nsg, int fibers);
  // A threadgroup_barrier reached by only some live lanes of SIMD-group `sg` (`missing`:
  // the lanes that are not there); does not return.
  void (*simt_diverged)(unsigned sg, unsigned missing, const char* file, int line);
  // threadgroup_barrier of a SIMD-group that `scheduler` runs as a fiber (passed in, as a
  // thread-local lookup costs a call per use in a shared object).
  void (*simt_barrier)(void* scheduler, const char* file, int line, int column);
  // Checked modules (check="races"/"uninit"/"lockstep"): a memory access of `size` bytes at
  // `addr` (mk_access_flags) made by the instruction before `pc`, and a kernel-scope
  // threadgroup variable reached (`initialised`: it has an initializer).
  void (*access)(const void* addr, mk_u64 size, unsigned flags, const void* pc);
  void (*threadgroup_variable)(const void* addr, mk_u64 size, mk_u64 elem_size, const char* name, int initialised);
  // An atomic operation (mk_atomic_op) on the `size`-byte integer at `addr`, recorded as an access and
  // done: the instrumentation would turn the module's own atomics back into callbacks. Returns the
  // old value; MK_ATOMIC_CAS compares with *expected (updated on failure) and returns 1 on success.
  mk_u64 (*atomic)(volatile void* addr, unsigned size, unsigned op, mk_u64 value, mk_u64* expected, const void* pc);
  // Checked modules: where a kernel-scope threadgroup variable lives on this OS thread (`key`, its
  // thread-local, tells variables apart): `size` bytes aligned to `align` that end right at an
  // inaccessible guard, so an access past its end faults and is named (src/cpu/guarded.h).
  void* (*threadgroup_storage)(const void* key, mk_u64 size, mk_u64 align, mk_u64 elem_size, const char* name);
  // Shader logging (<metal_logging>): one message of the calling thread, kept for the end of the dispatch.
  void (*log)(const struct mk_log_call* call);
  // Checked modules: `access` for an access made on a stack of `fiber_arena`, given its OS
  // thread's mk_watch (which says whether the runtime needs it at all).
  void (*watched_access)(const mk_watch* watch, const void* addr, mk_u64 size, unsigned flags, const void* pc);
  const mk_fiber_arena* fiber_arena;
  // A threadgroup of a SIMT kernel split at its barriers, whose module runs the SIMD-groups itself,
  // region by region (launch.h run_groups_simt_regions): readies the group as run_simt_group does
  // without fibers and returns the order to run its nsg SIMD-groups in if shuffled on request,
  // else null (in order). *running points, while one runs, to its frame, whose SIMD-group index is
  // `sg_offset` bytes in: faults and log messages name it from there. end_split_group closes it.
  const unsigned* (*begin_split_group)(const unsigned* position, const unsigned* size, unsigned nsg,
                                       const void* const* running, unsigned sg_offset);
  void (*end_split_group)(void);
} mk_runtime;

// One argument of a logged message, as C varargs pass it (float and half as double).
enum mk_log_kind { MK_LOG_INT = 0, MK_LOG_UINT, MK_LOG_FLOAT, MK_LOG_STRING, MK_LOG_POINTER };
typedef struct mk_log_arg {
  int kind;              // mk_log_kind
  int size;              // bytes of the value as the kernel held it (an int: 4), for %x of a negative value
  mk_u64 bits;           // an integer's bits (sign-extended), or a pointer
  double f;              // MK_LOG_FLOAT
  const char* s;         // MK_LOG_STRING
} mk_log_arg;

// A log call (os_log::log_with_type and friends). Who called: in a kernel run as a loop the module
// knows (`where`: the threadgroup's position, then the thread's position in it); otherwise `where`
// is null and the runtime knows the fiber running, and `lane` is the caller's SIMD lane when the
// fiber is a SIMT SIMD-group (~0u: not known, a function reached through a pointer).
typedef struct mk_log_call {
  const char* subsystem;
  const char* category;
  int type;              // os_log_type: 0 default, 1 info, 2 debug, 16 error, 17 fault
  const char* format;
  const mk_log_arg* args;
  int nargs;
  const unsigned* where;
  unsigned lane;
} mk_log_call;

enum mk_access_flags { MK_ACCESS_WRITE = 1, MK_ACCESS_ATOMIC = 2, MK_ACCESS_UPDATE = 4 /* a write that reads first */ };
enum mk_atomic_op {
  MK_ATOMIC_LOAD = 0, MK_ATOMIC_STORE, MK_ATOMIC_EXCHANGE, MK_ATOMIC_ADD, MK_ATOMIC_SUB, MK_ATOMIC_AND,
  MK_ATOMIC_OR, MK_ATOMIC_XOR, MK_ATOMIC_NAND, MK_ATOMIC_CAS
};

#define MK_RUNTIME_SYMBOL "metalkit_set_runtime"
typedef void (*mk_set_runtime_fn)(const mk_runtime*);

#ifdef __cplusplus
}
#endif
#endif
