#include "sched/sync.hpp"

#include "base/backoff.hpp"
#include "base/futex.hpp"
#include "base/log.hpp"
#include "sched/worker.hpp"

namespace mpiv::sched {
namespace {

// Waiter tokens: a ULT is ((ω << 20 | Γ) << 2 | 1); a pthread is the address of its
// thread-local parker (aligned, so its two low bits are 0).
constexpr std::uintptr_t k_ult_tag = 1;

struct alignas(8) parker {
    std::atomic<std::uint32_t> flag{0}; ///< 1 once a signaller woke this thread
};

thread_local parker t_parker __attribute__((tls_model("initial-exec")));

std::uintptr_t ult_token(const ult &u) noexcept
{
    return (static_cast<std::uintptr_t>(u.owner->id()) << 20 | u.id) << 2 | k_ult_tag;
}

void wake(std::uintptr_t token) noexcept
{
    if ((token & k_ult_tag) != 0) {
        const std::uintptr_t v = token >> 2;
        worker::wake(static_cast<unsigned>(v >> 20), static_cast<std::uint32_t>(v & 0xfffff));
        return;
    }
    auto *p = reinterpret_cast<parker *>(token);
    // sync: release; pairs with the futex/acquire loop in wait(). The thread-local parker
    // outlives the wait; a late store only causes a spurious wake-up of a later wait.
    p->flag.store(1, std::memory_order_release);
    base::futex_wake(p->flag);
}

} // namespace

status sync::signal() noexcept
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

status sync::oversignaled() noexcept
{
    base::log(base::log_level::warn, "sync: signalled more times than its count");
    return status::oversignaled;
}

status sync::complete() noexcept
{
    // sync: acquire; pairs with the CAS that registered the waiter.
    std::uintptr_t w = waiter_.load(std::memory_order_acquire);
    if (w == k_done) {
        return oversignaled();
    }
    if (w != k_none) {
        // A registered waiter only reads waiter_ until it sees DONE, and we are the one
        // completing signaller: a plain store suffices (one locked RMW less per hand-off).
        // sync: release; pairs with the acquire loads of waiter_ in wait()/test().
        // Last access to *this.
        waiter_.store(k_done, std::memory_order_release);
    } else {
        // A waiter may be registering right now: take it out atomically.
        // sync: acq_rel; release pairs with the acquire loads of waiter_ in wait()/test();
        // acquire pairs with the CAS that registered the waiter. Last access to *this.
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

status sync::reset(std::int64_t count) noexcept
{
    if (count < 1) {
        return status::invalid_arg;
    }
    if (has_waiter()) {
        return status::busy;
    }
    armed_ = count;
    count_.store(count, std::memory_order_relaxed);
    waiter_.store(k_none, std::memory_order_relaxed);
    return status::ok;
}

status sync::wait() noexcept
{
    // sync: acquire; pairs with the store or exchange of DONE in complete().
    if (waiter_.load(std::memory_order_acquire) == k_done) {
        return status::ok;
    }
    ult *self = worker::current_ult();
    if (self == nullptr) {
        t_parker.flag.store(0, std::memory_order_relaxed);
    }
    const std::uintptr_t token =
        self != nullptr ? ult_token(*self) : reinterpret_cast<std::uintptr_t>(&t_parker);
    std::uintptr_t expected = k_none;
    // sync: acq_rel; release publishes the token to complete()'s load or exchange;
    // acquire (on failure, seeing DONE) pairs with the store or exchange of DONE.
    if (!waiter_.compare_exchange_strong(expected, token, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
        if (expected == k_done) {
            return status::ok;
        }
        base::log(base::log_level::warn, "sync: another thread is already waiting on it");
        return status::busy;
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
