// Tests of match::table: the MPIv insert-or-match with a FIFO per key, exact keys, the
// overflow chain, growth of the bucket array, and concurrent use.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "matching/table.hpp"
#include "test/gtest/common/stress.hpp"

namespace mpiv::match {
struct table_test_access {
    // The index of @p k's bucket in the current array of @p t.
    static std::size_t bucket_of(table &t, const key &k)
    {
        // sync: acquire; pairs with the release store in table::grow() (the array's fields)
        table::array *a = t.array_.load(std::memory_order_acquire);
        return static_cast<std::size_t>(&a->of(table::pack(k.source, k.tag), k.cid) -
                                        a->buckets.get());
    }
};
} // namespace mpiv::match

namespace {

using mpiv::match::table_test_access;
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

TEST_P(match_table_modes, a_long_chain_grows_the_table_fourfold)
{
    // One bucket: keys 0..2 take the entries, key j >= 3 meets a chain of j - 3 keys; the
    // first to meet k_grow_chain of them grows the table when its guard is released.
    auto t = make_table(1, GetParam());
    const int first_grower = 3 + static_cast<int>(table::k_grow_chain);
    std::vector<tnode> n(static_cast<std::size_t>(first_grower) + 1);
    for (int j = 0; j < first_grower; ++j) {
        n[static_cast<std::size_t>(j)] = make(j, 1, 0, j);
        EXPECT_EQ(insert(*t, n[static_cast<std::size_t>(j)], side::recv), -1);
        EXPECT_EQ(t->bucket_count(), 1U) << "key " << j;
    }
    n.back() = make(first_grower, 1, 0, first_grower);
    EXPECT_EQ(insert(*t, n.back(), side::recv), -1);
    EXPECT_EQ(t->bucket_count(), table::k_grow_factor);
    for (int j = 0; j <= first_grower; ++j) {
        tnode m = make(100 + j, 1, 0, j);
        EXPECT_EQ(insert(*t, m, side::msg), j);
    }
}

TEST_P(match_table_modes, a_table_full_of_evenly_spread_keys_grows_before_its_chains_are_long)
{
    // 7 keys per bucket on average, consecutive tags: every bucket's entries are full and
    // its chain 2 to 5 keys long, none near k_grow_chain; the inserts that chain behind
    // k_load_chain keys (well over k_load_check_every of them) check the load, and grow.
    constexpr std::size_t buckets = 64;
    constexpr int keys = 7 * static_cast<int>(buckets);
    auto t = make_table(buckets, GetParam());
    std::vector<int> per_bucket(buckets);
    for (int k = 0; k < keys; ++k) {
        ++per_bucket[table_test_access::bucket_of(*t, key{1, 0, k})];
    }
    ASSERT_LT(*std::max_element(per_bucket.begin(), per_bucket.end()),
              3 + static_cast<int>(table::k_grow_chain))
        << "some bucket's chain reaches k_grow_chain: the test would not tell the rules apart";
    std::vector<tnode> n(static_cast<std::size_t>(keys));
    for (int k = 0; k < keys; ++k) {
        n[static_cast<std::size_t>(k)] = make(k, 1, 0, k);
        ASSERT_EQ(insert(*t, n[static_cast<std::size_t>(k)], side::recv), -1);
    }
    EXPECT_EQ(t->bucket_count(), buckets * table::k_grow_factor);
    for (int k = 0; k < keys; ++k) {
        tnode m = make(1000 + k, 1, 0, k);
        EXPECT_EQ(insert(*t, m, side::msg), k);
    }
}

TEST_P(match_table_modes, one_crowded_bucket_does_not_grow_a_light_table)
{
    // Ten keys that hash to one bucket of 1,024 (seven chained, below k_grow_chain): the
    // last chained key is matched and posted again, each post chaining behind six keys,
    // many times more than k_load_check_every. The buckets around it are empty: no growth.
    constexpr std::size_t buckets = 1024;
    auto t = make_table(buckets, GetParam());
    const std::size_t crowded = table_test_access::bucket_of(*t, key{1, 0, 0});
    std::vector<int> tags;
    for (int tag = 0; tags.size() < 10; ++tag) {
        if (table_test_access::bucket_of(*t, key{1, 0, tag}) == crowded) {
            tags.push_back(tag);
        }
    }
    std::vector<tnode> n(tags.size());
    for (std::size_t i = 0; i < tags.size(); ++i) {
        n[i] = make(static_cast<int>(i), 1, 0, tags[i]);
        ASSERT_EQ(insert(*t, n[i], side::recv), -1);
    }
    tnode again[2];
    for (int round = 0; round < 8 * static_cast<int>(table::k_load_check_every); ++round) {
        tnode m = make(-1, 1, 0, tags.back());
        tnode &posted = round == 0 ? n.back() : again[(round - 1) % 2];
        ASSERT_EQ(insert(*t, m, side::msg), posted.id);
        tnode &next = again[round % 2];
        next = make(100 + round, 1, 0, tags.back());
        ASSERT_EQ(insert(*t, next, side::recv), -1);
    }
    EXPECT_EQ(t->bucket_count(), buckets);
    for (std::size_t i = 0; i + 1 < tags.size(); ++i) {
        tnode m = make(-1, 1, 0, tags[i]);
        EXPECT_EQ(insert(*t, m, side::msg), static_cast<int>(i));
    }
}

TEST_P(match_table_modes, growth_keeps_every_fifo_in_order)
{
    // Thousands of keys pushed in rounds, so that growths (1 -> 4 -> ... buckets) happen
    // while each key's FIFO already holds nodes, chained or not.
    auto t = make_table(1, GetParam());
    constexpr int keys = 4000, depth = 3;
    std::vector<tnode> recvs(keys * depth);
    std::vector<std::size_t> sizes;
    for (int d = 0; d < depth; ++d) {
        for (int k = 0; k < keys; ++k) {
            tnode &r = recvs[static_cast<std::size_t>(k * depth + d)];
            r = make(k * depth + d, static_cast<std::uint16_t>(1 + k % 3), k % 7, k);
            ASSERT_EQ(insert(*t, r, side::recv), -1) << "key " << k << " round " << d;
        }
        sizes.push_back(t->bucket_count());
    }
    EXPECT_GE(sizes.front() * 16, std::size_t{keys}); // grown well before 16 keys a bucket
    EXPECT_LE(sizes.back(), std::size_t{keys} * 4);
    EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
    std::vector<int> order(keys);
    for (int k = 0; k < keys; ++k) {
        order[static_cast<std::size_t>(k)] = k;
    }
    std::shuffle(order.begin(), order.end(), std::mt19937(11));
    std::vector<tnode> msgs(keys * depth);
    std::size_t used = 0;
    for (int d = 0; d < depth; ++d) {
        for (int k : order) {
            tnode &m = msgs[used++];
            m = make(-1, static_cast<std::uint16_t>(1 + k % 3), k % 7, k);
            ASSERT_EQ(insert(*t, m, side::msg), k * depth + d) << "key " << k;
        }
    }
    for (int k = 0; k < keys; ++k) {
        table::queue_guard q(*t, key{static_cast<std::uint16_t>(1 + k % 3), k % 7, k});
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

TEST(match_table, remove_and_for_each_queue_after_growth)
{
    auto t = make_table(4);
    constexpr int msg_keys = 2000, recv_keys = 500;
    // cid 3: two messages per key; cid 4: one receive per key.
    std::vector<tnode> msgs(2 * msg_keys), recvs(recv_keys);
    for (int d = 0; d < 2; ++d) {
        for (int k = 0; k < msg_keys; ++k) {
            tnode &m = msgs[static_cast<std::size_t>(2 * k + d)];
            m = make(2 * k + d, 3, k % 5, k);
            ASSERT_EQ(insert(*t, m, side::msg), -1);
        }
    }
    for (int k = 0; k < recv_keys; ++k) {
        recvs[static_cast<std::size_t>(k)] = make(10000 + k, 4, 0, k);
        ASSERT_EQ(insert(*t, recvs[static_cast<std::size_t>(k)], side::recv), -1);
    }
    EXPECT_GE(t->bucket_count() * 16, std::size_t{msg_keys + recv_keys});
    // Remove the first message of the even keys, the second of the odd ones.
    for (int k = 0; k < msg_keys; ++k) {
        table::queue_guard q(*t, key{3, k % 5, k});
        EXPECT_TRUE(q.remove(msgs[static_cast<std::size_t>(2 * k + k % 2)])) << "key " << k;
        EXPECT_FALSE(q.remove(msgs[static_cast<std::size_t>(2 * k + k % 2)]));
    }
    {
        table::all_guard all(*t);
        std::vector<int> seen(msg_keys, 0);
        t->for_each_queue(3, side::msg, [&](mpiv::match::detail::link &tail) {
            const auto &last = static_cast<const tnode &>(tail);
            EXPECT_EQ(tail.next_, &tail) << "one message left per key";
            EXPECT_EQ(last.id, 2 * last.tag_ + 1 - last.tag_ % 2);
            ++seen[static_cast<std::size_t>(last.tag_)];
        });
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), msg_keys);
        int queues = 0;
        t->for_each_queue(4, side::recv, [&](mpiv::match::detail::link &tail) {
            EXPECT_EQ(static_cast<const tnode &>(tail).id, 10000 + tail.tag_);
            ++queues;
        });
        EXPECT_EQ(queues, recv_keys);
        t->for_each_queue(3, side::recv, [&](mpiv::match::detail::link &) { ADD_FAILURE(); });
        t->for_each_queue(4, side::msg, [&](mpiv::match::detail::link &) { ADD_FAILURE(); });
    }
    for (int k = 0; k < recv_keys; ++k) {
        table::queue_guard q(*t, key{4, 0, k});
        EXPECT_TRUE(q.remove(recvs[static_cast<std::size_t>(k)]));
        EXPECT_TRUE(q.empty());
    }
    for (int k = 0; k < msg_keys; ++k) {
        tnode r = make(-1, 3, k % 5, k);
        EXPECT_EQ(insert(*t, r, side::recv), 2 * k + 1 - k % 2) << "key " << k;
    }
    table::all_guard all(*t);
    t->for_each_queue(3, side::msg, [&](mpiv::match::detail::link &) { ADD_FAILURE(); });
}

// Threads post and match while the table grows from one bucket: distinct keys (thread t
// posts receives on source t, and sends the messages of thread t + 1's keys a few
// thousand keys behind, so that thousands of keys are alive at once) and shared keys (two
// threads of a pair on 8 keys, checked for FIFO order). An auditor walks the whole table
// under all_guard meanwhile (at least once before the workers pass half-way). Every node
// must match exactly once, with the right partner.
TEST(match_table, concurrent_growth_loses_and_duplicates_nothing)
{
    constexpr int threads = 4, shared_keys = 8;
    const int per_thread = static_cast<int>(mpiv::test::iterations(8000, 4));
    const int lag = std::min(2000, per_thread / 2);
    auto t = make_table(1);
    struct snode : tnode {
        bool recv = false;
        int ordinal = 0; // shared keys: i-th node of its key on its side
    };
    std::vector<std::unique_ptr<snode[]>> own(threads), sent(threads), shared(threads);
    for (int th = 0; th < threads; ++th) {
        own[static_cast<std::size_t>(th)].reset(new snode[static_cast<std::size_t>(per_thread)]);
        sent[static_cast<std::size_t>(th)].reset(new snode[static_cast<std::size_t>(per_thread)]);
        shared[static_cast<std::size_t>(th)].reset(
            new snode[static_cast<std::size_t>(per_thread)]);
    }
    std::atomic<int> running{threads};
    std::atomic<std::size_t> audits{0};
    std::thread auditor([&] {
        while (running.load(std::memory_order_acquire) > 0) {
            {
                table::all_guard all(*t);
                for (std::uint16_t cid : {std::uint16_t{5}, std::uint16_t{6}}) {
                    for (side s : {side::recv, side::msg}) {
                        t->for_each_queue(cid, s, [&](mpiv::match::detail::link &tail) {
                            // A circular FIFO of nodes of one key and one side.
                            const mpiv::match::detail::link *n = &tail;
                            int len = 0;
                            do {
                                n = n->next_;
                                ASSERT_EQ(n->cid_, cid);
                                ASSERT_EQ(n->source_, tail.source_);
                                ASSERT_EQ(n->tag_, tail.tag_);
                                ASSERT_EQ(static_cast<const snode *>(n)->recv, s == side::recv);
                                ASSERT_LE(++len, 2 * per_thread);
                            } while (n != &tail);
                        });
                    }
                }
            }
            audits.fetch_add(1, std::memory_order_relaxed);
            // Let the workers run: a pass holds every lock while it walks every node.
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
    std::vector<std::thread> workers;
    for (int th = 0; th < threads; ++th) {
        workers.emplace_back([&, th] {
            snode *mine = own[static_cast<std::size_t>(th)].get();
            snode *out = sent[static_cast<std::size_t>(th)].get();
            snode *sh = shared[static_cast<std::size_t>(th)].get();
            const int next = (th + 1) % threads;
            const bool shared_recv = th % 2 == 0;
            std::mt19937 rng(static_cast<unsigned>(th / 2)); // same key sequence in a pair
            std::vector<int> ordinal(shared_keys, 0);
            const auto send = [&](int i) {
                snode &m = out[i];
                m.id = th * per_thread + i;
                m.cid_ = 5;
                m.source_ = next;
                m.tag_ = i;
                insert(*t, m, side::msg);
            };
            for (int i = 0; i < per_thread; ++i) {
                if (i == per_thread / 2) { // let one audit see the table half-way
                    while (audits.load(std::memory_order_relaxed) == 0) {
                        std::this_thread::yield();
                    }
                }
                snode &r = mine[i];
                r.id = th * per_thread + i;
                r.recv = true;
                r.cid_ = 5;
                r.source_ = th;
                r.tag_ = i;
                insert(*t, r, side::recv);
                if (i >= lag) {
                    send(i - lag);
                }
                const int k = static_cast<int>(rng() % shared_keys);
                snode &s = sh[i];
                s.id = th * per_thread + i;
                s.recv = shared_recv;
                s.cid_ = 6;
                s.source_ = th / 2;
                s.tag_ = k;
                s.ordinal = ordinal[static_cast<std::size_t>(k)]++;
                insert(*t, s, shared_recv ? side::recv : side::msg);
            }
            for (int i = per_thread - lag; i < per_thread; ++i) {
                send(i);
            }
            running.fetch_sub(1, std::memory_order_release);
        });
    }
    for (std::thread &w : workers) {
        w.join();
    }
    auditor.join();
    EXPECT_GT(audits.load(std::memory_order_relaxed), 0U);
    EXPECT_GE(t->bucket_count(), 256U);
    for (int th = 0; th < threads; ++th) {
        const int prev = (th + threads - 1) % threads;
        for (int i = 0; i < per_thread; ++i) {
            const snode &r = own[static_cast<std::size_t>(th)][static_cast<std::size_t>(i)];
            ASSERT_EQ(r.partner, &sent[static_cast<std::size_t>(prev)][static_cast<std::size_t>(i)])
                << "thread " << th << " receive " << i;
            ASSERT_EQ(r.partner->partner, &r);
            const snode &s = shared[static_cast<std::size_t>(th)][static_cast<std::size_t>(i)];
            ASSERT_NE(s.partner, nullptr) << "thread " << th << " shared node " << i;
            const auto &p = static_cast<const snode &>(*s.partner);
            ASSERT_EQ(p.partner, &s);
            ASSERT_EQ(p.id / per_thread, th ^ 1) << "matched outside its pair";
            ASSERT_EQ(p.tag_, s.tag_);
            ASSERT_EQ(p.ordinal, s.ordinal) << "key FIFO order broken";
        }
    }
    table::all_guard all(*t);
    for (side s : {side::recv, side::msg}) {
        t->for_each_queue(5, s, [&](mpiv::match::detail::link &) { ADD_FAILURE(); });
        t->for_each_queue(6, s, [&](mpiv::match::detail::link &) { ADD_FAILURE(); });
    }
}

} // namespace
