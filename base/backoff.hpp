// Spin-then-yield back-off for every busy-wait in mpiv.
//
// Spinning is right while the lock holder or the producer runs on another PU; once
// threads outnumber PUs (16 threads on 2 cores) it starves the very thread being waited
// for. backoff spins with a CPU pause for a bounded number of rounds, then yields: the
// ULT, when the caller is a ULT (the scheduler installs a per-thread hook), else the
// kernel thread (sched_yield).
#pragma once

#include <cstdint>

namespace mpiv::base {

inline void cpu_relax() noexcept
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

/// A per-thread hook that yields the running ULT; returns false when the caller is not a
/// ULT (then the kernel thread is yielded instead).
using yield_hook = bool (*)() noexcept;

/// Install @p hook for the calling kernel thread (the scheduler does this for workers).
void set_thread_yield_hook(yield_hook hook) noexcept;

/// Yield the calling ULT if it is one, otherwise the calling kernel thread.
void yield_thread() noexcept;

/// Parking of ULTs that wait in a queue (a lock's FIFO): a waiter that yields keeps its
/// place in the queue, and its worker then goes round all its other ULTs, most of them
/// waiting in the same queue, before the one that was handed the lock runs. A parked ULT
/// is off its worker's run set until the thread that hands it the lock unparks it. The
/// scheduler installs the operations (process-wide: unpark is called from any thread).
struct park_ops {
    /// The calling ULT's wake token, or 0 when the caller is not a ULT (it cannot park).
    std::uint64_t (*token)() noexcept;
    /// Suspend the calling ULT until its token is unparked; wake-ups may be spurious.
    void (*park)() noexcept;
    /// Wake the ULT of @p token if it still lives (a stale token: a spurious wake-up).
    void (*unpark)(std::uint64_t token) noexcept;
};

/// Install @p ops (the scheduler does, before its first ULT runs). Idempotent.
void set_park_ops(const park_ops *ops) noexcept;
/// The calling ULT's wake token, 0 if it cannot park (not a ULT, no scheduler).
std::uint64_t park_token() noexcept;
/// park_ops::park(); only for a caller whose park_token() was not 0.
void park() noexcept;
/// park_ops::unpark(); @p token must come from park_token().
void unpark(std::uint64_t token) noexcept;

class backoff {
  public:
    /// @param spin_rounds pause rounds before the first yield
    explicit backoff(std::uint32_t spin_rounds = 64) noexcept : limit_(spin_rounds) {}

    /// One step of waiting: pause while under the spin budget, yield after it.
    void pause() noexcept
    {
        if (rounds_ < limit_) {
            ++rounds_;
            cpu_relax();
        } else {
            yield_thread();
        }
    }

    /// True once the spin budget is used up (the next pause() yields).
    bool spun_out() const noexcept { return rounds_ >= limit_; }

    void reset() noexcept { rounds_ = 0; }

  private:
    std::uint32_t limit_;
    std::uint32_t rounds_ = 0;
};

/// How long one thread polls before it hands its PU on, learned from its own waits: a
/// wait that ended while polling doubles the budget, a wait that outlasted it halves it,
/// within [lo, hi]. A budget grows only from waits that end within it, so every
/// k_probe_period-th wait is a probe with four times the budget. For a thread among others
/// on few PUs: when its completion comes from another process within a poll budget (a
/// request and its reply), polling on keeps the round trips going without a kernel switch
/// each; when it needs a thread of its own process that waits for the PU, polling only
/// delays that thread, and the budget falls back to lo within a few waits.
/// Not thread-safe: one per thread.
class adaptive_spin {
  public:
    static constexpr std::uint32_t k_probe_period = 16;

    adaptive_spin(std::uint32_t lo, std::uint32_t hi) noexcept : lo_(lo), hi_(hi), budget_(lo) {}

    /// Polls to make in the next wait before handing the PU on.
    std::uint32_t next() noexcept
    {
        if (++waits_ % k_probe_period != 0) {
            return budget_;
        }
        return budget_ >= hi_ / 4 ? hi_ : budget_ * 4;
    }

    /// The budget of the waits that are not probes.
    std::uint32_t budget() const noexcept { return budget_; }

    /// The wait ended after @p polls, within what next() gave (0: it had ended before the
    /// first poll, which says nothing about polling and leaves the budget as it is).
    void ended_within(std::uint32_t polls) noexcept
    {
        if (polls != 0) {
            budget_ = budget_ >= hi_ / 2 ? hi_ : budget_ * 2;
        }
    }

    /// The wait outlasted what next() gave.
    void outlasted() noexcept { budget_ = budget_ / 2 <= lo_ ? lo_ : budget_ / 2; }

  private:
    std::uint32_t lo_;
    std::uint32_t hi_;
    std::uint32_t budget_;
    std::uint32_t waits_ = 0;
};

} // namespace mpiv::base
