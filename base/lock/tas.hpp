// tas_lock: test-and-test-and-set spinlock, for locks whose waiters are ULTs.
//
// Design: one word, 0 = free, 1 = held. lock() swaps in 1; while that fails it reads the
// word until it looks free (no write traffic while held), with base::backoff: a waiter
// spins, then yields its ULT (or its kernel thread). A waiter holds no place in any
// queue: whoever runs when the lock is free takes it. That is the point of this lock
// beside ticket_lock and the MCS locks, whose FIFO hands the lock to the next waiter in
// line even while that waiter is a yielded ULT that its worker will not run again until
// it has gone round its other ULTs (with 500,000 ULTs blocked in one lock, a pass over
// 500,000 cold stacks per hand-over), and whose try_lock() fails while any waiter is
// queued, so a thread that only try-locks (a progress loop) is kept out for as long as
// waiters keep coming.
// Invariants: the owner is the one thread whose exchange or CAS moved the word 0 -> 1;
// only the owner stores 0.
// Ordering: unlock() stores 0 with release; lock() and try_lock() take the word with an
// acquire RMW, so the critical sections are ordered. The same protocol on a caller's own
// word: tas_acquire(), tas_try_acquire(), tas_release().
// Memory: one 32-bit word; the user pads it onto a line of its own if threads other
// than its users write nearby.
// When not to use it: many pthreads spinning on one lock on a large machine (every
// release is a burst of RMWs on one line), or where waiters must enter in order.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/backoff.hpp"
#include "base/lock/lock.hpp"

namespace mpiv::base {

/// Acquire a one-word test-and-test-and-set lock (0 = free, 1 = held): swap in 1; while
/// that fails, read the word until it looks free, with base::backoff (spin, then yield).
/// The lock of tas_lock, and of lock words embedded in other structures (matching's peers
/// and buckets, the packet pool's deques). @p Word: an atomic unsigned integer type.
template <class Word>
inline void tas_acquire(Word &word) noexcept
{
    backoff wait;
    // sync: acquire; pairs with the release store in tas_release()
    while (word.exchange(1, std::memory_order_acquire) != 0) {
        while (word.load(std::memory_order_relaxed) != 0) {
            wait.pause();
        }
    }
}

/// Acquire the lock of @p word if it is free. @return true iff the caller now holds it.
template <class Word>
[[nodiscard]] inline bool tas_try_acquire(Word &word) noexcept
{
    // sync: acquire (the exchange); pairs with the release store in tas_release()
    return word.load(std::memory_order_relaxed) == 0 &&
           word.exchange(1, std::memory_order_acquire) == 0;
}

/// Release the lock of @p word; the caller must hold it.
template <class Word>
inline void tas_release(Word &word) noexcept
{
    // sync: release; pairs with the acquire exchanges in tas_acquire() and tas_try_acquire()
    word.store(0, std::memory_order_release);
}

class MPIV_TS_CAPABILITY("mutex") tas_lock {
  public:
    /// Unfair: whoever finds the lock free takes it.
    static constexpr bool is_fair = false;
    /// Waiting spins, then yields (see base::backoff).
    static constexpr bool may_yield = true;

    tas_lock() noexcept = default;
    tas_lock(const tas_lock &) = delete;
    tas_lock &operator=(const tas_lock &) = delete;

    /// Acquire the lock.
    /// @context thread-safe; may yield the calling ULT or thread.
    void lock() noexcept MPIV_TS_ACQUIRE() { tas_acquire(word_); }

    /// Acquire the lock if it is free, whatever waits for it.
    /// @return true iff the caller now owns the lock.
    /// @context thread-safe; never waits.
    [[nodiscard]] bool try_lock() noexcept MPIV_TS_TRY_ACQUIRE(true)
    {
        return tas_try_acquire(word_);
    }

    /// Release the lock; the caller must own it.
    void unlock() noexcept MPIV_TS_RELEASE() { tas_release(word_); }

  private:
    std::atomic<std::uint32_t> word_{0};
};

} // namespace mpiv::base
