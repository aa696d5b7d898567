// Tests of match::private_comm, the lock-free matching of one endpoint: random sequences
// of posts, arrivals, probes, mprobes and cancels against reference_matcher (arrival order
// is sending order, as the endpoint's single queue guarantees), and the edge cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "matching/private_comm.hpp"
#include "test/gtest/matching/reference_matcher.hpp"

namespace {

using mpiv::status;
using mpiv::match::envelope;
using mpiv::match::k_any_source;
using mpiv::match::k_any_tag;
using mpiv::match::match_list;
using mpiv::match::msg_node;
using mpiv::match::private_comm;
using mpiv::match::recv_node;
using mpiv::test::reference_matcher;

constexpr std::int32_t k_sources = 4;
constexpr std::int32_t k_tags[] = {0, 1, 2, -2};

std::unique_ptr<private_comm> make(unsigned assertions = 0)
{
    std::unique_ptr<private_comm> c;
    EXPECT_EQ(private_comm::create({7, k_sources, assertions}, c), status::ok);
    return c;
}

envelope env_of(std::int32_t source, std::int32_t tag, std::size_t size = 0)
{
    envelope e;
    e.source = source;
    e.tag = tag;
    e.size = size;
    e.ordered = false;
    return e;
}

void run_random(unsigned seed, int ops)
{
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto c = make();
    reference_matcher ref(false); // matched in arrival order
    std::mt19937 rng(seed);
    const auto n = static_cast<std::size_t>(ops);
    std::unique_ptr<recv_node[]> recvs(new recv_node[n]);
    std::unique_ptr<msg_node[]> msgs(new msg_node[n]);
    std::vector<envelope> env(n);
    std::vector<int> posted;
    int n_recv = 0, n_msg = 0;
    const auto pattern = [&](std::int32_t &source, std::int32_t &tag) {
        source = rng() % 4 == 0 ? k_any_source : static_cast<std::int32_t>(rng() % k_sources);
        tag = rng() % 5 == 0 ? k_any_tag : k_tags[rng() % 4];
    };
    const auto msg_id = [&](const msg_node *m) { return static_cast<int>(m - msgs.get()); };
    for (int op = 0; op < ops && !::testing::Test::HasFailure(); ++op) {
        const unsigned what = rng() % 100;
        std::int32_t source = 0, tag = 0;
        pattern(source, tag);
        if (what < 35 && n_recv < ops) {
            const int id = n_recv++;
            recv_node &r = recvs[static_cast<std::size_t>(id)];
            const status st = c->post(r, source, tag);
            const std::optional<int> expect = ref.post(id, source, tag);
            if (expect.has_value()) {
                ASSERT_EQ(st, status::ok) << "receive " << id;
                EXPECT_EQ(msg_id(r.matched_msg()), *expect);
                EXPECT_EQ(r.matched_envelope().size, env[static_cast<std::size_t>(*expect)].size);
            } else {
                ASSERT_EQ(st, status::inprogress) << "receive " << id;
                posted.push_back(id);
            }
        } else if (what < 70 && n_msg < ops) {
            const int id = n_msg++;
            env[static_cast<std::size_t>(id)] =
                env_of(static_cast<std::int32_t>(rng() % k_sources), k_tags[rng() % 4],
                       static_cast<std::size_t>(id));
            match_list matched;
            ASSERT_EQ(c->arrive(msgs[static_cast<std::size_t>(id)], env[static_cast<std::size_t>(id)],
                                matched),
                      status::ok);
            std::vector<std::pair<int, int>> got;
            while (msg_node *m = matched.pop()) {
                got.emplace_back(msg_id(m), static_cast<int>(m->matched_recv() - recvs.get()));
            }
            EXPECT_EQ(got, ref.arrive(id, env[static_cast<std::size_t>(id)]));
        } else if (what < 80) {
            envelope e;
            const std::optional<envelope> expect = ref.probe(source, tag);
            ASSERT_EQ(c->probe(source, tag, e), expect ? status::ok : status::not_found);
            if (expect) {
                EXPECT_EQ(e.size, expect->size);
            }
        } else if (what < 88) {
            msg_node *m = nullptr;
            const std::optional<int> expect = ref.mprobe(source, tag);
            ASSERT_EQ(c->mprobe(source, tag, m), expect ? status::ok : status::not_found);
            if (expect) {
                EXPECT_EQ(msg_id(m), *expect);
                EXPECT_EQ(m->matched_recv(), nullptr);
            }
        } else if (!posted.empty()) {
            const std::size_t i = rng() % posted.size();
            const int id = posted[i];
            posted.erase(posted.begin() + static_cast<std::ptrdiff_t>(i));
            EXPECT_EQ(c->cancel(recvs[static_cast<std::size_t>(id)]),
                      ref.cancel(id) ? status::ok : status::not_found);
        }
    }
    // What is left: the unexpected messages go to release_messages(), once each.
    std::vector<int> left;
    c->release_messages([&](msg_node &m) { left.push_back(msg_id(&m)); });
    EXPECT_EQ(left.size(), ref.unexpected_count());
    EXPECT_FALSE(c->holds_messages());
}

TEST(private_comm, random_sequences_match_the_reference)
{
    for (unsigned seed = 1; seed <= 40; ++seed) {
        run_random(seed, 400);
    }
}

// MPI: an arrival takes the earliest-posted receive that accepts it, wildcard or not.
TEST(private_comm, earliest_posted_receive_wins_across_wildcards)
{
    auto c = make();
    recv_node wild, specific;
    ASSERT_EQ(c->post(wild, k_any_source, 3), status::inprogress);
    ASSERT_EQ(c->post(specific, 1, 3), status::inprogress);
    msg_node a, b;
    match_list m1, m2;
    ASSERT_EQ(c->arrive(a, env_of(1, 3), m1), status::ok);
    EXPECT_EQ(m1.pop()->matched_recv(), &wild);
    ASSERT_EQ(c->arrive(b, env_of(1, 3), m2), status::ok);
    EXPECT_EQ(m2.pop()->matched_recv(), &specific);
    EXPECT_EQ(wild.matched_msg(), &a);
    EXPECT_EQ(specific.matched_msg(), &b);
}

// MPI_ANY_TAG never matches a negative (internal) tag; a message of one sender is taken
// in arrival order.
TEST(private_comm, any_tag_skips_negative_tags_and_order_is_kept)
{
    auto c = make();
    msg_node internal, first, second;
    match_list none;
    ASSERT_EQ(c->arrive(internal, env_of(2, -5), none), status::ok);
    ASSERT_EQ(c->arrive(first, env_of(2, 1, 10), none), status::ok);
    ASSERT_EQ(c->arrive(second, env_of(2, 1, 20), none), status::ok);
    EXPECT_TRUE(none.empty());
    envelope e;
    ASSERT_EQ(c->probe(k_any_source, k_any_tag, e), status::ok);
    EXPECT_EQ(e.tag, 1);
    EXPECT_EQ(e.size, 10u);
    recv_node r1, r2, r3;
    ASSERT_EQ(c->post(r1, 2, k_any_tag), status::ok);
    EXPECT_EQ(r1.matched_msg(), &first);
    ASSERT_EQ(c->post(r2, k_any_source, 1), status::ok);
    EXPECT_EQ(r2.matched_msg(), &second);
    ASSERT_EQ(c->post(r3, 2, -5), status::ok);
    EXPECT_EQ(r3.matched_msg(), &internal);
    EXPECT_FALSE(c->holds_messages());
}

TEST(private_comm, cancel_and_bad_patterns)
{
    auto c = make();
    recv_node r;
    ASSERT_EQ(c->post(r, 0, 0), status::inprogress);
    EXPECT_EQ(c->cancel(r), status::ok);
    EXPECT_EQ(c->cancel(r), status::not_found); // cancelled already
    recv_node bad;
    EXPECT_EQ(c->post(bad, k_sources, 0), status::invalid_arg);
    EXPECT_EQ(c->post(bad, -2, 0), status::invalid_arg);
    msg_node m;
    match_list l;
    EXPECT_EQ(c->arrive(m, env_of(k_sources, 0), l), status::invalid_arg);
    EXPECT_EQ(c->arrive(m, env_of(0, k_any_tag), l), status::invalid_arg);
    std::uint32_t seq = 1;
    bool ordered = true;
    ASSERT_EQ(c->next_send_seq(3, seq, ordered), status::ok);
    EXPECT_EQ(seq, 0u);
    EXPECT_FALSE(ordered); // the queue keeps the order
    EXPECT_EQ(c->next_send_seq(k_sources, seq, ordered), status::invalid_arg);
    std::unique_ptr<private_comm> none;
    EXPECT_EQ(private_comm::create({1, 0, 0}, none), status::invalid_arg);
    EXPECT_EQ(private_comm::create({1, 2, 1U << 9}, none), status::invalid_arg);
}

// MPI-4 assertions: a wildcard they exclude is refused, and asserting while such a
// wildcard is posted is refused without changing anything.
TEST(private_comm, assertions)
{
    auto c = make();
    recv_node wild;
    ASSERT_EQ(c->post(wild, k_any_source, 0), status::inprogress);
    EXPECT_EQ(c->set_assertions(mpiv::match::k_assert_no_any_source), status::busy);
    EXPECT_EQ(c->assertions(), 0u);
    ASSERT_EQ(c->cancel(wild), status::ok);
    ASSERT_EQ(c->set_assertions(mpiv::match::k_assert_no_any_source), status::ok);
    recv_node r;
    EXPECT_EQ(c->post(r, k_any_source, 0), status::invalid_arg);
    EXPECT_EQ(c->post(r, 0, k_any_tag), status::inprogress);
    EXPECT_EQ(c->set_assertions(1U << 9), status::invalid_arg);
}

} // namespace
