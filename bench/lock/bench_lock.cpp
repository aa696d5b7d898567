// Lock microbenchmarks, every lock against the pthread mutex reference in the same binary.
//
//   BM_lock_<kind>/threads:N         N threads acquire the same lock back to back; the
//                                    critical section updates 4 shared cache lines.
//                                    items_per_second: acquisitions per second, all threads;
//                                    handoff: wall time per change of owner (the hand-off
//                                    latency; an unfair lock that lets a thread re-acquire
//                                    shows few, i.e. long-spaced, hand-offs).
//   BM_latency_regime_<kind>/threads:N
//                                    seed 004 §3.4.2: one main thread takes the lock (high
//                                    priority for TLP), does work in the critical section
//                                    and a little outside; N-1 progress pollers take it (low
//                                    priority for TLP), find nothing and release it.
//                                    items_per_second: the main thread's work rate;
//                                    polls: poller acquisitions per second.
//   BM_throughput_regime_<kind>/threads:N
//                                    seed 004 §3.4.3: the same threads, but every
//                                    acquisition, main or poller, does the work.
//                                    items_per_second: work items per second, all threads.
// <kind>: mutex (reference), tas, ticket, mcs, hmcs, p_mcs_mcs, p_hmcs_mcs. Locks that have no
// low-priority class are taken with lock() by the pollers. Times are wall-clock.
// Compare kinds through ratios to BM_*_mutex of the same run: absolute numbers move with
// the machine's load.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/backoff.hpp"
#include "base/cacheline.hpp"
#include "base/lock/hmcs.hpp"
#include "base/lock/mcs.hpp"
#include "base/lock/mutex.hpp"
#include "base/lock/tas.hpp"
#include "base/lock/ticket.hpp"
#include "base/lock/tlp.hpp"

namespace {

using namespace mpiv::base;

constexpr int k_cs_lines = 4;   // shared lines written in each critical section
constexpr int k_outside = 32;   // iterations of local work between main-path acquisitions

// Data guarded by the benchmark's lock: lines written in the critical section and the
// index of the last owner (for counting hand-offs).
struct alignas(mpiv::k_false_sharing) guarded_line {
    std::uint64_t value;
};
guarded_line g_lines[k_cs_lines];
alignas(mpiv::k_false_sharing) int g_last_owner = -1;

inline void critical_work()
{
    for (auto &line : g_lines) {
        line.value += 1;
    }
    benchmark::ClobberMemory();
}

inline void outside_work()
{
    std::uint64_t x = 0;
    for (int i = 0; i < k_outside; ++i) {
        benchmark::DoNotOptimize(x += static_cast<std::uint64_t>(i));
    }
}

template <class L>
L &shared_lock()
{
    static L lock;
    return lock;
}

// Low-priority acquisition where the lock has one, plain acquisition otherwise.
template <class L, class = void>
struct has_low : std::false_type {};
template <class L>
struct has_low<L, std::void_t<decltype(std::declval<L &>().lock_low())>> : std::true_type {};

template <class L>
void lock_low(L &l) MPIV_TS_ACQUIRE(l)
{
    if constexpr (has_low<L>::value) {
        l.lock_low();
    } else {
        l.lock();
    }
}

template <class L>
void unlock_low(L &l) MPIV_TS_RELEASE(l)
{
    if constexpr (has_low<L>::value) {
        l.unlock_low();
    } else {
        l.unlock();
    }
}

template <class L>
void bm_lock(benchmark::State &state)
{
    L &lock = shared_lock<L>();
    const int me = state.thread_index();
    std::int64_t handoffs = 0;
    for (auto _ : state) {
        lock.lock();
        critical_work();
        handoffs += g_last_owner != me ? 1 : 0;
        g_last_owner = me;
        lock.unlock();
    }
    state.SetItemsProcessed(state.iterations());
    if (state.threads() > 1) {
        state.counters["handoff"] =
            benchmark::Counter(static_cast<double>(handoffs),
                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    }
}

// Pollers run on their own threads for the duration of one regime benchmark call.
struct alignas(mpiv::k_false_sharing) poller_slot {
    std::atomic<std::uint64_t> count{0};
};

template <class L, bool poller_works>
void bm_regime(benchmark::State &state)
{
    L &lock = shared_lock<L>();
    const auto n_pollers = static_cast<std::size_t>(state.range(0) - 1);
    std::atomic<bool> stop{false};
    std::vector<poller_slot> slots(n_pollers);
    std::vector<std::thread> pollers;
    pollers.reserve(n_pollers);
    for (std::size_t p = 0; p < n_pollers; ++p) {
        pollers.emplace_back([&, p] {
            std::uint64_t done = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                lock_low(lock);
                if (poller_works) {
                    critical_work();
                } else {
                    benchmark::DoNotOptimize(g_lines[0].value); // finds nothing to do
                }
                unlock_low(lock);
                slots[p].count.store(++done, std::memory_order_relaxed);
            }
        });
    }
    auto total_polls = [&] {
        std::uint64_t sum = 0;
        for (const auto &s : slots) {
            sum += s.count.load(std::memory_order_relaxed);
        }
        return sum;
    };

    const std::uint64_t polls_before = total_polls();
    for (auto _ : state) {
        lock.lock();
        critical_work();
        lock.unlock();
        outside_work();
    }
    const std::uint64_t polls = total_polls() - polls_before;
    stop.store(true, std::memory_order_relaxed);
    for (auto &t : pollers) {
        t.join();
    }
    if (poller_works) {
        state.SetItemsProcessed(state.iterations() + static_cast<std::int64_t>(polls));
        state.counters["main"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                    benchmark::Counter::kIsRate);
    } else {
        state.SetItemsProcessed(state.iterations());
        state.counters["polls"] =
            benchmark::Counter(static_cast<double>(polls), benchmark::Counter::kIsRate);
    }
}

double min_of(const std::vector<double> &v)
{
    return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double> &v)
{
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// With --benchmark_repetitions, report min and max next to mean, median and stddev.
benchmark::internal::Benchmark *with_range(benchmark::internal::Benchmark *b)
{
    return b->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);
}

template <class L>
void register_kind(const std::string &kind)
{
    with_range(benchmark::RegisterBenchmark(("BM_lock_" + kind).c_str(), bm_lock<L>))
        ->ThreadRange(1, 16)
        ->UseRealTime();
    with_range(benchmark::RegisterBenchmark(("BM_latency_regime_" + kind).c_str(),
                                            bm_regime<L, false>))
        ->ArgName("threads")
        ->RangeMultiplier(2)
        ->Range(2, 16)
        ->UseRealTime();
    with_range(benchmark::RegisterBenchmark(("BM_throughput_regime_" + kind).c_str(),
                                            bm_regime<L, true>))
        ->ArgName("threads")
        ->RangeMultiplier(2)
        ->Range(2, 16)
        ->UseRealTime();
}

} // namespace

int main(int argc, char **argv)
{
    register_kind<mutex_lock>("mutex");
    register_kind<tas_lock>("tas");
    register_kind<ticket_lock>("ticket");
    register_kind<mcs_lock>("mcs");
    register_kind<hmcs_lock>("hmcs");
    register_kind<p_mcs_mcs_lock>("p_mcs_mcs");
    register_kind<p_hmcs_mcs_lock>("p_hmcs_mcs");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
