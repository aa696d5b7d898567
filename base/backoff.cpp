#include "base/backoff.hpp"

#include <atomic>

#include <sched.h>

namespace mpiv::base {
namespace {
thread_local yield_hook t_yield_hook __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<const park_ops *> g_park_ops{nullptr};
} // namespace

void set_thread_yield_hook(yield_hook hook) noexcept { t_yield_hook = hook; }

void yield_thread() noexcept
{
    if (t_yield_hook == nullptr || !t_yield_hook()) {
        sched_yield();
    }
}

void set_park_ops(const park_ops *ops) noexcept
{
    // sync: release; pairs with the acquire loads below: the table is complete.
    g_park_ops.store(ops, std::memory_order_release);
}

std::uint64_t park_token() noexcept
{
    // sync: acquire; pairs with the release store in set_park_ops().
    const park_ops *ops = g_park_ops.load(std::memory_order_acquire);
    return ops != nullptr ? ops->token() : 0;
}

void park() noexcept
{
    // relaxed: the caller's park_token() loaded it with acquire already.
    g_park_ops.load(std::memory_order_relaxed)->park();
}

void unpark(std::uint64_t token) noexcept
{
    // sync: acquire; pairs with the release store in set_park_ops() (the token was
    // published to this thread through the lock, not through the table).
    g_park_ops.load(std::memory_order_acquire)->unpark(token);
}

} // namespace mpiv::base
