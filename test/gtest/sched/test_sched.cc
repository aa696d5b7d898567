// The ULT scheduler through its C++ core: spawn/join at scale, ThreadWait/ThreadSignal
// with counting syncs, fairness, stack reuse, finalize with live ULTs, error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "base/stats.hpp"
#include "sched/runtime.hpp"
#include "sched/sync.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/sched/cache_defaults.hpp"
#include "test/gtest/sched/sched_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::sched::runtime;
using mpiv::sched::sync;
using mpiv::test::sched_test;

void *identity(void *arg) { return arg; }

TEST_F(sched_test, spawn_join_from_1_to_100000)
{
    start();
    for (std::uintptr_t n : {1u, 10u, 1000u, static_cast<unsigned>(mpiv::test::iterations(100000, 25))}) {
        std::vector<std::uint64_t> h(n);
        for (std::uintptr_t i = 0; i < n; ++i) {
            h[i] = spawn(identity, reinterpret_cast<void *>(i + 1));
        }
        for (std::uintptr_t i = 0; i < n; ++i) {
            void *r = nullptr;
            ASSERT_EQ(rt_->join(h[i], &r), status::ok);
            ASSERT_EQ(reinterpret_cast<std::uintptr_t>(r), i + 1);
        }
    }
}

struct gate {
    std::atomic<std::uint64_t> arrived{0};
    std::unique_ptr<sync[]> syncs;
};

struct gate_arg {
    gate *g;
    std::size_t i;
};

void *wait_at_gate(void *arg)
{
    auto *a = static_cast<gate_arg *>(arg);
    a->g->arrived.fetch_add(1, std::memory_order_release);
    EXPECT_EQ(a->g->syncs[a->i].wait(), status::ok);
    return nullptr;
}

// One million ULTs alive at once, all blocked in ThreadWait (4,000 under sanitizers:
// ThreadSanitizer counts fibers against its limit of 8,128 threads).
TEST_F(sched_test, one_million_live_ults)
{
    start(2);
    const std::size_t n = mpiv::test::iterations(1000000, 250);
    gate g;
    g.syncs.reset(new sync[n]);
    std::vector<gate_arg> args(n);
    std::vector<std::uint64_t> h(n);
    for (std::size_t i = 0; i < n; ++i) {
        args[i] = gate_arg{&g, i};
        h[i] = spawn(wait_at_gate, &args[i]);
        ASSERT_NE(h[i], 0u) << "spawn " << i << " failed";
    }
    while (g.arrived.load(std::memory_order_acquire) < n) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(rt_->at(0).live() + rt_->at(1).live(), n);
    for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(g.syncs[i].signal(), status::ok);
    }
    for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(rt_->join(h[i], nullptr), status::ok);
    }
    EXPECT_EQ(rt_->at(0).live() + rt_->at(1).live(), 0u);
}

TEST_F(sched_test, signal_before_wait_in_ult_and_pthread)
{
    start();
    sync s(1);
    ASSERT_EQ(s.signal(), status::ok);
    EXPECT_TRUE(s.test());
    auto h = spawn([](void *a) -> void * {
        return reinterpret_cast<void *>(static_cast<std::uintptr_t>(static_cast<sync *>(a)->wait()));
    }, &s);
    void *r = nullptr;
    ASSERT_EQ(rt_->join(h, &r), status::ok);
    EXPECT_EQ(static_cast<int>(reinterpret_cast<std::intptr_t>(r)), MPIV_OK);
    sync t(1);
    ASSERT_EQ(t.signal(), status::ok);
    EXPECT_EQ(t.wait(), status::ok); // pthread: returns at once
}

TEST_F(sched_test, oversignal_is_reported_and_ignored)
{
    sync s(2);
    ASSERT_EQ(s.signal(), status::ok);
    EXPECT_FALSE(s.test());
    ASSERT_EQ(s.signal(), status::ok);
    EXPECT_TRUE(s.test());
    EXPECT_EQ(s.signal(), status::oversignaled);
    EXPECT_TRUE(s.test());
    EXPECT_EQ(s.reset(0), status::invalid_arg);
    EXPECT_EQ(s.reset(1), status::ok);
    EXPECT_FALSE(s.test());
}

// A pthread waiter that has gone to sleep on its futex is woken by a ULT.
TEST_F(sched_test, pthread_waiter_sleeps_and_is_woken)
{
    start();
    sync s(1);
    std::atomic<bool> woke{false};
    std::thread waiter([&] {
        EXPECT_EQ(s.wait(), status::ok);
        woke.store(true, std::memory_order_release);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // past the spin phase
    EXPECT_FALSE(woke.load(std::memory_order_acquire));
    auto h = spawn([](void *a) -> void * {
        EXPECT_EQ(static_cast<sync *>(a)->signal(), status::ok);
        return nullptr;
    }, &s);
    waiter.join();
    EXPECT_TRUE(woke.load());
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
}

TEST_F(sched_test, second_waiter_is_busy)
{
    start();
    sync s(1);
    std::thread waiter([&] { EXPECT_EQ(s.wait(), status::ok); });
    while (!s.has_waiter()) {
        std::this_thread::yield();
    }
    EXPECT_EQ(s.wait(), status::busy);
    EXPECT_EQ(s.reset(1), status::busy);
    ASSERT_EQ(s.signal(), status::ok);
    waiter.join();
}

// Waitall: one sync counts N completions from ULTs on every worker; the waiter wakes
// once, after the N-th, and sees all their writes.
struct waitall_state {
    sync all{64};
    std::atomic<int> done{0};
    int values[64] = {};
};

void *waitall_signaller(void *arg)
{
    auto *st = static_cast<waitall_state *>(arg);
    const int i = st->done.fetch_add(1, std::memory_order_relaxed);
    st->values[i] = i + 1;
    EXPECT_EQ(st->all.signal(), status::ok);
    return nullptr;
}

TEST_F(sched_test, waitall_wakes_once_after_the_last_signal)
{
    start();
    for (bool ult_waiter : {false, true}) {
        waitall_state st;
        std::vector<std::uint64_t> h;
        std::uint64_t waiter_h = 0;
        std::atomic<int> seen_at_wake{-1};
        struct waiter_arg {
            waitall_state *st;
            std::atomic<int> *seen;
        } wa{&st, &seen_at_wake};
        auto wait_fn = [](void *a) -> void * {
            auto *w = static_cast<waiter_arg *>(a);
            EXPECT_EQ(w->st->all.wait(), status::ok);
            int sum = 0;
            for (int v : w->st->values) {
                sum += v > 0 ? 1 : 0;
            }
            w->seen->store(sum, std::memory_order_relaxed);
            return nullptr;
        };
        std::thread pthread_waiter;
        if (ult_waiter) {
            waiter_h = spawn(wait_fn, &wa, 0);
        } else {
            pthread_waiter = std::thread([&] { wait_fn(&wa); });
        }
        for (int i = 0; i < 64; ++i) {
            h.push_back(spawn(waitall_signaller, &st, i % 2));
        }
        for (auto x : h) {
            ASSERT_EQ(rt_->join(x, nullptr), status::ok);
        }
        if (ult_waiter) {
            ASSERT_EQ(rt_->join(waiter_h, nullptr), status::ok);
        } else {
            pthread_waiter.join();
        }
        EXPECT_EQ(seen_at_wake.load(), 64) << (ult_waiter ? "ULT" : "pthread") << " waiter";
    }
}

// Signal storm: ULTs on both workers wait round after round; plain pthreads signal them.
struct storm_ult {
    sync s{1};
    std::atomic<std::uint64_t> ready{0}; ///< rounds armed (the signaller may signal round r once ready > r)
    std::uint64_t rounds = 0;
    std::uint64_t completed = 0;
};

void *storm_body(void *arg)
{
    auto *u = static_cast<storm_ult *>(arg);
    for (std::uint64_t r = 0; r < u->rounds; ++r) {
        // sync: release; pairs with the signaller's acquire: the sync is re-armed.
        u->ready.store(r + 1, std::memory_order_release);
        EXPECT_EQ(u->s.wait(), status::ok);
        ++u->completed;
        EXPECT_EQ(u->s.reset(1), status::ok);
    }
    return nullptr;
}

TEST_F(sched_test, cross_thread_signal_storm)
{
    start();
    constexpr std::size_t n_ults = 128;
    constexpr std::size_t n_signallers = 4;
    const std::uint64_t rounds = mpiv::test::iterations(500);
    std::vector<storm_ult> ults(n_ults);
    std::vector<std::uint64_t> h;
    for (auto &u : ults) {
        u.rounds = rounds;
        h.push_back(spawn(storm_body, &u));
    }
    std::vector<std::thread> signallers;
    for (std::size_t t = 0; t < n_signallers; ++t) {
        signallers.emplace_back([&, t] {
            for (std::uint64_t r = 0; r < rounds; ++r) {
                for (std::size_t i = t; i < n_ults; i += n_signallers) {
                    // sync: acquire; pairs with the release store in storm_body.
                    while (ults[i].ready.load(std::memory_order_acquire) <= r) {
                        std::this_thread::yield();
                    }
                    ASSERT_EQ(ults[i].s.signal(), status::ok);
                }
            }
        });
    }
    for (auto &t : signallers) {
        t.join();
    }
    for (auto x : h) {
        ASSERT_EQ(rt_->join(x, nullptr), status::ok);
    }
    for (auto &u : ults) {
        EXPECT_EQ(u.completed, rounds);
    }
}

// Fairness: with N ULTs yielding in a loop on one worker, a ULT made runnable runs
// within 2 (N + 2) dispatches: its bit is taken by the current pass or the next one.
struct fair_state {
    std::atomic<bool> stop{false};
    sync wake{1};
    std::uint64_t signalled_at = 0;
    std::uint64_t ran_at = 0;
    runtime *rt = nullptr;
};

TEST_F(sched_test, runnable_ult_runs_within_bounded_steps)
{
    start(1);
    constexpr int n = 200;
    const int trials = static_cast<int>(mpiv::test::iterations(20, 4));
    for (int trial = 0; trial < trials; ++trial) {
        fair_state st;
        st.rt = rt_;
        std::vector<std::uint64_t> h;
        auto target = spawn([](void *a) -> void * {
            auto *s = static_cast<fair_state *>(a);
            EXPECT_EQ(s->wake.wait(), status::ok);
            s->ran_at = s->rt->at(0).dispatches();
            return nullptr;
        }, &st, 0);
        for (int i = 0; i < n; ++i) {
            h.push_back(spawn([](void *a) -> void * {
                auto *s = static_cast<fair_state *>(a);
                while (!s->stop.load(std::memory_order_relaxed)) {
                    mpiv::sched::worker::yield_current();
                }
                return nullptr;
            }, &st, 0));
        }
        // A ULT on the same worker signals the target at a scheduling step it records.
        auto signaller = spawn([](void *a) -> void * {
            auto *s = static_cast<fair_state *>(a);
            for (int k = 0; k < 3; ++k) {
                mpiv::sched::worker::yield_current();
            }
            s->signalled_at = s->rt->at(0).dispatches();
            EXPECT_EQ(s->wake.signal(), status::ok);
            return nullptr;
        }, &st, 0);
        ASSERT_EQ(rt_->join(target, nullptr), status::ok);
        st.stop.store(true, std::memory_order_relaxed);
        ASSERT_EQ(rt_->join(signaller, nullptr), status::ok);
        for (auto x : h) {
            ASSERT_EQ(rt_->join(x, nullptr), status::ok);
        }
        ASSERT_GT(st.ran_at, st.signalled_at);
        EXPECT_LE(st.ran_at - st.signalled_at, 2u * (n + 2)) << "trial " << trial;
    }
}

// Direct hand-off: two ULTs of one worker that keep waking each other switch straight to
// one another, bypassing the runset. They must not starve it: a ULT woken from another
// thread still runs within two passes, each at most (ids in the runset) + k_max_streak
// dispatches long.
struct handoff_state {
    sync ping{1};
    sync pong{1};
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> rounds{0};
    sync wake{1};
    std::atomic<bool> target_waiting{false};
    std::atomic<std::uint64_t> ran_at{0};
    runtime *rt = nullptr;
};

// One token goes back and forth. Whoever holds it when stop is set re-arms its own sync,
// passes the token a last time and returns; the partner then returns on receiving it.
void *handoff_ping(void *arg)
{
    auto *st = static_cast<handoff_state *>(arg);
    for (;;) {
        EXPECT_EQ(st->ping.reset(1), status::ok);
        EXPECT_EQ(st->pong.signal(), status::ok);
        EXPECT_EQ(st->ping.wait(), status::ok);
        if (st->stop.load(std::memory_order_relaxed)) {
            EXPECT_EQ(st->ping.reset(1), status::ok);
            EXPECT_EQ(st->pong.signal(), status::ok);
            return nullptr;
        }
        st->rounds.fetch_add(1, std::memory_order_relaxed);
    }
}

void *handoff_pong(void *arg)
{
    auto *st = static_cast<handoff_state *>(arg);
    for (;;) {
        EXPECT_EQ(st->pong.wait(), status::ok);
        EXPECT_EQ(st->pong.reset(1), status::ok);
        EXPECT_EQ(st->ping.signal(), status::ok);
        if (st->stop.load(std::memory_order_relaxed)) {
            return nullptr;
        }
    }
}

TEST_F(sched_test, direct_handoff_does_not_starve_the_runset)
{
    start(1);
    constexpr int n = 50;
    const int trials = static_cast<int>(mpiv::test::iterations(10, 3));
    for (int trial = 0; trial < trials; ++trial) {
        handoff_state st;
        st.rt = rt_;
        std::vector<std::uint64_t> h;
        auto target = spawn([](void *a) -> void * {
            auto *s = static_cast<handoff_state *>(a);
            // sync: release; pairs with the acquire load below: registered soon after.
            s->target_waiting.store(true, std::memory_order_release);
            EXPECT_EQ(s->wake.wait(), status::ok);
            s->ran_at.store(s->rt->at(0).dispatches(), std::memory_order_relaxed);
            return nullptr;
        }, &st, 0);
        for (int i = 0; i < n; ++i) {
            h.push_back(spawn([](void *a) -> void * {
                auto *s = static_cast<handoff_state *>(a);
                while (!s->stop.load(std::memory_order_relaxed)) {
                    mpiv::sched::worker::yield_current();
                }
                return nullptr;
            }, &st, 0));
        }
        h.push_back(spawn(handoff_pong, &st, 0));
        h.push_back(spawn(handoff_ping, &st, 0));
        // sync: acquire; pairs with the release store in the target.
        while (!st.target_waiting.load(std::memory_order_acquire) ||
               st.rounds.load(std::memory_order_relaxed) < 1000) {
            std::this_thread::yield();
        }
        while (!st.wake.has_waiter()) {
            std::this_thread::yield();
        }
        const std::uint64_t signalled_at = rt_->at(0).dispatches();
        ASSERT_EQ(st.wake.signal(), status::ok); // from a pthread: through the runset
        ASSERT_EQ(rt_->join(target, nullptr), status::ok);
        const std::uint64_t rounds_before_stop = st.rounds.load(std::memory_order_relaxed);
        st.stop.store(true, std::memory_order_relaxed);
        for (auto x : h) {
            ASSERT_EQ(rt_->join(x, nullptr), status::ok);
        }
        const std::uint64_t ran_at = st.ran_at.load(std::memory_order_relaxed);
        ASSERT_GT(ran_at, signalled_at);
        EXPECT_LE(ran_at - signalled_at, 2u * (n + 3 + mpiv::sched::worker::k_max_streak))
            << "trial " << trial;
        EXPECT_GE(rounds_before_stop, 1000u);
    }
}

// A ULT that spawns and joins children on its own worker hands the worker to each child
// and back directly; the children's stacks come from the worker-private cache.
TEST_F(sched_test, local_spawn_join_hands_off_and_reuses_stacks)
{
    start(2);
    struct result {
        std::set<std::uintptr_t> pages;
        bool ok = true;
    } res;
    auto parent = spawn([](void *a) -> void * {
        auto *r = static_cast<result *>(a);
        runtime *rt = runtime::get();
        for (int i = 0; i < 1000; ++i) {
            std::uint64_t h = 0;
            if (rt->spawn([](void *) -> void * {
                    int local = 0;
                    return reinterpret_cast<void *>(reinterpret_cast<std::uintptr_t>(&local) >> 12);
                }, nullptr, MPIV_WORKER_ANY, false, h) != status::ok) {
                r->ok = false;
                break;
            }
            void *page = nullptr;
            if (rt->join(h, &page) != status::ok) {
                r->ok = false;
                break;
            }
            r->pages.insert(reinterpret_cast<std::uintptr_t>(page));
        }
        return nullptr;
    }, &res, 1);
    ASSERT_EQ(rt_->join(parent, nullptr), status::ok);
    EXPECT_TRUE(res.ok);
    EXPECT_LE(res.pages.size(), 2u) << "sequential local ULTs should reuse one cached stack";
}

TEST_F(sched_test, stacks_are_reused)
{
    start(1);
    std::set<std::uintptr_t> pages;
    for (int i = 0; i < 1000; ++i) {
        auto h = spawn([](void *) -> void * {
            int local = 0;
            return reinterpret_cast<void *>(reinterpret_cast<std::uintptr_t>(&local) >> 12);
        }, nullptr);
        void *r = nullptr;
        ASSERT_EQ(rt_->join(h, &r), status::ok);
        pages.insert(reinterpret_cast<std::uintptr_t>(r));
    }
    EXPECT_LE(pages.size(), 2u) << "sequential ULTs should reuse one cached stack";
}

TEST_F(sched_test, guard_page_policy)
{
    start(1, 1024, MPIV_GUARD_PAGES_NEVER);
    auto h = spawn(identity, nullptr);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    EXPECT_EQ(rt_->stacks().guarded(), 0u);
    ASSERT_EQ(runtime::finalize(), status::ok);
    start(1, 1024, MPIV_GUARD_PAGES_AUTO);
    h = spawn(identity, nullptr);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    EXPECT_EQ(rt_->stacks().guarded(), 2u); // the ULT's and the worker's scratch stack
}

TEST_F(sched_test, finalize_with_live_ults_reports_busy)
{
    start();
    sync s(1);
    auto h = spawn([](void *a) -> void * {
        EXPECT_EQ(static_cast<sync *>(a)->wait(), status::ok);
        return nullptr;
    }, &s);
    EXPECT_EQ(runtime::finalize(), status::busy);
    ASSERT_NE(runtime::get(), nullptr) << "a refused finalize must leave the runtime usable";
    ASSERT_EQ(s.signal(), status::ok);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
}

TEST_F(sched_test, join_errors)
{
    start();
    auto h = spawn(identity, nullptr);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    EXPECT_EQ(rt_->join(h, nullptr), status::already_joined);
    EXPECT_EQ(rt_->join(0, nullptr), status::invalid_handle);
    EXPECT_EQ(rt_->join(mpiv::sched::worker::make_handle(1, 7, 0), nullptr), status::invalid_handle);
    EXPECT_EQ(rt_->join(mpiv::sched::worker::make_handle(1, 0, 99999), nullptr), status::invalid_handle);
    EXPECT_EQ(rt_->join(h + (std::uint64_t{5} << 32), nullptr), status::invalid_handle);
    // The id is reused by the next spawn; the old handle still says "already joined".
    auto h2 = spawn(identity, nullptr, mpiv::sched::worker::handle_worker(h));
    EXPECT_EQ(rt_->join(h, nullptr), status::already_joined);
    EXPECT_EQ(rt_->join(h2, nullptr), status::ok);
    // A ULT joining itself.
    auto self_join = spawn([](void *a) -> void * {
        auto *rt = static_cast<runtime *>(a);
        const auto *u = mpiv::sched::worker::current_ult();
        return reinterpret_cast<void *>(static_cast<std::intptr_t>(rt->join(u->handle, nullptr)));
    }, rt_);
    void *r = nullptr;
    ASSERT_EQ(rt_->join(self_join, &r), status::ok);
    EXPECT_EQ(static_cast<status>(reinterpret_cast<std::intptr_t>(r)), status::deadlock);
}

TEST_F(sched_test, spawn_errors_and_capacity)
{
    start(1, 64);
    std::uint64_t h = 0;
    EXPECT_EQ(rt_->spawn(identity, nullptr, 1, false, h), status::invalid_arg);
    EXPECT_EQ(rt_->spawn(identity, nullptr, -2, false, h), status::invalid_arg);
    std::unique_ptr<sync[]> syncs(new sync[64]);
    std::vector<std::uint64_t> hs;
    for (int i = 0; i < 64; ++i) {
        hs.push_back(spawn([](void *a) -> void * {
            EXPECT_EQ(static_cast<sync *>(a)->wait(), status::ok);
            return nullptr;
        }, &syncs[i]));
    }
    EXPECT_EQ(rt_->spawn(identity, nullptr, 0, false, h), status::capacity);
    for (int i = 0; i < 64; ++i) {
        ASSERT_EQ(syncs[i].signal(), status::ok);
        ASSERT_EQ(rt_->join(hs[i], nullptr), status::ok);
    }
    EXPECT_EQ(rt_->spawn(identity, nullptr, 0, false, h), status::ok) << "capacity comes back after joins";
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
}

TEST_F(sched_test, detached_ults_are_reclaimed_and_not_joinable)
{
    start(1, 64);
    std::atomic<int> ran{0};
    for (int i = 0; i < 1000; ++i) { // far more than the capacity: ids are recycled
        std::uint64_t h = 0;
        ASSERT_EQ(rt_->spawn([](void *a) -> void * {
            static_cast<std::atomic<int> *>(a)->fetch_add(1, std::memory_order_relaxed);
            return nullptr;
        }, &ran, 0, true, h), status::ok);
        if (i % 32 == 31) {
            while (ran.load(std::memory_order_relaxed) <= i - 16) {
                std::this_thread::yield();
            }
        }
        if (i == 0) {
            while (ran.load() == 0) {
                std::this_thread::yield();
            }
            EXPECT_EQ(rt_->join(h, nullptr), status::already_joined);
        }
    }
    // Counting the bodies is not enough: wait until every detached ULT has exited.
    while (ran.load() < 1000 || rt_->at(0).live() != 0) {
        std::this_thread::yield();
    }
}

TEST_F(sched_test, init_parameter_errors)
{
    mpiv_params_t p{};
    p.field_mask = MPIV_PARAM_FIELD_STACK_SIZE;
    p.stack_size = 4096;
    EXPECT_EQ(runtime::init(&p), status::param);
    p.field_mask = MPIV_PARAM_FIELD_MAX_ULTS;
    p.max_ults_per_worker = (1u << 20) + 1;
    EXPECT_EQ(runtime::init(&p), status::param);
    p.field_mask = MPIV_PARAM_FIELD_CPUSET;
    p.cpuset = "not-a-cpuset";
    EXPECT_EQ(runtime::init(&p), status::param);
    p.cpuset = "4000-4001";
    EXPECT_EQ(runtime::init(&p), status::topology);
    p.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS;
    p.num_workers = 0;
    EXPECT_EQ(runtime::init(&p), status::param);
    p.field_mask = MPIV_PARAM_FIELD_GUARD_PAGES;
    const int bad_policy = 7; // as a C caller could pass it
    std::memcpy(&p.guard_pages, &bad_policy, sizeof(bad_policy));
    EXPECT_EQ(runtime::init(&p), status::param);
    EXPECT_EQ(runtime::get(), nullptr);
    EXPECT_EQ(runtime::finalize(), status::not_initialized);
    // Reference counting: two inits need two finalizes.
    ASSERT_EQ(runtime::init(nullptr), status::ok);
    ASSERT_EQ(runtime::init(nullptr), status::ok);
    ASSERT_EQ(runtime::finalize(), status::ok);
    EXPECT_NE(runtime::get(), nullptr);
    ASSERT_EQ(runtime::finalize(), status::ok);
    EXPECT_EQ(runtime::get(), nullptr);
}

TEST_F(sched_test, more_workers_than_pus_share_them)
{
    start(5);
    EXPECT_EQ(rt_->num_workers(), 5u);
    std::vector<std::uint64_t> h;
    for (int w = 0; w < 5; ++w) {
        h.push_back(spawn([](void *) -> void * {
            return reinterpret_cast<void *>(static_cast<std::uintptr_t>(mpiv::sched::worker::current()->id()));
        }, nullptr, w));
    }
    for (int w = 0; w < 5; ++w) {
        void *r = nullptr;
        ASSERT_EQ(rt_->join(h[w], &r), status::ok);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r), static_cast<std::uintptr_t>(w));
    }
}

// ------------------------------------------------------------------ the scratch stack

using mpiv::sched::worker;

bool within(std::uintptr_t a, const mpiv::sched::stack_region &r)
{
    const auto lo = reinterpret_cast<std::uintptr_t>(r.lo);
    return a >= lo && a < lo + r.size;
}

std::uintptr_t frame_here() __attribute__((noinline));
std::uintptr_t frame_here() { return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)); }

// Where a ULT's on_scratch() calls ran, against its own stack.
struct scratch_probe {
    mpiv::sched::stack_region own;
    std::uintptr_t outer = 0;  // the call's frame
    std::uintptr_t nested = 0; // a call made inside it
    bool wanted_inside = true; // scratch_wanted() inside the call
};

void *probe_scratch(void *arg)
{
    auto *p = static_cast<scratch_probe *>(arg);
    p->own = worker::current_ult()->stack;
    worker::on_scratch([p] {
        p->outer = frame_here();
        p->wanted_inside = worker::scratch_wanted();
        worker::on_scratch([p] { p->nested = frame_here(); });
    });
    return nullptr;
}

// From a ULT the call runs on another stack than the ULT's own; a call nested in it runs
// in place, on that stack; from a pthread a call runs in place.
TEST_F(sched_test, on_scratch_runs_a_ults_call_on_the_workers_scratch_stack)
{
    start(1, 1u << 20, MPIV_GUARD_PAGES_AUTO, 0);
    EXPECT_EQ(rt_->at(0).scratch_ults(), 0u);
    using mpiv::base::stats::counter;
    const std::uint64_t calls0 = mpiv::base::stats::read(counter::scratch_calls);
    for (int i = 0; i < 3; ++i) {
        scratch_probe p;
        ASSERT_EQ(rt_->join(spawn(probe_scratch, &p), nullptr), status::ok);
        EXPECT_FALSE(within(p.outer, p.own)) << "the call ran on the ULT's own stack";
        EXPECT_FALSE(p.wanted_inside) << "the scratch stack is lent out during the call";
        EXPECT_FALSE(within(p.nested, p.own));
        EXPECT_LE(p.nested, p.outer) << "the nested call did not run in place, below the outer";
        EXPECT_LT(p.outer - p.nested, std::uintptr_t{4096});
    }
    EXPECT_EQ(mpiv::base::stats::read(counter::scratch_calls) - calls0, 3u)
        << "one call a ULT on the scratch stack, the nested ones in place";
    EXPECT_FALSE(worker::scratch_wanted()); // not a ULT
    const std::uintptr_t mine = frame_here();
    std::uintptr_t inner = 0;
    worker::on_scratch([&] { inner = frame_here(); });
    EXPECT_LT(mine > inner ? mine - inner : inner - mine, std::uintptr_t{4096})
        << "a pthread's call did not run in place";
}

// Below scratch_ults live ULTs a worker's ULTs make their calls on their own stacks.
TEST_F(sched_test, on_scratch_waits_for_enough_live_ults)
{
    constexpr unsigned k_threshold = 8;
    start(1, 1u << 20, MPIV_GUARD_PAGES_AUTO, k_threshold);
    std::vector<std::unique_ptr<sync>> holds; // one waiter per sync
    std::vector<std::uint64_t> held;
    // Each blocker is one more live ULT; the probe itself counts too.
    for (unsigned live = 0; live + 1 < k_threshold; ++live) {
        scratch_probe p;
        ASSERT_EQ(rt_->join(spawn(probe_scratch, &p, 0), nullptr), status::ok);
        EXPECT_TRUE(within(p.outer, p.own)) << "scratch stack used with " << live + 1
                                            << " live ULTs, below " << k_threshold;
        holds.push_back(std::make_unique<sync>(1));
        held.push_back(spawn([](void *a) -> void * {
            EXPECT_EQ(static_cast<sync *>(a)->wait(), status::ok);
            return nullptr;
        }, holds.back().get(), 0));
    }
    scratch_probe p;
    ASSERT_EQ(rt_->join(spawn(probe_scratch, &p, 0), nullptr), status::ok);
    EXPECT_FALSE(within(p.outer, p.own)) << "scratch stack unused with " << k_threshold
                                         << " live ULTs";
    for (auto &h : holds) {
        ASSERT_EQ(h->signal(), status::ok);
    }
    for (auto h : held) {
        ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    }
    scratch_probe q;
    ASSERT_EQ(rt_->join(spawn(probe_scratch, &q, 0), nullptr), status::ok);
    EXPECT_TRUE(within(q.outer, q.own)) << "the reaped ULTs still count as live";
}

// A ULT that blocks inside its call keeps the scratch stack: the calls of its worker's
// other ULTs meanwhile run on their own stacks, and once it has returned the scratch
// stack serves again (its frames were not overwritten: the blocked call finishes right).
struct lend_state {
    sync blocked{1};  // the first ULT is blocked inside its call
    sync release{1};  // lets it go on
    scratch_probe first, second, third;
    int first_checksum = 0;
};

TEST_F(sched_test, on_scratch_lends_the_stack_to_a_call_that_blocks)
{
    start(1, 1u << 20, MPIV_GUARD_PAGES_AUTO, 0);
    lend_state st;
    auto h1 = spawn([](void *a) -> void * {
        auto *s = static_cast<lend_state *>(a);
        s->first.own = worker::current_ult()->stack;
        worker::on_scratch([s] {
            volatile int local[64];
            for (int i = 0; i < 64; ++i) {
                local[i] = i;
            }
            s->first.outer = frame_here();
            EXPECT_EQ(s->blocked.signal(), status::ok);
            EXPECT_EQ(s->release.wait(), status::ok); // blocks this ULT, on the scratch stack
            for (int i = 0; i < 64; ++i) {
                s->first_checksum += local[i];
            }
        });
        return nullptr;
    }, &st, 0);
    ASSERT_EQ(st.blocked.wait(), status::ok);
    ASSERT_EQ(rt_->join(spawn(probe_scratch, &st.second, 0), nullptr), status::ok);
    ASSERT_EQ(st.release.signal(), status::ok);
    ASSERT_EQ(rt_->join(h1, nullptr), status::ok);
    ASSERT_EQ(rt_->join(spawn(probe_scratch, &st.third, 0), nullptr), status::ok);
    EXPECT_FALSE(within(st.first.outer, st.first.own));
    EXPECT_TRUE(within(st.second.outer, st.second.own))
        << "a second ULT used the scratch stack lent to a blocked one";
    EXPECT_EQ(st.first_checksum, 63 * 64 / 2) << "the blocked call's frame was overwritten";
    EXPECT_FALSE(within(st.third.outer, st.third.own)) << "the scratch stack was not given back";
    EXPECT_LT(st.first.outer > st.third.outer ? st.first.outer - st.third.outer
                                              : st.third.outer - st.first.outer,
              std::uintptr_t{4096})
        << "the third call ran on another stack than the first";
}

// The default for worker w of n: its share of its last-level cache / 8 KiB (4,096 without
// cache information).
std::uint32_t expected_default_scratch_ults(unsigned n, unsigned w)
{
    return mpiv::test::expected_cache_default(n, w, mpiv::test::cache_pick::last_level, 8192, 4096);
}

TEST_F(sched_test, scratch_ults_parameter_and_default)
{
    start(2, 1u << 20, MPIV_GUARD_PAGES_AUTO, 123);
    EXPECT_EQ(rt_->at(0).scratch_ults(), 123u);
    EXPECT_EQ(rt_->at(1).scratch_ults(), 123u);
    ASSERT_EQ(runtime::finalize(), status::ok);
    // (The expected values are read while no worker runs, as the runtime reads them.)
    const std::uint32_t alone = expected_default_scratch_ults(1, 0);
    start(1);
    EXPECT_EQ(rt_->at(0).scratch_ults(), alone);
    ASSERT_EQ(runtime::finalize(), status::ok);
    // Workers under one last-level cache share it: each counts against its part.
    std::uint32_t four[4];
    for (unsigned w = 0; w < 4; ++w) {
        four[w] = expected_default_scratch_ults(4, w);
    }
    start(4);
    for (unsigned w = 0; w < 4; ++w) {
        EXPECT_EQ(rt_->at(w).scratch_ults(), four[w]) << "worker " << w;
    }
    ASSERT_EQ(runtime::finalize(), status::ok);
    // Never: no scratch stack is taken from the pool at all.
    start(1, 1024, MPIV_GUARD_PAGES_AUTO, UINT32_MAX);
    ASSERT_EQ(rt_->join(spawn(identity, nullptr), nullptr), status::ok);
    EXPECT_EQ(rt_->stacks().guarded(), 1u) << "a scratch stack was made for a worker that never uses it";
}

} // namespace
