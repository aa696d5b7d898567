// engine against a rogue peer: engine 1's view of engine 0's segment writes what a buggy or
// malicious process of the same user could (random and adversarial queue messages, a
// corrupted packet free stack, the queue's shared head) while engine 0 makes progress.
// Engine 0 must never crash, read or write outside what it owns or maps (run under ASan),
// or stop making progress, and it must report the peer through its fault callback: the
// peer the message names, or "unknown" when it claims to come from engine 0 itself.
#include "endpoints/engine.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "endpoints/shm/cma.hpp"
#include "test/gtest/common/test_util.hpp"
#include "test/gtest/endpoints/engine_test_util.hpp"

namespace mpiv::ep {

struct engine_test_access {
    // engine @p e's producer view of queue @p q of peer @p peer
    static shm::mpsc_queue<> &queue(engine &e, std::uint32_t peer, std::size_t q)
    {
        return e.shm_.at(peer).queues[q];
    }
    static std::byte *segment_base(engine &e, std::uint32_t peer)
    {
        return static_cast<std::byte *>(e.shm_.at(peer).seg.base());
    }
    static std::size_t segment_bytes(engine &e, std::uint32_t peer)
    {
        return e.shm_.at(peer).seg.size();
    }
};

} // namespace mpiv::ep

namespace {

using mpiv::status;
namespace ep = mpiv::ep;
using access = ep::engine_test_access;

constexpr std::uint16_t k_cid = 3;
constexpr std::uint32_t k_unknown = MPIV_P2P_PEER_UNKNOWN;

struct fault_log {
    std::mutex mu;
    std::vector<std::uint32_t> peers;
    std::vector<std::string> what;
} g_faults;

void on_fault(std::uint32_t peer, const char *what)
{
    std::lock_guard<std::mutex> guard(g_faults.mu);
    g_faults.peers.push_back(peer);
    g_faults.what.emplace_back(what);
}

// Engine 1 sees the victim's answers to the rogue's messages (FINs with the forged tokens):
// its own reports are not what the tests check.
void on_rogue_fault(std::uint32_t, const char *) {}

void on_complete(void *, const mpiv_p2p_status_t *) {}

class fuzz_test : public ::testing::Test {
  protected:
    void SetUp() override
    {
        ASSERT_TRUE(mpiv::shm::cma_available());
        {
            std::lock_guard<std::mutex> guard(g_faults.mu);
            g_faults.peers.clear();
            g_faults.what.clear();
        }
        for (std::uint32_t i = 0; i < 2; ++i) {
            // Peer 2 never connects.
            mpiv_p2p_params_t p = mpiv::test::small_engine_params(i, 3, on_complete);
            p.endpoints = 2;
            p.fault = i == 0 ? on_fault : on_rogue_fault;
            p.single_copy = copy_;
            ASSERT_EQ(ep::engine::create(p, e_[i]), status::ok);
        }
        mpiv::test::connect_engines(e_, 2, k_cid, comm_);
    }

    // A wire header from the rogue (engine 1) to the victim (engine 0), kind @p kind.
    static ep::wire header(ep::wire_kind kind)
    {
        ep::wire w{};
        w.kind = kind;
        w.cid = k_cid;
        w.from = 1;
        w.source = 1;
        w.tag = 5;
        return w;
    }
    // Push @p len bytes at @p msg into the victim's inbound queue @p queue (as engine 1),
    // then let it make progress.
    void inject(const void *msg, std::size_t len, std::size_t queue = 0)
    {
        ASSERT_EQ(access::queue(*e_[1], 0, queue).try_push(msg, len), status::ok);
        for (int i = 0; i < 8; ++i) {
            e_[0]->progress();
        }
    }
    void inject(const ep::wire &w, std::size_t queue = 0) { inject(&w, sizeof w, queue); }
    std::vector<std::uint32_t> faults()
    {
        std::lock_guard<std::mutex> guard(g_faults.mu);
        return g_faults.peers;
    }
    // The victim still works: a message from engine 1 arrives and matches.
    void expect_alive()
    {
        int v = 17, got = 0;
        ep::send_op sop{};
        mpiv_p2p_status_t st{};
        ASSERT_EQ(e_[1]->isend(*comm_[1], 0, 1, 0, 77, &v, sizeof v, 0, nullptr, sop, st),
                  status::ok);
        ep::recv_op rop{};
        status s = status::internal;
        for (int i = 0; i < 1000 && s != status::ok; ++i) {
            e_[0]->progress();
            mpiv_p2p_status_t ps{};
            if (e_[0]->iprobe(*comm_[0], 1, 77, ps) == status::ok) {
                s = e_[0]->irecv(*comm_[0], 1, 77, &got, sizeof got, nullptr, rop, st);
            }
        }
        EXPECT_EQ(s, status::ok);
        EXPECT_EQ(got, 17);
    }

    std::vector<std::string> fault_texts()
    {
        std::lock_guard<std::mutex> guard(g_faults.mu);
        return g_faults.what;
    }

    std::unique_ptr<ep::engine> e_[2];
    ep::comm_state *comm_[2] = {};
    mpiv_p2p_single_copy_t copy_ = MPIV_P2P_SINGLE_COPY_AUTO; // SetUp()'s engines
};

// The first token a fresh token table issues (index 0, generation 1).
constexpr std::uint64_t k_first_token = std::uint64_t{1} << 32;

// Each adversarial message alone: dropped, reported once with the peer it names.
TEST_F(fuzz_test, adversarial_messages_are_reported)
{
    struct adversarial {
        const char *what;
        ep::wire w;
        std::uint32_t blamed;
    };
    std::vector<adversarial> cases;
    ep::wire w = header(ep::wire_kind::fin);
    w.u.ref.token = 0x1234567812345678ull; // not ours: an address in the old scheme
    cases.push_back({"FIN with a forged token", w, 1});
    w = header(ep::wire_kind::ack);
    w.u.ref.token = std::uint64_t{1} << 32; // generation 1, index 0: plausible, not live
    cases.push_back({"ACK with a token that is not live", w, 1});
    w = header(ep::wire_kind::eager_packet);
    w.u.ref.where = 3; // not a packet offset
    cases.push_back({"packet offset", w, 1});
    w = header(ep::wire_kind::eager_packet);
    w.size = std::uint64_t{1} << 40; // larger than a packet
    cases.push_back({"packet size", w, 1});
    w = header(ep::wire_kind::eager_inline);
    w.size = 1000;
    w.inline_bytes = 1000;
    cases.push_back({"inline size", w, 1});
    w = header(ep::wire_kind::eager_inline);
    w.size = 8;
    w.inline_bytes = 4;
    cases.push_back({"inline sizes disagree", w, 1});
    w = header(ep::wire_kind::rts);
    w.from = 0; // "from the victim itself": its addresses would be read locally
    w.size = 4096;
    w.u.ref.where = 0x1000;
    cases.push_back({"rendezvous claiming the victim's own send", w, k_unknown});
    w = header(ep::wire_kind::rts);
    w.flags = ep::k_wire_gather;
    w.size = 16;
    w.u.ref.spare = std::uint64_t{1} << 60;
    cases.push_back({"gather list length", w, 1});
    w = header(ep::wire_kind::eager_inline);
    w.from = 77; // no such peer
    cases.push_back({"sender index", w, k_unknown});
    w = header(ep::wire_kind::eager_inline);
    w.from = 2; // a peer index that never connected
    cases.push_back({"unconnected sender", w, k_unknown});
    w = header(static_cast<ep::wire_kind>(200));
    cases.push_back({"unknown kind", w, 1});
    w = header(ep::wire_kind::eager_inline);
    w.source = 9; // outside the 2-rank communicator
    cases.push_back({"source rank outside the communicator", w, 1});
    w = header(ep::wire_kind::cts);
    w.u.ref.token = k_first_token; // no send of the victim waits
    w.size = 100;
    w.u.ref.spare = k_first_token;
    cases.push_back({"CTS naming no send", w, 1});
    w = header(ep::wire_kind::frag);
    w.u.ref.token = k_first_token; // no receive of the victim waits for pieces
    w.size = 100;
    cases.push_back({"FRAG naming no receive", w, 1});
    for (const adversarial &c : cases) {
        SCOPED_TRACE(c.what);
        TearDown();
        SetUp();
        mpiv::test::log_capture log;
        inject(c.w);
        const auto f = faults();
        ASSERT_EQ(f.size(), 1u) << "one report";
        EXPECT_EQ(f[0], c.blamed);
        inject(c.w); // again: not reported twice
        EXPECT_EQ(faults().size(), 1u);
    }
}

// An endpoints communicator: a message for an endpoint the victim does not have is
// reported, not routed out of bounds.
TEST_F(fuzz_test, message_for_an_endpoint_the_victim_lacks)
{
    const std::uint32_t peer[3] = {0, 0, 1};
    const std::uint16_t index[3] = {0, 1, 0};
    ep::comm_state *h[2] = {};
    ASSERT_EQ(e_[0]->comm_create_endpoints(40, 3, peer, index, nullptr, h, 2), status::ok);
    ep::wire w = header(ep::wire_kind::eager_inline);
    w.cid = 40;
    w.source = 2;
    w.dst_ep = 2; // the victim has endpoints 0 and 1
    inject(w);
    const auto f = faults();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0], 1u);
    w.dst_ep = 1; // a real one still arrives (through endpoint 1's queue)
    w.size = 0;
    inject(w, 1);
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(e_[0]->iprobe(*h[1], 2, 5, ps), status::ok);
    EXPECT_EQ(e_[0]->comm_destroy(h[0]), status::ok);
    EXPECT_EQ(e_[0]->comm_destroy(h[1]), status::ok);
}

// An endpoint's messages come through its own queue only (its matching takes no lock but
// that queue's): one in another queue is a fault, dropped, and the right queue still works.
TEST_F(fuzz_test, message_for_an_endpoint_in_another_queue)
{
    const std::uint32_t peer[3] = {0, 0, 1};
    const std::uint16_t index[3] = {0, 1, 0};
    ep::comm_state *h[2] = {};
    ASSERT_EQ(e_[0]->comm_create_endpoints(41, 3, peer, index, nullptr, h, 2), status::ok);
    ASSERT_EQ(h[1]->queue, 1u);
    ep::wire w = header(ep::wire_kind::eager_inline);
    w.cid = 41;
    w.source = 2;
    w.size = 0;
    w.dst_ep = 1;
    inject(w, 0);
    const auto f = faults();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0], 1u);
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(e_[0]->iprobe(*h[1], 2, 5, ps), status::not_found); // dropped
    inject(w, 1);
    EXPECT_EQ(e_[0]->iprobe(*h[1], 2, 5, ps), status::ok);
    EXPECT_EQ(e_[0]->comm_destroy(h[0]), status::ok);
    EXPECT_EQ(e_[0]->comm_destroy(h[1]), status::ok);
}

// Without a fault callback the engine logs the fault (once) and goes on.
TEST_F(fuzz_test, without_a_callback_the_fault_is_logged)
{
    TearDown();
    for (std::uint32_t i = 0; i < 2; ++i) {
        mpiv_p2p_params_t p = mpiv::test::small_engine_params(i, 3, on_complete);
        ASSERT_EQ(ep::engine::create(p, e_[i]), status::ok);
    }
    mpiv::test::connect_engines(e_, 2, k_cid, comm_);
    mpiv::test::log_capture log;
    ep::wire w = header(ep::wire_kind::fin);
    w.u.ref.token = 42;
    inject(w);
    inject(w);
    ASSERT_EQ(log.errors().size(), 1u);
    EXPECT_NE(log.last().find("peer 1 wrote invalid data"), std::string::npos) << log.last();
    EXPECT_TRUE(faults().empty());
    expect_alive();
}

// A rendezvous that names the victim's own live send but another buffer is refused too.
TEST_F(fuzz_test, forged_self_rendezvous_must_match_the_send)
{
    std::vector<unsigned char> buf(8192, 1);
    ep::send_op op{};
    mpiv_p2p_status_t st{};
    int user = 0;
    // A real self-send that waits for its receive: its token is live.
    ASSERT_EQ(e_[0]->isend(*comm_[0], 0, 0, 0, 9, buf.data(), buf.size(), 0, &user, op, st),
              status::inprogress);
    for (int i = 0; i < 8; ++i) {
        e_[0]->progress();
    }
    ep::wire w = header(ep::wire_kind::rts);
    w.from = 0;
    w.source = 0;
    w.size = buf.size();
    w.u.ref.token = op.w.u.ref.token;
    w.u.ref.where = reinterpret_cast<std::uintptr_t>(&w); // not the send's buffer
    inject(w);
    const auto f = faults();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0], k_unknown);
    // The real one still arrives and is read.
    std::vector<unsigned char> got(buf.size());
    ep::recv_op rop{};
    EXPECT_EQ(e_[0]->irecv(*comm_[0], 0, 9, got.data(), got.size(), &user, rop, st),
              status::ok) << "matched at once";
    for (int i = 0; i < 8; ++i) {
        e_[0]->progress();
    }
    EXPECT_EQ(got, buf);
}

// The shared parts of the victim's segment overwritten: the packet free stack and the
// queue's published head. The victim goes on (sends fall back to rendezvous) and stays
// inside its memory.
TEST_F(fuzz_test, corrupted_shared_state_is_survived)
{
    std::byte *base = access::segment_base(*e_[1], 0);
    const std::size_t bytes = access::segment_bytes(*e_[1], 0);
    std::mt19937_64 rng(42);
    // Scribble over everything after the queues (the region: its stack head and links),
    // leaving its geometry header: the victim reads geometry only at format time.
    for (std::size_t off = bytes / 2; off + 8 <= bytes; off += 8) {
        const std::uint64_t v = rng();
        std::memcpy(base + off, &v, sizeof v);
    }
    // Sends by the victim to engine 1 still work (packets or rendezvous).
    std::vector<unsigned char> msg(2000, 7), got(2000);
    ep::send_op op{};
    ep::recv_op rop{};
    mpiv_p2p_status_t st{}, rst{};
    int user = 0;
    const status s = e_[0]->isend(*comm_[0], 1, 0, 1, 4, msg.data(), msg.size(), 0, &user, op, st);
    EXPECT_TRUE(s == status::ok || s == status::inprogress);
    status r = status::internal;
    for (int i = 0; i < 1000 && r != status::ok && r != status::inprogress; ++i) {
        e_[1]->progress();
        mpiv_p2p_status_t ps{};
        if (e_[1]->iprobe(*comm_[1], 0, 4, ps) == status::ok) {
            r = e_[1]->irecv(*comm_[1], 0, 4, got.data(), got.size(), &user, rop, rst);
        }
    }
    for (int i = 0; i < 100; ++i) {
        e_[0]->progress();
        e_[1]->progress();
    }
    EXPECT_TRUE(r == status::ok || r == status::inprogress);
}

// Two copies, receiving side: while the victim receives a message in FRAGs, forged ones
// that do not continue the transfer (offset, slot, length, token) are refused and
// reported, and the real transfer still completes with the right bytes.
TEST_F(fuzz_test, forged_fragments_of_a_two_copy_receive)
{
    struct forged {
        const char *what;
        std::uint64_t token, slot, offset, size;
    };
    const forged cases[] = {
        {"an offset past the bytes received", k_first_token, 0, 100, 10},
        {"a slot the sender does not have", k_first_token, mpiv::shm::k_copy_slots, 0, 10},
        {"more than a slot holds", k_first_token, 0, 0, mpiv::shm::k_copy_piece + 1},
        {"no bytes", k_first_token, 0, 0, 0},
        {"more than the receive wants", k_first_token, 0, 0, 2 * mpiv::shm::k_copy_piece},
        {"a token that is not live", k_first_token + 5, 0, 0, 10},
    };
    copy_ = MPIV_P2P_SINGLE_COPY_NONE;
    for (const forged &c : cases) {
        SCOPED_TRACE(c.what);
        TearDown();
        SetUp();
        mpiv::test::log_capture log;
        const std::size_t n = mpiv::shm::k_copy_piece + 7; // two pieces
        std::vector<unsigned char> msg(n), got(n);
        for (std::size_t i = 0; i < n; ++i) {
            msg[i] = static_cast<unsigned char>(i * 7);
        }
        ep::recv_op rop{};
        ep::send_op sop{};
        mpiv_p2p_status_t st{};
        int ruser = 0, suser = 0;
        ASSERT_EQ(e_[0]->irecv(*comm_[0], 1, 4, got.data(), n, &ruser, rop, st),
                  status::inprogress);
        ASSERT_EQ(e_[1]->isend(*comm_[1], 0, 1, 0, 4, msg.data(), n, 0, &suser, sop, st),
                  status::inprogress);
        e_[0]->progress(); // the RTS matches: the victim's CTS goes out
        ep::wire w = header(ep::wire_kind::frag);
        w.u.ref.token = c.token;
        w.u.ref.where = c.slot;
        w.u.ref.spare = c.offset;
        w.size = c.size;
        inject(w);
        const auto f = faults();
        ASSERT_EQ(f.size(), 1u) << "one report";
        EXPECT_EQ(f[0], 1u);
        // The real pieces still arrive, in order, and complete the receive.
        for (int i = 0; i < 200; ++i) {
            e_[1]->progress();
            e_[0]->progress();
        }
        EXPECT_EQ(got, msg);
        EXPECT_EQ(faults().size(), 1u);
    }
}

// Two copies, sending side: a CTS may name only a live rendezvous send of the victim to
// that peer, ask for at most its bytes, and come once.
TEST_F(fuzz_test, forged_cts_for_a_two_copy_send)
{
    copy_ = MPIV_P2P_SINGLE_COPY_NONE;
    struct forged {
        const char *what;
        std::uint64_t size, spare;
        bool after_the_real_one;
    };
    const std::size_t n = 3 * mpiv::shm::k_copy_piece;
    const forged cases[] = {
        {"more bytes than the message", n + 1, 9, false},
        {"bytes but no token for them", 100, 0, false},
        {"a second CTS", 100, 9, true},
    };
    for (const forged &c : cases) {
        SCOPED_TRACE(c.what);
        TearDown();
        SetUp();
        mpiv::test::log_capture log;
        std::vector<unsigned char> msg(n, 3), got(n);
        ep::send_op sop{};
        ep::recv_op rop{};
        mpiv_p2p_status_t st{};
        int ruser = 0, suser = 0;
        ASSERT_EQ(e_[0]->isend(*comm_[0], 1, 0, 1, 4, msg.data(), n, 0, &suser, sop, st),
                  status::inprogress);
        if (c.after_the_real_one) {
            ASSERT_EQ(e_[1]->irecv(*comm_[1], 0, 4, got.data(), n, &ruser, rop, st),
                      status::inprogress);
            for (int i = 0; i < 4; ++i) {
                e_[1]->progress();
            }
        }
        ep::wire w = header(ep::wire_kind::cts);
        w.u.ref.token = k_first_token; // the victim's send
        w.size = c.size;
        w.u.ref.spare = c.spare;
        inject(w);
        const auto f = faults();
        ASSERT_EQ(f.size(), 1u) << "one report";
        EXPECT_EQ(f[0], 1u);
        if (c.after_the_real_one) {
            for (int i = 0; i < 200; ++i) {
                e_[0]->progress();
                e_[1]->progress();
            }
            EXPECT_EQ(got, msg) << "the real transfer is not disturbed";
        }
    }
}

// Random messages, each of 1 to 8 slots of random bytes, some with a valid-looking kind
// and sender so that they get deeper: the victim survives them all and reports peer 1 or
// an unknown sender; afterwards ordinary traffic still flows.
TEST_F(fuzz_test, random_messages)
{
    mpiv::test::log_capture log; // the faults are expected: keep them off the output
    std::mt19937_64 rng(20261124);
    const int rounds = 3000 * mpiv::test::time_multiplier();
    std::vector<unsigned char> msg(mpiv::shm::mpsc_queue<>::k_max_message);
    std::vector<unsigned char> sink(1 << 16);
    for (int i = 0; i < rounds; ++i) {
        const std::size_t len = 1 + rng() % msg.size();
        for (auto &b : msg) {
            b = static_cast<unsigned char>(rng());
        }
        ep::wire w;
        std::memcpy(&w, msg.data(), sizeof w);
        if (rng() % 2 == 0) { // plausible header fields, random the rest
            w.kind = static_cast<ep::wire_kind>(1 + rng() % 8);
            w.from = static_cast<std::uint32_t>(rng() % 3);
            w.cid = rng() % 4 == 0 ? static_cast<std::uint16_t>(rng()) : k_cid;
            w.source = static_cast<std::int32_t>(rng() % 3);
            w.tag = static_cast<std::int32_t>(rng() % 4);
            w.size = rng() % 4 == 0 ? rng() : rng() % 600;
            w.inline_bytes = static_cast<std::uint16_t>(rng() % 2 == 0 ? w.size : rng());
        }
        std::memcpy(msg.data(), &w, sizeof w);
        if (access::queue(*e_[1], 0, rng() % 2).try_push(msg.data(), std::max(len, sizeof w)) !=
            status::ok) {
            for (int k = 0; k < 4; ++k) {
                e_[0]->progress();
            }
        }
        if (i % 16 == 0) {
            // Take whatever matched: receives of random size at tags 0..3 and any source.
            ep::recv_op rop{};
            mpiv_p2p_status_t st{};
            int user = 0;
            const status s = e_[0]->irecv(*comm_[0], -1, static_cast<std::int32_t>(rng() % 4),
                                          sink.data(), rng() % sink.size(), &user, rop, st);
            if (s == status::inprogress) {
                (void)e_[0]->cancel(rop);
            }
            e_[0]->progress();
        }
        // The rogue's own queues fill with the victim's FINs: drain them.
        e_[1]->progress();
    }
    for (const std::uint32_t peer : faults()) {
        EXPECT_TRUE(peer == 1 || peer == k_unknown) << peer;
    }
    EXPECT_FALSE(faults().empty());
}

} // namespace
