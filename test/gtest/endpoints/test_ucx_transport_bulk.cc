// ucx::transport, bulk messages: every size class taken inside on_message and later, in
// send order with eager messages; truncated, sink and released receives; a sync send
// completes only after its receive; teardown with handles never taken and sends never
// received; fabricated early bulk arrivals keep their bytes. Set-up in ucx_fixture.hpp.
#include "test/gtest/endpoints/ucx_fixture.hpp"

#include <map>

namespace {

using bytes = std::vector<unsigned char>;

bytes patterned(std::size_t n, std::uint32_t seed)
{
    bytes b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = pattern(i, seed);
    }
    return b;
}

std::uint32_t label_of(const message &m)
{
    std::uint32_t label = ~0u;
    if (m.header.size() >= sizeof label) {
        std::memcpy(&label, m.header.data(), sizeof label);
    }
    return label;
}

// Send a bulk message from node 0's worker 0 to node 1's worker 0 (lock taken here).
status send_bulk(node &from, std::uint32_t label, const bytes &payload, bool sync, completion *c)
{
    from.t->lock(0);
    const status s = from.t->send_bulk(0, 1, 0, &label, sizeof label, payload.data(),
                                       payload.size(), sync, c);
    from.t->unlock(0);
    return s;
}

class ucx_bulk : public ucx_transport {};

// Eager messages and bulk ones of every size class, interleaved on one pair, arrive in
// send order; the bulk bytes are taken inside on_message (the first round) or after all
// arrived (the second, with rendezvous senders waiting for those receives).
TEST_F(ucx_bulk, sizes_in_order_taken_at_once_and_later)
{
    make(2, 1);
    const std::size_t sizes[] = {1, 416, 4096, 8193, 65536, 300000, 4 * 1024 * 1024 + 3};
    for (const bool at_once : {true, false}) {
        SCOPED_TRACE(at_once ? "taken at once" : "taken later");
        node &rx = *nodes_[1];
        rx.got[0].clear();
        auto &bufs = hold<std::map<std::uint32_t, bytes>>();
        auto &taken = hold<counter_completion>();
        std::atomic<std::uint64_t> taken_now{0};
        std::map<std::uint32_t, bool> rndv;
        rx.on_bulk = [&](std::uint32_t w, message &m) {
            rndv[label_of(m)] = transport::rendezvous(m.b);
            EXPECT_EQ(transport::length(m.b), m.bulk_len);
            if (!at_once) {
                return; // kept in m.b
            }
            bytes &b = bufs[label_of(m)];
            b.assign(m.bulk_len, 0);
            const status s = rx.t->receive(w, m.b, b.data(), b.size(), nullptr, nullptr, &taken.c);
            EXPECT_TRUE(s == status::ok || s == status::inprogress) << static_cast<int>(s);
            taken_now.fetch_add(s == status::ok);
            m.b = nullptr;
        };
        const std::uint64_t arrived = rx.count[0].load();
        const std::uint64_t rndv_before = rx.t->stats(0).bulk_rndv;
        auto &sent = hold<counter_completion>();
        std::uint64_t pending = 0;
        std::vector<bytes> payloads;
        std::uint32_t label = 0;
        for (const std::size_t n : sizes) {
            const std::uint32_t eager_label = label++;
            const status e = send_retry(*nodes_[0], 0, 1, 0, &eager_label, sizeof eager_label,
                                        nullptr, 0, &sent.c);
            ASSERT_TRUE(e == status::ok || e == status::inprogress);
            pending += e == status::inprogress;
            payloads.push_back(patterned(n, label));
            const status s = send_bulk(*nodes_[0], label++, payloads.back(), false, &sent.c);
            ASSERT_EQ(s, status::inprogress) << n;
            ++pending;
        }
        ASSERT_TRUE(pump([&] { return rx.count[0].load() == arrived + 2 * std::size(sizes); }));
        ASSERT_EQ(rx.got[0].size(), 2 * std::size(sizes));
        for (std::uint32_t i = 0; i < rx.got[0].size(); ++i) {
            EXPECT_EQ(label_of(rx.got[0][i]), i) << "out of order";
            EXPECT_EQ(rx.got[0][i].b != nullptr, !at_once && i % 2 == 1);
        }
        if (!at_once) {
            for (message &m : rx.got[0]) {
                if (m.b == nullptr) {
                    continue;
                }
                bytes &b = bufs[label_of(m)];
                b.assign(m.bulk_len, 0);
                rx.t->lock(0);
                const status s = rx.t->receive(0, m.b, b.data(), b.size(), nullptr, nullptr,
                                               &taken.c);
                rx.t->unlock(0);
                m.b = nullptr;
                ASSERT_TRUE(s == status::ok || s == status::inprogress);
                taken_now.fetch_add(s == status::ok);
            }
        }
        ASSERT_TRUE(pump([&] {
            return sent.total() == pending &&
                   taken.total() + taken_now.load() == std::size(sizes);
        })) << sent.total() << " of " << pending << " sends, " << taken.total() << " + "
            << taken_now.load() << " receives";
        EXPECT_EQ(sent.failed.load(), 0u);
        EXPECT_EQ(taken.failed.load(), 0u);
        for (std::uint32_t i = 0; i < std::size(sizes); ++i) {
            EXPECT_TRUE(bufs[2 * i + 1] == payloads[i]) << sizes[i] << " bytes";
        }
        // Small ones go eagerly, the 4 MiB one by UCX's rendezvous.
        EXPECT_FALSE(rndv[1]);
        EXPECT_TRUE(rndv[2 * std::size(sizes) - 1]);
        EXPECT_GE(rx.t->stats(0).bulk_rndv, rndv_before + 1);
        rx.on_bulk = nullptr;
    }
}

// Receives that are not one buffer of the whole size: into half a buffer (the rest is
// dropped, nothing written past it), into a sink (in offset order), not at all (release,
// or capacity 0): the sender completes in every case.
TEST_F(ucx_bulk, truncated_sink_and_released)
{
    make(2, 1);
    node &rx = *nodes_[1];
    std::vector<message *> kept;
    rx.on_bulk = [&](std::uint32_t, message &) {};
    for (const std::size_t n : {std::size_t{3000}, std::size_t{2 * 1024 * 1024 + 1}}) {
        SCOPED_TRACE(n);
        rx.got[0].clear();
        const bytes data = patterned(n, 7);
        auto &sent = hold<counter_completion>();
        for (std::uint32_t label = 0; label < 4; ++label) {
            ASSERT_EQ(send_bulk(*nodes_[0], label, data, false, &sent.c), status::inprogress);
        }
        ASSERT_TRUE(pump([&] { return rx.got[0].size() == 4; }));
        auto &taken = hold<counter_completion>();
        std::uint64_t pending = 0;
        // Half a buffer.
        bytes half(n / 2 + 64, 0xee);
        // A sink that wants all but the last 100 bytes.
        struct sink_state {
            bytes got;
            bool in_order = true;
        } sink;
        const sink_fn to_sink = [](void *ctx, std::size_t off, const void *p, std::size_t len) {
            auto &s = *static_cast<sink_state *>(ctx);
            s.in_order = s.in_order && off == s.got.size();
            s.got.resize(std::max(s.got.size(), off + len));
            std::memcpy(s.got.data() + off, p, len);
        };
        transport &t = *rx.t;
        t.lock(0);
        status s = t.receive(0, rx.got[0][0].b, half.data(), n / 2, nullptr, nullptr, &taken.c);
        pending += s == status::inprogress;
        ASSERT_TRUE(s == status::ok || s == status::inprogress);
        s = t.receive(0, rx.got[0][1].b, nullptr, n - 100, to_sink, &sink, &taken.c);
        pending += s == status::inprogress;
        ASSERT_TRUE(s == status::ok || s == status::inprogress);
        t.release(0, rx.got[0][2].b);
        EXPECT_EQ(t.receive(0, rx.got[0][3].b, nullptr, 0, nullptr, nullptr, &taken.c),
                  status::ok);
        t.unlock(0);
        for (message &m : rx.got[0]) {
            m.b = nullptr;
        }
        ASSERT_TRUE(pump([&] { return taken.total() == pending && sent.total() == 4; }));
        EXPECT_EQ(taken.failed.load(), 0u);
        EXPECT_EQ(sent.failed.load(), 0u);
        EXPECT_EQ(0, std::memcmp(half.data(), data.data(), n / 2));
        for (std::size_t i = n / 2; i < half.size(); ++i) {
            ASSERT_EQ(half[i], 0xee) << "written past the capacity at " << i;
        }
        ASSERT_EQ(sink.got.size(), n - 100);
        EXPECT_TRUE(sink.in_order);
        EXPECT_EQ(0, std::memcmp(sink.got.data(), data.data(), n - 100));
    }
    rx.on_bulk = nullptr;
}

// A sync bulk send of a size UCX would send eagerly goes by its rendezvous: the sender
// completes only once the receiver took the bytes.
TEST_F(ucx_bulk, sync_send_completes_after_its_receive)
{
    make(2, 1);
    node &rx = *nodes_[1];
    rx.on_bulk = [&](std::uint32_t, message &m) {
        EXPECT_TRUE(transport::rendezvous(m.b));
    };
    const bytes data = patterned(100, 3);
    auto &sent = hold<counter_completion>();
    ASSERT_EQ(send_bulk(*nodes_[0], 0, data, true, &sent.c), status::inprogress);
    ASSERT_TRUE(pump([&] { return rx.got[0].size() == 1; }));
    const auto end = clk::now() + std::chrono::milliseconds(200);
    (void)pump([&] { return clk::now() > end; });
    EXPECT_EQ(sent.total(), 0u) << "a sync send completed before its receive";
    bytes got(100);
    auto &taken = hold<counter_completion>();
    rx.t->lock(0);
    const status s = rx.t->receive(0, rx.got[0][0].b, got.data(), got.size(), nullptr, nullptr,
                                   &taken.c);
    rx.t->unlock(0);
    rx.got[0][0].b = nullptr;
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    ASSERT_TRUE(pump([&] { return sent.total() == 1 && taken.total() == (s == status::inprogress); }));
    EXPECT_EQ(sent.ok.load(), 1u);
    EXPECT_TRUE(got == data);
    rx.on_bulk = nullptr;
}

// Handles never taken and rendezvous sends never received at teardown: every completion is
// called once, and nothing leaks (the ASan build checks).
TEST_F(ucx_bulk, teardown_with_handles_never_taken)
{
    make(2, 1);
    nodes_[1]->on_bulk = [](std::uint32_t, message &) {};
    const bytes small = patterned(2000, 1);
    const bytes large = patterned(3 * 1024 * 1024, 2);
    auto &sent = hold<counter_completion>();
    ASSERT_EQ(send_bulk(*nodes_[0], 0, small, false, &sent.c), status::inprogress);
    ASSERT_EQ(send_bulk(*nodes_[0], 1, large, false, &sent.c), status::inprogress);
    ASSERT_TRUE(pump([&] { return nodes_[1]->got[0].size() == 2; }));
    EXPECT_FALSE(transport::rendezvous(nodes_[1]->got[0][0].b));
    EXPECT_TRUE(transport::rendezvous(nodes_[1]->got[0][1].b));
    TearDown(); // (both transports at once, as processes finalize)
    EXPECT_EQ(sent.total(), 2u);
}

// Fabricated bulk arrivals (UCX's handler as it would call ours): one ahead of its turn is
// held with a copy of its bytes (the data UCX passed is gone after the call), and is
// delivered after the one before it; a bulk arrival with a bad header is dropped; a pair
// that overflows its window gives back the handles it held.
TEST_F(ucx_bulk, early_bulk_arrivals_keep_their_bytes)
{
    make(2, 1);
    transport &t = *nodes_[0]->t;
    node &rx = *nodes_[0];
    rx.on_bulk = [](std::uint32_t, message &) {};
    auto arrive = [&](std::uint32_t seq, bytes &data) {
        const detail::msg_header h{detail::k_msg_magic, 1, 0, 0, seq};
        const std::uint32_t label = seq;
        unsigned char full[sizeof h + sizeof label];
        std::memcpy(full, &h, sizeof h);
        std::memcpy(full + sizeof h, &label, sizeof label);
        transport_test_access::raw(t, 0, full, sizeof full, data.data(), data.size(), 0, true);
    };
    log_capture logs;
    t.lock(0);
    bytes one = patterned(5000, 1);
    const bytes one_copy = one;
    arrive(1, one);
    std::fill(one.begin(), one.end(), 0); // UCX's buffer is reused after the call
    EXPECT_TRUE(rx.got[0].empty());
    bytes zero = patterned(10, 0);
    arrive(0, zero);
    ASSERT_EQ(rx.got[0].size(), 2u);
    EXPECT_EQ(label_of(rx.got[0][0]), 0u);
    EXPECT_EQ(label_of(rx.got[0][1]), 1u);
    bytes got(5000);
    auto &taken = hold<counter_completion>();
    EXPECT_EQ(t.receive(0, rx.got[0][1].b, got.data(), got.size(), nullptr, nullptr, &taken.c),
              status::ok);
    t.release(0, rx.got[0][0].b);
    rx.got[0].clear();
    EXPECT_TRUE(got == one_copy);
    EXPECT_EQ(t.stats(0).held_early, 1u);
    // Bad magic on the bulk id: dropped, never delivered.
    detail::msg_header bad{detail::k_msg_magic ^ 1, 1, 0, 0, 2};
    transport_test_access::raw(t, 0, &bad, sizeof bad, zero.data(), zero.size(), 0, true);
    EXPECT_TRUE(rx.got[0].empty());
    EXPECT_EQ(t.stats(0).dropped, 1u);
    // Overflow with held bulk arrivals: they are given back (ASan: nothing leaks).
    for (std::uint32_t seq = 3; seq <= k_max_held + 3; ++seq) {
        arrive(seq, zero);
    }
    (void)t.poll(0);
    EXPECT_EQ(rx.failures_for(1), 1u);
    t.unlock(0);
    EXPECT_GE(logs.errors().size(), 2u);
    rx.on_bulk = nullptr;
}

} // namespace
