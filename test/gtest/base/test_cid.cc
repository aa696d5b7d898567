// Tests of context-id agreement (base/cid.hpp, <mpiv/mpiv_cid.h>) with simulated
// processes: each has its own agreement object and id table; a communicator is a set of
// them with in-memory collectives, one thread per member.
// - One agreement at a time gives what a sequential reference computes: the lowest id
//   free on every member.
// - Overlapping agreements from many threads at once (as endpoints communicators and
//   their dups and splits are created): the members of each agree on one id, a process
//   never holds one id for two live communicators, and all of them end (a watchdog fails
//   the test rather than hang).
// - An id the host takes meanwhile on one member is given back everywhere and the next
//   one agreed; no common free id is a capacity error on every member; bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/cid.hpp"
#include "test/gtest/common/stress.hpp"

namespace {

using mpiv::status;
using mpiv::base::cid_agreement;

constexpr std::uint32_t k_first = 3;
constexpr std::uint32_t k_limit = 200;

struct sim_process {
    cid_agreement agreement;
    std::mutex mu;
    std::vector<bool> used = std::vector<bool>(k_limit, false); // the host's table
    std::set<std::uint32_t> poisoned; // the host takes these just before our reserve()
};

// A communicator over some processes: allreduce by generations (one call per member).
class sim_comm {
  public:
    explicit sim_comm(std::vector<int> members, std::uint64_t key)
        : members_(std::move(members)), key_(key)
    {
    }
    const std::vector<int> &members() const { return members_; }
    std::uint64_t key() const { return key_; }
    template <class Combine> void allreduce(std::vector<std::uint64_t> &data, Combine combine)
    {
        std::unique_lock<std::mutex> lk(mu_);
        const std::uint64_t gen = gen_;
        if (arrived_ == 0) {
            acc_ = data;
        } else {
            combine(acc_, data);
        }
        if (++arrived_ == members_.size()) {
            result_ = acc_;
            arrived_ = 0;
            ++gen_;
            cv_.notify_all();
        } else {
            cv_.wait(lk, [&] { return gen_ != gen; });
        }
        data = result_; // not overwritten before every member read it: the next round
                        // needs every member's arrival
    }

  private:
    std::vector<int> members_;
    std::uint64_t key_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::size_t arrived_ = 0;
    std::uint64_t gen_ = 0;
    std::vector<std::uint64_t> acc_, result_;
};

struct participant {
    sim_process *p;
    sim_comm *c;
};

int is_free(void *ctx, std::uint32_t id)
{
    auto *me = static_cast<participant *>(ctx);
    std::lock_guard<std::mutex> g(me->p->mu);
    return me->p->used[id] ? 0 : 1;
}
int reserve(void *ctx, std::uint32_t id)
{
    auto *me = static_cast<participant *>(ctx);
    std::lock_guard<std::mutex> g(me->p->mu);
    if (me->p->poisoned.erase(id) != 0) {
        me->p->used[id] = true; // the host's own agreement got there first
    }
    if (me->p->used[id]) {
        return 0;
    }
    me->p->used[id] = true;
    return 1;
}
void release(void *ctx, std::uint32_t id)
{
    auto *me = static_cast<participant *>(ctx);
    std::lock_guard<std::mutex> g(me->p->mu);
    me->p->used[id] = false;
}
int band(void *ctx, std::uint64_t *words, std::size_t n)
{
    std::vector<std::uint64_t> v(words, words + n);
    static_cast<participant *>(ctx)->c->allreduce(v, [](auto &acc, const auto &x) {
        for (std::size_t i = 0; i < acc.size(); ++i) {
            acc[i] &= x[i];
        }
    });
    std::copy(v.begin(), v.end(), words);
    return 0;
}
int vmin(void *ctx, int *value)
{
    std::vector<std::uint64_t> v{static_cast<std::uint64_t>(*value)};
    static_cast<participant *>(ctx)->c->allreduce(
        v, [](auto &acc, const auto &x) { acc[0] = std::min(acc[0], x[0]); });
    *value = static_cast<int>(v[0]);
    return 0;
}
void idle(void *) { std::this_thread::yield(); }

mpiv_cid_ops_t ops_for(participant &me)
{
    mpiv_cid_ops_t ops{};
    ops.ctx = &me;
    ops.first = k_first;
    ops.limit = k_limit;
    ops.key = me.c->key();
    ops.is_free = is_free;
    ops.reserve = reserve;
    ops.release = release;
    ops.allreduce_band = band;
    ops.allreduce_min = vmin;
    ops.idle = idle;
    return ops;
}

struct outcome {
    status s = status::internal;
    std::uint32_t id = 0;
};

// Every member of @p c agrees (one thread each); outcomes by member position.
std::vector<outcome> agree_all(std::vector<sim_process> &procs, sim_comm &c)
{
    std::vector<outcome> out(c.members().size());
    std::vector<participant> parts(c.members().size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        parts[i] = {&procs[static_cast<std::size_t>(c.members()[i])], &c};
        threads.emplace_back([&, i] {
            const mpiv_cid_ops_t ops = ops_for(parts[i]);
            out[i].s = parts[i].p->agreement.agree(ops, out[i].id);
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    return out;
}

// Fails the test and aborts if @p done is not set within @p limit (a hang).
class watchdog {
  public:
    explicit watchdog(std::chrono::seconds limit)
        : thread_([this, limit] {
              std::unique_lock<std::mutex> lk(mu_);
              if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
                  ADD_FAILURE() << "context-id agreement hung";
                  std::abort();
              }
          })
    {
    }
    ~watchdog()
    {
        {
            std::lock_guard<std::mutex> g(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

TEST(cid_agreement, one_at_a_time_matches_the_sequential_reference)
{
    constexpr int k_procs = 5;
    std::vector<sim_process> procs(k_procs);
    std::mt19937 rng(7);
    for (auto &p : procs) {
        for (std::uint32_t id = 0; id < k_limit; ++id) {
            p.used[id] = rng() % 10 < 3;
        }
    }
    watchdog dog(std::chrono::seconds(120));
    for (int round = 0; round < 150; ++round) {
        std::vector<int> members;
        for (int p = 0; p < k_procs; ++p) {
            if (rng() % 2 == 0) {
                members.push_back(p);
            }
        }
        if (members.empty()) {
            members.push_back(static_cast<int>(rng() % k_procs));
        }
        // The reference: the lowest id in range free on every member.
        std::int64_t expect = -1;
        for (std::uint32_t id = k_first; id < k_limit && expect < 0; ++id) {
            bool all = true;
            for (int m : members) {
                all = all && !procs[static_cast<std::size_t>(m)].used[id];
            }
            expect = all ? static_cast<std::int64_t>(id) : -1;
        }
        sim_comm c(members, rng() % 50);
        const std::vector<outcome> out = agree_all(procs, c);
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (expect < 0) {
                EXPECT_EQ(out[i].s, status::capacity) << "round " << round;
                continue;
            }
            ASSERT_EQ(out[i].s, status::ok) << "round " << round;
            EXPECT_EQ(out[i].id, static_cast<std::uint32_t>(expect)) << "round " << round;
            EXPECT_TRUE(procs[static_cast<std::size_t>(members[i])].used[out[i].id]);
        }
        // Communicators are freed now and then: their ids become free again.
        for (auto &p : procs) {
            for (std::uint32_t id = k_first; id < k_limit; ++id) {
                if (p.used[id] && rng() % 8 == 0) {
                    p.used[id] = false;
                }
            }
        }
    }
}

TEST(cid_agreement, overlapping_agreements_from_many_threads_agree_and_end)
{
    constexpr int k_procs = 4;
    std::vector<sim_process> procs(k_procs);
    std::deque<sim_comm> comms; // (not movable)
    comms.emplace_back(std::vector<int>{0, 1}, 10);
    comms.emplace_back(std::vector<int>{1, 2}, 11);
    comms.emplace_back(std::vector<int>{2, 3}, 12);
    comms.emplace_back(std::vector<int>{0, 1, 2, 3}, 13);
    comms.emplace_back(std::vector<int>{0, 2}, 14);
    comms.emplace_back(std::vector<int>{1, 3}, 15);
    comms.emplace_back(std::vector<int>{3, 0, 1}, 16);
    const int rounds = 40 * static_cast<int>(mpiv::test::time_multiplier());
    // Per process: the communicator that holds each id now.
    std::vector<std::map<std::uint32_t, std::size_t>> holder(k_procs);
    std::mutex holder_mu;
    std::atomic<int> disagreements{0}, duplicates{0}, failures{0};
    watchdog dog(std::chrono::seconds(300));
    std::vector<std::thread> threads;
    std::vector<std::vector<participant>> parts(comms.size());
    for (std::size_t c = 0; c < comms.size(); ++c) {
        for (int m : comms[c].members()) {
            parts[c].push_back({&procs[static_cast<std::size_t>(m)], &comms[c]});
        }
    }
    for (std::size_t c = 0; c < comms.size(); ++c) {
        for (std::size_t i = 0; i < parts[c].size(); ++i) {
            threads.emplace_back([&, c, i] {
                participant &me = parts[c][i];
                const auto p = static_cast<std::size_t>(me.p - procs.data());
                for (int r = 0; r < rounds; ++r) {
                    std::uint32_t id = 0;
                    const mpiv_cid_ops_t ops = ops_for(me);
                    if (me.p->agreement.agree(ops, id) != status::ok) {
                        ++failures;
                        return;
                    }
                    {
                        std::lock_guard<std::mutex> g(holder_mu);
                        if (!holder[p].emplace(id, c).second) {
                            ++duplicates; // one process, one id, two live communicators
                        }
                    }
                    // Every member got the same id: min == -max over the members.
                    int lo = static_cast<int>(id), neg = -static_cast<int>(id);
                    vmin(&me, &lo);
                    vmin(&me, &neg);
                    if (lo != -neg) {
                        ++disagreements;
                    }
                    std::this_thread::yield(); // the communicator lives a little
                    {
                        std::lock_guard<std::mutex> g(holder_mu);
                        holder[p].erase(id);
                    }
                    release(&me, id); // freed
                }
            });
        }
    }
    for (auto &t : threads) {
        t.join();
    }
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(duplicates.load(), 0);
    EXPECT_EQ(disagreements.load(), 0);
}

TEST(cid_agreement, an_id_the_host_took_meanwhile_is_given_back_and_the_next_agreed)
{
    std::vector<sim_process> procs(3);
    procs[1].poisoned.insert(k_first); // the host takes the first id on process 1
    sim_comm c({0, 1, 2}, 1);
    const std::vector<outcome> out = agree_all(procs, c);
    for (const outcome &o : out) {
        ASSERT_EQ(o.s, status::ok);
        EXPECT_EQ(o.id, k_first + 1);
    }
    EXPECT_FALSE(procs[0].used[k_first]) << "given back";
    EXPECT_TRUE(procs[1].used[k_first]) << "the host's";
    EXPECT_FALSE(procs[2].used[k_first]) << "given back";
}

TEST(cid_agreement, no_common_free_id_is_a_capacity_error_everywhere)
{
    std::vector<sim_process> procs(2);
    for (std::uint32_t id = k_first; id < k_limit; ++id) {
        procs[id % 2].used[id] = true; // each id is free on one process only
    }
    sim_comm c({0, 1}, 1);
    for (const outcome &o : agree_all(procs, c)) {
        EXPECT_EQ(o.s, status::capacity);
    }
    // And the gate was given back: a later agreement on process 0 alone works.
    procs[1].used[k_limit - 1] = false;
    procs[0].used[k_limit - 1] = false;
    sim_comm again({0, 1}, 2);
    for (const outcome &o : agree_all(procs, again)) {
        EXPECT_EQ(o.s, status::ok);
        EXPECT_EQ(o.id, k_limit - 1);
    }
}

TEST(cid_agreement, bad_arguments)
{
    sim_process p;
    sim_comm c({0}, 1);
    participant me{&p, &c};
    mpiv_cid_ops_t ops = ops_for(me);
    std::uint32_t id = 0;
    ops.limit = ops.first;
    EXPECT_EQ(p.agreement.agree(ops, id), status::invalid_arg);
    ops = ops_for(me);
    ops.limit = (1U << 16) + 1;
    EXPECT_EQ(p.agreement.agree(ops, id), status::invalid_arg);
    ops = ops_for(me);
    ops.reserve = nullptr;
    EXPECT_EQ(p.agreement.agree(ops, id), status::invalid_arg);
    ops = ops_for(me);
    EXPECT_EQ(p.agreement.agree(ops, id), status::ok) << "and it still works";
    EXPECT_EQ(id, k_first);
}

} // namespace
