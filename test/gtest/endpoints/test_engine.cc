// engine: the point-to-point engine end to end (fixture in engine_fixture.hpp): eager
// inline and packet, rendezvous, synchronous sends, truncation, probes, cancel, wildcards
// and sender order, arrivals before comm_create, self-sends.
#include "test/gtest/endpoints/engine_fixture.hpp"

namespace {

// Tests whose calls all come from the test thread run four times: with the engines'
// default thread-safe paths, and told that calls never overlap (serialized: no
// process-local locks, as under MPI_THREAD_SERIALIZED and below); each with rendezvous
// bytes read by CMA, and copied twice through shared memory (single_copy NONE).
class engine_modes : public engine_test,
                     public ::testing::WithParamInterface<std::tuple<bool, mpiv_p2p_single_copy_t>> {
  protected:
    void SetUp() override
    {
        engine_test::SetUp();
        serialized_ = std::get<0>(GetParam());
        single_copy_ = std::get<1>(GetParam());
    }
};

// Tests with threads of their own: CMA and two copies.
class copy_modes : public engine_test,
                   public ::testing::WithParamInterface<mpiv_p2p_single_copy_t> {
  protected:
    void SetUp() override
    {
        engine_test::SetUp();
        single_copy_ = GetParam();
    }
};

std::string copy_name(mpiv_p2p_single_copy_t c)
{
    return c == MPIV_P2P_SINGLE_COPY_NONE ? "two_copies" : "cma";
}

// ------------------------------------------------------------------ protocols

const std::size_t k_sizes[] = {0,   1,   24,      25,          56,   57,
                               416, 417, k_limit, k_limit + 1, k_mib};

// Every protocol (inline <= 416 B: the header's 24 bytes, then up to 7 more queue slots;
// packet <= eager limit; rendezvous above), both arrival orders, between the two engines
// and from each engine to itself.
TEST_P(engine_modes, sizes_protocols_and_content)
{
    start();
    const int pairs[][2] = {{0, 1}, {1, 0}, {0, 0}, {1, 1}};
    std::uint32_t seed = 1;
    for (const auto &pr : pairs) {
        const int from = pr[0];
        const int to = pr[1];
        for (const std::size_t n : k_sizes) {
            for (const bool posted_first : {true, false}) {
                SCOPED_TRACE(::testing::Message() << from << "->" << to << " bytes " << n
                                                  << (posted_first ? " posted" : " unexpected"));
                ++seed;
                std::vector<unsigned char> src = patterned(n, seed);
                std::vector<unsigned char> dst(n + 16, k_guard);
                const std::int32_t tag = static_cast<std::int32_t>(seed % 1000);
                sop s;
                rop r;
                if (posted_first) {
                    recv(to, from, tag, dst.data(), n, r);
                    ASSERT_EQ(r.rc, status::inprogress);
                }
                send(from, to, tag, src.data(), n, s);
                if (n <= k_limit) {
                    // Eager: the data is copied at once, the buffer is free again.
                    ASSERT_EQ(s.rc, status::ok);
                    EXPECT_EQ(s.st.source, to);
                    EXPECT_EQ(s.st.bytes, n);
                    std::fill(src.begin(), src.end(), 0);
                } else {
                    ASSERT_EQ(s.rc, status::inprogress) << "rendezvous";
                    if (!posted_first) {
                        pump_for(200);
                        EXPECT_EQ(calls_of(s.rec), 0) << "rendezvous done before a match";
                    }
                }
                if (!posted_first) {
                    ASSERT_TRUE(until([&] {
                        mpiv_p2p_status_t ps{};
                        return eng(to).iprobe(comm(to), from, tag, ps) == status::ok;
                    }));
                    recv(to, from, tag, dst.data(), n, r);
                    ASSERT_EQ(r.rc, arrived_rc(from, to, n, n)) << "an arrived message matches at once";
                }
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.source, from);
                EXPECT_EQ(rs.tag, tag);
                EXPECT_EQ(rs.bytes, n);
                EXPECT_EQ(rs.sent, n);
                EXPECT_EQ(rs.error, MPIV_OK);
                EXPECT_TRUE(intact(dst.data(), n, seed)) << "content";
                EXPECT_TRUE(guard_intact(dst, n)) << "wrote past the message";
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.source, to);
                EXPECT_EQ(ss.tag, tag);
                EXPECT_EQ(ss.bytes, n);
                EXPECT_EQ(ss.error, MPIV_OK);
                pump_for(20);
                EXPECT_LE(calls_of(s.rec), 1) << "one callback per send";
                EXPECT_LE(calls_of(r.rec), 1) << "one callback per receive";
            }
        }
    }
}

// A synchronous send completes only after the receive matched it, whatever the protocol.
TEST_P(engine_modes, sync_send_completes_after_the_match)
{
    start();
    const int pairs[][2] = {{0, 1}, {1, 1}};
    std::uint32_t seed = 100;
    for (const auto &pr : pairs) {
        for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{24},
                                    std::size_t{25}, std::size_t{k_limit}, std::size_t{k_limit + 1}}) {
            SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " bytes " << n);
            ++seed;
            const std::vector<unsigned char> src = patterned(n, seed);
            std::vector<unsigned char> dst(n + 16, k_guard);
            sop s;
            send(pr[0], pr[1], 5, src.data(), n, s, MPIV_P2P_SEND_SYNC);
            ASSERT_EQ(s.rc, status::inprogress);
            ASSERT_TRUE(until([&] {
                mpiv_p2p_status_t ps{};
                return eng(pr[1]).iprobe(comm(pr[1]), pr[0], 5, ps) == status::ok;
            })) << "the message arrives";
            pump_for(200);
            EXPECT_EQ(calls_of(s.rec), 0) << "completed before the receive was posted";
            rop r;
            recv(pr[1], pr[0], 5, dst.data(), n, r);
            ASSERT_EQ(r.rc, arrived_rc(pr[0], pr[1], n, n));
            EXPECT_EQ(finish(r).bytes, n);
            EXPECT_TRUE(intact(dst.data(), n, seed));
            const mpiv_p2p_status_t ss = finish(s);
            EXPECT_EQ(ss.bytes, n);
            EXPECT_EQ(ss.error, MPIV_OK);

            // Posted first: completes too, exactly once.
            sop s2;
            rop r2;
            recv(pr[1], pr[0], 6, dst.data(), n, r2);
            ASSERT_EQ(r2.rc, status::inprogress);
            send(pr[0], pr[1], 6, src.data(), n, s2, MPIV_P2P_SEND_SYNC);
            ASSERT_EQ(s2.rc, status::inprogress);
            EXPECT_EQ(finish(r2).bytes, n);
            EXPECT_EQ(finish(s2).error, MPIV_OK);
            pump_for(20);
            EXPECT_EQ(calls_of(s2.rec), 1);
            EXPECT_EQ(calls_of(r2.rec), 1);
        }
    }
}

// A message longer than the buffer: MPIV_ERR_TRUNCATE, bytes = capacity, sent = size.
TEST_P(engine_modes, truncation)
{
    start();
    struct tc {
        std::size_t n;
        std::size_t cap;
    };
    const tc cases[] = {{24, 5},        {25, 10},          {k_limit, 100},
                        {k_limit + 1, 100}, {k_mib, k_limit + 1}, {7, 0}};
    std::uint32_t seed = 200;
    for (const tc &c : cases) {
        for (const unsigned flags : {0u, unsigned{MPIV_P2P_SEND_SYNC}}) {
            for (const bool posted_first : {true, false}) {
                SCOPED_TRACE(::testing::Message() << c.n << " into " << c.cap << " flags " << flags
                                                  << (posted_first ? " posted" : " unexpected"));
                ++seed;
                const std::vector<unsigned char> src = patterned(c.n, seed);
                std::vector<unsigned char> dst(c.cap + 64, k_guard);
                sop s;
                rop r;
                if (posted_first) {
                    recv(1, 0, 3, dst.data(), c.cap, r);
                    ASSERT_EQ(r.rc, status::inprogress);
                }
                send(0, 1, 3, src.data(), c.n, s, flags);
                if (!posted_first) {
                    ASSERT_TRUE(until([&] {
                        mpiv_p2p_status_t ps{};
                        return eng(1).iprobe(comm(1), 0, 3, ps) == status::ok;
                    }));
                    recv(1, 0, 3, dst.data(), c.cap, r);
                    ASSERT_EQ(r.rc, arrived_rc(0, 1, c.n, c.cap));
                }
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.error, MPIV_ERR_TRUNCATE);
                EXPECT_EQ(rs.bytes, c.cap);
                EXPECT_EQ(rs.sent, c.n);
                EXPECT_EQ(rs.source, 0);
                EXPECT_EQ(rs.tag, 3);
                EXPECT_TRUE(intact(dst.data(), c.cap, seed)) << "the first bytes arrive";
                EXPECT_TRUE(guard_intact(dst, c.cap)) << "wrote past the capacity";
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.error, MPIV_OK) << "the sender sees no error";
                EXPECT_EQ(ss.bytes, c.n);
            }
        }
    }
}

// iprobe leaves the message; improbe takes it away from receives and probes; mrecv
// delivers it (truncating if need be).
TEST_P(engine_modes, iprobe_improbe_mrecv)
{
    start();
    mpiv_p2p_status_t ps{};
    EXPECT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::not_found);
    const std::size_t sizes[] = {20, 1000, k_limit + 100, 64};
    std::vector<std::vector<unsigned char>> src;
    std::vector<sop> s(4);
    for (int i = 0; i < 4; ++i) {
        src.push_back(patterned(sizes[i], 300 + i));
        send(0, 1, i + 1, src[i].data(), sizes[i], s[i]);
    }
    ASSERT_TRUE(until([&] { return eng(1).iprobe(comm(1), 0, 4, ps) == status::ok; }));
    for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::ok) << "not taken by a probe";
        EXPECT_EQ(ps.source, 0);
        EXPECT_EQ(ps.tag, 1);
        EXPECT_EQ(ps.sent, sizes[0]);
    }
    EXPECT_EQ(eng(1).iprobe(comm(1), 1, k_any, ps), status::not_found) << "nothing from rank 1";
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 9, ps), status::not_found) << "no tag 9";
    ASSERT_EQ(eng(1).iprobe(comm(1), k_any, 3, ps), status::ok);
    EXPECT_EQ(ps.sent, sizes[2]);

    // Take tags 3 (rendezvous) and 2 (packet); the rest stays for receives.
    ep::inmsg *m3 = nullptr;
    ep::inmsg *m2 = nullptr;
    ASSERT_EQ(eng(1).improbe(comm(1), 0, 3, m3, ps), status::ok);
    EXPECT_EQ(ps.tag, 3);
    EXPECT_EQ(ps.sent, sizes[2]);
    ASSERT_EQ(eng(1).improbe(comm(1), k_any, k_any, m2, ps), status::ok);
    EXPECT_EQ(ps.tag, 1) << "the earliest message";
    // That was tag 1: receive it through the message handle too.
    ep::inmsg *m1 = m2;
    ASSERT_EQ(eng(1).improbe(comm(1), 0, 2, m2, ps), status::ok);
    EXPECT_EQ(ps.tag, 2);
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 3, ps), status::not_found) << "taken by improbe";
    EXPECT_EQ(eng(1).iprobe(comm(1), 0, 1, ps), status::not_found);
    ASSERT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::ok);
    EXPECT_EQ(ps.tag, 4) << "only tag 4 is left";

    rop r4;
    std::vector<unsigned char> d4(64 + 16, k_guard);
    recv(1, k_any, k_any, d4.data(), 64, r4);
    ASSERT_EQ(r4.rc, status::ok);
    EXPECT_EQ(r4.st.tag, 4);
    EXPECT_TRUE(intact(d4.data(), 64, 303));

    pump_for(100);
    EXPECT_EQ(calls_of(s[2].rec), 0) << "the rendezvous waits for mrecv";
    std::vector<unsigned char> d3(sizes[2] + 16, k_guard);
    mpiv_p2p_status_t st = mrecv_all(1, *m3, ep::recv_target{d3.data(), sizes[2], nullptr, nullptr});
    EXPECT_EQ(st.error, MPIV_OK);
    EXPECT_EQ(st.bytes, sizes[2]);
    EXPECT_EQ(st.tag, 3);
    EXPECT_TRUE(intact(d3.data(), sizes[2], 302));
    EXPECT_TRUE(guard_intact(d3, sizes[2]));

    std::vector<unsigned char> d2(500 + 16, k_guard);
    ASSERT_EQ(eng(1).mrecv(*m2, d2.data(), 500, nullptr, st), status::ok);
    EXPECT_EQ(st.error, MPIV_ERR_TRUNCATE);
    EXPECT_EQ(st.bytes, 500u);
    EXPECT_EQ(st.sent, sizes[1]);
    EXPECT_TRUE(intact(d2.data(), 500, 301));
    EXPECT_TRUE(guard_intact(d2, 500));

    std::vector<unsigned char> d1(sizes[0], 0);
    ASSERT_EQ(eng(1).mrecv(*m1, d1.data(), d1.size(), nullptr, st), status::ok);
    EXPECT_EQ(st.error, MPIV_OK);
    EXPECT_EQ(st.tag, 1);
    EXPECT_TRUE(intact(d1.data(), sizes[0], 300));

    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(finish(s[i]).error, MPIV_OK) << i;
    }
    EXPECT_EQ(eng(1).iprobe(comm(1), k_any, k_any, ps), status::not_found);
}

// A receive into a sink gets the message's bytes in order, in pieces of at most
// MPIV_P2P_SINK_PIECE (a rendezvous message from another process), and only up to its
// capacity; every protocol, both engines and self, mrecv included.
struct sink_log {
    std::vector<unsigned char> bytes;
    std::size_t pieces = 0;
    std::size_t largest = 0;
    bool in_order = true;
    static void take(void *ctx, std::size_t offset, const void *data, std::size_t len)
    {
        auto *l = static_cast<sink_log *>(ctx);
        l->in_order = l->in_order && offset == l->bytes.size();
        const auto *p = static_cast<const unsigned char *>(data);
        l->bytes.insert(l->bytes.end(), p, p + len);
        ++l->pieces;
        l->largest = std::max(l->largest, len);
    }
};

TEST_P(copy_modes, sink_receives_pieces_in_order)
{
    start();
    const std::size_t sizes[] = {0, 20, k_limit, 3 * MPIV_P2P_SINK_PIECE + 100};
    const int pairs[][2] = {{0, 1}, {1, 1}};
    std::uint32_t seed = 400;
    for (const auto &pr : pairs) {
        for (const std::size_t n : sizes) {
            for (const bool truncate : {false, true}) {
                const int from = pr[0];
                const int to = pr[1];
                SCOPED_TRACE(::testing::Message() << from << "->" << to << " bytes " << n
                                                  << (truncate ? " truncated" : ""));
                ++seed;
                const std::size_t cap = truncate ? n / 2 : n;
                std::vector<unsigned char> src = patterned(n, seed);
                sink_log got;
                rop r;
                r.rc = eng(to).irecv(comm(to), from, 7,
                                     ep::recv_target{nullptr, cap, &sink_log::take, &got}, &r.rec,
                                     r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                send(from, to, 7, src.data(), n, s);
                const mpiv_p2p_status_t rs = finish(r);
                EXPECT_EQ(rs.bytes, cap);
                EXPECT_EQ(rs.sent, n);
                EXPECT_EQ(rs.error, cap < n ? MPIV_ERR_TRUNCATE : MPIV_OK);
                ASSERT_EQ(got.bytes.size(), cap);
                EXPECT_TRUE(intact(got.bytes.data(), cap, seed)) << "content";
                EXPECT_TRUE(got.in_order);
                if (from != to && n > k_limit) {
                    EXPECT_LE(got.largest, sink_piece());
                    EXPECT_EQ(got.pieces, (cap + sink_piece() - 1) / sink_piece());
                } else {
                    EXPECT_EQ(got.pieces, cap == 0 ? 0u : 1u) << "one piece";
                }
                EXPECT_EQ(finish(s).error, MPIV_OK);
            }
        }
    }
    // mrecv into a sink, after an improbe.
    std::vector<unsigned char> src = patterned(2 * MPIV_P2P_SINK_PIECE, 499);
    sop s;
    send(0, 1, 9, src.data(), src.size(), s);
    ep::inmsg *m = nullptr;
    mpiv_p2p_status_t ps{};
    ASSERT_TRUE(until([&] { return eng(1).improbe(comm(1), 0, 9, m, ps) == status::ok; }));
    sink_log got;
    const mpiv_p2p_status_t st =
        mrecv_all(1, *m, ep::recv_target{nullptr, src.size(), &sink_log::take, &got});
    EXPECT_EQ(st.error, MPIV_OK);
    ASSERT_EQ(got.bytes.size(), src.size());
    EXPECT_TRUE(intact(got.bytes.data(), src.size(), 499));
    EXPECT_EQ(got.pieces, src.size() / sink_piece());
    EXPECT_EQ(finish(s).error, MPIV_OK);
}

// A gather send: the receiver reads the sender's ranges in order, into a buffer or a sink
// (pieces cut across range boundaries), cut at its capacity; to another engine and to
// itself; zero-length ranges are skipped.
// Where a receive of capacity @p cap goes: @p dst, or (to_sink) the sink that logs into @p got.
ep::recv_target target(bool to_sink, std::vector<unsigned char> &dst, std::size_t cap,
                       sink_log &got)
{
    return to_sink ? ep::recv_target{nullptr, cap, &sink_log::take, &got}
                   : ep::recv_target{dst.data(), cap, nullptr, nullptr};
}

// The checks of a receive of @p total bytes of @p expected with capacity @p cap, made into
// @p dst or (to_sink) @p got.
void expect_received(const mpiv_p2p_status_t &rs, std::size_t cap, std::size_t total,
                     bool to_sink, const sink_log &got, const std::vector<unsigned char> &dst,
                     const std::vector<unsigned char> &expected)
{
    EXPECT_EQ(rs.bytes, cap);
    EXPECT_EQ(rs.sent, total);
    EXPECT_EQ(rs.error, cap < total ? MPIV_ERR_TRUNCATE : MPIV_OK);
    const unsigned char *bytes = to_sink ? got.bytes.data() : dst.data();
    if (to_sink) {
        ASSERT_EQ(got.bytes.size(), cap);
        EXPECT_TRUE(got.in_order);
    } else {
        EXPECT_TRUE(guard_intact(dst, cap)) << "wrote past the capacity";
    }
    EXPECT_TRUE(std::equal(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(cap),
                           bytes))
        << "content";
}

TEST_P(copy_modes, gather_send_reads_the_ranges_in_order)
{
    start();
    // 3 * MPIV_P2P_SINK_PIECE + 300 bytes in ranges of odd sizes, gaps between them.
    const std::size_t lengths[] = {1000, 0, 70001, 5, 65536, 60000, 366};
    std::size_t total = 0;
    for (std::size_t l : lengths) {
        total += l;
    }
    ASSERT_EQ(total, 3u * MPIV_P2P_SINK_PIECE + 300);
    std::vector<unsigned char> space(total + 64 * std::size(lengths), k_guard);
    std::vector<struct iovec> iov;
    std::vector<unsigned char> expected;
    std::size_t at = 0;
    std::uint32_t seed = 600;
    for (std::size_t l : lengths) {
        std::vector<unsigned char> part = patterned(l, ++seed);
        std::copy(part.begin(), part.end(), space.begin() + static_cast<std::ptrdiff_t>(at));
        expected.insert(expected.end(), part.begin(), part.end());
        iov.push_back({space.data() + at, l});
        at += l + 64;
    }
    const int pairs[][2] = {{0, 1}, {1, 1}};
    for (const auto &pr : pairs) {
        for (const bool to_sink : {false, true}) {
            for (const std::size_t cap : {total, std::size_t{70500}}) {
                SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " cap " << cap
                                                  << (to_sink ? " sink" : " buffer"));
                std::vector<unsigned char> dst(cap + 16, k_guard);
                sink_log got;
                rop r;
                r.rc = eng(pr[1]).irecv(comm(pr[1]), pr[0], 11, target(to_sink, dst, cap, got),
                                        &r.rec, r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                s.rc = eng(pr[0]).isend_gather(comm(pr[0]), static_cast<std::uint32_t>(pr[1]),
                                               pr[0], pr[1], 11, iov.data(), iov.size(), 0,
                                               &s.rec, s.op, s.st);
                ASSERT_EQ(s.rc, status::inprogress) << "always a rendezvous";
                expect_received(finish(r), cap, total, to_sink, got, dst, expected);
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_EQ(ss.error, MPIV_OK);
                EXPECT_EQ(ss.bytes, total);
            }
        }
    }
    sop bad;
    EXPECT_EQ(eng(0).isend_gather(comm(0), 1, 0, 1, 11, nullptr, 2, 0, &bad.rec, bad.op, bad.st),
              status::invalid_arg);
    const struct iovec hole = {nullptr, 8};
    EXPECT_EQ(eng(0).isend_gather(comm(0), 1, 0, 1, 11, &hole, 1, 0, &bad.rec, bad.op, bad.st),
              status::invalid_arg);
}

// A streamed send: another thread writes the bytes after the send started, publishing its
// count part by part; the receiver (another process's endpoint, or this one's) gets them all,
// into a buffer or a sink, truncated or not, and the send completes only after the last
// part is published.
TEST_P(copy_modes, streamed_send_is_read_as_it_is_written)
{
    start();
    const std::size_t total = 3 * MPIV_P2P_SINK_PIECE + 300;
    const std::vector<unsigned char> expected = patterned(total, 900);
    const int pairs[][2] = {{0, 1}, {1, 1}};
    for (const auto &pr : pairs) {
        for (const bool to_sink : {false, true}) {
            for (const std::size_t cap : {total, std::size_t{70500}, std::size_t{0}}) {
                SCOPED_TRACE(::testing::Message() << pr[0] << "->" << pr[1] << " cap " << cap
                                                  << (to_sink ? " sink" : " buffer"));
                std::vector<unsigned char> src(total, 0);
                std::size_t ready = 0;
                std::vector<unsigned char> dst(cap + 16, k_guard);
                sink_log got;
                rop r;
                r.rc = eng(pr[1]).irecv(comm(pr[1]), pr[0], 12, target(to_sink, dst, cap, got),
                                        &r.rec, r.op, r.st);
                ASSERT_EQ(r.rc, status::inprogress);
                sop s;
                s.rc = eng(pr[0]).isend_streamed(comm(pr[0]), static_cast<std::uint32_t>(pr[1]),
                                                 pr[0], pr[1], 12, src.data(), total, &ready, 0,
                                                 &s.rec, s.op, s.st);
                ASSERT_EQ(s.rc, status::inprogress) << "always a rendezvous";
                std::atomic<bool> all_written{false};
                std::thread writer([&] {
                    for (std::size_t at = 0; at < total;) {
                        const std::size_t end = std::min(total, at + 50000);
                        std::copy(expected.begin() + static_cast<std::ptrdiff_t>(at),
                                  expected.begin() + static_cast<std::ptrdiff_t>(end),
                                  src.begin() + static_cast<std::ptrdiff_t>(at));
                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                        if (end == total) {
                            all_written.store(true, std::memory_order_relaxed);
                        }
                        __atomic_store_n(&ready, end, __ATOMIC_RELEASE);
                        at = end;
                    }
                });
                expect_received(finish(r), cap, total, to_sink, got, dst, expected);
                const mpiv_p2p_status_t ss = finish(s);
                EXPECT_TRUE(all_written.load(std::memory_order_relaxed))
                    << "the send completed before its last part was published";
                EXPECT_EQ(ss.error, MPIV_OK);
                writer.join();
            }
        }
    }
    sop bad;
    std::size_t ready = 0;
    EXPECT_EQ(eng(0).isend_streamed(comm(0), 1, 0, 1, 12, nullptr, 8, &ready, 0, &bad.rec, bad.op,
                                    bad.st),
              status::invalid_arg);
}

// Cancel: an unmatched receive goes away silently (the message it would have taken stays
// for the next receive); a matched one cannot be cancelled.
TEST_P(engine_modes, cancel)
{
    start();
    std::vector<unsigned char> dst(64, k_guard);
    for (const std::int32_t src_pattern : {0, k_any}) {
        rop r;
        recv(1, src_pattern, src_pattern == k_any ? k_any : 8, dst.data(), 64, r);
        ASSERT_EQ(r.rc, status::inprogress);
        EXPECT_EQ(eng(1).cancel(r.op), status::ok);
        EXPECT_EQ(eng(1).cancel(r.op), status::not_found) << "cancelled already";

        const std::vector<unsigned char> src = patterned(40, 400);
        sop s;
        send(0, 1, 8, src.data(), 40, s);
        mpiv_p2p_status_t ps{};
        ASSERT_TRUE(until([&] { return eng(1).iprobe(comm(1), 0, 8, ps) == status::ok; }))
            << "the message stays unexpected";
        pump_for(50);
        EXPECT_EQ(calls_of(r.rec), 0) << "a cancelled receive has no callback";
        EXPECT_TRUE(guard_intact(dst, 0)) << "nor receives data";
        rop r2;
        recv(1, 0, 8, dst.data(), 64, r2);
        ASSERT_EQ(r2.rc, status::ok);
        EXPECT_TRUE(intact(dst.data(), 40, 400));
        std::fill(dst.begin(), dst.end(), k_guard);
    }

    // Matched later by an arrival (callback came), and matched at once.
    const std::vector<unsigned char> src = patterned(k_limit + 1, 401);
    rop r;
    recv(1, 0, 9, dst.data(), 64, r);
    sop s;
    send(0, 1, 9, src.data(), 10, s);
    ASSERT_TRUE(until([&] { return calls_of(r.rec) == 1; }));
    EXPECT_EQ(eng(1).cancel(r.op), status::not_found);
    rop r2;
    sop s2;
    std::vector<unsigned char> big(k_limit + 1);
    send(0, 1, 10, src.data(), src.size(), s2);
    ASSERT_TRUE(until([&] {
        mpiv_p2p_status_t ps{};
        return eng(1).iprobe(comm(1), 0, 10, ps) == status::ok;
    }));
    recv(1, 0, 10, big.data(), big.size(), r2);
    ASSERT_EQ(r2.rc, arrived_rc(0, 1, big.size(), big.size()));
    EXPECT_EQ(eng(1).cancel(r2.op), status::not_found);
    EXPECT_EQ(finish(r2).bytes, big.size());
    EXPECT_TRUE(intact(big.data(), big.size(), 401));
    EXPECT_EQ(finish(s2).error, MPIV_OK);
    pump_for(20);
    EXPECT_EQ(calls_of(r.rec), 1);
    EXPECT_EQ(calls_of(r2.rec), r2.rc == status::ok ? 0 : 1);
}

// Message i of a sender carries tag i, sizes cycling through all protocols.
std::size_t order_size(std::size_t i)
{
    static const std::size_t sizes[] = {0, 8, 24, 100, k_limit, k_limit + 1, 3000, 25};
    return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

// ANY_SOURCE/ANY_TAG receives see each sender's messages in its sending order, with
// engine 0 and engine 1 itself sending to engine 1.
TEST_P(engine_modes, wildcards_keep_the_order_of_each_sender)
{
    start();
    const std::size_t n = iterations(400, 4);
    for (const bool posted_first : {true, false}) {
        SCOPED_TRACE(posted_first ? "posted first" : "unexpected first");
        std::vector<std::vector<unsigned char>> src[2];
        std::vector<sop> s[2] = {std::vector<sop>(n), std::vector<sop>(n)};
        std::vector<rop> r(2 * n);
        std::vector<std::vector<unsigned char>> dst(2 * n);
        const auto post_all = [&] {
            for (std::size_t k = 0; k < 2 * n; ++k) {
                dst[k].assign(k_limit + 1, k_guard);
                recv(1, k_any, k_any, dst[k].data(), dst[k].size(), r[k]);
            }
        };
        if (posted_first) {
            post_all();
        }
        for (std::size_t i = 0; i < n; ++i) {
            for (int from = 0; from < 2; ++from) {
                src[from].push_back(patterned(order_size(i), static_cast<std::uint32_t>(from * 100000 + i)));
                send(from, 1, static_cast<std::int32_t>(i), src[from][i].data(), order_size(i),
                     s[from][i], i % 7 == 3 ? MPIV_P2P_SEND_SYNC : 0);
                ASSERT_TRUE(s[from][i].rc == status::ok || s[from][i].rc == status::inprogress);
            }
            if (i % 16 == 0) {
                pump();
            }
        }
        if (!posted_first) {
            pump_for(100);
            post_all();
        }
        ASSERT_TRUE(until([&] {
            for (auto &x : r) {
                if (!done(x)) {
                    return false;
                }
            }
            return true;
        }));
        std::size_t next[2] = {0, 0};
        for (std::size_t k = 0; k < 2 * n; ++k) {
            const mpiv_p2p_status_t st = finish(r[k]);
            ASSERT_TRUE(st.source == 0 || st.source == 1) << st.source;
            const std::size_t i = static_cast<std::size_t>(st.tag);
            ASSERT_EQ(i, next[st.source]) << "receive " << k << " out of order from " << st.source;
            ++next[st.source];
            EXPECT_EQ(st.bytes, order_size(i));
            EXPECT_EQ(st.error, MPIV_OK);
            EXPECT_TRUE(intact(dst[k].data(), st.bytes, static_cast<std::uint32_t>(st.source * 100000 + i)));
        }
        for (int from = 0; from < 2; ++from) {
            for (std::size_t i = 0; i < n; ++i) {
                EXPECT_EQ(finish(s[from][i]).bytes, order_size(i));
            }
        }
    }

    // Specific source with any tag, any source with a specific tag.
    const std::vector<unsigned char> src = patterned(16, 7);
    sop s[4];
    const std::int32_t tags[4] = {1, 2, 1, 2};
    for (int i = 0; i < 4; ++i) {
        send(0, 1, tags[i], src.data(), 16, s[i]);
    }
    ASSERT_TRUE(until([&] {
        mpiv_p2p_status_t ps{};
        return eng(1).iprobe(comm(1), 0, 2, ps) == status::ok;
    }));
    pump_for(50);
    unsigned char d[16];
    rop a;
    rop b;
    rop c;
    recv(1, k_any, 2, d, 16, a);
    ASSERT_EQ(a.rc, status::ok);
    EXPECT_EQ(a.st.tag, 2);
    recv(1, 0, k_any, d, 16, b);
    ASSERT_EQ(b.rc, status::ok);
    EXPECT_EQ(b.st.tag, 1) << "the first message left";
    recv(1, 1, k_any, d, 16, c);
    EXPECT_EQ(c.rc, status::inprogress) << "nothing from rank 1";
    EXPECT_EQ(eng(1).cancel(c.op), status::ok);
    rop e;
    rop f;
    recv(1, k_any, k_any, d, 16, e);
    recv(1, k_any, k_any, d, 16, f);
    ASSERT_EQ(e.rc, status::ok);
    ASSERT_EQ(f.rc, status::ok);
    EXPECT_EQ(e.st.tag, 1);
    EXPECT_EQ(f.st.tag, 2);
}

// Arrivals for a context id without a communicator wait for comm_create and are then
// matched in their order, also while more arrive during comm_create.
TEST_F(engine_test, arrivals_before_comm_create)
{
    start();
    const std::size_t n = iterations(200, 4);
    for (const std::uint16_t cid : {std::uint16_t{9}, std::uint16_t{10}}) {
        SCOPED_TRACE(::testing::Message() << "cid " << cid);
        const bool concurrent = cid == 10;
        ep::comm_state *c0 = nullptr;
        ASSERT_EQ(eng(0).comm_create(cid, 2, 0, c0), status::ok);
        std::vector<std::vector<unsigned char>> src(2 * n);
        std::vector<sop> s(2 * n);
        std::atomic<std::size_t> sent{0};
        const auto send_range = [&](std::size_t from, std::size_t to) {
            for (std::size_t i = from; i < to; ++i) {
                src[i] = patterned(order_size(i), static_cast<std::uint32_t>(cid * 10000 + i));
                s[i].rc = eng(0).isend(*c0, 1, 0, 1, static_cast<std::int32_t>(i), src[i].data(),
                                       src[i].size(), i % 5 == 2 ? MPIV_P2P_SEND_SYNC : 0,
                                       &s[i].rec, s[i].op, s[i].st);
                // Relaxed: a progress hint for the main thread only.
                sent.store(i + 1, std::memory_order_relaxed);
                pump();
            }
        };
        send_range(0, n);
        pump_for(200);
        ep::comm_state *c1 = nullptr;
        std::thread late;
        if (concurrent) {
            late = std::thread([&] { send_range(n, 2 * n); });
            while (sent.load(std::memory_order_relaxed) < n + n / 4) {
                std::this_thread::yield();
            }
        }
        ASSERT_EQ(eng(1).comm_create(cid, 2, 0, c1), status::ok);
        if (concurrent) {
            late.join();
        } else {
            mpiv_p2p_status_t ps{};
            ASSERT_EQ(eng(1).iprobe(*c1, k_any, k_any, ps), status::ok)
                << "the early arrivals are matched by comm_create";
            EXPECT_EQ(ps.tag, 0);
            send_range(n, 2 * n);
        }
        for (std::size_t i = 0; i < 2 * n; ++i) {
            std::vector<unsigned char> dst(k_limit + 1, k_guard);
            rop r;
            r.rc = eng(1).irecv(*c1, 0, k_any, dst.data(), dst.size(), &r.rec, r.op, r.st);
            const mpiv_p2p_status_t st = finish(r);
            ASSERT_EQ(st.tag, static_cast<std::int32_t>(i)) << "order";
            EXPECT_EQ(st.bytes, order_size(i));
            EXPECT_TRUE(intact(dst.data(), st.bytes, static_cast<std::uint32_t>(cid * 10000 + i)));
        }
        for (std::size_t i = 0; i < 2 * n; ++i) {
            EXPECT_EQ(finish(s[i]).error, MPIV_OK);
        }
        mpiv_p2p_status_t ps{};
        EXPECT_EQ(eng(1).iprobe(*c1, k_any, k_any, ps), status::not_found);
        EXPECT_EQ(eng(0).comm_destroy(c0), status::ok);
        EXPECT_EQ(eng(1).comm_destroy(c1), status::ok);
    }
}

TEST_F(engine_test, comm_create_rejects_bad_arguments)
{
    start();
    log_capture log;
    ep::comm_state *c = nullptr;
    EXPECT_EQ(eng(0).comm_create(k_cid, 2, 0, c), status::invalid_arg) << "cid in use";
    EXPECT_NE(log.last().find("in use"), std::string::npos) << log.last();
    EXPECT_EQ(eng(0).comm_create(11, 0, 0, c), status::invalid_arg) << "size 0";
    EXPECT_EQ(eng(0).comm_create(11, 2, 8, c), status::invalid_arg) << "unknown assertion";
    EXPECT_EQ(c, nullptr);
    ASSERT_EQ(eng(0).comm_create(11, 2, MPIV_P2P_ASSERT_NO_ANY_SOURCE, c), status::ok);
    ep::recv_op op;
    record rec;
    mpiv_p2p_status_t st{};
    EXPECT_EQ(eng(0).irecv(*c, k_any, 0, nullptr, 0, &rec, op, st), status::invalid_arg)
        << "ANY_SOURCE asserted away";
    ep::comm_state *live = nullptr;
    ASSERT_EQ(eng(0).comm_create(12, 2, 0, live), status::ok);
    EXPECT_EQ(eng(0).comm_destroy(c), status::ok);
    // A state that is not the live one of its context id: here another id's (a destroyed
    // handle is freed and may not be passed again).
    ep::comm_state forged{};
    forged.cid = 12;
    EXPECT_EQ(eng(0).comm_destroy(&forged), status::invalid_handle);
    EXPECT_EQ(eng(0).comm_destroy(live), status::ok);
}

// MPI's progress rule: Isend(tag 1), Isend(tag 2), ... against Recv(tag 3), Recv(tag 2),
// Recv(tag 1) must complete. With a single packet, tag 1 (unexpected at the receiver)
// holds it until its receive: a later send must not wait for that packet.
TEST_F(engine_test, a_send_never_waits_for_a_packet_an_unexpected_message_holds)
{
    mpiv_p2p_params_t p[2] = {params_for(0), params_for(1)};
    for (auto &x : p) {
        x.endpoints = 1;
        x.packet_count = 1;
    }
    start(p[0], p[1]);
    for (const unsigned flags : {0u, unsigned{MPIV_P2P_SEND_SYNC}}) {
        SCOPED_TRACE(flags != 0 ? "synchronous" : "standard");
        std::vector<unsigned char> src[3];
        sop s[3];
        for (int i = 0; i < 3; ++i) {
            src[i] = patterned(100 + i, 500 + i);
            send(0, 1, i + 1, src[i].data(), src[i].size(), s[i], i == 0 ? 0 : flags);
        }
        EXPECT_EQ(s[0].rc, status::ok) << "the first one takes the packet";
        for (int i = 2; i >= 0; --i) {
            std::vector<unsigned char> dst(200, k_guard);
            rop r;
            recv(1, 0, i + 1, dst.data(), dst.size(), r);
            const mpiv_p2p_status_t st = finish(r);
            ASSERT_EQ(calls_of(r.rec) + (r.rc == status::ok ? 1 : 0), 1) << "tag " << i + 1;
            EXPECT_EQ(st.bytes, src[i].size());
            EXPECT_TRUE(intact(dst.data(), src[i].size(), 500 + i)) << "tag " << i + 1;
        }
        for (auto &x : s) {
            EXPECT_EQ(finish(x).error, MPIV_OK);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    threads, engine_modes,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(MPIV_P2P_SINGLE_COPY_AUTO, MPIV_P2P_SINGLE_COPY_NONE)),
    [](const ::testing::TestParamInfo<std::tuple<bool, mpiv_p2p_single_copy_t>> &info) {
        return (std::get<0>(info.param) ? std::string("serialized") : std::string("multiple")) +
               "_" + copy_name(std::get<1>(info.param));
    });
INSTANTIATE_TEST_SUITE_P(copies, copy_modes,
                         ::testing::Values(MPIV_P2P_SINGLE_COPY_AUTO, MPIV_P2P_SINGLE_COPY_NONE),
                         [](const ::testing::TestParamInfo<mpiv_p2p_single_copy_t> &info) {
                             return copy_name(info.param);
                         });

} // namespace
