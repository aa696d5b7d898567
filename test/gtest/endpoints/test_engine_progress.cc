// engine: back-pressure with a tiny queue and pool, waits from pthreads (inline and server
// progress) and from ULTs, and bad parameters, addresses and arguments (fixture in
// engine_fixture.hpp).
#include "test/gtest/endpoints/engine_fixture.hpp"

#include <sched.h>
#include <sys/mount.h>

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

// The same from sixteen ULTs on two workers.
TEST_P(engine_wait, ult_waiters)
{
    start_mode();
    start_runtime(2);
    mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
    ASSERT_NE(rt, nullptr);
    wait_world w;
    world(w, 16, iterations(100, 10));
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

// It declines at once, without a check, while another pthread waits in the engine.
TEST_F(engine_test, poll_alone_declines_in_a_crowd)
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
    poll_count c{0, 1};
    EXPECT_FALSE(eng(1).poll_alone(100, count_done, &c));
    EXPECT_EQ(c.calls, 0);
    ep::waiter *w = nullptr;
    // Acquire: pairs with the release store of the waiter.
    while ((w = shared.load(std::memory_order_acquire)) == nullptr) {
        std::this_thread::yield();
    }
    eng(1).wake(w);
    other.join();
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

// ------------------------------------------------------------------ bad input

// Store @p v into an enum field bytewise.
template <class E> void store_int(E &field, int v)
{
    static_assert(sizeof(E) == sizeof v, "C enums are int-sized here");
    std::memcpy(&field, &v, sizeof v);
}

TEST(engine_params, create_rejects_each_invalid_parameter)
{
    struct bad {
        const char *field;
        std::function<void(mpiv_p2p_params_t &)> set;
        status expect;
    };
    const bad cases[] = {
        {"complete", [](mpiv_p2p_params_t &p) { p.complete = nullptr; }, status::invalid_arg},
        {"num_peers", [](mpiv_p2p_params_t &p) { p.num_peers = 0; }, status::param},
        {"self", [](mpiv_p2p_params_t &p) { p.self = 2; }, status::param},
        {"endpoints", [](mpiv_p2p_params_t &p) { p.endpoints = 0; }, status::param},
        {"endpoints", [](mpiv_p2p_params_t &p) { p.endpoints = 257; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 0; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 3; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1000; }, status::param},
        {"queue_slots", [](mpiv_p2p_params_t &p) { p.queue_slots = 1u << 21; }, status::param},
        {"eager_limit", [](mpiv_p2p_params_t &p) { p.eager_limit = (1u << 20) + 1; }, status::param},
        {"packet_count", [](mpiv_p2p_params_t &p) { p.packet_count = 0; }, status::param},
        {"packet_count", [](mpiv_p2p_params_t &p) { p.packet_count = (1u << 20) + 1; }, status::param},
        // As a C caller would store them (a C++ cast to an out-of-range enum is undefined).
        {"progress", [](mpiv_p2p_params_t &p) { store_int(p.progress, 2); }, status::param},
        {"progress", [](mpiv_p2p_params_t &p) { store_int(p.progress, -1); }, status::param},
        {"lock", [](mpiv_p2p_params_t &p) { store_int(p.lock, 3); }, status::param},
        {"lock", [](mpiv_p2p_params_t &p) { store_int(p.lock, 1000); }, status::param},
        {"idle_us", [](mpiv_p2p_params_t &p) { p.idle_us = 1000001; }, status::param},
        {"single_copy", [](mpiv_p2p_params_t &p) { store_int(p.single_copy, 3); }, status::param},
        {"single_copy", [](mpiv_p2p_params_t &p) { store_int(p.single_copy, -1); }, status::param},
    };
    for (const bad &c : cases) {
        log_capture log;
        mpiv_p2p_params_t p = params_for(0);
        c.set(p);
        std::unique_ptr<ep::engine> e;
        EXPECT_EQ(e == nullptr, true);
        EXPECT_EQ(ep::engine::create(p, e), c.expect) << c.field;
        EXPECT_EQ(e, nullptr) << c.field;
        ASSERT_FALSE(log.errors().empty()) << c.field << ": nothing logged";
        EXPECT_NE(log.last().find(c.field), std::string::npos)
            << "the message names " << c.field << ": " << log.last();
    }
    // The limits themselves are valid.
    {
        mpiv_p2p_params_t p = params_for(0, 1);
        p.endpoints = 1;
        p.queue_slots = 2;
        p.eager_limit = 0;
        p.packet_count = 1;
        p.idle_us = 0;
        std::unique_ptr<ep::engine> e;
        ASSERT_EQ(ep::engine::create(p, e), status::ok);
        EXPECT_EQ(e->inline_max(), 2 * 56u - 32u) << "inline messages fit in two slots";
        p.eager_limit = 1u << 20;
        p.packet_count = 4;
        p.idle_us = 1000000;
        p.queue_slots = 8;
        std::unique_ptr<ep::engine> e2;
        ASSERT_EQ(ep::engine::create(p, e2), status::ok);
        EXPECT_EQ(e2->inline_max(), std::size_t{MPIV_P2P_INLINE_MAX});
    }
}

// The address layout that connect() parses: the engine's header (engine_ucx.cpp), then
// the shared-memory transport's address (shm::transport::address_t); no UCX part.
struct address_mirror {
    std::uint32_t magic;
    std::uint32_t shm_len;
    std::uint32_t ucx_len;
    std::uint32_t reserved;
    std::uint32_t version;
    std::uint32_t pid;
    std::int32_t fd;
    std::uint32_t self;
    std::uint64_t bytes;
    std::uint64_t probe;
};

TEST_F(engine_test, connect_rejects_malformed_addresses)
{
    std::unique_ptr<ep::engine> a;
    std::unique_ptr<ep::engine> b;
    ASSERT_EQ(ep::engine::create(params_for(0), a), status::ok);
    ASSERT_EQ(ep::engine::create(params_for(1), b), status::ok);
    const void *addr = nullptr;
    std::size_t len = 0;
    b->address(addr, len);
    ASSERT_EQ(len, sizeof(address_mirror));
    address_mirror good;
    std::memcpy(&good, addr, sizeof good);
    EXPECT_EQ(good.self, 1u);
    EXPECT_EQ(good.pid, static_cast<std::uint32_t>(getpid()));

    log_capture log;
    EXPECT_EQ(a->connect(1, nullptr, len), status::invalid_arg);
    EXPECT_EQ(a->connect(1, addr, 0), status::invalid_arg);
    EXPECT_EQ(a->connect(1, addr, len - 1), status::invalid_arg);
    std::vector<unsigned char> longer(len + 1);
    std::memcpy(longer.data(), addr, len);
    EXPECT_EQ(a->connect(1, longer.data(), longer.size()), status::invalid_arg);
    EXPECT_EQ(a->connect(2, addr, len), status::invalid_arg) << "peer index out of range";
    EXPECT_EQ(a->connect(0, addr, len), status::invalid_arg) << "peer 1's address given for 0";

    const auto try_with = [&](const std::function<void(address_mirror &)> &edit) {
        address_mirror m = good;
        edit(m);
        return a->connect(1, &m, sizeof m);
    };
    EXPECT_EQ(try_with([](address_mirror &m) { m.magic ^= 1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.shm_len += 8; }), status::invalid_arg)
        << "parts longer than the address";
    EXPECT_EQ(try_with([](address_mirror &m) { m.ucx_len = 1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.version = 99; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.fd = -1; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.pid = 0; }), status::invalid_arg);
    EXPECT_EQ(try_with([](address_mirror &m) { m.fd = 1 << 28; }), status::system)
        << "no such descriptor";
    EXPECT_EQ(try_with([](address_mirror &m) { m.bytes *= 4; }), status::invalid_arg)
        << "larger than the segment";
    // A real memfd that is no mpiv segment.
    mpiv::shm::segment other;
    ASSERT_EQ(mpiv::shm::segment::create(good.bytes, other), status::ok);
    EXPECT_EQ(try_with([&](address_mirror &m) { m.fd = other.fd(); }), status::invalid_arg);
    EXPECT_NE(log.last().find("not an mpiv segment"), std::string::npos) << log.last();
    EXPECT_GE(log.errors().size(), 10u) << "every rejection is logged";

    // Nothing stuck: the right address still connects (twice: idempotent) and works.
    EXPECT_EQ(a->connect(1, addr, len), status::ok);
    EXPECT_EQ(a->connect(1, addr, len), status::ok);
    a->address(addr, len);
    EXPECT_EQ(b->connect(0, addr, len), status::ok);
    ep::comm_state *ca = nullptr;
    ep::comm_state *cb = nullptr;
    ASSERT_EQ(a->comm_create(k_cid, 2, 0, ca), status::ok);
    ASSERT_EQ(b->comm_create(k_cid, 2, 0, cb), status::ok);
    sop s;
    const std::uint64_t v = 42;
    s.rc = a->isend(*ca, 1, 0, 1, 0, &v, sizeof v, 0, &s.rec, s.op, s.st);
    EXPECT_EQ(s.rc, status::ok);
    std::uint64_t got = 0;
    rop r;
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    r.rc = b->irecv(*cb, 0, 0, &got, sizeof got, &r.rec, r.op, r.st);
    while (r.rc == status::inprogress && calls_of(r.rec) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
        b->progress();
    }
    EXPECT_EQ(got, 42u);
}

// Where this process cannot map its own segment through /proc (here: an empty /proc in
// a mount namespace of a child), no peer could map it either: create fails at once, with
// a message, so that the PML declines the job instead of failing at the first contact.
TEST(engine_create, fails_when_its_segment_cannot_be_mapped_through_proc)
{
    const pid_t pid = mpiv::test::fork_child([] {
        // A mount namespace of its own (as root), else inside a user namespace of its own
        // (allowed without root where user namespaces are enabled).
        if ((unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) ||
            mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("none", "/proc", "tmpfs", 0, nullptr) != 0) {
            return 4;
        }
        log_capture log;
        std::unique_ptr<ep::engine> e;
        if (ep::engine::create(params_for(0), e) != status::system || e != nullptr) {
            return 2;
        }
        return log.last().find("cannot map its own segment through /proc") == std::string::npos
                   ? 3
                   : 0;
    });
    ASSERT_GT(pid, 0);
    EXPECT_EQ(mpiv::test::wait_child(pid), 0)
        << "2: create did not fail; 3: no message; 4: no mount namespace with an empty /proc "
           "(needs root or user namespaces)";
}

// connect() tries process_vm_readv on the peer's own address record: where that fails
// (here: the record is not where the address says), auto mode copies the peer's large
// messages through shared memory, and CMA mode refuses the peer.
TEST_F(engine_test, connect_tries_cma_on_the_peer)
{
    mpiv_p2p_params_t p0 = params_for(0);
    mpiv_p2p_params_t p1 = params_for(1);
    ASSERT_EQ(ep::engine::create(p0, eng_[0]), status::ok);
    ASSERT_EQ(ep::engine::create(p1, eng_[1]), status::ok);
    address_mirror addr[2];
    for (int i = 0; i < 2; ++i) {
        const void *a = nullptr;
        std::size_t len = 0;
        eng_[i]->address(a, len);
        ASSERT_EQ(len, sizeof addr[i]);
        std::memcpy(&addr[i], a, len);
    }
    address_mirror moved = addr[1];
    moved.probe += 8; // a readable address that does not hold the record
    {
        std::unique_ptr<ep::engine> strict;
        p0.single_copy = MPIV_P2P_SINGLE_COPY_CMA;
        ASSERT_EQ(ep::engine::create(p0, strict), status::ok);
        log_capture log;
        EXPECT_EQ(strict->connect(1, &moved, sizeof moved), status::system);
        EXPECT_NE(log.last().find("single_copy is CMA"), std::string::npos) << log.last();
    }
    ASSERT_EQ(eng_[0]->connect(1, &moved, sizeof moved), status::ok);
    ASSERT_EQ(eng_[0]->connect(0, &addr[0], sizeof addr[0]), status::ok);
    ASSERT_EQ(eng_[1]->connect(0, &addr[0], sizeof addr[0]), status::ok);
    ASSERT_EQ(eng_[1]->connect(1, &addr[1], sizeof addr[1]), status::ok);
    bool single = true;
    int error = 0;
    ASSERT_EQ(eng_[0]->peer_single_copy(1, single, error), status::ok);
    EXPECT_FALSE(single) << "peer 1's record was not where it said";
    EXPECT_EQ(error, EFAULT);
    ASSERT_EQ(eng_[0]->peer_single_copy(0, single, error), status::ok);
    EXPECT_TRUE(single) << "this engine's own messages are copied in process";
    ASSERT_EQ(eng_[1]->peer_single_copy(0, single, error), status::ok);
    EXPECT_TRUE(single);
    EXPECT_EQ(error, 0);
    EXPECT_EQ(eng_[1]->peer_single_copy(5, single, error), status::invalid_arg);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(eng_[i]->comm_create(k_cid, 2, 0, comm_[i]), status::ok);
    }
    // 1 -> 0 in two copies, 0 -> 1 read by CMA: the same bytes either way.
    for (const int from : {1, 0}) {
        SCOPED_TRACE(::testing::Message() << "from " << from);
        const std::vector<unsigned char> src = patterned(k_mib + 3, 77 + from);
        std::vector<unsigned char> dst(src.size());
        rop r;
        recv(1 - from, from, 1, dst.data(), dst.size(), r);
        sop s;
        send(from, 1 - from, 1, src.data(), src.size(), s);
        EXPECT_EQ(finish(r).bytes, src.size());
        EXPECT_EQ(finish(s).error, MPIV_OK);
        EXPECT_TRUE(intact(dst.data(), dst.size(), 77 + from));
    }
}

// Messages that arrive before their receives are kept (MPI makes the receiver buffer
// them); their number is watched: one warning when it passes 65,536, the next at twice
// that, and receives and improbe count them back down.
TEST_F(engine_test, messages_held_before_their_receives_are_reported)
{
    start();
    constexpr std::size_t k_n = 65536 + 10;
    const auto flood = [&](std::int32_t tag) {
        for (std::size_t i = 0; i < k_n; ++i) {
            ep::send_op op{};
            mpiv_p2p_status_t st{};
            status rc;
            while ((rc = eng(1).isend(comm(1), 0, 1, 0, tag, &i, sizeof i, 0, nullptr, op, st)) ==
                   status::retry_nomem) {
                eng(0).progress(); // the queues are full: drain them (all unexpected)
            }
            ASSERT_EQ(rc, status::ok);
        }
        while (eng(0).progress() > 0) {
        }
    };
    const auto take_all = [&](std::int32_t tag) {
        for (std::size_t i = 0; i < k_n; ++i) {
            std::size_t got = ~std::size_t{0};
            rop r;
            if (i % 2 == 0) {
                recv(0, 1, tag, &got, sizeof got, r);
                ASSERT_EQ(r.rc, status::ok) << i;
            } else {
                ep::inmsg *m = nullptr;
                mpiv_p2p_status_t ps{};
                ASSERT_EQ(eng(0).improbe(comm(0), 1, tag, m, ps), status::ok) << i;
                mpiv_p2p_status_t st{};
                ASSERT_EQ(eng(0).mrecv(*m, &got, sizeof got, nullptr, st), status::ok);
            }
            ASSERT_EQ(got, i) << "in the sender's order";
        }
    };
    log_capture log;
    flood(1);
    ASSERT_EQ(log.warnings().size(), 1u) << "one warning at 65,536";
    EXPECT_NE(log.warnings()[0].find("messages arrived before their receives"), std::string::npos)
        << log.warnings()[0];
    EXPECT_NE(log.warnings()[0].find("next report at 131072"), std::string::npos)
        << log.warnings()[0];
    take_all(1);
    flood(2); // as many again: below the next threshold once the first are received
    EXPECT_EQ(log.warnings().size(), 1u) << "received messages were counted back down";
    take_all(2);
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(0).iprobe(comm(0), k_any, k_any, ps), status::not_found);
}

TEST_F(engine_test, isend_to_an_unconnected_peer_and_bad_arguments)
{
    std::unique_ptr<ep::engine> e;
    ASSERT_EQ(ep::engine::create(params_for(0, 3), e), status::ok);
    const void *addr = nullptr;
    std::size_t len = 0;
    e->address(addr, len);
    ASSERT_EQ(e->connect(0, addr, len), status::ok);
    ep::comm_state *c = nullptr;
    ASSERT_EQ(e->comm_create(k_cid, 3, 0, c), status::ok);
    sop s;
    const char buf[8] = "abcdefg";
    EXPECT_EQ(e->isend(*c, 1, 0, 1, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "peer 1 is not connected";
    EXPECT_EQ(e->isend(*c, 3, 0, 2, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "peer index out of range";
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 0, buf, 8, 2, &s.rec, s.op, s.st), status::invalid_arg)
        << "unknown flag";
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 0, nullptr, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "NULL buffer";
    EXPECT_EQ(e->isend(*c, 0, 0, 7, 0, buf, 8, 0, &s.rec, s.op, s.st), status::invalid_arg)
        << "destination rank out of range";
    ep::recv_op rop_;
    record rec;
    mpiv_p2p_status_t st{};
    EXPECT_EQ(e->irecv(*c, 0, 0, nullptr, 8, &rec, rop_, st), status::invalid_arg) << "NULL buffer";
    EXPECT_EQ(e->irecv(*c, 5, 0, nullptr, 0, &rec, rop_, st), status::invalid_arg) << "bad source";
    EXPECT_EQ(calls_of(s.rec), 0);
    EXPECT_EQ(calls_of(rec), 0);

    // The connected self still works after the rejections (and a NULL 0-byte buffer is fine).
    EXPECT_EQ(e->isend(*c, 0, 0, 0, 4, nullptr, 0, 0, &s.rec, s.op, s.st), status::ok);
    rop r;
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    r.rc = e->irecv(*c, 0, 4, nullptr, 0, &r.rec, r.op, r.st);
    while (r.rc == status::inprogress && calls_of(r.rec) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
        e->progress();
    }
    EXPECT_TRUE(r.rc == status::ok || calls_of(r.rec) == 1);
}

} // namespace
