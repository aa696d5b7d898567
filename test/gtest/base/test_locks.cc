// Conformance suite for every lock of base/lock, plus white-box tests of the two-level
// priority lock (entry order between the classes) and of HMCS cohort passing.
#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/backoff.hpp"
#include "base/lock/hmcs.hpp"
#include "base/lock/lock.hpp"
#include "base/lock/mcs.hpp"
#include "base/lock/mutex.hpp"
#include "base/lock/tas.hpp"
#include "base/lock/ticket.hpp"
#include "base/lock/tlp.hpp"
#include "test/gtest/common/stress.hpp"

namespace mpiv::base {

// White-box access (see STYLE.md §7).
struct ticket_lock_test_access {
    /// Threads that drew a ticket and wait (the owner excluded); the lock must be held.
    static std::uint32_t waiters(const ticket_lock &l)
    {
        return l.next_ticket_.load(std::memory_order_relaxed) -
               l.now_serving_.load(std::memory_order_relaxed) - 1;
    }
};

struct tlp_lock_test_access {
    template <class H, class L>
    static std::uint32_t filter_waiters(const tlp_lock<H, L> &l)
    {
        return ticket_lock_test_access::waiters(l.filter_);
    }
};

struct hmcs_lock_test_access {
    /// Slot of the calling thread in @p l's hierarchy.
    static std::uint32_t caller_slot(const hmcs_lock &l) { return l.hierarchy_->caller_slot(); }
    /// Leaf index of @p slot.
    static std::uint32_t leaf_of_slot(const hmcs_lock &l, std::uint32_t slot)
    {
        return l.hierarchy_->levels[0][slot];
    }
    /// Owner only: did it take the slow path (queue at its leaf)?
    static bool owner_queued_at_leaf(const hmcs_lock &l) { return l.holder_.level != l.root_; }
    /// Owner only: has a thread queued behind the owner at its leaf, and linked itself (a
    /// release within the threshold passes to a successor only once its link is seen; a
    /// successor that has swapped the tail but not linked yet gets the lock after the
    /// parent levels are released, which made cohort_passing_follows_threshold flaky).
    static bool leaf_waiter(const hmcs_lock &l)
    {
        // Acquire: pairs with the successor's release store of the link (mcs_enqueue).
        return l.holder_.node->next_.load(std::memory_order_acquire) != nullptr;
    }
    /// Owner only: has a thread queued at the root behind the owner's cohort? (2 levels)
    static bool root_waiter(const hmcs_lock &l)
    {
        return !detail::mcs_alone(l.root_->tail_, &l.holder_.level->up_);
    }
};

namespace {

/// HMCS over a synthetic three-level tree (8 thread slots, leaves of 2), so that cohort
/// passing and level climbing run on any machine; small threshold to exercise both
/// hand-off kinds often.
class hmcs3_lock : public hmcs_lock {
  public:
    hmcs3_lock() : hmcs_lock({2, 2, 2}, 3) {}
};

using p_hmcs3_mcs_lock = tlp_lock<hmcs3_lock, mcs_lock>;
using p_ticket_ticket_lock = tlp_lock<ticket_lock, ticket_lock>;

/// Wait for @p cond, yielding (the awaited thread may need this core).
template <class F>
void wait_for(F cond)
{
    while (!cond()) {
        std::this_thread::yield();
    }
}

/// try_lock() that gives the lock back at once when it succeeds, so that a failed
/// expectation cannot leave the lock held by a thread that has exited.
template <class L>
bool try_lock_and_release(L &lock)
{
    if (!lock.try_lock()) {
        return false;
    }
    lock.unlock();
    return true;
}

/// The same for the low-priority class.
template <class L>
bool try_lock_low_and_release(L &lock)
{
    if (!lock.try_lock_low()) {
        return false;
    }
    lock.unlock_low();
    return true;
}

/// Run @p body(thread_index) on @p n threads and join them.
template <class F>
void run_threads(unsigned n, F body)
{
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (unsigned t = 0; t < n; ++t) {
        threads.emplace_back(body, t);
    }
    for (auto &th : threads) {
        th.join();
    }
}

/// Critical-section checker: a plain counter (a data race, caught by TSan, if exclusion
/// fails) widened by a read-pause-write window, plus an occupancy count that records any
/// overlap directly.
struct cs_checker {
    std::uint64_t counter = 0;
    std::atomic<int> inside{0};
    std::atomic<std::uint64_t> overlaps{0};

    void enter_and_leave()
    {
        if (inside.fetch_add(1, std::memory_order_relaxed) != 0) {
            overlaps.fetch_add(1, std::memory_order_relaxed);
        }
        const std::uint64_t v = counter;
        cpu_relax();
        counter = v + 1;
        inside.fetch_sub(1, std::memory_order_relaxed);
    }
};

template <class L>
class lock_conformance : public ::testing::Test {};

using all_locks = ::testing::Types<mutex_lock, tas_lock, ticket_lock, mcs_lock, hmcs_lock, hmcs3_lock,
                                   p_hmcs_mcs_lock, p_mcs_mcs_lock, p_hmcs3_mcs_lock,
                                   p_ticket_ticket_lock>;
TYPED_TEST_SUITE(lock_conformance, all_locks);

TYPED_TEST(lock_conformance, mutual_exclusion_under_contention)
{
    for (unsigned n_threads : {2U, 4U, 8U, 16U}) {
        TypeParam lock;
        cs_checker cs;
        const std::uint64_t per_thread = test::iterations(50000) / n_threads + 1;
        run_threads(n_threads, [&](unsigned) {
            for (std::uint64_t i = 0; i < per_thread; ++i) {
                lock.lock();
                cs.enter_and_leave();
                lock.unlock();
            }
        });
        EXPECT_EQ(cs.counter, per_thread * n_threads) << n_threads << " threads";
        EXPECT_EQ(cs.overlaps.load(std::memory_order_relaxed), 0U) << n_threads << " threads";
    }
}

TYPED_TEST(lock_conformance, try_lock_mixed_with_lock)
{
    TypeParam lock;
    cs_checker cs;
    std::atomic<std::uint64_t> entries{0};
    const std::uint64_t per_thread = test::iterations(40000) / 8 + 1;
    run_threads(8, [&](unsigned t) {
        for (std::uint64_t i = 0; i < per_thread; ++i) {
            if ((i + t) % 2 == 0) {
                lock.lock();
            } else if (!lock.try_lock()) {
                continue;
            }
            entries.fetch_add(1, std::memory_order_relaxed);
            cs.enter_and_leave();
            lock.unlock();
        }
    });
    // Half the attempts use lock() and always enter.
    EXPECT_GE(entries.load(std::memory_order_relaxed), 4 * per_thread);
    EXPECT_EQ(cs.counter, entries.load(std::memory_order_relaxed));
    EXPECT_EQ(cs.overlaps.load(std::memory_order_relaxed), 0U);
}

TYPED_TEST(lock_conformance, try_lock_fails_while_held_by_another_thread)
{
    TypeParam lock;
    ASSERT_TRUE(lock.try_lock()); // free
    std::thread([&] { EXPECT_FALSE(try_lock_and_release(lock)); }).join();
    lock.unlock();
    std::thread([&] {
        ASSERT_TRUE(lock.try_lock());
        lock.unlock();
    }).join();
    lock.lock();
    std::thread([&] { EXPECT_FALSE(try_lock_and_release(lock)); }).join();
    lock.unlock();
    ASSERT_TRUE(lock.try_lock());
    lock.unlock();
}

TYPED_TEST(lock_conformance, guard_holds_for_its_scope)
{
    TypeParam lock;
    {
        lock_guard<TypeParam> guard(lock);
        std::thread([&] { EXPECT_FALSE(try_lock_and_release(lock)); }).join();
    }
    std::thread([&] {
        ASSERT_TRUE(lock.try_lock());
        lock.unlock();
    }).join();
}

TYPED_TEST(lock_conformance, thread_holds_two_locks)
{
    TypeParam a;
    TypeParam b;
    // Both orders of release: per-thread queue state must not assume LIFO nesting.
    a.lock();
    b.lock();
    std::thread([&] {
        EXPECT_FALSE(try_lock_and_release(a));
        EXPECT_FALSE(try_lock_and_release(b));
    }).join();
    a.unlock();
    std::thread([&] {
        ASSERT_TRUE(a.try_lock());
        EXPECT_FALSE(try_lock_and_release(b));
        a.unlock();
    }).join();
    b.unlock();

    // Contended nesting in a consistent order; b is also taken alone in between.
    cs_checker cs_a;
    cs_checker cs_b;
    const std::uint64_t per_thread = test::iterations(4000) / 4 + 1;
    run_threads(4, [&](unsigned t) {
        for (std::uint64_t i = 0; i < per_thread; ++i) {
            a.lock();
            cs_a.enter_and_leave();
            b.lock();
            cs_b.enter_and_leave();
            if ((i + t) % 2 == 0) {
                a.unlock();
                b.unlock();
            } else {
                b.unlock();
                a.unlock();
            }
            lock_guard<TypeParam> only_b(b);
            cs_b.enter_and_leave();
        }
    });
    EXPECT_EQ(cs_a.counter, 4 * per_thread);
    EXPECT_EQ(cs_b.counter, 8 * per_thread);
    EXPECT_EQ(cs_a.overlaps.load(std::memory_order_relaxed) +
                  cs_b.overlaps.load(std::memory_order_relaxed),
              0U);
}

// ------------------------------------------------------------------ tas_lock

// A waiter that has yielded (as a ULT does once its spin is spent, to a worker that may
// not run it again for a long time) keeps nobody out: when the owner releases, try_lock()
// and lock() of another thread enter at once. Under ticket_lock both would wait for the
// yielded waiter (its ticket is next), which is what made 500,000 ULTs sending into a
// full queue stall their process's progress thread (pml_mpiv_progress=server).
// The waiter's first yield: tells the test, then stays away until resumed.
struct yield_gate {
    std::promise<void> *yielded;
    std::atomic<bool> *resume;
    bool first;
};
thread_local yield_gate *t_yield_gate = nullptr;

TEST(tas_lock, a_yielded_waiter_keeps_nobody_out)
{
    tas_lock lock;
    std::promise<void> yielded_p;
    std::future<void> yielded = yielded_p.get_future();
    std::atomic<bool> resume{false};
    std::atomic<bool> entered{false};
    lock.lock();
    std::thread waiter([&] {
        yield_gate gate{&yielded_p, &resume, true};
        t_yield_gate = &gate;
        set_thread_yield_hook([]() noexcept {
            yield_gate &g = *t_yield_gate;
            if (g.first) {
                g.first = false;
                g.yielded->set_value();
                wait_for([&g] { return g.resume->load(std::memory_order_acquire); });
            }
            return true;
        });
        lock.lock(); // spins out, then "yields": stays away until resumed
        entered.store(true, std::memory_order_relaxed);
        lock.unlock();
        set_thread_yield_hook(nullptr);
    });
    yielded.wait();
    lock.unlock();
    const bool free = lock.try_lock();
    EXPECT_TRUE(free) << "the yielded waiter held the free lock";
    if (free) {
        lock.unlock();
        std::thread([&] {
            lock.lock();
            lock.unlock();
        }).join();
    }
    EXPECT_FALSE(entered.load(std::memory_order_relaxed));
    resume.store(true, std::memory_order_release);
    waiter.join();
    EXPECT_TRUE(entered.load(std::memory_order_relaxed));
}

// ------------------------------------------------------------------ no_waiters()

template <class L>
class no_waiters_test : public ::testing::Test {};

using queue_locks = ::testing::Types<ticket_lock, mcs_lock, hmcs_lock, hmcs3_lock>;
TYPED_TEST_SUITE(no_waiters_test, queue_locks);

// Never "waiters" when there is none (the property tlp_lock needs), and a waiter that
// has queued is eventually reported.
TYPED_TEST(no_waiters_test, reports_queued_waiter_only)
{
    TypeParam lock;
    for (int round = 0; round < 3; ++round) {
        lock.lock();
        EXPECT_TRUE(lock.no_waiters());
        std::atomic<bool> entered{false};
        std::thread waiter([&] {
            lock.lock();
            entered.store(true, std::memory_order_relaxed);
            lock.unlock();
        });
        wait_for([&] { return !lock.no_waiters(); });
        EXPECT_FALSE(entered.load(std::memory_order_relaxed));
        lock.unlock();
        waiter.join();
        EXPECT_TRUE(entered.load(std::memory_order_relaxed));
    }
    lock.lock();
    EXPECT_TRUE(lock.no_waiters());
    lock.unlock();
}

// ------------------------------------------------------------------ tlp_lock

template <class L>
class tlp_test : public ::testing::Test {};

using tlp_locks =
    ::testing::Types<p_hmcs_mcs_lock, p_mcs_mcs_lock, p_hmcs3_mcs_lock, p_ticket_ticket_lock>;
TYPED_TEST_SUITE(tlp_test, tlp_locks);

// The owner holds the lock while low-priority threads wait (one at the filter) and
// high-priority threads queue; every high-priority owner waits until a further one has
// queued before it leaves. Hence high-priority waiters exist at every release until the
// last one, and no low-priority thread may enter before all high-priority ones did.
TYPED_TEST(tlp_test, queued_high_priority_threads_enter_before_low)
{
    constexpr unsigned n_high = 6;
    constexpr unsigned n_low = 4;
    TypeParam lock;
    std::vector<char> entries; // guarded by lock
    unsigned high_entered = 0; // guarded by lock

    lock.lock();
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < n_low; ++i) {
        threads.emplace_back([&] {
            low_priority_guard<TypeParam> guard(lock);
            entries.push_back('L');
        });
    }
    wait_for([&] { return tlp_lock_test_access::filter_waiters(lock) == 1; });
    for (unsigned i = 0; i < n_high; ++i) {
        threads.emplace_back([&] {
            lock.lock();
            entries.push_back('H');
            if (++high_entered < n_high) {
                wait_for([&] { return !lock.no_waiters(); });
            }
            lock.unlock();
        });
    }
    wait_for([&] { return !lock.no_waiters(); });
    lock.unlock();
    for (auto &t : threads) {
        t.join();
    }

    ASSERT_EQ(entries.size(), n_high + n_low);
    EXPECT_EQ(std::string(entries.begin(), entries.end()),
              std::string(n_high, 'H') + std::string(n_low, 'L'));
}

// With a high-priority waiter queued, releasing the lock keeps the filter with the high
// class: a low-priority attempt fails even before the waiter has run.
TYPED_TEST(tlp_test, try_lock_low_fails_while_high_waiter_queued)
{
    TypeParam lock;
    std::atomic<bool> checked{false};
    std::atomic<bool> high_in{false};

    lock.lock();
    std::thread high([&] {
        lock_guard<TypeParam> guard(lock);
        high_in.store(true, std::memory_order_relaxed);
        wait_for([&] { return checked.load(std::memory_order_relaxed); });
    });
    wait_for([&] { return !lock.no_waiters(); });
    std::thread([&] { EXPECT_FALSE(try_lock_low_and_release(lock)); }).join();
    lock.unlock();
    std::thread([&] { EXPECT_FALSE(try_lock_low_and_release(lock)); }).join();
    checked.store(true, std::memory_order_relaxed);
    high.join();
    EXPECT_TRUE(high_in.load(std::memory_order_relaxed));
    ASSERT_TRUE(lock.try_lock_low());
    lock.unlock_low();
}

// A low-priority owner keeps the high class out; high priority gets in after it.
TYPED_TEST(tlp_test, high_priority_try_lock_fails_while_low_holds)
{
    TypeParam lock;
    lock.lock_low();
    std::thread([&] {
        EXPECT_FALSE(try_lock_and_release(lock));
        EXPECT_FALSE(try_lock_low_and_release(lock));
    }).join();
    lock.unlock_low();
    std::thread([&] {
        ASSERT_TRUE(lock.try_lock());
        lock.unlock();
    }).join();
}

// Liveness: low-priority threads get in while high-priority traffic runs or once it
// stops, and after it stops the lock is free for either class.
TYPED_TEST(tlp_test, low_priority_enters_once_high_traffic_stops)
{
    TypeParam lock;
    cs_checker cs;
    const std::uint64_t per_high = test::iterations(20000) / 4 + 1;
    const std::uint64_t per_low = test::iterations(2000) / 4 + 1;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (std::uint64_t i = 0; i < per_high; ++i) {
                lock_guard<TypeParam> guard(lock);
                cs.enter_and_leave();
            }
        });
        threads.emplace_back([&] {
            for (std::uint64_t i = 0; i < per_low; ++i) {
                low_priority_guard<TypeParam> guard(lock);
                cs.enter_and_leave();
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    EXPECT_EQ(cs.counter, 4 * (per_high + per_low));
    EXPECT_EQ(cs.overlaps.load(std::memory_order_relaxed), 0U);
    std::thread([&] {
        ASSERT_TRUE(lock.try_lock_low());
        lock.unlock_low();
        ASSERT_TRUE(lock.try_lock());
        lock.unlock();
    }).join();
}

// ------------------------------------------------------------------ hmcs_lock

TEST(hmcs_lock, synthetic_levels)
{
    EXPECT_EQ(hmcs_lock({2, 2, 2}, 4).levels(), 3U);
    EXPECT_EQ(hmcs_lock({4, 2}, 4).levels(), 2U);
    EXPECT_EQ(hmcs_lock({8}, 4).levels(), 1U);
    EXPECT_GE(hmcs_lock().levels(), 1U);
    EXPECT_LE(hmcs_lock().levels(), detail::hmcs_hierarchy::k_max_levels);
}

TEST(hmcs_lock, mutual_exclusion_for_every_threshold_and_shape)
{
    const std::vector<std::vector<std::uint32_t>> shapes = {{2, 2, 2}, {4, 2}, {3, 1, 2}, {16}};
    for (const auto &shape : shapes) {
        for (std::uint32_t threshold : {1U, 2U, 64U}) {
            hmcs_lock lock(shape, threshold);
            cs_checker cs;
            const std::uint64_t per_thread = test::iterations(40000) / 12 + 1;
            run_threads(12, [&](unsigned) {
                for (std::uint64_t i = 0; i < per_thread; ++i) {
                    lock_guard<hmcs_lock> guard(lock);
                    cs.enter_and_leave();
                }
            });
            EXPECT_EQ(cs.counter, 12 * per_thread) << "threshold " << threshold;
            EXPECT_EQ(cs.overlaps.load(std::memory_order_relaxed), 0U);
        }
    }
}

// Cohort passing: the owner (slow path, at leaf A) has a neighbour queued at leaf A and a
// remote thread queued at the root. Below the threshold the neighbour enters first; at
// threshold 1 the lock goes up and the remote thread, first at the root, enters first.
TEST(hmcs_lock, cohort_passing_follows_threshold)
{
    enum role { exit_now, neighbour, remote };
    struct helper {
        std::promise<role> role_p;
        std::thread thread;
    };

    for (std::uint32_t threshold : {1U, 8U}) {
        hmcs_lock lock({2, 2}, threshold); // leaves {0,1} and {2,3}
        const std::uint32_t my_leaf = hmcs_lock_test_access::leaf_of_slot(
            lock, hmcs_lock_test_access::caller_slot(lock));
        std::vector<char> order; // guarded by lock
        std::atomic<bool> remote_holds{false};

        // Start threads until one shares the owner's leaf and one does not (slots are
        // handed out round robin, so a few threads suffice); each reports its slot first.
        std::unique_ptr<helper> near;
        std::unique_ptr<helper> far;
        while (near == nullptr || far == nullptr) {
            auto h = std::make_unique<helper>();
            std::promise<std::uint32_t> slot_p;
            std::future<std::uint32_t> slot_f = slot_p.get_future();
            h->thread = std::thread([&lock, &order, &remote_holds, slot_p = std::move(slot_p),
                                     role_f = h->role_p.get_future()]() mutable {
                slot_p.set_value(hmcs_lock_test_access::caller_slot(lock));
                switch (role_f.get()) {
                case exit_now:
                    return;
                case remote:
                    lock.lock(); // fast path: the whole lock is free
                    remote_holds.store(true, std::memory_order_relaxed);
                    // Leave only once the owner queued (at its leaf, then the root).
                    wait_for([&] { return !lock.no_waiters(); });
                    lock.unlock();
                    lock.lock(); // slow path: queues at the root behind the owner's cohort
                    order.push_back('R');
                    lock.unlock();
                    return;
                case neighbour:
                    lock.lock(); // queues at leaf A behind the owner
                    order.push_back('N');
                    lock.unlock();
                    return;
                }
            });
            const bool same_leaf =
                hmcs_lock_test_access::leaf_of_slot(lock, slot_f.get()) == my_leaf;
            if (same_leaf && near == nullptr) {
                near = std::move(h);
            } else if (!same_leaf && far == nullptr) {
                far = std::move(h);
            } else {
                h->role_p.set_value(exit_now);
                h->thread.join();
            }
        }

        far->role_p.set_value(remote);
        wait_for([&] { return remote_holds.load(std::memory_order_relaxed); });
        lock.lock(); // the root is held: slow path through leaf A
        ASSERT_TRUE(hmcs_lock_test_access::owner_queued_at_leaf(lock));
        near->role_p.set_value(neighbour);
        wait_for([&] { return hmcs_lock_test_access::leaf_waiter(lock); });
        wait_for([&] { return hmcs_lock_test_access::root_waiter(lock); });
        lock.unlock();
        near->thread.join();
        far->thread.join();

        ASSERT_EQ(order.size(), 2U);
        EXPECT_EQ(std::string(order.begin(), order.end()), threshold > 1 ? "NR" : "RN")
            << "threshold " << threshold;
    }
}

TEST(adaptive_spin, starts_low_doubles_within_and_halves_past_its_bounds)
{
    adaptive_spin s(64, 4096);
    EXPECT_EQ(s.budget(), 64U);
    s.outlasted(); // never below lo
    EXPECT_EQ(s.budget(), 64U);
    s.ended_within(0); // ended before the first poll: no evidence either way
    EXPECT_EQ(s.budget(), 64U);
    s.ended_within(10);
    EXPECT_EQ(s.budget(), 128U);
    for (int i = 0; i < 10; ++i) {
        s.ended_within(100);
    }
    EXPECT_EQ(s.budget(), 4096U); // capped at hi
    s.outlasted();
    EXPECT_EQ(s.budget(), 2048U);
    for (int i = 0; i < 5; ++i) {
        s.outlasted();
    }
    EXPECT_EQ(s.budget(), 64U); // back to lo after log2(hi / lo) failed waits
}

TEST(adaptive_spin, bounds_that_are_not_powers_of_two)
{
    adaptive_spin s(3, 10);
    s.ended_within(1);
    EXPECT_EQ(s.budget(), 6U);
    s.ended_within(1);
    EXPECT_EQ(s.budget(), 10U); // 12 capped
    s.outlasted();
    EXPECT_EQ(s.budget(), 5U);
    s.outlasted();
    EXPECT_EQ(s.budget(), 3U); // 2 raised to lo
}

TEST(adaptive_spin, every_probe_period_th_wait_probes_four_times_the_budget)
{
    adaptive_spin s(64, 4096);
    // Waits that need 100 polls outlast a budget of 64 until a probe (256) catches one;
    // from there the budget grows with every wait that ends within it.
    for (std::uint32_t i = 1; i < adaptive_spin::k_probe_period; ++i) {
        ASSERT_EQ(s.next(), 64U);
        s.outlasted();
    }
    ASSERT_EQ(s.next(), 256U);
    s.ended_within(100);
    EXPECT_EQ(s.budget(), 128U);
    EXPECT_EQ(s.next(), 128U);
    s.ended_within(100);
    EXPECT_EQ(s.budget(), 256U);
    // A probe never exceeds hi.
    for (int i = 0; i < 10; ++i) {
        s.ended_within(1);
    }
    for (std::uint32_t i = 0; i < adaptive_spin::k_probe_period; ++i) {
        EXPECT_EQ(s.next(), 4096U);
    }
}

} // namespace
} // namespace mpiv::base
