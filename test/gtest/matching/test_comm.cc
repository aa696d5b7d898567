// One test per MPI matching rule of match::basic_comm, for every TLP lock type.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "base/lock/tlp.hpp"
#include "matching/comm.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/matching/comm_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::match::envelope;
using mpiv::match::k_any_source;
using mpiv::match::k_any_tag;
using mpiv::match::k_assert_allow_overtaking;
using mpiv::match::k_assert_no_any_source;
using mpiv::match::k_assert_no_any_tag;
using mpiv::match::match_list;
using mpiv::match::msg_node;
using mpiv::match::recv_node;

constexpr unsigned k_all_assertions =
    k_assert_no_any_source | k_assert_no_any_tag | k_assert_allow_overtaking;

template <class Lock>
class match_comm : public mpiv::test::comm_fixture<Lock> {};

using lock_types = ::testing::Types<mpiv::base::p_mcs_mcs_lock, mpiv::base::p_hmcs_mcs_lock>;
TYPED_TEST_SUITE(match_comm, lock_types);

TYPED_TEST(match_comm, messages_of_one_key_match_in_send_order)
{
    auto c = this->make();
    msg_node m[3];
    recv_node r[3];
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(this->arrive(*c, m[i], 1, 4, i).empty()); // unexpected
    }
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(c->post(r[i], 1, 4), status::ok);
        EXPECT_EQ(r[i].matched_msg(), &m[i]);
        EXPECT_EQ(m[i].matched_recv(), &r[i]);
    }
}

TYPED_TEST(match_comm, receives_of_one_key_match_in_post_order)
{
    auto c = this->make();
    msg_node m[3];
    recv_node r[3];
    for (auto &x : r) {
        EXPECT_EQ(c->post(x, 2, 0), status::inprogress);
    }
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(this->arrive(*c, m[i], 2, 0, i), std::vector<msg_node *>{&m[i]});
        EXPECT_EQ(m[i].matched_recv(), &r[i]);
    }
}

TYPED_TEST(match_comm, matched_envelope_is_the_status)
{
    auto c = this->make();
    recv_node r;
    msg_node m;
    EXPECT_EQ(c->post(r, k_any_source, k_any_tag), status::inprogress);
    EXPECT_EQ(this->arrive(*c, m, 5, 77, 0, 4096).size(), 1U);
    EXPECT_EQ(r.matched_envelope().source, 5);
    EXPECT_EQ(r.matched_envelope().tag, 77);
    EXPECT_EQ(r.matched_envelope().seq, 0U);
    EXPECT_EQ(r.matched_envelope().size, 4096U);
    EXPECT_EQ(m.env().size, 4096U);
}

TYPED_TEST(match_comm, early_arrival_waits_for_its_predecessors)
{
    auto c = this->make();
    recv_node r[3];
    msg_node m[3];
    for (auto &x : r) {
        EXPECT_EQ(c->post(x, 3, 9), status::inprogress);
    }
    EXPECT_TRUE(this->arrive(*c, m[2], 3, 9, 2).empty());
    EXPECT_TRUE(this->arrive(*c, m[1], 3, 9, 1).empty());
    EXPECT_EQ(this->arrive(*c, m[0], 3, 9, 0), (std::vector<msg_node *>{&m[0], &m[1], &m[2]}));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(r[i].matched_msg(), &m[i]);
    }
}

TYPED_TEST(match_comm, held_messages_are_invisible_until_in_sequence)
{
    auto c = this->make();
    msg_node m0, m1;
    envelope e;
    msg_node *taken = nullptr;
    EXPECT_TRUE(this->arrive(*c, m1, 0, 1, 1).empty());
    EXPECT_EQ(c->probe(0, 1, e), status::not_found);
    EXPECT_EQ(c->probe(k_any_source, k_any_tag, e), status::not_found);
    EXPECT_EQ(c->mprobe(0, 1, taken), status::not_found);
    EXPECT_TRUE(this->arrive(*c, m0, 0, 1, 0).empty()); // both become unexpected
    ASSERT_EQ(c->probe(0, 1, e), status::ok);
    EXPECT_EQ(e.seq, 0U);
    recv_node r0, r1;
    EXPECT_EQ(c->post(r0, 0, 1), status::ok);
    EXPECT_EQ(c->post(r1, 0, 1), status::ok);
    EXPECT_EQ(r0.matched_msg(), &m0);
    EXPECT_EQ(r1.matched_msg(), &m1);
}

TYPED_TEST(match_comm, sequence_numbers_are_per_peer)
{
    auto c = this->make();
    recv_node ra, rb;
    msg_node a1, b0;
    EXPECT_EQ(c->post(ra, 0, 5), status::inprogress);
    EXPECT_EQ(c->post(rb, 1, 5), status::inprogress);
    EXPECT_TRUE(this->arrive(*c, a1, 0, 5, 1).empty()); // peer 0 waits for its seq 0
    EXPECT_EQ(this->arrive(*c, b0, 1, 5, 0), std::vector<msg_node *>{&b0});
    EXPECT_EQ(rb.matched_msg(), &b0);
    EXPECT_EQ(ra.matched_msg(), nullptr);
}

TYPED_TEST(match_comm, wildcard_posted_first_wins_over_specific)
{
    for (auto pattern :
         {std::pair<int, int>{k_any_source, 6}, {1, k_any_tag}, {k_any_source, k_any_tag}}) {
        auto c = this->make();
        recv_node w, s;
        msg_node m0, m1;
        EXPECT_EQ(c->post(w, pattern.first, pattern.second), status::inprogress);
        EXPECT_EQ(c->post(s, 1, 6), status::inprogress);
        EXPECT_EQ(this->arrive(*c, m0, 1, 6, 0).size(), 1U);
        EXPECT_EQ(w.matched_msg(), &m0);
        EXPECT_EQ(this->arrive(*c, m1, 1, 6, 1).size(), 1U);
        EXPECT_EQ(s.matched_msg(), &m1);
    }
}

TYPED_TEST(match_comm, specific_posted_first_wins_over_wildcard)
{
    for (auto pattern :
         {std::pair<int, int>{k_any_source, 6}, {1, k_any_tag}, {k_any_source, k_any_tag}}) {
        auto c = this->make();
        recv_node w, s;
        msg_node m0, m1;
        EXPECT_EQ(c->post(s, 1, 6), status::inprogress);
        EXPECT_EQ(c->post(w, pattern.first, pattern.second), status::inprogress);
        EXPECT_EQ(this->arrive(*c, m0, 1, 6, 0).size(), 1U);
        EXPECT_EQ(s.matched_msg(), &m0);
        EXPECT_EQ(this->arrive(*c, m1, 1, 6, 1).size(), 1U);
        EXPECT_EQ(w.matched_msg(), &m1);
    }
}

TYPED_TEST(match_comm, wildcards_match_among_themselves_in_post_order)
{
    auto c = this->make();
    recv_node w0, w1, w2;
    msg_node m0, m1, m2;
    EXPECT_EQ(c->post(w0, k_any_source, 3), status::inprogress);
    EXPECT_EQ(c->post(w1, k_any_source, k_any_tag), status::inprogress);
    EXPECT_EQ(c->post(w2, 4, k_any_tag), status::inprogress);
    EXPECT_EQ(this->arrive(*c, m0, 4, 8, 0).size(), 1U); // w0 rejects tag 8
    EXPECT_EQ(w1.matched_msg(), &m0);
    EXPECT_EQ(this->arrive(*c, m1, 4, 3, 1).size(), 1U);
    EXPECT_EQ(w0.matched_msg(), &m1);
    EXPECT_EQ(this->arrive(*c, m2, 4, 3, 2).size(), 1U);
    EXPECT_EQ(w2.matched_msg(), &m2);
}

TYPED_TEST(match_comm, wildcard_receive_takes_the_earliest_unexpected)
{
    auto c = this->make();
    msg_node m_a, m_b, m_c;
    EXPECT_TRUE(this->arrive(*c, m_a, 2, 7, 0).empty());
    EXPECT_TRUE(this->arrive(*c, m_b, 1, 7, 0).empty());
    EXPECT_TRUE(this->arrive(*c, m_c, 2, 8, 1).empty());
    recv_node r1, r2, r3;
    EXPECT_EQ(c->post(r1, 2, k_any_tag), status::ok);
    EXPECT_EQ(r1.matched_msg(), &m_a);
    EXPECT_EQ(c->post(r2, k_any_source, 8), status::ok);
    EXPECT_EQ(r2.matched_msg(), &m_c);
    EXPECT_EQ(c->post(r3, k_any_source, k_any_tag), status::ok);
    EXPECT_EQ(r3.matched_msg(), &m_b);
}

TYPED_TEST(match_comm, any_tag_never_matches_a_negative_tag)
{
    auto c = this->make();
    msg_node neg, pos;
    envelope e;
    EXPECT_TRUE(this->arrive(*c, neg, 2, -5, 0).empty());
    recv_node any_tag, any_any, exact;
    EXPECT_EQ(c->post(any_tag, 2, k_any_tag), status::inprogress);
    EXPECT_EQ(c->post(any_any, k_any_source, k_any_tag), status::inprogress);
    EXPECT_EQ(c->probe(2, k_any_tag, e), status::not_found);
    EXPECT_EQ(c->probe(k_any_source, k_any_tag, e), status::not_found);
    ASSERT_EQ(c->probe(k_any_source, -5, e), status::ok);
    EXPECT_EQ(e.tag, -5);
    EXPECT_EQ(this->arrive(*c, pos, 2, 0, 1).size(), 1U);
    EXPECT_EQ(any_tag.matched_msg(), &pos);
    EXPECT_EQ(c->post(exact, 2, -5), status::ok);
    EXPECT_EQ(exact.matched_msg(), &neg);
    EXPECT_EQ(c->cancel(any_any), status::ok);
}

TYPED_TEST(match_comm, probe_does_not_consume)
{
    auto c = this->make();
    envelope e;
    EXPECT_EQ(c->probe(1, 2, e), status::not_found);
    msg_node m;
    EXPECT_TRUE(this->arrive(*c, m, 1, 2, 0, 12).empty());
    for (int i = 0; i < 2; ++i) {
        envelope specific, wild;
        ASSERT_EQ(c->probe(1, 2, specific), status::ok);
        ASSERT_EQ(c->probe(k_any_source, k_any_tag, wild), status::ok);
        EXPECT_EQ(specific.source, 1);
        EXPECT_EQ(specific.tag, 2);
        EXPECT_EQ(specific.size, 12U);
        EXPECT_EQ(wild.seq, specific.seq);
    }
    recv_node r;
    EXPECT_EQ(c->post(r, 1, 2), status::ok);
    EXPECT_EQ(r.matched_msg(), &m);
    EXPECT_EQ(c->probe(1, 2, e), status::not_found);
}

TYPED_TEST(match_comm, mprobe_takes_the_message_out)
{
    auto c = this->make();
    msg_node m0, m1, m2;
    msg_node *taken = nullptr;
    EXPECT_TRUE(this->arrive(*c, m0, 1, 2, 0).empty());
    EXPECT_TRUE(this->arrive(*c, m1, 1, 2, 1).empty());
    EXPECT_TRUE(this->arrive(*c, m2, 3, 2, 0).empty());
    ASSERT_EQ(c->mprobe(1, 2, taken), status::ok);
    EXPECT_EQ(taken, &m0);
    EXPECT_EQ(taken->matched_recv(), nullptr);
    ASSERT_EQ(c->mprobe(k_any_source, 2, taken), status::ok);
    EXPECT_EQ(taken, &m1);
    recv_node r;
    EXPECT_EQ(c->post(r, k_any_source, k_any_tag), status::ok);
    EXPECT_EQ(r.matched_msg(), &m2);
    EXPECT_EQ(c->mprobe(k_any_source, k_any_tag, taken), status::not_found);
    EXPECT_EQ(c->mprobe(1, 2, taken), status::not_found);
    EXPECT_EQ(taken, &m1); // untouched on failure
}

TYPED_TEST(match_comm, cancel_before_match_removes_the_receive)
{
    for (auto pattern : {std::pair<int, int>{4, 4}, {k_any_source, 4}, {4, k_any_tag}}) {
        auto c = this->make();
        recv_node r;
        msg_node m;
        envelope e;
        EXPECT_EQ(c->post(r, pattern.first, pattern.second), status::inprogress);
        EXPECT_EQ(c->cancel(r), status::ok);
        EXPECT_EQ(c->cancel(r), status::not_found);
        EXPECT_TRUE(this->arrive(*c, m, 4, 4, 0).empty());
        EXPECT_EQ(r.matched_msg(), nullptr);
        EXPECT_EQ(c->probe(4, 4, e), status::ok);
    }
}

TYPED_TEST(match_comm, cancel_after_match_is_not_found)
{
    for (auto pattern : {std::pair<int, int>{4, 4}, {k_any_source, 4}}) {
        auto c = this->make();
        recv_node r;
        msg_node m;
        EXPECT_EQ(c->post(r, pattern.first, pattern.second), status::inprogress);
        EXPECT_EQ(this->arrive(*c, m, 4, 4, 0).size(), 1U);
        EXPECT_EQ(c->cancel(r), status::not_found);
        EXPECT_EQ(r.matched_msg(), &m);
    }
    auto c = this->make();
    recv_node never_posted;
    EXPECT_EQ(c->cancel(never_posted), status::not_found);
}

TYPED_TEST(match_comm, cancel_in_the_middle_keeps_the_order_of_the_rest)
{
    auto c = this->make();
    recv_node r[3], w[3];
    msg_node m[4];
    for (auto &x : r) {
        EXPECT_EQ(c->post(x, 0, 0), status::inprogress);
    }
    for (auto &x : w) {
        EXPECT_EQ(c->post(x, k_any_source, 1), status::inprogress);
    }
    EXPECT_EQ(c->cancel(r[1]), status::ok);
    EXPECT_EQ(c->cancel(w[1]), status::ok);
    EXPECT_EQ(this->arrive(*c, m[0], 0, 0, 0).size(), 1U);
    EXPECT_EQ(this->arrive(*c, m[1], 0, 0, 1).size(), 1U);
    EXPECT_EQ(this->arrive(*c, m[2], 0, 1, 2).size(), 1U);
    EXPECT_EQ(this->arrive(*c, m[3], 0, 1, 3).size(), 1U);
    EXPECT_EQ(r[0].matched_msg(), &m[0]);
    EXPECT_EQ(r[2].matched_msg(), &m[1]);
    EXPECT_EQ(w[0].matched_msg(), &m[2]);
    EXPECT_EQ(w[2].matched_msg(), &m[3]);
}

TYPED_TEST(match_comm, nodes_can_be_reposted_after_a_match)
{
    auto c = this->make();
    recv_node r;
    msg_node m;
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(c->post(r, 1, 1), status::inprogress);
        EXPECT_EQ(this->arrive(*c, m, 1, 1, i).size(), 1U);
        EXPECT_EQ(r.matched_msg(), &m);
        EXPECT_EQ(r.matched_envelope().seq, i);
    }
}

TYPED_TEST(match_comm, communicators_do_not_see_each_others_traffic)
{
    auto a = this->make(8, 0, 10);
    auto b = this->make(8, k_all_assertions, 11);
    recv_node ra, rb;
    msg_node ma, mb;
    EXPECT_EQ(a->post(ra, 1, 1), status::inprogress);
    EXPECT_TRUE(this->arrive(*b, mb, 1, 1, 0).empty());
    EXPECT_EQ(ra.matched_msg(), nullptr);
    EXPECT_EQ(b->post(rb, 1, 1), status::ok);
    EXPECT_EQ(rb.matched_msg(), &mb);
    EXPECT_EQ(this->arrive(*a, ma, 1, 1, 0).size(), 1U);
    EXPECT_EQ(ra.matched_msg(), &ma);
}

TYPED_TEST(match_comm, all_assertions_give_the_pure_path)
{
    auto c = this->make(8, k_all_assertions);
    recv_node r[3], w;
    msg_node m[3], *taken = nullptr;
    envelope e;
    EXPECT_EQ(c->post(w, k_any_source, 1), status::invalid_arg);
    EXPECT_EQ(c->post(w, 1, k_any_tag), status::invalid_arg);
    EXPECT_EQ(c->probe(k_any_source, 1, e), status::invalid_arg);
    EXPECT_EQ(c->mprobe(1, k_any_tag, taken), status::invalid_arg);
    // No sequence numbers: arrivals match in arrival order whatever they carry.
    for (auto &x : r) {
        EXPECT_EQ(c->post(x, 1, 1), status::inprogress);
    }
    EXPECT_EQ(this->arrive(*c, m[2], 1, 1, 2), std::vector<msg_node *>{&m[2]});
    EXPECT_EQ(this->arrive(*c, m[0], 1, 1, 0), std::vector<msg_node *>{&m[0]});
    EXPECT_EQ(r[0].matched_msg(), &m[2]);
    EXPECT_EQ(r[1].matched_msg(), &m[0]);
    EXPECT_EQ(c->cancel(r[2]), status::ok);
    EXPECT_TRUE(this->arrive(*c, m[1], 1, 1, 7).empty());
    ASSERT_EQ(c->probe(1, 1, e), status::ok);
    EXPECT_EQ(e.seq, 7U);
    ASSERT_EQ(c->mprobe(1, 1, taken), status::ok);
    EXPECT_EQ(taken, &m[1]);
    std::uint32_t seq = 99;
    bool ordered = true;
    EXPECT_EQ(c->next_send_seq(3, seq, ordered), status::ok);
    EXPECT_EQ(seq, 0U);
    EXPECT_FALSE(ordered);
}

TYPED_TEST(match_comm, no_wildcards_but_ordered_still_holds_early_arrivals)
{
    auto c = this->make(8, k_assert_no_any_source | k_assert_no_any_tag);
    recv_node r0, r1;
    msg_node m0, m1;
    EXPECT_EQ(c->post(r0, 2, 2), status::inprogress);
    EXPECT_EQ(c->post(r1, 2, 2), status::inprogress);
    EXPECT_TRUE(this->arrive(*c, m1, 2, 2, 1).empty());
    EXPECT_EQ(this->arrive(*c, m0, 2, 2, 0), (std::vector<msg_node *>{&m0, &m1}));
    EXPECT_EQ(r0.matched_msg(), &m0);
    EXPECT_EQ(r1.matched_msg(), &m1);
}

TYPED_TEST(match_comm, overtaking_allowed_keeps_wildcards)
{
    auto c = this->make(8, k_assert_allow_overtaking);
    recv_node w, s;
    msg_node m1, m0;
    EXPECT_EQ(c->post(w, k_any_source, k_any_tag), status::inprogress);
    EXPECT_EQ(c->post(s, 1, 1), status::inprogress);
    EXPECT_EQ(this->arrive(*c, m1, 1, 1, 1), std::vector<msg_node *>{&m1});
    EXPECT_EQ(w.matched_msg(), &m1);
    EXPECT_EQ(this->arrive(*c, m0, 1, 1, 0), std::vector<msg_node *>{&m0});
    EXPECT_EQ(s.matched_msg(), &m0);
}

TYPED_TEST(match_comm, one_assertion_excludes_one_wildcard)
{
    auto no_source = this->make(8, k_assert_no_any_source);
    auto no_tag = this->make(8, k_assert_no_any_tag, 4);
    recv_node a, b, c, d;
    EXPECT_EQ(no_source->post(a, k_any_source, 1), status::invalid_arg);
    EXPECT_EQ(no_source->post(b, 1, k_any_tag), status::inprogress);
    EXPECT_EQ(no_tag->post(c, 1, k_any_tag), status::invalid_arg);
    EXPECT_EQ(no_tag->post(d, k_any_source, 1), status::inprogress);
    EXPECT_EQ(no_source->cancel(b), status::ok);
    EXPECT_EQ(no_tag->cancel(d), status::ok);
}

TYPED_TEST(match_comm, invalid_arguments_are_rejected)
{
    using comm_type = typename TestFixture::comm_type;
    std::unique_ptr<comm_type> bad;
    EXPECT_EQ(comm_type::create(*this->table_, {1, 0, 0}, bad), status::invalid_arg);
    EXPECT_EQ(comm_type::create(*this->table_, {1, 4, 1U << 5}, bad), status::invalid_arg);
    EXPECT_EQ(bad, nullptr);
    auto c = this->make(4);
    recv_node r;
    msg_node m;
    match_list matched;
    envelope e;
    EXPECT_EQ(c->post(r, 4, 0), status::invalid_arg);
    EXPECT_EQ(c->post(r, -2, 0), status::invalid_arg);
    EXPECT_EQ(c->probe(4, 0, e), status::invalid_arg);
    EXPECT_EQ(c->arrive(m, envelope{4, 0, 0, 0}, matched), status::invalid_arg);
    EXPECT_EQ(c->arrive(m, envelope{-1, 0, 0, 0}, matched), status::invalid_arg);
    EXPECT_EQ(c->arrive(m, envelope{0, k_any_tag, 0, 0}, matched), status::invalid_arg);
    std::uint32_t seq = 0;
    bool ordered = false;
    EXPECT_EQ(c->next_send_seq(4, seq, ordered), status::invalid_arg);
    EXPECT_EQ(c->set_assertions(1U << 5), status::invalid_arg);
    EXPECT_TRUE(matched.empty());
}

TYPED_TEST(match_comm, send_sequence_numbers_are_per_destination_and_dense)
{
    auto c = this->make(4);
    constexpr int threads = 4;
    const int per_thread = static_cast<int>(mpiv::test::iterations(20000));
    std::vector<std::vector<std::uint32_t>> drawn(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                std::uint32_t seq = 0;
                bool ordered = false;
                ASSERT_EQ(c->next_send_seq(1, seq, ordered), status::ok);
                ASSERT_TRUE(ordered);
                drawn[static_cast<std::size_t>(t)].push_back(seq);
            }
        });
    }
    for (auto &th : pool) {
        th.join();
    }
    std::vector<std::uint32_t> all;
    for (auto &v : drawn) {
        EXPECT_TRUE(std::is_sorted(v.begin(), v.end())); // each thread sees them grow
        all.insert(all.end(), v.begin(), v.end());
    }
    std::sort(all.begin(), all.end());
    for (std::size_t i = 0; i < all.size(); ++i) {
        ASSERT_EQ(all[i], i);
    }
    std::uint32_t seq = 99;
    bool ordered = false;
    EXPECT_EQ(c->next_send_seq(2, seq, ordered), status::ok);
    EXPECT_EQ(seq, 0U);
}

// ---------------------------------------------------------------- set_assertions

constexpr unsigned k_no_wildcards = k_assert_no_any_source | k_assert_no_any_tag;

TYPED_TEST(match_comm, asserting_no_wildcards_keeps_the_unexpected_messages)
{
    auto c = this->make();
    msg_node m0, m1, m2;
    EXPECT_TRUE(this->arrive(*c, m0, 1, 5, 0).empty());
    EXPECT_TRUE(this->arrive(*c, m1, 2, 6, 0).empty());
    ASSERT_EQ(c->set_assertions(k_no_wildcards), status::ok);
    EXPECT_EQ(c->assertions(), k_no_wildcards);
    recv_node w, r0, r1, r2;
    envelope e;
    EXPECT_EQ(c->post(w, k_any_source, 5), status::invalid_arg);
    EXPECT_EQ(c->probe(1, k_any_tag, e), status::invalid_arg);
    ASSERT_EQ(c->probe(2, 6, e), status::ok);
    EXPECT_EQ(e.source, 2);
    EXPECT_EQ(c->post(r1, 2, 6), status::ok);
    EXPECT_EQ(r1.matched_msg(), &m1);
    EXPECT_EQ(c->post(r0, 1, 5), status::ok);
    EXPECT_EQ(r0.matched_msg(), &m0);
    EXPECT_TRUE(this->arrive(*c, m2, 1, 5, 1).empty()); // unexpected in no-wild mode
    ASSERT_EQ(c->set_assertions(0), status::ok);
    EXPECT_EQ(c->post(w, k_any_source, k_any_tag), status::ok); // found by the rebuilt list
    EXPECT_EQ(w.matched_msg(), &m2);
    EXPECT_EQ(c->probe(k_any_source, k_any_tag, e), status::not_found);
    EXPECT_EQ(c->post(r2, 1, 5), status::inprogress);
    EXPECT_EQ(c->cancel(r2), status::ok);
}

TYPED_TEST(match_comm, no_wildcard_assertion_is_refused_while_a_wildcard_is_posted)
{
    auto c = this->make();
    recv_node w;
    EXPECT_EQ(c->post(w, k_any_source, 3), status::inprogress);
    EXPECT_EQ(c->set_assertions(k_no_wildcards), status::busy);
    EXPECT_EQ(c->assertions(), 0U);
    msg_node m;
    EXPECT_EQ(this->arrive(*c, m, 6, 3, 0), std::vector<msg_node *>{&m});
    EXPECT_EQ(w.matched_msg(), &m);
    EXPECT_EQ(c->set_assertions(k_no_wildcards), status::ok); // none posted any more
}

TYPED_TEST(match_comm, allowing_wildcards_again_keeps_each_senders_order)
{
    auto c = this->make(8, k_no_wildcards);
    // Sender 1's messages over four tags, one sent unordered, and one of sender 2; all
    // unexpected while no wildcard is allowed (no unexpected list is kept then).
    msg_node m[4], u, other;
    const std::int32_t tags[4] = {3, 1, 2, 1};
    EXPECT_TRUE(this->arrive(*c, m[0], 1, tags[0], 0).empty());
    EXPECT_TRUE(this->arrive_as(*c, u, envelope{1, 7, 0, 0, false}).empty());
    EXPECT_TRUE(this->arrive(*c, other, 2, 9, 0).empty());
    EXPECT_TRUE(this->arrive(*c, m[2], 1, tags[2], 2).empty()); // held: 1 is missing
    EXPECT_TRUE(this->arrive(*c, m[1], 1, tags[1], 1).empty()); // 1 and 2 unexpected
    EXPECT_TRUE(this->arrive(*c, m[3], 1, tags[3], 3).empty());
    ASSERT_EQ(c->set_assertions(0), status::ok);
    std::vector<msg_node *> got;
    recv_node r[5];
    for (auto &x : r) {
        ASSERT_EQ(c->post(x, 1, k_any_tag), status::ok);
        got.push_back(x.matched_msg());
    }
    got.erase(std::find(got.begin(), got.end(), &u)); // unordered: any place
    EXPECT_EQ(got, (std::vector<msg_node *>{&m[0], &m[1], &m[2], &m[3]}));
    recv_node any;
    ASSERT_EQ(c->post(any, k_any_source, k_any_tag), status::ok);
    EXPECT_EQ(any.matched_msg(), &other);
}

TYPED_TEST(match_comm, allowing_wildcards_again_finds_chained_queues)
{
    // One bucket: the fourth key on is chained through the overflow links.
    using comm_type = typename TestFixture::comm_type;
    std::unique_ptr<mpiv::match::table> one;
    ASSERT_EQ(mpiv::match::table::create(1, one), status::ok);
    std::unique_ptr<comm_type> c;
    ASSERT_EQ(comm_type::create(*one, {3, 4, k_no_wildcards}, c), status::ok);
    constexpr int n = 8;
    msg_node m[n];
    for (int i = 0; i < n; ++i) { // tags 7, 6, ..., 0: each message its own key
        EXPECT_TRUE(this->arrive(*c, m[i], 2, n - 1 - i, static_cast<std::uint32_t>(i)).empty());
    }
    ASSERT_EQ(c->set_assertions(0), status::ok);
    for (int i = 0; i < n; ++i) {
        recv_node r;
        ASSERT_EQ(c->post(r, k_any_source, k_any_tag), status::ok) << i;
        EXPECT_EQ(r.matched_msg(), &m[i]) << i;
    }
}

TYPED_TEST(match_comm, each_message_says_whether_it_may_overtake)
{
    auto c = this->make();
    std::uint32_t seq = 0;
    bool ordered = false;
    ASSERT_EQ(c->next_send_seq(2, seq, ordered), status::ok);
    EXPECT_TRUE(ordered);
    EXPECT_EQ(seq, 0U);
    ASSERT_EQ(c->set_assertions(k_assert_allow_overtaking), status::ok);
    ASSERT_EQ(c->next_send_seq(2, seq, ordered), status::ok);
    EXPECT_FALSE(ordered);
    ASSERT_EQ(c->set_assertions(0), status::ok);
    ASSERT_EQ(c->next_send_seq(2, seq, ordered), status::ok);
    EXPECT_TRUE(ordered);
    EXPECT_EQ(seq, 1U); // unordered sends draw no number
    // The receiver follows each message, whatever its own assertions say.
    msg_node early, unordered, first;
    envelope e;
    EXPECT_TRUE(this->arrive(*c, early, 4, 1, 1).empty()); // held for number 0
    EXPECT_EQ(c->probe(4, 1, e), status::not_found);
    EXPECT_TRUE(this->arrive_as(*c, unordered, envelope{4, 1, 0, 0, false}).empty());
    ASSERT_EQ(c->probe(4, 1, e), status::ok);
    EXPECT_FALSE(e.ordered);
    EXPECT_TRUE(this->arrive(*c, first, 4, 1, 0).empty());
    recv_node r[3];
    for (auto &x : r) {
        ASSERT_EQ(c->post(x, 4, 1), status::ok);
    }
    EXPECT_EQ(r[0].matched_msg(), &unordered);
    EXPECT_EQ(r[1].matched_msg(), &first);
    EXPECT_EQ(r[2].matched_msg(), &early);
}

// Posting and arriving threads while another thread keeps changing the assertions: every
// message matches exactly one receive of its key, in send order (each sender delivers its
// own messages in order, drawing numbers as the engine does).
TYPED_TEST(match_comm, assertions_change_under_concurrent_traffic)
{
    auto c = this->make(4);
    constexpr int senders = 2;
    constexpr int tags = 3;
    const int per_key = static_cast<int>(mpiv::test::iterations(20000, 20));
    const std::size_t keys = senders * tags;
    std::vector<std::vector<msg_node>> msgs(keys);
    std::vector<std::vector<recv_node>> recvs(keys);
    for (std::size_t k = 0; k < keys; ++k) {
        msgs[k] = std::vector<msg_node>(static_cast<std::size_t>(per_key));
        recvs[k] = std::vector<recv_node>(static_cast<std::size_t>(per_key));
    }
    std::atomic<bool> done{false};
    std::vector<std::thread> pool;
    for (int s = 0; s < senders; ++s) {
        pool.emplace_back([&, s] {
            for (int i = 0; i < per_key; ++i) {
                for (int t = 0; t < tags; ++t) {
                    std::uint32_t seq = 0;
                    bool ordered = true;
                    ASSERT_EQ(c->next_send_seq(s, seq, ordered), status::ok);
                    auto &m = msgs[static_cast<std::size_t>(s * tags + t)][static_cast<std::size_t>(i)];
                    match_list matched;
                    ASSERT_EQ(c->arrive(m, envelope{s, t, seq, static_cast<std::size_t>(i), ordered},
                                        matched),
                              status::ok);
                }
            }
        });
    }
    pool.emplace_back([&] { // the poster
        for (int i = 0; i < per_key; ++i) {
            for (std::size_t k = 0; k < keys; ++k) {
                const status st = c->post(recvs[k][static_cast<std::size_t>(i)],
                                          static_cast<std::int32_t>(k / tags),
                                          static_cast<std::int32_t>(k % tags));
                ASSERT_TRUE(st == status::ok || st == status::inprogress);
            }
        }
    });
    std::thread changer([&] {
        const unsigned sets[] = {k_no_wildcards, k_assert_allow_overtaking, 0U, k_all_assertions,
                                 k_assert_no_any_tag};
        for (std::size_t n = 0; !done.load(std::memory_order_relaxed); ++n) {
            ASSERT_EQ(c->set_assertions(sets[n % 5]), status::ok);
            std::this_thread::yield();
        }
    });
    for (auto &th : pool) {
        th.join();
    }
    done.store(true, std::memory_order_relaxed);
    changer.join();
    for (std::size_t k = 0; k < keys; ++k) {
        for (int i = 0; i < per_key; ++i) {
            const recv_node &r = recvs[k][static_cast<std::size_t>(i)];
            ASSERT_EQ(r.matched_msg(), &msgs[k][static_cast<std::size_t>(i)])
                << "key " << k << " receive " << i;
        }
    }
}

} // namespace
