// The fixture of the engine tests (test_engine.cc, test_engine_progress.cc): two engines
// in one process (peers 0 and 1, each connected to both segments, which works within a
// process through /proc/self/fd), completion records, operations with their storage,
// data patterns and the engines' parameters.
#pragma once

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

inline std::chrono::seconds timeout() { return std::chrono::seconds(60 * mpiv::test::time_multiplier()); }

// ------------------------------------------------------------------ completions

// What the completion callback reports for one operation (its `user` pointer). With w
// set, the callback also reports the completion to that waiter of engine eng.
struct record {
    std::atomic<int> calls{0};
    mpiv_p2p_status_t st{}; // written before the release increment of calls
    ep::engine *eng = nullptr;
    ep::waiter *w = nullptr;
};

inline void on_complete(void *user, const mpiv_p2p_status_t *s)
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

inline int calls_of(const record &r)
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

inline unsigned char pattern(std::uint32_t seed, std::size_t i)
{
    return static_cast<unsigned char>((i * 131u) ^ (seed * 2654435761u) ^ (seed >> 7));
}

inline std::vector<unsigned char> patterned(std::size_t n, std::uint32_t seed)
{
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = pattern(seed, i);
    }
    return v;
}

inline bool intact(const unsigned char *p, std::size_t n, std::uint32_t seed)
{
    for (std::size_t i = 0; i < n; ++i) {
        if (p[i] != pattern(seed, i)) {
            return false;
        }
    }
    return true;
}

inline bool guard_intact(const std::vector<unsigned char> &buf, std::size_t from)
{
    for (std::size_t i = from; i < buf.size(); ++i) {
        if (buf[i] != k_guard) {
            return false;
        }
    }
    return true;
}

inline mpiv_p2p_params_t params_for(std::uint32_t self, std::uint32_t num_peers = 2, bool serialized = false)
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
    p.ucx_copy_max = 2048; // (mpiv_p2p_params_default's)
    return p;
}


// ------------------------------------------------------------------ fixture

class engine_test : public ::testing::Test {
  protected:
    void SetUp() override
    {
        // The single-copy cases read with CMA: a machine without it fails here (the
        // two-copy path alone is covered by single_copy NONE and test/mpi/single_copy.sh).
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
    void start()
    {
        mpiv_p2p_params_t p0 = params_for(0, 2, serialized_);
        mpiv_p2p_params_t p1 = params_for(1, 2, serialized_);
        p0.single_copy = p1.single_copy = single_copy_;
        start(p0, p1);
    }
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

    /// @param scratch_ults mpiv_params_t::scratch_ults, or -1 for the runtime's default
    /// @param prefetch_ults mpiv_params_t::prefetch_ults, or -1 for the runtime's default
    void start_runtime(unsigned workers, std::int64_t scratch_ults = -1,
                       std::int64_t prefetch_ults = -1)
    {
        mpiv_params_t p{};
        p.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS | MPIV_PARAM_FIELD_STACK_SIZE;
        p.num_workers = workers;
        p.stack_size = 256 * 1024;
        if (scratch_ults >= 0) {
            p.field_mask |= MPIV_PARAM_FIELD_SCRATCH_ULTS;
            p.scratch_ults = static_cast<std::uint32_t>(scratch_ults);
        }
        if (prefetch_ults >= 0) {
            p.field_mask |= MPIV_PARAM_FIELD_PREFETCH_ULTS;
            p.prefetch_ults = static_cast<std::uint32_t>(prefetch_ults);
        }
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
    bool two_copies() const { return single_copy_ == MPIV_P2P_SINGLE_COPY_NONE; }
    // What a receive (or mrecv) that matches an arrived message of @p size bytes from
    // engine @p from, into a capacity of @p cap at engine @p to, returns: done at once,
    // but for a rendezvous from the other engine in two copies, whose bytes come later.
    status arrived_rc(int from, int to, std::size_t size, std::size_t cap) const
    {
        return two_copies() && from != to && size > k_limit && std::min(size, cap) != 0
                   ? status::inprogress
                   : status::ok;
    }
    // The largest piece a sink gets of a rendezvous message from the other engine.
    std::size_t sink_piece() const
    {
        return two_copies() ? std::size_t{mpiv::shm::k_copy_piece} : std::size_t{MPIV_P2P_SINK_PIECE};
    }
    // mrecv of @p m into @p to at engine @p at; its status once the bytes are in.
    mpiv_p2p_status_t mrecv_all(int at, ep::inmsg &m, const ep::recv_target &to)
    {
        record rec;
        mpiv_p2p_status_t st{};
        const status rc = eng(at).mrecv(m, to, &rec, st);
        if (rc == status::ok) {
            return st;
        }
        EXPECT_EQ(rc, status::inprogress);
        EXPECT_TRUE(until([&] { return calls_of(rec) >= 1; })) << "no completion";
        return rec.st;
    }

    std::unique_ptr<ep::engine> eng_[2];
    ep::comm_state *comm_[2] = {nullptr, nullptr};
    bool runtime_ = false;
    bool serialized_ = false; // start(): engines told that calls never overlap
    // start(): how rendezvous bytes travel (NONE: always two copies through shared memory)
    mpiv_p2p_single_copy_t single_copy_ = MPIV_P2P_SINGLE_COPY_AUTO;
};

} // namespace
