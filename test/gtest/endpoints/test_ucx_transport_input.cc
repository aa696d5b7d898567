// ucx::transport, untrusted input and failures: bad params, malformed addresses,
// fabricated arrivals (reordering, duplicates, bad headers, window overflow), a peer dying
// mid-run. Set-up in ucx_fixture.hpp.
#include "test/gtest/endpoints/ucx_fixture.hpp"

namespace {

TEST_F(ucx_transport, create_rejects_bad_params)
{
    log_capture logs;
    node nd(1);
    struct bad_case {
        const char *field;
        std::function<void(params &)> spoil;
    };
    const bad_case cases[] = {
        {"num_peers", [](params &p) { p.num_peers = 0; }},
        {"self", [](params &p) { p.self = 2; }},
        {"workers", [](params &p) { p.workers = 0; }},
        {"workers", [](params &p) { p.workers = k_max_workers + 1; }},
        {"max_inflight", [](params &p) { p.max_inflight = 0; }},
        {"on_message", [](params &p) { p.on_message = nullptr; }},
    };
    for (const auto &c : cases) {
        params p = make_params(0, 2, 1, &nd);
        c.spoil(p);
        std::unique_ptr<transport> t;
        EXPECT_EQ(transport::create(p, t), status::invalid_arg) << c.field;
        EXPECT_FALSE(t) << c.field;
        EXPECT_NE(logs.last().find(std::string("params.") + c.field), std::string::npos)
            << logs.last();
    }
    std::unique_ptr<transport> t;
    EXPECT_EQ(transport::create(make_params(0, 2, 1, &nd), t), status::ok);
    EXPECT_TRUE(t);
}

TEST_F(ucx_transport, reorders_held_arrivals)
{
    make(3, 2);
    transport &t = *nodes_[0]->t;
    auto hdr = [](std::uint32_t peer, std::uint16_t fw, std::uint16_t tw, std::uint32_t seq) {
        return detail::msg_header{detail::k_msg_magic, peer, fw, tw, seq};
    };
    log_capture logs;
    t.lock(1);
    // peer 1 worker 1 -> our worker 1: 4 3 1 0 2 (payload = seq, header = seq * 3 bytes).
    for (std::uint32_t seq : {4u, 3u, 1u, 0u, 2u}) {
        const std::vector<unsigned char> h(seq * 3, static_cast<unsigned char>(seq));
        const std::uint32_t pl = seq;
        transport_test_access::arrive(t, 1, hdr(1, 1, 1, seq), h.data(), h.size(), &pl, sizeof pl);
        if (seq != 2) {
            EXPECT_EQ(nodes_[0]->got[1].size(), seq == 0 ? 2u : 0u) << "after " << seq;
        }
    }
    // Another pair (peer 2 worker 0) is independent of peer 1's.
    const std::uint32_t zero = 0;
    transport_test_access::arrive(t, 1, hdr(2, 0, 1, 1), nullptr, 0, &zero, sizeof zero);
    EXPECT_EQ(nodes_[0]->got[1].size(), 5u);
    transport_test_access::arrive(t, 1, hdr(2, 0, 1, 0), nullptr, 0, &zero, sizeof zero);
    ASSERT_EQ(nodes_[0]->got[1].size(), 7u);
    for (std::uint32_t i = 0; i < 5; ++i) {
        const message &m = nodes_[0]->got[1][i];
        std::uint32_t pl;
        ASSERT_EQ(m.payload.size(), sizeof pl);
        std::memcpy(&pl, m.payload.data(), sizeof pl);
        EXPECT_EQ(pl, i);
        EXPECT_EQ(m.header, std::vector<unsigned char>(i * 3, static_cast<unsigned char>(i)));
        EXPECT_EQ(m.peer, 1u);
        EXPECT_EQ(m.from_worker, 1u);
    }
    EXPECT_EQ(nodes_[0]->got[1][5].peer, 2u);
    auto st = t.stats(1);
    EXPECT_EQ(st.delivered, 7u);
    EXPECT_EQ(st.held_early, 4u); // 4, 3, 1 and peer 2's 1
    EXPECT_EQ(st.dropped, 0u);
    // Dropped: a duplicate, bad magic, short header, unknown peer, wrong worker, sender
    // worker beyond the peer's count, a rendezvous message.
    transport_test_access::arrive(t, 1, hdr(1, 1, 1, 3), nullptr, 0, nullptr, 0);
    auto bad = hdr(1, 1, 1, 5);
    bad.magic ^= 1;
    transport_test_access::arrive(t, 1, bad, nullptr, 0, nullptr, 0);
    transport_test_access::raw(t, 1, &bad, 8, nullptr, 0);
    transport_test_access::arrive(t, 1, hdr(3, 0, 1, 0), nullptr, 0, nullptr, 0);
    transport_test_access::arrive(t, 1, hdr(1, 1, 0, 5), nullptr, 0, nullptr, 0);
    transport_test_access::arrive(t, 1, hdr(1, 2, 1, 0), nullptr, 0, nullptr, 0);
    {
        const auto h = hdr(1, 1, 1, 5);
        transport_test_access::raw(t, 1, &h, sizeof h, nullptr, 0, UCP_AM_RECV_ATTR_FLAG_RNDV);
    }
    st = t.stats(1);
    EXPECT_EQ(st.dropped, 7u);
    EXPECT_EQ(st.delivered, 7u);
    EXPECT_EQ(logs.errors().size(), 7u);
    // Overflow: peer 2 worker 1 sends k_max_held + 1 messages all ahead of seq 0.
    for (std::uint32_t seq = 1; seq <= k_max_held + 1; ++seq) {
        transport_test_access::arrive(t, 1, hdr(2, 1, 1, seq), nullptr, 0, nullptr, 0);
    }
    EXPECT_EQ(nodes_[0]->failures_for(2), 0u); // reported from poll()
    (void)t.poll(1);
    EXPECT_EQ(nodes_[0]->failures_for(2), 1u);
    // Its later arrivals, in turn or not, are dropped; peer 1 still flows.
    transport_test_access::arrive(t, 1, hdr(2, 1, 1, 0), nullptr, 0, nullptr, 0);
    transport_test_access::arrive(t, 1, hdr(1, 1, 1, 5), nullptr, 0, nullptr, 0);
    EXPECT_EQ(nodes_[0]->got[1].size(), 8u);
    t.unlock(1);
}

TEST_F(ucx_transport, malformed_addresses_refused)
{
    make(2, 1);
    node extra(1);
    std::unique_ptr<transport> t;
    ASSERT_EQ(transport::create(make_params(2, 3, 1, &extra), t), status::ok);
    const void *a;
    std::size_t l;
    nodes_[0]->t->address(a, l);
    const std::vector<unsigned char> good(static_cast<const unsigned char *>(a),
                                          static_cast<const unsigned char *>(a) + l);
    ASSERT_GT(l, 12u);
    log_capture logs;
    auto refuse = [&](std::vector<unsigned char> blob, const char *what) {
        const std::size_t before = logs.errors().size();
        EXPECT_EQ(t->connect(0, blob.data(), blob.size()), status::invalid_arg) << what;
        EXPECT_EQ(logs.errors().size(), before + 1) << what;
    };
    EXPECT_EQ(t->connect(0, nullptr, 0), status::invalid_arg);
    for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{7}, std::size_t{8},
                            std::size_t{11}, l / 2, l - 1}) {
        refuse(std::vector<unsigned char>(good.begin(), good.begin() + cut), "truncated");
    }
    auto spoiled = [&](std::size_t at, std::vector<unsigned char> bytes) {
        std::vector<unsigned char> b = good;
        std::memcpy(b.data() + at, bytes.data(), bytes.size());
        return b;
    };
    refuse(spoiled(0, {0, 0, 0, 0}), "magic");
    refuse(spoiled(4, {2, 0}), "version");
    refuse(spoiled(6, {0, 0}), "W = 0");
    refuse(spoiled(6, {0xff, 0xff}), "W huge");
    refuse(spoiled(6, {2, 0}), "W = 2, one address");
    refuse(spoiled(8, {0xff, 0xff, 0xff, 0x7f}), "length past the end");
    refuse(spoiled(8, {0, 0, 0, 0}), "length 0");
    {
        std::uint32_t len;
        std::memcpy(&len, good.data() + 8, 4);
        ++len;
        std::vector<unsigned char> b = good;
        std::memcpy(b.data() + 8, &len, 4);
        refuse(b, "length one past the end");
    }
    {
        std::vector<unsigned char> b = good;
        b.push_back(0);
        refuse(b, "trailing byte");
    }
    EXPECT_EQ(t->connect(3, good.data(), good.size()), status::invalid_arg); // peer range
    // A send to a peer never connected is refused too.
    auto &cc = hold<counter_completion>();
    t->lock(0);
    EXPECT_EQ(t->send(0, 1, 0, nullptr, 0, nullptr, 0, &cc.c), status::invalid_arg);
    t->unlock(0);
    // The good blob still connects, once.
    EXPECT_EQ(t->connect(0, good.data(), good.size()), status::ok);
    EXPECT_EQ(t->connect(0, good.data(), good.size()), status::invalid_arg);
}

TEST_F(ucx_transport, peer_destroyed_mid_run)
{
    make(3, 1);
    transport &a = *nodes_[0]->t;
    auto &cc = hold<counter_completion>();
    std::uint32_t x = 1;
    // Traffic a <-> b and a <-> c first, so eps exist.
    for (std::uint32_t p : {1u, 2u}) {
        ASSERT_TRUE(send_retry(*nodes_[0], 0, p, 0, &x, sizeof x, nullptr, 0, &cc.c) !=
                    status::invalid_arg);
        ASSERT_TRUE(send_retry(*nodes_[p], 0, 0, 0, &x, sizeof x, nullptr, 0, &cc.c) !=
                    status::invalid_arg);
    }
    ASSERT_TRUE(pump([&] {
        return nodes_[0]->count[0].load() == 2 && nodes_[1]->count[0].load() == 1 &&
               nodes_[2]->count[0].load() == 1;
    }));
    // b goes away (its destructor in another thread) while a keeps sending to it.
    std::thread killer([&] { nodes_[1]->t.reset(); });
    const auto t0 = clk::now();
    std::uint64_t after = 0;
    const auto end = clk::now() + std::chrono::seconds(30);
    while (nodes_[0]->failures_for(1) == 0 && clk::now() < end) {
        a.lock(0);
        status s = a.send(0, 1, 0, &x, sizeof x, nullptr, 0, &cc.c);
        (void)a.poll(0);
        a.unlock(0);
        after += s == status::ok || s == status::inprogress;
        nodes_[2]->t->lock(0);
        (void)nodes_[2]->t->poll(0);
        nodes_[2]->t->unlock(0);
    }
    killer.join();
    ASSERT_EQ(nodes_[0]->failures_for(1), 1u) << "no failure reported for the destroyed peer";
    std::printf("failure seen after %.3f s and %llu more sends: %s\n",
                std::chrono::duration<double>(clk::now() - t0).count(),
                static_cast<unsigned long long>(after), nodes_[0]->failures[0].second.c_str());
    // Later sends to it fail at once; a and c still talk.
    {
        log_capture logs;
        a.lock(0);
        EXPECT_EQ(a.send(0, 1, 0, &x, sizeof x, nullptr, 0, &cc.c), status::system);
        a.unlock(0);
    }
    ASSERT_TRUE(send_retry(*nodes_[0], 0, 2, 0, &x, sizeof x, nullptr, 0, &cc.c) !=
                status::invalid_arg);
    ASSERT_TRUE(send_retry(*nodes_[2], 0, 0, 0, &x, sizeof x, nullptr, 0, &cc.c) !=
                status::invalid_arg);
    ASSERT_TRUE(pump([&] {
        return nodes_[0]->count[0].load() == 3 && nodes_[2]->count[0].load() == 2;
    }));
    EXPECT_EQ(nodes_[0]->failures_for(2), 0u);
    EXPECT_EQ(nodes_[2]->failures_for(0), 0u);
    // Pending completions all end (ok or failed), and nothing hangs at destruction.
    pump([] { return false; }, 0.5);
    EXPECT_EQ(nodes_[0]->failures_for(1), 1u) << "reported once";
}

} // namespace
