// packet_pool: distribution, get/put paths, eviction, stealing, exhaustion, bad input,
// and concurrent conservation of packets.
#include "pool/packet_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "test/gtest/common/stress.hpp"
#include "test/gtest/pool/pool_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::pool::packet_pool;
using mpiv::pool::packet_pool_test_access;
using mpiv::pool::packet_region_test_access;
using mpiv::pool::pool_params;
using index_list = std::vector<std::uint32_t>;

pool_params make_params(std::uint32_t packet_count, std::uint32_t workers,
                        std::uint32_t private_capacity, std::uint32_t private_initial,
                        std::uint32_t packet_size = 256)
{
    pool_params p;
    p.packet_size = packet_size;
    p.packet_count = packet_count;
    p.workers = workers;
    p.private_capacity = private_capacity;
    p.private_initial = private_initial;
    return p;
}

// A pool and its region; init() must be checked by the test.
struct test_pool {
    explicit test_pool(const pool_params &p)
        : params(p), buffer(packet_pool<>::region_bytes(p) + 4096)
    {
    }
    status init() { return pool.init(params, buffer.data(), buffer.size()); }
    std::uint32_t index(const void *packet) const
    {
        return packet_region_test_access::index_of(pool.region(), packet);
    }
    void *packet(std::uint32_t index) const
    {
        return packet_region_test_access::packet(pool.region(), index);
    }
    index_list deque(std::uint32_t worker)
    {
        return packet_pool_test_access::deque_contents(pool, worker);
    }
    // Indexes returned by repeated gets of worker w (or the server when w < 0) until retry.
    index_list drain(int worker)
    {
        index_list out;
        void *p = nullptr;
        while ((worker < 0 ? pool.server_get(p) : pool.get(static_cast<std::uint32_t>(worker), p)) ==
               status::ok) {
            out.push_back(index(p));
        }
        return out;
    }

    pool_params params;
    mpiv::test::region_buffer buffer;
    mutable packet_pool<> pool;
};

TEST(packet_pool, init_rejects_bad_parameters)
{
    mpiv::test::log_capture log;
    const pool_params good = make_params(16, 2, 4, 2);
    std::vector<pool_params> bad;
    bad.push_back(make_params(16, 2, 4, 2, 0));   // packet size 0
    bad.push_back(make_params(16, 2, 4, 2, 100)); // not a cache-line multiple
    bad.push_back(make_params(0, 2, 4, 0));       // no packets
    bad.push_back(make_params(16, 0, 4, 2));      // no workers
    bad.push_back(make_params(16, 2, 0, 0));      // no private slots
    bad.push_back(make_params(16, 2, 4, 5));      // initial above capacity
    bad.push_back(make_params(16, 5, 4, 4));      // 20 private packets out of 16
    mpiv::test::region_buffer buffer(packet_pool<>::region_bytes(good) + 4096);
    for (const pool_params &p : bad) {
        packet_pool<> pool;
        EXPECT_EQ(pool.init(p, buffer.data(), buffer.size()), status::invalid_arg);
        void *packet = nullptr;
        EXPECT_EQ(pool.server_get(packet), status::not_initialized);
        EXPECT_EQ(pool.get(0, packet), status::not_initialized);
        EXPECT_EQ(pool.put(0, buffer.data()), status::not_initialized);
    }
    EXPECT_EQ(packet_pool<>::region_bytes(bad[0]), 0u);
    EXPECT_EQ(packet_pool<>::region_bytes(bad[1]), 0u);
    EXPECT_EQ(packet_pool<>::region_bytes(bad[2]), 0u);

    packet_pool<> pool;
    const std::size_t need = packet_pool<>::region_bytes(good);
    EXPECT_EQ(pool.init(good, buffer.data(), need - 1), status::invalid_arg);
    EXPECT_EQ(pool.init(good, buffer.data() + 64, need), status::invalid_arg);
    EXPECT_EQ(pool.init(good, nullptr, need), status::invalid_arg);
    ASSERT_EQ(pool.init(good, buffer.data(), need), status::ok);
    EXPECT_EQ(pool.init(good, buffer.data(), need), status::invalid_arg) << "second init";
    EXPECT_EQ(log.errors().size(), 4 * bad.size() + 4) << "each rejection is logged once";
}

TEST(packet_pool, packets_are_aligned_and_disjoint)
{
    test_pool t(make_params(8, 1, 8, 0, 192));
    ASSERT_EQ(t.init(), status::ok);
    index_list got = t.drain(0);
    ASSERT_EQ(got.size(), 8u);
    auto *first = static_cast<unsigned char *>(t.packet(0));
    for (std::uint32_t i = 0; i < 8; ++i) {
        auto *p = static_cast<unsigned char *>(t.packet(i));
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % mpiv::k_cacheline, 0u);
        EXPECT_EQ(p, first + i * 192);
        EXPECT_GE(p, t.buffer.data());
        EXPECT_LE(p + 192, t.buffer.data() + packet_pool<>::region_bytes(t.params));
        std::memset(p, 0xa5, 192); // the whole packet is the caller's
    }
    for (std::uint32_t i = 0; i < 8; ++i) {
        ASSERT_EQ(t.pool.put(0, t.packet(i)), status::ok) << "pool metadata was overwritten";
    }
}

// private_initial packets per worker (the highest index on top), the rest shared with
// the lowest shared index on top.
TEST(packet_pool, initial_distribution)
{
    test_pool t(make_params(10, 3, 4, 2));
    ASSERT_EQ(t.init(), status::ok);
    EXPECT_EQ(t.pool.workers(), 3u);
    EXPECT_EQ(t.deque(0), (index_list{0, 1}));
    EXPECT_EQ(t.deque(1), (index_list{2, 3}));
    EXPECT_EQ(t.deque(2), (index_list{4, 5}));
    index_list shared;
    void *p = nullptr;
    while (t.pool.region().get(p) == status::ok) {
        shared.push_back(t.index(p));
    }
    EXPECT_EQ(shared, (index_list{6, 7, 8, 9}));
}

TEST(packet_pool, server_get_prefers_shared_then_steals_bottoms)
{
    test_pool t(make_params(7, 2, 4, 2));
    ASSERT_EQ(t.init(), status::ok);
    index_list got = t.drain(-1);
    ASSERT_EQ(got.size(), 7u);
    EXPECT_EQ((index_list{got[0], got[1], got[2]}), (index_list{4, 5, 6})) << "shared first";
    // Then steals from random victims, each deque from the bottom (LRU) up.
    const index_list stolen(got.begin() + 3, got.end());
    const auto position = [&](std::uint32_t index) {
        return std::find(stolen.begin(), stolen.end(), index) - stolen.begin();
    };
    EXPECT_LT(position(0), position(1)) << ::testing::PrintToString(stolen);
    EXPECT_LT(position(2), position(3)) << ::testing::PrintToString(stolen);
    index_list sorted = stolen;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (index_list{0, 1, 2, 3}));
}

TEST(packet_pool, worker_get_prefers_private_then_shared_then_steals)
{
    test_pool t(make_params(8, 2, 4, 3));
    ASSERT_EQ(t.init(), status::ok); // w0: 0 1 2, w1: 3 4 5, shared: 6 7
    EXPECT_EQ(t.drain(0), (index_list{2, 1, 0, 6, 7, 3, 4, 5}));
    void *p = nullptr;
    EXPECT_EQ(t.pool.get(1, p), status::retry_nopacket);
}

// Puts beyond the capacity push the least recently used packets to the shared stack.
TEST(packet_pool, eviction_sends_least_recently_used_to_shared)
{
    test_pool t(make_params(8, 1, 4, 0));
    ASSERT_EQ(t.init(), status::ok);
    index_list got = t.drain(0);
    ASSERT_EQ(got, (index_list{0, 1, 2, 3, 4, 5, 6, 7}));
    for (std::uint32_t i = 0; i < 8; ++i) {
        ASSERT_EQ(t.pool.put(0, t.packet(i)), status::ok);
        EXPECT_EQ(t.deque(0).size(), std::min<std::size_t>(i + 1, 4));
    }
    EXPECT_EQ(t.deque(0), (index_list{4, 5, 6, 7})) << "the most recent stay private";
    void *p = nullptr;
    ASSERT_EQ(t.pool.get(0, p), status::ok);
    EXPECT_EQ(t.index(p), 7u) << "the private top is the last packet put";
    // The server sees the evicted ones, most recently evicted first, before any private.
    EXPECT_EQ(t.drain(-1), (index_list{3, 2, 1, 0, 4, 5, 6}));
    ASSERT_EQ(t.pool.put(0, p), status::ok);
}

TEST(packet_pool, exhaustion_returns_retry_then_recovers)
{
    test_pool t(make_params(12, 3, 2, 2));
    ASSERT_EQ(t.init(), status::ok);
    std::vector<void *> held;
    void *p = nullptr;
    for (std::uint32_t w = 0;; w = (w + 1) % 3) {
        const status s = t.pool.get(w, p);
        if (s != status::ok) {
            EXPECT_EQ(s, status::retry_nopacket);
            break;
        }
        held.push_back(p);
    }
    ASSERT_EQ(held.size(), 12u);
    for (std::uint32_t w = 0; w < 3; ++w) {
        EXPECT_EQ(t.pool.get(w, p), status::retry_nopacket);
    }
    EXPECT_EQ(t.pool.server_get(p), status::retry_nopacket);
    EXPECT_EQ(t.pool.region().get(p), status::retry_nopacket);

    // One packet back anywhere makes every getter succeed once.
    ASSERT_EQ(t.pool.put(2, held.back()), status::ok);
    ASSERT_EQ(t.pool.get(0, p), status::ok) << "worker 0 steals from worker 2";
    EXPECT_EQ(p, held.back());
    EXPECT_EQ(t.pool.get(1, p), status::retry_nopacket);
    ASSERT_EQ(t.pool.region().put(p), status::ok);
    ASSERT_EQ(t.pool.server_get(p), status::ok);
    EXPECT_EQ(p, held.back());

    for (std::size_t i = 0; i < held.size(); ++i) {
        ASSERT_EQ(t.pool.put(static_cast<std::uint32_t>(i % 3), held[i]), status::ok);
    }
    index_list all = t.drain(1);
    EXPECT_EQ(all.size(), 12u);
}

// A packet taken by worker A and put by worker B lands in B's deque (B reuses it next) and
// keeps what A wrote.
TEST(packet_pool, cross_worker_return)
{
    test_pool t(make_params(8, 2, 4, 4));
    ASSERT_EQ(t.init(), status::ok);
    void *p = nullptr; // w0: 0 1 2 3, w1: 4 5 6 7 (top last), nothing shared
    std::thread a([&] {
        ASSERT_EQ(t.pool.get(0, p), status::ok);
        std::memcpy(p, "from A", 7);
    });
    a.join();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(t.index(p), 3u);
    std::thread b([&] {
        EXPECT_STREQ(static_cast<const char *>(p), "from A");
        ASSERT_EQ(t.pool.put(1, p), status::ok); // w1 is full: its LRU (4) goes shared
        void *again = nullptr;
        ASSERT_EQ(t.pool.get(1, again), status::ok);
        EXPECT_EQ(again, p) << "B reuses the packet it returned last";
        ASSERT_EQ(t.pool.put(1, again), status::ok);
    });
    b.join();
    EXPECT_EQ(t.deque(0), (index_list{0, 1, 2}));
    EXPECT_EQ(t.deque(1), (index_list{5, 6, 7, 3}));
    void *shared = nullptr;
    ASSERT_EQ(t.pool.region().get(shared), status::ok);
    EXPECT_EQ(t.index(shared), 4u);
    EXPECT_EQ(t.pool.region().get(shared), status::retry_nopacket);
}

TEST(packet_pool, rejects_bad_packets_without_damage)
{
    mpiv::test::log_capture log;
    test_pool t(make_params(4, 2, 2, 1));
    ASSERT_EQ(t.init(), status::ok);
    void *p = nullptr;
    ASSERT_EQ(t.pool.get(0, p), status::ok);
    auto *bytes = static_cast<unsigned char *>(p);
    int on_stack = 0;
    test_pool other(make_params(4, 2, 2, 1));
    ASSERT_EQ(other.init(), status::ok);
    void *foreign = nullptr;
    ASSERT_EQ(other.pool.get(0, foreign), status::ok);

    EXPECT_EQ(t.pool.put(0, nullptr), status::invalid_handle);
    EXPECT_EQ(t.pool.put(0, &on_stack), status::invalid_handle);
    EXPECT_EQ(t.pool.put(0, foreign), status::invalid_handle);
    EXPECT_EQ(t.pool.put(0, bytes + 1), status::invalid_handle);
    EXPECT_EQ(t.pool.put(0, bytes + mpiv::k_cacheline), status::invalid_handle);
    EXPECT_EQ(t.pool.put(0, static_cast<unsigned char *>(t.packet(3)) + 256),
              status::invalid_handle)
        << "one past the last packet";
    EXPECT_EQ(t.pool.region().put(bytes - 64), status::invalid_handle);
    EXPECT_EQ(t.pool.put(2, p), status::invalid_arg) << "worker out of range";
    EXPECT_EQ(t.pool.get(2, p), status::invalid_arg) << "worker out of range";
    EXPECT_EQ(t.pool.put(1, t.packet(1)), status::invalid_arg) << "packet 1 is free in deque 1";
    EXPECT_EQ(t.pool.region().put(t.packet(2)), status::invalid_arg) << "packet 2 is shared";

    ASSERT_EQ(t.pool.put(0, p), status::ok);
    EXPECT_EQ(t.pool.put(0, p), status::invalid_arg) << "double put, same worker";
    EXPECT_EQ(t.pool.put(1, p), status::invalid_arg) << "double put, other worker";
    EXPECT_EQ(t.pool.region().put(p), status::invalid_arg) << "double put, shared path";
    EXPECT_EQ(log.errors().size(), 14u);

    // Nothing was lost or duplicated by the rejected calls.
    index_list all = t.drain(-1);
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (index_list{0, 1, 2, 3}));
    ASSERT_EQ(other.pool.put(0, foreign), status::ok);
}

// Active workers drain the deques of idle workers: with nothing shared, every packet must
// reach one of the active threads exactly once. Odd rounds add a concurrent server, which
// steals from every deque, the active workers' included.
TEST(packet_pool, stealing_drains_idle_workers_under_contention)
{
    constexpr std::uint32_t k_workers = 6;
    constexpr std::uint32_t k_per_worker = 32;
    const std::uint64_t rounds = mpiv::test::iterations(1000, 10);
    for (std::uint64_t round = 0; round < rounds; ++round) {
        test_pool t(make_params(k_workers * k_per_worker, k_workers, k_per_worker, k_per_worker));
        ASSERT_EQ(t.init(), status::ok);
        index_list got[3];
        std::thread active0([&] { got[0] = t.drain(0); });
        std::thread active1([&] { got[1] = t.drain(1); });
        if (round % 2 == 1) {
            got[2] = t.drain(-1);
        }
        active0.join();
        active1.join();
        std::vector<int> seen(k_workers * k_per_worker, 0);
        for (const index_list &g : got) {
            for (std::uint32_t index : g) {
                ASSERT_LT(index, seen.size());
                ++seen[index];
            }
        }
        for (std::size_t i = 0; i < seen.size(); ++i) {
            ASSERT_EQ(seen[i], 1) << "packet " << i << " in round " << round;
        }
        for (std::uint32_t w = 0; w < k_workers; ++w) {
            ASSERT_TRUE(t.deque(w).empty()) << "worker " << w << " in round " << round;
        }
    }
}

// Many threads get and put through every path at once. Each holder checks that it owns
// the packet exclusively and that the payload is the one the last putter left, stamps
// its own marker, and verifies the marker is intact at put time; at the end every packet
// is accounted for exactly once.
TEST(packet_pool, concurrent_get_put_loses_and_duplicates_nothing)
{
    constexpr std::uint32_t k_threads = 4;
    constexpr std::uint32_t k_packets = 48;
    constexpr std::uint64_t k_free_tag = 0xf7eeull << 48;
    const std::uint64_t rounds = mpiv::test::iterations(1000000, 10);
    // Small deques and few packets: evictions, shared traffic and steals all happen.
    test_pool t(make_params(k_packets, k_threads, 6, 4));
    ASSERT_EQ(t.init(), status::ok);
    struct marker {
        std::uint64_t stamp;
        std::uint64_t index;
    };
    for (std::uint32_t i = 0; i < k_packets; ++i) {
        *static_cast<marker *>(t.packet(i)) = marker{k_free_tag, i};
    }
    std::unique_ptr<std::atomic<std::uint32_t>[]> owner(new std::atomic<std::uint32_t>[k_packets]);
    for (std::uint32_t i = 0; i < k_packets; ++i) {
        owner[i].store(0, std::memory_order_relaxed);
    }
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> retries{0};
    std::vector<std::thread> threads;
    for (std::uint32_t w = 0; w < k_threads; ++w) {
        threads.emplace_back([&, w] {
            std::minstd_rand rng(w + 1);
            std::vector<void *> held;
            const std::uint32_t me = w + 1;
            for (std::uint64_t r = 0; r < rounds; ++r) {
                const unsigned choice = rng() % 8;
                if (held.size() < 8 && choice < 4) {
                    void *p = nullptr;
                    const status s = choice == 0 ? t.pool.server_get(p) : t.pool.get(w, p);
                    if (s != status::ok) {
                        retries.fetch_add(1, std::memory_order_relaxed);
                        continue;
                    }
                    const std::uint32_t index = t.index(p);
                    auto *m = static_cast<marker *>(p);
                    if (index >= k_packets || owner[index].exchange(me, std::memory_order_relaxed) != 0 ||
                        m->stamp != k_free_tag || m->index != index) {
                        errors.fetch_add(1, std::memory_order_relaxed);
                    }
                    *m = marker{std::uint64_t{me} << 32 | r, index};
                    held.push_back(p);
                } else if (!held.empty()) {
                    void *p = held[rng() % held.size()];
                    held.erase(std::find(held.begin(), held.end(), p));
                    const std::uint32_t index = t.index(p);
                    auto *m = static_cast<marker *>(p);
                    if (m->stamp >> 32 != me || m->index != index) {
                        errors.fetch_add(1, std::memory_order_relaxed);
                    }
                    *m = marker{k_free_tag, index};
                    owner[index].store(0, std::memory_order_relaxed);
                    // Mostly the own deque, sometimes another worker's, sometimes the
                    // shared return path.
                    const unsigned where = rng() % 8;
                    const status s = where == 0   ? t.pool.region().put(p)
                                     : where == 1 ? t.pool.put((w + 1) % k_threads, p)
                                                  : t.pool.put(w, p);
                    if (s != status::ok) {
                        errors.fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
            for (void *p : held) {
                const std::uint32_t index = t.index(p);
                *static_cast<marker *>(p) = marker{k_free_tag, index};
                owner[index].store(0, std::memory_order_relaxed);
                if (t.pool.put(w, p) != status::ok) {
                    errors.fetch_add(1, std::memory_order_relaxed);
                }
            }
        });
    }
    for (std::thread &th : threads) {
        th.join();
    }
    EXPECT_EQ(errors.load(std::memory_order_relaxed), 0u);
    index_list all = t.drain(-1);
    std::sort(all.begin(), all.end());
    index_list expected(k_packets);
    for (std::uint32_t i = 0; i < k_packets; ++i) {
        expected[i] = i;
    }
    EXPECT_EQ(all, expected);
    void *p = nullptr;
    EXPECT_EQ(t.pool.get(0, p), status::retry_nopacket);
}

} // namespace
