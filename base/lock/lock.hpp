// Common pieces of the mpiv lock library: the lock interface, RAII guards, traits and
// the clang thread-safety annotations.
//
// Every lock L in mpiv::base (mutex_lock, ticket_lock, mcs_lock, hmcs_lock, tlp_lock<H, L>)
// is default-constructible, neither copyable nor movable, and provides
//
//     void lock() noexcept;        // blocks until the caller owns the lock
//     bool try_lock() noexcept;    // true iff the caller now owns it; never waits
//     void unlock() noexcept;      // the owner gives it up
//     static constexpr bool is_fair;    // waiters enter in FIFO order
//     static constexpr bool may_yield;  // lock() may call yield_thread(), i.e. switch to
//                                       // another ULT of the calling worker
//
// The two-level priority lock (tlp.hpp) adds lock_low()/try_lock_low()/unlock_low(); its
// plain lock()/unlock() are the high-priority class. Locks that can serve as the
// high-priority sub-lock of a tlp_lock also provide `bool no_waiters() const noexcept`,
// callable by the owner only (see tlp.hpp for the exact contract).
//
// None of the locks is recursive: locking a lock the caller already owns deadlocks.
#pragma once

// Clang's -Wthread-safety attributes. GCC has no such analysis: they expand to nothing.
#if defined(__clang__)
#define MPIV_TS_ATTRIBUTE(_x) __attribute__((_x))
#else
#define MPIV_TS_ATTRIBUTE(_x)
#endif

#define MPIV_TS_CAPABILITY(_name) MPIV_TS_ATTRIBUTE(capability(_name))
#define MPIV_TS_SCOPED_CAPABILITY MPIV_TS_ATTRIBUTE(scoped_lockable)
#define MPIV_TS_GUARDED_BY(_lock) MPIV_TS_ATTRIBUTE(guarded_by(_lock))
#define MPIV_TS_PT_GUARDED_BY(_lock) MPIV_TS_ATTRIBUTE(pt_guarded_by(_lock))
#define MPIV_TS_REQUIRES(...) MPIV_TS_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define MPIV_TS_ACQUIRE(...) MPIV_TS_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define MPIV_TS_TRY_ACQUIRE(...) MPIV_TS_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
#define MPIV_TS_RELEASE(...) MPIV_TS_ATTRIBUTE(release_capability(__VA_ARGS__))
#define MPIV_TS_EXCLUDES(...) MPIV_TS_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define MPIV_TS_NO_ANALYSIS MPIV_TS_ATTRIBUTE(no_thread_safety_analysis)

namespace mpiv::base {

/// RAII ownership of a lock through its (high-priority) lock()/unlock().
template <class L>
class MPIV_TS_SCOPED_CAPABILITY lock_guard {
  public:
    /// Acquire @p lock; may wait (and yield, if L::may_yield).
    explicit lock_guard(L &lock) noexcept MPIV_TS_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
    /// Release the lock.
    ~lock_guard() MPIV_TS_RELEASE() { lock_.unlock(); }

    lock_guard(const lock_guard &) = delete;
    lock_guard &operator=(const lock_guard &) = delete;

  private:
    L &lock_;
};

/// RAII ownership of a priority lock through its low-priority class
/// (lock_low()/unlock_low()): use it on progress-polling paths that are likely to find
/// nothing to do, so that they never delay a thread issuing operations.
template <class L>
class MPIV_TS_SCOPED_CAPABILITY low_priority_guard {
  public:
    /// Acquire @p lock at low priority; waits while high-priority threads want it.
    explicit low_priority_guard(L &lock) noexcept MPIV_TS_ACQUIRE(lock) : lock_(lock)
    {
        lock_.lock_low();
    }
    /// Release the lock.
    ~low_priority_guard() MPIV_TS_RELEASE() { lock_.unlock_low(); }

    low_priority_guard(const low_priority_guard &) = delete;
    low_priority_guard &operator=(const low_priority_guard &) = delete;

  private:
    L &lock_;
};

} // namespace mpiv::base
