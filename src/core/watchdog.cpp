#include "watchdog.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace mk {

namespace {

using Clock = Watch::Clock;
constexpr auto kTick = std::chrono::milliseconds(20);
constexpr auto kIdle = std::chrono::seconds(2);     // nothing watched for this long: idle,
constexpr auto kIdleTick = std::chrono::seconds(1); // looking once a second

std::atomic<uint64_t> g_interrupts{0};
struct sigaction g_previous_sigint;  // the handler ours runs after counting

void on_sigint(int sig, siginfo_t* info, void* uctx) {
  g_interrupts.fetch_add(1, std::memory_order_relaxed);
  const struct sigaction& prev = g_previous_sigint;
  if (prev.sa_flags & SA_SIGINFO)
    prev.sa_sigaction(sig, info, uctx);
  else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL)
    prev.sa_handler(sig);
}

}  // namespace

// A thread's place in the watchdog's list: which Watch it runs, if any.
// Idle -> Active (the thread, starting a Watch) -> Visiting (the watchdog,
// reading it) -> Active -> Idle (the thread, only from Active).
struct WatchSlot {
  enum : int { Idle, Active, Visiting };
  std::atomic<int> state{Idle};
  Watch* watch = nullptr;  // read by the watchdog only while Visiting
  pthread_t thread = pthread_self();
};

struct Watchdog {
  std::mutex m;
  std::condition_variable cv;
  std::vector<WatchSlot*> slots;  // every thread that ever started a Watch and is still alive
  std::atomic<bool> idle{true};  // a Watch that finds it set wakes the watchdog
  bool started = false;

  static Watchdog& get() {
    static Watchdog* d = [] {
      pthread_atfork(nullptr, nullptr, [] { get().after_fork(); });
      return new Watchdog;  // never destroyed: threads end after static destruction
    }();
    return *d;
  }

  // A child process has only the thread that forked: no watchdog thread yet, and
  // the lock made anew (another thread may have held it at the fork).
  void after_fork() {
    new (&m) std::mutex;
    new (&cv) std::condition_variable;
    started = false;
    idle.store(true);
    const pthread_t self = pthread_self();
    slots.erase(std::remove_if(slots.begin(), slots.end(), [&](WatchSlot* s) { return !pthread_equal(s->thread, self); }),
                slots.end());
  }

  void wake() {
    {
      std::lock_guard<std::mutex> lk(m);
      if (!started) {
        started = true;
        std::thread([this] { loop(); }).detach();
      }
      idle.store(false, std::memory_order_relaxed);
    }
    cv.notify_one();
  }

  // Looks at one thread's Watch; returns whether it has one.
  bool visit(WatchSlot& s, Clock::time_point now) {
    int expected = WatchSlot::Active;
    if (!s.state.compare_exchange_strong(expected, WatchSlot::Visiting, std::memory_order_acquire))
      return expected != WatchSlot::Idle;
    Watch& w = *s.watch;
    int why = w.reason_.load(std::memory_order_relaxed);
    if (!why) {
      if (w.limits_.interruptible) {
        watch_interrupts();  // Python's main thread is in this dispatch: signal.signal cannot run now
        if (interrupts_seen() != w.limits_.interrupts) why = int(StopReason::Interrupt);
      }
      if (!why && now >= w.deadline_) why = int(StopReason::Timeout);
      if (why) w.reason_.store(why, std::memory_order_release);
    }
    if (why) w.target_.stop_now();
    s.state.store(WatchSlot::Active, std::memory_order_release);
    return true;
  }

  // Never sleeps for good: a Watch starting just as `idle` is set may miss it
  // (no fence orders the two, to keep a call cheap) and is then seen at the next
  // idle look, at most a second later.
  void loop() {
    std::unique_lock<std::mutex> lk(m);
    auto last_seen = Clock::now();
    for (;;) {
      const auto now = Clock::now();
      bool any = false;
      for (WatchSlot* s : slots) any |= visit(*s, now);
      if (any) last_seen = now;
      const bool idle_now = now - last_seen > kIdle;
      idle.store(idle_now, std::memory_order_relaxed);
      cv.wait_for(lk, idle_now ? kIdleTick : kTick);
    }
  }
};

namespace {

// The calling thread's slot, in the watchdog's list for as long as the thread lives.
WatchSlot* my_slot() {
  struct Registered {
    WatchSlot* slot = new WatchSlot;
    Registered() {
      Watchdog& d = Watchdog::get();
      std::lock_guard<std::mutex> lk(d.m);
      d.slots.push_back(slot);
    }
    ~Registered() {
      Watchdog& d = Watchdog::get();
      std::lock_guard<std::mutex> lk(d.m);
      d.slots.erase(std::find(d.slots.begin(), d.slots.end(), slot));
      delete slot;
    }
  };
  static thread_local Registered r;
  return r.slot;
}

}  // namespace

Watch::Watch(const RunLimits& limits, Stoppable& target, Clock::time_point start) : limits_(limits), target_(target) {
  if (limits.timeout <= 0 && !limits.interruptible) return;
  if (limits.timeout > 0 && limits.timeout < 1e9)  // a longer limit is none (and would overflow the clock)
    deadline_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.timeout));
  WatchSlot* s = my_slot();
  if (s->state.load(std::memory_order_relaxed) != WatchSlot::Idle) return;
  s->watch = this;
  s->state.store(WatchSlot::Active, std::memory_order_release);
  slot_ = s;
  Watchdog& d = Watchdog::get();
  if (d.idle.load(std::memory_order_relaxed)) d.wake();
}

Watch::~Watch() {
  if (!slot_) return;
  int expected = WatchSlot::Active;
  while (!slot_->state.compare_exchange_weak(expected, WatchSlot::Idle, std::memory_order_acq_rel)) {
    expected = WatchSlot::Active;  // the watchdog is calling stop_now(): wait for it to finish
    std::this_thread::yield();
  }
}

uint64_t interrupts_seen() { return g_interrupts.load(std::memory_order_relaxed); }

void watch_interrupts() {
  struct sigaction cur;
  if (sigaction(SIGINT, nullptr, &cur) != 0) return;
  if (cur.sa_flags & SA_SIGINFO) {
    if (cur.sa_sigaction == on_sigint) return;
  } else if (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN) {
    return;
  }
  g_previous_sigint = cur;  // ours is not installed: nothing reads this now
  struct sigaction ours = cur;
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = cur.sa_flags | SA_SIGINFO;
  sigaction(SIGINT, &ours, nullptr);
}

}  // namespace mk
