// mutex_lock: the POSIX mutex, the baseline every other lock is measured against.
//
// Design: a thin wrapper over a default pthread_mutex_t (NPTL: one user-space atomic
// attempt, then FUTEX_WAIT in the kernel; the releaser wakes one sleeper, which competes
// again with newcomers). Ownership passing is therefore unfair: a thread that releases and
// re-acquires at once usually wins against the woken sleeper.
// Ordering: pthread_mutex_lock/unlock are acquire/release operations (POSIX 4.12).
// Memory: sizeof(pthread_mutex_t) (40 B on x86-64 glibc), no per-thread state.
// When not to use it: inside ULTs that must keep their worker running — a contended
// lock() puts the whole kernel thread, with every ULT of that worker, to sleep.
#pragma once

#include <pthread.h>

#include "base/lock/lock.hpp"

namespace mpiv::base {

class MPIV_TS_CAPABILITY("mutex") mutex_lock {
  public:
    /// Unfair: the releaser or a newcomer may overtake sleeping waiters.
    static constexpr bool is_fair = false;
    /// lock() sleeps in the kernel instead of yielding the ULT.
    static constexpr bool may_yield = false;

    mutex_lock() noexcept = default;
    ~mutex_lock() { pthread_mutex_destroy(&mutex_); }
    mutex_lock(const mutex_lock &) = delete;
    mutex_lock &operator=(const mutex_lock &) = delete;

    /// Acquire the lock, sleeping in the kernel while another thread owns it.
    /// @context thread-safe; blocks the kernel thread.
    void lock() noexcept MPIV_TS_ACQUIRE() { pthread_mutex_lock(&mutex_); }

    /// Acquire the lock if it is free. @return true iff the caller now owns it.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        return pthread_mutex_trylock(&mutex_) == 0;
    }

    /// Release the lock; the caller must own it.
    void unlock() noexcept MPIV_TS_RELEASE() { pthread_mutex_unlock(&mutex_); }

  private:
    pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

} // namespace mpiv::base
