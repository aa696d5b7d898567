// engine back-pressure per destination, with three engines in one process (peers 0, 1
// and 2): engine 1's queues are tiny and it is never polled until a test says so.
// - Traffic to a peer with room flows while another peer's queues are full: inline,
//   packet, synchronous and rendezvous sends, and the ACK and FIN they need.
// - A send that waits for room completes only once it is in the queue; one without a
//   request (user NULL) is refused and sends nothing; queued sends keep their order.
// - A receive whose FIN must go to a full queue completes only once the FIN is pushed,
//   whether the message was expected, unexpected or taken by improbe + mrecv.
// - wait_settle() returns only once every completion of an any-wait has landed.
// - An idle server thread sleeps on the doorbell, and a message wakes it; senders ring
//   with a compiler barrier only where the sleeper makes a heavy barrier.
// - Communicators destroyed while another thread drains are freed safely (run under
//   ThreadSanitizer and ASan).
#include "endpoints/engine.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/membarrier.hpp"
#include "endpoints/shm/cma.hpp"
#include "test/gtest/common/test_util.hpp"
#include "test/gtest/endpoints/engine_test_util.hpp"

namespace mpiv::ep {
struct engine_test_access {
    static std::uint32_t sleepers(engine &e) { return e.shm_.sleeping().load(std::memory_order_relaxed); }
    static shm::transport &shm(engine &e) { return e.shm_; }
};
} // namespace mpiv::ep

namespace mpiv::shm {
struct transport_test_access {
    static bool light_ring(const transport &t, std::uint32_t peer) { return t.peers_[peer].light_ring; }
};
} // namespace mpiv::shm

namespace {

using mpiv::status;
namespace ep = mpiv::ep;

constexpr std::uint16_t k_cid = 9;
constexpr int k_engines = 3;
constexpr std::uint32_t k_limit = 4096;
constexpr std::size_t k_large = 64 * 1024;

std::chrono::seconds timeout() { return std::chrono::seconds(60 * mpiv::test::time_multiplier()); }

struct record {
    std::atomic<int> calls{0};
    mpiv_p2p_status_t st{};
};

void on_complete(void *user, const mpiv_p2p_status_t *s)
{
    auto *r = static_cast<record *>(user);
    r->st = *s;
    // Release: pairs with the acquire in calls_of().
    r->calls.fetch_add(1, std::memory_order_release);
}

int calls_of(const record &r)
{
    // Acquire: pairs with the release increment in on_complete().
    return r.calls.load(std::memory_order_acquire);
}

struct sop {
    ep::send_op op{};
    record rec;
    mpiv_p2p_status_t st{};
    status rc = status::internal;
    bool done() const { return rc == status::ok || calls_of(rec) >= 1; }
};

struct rop {
    ep::recv_op op{};
    record rec;
    mpiv_p2p_status_t st{};
    status rc = status::internal;
    bool done() const { return rc == status::ok || calls_of(rec) >= 1; }
};

class outbound_test : public ::testing::Test {
  protected:
    void SetUp() override
    {
        ASSERT_TRUE(mpiv::shm::cma_available()) << "process_vm_readv is not permitted here";
        for (std::uint32_t i = 0; i < k_engines; ++i) {
            mpiv_p2p_params_t p = mpiv::test::small_engine_params(i, k_engines, on_complete);
            // Engine 1 holds two one-slot messages; the others have room.
            p.queue_slots = i == 1 ? 2 : 1024;
            p.packet_count = 64;
            ASSERT_EQ(ep::engine::create(p, eng_[i]), status::ok);
        }
        mpiv::test::connect_engines(eng_, k_engines, k_cid, comm_);
    }
    void TearDown() override
    {
        for (auto &e : eng_) {
            e.reset();
        }
    }

    // Engines 0 and 2 only: engine 1 does not receive.
    int pump02() { return eng_[0]->progress() + eng_[2]->progress(); }
    int pump_all() { return pump02() + eng_[1]->progress(); }
    bool until(const std::function<int()> &pump, const std::function<bool()> &pred)
    {
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        while (!pred()) {
            if (pump() == 0) {
                if (std::chrono::steady_clock::now() > deadline) {
                    return pred();
                }
                std::this_thread::yield();
            }
        }
        return true;
    }

    void send(int from, int to, std::int32_t tag, const void *buf, std::size_t n, sop &s,
              unsigned flags = 0, bool with_request = true)
    {
        s.rc = eng_[from]->isend(*comm_[from], static_cast<std::uint32_t>(to), from, to, tag, buf,
                                 n, flags, with_request ? &s.rec : nullptr, s.op, s.st);
    }
    void recv(int at, std::int32_t source, std::int32_t tag, void *buf, std::size_t cap, rop &r)
    {
        r.rc = eng_[at]->irecv(*comm_[at], source, tag, buf, cap, &r.rec, r.op, r.st);
    }

    // Fill engine 1's queues from engine 0 with one-slot messages until one has to wait;
    // returns the sends (the last ones in progress, waiting for room).
    std::vector<std::unique_ptr<sop>> flood_engine1(std::vector<int> &payload)
    {
        std::vector<std::unique_ptr<sop>> ops;
        for (std::size_t i = 0; i < payload.size(); ++i) {
            payload[i] = static_cast<int>(i);
            ops.push_back(std::make_unique<sop>());
            send(0, 1, 1, &payload[i], sizeof(int), *ops.back());
            EXPECT_TRUE(ops.back()->rc == status::ok || ops.back()->rc == status::inprogress);
        }
        return ops;
    }

    std::unique_ptr<ep::engine> eng_[k_engines];
    ep::comm_state *comm_[k_engines] = {};
};

// Engine 0's sends to engine 1 wait for room; everything engine 0 sends to engine 2 (and
// the ACK and FIN engine 2 owes it) goes through meanwhile. The queued sends complete
// only once pushed, and engine 1 gets them in order when it drains.
TEST_F(outbound_test, a_full_peer_does_not_hold_up_the_others)
{
    std::vector<int> payload(8);
    auto flood = flood_engine1(payload);
    ASSERT_EQ(flood[0]->rc, status::ok) << "room for the first";
    ASSERT_EQ(flood[1]->rc, status::ok) << "and the second";
    for (std::size_t i = 2; i < flood.size(); ++i) {
        ASSERT_EQ(flood[i]->rc, status::inprogress) << "send " << i << " waits for room";
    }

    // To engine 2: inline without a request (done at once), inline, synchronous, packet,
    // rendezvous; engine 1 stays silent throughout.
    int small = 42;
    sop s_plain, s_inline, s_sync, s_packet, s_large;
    send(0, 2, 2, &small, sizeof small, s_plain, 0, false);
    EXPECT_EQ(s_plain.rc, status::ok) << "an inline send to a peer with room is done at once";
    send(0, 2, 2, &small, sizeof small, s_inline);
    EXPECT_EQ(s_inline.rc, status::ok);
    send(0, 2, 2, &small, sizeof small, s_sync, MPIV_P2P_SEND_SYNC);
    std::vector<unsigned char> packet(2000, 0x5A), large(k_large, 0xA5);
    send(0, 2, 2, packet.data(), packet.size(), s_packet);
    send(0, 2, 2, large.data(), large.size(), s_large);
    rop r[5];
    std::vector<unsigned char> got(k_large);
    int got_small[3] = {};
    for (int i = 0; i < 3; ++i) {
        recv(2, 0, 2, &got_small[i], sizeof(int), r[i]);
    }
    std::vector<unsigned char> got_packet(packet.size());
    recv(2, 0, 2, got_packet.data(), got_packet.size(), r[3]);
    recv(2, 0, 2, got.data(), got.size(), r[4]);
    ASSERT_TRUE(until([&] { return pump02(); }, [&] {
        bool all = s_sync.done() && s_large.done() && s_packet.done();
        for (const rop &x : r) {
            all = all && x.done();
        }
        return all;
    })) << "traffic to engine 2 waited behind engine 1's full queues";
    EXPECT_EQ(got_small[0], 42);
    EXPECT_EQ(got_small[2], 42);
    EXPECT_EQ(got_packet, packet);
    EXPECT_EQ(got, large);
    for (std::size_t i = 2; i < flood.size(); ++i) {
        EXPECT_EQ(calls_of(flood[i]->rec), 0) << "send " << i << " completed before it was pushed";
    }

    // Engine 1 drains: every message, in order; every queued send completes.
    for (std::size_t i = 0; i < flood.size(); ++i) {
        int v = -1;
        rop x;
        recv(1, 0, 1, &v, sizeof v, x);
        ASSERT_TRUE(until([&] { return pump_all(); }, [&] { return x.done(); }));
        EXPECT_EQ(v, static_cast<int>(i)) << "order of the queued sends";
    }
    for (std::size_t i = 0; i < flood.size(); ++i) {
        ASSERT_TRUE(until([&] { return pump_all(); }, [&] { return flood[i]->done(); }));
    }
}

// With a request to complete later, an inline send waits (in progress); without one it is
// refused and sends nothing, and draws no sequence number: later messages are not held.
TEST_F(outbound_test, inline_without_request_sends_nothing_when_full)
{
    std::vector<int> payload(3);
    auto flood = flood_engine1(payload);
    ASSERT_EQ(flood[2]->rc, status::inprogress);
    int refused = 99;
    sop s;
    send(0, 1, 1, &refused, sizeof refused, s, 0, false);
    EXPECT_EQ(s.rc, status::retry_nomem);
    int after = 3;
    sop s_after;
    send(0, 1, 1, &after, sizeof after, s_after);
    EXPECT_EQ(s_after.rc, status::inprogress) << "behind the queued send";
    for (int expect : {0, 1, 2, 3}) {
        int v = -1;
        rop x;
        recv(1, 0, 1, &v, sizeof v, x);
        ASSERT_TRUE(until([&] { return pump_all(); }, [&] { return x.done(); }))
            << "message " << expect << " held (a number drawn by the refused send?)";
        EXPECT_EQ(v, expect);
    }
    mpiv_p2p_status_t ps{};
    for (int i = 0; i < 100; ++i) {
        pump_all();
    }
    EXPECT_EQ(eng_[1]->iprobe(*comm_[1], 0, 1, ps), status::not_found) << "the refused send went out";
}

// Engine 2 reads rendezvous messages of engine 1 while engine 1's queues are full: the
// FINs wait, and each receive completes only when its FIN is pushed (a posted receive, an
// unexpected one, and improbe + mrecv).
TEST_F(outbound_test, a_receive_completes_when_its_fin_is_pushed)
{
    std::vector<unsigned char> large(k_large, 0x3C);
    sop s[3];
    for (int i = 0; i < 3; ++i) {
        send(1, 2, 10 + i, large.data(), large.size(), s[i]);
        ASSERT_EQ(s[i].rc, status::inprogress);
    }
    // The RTSs reach engine 2 before engine 1's queues fill up.
    ASSERT_TRUE(until([&] { return eng_[2]->progress(); }, [&] {
        mpiv_p2p_status_t ps{};
        return eng_[2]->iprobe(*comm_[2], 1, 12, ps) == status::ok;
    }));
    std::vector<int> payload(4);
    auto flood = flood_engine1(payload);
    ASSERT_EQ(flood.back()->rc, status::inprogress) << "engine 1's queues are full";

    std::vector<unsigned char> got[3] = {std::vector<unsigned char>(k_large),
                                         std::vector<unsigned char>(k_large),
                                         std::vector<unsigned char>(k_large)};
    rop r_unexpected;
    recv(2, 1, 10, got[0].data(), k_large, r_unexpected);
    EXPECT_EQ(r_unexpected.rc, status::inprogress) << "matched at once, but its FIN waits";
    ep::inmsg *m = nullptr;
    mpiv_p2p_status_t pst{};
    ASSERT_EQ(eng_[2]->improbe(*comm_[2], 1, 11, m, pst), status::ok);
    record mrec;
    mpiv_p2p_status_t mst{};
    EXPECT_EQ(eng_[2]->mrecv(*m, got[1].data(), k_large, &mrec, mst), status::inprogress);
    rop r_posted;
    recv(2, 1, 12, got[2].data(), k_large, r_posted);
    for (int i = 0; i < 200; ++i) {
        pump02();
    }
    EXPECT_EQ(calls_of(r_unexpected.rec), 0) << "completed before its FIN was pushed";
    EXPECT_EQ(calls_of(mrec), 0) << "completed before its FIN was pushed";
    EXPECT_EQ(calls_of(r_posted.rec), 0) << "completed before its FIN was pushed";
    for (auto &x : got) {
        EXPECT_EQ(x, large) << "the bytes are in before the FIN";
    }

    // Engine 1 drains its queues: the FINs go out, the receives and the sends complete.
    ASSERT_TRUE(until([&] { return pump_all(); }, [&] {
        return calls_of(r_unexpected.rec) == 1 && calls_of(mrec) == 1 &&
               calls_of(r_posted.rec) == 1 && s[0].done() && s[1].done() && s[2].done();
    }));
    EXPECT_EQ(r_unexpected.rec.st.bytes, k_large);
    EXPECT_EQ(mrec.st.bytes, k_large);
    EXPECT_EQ(mrec.st.tag, 11);
    EXPECT_EQ(r_posted.rec.st.source, 1);
    for (std::size_t i = 0; i < payload.size(); ++i) {
        int v = -1;
        rop x;
        recv(1, 0, 1, &v, sizeof v, x);
        ASSERT_TRUE(until([&] { return pump_all(); }, [&] { return x.done(); }));
    }
}

// A pthread's wait for any of several completions: the completions that took the waiter
// still land after the wait ended, and wait_settle() waits for them.
TEST_F(outbound_test, wait_settle_waits_for_late_wakes)
{
    ep::engine &e = *eng_[0];
    ep::waiter *w = e.wait_begin(1);
    std::atomic<bool> late_sent{false};
    std::thread waker([&] {
        e.wake(w);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        late_sent.store(true, std::memory_order_relaxed);
        e.wake(w);
    });
    e.wait_end(w);
    e.wait_settle(w, 2);
    EXPECT_TRUE(late_sent.load(std::memory_order_relaxed)) << "settled before the late wake";
    waker.join();
    // The next wait counts only its own completions.
    ep::waiter *w2 = e.wait_begin(1);
    EXPECT_EQ(w2, w) << "a pthread reuses its waiter";
    std::atomic<bool> woke{false};
    std::thread waker2([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        woke.store(true, std::memory_order_relaxed);
        e.wake(w2);
    });
    e.wait_end(w2);
    EXPECT_TRUE(woke.load(std::memory_order_relaxed)) << "a stale wake ended the next wait";
    waker2.join();
}

// With nothing to do, the server thread sleeps on the segment's doorbell (instead of
// polling for ever); a message from a peer rings it, and the server delivers it.
TEST(outbound_server, idle_server_sleeps_and_a_message_wakes_it)
{
    std::unique_ptr<ep::engine> e[2];
    ep::comm_state *c[2] = {};
    for (std::uint32_t i = 0; i < 2; ++i) {
        mpiv_p2p_params_t p = mpiv::test::small_engine_params(i, 2, on_complete);
        p.progress = i == 0 ? MPIV_P2P_PROGRESS_SERVER : MPIV_P2P_PROGRESS_INLINE;
        ASSERT_EQ(ep::engine::create(p, e[i]), status::ok);
    }
    mpiv::test::connect_engines(e, 2, k_cid, c);
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (ep::engine_test_access::sleepers(*e[0]) == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the idle server never slept";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // A receive on engine 0 that only its server can complete.
    int got = 0;
    rop r;
    r.rc = e[0]->irecv(*c[0], 1, 3, &got, sizeof got, &r.rec, r.op, r.st);
    ASSERT_EQ(r.rc, status::inprogress);
    int v = 99;
    sop s;
    s.rc = e[1]->isend(*c[1], 0, 1, 0, 3, &v, sizeof v, 0, nullptr, s.op, s.st);
    ASSERT_EQ(s.rc, status::ok);
    while (calls_of(r.rec) == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the server did not wake up";
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    EXPECT_EQ(got, 99);
}

// Two small engines with inline progress, connected, with communicator k_cid on both.
void two_engines(std::unique_ptr<ep::engine> (&e)[2], ep::comm_state *(&c)[2])
{
    for (std::uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(ep::engine::create(mpiv::test::small_engine_params(i, 2, on_complete), e[i]),
                  status::ok);
    }
    mpiv::test::connect_engines(e, 2, k_cid, c);
}

// Where membarrier(2) works, each process's sleeper makes the heavy barrier and says so in
// its segment header, and its peers ring it with a compiler barrier only; elsewhere both
// sides fence (contrib/model/doorbell.pml). Then an idle server still wakes for a message
// (the test above, with whichever kind this machine has).
TEST(outbound_server, senders_ring_lightly_only_where_the_sleeper_makes_a_heavy_barrier)
{
    std::unique_ptr<ep::engine> e[2];
    ep::comm_state *c[2] = {};
    two_engines(e, c);
    if (HasFatalFailure()) {
        return;
    }
    const bool light = mpiv::base::membarrier_register();
    for (std::uint32_t i = 0; i < 2; ++i) {
        mpiv::shm::transport &t = ep::engine_test_access::shm(*e[i]);
        EXPECT_EQ(t.light_ring(), light) << "engine " << i;
        EXPECT_EQ(mpiv::shm::transport_test_access::light_ring(t, 1 - i), light) << "engine " << i;
    }
}

// One thread drains engine 0 all the time while the test thread creates and destroys a
// communicator on both engines, round after round, and engine 1 sends on it: the destroyed
// ones are freed only once no drain can read them (a use after free shows under the
// sanitizers).
TEST(outbound_lifetime, communicators_destroyed_while_another_thread_drains)
{
    std::unique_ptr<ep::engine> e[2];
    ep::comm_state *c[2] = {};
    two_engines(e, c);
    if (HasFatalFailure()) {
        return;
    }
    constexpr std::uint16_t k_churn = 21;
    std::atomic<bool> stop{false};
    std::thread drainer([&] {
        // Relaxed: only ends the loop.
        while (!stop.load(std::memory_order_relaxed)) {
            e[0]->progress();
        }
    });
    const int rounds = 2000 * mpiv::test::time_multiplier();
    int received = 0;
    for (int i = 0; i < rounds; ++i) {
        // Both sides make the communicator anew (its sequence numbers start over).
        ep::comm_state *mine = nullptr;
        ep::comm_state *sender = nullptr;
        ASSERT_EQ(e[1]->comm_create(k_churn, 2, 0, sender), status::ok);
        ASSERT_EQ(e[0]->comm_create(k_churn, 2, 0, mine), status::ok);
        if (i % 4 == 0) {
            int v = i, got = -1;
            sop s;
            s.rc = e[1]->isend(*sender, 0, 1, 0, 1, &v, sizeof v, 0, nullptr, s.op, s.st);
            ASSERT_EQ(s.rc, status::ok);
            rop r;
            r.rc = e[0]->irecv(*mine, 1, 1, &got, sizeof got, &r.rec, r.op, r.st);
            const auto deadline = std::chrono::steady_clock::now() + timeout();
            while (!r.done()) {
                ASSERT_LT(std::chrono::steady_clock::now(), deadline);
                std::this_thread::yield();
            }
            EXPECT_EQ(got, i);
            ++received;
        }
        ASSERT_EQ(e[0]->comm_destroy(mine), status::ok);
        ASSERT_EQ(e[1]->comm_destroy(sender), status::ok);
    }
    stop.store(true, std::memory_order_relaxed);
    drainer.join();
    EXPECT_EQ(received, (rounds + 3) / 4);
}

} // namespace
