// private_deque: the two ends, LRU eviction, ring wrap-around, owner vs stealer.
#include "pool/private_deque.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "test/gtest/common/stress.hpp"
#include "test/gtest/pool/pool_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::pool::private_deque;
using mpiv::pool::private_deque_test_access;
using contents_t = std::vector<std::uint32_t>;

TEST(private_deque, init_rejects_bad_capacity)
{
    private_deque<> d;
    EXPECT_EQ(d.init(0), status::invalid_arg);
    EXPECT_EQ(d.init(private_deque<>::k_max_capacity + 1), status::invalid_arg);
    ASSERT_EQ(d.init(3), status::ok);
}

TEST(private_deque, top_is_lifo_and_bottom_is_fifo)
{
    private_deque<> d;
    ASSERT_EQ(d.init(8), status::ok);
    std::uint32_t index = 99;
    EXPECT_EQ(d.pop_top(index), status::not_found);
    EXPECT_EQ(d.pop_bottom(index), status::not_found);
    EXPECT_EQ(index, 99u);
    std::uint32_t evicted = 77;
    for (std::uint32_t i = 10; i < 15; ++i) {
        EXPECT_FALSE(d.push_top(i, evicted));
    }
    EXPECT_EQ(evicted, 77u);
    EXPECT_EQ(d.size_hint(), 5u);
    ASSERT_EQ(d.pop_top(index), status::ok);
    EXPECT_EQ(index, 14u);
    ASSERT_EQ(d.pop_bottom(index), status::ok);
    EXPECT_EQ(index, 10u);
    ASSERT_EQ(d.pop_bottom(index), status::ok);
    EXPECT_EQ(index, 11u);
    EXPECT_EQ(private_deque_test_access::contents(d), (contents_t{12, 13}));
}

// Capacity 3 on a ring of 4: eviction must take the bottom, and positions must wrap.
TEST(private_deque, full_push_evicts_least_recently_used)
{
    private_deque<> d;
    ASSERT_EQ(d.init(3), status::ok);
    std::uint32_t evicted = 0;
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_FALSE(d.push_top(i, evicted));
    }
    std::vector<std::uint32_t> evictions;
    for (std::uint32_t i = 3; i < 20; ++i) {
        ASSERT_TRUE(d.push_top(i, evicted));
        evictions.push_back(evicted);
        EXPECT_EQ(d.size_hint(), 3u);
    }
    for (std::uint32_t i = 0; i < 17; ++i) {
        EXPECT_EQ(evictions[i], i);
    }
    EXPECT_EQ(private_deque_test_access::contents(d), (contents_t{17, 18, 19}));
    std::uint32_t index;
    ASSERT_EQ(d.pop_top(index), status::ok);
    EXPECT_EQ(index, 19u);
    EXPECT_FALSE(d.push_top(20, evicted)) << "room was made by the pop";
    EXPECT_EQ(private_deque_test_access::contents(d), (contents_t{17, 18, 20}));
}

// The owner cycles indexes at the top while a stealer takes from the bottom and gives
// them back: every index stays in exactly one place, and the plain payload handed along
// with each index is race-free only if the lock orders the two threads.
TEST(private_deque, owner_and_stealer_conserve_indexes)
{
    constexpr std::uint32_t k_indexes = 16;
    const std::uint64_t rounds = mpiv::test::iterations(2000000, 10);
    private_deque<> d;
    ASSERT_EQ(d.init(k_indexes), status::ok);
    std::uint32_t evicted;
    for (std::uint32_t i = 0; i < k_indexes; ++i) {
        ASSERT_FALSE(d.push_top(i, evicted));
    }
    std::atomic<std::uint32_t> owner[k_indexes];
    std::uint64_t payload[k_indexes] = {};
    for (auto &o : owner) {
        o.store(0, std::memory_order_relaxed);
    }
    std::atomic<std::uint64_t> errors{0};
    auto take = [&](std::uint32_t index, std::uint32_t who) {
        if (owner[index].exchange(who, std::memory_order_relaxed) != 0) {
            errors.fetch_add(1, std::memory_order_relaxed);
        }
        payload[index] += who;
    };
    auto give = [&](std::uint32_t index) {
        owner[index].store(0, std::memory_order_relaxed);
        std::uint32_t ev;
        if (d.push_top(index, ev)) {
            errors.fetch_add(1, std::memory_order_relaxed); // total never exceeds capacity
        }
    };
    auto worker = [&](std::uint32_t who, bool stealer) {
        for (std::uint64_t r = 0; r < rounds; ++r) {
            std::uint32_t index;
            const status s = stealer ? d.pop_bottom(index) : d.pop_top(index);
            if (s == status::ok) {
                take(index, who);
                give(index);
            }
        }
    };
    std::thread owner_thread(worker, 1, false);
    std::thread stealer_thread(worker, 2, true);
    owner_thread.join();
    stealer_thread.join();
    EXPECT_EQ(errors.load(std::memory_order_relaxed), 0u);
    std::vector<std::uint32_t> left = private_deque_test_access::contents(d);
    ASSERT_EQ(left.size(), k_indexes);
    std::vector<bool> seen(k_indexes, false);
    for (std::uint32_t index : left) {
        ASSERT_LT(index, k_indexes);
        EXPECT_FALSE(seen[index]);
        seen[index] = true;
    }
}

} // namespace
