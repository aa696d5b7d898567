// stats: per-thread event counters summed on read; the counts of exited threads are kept,
// their blocks reused; every counter is described. Per-communicator counters by key: slots
// shared by keys, closed keys, exited threads, concurrent counting and reading.
#include "base/stats.hpp"

#include "base/lock/tlp.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace stats = mpiv::base::stats;
using stats::counter;

// A counter nothing else in this program touches.
constexpr counter k_c = counter::server_polls_with_work;

TEST(stats, every_counter_has_a_unique_name_a_unit_and_a_description)
{
    std::set<std::string> names;
    for (std::size_t i = 0; i < stats::k_counters; ++i) {
        const stats::info &d = stats::describe(i);
        ASSERT_NE(d.name, nullptr);
        EXPECT_TRUE(names.insert(d.name).second) << d.name << " twice";
        EXPECT_GT(std::string(d.unit).size(), 0u) << d.name;
        EXPECT_GT(std::string(d.description).size(), 20u) << d.name;
    }
    EXPECT_EQ(std::string(stats::describe(0).name), "sent_inline");
}

// Threads count concurrently (each only in its own block); reads while they run never go
// backwards; once they have exited their counts stay, and a new thread starts at zero.
TEST(stats, threads_count_apart_and_exited_threads_are_kept)
{
    const std::uint64_t start = stats::read(k_c);
    constexpr int k_threads = 8;
    constexpr std::uint64_t k_each = 200000;
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t) {
        threads.emplace_back([&go, t] {
            // Acquire: pairs with the release store below (all start together).
            while (!go.load(std::memory_order_acquire)) {
                std::this_thread::yield();
            }
            for (std::uint64_t i = 0; i < k_each; ++i) {
                stats::add(k_c, t % 2 == 0 ? 1 : 3);
            }
        });
    }
    go.store(true, std::memory_order_release);
    std::uint64_t last = start;
    for (int i = 0; i < 100; ++i) {
        const std::uint64_t now = stats::read(k_c);
        EXPECT_GE(now, last) << "a read went backwards";
        last = now;
    }
    for (auto &t : threads) {
        t.join();
    }
    const std::uint64_t want = start + k_each * (k_threads / 2) * (1 + 3);
    EXPECT_EQ(stats::read(k_c), want);

    // A new thread: its block (maybe reused) starts at zero; read_threads lists it.
    std::uint64_t mine_before = 1, mine_after = 0;
    std::size_t live = 0;
    std::thread([&] {
        stats::add(k_c, 0); // registers this thread
        std::vector<std::uint64_t> v(64);
        const std::size_t n = stats::read_threads(k_c, v.data(), v.size());
        live = n;
        mine_before = 0;
        for (std::size_t i = 1; i < std::min(n, v.size()); ++i) {
            mine_before += v[i];
        }
        stats::add(k_c, 5);
        mine_after = stats::read(k_c);
    }).join();
    EXPECT_GE(live, 2u) << "the exited total and this thread at least";
    EXPECT_EQ(mine_before, 0u) << "live threads' blocks start at zero";
    EXPECT_EQ(mine_after, want + 5);
    std::vector<std::uint64_t> v(64);
    const std::size_t n = stats::read_threads(k_c, v.data(), v.size());
    ASSERT_GE(n, 1u);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < std::min(n, v.size()); ++i) {
        sum += v[i];
    }
    EXPECT_EQ(sum, want + 5);
    EXPECT_EQ(stats::read_threads(k_c, nullptr, 0), n) << "a count without values";
}

// The TLP lock counts acquisitions per class, and the time of acquisitions that waited.
TEST(stats, tlp_lock_counts_acquisitions_and_contended_waits)
{
    mpiv::base::tlp_lock<mpiv::base::ticket_lock, mpiv::base::ticket_lock> lock;
    const std::uint64_t high = stats::read(counter::tlp_high);
    const std::uint64_t low = stats::read(counter::tlp_low);
    const std::uint64_t high_wait = stats::read(counter::tlp_high_wait_ns);
    lock.lock();
    lock.unlock();
    lock.lock_low();
    lock.unlock_low();
    ASSERT_TRUE(lock.try_lock());
    lock.unlock();
    EXPECT_EQ(stats::read(counter::tlp_high), high + 2);
    EXPECT_EQ(stats::read(counter::tlp_low), low + 1);
    EXPECT_EQ(stats::read(counter::tlp_high_wait_ns), high_wait) << "nothing waited";
    // Contended: another thread waits while this one holds the lock for 20 ms.
    lock.lock();
    std::thread waiter([&] {
        lock.lock();
        lock.unlock();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.unlock();
    waiter.join();
    EXPECT_EQ(stats::read(counter::tlp_high), high + 4);
    EXPECT_GE(stats::read(counter::tlp_high_wait_ns), high_wait + 10000000)
        << "the waiter's 20 ms (at least 10)";
}


// ------------------------------------------------------------------ per communicator

using stats::comm_counter;

TEST(stats_comm, every_counter_has_a_unique_name_a_unit_and_a_description)
{
    std::set<std::string> names;
    for (std::size_t i = 0; i < stats::k_comm_counters; ++i) {
        const stats::info &d = stats::describe_comm(i);
        EXPECT_TRUE(names.insert(d.name).second) << d.name << " twice";
        EXPECT_EQ(std::string(d.name).rfind("comm_", 0), 0u) << d.name;
        EXPECT_GT(std::string(d.unit).size(), 0u) << d.name;
        EXPECT_GT(std::string(d.description).size(), 20u) << d.name;
    }
}

// Keys are new each time; a closed key reads 0 and no longer counts.
TEST(stats_comm, keys_are_never_reused_and_closed_keys_do_not_count)
{
    const std::uint64_t a = stats::comm_open();
    const std::uint64_t b = stats::comm_open();
    ASSERT_NE(a, 0u);
    ASSERT_NE(b, 0u);
    EXPECT_NE(a, b);
    stats::add_comm(a, comm_counter::comm_sent, 3);
    stats::add_comm(b, comm_counter::comm_sent);
    stats::add_comm(0, comm_counter::comm_sent); // no key: not counted, no harm (below)
    EXPECT_EQ(stats::read_comm(a, comm_counter::comm_sent), 3u);
    EXPECT_EQ(stats::read_comm(b, comm_counter::comm_sent), 1u);
    EXPECT_EQ(stats::read_comm(a, comm_counter::comm_received), 0u);
    stats::comm_close(a);
    EXPECT_EQ(stats::read_comm(a, comm_counter::comm_sent), 0u);
    stats::add_comm(a, comm_counter::comm_sent); // a late event of a closed communicator
    EXPECT_EQ(stats::read_comm(a, comm_counter::comm_sent), 0u);
    const std::uint64_t c = stats::comm_open();
    EXPECT_NE(c, a);
    EXPECT_NE(c, b);
    EXPECT_EQ(stats::read_comm(c, comm_counter::comm_sent), 0u);
    stats::comm_close(b);
    stats::comm_close(c);
    // A key in the slot that key 0 would map to, counted on this thread: it gets exactly
    // its own counts (nothing left over from the add_comm(0) above).
    std::vector<std::uint64_t> opened;
    std::uint64_t k0 = 0;
    while (((k0 = stats::comm_open()) & (stats::k_comm_slots - 1)) != 0) {
        opened.push_back(k0);
    }
    stats::add_comm(k0, comm_counter::comm_sent, 2);
    EXPECT_EQ(stats::read_comm(k0, comm_counter::comm_sent), 2u);
    stats::comm_close(k0);
    for (const std::uint64_t k : opened) {
        stats::comm_close(k);
    }
}

// Keys that share a thread's slot take it over in turn: the counts of each survive (folded
// into its totals); a thread's slots are folded at its exit.
TEST(stats_comm, keys_sharing_a_slot_and_exited_threads_keep_their_counts)
{
    std::vector<std::uint64_t> keys;
    for (std::size_t i = 0; i < 3 * stats::k_comm_slots + 1; ++i) {
        keys.push_back(stats::comm_open());
    }
    std::thread t([&] {
        for (int round = 0; round < 5; ++round) {
            for (std::size_t i = 0; i < keys.size(); ++i) {
                stats::add_comm(keys[i], comm_counter::comm_bytes_sent, i + 1);
            }
        }
        for (std::size_t i = 0; i < keys.size(); ++i) {
            EXPECT_EQ(stats::read_comm(keys[i], comm_counter::comm_bytes_sent), 5 * (i + 1));
        }
    });
    t.join();
    for (std::size_t i = 0; i < keys.size(); ++i) {
        EXPECT_EQ(stats::read_comm(keys[i], comm_counter::comm_bytes_sent), 5 * (i + 1))
            << "key " << i << " after its thread exited";
        stats::comm_close(keys[i]);
    }
}

// Threads count for keys that collide in their slots while a reader reads: reads never go
// backwards, and the totals are exact at the end.
TEST(stats_comm, concurrent_counting_and_reading)
{
    constexpr int k_threads = 4, k_rounds = 20000;
    const std::uint64_t k0 = stats::comm_open();
    std::uint64_t k1 = 0;
    while (((k1 = stats::comm_open()) & (stats::k_comm_slots - 1)) != (k0 & (stats::k_comm_slots - 1))) {
        stats::comm_close(k1); // until one shares k0's slot
    }
    std::atomic<bool> done{false};
    std::thread reader([&] {
        std::uint64_t last0 = 0, last1 = 0;
        while (!done.load(std::memory_order_relaxed)) {
            const std::uint64_t v0 = stats::read_comm(k0, comm_counter::comm_received);
            const std::uint64_t v1 = stats::read_comm(k1, comm_counter::comm_received);
            EXPECT_GE(v0, last0);
            EXPECT_GE(v1, last1);
            last0 = v0;
            last1 = v1;
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < k_rounds; ++i) {
                // Mostly k0, every 16th k1 (a slot switch each time).
                stats::add_comm((i & 15) == 15 ? k1 : k0, comm_counter::comm_received);
            }
            (void)t;
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    done.store(true, std::memory_order_relaxed);
    reader.join();
    EXPECT_EQ(stats::read_comm(k0, comm_counter::comm_received),
              static_cast<std::uint64_t>(k_threads) * (k_rounds - k_rounds / 16));
    EXPECT_EQ(stats::read_comm(k1, comm_counter::comm_received),
              static_cast<std::uint64_t>(k_threads) * (k_rounds / 16));
    stats::comm_close(k0);
    stats::comm_close(k1);
}

} // namespace
