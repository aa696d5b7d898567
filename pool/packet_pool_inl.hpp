// packet_pool member definitions (hot paths inline; see packet_pool.hpp for the design).
#pragma once

#include "pool/packet_pool.hpp"

#include <new>

#include "base/log.hpp"
#include "base/stats.hpp"

namespace mpiv::pool {
namespace detail {

/// splitmix64 finalizer: turns a counter into well-spread victim choices.
constexpr std::uint64_t mix_seed(std::uint64_t x) noexcept
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/// splitmix64 increment (the golden ratio).
constexpr std::uint64_t k_seed_step = 0x9e3779b97f4a7c15ull;

} // namespace detail

template <template <class> class Atom>
status packet_pool<Atom>::init(const pool_params &params, void *region, std::size_t bytes) noexcept
{
    if (workers_ != nullptr) {
        base::log(base::log_level::error, "pool: init called twice");
        return status::invalid_arg;
    }
    const std::uint64_t private_total =
        std::uint64_t{params.workers} * params.private_initial;
    if (params.workers == 0 || params.private_capacity == 0 ||
        params.private_capacity > private_deque<Atom>::k_max_capacity ||
        params.private_initial > params.private_capacity ||
        private_total > params.packet_count) {
        base::log(base::log_level::error,
                  "pool: invalid distribution (%u workers, %u slots, %u initial, %u packets)",
                  params.workers, params.private_capacity, params.private_initial,
                  params.packet_count);
        return status::invalid_arg;
    }
    std::unique_ptr<worker_state[]> workers(new (std::nothrow) worker_state[params.workers]);
    for (std::uint32_t w = 0; workers != nullptr && w < params.workers; ++w) {
        if (workers[w].deque.init(params.private_capacity) != status::ok) {
            workers.reset(); // the capacity was validated above: only memory can fail
        } else {
            workers[w].steal_seed.store(detail::mix_seed(w + 1), std::memory_order_relaxed);
        }
    }
    if (workers == nullptr) {
        base::log(base::log_level::error, "pool: no memory for %u deques of %u slots",
                  params.workers, params.private_capacity);
        return status::nomem;
    }
    const auto first_shared = static_cast<std::uint32_t>(private_total);
    const status s =
        region_.format(region, bytes, params.packet_size, params.packet_count, first_shared);
    if (s != status::ok) {
        return s;
    }
    for (std::uint32_t index = 0; index < first_shared; ++index) {
        std::uint32_t evicted;
        // Cannot evict: each deque receives private_initial <= private_capacity packets.
        static_cast<void>(workers[index / params.private_initial].deque.push_top(index, evicted));
    }
    workers_ = std::move(workers);
    nworkers_ = params.workers;
    return status::ok;
}

template <template <class> class Atom>
status packet_pool<Atom>::get(std::uint32_t worker, void *&packet_p) noexcept
{
    if (worker >= nworkers_) {
        return bad_worker(worker);
    }
    worker_state &self = workers_[worker];
    std::uint32_t index;
    if (self.deque.pop_top(index) != status::ok && region_.stack_.pop(index) != status::ok) {
        // Owner-only in the intended use; see steal_seed.
        const std::uint64_t seed =
            self.steal_seed.load(std::memory_order_relaxed) + detail::k_seed_step;
        self.steal_seed.store(seed, std::memory_order_relaxed);
        if (steal(worker, detail::mix_seed(seed), index) != status::ok) {
            base::stats::add(base::stats::counter::pool_empty);
            return status::retry_nopacket;
        }
    }
    region_.mark_out(index);
    packet_p = region_.packet(index);
    return status::ok;
}

template <template <class> class Atom>
status packet_pool<Atom>::server_get(void *&packet_p) noexcept
{
    if (nworkers_ == 0) {
        return bad_worker(0); // not_initialized
    }
    std::uint32_t index;
    if (region_.stack_.pop(index) != status::ok) {
        const std::uint64_t seed =
            server_seed_.fetch_add(detail::k_seed_step, std::memory_order_relaxed);
        if (steal(nworkers_, detail::mix_seed(seed), index) != status::ok) {
            base::stats::add(base::stats::counter::pool_empty);
            return status::retry_nopacket;
        }
    }
    region_.mark_out(index);
    packet_p = region_.packet(index);
    return status::ok;
}

template <template <class> class Atom>
status packet_pool<Atom>::put(std::uint32_t worker, void *packet) noexcept
{
    if (worker >= nworkers_) {
        return bad_worker(worker);
    }
    std::uint32_t index;
    status s = region_.index_of(packet, index);
    if (s == status::ok) {
        s = region_.mark_free(index);
    }
    if (s != status::ok) {
        return s;
    }
    std::uint32_t evicted;
    if (workers_[worker].deque.push_top(index, evicted)) {
        region_.stack_.push(evicted);
    }
    return status::ok;
}

template <template <class> class Atom>
status packet_pool<Atom>::bad_worker(std::uint32_t worker) const noexcept
{
    if (nworkers_ == 0) {
        base::log(base::log_level::error, "pool: used before init");
        return status::not_initialized;
    }
    base::log(base::log_level::error, "pool: worker %u out of range (%u workers)", worker,
              nworkers_);
    return status::invalid_arg;
}

template <template <class> class Atom>
status packet_pool<Atom>::steal(std::uint32_t thief, std::uint64_t seed,
                                std::uint32_t &index_p) noexcept
{
    // Multiply-shift maps the seed's low half uniformly onto [0, nworkers_).
    std::uint32_t victim =
        static_cast<std::uint32_t>(((seed & 0xffffffffull) * nworkers_) >> 32);
    for (std::uint32_t tried = 0; tried < nworkers_; ++tried) {
        private_deque<Atom> &deque = workers_[victim].deque;
        if (victim != thief && deque.size_hint() != 0 && deque.pop_bottom(index_p) == status::ok) {
            base::stats::add(base::stats::counter::pool_steals);
            return status::ok;
        }
        victim = victim + 1 == nworkers_ ? 0 : victim + 1;
    }
    return status::not_found;
}

} // namespace mpiv::pool
