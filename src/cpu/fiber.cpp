#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <mutex>


namespace mk {

// Assembly symbols ignore -fvisibility=hidden: MK_HIDE keeps them out of the
// module's exports (.private_extern on Mach-O, .hidden on ELF).
#if defined(__APPLE__)
#define MK_SYM(x) "_" #x
#define MK_HIDE(x) ".private_extern " MK_SYM(x)
#else
#define MK_SYM(x) #x
#define MK_HIDE(x) ".hidden " MK_SYM(x)
#endif

#ifndef MK_FIBER_UCONTEXT
extern "C" void mk_fiber_trampoline();

#if defined(__x86_64__)
// System V: rbx, rbp, r12-r15 are callee-saved; the MXCSR and x87 control
// words are too, and kernels never change them, so they are left alone.
asm(R"(
.text
.globl )" MK_SYM(mk_fiber_switch_asm) R"(
)" MK_HIDE(mk_fiber_switch_asm) R"(
)" MK_SYM(mk_fiber_switch_asm) R"(:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.globl )" MK_SYM(mk_fiber_trampoline) R"(
)" MK_HIDE(mk_fiber_trampoline) R"(
)" MK_SYM(mk_fiber_trampoline) R"(:
  movq %r13, %rdi
  callq *%r12
  ud2
)");
#elif defined(__aarch64__)
// AAPCS64: x19-x28, fp, lr and the low halves of v8-v15 are callee-saved.
asm(R"(
.text
.globl )" MK_SYM(mk_fiber_switch_asm) R"(
)" MK_HIDE(mk_fiber_switch_asm) R"(
.p2align 2
)" MK_SYM(mk_fiber_switch_asm) R"(:
  sub sp, sp, #160
  stp x19, x20, [sp, #0]
  stp x21, x22, [sp, #16]
  stp x23, x24, [sp, #32]
  stp x25, x26, [sp, #48]
  stp x27, x28, [sp, #64]
  stp x29, x30, [sp, #80]
  stp d8, d9, [sp, #96]
  stp d10, d11, [sp, #112]
  stp d12, d13, [sp, #128]
  stp d14, d15, [sp, #144]
  mov x2, sp
  str x2, [x0]
  mov sp, x1
  ldp x19, x20, [sp, #0]
  ldp x21, x22, [sp, #16]
  ldp x23, x24, [sp, #32]
  ldp x25, x26, [sp, #48]
  ldp x27, x28, [sp, #64]
  ldp x29, x30, [sp, #80]
  ldp d8, d9, [sp, #96]
  ldp d10, d11, [sp, #112]
  ldp d12, d13, [sp, #128]
  ldp d14, d15, [sp, #144]
  add sp, sp, #160
  ret
.globl )" MK_SYM(mk_fiber_trampoline) R"(
)" MK_HIDE(mk_fiber_trampoline) R"(
.p2align 2
)" MK_SYM(mk_fiber_trampoline) R"(:
  mov x0, x20
  blr x19
  brk #0
)");
#endif

void fiber_init(FiberContext& ctx, void* stack_top, size_t, FiberEntry entry, void* arg) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
#if defined(__x86_64__)
  // After the six pops and `ret`, rsp is 16-byte aligned at the trampoline,
  // whose `call` then gives entry the usual misaligned-by-8 frame.
  *--sp = reinterpret_cast<void*>(&mk_fiber_trampoline);
  *--sp = nullptr;                                   // rbp
  *--sp = nullptr;                                   // rbx
  *--sp = reinterpret_cast<void*>(entry);            // r12
  *--sp = arg;                                       // r13
  *--sp = nullptr;                                   // r14
  *--sp = nullptr;                                   // r15
#else
  sp -= 20;  // the 160-byte frame the switch restores
  for (int i = 0; i < 20; ++i) sp[i] = nullptr;
  sp[0] = reinterpret_cast<void*>(entry);            // x19
  sp[1] = arg;                                       // x20
  sp[11] = reinterpret_cast<void*>(&mk_fiber_trampoline);  // x30 (lr)
#endif
  ctx.sp = sp;
}

#else  // ucontext

void fiber_init(FiberContext& ctx, void* stack_top, size_t stack_bytes, FiberEntry entry, void* arg) {
  getcontext(&ctx.uc);
  ctx.uc.uc_stack.ss_sp = static_cast<char*>(stack_top) - stack_bytes;
  ctx.uc.uc_stack.ss_size = stack_bytes;
  ctx.uc.uc_link = nullptr;
  // makecontext passes ints; split the pointers in two.
  uintptr_t e = reinterpret_cast<uintptr_t>(entry), a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&ctx.uc, reinterpret_cast<void (*)()>(+[](unsigned e0, unsigned e1, unsigned a0, unsigned a1) {
                reinterpret_cast<FiberEntry>((uintptr_t(e1) << 32) | e0)(reinterpret_cast<void*>((uintptr_t(a1) << 32) | a0));
              }),
              4, unsigned(e), unsigned(e >> 32), unsigned(a), unsigned(a >> 32));
}

void fiber_switch(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }

#endif

static size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

namespace {

constexpr size_t kSlot = 2 * FiberStacks::kStackBytes;

mk_fiber_arena arena_info = {0, 0};  // what modules read: constant once the arena is reserved

// The arena's slots: handed out in order, kept when a thread's stacks go. Never freed, as
// threads may end after static destruction.
struct ArenaSlots {
  std::mutex lock;
  uint64_t next = 0;
  std::vector<uint64_t> free;
};

ArenaSlots& arena_slots() {
  static ArenaSlots* slots = [] {
    // Address space only (the largest of a few sizes it allows); the slots start one stack
    // above its start, so the first has its guard page below it too.
    for (uint64_t gib = 64; gib >= 1; gib /= 2) {
      const uint64_t size = gib << 30;
      void* p = mmap(nullptr, size + 2 * kSlot, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) continue;
      const uint64_t lo = (reinterpret_cast<uint64_t>(p) + FiberStacks::kStackBytes + kSlot - 1) & ~uint64_t(kSlot - 1);
      // Modules on other threads may read these meanwhile: either word is whole, and size last.
      __atomic_store_n(&arena_info.lo, lo, __ATOMIC_RELAXED);
      __atomic_store_n(&arena_info.size, size, __ATOMIC_RELEASE);
      break;
    }
    return new ArenaSlots;
  }();
  return *slots;
}

// A stack of the arena, made accessible, or null when it is full.
char* arena_take() {
  ArenaSlots& a = arena_slots();
  uint64_t slot;
  {
    std::lock_guard<std::mutex> lk(a.lock);
    if (!a.free.empty()) {
      slot = a.free.back();
      a.free.pop_back();
    } else if ((a.next + 1) * kSlot <= arena_info.size) {
      slot = a.next++;
    } else {
      return nullptr;
    }
  }
  char* stack = reinterpret_cast<char*>(arena_info.lo + slot * kSlot);
  if (mprotect(stack, FiberStacks::kStackBytes, PROT_READ | PROT_WRITE) == 0) return stack;
  std::lock_guard<std::mutex> lk(a.lock);
  a.free.push_back(slot);
  return nullptr;
}

void arena_give(char* stack) {
  // Inaccessible again, its pages dropped.
  mmap(stack, FiberStacks::kStackBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  ArenaSlots& a = arena_slots();
  std::lock_guard<std::mutex> lk(a.lock);
  a.free.push_back((reinterpret_cast<uint64_t>(stack) - arena_info.lo) / kSlot);
}

}  // namespace

const mk_fiber_arena* fiber_arena() { return &arena_info; }

FiberStacks::~FiberStacks() {
  for (const Block& b : blocks_)
    if (b.arena) arena_give(b.stack);
    else munmap(b.stack - page_size(), page_size() + 2 * kStackBytes);
}

void* FiberStacks::top(size_t i) {
  while (blocks_.size() <= i) {
    Block b{arena_take(), true};
    if (!b.stack) {
      size_t guard = page_size();
      // Reserved whole, then the stack made accessible: below it a guard page, where an overflow
      // faults; above it address space no other mapping can take (MK_FIBER_STACK_BYTES).
      void* p = mmap(nullptr, guard + 2 * kStackBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      if (mprotect(static_cast<char*>(p) + guard, kStackBytes, PROT_READ | PROT_WRITE) != 0) {
        munmap(p, guard + 2 * kStackBytes);
        return nullptr;
      }
      b = {static_cast<char*>(p) + guard, false};
    }
    *reinterpret_cast<const void**>(b.stack + kStackBytes - MK_WATCH_SLOT) = watch_;
    blocks_.push_back(b);
  }
  // Stacks start at different offsets within a page: page-aligned tops would put the hot frames
  // of every fiber in the same L1 cache sets, which then evict one another at each switch.
  return blocks_[i].stack + kStackBytes - MK_WATCH_SLOT - (i * 17 % 64) * 64;
}

bool FiberStacks::in_guard(uintptr_t addr) const {
  for (const Block& b : blocks_) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(b.stack);
    if (addr >= lo - page_size() && addr < lo) return true;
  }
  return false;
}

}  // namespace mk
