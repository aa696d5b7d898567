// Helpers shared by the engine tests that start several engines in one process: their
// parameters and their connection to each other.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "endpoints/engine.hpp"

namespace mpiv::test {

/// Parameters of a small engine: one endpoint of 64 slots, 16 packets, a 4 KiB eager
/// limit, inline progress, the MCS lock, 100 us of idle polling; the test changes the rest.
inline mpiv_p2p_params_t small_engine_params(std::uint32_t self, std::uint32_t num_peers,
                                              mpiv_p2p_complete_fn complete)
{
    mpiv_p2p_params_t p{};
    p.self = self;
    p.num_peers = num_peers;
    p.endpoints = 1;
    p.queue_slots = 64;
    p.eager_limit = 4096;
    p.packet_count = 16;
    p.progress = MPIV_P2P_PROGRESS_INLINE;
    p.server_cpu = -1;
    p.lock = MPIV_P2P_LOCK_MCS;
    p.complete = complete;
    p.idle_us = 100;
    return p;
}

/// Connect engines e[0 .. n) to each other and create communicator @p cid of n ranks on
/// each (comms[i] on e[i]).
inline void connect_engines(std::unique_ptr<ep::engine> *e, int n, std::uint16_t cid,
                            ep::comm_state **comms)
{
    for (int i = 0; i < n; ++i) {
        for (int peer = 0; peer < n; ++peer) {
            const void *addr = nullptr;
            std::size_t len = 0;
            e[peer]->address(addr, len);
            ASSERT_EQ(e[i]->connect(static_cast<std::uint32_t>(peer), addr, len), status::ok);
        }
        ASSERT_EQ(e[i]->comm_create(cid, n, 0, comms[i]), status::ok);
    }
}

} // namespace mpiv::test
