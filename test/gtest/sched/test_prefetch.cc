// The scheduler's stack prefetch: its threshold (parameter, and the default from the
// level-2 cache), that it runs from the threshold on and not below or when disabled, and
// that ULTs run right under it while they yield, block, exit and are spawned from other
// threads (run under ThreadSanitizer and AddressSanitizer in CI).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "base/stats.hpp"
#include "sched/runtime.hpp"
#include "sched/sync.hpp"
#include "sched/worker.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/sched/cache_defaults.hpp"
#include "test/gtest/sched/sched_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::sched::runtime;
using mpiv::sched::sync;
using mpiv::sched::worker;
using mpiv::test::sched_test;

// The default for worker w of n: its share of its level-2 cache / 2 KiB (256 without
// cache information).
std::uint32_t expected_default_prefetch_ults(unsigned n, unsigned w)
{
    return mpiv::test::expected_cache_default(n, w, mpiv::test::cache_pick::level2, 2048, 256);
}

TEST_F(sched_test, prefetch_ults_parameter_and_default)
{
    start(2, 1u << 20, MPIV_GUARD_PAGES_AUTO, -1, 123);
    EXPECT_EQ(rt_->at(0).prefetch_ults(), 123u);
    EXPECT_EQ(rt_->at(1).prefetch_ults(), 123u);
    ASSERT_EQ(runtime::finalize(), status::ok);
    // (The expected values are read while no worker runs, as the runtime reads them.)
    const std::uint32_t alone = expected_default_prefetch_ults(1, 0);
    start(1);
    EXPECT_EQ(rt_->at(0).prefetch_ults(), alone);
    ASSERT_EQ(runtime::finalize(), status::ok);
    // Workers under one level-2 cache share it: each counts against its part.
    std::uint32_t four[4];
    for (unsigned w = 0; w < 4; ++w) {
        four[w] = expected_default_prefetch_ults(4, w);
    }
    start(4);
    for (unsigned w = 0; w < 4; ++w) {
        EXPECT_EQ(rt_->at(w).prefetch_ults(), four[w]) << "worker " << w;
    }
}

// A ULT that yields until `go`, then `rounds` times more, keeping a running sum in its
// stack frame across its turns (which the scheduler's reads of its neighbours' slots,
// descriptors and stacks must not disturb).
struct yielder {
    const std::atomic<bool> *go = nullptr;
    int rounds = 0;
    std::uint64_t sum = 0;
};

constexpr int k_locals = 16;

void *yield_rounds(void *arg)
{
    auto *y = static_cast<yielder *>(arg);
    volatile std::uint64_t local[k_locals];
    for (int i = 0; i < k_locals; ++i) {
        local[i] = static_cast<std::uint64_t>(i);
    }
    // acquire: pairs with the release store that starts the rounds (nothing else to see).
    while (y->go != nullptr && !y->go->load(std::memory_order_acquire)) {
        worker::yield_current();
    }
    for (int r = 0; r < y->rounds; ++r) {
        for (int i = 0; i < k_locals; ++i) {
            local[i] = local[i] + static_cast<std::uint64_t>(r);
        }
        worker::yield_current();
    }
    for (int i = 0; i < k_locals; ++i) {
        y->sum += local[i];
    }
    return nullptr;
}

std::uint64_t expected_sum(int rounds)
{
    const std::uint64_t r = static_cast<std::uint64_t>(rounds);
    return k_locals * (k_locals - 1) / 2 + k_locals * (r * (r - 1) / 2);
}

// Prefetched ULT turns so far, process-wide.
std::uint64_t prefetches()
{
    return mpiv::base::stats::read(mpiv::base::stats::counter::stack_prefetches);
}

// n yielders on worker 0, all live while they take their rounds; returns the turns
// prefetched and what worker 0 dispatched meanwhile.
std::pair<std::uint64_t, std::uint64_t> run_yielders(runtime *rt, unsigned n, int rounds)
{
    std::atomic<bool> go{false};
    std::vector<yielder> ys(n);
    std::vector<std::uint64_t> hs(n);
    for (unsigned i = 0; i < n; ++i) {
        ys[i].go = &go;
        ys[i].rounds = rounds;
        EXPECT_EQ(rt->spawn(yield_rounds, &ys[i], 0, false, hs[i]), status::ok);
    }
    const std::uint64_t p0 = prefetches(), d0 = rt->at(0).dispatches();
    // release: pairs with the yielders' acquire loads.
    go.store(true, std::memory_order_release);
    for (unsigned i = 0; i < n; ++i) {
        EXPECT_EQ(rt->join(hs[i], nullptr), status::ok);
        EXPECT_EQ(ys[i].sum, expected_sum(rounds)) << "ULT " << i;
    }
    return {prefetches() - p0, rt->at(0).dispatches() - d0};
}

TEST_F(sched_test, prefetch_runs_from_prefetch_ults_live_ults_on)
{
    constexpr unsigned k_threshold = 32;
    start(1, 1u << 20, MPIV_GUARD_PAGES_AUTO, -1, k_threshold);
    // Below the threshold (the yielders are all the live ULTs there are): none.
    const auto below = run_yielders(rt_, k_threshold - 1, 20);
    EXPECT_EQ(below.first, 0u) << "prefetched with " << k_threshold - 1 << " live ULTs";
    EXPECT_GT(below.second, 0u);
    // From the threshold on: each dispatch that has a successor in its runset word.
    const auto above = run_yielders(rt_, 4 * k_threshold, 20);
    EXPECT_GT(above.first, 0u) << "nothing prefetched with " << 4 * k_threshold << " live ULTs";
    EXPECT_LE(above.first, above.second);
    ASSERT_EQ(runtime::finalize(), status::ok);
    // Never.
    start(1, 1u << 20, MPIV_GUARD_PAGES_AUTO, -1, UINT32_MAX);
    EXPECT_EQ(run_yielders(rt_, 256, 20).first, 0u);
}

// Two workers that always prefetch run yielders, ULTs that block on syncs signalled from
// a pthread (their wakes come through the runset from another thread), half of them
// inside a call on their worker's scratch stack (their saved stack pointer is not in
// their own stack), and short ULTs that a pthread spawns and joins meanwhile (ids exit
// and are reused while the schedulers look ahead at them).
struct churn {
    std::atomic<bool> stop{false};
    std::unique_ptr<sync[]> syncs;
    std::atomic<unsigned> woken{0};
};

struct blocker_arg {
    churn *c;
    unsigned i;
};

TEST_F(sched_test, prefetching_workers_run_ults_that_block_exit_and_respawn)
{
    start(2, 1u << 20, MPIV_GUARD_PAGES_AUTO, 0, 0);
    const std::uint64_t prefetched0 = prefetches();
    const unsigned yielders = static_cast<unsigned>(mpiv::test::iterations(2000, 10));
    const unsigned blockers = static_cast<unsigned>(mpiv::test::iterations(500, 10));
    const int rounds = static_cast<int>(mpiv::test::iterations(50, 5));
    churn c;
    c.syncs.reset(new sync[blockers]); // each waits for one signal
    std::vector<yielder> ys(yielders);
    std::vector<blocker_arg> bargs(blockers);
    std::vector<std::uint64_t> hs;
    for (unsigned i = 0; i < yielders; ++i) {
        ys[i].rounds = rounds;
        hs.push_back(spawn(yield_rounds, &ys[i], static_cast<int>(i % 2)));
    }
    for (unsigned i = 0; i < blockers; ++i) {
        bargs[i] = {&c, i};
        hs.push_back(spawn(
            [](void *a) -> void * {
                auto *b = static_cast<blocker_arg *>(a);
                if (b->i % 2 == 0) {
                    EXPECT_EQ(b->c->syncs[b->i].wait(), status::ok);
                } else {
                    worker::on_scratch([b] { EXPECT_EQ(b->c->syncs[b->i].wait(), status::ok); });
                }
                b->c->woken.fetch_add(1, std::memory_order_relaxed);
                worker::yield_current();
                return nullptr;
            },
            &bargs[i], static_cast<int>(i % 2)));
    }
    std::uint64_t short_lived = 0;
    std::thread spawner([&] {
        do { // at least once, however soon the ULTs are done
            std::uint64_t h = 0;
            const void *arg = reinterpret_cast<void *>(short_lived + 1);
            ASSERT_EQ(rt_->spawn([](void *a) -> void * { return a; }, const_cast<void *>(arg),
                                 static_cast<int>(short_lived % 2), false, h),
                      status::ok);
            void *r = nullptr;
            ASSERT_EQ(rt_->join(h, &r), status::ok);
            ASSERT_EQ(r, arg);
            ++short_lived;
        } while (!c.stop.load(std::memory_order_acquire));
    });
    for (unsigned i = 0; i < blockers; ++i) {
        ASSERT_EQ(c.syncs[i].signal(), status::ok);
    }
    for (std::size_t i = 0; i < hs.size(); ++i) {
        ASSERT_EQ(rt_->join(hs[i], nullptr), status::ok);
    }
    c.stop.store(true, std::memory_order_release);
    spawner.join();
    EXPECT_EQ(c.woken.load(), blockers);
    for (unsigned i = 0; i < yielders; ++i) {
        EXPECT_EQ(ys[i].sum, expected_sum(rounds)) << "ULT " << i;
    }
    EXPECT_GT(short_lived, 0u);
    EXPECT_GT(prefetches() - prefetched0, 0u);
}

} // namespace
