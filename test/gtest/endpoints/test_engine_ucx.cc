// The engine over the UCX transport (engine_ucx.cpp): two engines in one process with
// transports = UCX only, so each reaches the other over UCX on TCP over the loopback
// interface. Covered: every protocol's sizes in both directions, the receive posted before
// the arrival (bytes taken inside the poll) and after it (taken by the deferred list);
// bulk bytes into a sink and truncated, eager-sized and by UCX's rendezvous; a
// synchronous send completes only after its match; a peer whose first message arrives
// before this engine has its address (connected through the connect callback, or
// reported as a fault without one); sends UCX could not finish at once, small or by
// rendezvous, go out while their sender makes no more calls (the flusher).
#include "test/gtest/endpoints/engine_fixture.hpp"

#include "base/stats.hpp"

namespace mpiv::ep {
struct engine_test_access {
    static std::int64_t owed(engine &e) { return e.ucx_owed_.load(std::memory_order_acquire); }
};
} // namespace mpiv::ep

namespace {

// The connect and fault callbacks have no context: the running test's state.
struct callbacks {
    std::mutex mu;
    std::function<int(std::uint32_t)> connect; // mu
    std::vector<std::pair<std::uint32_t, std::string>> faults; // mu
    std::atomic<int> connects{0};
};
callbacks g_cb;

int on_connect(std::uint32_t peer)
{
    g_cb.connects.fetch_add(1, std::memory_order_relaxed);
    std::function<int(std::uint32_t)> f;
    {
        std::lock_guard<std::mutex> guard(g_cb.mu);
        f = g_cb.connect;
    }
    return f ? f(peer) : MPIV_ERR_SYSTEM;
}

void on_fault(std::uint32_t peer, const char *what)
{
    std::lock_guard<std::mutex> guard(g_cb.mu);
    g_cb.faults.emplace_back(peer, what);
}

class engine_ucx : public ::testing::Test {
  protected:
    static void SetUpTestSuite()
    {
        setenv("UCX_TLS", "tcp", 1);
        setenv("UCX_NET_DEVICES", "lo", 1);
    }
    void SetUp() override
    {
        std::lock_guard<std::mutex> guard(g_cb.mu);
        g_cb.connect = nullptr;
        g_cb.faults.clear();
        g_cb.connects.store(0, std::memory_order_relaxed);
    }
    void TearDown() override
    {
        eng_[1].reset();
        eng_[0].reset();
    }

    // Engines 0 and 1 over UCX only; @p introduce: engine i is given engine j's address
    // (and its own) when introduce[i] is set.
    void start(bool connect_callback, const bool introduce[2])
    {
        for (std::uint32_t i = 0; i < 2; ++i) {
            mpiv_p2p_params_t p = params_for(i);
            p.transports = MPIV_P2P_TRANSPORT_UCX;
            p.fault = on_fault;
            p.connect = connect_callback ? on_connect : nullptr;
            ASSERT_EQ(ep::engine::create(p, eng_[i]), status::ok);
        }
        for (std::uint32_t i = 0; i < 2; ++i) {
            ASSERT_EQ(connect(i, i), status::ok);
            if (introduce[i]) {
                ASSERT_EQ(connect(i, 1 - i), status::ok);
            }
            ASSERT_EQ(eng_[i]->comm_create(k_cid, 2, 0, comm_[i]), status::ok);
        }
    }
    status connect(std::uint32_t at, std::uint32_t peer)
    {
        const void *addr = nullptr;
        std::size_t len = 0;
        eng_[peer]->address(addr, len);
        return eng_[at]->connect(peer, addr, len, /*same_node=*/true);
    }

    int pump(int which = -1)
    {
        int n = 0;
        for (int i = 0; i < 2; ++i) {
            if (which < 0 || which == i) {
                n += eng_[i]->progress();
            }
        }
        return n;
    }
    // Drive engine @p which (or both) until pred() holds; false on timeout.
    bool until(const std::function<bool()> &pred, int which = -1)
    {
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        while (!pred()) {
            if (pump(which) == 0) {
                if (std::chrono::steady_clock::now() > deadline) {
                    return pred();
                }
                std::this_thread::yield();
            }
        }
        return true;
    }

    void send(int from, std::int32_t tag, const void *buf, std::size_t n, sop &s)
    {
        s.rc = eng_[from]->isend(*comm_[from], static_cast<std::uint32_t>(1 - from), from,
                                 1 - from, tag, buf, n, 0, &s.rec, s.op, s.st);
    }
    void recv(int at, std::int32_t tag, void *buf, std::size_t cap, rop &r)
    {
        r.rc = eng_[at]->irecv(*comm_[at], 1 - at, tag, buf, cap, &r.rec, r.op, r.st);
    }
    template <class Op> static bool done(const Op &o)
    {
        return o.rc == status::ok || calls_of(o.rec) >= 1;
    }
    template <class Op> static mpiv_p2p_status_t result(const Op &o)
    {
        return o.rc == status::ok ? o.st : o.rec.st;
    }

    std::unique_ptr<ep::engine> eng_[2];
    ep::comm_state *comm_[2] = {nullptr, nullptr};
};

const bool k_both[2] = {true, true};

TEST_F(engine_ucx, every_protocol_both_ways)
{
    start(false, k_both);
    ASSERT_FALSE(HasFatalFailure());
    unsigned peer_transport = 0;
    ASSERT_EQ(eng_[0]->peer_transport(1, peer_transport), status::ok);
    EXPECT_EQ(peer_transport, MPIV_P2P_TRANSPORT_UCX);
    // Inline sizes, one past the inline limit (a bulk message from there on), eager-sized
    // for UCX, large (UCX's rendezvous).
    const std::size_t sizes[] = {0, 1, 100, 416, 417, 4096, 4097, 100000, 3 * k_mib + 5};
    using mpiv::base::stats::counter;
    const std::uint64_t rndv = mpiv::base::stats::read(counter::ucx_rndv);
    const std::uint64_t pieces = mpiv::base::stats::read(counter::two_copy_pieces);
    std::uint32_t seed = 1;
    for (const bool posted_first : {true, false}) {
        for (const std::size_t n : sizes) {
            for (int from = 0; from < 2; ++from) {
                const int to = 1 - from;
                const std::vector<unsigned char> data = patterned(n, seed);
                std::vector<unsigned char> got(n + 16, k_guard);
                sop s;
                rop r;
                const auto tag = static_cast<std::int32_t>(seed);
                if (posted_first) {
                    recv(to, tag, got.data(), n, r);
                    ASSERT_TRUE(r.rc == status::ok || r.rc == status::inprogress) << n;
                }
                const std::uint64_t unexpected = mpiv::base::stats::read(counter::unexpected);
                send(from, tag, data.data(), n, s);
                ASSERT_TRUE(s.rc == status::ok || s.rc == status::inprogress) << n;
                if (!posted_first) {
                    // The message waits unmatched: its bytes are taken from the list of
                    // receives deferred to the worker's next poll.
                    ASSERT_TRUE(until([&] {
                        return mpiv::base::stats::read(counter::unexpected) > unexpected;
                    })) << n;
                    recv(to, tag, got.data(), n, r);
                    ASSERT_TRUE(r.rc == status::ok || r.rc == status::inprogress) << n;
                }
                ASSERT_TRUE(until([&] { return done(s) && done(r); }))
                    << n << " bytes from " << from;
                const mpiv_p2p_status_t st = result(r);
                EXPECT_EQ(st.error, MPIV_OK);
                EXPECT_EQ(st.source, from);
                EXPECT_EQ(st.bytes, n);
                EXPECT_TRUE(intact(got.data(), n, seed)) << n << " bytes from " << from;
                EXPECT_TRUE(guard_intact(got, n)) << n;
                ++seed;
            }
        }
    }
    // The 3 MiB messages came by UCX's rendezvous, and no message in two copies.
    EXPECT_GE(mpiv::base::stats::read(counter::ucx_rndv) - rndv, 4u);
    EXPECT_EQ(mpiv::base::stats::read(counter::two_copy_pieces), pieces);
    std::lock_guard<std::mutex> guard(g_cb.mu);
    EXPECT_TRUE(g_cb.faults.empty());
}

// Bulk bytes into a sink (in offset order) and into a buffer shorter than the message
// (only what fits is written), both when UCX sent them eagerly and by its rendezvous.
TEST_F(engine_ucx, bulk_into_a_sink_and_truncated)
{
    start(false, k_both);
    ASSERT_FALSE(HasFatalFailure());
    using mpiv::base::stats::counter;
    const std::uint64_t pieces = mpiv::base::stats::read(counter::two_copy_pieces);
    struct sink_state {
        std::vector<unsigned char> got;
        bool in_order = true;
    };
    const auto to_sink = [](void *ctx, std::size_t offset, const void *bytes, std::size_t len) {
        auto &s = *static_cast<sink_state *>(ctx);
        s.in_order = s.in_order && offset == s.got.size();
        s.got.resize(std::max(s.got.size(), offset + len));
        std::memcpy(s.got.data() + offset, bytes, len);
    };
    std::int32_t tag = 10;
    for (const std::size_t n : {std::size_t{3000}, 2 * k_mib + 3}) {
        const std::vector<unsigned char> data = patterned(n, 11);
        const std::uint64_t rndv = mpiv::base::stats::read(counter::ucx_rndv);
        // The sink asks for all but the last 1000 bytes.
        sink_state sink;
        sop s;
        send(0, ++tag, data.data(), n, s);
        rop r;
        ep::recv_target to;
        to.capacity = n - 1000;
        to.sink = to_sink;
        to.ctx = &sink;
        r.rc = eng_[1]->irecv(*comm_[1], 0, tag, to, &r.rec, r.op, r.st);
        ASSERT_TRUE(until([&] { return done(s) && done(r); })) << n;
        EXPECT_EQ(result(r).error, MPIV_ERR_TRUNCATE) << n;
        EXPECT_EQ(result(r).bytes, n - 1000) << n;
        ASSERT_EQ(sink.got.size(), n - 1000) << n;
        EXPECT_TRUE(sink.in_order) << n;
        EXPECT_TRUE(intact(sink.got.data(), n - 1000, 11)) << n;

        // Into half a buffer: the status says so, nothing past it is written.
        std::vector<unsigned char> half(n / 2 + 16, k_guard);
        sop s2;
        send(0, ++tag, data.data(), n, s2);
        rop r2;
        recv(1, tag, half.data(), n / 2, r2);
        ASSERT_TRUE(until([&] { return done(s2) && done(r2); })) << n;
        EXPECT_EQ(result(r2).error, MPIV_ERR_TRUNCATE) << n;
        EXPECT_EQ(result(r2).bytes, n / 2) << n;
        EXPECT_TRUE(intact(half.data(), n / 2, 11)) << n;
        EXPECT_TRUE(guard_intact(half, n / 2)) << n;
        if (n > k_mib) {
            EXPECT_EQ(mpiv::base::stats::read(counter::ucx_rndv) - rndv, 2u);
        }
    }
    EXPECT_EQ(mpiv::base::stats::read(counter::two_copy_pieces), pieces);
    std::lock_guard<std::mutex> guard(g_cb.mu);
    EXPECT_TRUE(g_cb.faults.empty());
}

// A synchronous send of a size UCX would send eagerly completes only once the receiver
// matched it (MPI_Ssend): it goes by UCX's rendezvous, whose completion says so.
TEST_F(engine_ucx, sync_bulk_send_waits_for_its_match)
{
    start(false, k_both);
    ASSERT_FALSE(HasFatalFailure());
    using mpiv::base::stats::counter;
    constexpr std::size_t n = 2000;
    const std::vector<unsigned char> data = patterned(n, 21);
    const std::uint64_t unexpected = mpiv::base::stats::read(counter::unexpected);
    const std::uint64_t rndv = mpiv::base::stats::read(counter::ucx_rndv);
    sop s;
    s.rc = eng_[0]->isend(*comm_[0], 1, 0, 1, 21, data.data(), n, MPIV_P2P_SEND_SYNC, &s.rec,
                          s.op, s.st);
    ASSERT_EQ(s.rc, status::inprogress);
    ASSERT_TRUE(until([&] { return mpiv::base::stats::read(counter::unexpected) > unexpected; }));
    // Arrived and unmatched: keep both sides going a while; the send must not complete.
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < end) {
        pump();
    }
    EXPECT_FALSE(done(s)) << "a synchronous send completed before its match";
    std::vector<unsigned char> got(n);
    rop r;
    recv(1, 21, got.data(), n, r);
    ASSERT_TRUE(until([&] { return done(s) && done(r); }));
    EXPECT_TRUE(intact(got.data(), n, 21));
    EXPECT_EQ(mpiv::base::stats::read(counter::ucx_rndv) - rndv, 1u);
}

TEST_F(engine_ucx, first_message_connects_its_sender)
{
    // Engine 1 has no address for engine 0 when 0's messages arrive (an MPI process
    // connects peers on first use): the connect callback gives it, and the reply path
    // (a rendezvous needs engine 1 to answer) works.
    const bool introduce[2] = {true, false};
    start(true, introduce);
    ASSERT_FALSE(HasFatalFailure());
    {
        std::lock_guard<std::mutex> guard(g_cb.mu);
        g_cb.connect = [this](std::uint32_t peer) {
            return peer == 0 && connect(1, 0) == status::ok ? MPIV_OK : MPIV_ERR_SYSTEM;
        };
    }
    const std::vector<unsigned char> small = patterned(64, 5);
    const std::vector<unsigned char> large = patterned(200000, 6);
    sop s1;
    sop s2;
    send(0, 5, small.data(), small.size(), s1);
    send(0, 6, large.data(), large.size(), s2);
    std::vector<unsigned char> got1(small.size());
    std::vector<unsigned char> got2(large.size());
    rop r1;
    rop r2;
    recv(1, 5, got1.data(), got1.size(), r1);
    recv(1, 6, got2.data(), got2.size(), r2);
    ASSERT_TRUE(until([&] { return done(s1) && done(s2) && done(r1) && done(r2); }));
    EXPECT_TRUE(intact(got1.data(), got1.size(), 5));
    EXPECT_TRUE(intact(got2.data(), got2.size(), 6));
    EXPECT_EQ(g_cb.connects.load(std::memory_order_relaxed), 1);
    unsigned peer_transport = 0;
    EXPECT_EQ(eng_[1]->peer_transport(0, peer_transport), status::ok);
    EXPECT_EQ(peer_transport, MPIV_P2P_TRANSPORT_UCX);
    std::lock_guard<std::mutex> guard(g_cb.mu);
    EXPECT_TRUE(g_cb.faults.empty());
}

TEST_F(engine_ucx, first_message_without_connect_callback_is_a_fault)
{
    const bool introduce[2] = {true, false};
    start(false, introduce);
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<unsigned char> small = patterned(64, 7);
    sop s;
    send(0, 7, small.data(), small.size(), s);
    std::vector<unsigned char> got(small.size());
    rop r;
    recv(1, 7, got.data(), got.size(), r);
    ASSERT_TRUE(until([&] {
        std::lock_guard<std::mutex> guard(g_cb.mu);
        return !g_cb.faults.empty();
    }));
    std::lock_guard<std::mutex> guard(g_cb.mu);
    ASSERT_EQ(g_cb.faults.size(), 1u);
    // (Not connected: the engine cannot blame the peer the message names.)
    EXPECT_EQ(g_cb.faults[0].first, MPIV_P2P_PEER_UNKNOWN);
    EXPECT_NE(g_cb.faults[0].second.find("cannot be connected"), std::string::npos)
        << g_cb.faults[0].second;
    EXPECT_FALSE(done(r)) << "a message from an unconnected peer was delivered";
}

TEST_F(engine_ucx, send_goes_out_while_its_sender_makes_no_calls)
{
    // The first send to a peer meets an endpoint still wiring up: UCX keeps it, and only
    // progress on the sender's worker sends it. Engine 0 sends and is then never called
    // again by the test (as an MPI process that returned from MPI_Send and computes);
    // engine 1's receive must still complete. Then a large send, whose bytes UCX's
    // rendezvous moves only when the sender's worker answers the receiver.
    start(false, k_both);
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<unsigned char> small = patterned(32, 9);
    sop s;
    send(0, 9, small.data(), small.size(), s);
    ASSERT_EQ(s.rc, status::ok) << "an inline send completes at once";
    EXPECT_GT(ep::engine_test_access::owed(*eng_[0]), 0)
        << "UCX finished the first send at once: this test no longer covers the flusher";
    std::vector<unsigned char> got(small.size());
    rop r;
    recv(1, 9, got.data(), got.size(), r);
    ASSERT_TRUE(until([&] { return done(r); }, /*which=*/1)) << "the send never left engine 0";
    EXPECT_TRUE(intact(got.data(), got.size(), 9));
    EXPECT_TRUE(until([&] { return ep::engine_test_access::owed(*eng_[0]) == 0; }, 1));

    const std::size_t n = 2 * k_mib;
    const std::vector<unsigned char> large = patterned(n, 10);
    sop s2;
    send(0, 10, large.data(), n, s2);
    ASSERT_EQ(s2.rc, status::inprogress);
    std::vector<unsigned char> got2(n);
    rop r2;
    recv(1, 10, got2.data(), n, r2);
    ASSERT_TRUE(until([&] { return done(r2); }, /*which=*/1)) << "the bytes never left engine 0";
    EXPECT_TRUE(intact(got2.data(), n, 10));
    // Engine 0's send completes from the flusher's polls too.
    EXPECT_TRUE(until([&] { return done(s2); }, 1));
}

} // namespace
