// index_stack: LIFO order, a deterministic ABA interleaving, and ABA-provoking stress.
#include "pool/index_stack.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "test/gtest/common/stress.hpp"

namespace {

using mpiv::status;
using mpiv::pool::index_stack;
using mpiv::pool::k_nil;

// Runs once, on the calling thread, just before its next compare_exchange_weak on a
// hooked_atomic: a test uses it to slip other operations between a pop's read of the head
// and its CAS, which a scheduler would do only by chance.
thread_local std::function<void()> t_before_cas;

template <class T> struct hooked_atomic : std::atomic<T> {
    hooked_atomic() noexcept = default;
    bool compare_exchange_weak(T &expected, T desired, std::memory_order success,
                               std::memory_order failure) noexcept
    {
        if (t_before_cas) {
            std::function<void()> hook = std::move(t_before_cas);
            t_before_cas = nullptr;
            hook();
        }
        return std::atomic<T>::compare_exchange_weak(expected, desired, success, failure);
    }
};

// Yields the CPU before one CAS in eight: widens the load-to-CAS window of every pop so
// that other threads recycle the top index meanwhile (the ABA scenario) far more often.
template <class T> struct yielding_atomic : std::atomic<T> {
    yielding_atomic() noexcept = default;
    bool compare_exchange_weak(T &expected, T desired, std::memory_order success,
                               std::memory_order failure) noexcept
    {
        thread_local std::uint32_t calls = 0;
        if ((++calls & 7) == 0) {
            sched_yield();
        }
        return std::atomic<T>::compare_exchange_weak(expected, desired, success, failure);
    }
};

template <template <class> class Atom> struct stack_storage {
    explicit stack_storage(std::uint32_t n) : links(new Atom<std::uint32_t>[n])
    {
        stack.bind(&head, links.get(), n);
        stack.format();
    }
    alignas(128) Atom<std::uint64_t> head;
    std::unique_ptr<Atom<std::uint32_t>[]> links;
    index_stack<Atom> stack;
};

TEST(index_stack, pops_in_lifo_order_then_reports_empty)
{
    stack_storage<std::atomic> s(4);
    std::uint32_t index = 42;
    EXPECT_EQ(s.stack.pop(index), status::not_found);
    EXPECT_EQ(index, 42u) << "output written on failure";
    for (std::uint32_t i : {2u, 0u, 3u, 1u}) {
        s.stack.push(i);
    }
    for (std::uint32_t expected : {1u, 3u, 0u, 2u}) {
        ASSERT_EQ(s.stack.pop(index), status::ok);
        EXPECT_EQ(index, expected);
    }
    EXPECT_EQ(s.stack.pop(index), status::not_found);
}

// The classic ABA: a pop reads top A and next B; meanwhile another thread pops A, pops B
// and pushes A back. A CAS on the index alone would succeed and install B, which the other
// thread still owns. The generation makes the CAS fail and the pop retry.
TEST(index_stack, generation_defeats_aba_interleaving)
{
    stack_storage<hooked_atomic> s(3);
    s.stack.push(2);
    s.stack.push(1);
    s.stack.push(0); // 0 -> 1 -> 2
    std::uint32_t held_by_other = k_nil;
    t_before_cas = [&] {
        std::uint32_t a = k_nil;
        ASSERT_EQ(s.stack.pop(a), status::ok);
        ASSERT_EQ(s.stack.pop(held_by_other), status::ok);
        ASSERT_EQ(a, 0u);
        ASSERT_EQ(held_by_other, 1u);
        s.stack.push(a); // 0 -> 2, same top index as when the outer pop read it
    };
    std::uint32_t index = k_nil;
    ASSERT_EQ(s.stack.pop(index), status::ok);
    EXPECT_FALSE(t_before_cas) << "the interleaving did not run";
    EXPECT_EQ(index, 0u);
    ASSERT_EQ(s.stack.pop(index), status::ok);
    EXPECT_EQ(index, 2u) << "a stale link was installed";
    EXPECT_EQ(s.stack.pop(index), status::not_found) << "index 1 is owned elsewhere";
}

// Many threads pop and push a tiny stack, so the same indexes are recycled constantly.
// Each holder marks ownership (must be exclusive) and writes a plain payload that the next
// holder reads back: a lost or duplicated index breaks the ownership flags, a missing
// release/acquire pair is a data race for ThreadSanitizer.
template <template <class> class Atom> void aba_stress()
{
    constexpr std::uint32_t k_indexes = 4;
    const unsigned threads = 4;
    const std::uint64_t rounds = mpiv::test::iterations(2000000, 10);
    stack_storage<Atom> s(k_indexes);
    for (std::uint32_t i = 0; i < k_indexes; ++i) {
        s.stack.push(i);
    }
    std::atomic<std::uint32_t> owner[k_indexes];
    std::uint64_t payload[k_indexes] = {};
    for (auto &o : owner) {
        o.store(0, std::memory_order_relaxed);
    }
    std::atomic<std::uint64_t> duplicates{0};
    std::atomic<std::uint64_t> corrupted{0};
    std::vector<std::thread> pool;
    for (unsigned t = 1; t <= threads; ++t) {
        pool.emplace_back([&, t] {
            std::vector<std::uint32_t> held;
            for (std::uint64_t r = 0; r < rounds; ++r) {
                std::uint32_t index;
                // Hold up to two indexes at a time so pops and pushes interleave.
                if (held.size() < 2 && s.stack.pop(index) == status::ok) {
                    if (owner[index].exchange(t, std::memory_order_relaxed) != 0) {
                        duplicates.fetch_add(1, std::memory_order_relaxed);
                    }
                    if (payload[index] != 0 && payload[index] % k_indexes != index) {
                        corrupted.fetch_add(1, std::memory_order_relaxed);
                    }
                    payload[index] = (std::uint64_t{t} << 32 | r) * k_indexes + index;
                    held.push_back(index);
                } else if (!held.empty()) {
                    index = held.back();
                    held.pop_back();
                    owner[index].store(0, std::memory_order_relaxed);
                    s.stack.push(index);
                }
            }
            for (std::uint32_t index : held) {
                owner[index].store(0, std::memory_order_relaxed);
                s.stack.push(index);
            }
        });
    }
    for (auto &th : pool) {
        th.join();
    }
    EXPECT_EQ(duplicates.load(std::memory_order_relaxed), 0u);
    EXPECT_EQ(corrupted.load(std::memory_order_relaxed), 0u);
    std::vector<bool> seen(k_indexes, false);
    std::uint32_t index;
    std::uint32_t count = 0;
    while (s.stack.pop(index) == status::ok) {
        ASSERT_LT(index, k_indexes);
        EXPECT_FALSE(seen[index]) << "index " << index << " twice on the stack";
        seen[index] = true;
        ++count;
    }
    EXPECT_EQ(count, k_indexes) << "indexes lost";
}

TEST(index_stack, aba_stress_std_atomic) { aba_stress<std::atomic>(); }

TEST(index_stack, aba_stress_with_widened_windows) { aba_stress<yielding_atomic>(); }

} // namespace
