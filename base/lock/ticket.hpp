// ticket_lock: FIFO lock built from two counters.
//
// Design: lock() draws a ticket with fetch_add on next_ticket_ and waits until
// now_serving_ reaches it; unlock() advances now_serving_. Every waiter polls the same
// now_serving_ line, so each release invalidates it in all waiters' caches: fine for the
// few-thread case it is used for (the filter of tlp_lock sees at most two threads), costly
// with many spinning waiters, where MCS is the better choice.
// Invariants: now_serving_ <= next_ticket_ (modulo 2^32); the owner holds ticket
// now_serving_; next_ticket_ - now_serving_ - 1 threads wait (when the lock is held).
// Ordering: unlock() stores now_serving_ with release; the waiter whose ticket it matches
// loads it with acquire, so the critical sections are ordered. Only the owner writes
// now_serving_, hence a plain load + store instead of a read-modify-write.
// Memory: two counters on separate 128-byte blocks (256 B). Counter wrap-around is
// harmless with fewer than 2^32 simultaneous waiters.
// When not to use it: many waiters on a large machine (global spinning); threads that
// can be descheduled for long while holding a ticket delay everyone behind them.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/backoff.hpp"
#include "base/cacheline.hpp"
#include "base/lock/lock.hpp"

namespace mpiv::base {

class MPIV_TS_CAPABILITY("mutex") ticket_lock {
  public:
    /// Waiters enter in the order they drew their tickets.
    static constexpr bool is_fair = true;
    /// Waiting spins, then yields (see base::backoff).
    static constexpr bool may_yield = true;

    ticket_lock() noexcept = default;
    ticket_lock(const ticket_lock &) = delete;
    ticket_lock &operator=(const ticket_lock &) = delete;

    /// Acquire the lock, waiting in FIFO order.
    /// @context thread-safe; may yield the calling ULT or thread.
    void lock() noexcept MPIV_TS_ACQUIRE()
    {
        const std::uint32_t mine = next_ticket_.fetch_add(1, std::memory_order_relaxed);
        backoff wait;
        // sync: acquire; pairs with release in unlock()
        while (now_serving_.load(std::memory_order_acquire) != mine) {
            wait.pause();
        }
    }

    /// Acquire the lock if nobody owns or waits for it.
    /// @return true iff the caller now owns the lock.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        // sync: acquire; pairs with release in unlock()
        std::uint32_t serving = now_serving_.load(std::memory_order_acquire);
        // Free iff no ticket beyond now_serving_ was drawn; drawing exactly that ticket
        // makes the caller the owner (now_serving_ cannot move while the lock is free).
        return next_ticket_.compare_exchange_strong(serving, serving + 1,
                                                    std::memory_order_relaxed,
                                                    std::memory_order_relaxed);
    }

    /// Release the lock to the next ticket; the caller must own it.
    void unlock() noexcept MPIV_TS_RELEASE()
    {
        const std::uint32_t serving = now_serving_.load(std::memory_order_relaxed);
        // sync: release; pairs with acquire in lock() and try_lock()
        now_serving_.store(serving + 1, std::memory_order_release);
    }

    /// True iff no other thread has drawn a ticket. Exact at the time of the call; a
    /// thread arriving later is not seen. @context owner only.
    [[nodiscard]] bool no_waiters() const noexcept
    {
        return next_ticket_.load(std::memory_order_relaxed) -
                   now_serving_.load(std::memory_order_relaxed) ==
               1;
    }

  private:
    friend struct ticket_lock_test_access;

    // Drawn by every acquiring thread.
    alignas(k_false_sharing) std::atomic<std::uint32_t> next_ticket_{0};
    // Written by the owner only; polled by every waiter.
    alignas(k_false_sharing) std::atomic<std::uint32_t> now_serving_{0};
};

} // namespace mpiv::base
