// engine: its levels (mpiv_p2p_levels): the posted-list high-water mark counted while
// mpiv_p2p_track_posted is on, from one thread and under threads (fixture in
// engine_fixture.hpp).
#include "test/gtest/endpoints/engine_fixture.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace {

// With the engines' thread-safe paths, and told that calls never overlap (serialized).
class level_modes : public engine_test, public ::testing::WithParamInterface<bool> {
  protected:
    void SetUp() override
    {
        engine_test::SetUp();
        serialized_ = GetParam();
    }
};

// The posted-list high-water mark (mpiv_p2p_track_posted): counted only while on, exact
// in one thread, kept when receives leave, restarted at the tracked level when turned on.
TEST_P(level_modes, posted_max_counts_tracked_receives)
{
    start();
    const auto posted_max = [&] {
        mpiv_p2p_levels_t l{};
        eng(1).levels(l);
        return l.posted_max;
    };
    long sink[8] = {};
    rop untracked[2];
    for (int i = 0; i < 2; ++i) {
        recv(1, 0, 100 + i, &sink[i], sizeof(long), untracked[i]);
        ASSERT_EQ(untracked[i].rc, status::inprogress);
    }
    EXPECT_EQ(posted_max(), 0U) << "not counted while off";
    eng(1).track_posted(true);
    EXPECT_EQ(posted_max(), 0U) << "a new mark starts at the tracked level";
    rop tracked[3];
    for (int i = 0; i < 3; ++i) {
        recv(1, 0, 200 + i, &sink[2 + i], sizeof(long), tracked[i]);
        ASSERT_EQ(tracked[i].rc, status::inprogress);
    }
    EXPECT_EQ(posted_max(), 3U);
    EXPECT_EQ(eng(1).cancel(tracked[0].op), status::ok);
    const long word = 42;
    sop s[2];
    for (int i = 0; i < 2; ++i) {
        send(0, 1, 201 + i, &word, sizeof word, s[i]);
        EXPECT_EQ(finish(tracked[1 + i]).error, MPIV_OK);
        EXPECT_EQ(finish(s[i]).error, MPIV_OK);
    }
    EXPECT_EQ(posted_max(), 3U) << "the mark stays when they leave";
    eng(1).track_posted(false);
    rop off;
    recv(1, 0, 300, &sink[5], sizeof(long), off);
    EXPECT_EQ(eng(1).cancel(off.op), status::ok);
    EXPECT_EQ(posted_max(), 3U);
    eng(1).track_posted(true);
    EXPECT_EQ(posted_max(), 0U) << "every tracked receive left: the level is 0 again";
    rop again;
    recv(1, k_any, 301, &sink[6], sizeof(long), again); // a wildcard one counts too
    EXPECT_EQ(posted_max(), 1U);
    EXPECT_EQ(eng(1).cancel(again.op), status::ok);
    for (auto &u : untracked) {
        EXPECT_EQ(eng(1).cancel(u.op), status::ok);
    }
    eng(1).track_posted(false);
    eng(1).track_posted(true);
    EXPECT_EQ(posted_max(), 0U) << "untracked receives never touched the level";
}

// Threads post and the arrivals match at once with the mark on: it never passes what could
// wait at once, and every add has its subtract (turned off and on, it restarts at 0).
TEST_F(engine_test, posted_max_under_threads)
{
    start();
    constexpr int k_threads = 4, k_window = 8, k_rounds = 40;
    eng(1).track_posted(true);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t) {
        threads.emplace_back([&, t] {
            long sink[k_window];
            for (int round = 0; round < k_rounds; ++round) {
                rop r[k_window];
                for (int k = 0; k < k_window; ++k) {
                    recv(1, 0, t * 1000 + k, &sink[k], sizeof(long), r[k]);
                }
                for (int k = 0; k < k_window; ++k) {
                    if (finish(r[k]).error != MPIV_OK || sink[k] != round) {
                        failures.fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
        });
    }
    // The sender: each thread's window of the round, in order (its receives may not be
    // posted yet: then the messages wait as unexpected).
    std::thread sender([&] {
        for (long round = 0; round < k_rounds; ++round) {
            for (int t = 0; t < k_threads; ++t) {
                for (int k = 0; k < k_window; ++k) {
                    sop s;
                    send(0, 1, t * 1000 + k, &round, sizeof round, s);
                    if (finish(s).error != MPIV_OK) {
                        failures.fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
        }
    });
    sender.join();
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(failures.load(), 0);
    mpiv_p2p_levels_t l{};
    eng(1).levels(l);
    EXPECT_LE(l.posted_max, static_cast<std::uint64_t>(k_threads * k_window));
    eng(1).track_posted(false);
    eng(1).track_posted(true);
    eng(1).levels(l);
    EXPECT_EQ(l.posted_max, 0U) << "an add without its subtract";
}

INSTANTIATE_TEST_SUITE_P(threads, level_modes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                             return info.param ? std::string("serialized") : std::string("multiple");
                         });

} // namespace
