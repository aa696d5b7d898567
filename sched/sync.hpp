// sync: a completion counter one thread waits on (ThreadWait/ThreadSignal, made countable).
//
// Design (seed 000 Algorithm 4, plus the counter DESIGN.md asks for). The constructor or
// reset() arms a sync for `count` completions; signal() records one, wait() blocks until
// all arrived, test() polls. Signals may come before the wait, from any thread; one
// thread waits at a time. Arming picks one of two modes.
//
// Owned mode: armed by a ULT, for at most k_owned_max completions. As in the paper,
// where a request's sync names the (ω, Γ) of the thread that posted it, the arming ULT
// (the owner) is the expected waiter, and a hand-off between ULTs of one worker takes no
// locked instruction:
// - count_ counts the completions signalled on the owner's worker thread ("local").
//   Only that thread writes it, so a local signal is a load and a store. Bit k_waiting
//   marks an owner blocked in wait() (busy reports only).
// - waiter_ is the "remote word": completions signalled on other threads (a CAS adds
//   k_remote_one) and the registration of a waiter other than the owner ("foreign": a
//   ULT's token, or a flag for a pthread). Complete = local + remote >= armed_.
// - The owner's wait registers nothing. Every completion wakes the owner: a local one
//   through the direct hand-off (after checking the owner's generation, so an exited
//   owner is never switched to), a remote one through the owner's worker's run set.
//   A remote signal cannot tell whether it completed the sync (the local count moves
//   under it), so it always wakes; wake-ups may be spurious anyway.
// - A local signal reads the remote word, then stores count_, with no StoreLoad barrier:
//   it may miss a foreign registration made in between. So a foreign waiter on another
//   thread registers (CAS), then waits for the owner's worker to quiesce
//   (worker::quiesce: every ULT run that began before has ended). A local signal that
//   missed the registration is visible after that; every later one sees it. A local
//   signal that sees a foreign ULT wakes it, completing or not (a remote completion may
//   land between its load and its store); one that sees a foreign pthread completes
//   through the remote word instead and wakes the futex on the word's high half (the
//   remote count and the flags: the sleeper cannot miss a change). The Promela model
//   contrib/model/owned_sync.pml checks this under x86-TSO.
//
// Shared mode: armed by a pthread, or for more completions.
// - count_ holds the completions still missing; signal() decrements it (skipped when
//   armed for one). The signal that reaches zero publishes DONE in waiter_ and wakes
//   whoever it took out: a ULT (its worker's run set, or the direct hand-off when the
//   signaller runs on that worker) or a pthread (futex on its parker).
// - waiter_ is NONE, DONE, or a waiter token registered by wait() with one CAS. If a
//   token is already there when DONE is published, nobody but the completing signaller
//   writes waiter_ any more and a release store suffices; otherwise one exchange decides
//   who came first. A signal racing with the completing one on a count-1 sync (a caller
//   bug) is reported as oversignaled only if it comes after DONE is visible.
//
// Both modes:
// - Lifetime rule: a completing signaller reads what its wake-up needs first; its last
//   access to the sync is the store or RMW that completes it. Waiters and test() report
//   completion only once they see it, so the owner may free the sync as soon as wait()
//   or test() says it is complete.
// - Wake-ups may be spurious (a stale run-set bit, a remote signal, a stale futex
//   store): every blocking loop re-checks.
// - The hot paths (signal, wait, test, reset) are inline; they are defined in
//   worker.hpp, after the worker they use, and this header includes it at its end.
// Memory: 40 bytes, two words written by signallers: keep it in one line; do not pack
// several independently signalled syncs in one line on a hot path.
// Not for: several threads waiting on one sync (the second wait() gets busy).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/status.hpp"

namespace mpiv::sched {

class worker;

class sync {
  public:
    /// Completions an owned-mode sync may be armed for (the remote word's count field).
    static constexpr std::int64_t k_owned_max = (std::int64_t{1} << 29) - 1;

    explicit sync(std::int64_t count = 1) noexcept { arm(count); }
    sync(const sync &) = delete;
    sync &operator=(const sync &) = delete;

    /// Record one completion. Returns oversignaled (and changes nothing) if the count was
    /// already zero. Any thread; never blocks.
    [[nodiscard]] inline status signal() noexcept;

    /// Block until complete: a ULT yields its worker; a pthread spins with back-off, then
    /// sleeps on a futex. busy if another thread is already waiting.
    [[nodiscard]] inline status wait() noexcept;

    /// True once complete (safe to free the sync then).
    inline bool test() const noexcept;

    /// Re-arm for @p count completions (by the calling thread: a ULT becomes the owner).
    /// busy while a thread waits; invalid_arg if count < 1.
    [[nodiscard]] inline status reset(std::int64_t count) noexcept;

    /// True while a thread is registered as waiting.
    bool has_waiter() const noexcept
    {
        const std::uint64_t w = waiter_.load(std::memory_order_relaxed);
        if (owner_ != nullptr) {
            return (w & k_foreign) != 0 || (count_.load(std::memory_order_relaxed) & k_waiting) != 0;
        }
        return w != k_none && w != k_done;
    }

    /// True in owned mode (armed by a ULT): for tests and diagnostics.
    bool owned() const noexcept { return owner_ != nullptr; }

  private:
    // Shared mode: waiter_ values.
    static constexpr std::uint64_t k_none = 0;
    static constexpr std::uint64_t k_done = 2; // never a valid token (tokens end in 1 or 00)
    // Owned mode: the remote word.
    static constexpr std::uint64_t k_token_mask = 0xffffffffu; ///< foreign ULT: ω << 20 | Γ
    static constexpr std::uint64_t k_foreign = std::uint64_t{1} << 32;
    static constexpr std::uint64_t k_foreign_pthread = std::uint64_t{1} << 33;
    static constexpr unsigned k_remote_shift = 34;
    static constexpr std::uint64_t k_remote_one = std::uint64_t{1} << k_remote_shift;
    // Owned mode: count_.
    static constexpr std::int64_t k_waiting = std::int64_t{1} << 62;
    static constexpr std::int64_t k_local_mask = k_waiting - 1;

    static std::int64_t remote_count(std::uint64_t w) noexcept
    {
        return static_cast<std::int64_t>(w >> k_remote_shift);
    }
    /// Owned mode: completions so far, from the two words.
    std::int64_t owned_done(std::int64_t local, std::uint64_t remote) const noexcept
    {
        return (local & k_local_mask) + remote_count(remote);
    }

    inline void arm(std::int64_t count) noexcept;
    [[nodiscard]] status signal_slow() noexcept;  ///< shared mode, or owned from another thread
    [[nodiscard]] status wait_slow() noexcept;    ///< shared mode, or owned by another waiter
    [[nodiscard]] status signal_remote() noexcept;
    [[nodiscard]] status wait_foreign() noexcept;
    [[nodiscard]] status signal_shared() noexcept;
    [[nodiscard]] status wait_shared() noexcept;
    /// Shared mode: publish DONE and wake the waiter; oversignaled if already DONE.
    [[nodiscard]] status complete() noexcept;
    [[nodiscard]] static status oversignaled() noexcept;
    [[nodiscard]] static status second_waiter() noexcept;
    /// Owned mode: wake the waiters after a completion (the owner, and a foreign waiter
    /// named in @p remote, the remote word as read before the completing write).
    static void wake_owned(std::uint64_t owner_handle, std::uint64_t remote, void *futex_half) noexcept;
    /// The high 32 bits of waiter_ (a foreign pthread sleeps on them).
    void *futex_half() noexcept
    {
        static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the futex half assumes little endian");
        return reinterpret_cast<char *>(&waiter_) + 4;
    }

    /// The count given to the constructor or reset(), and the owner (owned mode): written
    /// only while no signal is in flight and nobody waits (the caller's contract), so
    /// signallers and waiters read them without synchronization.
    std::int64_t armed_;
    worker *owner_;              ///< the owner's worker (identity only); nullptr in shared mode
    std::uint64_t owner_handle_; ///< the owner's handle (generation, ω, Γ)
    std::atomic<std::int64_t> count_;
    std::atomic<std::uint64_t> waiter_;
};

} // namespace mpiv::sched

// The inline members above are defined after the worker (they switch ULTs).
#include "sched/worker.hpp"
