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

} // namespace mpiv::base
