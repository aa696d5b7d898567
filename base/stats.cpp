#include "base/stats.hpp"

#include <mutex>
#include <new>

namespace mpiv::base::stats {

namespace {

const info k_info[k_counters] = {
#define MPIV_STATS_INFO(name, unit, text) {#name, unit, text},
    MPIV_STATS_COUNTERS(MPIV_STATS_INFO)
#undef MPIV_STATS_INFO
};

// The process-wide registry. Never destroyed: threads may exit (and fold their counts in)
// during static destruction.
struct registry {
    std::mutex mu;
    block *live = nullptr;
    block *free = nullptr;
    std::uint64_t exited[k_counters] = {}; // counts of threads that exited
};

registry &the_registry() noexcept
{
    static registry *r = new registry;
    return *r;
}

// Folds the thread's counts into the registry and frees its block at thread exit.
struct retire {
    ~retire()
    {
        block *b = detail::tl_block;
        if (b == nullptr) {
            return;
        }
        detail::tl_block = nullptr;
        registry &r = the_registry();
        std::lock_guard<std::mutex> guard(r.mu);
        for (block **p = &r.live; *p != nullptr; p = &(*p)->next) {
            if (*p == b) {
                *p = b->next;
                break;
            }
        }
        for (std::size_t i = 0; i < k_counters; ++i) {
            // Relaxed: the owner is this thread; the mutex orders it for readers.
            r.exited[i] += b->v[i].load(std::memory_order_relaxed);
        }
        b->next = r.free;
        r.free = b;
    }
};
thread_local retire tl_retire;

} // namespace

block *detail::register_thread() noexcept
{
    registry &r = the_registry();
    block *b;
    {
        std::lock_guard<std::mutex> guard(r.mu);
        b = r.free;
        if (b != nullptr) {
            r.free = b->next;
        } else {
            b = new (std::nothrow) block;
            if (b == nullptr) {
                return nullptr;
            }
        }
        for (auto &w : b->v) {
            // Relaxed: published to readers by the mutex with the link below.
            w.store(0, std::memory_order_relaxed);
        }
        b->next = r.live;
        r.live = b;
    }
    tl_block = b;
    (void)&tl_retire; // registers the thread-exit fold
    return b;
}

std::uint64_t read(counter c) noexcept
{
    const auto i = static_cast<std::size_t>(c);
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    std::uint64_t sum = r.exited[i];
    for (const block *b = r.live; b != nullptr; b = b->next) {
        // Relaxed: a statistic; each word is read as of some moment (see stats.hpp).
        sum += b->v[i].load(std::memory_order_relaxed);
    }
    return sum;
}

std::size_t read_threads(counter c, std::uint64_t *values, std::size_t capacity) noexcept
{
    const auto i = static_cast<std::size_t>(c);
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    std::size_t n = 0;
    if (n < capacity) {
        values[n] = r.exited[i];
    }
    ++n;
    for (const block *b = r.live; b != nullptr; b = b->next, ++n) {
        if (n < capacity) {
            // Relaxed: a statistic.
            values[n] = b->v[i].load(std::memory_order_relaxed);
        }
    }
    return n;
}

const info &describe(std::size_t index) noexcept
{
    return k_info[index < k_counters ? index : 0];
}

} // namespace mpiv::base::stats
