// ucx_fixture.hpp: what the ucx::transport tests share (test_ucx_transport.cc: the data
// path; test_ucx_transport_input.cc: untrusted input and failures): transports in one
// process (each its own UCX context) connected through their address blobs over TCP on
// loopback (UCX_TLS=tcp, UCX_NET_DEVICES=lo, set before the first create), white-box access
// to the receive handler, and helpers.
#pragma once

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
                    const void *data, std::size_t len, std::uint64_t attr = 0,
                    bool bulk = false)
    {
        ucp_am_recv_param_t prm{};
        prm.recv_attr = attr;
        (void)(bulk ? detail::state::am_recv_bulk : detail::state::am_recv)(
            &t.st_->workers[w], hdr, hlen, const_cast<void *>(data), len, &prm);
    }
};
} // namespace mpiv::ep::ucx

namespace {

using mpiv::status;
using namespace mpiv::ep::ucx;
using mpiv::ep::ucx::transport_test_access;
using mpiv::test::log_capture;
using clk = std::chrono::steady_clock;

inline unsigned char pattern(std::size_t i, std::uint32_t seed)
{
    return static_cast<unsigned char>((i * 131 + seed * 17 + 5) ^ (i >> 8));
}

struct message {
    std::uint32_t worker, peer, from_worker;
    std::vector<unsigned char> header, payload;
    bulk *b = nullptr;     // a bulk message's handle (taken by the test or on_bulk)
    std::size_t bulk_len = 0;
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
    // A bulk message: take or keep m.b (set m.b to null once given to receive/release).
    // Without it, handles are released unread.
    std::function<void(std::uint32_t, message &)> on_bulk;

    node(std::uint32_t w) : got(w), count(w) {}

    static void on_message(void *ctx, std::uint32_t w, std::uint32_t peer, std::uint32_t fw,
                           const void *h, std::size_t hl, const void *p, std::size_t pl,
                           bulk *b)
    {
        auto *n = static_cast<node *>(ctx);
        message m{w, peer, fw, {}, {}};
        m.header.assign(static_cast<const unsigned char *>(h),
                        static_cast<const unsigned char *>(h) + hl);
        if (b != nullptr) {
            m.b = b;
            m.bulk_len = pl;
            if (n->on_bulk) {
                n->on_bulk(w, m);
            } else {
                n->t->release(w, b);
                m.b = nullptr;
            }
        } else {
            m.payload.assign(static_cast<const unsigned char *>(p),
                             static_cast<const unsigned char *>(p) + pl);
        }
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

    std::uint32_t copy_max_ = 2048; // params.copy_max of the transports make() creates

    params make_params(std::uint32_t self, std::uint32_t n, std::uint32_t w, node *nd,
                       std::uint32_t max_inflight = 256)
    {
        params p;
        p.self = self;
        p.num_peers = n;
        p.workers = w;
        p.max_inflight = max_inflight;
        p.copy_max = copy_max_;
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

} // namespace
