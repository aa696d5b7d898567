// Any-tag receives (a source, k_any_tag) of match::basic_comm: they wait in their sender's
// peer list, off the TLP lock, and keep every MPI ordering rule against specific receives,
// other wildcards, unexpected messages, cancels and changes of the assertions.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "base/lock/tlp.hpp"
#include "base/stats.hpp"
#include "matching/comm.hpp"
#include "test/gtest/matching/comm_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::base::stats::counter;
using mpiv::match::envelope;
using mpiv::match::k_any_source;
using mpiv::match::k_any_tag;
using mpiv::match::k_assert_allow_overtaking;
using mpiv::match::k_assert_no_any_source;
using mpiv::match::k_assert_no_any_tag;
using mpiv::match::msg_node;
using mpiv::match::recv_node;
namespace stats = mpiv::base::stats;

constexpr unsigned k_no_wildcards = k_assert_no_any_source | k_assert_no_any_tag;

template <class Lock>
class any_tag : public mpiv::test::comm_fixture<Lock> {};

using lock_types = ::testing::Types<mpiv::base::p_mcs_mcs_lock, mpiv::base::p_hmcs_mcs_lock>;
TYPED_TEST_SUITE(any_tag, lock_types);

TYPED_TEST(any_tag, post_and_match_take_no_tlp_lock)
{
    auto c = this->make();
    recv_node a;
    msg_node m;
    const std::uint64_t high = stats::read(counter::tlp_high);
    const std::uint64_t low = stats::read(counter::tlp_low);
    const std::uint64_t wild = stats::read(counter::wildcard_matches);
    EXPECT_EQ(c->post(a, 2, k_any_tag), status::inprogress);
    EXPECT_EQ(this->arrive(*c, m, 2, 11, 0), std::vector<msg_node *>{&m});
    EXPECT_EQ(a.matched_msg(), &m);
    EXPECT_EQ(a.matched_envelope().tag, 11);
    EXPECT_EQ(stats::read(counter::tlp_high), high);
    EXPECT_EQ(stats::read(counter::tlp_low), low);
    EXPECT_EQ(stats::read(counter::wildcard_matches), wild + 1);
}

TYPED_TEST(any_tag, keeps_post_order_with_other_wildcards_and_specific_receives)
{
    for (const bool any_source_first : {true, false}) {
        auto c = this->make();
        recv_node g, a1, s, a2;
        msg_node m[4];
        recv_node &first = any_source_first ? g : a1;
        recv_node &second = any_source_first ? a1 : g;
        const std::int32_t first_source = any_source_first ? k_any_source : 1;
        const std::int32_t second_source = any_source_first ? 1 : k_any_source;
        EXPECT_EQ(c->post(first, first_source, k_any_tag), status::inprogress);
        EXPECT_EQ(c->post(second, second_source, k_any_tag), status::inprogress);
        EXPECT_EQ(c->post(s, 1, 6), status::inprogress);
        EXPECT_EQ(c->post(a2, 1, k_any_tag), status::inprogress);
        for (std::uint32_t i = 0; i < 4; ++i) {
            EXPECT_EQ(this->arrive(*c, m[i], 1, 6, i).size(), 1U);
        }
        EXPECT_EQ(first.matched_msg(), &m[0]);
        EXPECT_EQ(second.matched_msg(), &m[1]);
        EXPECT_EQ(s.matched_msg(), &m[2]);
        EXPECT_EQ(a2.matched_msg(), &m[3]);
    }
}

TYPED_TEST(any_tag, other_senders_and_internal_tags_pass_it_by)
{
    auto c = this->make();
    recv_node a, internal;
    msg_node other, neg, m;
    EXPECT_EQ(c->post(a, 1, k_any_tag), status::inprogress);
    EXPECT_TRUE(this->arrive(*c, other, 2, 5, 0).empty()); // another sender
    EXPECT_TRUE(this->arrive(*c, neg, 1, -7, 0).empty());  // k_any_tag never takes it
    EXPECT_EQ(this->arrive(*c, m, 1, 5, 1), std::vector<msg_node *>{&m});
    EXPECT_EQ(a.matched_msg(), &m);
    EXPECT_EQ(c->post(internal, 1, -7), status::ok);
    EXPECT_EQ(internal.matched_msg(), &neg);
}

TYPED_TEST(any_tag, takes_its_senders_unexpected_messages_in_order_then_queues)
{
    auto c = this->make();
    msg_node m0, neg, m1, m2;
    EXPECT_TRUE(this->arrive(*c, m0, 1, 7, 0).empty());
    EXPECT_TRUE(this->arrive(*c, neg, 1, -3, 1).empty());
    EXPECT_TRUE(this->arrive(*c, m1, 1, 8, 2).empty());
    recv_node a0, a1, a2, internal;
    EXPECT_EQ(c->post(a0, 1, k_any_tag), status::ok);
    EXPECT_EQ(a0.matched_msg(), &m0);
    EXPECT_EQ(c->post(a1, 1, k_any_tag), status::ok);
    EXPECT_EQ(a1.matched_msg(), &m1); // the internal message is not for it
    // Only the internal message waits: a2 queues in its sender's list, and the arrival
    // finds it there.
    EXPECT_EQ(c->post(a2, 1, k_any_tag), status::inprogress);
    EXPECT_EQ(this->arrive(*c, m2, 1, 9, 3), std::vector<msg_node *>{&m2});
    EXPECT_EQ(a2.matched_msg(), &m2);
    EXPECT_EQ(c->post(internal, 1, -3), status::ok);
    EXPECT_EQ(internal.matched_msg(), &neg);
}

TYPED_TEST(any_tag, specific_receive_leaves_the_count_right)
{
    // A specific receive takes the unexpected message; the any-tag receive after it then
    // queues instead of looking for a message that is gone.
    auto c = this->make();
    msg_node m0, m1;
    recv_node s, a;
    EXPECT_TRUE(this->arrive(*c, m0, 3, 4, 0).empty());
    EXPECT_EQ(c->post(s, 3, 4), status::ok);
    EXPECT_EQ(s.matched_msg(), &m0);
    const std::uint64_t high = stats::read(counter::tlp_high);
    EXPECT_EQ(c->post(a, 3, k_any_tag), status::inprogress);
    EXPECT_EQ(stats::read(counter::tlp_high), high) << "queued in its sender's list";
    EXPECT_EQ(this->arrive(*c, m1, 3, 4, 1), std::vector<msg_node *>{&m1});
    EXPECT_EQ(a.matched_msg(), &m1);
}

TYPED_TEST(any_tag, cancel_from_head_middle_and_tail)
{
    auto c = this->make();
    recv_node a[4];
    for (recv_node &r : a) {
        EXPECT_EQ(c->post(r, 1, k_any_tag), status::inprogress);
    }
    EXPECT_EQ(c->cancel(a[1]), status::ok); // middle
    EXPECT_EQ(c->cancel(a[1]), status::not_found);
    EXPECT_EQ(c->cancel(a[3]), status::ok); // tail
    recv_node late;
    EXPECT_EQ(c->post(late, 1, k_any_tag), status::inprogress); // after the new tail
    EXPECT_EQ(c->cancel(a[0]), status::ok);                     // head
    msg_node m0, m1;
    EXPECT_EQ(this->arrive(*c, m0, 1, 2, 0), std::vector<msg_node *>{&m0});
    EXPECT_EQ(this->arrive(*c, m1, 1, 2, 1), std::vector<msg_node *>{&m1});
    EXPECT_EQ(a[2].matched_msg(), &m0);
    EXPECT_EQ(late.matched_msg(), &m1);
    EXPECT_EQ(c->cancel(a[2]), status::not_found); // matched
    EXPECT_EQ(c->set_assertions(k_no_wildcards), status::ok); // nothing posted is left
}

TYPED_TEST(any_tag, no_wildcard_assertion_is_refused_while_one_is_posted)
{
    auto c = this->make();
    recv_node a;
    EXPECT_EQ(c->post(a, 5, k_any_tag), status::inprogress);
    EXPECT_EQ(c->set_assertions(k_no_wildcards), status::busy);
    EXPECT_EQ(c->assertions(), 0U);
    EXPECT_EQ(c->cancel(a), status::ok);
    EXPECT_EQ(c->set_assertions(k_no_wildcards), status::ok);
}

TYPED_TEST(any_tag, allowing_wildcards_again_counts_each_senders_unexpected)
{
    // Messages that became unexpected while no wildcard was allowed are in no list; the
    // rebuild must count them, or an any-tag receive would queue past them.
    for (const unsigned base : {0U, k_assert_allow_overtaking}) {
        auto c = this->make(8, base | k_no_wildcards);
        msg_node m0, m1, other;
        EXPECT_TRUE(this->arrive(*c, m0, 1, 4, 0).empty());
        EXPECT_TRUE(this->arrive(*c, other, 2, 4, 0).empty());
        EXPECT_TRUE(this->arrive(*c, m1, 1, 5, 1).empty());
        ASSERT_EQ(c->set_assertions(base), status::ok);
        recv_node a0, a1, a2;
        EXPECT_EQ(c->post(a0, 1, k_any_tag), status::ok);
        EXPECT_EQ(c->post(a1, 1, k_any_tag), status::ok);
        if (base == 0) { // unordered messages may match in either order
            EXPECT_EQ(a0.matched_msg(), &m0);
        }
        EXPECT_EQ(a0.matched_msg() == &m0 ? a1.matched_msg() : a0.matched_msg(), &m1);
        EXPECT_EQ(c->post(a2, 1, k_any_tag), status::inprogress);
        // Asserting no wildcards again forgets the counts with the list: sender 2's
        // message stays unexpected, and is counted again by the next rebuild.
        EXPECT_EQ(c->cancel(a2), status::ok);
        ASSERT_EQ(c->set_assertions(base | k_no_wildcards), status::ok);
        ASSERT_EQ(c->set_assertions(base), status::ok);
        recv_node b;
        EXPECT_EQ(c->post(b, 2, k_any_tag), status::ok);
        EXPECT_EQ(b.matched_msg(), &other);
    }
}

TYPED_TEST(any_tag, unordered_arrivals_find_it_and_count_as_unexpected)
{
    auto c = this->make(8, k_assert_allow_overtaking);
    recv_node a0, a1;
    msg_node m0, m1;
    EXPECT_EQ(c->post(a0, 4, k_any_tag), status::inprogress);
    EXPECT_EQ(this->arrive_as(*c, m0, envelope{4, 1, 0, 0, false}),
              std::vector<msg_node *>{&m0});
    EXPECT_EQ(a0.matched_msg(), &m0);
    EXPECT_TRUE(this->arrive_as(*c, m1, envelope{4, 2, 0, 0, false}).empty());
    EXPECT_EQ(c->post(a1, 4, k_any_tag), status::ok);
    EXPECT_EQ(a1.matched_msg(), &m1);
}

} // namespace
