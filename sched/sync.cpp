#include "sched/sync.hpp"

#include "base/backoff.hpp"
#include "base/futex.hpp"
#include "base/log.hpp"
#include "sched/runtime.hpp"
#include "sched/worker.hpp"

namespace mpiv::sched {
namespace {

// Shared-mode waiter tokens: a ULT is ((ω << 20 | Γ) << 2 | 1); a pthread is the address
// of its thread-local parker (aligned, so its two low bits are 0).
constexpr std::uint64_t k_ult_tag = 1;

struct alignas(8) parker {
    std::atomic<std::uint32_t> flag{0}; ///< 1 once a signaller woke this thread
};

thread_local parker t_parker __attribute__((tls_model("initial-exec")));

/// ω << 20 | Γ of a ULT: its worker and id (the owned mode's foreign-waiter token).
std::uint32_t ult_id(const ult &u) noexcept
{
    return static_cast<std::uint32_t>(worker::handle_worker(u.handle) << 20 | u.id);
}

void wake_ult_id(std::uint32_t token) noexcept { worker::wake(token >> 20, token & 0xfffff); }

void wake(std::uint64_t token) noexcept
{
    if ((token & k_ult_tag) != 0) {
        wake_ult_id(static_cast<std::uint32_t>(token >> 2));
        return;
    }
    auto *p = reinterpret_cast<parker *>(static_cast<std::uintptr_t>(token));
    // sync: release; pairs with the futex/acquire loop in wait_shared(). The thread-local
    // parker outlives the wait; a late store only causes a spurious wake-up of a later
    // wait.
    p->flag.store(1, std::memory_order_release);
    base::futex_wake(p->flag);
}

/// A futex word that is the high half of a sync's remote word (see sync.hpp). The
/// kernel reads it; C++ code only touches the whole 64-bit word.
std::atomic<std::uint32_t> &futex_word(void *half) noexcept
{
    return *static_cast<std::atomic<std::uint32_t> *>(half);
}

} // namespace

status sync::oversignaled() noexcept
{
    base::log(base::log_level::warn, "sync: signalled more times than its count");
    return status::oversignaled;
}

status sync::second_waiter() noexcept
{
    base::log(base::log_level::warn, "sync: another thread is already waiting on it");
    return status::busy;
}

status sync::signal_slow() noexcept { return owner_ != nullptr ? signal_remote() : signal_shared(); }

status sync::wait_slow() noexcept { return owner_ != nullptr ? wait_foreign() : wait_shared(); }

// ------------------------------------------------------------------- owned mode

void sync::wake_owned(std::uint64_t owner_handle, std::uint64_t remote, void *futex_half) noexcept
{
    // The foreign waiter first: on this worker it takes the direct hand-off.
    if ((remote & k_foreign_pthread) != 0) {
        if (futex_half != nullptr) {
            // The sync may be gone: a futex wake on its address only costs a sleeper
            // there a spurious wake-up.
            base::futex_wake(futex_word(futex_half));
        }
    } else if ((remote & k_foreign) != 0) {
        wake_ult_id(static_cast<std::uint32_t>(remote & k_token_mask));
    }
    worker::wake_handle(owner_handle);
}

status sync::signal_remote() noexcept
{
    // Everything the wake-up needs is read before the CAS that may complete the sync.
    const std::uint64_t owner = owner_handle_;
    const std::int64_t armed = armed_;
    void *const half = futex_half();
    std::uint64_t remote = waiter_.load(std::memory_order_relaxed);
    for (;;) {
        // The local count only grows, so this is a lower bound: an oversignal racing
        // with a local completion may go unreported (and is then counted, harmlessly).
        const std::int64_t local = count_.load(std::memory_order_relaxed);
        if (owned_done(local, remote) >= armed) {
            return oversignaled();
        }
        // sync: acq_rel; release pairs with the acquire loads in test()/wait()/signal():
        // this signaller's writes reach whoever sees the count; acquire pairs with a
        // foreign registration's CAS (the token read below is valid). Last access.
        if (waiter_.compare_exchange_weak(remote, remote + k_remote_one, std::memory_order_acq_rel,
                                          std::memory_order_relaxed)) {
            break;
        }
    }
    // Whether this completed the sync is unknown (the local count may have moved): wake.
    wake_owned(owner, remote, half);
    return status::ok;
}

status sync::wait_foreign() noexcept
{
    if (test()) {
        return status::ok;
    }
    ult *const self = worker::current_ult();
    const std::uint64_t mine = k_foreign | (self != nullptr ? ult_id(*self) : k_foreign_pthread);
    if ((count_.load(std::memory_order_relaxed) & k_waiting) != 0) {
        return second_waiter(); // the owner waits
    }
    std::uint64_t remote = waiter_.load(std::memory_order_relaxed);
    do {
        if ((remote & k_foreign) != 0) {
            return second_waiter();
        }
        // sync: acq_rel; release pairs with the acquire load of the remote word in
        // signal() and the CAS in signal_remote() (they see a complete registration);
        // acquire pairs with earlier remote completions.
    } while (!waiter_.compare_exchange_weak(remote, remote | mine, std::memory_order_acq_rel,
                                            std::memory_order_relaxed));
    if (worker::current() != owner_) {
        // Local signals that missed the registration have ended (and are visible) after
        // this; later ones see it. On the owner's own thread, program order does that.
        if (worker *owner = runtime::find_worker(worker::handle_worker(owner_handle_))) {
            owner->quiesce();
        }
    }
    if (self != nullptr) {
        while (!test()) {
            worker::block_current();
        }
    } else {
        base::backoff spin(1024);
        for (;;) {
            // sync: acquire (both); pair with the release CAS in signal_remote() and the
            // release store of count_ in signal().
            remote = waiter_.load(std::memory_order_acquire);
            if (owned_done(count_.load(std::memory_order_acquire), remote) >= armed_) {
                break;
            }
            if (!spin.spun_out()) {
                spin.pause();
                continue;
            }
            // Every completion from now on changes the high half (signal() sends local
            // ones through signal_remote() while a pthread is registered).
            base::futex_wait(futex_word(futex_half()), static_cast<std::uint32_t>(remote >> 32));
        }
    }
    // Deregister: only surplus signals may still read the remote word.
    waiter_.fetch_and(~(k_foreign | k_foreign_pthread | k_token_mask), std::memory_order_relaxed);
    return status::ok;
}

// ------------------------------------------------------------------ shared mode

status sync::signal_shared() noexcept
{
    if (armed_ == 1) {
        return complete(); // one exchange completes and detects a repeated signal
    }
    // acq_rel: the completing signaller must see every earlier signaller's writes (they
    // all become visible to the waiter through complete()).
    const std::int64_t before = count_.fetch_sub(1, std::memory_order_acq_rel);
    if (before <= 0) {
        count_.fetch_add(1, std::memory_order_relaxed);
        return oversignaled();
    }
    return before == 1 ? complete() : status::ok;
}

status sync::complete() noexcept
{
    // sync: acquire; pairs with the CAS that registered the waiter.
    std::uint64_t w = waiter_.load(std::memory_order_acquire);
    if (w == k_done) {
        return oversignaled();
    }
    if (w != k_none) {
        // A registered waiter only reads waiter_ until it sees DONE, and we are the one
        // completing signaller: a plain store suffices (one locked RMW less per hand-off).
        // sync: release; pairs with the acquire loads of waiter_ in wait_shared()/test().
        // Last access to *this.
        waiter_.store(k_done, std::memory_order_release);
    } else {
        // A waiter may be registering right now: take it out atomically.
        // sync: acq_rel; release pairs with the acquire loads of waiter_ in
        // wait_shared()/test(); acquire pairs with the CAS that registered the waiter.
        // Last access to *this.
        w = waiter_.exchange(k_done, std::memory_order_acq_rel);
        if (w == k_done) {
            return oversignaled();
        }
    }
    if (w != k_none) {
        wake(w);
    }
    return status::ok;
}

status sync::wait_shared() noexcept
{
    // sync: acquire; pairs with the store or exchange of DONE in complete().
    if (waiter_.load(std::memory_order_acquire) == k_done) {
        return status::ok;
    }
    ult *self = worker::current_ult();
    if (self == nullptr) {
        t_parker.flag.store(0, std::memory_order_relaxed);
    }
    const std::uint64_t token = self != nullptr ? std::uint64_t{ult_id(*self)} << 2 | k_ult_tag
                                                : reinterpret_cast<std::uintptr_t>(&t_parker);
    std::uint64_t expected = k_none;
    // sync: acq_rel; release publishes the token to complete()'s load or exchange;
    // acquire (on failure, seeing DONE) pairs with the store or exchange of DONE.
    if (!waiter_.compare_exchange_strong(expected, token, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
        if (expected == k_done) {
            return status::ok;
        }
        return second_waiter();
    }
    if (self != nullptr) {
        // sync: acquire; pairs with the store or exchange of DONE in complete().
        while (waiter_.load(std::memory_order_acquire) != k_done) {
            worker::block_current();
        }
        return status::ok;
    }
    base::backoff spin(1024);
    for (;;) {
        // sync: acquire; pairs with the store or exchange of DONE in complete().
        if (waiter_.load(std::memory_order_acquire) == k_done) {
            return status::ok;
        }
        if (!spin.spun_out()) {
            spin.pause();
            continue;
        }
        base::futex_wait(t_parker.flag, 0);
        t_parker.flag.store(0, std::memory_order_relaxed);
    }
}

} // namespace mpiv::sched
