#include "base/backoff.hpp"

#include <sched.h>

namespace mpiv::base {
namespace {
thread_local yield_hook t_yield_hook __attribute__((tls_model("initial-exec"))) = nullptr;
} // namespace

void set_thread_yield_hook(yield_hook hook) noexcept { t_yield_hook = hook; }

void yield_thread() noexcept
{
    if (t_yield_hook == nullptr || !t_yield_hook()) {
        sched_yield();
    }
}

} // namespace mpiv::base
