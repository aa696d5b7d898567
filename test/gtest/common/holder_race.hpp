// A race for a try-lock whose word names its holder (mpsc_queue's consumer lock, a UCX
// worker's lock): threads take it under their own identities, over and over. The holder
// must find its name in the word all through its hold, even when another's attempt saw
// the word free just before it was taken (an exchange would then write the loser's
// name), and a thread must never find its name when its attempt failed.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/backoff.hpp"
#include "test/gtest/common/stress.hpp"

namespace mpiv::test {

/// @param try_lock callable as bool(std::uintptr_t id)
/// @param held_by callable as bool(std::uintptr_t id)
/// @param unlock callable as void()
template <class TryLock, class HeldBy, class Unlock>
void race_named_try_lock(TryLock try_lock, HeldBy held_by, Unlock unlock)
{
    constexpr int k_threads = 4;
    const std::uint64_t rounds = iterations(2000000);
    std::atomic<int> lost{0};
    std::atomic<int> false_claims{0};
    std::atomic<std::uint64_t> holds{0};
    int ids[k_threads] = {};
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t) {
        threads.emplace_back([&, t] {
            const auto me = reinterpret_cast<std::uintptr_t>(&ids[t]);
            for (std::uint64_t i = 0; i < rounds; ++i) {
                if (!try_lock(me)) {
                    if (held_by(me)) {
                        false_claims.fetch_add(1, std::memory_order_relaxed);
                    }
                    continue;
                }
                holds.fetch_add(1, std::memory_order_relaxed);
                for (int k = 0; k < 4; ++k) {
                    if (!held_by(me)) {
                        lost.fetch_add(1, std::memory_order_relaxed);
                    }
                    base::cpu_relax();
                }
                unlock();
            }
        });
    }
    for (std::thread &th : threads) {
        th.join();
    }
    EXPECT_EQ(lost.load(), 0) << "a holder found another's name in the word";
    EXPECT_EQ(false_claims.load(), 0) << "a failed attempt left its own name in the word";
    EXPECT_GT(holds.load(), 0u);
}

} // namespace mpiv::test
