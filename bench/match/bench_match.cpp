// Matching-engine microbenchmarks with their references in the same binary:
//   BM_match_insert_match          post a receive, then deliver the message of the same key
//                                  (full MPI rules: ordered, wildcards allowed), 1..8 threads
//   BM_match_insert_match_asserted the same on a communicator with all three MPI-4
//                                  assertions (the pure MPIv path)
//   BM_match_any_tag               the same with receives from the thread's source and any
//                                  tag (a server's MPI_ANY_TAG receive)
//   BM_unordered_map_mutex         the same post + deliver on std::unordered_map of FIFOs
//                                  under one std::mutex
//   BM_match_posted/K              K receives posted (distinct tags); deliver the message
//                                  of a random one and post it again
//   BM_list_match/K                the same on an ob1-style list of posted receives,
//                                  searched linearly
// Thread t uses source t, so threads share the table and the communicator but not keys.
// Times are wall-clock per iteration and thread; items_per_second sums the threads.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include "matching/comm.hpp"

namespace {

using mpiv::status;
using mpiv::match::comm;
using mpiv::match::envelope;
using mpiv::match::match_list;
using mpiv::match::msg_node;
using mpiv::match::recv_node;
using mpiv::match::table;

constexpr std::int32_t k_ranks = 8;              // communicator size (>= the largest thread count)
constexpr std::int32_t k_tags = 64;              // keys cycled through by each thread
constexpr std::size_t k_keys_sequence = 1 << 16; // random key order of the K benchmarks

struct engine {
    engine(std::size_t buckets, unsigned assertions)
    {
        ok = table::create(buckets, table_) == status::ok &&
             comm::create(*table_, {1, k_ranks, assertions}, comm_) == status::ok;
    }
    std::unique_ptr<table> table_;
    std::unique_ptr<comm> comm_;
    bool ok = false;
};

constexpr unsigned k_all_assertions = mpiv::match::k_assert_no_any_source |
                                      mpiv::match::k_assert_no_any_tag |
                                      mpiv::match::k_assert_allow_overtaking;

// Shared by the threads of one run; built by Setup before the threads start and destroyed
// by Teardown after they end (the timing loop is the first point where they synchronize).
std::unique_ptr<engine> g_engine;

void setup_ordered(const benchmark::State &)
{
    g_engine = std::make_unique<engine>(1024, 0);
}
void setup_asserted(const benchmark::State &)
{
    g_engine = std::make_unique<engine>(1024, k_all_assertions);
}
void teardown_engine(const benchmark::State &)
{
    g_engine.reset();
}

void insert_match(benchmark::State &state, bool any_tag)
{
    if (!g_engine->ok) {
        state.SkipWithError("engine creation failed");
        return;
    }
    comm &c = *g_engine->comm_;
    // As the sender would send them: unordered while the communicator allows overtaking.
    const bool ordered = (c.assertions() & mpiv::match::k_assert_allow_overtaking) == 0;
    const auto source = static_cast<std::int32_t>(state.thread_index());
    recv_node r;
    msg_node m;
    std::uint32_t seq = 0;
    std::int32_t tag = 0;
    for (auto _ : state) {
        match_list matched;
        const status posted = c.post(r, source, any_tag ? mpiv::match::k_any_tag : tag);
        const status arrived = c.arrive(m, envelope{source, tag, seq, 8, ordered}, matched);
        if (posted != status::inprogress || arrived != status::ok || matched.pop() != &m) {
            state.SkipWithError("unexpected matching result");
            break;
        }
        ++seq;
        tag = (tag + 1) % k_tags;
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_match_insert_match(benchmark::State &state)
{
    insert_match(state, false);
}
BENCHMARK(BM_match_insert_match)
    ->Setup(setup_ordered)
    ->Teardown(teardown_engine)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();

// The same function on the asserted communicator.
void BM_match_insert_match_asserted(benchmark::State &state)
{
    BM_match_insert_match(state);
}
BENCHMARK(BM_match_insert_match_asserted)
    ->Setup(setup_asserted)
    ->Teardown(teardown_engine)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();

// Receives from the thread's source with any tag, on the ordered communicator.
void BM_match_any_tag(benchmark::State &state)
{
    insert_match(state, true);
}
BENCHMARK(BM_match_any_tag)
    ->Setup(setup_ordered)
    ->Teardown(teardown_engine)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// A conventional concurrent matcher: FIFOs per key in a std::unordered_map, one mutex.
struct map_matcher {
    struct fifo {
        std::deque<void *> items;
        bool holds_receives = false;
    };
    // Returns the partner taken from the other side, or nullptr when @p item was queued.
    void *insert_or_match(std::uint64_t key, void *item, bool is_receive)
    {
        std::lock_guard<std::mutex> g(mutex);
        fifo &f = map[key];
        if (!f.items.empty() && f.holds_receives != is_receive) {
            void *partner = f.items.front();
            f.items.pop_front();
            return partner;
        }
        f.holds_receives = is_receive;
        f.items.push_back(item);
        return nullptr;
    }
    std::mutex mutex;
    std::unordered_map<std::uint64_t, fifo> map;
};

std::unique_ptr<map_matcher> g_map;

void setup_map(const benchmark::State &)
{
    g_map = std::make_unique<map_matcher>();
}
void teardown_map(const benchmark::State &)
{
    g_map.reset();
}

void BM_unordered_map_mutex(benchmark::State &state)
{
    const auto source = static_cast<std::uint64_t>(state.thread_index());
    int r = 0, m = 0;
    std::uint64_t tag = 0;
    for (auto _ : state) {
        const std::uint64_t key = source << 32 | tag;
        void *queued = g_map->insert_or_match(key, &r, true);
        void *partner = g_map->insert_or_match(key, &m, false);
        if (queued != nullptr || partner != &r) {
            state.SkipWithError("unexpected matching result");
            break;
        }
        tag = (tag + 1) % k_tags;
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_unordered_map_mutex)
    ->Setup(setup_map)
    ->Teardown(teardown_map)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();

// The same random sequence of keys (tags 0..K-1) for both K benchmarks.
std::vector<std::int32_t> key_sequence(std::int32_t k)
{
    std::mt19937 rng(42);
    std::vector<std::int32_t> seq(k_keys_sequence);
    for (std::int32_t &x : seq) {
        x = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(k));
    }
    return seq;
}

void BM_match_posted(benchmark::State &state)
{
    const auto k = static_cast<std::int32_t>(state.range(0));
    engine e(2 * static_cast<std::size_t>(k), 0);
    if (!e.ok) {
        state.SkipWithError("engine creation failed");
        return;
    }
    std::vector<recv_node> recvs(static_cast<std::size_t>(k));
    for (std::int32_t tag = 0; tag < k; ++tag) {
        if (e.comm_->post(recvs[static_cast<std::size_t>(tag)], 0, tag) != status::inprogress) {
            state.SkipWithError("post failed");
            return;
        }
    }
    const std::vector<std::int32_t> keys = key_sequence(k);
    msg_node m;
    std::uint32_t seq = 0;
    std::size_t i = 0;
    for (auto _ : state) {
        const std::int32_t tag = keys[i++ % k_keys_sequence];
        match_list matched;
        const status arrived = e.comm_->arrive(m, envelope{0, tag, seq++, 8}, matched);
        msg_node *got = matched.pop();
        if (arrived != status::ok || got != &m ||
            e.comm_->post(recvs[static_cast<std::size_t>(tag)], 0, tag) != status::inprogress) {
            state.SkipWithError("unexpected matching result");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_match_posted)->Arg(1)->Arg(100)->Arg(10000);

// ob1's posted-receive queue: a doubly linked list with a sentinel, appended at the tail
// on post, searched from the head on arrival (mca_pml_ob1_recv_frag_match_proc).
struct list_recv {
    list_recv *prev = nullptr;
    list_recv *next = nullptr;
    std::int32_t source = 0;
    std::int32_t tag = 0;
};

struct recv_list {
    recv_list() { head.prev = head.next = &head; }
    void append(list_recv &r)
    {
        r.prev = head.prev;
        r.next = &head;
        head.prev->next = &r;
        head.prev = &r;
    }
    list_recv *match(std::int32_t source, std::int32_t tag)
    {
        for (list_recv *r = head.next; r != &head; r = r->next) {
            if (r->tag == tag && r->source == source) {
                r->prev->next = r->next;
                r->next->prev = r->prev;
                return r;
            }
        }
        return nullptr;
    }
    list_recv head;
};

void BM_list_match(benchmark::State &state)
{
    const auto k = static_cast<std::int32_t>(state.range(0));
    std::vector<list_recv> recvs(static_cast<std::size_t>(k));
    recv_list list;
    for (std::int32_t tag = 0; tag < k; ++tag) {
        recvs[static_cast<std::size_t>(tag)].tag = tag;
        list.append(recvs[static_cast<std::size_t>(tag)]);
    }
    const std::vector<std::int32_t> keys = key_sequence(k);
    std::size_t i = 0;
    for (auto _ : state) {
        const std::int32_t tag = keys[i++ % k_keys_sequence];
        list_recv *r = list.match(0, tag);
        if (r == nullptr) {
            state.SkipWithError("unexpected matching result");
            break;
        }
        list.append(*r);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_list_match)->Arg(1)->Arg(100)->Arg(10000);

} // namespace

BENCHMARK_MAIN();
