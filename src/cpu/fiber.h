// Fibers: one per simulated GPU thread of a threadgroup that synchronises
// (barriers, SIMD-group functions). A switch saves only callee-saved
// registers, in assembly on x86-64 and arm64; ucontext elsewhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "metalkit/abi.h"

#if !(defined(__x86_64__) || defined(__aarch64__)) && !defined(MK_FIBER_UCONTEXT)
#define MK_FIBER_UCONTEXT 1
#endif
#ifdef MK_FIBER_UCONTEXT
#include <ucontext.h>
#endif

namespace mk {

struct FiberContext {
#ifdef MK_FIBER_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;
#endif
};

using FiberEntry = void (*)(void* arg);

// The process's fiber arena (mk_fiber_arena): reserved when the first stack is asked for.
const mk_fiber_arena* fiber_arena();

// Stacks for the fibers of one worker thread: mmap'd once, reused by every
// group it runs, each with a guard page below it so an overflow faults. Each holds `watch`
// MK_WATCH_SLOT bytes below its end; they come from the fiber arena while it has room.
class FiberStacks {
 public:
  // A SIMT SIMD-group keeps 32 lanes' locals: room for per-thread arrays of a few KiB.
  static constexpr size_t kStackBytes = MK_FIBER_STACK_BYTES;
  explicit FiberStacks(const void* watch) : watch_(watch) {}
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;
  // The top of stack i (0-based), allocating more as needed; nullptr if the
  // system refuses more mappings (the caller reports it as a fault).
  void* top(size_t i);
  // Whether addr lies in one of the guard pages.
  bool in_guard(uintptr_t addr) const;

 private:
  struct Block {
    char* stack;  // its lowest byte: a guard page below, as much unmapped above as it holds
    bool arena;   // a slot of the fiber arena, else a mapping of its own
  };
  std::vector<Block> blocks_;
  const void* watch_;
};

// Prepares ctx to start running entry(arg) on the stack whose top is stack_top.
void fiber_init(FiberContext& ctx, void* stack_top, size_t stack_bytes, FiberEntry entry, void* arg);
// Saves the current context in from and resumes to (inline: every barrier switches).
#ifdef MK_FIBER_UCONTEXT
void fiber_switch(FiberContext& from, FiberContext& to);
#else
extern "C" void mk_fiber_switch_asm(void** from_sp, void* to_sp);
inline void fiber_switch(FiberContext& from, FiberContext& to) { mk_fiber_switch_asm(&from.sp, to.sp); }
#endif

}  // namespace mk
