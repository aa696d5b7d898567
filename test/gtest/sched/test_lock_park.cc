// Queue locks (base/lock) with ULT waiters: a ULT queued behind others parks once its
// spin is spent and is unparked by the hand-off, so one worker's queued ULTs get the lock
// one after another without a pass of the worker over all of them per hand-off.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/lock/hmcs.hpp"
#include "base/lock/mcs.hpp"
#include "base/lock/tlp.hpp"
#include "base/stats.hpp"
#include "sched/runtime.hpp"
#include "sched/worker.hpp"
#include "test/gtest/sched/sched_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::sched::worker;
using mpiv::test::sched_test;

template <class L>
struct queue_state {
    L lock;
    std::atomic<int> turn{0};   // the ULT whose turn it is to queue
    std::atomic<int> queued{0}; // ULTs that are about to queue
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> entered{0};
};

template <class L>
struct queue_arg {
    queue_state<L> *s;
    int i;
};

template <class L>
void *queue_and_enter(void *raw)
{
    auto *a = static_cast<queue_arg<L> *>(raw);
    queue_state<L> &s = *a->s;
    // Queue in the reverse order of the ids, the order the worker's passes run them in:
    // with waiters that yield, each hand-off then needs a pass over all of them.
    while (s.turn.load(std::memory_order_acquire) != a->i) {
        worker::yield_current();
    }
    s.queued.fetch_add(1, std::memory_order_relaxed);
    s.turn.store(a->i - 1, std::memory_order_release);
    s.lock.lock();
    if (s.inside.fetch_add(1, std::memory_order_relaxed) != 0) {
        s.overlaps.fetch_add(1, std::memory_order_relaxed);
    }
    s.entered.fetch_add(1, std::memory_order_relaxed);
    s.inside.fetch_sub(1, std::memory_order_relaxed);
    s.lock.unlock();
    return nullptr;
}

template <class L>
class lock_park_test : public sched_test {};

/// HMCS over a synthetic three-level tree (8 thread slots in leaves of 2, threshold 3), so
/// that ULTs park at a parent level and are handed "acquire the parent" and cohort counts
/// on any machine (on 2 PUs the machine's hierarchy is the root alone).
class hmcs3_lock : public mpiv::base::hmcs_lock {
  public:
    hmcs3_lock() : hmcs_lock({2, 2, 2}, 3) {}
};

using queue_locks =
    ::testing::Types<mpiv::base::mcs_lock, mpiv::base::hmcs_lock, hmcs3_lock,
                     mpiv::base::p_mcs_mcs_lock, mpiv::base::tlp_lock<hmcs3_lock, mpiv::base::mcs_lock>>;
TYPED_TEST_SUITE(lock_park_test, queue_locks);

TYPED_TEST(lock_park_test, queued_ults_enter_in_a_bounded_number_of_dispatches)
{
    this->start(1);
    constexpr int n = 300;
    queue_state<TypeParam> s;
    s.turn.store(n - 1, std::memory_order_relaxed);
    const std::uint64_t parks0 = mpiv::base::stats::read(mpiv::base::stats::counter::ult_parks);
    s.lock.lock(); // held by this pthread while the ULTs queue
    std::vector<queue_arg<TypeParam>> args(n);
    std::vector<std::uint64_t> handles;
    for (int i = 0; i < n; ++i) {
        args[i] = {&s, i};
        handles.push_back(this->spawn(&queue_and_enter<TypeParam>, &args[i], 0));
    }
    while (s.queued.load(std::memory_order_relaxed) != n) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Let the last ones spend their spin (each yields or parks once it has).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::uint64_t before = this->rt_->at(0).dispatches();
    // Every ULT spun out and parked while the lock was held (ULT i parks before ULT i - 1
    // runs); the last to queue may still be spinning when the sleep above ends.
    EXPECT_GE(mpiv::base::stats::read(mpiv::base::stats::counter::ult_parks) - parks0,
              static_cast<std::uint64_t>(n - 1));
    s.lock.unlock();
    for (std::uint64_t h : handles) {
        ASSERT_EQ(this->rt_->join(h, nullptr), status::ok);
    }
    const std::uint64_t dispatches = this->rt_->at(0).dispatches() - before;
    EXPECT_EQ(s.entered.load(std::memory_order_relaxed), n);
    EXPECT_EQ(s.overlaps.load(std::memory_order_relaxed), 0);
    // Parked: about one dispatch per ULT (its hand-off wakes it). Yielding: one pass of
    // the remaining ULTs per hand-off, n * n / 2 dispatches.
    EXPECT_LE(dispatches, 4u * n);
}

// Parked ULTs of several workers and pthreads queue on one lock: everyone enters, one at
// a time.
TYPED_TEST(lock_park_test, ults_and_pthreads_mixed_under_contention)
{
    this->start(2);
    struct state {
        TypeParam lock;
        std::uint64_t counter = 0;
        std::atomic<int> inside{0};
        std::atomic<int> overlaps{0};
    } s;
    constexpr int ults = 32;
    constexpr int per = 100;
    const auto body = [](void *raw) -> void * {
        auto *st = static_cast<state *>(raw);
        for (int k = 0; k < per; ++k) {
            st->lock.lock();
            if (st->inside.fetch_add(1, std::memory_order_relaxed) != 0) {
                st->overlaps.fetch_add(1, std::memory_order_relaxed);
            }
            ++st->counter;
            if (k % 16 == 0) {
                worker::yield_current(); // others queue behind a holder that is away
            }
            st->inside.fetch_sub(1, std::memory_order_relaxed);
            st->lock.unlock();
        }
        return nullptr;
    };
    std::vector<std::uint64_t> handles;
    for (int i = 0; i < ults; ++i) {
        handles.push_back(this->spawn(body, &s, i % 2));
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&] {
            for (int k = 0; k < per; ++k) {
                s.lock.lock();
                if (s.inside.fetch_add(1, std::memory_order_relaxed) != 0) {
                    s.overlaps.fetch_add(1, std::memory_order_relaxed);
                }
                ++s.counter;
                s.inside.fetch_sub(1, std::memory_order_relaxed);
                s.lock.unlock();
            }
        });
    }
    for (std::uint64_t h : handles) {
        ASSERT_EQ(this->rt_->join(h, nullptr), status::ok);
    }
    for (std::thread &t : threads) {
        t.join();
    }
    EXPECT_EQ(s.counter, static_cast<std::uint64_t>((ults + 2) * per));
    EXPECT_EQ(s.overlaps.load(std::memory_order_relaxed), 0);
}

} // namespace
