// mpsc_queue: FIFO order and wrap-around, back-pressure, the consumer lock, attach
// validation, multi-producer stress (threads, then processes through a memfd segment).
#include "endpoints/shm/mpsc_queue.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "endpoints/shm/segment.hpp"
#include "test/gtest/common/holder_race.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/endpoints/shm_test_util.hpp"

namespace mpiv::shm {

struct mpsc_queue_test_access {
    template <template <class> class Atom> static void lock(mpsc_queue<Atom> &q)
    {
        ASSERT_TRUE(q.try_lock(mpsc_queue<Atom>::k_anonymous));
    }
    template <template <class> class Atom> static void unlock(mpsc_queue<Atom> &q)
    {
        q.unlock();
    }
};

} // namespace mpiv::shm

namespace {

using mpiv::status;
using mpiv::shm::mpsc_queue;
using mpiv::shm::mpsc_queue_test_access;
using mpiv::shm::segment;
using mpiv::test::region_buffer;
using mpiv::test::log_capture;

constexpr std::size_t k_payload = mpsc_queue<>::k_payload;

/// A full-size message: who sent it, its number, and a filler derived from both so that a
/// torn or mixed-up payload is detected.
struct message {
    std::uint32_t producer;
    std::uint32_t len;
    std::uint64_t counter;
    unsigned char fill[40];
};
static_assert(sizeof(message) == k_payload);

message make_message(std::uint32_t producer, std::uint64_t counter)
{
    message m{};
    m.producer = producer;
    m.len = sizeof(message);
    m.counter = counter;
    for (std::size_t i = 0; i < sizeof(m.fill); ++i) {
        m.fill[i] = static_cast<unsigned char>(counter * 31 + producer * 7 + i);
    }
    return m;
}

bool intact(const message &m)
{
    const message expected = make_message(m.producer, m.counter);
    return std::memcmp(&m, &expected, sizeof(m)) == 0;
}

/// Length of message @p i of producer @p p in the stress tests: 1 to 3 slots (at most the
/// queue's capacity), ending anywhere in its last slot: a message header, then tail bytes.
std::size_t stress_len(std::uint32_t p, std::uint64_t i, std::uint32_t capacity)
{
    const std::size_t slots = 1 + (i * 7 + p) % std::min<std::size_t>(3, capacity);
    return slots == 1 ? k_payload : (slots - 1) * k_payload + 1 + i % k_payload;
}

unsigned char tail_byte(std::uint32_t p, std::uint64_t i, std::size_t j)
{
    return static_cast<unsigned char>(p * 13 + i * 5 + j);
}

/// A whole stress message as drained: header, tail bytes to len, zeros to the slot end.
bool stress_intact(const unsigned char *bytes, std::size_t size, std::uint32_t capacity)
{
    message m;
    std::memcpy(&m, bytes, sizeof(m));
    const std::size_t len = stress_len(m.producer, m.counter, capacity);
    if (!intact(m) || size != (len + k_payload - 1) / k_payload * k_payload) {
        return false;
    }
    for (std::size_t j = sizeof(m); j < size; ++j) {
        if (bytes[j] != (j < len ? tail_byte(m.producer, m.counter, j) : 0)) {
            return false;
        }
    }
    return true;
}

/// Push, retrying while the queue is full; false after ~ the child timeout.
template <template <class> class Atom>
bool push_retrying(mpsc_queue<Atom> &q, const void *msg, std::size_t len)
{
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::seconds(mpiv::test::k_child_timeout_s);
    for (std::uint32_t spins = 0;; ++spins) {
        const status s = q.try_push(msg, len);
        if (s == status::ok) {
            return true;
        }
        if (s != status::busy) {
            return false;
        }
        if ((spins & 63) == 63 && std::chrono::steady_clock::now() > deadline) {
            return false;
        }
        sched_yield();
    }
}

TEST(mpsc_queue, bytes_for_accepts_powers_of_two_only)
{
    EXPECT_EQ(mpsc_queue<>::bytes_for(2), 384u + 2 * 64);
    EXPECT_EQ(mpsc_queue<>::bytes_for(1024), 384u + 1024 * 64);
    EXPECT_EQ(mpsc_queue<>::bytes_for(1u << 20), 384u + (std::size_t{1} << 20) * 64);
    for (std::uint32_t bad : {0u, 1u, 3u, 6u, 1000u, (1u << 20) + 1, 1u << 21, 0x80000000u}) {
        EXPECT_EQ(mpsc_queue<>::bytes_for(bad), 0u) << bad;
    }
}

TEST(mpsc_queue, use_before_format_and_bad_messages)
{
    log_capture log;
    mpsc_queue<> q;
    const message m = make_message(0, 0);
    EXPECT_EQ(q.try_push(&m, sizeof(m)), status::not_initialized);
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 8), 0);
    EXPECT_TRUE(q.empty_hint());
    region_buffer buffer(mpsc_queue<>::bytes_for(4));
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), 4), status::ok);
    EXPECT_EQ(q.capacity(), 4u);
    unsigned char big[mpsc_queue<>::k_max_message + 1] = {};
    EXPECT_EQ(q.try_push(big, sizeof(big)), status::invalid_arg) << "larger than 8 slots";
    EXPECT_EQ(q.try_push(big, 4 * k_payload + 1), status::invalid_arg) << "5 slots of 4";
    EXPECT_EQ(q.try_push(nullptr, 1), status::invalid_arg);
    EXPECT_TRUE(q.empty_hint()) << "rejected messages take no slot";
    EXPECT_EQ(log.errors().size(), 4u);
    EXPECT_EQ(q.try_push(nullptr, 0), status::ok) << "an empty message is fine";
    EXPECT_EQ(q.try_push(big, k_payload), status::ok);
    EXPECT_FALSE(q.empty_hint());
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 8), 2);
    EXPECT_TRUE(q.empty_hint());
}

TEST(mpsc_queue, format_rejects_bad_geometry)
{
    log_capture log;
    region_buffer buffer(mpsc_queue<>::bytes_for(16) + 4096);
    mpsc_queue<> q;
    EXPECT_EQ(q.format(buffer.data(), buffer.size(), 12), status::invalid_arg);
    EXPECT_EQ(q.format(buffer.data(), buffer.size(), 1), status::invalid_arg);
    EXPECT_EQ(q.format(buffer.data(), mpsc_queue<>::bytes_for(16) - 1, 16), status::invalid_arg);
    EXPECT_EQ(q.format(buffer.data() + 64, buffer.size() - 64, 16), status::invalid_arg);
    EXPECT_EQ(q.format(nullptr, buffer.size(), 16), status::invalid_arg);
    EXPECT_EQ(log.errors().size(), 5u);
    EXPECT_EQ(q.capacity(), 0u) << "a failed format binds nothing";
    ASSERT_EQ(q.format(buffer.data(), mpsc_queue<>::bytes_for(16), 16), status::ok);
}

// Single thread: many laps around a small ring with varying batch sizes and message
// lengths, drained by drain() and drain_serial() in turn; order is exact and the bytes
// past a short message's length read as zero.
TEST(mpsc_queue, fifo_and_wrap_around)
{
    constexpr std::uint32_t k_capacity = 8;
    region_buffer buffer(mpsc_queue<>::bytes_for(k_capacity));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), k_capacity), status::ok);
    std::uint64_t pushed = 0;
    std::uint64_t popped = 0;
    const std::uint64_t laps = 2000;
    unsigned char full[k_payload];
    std::memset(full, 0xff, sizeof(full));
    for (std::uint64_t round = 0; popped < laps * k_capacity; ++round) {
        // Messages are 0xff past their counter and vary in length: the stale tail of a
        // longer message in the same slot a lap earlier would show.
        const std::uint64_t batch = 1 + round % k_capacity;
        for (std::uint64_t i = 0; i < batch; ++i) {
            const std::size_t len = 8 + pushed % (k_payload - 7);
            unsigned char msg[k_payload];
            std::memset(msg, 0xff, sizeof(msg));
            std::memcpy(msg, &pushed, sizeof(pushed));
            const status s = q.try_push(msg, len);
            if (s == status::busy) {
                break;
            }
            ASSERT_EQ(s, status::ok);
            ++pushed;
        }
        const int max = static_cast<int>(1 + (round * 7) % k_capacity);
        const auto check = [&](const void *payload, std::size_t) {
            std::uint64_t seen;
            std::memcpy(&seen, payload, sizeof(seen));
            ASSERT_EQ(seen, popped);
            const std::size_t len = 8 + popped % (k_payload - 7);
            const auto *bytes = static_cast<const unsigned char *>(payload);
            for (std::size_t b = 8; b < k_payload; ++b) {
                ASSERT_EQ(bytes[b], b < len ? 0xff : 0) << "byte " << b << " len " << len;
            }
            ++popped;
        };
        // Every other round through the lock-free single-consumer drain: the two share
        // the queue position.
        const int n = round % 2 == 0 ? q.drain(check, max) : q.drain_serial(check, max);
        ASSERT_GE(n, 0);
        ASSERT_LE(n, max);
        ASSERT_LE(popped, pushed);
        ASSERT_LE(pushed - popped, k_capacity);
    }
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 1000), static_cast<int>(pushed - popped));
    EXPECT_TRUE(q.empty_hint());
}

// Messages of 1 to 8 slots: the consumer gets whole slots (the bytes past the length
// zero), messages wrap around the end of the ring, and a message that needs more free
// slots than there are is refused with busy although one is free.
TEST(mpsc_queue, multi_slot_messages)
{
    constexpr std::uint32_t k_capacity = 32;
    region_buffer buffer(mpsc_queue<>::bytes_for(k_capacity));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), k_capacity), status::ok);
    std::vector<unsigned char> msg(mpsc_queue<>::k_max_message);
    std::size_t lengths_seen = 0;
    for (std::size_t round = 0; round < 40; ++round) {
        // lengths 448, 0, 57, 112, 300: 8, 1, 2, 2, 6 slots; 19 slots per round wrap
        const std::size_t lengths[] = {mpsc_queue<>::k_max_message, 0, k_payload + 1,
                                       2 * k_payload, 300};
        std::size_t at = 0;
        for (const std::size_t len : lengths) {
            for (std::size_t j = 0; j < len; ++j) {
                msg[j] = static_cast<unsigned char>(round * 3 + len + j);
            }
            ASSERT_EQ(q.try_push(msg.data(), len), status::ok) << len;
            ++at;
        }
        std::size_t drained = 0;
        EXPECT_EQ(q.drain(
                      [&](const void *p, std::size_t size) {
                          const std::size_t len = lengths[drained++];
                          const std::size_t slots = len <= k_payload ? 1 : (len + k_payload - 1) / k_payload;
                          EXPECT_EQ(size, slots * k_payload) << len;
                          const auto *b = static_cast<const unsigned char *>(p);
                          for (std::size_t j = 0; j < size; ++j) {
                              const unsigned char want =
                                  j < len ? static_cast<unsigned char>(round * 3 + len + j) : 0;
                              if (b[j] != want) {
                                  ADD_FAILURE() << "len " << len << " byte " << j;
                                  return;
                              }
                          }
                          ++lengths_seen;
                      },
                      100),
                  static_cast<int>(at));
    }
    EXPECT_EQ(lengths_seen, 200u);
    // 24 one-slot messages and one of 8 slots fill the 32 slots.
    for (int i = 0; i < 24; ++i) {
        ASSERT_EQ(q.try_push(msg.data(), 8), status::ok);
    }
    EXPECT_EQ(q.try_push(msg.data(), mpsc_queue<>::k_max_message), status::ok);
    EXPECT_EQ(q.try_push(msg.data(), 1), status::busy);
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 1), 1);
    EXPECT_EQ(q.try_push(msg.data(), 2 * k_payload), status::busy) << "one slot free, two needed";
    EXPECT_EQ(q.try_push(msg.data(), 8), status::ok) << "one slot free, one needed";
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 100), 25);
}

// A full queue refuses with busy and keeps every message it accepted.
TEST(mpsc_queue, full_queue_is_busy_and_loses_nothing)
{
    constexpr std::uint32_t k_capacity = 16;
    region_buffer buffer(mpsc_queue<>::bytes_for(k_capacity));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), k_capacity), status::ok);
    std::vector<std::uint64_t> seen;
    auto record = [&](const void *p, std::size_t) {
        std::uint64_t v;
        std::memcpy(&v, p, sizeof(v));
        seen.push_back(v);
    };
    std::uint64_t next = 0;
    for (std::uint32_t i = 0; i < k_capacity; ++i, ++next) {
        ASSERT_EQ(q.try_push(&next, sizeof(next)), status::ok);
    }
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(q.try_push(&next, sizeof(next)), status::busy);
    }
    EXPECT_EQ(q.drain(record, 5), 5);
    for (std::uint32_t i = 0; i < 5; ++i, ++next) {
        ASSERT_EQ(q.try_push(&next, sizeof(next)), status::ok);
    }
    EXPECT_EQ(q.try_push(&next, sizeof(next)), status::busy);
    EXPECT_EQ(q.drain(record, 100), static_cast<int>(k_capacity));
    EXPECT_EQ(q.drain(record, 100), 0);
    std::vector<std::uint64_t> expected(k_capacity + 5);
    for (std::size_t i = 0; i < expected.size(); ++i) {
        expected[i] = i;
    }
    EXPECT_EQ(seen, expected);
}

// Only one drainer at a time: drain() returns -1 while the lock is held, including from
// inside the callback; the callback may push into the queue it is draining.
TEST(mpsc_queue, consumer_lock)
{
    region_buffer buffer(mpsc_queue<>::bytes_for(4));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), 4), status::ok);
    const std::uint64_t one = 1;
    ASSERT_EQ(q.try_push(&one, sizeof(one)), status::ok);
    mpsc_queue_test_access::lock(q);
    EXPECT_EQ(q.drain([](const void *, std::size_t) { ADD_FAILURE() << "drained under a held lock"; }, 4), -1);
    EXPECT_FALSE(q.empty_hint()) << "the hint needs no lock";
    mpsc_queue_test_access::unlock(q);

    int nested = 0;
    std::uint64_t seen = 0;
    EXPECT_EQ(q.drain(
                  [&](const void *p, std::size_t) {
                      std::memcpy(&seen, p, sizeof(seen));
                      nested = q.drain([](const void *, std::size_t) {}, 4);
                      // The slot was freed before the callback: the queue has room again.
                      const std::uint64_t again = seen + 1;
                      EXPECT_EQ(q.try_push(&again, sizeof(again)), status::ok);
                  },
                  1),
              1);
    EXPECT_EQ(seen, 1u);
    EXPECT_EQ(nested, -1);
    EXPECT_EQ(q.drain([&](const void *p, std::size_t) { std::memcpy(&seen, p, sizeof(seen)); }, 4), 1);
    EXPECT_EQ(seen, 2u);
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 0), 0);
}

// held_by() names the lock's holder only: inside a drain with an identity, under
// try_lock_consumer() with one, and never once the lock is released or for another caller
// (an anonymous drain included).
TEST(mpsc_queue, the_holder_recognizes_itself)
{
    region_buffer buffer(mpsc_queue<>::bytes_for(4));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), 4), status::ok);
    int me = 0;
    int other = 0;
    const auto id = reinterpret_cast<std::uintptr_t>(&me);
    const auto not_id = reinterpret_cast<std::uintptr_t>(&other);
    EXPECT_FALSE(q.held_by(id));
    const std::uint64_t one = 1;
    ASSERT_EQ(q.try_push(&one, sizeof(one)), status::ok);
    ASSERT_EQ(q.try_push(&one, sizeof(one)), status::ok);
    int inside = 0;
    EXPECT_EQ(q.drain(
                  [&](const void *, std::size_t) {
                      ++inside;
                      EXPECT_TRUE(q.held_by(id));
                      EXPECT_FALSE(q.held_by(not_id));
                      EXPECT_FALSE(q.try_lock_consumer(id)) << "not recursive";
                  },
                  1, id),
              1);
    EXPECT_EQ(inside, 1);
    EXPECT_FALSE(q.held_by(id)) << "released";
    EXPECT_EQ(q.drain([&](const void *, std::size_t) { EXPECT_FALSE(q.held_by(id)); }, 1), 1);

    ASSERT_TRUE(q.try_lock_consumer(id));
    EXPECT_TRUE(q.held_by(id));
    EXPECT_FALSE(q.held_by(not_id));
    EXPECT_FALSE(q.try_lock_consumer(not_id));
    q.unlock_consumer();
    EXPECT_FALSE(q.held_by(id));
    ASSERT_TRUE(q.try_lock_consumer(not_id));
    EXPECT_FALSE(q.held_by(id));
    q.unlock_consumer();
}

// Threads race for the consumer lock, each under its own identity (holder_race.hpp).
TEST(mpsc_queue, racing_try_locks_keep_the_holders_name)
{
    region_buffer buffer(mpsc_queue<>::bytes_for(4));
    mpsc_queue<> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), 4), status::ok);
    mpiv::test::race_named_try_lock([&](std::uintptr_t id) { return q.try_lock_consumer(id); },
                                    [&](std::uintptr_t id) { return q.held_by(id); },
                                    [&] { q.unlock_consumer(); });
}

TEST(mpsc_queue, attach_rejects_unusable_regions)
{
    log_capture log;
    constexpr std::uint32_t k_capacity = 32;
    const std::size_t bytes = mpsc_queue<>::bytes_for(k_capacity);
    region_buffer buffer(bytes + 4096);
    mpsc_queue<> view;
    EXPECT_EQ(view.attach(buffer.data(), bytes), status::invalid_arg) << "never formatted";
    EXPECT_EQ(view.attach(nullptr, bytes), status::invalid_arg);
    mpsc_queue<> owner;
    ASSERT_EQ(owner.format(buffer.data(), bytes, k_capacity), status::ok);
    EXPECT_EQ(view.attach(buffer.data(), bytes - 1), status::invalid_arg) << "too small";
    EXPECT_EQ(view.attach(buffer.data(), 256), status::invalid_arg) << "smaller than the header";
    EXPECT_EQ(view.attach(buffer.data() + 64, bytes), status::invalid_arg) << "misaligned";

    // Bad magic: flip one byte of it.
    buffer.data()[3] ^= 0x40;
    EXPECT_EQ(view.attach(buffer.data(), bytes), status::invalid_arg) << "bad magic";
    buffer.data()[3] ^= 0x40;
    // Corrupt geometry: capacity (offset 8) not a power of two, then a wrong region size.
    std::uint32_t capacity;
    std::memcpy(&capacity, buffer.data() + 8, sizeof(capacity));
    ASSERT_EQ(capacity, k_capacity);
    const std::uint32_t wrong = k_capacity - 1;
    std::memcpy(buffer.data() + 8, &wrong, sizeof(wrong));
    EXPECT_EQ(view.attach(buffer.data(), bytes + 4096), status::invalid_arg) << "capacity";
    const std::uint32_t larger = k_capacity * 2;
    std::memcpy(buffer.data() + 8, &larger, sizeof(larger));
    EXPECT_EQ(view.attach(buffer.data(), bytes + 4096), status::invalid_arg) << "region_bytes";
    std::memcpy(buffer.data() + 8, &capacity, sizeof(capacity));
    EXPECT_EQ(log.errors().size(), 8u);
    EXPECT_EQ(view.capacity(), 0u);

    ASSERT_EQ(view.attach(buffer.data(), bytes), status::ok);
    EXPECT_EQ(view.capacity(), k_capacity);
    const std::uint64_t v = 42;
    ASSERT_EQ(view.try_push(&v, sizeof(v)), status::ok);
    std::uint64_t seen = 0;
    EXPECT_EQ(owner.drain([&](const void *p, std::size_t) { std::memcpy(&seen, p, sizeof(seen)); }, 4), 1);
    EXPECT_EQ(seen, 42u);
}

static_assert(offsetof(mpiv::shm::detail::queue_header<std::atomic>, capacity) == 8,
              "the corrupt-geometry test pokes this field");

// The same memory at two addresses (one memfd, mapped twice): a producer view at one
// address and the owner at the other agree.
TEST(mpsc_queue, two_mappings_of_one_segment)
{
    constexpr std::uint32_t k_capacity = 64;
    const std::size_t bytes = mpsc_queue<>::bytes_for(k_capacity);
    segment owner_seg;
    ASSERT_EQ(segment::create(bytes, owner_seg), status::ok);
    segment peer_seg;
    ASSERT_EQ(segment::attach(getpid(), owner_seg.fd(), bytes, peer_seg), status::ok);
    ASSERT_NE(owner_seg.base(), peer_seg.base());
    mpsc_queue<> owner;
    mpsc_queue<> peer;
    ASSERT_EQ(owner.format(owner_seg.base(), bytes, k_capacity), status::ok);
    ASSERT_EQ(peer.attach(peer_seg.base(), bytes), status::ok);
    std::uint64_t next = 0;
    std::uint64_t expected = 0;
    for (int round = 0; round < 50; ++round) {
        while (peer.try_push(&next, sizeof(next)) == status::ok) {
            ++next;
        }
        ASSERT_EQ(next - expected, k_capacity);
        EXPECT_EQ(owner.drain(
                      [&](const void *p, std::size_t) {
                          std::uint64_t v;
                          std::memcpy(&v, p, sizeof(v));
                          EXPECT_EQ(v, expected++);
                      },
                      1 << 20),
                  static_cast<int>(k_capacity));
    }
}

// Yields before some CASes and some stores: widens the window between a producer's claim
// and its publish (the consumer then meets a claimed, unpublished slot with published
// ones behind it) and the window between a drainer's checks.
template <class T> struct yielding_atomic : std::atomic<T> {
    yielding_atomic() noexcept = default;
    static void maybe_yield() noexcept
    {
        thread_local std::uint32_t calls = 0;
        if ((++calls & 15) == 0) {
            sched_yield();
        }
    }
    bool compare_exchange_weak(T &expected, T desired, std::memory_order success,
                               std::memory_order failure) noexcept
    {
        maybe_yield();
        return std::atomic<T>::compare_exchange_weak(expected, desired, success, failure);
    }
    void store(T desired, std::memory_order order) noexcept
    {
        maybe_yield();
        std::atomic<T>::store(desired, order);
    }
};

struct stress_config {
    std::uint32_t producers;
    std::uint32_t drainers;
    std::uint32_t capacity;
};

// Producers push (id, counter) messages, drainers pop concurrently. The expected counter
// per producer is plain memory updated in the callback: only the consumer lock protects it
// (TSan checks that), and checking counter == expected proves per-producer FIFO, no loss
// and no duplicate.
template <template <class> class Atom> void run_stress(const stress_config &cfg)
{
    const std::uint64_t per_producer = mpiv::test::iterations(40000);
    const std::uint64_t total = per_producer * cfg.producers;
    region_buffer buffer(mpsc_queue<Atom>::bytes_for(cfg.capacity));
    mpsc_queue<Atom> q;
    ASSERT_EQ(q.format(buffer.data(), buffer.size(), cfg.capacity), status::ok);

    std::vector<std::uint64_t> expected(cfg.producers, 0); // guarded by the consumer lock
    std::uint64_t bad = 0;                                  // same
    std::atomic<std::uint64_t> received{0};
    std::atomic<std::uint64_t> contended{0};
    std::atomic<bool> failed{false};

    std::vector<std::thread> threads;
    for (std::uint32_t p = 0; p < cfg.producers; ++p) {
        threads.emplace_back([&, p] {
            unsigned char bytes[mpsc_queue<Atom>::k_max_message];
            for (std::uint64_t i = 0; i < per_producer; ++i) {
                const message m = make_message(p, i);
                std::memcpy(bytes, &m, sizeof(m));
                const std::size_t len = stress_len(p, i, cfg.capacity);
                for (std::size_t j = sizeof(m); j < len; ++j) {
                    bytes[j] = tail_byte(p, i, j);
                }
                if (!push_retrying(q, bytes, len)) {
                    failed.store(true, std::memory_order_relaxed);
                    return;
                }
            }
        });
    }
    for (std::uint32_t d = 0; d < cfg.drainers; ++d) {
        threads.emplace_back([&, d] {
            const auto deadline = std::chrono::steady_clock::now() +
                                  std::chrono::seconds(mpiv::test::k_child_timeout_s);
            while (received.load(std::memory_order_relaxed) < total &&
                   !failed.load(std::memory_order_relaxed)) {
                if (q.empty_hint()) {
                    if (std::chrono::steady_clock::now() > deadline) {
                        failed.store(true, std::memory_order_relaxed);
                        return;
                    }
                    sched_yield();
                    continue;
                }
                const int n = q.drain(
                    [&](const void *payload, std::size_t size) {
                        message m;
                        std::memcpy(&m, payload, sizeof(m));
                        if (m.producer >= cfg.producers ||
                            !stress_intact(static_cast<const unsigned char *>(payload), size,
                                           cfg.capacity) ||
                            m.counter != expected[m.producer]) {
                            ++bad;
                            return;
                        }
                        ++expected[m.producer];
                    },
                    1 + static_cast<int>(d) * 16);
                if (n < 0) {
                    contended.fetch_add(1, std::memory_order_relaxed);
                } else {
                    received.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
                }
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    ASSERT_FALSE(failed.load(std::memory_order_relaxed)) << "a push failed or a thread timed out";
    EXPECT_EQ(received.load(std::memory_order_relaxed), total);
    EXPECT_EQ(bad, 0u);
    for (std::uint32_t p = 0; p < cfg.producers; ++p) {
        EXPECT_EQ(expected[p], per_producer) << "producer " << p;
    }
    EXPECT_EQ(q.drain([](const void *, std::size_t) {}, 1), 0) << "nothing extra";
    ::testing::Test::RecordProperty(
        "contended_drains", static_cast<int>(contended.load(std::memory_order_relaxed)));
}

TEST(mpsc_queue, stress_four_producers_one_drainer)
{
    run_stress<std::atomic>({4, 1, 64});
}

TEST(mpsc_queue, stress_four_producers_two_drainers)
{
    run_stress<std::atomic>({4, 2, 64});
}

TEST(mpsc_queue, stress_tiny_ring_yielding)
{
    run_stress<yielding_atomic>({3, 2, 2});
}

TEST(mpsc_queue, stress_yielding_two_drainers)
{
    run_stress<yielding_atomic>({4, 2, 16});
}

// Producers in other processes: each child maps the parent's segment through
// /proc/<ppid>/fd/<fd> (a new mapping at its own address) and pushes its sequence while the
// parent drains and checks per-producer order.
TEST(mpsc_queue, producers_in_other_processes)
{
    constexpr std::uint32_t k_capacity = 32;
    constexpr std::uint32_t k_children = 2;
    const std::uint64_t per_child = mpiv::test::iterations(20000);
    const std::size_t bytes = mpsc_queue<>::bytes_for(k_capacity);
    segment seg;
    ASSERT_EQ(segment::create(bytes, seg), status::ok);
    mpsc_queue<> q;
    ASSERT_EQ(q.format(seg.base(), bytes, k_capacity), status::ok);
    const pid_t parent = getpid();
    const int fd = seg.fd();
    const void *parent_base = seg.base();

    std::vector<pid_t> children;
    for (std::uint32_t c = 0; c < k_children; ++c) {
        const pid_t pid = mpiv::test::fork_child([&, c] {
            if (getppid() != parent) {
                return 2;
            }
            segment mine;
            if (segment::attach(getppid(), fd, bytes, mine) != status::ok ||
                mine.base() == parent_base) {
                return 3;
            }
            mpsc_queue<> producer;
            if (producer.attach(mine.base(), mine.size()) != status::ok) {
                return 4;
            }
            for (std::uint64_t i = 0; i < per_child; ++i) {
                const message m = make_message(c, i);
                if (!push_retrying(producer, &m, sizeof(m))) {
                    return 5;
                }
            }
            return 0;
        });
        ASSERT_GT(pid, 0);
        children.push_back(pid);
    }

    std::vector<std::uint64_t> expected(k_children, 0);
    std::uint64_t received = 0;
    std::uint64_t bad = 0;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::seconds(mpiv::test::k_child_timeout_s);
    while (received < per_child * k_children && std::chrono::steady_clock::now() < deadline) {
        const int n = q.drain(
            [&](const void *payload, std::size_t) {
                message m;
                std::memcpy(&m, payload, sizeof(m));
                if (m.producer >= k_children || !intact(m) || m.counter != expected[m.producer]) {
                    ++bad;
                    return;
                }
                ++expected[m.producer];
            },
            16);
        ASSERT_GE(n, 0);
        received += static_cast<std::uint64_t>(n);
        if (n == 0) {
            sched_yield();
        }
    }
    for (pid_t pid : children) {
        EXPECT_EQ(mpiv::test::wait_child(pid), 0) << "child " << pid;
    }
    EXPECT_EQ(received, per_child * k_children);
    EXPECT_EQ(bad, 0u);
    for (std::uint32_t c = 0; c < k_children; ++c) {
        EXPECT_EQ(expected[c], per_child) << "child " << c;
    }
    EXPECT_TRUE(q.empty_hint());
}

} // namespace
