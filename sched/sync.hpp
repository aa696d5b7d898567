// sync: a completion counter one thread waits on (ThreadWait/ThreadSignal, made countable).
//
// Design (seed 000 Algorithm 4, plus the counter DESIGN.md asks for):
// - count_ holds the completions still missing. signal() decrements it; the signal that
//   reaches zero publishes DONE in waiter_ and wakes whoever it took out: a ULT (its
//   worker's runset, or the direct hand-off slot when the signaller runs on that worker)
//   or a pthread (futex on its parker). A sync armed for one completion (the common case)
//   skips count_.
// - Publishing DONE: if waiter_ already holds a token, nobody but the completing
//   signaller writes waiter_ any more, so a release store suffices; otherwise a waiter
//   may be registering concurrently and one exchange decides who came first. A signal
//   that races with the completing one on a count-1 sync (a caller bug: more signals
//   than the count) is reported as oversignaled only if it comes after DONE is visible.
// - waiter_ is NONE, DONE, or a waiter token registered by wait() with one CAS. So a
//   signal may come before the wait (the wait then sees DONE and returns at once), from
//   any thread, and a Waitall over N requests is one sync with count N that wakes once.
// - Lifetime rule: the completing signaller's last access to the sync is the store or
//   exchange that writes DONE; waiters and test() report completion only when they see
//   DONE, so the owner may free the sync as soon as wait() or test() says it is complete.
// - Wake-ups may be spurious (a stale runset bit, a stale futex store): every blocking
//   loop re-checks waiter_.
// Memory: 24 bytes, both words written by signallers: keep it in one line; do not pack
// several independently signalled syncs in one line on a hot path.
// Not for: several threads waiting on one sync (the second wait() gets busy).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/status.hpp"

namespace mpiv::sched {

class sync {
  public:
    explicit sync(std::int64_t count = 1) noexcept : armed_(count), count_(count), waiter_(k_none) {}
    sync(const sync &) = delete;
    sync &operator=(const sync &) = delete;

    /// Record one completion. Returns oversignaled (and changes nothing) if the count was
    /// already zero. Any thread; never blocks.
    [[nodiscard]] status signal() noexcept;

    /// Block until complete: a ULT yields its worker; a pthread spins with back-off, then
    /// sleeps on a futex. busy if another thread is already waiting.
    [[nodiscard]] status wait() noexcept;

    /// True once complete (safe to free the sync then).
    bool test() const noexcept
    {
        // sync: acquire; pairs with the release store or exchange of DONE in complete().
        return waiter_.load(std::memory_order_acquire) == k_done;
    }

    /// Re-arm for @p count completions. busy while a thread waits; invalid_arg if count < 1.
    [[nodiscard]] status reset(std::int64_t count) noexcept;

    /// True while a thread is registered as waiting.
    bool has_waiter() const noexcept
    {
        const std::uintptr_t w = waiter_.load(std::memory_order_relaxed);
        return w != k_none && w != k_done;
    }

  private:
    static constexpr std::uintptr_t k_none = 0;
    static constexpr std::uintptr_t k_done = 2; // never a valid token (tokens end in 1 or 00)

    /// Publish DONE and wake the waiter; oversignaled if DONE was already published.
    [[nodiscard]] status complete() noexcept;
    [[nodiscard]] static status oversignaled() noexcept;

    /// The count given to the constructor or reset(): written only while no signal is in
    /// flight (the caller's contract), so signallers read it without synchronization.
    /// With 1, signal() skips count_: one exchange both completes and detects a repeat.
    std::int64_t armed_;
    std::atomic<std::int64_t> count_;
    std::atomic<std::uintptr_t> waiter_;
};

} // namespace mpiv::sched
