// tlp_lock<High, Low>: the two-level priority lock of Amer et al. (seed 004, §4.1, Fig. 5).
//
// Design: threads on the main path (issuing operations) take the lock with lock(), the
// high-priority class; threads polling for progress, which usually find nothing to do, take
// it with lock_low(). Each class first wins its own sub-lock (High, Low), so at most one
// thread per class goes on to the filter, a ticket lock that decides between the two
// classes. The first high-priority owner takes the filter and sets go_straight_; while
// high-priority threads keep queueing on High, each owner leaves the filter held and
// go_straight_ set for its successor, which enters without touching the filter. Only an
// owner that sees no high-priority waiter clears go_straight_ and releases the filter,
// letting the low-priority thread at the head of Low in. Low-priority owners always take
// and release the filter.
//
// Invariants: go_straight_ implies the filter is held by the high-priority class (and is
// read and written only by owners of High); at most two threads (the High owner, the Low
// owner) hold or wait for the filter; the critical section is owned by the High owner
// while go_straight_ is set or it holds the filter, else by the filter's Low owner.
// no_waiters() contract of High: it may report "no waiters" while a high-priority thread
// is about to be seen (then that thread takes the filter itself, after at most one
// low-priority critical section: a priority inversion, never an error), but it must never
// report "waiters" when there is none — that would leave the filter held with nobody to
// release it, starving the low class for as long as no high-priority thread comes.
// (ticket_lock, mcs_lock and hmcs_lock report waiters only once a thread has committed to
// queueing, see their no_waiters().)
// Ordering: go_straight_ is ordered by High's own acquire/release; the filter's
// release/acquire orders critical sections across classes (see ticket.hpp).
// Counting (base/stats.hpp): acquisitions per class, and the time of those that waited
// (each tries the lock first; only a failed try reads the clock).
// Memory: the two sub-locks, a ticket lock and a flag, each on its own 128 B blocks.
// When not to use it: when all threads do useful work under the lock (plain HMCS has the
// same throughput without the filter step); when the low class must have a bound on its
// waiting time (it waits as long as high-priority threads keep coming).
#pragma once

#include <chrono>
#include <cstdint>

#include "base/cacheline.hpp"
#include "base/lock/hmcs.hpp"
#include "base/lock/lock.hpp"
#include "base/lock/mcs.hpp"
#include "base/lock/ticket.hpp"
#include "base/stats.hpp"

namespace mpiv::base {

template <class High, class Low>
class MPIV_TS_CAPABILITY("mutex") tlp_lock {
  public:
    /// Low-priority threads are overtaken by every high-priority one.
    static constexpr bool is_fair = false;
    /// Waiting may yield if any sub-lock or the filter does.
    static constexpr bool may_yield = High::may_yield || Low::may_yield || ticket_lock::may_yield;

    tlp_lock() = default;
    tlp_lock(const tlp_lock &) = delete;
    tlp_lock &operator=(const tlp_lock &) = delete;

    /// Acquire at high priority (main path).
    /// @context thread-safe; may yield; waits for at most one low-priority critical
    ///          section beyond the high-priority queue.
    void lock() noexcept MPIV_TS_ACQUIRE()
    {
        stats::add(stats::counter::tlp_high);
        if (acquire_high_now()) {
            return;
        }
        const std::uint64_t t0 = stats_clock_ns();
        high_.lock();
        if (!go_straight_) {
            filter_.lock();
            go_straight_ = true;
        }
        stats::add(stats::counter::tlp_high_wait_ns, stats_clock_ns() - t0);
    }

    /// Acquire at high priority if that needs no waiting. @return true iff the caller owns
    /// the lock. @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        if (!acquire_high_now()) {
            return false;
        }
        stats::add(stats::counter::tlp_high);
        return true;
    }

    /// Release a lock taken at high priority: the filter stays with the high class while
    /// high-priority threads wait. @context owner only.
    void unlock() noexcept MPIV_TS_RELEASE()
    {
        if (high_.no_waiters()) {
            go_straight_ = false;
            filter_.unlock();
        }
        high_.unlock();
    }

    /// Acquire at low priority (progress polling): waits while high-priority threads hold
    /// or want the lock. @context thread-safe; may yield.
    void lock_low() noexcept MPIV_TS_ACQUIRE()
    {
        stats::add(stats::counter::tlp_low);
        if (acquire_low_now()) {
            return;
        }
        const std::uint64_t t0 = stats_clock_ns();
        low_.lock();
        filter_.lock();
        stats::add(stats::counter::tlp_low_wait_ns, stats_clock_ns() - t0);
    }

    /// Acquire at low priority if that needs no waiting (fails while a high-priority thread
    /// owns or waits for the lock). @return true iff the caller owns the lock.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock_low() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        if (!acquire_low_now()) {
            return false;
        }
        stats::add(stats::counter::tlp_low);
        return true;
    }

    /// Release a lock taken at low priority. @context owner only.
    void unlock_low() noexcept MPIV_TS_RELEASE()
    {
        filter_.unlock();
        low_.unlock();
    }

    /// True iff no other high-priority thread waits (High's no_waiters()).
    /// @context high-priority owner only.
    [[nodiscard]] bool no_waiters() const noexcept { return high_.no_waiters(); }

  private:
    friend struct tlp_lock_test_access;

    // The try_lock()s, uncounted (lock() and lock_low() try them first, then wait).
    bool acquire_high_now() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        if (!high_.try_lock()) {
            return false;
        }
        if (!go_straight_) {
            if (!filter_.try_lock()) {
                high_.unlock();
                return false;
            }
            go_straight_ = true;
        }
        return true;
    }
    bool acquire_low_now() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        if (!low_.try_lock()) {
            return false;
        }
        if (!filter_.try_lock()) {
            low_.unlock();
            return false;
        }
        return true;
    }
    static std::uint64_t stats_clock_ns() noexcept
    {
        return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now().time_since_epoch())
                                              .count());
    }

    alignas(k_false_sharing) High high_;
    // Set while the filter is held by the high-priority class; accessed by High's owner.
    alignas(k_false_sharing) bool go_straight_ MPIV_TS_GUARDED_BY(high_) = false;
    alignas(k_false_sharing) ticket_lock filter_;
    alignas(k_false_sharing) Low low_;
};

/// High priority: HMCS (throughput of the main path); low priority: MCS (fair
/// circulation among progress pollers). The best combination in seed 004 (§5).
using p_hmcs_mcs_lock = tlp_lock<hmcs_lock, mcs_lock>;
/// MCS for both classes: no topology needed.
using p_mcs_mcs_lock = tlp_lock<mcs_lock, mcs_lock>;

} // namespace mpiv::base
