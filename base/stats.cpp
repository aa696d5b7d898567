#include "base/stats.hpp"

#include <array>
#include <mutex>
#include <new>
#include <unordered_map>

namespace mpiv::base::stats {

namespace {

const info k_info[k_counters] = {
#define MPIV_STATS_INFO(name, unit, text) {#name, unit, text},
    MPIV_STATS_COUNTERS(MPIV_STATS_INFO)
#undef MPIV_STATS_INFO
};

const info k_comm_info[k_comm_counters] = {
#define MPIV_STATS_INFO(name, unit, text) {#name, unit, text},
    MPIV_STATS_COMM_COUNTERS(MPIV_STATS_INFO)
#undef MPIV_STATS_INFO
};

using comm_counts = std::array<std::uint64_t, k_comm_counters>;

// The process-wide registry. Never destroyed: threads may exit (and fold their counts in)
// during static destruction.
struct registry {
    std::mutex mu;
    block *live = nullptr;
    block *free = nullptr;
    std::uint64_t exited[k_counters] = {}; // counts of threads that exited
    // Open communicators: the counts folded out of slots (exited threads, slots taken
    // over). A key that is not here is closed.
    std::unordered_map<std::uint64_t, comm_counts> comms;
    std::uint64_t next_key = 1;
};

// Under the registry's mutex: slot @p s's counts into its key's totals (dropped for a
// closed key); the slot is left free.
void fold_slot(registry &r, comm_slot &s) noexcept
{
    // Relaxed: the owner is this thread or gone; the mutex orders it for readers.
    const std::uint64_t key = s.key.load(std::memory_order_relaxed);
    const auto it = key != 0 ? r.comms.find(key) : r.comms.end();
    for (std::size_t i = 0; i < k_comm_counters; ++i) {
        if (it != r.comms.end()) {
            it->second[i] += s.v[i].load(std::memory_order_relaxed);
        }
        s.v[i].store(0, std::memory_order_relaxed);
    }
    s.key.store(0, std::memory_order_relaxed);
}

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
        for (auto &slot : b->slots) {
            fold_slot(r, slot);
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
        for (auto &slot : b->slots) {
            // Relaxed: as above (a freed block's slots were folded and left free).
            slot.key.store(0, std::memory_order_relaxed);
            for (auto &w : slot.v) {
                w.store(0, std::memory_order_relaxed);
            }
        }
        b->next = r.live;
        r.live = b;
    }
    tl_block = b;
    (void)&tl_retire; // registers the thread-exit fold
    return b;
}

bool detail::claim_slot(block &b, comm_slot &s, std::uint64_t key) noexcept
{
    (void)b;
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    if (r.comms.find(key) == r.comms.end()) {
        return false; // closed (a late event of a freed communicator)
    }
    fold_slot(r, s);
    // Relaxed: published to readers by the mutex.
    s.key.store(key, std::memory_order_relaxed);
    return true;
}

std::uint64_t comm_open() noexcept
{
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    const std::uint64_t key = r.next_key;
    try {
        r.comms.emplace(key, comm_counts{});
    } catch (...) {
        return 0;
    }
    ++r.next_key;
    return key;
}

void comm_close(std::uint64_t key) noexcept
{
    if (key == 0) {
        return;
    }
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    r.comms.erase(key);
}

std::uint64_t read_comm(std::uint64_t key, comm_counter c) noexcept
{
    const auto i = static_cast<std::size_t>(c);
    registry &r = the_registry();
    std::lock_guard<std::mutex> guard(r.mu);
    const auto it = r.comms.find(key);
    if (key == 0 || it == r.comms.end()) {
        return 0;
    }
    std::uint64_t sum = it->second[i];
    for (const block *b = r.live; b != nullptr; b = b->next) {
        const comm_slot &s = b->slots[key & (k_comm_slots - 1)];
        // Relaxed: a statistic; the key changes only under the mutex (held here).
        if (s.key.load(std::memory_order_relaxed) == key) {
            sum += s.v[i].load(std::memory_order_relaxed);
        }
    }
    return sum;
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

const info &describe_comm(std::size_t index) noexcept
{
    return k_comm_info[index < k_comm_counters ? index : 0];
}

} // namespace mpiv::base::stats
