// Tests of match::table: the MPIv insert-or-match with a FIFO per key, exact keys, the
// overflow chain, and concurrent use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "matching/table.hpp"
#include "test/gtest/common/stress.hpp"

namespace {

using mpiv::status;
using mpiv::match::key;
using mpiv::match::side;
using mpiv::match::table;

// A bare table node: the link plus test bookkeeping.
struct tnode : mpiv::match::detail::link {
    int id = 0;
    tnode *partner = nullptr;
};

tnode make(int id, std::uint16_t cid, std::int32_t source, std::int32_t tag)
{
    tnode n;
    n.id = id;
    n.cid_ = cid;
    n.source_ = source;
    n.tag_ = tag;
    return n;
}

// The MPIv insert-or-match through queue_guard: if n's key holds the other side, take its
// earliest node, recording the partner in both nodes; else append n. @return the partner's
// id or -1.
int insert(table &t, tnode &n, side s)
{
    table::queue_guard q(t, mpiv::match::key{n.cid_, n.source_, n.tag_});
    if (q.empty() || q.holds(s)) {
        q.push_back(n, s);
        return -1;
    }
    auto *p = static_cast<tnode *>(q.pop_front());
    n.partner = p;
    p->partner = &n;
    return p->id;
}

std::unique_ptr<table> make_table(std::size_t buckets, bool serial = false)
{
    std::unique_ptr<table> t;
    EXPECT_EQ(table::create(buckets, t, serial), status::ok);
    EXPECT_EQ(t->serial(), serial);
    return t;
}

TEST(match_table, create_rounds_up_to_a_power_of_two)
{
    EXPECT_EQ(make_table(1)->bucket_count(), 1U);
    EXPECT_EQ(make_table(3)->bucket_count(), 4U);
    EXPECT_EQ(make_table(1024)->bucket_count(), 1024U);
    EXPECT_EQ(make_table(1025)->bucket_count(), 2048U);
}

TEST(match_table, create_rejects_bad_sizes)
{
    std::unique_ptr<table> t;
    EXPECT_EQ(table::create(0, t), status::invalid_arg);
    EXPECT_EQ(table::create(table::k_max_buckets + 1, t), status::invalid_arg);
    EXPECT_EQ(t, nullptr);
}

TEST(match_table, same_side_queues_and_the_other_side_takes_the_earliest)
{
    auto t = make_table(16);
    tnode r0 = make(0, 1, 2, 3), r1 = make(1, 1, 2, 3), r2 = make(2, 1, 2, 3);
    tnode m0 = make(10, 1, 2, 3), m1 = make(11, 1, 2, 3), m2 = make(12, 1, 2, 3);
    EXPECT_EQ(insert(*t, r0, side::recv), -1);
    EXPECT_EQ(insert(*t, r1, side::recv), -1);
    EXPECT_EQ(insert(*t, r2, side::recv), -1);
    EXPECT_EQ(insert(*t, m0, side::msg), 0);
    EXPECT_EQ(insert(*t, m1, side::msg), 1);
    EXPECT_EQ(insert(*t, m2, side::msg), 2);
    EXPECT_EQ(r1.partner, &m1);
    table::queue_guard q(*t, key{1, 2, 3});
    EXPECT_TRUE(q.empty());
}

TEST(match_table, two_messages_of_one_key_do_not_match_each_other)
{
    // The original MPIv table matched any two values of a key (reference/mpiv_lci.md §7).
    auto t = make_table(16);
    tnode m0 = make(0, 0, 5, 7), m1 = make(1, 0, 5, 7), r = make(2, 0, 5, 7);
    EXPECT_EQ(insert(*t, m0, side::msg), -1);
    EXPECT_EQ(insert(*t, m1, side::msg), -1);
    EXPECT_EQ(insert(*t, r, side::recv), 0);
    table::queue_guard q(*t, key{0, 5, 7});
    EXPECT_TRUE(q.holds(side::msg));
    EXPECT_EQ(q.front(), &m1);
}

TEST(match_table, keys_differing_in_one_field_are_distinct)
{
    auto t = make_table(1); // one bucket: every key collides
    tnode base = make(0, 7, 100, -20);
    tnode other_cid = make(1, 8, 100, -20);
    tnode other_source = make(2, 7, 101, -20);
    tnode other_tag = make(3, 7, 100, 20);
    tnode big = make(4, 0xffff, 0x7fffffff, INT32_MIN);
    for (tnode *n : {&base, &other_cid, &other_source, &other_tag, &big}) {
        EXPECT_EQ(insert(*t, *n, side::msg), -1) << n->id;
    }
    tnode r = make(5, 7, 100, -20);
    EXPECT_EQ(insert(*t, r, side::recv), 0);
    tnode r_big = make(6, 0xffff, 0x7fffffff, INT32_MIN);
    EXPECT_EQ(insert(*t, r_big, side::recv), 4);
}

// Also for a serial table (no bucket locks), which must behave the same.
class match_table_modes : public ::testing::TestWithParam<bool> {};

TEST_P(match_table_modes, overflow_chain_holds_any_number_of_keys)
{
    // One bucket: keys 0..2 take the entries, the others are chained through their nodes.
    auto t = make_table(1, GetParam());
    constexpr int keys = 40, depth = 3;
    std::vector<tnode> recvs(keys * depth), msgs(keys * depth);
    for (int k = 0; k < keys; ++k) {
        for (int d = 0; d < depth; ++d) {
            recvs[k * depth + d] = make(k * depth + d, 1, k % 5, k);
            EXPECT_EQ(insert(*t, recvs[k * depth + d], side::recv), -1);
        }
    }
    // Match in a scrambled key order so queues leave the chain from its middle too.
    std::mt19937 rng(7);
    std::vector<int> order;
    for (int k = 0; k < keys; ++k) {
        for (int d = 0; d < depth; ++d) {
            order.push_back(k);
        }
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> next(keys, 0);
    int id = 1000;
    for (int k : order) {
        tnode &m = msgs[static_cast<std::size_t>(id - 1000)];
        m = make(id++, 1, k % 5, k);
        EXPECT_EQ(insert(*t, m, side::msg), k * depth + next[k]) << "key " << k;
        ++next[k];
    }
    for (int k = 0; k < keys; ++k) {
        table::queue_guard q(*t, key{1, k % 5, k});
        EXPECT_TRUE(q.empty()) << "key " << k;
    }
}

INSTANTIATE_TEST_SUITE_P(locking, match_table_modes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                             return info.param ? std::string("serial") : std::string("locked");
                         });

TEST(match_table, remove_from_any_position)
{
    for (std::size_t buckets : {std::size_t{1}, std::size_t{64}}) {
        auto t = make_table(buckets);
        // With one bucket, filler keys push the tested key into the overflow chain.
        std::vector<tnode> filler;
        filler.reserve(4);
        for (int i = 0; i < 4; ++i) {
            filler.push_back(make(100 + i, 3, 9, 100 + i));
        }
        for (tnode &f : filler) {
            EXPECT_EQ(insert(*t, f, side::msg), -1);
        }
        std::vector<tnode> n;
        n.reserve(5);
        for (int i = 0; i < 5; ++i) {
            n.push_back(make(i, 3, 9, 1));
            EXPECT_EQ(insert(*t, n.back(), side::recv), -1);
        }
        tnode stranger = make(50, 3, 9, 1);
        {
            table::queue_guard q(*t, key{3, 9, 1});
            EXPECT_FALSE(q.remove(stranger));
            EXPECT_TRUE(q.remove(n[2])); // middle
            EXPECT_TRUE(q.remove(n[4])); // tail
            EXPECT_TRUE(q.remove(n[0])); // head
            EXPECT_FALSE(q.remove(n[0]));
        }
        tnode late = make(5, 3, 9, 1);
        EXPECT_EQ(insert(*t, late, side::recv), -1); // appended after the new tail n[3]
        std::vector<int> got;
        for (int i = 0; i < 3; ++i) {
            tnode m = make(60 + i, 3, 9, 1);
            got.push_back(insert(*t, m, side::msg));
        }
        EXPECT_EQ(got, (std::vector<int>{1, 3, 5}));
        {
            table::queue_guard q(*t, key{3, 9, 1});
            EXPECT_TRUE(q.empty());
            tnode only = make(70, 3, 9, 1);
            q.push_back(only, side::recv);
            EXPECT_TRUE(q.remove(only));
            EXPECT_TRUE(q.empty());
        }
        for (tnode &f : filler) { // the filler keys survived every change of the chain
            tnode r = make(200, 3, 9, f.tag_);
            EXPECT_EQ(insert(*t, r, side::recv), f.id);
        }
    }
}

// Pairs of threads share keys: one inserts receives, the other messages, in the same key
// sequence. Per key the FIFO must pair the i-th receive with the i-th message; pairs also
// contend with each other in a deliberately small table.
TEST(match_table, concurrent_pairs_match_in_fifo_order)
{
    constexpr int pairs = 3, keys_per_pair = 5;
    const int per_thread = static_cast<int>(mpiv::test::iterations(20000, 4));
    auto t = make_table(4);
    struct pnode : tnode {
        int key_index = 0;
        int ordinal = 0; // i-th node of its key on its side
    };
    std::vector<std::unique_ptr<pnode[]>> nodes(2 * pairs);
    std::vector<std::thread> threads;
    for (int th = 0; th < 2 * pairs; ++th) {
        nodes[static_cast<std::size_t>(th)].reset(new pnode[static_cast<std::size_t>(per_thread)]);
        threads.emplace_back([&, th] {
            const int pair = th / 2;
            const side s = th % 2 == 0 ? side::recv : side::msg;
            std::mt19937 rng(static_cast<unsigned>(pair)); // same key sequence in a pair
            std::vector<int> ordinal(keys_per_pair, 0);
            pnode *mine = nodes[static_cast<std::size_t>(th)].get();
            for (int i = 0; i < per_thread; ++i) {
                const int k = static_cast<int>(rng() % keys_per_pair);
                pnode &n = mine[i];
                n.id = th * per_thread + i;
                n.cid_ = 2;
                n.source_ = pair;
                n.tag_ = k;
                n.key_index = k;
                n.ordinal = ordinal[static_cast<std::size_t>(k)]++;
                insert(*t, n, s);
            }
        });
    }
    for (std::thread &th : threads) {
        th.join();
    }
    for (int th = 0; th < 2 * pairs; ++th) {
        for (int i = 0; i < per_thread; ++i) {
            const pnode &n = nodes[static_cast<std::size_t>(th)][static_cast<std::size_t>(i)];
            ASSERT_NE(n.partner, nullptr) << "thread " << th << " node " << i;
            const pnode &p = static_cast<const pnode &>(*n.partner);
            ASSERT_EQ(p.partner, &n);
            ASSERT_EQ(p.id / per_thread, th ^ 1) << "matched outside its pair";
            ASSERT_EQ(p.key_index, n.key_index);
            ASSERT_EQ(p.ordinal, n.ordinal) << "key FIFO order broken";
        }
    }
    for (int pair = 0; pair < pairs; ++pair) {
        for (int k = 0; k < keys_per_pair; ++k) {
            table::queue_guard q(*t, key{2, pair, k});
            EXPECT_TRUE(q.empty());
        }
    }
}

} // namespace
