// Model-based tests of match::basic_comm.
//
// Sequential phase: random posts, arrivals (out of sequence within a window), probes,
// mprobes and cancels, applied to the engine and to reference_matcher; every result must
// be identical (same partner, same envelope, same order of matches).
// Concurrent phases, where exact results depend on timing, check what MPI still promises:
// - owned keys: each key (source, tag) is consumed by one posting thread, arrivals come
//   through several queues; the i-th consumer of a key (receive not cancelled, or mprobe)
//   must get the key's i-th message, and a probe must see the next one;
// - wildcards: every message is consumed exactly once, by a pattern that accepts it, and
//   no posting thread ever sees a sender's messages overtake each other (MPI 3.5).
// Fixed seeds in `make check`; MPIV_TEST_SOAK=1 (and MPIV_TEST_TIME_MULTIPLIER) for more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <ostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/lock/tlp.hpp"
#include "matching/comm.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/matching/reference_matcher.hpp"

namespace {

using mpiv::status;
using mpiv::match::envelope;
using mpiv::match::k_any_source;
using mpiv::match::k_any_tag;
using mpiv::match::match_list;
using mpiv::match::msg_node;
using mpiv::match::recv_node;
using mpiv::match::table;
using mpiv::test::reference_matcher;

constexpr unsigned k_no_source = mpiv::match::k_assert_no_any_source;
constexpr unsigned k_no_tag = mpiv::match::k_assert_no_any_tag;
constexpr unsigned k_overtaking = mpiv::match::k_assert_allow_overtaking;

constexpr std::int32_t k_sources = 4;
// Few tags, so that keys repeat; negative ones are internal (never matched by ANY_TAG).
constexpr std::int32_t k_tags[] = {0, 1, 2, 3, -2, -3};
constexpr std::size_t k_ntags = sizeof(k_tags) / sizeof(k_tags[0]);

bool wildcards_allowed(unsigned assertions)
{
    return (assertions & (k_no_source | k_no_tag)) != (k_no_source | k_no_tag);
}
bool ordered(unsigned assertions)
{
    return (assertions & k_overtaking) == 0;
}

/// Extra rounds and seeds when MPIV_TEST_SOAK is set to a positive number.
unsigned soak_rounds()
{
    const char *v = std::getenv("MPIV_TEST_SOAK");
    return v != nullptr && std::atoi(v) > 0 ? 25 : 1;
}

struct pattern {
    std::int32_t source;
    std::int32_t tag;
};

pattern random_pattern(std::mt19937 &rng, unsigned assertions)
{
    pattern p{static_cast<std::int32_t>(rng() % k_sources), k_tags[rng() % k_ntags]};
    if ((assertions & k_no_source) == 0 && rng() % 4 == 0) {
        p.source = k_any_source;
    }
    if ((assertions & k_no_tag) == 0 && rng() % 5 == 0) {
        p.tag = k_any_tag;
    }
    return p;
}

bool same(const envelope &a, const envelope &b)
{
    return a.source == b.source && a.tag == b.tag && a.seq == b.seq && a.size == b.size;
}

struct mode {
    const char *name;
    unsigned assertions;
};
const mode k_modes[] = {{"ordered", 0},
                        {"no_wildcards", k_no_source | k_no_tag},
                        {"overtaking", k_overtaking},
                        {"no_any_tag", k_no_tag},
                        {"pure", k_no_source | k_no_tag | k_overtaking}};
const mode k_wildcard_modes[] = {
    {"ordered", 0}, {"overtaking", k_overtaking}, {"no_any_tag", k_no_tag}};

void PrintTo(const mode &m, std::ostream *os)
{
    *os << m.name;
}

class match_model : public ::testing::TestWithParam<mode> {};

// ---------------------------------------------------------------- sequential phase

template <class Lock>
void run_sequential(unsigned assertions, unsigned seed, int ops)
{
    SCOPED_TRACE("seed " + std::to_string(seed));
    using comm_type = mpiv::match::basic_comm<Lock>;
    std::unique_ptr<table> t;
    ASSERT_EQ(table::create(4, t), status::ok); // small: keys overflow into chains
    std::unique_ptr<comm_type> c;
    ASSERT_EQ(comm_type::create(*t, {5, k_sources, assertions}, c), status::ok);
    reference_matcher ref(ordered(assertions));
    std::mt19937 rng(seed);

    const auto n = static_cast<std::size_t>(ops);
    std::unique_ptr<recv_node[]> recvs(new recv_node[n]);
    std::unique_ptr<msg_node[]> msgs(new msg_node[n]);
    std::vector<envelope> env(n);
    int n_recv = 0, n_msg = 0;
    std::vector<int> posted;                         // receives posted, possibly matched since
    std::vector<std::vector<int>> window(k_sources); // generated, not yet delivered
    std::vector<std::uint32_t> next_seq(k_sources, 0);
    const auto msg_id = [&](const msg_node *m) {
        return m == nullptr ? -1 : static_cast<int>(m - msgs.get());
    };
    const auto recv_id = [&](const recv_node *r) {
        return r == nullptr ? -1 : static_cast<int>(r - recvs.get());
    };

    const auto deliver = [&](std::int32_t s, std::size_t index) {
        const int id = window[static_cast<std::size_t>(s)][index];
        window[static_cast<std::size_t>(s)].erase(window[static_cast<std::size_t>(s)].begin() +
                                                  static_cast<std::ptrdiff_t>(index));
        match_list matched;
        ASSERT_EQ(c->arrive(msgs[static_cast<std::size_t>(id)], env[static_cast<std::size_t>(id)],
                            matched),
                  status::ok);
        std::vector<std::pair<int, int>> got;
        while (msg_node *m = matched.pop()) {
            got.emplace_back(msg_id(m), recv_id(m->matched_recv()));
            EXPECT_TRUE(same(m->matched_recv()->matched_envelope(), m->env()));
        }
        EXPECT_EQ(got, ref.arrive(id, env[static_cast<std::size_t>(id)])) << "arrival of " << id;
    };
    const auto post = [&](pattern p) {
        const int id = n_recv++;
        recv_node &r = recvs[static_cast<std::size_t>(id)];
        const status st = c->post(r, p.source, p.tag);
        const std::optional<int> expect = ref.post(id, p.source, p.tag);
        if (expect.has_value()) {
            EXPECT_EQ(st, status::ok) << "receive " << id;
            EXPECT_EQ(msg_id(r.matched_msg()), *expect) << "receive " << id;
            EXPECT_TRUE(same(r.matched_envelope(), env[static_cast<std::size_t>(*expect)]));
        } else {
            EXPECT_EQ(st, status::inprogress) << "receive " << id;
            posted.push_back(id);
        }
    };
    const auto mprobe = [&](pattern p) {
        msg_node *m = nullptr;
        const status st = c->mprobe(p.source, p.tag, m);
        const std::optional<int> expect = ref.mprobe(p.source, p.tag);
        EXPECT_EQ(st, expect.has_value() ? status::ok : status::not_found);
        if (expect.has_value() && st == status::ok) {
            EXPECT_EQ(msg_id(m), *expect);
        }
        return expect.has_value();
    };

    for (int op = 0; op < ops && !::testing::Test::HasFailure(); ++op) {
        const unsigned what = rng() % 100;
        if (what < 35 && n_recv < ops) {
            post(random_pattern(rng, assertions));
        } else if (what < 70) {
            const auto s = static_cast<std::int32_t>(rng() % k_sources);
            auto &w = window[static_cast<std::size_t>(s)];
            if (w.size() < 3 && n_msg < ops) { // a new message joins the sender's window
                const int id = n_msg++;
                env[static_cast<std::size_t>(id)] =
                    envelope{s, k_tags[rng() % k_ntags], next_seq[static_cast<std::size_t>(s)]++,
                             static_cast<std::size_t>(id), ordered(assertions)};
                w.push_back(id);
            }
            if (!w.empty()) {
                deliver(s, rng() % w.size()); // any of the window: out of sequence
            }
        } else if (what < 80) {
            const pattern p = random_pattern(rng, assertions);
            envelope e;
            const status st = c->probe(p.source, p.tag, e);
            const std::optional<envelope> expect = ref.probe(p.source, p.tag);
            EXPECT_EQ(st, expect.has_value() ? status::ok : status::not_found);
            if (expect.has_value() && st == status::ok) {
                EXPECT_TRUE(same(e, *expect));
            }
        } else if (what < 88) {
            mprobe(random_pattern(rng, assertions));
        } else if (!posted.empty()) {
            const std::size_t i = rng() % posted.size();
            const int id = posted[i];
            posted.erase(posted.begin() + static_cast<std::ptrdiff_t>(i));
            const bool expect = ref.cancel(id);
            EXPECT_EQ(c->cancel(recvs[static_cast<std::size_t>(id)]),
                      expect ? status::ok : status::not_found)
                << "cancel of " << id;
        }
    }
    // Drain: deliver the rest, cancel what is still posted, take what is still unexpected.
    for (std::int32_t s = 0; s < k_sources; ++s) {
        while (!window[static_cast<std::size_t>(s)].empty() && !::testing::Test::HasFailure()) {
            deliver(s, rng() % window[static_cast<std::size_t>(s)].size());
        }
    }
    const std::vector<int> still = ref.posted_ids();
    for (int id : posted) {
        const bool expect = std::find(still.begin(), still.end(), id) != still.end();
        EXPECT_EQ(c->cancel(recvs[static_cast<std::size_t>(id)]),
                  expect ? status::ok : status::not_found);
    }
    for (std::int32_t s = 0; s < k_sources; ++s) {
        for (std::int32_t tag : k_tags) {
            while (mprobe(pattern{s, tag}) && !::testing::Test::HasFailure()) {
            }
        }
    }
    EXPECT_EQ(ref.unexpected_count(), 0U);
}

TEST_P(match_model, sequential_matches_the_reference)
{
    const unsigned seeds = 12 * soak_rounds();
    const int ops = static_cast<int>(mpiv::test::iterations(3000, 3));
    for (unsigned seed = 0; seed < seeds && !HasFailure(); ++seed) {
        run_sequential<mpiv::base::p_mcs_mcs_lock>(GetParam().assertions, seed, ops);
    }
    run_sequential<mpiv::base::p_hmcs_mcs_lock>(GetParam().assertions, 1000, ops);
}

// ---------------------------------------------------------------- concurrent phases

constexpr int k_posters = 3;
constexpr int k_arrival_queues = 3;

using key_t = std::pair<std::int32_t, std::int32_t>; // (source, tag)

// The traffic of one run: every sender's stream, split over the arrival queues.
struct traffic {
    std::unique_ptr<msg_node[]> nodes;
    std::vector<envelope> env;                // by message id (env.size = id)
    std::map<key_t, std::vector<int>> by_key; // message ids in send order
    std::vector<std::vector<int>> queue;      // per arrival queue, delivery order

    traffic(unsigned seed, int per_source, bool route_by_key)
        : nodes(new msg_node[static_cast<std::size_t>(per_source * k_sources)]),
          queue(k_arrival_queues)
    {
        std::mt19937 rng(seed);
        for (int i = 0; i < per_source; ++i) {
            for (std::int32_t s = 0; s < k_sources; ++s) {
                const auto tag_index = rng() % k_ntags;
                const int id = static_cast<int>(env.size());
                env.push_back(envelope{s, k_tags[tag_index], static_cast<std::uint32_t>(i),
                                       static_cast<std::size_t>(id), !route_by_key});
                by_key[key_t{s, k_tags[tag_index]}].push_back(id);
                // Without sequence numbers only a single queue per key keeps key order.
                const std::size_t q =
                    route_by_key
                        ? (static_cast<std::size_t>(s) * k_ntags + tag_index) % k_arrival_queues
                        : rng() % k_arrival_queues;
                queue[q].push_back(id);
            }
        }
    }

    int id(const msg_node *m) const { return static_cast<int>(m - nodes.get()); }
};

template <class Comm>
void deliver_queue(Comm &c, traffic &tr, int q)
{
    for (int id : tr.queue[static_cast<std::size_t>(q)]) {
        match_list matched;
        ASSERT_EQ(c.arrive(tr.nodes[static_cast<std::size_t>(id)],
                           tr.env[static_cast<std::size_t>(id)], matched),
                  status::ok);
        while (msg_node *m = matched.pop()) {
            ASSERT_NE(m->matched_recv(), nullptr);
        }
    }
}

// One consumer of messages, in its thread's program order.
struct consumer {
    pattern pat;
    recv_node *recv = nullptr; // a posted receive...
    msg_node *taken = nullptr; // ...or a successful mprobe
    bool cancelled = false;

    const msg_node *message() const { return recv != nullptr ? recv->matched_msg() : taken; }
};

template <class Lock>
void run_owned_keys(unsigned assertions, unsigned seed)
{
    SCOPED_TRACE("seed " + std::to_string(seed));
    using comm_type = mpiv::match::basic_comm<Lock>;
    std::unique_ptr<table> t;
    ASSERT_EQ(table::create(16, t), status::ok);
    std::unique_ptr<comm_type> c;
    ASSERT_EQ(comm_type::create(*t, {9, k_sources, assertions}, c), status::ok);
    const int per_source = static_cast<int>(mpiv::test::iterations(2500, 4));
    traffic tr(seed, per_source, !ordered(assertions));

    struct probe_record {
        key_t key;
        std::size_t index; // consumers of the key before the probe
        envelope env;
    };
    struct poster_log {
        std::unique_ptr<recv_node[]> pool; // outlives the thread: receives stay posted
        std::map<key_t, std::vector<consumer>> consumers;
        std::vector<probe_record> probes;
    };
    std::vector<poster_log> logs(k_posters);
    std::vector<std::thread> threads;
    for (int q = 0; q < k_arrival_queues; ++q) {
        threads.emplace_back([&, q] { deliver_queue(*c, tr, q); });
    }
    for (int p = 0; p < k_posters; ++p) {
        threads.emplace_back([&, p] {
            std::mt19937 rng(seed * 31 + static_cast<unsigned>(p));
            poster_log &log = logs[static_cast<std::size_t>(p)];
            std::vector<key_t> active;
            std::map<key_t, std::size_t> remaining;
            std::size_t owned = 0;
            for (const auto &[k, ids] : tr.by_key) {
                const auto tag_index = std::find(k_tags, k_tags + k_ntags, k.second) - k_tags;
                if (tag_index % k_posters == p) {
                    active.push_back(k);
                    remaining[k] = ids.size();
                    owned += ids.size();
                }
            }
            log.pool.reset(new recv_node[4 * owned + 1]);
            recv_node *pool = log.pool.get();
            std::size_t used = 0;
            while (!active.empty()) {
                const std::size_t ki = rng() % active.size();
                const key_t k = active[ki];
                const pattern pat{k.first, k.second};
                std::vector<consumer> &cons = log.consumers[k];
                const unsigned what = rng() % 100;
                if (what < 60 || used >= 3 * owned) {
                    recv_node &r = pool[used++];
                    const status st = c->post(r, pat.source, pat.tag);
                    ASSERT_TRUE(st == status::ok || st == status::inprogress);
                    cons.push_back(consumer{pat, &r});
                    --remaining[k];
                } else if (what < 70) {
                    envelope e;
                    const status st = c->probe(pat.source, pat.tag, e);
                    ASSERT_TRUE(st == status::ok || st == status::not_found);
                    if (st == status::ok) {
                        log.probes.push_back(probe_record{k, cons.size(), e});
                    }
                } else if (what < 80) {
                    msg_node *m = nullptr;
                    const status st = c->mprobe(pat.source, pat.tag, m);
                    ASSERT_TRUE(st == status::ok || st == status::not_found);
                    if (st == status::ok) {
                        consumer taken{pat};
                        taken.taken = m;
                        cons.push_back(taken);
                        --remaining[k];
                    }
                } else {
                    // Cancel the newest receive of the key (just posted), or any earlier
                    // one: either it is still queued (then so is every later one of the
                    // key) or it matched already.
                    if (what < 90) {
                        recv_node &r = pool[used++];
                        const status st = c->post(r, pat.source, pat.tag);
                        ASSERT_TRUE(st == status::ok || st == status::inprogress);
                        cons.push_back(consumer{pat, &r});
                        --remaining[k];
                    }
                    std::vector<std::size_t> recv_at;
                    for (std::size_t i = 0; i < cons.size(); ++i) {
                        if (cons[i].recv != nullptr) {
                            recv_at.push_back(i);
                        }
                    }
                    if (!recv_at.empty()) {
                        const std::size_t i =
                            what < 90 ? recv_at.back() : recv_at[rng() % recv_at.size()];
                        const status st = c->cancel(*cons[i].recv);
                        ASSERT_TRUE(st == status::ok || st == status::not_found);
                        if (st == status::ok) {
                            EXPECT_EQ(cons[i].recv->matched_msg(), nullptr);
                            cons.erase(cons.begin() + static_cast<std::ptrdiff_t>(i));
                            ++remaining[k];
                        }
                    }
                }
                if (remaining[k] == 0) {
                    active.erase(active.begin() + static_cast<std::ptrdiff_t>(ki));
                }
            }
        });
    }
    for (std::thread &th : threads) {
        th.join();
    }
    // The i-th consumer of each key got the key's i-th message; probes saw the next one.
    std::size_t consumed = 0;
    for (const poster_log &log : logs) {
        for (const auto &[k, cons] : log.consumers) {
            const std::vector<int> &ids = tr.by_key.at(k);
            ASSERT_EQ(cons.size(), ids.size()) << "key (" << k.first << ", " << k.second << ")";
            for (std::size_t i = 0; i < cons.size(); ++i) {
                const msg_node *m = cons[i].message();
                ASSERT_NE(m, nullptr) << "consumer " << i << " never matched";
                ASSERT_EQ(tr.id(m), ids[i]) << "key (" << k.first << ", " << k.second
                                            << ") consumer " << i << ": out of order";
                if (cons[i].recv != nullptr) {
                    EXPECT_TRUE(same(cons[i].recv->matched_envelope(), m->env()));
                    EXPECT_EQ(m->matched_recv(), cons[i].recv);
                }
            }
            consumed += cons.size();
        }
        for (const probe_record &pr : log.probes) {
            const std::vector<int> &ids = tr.by_key.at(pr.key);
            ASSERT_LT(pr.index, ids.size());
            EXPECT_TRUE(same(pr.env, tr.env[static_cast<std::size_t>(ids[pr.index])]))
                << "probe saw a message other than the next one of its key";
        }
    }
    EXPECT_EQ(consumed, tr.env.size());
    envelope e;
    for (const auto &kv : tr.by_key) {
        EXPECT_EQ(c->probe(kv.first.first, kv.first.second, e), status::not_found);
    }
}

TEST_P(match_model, concurrent_owned_keys_keep_per_key_order)
{
    for (unsigned round = 0; round < soak_rounds() && !HasFailure(); ++round) {
        run_owned_keys<mpiv::base::p_mcs_mcs_lock>(GetParam().assertions, round);
        run_owned_keys<mpiv::base::p_hmcs_mcs_lock>(GetParam().assertions, 100 + round);
    }
}

template <class Lock>
void run_wildcards(unsigned assertions, unsigned seed)
{
    SCOPED_TRACE("seed " + std::to_string(seed));
    using comm_type = mpiv::match::basic_comm<Lock>;
    std::unique_ptr<table> t;
    ASSERT_EQ(table::create(16, t), status::ok);
    std::unique_ptr<comm_type> c;
    ASSERT_EQ(comm_type::create(*t, {12, k_sources, assertions}, c), status::ok);
    const int per_source = static_cast<int>(mpiv::test::iterations(2500, 4));
    traffic tr(seed, per_source, false);
    const std::size_t ops = tr.env.size() * 6 / 5 / k_posters;

    struct poster_log {
        std::unique_ptr<recv_node[]> pool;
        std::vector<consumer> consumers;
        std::vector<std::pair<pattern, envelope>> probes;
    };
    std::vector<poster_log> logs(k_posters);
    std::vector<std::thread> threads;
    for (int q = 0; q < k_arrival_queues; ++q) {
        threads.emplace_back([&, q] { deliver_queue(*c, tr, q); });
    }
    for (int p = 0; p < k_posters; ++p) {
        threads.emplace_back([&, p] {
            std::mt19937 rng(seed * 17 + static_cast<unsigned>(p));
            poster_log &log = logs[static_cast<std::size_t>(p)];
            log.pool.reset(new recv_node[ops]);
            std::size_t used = 0;
            for (std::size_t op = 0; op < ops && used < ops; ++op) {
                const pattern pat = random_pattern(rng, assertions);
                const unsigned what = rng() % 100;
                if (what < 65) {
                    recv_node &r = log.pool[used++];
                    const status st = c->post(r, pat.source, pat.tag);
                    ASSERT_TRUE(st == status::ok || st == status::inprogress);
                    log.consumers.push_back(consumer{pat, &r});
                } else if (what < 75) {
                    envelope e;
                    const status st = c->probe(pat.source, pat.tag, e);
                    ASSERT_TRUE(st == status::ok || st == status::not_found);
                    if (st == status::ok) {
                        log.probes.emplace_back(pat, e);
                    }
                } else if (what < 85) {
                    msg_node *m = nullptr;
                    const status st = c->mprobe(pat.source, pat.tag, m);
                    ASSERT_TRUE(st == status::ok || st == status::not_found);
                    if (st == status::ok) {
                        consumer taken{pat};
                        taken.taken = m;
                        log.consumers.push_back(taken);
                    }
                } else if (!log.consumers.empty()) {
                    consumer &victim = log.consumers[rng() % log.consumers.size()];
                    if (victim.recv != nullptr && !victim.cancelled) {
                        const status st = c->cancel(*victim.recv);
                        ASSERT_TRUE(st == status::ok || st == status::not_found);
                        victim.cancelled = st == status::ok;
                    }
                }
            }
        });
    }
    for (std::thread &th : threads) {
        th.join();
    }
    // Cancel what no message reached, then take the messages no receive wanted.
    for (poster_log &log : logs) {
        for (consumer &cn : log.consumers) {
            if (cn.recv != nullptr && !cn.cancelled && cn.recv->matched_msg() == nullptr) {
                ASSERT_EQ(c->cancel(*cn.recv), status::ok);
                cn.cancelled = true;
            }
        }
    }
    std::vector<int> times_consumed(tr.env.size(), 0);
    for (std::int32_t s = 0; s < k_sources; ++s) {
        for (std::int32_t tag : k_tags) {
            msg_node *m = nullptr;
            while (c->mprobe(s, tag, m) == status::ok) {
                ++times_consumed[static_cast<std::size_t>(tr.id(m))];
            }
        }
    }
    for (const poster_log &log : logs) {
        for (const consumer &cn : log.consumers) {
            if (cn.cancelled) {
                EXPECT_EQ(cn.recv->matched_msg(), nullptr);
                continue;
            }
            const msg_node *m = cn.message();
            ASSERT_NE(m, nullptr);
            ++times_consumed[static_cast<std::size_t>(tr.id(m))];
            EXPECT_TRUE(reference_matcher::accepts(cn.pat.source, cn.pat.tag, m->env()))
                << "pattern (" << cn.pat.source << ", " << cn.pat.tag << ") took tag "
                << m->env().tag << " from " << m->env().source;
            if (cn.recv != nullptr) {
                EXPECT_TRUE(same(cn.recv->matched_envelope(), m->env()));
            }
        }
        for (const auto &[pat, e] : log.probes) {
            ASSERT_LT(e.size, tr.env.size());
            EXPECT_TRUE(same(e, tr.env[e.size])) << "probe reported a message never sent";
            EXPECT_TRUE(reference_matcher::accepts(pat.source, pat.tag, e));
        }
    }
    for (std::size_t id = 0; id < times_consumed.size(); ++id) {
        ASSERT_EQ(times_consumed[id], 1) << "message " << id;
    }
    if (!ordered(assertions)) {
        return;
    }
    // Non-overtaking as one thread sees it: consumers i < j of one posting thread took x
    // and y from one sender; if i also accepts y, x must precede y (MPI 3.5).
    for (const poster_log &log : logs) {
        std::map<std::int32_t, std::vector<const consumer *>> by_sender;
        for (const consumer &cn : log.consumers) {
            if (!cn.cancelled) {
                by_sender[cn.message()->env().source].push_back(&cn);
            }
        }
        for (const auto &[sender, list] : by_sender) {
            for (std::size_t i = 0; i < list.size(); ++i) {
                const envelope &x = list[i]->message()->env();
                for (std::size_t j = i + 1; j < list.size(); ++j) {
                    const envelope &y = list[j]->message()->env();
                    if (reference_matcher::accepts(list[i]->pat.source, list[i]->pat.tag, y)) {
                        ASSERT_LT(x.seq, y.seq)
                            << "sender " << sender << ": consumer " << i << " ("
                            << list[i]->pat.source << ", " << list[i]->pat.tag << ") took seq "
                            << x.seq << " but a later one took " << y.seq << ", which it accepts";
                    }
                }
            }
        }
    }
}

class match_model_wildcards : public ::testing::TestWithParam<mode> {};

TEST_P(match_model_wildcards, concurrent_wildcards_match_exactly_once_in_order)
{
    ASSERT_TRUE(wildcards_allowed(GetParam().assertions));
    for (unsigned round = 0; round < soak_rounds() && !HasFailure(); ++round) {
        run_wildcards<mpiv::base::p_mcs_mcs_lock>(GetParam().assertions, round);
        run_wildcards<mpiv::base::p_hmcs_mcs_lock>(GetParam().assertions, 200 + round);
    }
}

std::string mode_name(const ::testing::TestParamInfo<mode> &info)
{
    return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(modes, match_model, ::testing::ValuesIn(k_modes), mode_name);
INSTANTIATE_TEST_SUITE_P(modes, match_model_wildcards, ::testing::ValuesIn(k_wildcard_modes),
                         mode_name);

} // namespace
