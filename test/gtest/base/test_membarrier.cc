// base::heavy_barrier (base/membarrier.hpp): the asymmetric Dekker pair the shared-memory
// doorbell relies on (shm::ring() with a compiler barrier, engine::doze() with the heavy
// barrier). Each round, one thread stores x then loads y with only a compiler barrier
// between; the other stores y, makes the heavy barrier, then loads x. At least one of
// them must see the other's store; with a compiler barrier on both sides, x86's
// store-to-load reordering lets both miss (the model is contrib/model/doorbell.pml).
// Where membarrier is not available both sides fence, as shm::ring() and doze() then do.
#include "base/membarrier.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test/gtest/common/stress.hpp"

namespace {

TEST(membarrier, register_is_stable)
{
    const bool first = mpiv::base::membarrier_register();
    EXPECT_EQ(mpiv::base::membarrier_register(), first);
    if (first) {
        EXPECT_TRUE(mpiv::base::heavy_barrier());
    }
}

// The pair as the doorbell makes it: with membarrier, a compiler barrier on the frequent
// side and the heavy barrier on the rare one; without, a full fence on both.
TEST(membarrier, heavy_barrier_orders_a_light_store_load_pair)
{
    const bool light = mpiv::base::membarrier_register();
    const int rounds = static_cast<int>(mpiv::test::iterations(20000));
    std::atomic<int> x{0}, y{0};
    std::atomic<int> go{0}, done{0};
    std::vector<int> seen_y(static_cast<std::size_t>(rounds) + 1, -1);
    std::thread frequent([&] {
        for (int r = 1; r <= rounds; ++r) {
            // Acquire: pairs with the release store of go below (x and y are reset).
            while (go.load(std::memory_order_acquire) != r) {
            }
            x.store(1, std::memory_order_relaxed);
            if (light) {
                std::atomic_signal_fence(std::memory_order_seq_cst);
            } else {
                std::atomic_thread_fence(std::memory_order_seq_cst);
            }
            seen_y[static_cast<std::size_t>(r)] = y.load(std::memory_order_relaxed);
            // Release: pairs with the acquire load of done below (seen_y is written).
            done.store(r, std::memory_order_release);
        }
    });
    int both_missed = 0;
    for (int r = 1; r <= rounds; ++r) {
        x.store(0, std::memory_order_relaxed);
        y.store(0, std::memory_order_relaxed);
        // Release: pairs with the acquire load of go in the frequent side's thread.
        go.store(r, std::memory_order_release);
        y.store(1, std::memory_order_relaxed);
        if (light) {
            ASSERT_TRUE(mpiv::base::heavy_barrier());
        } else {
            std::atomic_thread_fence(std::memory_order_seq_cst);
        }
        const int seen_x = x.load(std::memory_order_relaxed);
        // Acquire: pairs with the release store of done in the frequent side's thread.
        while (done.load(std::memory_order_acquire) != r) {
        }
        both_missed += seen_x == 0 && seen_y[static_cast<std::size_t>(r)] == 0;
    }
    frequent.join();
    EXPECT_EQ(both_missed, 0) << "rounds where neither thread saw the other's store";
}

} // namespace
