// Packet-pool microbenchmarks with their references in the same binary, at 1..4 threads:
//   BM_pool_get_put            get + put hitting the worker's private deque
//   BM_pool_steal              get that misses privately and shared, steals, then puts
//                              back into the victim
//   BM_lockfree_stack_get_put  the same get + put on the shared lock-free stack alone
//                              (packet_region: one head for all threads, seed 000's
//                              centralized pool)
//   BM_malloc_free             malloc + free of a packet-sized buffer
// Every iteration writes one word into the packet it got, as a sender would. Thread t of
// the pool benchmarks acts as worker t. Times are wall-clock per iteration and thread.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "pool/packet_pool.hpp"

namespace {

using mpiv::status;
using mpiv::pool::packet_pool;
using mpiv::pool::packet_region;
using mpiv::pool::pool_params;

constexpr std::uint32_t k_packet_size = 8192;   // header + payload, as LCI's default
constexpr std::uint32_t k_per_worker = 64;      // private slots per worker
constexpr std::size_t k_page = 4096;

struct region_memory {
    explicit region_memory(std::size_t bytes)
        : size((bytes + k_page - 1) / k_page * k_page), data(std::aligned_alloc(k_page, size))
    {
    }
    ~region_memory() { std::free(data); }
    region_memory(const region_memory &) = delete;
    region_memory &operator=(const region_memory &) = delete;
    std::size_t size;
    void *data;
};

struct pool_fixture {
    explicit pool_fixture(const pool_params &p) : memory(packet_pool<>::region_bytes(p))
    {
        // On failure (logged) the pool stays uninitialized and the loop reports it.
        static_cast<void>(pool.init(p, memory.data, memory.size));
    }
    region_memory memory;
    packet_pool<> pool;
};

// Shared by the threads of one benchmark run: thread 0 builds it before the timing loop
// and destroys it after; the library synchronizes all threads as they enter and leave the
// loop, so other threads may touch it only inside the loop. A failed setup shows up as a
// failed get (an uninitialized pool or region refuses every call).
std::unique_ptr<pool_fixture> g_pool;
std::unique_ptr<region_memory> g_region_memory;
std::unique_ptr<packet_region<>> g_region;

void touch(void *packet, std::uint64_t value)
{
    *static_cast<std::uint64_t *>(packet) = value;
    benchmark::DoNotOptimize(packet);
    benchmark::ClobberMemory();
}

void BM_pool_get_put(benchmark::State &state)
{
    const auto threads = static_cast<std::uint32_t>(state.threads());
    if (state.thread_index() == 0) {
        pool_params p;
        p.packet_size = k_packet_size;
        p.workers = threads;
        p.private_capacity = k_per_worker;
        p.private_initial = k_per_worker / 2;
        p.packet_count = threads * k_per_worker;
        g_pool = std::make_unique<pool_fixture>(p);
    }
    const auto worker = static_cast<std::uint32_t>(state.thread_index());
    std::uint64_t n = 0;
    for (auto _ : state) {
        void *packet = nullptr;
        if (g_pool->pool.get(worker, packet) != status::ok) {
            state.SkipWithError("get failed");
            break;
        }
        touch(packet, ++n);
        if (g_pool->pool.put(worker, packet) != status::ok) {
            state.SkipWithError("put failed");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
        g_pool.reset();
    }
}

// Threads own empty deques; every packet sits in one extra "victim" worker's deque, so each
// get misses its deque and the shared stack, steals the victim's bottom packet, and the put
// returns it to the victim's top.
void BM_pool_steal(benchmark::State &state)
{
    const auto threads = static_cast<std::uint32_t>(state.threads());
    const std::uint32_t victim = threads;
    if (state.thread_index() == 0) {
        pool_params p;
        p.packet_size = k_packet_size;
        p.workers = threads + 1;
        p.packet_count = k_per_worker;
        p.private_capacity = k_per_worker;
        p.private_initial = 0;
        g_pool = std::make_unique<pool_fixture>(p);
        void *packet = nullptr;
        while (g_pool->pool.region().get(packet) == status::ok &&
               g_pool->pool.put(victim, packet) == status::ok) {
        }
    }
    const auto worker = static_cast<std::uint32_t>(state.thread_index());
    std::uint64_t n = 0;
    for (auto _ : state) {
        void *packet = nullptr;
        if (g_pool->pool.get(worker, packet) != status::ok) {
            state.SkipWithError("get failed");
            break;
        }
        touch(packet, ++n);
        if (g_pool->pool.put(victim, packet) != status::ok) {
            state.SkipWithError("put failed");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
        g_pool.reset();
    }
}

void BM_lockfree_stack_get_put(benchmark::State &state)
{
    if (state.thread_index() == 0) {
        const std::uint32_t count = static_cast<std::uint32_t>(state.threads()) * k_per_worker;
        g_region_memory =
            std::make_unique<region_memory>(packet_region<>::bytes_for(k_packet_size, count));
        g_region = std::make_unique<packet_region<>>();
        // On failure (logged) the region stays unformatted and the loop reports it.
        static_cast<void>(g_region->format(g_region_memory->data, g_region_memory->size,
                                           k_packet_size, count, 0));
    }
    std::uint64_t n = 0;
    for (auto _ : state) {
        void *packet = nullptr;
        if (g_region->get(packet) != status::ok) {
            state.SkipWithError("get failed");
            break;
        }
        touch(packet, ++n);
        if (g_region->put(packet) != status::ok) {
            state.SkipWithError("put failed");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
        g_region.reset();
        g_region_memory.reset();
    }
}

void BM_malloc_free(benchmark::State &state)
{
    std::uint64_t n = 0;
    for (auto _ : state) {
        void *packet = std::malloc(k_packet_size);
        if (packet == nullptr) {
            state.SkipWithError("malloc failed");
            break;
        }
        touch(packet, ++n);
        std::free(packet);
    }
    state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_pool_get_put)->ThreadRange(1, 4)->UseRealTime();
BENCHMARK(BM_pool_steal)->ThreadRange(1, 4)->UseRealTime();
BENCHMARK(BM_lockfree_stack_get_put)->ThreadRange(1, 4)->UseRealTime();
BENCHMARK(BM_malloc_free)->ThreadRange(1, 4)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
