// Scheduler microbenchmarks with their references in the same binary:
//   BM_ult_switch            one mpiv context switch      vs BM_boost_fcontext_switch
//   BM_ult_switch_chain      a switch between contexts that vs BM_boost_fcontext_switch_chain
//                            block at the same call site, k_chain_depth calls deep
//   BM_ult_signal_wait       signal+wait round trip        vs BM_pthread_condvar_handoff
//   BM_ult_spawn_join        spawn + join of a ULT         vs BM_pthread_spawn_join
// The ULT benchmarks run their timing loop inside a ULT on the runtime's single worker.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

#include "config.h"
#include "sched/context.hpp"
#include "sched/runtime.hpp"
#include "sched/sync.hpp"
#include "sched/worker.hpp"

#if MPIV_HAVE_BOOST_CONTEXT
#include <boost/context/detail/fcontext.hpp>
#endif

namespace {

using mpiv::status;
using mpiv::sched::runtime;
using mpiv::sched::sync;

/// Per-iteration count of operations, reported as time per operation ("ns/op" column).
void per_op(benchmark::State &state, const char *name, double ops_per_iteration)
{
    state.counters[name] = benchmark::Counter(static_cast<double>(state.iterations()) * ops_per_iteration,
                                              benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

/// Run @p body(state) inside a ULT on worker 0 and wait for it.
template <class F> void in_ult(benchmark::State &state, F body)
{
    struct ctx {
        benchmark::State *state;
        F *body;
    } c{&state, &body};
    std::uint64_t h = 0;
    if (runtime::get()->spawn([](void *a) -> void * {
            auto *x = static_cast<ctx *>(a);
            (*x->body)(*x->state);
            return nullptr;
        }, &c, 0, false, h) != status::ok ||
        runtime::get()->join(h, nullptr) != status::ok) {
        state.SkipWithError("spawn/join of the benchmark ULT failed");
    }
}

// --------------------------------------------------------------- context switch
struct switch_pair {
    mpiv::sched::context main_ctx;
    mpiv::sched::context fiber;
};

void bounce(void *, void *arg)
{
    auto *p = static_cast<switch_pair *>(arg);
    mpiv::sched::enter(p->fiber);
    for (;;) {
        mpiv::sched::jump(p->fiber, p->main_ctx, nullptr);
    }
}

void BM_ult_switch(benchmark::State &state)
{
    std::vector<char> stack(64 * 1024);
    switch_pair p;
    mpiv::sched::adopt_thread(p.main_ctx);
    mpiv::sched::make(p.fiber, stack.data(), stack.size(), bounce, &p);
    for (auto _ : state) {
        mpiv::sched::jump(p.main_ctx, p.fiber, nullptr); // two switches: there and back
    }
    mpiv::sched::retire(p.fiber);
    per_op(state, "ns_per_switch", 2);
}
BENCHMARK(BM_ult_switch);

#if MPIV_HAVE_BOOST_CONTEXT
namespace bctx = boost::context::detail;

void boost_bounce(bctx::transfer_t t)
{
    for (;;) {
        t = bctx::jump_fcontext(t.fctx, nullptr);
    }
}

void BM_boost_fcontext_switch(benchmark::State &state)
{
    std::vector<char> stack(64 * 1024);
    bctx::fcontext_t f = bctx::make_fcontext(stack.data() + stack.size(), stack.size(), boost_bounce);
    for (auto _ : state) {
        f = bctx::jump_fcontext(f, nullptr).fctx; // two switches: there and back
    }
    per_op(state, "ns_per_switch", 2);
}
BENCHMARK(BM_boost_fcontext_switch);
#endif

// ------------------------------------------- context switch at the same call site
// A ring of k_ring contexts, each k_chain_depth calls deep when it switches to the next
// from the same place: the pattern of ULTs that all block in one MPI call. The main
// context closes the ring (one switch in k_ring + 1 from a different site). What it
// shows: whether the returns up the resumed chain are predicted.
constexpr int k_ring = 8;
constexpr int k_chain_depth = 5;

/// Calls itself @p depth times, then runs @p at_bottom; not inlined, not a tail call.
template <class F> [[gnu::noinline]] void down_chain(int depth, F &at_bottom)
{
    if (depth == 0) {
        at_bottom();
    } else {
        down_chain(depth - 1, at_bottom);
    }
    benchmark::ClobberMemory(); // keeps the call a call
}

/// The ring of BM_ult_switch_chain (static: its members find it here).
struct ring {
    mpiv::sched::context main_ctx;
    mpiv::sched::context fiber[k_ring];
    int index[k_ring];
};
ring g_ring;

void ring_member(void *, void *arg)
{
    const int i = *static_cast<int *>(arg);
    mpiv::sched::enter(g_ring.fiber[i]);
    mpiv::sched::context &next = i + 1 < k_ring ? g_ring.fiber[i + 1] : g_ring.main_ctx;
    auto hop = [i, &next] { mpiv::sched::jump(g_ring.fiber[i], next, nullptr); };
    for (;;) {
        down_chain(k_chain_depth, hop);
    }
}

void BM_ult_switch_chain(benchmark::State &state)
{
    constexpr std::size_t k_stack = 64 * 1024;
    std::vector<char> stacks(k_ring * k_stack);
    mpiv::sched::adopt_thread(g_ring.main_ctx);
    for (int i = 0; i < k_ring; ++i) {
        g_ring.index[i] = i;
        mpiv::sched::make(g_ring.fiber[i], stacks.data() + i * k_stack, k_stack, ring_member,
                          &g_ring.index[i]);
    }
    for (auto _ : state) {
        mpiv::sched::jump(g_ring.main_ctx, g_ring.fiber[0], nullptr); // once round the ring
    }
    for (auto &f : g_ring.fiber) {
        mpiv::sched::retire(f);
    }
    per_op(state, "ns_per_switch", k_ring + 1);
}
BENCHMARK(BM_ult_switch_chain);

#if MPIV_HAVE_BOOST_CONTEXT
// g_fctx[i]: where ring context i resumes; i == k_ring is the main context. Each jump
// hands the target the jumper's resumption point, which the target stores.
bctx::fcontext_t g_fctx[k_ring + 1];

void boost_ring_member(bctx::transfer_t t)
{
    const int i = static_cast<int>(reinterpret_cast<std::intptr_t>(t.data));
    const int prev = i == 0 ? k_ring : i - 1;
    g_fctx[prev] = t.fctx;
    auto hop = [i, prev] {
        void *const next_index = reinterpret_cast<void *>(std::intptr_t{i + 1});
        g_fctx[prev] = bctx::jump_fcontext(g_fctx[i + 1], next_index).fctx;
    };
    for (;;) {
        down_chain(k_chain_depth, hop);
    }
}

void BM_boost_fcontext_switch_chain(benchmark::State &state)
{
    constexpr std::size_t k_stack = 64 * 1024;
    std::vector<char> stacks(k_ring * k_stack);
    for (int i = 0; i < k_ring; ++i) {
        g_fctx[i] = bctx::make_fcontext(stacks.data() + (i + 1) * k_stack, k_stack,
                                        boost_ring_member);
    }
    for (auto _ : state) {
        g_fctx[k_ring - 1] = bctx::jump_fcontext(g_fctx[0], nullptr).fctx; // once round the ring
    }
    per_op(state, "ns_per_switch", k_ring + 1);
}
BENCHMARK(BM_boost_fcontext_switch_chain);
#endif

// --------------------------------------------------------------- signal + wait
struct ping_pong {
    sync a{1};
    sync b{1};
    std::atomic<bool> stop{false};
};

void BM_ult_signal_wait(benchmark::State &state)
{
    ping_pong pp;
    std::uint64_t partner = 0;
    if (runtime::get()->spawn([](void *arg) -> void * {
            auto *p = static_cast<ping_pong *>(arg);
            for (;;) {
                (void)p->b.wait();
                (void)p->b.reset(1);
                if (p->stop.load(std::memory_order_relaxed)) {
                    return nullptr;
                }
                (void)p->a.signal();
            }
        }, &pp, 0, false, partner) != status::ok) {
        state.SkipWithError("spawn failed");
        return;
    }
    in_ult(state, [&pp](benchmark::State &st) {
        for (auto _ : st) {
            (void)pp.a.reset(1);
            (void)pp.b.signal();
            (void)pp.a.wait();
        }
        pp.stop.store(true, std::memory_order_relaxed);
        (void)pp.b.signal();
    });
    (void)runtime::get()->join(partner, nullptr);
    per_op(state, "ns_per_handoff", 2);
}
BENCHMARK(BM_ult_signal_wait)->UseRealTime();

void BM_pthread_condvar_handoff(benchmark::State &state)
{
    std::mutex m;
    std::condition_variable cv;
    int turn = 0; // 0: main's turn, 1: partner's turn, 2: stop
    std::thread partner([&] {
        std::unique_lock<std::mutex> l(m);
        for (;;) {
            cv.wait(l, [&] { return turn != 0; });
            if (turn == 2) {
                return;
            }
            turn = 0;
            cv.notify_all();
        }
    });
    for (auto _ : state) {
        std::unique_lock<std::mutex> l(m);
        turn = 1;
        cv.notify_all();
        cv.wait(l, [&] { return turn == 0; });
    }
    {
        std::lock_guard<std::mutex> l(m);
        turn = 2;
    }
    cv.notify_all();
    partner.join();
    per_op(state, "ns_per_handoff", 2);
}
BENCHMARK(BM_pthread_condvar_handoff)->UseRealTime();

// --------------------------------------------------------------- spawn + join
void *nothing(void *arg) { return arg; }

void BM_ult_spawn_join(benchmark::State &state)
{
    in_ult(state, [](benchmark::State &st) {
        runtime *rt = runtime::get();
        for (auto _ : st) {
            std::uint64_t h = 0;
            if (rt->spawn(nothing, nullptr, 0, false, h) != status::ok || rt->join(h, nullptr) != status::ok) {
                st.SkipWithError("spawn/join failed");
                break;
            }
        }
    });
}
BENCHMARK(BM_ult_spawn_join)->UseRealTime();

void BM_pthread_spawn_join(benchmark::State &state)
{
    for (auto _ : state) {
        pthread_t t;
        if (pthread_create(&t, nullptr, nothing, nullptr) != 0) {
            state.SkipWithError("pthread_create failed");
            break;
        }
        pthread_join(t, nullptr);
    }
}
BENCHMARK(BM_pthread_spawn_join)->UseRealTime();

} // namespace

int main(int argc, char **argv)
{
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    mpiv_params_t p{};
    p.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS;
    p.num_workers = 1; // hand-offs between ULTs of one worker: no cross-core traffic
    if (runtime::init(&p) != status::ok) {
        std::fprintf(stderr, "mpiv-bench-sched: mpiv runtime initialization failed\n");
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return runtime::finalize() == status::ok ? 0 : 1;
}
