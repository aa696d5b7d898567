// Helpers shared by the pool tests: region memory, white-box access, log capture.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "pool/packet_pool.hpp"
#include "test/gtest/common/test_util.hpp"

namespace mpiv::pool {

struct private_deque_test_access {
    /// The deque's indexes from bottom (LRU) to top (MRU).
    template <template <class> class Atom>
    static std::vector<std::uint32_t> contents(private_deque<Atom> &deque)
    {
        std::lock_guard<detail::spin_lock<Atom>> guard(deque.lock_);
        std::vector<std::uint32_t> out;
        const std::uint32_t size = deque.size_.load(std::memory_order_relaxed);
        for (std::uint32_t i = 0; i < size; ++i) {
            out.push_back(deque.slot(deque.bottom_ + i));
        }
        return out;
    }
};

struct packet_region_test_access {
    template <template <class> class Atom>
    static std::uint32_t index_of(const packet_region<Atom> &region, const void *packet)
    {
        std::uint32_t index = k_nil;
        static_cast<void>(region.index_of(packet, index));
        return index;
    }
    template <template <class> class Atom>
    static void *packet(const packet_region<Atom> &region, std::uint32_t index)
    {
        return region.packet(index);
    }
};

struct packet_pool_test_access {
    template <template <class> class Atom>
    static std::vector<std::uint32_t> deque_contents(packet_pool<Atom> &pool, std::uint32_t worker)
    {
        return private_deque_test_access::contents(pool.workers_[worker].deque);
    }
};

} // namespace mpiv::pool

namespace mpiv::test {

} // namespace mpiv::test
