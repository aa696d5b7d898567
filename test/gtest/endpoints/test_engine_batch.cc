// engine: the receives one queue drain matches on a worker that prefetches complete together
// after the drain, their lines asked for first (endpoints/engine.hpp, "Completions batched
// after a drain"); elsewhere each completes as it is matched (fixture in engine_fixture.hpp).
#include "base/stats.hpp"
#include "test/gtest/endpoints/engine_fixture.hpp"

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

void logged_prefetch(void *user)
{
    std::lock_guard<std::mutex> g(g_mu);
    g_events.push_back({'p', user});
}

void logged_complete(void *user, const mpiv_p2p_status_t *s)
{
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_events.push_back({'c', user});
    }
    on_complete(user, s);
    if (user == g_nest_at) {
        g_nested = static_cast<record *>(user)->eng->progress();
    }
}

// Allocations through operator new while g_counting is set (any thread: the test's ULT
// runs alone then). Replaces the global operators for this program, but not under
// AddressSanitizer, whose own operators the library's allocations may reach (it then
// reports our delete of them as a mismatch): there the count stays 0 and its test skips.
#if defined(__SANITIZE_ADDRESS__)
#define MPIV_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPIV_TEST_ASAN 1
#endif
#endif
#if defined(MPIV_TEST_ASAN)
constexpr bool k_counts_news = false;
#else
constexpr bool k_counts_news = true;
#endif
std::atomic<bool> g_counting{false};
std::atomic<long> g_news{0};

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
    bool count = false; // count the allocations of the whole part in g_news
};

void *batch_ult(void *raw)
{
    auto *b = static_cast<batch_run *>(raw);
    // Relaxed: the join orders the count before the main thread's read.
    g_counting.store(b->count, std::memory_order_relaxed);
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
    g_counting.store(false, std::memory_order_relaxed);
    return nullptr;
}

class engine_batch : public engine_test {
  protected:
    // Engines whose callbacks log to g_events, one worker whose ULTs prefetch from
    // prefetch_ults live ones on, and n receives matched by one ULT's progress() call.
    // With nest >= 0, the completion of receive nest calls progress() again.
    void run(std::uint32_t prefetch_ults, int n, batch_run &b, int nest = -1)
    {
        mpiv_p2p_params_t p0 = params_for(0);
        mpiv_p2p_params_t p1 = params_for(1);
        p1.complete = logged_complete;
        p1.prefetch = logged_prefetch;
        start(p0, p1);
        start_runtime(1, -1, prefetch_ults);
        mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
        ASSERT_NE(rt, nullptr);
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
        g_nest_at = nest >= 0 ? &b.r[static_cast<std::size_t>(nest)].rec : nullptr;
        g_nested = -1;
        watchdog dog("batched completions");
        std::uint64_t h = 0;
        ASSERT_EQ(rt->spawn(batch_ult, &b, 0, false, h), status::ok);
        ASSERT_EQ(rt->join(h, nullptr), status::ok);
        g_nest_at = nullptr;
        EXPECT_EQ(b.sent_at_once, n) << "an inline eager send completes at once";
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
};

// A worker that prefetches (one live ULT, threshold 1): the eight receives one drain
// matched are all prefetched, in match order, before the first of them completes.
TEST_F(engine_batch, one_drain_completes_its_receives_together_after_prefetching_them)
{
    constexpr int n = 8;
    const std::uint64_t before = mpiv::base::stats::read(counter::batched_completions);
    batch_run b;
    run(1, n, b);
    EXPECT_EQ(b.events, n);
    expect_delivered(b);
    EXPECT_EQ(kinds(), std::string(n, 'p') + std::string(n, 'c'));
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(user_at(static_cast<std::size_t>(i)), &b.r[static_cast<std::size_t>(i)].rec)
            << "prefetch " << i;
        EXPECT_EQ(user_at(static_cast<std::size_t>(n + i)), &b.r[static_cast<std::size_t>(i)].rec)
            << "completion " << i;
    }
    EXPECT_EQ(mpiv::base::stats::read(counter::batched_completions) - before, std::uint64_t{n});
}

// A batch frees a whole drain's records at once; the next drain of that thread takes them
// again: a second batch of arrivals allocates nothing.
TEST_F(engine_batch, a_batch_of_arrivals_reuses_the_records_of_the_last)
{
    if (!k_counts_news) {
        GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
    }
    mpiv_p2p_params_t p0 = params_for(0);
    mpiv_p2p_params_t p1 = params_for(1);
    start(p0, p1);
    start_runtime(1, -1, 1);
    mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
    ASSERT_NE(rt, nullptr);
    watchdog dog("batch allocations");
    batch_run b[2];
    for (int round = 0; round < 2; ++round) {
        batch_run &x = b[round];
        x.e[0] = eng_[0].get();
        x.e[1] = eng_[1].get();
        x.c[0] = comm_[0];
        x.c[1] = comm_[1];
        x.n = k_drain;
        x.r = std::vector<rop>(static_cast<std::size_t>(x.n));
        x.got.assign(static_cast<std::size_t>(x.n), 0);
        x.count = round == 1;
        g_news.store(0, std::memory_order_relaxed); // relaxed: the spawn orders it before the ULT
        std::uint64_t h = 0;
        ASSERT_EQ(rt->spawn(batch_ult, &x, 0, false, h), status::ok);
        ASSERT_EQ(rt->join(h, nullptr), status::ok);
        EXPECT_EQ(x.events, k_drain);
        expect_delivered(x);
    }
    // Relaxed: the join ordered the ULT's counts before this load.
    EXPECT_EQ(g_news.load(std::memory_order_relaxed), 0) << "allocations in the second batch";
}

// Below the worker's threshold (one live ULT, threshold 2) each receive completes as its
// message is matched, with no prefetch.
TEST_F(engine_batch, below_the_prefetch_threshold_each_receive_completes_at_its_match)
{
    constexpr int n = 8;
    const std::uint64_t before = mpiv::base::stats::read(counter::batched_completions);
    batch_run b;
    run(2, n, b);
    EXPECT_EQ(b.events, n);
    expect_delivered(b);
    EXPECT_EQ(kinds(), std::string(n, 'c'));
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(user_at(static_cast<std::size_t>(i)), &b.r[static_cast<std::size_t>(i)].rec);
    }
    EXPECT_EQ(mpiv::base::stats::read(counter::batched_completions), before);
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
    run(1, n, b, 0);
    EXPECT_EQ(b.events, k_drain) << "the outer call drains one batch of its queue";
    EXPECT_EQ(g_nested, extra) << "the nested call drains the rest";
    expect_delivered(b);
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

#if !defined(MPIV_TEST_ASAN)
void *operator new(std::size_t n)
{
    // Relaxed: the count is read after the join (see batch_ult).
    if (g_counting.load(std::memory_order_relaxed)) {
        g_news.fetch_add(1, std::memory_order_relaxed);
    }
    if (void *p = std::malloc(n != 0 ? n : 1)) {
        return p;
    }
    throw std::bad_alloc();
}
void *operator new(std::size_t n, const std::nothrow_t &) noexcept
{
    // Relaxed: as above.
    if (g_counting.load(std::memory_order_relaxed)) {
        g_news.fetch_add(1, std::memory_order_relaxed);
    }
    return std::malloc(n != 0 ? n : 1);
}
void *operator new[](std::size_t n) { return operator new(n); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
#endif
