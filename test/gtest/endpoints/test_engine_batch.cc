// engine: the receives one queue drain matches on a worker that prefetches complete together
// after the drain, their lines asked for first (endpoints/engine.hpp, "Completions batched
// after a drain"); elsewhere each completes as it is matched (fixture in engine_fixture.hpp).
#include <limits>

#include "base/stats.hpp"
#include "test/gtest/endpoints/engine_fixture.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MPIV_TEST_SANITIZER_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MPIV_TEST_SANITIZER_HEAP 1
#endif
#endif
#if defined(MPIV_TEST_SANITIZER_HEAP)
// Both sanitizers' runtimes have it (sanitizer/allocator_interface.h, which GCC 12 does not
// install).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

namespace {

using mpiv::base::stats::counter;

// engine_recv.cpp's k_drain_batch: the messages one drain of a queue takes.
constexpr int k_drain = 64;

// What the engine's callbacks saw, in order: a prefetch ('p') or a completion ('c') of the
// operation whose record is `user`. Only the test's one ULT calls them (engine 1 has no
// other caller), but the main thread reads them after the join: under a mutex all the same.
struct event {
    char kind;
    const void *user;
};
std::mutex g_mu;
std::vector<event> g_events;
// The completion of this record calls progress() on engine 1 again (nested); what that
// call returned.
const void *g_nest_at = nullptr;
int g_nested = -1;
// Heap bytes in use (a sanitizer's allocator keeps its own count).
long heap_in_use()
{
#if defined(MPIV_TEST_SANITIZER_HEAP)
    return static_cast<long>(__sanitizer_get_current_allocated_bytes());
#else
    return static_cast<long>(mallinfo2().uordblks);
#endif
}
// With g_heap_at set, the next completion records how much the heap grew since then
// (the worker's thread only: set by the ULT, read after the join).
constexpr long k_no_sample = std::numeric_limits<long>::min();
long g_heap_at = -1;
long g_heap_growth = k_no_sample;

void logged_prefetch(void *user)
{
    std::lock_guard<std::mutex> g(g_mu);
    g_events.push_back({'p', user});
}

void logged_complete(void *user, const mpiv_p2p_status_t *s)
{
    if (g_heap_at >= 0) {
        g_heap_growth = heap_in_use() - g_heap_at;
        g_heap_at = -1;
    }
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_events.push_back({'c', user});
    }
    on_complete(user, s);
    if (user == g_nest_at) {
        g_nested = static_cast<record *>(user)->eng->progress();
    }
}

// One ULT's part: post n receives on engine 1 (tag i, from rank 0), send the n messages
// from engine 0 (8 bytes: i * 1000 + 7), then drive engine 1 once.
struct batch_run {
    ep::engine *e[2];
    ep::comm_state *c[2];
    int n = 0;
    std::vector<rop> r;
    std::vector<std::uint64_t> got;
    int sent_at_once = 0;
    int events = -1;
    bool heap = false; // the first completion records the heap's growth since the start
};

void *batch_ult(void *raw)
{
    auto *b = static_cast<batch_run *>(raw);
    g_heap_at = b->heap ? heap_in_use() : -1;
    for (int i = 0; i < b->n; ++i) {
        rop &r = b->r[static_cast<std::size_t>(i)];
        r.rec.eng = b->e[1];
        r.rc = b->e[1]->irecv(*b->c[1], 0, i, &b->got[static_cast<std::size_t>(i)],
                              sizeof(std::uint64_t), &r.rec, r.op, r.st);
    }
    for (int i = 0; i < b->n; ++i) {
        sop s;
        const std::uint64_t v = static_cast<std::uint64_t>(i) * 1000 + 7;
        s.rc = b->e[0]->isend(*b->c[0], 1, 0, 1, i, &v, sizeof v, 0, &s.rec, s.op, s.st);
        b->sent_at_once += s.rc == status::ok ? 1 : 0;
    }
    b->events = b->e[1]->progress();
    return nullptr;
}

class engine_batch : public engine_test {
  protected:
    // Engines whose callbacks log to g_events and one worker whose ULTs prefetch from
    // prefetch_ults live ones on.
    void setup(std::uint32_t prefetch_ults)
    {
        mpiv_p2p_params_t p0 = params_for(0);
        mpiv_p2p_params_t p1 = params_for(1);
        p1.complete = logged_complete;
        p1.prefetch = logged_prefetch;
        start(p0, p1);
        start_runtime(1, -1, prefetch_ults);
        ASSERT_NE(mpiv::sched::runtime::get(), nullptr);
        std::lock_guard<std::mutex> g(g_mu);
        g_events.reserve(4 * k_drain); // no allocation while a round runs
    }
    // n receives matched by one ULT's progress() call, each completed once with its
    // message. With nest >= 0, the completion of receive nest calls progress() again.
    void round(int n, batch_run &b, int nest = -1, bool heap = false)
    {
        {
            std::lock_guard<std::mutex> g(g_mu);
            g_events.clear();
        }
        b.e[0] = eng_[0].get();
        b.e[1] = eng_[1].get();
        b.c[0] = comm_[0];
        b.c[1] = comm_[1];
        b.n = n;
        b.r = std::vector<rop>(static_cast<std::size_t>(n));
        b.got.assign(static_cast<std::size_t>(n), 0);
        b.heap = heap;
        g_heap_growth = k_no_sample;
        g_nest_at = nest >= 0 ? &b.r[static_cast<std::size_t>(nest)].rec : nullptr;
        g_nested = -1;
        watchdog dog("batched completions");
        std::uint64_t h = 0;
        ASSERT_EQ(mpiv::sched::runtime::get()->spawn(batch_ult, &b, 0, false, h), status::ok);
        ASSERT_EQ(mpiv::sched::runtime::get()->join(h, nullptr), status::ok);
        g_nest_at = nullptr;
        EXPECT_EQ(b.sent_at_once, n) << "an inline eager send completes at once";
        expect_delivered(b);
    }

    // Every receive completed once, with its message.
    static void expect_delivered(const batch_run &b)
    {
        for (int i = 0; i < b.n; ++i) {
            const rop &r = b.r[static_cast<std::size_t>(i)];
            ASSERT_EQ(r.rc, status::inprogress) << "receive " << i << " was posted first";
            EXPECT_EQ(calls_of(r.rec), 1) << "receive " << i;
            EXPECT_EQ(r.rec.st.error, MPIV_OK) << "receive " << i;
            EXPECT_EQ(r.rec.st.source, 0);
            EXPECT_EQ(r.rec.st.tag, i);
            EXPECT_EQ(r.rec.st.bytes, sizeof(std::uint64_t));
            EXPECT_EQ(b.got[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i) * 1000 + 7);
        }
    }

    static std::string kinds()
    {
        std::lock_guard<std::mutex> g(g_mu);
        std::string s;
        for (const event &e : g_events) {
            s += e.kind;
        }
        return s;
    }
    static const void *user_at(std::size_t i)
    {
        std::lock_guard<std::mutex> g(g_mu);
        return i < g_events.size() ? g_events[i].user : nullptr;
    }

    // Eight receives matched by one drain on a worker with one live ULT and the prefetch
    // threshold @p prefetch_ults: the callbacks' events read @p expected ('p' prefetch,
    // 'c' completion), event k naming receive k mod 8, and @p batched completions count.
    void eight_in_one_drain(std::uint32_t prefetch_ults, const std::string &expected,
                            std::uint64_t batched)
    {
        constexpr int n = 8;
        const std::uint64_t before = mpiv::base::stats::read(counter::batched_completions);
        batch_run b;
        setup(prefetch_ults);
        round(n, b);
        EXPECT_EQ(b.events, n);
        EXPECT_EQ(kinds(), expected);
        for (std::size_t k = 0; k < expected.size(); ++k) {
            EXPECT_EQ(user_at(k), &b.r[k % n].rec) << "event " << k;
        }
        EXPECT_EQ(mpiv::base::stats::read(counter::batched_completions) - before, batched);
    }
};

// A worker that prefetches (threshold 1): the eight receives one drain matched are all
// prefetched, in match order, before the first of them completes.
TEST_F(engine_batch, one_drain_completes_its_receives_together_after_prefetching_them)
{
    eight_in_one_drain(1, std::string(8, 'p') + std::string(8, 'c'), 8);
}

// Below the worker's threshold (threshold 2) each receive completes as its message is
// matched, with no prefetch.
TEST_F(engine_batch, below_the_prefetch_threshold_each_receive_completes_at_its_match)
{
    eight_in_one_drain(2, std::string(8, 'c'), 0);
}

// A batch frees a whole drain's records at once; the next drain of that thread takes them
// again: when the second batch's first receive completes, its 64 records came from the
// first batch's, and the heap has not grown by them.
TEST_F(engine_batch, a_batch_of_arrivals_reuses_the_records_of_the_last)
{
    batch_run b[2];
    setup(1);
    round(k_drain, b[0]);
    round(k_drain, b[1], -1, true);
    EXPECT_EQ(b[1].events, k_drain);
    ASSERT_NE(g_heap_growth, k_no_sample) << "no completion sampled the heap";
    EXPECT_LT(g_heap_growth, static_cast<long>(8 * sizeof(ep::inmsg)))
        << "the second batch allocated its arrival records";
}

// More messages than one drain takes: the first completion of the batch calls progress()
// again, which drains the rest into a batch of its own and completes it; then the outer
// batch goes on. Every receive completes once, with its own message.
TEST_F(engine_batch, a_completion_that_drives_progress_completes_a_nested_batch)
{
    constexpr int extra = 8;
    constexpr int n = k_drain + extra;
    const std::uint64_t before = mpiv::base::stats::read(counter::batched_completions);
    batch_run b;
    setup(1);
    round(n, b, 0);
    EXPECT_EQ(b.events, k_drain) << "the outer call drains one batch of its queue";
    EXPECT_EQ(g_nested, extra) << "the nested call drains the rest";
    const std::string expected = std::string(k_drain, 'p') + "c" + std::string(extra, 'p') +
                                 std::string(extra, 'c') + std::string(k_drain - 1, 'c');
    EXPECT_EQ(kinds(), expected);
    // The nested batch's receives (k_drain ..) complete before the outer batch's second.
    for (int i = 0; i < extra; ++i) {
        EXPECT_EQ(user_at(static_cast<std::size_t>(k_drain + 1 + extra + i)),
                  &b.r[static_cast<std::size_t>(k_drain + i)].rec);
    }
    EXPECT_EQ(user_at(static_cast<std::size_t>(k_drain + 1 + 2 * extra)), &b.r[1].rec);
    EXPECT_EQ(mpiv::base::stats::read(counter::batched_completions) - before, std::uint64_t{n});
}

} // namespace

