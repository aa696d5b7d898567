// engine: endpoints communicators (mpiv_p2p_comm_create_endpoints; fixture in
// engine_fixture.hpp). Engine 0 owns ranks 0 and 1, engine 1 ranks 2, 3 and 4: every pair
// exchanges every protocol's sizes (self and same-process pairs included); a handle
// matches only its own rank's messages (wildcards and probes too) in each sender's order;
// arrivals before the handles exist are routed; bad maps are refused; handles are
// destroyed in any order. Both copy modes (CMA, and two copies through shared memory).
#include "test/gtest/endpoints/engine_fixture.hpp"

namespace mpiv::ep {
// White-box access: the endpoint the calling thread is bound to (engine::my_endpoint()).
struct engine_test_access {
    static std::uint32_t endpoint(engine &e) { return e.my_endpoint(); }
};
} // namespace mpiv::ep

namespace {

std::uint32_t endpoint_of(ep::engine &e) { return ep::engine_test_access::endpoint(e); }

constexpr std::uint16_t k_ep_cid = 21;
constexpr std::int32_t k_ranks = 5;
const std::uint32_t k_peer[k_ranks] = {0, 0, 1, 1, 1};
const std::uint16_t k_index[k_ranks] = {0, 1, 0, 1, 2};

class endpoints_test : public engine_test,
                       public ::testing::WithParamInterface<mpiv_p2p_single_copy_t> {
  protected:
    void SetUp() override
    {
        engine_test::SetUp();
        single_copy_ = GetParam();
        start();
    }
    void TearDown() override
    {
        for (auto &h : handles_) {
            if (h != nullptr) {
                EXPECT_EQ(eng(owner(static_cast<int>(&h - handles_))).comm_destroy(h), status::ok);
                h = nullptr;
            }
        }
        engine_test::TearDown();
    }
    static int owner(int rank) { return static_cast<int>(k_peer[rank]); }
    // Create the handles on engine @p e (ranks of e in handles_[rank]), with the rank ->
    // queue map @p queues (null: the default).
    void create_on(int e, const std::uint16_t *queues = nullptr)
    {
        ep::comm_state *h[3] = {};
        ASSERT_EQ(eng(e).comm_create_endpoints(k_ep_cid, k_ranks, k_peer, k_index, queues, h, 3),
                  status::ok);
        int k = 0;
        for (int r = 0; r < k_ranks; ++r) {
            if (owner(r) == e) {
                handles_[r] = h[k++];
            }
        }
    }
    void create() { create_on(0); create_on(1); }
    void send_from(int from, int to, std::int32_t tag, const void *buf, std::size_t n, sop &s,
                   unsigned flags = 0)
    {
        s.rc = eng(owner(from)).isend(*handles_[from], k_peer[to], from, to, tag, buf, n, flags,
                                      &s.rec, s.op, s.st);
    }
    void recv_at(int at, std::int32_t source, std::int32_t tag, void *buf, std::size_t cap, rop &r)
    {
        r.rc = eng(owner(at)).irecv(*handles_[at], source, tag, buf, cap, &r.rec, r.op, r.st);
    }
    ep::comm_state *handles_[k_ranks] = {};
};

TEST_P(endpoints_test, every_pair_exchanges_every_protocol)
{
    create();
    const std::size_t sizes[] = {0, 8, 400, 2000, k_limit + 1, 3 * mpiv::shm::k_copy_piece + 5};
    std::uint32_t seed = 1000;
    for (int from = 0; from < k_ranks; ++from) {
        for (int to = 0; to < k_ranks; ++to) {
            for (const std::size_t n : sizes) {
                for (const bool posted_first : {true, false}) {
                    SCOPED_TRACE(::testing::Message() << from << "->" << to << " bytes " << n
                                                      << (posted_first ? " posted" : " unexpected"));
                    ++seed;
                    const std::vector<unsigned char> src = patterned(n, seed);
                    std::vector<unsigned char> dst(n + 8, k_guard);
                    const std::int32_t tag = static_cast<std::int32_t>(seed % 50);
                    sop s;
                    rop r;
                    if (posted_first) {
                        recv_at(to, from, tag, dst.data(), n, r);
                        ASSERT_EQ(r.rc, status::inprogress);
                    }
                    send_from(from, to, tag, src.data(), n, s);
                    if (!posted_first) {
                        ASSERT_TRUE(until([&] {
                            mpiv_p2p_status_t ps{};
                            return eng(owner(to)).iprobe(*handles_[to], from, tag, ps) == status::ok;
                        }));
                        recv_at(to, from, tag, dst.data(), n, r);
                    }
                    const mpiv_p2p_status_t rs = finish(r);
                    EXPECT_EQ(rs.source, from);
                    EXPECT_EQ(rs.tag, tag);
                    EXPECT_EQ(rs.bytes, n);
                    EXPECT_EQ(rs.error, MPIV_OK);
                    EXPECT_TRUE(intact(dst.data(), n, seed)) << "content";
                    EXPECT_TRUE(guard_intact(dst, n));
                    EXPECT_EQ(finish(s).error, MPIV_OK);
                }
            }
        }
    }
}

// Each handle has counters of its own (mpiv_p2p_comm_stats_read): rank 0 sends 3 messages
// to rank 2 and 1 to rank 3; rank 2 posts one of its receives first.
TEST_P(endpoints_test, each_handle_counts_its_own_traffic)
{
    create();
    namespace stats = mpiv::base::stats;
    const auto read = [&](int rank, stats::comm_counter c) {
        return stats::read_comm(handles_[rank]->stats_key, c);
    };
    const long word = 9;
    long got[4] = {};
    rop first;
    recv_at(2, 0, 1, &got[0], sizeof(long), first);
    ASSERT_EQ(first.rc, status::inprogress);
    sop s[4];
    for (int i = 0; i < 3; ++i) {
        send_from(0, 2, 1 + i, &word, sizeof word, s[i]);
    }
    send_from(0, 3, 1, &word, sizeof word, s[3]);
    for (auto &x : s) {
        EXPECT_EQ(finish(x).error, MPIV_OK);
    }
    EXPECT_EQ(finish(first).error, MPIV_OK);
    for (int i = 1; i < 3; ++i) {
        ASSERT_TRUE(until([&] {
            mpiv_p2p_status_t ps{};
            return eng(1).iprobe(*handles_[2], 0, 1 + i, ps) == status::ok;
        }));
        rop r;
        recv_at(2, 0, 1 + i, &got[i], sizeof(long), r);
        EXPECT_EQ(finish(r).error, MPIV_OK);
    }
    rop r3;
    recv_at(3, 0, 1, &got[3], sizeof(long), r3);
    EXPECT_EQ(finish(r3).error, MPIV_OK);
    EXPECT_EQ(read(0, stats::comm_counter::comm_sent), 4u);
    EXPECT_EQ(read(0, stats::comm_counter::comm_bytes_sent), 4 * sizeof(long));
    EXPECT_EQ(read(1, stats::comm_counter::comm_sent), 0u);
    EXPECT_EQ(read(2, stats::comm_counter::comm_received), 3u);
    EXPECT_EQ(read(2, stats::comm_counter::comm_recv_posted), 1u);
    EXPECT_EQ(read(2, stats::comm_counter::comm_unexpected), 2u);
    EXPECT_EQ(read(3, stats::comm_counter::comm_received), 1u);
    EXPECT_EQ(read(4, stats::comm_counter::comm_received), 0u);
    EXPECT_EQ(read(2, stats::comm_counter::comm_sent), 0u);
}

// Two messages with the same tag to ranks 0 and 1 (one process): each handle's wildcard
// receive and probes see only its own; many senders' messages to one rank keep each
// sender's order.
TEST_P(endpoints_test, a_handle_matches_only_its_own_rank_in_sender_order)
{
    create();
    const int a = 7, b = 8;
    sop s1, s2;
    send_from(3, 0, 5, &a, sizeof a, s1);
    send_from(3, 1, 5, &b, sizeof b, s2);
    ASSERT_TRUE(until([&] {
        mpiv_p2p_status_t ps{};
        return eng(0).iprobe(*handles_[1], k_any, k_any, ps) == status::ok &&
               eng(0).iprobe(*handles_[0], k_any, k_any, ps) == status::ok;
    }));
    mpiv_p2p_status_t ps{};
    ASSERT_EQ(eng(0).iprobe(*handles_[1], k_any, k_any, ps), status::ok);
    EXPECT_EQ(ps.source, 3);
    int got = 0;
    rop r;
    recv_at(1, k_any, k_any, &got, sizeof got, r);
    EXPECT_EQ(finish(r).source, 3);
    EXPECT_EQ(got, b) << "rank 1's message, not rank 0's";
    EXPECT_EQ(eng(0).iprobe(*handles_[1], k_any, k_any, ps), status::not_found);
    rop r0;
    recv_at(0, k_any, 5, &got, sizeof got, r0);
    EXPECT_EQ(finish(r0).source, 3);
    EXPECT_EQ(got, a);

    // Ranks 2, 3, 4 (one process) and 0 each send 50 numbered messages to rank 1.
    constexpr int k_n = 50;
    const int senders[] = {2, 3, 4, 0};
    std::vector<sop> ops(4 * k_n);
    std::vector<int> vals(4 * k_n);
    for (int i = 0; i < k_n; ++i) {
        for (int k = 0; k < 4; ++k) {
            vals[k * k_n + i] = senders[k] * 1000 + i;
            send_from(senders[k], 1, 9, &vals[k * k_n + i], sizeof(int), ops[k * k_n + i]);
        }
    }
    int next[k_ranks] = {};
    for (int i = 0; i < 4 * k_n; ++i) {
        rop rr;
        int v = -1;
        recv_at(1, k_any, 9, &v, sizeof v, rr);
        const mpiv_p2p_status_t st = finish(rr);
        ASSERT_GE(st.source, 0);
        ASSERT_LT(st.source, k_ranks);
        EXPECT_EQ(v, st.source * 1000 + next[st.source]) << "sender order";
        ++next[st.source];
    }
    for (auto &o : ops) {
        EXPECT_EQ(finish(o).error, MPIV_OK);
    }
}

// Messages for a handle sent before its process created the communicator wait and are
// routed to it at creation (a message naming an endpoint the process does not have is a
// fault: test_fuzz).
TEST_P(endpoints_test, early_arrivals_are_routed_to_their_handle)
{
    create_on(1);
    const int v = 42;
    sop s;
    send_from(2, 1, 3, &v, sizeof v, s);
    pump_for(50);
    create_on(0);
    int got = 0;
    rop r;
    recv_at(1, 2, 3, &got, sizeof got, r);
    EXPECT_EQ(finish(r).source, 2);
    EXPECT_EQ(got, v);
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(0).iprobe(*handles_[0], k_any, k_any, ps), status::not_found)
        << "nothing went to rank 0";
}

TEST_P(endpoints_test, bad_rank_maps_are_refused_and_handles_go_in_any_order)
{
    log_capture log;
    ep::comm_state *h[3] = {};
    const std::uint16_t skips[k_ranks] = {0, 2, 0, 1, 2};       // peer 0: 0, 2
    const std::uint32_t unknown[k_ranks] = {0, 0, 1, 1, 7};     // peer 7 does not exist
    const std::uint32_t none_here[k_ranks] = {1, 1, 1, 1, 1};   // no rank of engine 0
    EXPECT_EQ(eng(0).comm_create_endpoints(30, k_ranks, k_peer, skips, nullptr, h, 3), status::invalid_arg);
    EXPECT_EQ(eng(0).comm_create_endpoints(30, k_ranks, unknown, k_index, nullptr, h, 3), status::invalid_arg);
    const std::uint16_t all_one[k_ranks] = {0, 1, 2, 3, 4};
    EXPECT_EQ(eng(0).comm_create_endpoints(30, k_ranks, none_here, all_one, nullptr, h, 3),
              status::invalid_arg);
    EXPECT_EQ(eng(0).comm_create_endpoints(30, k_ranks, k_peer, k_index, nullptr, h, 1), status::invalid_arg)
        << "room for 1 handle, 2 needed";
    EXPECT_GE(log.errors().size(), 4u);
    EXPECT_EQ(h[0], nullptr);
    // The right map works on the same context id afterwards; handles go in any order,
    // and a destroyed handle cannot be destroyed again.
    create();
    EXPECT_EQ(eng(1).comm_destroy(handles_[3]), status::ok);
    EXPECT_EQ(eng(1).comm_destroy(handles_[3]), status::invalid_handle);
    handles_[3] = nullptr;
    const int v = 5;
    sop s;
    send_from(4, 2, 1, &v, sizeof v, s); // the others still work
    int got = 0;
    rop r;
    recv_at(2, 4, 1, &got, sizeof got, r);
    EXPECT_EQ(finish(r).source, 4);
    EXPECT_EQ(got, v);
}

// Threads on the handles at once: one thread per rank sends k_n numbered messages to
// every other rank (small and rendezvous sizes) and receives its 4 * k_n with wildcard
// receives, while two more threads probe every handle (any thread may use any handle:
// their probes take the handles' queue locks against the drains and the owners' posts).
// Every message arrives once, intact, in its sender's order.
TEST_P(endpoints_test, threads_on_every_handle_at_once)
{
    create();
    const int k_n = 60 * static_cast<int>(mpiv::test::time_multiplier());
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int me = 0; me < k_ranks; ++me) {
        threads.emplace_back([&, me] {
            const std::size_t big = k_limit + 100; // rendezvous
            std::vector<std::vector<unsigned char>> out;
            std::vector<sop> sends(static_cast<std::size_t>((k_ranks - 1) * k_n));
            std::size_t k = 0;
            for (int i = 0; i < k_n; ++i) {
                for (int to = 0; to < k_ranks; ++to) {
                    if (to == me) {
                        continue;
                    }
                    const std::uint32_t seed = static_cast<std::uint32_t>(me * 100000 + i);
                    out.push_back(patterned(i % 7 == 0 ? big : 16, seed));
                }
            }
            for (int i = 0, j = 0; i < k_n; ++i) {
                for (int to = 0; to < k_ranks; ++to) {
                    if (to != me) {
                        send_from(me, to, 9, out[static_cast<std::size_t>(j)].data(),
                                  out[static_cast<std::size_t>(j)].size(), sends[k++]);
                        ++j;
                    }
                }
            }
            int next[k_ranks] = {};
            for (int i = 0; i < (k_ranks - 1) * k_n; ++i) {
                std::vector<unsigned char> in(k_limit + 100);
                rop r;
                recv_at(me, k_any, 9, in.data(), in.size(), r);
                const mpiv_p2p_status_t st = finish(r);
                if (st.source < 0 || st.source >= k_ranks || st.source == me) {
                    ++bad;
                    return;
                }
                const int n = next[st.source]++;
                const std::uint32_t seed = static_cast<std::uint32_t>(st.source * 100000 + n);
                if (st.bytes != (n % 7 == 0 ? in.size() : 16) || !intact(in.data(), st.bytes, seed)) {
                    ++bad; // lost, duplicated, reordered or damaged
                }
            }
            for (auto &o : sends) {
                if (finish(o).error != MPIV_OK) {
                    ++bad;
                }
            }
        });
    }
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&] {
            // Relaxed: a flag polled until the workers are done; nothing is published by it.
            while (!stop.load(std::memory_order_relaxed)) {
                for (int r = 0; r < k_ranks; ++r) {
                    mpiv_p2p_status_t ps{};
                    (void)eng(owner(r)).iprobe(*handles_[r], k_any, 1000, ps);
                }
                std::this_thread::yield();
            }
        });
    }
    for (int me = 0; me < k_ranks; ++me) {
        threads[static_cast<std::size_t>(me)].join();
    }
    stop.store(true, std::memory_order_relaxed);
    for (std::size_t t = k_ranks; t < threads.size(); ++t) {
        threads[t].join();
    }
    EXPECT_EQ(bad.load(), 0);
}

// A rank -> queue map given at creation (the component's mpiv_worker info key) decides
// which queue each endpoint receives through, modulo the queue count; by default endpoint
// k's is queue k. Traffic between every pair still arrives, in order.
TEST_P(endpoints_test, the_queue_map_places_each_endpoint)
{
    const std::uint16_t queues[k_ranks] = {3, 3, 6, 0, 1}; // 6 mod 4 queues: 2
    create_on(0, queues);
    create_on(1, queues);
    EXPECT_EQ(handles_[0]->queue, 3u);
    EXPECT_EQ(handles_[1]->queue, 3u);
    EXPECT_EQ(handles_[2]->queue, 2u);
    EXPECT_EQ(handles_[3]->queue, 0u);
    EXPECT_EQ(handles_[4]->queue, 1u);
    for (int from = 0; from < k_ranks; ++from) {
        for (int to = 0; to < k_ranks; ++to) {
            int v[2] = {from * 10 + to, from * 10 + to + 1000}, got[2] = {-1, -1};
            sop s[2];
            send_from(from, to, 4, &v[0], sizeof(int), s[0]);
            send_from(from, to, 4, &v[1], sizeof(int), s[1]);
            for (int i = 0; i < 2; ++i) {
                rop r;
                recv_at(to, from, 4, &got[i], sizeof(int), r);
                EXPECT_EQ(finish(r).source, from);
                EXPECT_EQ(got[i], v[i]) << from << " -> " << to << " in order";
            }
            finish(s[0]);
            finish(s[1]);
        }
    }
}

// A thread whose first call is on a handle is bound to the handle's queue (sends through
// that endpoint and drains it first); later handles do not move it, nor does a handle a
// thread bound earlier; a ULT worker is bound to its worker number. Four queues.
TEST_P(endpoints_test, a_thread_is_bound_to_the_queue_of_its_first_handle)
{
    const std::uint16_t queues[k_ranks] = {3, 3, 6, 0, 1}; // 6 mod 4 queues: 2
    create_on(0, queues);
    create_on(1, queues);
    const auto bound_by = [&](const std::function<void()> &first, int more_rank) {
        std::uint32_t got[3] = {99, 99, 99};
        std::thread t([&] {
            first();
            got[0] = endpoint_of(eng(0));
            got[1] = endpoint_of(eng(1)); // one binding for every engine of the process
            mpiv_p2p_status_t st{};
            (void) eng(owner(more_rank)).iprobe(*handles_[more_rank], k_any, 77, st);
            got[2] = endpoint_of(eng(0));
        });
        t.join();
        EXPECT_EQ(got[0], got[1]);
        EXPECT_EQ(got[0], got[2]) << "a later handle moved the thread";
        return got[0];
    };
    mpiv_p2p_status_t st{};
    // A probe (the receive side) on rank 2's handle, whose queue is 2.
    EXPECT_EQ(bound_by([&] { (void) eng(1).iprobe(*handles_[2], k_any, 77, st); }, 4),
              2u);
    // A send from rank 4's handle (queue 1).
    int v = 5;
    int got = 0;
    EXPECT_EQ(bound_by(
                  [&] {
                      sop s;
                      send_from(4, 0, 6, &v, sizeof v, s);
                      finish(s);
                  },
                  0),
              1u);
    rop r;
    recv_at(0, 4, 6, &got, sizeof got, r);
    EXPECT_EQ(finish(r).source, 4);
    EXPECT_EQ(got, 5);
    // A receive posted on rank 0's handle (queue 3), then cancelled.
    EXPECT_EQ(bound_by(
                  [&] {
                      rop late;
                      recv_at(0, k_any, 78, &got, sizeof got, late);
                      EXPECT_EQ(late.rc, status::inprogress);
                      EXPECT_EQ(eng(0).cancel(late.op), status::ok);
                  },
                  3),
              3u);
    // A thread bound before its first handle (by its first engine call) stays where it was.
    std::uint32_t before = 99;
    EXPECT_EQ(bound_by(
                  [&] {
                      before = endpoint_of(eng(0));
                      (void) eng(1).iprobe(*handles_[2], k_any, 77, st);
                  },
                  3),
              before);
    // A ULT on worker 2 of three, on rank 0's handle (queue 3): its worker's number.
    start_runtime(3);
    mpiv::sched::runtime *rt = mpiv::sched::runtime::get();
    ASSERT_NE(rt, nullptr);
    struct ult_probe {
        ep::engine *e;
        ep::comm_state *h;
        std::uint32_t got;
    } arg{&eng(0), handles_[0], 99};
    std::uint64_t u = 0;
    ASSERT_EQ(rt->spawn(
                  [](void *a) -> void * {
                      auto *p = static_cast<ult_probe *>(a);
                      mpiv_p2p_status_t s{};
                      (void) p->e->iprobe(*p->h, k_any, 77, s);
                      p->got = endpoint_of(*p->e);
                      return nullptr;
                  },
                  &arg, 2, false, u),
              status::ok);
    EXPECT_EQ(rt->join(u, nullptr), status::ok);
    EXPECT_EQ(arg.got, 2u);
}

INSTANTIATE_TEST_SUITE_P(copies, endpoints_test,
                         ::testing::Values(MPIV_P2P_SINGLE_COPY_AUTO, MPIV_P2P_SINGLE_COPY_NONE),
                         [](const ::testing::TestParamInfo<mpiv_p2p_single_copy_t> &info) {
                             return info.param == MPIV_P2P_SINGLE_COPY_NONE ? std::string("two_copies")
                                                                            : std::string("cma");
                         });

} // namespace
