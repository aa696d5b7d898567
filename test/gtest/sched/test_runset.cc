// The two-level run set: no lost or duplicated ids, capacity, rotation of the scan start,
// the look-ahead.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "sched/runset.hpp"
#include "test/gtest/common/stress.hpp"

namespace {

using mpiv::sched::runset;

TEST(runset, set_then_drain_returns_each_id_once)
{
    runset rs(262144);
    EXPECT_EQ(rs.capacity(), 262144u);
    const std::vector<std::uint32_t> ids = {0, 1, 63, 64, 511, 512, 4095, 4096, 100000, 262143};
    for (auto id : ids) {
        rs.set(id);
        rs.set(id); // setting twice is one wake-up
    }
    EXPECT_TRUE(rs.any());
    std::multiset<std::uint32_t> got;
    rs.drain(rs.capacity(), [&](std::uint32_t id) { got.insert(id); });
    EXPECT_EQ(got, std::multiset<std::uint32_t>(ids.begin(), ids.end()));
    // Hints are sticky until a pass finds their group empty; that pass clears them.
    EXPECT_EQ(rs.drain(rs.capacity(), [](std::uint32_t) {}), 0u);
    EXPECT_FALSE(rs.any());
}

// Before each run, drain() shows the ids that run after it from the same level-1 word, in
// the order they run: what the worker prefetches must be what comes next.
TEST(runset, drain_shows_the_ids_that_run_next_from_their_word)
{
    runset rs(4096);
    const std::vector<std::uint32_t> ids = {3, 5, 17, 63, 64, 100, 700, 701, 4095};
    for (int pass = 0; pass < 8; ++pass) { // the scan start rotates from pass to pass
        for (auto id : ids) {
            rs.set(id);
        }
        std::vector<std::uint32_t> ran;
        std::vector<std::vector<std::uint32_t>> shown; // what ahead() showed before each run
        std::vector<std::uint32_t> pending;
        const std::uint32_t taken = rs.drain(
            rs.capacity(),
            [&](std::uint32_t id) {
                ran.push_back(id);
                shown.push_back(pending);
                pending.clear();
            },
            [&](const std::uint32_t *next, std::uint32_t count) { pending.assign(next, next + count); });
        ASSERT_EQ(taken, ids.size());
        ASSERT_EQ(std::multiset<std::uint32_t>(ran.begin(), ran.end()),
                  std::multiset<std::uint32_t>(ids.begin(), ids.end()));
        for (std::size_t i = 0; i < ran.size(); ++i) {
            std::vector<std::uint32_t> expected;
            for (std::size_t k = i + 1; k < ran.size() && ran[k] / 64 == ran[i] / 64; ++k) {
                expected.push_back(ran[k]);
            }
            EXPECT_EQ(shown[i], expected) << "before id " << ran[i] << ", pass " << pass;
        }
    }
}

TEST(runset, capacity_rounds_up_to_groups)
{
    runset rs(1000);
    EXPECT_EQ(rs.capacity(), 1024u);
    runset big(1u << 20);
    big.set((1u << 20) - 1);
    std::uint32_t seen = 0;
    big.drain(big.capacity(), [&](std::uint32_t id) { seen = id; });
    EXPECT_EQ(seen, (1u << 20) - 1);
}

TEST(runset, scan_start_rotates)
{
    runset rs(4096);
    std::set<std::uint32_t> firsts;
    for (int pass = 0; pass < 200; ++pass) {
        for (std::uint32_t id : {3u, 70u, 600u, 3000u}) {
            rs.set(id);
        }
        bool first = true;
        rs.drain(rs.capacity(), [&](std::uint32_t id) {
            if (first) {
                firsts.insert(id);
                first = false;
            }
        });
    }
    EXPECT_GT(firsts.size(), 1u) << "the lowest id always ran first";
}

// Producers set ids concurrently with a draining consumer: every set is seen, and an id
// is never reported while not set (each producer sets its id again only after the
// consumer took it).
TEST(runset, concurrent_producers_lose_nothing)
{
    constexpr std::uint32_t producers = 4;
    const std::uint64_t rounds = mpiv::test::iterations(5000);
    runset rs(262144); // ids are slot * 1000, spread over many groups
    std::vector<std::atomic<std::uint64_t>> taken(producers * 64);
    std::atomic<bool> stop{false};
    std::thread consumer([&] {
        while (!stop.load(std::memory_order_acquire)) {
            rs.drain(rs.capacity(), [&](std::uint32_t id) { taken[id / 1000].fetch_add(1, std::memory_order_release); });
        }
    });
    std::vector<std::thread> threads;
    for (std::uint32_t p = 0; p < producers; ++p) {
        threads.emplace_back([&, p] {
            for (std::uint32_t k = 0; k < 64; ++k) {
                const std::uint32_t slot = p * 64 + k;
                for (std::uint64_t r = 0; r < rounds / 64; ++r) {
                    rs.set(slot * 1000);
                    while (taken[slot].load(std::memory_order_acquire) <= r) {
                        std::this_thread::yield();
                    }
                }
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    stop.store(true, std::memory_order_release);
    consumer.join();
    for (std::uint32_t s = 0; s < producers * 64; ++s) {
        EXPECT_EQ(taken[s].load(), rounds / 64) << "slot " << s;
    }
}

} // namespace
