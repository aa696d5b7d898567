// engine: ULTs of one worker that yield inside their drains of inbound queues, or their
// polls of UCX workers (a lock's back-off does, or a park), interleave there. Each must
// still know which locks it holds: a completion that posts on a handle of the queue being
// drained does not wait for its own lock, and nobody skips a lock another drainer holds
// (a queue's consumer lock; a UCX worker's, for a send). Endpoints handles on queues 1
// and 2 of engine 1, one worker, completions inside the drains (no batching); over shared
// memory and over UCX (TCP on lo). Fixture in engine_fixture.hpp.
#include <deque>

#include "base/backoff.hpp"
#include "test/gtest/endpoints/engine_fixture.hpp"

namespace {

constexpr std::uint16_t k_ep_cid = 23;
constexpr std::int32_t k_ranks = 3;
const std::uint32_t k_peer[k_ranks] = {0, 1, 1}; // rank 0 on engine 0, ranks 1, 2 on 1
const std::uint16_t k_index[k_ranks] = {0, 0, 1};
// Ranks 0 and 1 receive through queue 1, rank 2 through queue 2: rank 1's messages to
// rank 0 go through engine 1's UCX worker 1, the one rank 1's arrivals come through.
const std::uint16_t k_queue[k_ranks] = {1, 1, 2};

// A receive whose completion first runs a hook (engine 1's callback).
struct hooked {
    record rec; // what on_complete() reports after the hook
    std::function<void()> hook;
};

void hooked_complete(void *user, const mpiv_p2p_status_t *s)
{
    auto *h = static_cast<hooked *>(user);
    if (h->hook) {
        h->hook();
    }
    on_complete(&h->rec, s);
}

// Yield the calling ULT until @p pred holds (what a lock's back-off does, unbounded).
template <class Pred> void yield_until(Pred pred)
{
    while (!pred()) {
        mpiv::base::yield_thread();
    }
}

// A ULT running fn() (spawned on the one worker, joined by join()).
struct ult_call {
    std::function<void()> fn;
    std::uint64_t handle = 0;
    static void *run(void *raw)
    {
        static_cast<ult_call *>(raw)->fn();
        return nullptr;
    }
};

class engine_drainers : public engine_test, public ::testing::WithParamInterface<unsigned> {
  protected:
    static void SetUpTestSuite()
    {
        setenv("UCX_TLS", "tcp", 1);
        setenv("UCX_NET_DEVICES", "lo", 1);
    }
    void SetUp() override
    {
        engine_test::SetUp();
        mpiv_p2p_params_t p0 = params_for(0);
        mpiv_p2p_params_t p1 = params_for(1);
        p0.transports = p1.transports = GetParam();
        p1.complete = hooked_complete;
        start(p0, p1);
        // One worker that never batches: each completion runs inside its drain.
        start_runtime(1, -1, std::int64_t{UINT32_MAX});
        ASSERT_EQ(eng(0).comm_create_endpoints(k_ep_cid, k_ranks, k_peer, k_index, k_queue, &h_[0], 1),
                  status::ok);
        ASSERT_EQ(eng(1).comm_create_endpoints(k_ep_cid, k_ranks, k_peer, k_index, k_queue, &h_[1], 2),
                  status::ok);
    }
    void TearDown() override
    {
        for (int r = 0; r < k_ranks; ++r) {
            if (h_[r] != nullptr) {
                EXPECT_EQ(eng(static_cast<int>(k_peer[r])).comm_destroy(h_[r]), status::ok);
            }
        }
        engine_test::TearDown();
    }

    void spawn(ult_call &u)
    {
        ASSERT_EQ(mpiv::sched::runtime::get()->spawn(ult_call::run, &u, 0, false, u.handle), status::ok);
    }
    static void join(ult_call &u)
    {
        EXPECT_EQ(mpiv::sched::runtime::get()->join(u.handle, nullptr), status::ok);
    }

    // Receive at rank @p at (1 or 2) from rank 0 with @p tag into @p v; posted first.
    void post(int at, std::int32_t tag, std::uint64_t &v, hooked &r)
    {
        r.rec.eng = &eng(1);
        mpiv_p2p_status_t st{}; // (an at-once completion's: none here)
        const status rc = eng(1).irecv(*h_[at], 0, tag, &v, sizeof v, &r, ops_.emplace_back(), st);
        EXPECT_EQ(rc, status::inprogress) << "rank " << at << " tag " << tag;
    }
    // Send 8 bytes (@p v) from rank 0 to rank @p to with @p tag.
    void send_to(int to, std::int32_t tag, std::uint64_t v)
    {
        sop s;
        s.rc = eng(0).isend(*h_[0], 1, 0, to, tag, &v, sizeof v, 0, &s.rec, s.op, s.st);
        EXPECT_EQ(s.rc, status::ok) << "an eager send completes at once";
    }
    bool over_ucx() const { return GetParam() == MPIV_P2P_TRANSPORT_UCX; }

    // A message to rank 1 (tag 1), then two ULTs on the one worker drive engine 1 until
    // each has run a completion. The first completion, rank 1's (call its ULT A), sends
    // rank 2's message (tag 2) and yields until the other ULT (B), finding queue 1 taken,
    // is inside the completion of that message in its drain of queue 2; B yields there
    // until A's progress() has returned. So A's drain of queue 1 ends while B is inside
    // its own, and B's ends after A is gone, whichever ULT runs first and however late a
    // message arrives over UCX. @p inside runs in A's completion once B is in its own
    // (still inside A's drain of queue 1).
    void interleave(const std::function<void(int rank)> &inside)
    {
        std::uint64_t got[2] = {0, 0};
        hooked r[2];
        std::atomic<int> entered{0};
        std::atomic<bool> second_in{false};
        std::atomic<bool> first_done{false};
        // The ULTs whose completions ran first and second.
        std::atomic<const void *> first{nullptr};
        std::atomic<const void *> second{nullptr};
        for (int i = 0; i < 2; ++i) {
            const int rank = i + 1;
            r[i].hook = [&, rank] {
                const void *const me = mpiv::sched::worker::current_ult();
                if (entered.fetch_add(1) == 0) {
                    EXPECT_EQ(rank, 1) << "rank 2's message is sent only now";
                    first.store(me);
                    send_to(2, 2, 202);
                    yield_until([&] { return second_in.load(); });
                    inside(rank);
                } else {
                    second.store(me);
                    second_in.store(true);
                    yield_until([&] { return first_done.load(); });
                }
            };
            post(rank, rank, got[i], r[i]);
        }
        send_to(1, 1, 101);
        // Until this ULT's own completion has run; the first one's then lets the other go.
        const auto drive = [&] {
            const void *const me = mpiv::sched::worker::current_ult();
            while (first.load() != me && second.load() != me) {
                eng(1).progress();
            }
            if (first.load() == me) {
                first_done.store(true);
            }
        };
        ult_call a{drive};
        ult_call b{drive};
        spawn(a);
        spawn(b);
        join(a);
        join(b);
        EXPECT_EQ(entered.load(), 2);
        for (int i = 0; i < 2; ++i) {
            EXPECT_EQ(calls_of(r[i].rec), 1) << "rank " << i + 1;
            EXPECT_EQ(got[i], static_cast<std::uint64_t>(101 * (i + 1)));
        }
    }

    ep::comm_state *h_[k_ranks] = {};
    std::deque<ep::recv_op> ops_; // the receives' storage (stable addresses)
};

// After the interleaved drains, a ULT of the same worker that posts on rank 1's handle
// while a pthread's drain of queue 1 holds its lock (inside a completion) waits for it.
// Another ULT counts its turns meanwhile: the post must not finish before the drain ends.
// Over UCX the pthread's poll also holds UCX worker 1, and the ULT first sends from rank 1
// to rank 0 through it: the send must wait in the outbound list, not go out at once.
TEST_P(engine_drainers, a_ult_waits_for_a_lock_another_drainer_holds_after_interleaved_drains)
{
    watchdog dog("interleaved drains, then a post under another drainer's lock");
    interleave([](int) {});

    std::atomic<bool> drainer_in{false};
    std::atomic<bool> posted{false};
    std::atomic<bool> posted_under_lock{true};
    std::atomic<int> turns{0};
    constexpr int k_turns = 2000; // the post's waiter yields; the counter's turns go round
    std::uint64_t held_v = 0;
    hooked held;
    held.hook = [&] {
        drainer_in.store(true);
        while (!posted.load() && turns.load() < k_turns) {
            std::this_thread::yield();
        }
        posted_under_lock.store(posted.load());
    };
    post(1, 3, held_v, held);
    send_to(1, 3, 303);
    std::thread drainer([&] {
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        while (calls_of(held.rec) == 0 && std::chrono::steady_clock::now() < deadline) {
            eng(1).progress();
        }
    });
    while (!drainer_in.load()) {
        std::this_thread::yield();
    }
    std::uint64_t late_v = 0;
    hooked late;
    const std::uint64_t reply = 606;
    sop s;
    ult_call poster{[&] {
        s.rc = eng(1).isend(*h_[1], 0, 1, 0, 6, &reply, sizeof reply, 0, &s.rec, s.op, s.st);
        post(1, 4, late_v, late);
        posted.store(true);
    }};
    ult_call counter{[&] {
        while (!posted.load()) {
            turns.fetch_add(1);
            mpiv::base::yield_thread();
        }
    }};
    spawn(poster);
    spawn(counter);
    join(poster);
    join(counter);
    drainer.join();
    EXPECT_FALSE(posted_under_lock.load())
        << "a ULT posted on rank 1's handle while another thread's drain held queue 1";
    EXPECT_EQ(held_v, 303u);
    if (over_ucx()) {
        EXPECT_EQ(s.rc, status::inprogress)
            << "a ULT sent through UCX worker 1 while another thread's poll held it";
    } else {
        EXPECT_EQ(s.rc, status::ok) << "an eager send through shared memory completes at once";
    }
    send_to(1, 4, 404);
    EXPECT_TRUE(until([&] { return calls_of(late.rec) == 1; }));
    EXPECT_EQ(late_v, 404u);
    std::uint64_t got = 0;
    rop r;
    r.rc = eng(0).irecv(*h_[0], 1, 6, &got, sizeof got, &r.rec, r.op, r.st);
    EXPECT_EQ(finish(r).error, MPIV_OK);
    EXPECT_EQ(got, reply);
    EXPECT_EQ(finish(s).error, MPIV_OK);
}

// A's completion, inside its drain and after B entered a drain of another queue, posts on
// the handle of the queue A drains: A holds that queue's lock and must not wait for it.
// (With a per-thread "draining queue q" mark, B's drain overwrote A's: A waited for its
// own lock for ever.)
TEST_P(engine_drainers, a_completion_posts_on_its_own_queue_while_another_ult_drains)
{
    watchdog dog("a post inside the completion of an interleaved drain");
    std::uint64_t nested_v = 0;
    hooked nested;
    int nested_rank = 0;
    interleave([&](int rank) {
        nested_rank = rank;
        post(rank, 5, nested_v, nested);
    });
    ASSERT_NE(nested_rank, 0);
    send_to(nested_rank, 5, 505);
    EXPECT_TRUE(until([&] { return calls_of(nested.rec) == 1; }));
    EXPECT_EQ(nested_v, 505u);
}

// Stress: ranks 1 and 2 each receive m messages (tags 0 .. m-1) through a chain of
// receives, each posted by the completion of the one before, inside the drain of its
// own queue (or at once, when its message is already there). Every seventh completion
// in a ULT yields its worker three times first; every eleventh leaves the next post to
// whichever driver sees it first, outside any drain (its messages meanwhile arrive
// unexpected, so the post takes the queue's lock and completes at once). Two ULTs of the
// worker and a pthread drive engine 1, so drains of the two queues interleave on the
// worker's thread and race with the pthread's and with those posts. Each receive
// completes once, with its message; nothing hangs.
TEST_P(engine_drainers, stress_completions_that_yield_and_post_on_their_own_queue)
{
    watchdog dog("completions that yield and post on their own queue");
    const int m = static_cast<int>(iterations(2000));
    std::atomic<int> completed{0};
    struct chain {
        int rank = 0;
        std::vector<hooked> h;
        std::vector<std::uint64_t> got;
        std::deque<ep::recv_op> ops;
        std::vector<char> at_once;
        int next = 0; // the next tag to post: by the chain's one poster at a time
        std::atomic<bool> deferred{false}; // the next post is left to a driver
    } chains[2];
    // Post the chain's receives from its next tag on, until one waits for its message.
    std::function<void(chain &)> post_next = [&](chain &c) {
        while (c.next < m) {
            const int tag = c.next++;
            mpiv_p2p_status_t st{};
            const status rc = eng(1).irecv(*h_[c.rank], 0, tag, &c.got[static_cast<std::size_t>(tag)],
                                           sizeof(std::uint64_t), &c.h[static_cast<std::size_t>(tag)],
                                           c.ops[static_cast<std::size_t>(tag)], st);
            if (rc != status::ok) {
                EXPECT_EQ(rc, status::inprogress) << "rank " << c.rank << " tag " << tag;
                return;
            }
            EXPECT_EQ(st.tag, tag);
            c.at_once[static_cast<std::size_t>(tag)] = 1;
            completed.fetch_add(1);
        }
    };
    for (int i = 0; i < 2; ++i) {
        chain &c = chains[i];
        c.rank = i + 1;
        c.h = std::vector<hooked>(static_cast<std::size_t>(m));
        c.got.assign(static_cast<std::size_t>(m), 0);
        c.ops.resize(static_cast<std::size_t>(m));
        c.at_once.assign(static_cast<std::size_t>(m), 0);
        for (int tag = 0; tag < m; ++tag) {
            c.h[static_cast<std::size_t>(tag)].hook = [&, tag, i] {
                if (tag % 7 == 0 && mpiv::sched::worker::current_ult() != nullptr) {
                    for (int k = 0; k < 3; ++k) {
                        mpiv::base::yield_thread();
                    }
                }
                completed.fetch_add(1);
                if (tag % 11 == 10) {
                    // Release: pairs with the acquire exchange in drive(); the chain (no
                    // receive posted) passes to the driver.
                    chains[i].deferred.store(true, std::memory_order_release);
                    return;
                }
                post_next(chains[i]);
            };
        }
    }
    post_next(chains[0]);
    post_next(chains[1]);
    const auto all_done = [&] { return completed.load() == 2 * m; };
    const auto drive = [&] {
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        while (!all_done() && std::chrono::steady_clock::now() < deadline) {
            eng(1).progress();
            for (chain &c : chains) {
                // Acquire: pairs with the release store in the hook.
                if (c.deferred.exchange(false, std::memory_order_acquire)) {
                    post_next(c);
                }
            }
            mpiv::base::yield_thread();
        }
    };
    // The first half of the messages is sent before anyone drives engine 1 (each chain
    // then meets its first receives' messages already there), the rest meanwhile.
    std::deque<sop> sends;
    const auto send_tags = [&](int from, int to_tag) {
        for (int tag = from; tag < to_tag; ++tag) {
            for (int to = 1; to <= 2; ++to) {
                const std::uint64_t v = static_cast<std::uint64_t>(to) * 1000000 + static_cast<std::uint64_t>(tag);
                sop &s = sends.emplace_back();
                s.rc = eng(0).isend(*h_[0], 1, 0, to, tag, &v, sizeof v, 0, &s.rec, s.op, s.st);
                ASSERT_TRUE(s.rc == status::ok || s.rc == status::inprogress) << "tag " << tag;
            }
            eng(0).progress();
        }
    };
    send_tags(0, m / 2);
    ult_call a{drive};
    ult_call b{drive};
    spawn(a);
    spawn(b);
    std::thread pthread_drainer(drive);
    send_tags(m / 2, m);
    for (sop &s : sends) {
        EXPECT_EQ(finish(s).error, MPIV_OK);
    }
    pthread_drainer.join();
    join(a);
    join(b);
    ASSERT_TRUE(all_done()) << completed.load() << " of " << 2 * m << " receives completed";
    for (const chain &c : chains) {
        int late = 0;
        for (int tag = 0; tag < m; ++tag) {
            const auto t = static_cast<std::size_t>(tag);
            const int calls = calls_of(c.h[t].rec);
            EXPECT_EQ(calls + c.at_once[t], 1) << "rank " << c.rank << " tag " << tag;
            if (calls == 1) {
                ++late;
                EXPECT_EQ(c.h[t].rec.st.tag, tag);
                EXPECT_EQ(c.h[t].rec.st.error, MPIV_OK);
            }
            EXPECT_EQ(c.got[t], static_cast<std::uint64_t>(c.rank) * 1000000 + static_cast<std::uint64_t>(tag))
                << "rank " << c.rank << " tag " << tag;
        }
        std::printf("rank %d: %d of %d receives completed by a drain, the others at their post\n",
                    c.rank, late, m);
    }
}

#if MPIV_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(transports, engine_drainers,
                         ::testing::Values(unsigned{MPIV_P2P_TRANSPORT_SHM}, unsigned{MPIV_P2P_TRANSPORT_UCX}),
                         [](const ::testing::TestParamInfo<unsigned> &i) {
                             return std::string(i.param == MPIV_P2P_TRANSPORT_UCX ? "ucx" : "shm");
                         });
#else
INSTANTIATE_TEST_SUITE_P(transports, engine_drainers, ::testing::Values(unsigned{MPIV_P2P_TRANSPORT_SHM}),
                         [](const ::testing::TestParamInfo<unsigned> &) { return std::string("shm"); });
#endif

} // namespace
