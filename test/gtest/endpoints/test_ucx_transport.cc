// ucx::transport: several transports in one process (each its own UCX context) connected
// through their address blobs over TCP on loopback (UCX_TLS=tcp, UCX_NET_DEVICES=lo, set
// before the first create). Round trips of every header and payload size class, per-pair
// order under many threads, large gets served by the owner's progress, untrusted
// addresses and keys, back-pressure, a peer dying mid-run, sleeping, bad params.
#include "endpoints/ucx/transport.hpp"

#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "endpoints/ucx/transport_detail.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/common/test_util.hpp"

namespace mpiv::ep::ucx {
// Feeds fabricated arrivals to a worker as UCX's AM handler would (the caller holds the
// worker's lock).
struct transport_test_access {
    static void arrive(transport &t, std::uint32_t w, const detail::msg_header &h,
                       const void *hdr, std::size_t hlen, const void *data, std::size_t len)
    {
        std::vector<unsigned char> full(sizeof h + hlen);
        std::memcpy(full.data(), &h, sizeof h);
        if (hlen > 0) {
            std::memcpy(full.data() + sizeof h, hdr, hlen);
        }
        raw(t, w, full.data(), full.size(), data, len);
    }
    static void raw(transport &t, std::uint32_t w, const void *hdr, std::size_t hlen,
                    const void *data, std::size_t len, std::uint64_t attr = 0)
    {
        ucp_am_recv_param_t prm{};
        prm.recv_attr = attr;
        (void)detail::state::am_recv(&t.st_->workers[w], hdr, hlen, const_cast<void *>(data),
                                     len, &prm);
    }
};
} // namespace mpiv::ep::ucx

#if defined(__SANITIZE_THREAD__)
namespace {
// UCX's libucm patches mmap/madvise/malloc to track memory for its registration cache;
// under ThreadSanitizer a thread's exit then calls into TSan from ucm_madvise after TSan
// has let the thread go (a crash inside TSan's runtime, not a report). TCP needs no
// registration cache, so the hooks go: libucm reads UCX_MEM_* when it is loaded, before
// any code of ours runs, so the program restarts itself once with them set. glibc passes
// argc/argv to constructors.
__attribute__((constructor)) void ucm_hooks_off(int argc, char **argv, char **)
{
    if (std::getenv("UCX_MEM_MMAP_HOOK_MODE") == nullptr && argc > 0) {
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("UCX_MEM_MALLOC_HOOKS", "no", 1);
        execv("/proc/self/exe", argv);
    }
}
} // namespace
#endif

namespace {

using mpiv::status;
using namespace mpiv::ep::ucx;
using mpiv::ep::ucx::transport_test_access;
using mpiv::test::log_capture;
using clk = std::chrono::steady_clock;

unsigned char pattern(std::size_t i, std::uint32_t seed)
{
    return static_cast<unsigned char>((i * 131 + seed * 17 + 5) ^ (i >> 8));
}

struct message {
    std::uint32_t worker, peer, from_worker;
    std::vector<unsigned char> header, payload;
};

// One process's transport and what arrived at it. Each worker's list is touched only by
// that worker's lock holder (on_message runs inside poll).
struct node {
    std::unique_ptr<transport> t;
    std::vector<std::vector<message>> got; // [worker]
    std::vector<std::atomic<std::uint64_t>> count; // [worker], read by other threads
    std::mutex fail_mu;
    std::vector<std::pair<std::uint32_t, std::string>> failures;
    bool keep = true; // store messages (off in the stress test)
    std::function<void(std::uint32_t, const message &)> hook;

    node(std::uint32_t w) : got(w), count(w) {}

    static void on_message(void *ctx, std::uint32_t w, std::uint32_t peer, std::uint32_t fw,
                           const void *h, std::size_t hl, const void *p, std::size_t pl)
    {
        auto *n = static_cast<node *>(ctx);
        message m{w, peer, fw, {}, {}};
        m.header.assign(static_cast<const unsigned char *>(h),
                        static_cast<const unsigned char *>(h) + hl);
        m.payload.assign(static_cast<const unsigned char *>(p),
                         static_cast<const unsigned char *>(p) + pl);
        if (n->hook) {
            n->hook(w, m);
        }
        if (n->keep) {
            n->got[w].push_back(std::move(m));
        }
        n->count[w].fetch_add(1, std::memory_order_release);
    }
    static void on_failure(void *ctx, std::uint32_t peer, const char *reason)
    {
        auto *n = static_cast<node *>(ctx);
        std::lock_guard<std::mutex> g(n->fail_mu);
        n->failures.emplace_back(peer, reason);
    }
    std::size_t failures_for(std::uint32_t peer)
    {
        std::lock_guard<std::mutex> g(fail_mu);
        std::size_t k = 0;
        for (auto &f : failures) {
            k += f.first == peer;
        }
        return k;
    }
};

struct counter_completion {
    completion c{&counter_completion::fn};
    std::atomic<std::uint64_t> ok{0}, failed{0};
    static void fn(completion *c, status s)
    {
        auto *self = reinterpret_cast<counter_completion *>(c);
        (s == status::ok ? self->ok : self->failed).fetch_add(1, std::memory_order_relaxed);
    }
    std::uint64_t total() const
    {
        return ok.load(std::memory_order_relaxed) + failed.load(std::memory_order_relaxed);
    }
};

class ucx_transport : public ::testing::Test {
  protected:
    static void SetUpTestSuite()
    {
        setenv("UCX_TLS", "tcp", 1);
        setenv("UCX_NET_DEVICES", "lo", 1);
    }

    params make_params(std::uint32_t self, std::uint32_t n, std::uint32_t w, node *nd,
                       std::uint32_t max_inflight = 256)
    {
        params p;
        p.self = self;
        p.num_peers = n;
        p.workers = w;
        p.max_inflight = max_inflight;
        p.ctx = nd;
        p.on_message = &node::on_message;
        p.on_peer_failure = &node::on_failure;
        return p;
    }

    // n nodes of w workers, every pair connected.
    void make(std::uint32_t n, std::uint32_t w, std::uint32_t max_inflight = 256)
    {
        for (std::uint32_t i = 0; i < n; ++i) {
            nodes_.push_back(std::make_unique<node>(w));
            ASSERT_EQ(transport::create(make_params(i, n, w, nodes_[i].get(), max_inflight),
                                        nodes_[i]->t),
                      status::ok);
        }
        for (std::uint32_t i = 0; i < n; ++i) {
            for (std::uint32_t j = 0; j < n; ++j) {
                if (i != j) {
                    const void *a;
                    std::size_t l;
                    nodes_[j]->t->address(a, l);
                    ASSERT_EQ(nodes_[i]->t->connect(j, a, l), status::ok);
                }
            }
        }
    }

    // Poll every worker of every live node (taking each worker's lock) until done() or
    // the time limit; true if done() held.
    bool pump(const std::function<bool()> &done, double seconds = 20)
    {
        const auto end = clk::now() + std::chrono::duration<double>(seconds);
        while (!done()) {
            if (clk::now() > end) {
                return false;
            }
            for (auto &n : nodes_) {
                if (!n->t) {
                    continue;
                }
                for (std::uint32_t w = 0; w < n->t->workers(); ++w) {
                    if (n->t->try_lock(w)) {
                        (void)n->t->poll(w);
                        n->t->unlock(w);
                    }
                }
            }
        }
        return true;
    }

    // Send, polling (both sides) while the transport says retry.
    status send_retry(node &from, std::uint32_t w, std::uint32_t peer, std::uint32_t tw,
                      const void *h, std::size_t hl, const void *p, std::size_t pl,
                      completion *c)
    {
        for (;;) {
            from.t->lock(w);
            status s = from.t->send(w, peer, tw, h, hl, p, pl, c);
            from.t->unlock(w);
            if (s != status::retry_nomem) {
                return s;
            }
            for (auto &n : nodes_) {
                if (!n->t) {
                    continue;
                }
                for (std::uint32_t x = 0; x < n->t->workers(); ++x) {
                    n->t->lock(x);
                    (void)n->t->poll(x);
                    n->t->unlock(x);
                }
            }
        }
    }

    void TearDown() override
    {
        // All at once, as processes finalize: a flush close of a PEER-mode ep needs the
        // peer to progress, which it does inside its own destructor.
        const auto t0 = clk::now();
        std::vector<std::thread> th;
        for (auto &n : nodes_) {
            th.emplace_back([&n] { n->t.reset(); });
        }
        for (auto &x : th) {
            x.join();
        }
        nodes_.clear();
        EXPECT_LT(std::chrono::duration<double>(clk::now() - t0).count(), 30.0)
            << "destruction took too long";
    }

    // Storage that must outlive the transports (completions, payloads, get buffers): a
    // test that stops early leaves operations in flight, which end in TearDown.
    template <class T, class... A>
    T &hold(A &&...a)
    {
        auto p = std::make_shared<T>(std::forward<A>(a)...);
        held_.push_back(p);
        return *p;
    }

    std::vector<std::shared_ptr<void>> held_;
    std::vector<std::unique_ptr<node>> nodes_;
};

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

TEST_F(ucx_transport, round_trip_all_sizes)
{
    make(2, 1);
    transport &a = *nodes_[0]->t;
    const std::size_t mh = a.max_header();
    std::printf("max_header() = %zu (UCX max_am_header %zu), max_payload() = %zu\n", mh,
                mh + k_transport_header, transport::max_payload());
    ASSERT_GT(mh, 256u);
    ASSERT_EQ(nodes_[1]->t->max_header(), mh);
    const std::size_t hsizes[] = {0, 1, 15, 16, 17, 127, 128, 129, 1000, mh - 1, mh};
    const std::size_t psizes[] = {0, 1, 7, 4095, 4096, 8191, 8192, 8193, 32768,
                                  transport::max_payload() - 1, transport::max_payload()};
    struct sent {
        std::vector<unsigned char> h, p;
    };
    auto &msgs = hold<std::vector<sent>>();
    for (std::size_t hs : hsizes) {
        for (std::size_t ps : psizes) {
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
}

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

TEST_F(ucx_transport, get_large_served_by_owner_progress)
{
    make(2, 1);
    transport &a = *nodes_[0]->t;
    transport &b = *nodes_[1]->t;
    constexpr std::size_t n = 4 << 20;
    auto &src = hold<std::vector<unsigned char>>(n);
    auto &dst = hold<std::vector<unsigned char>>(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        src[i] = pattern(i, 42);
    }
    exposure *e = nullptr;
    a.lock(0);
    ASSERT_EQ(a.expose(0, src.data(), n, e), status::ok);
    a.unlock(0);
    ASSERT_NE(e, nullptr);
    ASSERT_LE(e->key_len(), k_max_key);
    std::printf("key: %zu bytes\n", e->key_len());
    // The key and address travel in a message header, as the engine's RTS would carry them.
    std::vector<unsigned char> rts(8 + e->key_len());
    const std::uint64_t base = reinterpret_cast<std::uintptr_t>(src.data());
    std::memcpy(rts.data(), &base, 8);
    std::memcpy(rts.data() + 8, e->key(), e->key_len());
    auto &cc = hold<counter_completion>();
    status s = send_retry(*nodes_[0], 0, 1, 0, rts.data(), rts.size(), nullptr, 0, &cc.c);
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    ASSERT_TRUE(pump([&] { return nodes_[1]->count[0].load() == 1; }));
    const message &m = nodes_[1]->got[0][0];
    std::uint64_t raddr;
    std::memcpy(&raddr, m.header.data(), 8);
    const unsigned char *key = m.header.data() + 8;
    const std::size_t key_len = m.header.size() - 8;

    auto &gc = hold<counter_completion>();
    b.lock(0);
    s = b.get(0, 0, 0, key, key_len, raddr, dst.data(), n, &gc.c);
    b.unlock(0);
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    // Only the reader polls for a while: on TCP the owner must progress, so nothing ends.
    if (s == status::inprogress) {
        const auto end = clk::now() + std::chrono::milliseconds(200);
        while (clk::now() < end) {
            b.lock(0);
            (void)b.poll(0);
            b.unlock(0);
        }
        std::printf("get without the owner polling: %s\n",
                    gc.total() == 0 ? "not complete (as expected on TCP)" : "complete");
        ASSERT_TRUE(pump([&] { return gc.total() == 1; }, 60));
    }
    EXPECT_EQ(gc.failed.load(), 0u);
    EXPECT_TRUE(dst == src) << "4 MiB get: contents differ";

    // A sub-range at an offset, and the last byte.
    auto &part = hold<std::vector<unsigned char>>(1000, 0);
    auto &pc = hold<counter_completion>();
    b.lock(0);
    s = b.get(0, 0, 0, key, key_len, raddr + 12345, part.data(), part.size(), &pc.c);
    b.unlock(0);
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    ASSERT_TRUE(pump([&] { return s == status::ok || pc.total() == 1; }));
    EXPECT_EQ(0, std::memcmp(part.data(), src.data() + 12345, part.size()));
    auto &last = hold<unsigned char>(0);
    auto &lc = hold<counter_completion>();
    b.lock(0);
    s = b.get(0, 0, 0, key, key_len, raddr + n - 1, &last, 1, &lc.c);
    b.unlock(0);
    ASSERT_TRUE(pump([&] { return s == status::ok || lc.total() == 1; }));
    EXPECT_EQ(last, src[n - 1]);
    a.withdraw(e);
}

TEST_F(ucx_transport, bad_keys_refused)
{
    make(2, 1);
    transport &a = *nodes_[0]->t;
    transport &b = *nodes_[1]->t;
    auto &src = hold<std::vector<unsigned char>>(4096, 7);
    auto &dst = hold<std::vector<unsigned char>>(8192);
    log_capture logs;
    exposure *e = nullptr;
    a.lock(0);
    ASSERT_EQ(a.expose(0, src.data(), src.size(), e), status::ok);
    EXPECT_EQ(a.expose(0, nullptr, 10, e), status::invalid_arg);
    exposure *z = nullptr;
    EXPECT_EQ(a.expose(0, src.data(), 0, z), status::invalid_arg);
    a.unlock(0);
    const auto base = reinterpret_cast<std::uintptr_t>(src.data());
    std::vector<unsigned char> key(static_cast<const unsigned char *>(e->key()),
                                   static_cast<const unsigned char *>(e->key()) + e->key_len());
    auto &cc = hold<counter_completion>();
    auto try_get = [&](const std::vector<unsigned char> &k, std::size_t klen, std::uint64_t addr,
                       std::size_t len) {
        b.lock(0);
        status s = b.get(0, 0, 0, k.data(), klen, addr, dst.data(), len, &cc.c);
        b.unlock(0);
        return s;
    };
    EXPECT_EQ(try_get(key, 0, base, 16), status::invalid_arg);
    EXPECT_EQ(try_get(key, 16, base, 16), status::invalid_arg); // truncated
    EXPECT_EQ(try_get(key, key.size() - 1, base, 16), status::invalid_arg);
    std::vector<unsigned char> longer = key;
    longer.resize(k_max_key + 8, 0);
    EXPECT_EQ(try_get(longer, longer.size(), base, 16), status::invalid_arg);
    for (std::size_t i = 0; i < key.size(); ++i) {
        std::vector<unsigned char> bad = key;
        bad[i] ^= 0x5a; // any single corrupted byte
        EXPECT_EQ(try_get(bad, bad.size(), base, 16), status::invalid_arg) << "byte " << i;
    }
    EXPECT_EQ(try_get(key, key.size(), base - 1, 16), status::invalid_arg);
    EXPECT_EQ(try_get(key, key.size(), base + 4096 - 15, 16), status::invalid_arg);
    EXPECT_EQ(try_get(key, key.size(), base, 4097), status::invalid_arg);
    EXPECT_EQ(try_get(key, key.size(), UINT64_MAX - 4, 16), status::invalid_arg);
    EXPECT_GE(logs.errors().size(), key.size() + 10); // + 2 expose errors
    EXPECT_EQ(cc.total(), 0u);
    // The good key still works at the very edge.
    status s = try_get(key, key.size(), base + 4096 - 16, 16);
    ASSERT_TRUE(s == status::ok || s == status::inprogress);
    ASSERT_TRUE(pump([&] { return s == status::ok || cc.total() == 1; }));
    EXPECT_EQ(cc.failed.load(), 0u);
    EXPECT_EQ(dst[0], 7);
    a.withdraw(e);
}

// UCX has not been seen to reorder eager AMs on TCP, so the reordering is driven directly:
// arrivals in any order are delivered in sequence, duplicates and bad headers dropped, and
// a sender overflowing the window is reported as failed.
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
