// sync's two modes (sched/sync.hpp): which arming picks which, the owner's hand-off,
// waiters other than the owner (pthreads and ULTs, on the owner's worker and elsewhere)
// racing with local and remote completions, busy and oversignal reports, and signals
// for an owner that has exited.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "sched/runtime.hpp"
#include "sched/sync.hpp"
#include "test/gtest/common/stress.hpp"
#include "test/gtest/common/test_util.hpp"
#include "test/gtest/sched/sched_fixture.hpp"

namespace {

using mpiv::status;
using mpiv::sched::sync;
using mpiv::sched::worker;
using mpiv::test::watchdog;

class sync_test : public mpiv::test::sched_test {
  protected:
    /// Run @p f in a ULT on @p worker; returns its handle (join it).
    template <class F> std::uint64_t spawn_call(F &f, int worker)
    {
        return spawn([](void *a) -> void * {
            (*static_cast<F *>(a))();
            return nullptr;
        }, &f, worker);
    }
    template <class F> void run_in_ult(F &f, int worker)
    {
        ASSERT_EQ(rt_->join(spawn_call(f, worker), nullptr), status::ok);
    }
};

/// Yield the calling ULT (or thread) until @p flag reaches @p value.
void await(const std::atomic<int> &flag, int value)
{
    // sync: acquire; pairs with the release stores of the flags in the tests.
    while (flag.load(std::memory_order_acquire) < value) {
        if (worker::current_ult() != nullptr) {
            worker::yield_current();
        } else {
            std::this_thread::yield();
        }
    }
}

TEST_F(sync_test, the_arming_thread_picks_the_mode)
{
    start(2);
    sync p(2);
    EXPECT_FALSE(p.owned()); // armed by a pthread
    bool ctor = false;
    bool reset = false;
    bool big = true;
    auto f = [&] {
        sync s(3);
        ctor = s.owned();
        EXPECT_EQ(p.reset(2), status::ok);
        reset = p.owned();
        sync b(sync::k_owned_max + 1);
        big = b.owned();
        // Counting works the same in both modes.
        for (sync *x : {&s, &b}) {
            EXPECT_FALSE(x->test());
            EXPECT_EQ(x->signal(), status::ok);
            EXPECT_FALSE(x->test());
        }
    };
    run_in_ult(f, 0);
    EXPECT_TRUE(ctor);
    EXPECT_TRUE(reset);
    EXPECT_FALSE(big);
    // Signalled from this pthread (a remote completion) and waited on here (a foreign
    // waiter) after the ULT that armed it has exited.
    EXPECT_EQ(p.signal(), status::ok);
    EXPECT_FALSE(p.test());
    EXPECT_EQ(p.signal(), status::ok);
    EXPECT_TRUE(p.test());
    EXPECT_EQ(p.wait(), status::ok);
    EXPECT_EQ(p.signal(), status::oversignaled);
    EXPECT_EQ(p.reset(1), status::ok);
    EXPECT_FALSE(p.owned());
}

// Two ULTs of one worker pass a value back and forth through owned syncs: each sees the
// other's writes, and every hand-off completes.
struct pingpong {
    sync ping{1};
    sync pong{1};
    std::atomic<int> armed{0};
    long value = 0; // written only by the token holder
    long rounds = 0;
};

TEST_F(sync_test, owner_handoff_passes_writes_along)
{
    start(1);
    watchdog dog("owner ping-pong");
    pingpong pp;
    pp.rounds = static_cast<long>(mpiv::test::iterations(200000));
    auto pong = [&pp] {
        EXPECT_EQ(pp.pong.reset(1), status::ok);
        pp.armed.store(1, std::memory_order_release);
        for (long i = 0; i < pp.rounds; ++i) {
            EXPECT_EQ(pp.pong.wait(), status::ok);
            EXPECT_TRUE(pp.pong.owned());
            EXPECT_EQ(pp.value, 2 * i + 1);
            ++pp.value;
            EXPECT_EQ(pp.pong.reset(1), status::ok);
            EXPECT_EQ(pp.ping.signal(), status::ok);
        }
    };
    auto ping = [&pp] {
        await(pp.armed, 1);
        for (long i = 0; i < pp.rounds; ++i) {
            EXPECT_EQ(pp.ping.reset(1), status::ok);
            ++pp.value;
            EXPECT_EQ(pp.pong.signal(), status::ok);
            EXPECT_EQ(pp.ping.wait(), status::ok);
            EXPECT_EQ(pp.value, 2 * i + 2);
        }
    };
    const auto a = spawn_call(pong, 0);
    const auto b = spawn_call(ping, 0);
    ASSERT_EQ(rt_->join(b, nullptr), status::ok);
    ASSERT_EQ(rt_->join(a, nullptr), status::ok);
    EXPECT_EQ(pp.value, 2 * pp.rounds);
}

// A waiter other than the owner: a pthread (asleep on the futex by the time the last
// completion comes), a ULT on the owner's worker, a ULT on another worker. The first
// completion is local (a ULT on the owner's worker); the last is local or remote.
struct foreign_case {
    sync *s = nullptr;
    std::atomic<int> step{0}; // 1 armed, 2 released by the test
    std::atomic<bool> woke{false};
};

TEST_F(sync_test, a_foreign_waiter_is_woken_by_local_and_remote_completions)
{
    start(2);
    watchdog dog("foreign waiters");
    enum waiter_kind { pthread_waiter, ult_same_worker, ult_other_worker };
    for (waiter_kind kind : {pthread_waiter, ult_same_worker, ult_other_worker}) {
        for (bool last_local : {true, false}) {
            SCOPED_TRACE(testing::Message() << "waiter kind " << kind << ", last completion "
                                            << (last_local ? "local" : "remote"));
            foreign_case fc;
            // The owner arms the sync, then stays alive (suspended) until released.
            auto owner = [&fc] {
                sync s(2);
                EXPECT_TRUE(s.owned());
                fc.s = &s;
                fc.step.store(1, std::memory_order_release);
                await(fc.step, 2);
            };
            const auto owner_h = spawn_call(owner, 0);
            await(fc.step, 1);
            auto wait_fn = [&fc] {
                EXPECT_EQ(fc.s->wait(), status::ok);
                EXPECT_TRUE(fc.s->test());
                fc.woke.store(true, std::memory_order_release);
            };
            std::thread pthread;
            std::uint64_t waiter_h = 0;
            if (kind == pthread_waiter) {
                pthread = std::thread(wait_fn);
            } else {
                waiter_h = spawn_call(wait_fn, kind == ult_same_worker ? 0 : 1);
            }
            while (!fc.s->has_waiter()) {
                std::this_thread::yield();
            }
            auto local_signal = [&fc] { EXPECT_EQ(fc.s->signal(), status::ok); };
            ASSERT_EQ(rt_->join(spawn_call(local_signal, 0), nullptr), status::ok);
            std::this_thread::sleep_for(std::chrono::milliseconds(30)); // past the spin phase
            EXPECT_FALSE(fc.woke.load(std::memory_order_acquire));
            if (last_local) {
                ASSERT_EQ(rt_->join(spawn_call(local_signal, 0), nullptr), status::ok);
            } else {
                EXPECT_EQ(fc.s->signal(), status::ok);
            }
            if (kind == pthread_waiter) {
                pthread.join();
            } else {
                ASSERT_EQ(rt_->join(waiter_h, nullptr), status::ok);
            }
            EXPECT_TRUE(fc.woke.load(std::memory_order_acquire));
            EXPECT_FALSE(fc.s->has_waiter());
            fc.step.store(2, std::memory_order_release);
            ASSERT_EQ(rt_->join(owner_h, nullptr), status::ok);
        }
    }
}

// The race the quiescence handshake closes: a waiter on another thread registers while
// ULTs on the owner's worker keep completing the sync with plain stores. Round after
// round the waiter alternates between a pthread and a ULT on the other worker; one
// completion per round is remote. Every round must end, with every signaller's writes
// visible to the waiter.
struct race_state {
    static constexpr int k_local = 3;
    sync s{1};
    std::atomic<int> armed{0};
    std::atomic<int> done{0};
    long rounds = 0;
    long local_marks = 0;  // written by the local signaller before each of its signals
    long remote_marks = 0; // written by the remote signaller before its signal
    long checked = 0;
};

TEST_F(sync_test, foreign_registration_races_local_completions)
{
    start(2);
    watchdog dog("foreign registration race");
    race_state st;
    st.rounds = static_cast<long>(mpiv::test::iterations(3000, 6));
    // The owner re-arms the sync once the waiter of the previous round has returned.
    auto owner = [&st] {
        for (int r = 0; r < st.rounds; ++r) {
            await(st.done, r);
            EXPECT_EQ(st.s.reset(race_state::k_local + 1), status::ok);
            EXPECT_TRUE(st.s.owned());
            st.armed.store(r + 1, std::memory_order_release);
        }
    };
    auto local = [&st] {
        for (int r = 0; r < st.rounds; ++r) {
            await(st.armed, r + 1);
            for (int k = 0; k < race_state::k_local; ++k) {
                ++st.local_marks;
                EXPECT_EQ(st.s.signal(), status::ok);
                if (((r + k) & 1) != 0) {
                    worker::yield_current();
                }
            }
        }
    };
    auto waiter = [&st](int r) {
        await(st.armed, r + 1);
        EXPECT_EQ(st.s.wait(), status::ok);
        EXPECT_EQ(st.local_marks, static_cast<long>(r + 1) * race_state::k_local);
        EXPECT_EQ(st.remote_marks, r + 1);
        ++st.checked;
        st.done.store(r + 1, std::memory_order_release);
    };
    auto ult_waiter = [&st, &waiter] {
        for (int r = 1; r < st.rounds; r += 2) {
            await(st.done, r);
            waiter(r);
        }
    };
    const auto owner_h = spawn_call(owner, 0);
    const auto local_h = spawn_call(local, 0);
    const auto ult_waiter_h = spawn_call(ult_waiter, 1);
    std::thread remote([&st] {
        for (int r = 0; r < st.rounds; ++r) {
            await(st.armed, r + 1);
            ++st.remote_marks;
            EXPECT_EQ(st.s.signal(), status::ok);
            await(st.done, r + 1); // the next arming needs every signal of this round in
        }
    });
    for (int r = 0; r < st.rounds; r += 2) {
        await(st.done, r);
        waiter(r);
    }
    remote.join();
    for (auto h : {owner_h, local_h, ult_waiter_h}) {
        ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    }
    EXPECT_EQ(st.checked, st.rounds);
}

TEST_F(sync_test, owned_waits_report_a_second_waiter)
{
    start(2);
    watchdog dog("second waiter");
    // The owner waits; a pthread's wait, a reset and has_waiter see it.
    {
        foreign_case fc;
        auto owner = [&fc] {
            sync s(1);
            fc.s = &s;
            fc.step.store(1, std::memory_order_release);
            EXPECT_EQ(s.wait(), status::ok);
            fc.woke.store(true, std::memory_order_release);
            await(fc.step, 2);
        };
        const auto h = spawn_call(owner, 0);
        await(fc.step, 1);
        while (!fc.s->has_waiter()) {
            std::this_thread::yield();
        }
        EXPECT_EQ(fc.s->wait(), status::busy);
        EXPECT_EQ(fc.s->reset(1), status::busy);
        EXPECT_EQ(fc.s->signal(), status::ok);
        while (!fc.woke.load(std::memory_order_acquire)) {
            std::this_thread::yield();
        }
        fc.step.store(2, std::memory_order_release);
        ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    }
    // A pthread waits on an owned sync; the owner's own wait is then busy.
    {
        foreign_case fc;
        std::atomic<int> go{0};
        auto owner = [&fc, &go] {
            sync s(1);
            fc.s = &s;
            fc.step.store(1, std::memory_order_release);
            await(go, 1);
            EXPECT_EQ(s.wait(), status::busy);
            EXPECT_EQ(s.reset(1), status::busy);
            EXPECT_EQ(s.signal(), status::ok); // local, to a foreign pthread
            await(fc.step, 2);
        };
        const auto h = spawn_call(owner, 0);
        await(fc.step, 1);
        std::thread waiter([&fc] { EXPECT_EQ(fc.s->wait(), status::ok); });
        while (!fc.s->has_waiter()) {
            std::this_thread::yield();
        }
        go.store(1, std::memory_order_release);
        waiter.join();
        fc.step.store(2, std::memory_order_release);
        ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    }
}

TEST_F(sync_test, owned_oversignals_are_reported)
{
    start(2);
    sync *shared = nullptr;
    std::atomic<int> step{0};
    auto owner = [&] {
        sync s(2);
        EXPECT_EQ(s.signal(), status::ok);
        EXPECT_EQ(s.signal(), status::ok);
        EXPECT_EQ(s.signal(), status::oversignaled); // local: exact
        EXPECT_TRUE(s.test());
        EXPECT_EQ(s.wait(), status::ok);
        EXPECT_EQ(s.reset(1), status::ok);
        shared = &s;
        step.store(1, std::memory_order_release);
        await(step, 2);
    };
    const auto h = spawn_call(owner, 0);
    await(step, 1);
    EXPECT_EQ(shared->signal(), status::ok);            // remote
    EXPECT_EQ(shared->signal(), status::oversignaled);  // remote, after a remote completion
    EXPECT_TRUE(shared->test());
    step.store(2, std::memory_order_release);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
}

// Completions for an owner that has exited: a new ULT in the owner's id (a later
// generation) and its stack must not be switched to on the old owner's behalf, from
// the owner's worker or from another thread.
TEST_F(sync_test, completions_after_the_owner_exited_wake_nobody_wrongly)
{
    start(1);
    watchdog dog("exited owner");
    sync *orphan = nullptr;
    auto arm = [&orphan] { orphan = new sync(3); };
    run_in_ult(arm, 0);
    ASSERT_TRUE(orphan->owned());
    // Probably the same id and stack as the exited owner.
    foreign_case fc;
    sync gate(1);
    auto reuser = [&fc, &gate] {
        EXPECT_EQ(gate.reset(1), status::ok);
        fc.step.store(1, std::memory_order_release);
        EXPECT_EQ(gate.wait(), status::ok); // woken only by the gate's signal (or spuriously)
        fc.woke.store(true, std::memory_order_release);
    };
    const auto h = spawn_call(reuser, 0);
    await(fc.step, 1);
    auto local_signal = [orphan] { EXPECT_EQ(orphan->signal(), status::ok); };
    ASSERT_EQ(rt_->join(spawn_call(local_signal, 0), nullptr), status::ok);
    EXPECT_EQ(orphan->signal(), status::ok); // remote
    ASSERT_EQ(rt_->join(spawn_call(local_signal, 0), nullptr), status::ok);
    EXPECT_TRUE(orphan->test());
    EXPECT_EQ(orphan->wait(), status::ok);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(fc.woke.load(std::memory_order_acquire));
    EXPECT_EQ(gate.signal(), status::ok);
    ASSERT_EQ(rt_->join(h, nullptr), status::ok);
    EXPECT_TRUE(fc.woke.load(std::memory_order_acquire));
    delete orphan;
}

// Waitall in owned mode: the waiting ULT arms one sync for N completions that come from
// ULTs on its own worker (local) and on the other one (remote), and from a pthread.
TEST_F(sync_test, owned_waitall_counts_local_and_remote_completions)
{
    start(2);
    watchdog dog("owned waitall");
    constexpr int n = 64;
    struct state {
        sync *all = nullptr;
        std::atomic<int> step{0};
        std::atomic<int> next{0};
        int values[n + 1] = {};
    } st;
    auto waiter = [&st] {
        sync all(n + 1);
        st.all = &all;
        st.step.store(1, std::memory_order_release);
        EXPECT_EQ(all.wait(), status::ok);
        for (int v = 1; v <= n + 1; ++v) {
            EXPECT_EQ(st.values[v - 1], v);
        }
    };
    const auto wh = spawn_call(waiter, 0);
    await(st.step, 1);
    auto signaller = [&st] {
        const int i = st.next.fetch_add(1, std::memory_order_relaxed);
        st.values[i] = i + 1;
        EXPECT_EQ(st.all->signal(), status::ok);
    };
    std::vector<std::uint64_t> h;
    for (int i = 0; i < n; ++i) {
        h.push_back(spawn_call(signaller, i % 2));
    }
    for (auto x : h) {
        ASSERT_EQ(rt_->join(x, nullptr), status::ok);
    }
    signaller(); // the last one from this pthread
    ASSERT_EQ(rt_->join(wh, nullptr), status::ok);
}

} // namespace
