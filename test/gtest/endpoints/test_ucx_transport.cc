// ucx::transport, the data path: round trips of every header and payload size class,
// replies from inside on_message, per-pair order under many threads, back-pressure,
// sleeping (bulk messages: test_ucx_transport_bulk.cc). Set-up in ucx_fixture.hpp.
#include "test/gtest/common/holder_race.hpp"
#include "test/gtest/endpoints/ucx_fixture.hpp"

namespace {

// Every header and payload size class both ways, with the copier for messages of up to
// copy_max bytes (0: none).
class ucx_round_trip : public ucx_transport {
  protected:
    void all_sizes(std::uint32_t copy_max);
};

void ucx_round_trip::all_sizes(std::uint32_t copy_max)
{
    copy_max_ = copy_max;
    make(2, 1);
    transport &a = *nodes_[0]->t;
    const std::size_t mh = a.max_header();
    std::printf("max_header() = %zu (UCX max_am_header %zu), max_payload() = %zu\n", mh,
                mh + k_transport_header, transport::max_payload());
    ASSERT_GT(mh, 256u);
    ASSERT_EQ(nodes_[1]->t->max_header(), mh);
    const std::size_t hsizes[] = {0, 1, 15, 16, 17, 127, 128, 129, 1000, mh - 1, mh};
    // (Around the default copy_max with an empty header: the last message through the
    // copier and the first past it.)
    const std::size_t copy_edge = 2048 - k_transport_header;
    const std::size_t psizes[] = {0, 1, 7, 4095, 4096, 8191, 8192, 8193, 32768,
                                  copy_edge, copy_edge + 1,
                                  transport::max_payload() - 1, transport::max_payload()};
    struct sent {
        std::vector<unsigned char> h, p;
    };
    auto &msgs = hold<std::vector<sent>>();
    std::uint64_t small = 0; // messages of at most copy_max bytes, headers included
    for (std::size_t hs : hsizes) {
        for (std::size_t ps : psizes) {
            small += k_transport_header + hs + ps <= copy_max;
            sent s;
            const auto seed = static_cast<std::uint32_t>(msgs.size());
            for (std::size_t i = 0; i < hs; ++i) {
                s.h.push_back(pattern(i, seed));
            }
            for (std::size_t i = 0; i < ps; ++i) {
                s.p.push_back(pattern(i, seed + 1000));
            }
            msgs.push_back(std::move(s));
        }
    }
    auto &cc = hold<counter_completion>();
    std::uint64_t pending = 0;
    // Both directions: node 0 -> 1 and 1 -> 0, same messages.
    for (int dir = 0; dir < 2; ++dir) {
        for (auto &m : msgs) {
            status s = send_retry(*nodes_[dir], 0, 1 - dir, 0, m.h.data(), m.h.size(),
                                  m.p.data(), m.p.size(), &cc.c);
            ASSERT_TRUE(s == status::ok || s == status::inprogress) << static_cast<int>(s);
            pending += s == status::inprogress;
        }
    }
    ASSERT_TRUE(pump([&] {
        return nodes_[0]->count[0].load() == msgs.size() &&
               nodes_[1]->count[0].load() == msgs.size() && cc.total() == pending;
    })) << "got " << nodes_[0]->count[0].load() << " and " << nodes_[1]->count[0].load()
        << " of " << msgs.size() << ", completions " << cc.total() << " of " << pending;
    EXPECT_EQ(cc.failed.load(), 0u);
    for (int dir = 0; dir < 2; ++dir) {
        auto &got = nodes_[1 - dir]->got[0];
        ASSERT_EQ(got.size(), msgs.size());
        for (std::size_t i = 0; i < msgs.size(); ++i) {
            EXPECT_EQ(got[i].peer, static_cast<std::uint32_t>(dir));
            EXPECT_EQ(got[i].from_worker, 0u);
            EXPECT_TRUE(got[i].header == msgs[i].h) << "message " << i;
            EXPECT_TRUE(got[i].payload == msgs[i].p) << "message " << i;
        }
    }
    // Sizes past the limits are refused; nothing is sent.
    log_capture logs;
    std::vector<unsigned char> big(std::max(mh, transport::max_payload()) + 1);
    a.lock(0);
    EXPECT_EQ(a.send(0, 1, 0, big.data(), mh + 1, nullptr, 0, &cc.c), status::invalid_arg);
    EXPECT_EQ(a.send(0, 1, 0, nullptr, 0, big.data(), transport::max_payload() + 1, &cc.c),
              status::invalid_arg);
    EXPECT_EQ(a.send(0, 1, 1, nullptr, 0, nullptr, 0, &cc.c), status::invalid_arg); // worker
    EXPECT_EQ(a.send(0, 2, 0, nullptr, 0, nullptr, 0, &cc.c), status::invalid_arg); // peer
    a.unlock(0);
    EXPECT_FALSE(logs.errors().empty());
    const auto st = nodes_[1]->t->stats(0);
    std::printf("receiver: %llu delivered, %llu held early (UCX reordered), %llu dropped\n",
                static_cast<unsigned long long>(st.delivered),
                static_cast<unsigned long long>(st.held_early),
                static_cast<unsigned long long>(st.dropped));
    EXPECT_EQ(st.dropped, 0u);
    // Exactly the small messages went through the copier, in both directions.
    EXPECT_EQ(small > 0, copy_max > 0);
    EXPECT_EQ(nodes_[0]->t->stats(0).sent_copied, small);
    EXPECT_EQ(st.sent_copied, small);
}

TEST_F(ucx_round_trip, all_sizes) { all_sizes(2048); }

TEST_F(ucx_round_trip, all_sizes_without_copier) { all_sizes(0); }

// on_message may send (the poller holds the worker's lock): b answers each ping from
// inside the callback, creating its ep to a there on the first one.
TEST_F(ucx_transport, reply_from_inside_on_message)
{
    make(2, 2);
    const std::uint64_t rounds = mpiv::test::iterations(2000);
    auto &reply_done = hold<counter_completion>();
    std::atomic<std::uint64_t> reply_errors{0};
    transport *b = nodes_[1]->t.get();
    nodes_[1]->keep = false;
    nodes_[1]->hook = [&, b](std::uint32_t w, const message &m) {
        // Header and payload are copies in m; the payload must outlive the send, so the
        // answer carries the payload in its header instead.
        std::vector<unsigned char> h = m.header;
        h.insert(h.end(), m.payload.begin(), m.payload.end());
        const status s = b->send(w, m.peer, m.from_worker, h.data(), h.size(), nullptr, 0,
                                 &reply_done.c);
        if (s != status::ok && s != status::inprogress) {
            reply_errors.fetch_add(1);
        }
    };
    auto &done = hold<counter_completion>();
    auto &payload = hold<std::vector<unsigned char>>(100);
    std::uint64_t started = 0;
    for (std::uint64_t r = 0; r < rounds; ++r) {
        const auto w = static_cast<std::uint32_t>(r % 2);
        const std::uint64_t h = r;
        for (std::size_t k = 0; k < payload.size(); ++k) {
            payload[k] = pattern(k, static_cast<std::uint32_t>(r));
        }
        const std::size_t pl = r % payload.size();
        // a's worker w -> b's worker 1 - w; the answer comes back to a's worker w.
        const std::uint64_t before = nodes_[0]->count[w].load();
        status s = send_retry(*nodes_[0], w, 1, 1 - w, &h, sizeof h, payload.data(), pl, &done.c);
        ASSERT_TRUE(s == status::ok || s == status::inprogress);
        started += s == status::inprogress;
        ASSERT_TRUE(pump([&] { return nodes_[0]->count[w].load() == before + 1; }))
            << "round " << r;
        const message &m = nodes_[0]->got[w].back();
        ASSERT_EQ(m.header.size(), sizeof h + pl);
        std::uint64_t got;
        std::memcpy(&got, m.header.data(), sizeof got);
        ASSERT_EQ(got, r);
        ASSERT_EQ(m.from_worker, 1 - w);
        ASSERT_EQ(0, std::memcmp(m.header.data() + sizeof h, payload.data(), pl));
        // The next round rewrites the payload: wait for this send's completion first.
        ASSERT_TRUE(pump([&] { return done.total() == started; }));
    }
    EXPECT_EQ(reply_errors.load(), 0u);
    EXPECT_EQ(done.failed.load(), 0u);
    EXPECT_EQ(reply_done.failed.load(), 0u);
    nodes_[1]->hook = nullptr;
}

TEST_F(ucx_transport, per_pair_order_under_threads)
{
    constexpr std::uint32_t W = 2;
    make(2, W, 64);
    const std::uint64_t total = mpiv::test::iterations(100000); // per direction
    const std::uint64_t per_thread = total / W;
    for (auto &n : nodes_) {
        n->keep = false;
    }
    // Receiver check: on worker w, from (peer, fw), header = {fw, w, seq}; seq must count up.
    std::atomic<std::uint64_t> order_errors{0};
    struct expect_table {
        std::uint64_t next[W][W] = {}; // [receiving worker][from worker]
    };
    expect_table exp[2];
    for (int i = 0; i < 2; ++i) {
        nodes_[i]->hook = [&, i](std::uint32_t w, const message &m) {
            std::uint64_t h[3];
            if (m.header.size() != sizeof h) {
                order_errors.fetch_add(1);
                return;
            }
            std::memcpy(h, m.header.data(), sizeof h);
            std::uint64_t &e = exp[i].next[w][m.from_worker];
            if (h[0] != m.from_worker || h[1] != w || h[2] != e ||
                m.payload.size() != h[2] % 33) {
                order_errors.fetch_add(1);
            }
            for (std::size_t k = 0; k < m.payload.size(); ++k) {
                if (m.payload[k] != pattern(k, 3)) {
                    order_errors.fetch_add(1);
                    break;
                }
            }
            e = h[2] + 1;
        };
    }
    auto &payload = hold<std::vector<unsigned char>>(64);
    for (std::size_t k = 0; k < payload.size(); ++k) {
        payload[k] = pattern(k, 3);
    }
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> errors{0};
    auto &cc = hold<counter_completion>();
    std::atomic<std::uint64_t> inprogress{0};
    auto received = [&] {
        std::uint64_t r = 0;
        for (auto &n : nodes_) {
            for (std::uint32_t w = 0; w < W; ++w) {
                r += n->count[w].load(std::memory_order_acquire);
            }
        }
        return r;
    };
    // Thread (node i, worker w) sends per_thread messages alternating between the remote
    // workers; between sends it polls its worker and sometimes tries the other one (so
    // ownership of a worker moves between threads).
    auto run = [&](int i, std::uint32_t w) {
        transport &t = *nodes_[i]->t;
        std::uint64_t seq[W] = {};
        for (std::uint64_t k = 0; k < per_thread && !stop.load(std::memory_order_relaxed);) {
            const std::uint32_t tw = static_cast<std::uint32_t>(k % W);
            const std::uint64_t h[3] = {w, tw, seq[tw]};
            t.lock(w);
            status s = t.send(w, 1 - i, tw, h, sizeof h, payload.data(), seq[tw] % 33, &cc.c);
            if (s == status::ok || s == status::inprogress) {
                inprogress.fetch_add(s == status::inprogress, std::memory_order_relaxed);
                ++seq[tw];
                ++k;
            } else if (s != status::retry_nomem) {
                errors.fetch_add(1);
                stop.store(true);
            }
            (void)t.poll(w);
            t.unlock(w);
            const std::uint32_t other = (w + 1) % W;
            if (k % 64 == 0 && t.try_lock(other)) {
                (void)t.poll(other);
                t.unlock(other);
            }
        }
        const auto end = clk::now() + std::chrono::seconds(60);
        while ((received() < 2 * total ||
                cc.total() < inprogress.load(std::memory_order_relaxed)) &&
               !stop.load() && clk::now() < end) {
            t.lock(w);
            (void)t.poll(w);
            t.unlock(w);
        }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
        for (std::uint32_t w = 0; w < W; ++w) {
            threads.emplace_back(run, i, w);
        }
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(errors.load(), 0u);
    ASSERT_EQ(2 * W * per_thread, 2 * total);
    EXPECT_EQ(received(), 2 * total);
    EXPECT_EQ(order_errors.load(), 0u);
    EXPECT_EQ(cc.failed.load(), 0u);
    EXPECT_EQ(cc.total(), inprogress.load());
    for (int i = 0; i < 2; ++i) {
        for (std::uint32_t w = 0; w < W; ++w) {
            for (std::uint32_t f = 0; f < W; ++f) {
                EXPECT_EQ(exp[i].next[w][f], per_thread / W)
                    << "node " << i << " worker " << w << " from " << f;
            }
            const auto st = nodes_[i]->t->stats(w);
            std::printf("node %d worker %u: %llu delivered, %llu held early, %llu dropped\n", i,
                        w, static_cast<unsigned long long>(st.delivered),
                        static_cast<unsigned long long>(st.held_early),
                        static_cast<unsigned long long>(st.dropped));
        }
    }
}

TEST_F(ucx_transport, retry_at_max_inflight)
{
    constexpr std::uint32_t limit = 4;
    make(2, 1, limit);
    transport &a = *nodes_[0]->t;
    auto &payload = hold<std::vector<unsigned char>>(transport::max_payload(), 9);
    auto &cc = hold<counter_completion>();
    std::uint32_t sent = 0, inprogress = 0;
    bool refused = false;
    a.lock(0);
    // No polling: the first sends wait for the ep's wireup, so they stay in flight. Each
    // header is a fresh stack variable at the same address, overwritten by the next send
    // while the earlier ones are still in flight: the receiver sees the right numbers only
    // because send() copies the header (UCX 1.13 keeps the header pointer).
    for (int k = 0; k < 1000 && !refused; ++k) {
        std::uint32_t h = sent;
        // Alternating small (one fragment) and largest (many) payloads.
        const std::size_t pl = sent % 2 == 0 ? 8 : payload.size();
        status s = a.send(0, 1, 0, &h, sizeof h, payload.data(), pl, &cc.c);
        if (s == status::retry_nomem) {
            refused = true;
        } else {
            ASSERT_TRUE(s == status::ok || s == status::inprogress);
            inprogress += s == status::inprogress;
            ++sent;
        }
    }
    a.unlock(0);
    ASSERT_TRUE(refused);
    EXPECT_EQ(inprogress, limit);
    ASSERT_TRUE(pump([&] { return cc.total() == inprogress; }));
    EXPECT_EQ(cc.ok.load(), inprogress);
    std::uint32_t h = sent;
    a.lock(0);
    status s = a.send(0, 1, 0, &h, sizeof h, payload.data(), payload.size(), &cc.c);
    a.unlock(0);
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    ++sent;
    inprogress += s == status::inprogress;
    ASSERT_TRUE(pump(
        [&] { return nodes_[1]->count[0].load() == sent && cc.total() == inprogress; }));
    // The refused attempt used no sequence number: all arrive, in order.
    for (std::uint32_t i = 0; i < sent; ++i) {
        std::uint32_t got;
        ASSERT_EQ(nodes_[1]->got[0][i].header.size(), sizeof got);
        std::memcpy(&got, nodes_[1]->got[0][i].header.data(), sizeof got);
        EXPECT_EQ(got, i);
    }
}

// A worker's lock names its holder: held_by() answers for that holder only, on that worker
// only, and not after unlock() (the engine asks it from inside a poll's callbacks).
TEST_F(ucx_transport, the_worker_lock_names_its_holder)
{
    make(1, 2);
    transport &t = *nodes_[0]->t;
    int me = 0;
    int other = 0;
    const auto id = reinterpret_cast<std::uintptr_t>(&me);
    const auto not_id = reinterpret_cast<std::uintptr_t>(&other);
    EXPECT_FALSE(t.held_by(0, id));
    ASSERT_TRUE(t.try_lock(0, id));
    EXPECT_TRUE(t.held_by(0, id));
    EXPECT_FALSE(t.held_by(0, not_id));
    EXPECT_FALSE(t.held_by(1, id));
    EXPECT_FALSE(t.try_lock(0, not_id));
    EXPECT_FALSE(t.try_lock(0, id)) << "not recursive";
    t.unlock(0);
    EXPECT_FALSE(t.held_by(0, id));
    t.lock(1, not_id);
    EXPECT_TRUE(t.held_by(1, not_id));
    EXPECT_FALSE(t.held_by(1, id));
    t.unlock(1);
    t.lock(0); // anonymous
    EXPECT_FALSE(t.held_by(0, id));
    EXPECT_FALSE(t.held_by(0, not_id));
    t.unlock(0);
}

// Threads race for a worker's lock, each under its own identity (holder_race.hpp).
TEST_F(ucx_transport, racing_try_locks_keep_the_holders_name)
{
    make(1, 1);
    transport &t = *nodes_[0]->t;
    mpiv::test::race_named_try_lock([&](std::uintptr_t id) { return t.try_lock(0, id); },
                                    [&](std::uintptr_t id) { return t.held_by(0, id); },
                                    [&] { t.unlock(0); });
}

TEST_F(ucx_transport, sleep_and_signal)
{
    make(2, 1);
    transport &a = *nodes_[0]->t;
    const int fd = a.event_fd(0);
    ASSERT_GE(fd, 0);
    // Drain, then arm; busy means events were pending.
    status s = status::busy;
    for (int k = 0; k < 1000 && s == status::busy; ++k) {
        a.lock(0);
        while (a.poll(0) > 0) {
        }
        s = a.arm(0);
        a.unlock(0);
    }
    ASSERT_EQ(s, status::ok);
    std::thread waker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        a.signal(0);
    });
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, 10000);
    waker.join();
    EXPECT_EQ(r, 1) << "signal() did not wake the event fd";
    // A message from b wakes a too.
    a.lock(0);
    while (a.poll(0) > 0) {
    }
    a.unlock(0);
    auto &cc = hold<counter_completion>();
    std::uint32_t x = 5;
    ASSERT_TRUE(send_retry(*nodes_[1], 0, 0, 0, &x, sizeof x, nullptr, 0, &cc.c) !=
                status::invalid_arg);
    EXPECT_TRUE(pump([&] { return nodes_[0]->count[0].load() == 1; }));
}

} // namespace
