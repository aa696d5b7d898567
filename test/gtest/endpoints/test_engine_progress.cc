// engine: back-pressure with a tiny queue and pool, waits from pthreads (inline and server
// progress) and from ULTs, and a lone pthread's polling before it waits (fixture in
// engine_fixture.hpp; bad input: test_engine_input.cc).
#include "base/stats.hpp"
#include "test/gtest/endpoints/engine_fixture.hpp"

namespace mpiv::ep {
struct engine_test_access {
    static std::int32_t pthread_waiters(engine &e)
    {
        return e.pthread_waiters_.load(std::memory_order_relaxed);
    }
};
} // namespace mpiv::ep

namespace {

// ------------------------------------------------------------------ back-pressure

struct bp_config {
    std::uint32_t endpoints;
    std::uint32_t packets;
    mpiv_p2p_single_copy_t copy; // NONE: rendezvous bytes through the copy slots
};

class engine_backpressure : public engine_test, public ::testing::WithParamInterface<bp_config> {};

std::size_t bp_size(std::size_t k)
{
    static const std::size_t sizes[] = {8, 24, 200, k_limit, 25, k_limit + 1, 1000, 64,
                                        2 * mpiv::shm::k_copy_piece + 3};
    return sizes[k % (sizeof sizes / sizeof sizes[0])];
}

std::uint32_t bp_seed(int engine, int thread, std::size_t k)
{
    return static_cast<std::uint32_t>(engine * 7919 + thread * 104729 + k * 31);
}

// Two queue slots and one or two packets: several threads of each engine send to the
// other engine while one thread per engine receives; every thread drives both engines.
// Every message arrives once, intact and in its thread's order; every send completes once.
TEST_P(engine_backpressure, many_senders_tiny_queue_and_pool)
{
    const bp_config cfg = GetParam();
    mpiv_p2p_params_t p[2] = {params_for(0), params_for(1)};
    for (auto &x : p) {
        x.queue_slots = 2;
        x.packet_count = cfg.packets;
        x.endpoints = cfg.endpoints;
        x.single_copy = cfg.copy;
    }
    start(p[0], p[1]);
    constexpr int k_senders = 2;
    const std::size_t m = iterations(2000, 10);
    std::atomic<bool> failed{false};
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    const auto expired = [&] {
        if (std::chrono::steady_clock::now() > deadline) {
            failed.store(true, std::memory_order_relaxed);
        }
        return failed.load(std::memory_order_relaxed);
    };
    struct sender_state {
        std::vector<sop> ops;
        std::vector<std::vector<unsigned char>> bufs;
    };
    std::vector<std::unique_ptr<sender_state>> senders;
    std::vector<std::thread> threads;
    std::atomic<std::uint64_t> bad{0};
    std::size_t received[2][k_senders] = {};
    watchdog dog("engine_backpressure");
    for (int e = 0; e < 2; ++e) {
        for (int t = 0; t < k_senders; ++t) {
            senders.push_back(std::make_unique<sender_state>());
            sender_state &ss = *senders.back();
            ss.ops = std::vector<sop>(m);
            ss.bufs.resize(m);
            threads.emplace_back([&, e, t] {
                for (std::size_t k = 0; k < m && !expired(); ++k) {
                    const std::size_t n = bp_size(k);
                    ss.bufs[k] = patterned(n, bp_seed(e, t, k));
                    // Tag t says which thread sent it; the index is in the first 8 bytes.
                    std::memcpy(ss.bufs[k].data(), &k, sizeof k);
                    send(e, 1 - e, t, ss.bufs[k].data(), n, ss.ops[k],
                         k % 5 == 4 ? MPIV_P2P_SEND_SYNC : 0);
                    if (ss.ops[k].rc != status::ok && ss.ops[k].rc != status::inprogress) {
                        bad.fetch_add(1, std::memory_order_relaxed);
                    }
                    pump();
                }
                for (std::size_t k = 0; k < m; ++k) {
                    while (!done(ss.ops[k]) && !expired()) {
                        if (pump() == 0) {
                            std::this_thread::yield();
                        }
                    }
                }
            });
        }
        // Receiver of engine e: a window of four ANY_TAG receives from the other rank.
        threads.emplace_back([&, e] {
            constexpr std::size_t k_window = 4;
            const std::size_t total = m * k_senders;
            std::vector<rop> win(k_window);
            constexpr std::size_t k_cap = 2 * mpiv::shm::k_copy_piece + 3; // bp_size()'s largest
            std::vector<std::vector<unsigned char>> dst(k_window, std::vector<unsigned char>(k_cap));
            std::size_t posted = 0;
            std::size_t taken = 0;
            const auto post = [&] {
                rop &r = win[posted % k_window];
                r.rec.calls.store(0, std::memory_order_relaxed);
                recv(e, 1 - e, k_any, dst[posted % k_window].data(), k_cap, r);
                ++posted;
            };
            while (posted < total && posted < k_window) {
                post();
            }
            while (taken < total && !expired()) {
                rop &r = win[taken % k_window];
                if (!done(r)) {
                    if (pump() == 0) {
                        std::this_thread::yield();
                    }
                    continue;
                }
                const mpiv_p2p_status_t st = r.rc == status::ok ? r.st : r.rec.st;
                const unsigned char *d = dst[taken % k_window].data();
                std::size_t k = 0;
                if (st.tag < 0 || st.tag >= k_senders || st.bytes < sizeof k ||
                    st.error != MPIV_OK || st.source != 1 - e) {
                    bad.fetch_add(1, std::memory_order_relaxed);
                } else {
                    std::memcpy(&k, d, sizeof k);
                    std::size_t &next = received[e][st.tag];
                    const std::uint32_t seed = bp_seed(1 - e, st.tag, k);
                    bool ok = k == next && st.bytes == bp_size(k);
                    for (std::size_t i = sizeof k; ok && i < st.bytes; ++i) {
                        ok = d[i] == pattern(seed, i);
                    }
                    if (!ok) {
                        bad.fetch_add(1, std::memory_order_relaxed);
                    }
                    ++next;
                }
                ++taken;
                if (posted < total) {
                    post();
                }
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    ASSERT_FALSE(failed.load(std::memory_order_relaxed))
        << "timed out: a message or completion was lost; received " << received[0][0] << ' '
        << received[0][1] << ' ' << received[1][0] << ' ' << received[1][1] << " of " << m;
    EXPECT_EQ(bad.load(std::memory_order_relaxed), 0u);
    for (int e = 0; e < 2; ++e) {
        for (int t = 0; t < k_senders; ++t) {
            EXPECT_EQ(received[e][t], m) << "engine " << e << " from thread " << t;
        }
    }
    pump_for(100);
    for (const auto &ss : senders) {
        for (const sop &o : ss->ops) {
            ASSERT_EQ(calls_of(o.rec), o.rc == status::ok ? 0 : 1) << "one completion per send";
            if (o.rc == status::inprogress) {
                EXPECT_EQ(o.rec.st.error, MPIV_OK);
            }
        }
    }
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(0).iprobe(comm(0), k_any, k_any, ps), status::not_found) << "nothing extra";
    EXPECT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::not_found) << "nothing extra";
}

INSTANTIATE_TEST_SUITE_P(queue_2_slots, engine_backpressure,
                         ::testing::Values(bp_config{1, 1, MPIV_P2P_SINGLE_COPY_AUTO},
                                           bp_config{1, 2, MPIV_P2P_SINGLE_COPY_AUTO},
                                           bp_config{2, 2, MPIV_P2P_SINGLE_COPY_AUTO},
                                           bp_config{4, 1, MPIV_P2P_SINGLE_COPY_AUTO},
                                           bp_config{2, 2, MPIV_P2P_SINGLE_COPY_NONE},
                                           bp_config{4, 1, MPIV_P2P_SINGLE_COPY_NONE}),
                         [](const ::testing::TestParamInfo<bp_config> &info) {
                             return "endpoints_" + std::to_string(info.param.endpoints) +
                                    "_packets_" + std::to_string(info.param.packets) +
                                    (info.param.copy == MPIV_P2P_SINGLE_COPY_NONE ? "_two_copies"
                                                                                  : "");
                         });

// ------------------------------------------------------------------ waits

// A round of a waiter (pthread or ULT) of engine 1: k receives of tag `tag` from rank 0 and
// one synchronous send to rank 0 (tag 1000 + tag), all in one wait; progress of engine 1
// comes from the waits only.
constexpr int k_wait_recvs = 3;

std::size_t wait_size(std::size_t round, int j)
{
    static const std::size_t sizes[] = {16, 24, 500, k_limit, k_limit + 1, 40, 9000};
    return sizes[(round * k_wait_recvs + static_cast<std::size_t>(j)) % 7];
}

std::uint32_t wait_seed(int tag, std::size_t round, int j)
{
    return static_cast<std::uint32_t>(tag * 1000003 + round * 7 + static_cast<std::size_t>(j));
}

struct wait_world {
    ep::engine *e[2];
    ep::comm_state *c[2];
    int waiters;
    std::size_t rounds;
    std::atomic<int> finished{0};
    std::atomic<std::uint64_t> bad{0};
};

void waiter_rounds(wait_world &w, int tag)
{
    ep::engine &e = *w.e[1];
    std::vector<std::vector<unsigned char>> dst(k_wait_recvs,
                                                std::vector<unsigned char>(9000 + 16));
    std::uint64_t token = 0;
    for (std::size_t round = 0; round < w.rounds; ++round) {
        rop r[k_wait_recvs];
        sop s;
        ep::waiter *wt = e.wait_begin(k_wait_recvs + 1);
        for (int j = 0; j < k_wait_recvs; ++j) {
            r[j].rec.eng = &e;
            r[j].rec.w = wt;
            r[j].rc = e.irecv(*w.c[1], 0, tag, dst[j].data(), dst[j].size(), &r[j].rec, r[j].op,
                              r[j].st);
            if (r[j].rc == status::ok) {
                e.wake(wt);
            } else if (r[j].rc != status::inprogress) {
                w.bad.fetch_add(1, std::memory_order_relaxed);
                e.wake(wt);
            }
        }
        token = round * 1000 + static_cast<std::uint64_t>(tag);
        s.rec.eng = &e;
        s.rec.w = wt;
        s.rc = e.isend(*w.c[1], 0, 1, 0, 1000 + tag, &token, sizeof token, MPIV_P2P_SEND_SYNC,
                       &s.rec, s.op, s.st);
        if (s.rc != status::inprogress) {
            w.bad.fetch_add(1, std::memory_order_relaxed);
            e.wake(wt);
        }
        e.wait_end(wt);
        for (int j = 0; j < k_wait_recvs; ++j) {
            const mpiv_p2p_status_t st = r[j].rc == status::ok ? r[j].st : r[j].rec.st;
            const std::size_t n = wait_size(round, j);
            if ((r[j].rc == status::inprogress && calls_of(r[j].rec) != 1) || st.bytes != n ||
                st.error != MPIV_OK || st.tag != tag ||
                !intact(dst[j].data(), n, wait_seed(tag, round, j))) {
                w.bad.fetch_add(1, std::memory_order_relaxed);
            }
        }
        if (calls_of(s.rec) != 1 || s.rec.st.error != MPIV_OK) {
            w.bad.fetch_add(1, std::memory_order_relaxed);
        }
    }
    w.finished.fetch_add(1, std::memory_order_acq_rel);
}

// Engine 0's side: per round, k messages to each waiter's tag, then the waiters'
// synchronous messages; engine 0's progress only (or none with a server thread). Keeps
// engine 0 progressing until every waiter finished.
void feeder(wait_world &w, bool pump_engine0)
{
    ep::engine &e = *w.e[0];
    const auto drive = [&] {
        if (pump_engine0) {
            if (e.progress() == 0) {
                std::this_thread::yield();
            }
        } else {
            std::this_thread::yield();
        }
    };
    const auto deadline = std::chrono::steady_clock::now() + 2 * timeout();
    for (std::size_t round = 0; round < w.rounds; ++round) {
        std::vector<sop> s(static_cast<std::size_t>(w.waiters) * k_wait_recvs);
        std::vector<std::vector<unsigned char>> bufs(s.size());
        std::vector<rop> r(static_cast<std::size_t>(w.waiters));
        std::vector<std::uint64_t> tokens(r.size());
        for (int t = 0; t < w.waiters; ++t) {
            for (int j = 0; j < k_wait_recvs; ++j) {
                const std::size_t i = static_cast<std::size_t>(t * k_wait_recvs + j);
                bufs[i] = patterned(wait_size(round, j), wait_seed(t, round, j));
                s[i].rc = e.isend(*w.c[0], 1, 0, 1, t, bufs[i].data(), bufs[i].size(), 0,
                                  &s[i].rec, s[i].op, s[i].st);
            }
            r[t].rc = e.irecv(*w.c[0], 1, 1000 + t, &tokens[t], sizeof tokens[t], &r[t].rec,
                              r[t].op, r[t].st);
        }
        if (round % 8 == 3) {
            // Let the waiters' progress owner fall asleep on the doorbell.
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
        }
        const auto all_done = [&] {
            for (const sop &x : s) {
                if (x.rc != status::ok && calls_of(x.rec) == 0) {
                    return false;
                }
            }
            for (const rop &x : r) {
                if (x.rc != status::ok && calls_of(x.rec) == 0) {
                    return false;
                }
            }
            return true;
        };
        while (!all_done()) {
            if (std::chrono::steady_clock::now() > deadline) {
                w.bad.fetch_add(1000000, std::memory_order_relaxed);
                return;
            }
            drive();
        }
        for (int t = 0; t < w.waiters; ++t) {
            if (tokens[t] != round * 1000 + static_cast<std::uint64_t>(t)) {
                w.bad.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }
    // Acks for the last synchronous sends may still leave through engine 0's progress.
    while (w.finished.load(std::memory_order_acquire) < w.waiters) {
        if (std::chrono::steady_clock::now() > deadline) {
            w.bad.fetch_add(1000000, std::memory_order_relaxed);
            return;
        }
        drive();
    }
}

class engine_wait : public engine_test,
                    public ::testing::WithParamInterface<mpiv_p2p_progress_mode_t> {
  protected:
    void start_mode()
    {
        mpiv_p2p_params_t p0 = params_for(0);
        mpiv_p2p_params_t p1 = params_for(1);
        p0.progress = GetParam();
        p1.progress = GetParam();
        start(p0, p1);
    }
    void ult_waiters(int ults, std::size_t rounds, std::int64_t scratch_ults = -1,
                     std::int64_t prefetch_ults = -1);

    void world(wait_world &w, int waiters, std::size_t rounds)
    {
        w.e[0] = eng_[0].get();
        w.e[1] = eng_[1].get();
        w.c[0] = comm_[0];
        w.c[1] = comm_[1];
        w.waiters = waiters;
        w.rounds = rounds;
    }
};

// Eight pthreads wait at once on engine 1, which nothing else drives (inline mode): the
// progress owner and the parked waiters must hand over without losing a wake-up.
TEST_P(engine_wait, pthread_waiters)
{
    start_mode();
    wait_world w;
    world(w, 8, iterations(300, 10));
    watchdog dog("pthread waiters");
    std::thread feed([&] { feeder(w, GetParam() == MPIV_P2P_PROGRESS_INLINE); });
    std::vector<std::thread> threads;
    for (int t = 0; t < w.waiters; ++t) {
        threads.emplace_back([&w, t] { waiter_rounds(w, t); });
    }
    for (auto &t : threads) {
        t.join();
    }
    feed.join();
    EXPECT_EQ(w.bad.load(std::memory_order_relaxed), 0u);
    EXPECT_EQ(w.finished.load(std::memory_order_relaxed), w.waiters);
}

struct ult_arg {
    wait_world *w;
    int tag;
};

void *ult_waiter_main(void *raw)
{
    auto *a = static_cast<ult_arg *>(raw);
    waiter_rounds(*a->w, a->tag);
    return nullptr;
}

// The same from ULTs on two workers: sixteen, and more than a worker keeps waits for
// reuse (endpoints/engine_wait.cpp, k_ult_waits_kept), so that some are freed.
TEST_P(engine_wait, ult_waiters)
{
    ult_waiters(16, iterations(100, 10));
}

TEST_P(engine_wait, ult_waiters_past_the_kept_waits)
{
    ult_waiters(160, iterations(20, 4));
}

// The same with every ULT's poll before it blocks (and the completions it makes) on its
// worker's scratch stack (sched/worker.hpp), however few ULTs live.
TEST_P(engine_wait, ult_waiters_polling_on_the_scratch_stack)
{
    using mpiv::base::stats::counter;
    const std::uint64_t before = mpiv::base::stats::read(counter::scratch_calls);
    ult_waiters(16, iterations(100, 10), 0);
    const std::uint64_t calls = mpiv::base::stats::read(counter::scratch_calls) - before;
    if (GetParam() == MPIV_P2P_PROGRESS_INLINE) {
        EXPECT_GT(calls, 0u) << "no poll ran on the scratch stack";
    } else {
        EXPECT_EQ(calls, 0u) << "a server thread polls: the ULTs only block";
    }
}

// The same with the workers always prefetching: the receives each ULT's poll matches
// complete in batches after its drains (endpoints/engine.hpp), on two workers at once.
TEST_P(engine_wait, ult_waiters_completing_in_batches)
{
    using mpiv::base::stats::counter;
    const std::uint64_t before = mpiv::base::stats::read(counter::batched_completions);
    ult_waiters(16, iterations(100, 10), -1, 0);
    const std::uint64_t batched = mpiv::base::stats::read(counter::batched_completions) - before;
    if (GetParam() == MPIV_P2P_PROGRESS_INLINE) {
        EXPECT_GT(batched, 0u) << "no receive completed in a batch";
    } else {
        EXPECT_EQ(batched, 0u) << "a server thread drains, and it runs no ULTs";
    }
}

void engine_wait::ult_waiters(int ults, std::size_t rounds, std::int64_t scratch_ults,
                              std::int64_t prefetch_ults)
{
    start_mode();
    start_runtime(2, scratch_ults, prefetch_ults);
    mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
    ASSERT_NE(rt, nullptr);
    wait_world w;
    world(w, ults, rounds);
    watchdog dog("ULT waiters");
    std::thread feed([&] { feeder(w, GetParam() == MPIV_P2P_PROGRESS_INLINE); });
    std::vector<ult_arg> args(static_cast<std::size_t>(w.waiters));
    std::vector<std::uint64_t> h(args.size());
    for (int t = 0; t < w.waiters; ++t) {
        args[t] = ult_arg{&w, t};
        ASSERT_EQ(rt->spawn(ult_waiter_main, &args[t], MPIV_WORKER_ANY, false, h[t]), status::ok);
    }
    for (auto handle : h) {
        EXPECT_EQ(rt->join(handle, nullptr), status::ok);
    }
    feed.join();
    EXPECT_EQ(w.bad.load(std::memory_order_relaxed), 0u);
    EXPECT_EQ(w.finished.load(std::memory_order_relaxed), w.waiters);
}

struct one_worker {
    ep::engine *e[2];
    ep::comm_state *c[2];
    std::atomic<bool> x_waiting{false};
    std::atomic<bool> y_ran{false};
    std::uint64_t got = 0;
    int x_rc = -1;
};

void *ult_x(void *raw)
{
    auto *o = static_cast<one_worker *>(raw);
    ep::engine &e = *o->e[1];
    rop r;
    ep::waiter *wt = e.wait_begin(1);
    r.rec.eng = &e;
    r.rec.w = wt;
    r.rc = e.irecv(*o->c[1], 0, 500, &o->got, sizeof o->got, &r.rec, r.op, r.st);
    if (r.rc == status::ok) {
        e.wake(wt);
    }
    // Release: pairs with the acquire in ult_y.
    o->x_waiting.store(true, std::memory_order_release);
    e.wait_end(wt);
    o->x_rc = r.rc == status::ok ? r.st.error : r.rec.st.error;
    return nullptr;
}

void *ult_y(void *raw)
{
    auto *o = static_cast<one_worker *>(raw);
    // Acquire: pairs with the release in ult_x.
    while (!o->x_waiting.load(std::memory_order_acquire)) {
        mpiv::sched::worker::yield_current();
    }
    // Runs only if x's wait gave the worker up.
    o->y_ran.store(true, std::memory_order_release);
    sop s;
    static const std::uint64_t value = 0x5eed;
    s.rc = o->e[0]->isend(*o->c[0], 1, 0, 1, 500, &value, sizeof value, 0, &s.rec, s.op, s.st);
    EXPECT_EQ(s.rc, status::ok) << "an inline eager send completes at once";
    return nullptr;
}

// One worker: a ULT waiting for a message lets the next ULT of its worker run (which
// sends that message); nobody else drives progress.
TEST_P(engine_wait, ult_wait_blocks_only_the_ult)
{
    start_mode();
    start_runtime(1);
    mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
    ASSERT_NE(rt, nullptr);
    watchdog dog("one-worker ULT wait");
    for (std::size_t round = 0; round < iterations(50, 5); ++round) {
        one_worker o{{eng_[0].get(), eng_[1].get()}, {comm_[0], comm_[1]}};
        std::uint64_t hx = 0;
        std::uint64_t hy = 0;
        ASSERT_EQ(rt->spawn(ult_x, &o, 0, false, hx), status::ok);
        ASSERT_EQ(rt->spawn(ult_y, &o, 0, false, hy), status::ok);
        EXPECT_EQ(rt->join(hx, nullptr), status::ok);
        EXPECT_EQ(rt->join(hy, nullptr), status::ok);
        EXPECT_TRUE(o.y_ran.load(std::memory_order_acquire));
        EXPECT_EQ(o.x_rc, MPIV_OK);
        EXPECT_EQ(o.got, 0x5eedu);
    }
}

INSTANTIATE_TEST_SUITE_P(progress, engine_wait,
                         ::testing::Values(MPIV_P2P_PROGRESS_INLINE, MPIV_P2P_PROGRESS_SERVER),
                         [](const ::testing::TestParamInfo<mpiv_p2p_progress_mode_t> &info) {
                             return info.param == MPIV_P2P_PROGRESS_INLINE ? std::string("inline")
                                                                           : std::string("server");
                         });

// A pthread's wait that completes before wait_end (all wakes in) returns at once, and a
// wait of several completions wakes only after the last one.
TEST_F(engine_test, wait_counts_every_completion)
{
    start();
    ep::waiter *wt = eng(1).wait_begin(2);
    eng(1).wake(wt);
    eng(1).wake(wt);
    eng(1).wait_end(wt);
    std::atomic<bool> ended{false};
    std::atomic<ep::waiter *> shared{nullptr};
    std::thread t([&] {
        ep::waiter *mine = eng(1).wait_begin(3);
        // Release: pairs with the acquire below; the main thread wakes this wait.
        shared.store(mine, std::memory_order_release);
        eng(1).wait_end(mine);
        // Release: pairs with the acquire loads below.
        ended.store(true, std::memory_order_release);
    });
    ep::waiter *p = nullptr;
    // Acquire: pairs with the release store of the waiter.
    while ((p = shared.load(std::memory_order_acquire)) == nullptr) {
        std::this_thread::yield();
    }
    eng(1).wake(p);
    eng(1).wake(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_FALSE(ended.load(std::memory_order_acquire)) << "woke before the third completion";
    eng(1).wake(p);
    t.join();
    EXPECT_TRUE(ended.load(std::memory_order_acquire));
}

// ------------------------------------------------------------------ polling alone

// A check for poll_alone: done on its until-th call.
struct poll_count {
    int calls = 0;
    int until = 0;
};

int count_done(void *raw)
{
    auto *p = static_cast<poll_count *>(raw);
    return ++p->calls >= p->until ? 1 : 0;
}

// A lone pthread polls until its check says done: true after exactly that many checks
// when that is within the budget, false after exactly the budget otherwise.
TEST_F(engine_test, poll_alone_checks_until_done_or_budget)
{
    start();
    poll_count soon{0, 5};
    EXPECT_TRUE(eng(1).poll_alone(100, count_done, &soon));
    EXPECT_EQ(soon.calls, 5);
    poll_count never{0, 1000};
    EXPECT_FALSE(eng(1).poll_alone(100, count_done, &never));
    EXPECT_EQ(never.calls, 100);
    EXPECT_EQ(ep::engine_test_access::pthread_waiters(eng(1)), 0) << "the poller still counts";
}

// Its polls drive progress: a receive that only engine 1's progress can complete does.
TEST_F(engine_test, poll_alone_drives_progress)
{
    start();
    std::uint64_t got = 0;
    rop r;
    r.rc = eng(1).irecv(comm(1), 0, 77, &got, sizeof got, &r.rec, r.op, r.st);
    ASSERT_EQ(r.rc, status::inprogress);
    static const std::uint64_t value = 0xfeed;
    sop s;
    s.rc = eng(0).isend(comm(0), 1, 0, 1, 77, &value, sizeof value, 0, &s.rec, s.op, s.st);
    ASSERT_EQ(s.rc, status::ok);
    auto received = [](void *raw) { return calls_of(*static_cast<record *>(raw)) > 0 ? 1 : 0; };
    EXPECT_TRUE(eng(1).poll_alone(1 << 24, received, &r.rec));
    EXPECT_EQ(got, value);
}

// While another pthread waits in the engine, it polls for the calling thread's learned
// crowd budget instead of the count given: 64 at first, doubled by a wait that ended
// while polling, and back to 64 (not below) after waits that outlasted it.
TEST_F(engine_test, poll_alone_polls_a_learned_budget_in_a_crowd)
{
    start();
    watchdog dog("poll_alone in a crowd");
    std::atomic<ep::waiter *> shared{nullptr};
    std::thread other([&] {
        ep::waiter *mine = eng(1).wait_begin(1);
        // Release: pairs with the acquire below; the main thread wakes this wait.
        shared.store(mine, std::memory_order_release);
        eng(1).wait_end(mine);
    });
    // The other thread counts as a waiter once it is inside wait_end.
    while (ep::engine_test_access::pthread_waiters(eng(1)) == 0) {
        std::this_thread::yield();
    }
    constexpr int k_never = 1 << 30;
    poll_count first{0, k_never};
    EXPECT_FALSE(eng(1).poll_alone(100000, count_done, &first));
    EXPECT_EQ(first.calls, 64); // the starting budget, not the count given
    poll_count soon{0, 10};
    EXPECT_TRUE(eng(1).poll_alone(100000, count_done, &soon));
    EXPECT_EQ(soon.calls, 10);
    poll_count doubled{0, k_never};
    EXPECT_FALSE(eng(1).poll_alone(100000, count_done, &doubled));
    EXPECT_EQ(doubled.calls, 128);
    poll_count halved{0, k_never};
    EXPECT_FALSE(eng(1).poll_alone(100000, count_done, &halved));
    EXPECT_EQ(halved.calls, 64);
    ep::waiter *w = nullptr;
    // Acquire: pairs with the release store of the waiter.
    while ((w = shared.load(std::memory_order_acquire)) == nullptr) {
        std::this_thread::yield();
    }
    eng(1).wake(w);
    other.join();
}

// A pthread still polling is a crowd for the next one to come: that one polls its crowd
// budget (64 at first), not the count it gave, and the count is back to 0 once both return.
TEST_F(engine_test, poll_alone_sees_a_long_poller_as_a_crowd)
{
    start();
    watchdog dog("poll_alone beside a long poller");
    std::atomic<bool> release{false};
    auto until_released = [](void *raw) {
        // Acquire: pairs with the release store below (nothing else is read).
        return static_cast<std::atomic<bool> *>(raw)->load(std::memory_order_acquire) ? 1 : 0;
    };
    std::atomic<bool> ended{false};
    std::thread other([&] {
        ended.store(eng(1).poll_alone(1 << 30, until_released, &release),
                    std::memory_order_release);
    });
    while (ep::engine_test_access::pthread_waiters(eng(1)) == 0) {
        std::this_thread::yield();
    }
    poll_count mine{0, 1 << 30};
    EXPECT_FALSE(eng(1).poll_alone(100000, count_done, &mine));
    EXPECT_EQ(mine.calls, 64);
    // Release: pairs with the acquire load of the other thread's check.
    release.store(true, std::memory_order_release);
    other.join();
    EXPECT_TRUE(ended.load(std::memory_order_acquire));
    EXPECT_EQ(ep::engine_test_access::pthread_waiters(eng(1)), 0);
}

// With a server thread driving progress it declines at once too.
TEST_F(engine_test, poll_alone_declines_with_a_server_thread)
{
    mpiv_p2p_params_t p0 = params_for(0);
    mpiv_p2p_params_t p1 = params_for(1);
    p1.progress = MPIV_P2P_PROGRESS_SERVER;
    start(p0, p1);
    poll_count c{0, 1};
    EXPECT_FALSE(eng(1).poll_alone(100, count_done, &c));
    EXPECT_EQ(c.calls, 0);
}

} // namespace
