// engine: the point-to-point engine end to end, with two engines in one process (peers 0
// and 1, each connected to both segments, which works within a process through
// /proc/self/fd): eager inline and packet, rendezvous, synchronous sends, truncation,
// probes, cancel, wildcards and sender order, arrivals before comm_create, self-sends,
// back-pressure with a tiny queue and pool, waits from pthreads (inline and server
// progress) and from ULTs, and bad parameters, addresses and arguments.
#include "endpoints/engine.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "endpoints/shm/cma.hpp"
#include "endpoints/shm/segment.hpp"
#include "sched/runtime.hpp"
#include "sched/worker.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/common/test_util.hpp"
#include "test/gtest/endpoints/shm_test_util.hpp"

namespace {

using mpiv::status;
using mpiv::test::iterations;
using mpiv::test::log_capture;
using mpiv::test::watchdog;
namespace ep = mpiv::ep;

constexpr std::uint32_t k_limit = 4096;   // eager limit of most tests
constexpr std::uint16_t k_cid = 7;        // the communicator every test uses
constexpr std::int32_t k_any = -1;        // MPI_ANY_SOURCE / MPI_ANY_TAG
constexpr std::size_t k_mib = std::size_t{1} << 20;
constexpr unsigned char k_guard = 0xEE;   // bytes past a receive buffer's capacity

std::chrono::seconds timeout() { return std::chrono::seconds(60 * mpiv::test::time_multiplier()); }

// ------------------------------------------------------------------ completions

// What the completion callback reports for one operation (its `user` pointer). With w
// set, the callback also reports the completion to that waiter of engine eng.
struct record {
    std::atomic<int> calls{0};
    mpiv_p2p_status_t st{}; // written before the release increment of calls
    ep::engine *eng = nullptr;
    ep::waiter *w = nullptr;
};

void on_complete(void *user, const mpiv_p2p_status_t *s)
{
    auto *r = static_cast<record *>(user);
    ep::engine *const e = r->eng;
    ep::waiter *const w = r->w;
    r->st = *s;
    // Release: pairs with the acquire in calls_of(); the status is visible with the count.
    r->calls.fetch_add(1, std::memory_order_release);
    if (w != nullptr) {
        e->wake(w);
    }
}

int calls_of(const record &r)
{
    // Acquire: pairs with the release increment in on_complete().
    return r.calls.load(std::memory_order_acquire);
}

// One operation with its storage and completion record.
struct sop {
    ep::send_op op{};
    record rec;
    mpiv_p2p_status_t st{}; // written when isend completes at once
    status rc = status::internal;
};

struct rop {
    ep::recv_op op;
    record rec;
    mpiv_p2p_status_t st{};
    status rc = status::internal;
};

unsigned char pattern(std::uint32_t seed, std::size_t i)
{
    return static_cast<unsigned char>((i * 131u) ^ (seed * 2654435761u) ^ (seed >> 7));
}

std::vector<unsigned char> patterned(std::size_t n, std::uint32_t seed)
{
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = pattern(seed, i);
    }
    return v;
}

bool intact(const unsigned char *p, std::size_t n, std::uint32_t seed)
{
    for (std::size_t i = 0; i < n; ++i) {
        if (p[i] != pattern(seed, i)) {
            return false;
        }
    }
    return true;
}

bool guard_intact(const std::vector<unsigned char> &buf, std::size_t from)
{
    for (std::size_t i = from; i < buf.size(); ++i) {
        if (buf[i] != k_guard) {
            return false;
        }
    }
    return true;
}

mpiv_p2p_params_t params_for(std::uint32_t self, std::uint32_t num_peers = 2, bool serialized = false)
{
    mpiv_p2p_params_t p{};
    p.serialized = serialized ? 1 : 0;
    p.self = self;
    p.num_peers = num_peers;
    p.endpoints = 4;
    p.queue_slots = 1024;
    p.eager_limit = k_limit;
    p.packet_count = 512;
    p.progress = MPIV_P2P_PROGRESS_INLINE;
    p.server_cpu = -1;
    p.lock = MPIV_P2P_LOCK_MCS;
    p.complete = on_complete;
    p.idle_us = 100; // short: the tests go through the sleeping paths often
    return p;
}


// ------------------------------------------------------------------ fixture

class engine_test : public ::testing::Test {
  protected:
    void SetUp() override
    {
        // mpiv needs CMA (it declines jobs without it): a machine without it fails here.
        ASSERT_TRUE(mpiv::shm::cma_available()) << "process_vm_readv is not permitted here (kernel or seccomp)";
    }
    void TearDown() override
    {
        eng_[1].reset();
        eng_[0].reset();
        if (runtime_) {
            EXPECT_EQ(mpiv::sched::runtime::finalize(), status::ok);
        }
    }

    // Create engines 0 and 1, connect each to both, and create communicator k_cid on both.
    void start() { start(params_for(0, 2, serialized_), params_for(1, 2, serialized_)); }
    void start(mpiv_p2p_params_t p0, mpiv_p2p_params_t p1)
    {
        ASSERT_EQ(ep::engine::create(p0, eng_[0]), status::ok);
        ASSERT_EQ(ep::engine::create(p1, eng_[1]), status::ok);
        for (int i = 0; i < 2; ++i) {
            for (std::uint32_t peer = 0; peer < 2; ++peer) {
                const void *addr = nullptr;
                std::size_t len = 0;
                eng_[peer]->address(addr, len);
                ASSERT_EQ(eng_[i]->connect(peer, addr, len), status::ok) << i << " to " << peer;
            }
            ASSERT_EQ(eng_[i]->comm_create(k_cid, 2, 0, comm_[i]), status::ok);
        }
    }

    void start_runtime(unsigned workers)
    {
        mpiv_params_t p{};
        p.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS | MPIV_PARAM_FIELD_STACK_SIZE;
        p.num_workers = workers;
        p.stack_size = 256 * 1024;
        ASSERT_EQ(mpiv::sched::runtime::init(&p), status::ok);
        runtime_ = true;
    }

    ep::engine &eng(int i) { return *eng_[i]; }
    ep::comm_state &comm(int i) { return *comm_[i]; }

    int pump() { return eng_[0]->progress() + eng_[1]->progress(); }
    void pump_for(int rounds)
    {
        for (int i = 0; i < rounds; ++i) {
            pump();
        }
    }
    // Drive both engines until pred() holds; false on timeout.
    bool until(const std::function<bool()> &pred)
    {
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        for (unsigned n = 0;; ++n) {
            if (pred()) {
                return true;
            }
            if (pump() == 0 && (n & 63) == 63) {
                if (std::chrono::steady_clock::now() > deadline) {
                    return pred();
                }
                std::this_thread::yield();
            }
        }
    }

    // Rank == peer index in communicator k_cid.
    void send(int from, int to, std::int32_t tag, const void *buf, std::size_t n, sop &s,
              unsigned flags = 0)
    {
        s.rc = eng(from).isend(comm(from), static_cast<std::uint32_t>(to), from, to, tag, buf, n,
                               flags, &s.rec, s.op, s.st);
    }
    void recv(int at, std::int32_t source, std::int32_t tag, void *buf, std::size_t cap, rop &r)
    {
        r.rc = eng(at).irecv(comm(at), source, tag, buf, cap, &r.rec, r.op, r.st);
    }

    // The final status of an operation started with send() or recv(): at once, or from
    // its single callback. Fails the test on timeout.
    template <class Op> mpiv_p2p_status_t finish(Op &o)
    {
        if (o.rc == status::ok) {
            EXPECT_EQ(calls_of(o.rec), 0) << "an operation done at once has no callback";
            return o.st;
        }
        EXPECT_EQ(o.rc, status::inprogress);
        if (o.rc != status::inprogress) {
            return mpiv_p2p_status_t{-99, -99, 0, 0, MPIV_ERR_INTERNAL};
        }
        EXPECT_TRUE(until([&] { return calls_of(o.rec) >= 1; })) << "no completion";
        return o.rec.st;
    }
    template <class Op> bool done(const Op &o) { return o.rc == status::ok || calls_of(o.rec) >= 1; }

    std::unique_ptr<ep::engine> eng_[2];
    ep::comm_state *comm_[2] = {nullptr, nullptr};
    bool runtime_ = false;
    bool serialized_ = false; // start(): engines told that calls never overlap
};

// Tests whose calls all come from the test thread run twice: with the engines' default
// thread-safe paths, and told that calls never overlap (serialized: no process-local
// locks, as under MPI_THREAD_SERIALIZED and below).
class engine_modes : public engine_test, public ::testing::WithParamInterface<bool> {
  protected:
    void SetUp() override
    {
        engine_test::SetUp();
        serialized_ = GetParam();
    }
};

// ------------------------------------------------------------------ protocols

const std::size_t k_sizes[] = {0,   1,   24,      25,          56,   57,
                               416, 417, k_limit, k_limit + 1, k_mib};

// Every protocol (inline <= 416 B: the header's 24 bytes, then up to 7 more queue slots;
// packet <= eager limit; rendezvous above), both arrival orders, between the two engines
// and from each engine to itself.
TEST_P(engine_modes, sizes_protocols_and_content)
{
    start();
    const int pairs[][2] = {{0, 1}, {1, 0}, {0, 0}, {1, 1}};
    std::uint32_t seed = 1;
    for (const auto &pr : pairs) {
        const int from = pr[0];
        const int to = pr[1];
        for (const std::size_t n : k_sizes) {
            for (const bool posted_first : {true, false}) {
                SCOPED_TRACE(::testing::Message() << from << "->" << to << " bytes " << n
                                                  << (posted_first ? " posted" : " unexpected"));
                ++seed;
                std::vector<unsigned char> src = patterned(n, seed);
                std::vector<unsigned char> dst(n + 16, k_guard);
                const std::int32_t tag = static_cast<std::int32_t>(seed % 1000);
                sop s;
                rop r;
                if (posted_first) {
                    recv(to, from, tag, dst.data(), n, r);
                    ASSERT_EQ(r.rc, status::inprogress);
                }
                send(from, to, tag, src.data(), n, s);
                if (n <= k_limit) {
                    // Eager: the data is copied at once, the buffer is free again.
                    ASSERT_EQ(s.rc, status::ok);
                    EXPECT_EQ(s.st.source, to);
                    EXPECT_EQ(s.st.bytes, n);
                    std::fill(src.begin(), src.end(), 0);
                } else {
                    ASSERT_EQ(s.rc, status::inprogress) << "rendezvous";
                    if (!posted_first) {
                        pump_for(200);
                        EXPECT_EQ(calls_of(s.rec), 0) << "rendezvous done before a match";
                    }
                }
                if (!posted_first) {
                    ASSERT_TRUE(until([&] {
                        mpiv_p2p_status_t ps{};
                        return eng(to).iprobe(comm(to), from, tag, ps) == status::ok;
                    }));
                    recv(to, from, tag, dst.data(), n, r);
                    ASSERT_EQ(r.rc, status::ok) << "an arrived message matches at once";
                }
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.source, from);
                EXPECT_EQ(rs.tag, tag);
                EXPECT_EQ(rs.bytes, n);
                EXPECT_EQ(rs.sent, n);
                EXPECT_EQ(rs.error, MPIV_OK);
                EXPECT_TRUE(intact(dst.data(), n, seed)) << "content";
                EXPECT_TRUE(guard_intact(dst, n)) << "wrote past the message";
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.source, to);
                EXPECT_EQ(ss.tag, tag);
                EXPECT_EQ(ss.bytes, n);
                EXPECT_EQ(ss.error, MPIV_OK);
                pump_for(20);
                EXPECT_LE(calls_of(s.rec), 1) << "one callback per send";
                EXPECT_LE(calls_of(r.rec), 1) << "one callback per receive";
            }
        }
    }
}

// A synchronous send completes only after the receive matched it, whatever the protocol.
TEST_P(engine_modes, sync_send_completes_after_the_match)
{
    start();
    const int pairs[][2] = {{0, 1}, {1, 1}};
    std::uint32_t seed = 100;
    for (const auto &pr : pairs) {
        for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{24},
                                    std::size_t{25}, std::size_t{k_limit}, std::size_t{k_limit + 1}}) {
            SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " bytes " << n);
            ++seed;
            const std::vector<unsigned char> src = patterned(n, seed);
            std::vector<unsigned char> dst(n + 16, k_guard);
            sop s;
            send(pr[0], pr[1], 5, src.data(), n, s, MPIV_P2P_SEND_SYNC);
            ASSERT_EQ(s.rc, status::inprogress);
            ASSERT_TRUE(until([&] {
                mpiv_p2p_status_t ps{};
                return eng(pr[1]).iprobe(comm(pr[1]), pr[0], 5, ps) == status::ok;
            })) << "the message arrives";
            pump_for(200);
            EXPECT_EQ(calls_of(s.rec), 0) << "completed before the receive was posted";
            rop r;
            recv(pr[1], pr[0], 5, dst.data(), n, r);
            ASSERT_EQ(r.rc, status::ok);
            EXPECT_TRUE(intact(dst.data(), n, seed));
            const mpiv_p2p_status_t ss = finish(s);
            EXPECT_EQ(ss.bytes, n);
            EXPECT_EQ(ss.error, MPIV_OK);

            // Posted first: completes too, exactly once.
            sop s2;
            rop r2;
            recv(pr[1], pr[0], 6, dst.data(), n, r2);
            ASSERT_EQ(r2.rc, status::inprogress);
            send(pr[0], pr[1], 6, src.data(), n, s2, MPIV_P2P_SEND_SYNC);
            ASSERT_EQ(s2.rc, status::inprogress);
            EXPECT_EQ(finish(r2).bytes, n);
            EXPECT_EQ(finish(s2).error, MPIV_OK);
            pump_for(20);
            EXPECT_EQ(calls_of(s2.rec), 1);
            EXPECT_EQ(calls_of(r2.rec), 1);
        }
    }
}

// A message longer than the buffer: MPIV_ERR_TRUNCATE, bytes = capacity, sent = size.
TEST_P(engine_modes, truncation)
{
    start();
    struct tc {
        std::size_t n;
        std::size_t cap;
    };
    const tc cases[] = {{24, 5},        {25, 10},          {k_limit, 100},
                        {k_limit + 1, 100}, {k_mib, k_limit + 1}, {7, 0}};
    std::uint32_t seed = 200;
    for (const tc &c : cases) {
        for (const unsigned flags : {0u, unsigned{MPIV_P2P_SEND_SYNC}}) {
            for (const bool posted_first : {true, false}) {
                SCOPED_TRACE(::testing::Message() << c.n << " into " << c.cap << " flags " << flags
                                                  << (posted_first ? " posted" : " unexpected"));
                ++seed;
                const std::vector<unsigned char> src = patterned(c.n, seed);
                std::vector<unsigned char> dst(c.cap + 64, k_guard);
                sop s;
                rop r;
                if (posted_first) {
                    recv(1, 0, 3, dst.data(), c.cap, r);
                    ASSERT_EQ(r.rc, status::inprogress);
                }
                send(0, 1, 3, src.data(), c.n, s, flags);
                if (!posted_first) {
                    ASSERT_TRUE(until([&] {
                        mpiv_p2p_status_t ps{};
                        return eng(1).iprobe(comm(1), 0, 3, ps) == status::ok;
                    }));
                    recv(1, 0, 3, dst.data(), c.cap, r);
                    ASSERT_EQ(r.rc, status::ok);
                }
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.error, MPIV_ERR_TRUNCATE);
                EXPECT_EQ(rs.bytes, c.cap);
                EXPECT_EQ(rs.sent, c.n);
                EXPECT_EQ(rs.source, 0);
                EXPECT_EQ(rs.tag, 3);
                EXPECT_TRUE(intact(dst.data(), c.cap, seed)) << "the first bytes arrive";
                EXPECT_TRUE(guard_intact(dst, c.cap)) << "wrote past the capacity";
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.error, MPIV_OK) << "the sender sees no error";
                EXPECT_EQ(ss.bytes, c.n);
            }
        }
    }
}

// iprobe leaves the message; improbe takes it away from receives and probes; mrecv
// delivers it (truncating if need be).
TEST_P(engine_modes, iprobe_improbe_mrecv)
{
    start();
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::not_found);
    const std::size_t sizes[] = {20, 1000, k_limit + 100, 64};
    std::vector<std::vector<unsigned char>> src;
    std::vector<sop> s(4);
    for (int i = 0; i < 4; ++i) {
        src.push_back(patterned(sizes[i], 300 + i));
        send(0, 1, i + 1, src[i].data(), sizes[i], s[i]);
    }
    ASSERT_TRUE(until([&] { return eng(1).iprobe(comm(1), 0, 4, ps) == status::ok; }));
    for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::ok) << "not taken by a probe";
        EXPECT_EQ(ps.source, 0);
        EXPECT_EQ(ps.tag, 1);
        EXPECT_EQ(ps.sent, sizes[0]);
    }
    EXPECT_EQ(eng(1).iprobe(comm(1), 1, k_any, ps), status::not_found) << "nothing from rank 1";
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 9, ps), status::not_found) << "no tag 9";
    ASSERT_EQ(eng(1).iprobe(comm(1), k_any, 3, ps), status::ok);
    EXPECT_EQ(ps.sent, sizes[2]);

    // Take tags 3 (rendezvous) and 2 (packet); the rest stays for receives.
    ep::inmsg *m3 = nullptr;
    ep::inmsg *m2 = nullptr;
    ASSERT_EQ(eng(1).improbe(comm(1), 0, 3, m3, ps), status::ok);
    EXPECT_EQ(ps.tag, 3);
    EXPECT_EQ(ps.sent, sizes[2]);
    ASSERT_EQ(eng(1).improbe(comm(1), k_any, k_any, m2, ps), status::ok);
    EXPECT_EQ(ps.tag, 1) << "the earliest message";
    // That was tag 1: receive it through the message handle too.
    ep::inmsg *m1 = m2;
    ASSERT_EQ(eng(1).improbe(comm(1), 0, 2, m2, ps), status::ok);
    EXPECT_EQ(ps.tag, 2);
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 3, ps), status::not_found) << "taken by improbe";
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 1, ps), status::not_found);
    ASSERT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::ok);
    EXPECT_EQ(ps.tag, 4) << "only tag 4 is left";

    rop r4;
    std::vector<unsigned char> d4(64 + 16, k_guard);
    recv(1, k_any, k_any, d4.data(), 64, r4);
    ASSERT_EQ(r4.rc, status::ok);
    EXPECT_EQ(r4.st.tag, 4);
    EXPECT_TRUE(intact(d4.data(), 64, 303));

    pump_for(100);
    EXPECT_EQ(calls_of(s[2].rec), 0) << "the rendezvous waits for mrecv";
    std::vector<unsigned char> d3(sizes[2] + 16, k_guard);
    mpiv_p2p_status_t st{};
    ASSERT_EQ(eng(1).mrecv(*m3, d3.data(), sizes[2], nullptr, st), status::ok);
    EXPECT_EQ(st.error, MPIV_OK);
    EXPECT_EQ(st.bytes, sizes[2]);
    EXPECT_EQ(st.tag, 3);
    EXPECT_TRUE(intact(d3.data(), sizes[2], 302));
    EXPECT_TRUE(guard_intact(d3, sizes[2]));

    std::vector<unsigned char> d2(500 + 16, k_guard);
    ASSERT_EQ(eng(1).mrecv(*m2, d2.data(), 500, nullptr, st), status::ok);
    EXPECT_EQ(st.error, MPIV_ERR_TRUNCATE);
    EXPECT_EQ(st.bytes, 500u);
    EXPECT_EQ(st.sent, sizes[1]);
    EXPECT_TRUE(intact(d2.data(), 500, 301));
    EXPECT_TRUE(guard_intact(d2, 500));

    std::vector<unsigned char> d1(sizes[0], 0);
    ASSERT_EQ(eng(1).mrecv(*m1, d1.data(), d1.size(), nullptr, st), status::ok);
    EXPECT_EQ(st.error, MPIV_OK);
    EXPECT_EQ(st.tag, 1);
    EXPECT_TRUE(intact(d1.data(), sizes[0], 300));

    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(finish(s[i]).error, MPIV_OK) << i;
    }
    EXPECT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::not_found);
}

// A receive into a sink gets the message's bytes in order, in pieces of at most
// MPIV_P2P_SINK_PIECE (a rendezvous message from another process), and only up to its
// capacity; every protocol, both engines and self, mrecv included.
struct sink_log {
    std::vector<unsigned char> bytes;
    std::size_t pieces = 0;
    std::size_t largest = 0;
    bool in_order = true;
    static void take(void *ctx, std::size_t offset, const void *data, std::size_t len)
    {
        auto *l = static_cast<sink_log *>(ctx);
        l->in_order = l->in_order && offset == l->bytes.size();
        const auto *p = static_cast<const unsigned char *>(data);
        l->bytes.insert(l->bytes.end(), p, p + len);
        ++l->pieces;
        l->largest = std::max(l->largest, len);
    }
};

TEST_F(engine_test, sink_receives_pieces_in_order)
{
    start();
    const std::size_t sizes[] = {0, 20, k_limit, 3 * MPIV_P2P_SINK_PIECE + 100};
    const int pairs[][2] = {{0, 1}, {1, 1}};
    std::uint32_t seed = 400;
    for (const auto &pr : pairs) {
        for (const std::size_t n : sizes) {
            for (const bool truncate : {false, true}) {
                const int from = pr[0];
                const int to = pr[1];
                SCOPED_TRACE(::testing::Message() << from << "->" << to << " bytes " << n
                                                  << (truncate ? " truncated" : ""));
                ++seed;
                const std::size_t cap = truncate ? n / 2 : n;
                std::vector<unsigned char> src = patterned(n, seed);
                sink_log got;
                rop r;
                r.rc = eng(to).irecv(comm(to), from, 7,
                                     ep::recv_target{nullptr, cap, &sink_log::take, &got}, &r.rec,
                                     r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                send(from, to, 7, src.data(), n, s);
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.bytes, cap);
                EXPECT_EQ(rs.sent, n);
                EXPECT_EQ(rs.error, cap < n ? MPIV_ERR_TRUNCATE : MPIV_OK);
                ASSERT_EQ(got.bytes.size(), cap);
                EXPECT_TRUE(intact(got.bytes.data(), cap, seed)) << "content";
                EXPECT_TRUE(got.in_order);
                if (from != to && cap > k_limit) {
                    EXPECT_LE(got.largest, std::size_t{MPIV_P2P_SINK_PIECE});
                    EXPECT_EQ(got.pieces, (cap + MPIV_P2P_SINK_PIECE - 1) / MPIV_P2P_SINK_PIECE);
                } else {
                    EXPECT_EQ(got.pieces, cap == 0 ? 0u : 1u) << "one piece";
                }
                EXPECT_EQ(finish(s).error, MPIV_OK);
            }
        }
    }
    // mrecv into a sink, after an improbe.
    std::vector<unsigned char> src = patterned(2 * MPIV_P2P_SINK_PIECE, 499);
    sop s;
    send(0, 1, 9, src.data(), src.size(), s);
    ep::inmsg *m = nullptr;
    mpiv_p2p_status_t ps{};
    ASSERT_TRUE(until([&] { return eng(1).improbe(comm(1), 0, 9, m, ps) == status::ok; }));
    sink_log got;
    mpiv_p2p_status_t st{};
    ASSERT_EQ(eng(1).mrecv(*m, ep::recv_target{nullptr, src.size(), &sink_log::take, &got}, nullptr, st),
              status::ok);
    EXPECT_EQ(st.error, MPIV_OK);
    ASSERT_EQ(got.bytes.size(), src.size());
    EXPECT_TRUE(intact(got.bytes.data(), src.size(), 499));
    EXPECT_EQ(got.pieces, 2u);
    EXPECT_EQ(finish(s).error, MPIV_OK);
}

// A gather send: the receiver reads the sender's ranges in order, into a buffer or a sink
// (pieces cut across range boundaries), cut at its capacity; to another engine and to
// itself; zero-length ranges are skipped.
// Where a receive of capacity @p cap goes: @p dst, or (to_sink) the sink that logs into @p got.
ep::recv_target target(bool to_sink, std::vector<unsigned char> &dst, std::size_t cap,
                       sink_log &got)
{
    return to_sink ? ep::recv_target{nullptr, cap, &sink_log::take, &got}
                   : ep::recv_target{dst.data(), cap, nullptr, nullptr};
}

// The checks of a receive of @p total bytes of @p expected with capacity @p cap, made into
// @p dst or (to_sink) @p got.
void expect_received(const mpiv_p2p_status_t &rs, std::size_t cap, std::size_t total,
                     bool to_sink, const sink_log &got, const std::vector<unsigned char> &dst,
                     const std::vector<unsigned char> &expected)
{
    EXPECT_EQ(rs.bytes, cap);
    EXPECT_EQ(rs.sent, total);
    EXPECT_EQ(rs.error, cap < total ? MPIV_ERR_TRUNCATE : MPIV_OK);
    const unsigned char *bytes = to_sink ? got.bytes.data() : dst.data();
    if (to_sink) {
        ASSERT_EQ(got.bytes.size(), cap);
        EXPECT_TRUE(got.in_order);
    } else {
        EXPECT_TRUE(guard_intact(dst, cap)) << "wrote past the capacity";
    }
    EXPECT_TRUE(std::equal(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(cap),
                           bytes))
        << "content";
}

TEST_F(engine_test, gather_send_reads_the_ranges_in_order)
{
    start();
    // 3 * MPIV_P2P_SINK_PIECE + 300 bytes in ranges of odd sizes, gaps between them.
    const std::size_t lengths[] = {1000, 0, 70001, 5, 65536, 60000, 366};
    std::size_t total = 0;
    for (std::size_t l : lengths) {
        total += l;
    }
    ASSERT_EQ(total, 3u * MPIV_P2P_SINK_PIECE + 300);
    std::vector<unsigned char> space(total + 64 * std::size(lengths), k_guard);
    std::vector<struct iovec> iov;
    std::vector<unsigned char> expected;
    std::size_t at = 0;
    std::uint32_t seed = 600;
    for (std::size_t l : lengths) {
        std::vector<unsigned char> part = patterned(l, ++seed);
        std::copy(part.begin(), part.end(), space.begin() + static_cast<std::ptrdiff_t>(at));
        expected.insert(expected.end(), part.begin(), part.end());
        iov.push_back({space.data() + at, l});
        at += l + 64;
    }
    const int pairs[][2] = {{0, 1}, {1, 1}};
    for (const auto &pr : pairs) {
        for (const bool to_sink : {false, true}) {
            for (const std::size_t cap : {total, std::size_t{70500}}) {
                SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " cap " << cap
                                                  << (to_sink ? " sink" : " buffer"));
                std::vector<unsigned char> dst(cap + 16, k_guard);
                sink_log got;
                rop r;
                r.rc = eng(pr[1]).irecv(comm(pr[1]), pr[0], 11, target(to_sink, dst, cap, got),
                                        &r.rec, r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                s.rc = eng(pr[0]).isend_gather(comm(pr[0]), static_cast<std::uint32_t>(pr[1]),
                                               pr[0], pr[1], 11, iov.data(), iov.size(), 0,
                                               &s.rec, s.op, s.st);
                ASSERT_EQ(s.rc, status::inprogress) << "always a rendezvous";
                expect_received(finish(r), cap, total, to_sink, got, dst, expected);
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.error, MPIV_OK);
                EXPECT_EQ(ss.bytes, total);
            }
        }
    }
    sop bad;
    EXPECT_EQ(eng(0).isend_gather(comm(0), 1, 0, 1, 11, nullptr, 2, 0, &bad.rec, bad.op, bad.st),
              status::invalid_arg);
    const struct iovec hole = {nullptr, 8};
    EXPECT_EQ(eng(0).isend_gather(comm(0), 1, 0, 1, 11, &hole, 1, 0, &bad.rec, bad.op, bad.st),
              status::invalid_arg);
}

// A streamed send: another thread writes the bytes after the send started, publishing its
// count part by part; the receiver (another process's endpoint, or this one's) gets them all,
// into a buffer or a sink, truncated or not, and the send completes only after the last
// part is published.
TEST_F(engine_test, streamed_send_is_read_as_it_is_written)
{
    start();
    const std::size_t total = 3 * MPIV_P2P_SINK_PIECE + 300;
    const std::vector<unsigned char> expected = patterned(total, 900);
    const int pairs[][2] = {{0, 1}, {1, 1}};
    for (const auto &pr : pairs) {
        for (const bool to_sink : {false, true}) {
            for (const std::size_t cap : {total, std::size_t{70500}, std::size_t{0}}) {
                SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " cap " << cap
                                                  << (to_sink ? " sink" : " buffer"));
                std::vector<unsigned char> src(total, 0);
                std::size_t ready = 0;
                std::vector<unsigned char> dst(cap + 16, k_guard);
                sink_log got;
                rop r;
                r.rc = eng(pr[1]).irecv(comm(pr[1]), pr[0], 12, target(to_sink, dst, cap, got),
                                        &r.rec, r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                s.rc = eng(pr[0]).isend_streamed(comm(pr[0]), static_cast<std::uint32_t>(pr[1]),
                                                 pr[0], pr[1], 12, src.data(), total, &ready, 0,
                                                 &s.rec, s.op, s.st);
                ASSERT_EQ(s.rc, status::inprogress) << "always a rendezvous";
                std::atomic<bool> all_written{false};
                std::thread writer([&] {
                    for (std::size_t at = 0; at < total;) {
                        const std::size_t end = std::min(total, at + 50000);
                        std::copy(expected.begin() + static_cast<std::ptrdiff_t>(at),
                                  expected.begin() + static_cast<std::ptrdiff_t>(end),
                                  src.begin() + static_cast<std::ptrdiff_t>(at));
                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                        if (end == total) {
                            all_written.store(true, std::memory_order_relaxed);
                        }
                        __atomic_store_n(&ready, end, __ATOMIC_RELEASE);
                        at = end;
                    }
                });
                expect_received(finish(r), cap, total, to_sink, got, dst, expected);
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_TRUE(all_written.load(std::memory_order_relaxed))
                    << "the send completed before its last part was published";
                EXPECT_EQ(ss.error, MPIV_OK);
                writer.join();
            }
        }
    }
    sop bad;
    std::size_t ready = 0;
    EXPECT_EQ(eng(0).isend_streamed(comm(0), 1, 0, 1, 12, nullptr, 8, &ready, 0, &bad.rec, bad.op,
                                    bad.st),
              status::invalid_arg);
}

// Cancel: an unmatched receive goes away silently (the message it would have taken stays
// for the next receive); a matched one cannot be cancelled.
TEST_P(engine_modes, cancel)
{
    start();
    std::vector<unsigned char> dst(64, k_guard);
    for (const std::int32_t src_pattern : {0, k_any}) {
        rop r;
        recv(1, src_pattern, src_pattern == k_any ? k_any : 8, dst.data(), 64, r);
        ASSERT_EQ(r.rc, status::inprogress);
        EXPECT_EQ(eng(1).cancel(r.op), status::ok);
        EXPECT_EQ(eng(1).cancel(r.op), status::not_found) << "cancelled already";

        const std::vector<unsigned char> src = patterned(40, 400);
        sop s;
        send(0, 1, 8, src.data(), 40, s);
        mpiv_p2p_status_t ps{};
        ASSERT_TRUE(until([&] { return eng(1).iprobe(comm(1), 0, 8, ps) == status::ok; }))
            << "the message stays unexpected";
        pump_for(50);
        EXPECT_EQ(calls_of(r.rec), 0) << "a cancelled receive has no callback";
        EXPECT_TRUE(guard_intact(dst, 0)) << "nor receives data";
        rop r2;
        recv(1, 0, 8, dst.data(), 64, r2);
        ASSERT_EQ(r2.rc, status::ok);
        EXPECT_TRUE(intact(dst.data(), 40, 400));
        std::fill(dst.begin(), dst.end(), k_guard);
    }

    // Matched later by an arrival (callback came), and matched at once.
    const std::vector<unsigned char> src = patterned(k_limit + 1, 401);
    rop r;
    recv(1, 0, 9, dst.data(), 64, r);
    sop s;
    send(0, 1, 9, src.data(), 10, s);
    ASSERT_TRUE(until([&] { return calls_of(r.rec) == 1; }));
    EXPECT_EQ(eng(1).cancel(r.op), status::not_found);
    rop r2;
    sop s2;
    std::vector<unsigned char> big(k_limit + 1);
    send(0, 1, 10, src.data(), src.size(), s2);
    ASSERT_TRUE(until([&] {
        mpiv_p2p_status_t ps{};
        return eng(1).iprobe(comm(1), 0, 10, ps) == status::ok;
    }));
    recv(1, 0, 10, big.data(), big.size(), r2);
    ASSERT_EQ(r2.rc, status::ok);
    EXPECT_EQ(eng(1).cancel(r2.op), status::not_found);
    EXPECT_TRUE(intact(big.data(), big.size(), 401));
    EXPECT_EQ(finish(s2).error, MPIV_OK);
    pump_for(20);
    EXPECT_EQ(calls_of(r.rec), 1);
    EXPECT_EQ(calls_of(r2.rec), 0);
}

// Message i of a sender carries tag i, sizes cycling through all protocols.
std::size_t order_size(std::size_t i)
{
    static const std::size_t sizes[] = {0, 8, 24, 100, k_limit, k_limit + 1, 3000, 25};
    return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

// ANY_SOURCE/ANY_TAG receives see each sender's messages in its sending order, with
// engine 0 and engine 1 itself sending to engine 1.
TEST_P(engine_modes, wildcards_keep_the_order_of_each_sender)
{
    start();
    const std::size_t n = iterations(400, 4);
    for (const bool posted_first : {true, false}) {
        SCOPED_TRACE(posted_first ? "posted first" : "unexpected first");
        std::vector<std::vector<unsigned char>> src[2];
        std::vector<sop> s[2] = {std::vector<sop>(n), std::vector<sop>(n)};
        std::vector<rop> r(2 * n);
        std::vector<std::vector<unsigned char>> dst(2 * n);
        const auto post_all = [&] {
            for (std::size_t k = 0; k < 2 * n; ++k) {
                dst[k].assign(k_limit + 1, k_guard);
                recv(1, k_any, k_any, dst[k].data(), dst[k].size(), r[k]);
            }
        };
        if (posted_first) {
            post_all();
        }
        for (std::size_t i = 0; i < n; ++i) {
            for (int from = 0; from < 2; ++from) {
                src[from].push_back(patterned(order_size(i), static_cast<std::uint32_t>(from * 100000 + i)));
                send(from, 1, static_cast<std::int32_t>(i), src[from][i].data(), order_size(i),
                     s[from][i], i % 7 == 3 ? MPIV_P2P_SEND_SYNC : 0);
                ASSERT_TRUE(s[from][i].rc == status::ok || s[from][i].rc == status::inprogress);
            }
            if (i % 16 == 0) {
                pump();
            }
        }
        if (!posted_first) {
            pump_for(100);
            post_all();
        }
        ASSERT_TRUE(until([&] {
            for (auto &x : r) {
                if (!done(x)) {
                    return false;
                }
            }
            return true;
        }));
        std::size_t next[2] = {0, 0};
        for (std::size_t k = 0; k < 2 * n; ++k) {
            const mpiv_p2p_status_t st = finish(r[k]);
            ASSERT_TRUE(st.source == 0 || st.source == 1) << st.source;
            const std::size_t i = static_cast<std::size_t>(st.tag);
            ASSERT_EQ(i, next[st.source]) << "receive " << k << " out of order from " << st.source;
            ++next[st.source];
            EXPECT_EQ(st.bytes, order_size(i));
            EXPECT_EQ(st.error, MPIV_OK);
            EXPECT_TRUE(intact(dst[k].data(), st.bytes, static_cast<std::uint32_t>(st.source * 100000 + i)));
        }
        for (int from = 0; from < 2; ++from) {
            for (std::size_t i = 0; i < n; ++i) {
                EXPECT_EQ(finish(s[from][i]).bytes, order_size(i));
            }
        }
    }

    // Specific source with any tag, any source with a specific tag.
    const std::vector<unsigned char> src = patterned(16, 7);
    sop s[4];
    const std::int32_t tags[4] = {1, 2, 1, 2};
    for (int i = 0; i < 4; ++i) {
        send(0, 1, tags[i], src.data(), 16, s[i]);
    }
    ASSERT_TRUE(until([&] {
        mpiv_p2p_status_t ps{};
        return eng(1).iprobe(comm(1), 0, 2, ps) == status::ok;
    }));
    pump_for(50);
    unsigned char d[16];
    rop a;
    rop b;
    rop c;
    recv(1, k_any, 2, d, 16, a);
    ASSERT_EQ(a.rc, status::ok);
    EXPECT_EQ(a.st.tag, 2);
    recv(1, 0, k_any, d, 16, b);
    ASSERT_EQ(b.rc, status::ok);
    EXPECT_EQ(b.st.tag, 1) << "the first message left";
    recv(1, 1, k_any, d, 16, c);
    EXPECT_EQ(c.rc, status::inprogress) << "nothing from rank 1";
    EXPECT_EQ(eng(1).cancel(c.op), status::ok);
    rop e;
    rop f;
    recv(1, k_any, k_any, d, 16, e);
    recv(1, k_any, k_any, d, 16, f);
    ASSERT_EQ(e.rc, status::ok);
    ASSERT_EQ(f.rc, status::ok);
    EXPECT_EQ(e.st.tag, 1);
    EXPECT_EQ(f.st.tag, 2);
}

// Arrivals for a context id without a communicator wait for comm_create and are then
// matched in their order, also while more arrive during comm_create.
TEST_F(engine_test, arrivals_before_comm_create)
{
    start();
    const std::size_t n = iterations(200, 4);
    for (const std::uint16_t cid : {std::uint16_t{9}, std::uint16_t{10}}) {
        SCOPED_TRACE(::testing::Message() << "cid " << cid);
        const bool concurrent = cid == 10;
        ep::comm_state *c0 = nullptr;
        ASSERT_EQ(eng(0).comm_create(cid, 2, 0, c0), status::ok);
        std::vector<std::vector<unsigned char>> src(2 * n);
        std::vector<sop> s(2 * n);
        std::atomic<std::size_t> sent{0};
        const auto send_range = [&](std::size_t from, std::size_t to) {
            for (std::size_t i = from; i < to; ++i) {
                src[i] = patterned(order_size(i), static_cast<std::uint32_t>(cid * 10000 + i));
                s[i].rc = eng(0).isend(*c0, 1, 0, 1, static_cast<std::int32_t>(i), src[i].data(),
                                       src[i].size(), i % 5 == 2 ? MPIV_P2P_SEND_SYNC : 0,
                                       &s[i].rec, s[i].op, s[i].st);
                // Relaxed: a progress hint for the main thread only.
                sent.store(i + 1, std::memory_order_relaxed);
                pump();
            }
        };
        send_range(0, n);
        pump_for(200);
        ep::comm_state *c1 = nullptr;
        std::thread late;
        if (concurrent) {
            late = std::thread([&] { send_range(n, 2 * n); });
            while (sent.load(std::memory_order_relaxed) < n + n / 4) {
                std::this_thread::yield();
            }
        }
        ASSERT_EQ(eng(1).comm_create(cid, 2, 0, c1), status::ok);
        if (concurrent) {
            late.join();
        } else {
            mpiv_p2p_status_t ps{};
            ASSERT_EQ(eng(1).iprobe(*c1, k_any, k_any, ps), status::ok)
                << "the early arrivals are matched by comm_create";
            EXPECT_EQ(ps.tag, 0);
            send_range(n, 2 * n);
        }
        for (std::size_t i = 0; i < 2 * n; ++i) {
            std::vector<unsigned char> dst(k_limit + 1, k_guard);
            rop r;
            r.rc = eng(1).irecv(*c1, 0, k_any, dst.data(), dst.size(), &r.rec, r.op, r.st);
            const mpiv_p2p_status_t st = finish(r);
            ASSERT_EQ(st.tag, static_cast<std::int32_t>(i)) << "order";
            EXPECT_EQ(st.bytes, order_size(i));
            EXPECT_TRUE(intact(dst.data(), st.bytes, static_cast<std::uint32_t>(cid * 10000 + i)));
        }
        for (std::size_t i = 0; i < 2 * n; ++i) {
            EXPECT_EQ(finish(s[i]).error, MPIV_OK);
        }
        mpiv_p2p_status_t ps{};
        EXPECT_EQ(eng(1).iprobe(*c1, k_any, k_any, ps), status::not_found);
        EXPECT_EQ(eng(0).comm_destroy(c0), status::ok);
        EXPECT_EQ(eng(1).comm_destroy(c1), status::ok);
    }
}

TEST_F(engine_test, comm_create_rejects_bad_arguments)
{
    start();
    log_capture log;
    ep::comm_state *c = nullptr;
    EXPECT_EQ(eng(0).comm_create(k_cid, 2, 0, c), status::invalid_arg) << "cid in use";
    EXPECT_NE(log.last().find("in use"), std::string::npos) << log.last();
    EXPECT_EQ(eng(0).comm_create(11, 0, 0, c), status::invalid_arg) << "size 0";
    EXPECT_EQ(eng(0).comm_create(11, 2, 8, c), status::invalid_arg) << "unknown assertion";
    EXPECT_EQ(c, nullptr);
    ASSERT_EQ(eng(0).comm_create(11, 2, MPIV_P2P_ASSERT_NO_ANY_SOURCE, c), status::ok);
    ep::recv_op op;
    record rec;
    mpiv_p2p_status_t st{};
    EXPECT_EQ(eng(0).irecv(*c, k_any, 0, nullptr, 0, &rec, op, st), status::invalid_arg)
        << "ANY_SOURCE asserted away";
    ep::comm_state *live = nullptr;
    ASSERT_EQ(eng(0).comm_create(12, 2, 0, live), status::ok);
    EXPECT_EQ(eng(0).comm_destroy(c), status::ok);
    // A state that is not the live one of its context id: here another id's (a destroyed
    // handle is freed and may not be passed again).
    ep::comm_state forged{};
    forged.cid = 12;
    EXPECT_EQ(eng(0).comm_destroy(&forged), status::invalid_handle);
    EXPECT_EQ(eng(0).comm_destroy(live), status::ok);
}

// MPI's progress rule: Isend(tag 1), Isend(tag 2), ... against Recv(tag 3), Recv(tag 2),
// Recv(tag 1) must complete. With a single packet, tag 1 (unexpected at the receiver)
// holds it until its receive: a later send must not wait for that packet.
TEST_F(engine_test, a_send_never_waits_for_a_packet_an_unexpected_message_holds)
{
    mpiv_p2p_params_t p[2] = {params_for(0), params_for(1)};
    for (auto &x : p) {
        x.endpoints = 1;
        x.packet_count = 1;
    }
    start(p[0], p[1]);
    for (const unsigned flags : {0u, unsigned{MPIV_P2P_SEND_SYNC}}) {
        SCOPED_TRACE(flags != 0 ? "synchronous" : "standard");
        std::vector<unsigned char> src[3];
        sop s[3];
        for (int i = 0; i < 3; ++i) {
            src[i] = patterned(100 + i, 500 + i);
            send(0, 1, i + 1, src[i].data(), src[i].size(), s[i], i == 0 ? 0 : flags);
        }
        EXPECT_EQ(s[0].rc, status::ok) << "the first one takes the packet";
        for (int i = 2; i >= 0; --i) {
            std::vector<unsigned char> dst(200, k_guard);
            rop r;
            recv(1, 0, i + 1, dst.data(), dst.size(), r);
            const mpiv_p2p_status_t st = finish(r);
            ASSERT_EQ(calls_of(r.rec) + (r.rc == status::ok ? 1 : 0), 1) << "tag " << i + 1;
            EXPECT_EQ(st.bytes, src[i].size());
            EXPECT_TRUE(intact(dst.data(), src[i].size(), 500 + i)) << "tag " << i + 1;
        }
        for (auto &x : s) {
            EXPECT_EQ(finish(x).error, MPIV_OK);
        }
    }
}

// ------------------------------------------------------------------ back-pressure

struct bp_config {
    std::uint32_t endpoints;
    std::uint32_t packets;
};

class engine_backpressure : public engine_test, public ::testing::WithParamInterface<bp_config> {};

std::size_t bp_size(std::size_t k)
{
    static const std::size_t sizes[] = {8, 24, 200, k_limit, 25, k_limit + 1, 1000, 64};
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
            std::vector<std::vector<unsigned char>> dst(k_window,
                                                        std::vector<unsigned char>(k_limit + 1));
            std::size_t posted = 0;
            std::size_t taken = 0;
            const auto post = [&] {
                rop &r = win[posted % k_window];
                r.rec.calls.store(0, std::memory_order_relaxed);
                recv(e, 1 - e, k_any, dst[posted % k_window].data(), k_limit + 1, r);
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
                         ::testing::Values(bp_config{1, 1}, bp_config{1, 2}, bp_config{2, 2},
                                           bp_config{4, 1}),
                         [](const ::testing::TestParamInfo<bp_config> &info) {
                             return "endpoints_" + std::to_string(info.param.endpoints) +
                                    "_packets_" + std::to_string(info.param.packets);
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

INSTANTIATE_TEST_SUITE_P(threads, engine_modes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                             return info.param ? std::string("serialized") : std::string("multiple");
                         });

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
    if (mpiv::shm::cma_available()) {
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

// The address layout that connect() parses (engine::address_t).
struct address_mirror {
    std::uint32_t version;
    std::uint32_t pid;
    std::int32_t fd;
    std::uint32_t self;
    std::uint64_t bytes;
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
